"""Tests for the deterministic event generator and the Kafka-compatible partitioner (no broker needed)."""

from __future__ import annotations

import itertools
import json
import sys
import time
import types
from collections import defaultdict
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from stream_pipelines.devtools.generator import (
    BURST,
    DUPLICATE,
    LATE_BEYOND,
    LATE_WITHIN,
    MALFORMED_PREFIX,
    MALFORMED_REASONS,
    ON_TIME,
    PLAUSIBLE_TEMPERATURE_C,
    STRAY_CLICK,
    UNKNOWN_SENSOR,
    DelayMix,
    Record,
    ScenarioSpec,
    format_ts,
    generate,
    generate_chunks,
    produce_to_kafka,
    summarize,
    write_jsonl,
    write_sensor_metadata,
)
from stream_pipelines.devtools.partitioning import kafka_default_partition, murmur2, to_positive

LOCALHOST = {"bootstrap.servers": "localhost:9092"}

REPO_ROOT = Path(__file__).resolve().parents[2]
DELAY_KINDS = (ON_TIME, LATE_WITHIN, LATE_BEYOND)
TIME_FIELDS = {"sensors": "ts", "impressions": "shown_at", "clicks_ads": "clicked_at"}
REQUIRED_FIELDS = {
    "sensors": ("event_id", "sensor_id", "temperature", "ts"),
    "impressions": ("event_id", "ad_id", "user_id", "shown_at"),
    "clicks_ads": ("event_id", "ad_id", "user_id", "clicked_at"),
}
LARGE_SPEC = ScenarioSpec(duration_s=900, sensor_rate=30, ad_rate=15)


@pytest.fixture(scope="module")
def large_records() -> list[Record]:
    return generate(LARGE_SPEC)


def _ms(delta: timedelta) -> int:
    return delta // timedelta(milliseconds=1)


def _delay_ms(record: Record) -> int:
    assert record.event_time is not None
    return _ms(record.delivery_time - record.event_time)


def _is_malformed(record: Record) -> bool:
    return record.kind.startswith(MALFORMED_PREFIX)


def _parse_ts(text: str) -> datetime:
    return datetime.fromisoformat(text)


def _originals_by_id(records: list[Record]) -> dict[str, Record]:
    return {
        r.event_id: r
        for r in records
        if r.event_id is not None and not _is_malformed(r) and r.kind != DUPLICATE
    }


# ---------------------------------------------------------------------------------------------------
# Partitioner


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("21", -973932308),
        ("foobar", -790332482),
        ("a-little-bit-long-string", -985981536),
        ("a-little-bit-longer-string", -1486304829),
        ("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
        ("abc", 479470107),
    ],
)
def test_murmur2_matches_kafka_vectors(text: str, expected: int) -> None:
    assert murmur2(text.encode("utf-8")) == expected


def test_default_partition_clears_sign_bit_then_takes_modulo() -> None:
    assert to_positive(-973932308) == 1173551340
    assert to_positive(-(2**31)) == 0
    assert kafka_default_partition(b"21", 7) == 1173551340 % 7
    assert kafka_default_partition(b"abc", 10) == 479470107 % 10
    with pytest.raises(ValueError, match="num_partitions"):
        kafka_default_partition(b"abc", 0)


# ---------------------------------------------------------------------------------------------------
# Determinism and ordering


def test_same_seed_gives_identical_records_and_other_seed_differs() -> None:
    spec = ScenarioSpec(duration_s=120)
    first, second = generate(spec), generate(spec)
    assert first == second
    assert [r.value for r in first] == [r.value for r in second]
    other = generate(replace(spec, seed=8))
    assert [r.value for r in other] != [r.value for r in first]


def test_chunked_generation_concatenates_to_generate() -> None:
    spec = ScenarioSpec(duration_s=240, mix=DelayMix(burst_share=0.1, burst_seconds=60))
    chunks = list(generate_chunks(spec, chunk_seconds=7))
    assert len(chunks) > 10
    assert [r for chunk in chunks for r in chunk] == generate(spec)
    for chunk in chunks:
        assert chunk
        assert chunk[-1].delivery_time - chunk[0].delivery_time < timedelta(seconds=7)


