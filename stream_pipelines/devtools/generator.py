"""Deterministic event generator with realistic event-time behaviour.

Produces sensor readings, ad impressions and clicks whose delivery order differs from their event
order in controlled ways (late, very late, offline bursts, duplicates, malformed payloads, a stalled
partition), so the streaming apps' watermarks, deduplication and quarantine paths can be tested
against known answers.

Invariants other modules may rely on:

* The same ``ScenarioSpec`` always yields the same records, byte for byte, in the same order.
* Every valid event has its event time in ``[start, start + duration_s)``; deliveries may run past
  the end by up to the largest configured delay.
* ``Record.delivery_time >= Record.event_time`` whenever the event time is known.
* All timestamps are whole milliseconds, so ``format_ts(record.event_time)`` is exactly the payload's
  timestamp string.
* A stray click never lies within ``[shown_at - 30 s, shown_at + match_interval_s + 30 s]`` of any
  impression with the same ``ad_id`` and ``user_id``.
"""

from __future__ import annotations

import bisect
import csv
import functools
import heapq
import itertools
import json
import math
import os
import random
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TextIO

from stream_pipelines.devtools.partitioning import kafka_default_partition

__all__ = [
    "ABSURD_TS_YEARS",
    "BURST",
    "DEFAULT_START",
    "DUPLICATE",
    "LATE_BEYOND",
    "LATE_WITHIN",
    "MALFORMED_PREFIX",
    "MALFORMED_REASONS",
    "METADATA_SEED",
    "ON_TIME",
    "PLAUSIBLE_TEMPERATURE_C",
    "STRAY_CLICK",
    "UNKNOWN_SENSOR",
    "UNKNOWN_SENSOR_BASE",
    "DelayMix",
    "PartitionCounts",
    "Record",
    "ScenarioSpec",
    "SensorMetadata",
    "TopicNames",
    "format_ts",
    "generate",
    "generate_chunks",
    "iter_generate",
    "produce_to_kafka",
    "sensor_metadata",
    "summarize",
    "write_jsonl",
    "write_sensor_metadata",
]

# Record kinds.
ON_TIME = "on_time"
LATE_WITHIN = "late_within"
LATE_BEYOND = "late_beyond"
BURST = "burst"
DUPLICATE = "duplicate"
UNKNOWN_SENSOR = "unknown_sensor"
STRAY_CLICK = "stray_click"
MALFORMED_PREFIX = "malformed:"
MALFORMED_REASONS = ("broken_json", "missing_field", "wrong_type", "absurd_value")

DEFAULT_START = datetime(2026, 1, 1, tzinfo=UTC)
# The seed conf/sensor_metadata.csv is written with; temperatures follow its locations whatever the
# scenario seed, so the shipped table and the readings stay consistent.
METADATA_SEED = 7
# Unknown sensors get ids from here on (or from sensor_count, if that is larger), so they can never
# collide with a sensor in the metadata table.
UNKNOWN_SENSOR_BASE = 9000
_UNKNOWN_SENSOR_POOL = 10
# Range a real indoor sensor can report; absurd_value temperatures lie far outside it.
PLAUSIBLE_TEMPERATURE_C = (-40.0, 85.0)
ABSURD_TEMPERATURE_C = 9999.0
ABSURD_TS_YEARS = (1970, 2100)

_LOCATIONS = (
    "lab-1",
    "lab-2",
    "lab-3",
    "server-room",
    "cold-storage",
    "office",
    "warehouse",
    "lobby",
)
_BASELINE_TEMPERATURE_C = {"server-room": 27.0, "cold-storage": 4.0, "warehouse": 15.0}
_DEFAULT_BASELINE_C = 21.0
_BUILDINGS = ("B1", "B2", "B3", "B4")

_DUPLICATE_RESEND_MS = (1_000, 5_000)
_STRAY_MIN_OFFSET_S = 6 * 60.0
_STRAY_MAX_OFFSET_S = 30 * 60.0
# Margin around each impression's match interval that stray clicks keep clear of, so a join whose
# bounds are inclusive or slightly widened still never matches a stray click.
_STRAY_GUARD_MS = 30_000
# Attempts at drawing a user that no pending stray click would match, before withdrawing the stray.
_USER_PICK_ATTEMPTS = 20
_STRAY_PRUNE_EVERY_SLOTS = 60
_AD_POPULARITY_EXPONENT = 0.8

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_DAY_MS = 86_400_000
_ABSURD_YEAR_START_MS = {
    year: (datetime(year, 1, 1, tzinfo=UTC) - _EPOCH) // timedelta(milliseconds=1) for year in ABSURD_TS_YEARS
}


# ---------------------------------------------------------------------------------------------------
# Configuration


