"""The liveness watchdog: is an app that is alive actually working?

"The driver's pid exists" says nothing about a hung executor, a GC spiral or a ``SIGSTOP``: such an
app keeps its supervisor task green forever. The supervisor follows the app's lease (which the driver
renews on its own timer with each query's last batch and end offsets) and calls the app stuck when:

- its heartbeat is fresh but a query's batch id has not moved for ``watchdog_triggers`` trigger
  intervals (never less than ``watchdog_min_window``) while offsets wait in that query's source; an
  idle source is not a stall, so the clock restarts whenever nothing waits;
- or its heartbeat is fresh but its JVM has not answered the driver's call for ``jvm_answer_timeout``
  (a ``SIGSTOP``, a pause that never ends): *frozen*, found in seconds rather than a watchdog window;
- or its heartbeat is stale (older than ``lease_timeout``) while the driver's process still exists.

The verdict is a sentence for the task log and the restart's cause, and ``frozen`` says whether the
JVM can still drain. What to do about it (a graceful stop, the drain timeout, then a kill of the
driver's process group; at once for a frozen JVM) is the supervisor's part.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from stream_pipelines.checkpoint import format as checkpoint_format
from stream_pipelines.control.lease import LeaseRecord
from stream_pipelines.core.config import PipelineConfig
from stream_pipelines.core.registry import App, query_of
from stream_pipelines.core.store import location
from stream_pipelines.kafka.clients import offset_reader

# How many offsets wait beyond a query's last batch, given its name and the end offsets the lease
# carries: None when that cannot be told (no Kafka offsets, or the broker did not answer), which never
# counts as waiting.
WaitingOffsets = Callable[[str, Mapping[str, Mapping[str, int]]], int | None]


@dataclass(frozen=True)
class WatchdogSettings:
    trigger_s: float
    window_s: float
    lease_timeout_s: float
    # How often the watchdog reads the lease (the drivers renew it as often).
    heartbeat_s: float = 5.0
    jvm_answer_timeout_s: float = 15.0

    @classmethod
    def of(cls, config: PipelineConfig, app: App) -> WatchdogSettings:
        supervision = config.supervision
        trigger_s = app.trigger_interval(config).seconds
        return cls(
            trigger_s=trigger_s,
            window_s=max(supervision.watchdog_triggers * trigger_s, supervision.watchdog_min_window.seconds),
            lease_timeout_s=supervision.lease_timeout.seconds,
            heartbeat_s=supervision.heartbeat_interval.seconds,
            jvm_answer_timeout_s=supervision.jvm_answer_timeout.seconds,
        )


@dataclass
class _QueryClock:
    batch_id: Any
    # The supervisor's own monotonic clock: the driver's clock may be on another host.
    stalled_since: float


class Watchdog:
    """Fed the lease at each look; returns why the app is stuck, or None while it is fine."""

    def __init__(self, settings: WatchdogSettings, waiting: WaitingOffsets) -> None:
        self.settings = settings
        self._waiting = waiting
        self._clocks: dict[str, _QueryClock] = {}
        # A heartbeat is not judged before this moment (the supervisor's clock): set after an outage.
        self._heartbeat_judged_from = float("-inf")
        # Whether the last verdict was a frozen JVM, which cannot drain: stopped without asking.
        self.frozen = False

    def store_answered(self, silent_s: float, now: float | None = None) -> bool:
        """Told at each read of the lease that returns: the store had not answered the watchdog for
        ``silent_s`` (since its previous answer). True when that was an outage: longer than two
        heartbeats (a NameNode restart, S3 not answering). An outage kept the driver from renewing too,
        and from committing: from the store's return the driver has a lease timeout to renew (a renewal
        that waited through the outage lands with the heartbeat it was begun with), and the stall clocks
        start again."""
        now = time.monotonic() if now is None else now
        if silent_s <= 2 * self.settings.heartbeat_s:
            return False
        self._clocks.clear()
        self._heartbeat_judged_from = now + self.settings.lease_timeout_s
        return True

    def look(self, record: LeaseRecord, driver_exists: bool | None, now: float | None = None) -> str | None:
        """``driver_exists``: whether the lease's pid runs (None when it is on another host)."""
        now = time.monotonic() if now is None else now
        if driver_exists is False:
            # A dead driver's lease (a crash, or the one before a restart that has not taken over
            # yet): nothing hangs, and the next owner's clocks start afresh.
            self._clocks.clear()
            return None
        self.frozen = False
        age = record.heartbeat_age()
        silent_s = record.jvm_silent_s
        # Only a driver on this host: one elsewhere can be neither told apart from its lease nor killed.
        if (
            driver_exists
            and age < self.settings.lease_timeout_s
            and silent_s >= self.settings.jvm_answer_timeout_s
        ):
            self.frozen = True
            return (
                f"its JVM has not answered for {silent_s:.0f}s (jvm_answer_timeout "
                f"{self.settings.jvm_answer_timeout_s:.0f}s) while the driver (pid {record.pid} on "
                f"{record.host}) renews its lease: frozen"
            )
        if age >= self.settings.lease_timeout_s and now >= self._heartbeat_judged_from:
            if driver_exists is None:
                return None  # on another host: the supervisor can neither tell nor act
            return (
                f"heartbeat {age:.0f}s old (lease timeout {self.settings.lease_timeout_s:.0f}s) "
                f"while the driver (pid {record.pid} on {record.host}) still exists"
            )
        for name, query in sorted(record.queries.items()):
            stalled_for, waiting = self._stall(name, query, now)
            if stalled_for is None or stalled_for < self.settings.window_s:
                continue
            triggers = int(stalled_for // self.settings.trigger_s)
            return (
                f"{name}: no progress for {triggers} triggers ({stalled_for:.0f}s, "
                f"still at batch {query.get('batch_id')}) while {waiting:,} offsets wait"
            )
        return None

    def _stall(self, name: str, query: Mapping[str, Any], now: float) -> tuple[float | None, int]:
        """How long the query has had work waiting and no new batch, and how much waits."""
        clock = self._clocks.get(name)
        batch_id = query.get("batch_id")
        if clock is None or clock.batch_id != batch_id:
            self._clocks[name] = _QueryClock(batch_id, now)
            return None, 0
        waiting = self._waiting(name, query.get("end_offsets") or {})
        if not waiting:
            clock.stalled_since = now  # idle, or unknown: not a stall
            return None, 0
        return now - clock.stalled_since, waiting


def query_backlog(
    config: PipelineConfig, app: str, backlog: Callable[[Mapping[str, Mapping[str, int]]], int | None]
) -> WaitingOffsets:
    """What waits for a query: beyond the end offsets in the lease, or, while the lease has none yet
    (a driver frozen before its first progress reached the lease), beyond its checkpoint's."""

    def waiting(query: str, end_offsets: Mapping[str, Mapping[str, int]]) -> int | None:
        return backlog(end_offsets or checkpoint_end_offsets(config, app, query))

    return waiting


def checkpoint_end_offsets(config: PipelineConfig, app: str, query: str) -> dict[str, dict[str, int]]:
    """Where the query's last committed batch ended in each Kafka partition, or, before its first
    commit, where it starts; empty when the checkpoint cannot be read."""
    folder = location(config.spark.extra_conf, config.checkpoint_dir(app, query_of(query)))
    if not folder.is_dir():
        return {}
    try:
        committed = checkpoint_format.batch_ids(folder / "commits")
        if committed:
            last = folder / "offsets" / str(committed[-1])
            sources = checkpoint_format.read_offsets(last, lenient=True).sources
        else:
            sources = [
                checkpoint_format.read_initial_offsets(source / "0", lenient=True)
                for source in sorted((folder / "sources").glob("[0-9]*"))
            ]
    except (OSError, ValueError):
        return {}
    merged = checkpoint_format.kafka_offsets(sources)
    return {topic: {str(p): o for p, o in partitions.items()} for topic, partitions in merged.items()}


class KafkaBacklog:
    """Offsets on the broker beyond a query's end offsets; one consumer, reused between looks."""

    def __init__(self, config: PipelineConfig, timeout_s: float = 5.0) -> None:
        self._config = config
        self._timeout_s = timeout_s
        self._consumer: Any = None

    def __call__(self, end_offsets: Mapping[str, Mapping[str, int]]) -> int | None:
        from confluent_kafka import KafkaException, TopicPartition

        if not end_offsets:
            return None
        if self._consumer is None:
            self._consumer = offset_reader(self._config, "watchdog")
        waiting = 0
        try:
            for topic, partitions in end_offsets.items():
                for partition, offset in partitions.items():
                    _low, high = self._consumer.get_watermark_offsets(
                        TopicPartition(topic, int(partition)), timeout=self._timeout_s
                    )
                    waiting += max(high - int(offset), 0)
        except KafkaException:
            return None  # a broker that does not answer says nothing about the app
        return waiting

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