def test_records_sorted_by_delivery_with_out_of_order_event_times(large_records: list[Record]) -> None:
    deliveries = [r.delivery_time for r in large_records]
    assert deliveries == sorted(deliveries)
    for topic in TIME_FIELDS:
        event_times = [r.event_time for r in large_records if r.topic == topic and r.event_time is not None]
        assert any(later < earlier for earlier, later in itertools.pairwise(event_times)), topic


def test_valid_payloads_match_record_metadata(large_records: list[Record]) -> None:
    start, end = LARGE_SPEC.start, LARGE_SPEC.start + timedelta(seconds=LARGE_SPEC.duration_s)
    for record in large_records:
        text = record.value.decode("utf-8")
        assert "\n" not in text and "\r" not in text
        if _is_malformed(record):
            continue
        payload = json.loads(text)
        assert tuple(payload) == REQUIRED_FIELDS[record.topic]
        assert payload["event_id"] == record.event_id
        assert record.event_time is not None
        assert payload[TIME_FIELDS[record.topic]] == format_ts(record.event_time)
        assert start <= record.event_time < end
        assert record.delivery_time >= record.event_time
        if record.topic == "sensors":
            assert isinstance(payload["temperature"], float)
            low, high = PLAUSIBLE_TEMPERATURE_C
            assert low <= payload["temperature"] <= high
            assert record.key == payload["sensor_id"]
        else:
            assert record.key == payload["user_id"]


def test_format_ts() -> None:
    moment = datetime(2026, 11, 21, 12, 0, 0, 123456, tzinfo=UTC)
    assert format_ts(moment) == "2026-11-21T12:00:00.123Z"
    assert format_ts(moment.astimezone(timezone(timedelta(hours=5)))) == "2026-11-21T12:00:00.123Z"
    with pytest.raises(ValueError, match="timezone-aware"):
        format_ts(datetime(2026, 1, 1))


# ---------------------------------------------------------------------------------------------------
# Delay mix


def test_observed_kind_shares_match_configured_mix(large_records: list[Record]) -> None:
    mix = LARGE_SPEC.mix
    counts = summarize(large_records)
    delay_classified = sum(counts.get(f"kind:{kind}", 0) for kind in DELAY_KINDS)
    logical = sum(1 for r in large_records if not _is_malformed(r) and r.kind != DUPLICATE)
    malformed = sum(1 for r in large_records if _is_malformed(r))
    sensor_readings = sum(
        1 for r in large_records if r.topic == "sensors" and not _is_malformed(r) and r.kind != DUPLICATE
    )
    assert delay_classified > 40_000
    assert counts["kind:late_within"] / delay_classified == pytest.approx(mix.late_within_share, abs=0.006)
    assert counts["kind:late_beyond"] / delay_classified == pytest.approx(mix.late_beyond_share, abs=0.004)
    assert counts["kind:duplicate"] / logical == pytest.approx(mix.duplicate_share, abs=0.004)
    assert malformed / logical == pytest.approx(mix.malformed_share, abs=0.003)
    assert counts["kind:unknown_sensor"] / sensor_readings == pytest.approx(
        mix.unknown_sensor_share, abs=0.003
    )
    assert counts["total"] == len(large_records)
    assert sum(v for k, v in counts.items() if k.startswith("topic:")) == len(large_records)