@dataclass(frozen=True)
class DelayMix:
    """How deliveries deviate from event time. Shares of logical events unless noted otherwise."""

    late_within_share: float = 0.05
    late_beyond_share: float = 0.02
    burst_share: float = 0.0
    duplicate_share: float = 0.02
    malformed_share: float = 0.01
    unknown_sensor_share: float = 0.01
    on_time_max_s: float = 5.0
    late_within_max_s: float = 90.0
    late_beyond_min_s: float = 240.0
    late_beyond_max_s: float = 900.0
    burst_seconds: float = 300.0

    def validate(self) -> None:
        """Raise ValueError naming the offending field if the mix cannot be generated."""
        for name in (
            "late_within_share",
            "late_beyond_share",
            "burst_share",
            "duplicate_share",
            "malformed_share",
            "unknown_sensor_share",
        ):
            share = getattr(self, name)
            if not 0.0 <= share <= 1.0:
                raise ValueError(f"DelayMix.{name} must be within [0, 1], got {share}")
        late_total = self.late_within_share + self.late_beyond_share
        if late_total > 1.0:
            raise ValueError(
                "DelayMix.late_within_share + DelayMix.late_beyond_share must be at most 1 "
                f"(the remainder is on time), got {late_total}"
            )
        if self.on_time_max_s < 0:
            raise ValueError(f"DelayMix.on_time_max_s must not be negative, got {self.on_time_max_s}")
        # Compared in whole milliseconds because that is the resolution delays are drawn in.
        ordered_bounds = (
            ("on_time_max_s", self.on_time_max_s),
            ("late_within_max_s", self.late_within_max_s),
            ("late_beyond_min_s", self.late_beyond_min_s),
            ("late_beyond_max_s", self.late_beyond_max_s),
        )
        for (lower_name, lower), (upper_name, upper) in itertools.pairwise(ordered_bounds):
            strictly_above = upper_name != "late_beyond_min_s"
            lower_ms, upper_ms = _seconds_to_ms(lower), _seconds_to_ms(upper)
            if upper_ms < lower_ms or (strictly_above and upper_ms == lower_ms):
                relation = "greater than" if strictly_above else "at least"
                raise ValueError(
                    f"DelayMix.{upper_name} must be {relation} DelayMix.{lower_name} "
                    f"(by at least 1 ms), got {upper} vs {lower}"
                )
        if _seconds_to_ms(self.burst_seconds) < 1:
            raise ValueError(f"DelayMix.burst_seconds must be positive, got {self.burst_seconds}")


@dataclass(frozen=True)
class TopicNames:
    sensors: str = "sensors"
    impressions: str = "impressions"
    clicks: str = "clicks_ads"


@dataclass(frozen=True)
class PartitionCounts:
    sensors: int = 3
    impressions: int = 3
    clicks: int = 3


@dataclass(frozen=True)
class ScenarioSpec:
    """Everything that determines a generated scenario; equal specs give identical records."""

    seed: int = 7
    start: datetime = DEFAULT_START  # tz-aware; sub-millisecond parts are dropped
    duration_s: float = 600.0
    sensor_rate: float = 20.0  # logical sensor readings per second (unknown sensors included)
    ad_rate: float = 10.0  # impressions per second
    click_through: float = 0.2  # share of impressions clicked within the match interval
    # Share of impressions clicked far too late (6-30 min after shown_at); exclusive with click_through.
    stray_click_share: float = 0.05
    match_interval_s: float = 300.0
    sensor_count: int = 50
    ad_count: int = 20
    user_count: int = 500
    mix: DelayMix = field(default_factory=DelayMix)
    stalled_partition: int | None = None  # sensors partition that stops receiving records...
    stall_after_s: float = 0.0  # ...for deliveries from this offset into the scenario on
    topics: TopicNames = field(default_factory=TopicNames)
    partitions: PartitionCounts = field(default_factory=PartitionCounts)

    def validate(self) -> None:
        """Raise ValueError naming the offending field if the scenario cannot be generated."""
        self.mix.validate()
        if self.start.tzinfo is None or self.start.utcoffset() is None:
            raise ValueError("ScenarioSpec.start must be timezone-aware (UTC), got a naive datetime")
        if _seconds_to_ms(self.duration_s) < 1:
            raise ValueError(f"ScenarioSpec.duration_s must be positive, got {self.duration_s}")
        for name in ("sensor_rate", "ad_rate"):
            rate = getattr(self, name)
            if not (rate >= 0 and math.isfinite(rate)):
                raise ValueError(f"ScenarioSpec.{name} must be a finite non-negative number, got {rate}")
        for name in ("sensor_count", "ad_count", "user_count"):
            if getattr(self, name) < 1:
                raise ValueError(f"ScenarioSpec.{name} must be at least 1, got {getattr(self, name)}")
        for name in ("click_through", "stray_click_share"):
            share = getattr(self, name)
            if not 0.0 <= share <= 1.0:
                raise ValueError(f"ScenarioSpec.{name} must be within [0, 1], got {share}")
        if self.click_through + self.stray_click_share > 1.0:
            raise ValueError(
                "ScenarioSpec.click_through + ScenarioSpec.stray_click_share must be at most 1, "
                f"got {self.click_through + self.stray_click_share}"
            )
        if self.match_interval_s <= 2.0:
            raise ValueError(
                "ScenarioSpec.match_interval_s must exceed 2 s (clicks fall 1 s inside either end), "
                f"got {self.match_interval_s}"
            )
        for name in ("sensors", "impressions", "clicks"):
            if getattr(self.partitions, name) < 1:
                raise ValueError(f"ScenarioSpec.partitions.{name} must be at least 1")
            if not getattr(self.topics, name):
                raise ValueError(f"ScenarioSpec.topics.{name} must not be empty")
        topic_names = (self.topics.sensors, self.topics.impressions, self.topics.clicks)
        if len(set(topic_names)) != len(topic_names):
            raise ValueError(f"ScenarioSpec.topics must name three different topics, got {topic_names}")
        if self.stalled_partition is not None and not 0 <= self.stalled_partition < self.partitions.sensors:
            raise ValueError(
                f"ScenarioSpec.stalled_partition must be in [0, {self.partitions.sensors}), "
                f"got {self.stalled_partition}"
            )
        if self.stall_after_s < 0:
            raise ValueError(f"ScenarioSpec.stall_after_s must not be negative, got {self.stall_after_s}")


