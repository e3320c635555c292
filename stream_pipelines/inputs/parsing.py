"""Event schemas and the shared parsing layer: raw Kafka rows in, typed rows or quarantine rows out.

Every record gets exactly one verdict. A record that fails the schema or a range check is kept with
its raw payload, the reason and its Kafka coordinates (``quarantine_reason`` is set); nothing is
dropped, and no bad record can fail a query. The same functions serve streams and batch reads.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    DoubleType,
    StringType,
    StructField,
    StructType,
)

from stream_pipelines.core.config import QualitySettings
from stream_pipelines.core.registry import SENSOR_QUARANTINE, struct_type

# The columns every source yields (Kafka or JSON-lines files), so downstream code never cares which.
RAW_SCHEMA = struct_type(
    "key string, value binary, topic string, partition int, offset bigint, kafka_timestamp timestamp, "
    "source_file string"
)
COORDINATES = ("topic", "partition", "offset", "kafka_timestamp", "source_file")

SENSOR_READING_SCHEMA = StructType(
    [
        StructField("event_id", StringType()),
        StructField("sensor_id", StringType()),
        StructField("temperature", DoubleType()),
        StructField("ts", StringType()),
    ]
)
IMPRESSION_SCHEMA = StructType(
    [
        StructField("event_id", StringType()),
        StructField("ad_id", StringType()),
        StructField("user_id", StringType()),
        StructField("shown_at", StringType()),
    ]
)
CLICK_SCHEMA = StructType(
    [
        StructField("event_id", StringType()),
        StructField("ad_id", StringType()),
        StructField("user_id", StringType()),
        StructField("clicked_at", StringType()),
    ]
)

QUARANTINE_SCHEMA = SENSOR_QUARANTINE.schema()

_CORRUPT = "_corrupt_record"


@dataclass(frozen=True)
class EventType:
    name: str
    schema: StructType
    time_field: str  # parsed to a timestamp of the same name

    @property
    def fields(self) -> list[str]:
        return [field.name for field in self.schema.fields]


SENSOR_READING = EventType("sensor_reading", SENSOR_READING_SCHEMA, "ts")
IMPRESSION = EventType("impression", IMPRESSION_SCHEMA, "shown_at")
CLICK = EventType("click", CLICK_SCHEMA, "clicked_at")


def parse_events(raw: DataFrame, event_type: EventType, quality: QualitySettings) -> DataFrame:
    """Typed event fields, the coordinates, ``payload`` and ``quarantine_reason`` (null when valid)."""
    schema_with_corrupt = StructType([*event_type.schema.fields, StructField(_CORRUPT, StringType())])
    payload = F.col("value").cast("string")
    parsed = raw.select(
        "key",
        "value",
        *COORDINATES,
        payload.alias("payload"),
        F.from_json(payload, schema_with_corrupt, {"columnNameOfCorruptRecord": _CORRUPT}).alias("_event"),
    )
    event_time = F.try_to_timestamp(F.col(f"_event.{event_type.time_field}"))
    typed = [
        (event_time if name == event_type.time_field else F.col(f"_event.{name}")).alias(name)
        for name in event_type.fields
    ]
    return parsed.select(
        *typed,
        "key",
        "value",
        *COORDINATES,
        "payload",
        _reason(event_type, quality, event_time).alias("quarantine_reason"),
    )


def valid_events(parsed: DataFrame, event_type: EventType) -> DataFrame:
    return _rows_where(parsed, F.col("quarantine_reason").isNull(), *event_type.fields, *COORDINATES)


def quarantined_events(parsed: DataFrame, event_type: EventType) -> DataFrame:
    return _rows_where(
        parsed,
        F.col("quarantine_reason").isNotNull(),
        F.lit(event_type.name).alias("event_type"),
        F.col("quarantine_reason").alias("reason"),
        "payload",
        F.col("value").alias("raw_value"),
        "key",
        *COORDINATES,
    ).withColumn("quarantined_at", F.current_timestamp())


def _rows_where(parsed: DataFrame, condition: Column, *columns: Column | str) -> DataFrame:
    """``columns`` of the rows of ``parsed`` where ``condition`` holds, the parse run once per row.

    A plain ``where`` on ``quarantine_reason`` lets Spark's optimizer push the filter below the
    projection that parses the JSON and inline the parse into the condition once for every field the
    verdict reads (34 JSON parses in the plan): 25.7 against 5.9 us of CPU a row. The optimizer does
    not push a filter through a generator's output, so each row becomes a one-row array when it is
    kept and null when not, and ``inline`` yields the kept rows.
    """
    row = F.struct(*columns)
    return parsed.select(F.inline(F.when(condition, F.array(row))))


def _reason(event_type: EventType, quality: QualitySettings, event_time: Column) -> Column:
    event = F.col("_event")
    as_map = F.from_json(F.col("payload"), "map<string,string>")
    corrupt = event[_CORRUPT].isNotNull()

    # A field that is present in the JSON but null after typed parsing had the wrong type.
    wrong_types = F.concat_ws(
        ", ",
        *[
            F.when(event[name].isNull() & as_map[name].isNotNull(), F.concat(F.lit(f"{name}="), as_map[name]))
            for name in event_type.fields
        ],
    )
    missing = F.concat_ws(", ", *[F.when(event[name].isNull(), F.lit(name)) for name in event_type.fields])
    earliest = F.to_timestamp(F.lit(quality.earliest_event_time))
    latest_plausible = F.col("kafka_timestamp") + F.expr(
        f"INTERVAL {quality.max_clock_skew.milliseconds} MILLISECONDS"
    )
    checks: list[tuple[Column, Column]] = [
        (F.col("value").isNull(), F.lit("empty record: the message has no value")),
        (corrupt & as_map.isNull(), F.lit("broken_json: the payload is not a JSON object")),
        (corrupt, F.concat(F.lit("wrong_type: "), wrong_types)),
        (F.length(missing) > 0, F.concat(F.lit("missing_field: "), missing)),
        (
            event_time.isNull(),
            F.concat(F.lit(f"bad_timestamp: {event_type.time_field}="), event[event_type.time_field]),
        ),
        (
            event_time < earliest,
            F.concat(
                F.lit(f"out_of_range: {event_type.time_field}="),
                event[event_type.time_field],
                F.lit(f" is before {quality.earliest_event_time}"),
            ),
        ),
        (
            F.col("kafka_timestamp").isNotNull() & (event_time > latest_plausible),
            F.concat(
                F.lit(f"out_of_range: {event_type.time_field}="),
                event[event_type.time_field],
                F.lit(f" is more than {quality.max_clock_skew} ahead of its arrival"),
            ),
        ),
    ]
    if "temperature" in event_type.fields:
        temperature = event["temperature"]
        checks.append(
            (
                ~temperature.between(quality.temperature_min, quality.temperature_max) | F.isnan(temperature),
                F.concat(
                    F.lit("out_of_range: temperature="),
                    temperature.cast("string"),
                    F.lit(f" outside [{quality.temperature_min}, {quality.temperature_max}]"),
                ),
            )
        )
    reason: Column = F.lit(None).cast("string")
    for condition, message in reversed(checks):
        reason = F.when(condition, message).otherwise(reason)
    return reason