def test_delays_lie_in_configured_ranges(large_records: list[Record]) -> None:
    mix = LARGE_SPEC.mix
    on_time_max = mix.on_time_max_s * 1000
    ranges_ms = {
        ON_TIME: (0, on_time_max),
        LATE_WITHIN: (on_time_max + 1, mix.late_within_max_s * 1000),
        LATE_BEYOND: (mix.late_beyond_min_s * 1000 + 1, mix.late_beyond_max_s * 1000),
        UNKNOWN_SENSOR: (0, on_time_max),
        STRAY_CLICK: (0, on_time_max),
    }
    delays_by_kind: dict[str, list[int]] = defaultdict(list)
    for record in large_records:
        if record.kind in ranges_ms:
            delays_by_kind[record.kind].append(_delay_ms(record))
        elif _is_malformed(record) and record.event_time is not None:
            delays_by_kind["malformed"].append(_delay_ms(record))
    for kind, (low, high) in ranges_ms.items():
        assert delays_by_kind[kind], kind
        assert low <= min(delays_by_kind[kind]) and max(delays_by_kind[kind]) <= high, kind
    assert min(delays_by_kind["malformed"]) >= 0
    assert max(delays_by_kind["malformed"]) <= on_time_max
    # The ranges are actually used, not just respected: late ones spread well into their range.
    assert max(delays_by_kind[LATE_BEYOND]) > 800_000
    assert min(delays_by_kind[LATE_BEYOND]) < 300_000


def test_duplicates_repeat_their_original_a_few_seconds_later(large_records: list[Record]) -> None:
    originals = _originals_by_id(large_records)
    duplicates = [r for r in large_records if r.kind == DUPLICATE]
    assert duplicates
    for duplicate in duplicates:
        original = originals[duplicate.event_id]
        assert (duplicate.topic, duplicate.partition, duplicate.key) == (
            original.topic,
            original.partition,
            original.key,
        )
        assert duplicate.value == original.value
        assert duplicate.event_time == original.event_time
        assert 1000 <= _ms(duplicate.delivery_time - original.delivery_time) <= 5000
    logical_ids = [r.event_id for r in large_records if not _is_malformed(r) and r.kind != DUPLICATE]
    assert len(logical_ids) == len(set(logical_ids))


def test_every_malformed_kind_really_fails(large_records: list[Record]) -> None:
    malformed = [r for r in large_records if _is_malformed(r)]
    reasons_per_topic = defaultdict(set)
    for record in malformed:
        reason = record.kind.removeprefix(MALFORMED_PREFIX)
        reasons_per_topic[record.topic].add(reason)
        assert record.key is not None
        text = record.value.decode("utf-8")
        time_field = TIME_FIELDS[record.topic]
        if reason == "broken_json":
            with pytest.raises(json.JSONDecodeError):
                json.loads(text)
            assert record.event_time is None and record.event_id is None
            continue
        payload = json.loads(text)
        assert payload["event_id"] == record.event_id
        if reason == "missing_field":
            missing = set(REQUIRED_FIELDS[record.topic]) - set(payload)
            assert len(missing) == 1
            assert (record.event_time is None) == (time_field in missing)
        elif reason == "wrong_type":
            if record.topic == "sensors":
                assert isinstance(payload["temperature"], str)
            else:
                assert not isinstance(payload[time_field], str)
                assert record.event_time is None
        elif reason == "absurd_value":
            low, high = PLAUSIBLE_TEMPERATURE_C
            absurd_temperature = record.topic == "sensors" and not low <= payload["temperature"] <= high
            absurd_year = _parse_ts(payload[time_field]).year in (1970, 2100)
            assert absurd_temperature != absurd_year
            assert (record.event_time is None) == absurd_year
        else:
            pytest.fail(f"unexpected malformed kind {record.kind}")
    assert reasons_per_topic["sensors"] == set(MALFORMED_REASONS)
    assert set(reasons_per_topic) == set(TIME_FIELDS)
    assert sum(1 for r in malformed if r.kind == "malformed:absurd_value" and r.event_time is None) > 0


# ---------------------------------------------------------------------------------------------------
# Keys, partitions, metadata


def test_each_key_lives_on_its_default_partition(large_records: list[Record]) -> None:
    partition_counts = {"sensors": 3, "impressions": 3, "clicks_ads": 3}
    partitions_by_key: dict[tuple[str, str], set[int]] = defaultdict(set)
    for record in large_records:
        assert record.key is not None
        partitions_by_key[(record.topic, record.key)].add(record.partition)
    assert len({key for topic, key in partitions_by_key if topic == "sensors"}) >= 50
    for (topic, key), partitions in partitions_by_key.items():
        assert partitions == {kafka_default_partition(key.encode("utf-8"), partition_counts[topic])}
    used = {(r.topic, r.partition) for r in large_records}
    assert used == {(topic, p) for topic in partition_counts for p in range(3)}