@dataclass(frozen=True, slots=True)
class Record:
    """One Kafka message (or JSONL line) plus the ground truth needed to check the pipelines."""

    topic: str
    partition: int
    key: str | None
    value: bytes  # exactly what goes to Kafka / a JSONL line
    # The valid, in-range timestamp the payload carries; None when it carries none (broken JSON,
    # missing or wrongly typed timestamp, timestamp in 1970/2100).
    event_time: datetime | None
    delivery_time: datetime  # Kafka CreateTime of the message
    kind: str
    event_id: str | None  # None only when the payload is truncated JSON


@dataclass(frozen=True)
class SensorMetadata:
    sensor_id: str
    location: str
    building: str
    floor: int


# ---------------------------------------------------------------------------------------------------
# Time helpers: everything inside the generator is integer epoch milliseconds, so that payload
# strings, Record datetimes and Kafka timestamps all agree exactly.


def format_ts(moment: datetime) -> str:
    """ISO-8601 UTC with milliseconds and a Z, e.g. ``2026-11-21T12:00:00.123Z`` (truncates µs)."""
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"format_ts needs a timezone-aware datetime, got naive {moment!r}")
    in_utc = moment.astimezone(UTC)
    return f"{in_utc:%Y-%m-%dT%H:%M:%S}.{in_utc.microsecond // 1000:03d}Z"


def _seconds_to_ms(seconds: float) -> int:
    return round(seconds * 1000)


def _datetime_to_ms(moment: datetime) -> int:
    return (moment - _EPOCH) // timedelta(milliseconds=1)


def _ms_to_datetime(epoch_ms: int) -> datetime:
    return _EPOCH + timedelta(milliseconds=epoch_ms)


@functools.lru_cache(maxsize=4096)
def _second_prefix(epoch_second: int) -> str:
    # Many events share a second; formatting each second once keeps large runs fast.
    return f"{_EPOCH + timedelta(seconds=epoch_second):%Y-%m-%dT%H:%M:%S}"


def _format_ms(epoch_ms: int) -> str:
    epoch_second, millis = divmod(epoch_ms, 1000)
    return f"{_second_prefix(epoch_second)}.{millis:03d}Z"


# ensure_ascii keeps every payload plain ASCII, hence valid UTF-8 and free of raw newlines. One shared
# encoder skips json.dumps' per-call setup, which shows up at millions of records.
_JSON_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True)


def _to_json(payload: dict[str, Any]) -> str:
    return _JSON_ENCODER.encode(payload)


# ---------------------------------------------------------------------------------------------------
# Sensor metadata


def _sensor_id(number: int) -> str:
    return f"sensor-{number:04d}"


def _ad_id(number: int) -> str:
    return f"ad-{number:03d}"


def _user_id(number: int) -> str:
    return f"user-{number:05d}"


def sensor_metadata(sensor_count: int, seed: int = METADATA_SEED) -> list[SensorMetadata]:
    """Metadata rows for sensor-0000 .. sensor-<count-1>; each row depends only on (seed, sensor)."""
    rows = []
    for number in range(sensor_count):
        # Seeding per sensor keeps a smaller table a prefix of a larger one.
        rng = random.Random(f"{seed}/sensor-metadata/{number}")
        rows.append(
            SensorMetadata(
                sensor_id=_sensor_id(number),
                location=rng.choice(_LOCATIONS),
                building=rng.choice(_BUILDINGS),
                floor=rng.randint(0, 9),
            )
        )
    return rows


def write_sensor_metadata(path: Path, sensor_count: int, seed: int) -> None:
    """Write the CSV the sensor app joins readings with (same content as conf/sensor_metadata.csv)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8", newline="") as out:
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(["sensor_id", "location", "building", "floor"])
        for row in sensor_metadata(sensor_count, seed):
            writer.writerow([row.sensor_id, row.location, row.building, row.floor])


# ---------------------------------------------------------------------------------------------------
# Generation


@dataclass(frozen=True)
class _SensorProfile:
    baseline_c: float
    phase: float


@dataclass(frozen=True)
class _TopicShape:
    """What a topic's valid payload looks like, for deriving malformed variants of it."""

    time_field: str
    required_fields: tuple[str, ...]


_SENSOR_SHAPE = _TopicShape(time_field="ts", required_fields=("sensor_id", "temperature", "ts"))
_IMPRESSION_SHAPE = _TopicShape(time_field="shown_at", required_fields=("ad_id", "user_id", "shown_at"))
_CLICK_SHAPE = _TopicShape(time_field="clicked_at", required_fields=("ad_id", "user_id", "clicked_at"))


