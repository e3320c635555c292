"""The reconciliation of one event day D: claim -> reconcile (one spark-submit: the Great Expectations gate
on D's raw events, the exact recompute and diff, the gates on the outputs, the report) -> record ->
ask_sign_off.

Started by the data, not the clock: reconciliation_days emits the reconciliation_day_due asset for D
when D closes (a provisional run) and when D is final (the final run); this DAG runs once per such event,
with D as its partition key. A run the day's record declines (already recorded, or D not closed) is
skipped at ``claim``. A manual run with the ``date`` param (YYYY-MM-DD) always runs and is recorded
like any other; with ``declare_final`` (why) it makes a day the data will never close final by hand. A
final run's report asks a reviewer for a sign-off (compliance_sign_off) from ``ask_sign_off``.

Wiring only: the tasks' logic is in stream_pipelines.airflow.nightly and .day_states; Spark and Great
Expectations load in the job's driver, never in this file's parse or in a task's process.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import DAG, Param, PartitionedAssetTimetable, get_current_context, task

from stream_pipelines.airflow import day_states, nightly
from stream_pipelines.airflow.dag_defaults import DAY_STATE_RETRIES, DEFAULT_ARGS

# The day-state tasks retry within a minute (DAY_STATE_RETRIES); the recompute, a Spark job, is tried
# again once, after 10 minutes (RECOMPUTE_RETRIES).
RECOMPUTE_RETRIES = {"retries": 1, "retry_delay": timedelta(minutes=10)}

with DAG(
    dag_id="nightly_reconciliation",
    description="Exact recompute of day D from the raw archive, diff against the streams, compliance table",
    schedule=PartitionedAssetTimetable(assets=day_states.DAY_DUE),
    catchup=False,
    # One Spark recompute at a time; a day's runs queue behind each other.
    max_active_runs=1,
    default_args={**DEFAULT_ARGS, **DAY_STATE_RETRIES},
    tags=["reconciliation", "compliance", "spark", "great_expectations"],
    params={
        "date": Param(
            None,
            type=["null", "string"],
            format="date",
            description="event day D to (re)reconcile by hand (a run the data started has its own)",
        ),
        "declare_final": Param(
            "",
            type="string",
            description=(
                "with date: declare D final by hand, and why (a partition that will never deliver "
                "again); the run becomes D's final one and can be signed off"
            ),
        ),
    },
) as dag:

    @task
    def choose_day() -> str:
        context = get_current_context()
        return nightly.event_day(context["params"].get("date"), context["dag_run"].partition_key)

    @task
    def claim(day: str) -> str:
        context = get_current_context()
        requested = nightly.requested_kind(context.get("triggering_asset_events"), day)
        params = context["params"]
        manual = bool(params.get("date")) or requested is None
        declared = (params.get("declare_final") or "") if params.get("date") else ""
        return day_states.claim_run(day, requested, manual, context["dag_run"].run_id, declared)

    @task(**RECOMPUTE_RETRIES)
    def reconcile(day: str, kind: str) -> str:
        return nightly.reconcile(day)

    @task
    def record(day: str, kind: str, report_html: str) -> dict:
        return day_states.record_run(day, kind)

    # Skipped for a provisional run: a skipped task emits no asset event (a succeeding one would, on the
    # run's own partition, and ask for a sign-off of a provisional report).
    @task(outlets=[day_states.FINAL_REPORTED])
    def ask_sign_off(day: str, outcome: dict, *, outlet_events=None) -> None:
        day_states.only_final(outcome)
        outlet_events[day_states.FINAL_REPORTED].add_partitions(day)

    @task(trigger_rule="one_failed")
    def record_failure(day: str, kind: str | None = None) -> None:
        day_states.record_failed_run(day, kind)

    event_day = choose_day()
    kind = claim(event_day)
    reconciled = reconcile(event_day, kind)
    ask_sign_off(event_day, record(event_day, kind, reconciled))
    record_failure(event_day, kind).set_upstream(reconciled)