def test_sensor_metadata_csv_matches_writer_and_generated_ids(
    tmp_path: Path, large_records: list[Record]
) -> None:
    shipped = REPO_ROOT / "conf" / "sensor_metadata.csv"
    written = tmp_path / "meta" / "sensor_metadata.csv"
    write_sensor_metadata(written, 50, seed=7)
    assert shipped.read_bytes() == written.read_bytes()

    lines = shipped.read_text(encoding="utf-8").splitlines()
    assert lines[0] == "sensor_id,location,building,floor"
    rows = [line.split(",") for line in lines[1:]]
    assert [row[0] for row in rows] == [f"sensor-{n:04d}" for n in range(50)]
    assert all(row[2] in {"B1", "B2", "B3", "B4"} and 0 <= int(row[3]) <= 9 for row in rows)
    assert len({row[1] for row in rows}) > 3
    smaller = tmp_path / "small.csv"
    write_sensor_metadata(smaller, 10, seed=7)
    assert smaller.read_text().splitlines() == lines[:11]
    write_sensor_metadata(smaller, 50, seed=8)
    assert smaller.read_text() != shipped.read_text()

    known = {row[0] for row in rows}
    readings = [
        r for r in large_records if r.topic == "sensors" and r.kind != DUPLICATE and not _is_malformed(r)
    ]
    known_seen = {r.key for r in readings if r.kind != UNKNOWN_SENSOR}
    unknown_seen = {r.key for r in readings if r.kind == UNKNOWN_SENSOR}
    assert known_seen == known
    assert unknown_seen and not unknown_seen & known


# ---------------------------------------------------------------------------------------------------
# Scenario features


def test_produce_with_no_clicks_keeps_the_impressions_rate_and_sends_no_click() -> None:
    from stream_pipelines.cli import _build_parser
    from stream_pipelines.core.config import load_config
    from stream_pipelines.devtools.commands import scenario_from_args

    config = load_config("local")
    options = ["produce", "--duration", "120", "--start", "2026-01-01T00:00:00Z"]
    with_clicks = generate(scenario_from_args(config, _build_parser().parse_args(options)))
    without = generate(scenario_from_args(config, _build_parser().parse_args([*options, "--no-clicks"])))
    clicks = config.kafka.topics.clicks.name
    impressions = config.kafka.topics.impressions.name
    assert any(r.topic == clicks for r in with_clicks), "the default scenario has clicks to take away"
    assert not [r for r in without if r.topic == clicks]
    # The same rate; not the same records: duplicates and malformed copies are drawn from one stream.
    assert sum(r.topic == impressions for r in without) == pytest.approx(
        sum(r.topic == impressions for r in with_clicks), rel=0.02
    )


def test_stalled_partition_receives_nothing_after_the_stall() -> None:
    spec = ScenarioSpec(duration_s=300, stalled_partition=1, stall_after_s=120)
    records = generate(spec)
    stall_at = spec.start + timedelta(seconds=120)
    sensors = [r for r in records if r.topic == "sensors"]
    stalled = [r for r in sensors if r.partition == 1]
    assert stalled and all(r.delivery_time < stall_at for r in stalled)
    assert all(r.event_time is None or r.event_time < stall_at for r in stalled)
    for partition in (0, 2):
        assert any(
            r.event_time and r.event_time >= stall_at + timedelta(seconds=60)
            for r in sensors
            if r.partition == partition
        )
    # The stall is the only difference: the other partitions are exactly what they would have been.
    unstalled = generate(replace(spec, stalled_partition=None))
    assert [r for r in unstalled if r.topic == "sensors" and r.partition != 1] == [
        r for r in sensors if r.partition != 1
    ]
    assert any(r.partition == 1 and r.delivery_time >= stall_at for r in unstalled if r.topic == "sensors")


