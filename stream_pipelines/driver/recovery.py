"""In-driver recovery: a failed query restarted from its checkpoint inside the running driver.

Most faults that stop a long-running query leave its JVM healthy: a storage outage (S3 503s, a NameNode
failover), a broker unreachable past the client's timeouts, a task failed ``spark.task.maxFailures``
times. A new driver for them costs a cold JVM, tens of seconds on a small machine, and stops the app's
other queries too. So the driver restarts the failed query itself, from its checkpoint (exactly once,
as any restart from a checkpoint), while the app's other queries run on, with the supervisor's backoff
and crash-loop guard (without its jitter): the restart is counted once, in the same control record
(``ControlStore.record_restart``, kind ``in-driver``), in ``pipeline_restarts_total`` and on the health
page.

The driver gives up, and exits ``QUERY_FAILED`` for its supervisor to restart it whole, when:

- the JVM is unhealthy: its SparkContext is stopped, it does not answer, or the failure is the JVM's
  own (``java.lang.OutOfMemoryError``, ``StackOverflowError``, ``InternalError``): a fresh JVM is the cure;
- one query fails again after ``supervision.in_driver_restarts`` restarts in this driver within the
  crash-loop window: something in this JVM may be the cause (0 turns in-driver recovery off);
- the restart cannot be recorded (the control store is away);
- the crash-loop guard trips (the supervisor's retry then trips it too, and stops);
- the lease is not surely this driver's (lost, or not renewed for nearly a lease timeout), before or
  just after the query's start: a restarted query must not run on a lease that may be another's.

A stop asked during the backoff is a stop: the other queries drain, and the failed one restarts from
its checkpoint at the next start. The backoff is capped at half the watchdog's shortest window, so the
wait is never taken for a stall.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

from stream_pipelines.control.control_store import IN_DRIVER, ControlStore, CrashLoopError
from stream_pipelines.core.config import PipelineConfig

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from stream_pipelines.control.lease import LeaseKeeper

# Errors of the JVM itself, not of the query's work: after them the JVM is not trusted with a restart.
# Qualified: a store's own "InternalError" (an S3 500) is a storage fault, which a restart is for.
JVM_ERRORS = tuple(
    f"java.lang.{name}"
    for name in (
        "OutOfMemoryError",
        "StackOverflowError",
        "InternalError",
        "UnknownError",
        "VirtualMachineError",
    )
)


@dataclass(frozen=True)
class Recovery:
    """What to do about one failed query: restart it after ``delay_s``, or give up (``why``)."""

    restart: bool
    why: str
    delay_s: float = 0.0


class QueryRecovery:
    """Decides, for each failure of one of the app's queries, whether the driver restarts it itself."""

    def __init__(
        self,
        config: PipelineConfig,
        app: str,
        context_stopped: Callable[[], bool],
        lease: LeaseKeeper | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config, self.app = config, app
        self.settings = config.supervision
        self._context_stopped = context_stopped
        self._lease = lease
        self._clock = clock
        # Per query, the moments (this process's clock) of its failures restarted in this driver.
        self._restarted: dict[str, list[float]] = {}

    @classmethod
    def of(
        cls, config: PipelineConfig, app: str, spark: SparkSession, lease: LeaseKeeper | None
    ) -> QueryRecovery:
        return cls(config, app, lambda: spark.sparkContext._jsc.sc().isStopped(), lease)

    def decide(self, query: str, error: str) -> Recovery:
        """Whether to restart ``query``, which failed with ``error`` (its summary), and after how long.
        A restart is recorded here, before the wait: a driver killed while it waits has still used it."""

        limit = self.settings.in_driver_restarts
        if limit == 0:
            return Recovery(False, "in-driver recovery is off (supervision.in_driver_restarts = 0)")
        jvm_error = next((name for name in JVM_ERRORS if name in error), None)
        if jvm_error is not None:
            return Recovery(False, f"the JVM is unhealthy ({jvm_error}): a new driver is needed")
        try:
            stopped = self._context_stopped()
        except Exception as error:  # the gateway does not answer: nothing to restart a query in
            return Recovery(False, f"the JVM did not answer ({type(error).__name__}): a new driver is needed")
        if stopped:
            return Recovery(False, "the SparkContext is stopped: a new driver is needed")
        window_s = self.settings.crash_loop_window.seconds
        now = self._clock()
        recent = [moment for moment in self._restarted.get(query, []) if now - moment < window_s]
        if len(recent) >= limit:
            return Recovery(
                False,
                f"{query} already restarted {len(recent)} times in this driver within "
                f"{self.settings.crash_loop_window} (supervision.in_driver_restarts): a new driver is needed",
            )
        if self._lease is not None and not self._lease.held_surely():
            return Recovery(False, "the lease is not surely this driver's: no query may start")
        try:
            restarts = ControlStore(self.config).record_restart(
                self.app,
                cause=f"query {query} failed: {error}",
                limit=self.settings.max_restarts,
                window=timedelta(seconds=window_s),
                kind=IN_DRIVER,
            )
        except CrashLoopError as guard:
            return Recovery(False, str(guard))
        except Exception as error:  # the control store is away (the outage that failed the query?)
            return Recovery(False, f"the restart could not be recorded ({type(error).__name__}: {error})")
        self._restarted[query] = [*recent, now]
        # The supervisor's backoff without its jitter: the jitter spreads the cold starts of apps that
        # crashed together; a query's restart inside a running JVM costs little, and each second of
        # the wait is freshness lost. Capped at half the watchdog's shortest window: while the query
        # waits, its last batch stands still in the lease, and a longer wait would look like a stall.
        delay_s = min(
            self.settings.restart_delay(restarts, jitter=0.0), self.settings.watchdog_min_window.seconds / 2
        )
        return Recovery(
            True,
            f"restart {restarts} of {self.app} within the window, the query's "
            f"{len(recent) + 1} of {limit} in this driver",
            delay_s,
        )

    def may_start(self) -> bool:
        """Just before a restarted query starts: the lease is still surely this driver's."""
        return self._lease is None or self._lease.held_surely()
