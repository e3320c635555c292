"""The sensor metadata table (sensor_id, location, building, floor) as a Spark data source.

A plain ``spark.read.csv`` is read once when a stream-static join is planned; users want a changed
file to show up without restarting the query. This Python data source is re-read by every
micro-batch that joins against it, so a change lands within one trigger. Replace the file atomically
(write a temporary file, then rename); a missing file fails the query loudly instead of quietly
flagging every sensor as unknown.

No row is dropped quietly: a row with a bad floor keeps its sensor with ``metadata_problem`` set;
when a sensor_id appears twice the last row wins and the problem says so (a duplicate key would
otherwise duplicate every window it joins); a row without a sensor_id fails the read with its line.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from typing import TYPE_CHECKING, TextIO

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import IntegerType, StringType, StructField, StructType

from stream_pipelines.core import store

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

SENSOR_METADATA_SCHEMA = StructType(
    [
        StructField("sensor_id", StringType(), nullable=False),
        StructField("location", StringType()),
        StructField("building", StringType()),
        StructField("floor", IntegerType()),
        StructField("metadata_problem", StringType()),
    ]
)
REQUIRED_COLUMNS = ("sensor_id", "location", "building", "floor")
FORMAT_NAME = "sensor_metadata"


class SensorMetadataError(RuntimeError):
    pass


def _open_text(path: str) -> TextIO:
    """The file, for a local path, file://, or hdfs://<namenode>:<port>/... (read through the file layer,
    as the user Spark runs as): every Python worker opens it itself."""
    if path.startswith("file://"):
        path = path.removeprefix("file://")
    if store.scheme(path) == "hdfs":
        try:
            target = store.location(None, path)
        except store.StoreError as error:
            raise SensorMetadataError(f"sensor metadata at {path}: {error}") from None
        return io.TextIOWrapper(target.open("rb"), encoding="utf-8", newline="")
    if "://" in path:
        raise SensorMetadataError(
            f"sensor metadata at {path}: Python workers open it themselves, so it must be a local or "
            "mounted path (or file://...), or on HDFS as hdfs://<namenode>:<port>/..."
        )
    return open(path, newline="", encoding="utf-8")


def read_metadata_rows(path: str) -> list[tuple[str, str | None, str | None, int | None, str | None]]:
    """The metadata file as rows of SENSOR_METADATA_SCHEMA, one per sensor_id."""
    try:
        handle = _open_text(path)
    except FileNotFoundError:
        raise SensorMetadataError(f"sensor metadata file not found: {path}") from None
    with handle:
        reader = csv.DictReader(handle)
        missing = [name for name in REQUIRED_COLUMNS if name not in (reader.fieldnames or [])]
        if missing:
            raise SensorMetadataError(
                f"{path}: header lacks {', '.join(missing)} (found {reader.fieldnames})"
            )
        by_sensor: dict[str, tuple[str, str | None, str | None, int | None, str | None]] = {}
        for line_number, row in enumerate(reader, start=2):
            sensor_id = (row["sensor_id"] or "").strip()
            if not sensor_id:
                # A reference row without its key cannot be kept anywhere useful: a person must fix it.
                raise SensorMetadataError(f"{path}: line {line_number} has an empty sensor_id")
            problems = []
            floor_text = (row["floor"] or "").strip()
            try:
                floor = int(floor_text) if floor_text else None
            except ValueError:
                floor, problems = None, [f"line {line_number}: floor {floor_text!r} is not a whole number"]
            if sensor_id in by_sensor:
                problems.append(f"line {line_number}: sensor_id repeated; the last row is used")
            by_sensor[sensor_id] = (
                sensor_id,
                (row["location"] or "").strip() or None,
                (row["building"] or "").strip() or None,
                floor,
                "; ".join(problems) or None,
            )
    return list(by_sensor.values())


class _SensorMetadataReader(DataSourceReader):
    def __init__(self, path: str) -> None:
        self.path = path

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(0)]

    def read(self, partition: InputPartition) -> Iterator[tuple]:
        yield from read_metadata_rows(self.path)


class SensorMetadataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self) -> StructType:
        return SENSOR_METADATA_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return _SensorMetadataReader(self.options["path"])


def sensor_metadata_frame(spark: SparkSession, path: str) -> DataFrame:
    """A DataFrame over the metadata file that every micro-batch re-reads."""
    spark.dataSource.register(SensorMetadataSource)
    return spark.read.format(FORMAT_NAME).option("path", path).load()