def test_offline_sensors_flush_their_buffer_at_once() -> None:
    spec = ScenarioSpec(duration_s=600, mix=DelayMix(burst_share=0.1, burst_seconds=120))
    records = generate(spec)
    bursts_by_sensor: dict[str, list[Record]] = defaultdict(list)
    for record in records:
        if record.kind == BURST:
            bursts_by_sensor[record.key or ""].append(record)
    assert len(bursts_by_sensor) == 5
    for sensor_id, buffered in bursts_by_sensor.items():
        flush_times = {r.delivery_time for r in buffered}
        assert len(flush_times) == 1
        flush_at = flush_times.pop()
        offline_from = flush_at - timedelta(seconds=120)
        assert all(offline_from <= r.event_time < flush_at for r in buffered if r.event_time)
        # 50 sensors share 20 readings/s, so each reads every 2.5 s: about 48 per 120 s.
        assert 40 <= len(buffered) <= 50
        delivered_normally = [
            r
            for r in records
            if r.key == sensor_id
            and r.kind in DELAY_KINDS
            and r.event_time
            and offline_from <= r.event_time < flush_at
        ]
        assert delivered_normally == []


def test_clicks_fall_inside_their_interval_and_strays_outside(large_records: list[Record]) -> None:
    spec = LARGE_SPEC
    interval = timedelta(seconds=spec.match_interval_s)
    end = spec.start + timedelta(seconds=spec.duration_s)
    impressions_by_pair: dict[tuple[str, str], list[datetime]] = defaultdict(list)
    originals = _originals_by_id(large_records)
    for record in originals.values():
        if record.topic == "impressions":
            payload = json.loads(record.value)
            impressions_by_pair[(payload["ad_id"], payload["user_id"])].append(_parse_ts(payload["shown_at"]))

    matched = stray = 0
    for record in originals.values():
        if record.topic != "clicks_ads":
            continue
        payload = json.loads(record.value)
        clicked_at = _parse_ts(payload["clicked_at"])
        shown_times = impressions_by_pair[(payload["ad_id"], payload["user_id"])]
        if record.kind == STRAY_CLICK:
            stray += 1
            guard = timedelta(seconds=30)
            assert not any(shown - guard <= clicked_at <= shown + interval + guard for shown in shown_times)
            assert any(
                timedelta(minutes=6) <= clicked_at - shown <= timedelta(minutes=30) for shown in shown_times
            )
        else:
            matched += 1
            second = timedelta(seconds=1)
            assert any(shown + second <= clicked_at <= shown + interval - second for shown in shown_times)
        assert clicked_at < end

    impressions = sum(len(times) for times in impressions_by_pair.values())
    stray_eligible = sum(
        1 for times in impressions_by_pair.values() for shown in times if shown < end - timedelta(minutes=6)
    )
    assert matched / impressions == pytest.approx(spec.click_through, abs=0.015)
    assert stray / stray_eligible == pytest.approx(spec.stray_click_share, abs=0.015)


def test_strays_are_withdrawn_rather_than_matched_when_pairs_must_repeat() -> None:
    # Three users and one ad: impressions keep reusing the same pairs, so a later impression often
    # cannot dodge an earlier stray click and the generator must withdraw that click instead.
    spec = ScenarioSpec(
        duration_s=1800, user_count=3, ad_count=1, ad_rate=0.05, click_through=0.0, stray_click_share=0.8
    )
    records = generate(spec)
    guarded_interval = timedelta(seconds=spec.match_interval_s + 30)
    guard = timedelta(seconds=30)
    shown_by_user: dict[str | None, list[datetime]] = defaultdict(list)
    for record in records:
        if record.topic == "impressions" and not _is_malformed(record) and record.event_time:
            shown_by_user[record.key].append(record.event_time)
    strays = [r for r in records if r.kind == STRAY_CLICK]
    assert len(strays) >= 10
    for stray in strays:
        assert stray.event_time is not None
        assert not any(
            shown - guard <= stray.event_time <= shown + guarded_interval
            for shown in shown_by_user[stray.key]
        )
    # Click ids are numbered as clicks are made; withdrawn ones leave gaps.
    click_numbers = {int(r.event_id.rsplit("-", 1)[1]) for r in strays if r.event_id}
    assert len(click_numbers) < max(click_numbers) + 1


