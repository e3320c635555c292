"""What the DAG files share, importing nothing from Airflow or its providers: parsing a DAG file that
needs only these stays cheap."""

from __future__ import annotations

from datetime import timedelta

DEFAULT_ARGS = {"owner": "data-platform", "depends_on_past": False}
SUPERVISOR_TAGS = ["streaming", "supervisor"]
# Effectively unbounded: the crash-loop guard, not a try count, decides when restarts stop.
SUPERVISOR_RETRIES = 1000
# run_app's own retry delay, which Airflow uses only when a try ends without an exception for the retry
# policy: its task process was killed, or the scheduler found it gone. The driver may still run,
# unsupervised (no watchdog) until the next try adopts it, so that try comes at once and flat. A crash
# gets the policy's backoff instead. (Airflow's exponential backoff here made a fifth try wait 8 min.)
ORPHAN_RETRY_DELAY = timedelta(seconds=5)
# The nightly DAG's day-state tasks (choose the day, claim it, record the outcome, ask for the sign-off,
# record a failure) are seconds of bookkeeping through Airflow's metadata database and the store. A try
# that a restart of either fails (its XCom unreadable, its record unwritten) is tried again within a
# minute, not after the recompute's 10 minutes, which would hold the day's run that long.
DAY_STATE_RETRIES = {"retries": 3, "retry_delay": timedelta(seconds=20)}
