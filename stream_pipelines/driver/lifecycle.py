"""A streaming app's whole life, in the order it happens; every app's driver runs ``run_app``.

    load config -> preflight -> take ownership -> start queries -> observe -> stop or fail -> record the exit

- load config: ``--env``/``--conf-dir``/``--set``; a bad value exits ``BAD_CONFIG`` with the message;
- preflight: the start checks (``launch.start_checks``: topics, cluster access, the checkpoint), before
  any JVM starts, unless the launcher ran them (``--checked``); a refusal exits ``BAD_CONFIG`` or
  ``CHECKPOINT_REFUSED``;
- take ownership: the app's lease (``lease.py``): a second driver refuses with ``OWNED_ELSEWHERE``;
  from here on the lease is renewed on its own timer, and the control store records this driver as
  the app's running process, with where its exporter serves (Prometheus discovers it there);
- start queries: the app's ``build_sinks`` (checked against its registry declaration), fingerprints;
- observe: the Prometheus exporter and the batch log follow the queries while they run, and the lease
  carries each query's last batch and end offsets (for the supervisor's watchdog);
- stop or fail: a stop request (SIGTERM, SIGINT or the stop marker) drains the batch in flight; a failed
  query is restarted from its checkpoint inside the driver while the others run on (``recovery.py``),
  and only when that gives up does it stop the others and end the driver;
- record the exit: ``stopped``, ``finished`` or ``failed`` in the control store, and the exit code.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stream_pipelines.checkpoint.format import kafka_offsets
from stream_pipelines.checkpoint.inspect import record_fingerprints
from stream_pipelines.control.control_store import ControlStore, ExitStatus, MetricsEndpoint
from stream_pipelines.control.lease import Lease, LeaseHeldError, LeaseKeeper
from stream_pipelines.core.config import ConfigError, PipelineConfig, add_config_arguments, config_from_args
from stream_pipelines.core.exit_codes import ExitCode
from stream_pipelines.core.registry import App, spark_query_name
from stream_pipelines.core.registry import app as declared_app
from stream_pipelines.driver.batch_log import BatchLogRecorder
from stream_pipelines.driver.recovery import QueryRecovery
from stream_pipelines.driver.runtime import clear_scratch, driver_started_at, get_spark, start_sink
from stream_pipelines.launching.launch import CHECKED, StartRefused, start_checks
from stream_pipelines.observability.metrics import MetricsExporter, MetricsPortInUseError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from stream_pipelines.driver.runtime import StreamSink
    from stream_pipelines.launching.submit import TriggerMode


def run_app(app_name: str, argv: Sequence[str] | None = None) -> int:
    """The driver's main: the whole life of one app, top to bottom."""
    app = declared_app(app_name)
    try:
        config, trigger, checked = load_app_config(app, argv)
    except ConfigError as error:
        _log(app.name, str(error))
        return ExitCode.BAD_CONFIG
    try:
        refused = ExitCode.OK if checked else preflight(config, app)
        if refused:
            return refused
        lease = Lease(config, app.name)
        try:
            owned = lease.acquire(log=lambda message: _log(app.name, message))
        except LeaseHeldError as error:
            _log(app.name, str(error))
            return ExitCode.OWNED_ELSEWHERE
        # Renewed from now on, not from when the queries run: a JVM slower to start than the lease
        # timeout must not look like a dead or frozen owner.
        keeper = LeaseKeeper(lease, owned, config.supervision.heartbeat_interval.seconds).start()
        try:
            clear_earlier_scratch(config, app)
            return _run_owned(config, app, trigger, keeper)
        finally:
            keeper.stop()
            lease.release()
    finally:
        # Whatever the way out, the launch is over: status must not say "starting" any more.
        ControlStore(config).clear_starting(app.name)


def clear_earlier_scratch(config: PipelineConfig, app: App) -> None:
    """Remove what drivers killed before they could clean up left in the app's scratch folder, before this
    run's session starts. Only the lease holder may: its lease is what says no other driver is alive."""

    folder = config.scratch_dir(app.name)
    if folder is not None:
        _log(app.name, f"scratch {folder}: {clear_scratch(Path(folder), driver_started_at()).describe()}")


def _run_owned(config: PipelineConfig, app: App, trigger: TriggerMode, keeper: LeaseKeeper) -> ExitCode:
    spark = get_spark(config, app.name, own_scratch=True)
    keeper.record.spark_app_id = spark.sparkContext.applicationId
    # A start-up phase boundary for people reading the log, and for the start-up benchmark.
    _log(app.name, f"Spark session ready ({spark.sparkContext.applicationId})")
    try:
        with observed(config, app, spark) as observation:
            sinks = start_queries(config, app, spark)
            recovery = QueryRecovery.of(config, app.name, spark, keeper)
            ended = run_streams(
                config,
                app,
                sinks,
                trigger,
                on_started=observation.start_batch_log,
                lease=keeper,
                recovery=recovery,
                metrics=observation.metrics,
            )
            return ended.code
    except MetricsPortInUseError as error:
        # The lease already guards against a second driver: a taken port is a configuration problem.
        _log(app.name, str(error))
        return ExitCode.BAD_CONFIG