# ---------------------------------------------------------------------------------------------------
# Validation


@pytest.mark.parametrize(
    ("mix", "field_name"),
    [
        (DelayMix(late_within_share=0.7, late_beyond_share=0.5), "late_within_share"),
        (DelayMix(duplicate_share=-0.1), "duplicate_share"),
        (DelayMix(malformed_share=1.5), "malformed_share"),
        (DelayMix(late_within_max_s=4.0), "late_within_max_s"),
        (DelayMix(late_beyond_min_s=60.0), "late_beyond_min_s"),
        (DelayMix(late_beyond_max_s=240.0), "late_beyond_max_s"),
        (DelayMix(on_time_max_s=-1.0), "on_time_max_s"),
        (DelayMix(burst_seconds=0.0), "burst_seconds"),
    ],
)
def test_delay_mix_validate_names_the_field(mix: DelayMix, field_name: str) -> None:
    with pytest.raises(ValueError, match=field_name):
        mix.validate()


def test_default_mix_is_valid_and_invalid_specs_are_refused() -> None:
    DelayMix().validate()
    ScenarioSpec().validate()
    with pytest.raises(ValueError, match="late_within_share"):
        generate(ScenarioSpec(mix=DelayMix(late_within_share=2.0)))
    with pytest.raises(ValueError, match="stalled_partition"):
        generate(ScenarioSpec(stalled_partition=3))
    with pytest.raises(ValueError, match="start"):
        ScenarioSpec(start=datetime(2026, 1, 1)).validate()
    with pytest.raises(ValueError, match="stray_click_share"):
        ScenarioSpec(click_through=0.9, stray_click_share=0.2).validate()


# ---------------------------------------------------------------------------------------------------
# Sinks


def test_write_jsonl_round_trip(tmp_path: Path) -> None:
    records = generate(ScenarioSpec(duration_s=60))
    paths = write_jsonl(records, tmp_path, records_per_file=400)
    assert paths == sorted(paths)
    by_topic: dict[str, list[Path]] = defaultdict(list)
    for path in paths:
        assert path.parent.parent == tmp_path
        by_topic[path.parent.name].append(path)
    assert set(by_topic) == set(TIME_FIELDS)
    for topic, files in by_topic.items():
        assert [f.name for f in files] == [f"part-{n:05d}.jsonl" for n in range(len(files))]
        lines = [line for f in files for line in f.read_text(encoding="utf-8").split("\n")[:-1]]
        assert lines == [r.value.decode("utf-8") for r in records if r.topic == topic]
        assert all(len(f.read_text().splitlines()) <= 400 for f in files)
    assert len(by_topic["sensors"]) > 1
    assert not [p for p in tmp_path.rglob(".*")]

    # A second run adds files after the existing ones instead of rewriting names a stream already saw.
    before = {p: p.read_bytes() for p in paths}
    more = write_jsonl(records[:10], tmp_path)
    assert not set(more) & set(before)
    assert all(p.read_bytes() == content for p, content in before.items())


def test_write_jsonl_leaves_no_partial_file_on_failure(tmp_path: Path) -> None:
    good = generate(ScenarioSpec(duration_s=5))[:3]
    broken = replace(good[0], value=b'{"a":\n1}')
    with pytest.raises(ValueError, match="line break"):
        write_jsonl([*good, broken], tmp_path)
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


class _FakeMessage:
    def __init__(self, topic: str, partition: int) -> None:
        self._topic, self._partition = topic, partition

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition


