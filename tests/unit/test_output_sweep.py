"""The output sweep: files a file sink's log does not list are removed once older than the grace period,
on a local disk and on the loopback S3 server, so a plain Parquet reader sees exactly the committed rows.

The sink folders are built by hand the way Spark's file sink leaves them after interrupted batches:
committed part files listed in ``_spark_metadata`` (absolute, percent-encoded URLs), plus unlisted ones,
one of them zero bytes.
"""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from stream_pipelines import cli
from stream_pipelines.checkpoint import format as checkpoint_format
from stream_pipelines.core import registry, store
from stream_pipelines.core.config import load_config
from stream_pipelines.tables import maintenance

DAY_FOLDER = "topic=sensors/arrival_date=2026-01-01"
# A partition value Spark escapes in the folder name (":" -> "%3A"); the log then encodes the "%".
ESCAPED_FOLDER = "topic=odd%3Aname/arrival_date=2026-01-01"
HOUR = 3600.0


@pytest.fixture
def config(stored_root):
    return load_config("local", stored_root, environ={})


def parquet_bytes(offsets: list[int]) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(pa.table({"offset": pa.array(offsets, pa.int64())}), buffer)
    return buffer.getvalue()


def url_of(config, name: str) -> str:
    """The file's URL as Spark's sink log writes it: absolute, scheme included, percent-encoded."""
    location = f"{registry.ARCHIVE.location(config)}/{name}".replace("%", "%25")
    return location if "://" in location else f"file:{location}"


def build_sink(config, committed: dict[str, list[int]], debris: dict[str, bytes]) -> Path:
    folder = store.location(config.spark.extra_conf, registry.ARCHIVE.location(config))
    for name, offsets in committed.items():
        store.write_atomically(folder / name, parquet_bytes(offsets))
    for name, data in debris.items():
        store.write_atomically(folder / name, data)
        if not store.on_object_store(folder):
            store.write_atomically(folder / (name.replace("part-", ".part-") + ".crc"), b"crc")
    log = "v1\n" + "\n".join(
        json.dumps({"path": url_of(config, name), "size": 1, "isDir": False, "action": "add"})
        for name in committed
    )
    store.write_atomically(folder / "_spark_metadata" / "0", log)
    return folder


def sweep_archive(config, grace_s: float, hours_later: float = 0.0, **options) -> maintenance.SinkSweep:
    """The sweep of the archive alone, as if run ``hours_later`` from now."""
    moment = time.time() + hours_later * HOUR
    return maintenance.sweep_outputs(config, grace_s, now=moment, datasets=[registry.ARCHIVE], **options)[0]


def rows_read_plainly(folder) -> list[int]:
    """What a reader that ignores the sink's log sees: every Parquet file in the folder."""
    if store.on_object_store(folder) or store.on_hdfs(folder):
        dataset = ds.dataset(folder.path, filesystem=folder.fs, format="parquet", partitioning="hive")
    else:
        dataset = ds.dataset(str(folder), format="parquet", partitioning="hive")
    return sorted(dataset.to_table(columns=["offset"]).column("offset").to_pylist())


COMMITTED = {
    f"{DAY_FOLDER}/part-00000-a.c000.snappy.parquet": [0, 1, 2],
    f"{DAY_FOLDER}/part-00001-b.c000.snappy.parquet": [3, 4],
    f"{ESCAPED_FOLDER}/part-00000-c.c000.snappy.parquet": [5],
}
DEBRIS = {
    f"{DAY_FOLDER}/part-00000-x.c000.snappy.parquet": parquet_bytes([3, 4]),  # a batch's first attempt
    f"{DAY_FOLDER}/part-00001-y.c000.snappy.parquet": b"",  # killed while opening its file
    f"{ESCAPED_FOLDER}/part-00000-z.c000.snappy.parquet": parquet_bytes([5, 6]),
}


