"""Rows the driver holds, as a DataFrame built in the JVM: the nightly job's batch ranges and candidate
watermarks start no Python worker (``stream_pipelines.inputs.local_rows``)."""

from __future__ import annotations

import pytest

from stream_pipelines.inputs.local_rows import empty_frame, frame_of_rows
from stream_pipelines.reconciliation.ledger import FILE_BATCH_SCHEMA, KAFKA_BATCH_SCHEMA

pytestmark = pytest.mark.broker  # the session's Spark (its fixture starts the broker)


def lineage(frame) -> str:
    return frame._jdf.queryExecution().toRdd().toDebugString()


def test_rows_keep_their_schema_and_values_and_start_no_python_worker(spark):
    rows = [("sensors", 0, 0, 10, 7, 1_800_000_000_000, True), ("sensors", 1, 4, 9, 7, None, False)]

    frame = frame_of_rows(spark, rows, KAFKA_BATCH_SCHEMA)

    assert frame.schema == KAFKA_BATCH_SCHEMA
    assert [tuple(row) for row in frame.collect()] == rows
    assert "PythonRDD" not in lineage(frame)
    # What it replaces: a frame over a Python list is a Python RDD, whose actions start Python workers.
    assert "PythonRDD" in lineage(spark.createDataFrame(rows, KAFKA_BATCH_SCHEMA))


def test_no_rows_make_an_empty_frame_of_the_schema(spark):
    frame = empty_frame(spark, FILE_BATCH_SCHEMA)
    assert frame.schema == FILE_BATCH_SCHEMA and frame.count() == 0


def test_a_row_that_does_not_fit_its_schema_is_refused_by_name(spark):
    with pytest.raises(ValueError, match=r"a row of 2 values for the 4 fields \['batch_file', "):
        frame_of_rows(spark, [("only", "two")], FILE_BATCH_SCHEMA)