def load_app_config(app: App, argv: Sequence[str] | None) -> tuple[PipelineConfig, TriggerMode, bool]:
    parser = argparse.ArgumentParser(prog=app.name, description=app.description)
    add_config_arguments(parser)
    parser.add_argument(
        "--trigger",
        choices=["processing", "available-now"],
        default="processing",
        help="processing: run continuously at the configured interval; "
        "available-now: process what is there now, then exit (backfills, tests)",
    )
    parser.add_argument(
        CHECKED,
        action="store_true",
        help="the launcher ran the start checks (launch.prepare); the driver does not run them again",
    )
    args = parser.parse_args(argv)
    return config_from_args(args), args.trigger, args.checked


def preflight(config: PipelineConfig, app: App) -> ExitCode:
    """The start checks (``launch.start_checks``), before the session, so a refused start costs no JVM:
    ``OK``, or the exit code of the refusal."""
    try:
        start_checks(config, app, lambda line: print(line, file=sys.stderr, flush=True))
    except StartRefused as refused:
        _log(app.name, str(refused))
        return refused.code
    return ExitCode.OK


@dataclass(frozen=True)
class Observation:
    """What follows the queries while they run: the batch log, started with them, and the metrics
    exporter, already serving."""

    start_batch_log: Callable[[list[StreamingQuery]], None]
    # Where the exporter serves, for the running record (Prometheus finds it there); None when off.
    metrics: MetricsEndpoint | None


@contextlib.contextmanager
def observed(config: PipelineConfig, app: App, spark: SparkSession) -> Iterator[Observation]:
    """The metrics exporter and the batch log around the queries."""

    exporter = MetricsExporter(config, app).start(spark)
    batch_log = BatchLogRecorder(config, app.name)
    try:
        yield Observation(batch_log.start, exporter.endpoint)
    finally:
        batch_log.stop()
        exporter.stop()


def start_queries(config: PipelineConfig, app: App, spark: SparkSession) -> list[StreamSink]:
    """The app's queries as declared; a new checkpoint remembers the settings that shape its state."""

    sinks = build_sinks(app, spark, config)
    record_fingerprints(config, app)
    return sinks


def build_sinks(app: App, spark: SparkSession, config: PipelineConfig) -> list[StreamSink]:
    """The app's queries from its module (``app.module``), checked against its declaration (names and
    order): the registry declares, the app module builds."""
    sinks = importlib.import_module(app.module).build_sinks(spark, config)
    built = tuple(sink.name for sink in sinks)
    if built != app.query_names:
        raise RuntimeError(
            f"{app.module}.build_sinks built queries {built}, but the registry declares "
            f"{app.query_names} for {app.name}: change both together"
        )
    return sinks


# --------------------------------------------------------------------------- running and stopping


@dataclass(frozen=True)
class AppExit:
    """How a run ended: the exit code the supervisor reads and the record the control store keeps."""

    code: ExitCode
    status: ExitStatus
    detail: str


