"""Checkpoint inspection, preflight and reset on s3a://, against the loopback S3 server: the same
report, the same refusals and the same rebuilt checkpoint as on a local copy of the same files.

The fixtures are checkpoints of real runs (see test_checkpoint_reader.py). S3A writes no Hadoop
``.crc`` files, so the local copy they are compared with has none either.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from stream_pipelines.checkpoint import inspect as checkpoint_inspect
from stream_pipelines.checkpoint.inspect import CheckpointError
from stream_pipelines.checkpoint.reset import reset
from stream_pipelines.core import store
from stream_pipelines.core.config import load_config
from stream_pipelines.core.registry import app as declared_app
from tests.unit.test_checkpoint_reader import FIXTURES, TUMBLING, written_spark_version


@pytest.fixture(autouse=True)
def running_the_fixtures_spark(monkeypatch):
    monkeypatch.setattr(checkpoint_inspect, "running_spark_version", lambda: written_spark_version(TUMBLING))


@pytest.fixture
def both(tmp_path, s3_root) -> dict[str, tuple[list[str], str]]:
    """The fixtures twice, without checksum files: in a local folder and in a bucket (tests/test_hdfs_store.py
    runs these tests again with the remote copy on HDFS). Per store: the
    overrides for its data root, and that root as a string (to compare messages with it taken out)."""
    local = tmp_path / "local"
    shutil.copytree(FIXTURES, local, ignore=shutil.ignore_patterns("*.crc"))
    overrides = s3_root()
    bucket_root = overrides[0].split("=", 1)[1]
    remote = store.location(load_config("local", overrides, environ={}).spark.extra_conf, bucket_root)
    remote.fs.put(str(local) + "/", remote.path, recursive=True)
    return {"local": ([], str(local)), "remote": (overrides[1:], bucket_root)}


def config_of(both, kind: str, fixture: str, *extra: str):
    settings, root = both[kind]
    files = ["source.kind=files", "source.files_dir=/replay"] if fixture == "files" else []
    return load_config(
        "local",
        [*settings, f"paths.data_root={root}/{fixture}", "spark.shuffle_partitions=2", *files, *extra],
        environ={},
    )


def test_inspect_reads_the_same_checkpoint_on_the_remote_store_as_on_a_local_disk(both):
    for fixture, app in (("kafka", "raw_archive"), ("files", "sensor_aggregation"), ("files", "ad_matching")):
        local = checkpoint_inspect.inspect(config_of(both, "local", fixture), declared_app(app))
        remote = checkpoint_inspect.inspect(config_of(both, "remote", fixture), declared_app(app))
        assert remote.ok and local.ok
        assert "inspection skipped" not in remote.describe()
        assert remote.describe().replace(both["remote"][1], "<root>") == local.describe().replace(
            both["local"][1], "<root>"
        )
    archive = checkpoint_inspect.inspect(
        config_of(both, "remote", "kafka"), declared_app("raw_archive")
    ).query("archive")
    assert archive.last_committed_batch == 2 and archive.output_latest_batch == 2
    assert archive.committed_offsets["sensors"] == {0: 5, 1: 5, 2: 0}


@pytest.mark.parametrize(
    ("damage", "extra"),
    [
        ("truncated offsets", ()),
        ("garbage commit", ()),
        ("changed partitions and window", ("spark.shuffle_partitions=3", "sensors.window=10 minutes")),
    ],
)
def test_the_preflight_refuses_a_damaged_or_incompatible_remote_checkpoint_with_the_local_message(
    both, damage, extra
):
    messages = {}
    for kind in ("local", "remote"):
        config = config_of(both, kind, "files", *extra)
        checkpoint = store.location(
            config.spark.extra_conf, config.checkpoint_dir("sensor_aggregation", "tumbling")
        )
        if damage == "truncated offsets":
            offsets = checkpoint / "offsets" / "1"
            offsets.write_bytes(offsets.read_bytes()[:150])
        elif damage == "garbage commit":
            (checkpoint / "commits" / "1").write_bytes(b"\x00\xff not a commit")
        with pytest.raises(CheckpointError) as refused:
            checkpoint_inspect.preflight(config, declared_app("sensor_aggregation"))
        messages[kind] = str(refused.value).replace(both[kind][1], "<root>")
    assert messages["remote"] == messages["local"]
    assert "checkpoint preflight refuses to start sensor_aggregation" in messages["remote"]


def _tree(root: Path) -> dict[str, bytes]:
    """Every file under a checkpoint, by relative name (the new query id and reset time left out)."""
    skipped = ("metadata", "pipeline_fingerprint.json")
    return {name: (root / name).read_bytes() for name in store.files_under(root) if name not in skipped}


def test_a_reset_from_committed_offsets_on_the_remote_store_writes_the_checkpoint_a_local_reset_writes(both):
    built = {}
    for kind in ("local", "remote"):
        config = config_of(both, kind, "files")
        # Uploaded just now: no quiet period, or the upload itself would look like a running app.
        result = reset(
            config,
            declared_app("sensor_aggregation"),
            "tumbling",
            from_="committed",
            confirm="sensor_aggregation",
            quiet_period_s=0,
        )
        done = result.queries[0]
        assert done.first_batch == 2, "continues after the last committed batch: nothing skipped or repeated"
        checkpoint = store.location(
            config.spark.extra_conf, config.checkpoint_dir("sensor_aggregation", "tumbling")
        )
        old = store.location(config.spark.extra_conf, done.old_checkpoint)
        assert (old / "offsets" / "1").exists(), "the old checkpoint is kept aside"
        built[kind] = _tree(checkpoint)
    assert built["remote"] == built["local"]
    assert "offsets/1" in built["remote"] and "commits/1" in built["remote"]
