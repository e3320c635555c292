"""The load: a paced producer, the broker's offsets, and an app's queries under that load."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from stream_pipelines.core import registry
from stream_pipelines.core.config import PipelineConfig
from stream_pipelines.devtools.benchmarks.common import (
    BenchmarkError,
    Interrupts,
    isolated_run,
)
from stream_pipelines.driver.lifecycle import build_sinks

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from stream_pipelines.devtools.generator import Record, ScenarioSpec
from stream_pipelines.devtools.benchmarks.streaming.settings import (
    PACE_SLACK_S,
    POLL_S,
    SEED_BASE,
    SEGMENT_S,
    SENSOR_APP,
    SENSOR_COUNT,
    USER_COUNT,
    epoch_seconds,
    offsets_by_partition,
)

# --------------------------------------------------------------------------- load


class PacedProducer:
    """Generator records into the app's topics at a target rate, from a thread of its own.

    Each rate is a new generator scenario starting now, so event time follows the wall clock, with
    a seed of its own, so event ids never repeat (the ad app drops a repeated id as a duplicate).
    Records are sent when due, by sleeping between bursts: ``produce_to_kafka``'s own real-time mode
    polls in a tight loop when records are due less than a millisecond apart, which would take a
    core away from Spark at these rates.
    """

    def __init__(self, config: PipelineConfig, app: str) -> None:
        self.config = config
        self.app = app
        self.error: BaseException | None = None
        self._rate = 0.0
        self._version = 0
        self._closing = False
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._run, name=f"producer-{app}", daemon=True)
        self.records_per_event = self._records_per_event()

    def start(self) -> PacedProducer:
        self._thread.start()
        return self

    def set_rate(self, records_per_s: float) -> None:
        """Produce about ``records_per_s`` records per second from now on (0 pauses)."""
        with self._changed:
            self._rate = records_per_s
            self._version += 1
            self._changed.notify_all()

    def check(self) -> None:
        if self.error is not None:
            raise BenchmarkError(f"the producer for {self.app} failed: {self.error}") from self.error

    def close(self) -> None:
        with self._changed:
            self._closing = True
            self._changed.notify_all()
        self._thread.join(timeout=150)

    def _spec(self, events_per_s: float, seed: int, start: datetime) -> ScenarioSpec:
        from stream_pipelines.devtools import generator

        topics = self.config.kafka.topics
        sensors = self.app == SENSOR_APP
        return generator.ScenarioSpec(
            seed=seed,
            start=start,
            duration_s=SEGMENT_S,
            sensor_rate=events_per_s if sensors else 0.0,
            ad_rate=0.0 if sensors else events_per_s,
            sensor_count=SENSOR_COUNT,
            user_count=USER_COUNT,
            topics=generator.TopicNames(
                sensors=topics.sensors.name, impressions=topics.impressions.name, clicks=topics.clicks.name
            ),
            partitions=generator.PartitionCounts(
                sensors=topics.sensors.partitions,
                impressions=topics.impressions.partitions,
                clicks=topics.clicks.partitions,
            ),
        )

    def _records_per_event(self) -> float:
        """Records per logical event (duplicates, malformed extras, clicks per impression)."""
        from stream_pipelines.devtools import generator

        rate, seconds = 200.0, 120.0
        sample = replace(self._spec(rate, SEED_BASE, datetime.now(UTC)), duration_s=seconds)
        return sum(1 for _ in generator.iter_generate(sample)) / (rate * seconds)

    def _run(self) -> None:
        from stream_pipelines.devtools import generator

        segment = 0
        try:
            while True:
                with self._changed:
                    self._changed.wait_for(lambda: self._rate > 0 or self._closing)
                    if self._closing:
                        return
                    version, rate = self._version, self._rate
                segment += 1
                start = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=1)
                spec = self._spec(rate / self.records_per_event, SEED_BASE + segment, start)
                # One-second chunks: the default minute-long ones are generated in one go, a stall of
                # seconds at high rates during which nothing is sent.
                records = (record for chunk in generator.generate_chunks(spec, 1.0) for record in chunk)
                generator.produce_to_kafka(
                    self._paced(records, version),
                    self.config.kafka_client_config(),
                )
        except BaseException as error:  # handed to the main thread by check()
            self.error = error

    def _paced(self, records: Iterator[Record], version: int) -> Iterator[Record]:
        def superseded() -> bool:
            return self._version != version or self._closing

        for record in records:
            # The scenario starts now, so a record's delivery time is the wall-clock time it is due.
            wait = record.delivery_time.timestamp() - time.time()
            if wait > PACE_SLACK_S:
                with self._changed:
                    if self._changed.wait_for(superseded, timeout=wait):
                        return
            elif superseded():
                return
            yield record


class BrokerOffsets:
    """The broker's latest offsets of the app's input topics."""

    def __init__(self, config: PipelineConfig, app: str) -> None:
        from confluent_kafka import Consumer, TopicPartition

        topics = config.kafka.topics
        inputs = [topics.sensors] if app == SENSOR_APP else [topics.impressions, topics.clicks]
        self.partitions = [TopicPartition(t.name, p) for t in inputs for p in range(t.partitions)]
        # No subscription, so no group is ever joined; the id only satisfies the client.
        self._consumer = Consumer(
            {
                **config.kafka_client_config(),
                "group.id": "bench-streaming-offsets",
                "enable.auto.commit": False,
            }
        )

    def latest(self) -> dict[tuple[str, int], int]:
        latest = {}
        for partition in self.partitions:
            _, high = self._consumer.get_watermark_offsets(partition, timeout=10, cached=False)
            latest[(partition.topic, partition.partition)] = high
        return latest

    def total(self) -> tuple[float, int]:
        """(when, records on the broker); the time is the middle of the round trips."""
        before = time.time()
        total = sum(self.latest().values())
        return (before + time.time()) / 2, total

    def close(self) -> None:
        self._consumer.close()


# --------------------------------------------------------------------------- the app under load


@dataclass
class Batch:
    query: str
    run: int
    batch_id: int
    started: float  # epoch seconds
    # durationMs as Spark reports it: triggerExecution and its parts (addBatch, queryPlanning, ...)
    durations: dict[str, int]
    rows: int  # from the source offsets
    backlog: int | None  # records behind the broker's latest when the batch was first seen
    seen_at: float
    # What the stateful operators really ran with, as evidence that a variant's settings took hold.
    state: tuple[str, ...] = ()

    @property
    def duration_s(self) -> float:
        """The whole batch: triggerExecution."""
        return self.durations["triggerExecution"] / 1000


def state_operators(update: dict[str, Any]) -> tuple[str, ...]:
    """Each stateful operator as "<name>/<store>/<partitions>"; the store is told by its metrics."""
    described = []
    for operator in update.get("stateOperators") or []:
        metrics = operator.get("customMetrics") or {}
        store = "rocksdb" if any(name.startswith("rocksdb") for name in metrics) else "hdfs"
        described.append(f"{operator['operatorName']}/{store}/{operator['numShufflePartitions']}")
    return tuple(described)


class StepFailed(Exception):
    """A query failed or a batch overran the wait during a rate step."""


def unknown_queries(app: str, names: Sequence[str]) -> str | None:
    """What is wrong with running ``names`` of ``app``'s queries, or None when the app has them all."""
    declared = registry.APPS[app].query_names
    if unknown := sorted(set(names) - set(declared)):
        return f"{app} has no query {', '.join(unknown)}; its queries: {', '.join(declared)}"
    return None