class StopRequest:
    """Set by SIGTERM/SIGINT or by the app's stop marker; polled between batches. A lost lease is not a
    request to drain but an order to stop at once: another driver owns the checkpoint now."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker
        self.reason: str | None = None
        self.lease_lost: str | None = None

    def lose_lease(self, why: str) -> None:
        self.lease_lost = why

    def install_signal_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._on_signal)

    def _on_signal(self, signum: int, _frame: object) -> None:
        self.reason = f"signal {signal.Signals(signum).name}"

    def requested(self) -> bool:
        if self.reason is None and self.marker.exists():
            self.reason = f"stop marker {self.marker}"
        return self.reason is not None


def run_streams(
    config: PipelineConfig,
    app: App,
    sinks: Sequence[StreamSink],
    trigger: TriggerMode,
    *,
    poll_s: float = 1.0,
    on_started: Callable[[list[StreamingQuery]], None] | None = None,
    lease: LeaseKeeper | None = None,
    recovery: QueryRecovery | None = None,
    metrics: MetricsEndpoint | None = None,
) -> AppExit:
    """Own the app, run its queries until they finish (available-now), fail, or a stop is requested,
    and record how it ended. The running record names ``metrics``, where the driver's exporter serves.

    ``OK`` after a finished or deliberate stop, ``QUERY_FAILED`` when a query died and ``recovery``
    (none: never) did not restart it inside the driver; the supervisor relies on that difference. A
    deliberate stop drains the batch in flight first.
    """

    name, store = app.name, ControlStore(config)
    stop = StopRequest(store.stop_marker(name))
    stop.install_signal_handlers()
    by_name = {spark_query_name(name, sink.name): sink for sink in sinks}

    def restart(query: StreamingQuery) -> StreamingQuery:
        return start_sink(config, app, by_name[query.name], trigger)

    queries = [start_sink(config, app, sink, trigger) for sink in sinks]
    store.mark_running(name, metrics)
    if lease is not None:
        lease.follow(lambda: query_progress(queries), on_lost=stop.lose_lease)
    try:
        if on_started:
            on_started(queries)
        _log(name, f"started {len(queries)} queries ({trigger}): {', '.join(q.name for q in queries)}")
        restarter = InDriverRestarts(name, recovery, restart, stop) if recovery is not None else None
        ended = _watch(
            name, queries, stop, trigger, poll_s, config.supervision.drain_timeout.seconds, restarter
        )
        if stop.reason is not None:
            store.clear_stop(name)
        store.record_exit(name, ended.status, ended.detail)
        return ended
    except BaseException:
        for query in queries:
            if query.isActive:
                query.stop()
        raise
    finally:
        store.mark_not_running(name)


def query_progress(queries: list[StreamingQuery]) -> dict[str, dict[str, object]]:
    """Each query's last batch as the lease carries it, for supervisors that follow the app."""
    progress: dict[str, dict[str, object]] = {}
    for query in queries:
        last = query.lastProgress or {}
        progress[query.name or str(query.id)] = {
            "batch_id": last.get("batchId"),
            "input_rows": last.get("numInputRows"),
            "watermark": (last.get("eventTime") or {}).get("watermark"),
            "at": last.get("timestamp"),
            "active": query.isActive,
            # Where the last batch ended in each Kafka source: the watchdog compares it with the broker.
            "end_offsets": _end_offsets(last),
        }
    return progress


def _end_offsets(progress: Any) -> dict[str, dict[str, str | int]]:
    """Topic -> partition -> offset where the last batch ended, over the query's Kafka sources."""

    # PySpark's lastProgress turns each source's offsets into str(dict), a Python repr; the
    # progress's own JSON keeps them as JSON.
    raw = json.loads(progress.json) if hasattr(progress, "json") else progress
    ends = [source.get("endOffset") for source in raw.get("sources") or []]
    merged = kafka_offsets(end if isinstance(end, dict) else None for end in ends)
    return {topic: {str(p): o for p, o in partitions.items()} for topic, partitions in merged.items()}


def _watch(
    app: str,
    queries: list[StreamingQuery],
    stop: StopRequest,
    trigger: TriggerMode,
    poll_s: float,
    drain_timeout_s: float,
    restarter: InDriverRestarts | None = None,
) -> AppExit:
    from pyspark.errors import StreamingQueryException

    while True:
        if stop.lease_lost is not None:
            # No drain: another driver owns the checkpoint, and every write from here on would race it.
            for query in queries:
                with contextlib.suppress(StreamingQueryException):
                    query.stop()
            _log(app, f"{stop.lease_lost}: stopped every query at once")
            return AppExit(ExitCode.OWNED_ELSEWHERE, "failed", stop.lease_lost)
        # Asked of each query once a loop: every question is a call into the JVM.
        failed, waiting = _failed(queries), []
        if failed and restarter is not None and not stop.requested():
            gave_up = restarter.recover(queries)
            if gave_up is None or stop.lease_lost is not None:
                continue  # all running again, or the lease lost: the top of the loop stops them all
            # Given up on: the failed query is still in the list, and ends the app.
            failed = _failed(queries)
            if gave_up != STOP_DURING_BACKOFF:
                return _failed_exit(app, queries, failed, gave_up)
            # A stop asked while a failed query waited for its restart: a stop of the others, and the
            # failed one restarts from its checkpoint at the next start.
            failed, waiting = [], failed
        if failed:
            return _failed_exit(app, queries, failed)
        if all(not q.isActive for q in queries) and not waiting:
            _log(app, "all queries finished")
            return AppExit(ExitCode.OK, "finished", f"all queries finished ({trigger})")
        if stop.requested():
            _log(app, f"graceful stop requested by {stop.reason}: draining the batch in flight")
            for query in queries:
                _drain_and_stop(query, drain_timeout_s)
            # Only a drain in which every query stopped cleanly is a stop: a batch that failed while
            # draining is a failure the supervisor must see.
            failure = _failure(app, [query for query in queries if query not in waiting])
            if failure is not None:
                return failure
            _log(app, "stopped after the last committed batch")
            detail = f"deliberate stop ({stop.reason})"
            if waiting:
                names = ", ".join(query.name for query in waiting)
                detail += f"; {names} had failed and restarts from its checkpoint at the next start"
            return AppExit(ExitCode.OK, "stopped", detail)
        with contextlib.suppress(StreamingQueryException):
            # It raises when the query died; the check at the top of the loop reports that.
            queries[0].awaitTermination(poll_s)