def _malform(
    reason: str, payload: dict[str, Any], shape: _TopicShape, event_ms: int, rng: random.Random
) -> tuple[str, bool, bool]:
    """Corrupt a valid payload. Returns (text, timestamp still valid, event_id still readable)."""
    if reason == "broken_json":
        text = _to_json(payload)
        # Any proper prefix of a JSON object is unparseable: the closing brace is always missing.
        return text[: rng.randint(max(1, len(text) // 3), len(text) - 2)], False, False
    corrupted = dict(payload)
    if reason == "missing_field":
        dropped = rng.choice(shape.required_fields)
        del corrupted[dropped]
        return _to_json(corrupted), dropped != shape.time_field, True
    if reason == "wrong_type":
        if "temperature" in corrupted:
            corrupted["temperature"] = "hot"
            return _to_json(corrupted), True, True
        # A boolean, not a number: Spark would read an epoch number as a valid timestamp.
        corrupted[shape.time_field] = True
        return _to_json(corrupted), False, True
    if reason == "absurd_value":
        variants = ["ts_1970", "ts_2100"] + (["temperature"] if "temperature" in corrupted else [])
        variant = rng.choice(variants)
        if variant == "temperature":
            corrupted["temperature"] = ABSURD_TEMPERATURE_C
            return _to_json(corrupted), True, True
        year = ABSURD_TS_YEARS[0] if variant == "ts_1970" else ABSURD_TS_YEARS[1]
        corrupted[shape.time_field] = _format_ms(_ABSURD_YEAR_START_MS[year] + event_ms % _DAY_MS)
        return _to_json(corrupted), False, True
    raise ValueError(f"unknown malformed reason {reason!r}")


class _ScenarioRun:
    """Mutable state of one pass over a scenario, second by second of event time.

    Every record created while processing second ``s`` is delivered at or after ``s``, so once all
    seconds before ``t`` are processed, every record delivered before ``t`` exists; that is what lets
    ``generate_chunks`` release sorted chunks without holding the whole scenario.
    """

    def __init__(self, spec: ScenarioSpec) -> None:
        self.spec = spec
        self.mix = spec.mix
        self.start_ms = _datetime_to_ms(spec.start)
        self.end_ms = self.start_ms + _seconds_to_ms(spec.duration_s)
        self.slot_count = math.ceil((self.end_ms - self.start_ms) / 1000)
        self.stall_ms = (
            self.start_ms + _seconds_to_ms(spec.stall_after_s) if spec.stalled_partition is not None else None
        )
        self.on_time_max_ms = _seconds_to_ms(self.mix.on_time_max_s)
        self.late_within_max_ms = _seconds_to_ms(self.mix.late_within_max_s)
        self.late_beyond_min_ms = _seconds_to_ms(self.mix.late_beyond_min_s)
        self.late_beyond_max_ms = _seconds_to_ms(self.mix.late_beyond_max_s)
        self.match_interval_ms = _seconds_to_ms(spec.match_interval_s)
        # Strays must also clear the impression's own interval plus guard, and that of any impression
        # of the same pair shown earlier in its second.
        self.stray_min_ms = max(
            _seconds_to_ms(_STRAY_MIN_OFFSET_S), self.match_interval_ms + _STRAY_GUARD_MS + 1_000
        )
        self.stray_max_ms = max(_seconds_to_ms(_STRAY_MAX_OFFSET_S), self.stray_min_ms + 60_000)

        # Separate streams so that, e.g., raising the malformed share does not reshuffle valid events.
        self.sensor_rng = random.Random(f"{spec.seed}/sensor-events")
        self.sensor_fault_rng = random.Random(f"{spec.seed}/sensor-faults")
        self.ad_rng = random.Random(f"{spec.seed}/ad-events")
        self.ad_fault_rng = random.Random(f"{spec.seed}/ad-faults")

        self.pending: list[tuple[int, int, Record]] = []
        self.sequence = 0  # creation order; the deterministic tie-break among equal delivery times
        self.event_numbers: Counter[str] = Counter()
        self.malformed_cursor: Counter[str] = Counter()
        self.partition_cache: dict[tuple[str, str], int] = {}

        self.sensor_profiles = self._sensor_profiles()
        self.unknown_sensor_base = max(UNKNOWN_SENSOR_BASE, spec.sensor_count)
        self.burst_windows = self._burst_windows()
        ad_weights = [1.0 / (number + 1) ** _AD_POPULARITY_EXPONENT for number in range(spec.ad_count)]
        self.ad_cumulative_weights = [sum(ad_weights[: number + 1]) for number in range(spec.ad_count)]

        self.strays_by_pair: dict[tuple[int, int], list[tuple[int, str]]] = {}
        self.withdrawn_event_ids: set[str] = set()

    # -- setup -------------------------------------------------------------------------------------

    def _sensor_profiles(self) -> list[_SensorProfile]:
        rng = random.Random(f"{self.spec.seed}/sensor-profiles")
        profiles = []
        for row in sensor_metadata(self.spec.sensor_count, METADATA_SEED):
            baseline = _BASELINE_TEMPERATURE_C.get(row.location, _DEFAULT_BASELINE_C)
            profiles.append(
                _SensorProfile(baseline_c=baseline + rng.uniform(-1.5, 1.5), phase=rng.uniform(0, math.tau))
            )
        return profiles

    def _burst_windows(self) -> dict[int, tuple[int, int]]:
        """Sensor number -> [offline from, flush at) for the sensors that go offline once."""
        rng = random.Random(f"{self.spec.seed}/bursts")
        burst_ms = _seconds_to_ms(self.mix.burst_seconds)
        offline_count = round(self.mix.burst_share * self.spec.sensor_count)
        latest_start_ms = max(0, self.end_ms - self.start_ms - burst_ms)
        windows = {}
        for number in sorted(rng.sample(range(self.spec.sensor_count), offline_count)):
            offline_from = self.start_ms + rng.randint(0, latest_start_ms)
            windows[number] = (offline_from, offline_from + burst_ms)
        return windows

    # -- driving -----------------------------------------------------------------------------------

    def chunks(self, chunk_ms: int) -> Iterator[list[Record]]:
        boundary = self.start_ms + chunk_ms
        for slot in range(self.slot_count):
            slot_start_ms = self.start_ms + slot * 1000
            self._generate_sensor_slot(slot, slot_start_ms)
            self._generate_ad_slot(slot, slot_start_ms)
            if slot % _STRAY_PRUNE_EVERY_SLOTS == 0:
                self._prune_strays(slot_start_ms)
            # Held back by the guard because a later impression may still withdraw a stray click
            # delivered up to that long before it.
            settled_before_ms = slot_start_ms + 1000 - _STRAY_GUARD_MS
            while boundary <= settled_before_ms:
                chunk = self._release_before(boundary)
                if chunk:
                    yield chunk
                boundary += chunk_ms
        while self.pending:
            chunk = self._release_before(boundary)
            if chunk:
                yield chunk
            boundary += chunk_ms

    def _release_before(self, boundary_ms: int) -> list[Record]:
        released = []
        while self.pending and self.pending[0][0] < boundary_ms:
            record = heapq.heappop(self.pending)[2]
            if record.event_id not in self.withdrawn_event_ids:
                released.append(record)
        return released

    # -- record plumbing ---------------------------------------------------------------------------

    def _next_event_id(self, prefix: str) -> str:
        number = self.event_numbers[prefix]
        self.event_numbers[prefix] += 1
        return f"{prefix}-{self.spec.seed}-{number}"

    def _partition(self, topic: str, partition_count: int, key: str) -> int:
        cache_key = (topic, key)
        partition = self.partition_cache.get(cache_key)
        if partition is None:
            partition = kafka_default_partition(key.encode("utf-8"), partition_count)
            self.partition_cache[cache_key] = partition
        return partition

    def _push(
        self,
        *,
        topic: str,
        partition: int,
        key: str,
        value: bytes,
        event_ms: int | None,
        delivery_ms: int,
        kind: str,
        event_id: str | None,
    ) -> None:
        if (
            self.stall_ms is not None
            and topic == self.spec.topics.sensors
            and partition == self.spec.stalled_partition
            and delivery_ms >= self.stall_ms
        ):
            return
        record = Record(
            topic=topic,
            partition=partition,
            key=key,
            value=value,
            event_time=None if event_ms is None else _ms_to_datetime(event_ms),
            delivery_time=_ms_to_datetime(delivery_ms),
            kind=kind,
            event_id=event_id,
        )
        heapq.heappush(self.pending, (delivery_ms, self.sequence, record))
        self.sequence += 1

    def _draw_delay(self, rng: random.Random) -> tuple[str, int]:
        category_draw = rng.random()
        if category_draw < self.mix.late_within_share:
            return LATE_WITHIN, rng.randint(self.on_time_max_ms + 1, self.late_within_max_ms)
        if category_draw < self.mix.late_within_share + self.mix.late_beyond_share:
            return LATE_BEYOND, rng.randint(self.late_beyond_min_ms + 1, self.late_beyond_max_ms)
        return ON_TIME, rng.randint(0, self.on_time_max_ms)

    def _send_event(
        self,
        *,
        topic: str,
        partition_count: int,
        key: str,
        payload: dict[str, Any],
        shape: _TopicShape,
        event_ms: int,
        delivery_ms: int,
        kind: str,
        fault_rng: random.Random,
    ) -> None:
        """Send one logical event, plus the duplicate and malformed extras the mix calls for."""
        partition = self._partition(topic, partition_count, key)
        value = _to_json(payload).encode("utf-8")
        event_id = payload["event_id"]
        self._push(
            topic=topic,
            partition=partition,
            key=key,
            value=value,
            event_ms=event_ms,
            delivery_ms=delivery_ms,
            kind=kind,
            event_id=event_id,
        )
        if fault_rng.random() < self.mix.duplicate_share:
            self._push(
                topic=topic,
                partition=partition,
                key=key,
                value=value,
                event_ms=event_ms,
                delivery_ms=delivery_ms + fault_rng.randint(*_DUPLICATE_RESEND_MS),
                kind=DUPLICATE,
                event_id=event_id,
            )
        if fault_rng.random() < self.mix.malformed_share:
            # Round-robin over reasons so every reason shows up even in small scenarios.
            reason = MALFORMED_REASONS[self.malformed_cursor[topic] % len(MALFORMED_REASONS)]
            self.malformed_cursor[topic] += 1
            malformed_id = self._next_event_id("malformed")
            text, time_is_valid, id_is_readable = _malform(
                reason, {**payload, "event_id": malformed_id}, shape, event_ms, fault_rng
            )
            self._push(
                topic=topic,
                partition=partition,
                key=key,
                value=text.encode("utf-8"),
                event_ms=event_ms if time_is_valid else None,
                delivery_ms=event_ms + fault_rng.randint(0, self.on_time_max_ms),
                kind=MALFORMED_PREFIX + reason,
                event_id=malformed_id if id_is_readable else None,
            )

    # -- sensors -----------------------------------------------------------------------------------

    def _generate_sensor_slot(self, slot: int, slot_start_ms: int) -> None:
        spec, rng = self.spec, self.sensor_rng
        readings_in_slot = math.floor(spec.sensor_rate * (slot + 1)) - math.floor(spec.sensor_rate * slot)
        for position in range(readings_in_slot):
            # Steady schedule: the slot's readings are spread evenly, each jittered within its share.
            event_ms = slot_start_ms + math.floor((position + rng.random()) * 1000 / readings_in_slot)
            if event_ms >= self.end_ms:
                continue
            reading_number = self.event_numbers["reading"]
            event_id = self._next_event_id("reading")
            # Draw everything up front so that a reading's draws never depend on which branch it takes.
            is_unknown = rng.random() < self.mix.unknown_sensor_share
            unknown_offset = rng.randrange(_UNKNOWN_SENSOR_POOL)
            noise = rng.gauss(0.0, 0.2)
            category, delay_ms = self._draw_delay(rng)
            on_time_delay_ms = rng.randint(0, self.on_time_max_ms)

            if is_unknown:
                sensor_id = _sensor_id(self.unknown_sensor_base + unknown_offset)
                profile = _SensorProfile(baseline_c=_DEFAULT_BASELINE_C, phase=0.0)
                # On time, so that the kind alone says how a record was delivered.
                kind, delivery_ms = UNKNOWN_SENSOR, event_ms + on_time_delay_ms
            else:
                # Round-robin gives every sensor the same steady cadence.
                sensor_number = reading_number % spec.sensor_count
                sensor_id = _sensor_id(sensor_number)
                profile = self.sensor_profiles[sensor_number]
                kind, delivery_ms = category, event_ms + delay_ms
                window = self.burst_windows.get(sensor_number)
                if window is not None and window[0] <= event_ms < window[1]:
                    kind, delivery_ms = BURST, window[1]

            hours = event_ms / 3_600_000
            temperature = profile.baseline_c + 1.5 * math.sin(math.tau * hours + profile.phase) + noise
            payload = {
                "event_id": event_id,
                "sensor_id": sensor_id,
                "temperature": round(temperature, 2),
                "ts": _format_ms(event_ms),
            }
            self._send_event(
                topic=spec.topics.sensors,
                partition_count=spec.partitions.sensors,
                key=sensor_id,
                payload=payload,
                shape=_SENSOR_SHAPE,
                event_ms=event_ms,
                delivery_ms=delivery_ms,
                kind=kind,
                fault_rng=self.sensor_fault_rng,
            )

    # -- ads ---------------------------------------------------------------------------------------

    def _generate_ad_slot(self, slot: int, slot_start_ms: int) -> None:
        spec, rng = self.spec, self.ad_rng
        impressions_in_slot = math.floor(spec.ad_rate * (slot + 1)) - math.floor(spec.ad_rate * slot)
        for position in range(impressions_in_slot):
            shown_ms = slot_start_ms + math.floor((position + rng.random()) * 1000 / impressions_in_slot)
            if shown_ms >= self.end_ms:
                continue
            ad_number = bisect.bisect_left(
                self.ad_cumulative_weights, rng.random() * self.ad_cumulative_weights[-1]
            )
            ad_number = min(ad_number, spec.ad_count - 1)
            user_number = self._pick_user(ad_number, shown_ms)
            ad_id, user_id = _ad_id(ad_number), _user_id(user_number)
            category, delay_ms = self._draw_delay(rng)
            self._send_event(
                topic=spec.topics.impressions,
                partition_count=spec.partitions.impressions,
                key=user_id,
                payload={
                    "event_id": self._next_event_id("impression"),
                    "ad_id": ad_id,
                    "user_id": user_id,
                    "shown_at": _format_ms(shown_ms),
                },
                shape=_IMPRESSION_SHAPE,
                event_ms=shown_ms,
                delivery_ms=shown_ms + delay_ms,
                kind=category,
                fault_rng=self.ad_fault_rng,
            )
            self._maybe_click(ad_number, user_number, shown_ms)

    def _maybe_click(self, ad_number: int, user_number: int, shown_ms: int) -> None:
        spec, rng = self.spec, self.ad_rng
        click_draw = rng.random()
        # Click times are clipped to the scenario, which covers event times before its end only:
        # the configured shares then hold for every impression that can still be clicked in time,
        # instead of strays (6-30 min out) mostly falling past the end of a short scenario.
        last_ms = self.end_ms - 1 - shown_ms
        if click_draw < spec.click_through:
            earliest_ms, latest_ms = 1_000, min(self.match_interval_ms - 1_000, last_ms)
        elif click_draw < spec.click_through + spec.stray_click_share:
            earliest_ms, latest_ms = self.stray_min_ms, min(self.stray_max_ms, last_ms)
        else:
            return
        click_offset_ms = rng.randint(earliest_ms, max(earliest_ms, latest_ms))
        if click_draw < spec.click_through:
            kind, delay_ms = self._draw_delay(rng)
        else:
            kind, delay_ms = STRAY_CLICK, rng.randint(0, self.on_time_max_ms)
        if latest_ms < earliest_ms:
            return
        clicked_ms = shown_ms + click_offset_ms
        event_id = self._next_event_id("click")
        if kind == STRAY_CLICK:
            self.strays_by_pair.setdefault((ad_number, user_number), []).append((clicked_ms, event_id))
        user_id = _user_id(user_number)
        self._send_event(
            topic=spec.topics.clicks,
            partition_count=spec.partitions.clicks,
            key=user_id,
            payload={
                "event_id": event_id,
                "ad_id": _ad_id(ad_number),
                "user_id": user_id,
                "clicked_at": _format_ms(clicked_ms),
            },
            shape=_CLICK_SHAPE,
            event_ms=clicked_ms,
            delivery_ms=clicked_ms + delay_ms,
            kind=kind,
            fault_rng=self.ad_fault_rng,
        )

    def _in_guarded_interval(self, clicked_ms: int, shown_ms: int) -> bool:
        return shown_ms - _STRAY_GUARD_MS <= clicked_ms <= shown_ms + self.match_interval_ms + _STRAY_GUARD_MS

    def _stray_would_match(self, pair: tuple[int, int], shown_ms: int) -> bool:
        pending_strays = self.strays_by_pair.get(pair, ())
        return any(self._in_guarded_interval(clicked_ms, shown_ms) for clicked_ms, _ in pending_strays)

    def _pick_user(self, ad_number: int, shown_ms: int) -> int:
        """A user for a new impression that keeps every pending stray click unmatched."""
        for _ in range(_USER_PICK_ATTEMPTS):
            user_number = self.ad_rng.randrange(self.spec.user_count)
            if not self._stray_would_match((ad_number, user_number), shown_ms):
                return user_number
        # Too few users and ads to dodge them: withdraw the strays this impression would match, so
        # "stray clicks never match" holds at the cost of a slightly lower stray share.
        pair = (ad_number, user_number)
        keep = []
        for clicked_ms, event_id in self.strays_by_pair.get(pair, ()):
            if self._in_guarded_interval(clicked_ms, shown_ms):
                self.withdrawn_event_ids.add(event_id)
            else:
                keep.append((clicked_ms, event_id))
        self.strays_by_pair[pair] = keep
        return user_number

    def _prune_strays(self, slot_start_ms: int) -> None:
        # Impressions from now on are shown at or after slot_start_ms, so older strays cannot match them.
        oldest_relevant_ms = slot_start_ms - _STRAY_GUARD_MS
        self.strays_by_pair = {
            pair: still_relevant
            for pair, strays in self.strays_by_pair.items()
            if (still_relevant := [stray for stray in strays if stray[0] >= oldest_relevant_ms])
        }


def recent_scenario(seed: int, match_interval_s: float, duration_s: float = 120.0) -> ScenarioSpec:
    """``duration_s`` of events ending now, 10 sensor readings and 5 impressions a second: enough that
    a streaming app's first batch carries every kind of row, few enough to produce in seconds."""
    return ScenarioSpec(
        seed=seed,
        start=datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=duration_s),
        duration_s=duration_s,
        sensor_rate=10,
        ad_rate=5,
        match_interval_s=match_interval_s,
    )


def generate_chunks(spec: ScenarioSpec, chunk_seconds: float = 60.0) -> Iterator[list[Record]]:
    """Yield the scenario's records in delivery order, cut into chunks of ``chunk_seconds`` of
    delivery time. Memory stays bounded by the records in flight rather than the whole scenario,
    and the concatenated chunks equal ``generate(spec)`` for any chunk size."""
    spec.validate()
    chunk_ms = _seconds_to_ms(chunk_seconds)
    if chunk_ms < 1:
        raise ValueError(f"chunk_seconds must be at least 0.001, got {chunk_seconds}")
    return _ScenarioRun(spec).chunks(chunk_ms)


def iter_generate(spec: ScenarioSpec) -> Iterator[Record]:
    """Records one by one in delivery order, without materialising the scenario."""
    for chunk in generate_chunks(spec):
        yield from chunk


def generate(spec: ScenarioSpec) -> list[Record]:
    """All records sorted by delivery time (ties in creation order); same spec, same list."""
    return list(iter_generate(spec))


def summarize(records: Iterable[Record]) -> dict[str, int]:
    """Counts under ``total``, ``kind:<kind>`` and ``topic:<topic>``, sorted by key."""
    counts: Counter[str] = Counter()
    for record in records:
        counts["total"] += 1
        counts[f"kind:{record.kind}"] += 1
        counts[f"topic:{record.topic}"] += 1
    return dict(sorted(counts.items()))


# ---------------------------------------------------------------------------------------------------
# Sinks


class _TopicFileWriter:
    """Writes one topic's part files; each appears under its final name only once complete."""

    def __init__(self, directory: Path, records_per_file: int | None) -> None:
        self.directory = directory
        self.records_per_file = records_per_file
        directory.mkdir(parents=True, exist_ok=True)
        # Continue numbering after existing parts: a file stream has already seen those names and
        # would silently ignore a rewritten file.
        existing = [int(path.stem.removeprefix("part-")) for path in directory.glob("part-*.jsonl")]
        self.next_part = max(existing, default=-1) + 1
        self.handle: TextIO | None = None
        self.temp_path: Path | None = None
        self.final_path: Path | None = None
        self.lines_in_file = 0
        self.completed: list[Path] = []

    def write(self, value: bytes) -> None:
        if b"\n" in value or b"\r" in value:
            raise ValueError(f"record value contains a line break and cannot be a JSONL line: {value!r}")
        if self.handle is None:
            name = f"part-{self.next_part:05d}.jsonl"
            self.next_part += 1
            self.final_path = self.directory / name
            # The leading dot hides the file from Spark's file source until the rename.
            self.temp_path = self.directory / f".{name}.tmp"
            self.handle = self.temp_path.open("w", encoding="utf-8", newline="\n")
        self.handle.write(value.decode("utf-8"))
        self.handle.write("\n")
        self.lines_in_file += 1
        if self.records_per_file is not None and self.lines_in_file >= self.records_per_file:
            self.finish_file()

    def finish_file(self) -> None:
        if self.handle is None or self.temp_path is None or self.final_path is None:
            return
        self.handle.flush()
        os.fsync(self.handle.fileno())
        self.handle.close()
        os.replace(self.temp_path, self.final_path)
        self.completed.append(self.final_path)
        self.handle, self.temp_path, self.lines_in_file = None, None, 0

    def abandon(self) -> None:
        if self.handle is not None:
            self.handle.close()
        if self.temp_path is not None:
            self.temp_path.unlink(missing_ok=True)
        self.handle, self.temp_path = None, None


def write_jsonl(records: Iterable[Record], out_dir: Path, records_per_file: int | None = None) -> list[Path]:
    """Write ``out_dir/<topic>/part-NNNNN.jsonl`` files, one value per line in delivery order.

    Each file is written under a dot-prefixed temporary name and renamed when complete, so a Spark
    file stream watching the folder never reads a half-written file. Returns the files written,
    sorted by path.
    """
    if records_per_file is not None and records_per_file < 1:
        raise ValueError(f"records_per_file must be at least 1, got {records_per_file}")
    writers: dict[str, _TopicFileWriter] = {}
    try:
        for record in records:
            writer = writers.get(record.topic)
            if writer is None:
                writer = writers[record.topic] = _TopicFileWriter(out_dir / record.topic, records_per_file)
            writer.write(record.value)
        for writer in writers.values():
            writer.finish_file()
    except BaseException:
        for writer in writers.values():
            writer.abandon()
        raise
    return sorted(path for writer in writers.values() for path in writer.completed)


def produce_to_kafka(
    records: Iterable[Record],
    client_config: Mapping[str, str],
    *,
    realtime: bool = False,
    on_wall_clock: bool = False,
    progress: Callable[[int], None] | None = None,
    flush_timeout_s: float = 120.0,
) -> int:
    """Send records to their explicit partitions with CreateTime = delivery_time; return the count.

    ``client_config`` is the cluster's librdkafka settings (``PipelineConfig.kafka_client_config()``:
    bootstrap servers and security); they win over the producer defaults here.

    ``realtime`` paces sends to the records' delivery times relative to the first record; otherwise
    they go out as fast as the producer accepts them. ``on_wall_clock`` (with ``realtime``) paces them
    to the delivery times themselves on this machine's clock, for a scenario stamped "now": a record
    already due goes out at once, so time spent before the first send (generating, connecting) does
    not delay every later event by as much. Raises RuntimeError naming topic, partition and error as
    soon as a delivery report fails, or if records remain undelivered after the flush.

    Brokers delete by timestamp: with the default 7-day retention, a scenario whose start lies further
    in the past is eligible for deletion as soon as it is written, so live runs should pass a recent
    ``ScenarioSpec.start``.
    """
    from confluent_kafka import Producer

    producer = Producer(
        {
            # Idempotence keeps retried batches in order, so a partition sees the generated order.
            "enable.idempotence": True,
            "linger.ms": 20,
            **client_config,
        }
    )

    failures: list[str] = []

    def on_delivery(error: Any, message: Any) -> None:
        if error is not None:
            failures.append(f"topic {message.topic()} partition {message.partition()}: {error}")

    def raise_on_failure() -> None:
        if failures:
            more = f" (and {len(failures) - 1} more failures)" if len(failures) > 1 else ""
            raise RuntimeError(f"Kafka delivery failed for {failures[0]}{more}")

    sent = 0
    last_progress = time.monotonic()
    # Seconds to add to a record's delivery time (epoch) to get the wall-clock second it is due.
    due_shift: float | None = 0.0 if on_wall_clock else None

    def report_progress(force: bool = False) -> None:
        nonlocal last_progress
        now = time.monotonic()
        if progress is not None and (force or now - last_progress >= 1.0):
            progress(sent)
            last_progress = now

    for record in records:
        if realtime:
            delivery = record.delivery_time.timestamp()
            if due_shift is None:
                due_shift = time.time() - delivery
            due = delivery + due_shift
            while (remaining := due - time.time()) > 0:
                # Waiting inside poll() keeps delivery reports flowing during pauses.
                producer.poll(min(remaining, 0.5))
                raise_on_failure()
                report_progress()
        while True:
            try:
                producer.produce(
                    record.topic,
                    value=record.value,
                    key=None if record.key is None else record.key.encode("utf-8"),
                    partition=record.partition,
                    timestamp=_datetime_to_ms(record.delivery_time),
                    on_delivery=on_delivery,
                )
                break
            except BufferError:
                # Local queue full: let librdkafka drain some deliveries, then retry this record.
                producer.poll(0.1)
                raise_on_failure()
        sent += 1
        producer.poll(0)
        raise_on_failure()
        report_progress()

    undelivered = producer.flush(flush_timeout_s)
    raise_on_failure()
    if undelivered:
        raise RuntimeError(f"{undelivered} records still undelivered after flushing for {flush_timeout_s} s")
    report_progress(force=True)
    return sent