class LoadedApp:
    """The app's queries, restartable from fresh checkpoints, watched batch by batch."""

    def __init__(
        self,
        spark: SparkSession,
        config: PipelineConfig,
        app: str,
        name: str,
        offsets: BrokerOffsets,
        interrupts: Interrupts,
        only: Sequence[str] = (),
    ) -> None:
        """``only`` names the app's queries to run (its registry names); empty runs them all."""
        if problem := unknown_queries(app, only):
            raise BenchmarkError(problem)
        self.spark = spark
        self.config = config
        self.app = app
        self.only = set(only)
        self.name = name
        self.offsets = offsets
        self.interrupts = interrupts
        self.queries: list[StreamingQuery] = []
        self.batches: list[Batch] = []
        self.run = 0
        self._last_seen: dict[str, int] = {}
        self._folders = ExitStack()

    def start(self) -> None:
        from stream_pipelines.driver.runtime import start_sink

        self.run += 1
        run_config = self._folders.enter_context(isolated_run(self.config, f"{self.name}-{self.run}"))
        self._last_seen = {}
        self.queries = [
            start_sink(run_config, registry.app(self.app), sink, "processing")
            for sink in build_sinks(registry.APPS[self.app], self.spark, run_config)
            if not self.only or sink.name in self.only
        ]

    def stop(self, grace_s: float = 0.0) -> None:
        """Stop the queries, letting a running batch finish for up to ``grace_s`` (an interrupted
        batch only adds error logs)."""
        deadline = time.time() + grace_s
        try:
            for query in self.queries:
                while query.isActive and query.status["isTriggerActive"] and time.time() < deadline:
                    time.sleep(0.2)
                if query.isActive:
                    query.stop()
        finally:
            self.queries = []
            self._folders.close()

    def restart(self, grace_s: float) -> None:
        self.stop(grace_s)
        self.start()

    def poll(self) -> None:
        """Record the batches finished since the last poll; raise StepFailed if a query died."""
        fresh: list[tuple[str, dict[str, Any]]] = []
        for query in self.queries:
            if not query.isActive:
                raise StepFailed(f"query {query.name} stopped: {query.exception()}")
            last = query.lastProgress
            if last is None:
                continue
            name = str(query.name)
            seen = self._last_seen.get(name, -1)
            batch_id = int(last["batchId"])
            if batch_id <= seen:
                continue
            updates = [last] if batch_id == seen + 1 else list(query.recentProgress)
            fresh += [(name, update) for update in updates if int(update["batchId"]) > seen]
            self._last_seen[name] = batch_id
        if not fresh:
            return
        latest = self.offsets.latest()
        now = time.time()
        for name, update in fresh:
            end: dict[tuple[str, int], int] = {}
            rows = 0
            for source in update["sources"]:
                source_end = offsets_by_partition(source["endOffset"])
                source_start = offsets_by_partition(source["startOffset"])
                end.update(source_end)
                rows += sum(offset - source_start.get(key, offset) for key, offset in source_end.items())
            backlog = (
                sum(max(latest.get(key, offset) - offset, 0) for key, offset in end.items()) if end else None
            )
            self.batches.append(
                Batch(
                    query=name,
                    run=self.run,
                    batch_id=int(update["batchId"]),
                    started=epoch_seconds(update["timestamp"]),
                    durations={part: int(ms) for part, ms in update["durationMs"].items()},
                    rows=rows,
                    backlog=backlog,
                    seen_at=now,
                    state=state_operators(update),
                )
            )

    def watch_until(self, deadline: float) -> None:
        while time.time() < deadline:
            self.poll()
            self.interrupts.check()
            time.sleep(min(POLL_S, max(deadline - time.time(), 0.0)))
        self.poll()

    def seen(self, name: str, after: float) -> list[Batch]:
        """This run's batches of one query that started at or after ``after``."""
        return [b for b in self.batches if b.query == name and b.run == self.run and b.started >= after]

    def settle(self, after: float, count: int, timeout_s: float) -> bool:
        """Wait until every query finished ``count`` batches that started after ``after``; False on
        timeout (the step goes on and its window shows whatever is wrong)."""
        deadline = time.time() + timeout_s
        while True:
            self.poll()
            if self.finished_in(after, count):
                return True
            if time.time() > deadline:
                return False
            self.interrupts.check()
            time.sleep(POLL_S)

    def finished_in(self, after: float, count: int) -> bool:
        """Whether every query finished ``count`` batches that started after ``after``."""
        return all(len(self.seen(str(query.name), after)) >= count for query in self.queries)

    def running(self) -> dict[str, int]:
        """{query: last batch id seen} for the queries running a batch now."""
        self.poll()
        return {
            str(query.name): self._last_seen.get(str(query.name), -1)
            for query in self.queries
            if query.status["isTriggerActive"]
        }

    def wait_for(self, running: dict[str, int], timeout_s: float) -> None:
        """Wait until the batches that were running (``running()``) have finished."""
        deadline = time.time() + timeout_s
        while True:
            self.poll()
            pending = [name for name, last in running.items() if self._last_seen.get(name, -1) <= last]
            if not pending:
                return
            if time.time() > deadline:
                raise StepFailed(f"{', '.join(pending)} still ran a batch {timeout_s:.0f}s after the window")
            self.interrupts.check()
            time.sleep(POLL_S)