def _failed(queries: list[StreamingQuery]) -> list[StreamingQuery]:
    return [q for q in queries if not q.isActive and q.exception() is not None]


def _failure(app: str, queries: list[StreamingQuery]) -> AppExit | None:
    """The first failed query as the app's exit (the others are stopped), or None."""
    failed = _failed(queries)
    return _failed_exit(app, queries, failed) if failed else None


def _failed_exit(
    app: str, queries: list[StreamingQuery], failed: list[StreamingQuery], gave_up: str | None = None
) -> AppExit:
    """The app's exit for its ``failed`` queries (the others are stopped). ``gave_up``: why the driver
    did not restart them itself."""
    for query in queries:
        if query.isActive:
            query.stop()
    for query in failed:
        _log(app, f"query {query.name} failed: {query.exception()}")
    detail = f"query {failed[0].name} failed: {error_summary(failed[0].exception())}"
    if gave_up is not None:
        detail += f"; not restarted in the driver: {gave_up}"
    return AppExit(ExitCode.QUERY_FAILED, "failed", detail)


STOP_DURING_BACKOFF = "a stop was asked while a failed query waited for its restart"


class InDriverRestarts:
    """Restarts the app's failed queries from their checkpoints in this driver, as ``QueryRecovery``
    decides, waiting its backoff while the other queries run on."""

    def __init__(
        self,
        app: str,
        recovery: QueryRecovery,
        restart: Callable[[StreamingQuery], StreamingQuery],
        stop: StopRequest,
    ) -> None:
        self.app, self.recovery, self.restart, self.stop = app, recovery, restart, stop

    def recover(self, queries: list[StreamingQuery]) -> str | None:
        """Restart every failed query in ``queries`` (replaced in place); None when each was, else why
        the driver gives up (a failed query is then left in the list, for the exit to report)."""
        for position, query in enumerate(queries):
            if query.isActive or query.exception() is None:
                continue
            error = error_summary(query.exception())
            while True:
                decision = self.recovery.decide(query.name, error)
                if not decision.restart:
                    _log(
                        self.app,
                        f"query {query.name} failed: {error}; not restarted in the driver: {decision.why}",
                    )
                    return decision.why
                _log(
                    self.app,
                    f"query {query.name} failed: {error}; restarting it from its checkpoint inside the "
                    f"driver in {decision.delay_s:.0f}s ({decision.why})",
                )
                if not self._wait(decision.delay_s):
                    return STOP_DURING_BACKOFF  # or the lease lost, which the caller sees first
                if not self.recovery.may_start():
                    return "the lease is not surely this driver's: no query may start"
                try:
                    restarted = self.restart(query)
                except Exception as start_error:  # the store may still be away: decided again
                    error = f"its restart failed: {type(start_error).__name__}: {error_summary(start_error)}"
                    continue
                if not self.recovery.may_start():
                    # The start's checkpoint reads took long enough for the lease to become unsure.
                    restarted.stop()
                    return "the lease became unsure while the query started: stopped it again"
                queries[position] = restarted
                _log(self.app, f"query {query.name} restarted inside the driver (in-driver restart)")
                break
        return None

    def _wait(self, seconds: float) -> bool:
        """Sleep out the backoff; False when a stop is asked or the lease lost meanwhile."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.stop.lease_lost is not None or self.stop.requested():
                return False
            time.sleep(min(0.5, max(deadline - time.monotonic(), 0)))
        return self.stop.lease_lost is None and not self.stop.requested()


_ERROR_LINE = re.compile(r"^\s*(?:[\w$]+\.)*[\w$]*(?:Error|Exception)(?::\s.*)?$")


def error_summary(error: object) -> str:
    """The line that says what went wrong: the innermost ``SomeError: message`` of Spark's and Py4J's
    wrapped traces (their own first line is a generic wrapper), else the first line."""
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    causes = [line for line in lines if _ERROR_LINE.match(line)]
    return (causes[-1] if causes else lines[0] if lines else type(error).__name__)[:300]


def _drain_and_stop(query: StreamingQuery, timeout_s: float) -> None:
    from pyspark.errors import StreamingQueryException

    deadline = time.monotonic() + timeout_s
    while query.isActive and query.status.get("isTriggerActive") and time.monotonic() < deadline:
        time.sleep(0.1)
    if query.isActive:
        # A query that dies between the check and the stop is reported by its exception, not here.
        with contextlib.suppress(StreamingQueryException):
            query.stop()


def _log(app: str, message: str) -> None:
    print(f"[{datetime.now(UTC):%Y-%m-%d %H:%M:%S}Z] {app}: {message}", file=sys.stderr, flush=True)
