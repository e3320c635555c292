"""Rows the driver already holds (the batch log's offset ranges, candidate watermarks, an empty day) as a
DataFrame of a named schema, built in the JVM from Arrow.

``spark.createDataFrame`` over a Python list pickles the rows into a Python RDD: every action over
the frame then starts Python workers, the first of them a daemon. Over a few rows that took 1-4 s a
stage in the nightly job, seven stages a run. From an Arrow table the JVM decodes the rows itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType


def frame_of_rows(spark: SparkSession, rows: Iterable[Sequence[object]], schema: StructType) -> DataFrame:
    """``rows`` (tuples in the schema's field order) as a DataFrame of exactly ``schema``."""
    names = schema.fieldNames()
    records = []
    for row in rows:
        if len(row) != len(names):
            raise ValueError(f"a row of {len(row)} values for the {len(names)} fields {names}: {row!r}")
        records.append(dict(zip(names, row, strict=True)))
    table = pa.Table.from_pylist(records, schema=to_arrow_schema(schema))
    return spark.createDataFrame(table, schema)


def empty_frame(spark: SparkSession, schema: StructType) -> DataFrame:
    return frame_of_rows(spark, [], schema)