def test_unlisted_files_past_the_grace_period_go_and_a_plain_reader_sees_the_committed_rows(config):
    folder = build_sink(config, COMMITTED, DEBRIS)
    with pytest.raises(pa.ArrowInvalid):
        rows_read_plainly(folder)  # the zero-byte file: what pyarrow does on such a folder today

    fresh = sweep_archive(config, HOUR)
    assert fresh.removed == [] and sorted(fresh.young) == sorted(DEBRIS)
    assert fresh.committed_files == len(COMMITTED)

    later = sweep_archive(config, HOUR, hours_later=2)
    assert sorted(item["file"] for item in later.removed) == sorted(DEBRIS)
    assert later.removed_bytes == sum(len(data) for data in DEBRIS.values())
    assert all(item["age_s"] > HOUR for item in later.removed)
    assert later.refused is None and later.young == []

    assert rows_read_plainly(folder) == [0, 1, 2, 3, 4, 5]
    left = store.files_under(folder)
    assert set(COMMITTED) <= set(left) and not set(DEBRIS) & set(left)
    assert not [name for name in left if name.endswith(".crc")], "a checksum outlived its file"


def test_a_dry_run_reports_the_same_files_and_removes_none(config):
    folder = build_sink(config, COMMITTED, DEBRIS)
    before = store.files_under(folder)
    dry = sweep_archive(config, HOUR, hours_later=2, dry_run=True)
    assert sorted(item["file"] for item in dry.removed) == sorted(DEBRIS)
    assert store.files_under(folder) == before


def test_a_folder_whose_log_names_files_elsewhere_is_refused_not_emptied(config):
    folder = build_sink(config, COMMITTED, DEBRIS)
    moved = "v1\n" + json.dumps({"path": "file:/somewhere/else/part-0.parquet", "action": "add"})
    store.write_atomically(folder / "_spark_metadata" / "0", moved)
    before = store.files_under(folder)
    sweep = sweep_archive(config, 0, hours_later=1)
    assert sweep.refused and "moved or copied" in sweep.refused and sweep.removed == []
    assert store.files_under(folder) == before


def test_data_files_without_a_sink_log_are_refused(config):
    folder = store.location(config.spark.extra_conf, registry.ARCHIVE.location(config))
    store.write_atomically(folder / f"{DAY_FOLDER}/part-0.parquet", parquet_bytes([1]))
    sweep = sweep_archive(config, 0, hours_later=1)
    assert sweep.refused and "no _spark_metadata" in sweep.refused
    assert store.files_under(folder) == [f"{DAY_FOLDER}/part-0.parquet"]


def test_the_front_door_sweeps_every_sink_prints_each_removal_and_records_it(config, stored_root, capsys):
    build_sink(config, COMMITTED, DEBRIS)
    overrides = [argument for value in stored_root for argument in ("--set", value)]
    assert cli.main(["outputs", "sweep", "--grace", "0 seconds", *overrides]) == 0
    printed = capsys.readouterr().out
    for name in DEBRIS:
        assert f"removed {name} (" in printed
    for sink in maintenance.file_sinks():
        assert f"{sink.name}: " in printed
    record_url = printed.strip().splitlines()[-1].removeprefix("record: ")
    assert record_url.startswith(config.data_path("reports"))
    record = json.loads(store.location(config.spark.extra_conf, record_url).read_text())
    archive = next(sink for sink in record["sinks"] if sink["dataset"] == "archive")
    assert sorted(item["file"] for item in archive["removed"]) == sorted(DEBRIS)


def test_the_sinks_swept_are_every_file_sink_the_registry_declares():
    names = {dataset.name for dataset in maintenance.file_sinks()}
    assert names == {
        "archive",
        "sensor_windows",
        "sensor_aggregation_quarantine",
        "ad_matches",
        "ad_ctr",
        "ad_matching_quarantine",
    }


@pytest.mark.parametrize(
    "folder",
    [
        "hdfs:///pipeline/archive",
        "hdfs://127.0.0.1:8020/pipeline/archive",
        "hdfs://localhost:8020/pipeline/archive/",
    ],
)
def test_on_hdfs_a_logged_url_names_its_file_however_the_folder_spells_the_namenode(folder):
    # The lab's layout writes hdfs:///path (fs.defaultFS names the NameNode); Spark's sink log records
    # the full hdfs://host:port/path. Were they told apart, every committed file would look unlisted.
    logged = [
        "hdfs://127.0.0.1:8020/pipeline/archive/topic=sensors/part-00000.parquet",
        "hdfs://127.0.0.1:8020/pipeline/archive/topic=odd%253Aname/part-00001.parquet",
        "hdfs://127.0.0.1:8020/pipeline/elsewhere/part-00002.parquet",
    ]
    assert checkpoint_format.committed_names(logged, folder) == {
        "topic=sensors/part-00000.parquet",
        "topic=odd%3Aname/part-00001.parquet",
    }