class _FakeProducer:
    """Stands in for confluent_kafka.Producer; fails deliveries to ``fail_partition`` if set."""

    fail_partition: int | None = None
    instances: list[_FakeProducer] = []

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.produced: list[dict[str, Any]] = []
        self.unreported: list[tuple[Any, _FakeMessage]] = []
        _FakeProducer.instances.append(self)

    def produce(self, topic: str, **kwargs: Any) -> None:
        self.produced.append({"topic": topic, **kwargs})
        error = "Broker: Not leader for partition" if kwargs["partition"] == self.fail_partition else None
        self.unreported.append((kwargs["on_delivery"], (error, _FakeMessage(topic, kwargs["partition"]))))

    def poll(self, timeout: float = 0) -> int:
        reports, self.unreported = self.unreported, []
        for callback, (error, message) in reports:
            callback(error, message)
        return len(reports)

    def flush(self, timeout: float = 0) -> int:
        self.poll()
        return 0


@pytest.fixture
def fake_kafka(monkeypatch: pytest.MonkeyPatch) -> type[_FakeProducer]:
    module = types.ModuleType("confluent_kafka")
    module.Producer = _FakeProducer  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "confluent_kafka", module)
    monkeypatch.setattr(_FakeProducer, "instances", [])
    monkeypatch.setattr(_FakeProducer, "fail_partition", None)
    return _FakeProducer


def test_produce_sends_explicit_partition_key_and_create_time(fake_kafka: type[_FakeProducer]) -> None:
    records = generate(ScenarioSpec(duration_s=20))
    progress: list[int] = []
    sent = produce_to_kafka(
        records, {"bootstrap.servers": "localhost:9092", "linger.ms": 5}, progress=progress.append
    )
    assert sent == len(records)
    assert progress[-1] == len(records)
    (producer,) = fake_kafka.instances
    assert producer.config["bootstrap.servers"] == "localhost:9092"
    assert producer.config["linger.ms"] == 5
    for record, call in zip(records, producer.produced, strict=True):
        assert call["topic"] == record.topic
        assert call["partition"] == record.partition
        assert call["key"] == (record.key or "").encode("utf-8")
        assert call["value"] == record.value
        assert call["timestamp"] == _ms(record.delivery_time - datetime(1970, 1, 1, tzinfo=UTC))


def test_produce_raises_on_failed_delivery(fake_kafka: type[_FakeProducer]) -> None:
    fake_kafka.fail_partition = 2
    records = generate(ScenarioSpec(duration_s=20))
    failing_topic = next(r.topic for r in records if r.partition == 2)
    with pytest.raises(RuntimeError, match=f"topic {failing_topic} partition 2: Broker: Not leader"):
        produce_to_kafka(records, LOCALHOST)


def test_produce_realtime_paces_to_delivery_times(fake_kafka: type[_FakeProducer]) -> None:
    template = generate(ScenarioSpec(duration_s=5))[0]
    paced = [
        replace(template, delivery_time=template.delivery_time + timedelta(milliseconds=150 * n))
        for n in range(3)
    ]
    started = time.monotonic()
    assert produce_to_kafka(paced, LOCALHOST, realtime=True) == 3
    assert time.monotonic() - started >= 0.28


def test_produce_on_wall_clock_sends_due_records_at_once_and_later_ones_at_their_stamp(
    fake_kafka: type[_FakeProducer], monkeypatch: pytest.MonkeyPatch
) -> None:
    template = generate(ScenarioSpec(duration_s=5))[0]
    now = datetime.now(UTC)
    # Stamped 30 s ago (the time a caller spent before sending), then 0.4 s from now.
    records = [
        replace(template, delivery_time=now - timedelta(seconds=30)),
        replace(template, delivery_time=now + timedelta(milliseconds=400)),
    ]
    sent_at: list[float] = []
    monkeypatch.setattr(fake_kafka, "produce", lambda self, topic, **kwargs: sent_at.append(time.time()))
    assert produce_to_kafka(records, LOCALHOST, realtime=True, on_wall_clock=True) == 2
    assert sent_at[0] - now.timestamp() < 1.0
    assert sent_at[1] >= records[1].delivery_time.timestamp()
