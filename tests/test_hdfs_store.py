"""The file layer on hdfs://, against a real HDFS on 127.0.0.1 (no Spark): exclusive create, whole
replacement, compare-and-swap on a version, JSON updates under concurrency, the folder operations, and
the lease and the control store running on it.

The checkpoint tests (inspect, preflight refusals, reset), the lease and the control store tests of the
unit tier run here again, unchanged, with their data root on HDFS: this module's ``both``, ``config``
and ``stored_root`` fixtures stand in for theirs.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from stream_pipelines.core import store
from stream_pipelines.core.config import PROJECT_ROOT, ConfigError, load_config
from tests.unit.test_checkpoint_on_s3 import (  # noqa: F401
    running_the_fixtures_spark,
    test_a_reset_from_committed_offsets_on_the_remote_store_writes_the_checkpoint_a_local_reset_writes,
    test_inspect_reads_the_same_checkpoint_on_the_remote_store_as_on_a_local_disk,
    test_the_preflight_refuses_a_damaged_or_incompatible_remote_checkpoint_with_the_local_message,
)
from tests.unit.test_checkpoint_reader import FIXTURES
from tests.unit.test_compacted_days import (  # noqa: F401
    test_a_compacted_file_the_log_forgot_waits_out_the_grace_after_the_logs_retention,
    test_a_day_whose_files_left_the_log_uncompacted_is_refused_by_the_reconciliation,
    test_a_failed_first_compaction_of_a_day_goes_after_the_grace,
    test_a_file_holding_two_days_stays_until_both_are_compacted,
    test_a_forgotten_file_goes_once_every_day_it_holds_is_compacted_and_is_kept_loudly_until_then,
    test_a_raised_sink_log_retention_does_not_turn_files_the_running_sink_forgot_into_debris,
    test_only_one_compaction_publishes_a_version,
    test_replaced_versions_and_failed_attempts_go_after_the_grace_and_a_day_past_retention_goes_whole,
)
from tests.unit.test_control_store import (  # noqa: F401
    test_a_launch_whose_launcher_died_is_not_starting,
    test_an_unreadable_record_is_reported_not_a_crash,
    test_pause_stops_supervision_and_resume_restores_it,
    test_records_are_written_whole,
    test_restart_keeps_it_wanted_but_drains_the_running_one,
    test_restarts_are_counted_once_each_even_from_concurrent_supervisors,
    test_start_after_a_stop_lets_the_supervisor_run_it_again,
    test_status_follows_the_records,
    test_stop_records_who_and_why_and_asks_the_app_to_drain,
)
from tests.unit.test_lease import (  # noqa: F401
    test_a_crash_loop_keeps_only_the_last_few_stale_leases,
    test_a_dead_drivers_lease_on_this_host_is_stale_at_once,
    test_a_second_owner_is_refused_with_the_owner_named,
    test_a_stale_lease_is_taken_over_and_the_takeover_is_logged,
    test_of_drivers_racing_for_a_free_lease_exactly_one_wins,
    test_release_by_a_driver_that_lost_the_lease_leaves_the_new_owners,
    test_renewal_moves_the_heartbeat_and_release_frees_the_app,
    test_the_lease_lives_beside_the_apps_checkpoints,
)
from tests.unit.test_retention import (  # noqa: F401
    test_a_day_whose_inputs_retention_removed_is_refused_before_anything_is_read,
    test_a_file_the_log_forgot_goes_once_past_retention_a_listed_one_never,
    test_a_file_the_log_forgot_refuses_its_day_before_the_sweep_removes_it,
    test_a_log_that_forgot_every_file_lets_them_go_one_naming_files_elsewhere_is_refused,
    test_a_partition_folder_emptied_by_retention_goes_with_its_last_file,
    test_maintenance_records_go_after_their_own_retention,
    test_reset_copies_go_by_the_time_in_their_name_and_a_recent_one_stays,
    test_the_batch_log_loses_its_old_batches_but_the_one_the_next_starts_from,
    test_the_daily_run_records_each_dataset_retention_and_what_it_removed,
)


@pytest.fixture
def both(tmp_path, hdfs_root) -> dict[str, tuple[list[str], str]]:
    """The checkpoint fixtures twice, without checksum files: in a local folder and on HDFS."""
    local = tmp_path / "local"
    shutil.copytree(FIXTURES, local, ignore=shutil.ignore_patterns("*.crc"))
    store.copy_tree(local, store.location(None, hdfs_root))
    return {"local": ([], str(local)), "remote": ([], hdfs_root)}


@pytest.fixture
def stored_root(hdfs_root, tmp_path) -> list[str]:
    """The unit tier's data root, on HDFS (the local scratch folder stays local)."""
    return [f"paths.data_root={hdfs_root}/pipeline", f"paths.scratch={tmp_path}/scratch"]


@pytest.fixture
def config(stored_root):
    return load_config(
        "local",
        [*stored_root, "supervision.heartbeat_interval=1 seconds", "supervision.lease_timeout=3 seconds"],
        environ={},
    )


@pytest.fixture
def folder(hdfs_root):
    return store.location(None, hdfs_root)


def leftovers(folder) -> list[str]:
    return [name for name in store.files_under(folder) if name.rsplit("/", 1)[-1].startswith(".")]


def test_every_stored_path_on_hdfs_is_served_and_keeps_its_namenode(config, hdfs_root):
    checkpoints = store.location(config.spark.extra_conf, config.data_path("checkpoints"))
    assert store.on_hdfs(checkpoints) and not store.on_object_store(checkpoints)
    assert str(checkpoints / "raw_archive") == f"{hdfs_root}/pipeline/checkpoints/raw_archive"
    assert not store.uses_object_store(config.stored_urls()), "HDFS needs no S3A connector"


def test_a_path_without_a_namenode_takes_spark_default_fs_or_is_refused(hdfs):
    with pytest.raises(store.StoreError, match="names no NameNode"):
        store.location(None, "hdfs:///somewhere")
    config = load_config(
        "local", [f"spark.extra_conf.spark.hadoop.fs.defaultFS={hdfs.default_fs}"], environ={}
    )
    assert (
        str(store.location(config.spark.extra_conf, "hdfs:///somewhere/x"))
        == f"{hdfs.default_fs}/somewhere/x"
    )


def test_a_store_the_file_layer_does_not_serve_is_still_refused():
    with pytest.raises(ConfigError, match="gs://"):
        load_config("local", ["paths.control=gs://bucket/control"], environ={})


def test_an_exclusive_create_refuses_a_second_creator_and_leaves_nothing_behind(folder):
    target = folder / "records" / "lease.json"
    first = store.create_exclusive(target, "first")
    assert first is not None
    assert store.create_exclusive(target, "second") is None
    found = store.read_versioned(target)
    assert found == (b"first", first)
    assert leftovers(folder) == [], "a temporary file was left"


def test_of_eight_concurrent_creators_exactly_one_wins(folder):
    target = folder / "race" / "lease.json"
    start = threading.Barrier(8)

    def create(index: int) -> str | None:
        start.wait()
        return store.create_exclusive(target, f"creator {index}")

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(create, range(8)))
    winners = [index for index, version in enumerate(results) if version is not None]
    assert len(winners) == 1, results
    assert store.read_bytes(target) == f"creator {winners[0]}".encode()
    assert leftovers(folder) == []


def test_write_atomically_replaces_the_whole_file(folder):
    target = folder / "control" / "record.json"
    store.write_atomically(target, "a much longer first version of the record")
    store.write_atomically(target, "short")
    assert store.read_bytes(target) == b"short"
    assert store.entries(target.parent) == {"record.json": (5, pytest.approx(time.time(), abs=60))}


def test_a_file_read_right_after_it_was_closed_comes_back_whole(folder):
    """hdfs-native reads a file up to the length the NameNode gives with its blocks, which leaves out a last
    block that is not yet complete. A NameNode that let a file close before a DataNode had reported the
    block (dfs.namenode.file.close.num-committed-allowed) made one read in fifty to a hundred, right after
    the close, come back empty: a lease or control record read as nothing. Each file here goes through
    the primitive every write of the store layer ends in, then is read back at once."""
    short = []
    for n in range(200):
        record = folder / "records" / f"{n}.json"
        payload = json.dumps({"n": n, "padding": "x" * 100}).encode()
        store._hdfs_write_new(record, payload)
        if store.read_bytes(record) != payload:
            short.append(n)
    assert short == [], f"{len(short)} of 200 files read back short right after their close: {short}"


def test_replace_if_unchanged_refuses_a_stale_version(folder):
    target = folder / "cas" / "lease.json"
    version = store.create_exclusive(target, "one")
    newer = store.replace_if_unchanged(target, version, "two")
    assert newer is not None and newer != version
    assert store.replace_if_unchanged(target, version, "three") is None, "a stale version was accepted"
    assert store.read_bytes(target) == b"two"
    # The takeover form: the current file moved aside (and kept), the new one created.
    aside = target.with_name("lease.json.stale-1")
    assert store.replace_if_unchanged(target, version, "four", aside=aside) is None
    assert not aside.exists() and store.read_bytes(target) == b"two", "a refused takeover moved the file"
    assert store.replace_if_unchanged(target, newer, "five", aside=aside) is not None
    assert store.read_bytes(target) == b"five" and store.read_bytes(aside) == b"two"
    assert store.replace_if_unchanged(folder / "cas" / "absent", newer, "x") is None


def test_of_two_takeovers_on_one_version_only_one_succeeds(folder):
    target = folder / "takeover" / "lease.json"
    version = store.create_exclusive(target, "stale")
    start = threading.Barrier(4)

    def take_over(index: int) -> str | None:
        start.wait()
        aside = target.with_name(f"lease.json.stale-{index}")
        return store.replace_if_unchanged(target, version, f"owner {index}", aside=aside)

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(take_over, range(4)))
    winners = [index for index, written in enumerate(results) if written is not None]
    assert len(winners) == 1, results
    assert store.read_bytes(target) == f"owner {winners[0]}".encode()


def test_update_json_under_concurrency_loses_no_update(folder):
    target = folder / "counts" / "restarts.json"

    def add(_index: int) -> None:
        for _ in range(3):
            store.update_json(target, lambda found: {"total": (found or {"total": 0})["total"] + 1})

    with ThreadPoolExecutor(6) as pool:
        list(pool.map(add, range(6)))
    assert store.read_json(target) == {"total": 18}
    assert "counts/restarts.json.lock" not in store.files_under(folder), "the lock was left behind"


def test_a_dead_writers_update_lock_is_broken_at_once(folder):
    target = folder / "counts" / "watchdog.json"
    dead = {"host": os.uname().nodename, "pid": 2**22 + 4321, "token": "killed mid-update"}
    assert store.create_exclusive(target.with_name("watchdog.json.lock"), json.dumps(dead)) is not None
    began = time.monotonic()
    assert store.update_json(target, lambda _found: {"total": 1}) == {"total": 1}
    assert time.monotonic() - began < 10


def test_copy_move_and_remove_a_folder(folder):
    source = folder / "checkpoint"
    for name in ("offsets/0", "offsets/1", "commits/0", "metadata"):
        store.write_atomically(source / name, name)
    store.copy_tree(source, folder / "staging")
    assert store.files_under(folder / "staging") == ["commits/0", "metadata", "offsets/0", "offsets/1"]
    store.copy_tree(source / "metadata", folder / "single" / "metadata")
    assert store.read_bytes(folder / "single" / "metadata") == b"metadata"
    store.move(source, folder / "aside" / "checkpoint")
    store.move(folder / "staging", source)
    assert store.files_under(source) == store.files_under(folder / "aside" / "checkpoint")
    assert set(store.tree_entries(source)) == {"commits/0", "metadata", "offsets/0", "offsets/1"}
    size, modified = store.tree_entries(source)["offsets/1"]
    assert size == len("offsets/1") and abs(modified - time.time()) < 60
    store.remove_tree(source)
    store.remove_tree(source)  # absent: nothing happens
    assert store.entries(source) == {} and store.tree_entries(source) == {}


def test_a_local_folder_is_copied_onto_hdfs(folder, tmp_path):
    (tmp_path / "site" / "static").mkdir(parents=True)
    (tmp_path / "site" / "index.html").write_text("<html/>")
    (tmp_path / "site" / "static" / "app.js").write_text("js")
    store.copy_tree(tmp_path / "site", folder / "docs")
    assert store.files_under(folder / "docs") == ["index.html", "static/app.js"]


def test_the_sensor_metadata_file_is_read_from_hdfs_as_the_workers_read_it(hdfs_root):
    from stream_pipelines.inputs.sensor_metadata import SensorMetadataError, read_metadata_rows

    local = PROJECT_ROOT / "conf" / "sensor_metadata.csv"
    url = f"{hdfs_root}/datasets/sensors/sensor_metadata.csv"
    store.write_atomically(store.location(None, url), local.read_bytes())
    assert read_metadata_rows(url) == read_metadata_rows(str(local))
    with pytest.raises(SensorMetadataError, match="not found"):
        read_metadata_rows(f"{hdfs_root}/datasets/sensors/missing.csv")


FORK_AFTER_HDFS = """
import os, subprocess, sys, time
from stream_pipelines.core import store
# The file layer's HDFS client, used and then dropped by its caller, as the demo and the nightly job do
# before they launch Spark's JVM (pyspark forks with a preexec_fn, so Python runs in the child).
assert store.entries(store.location(None, sys.argv[1])) is not None
subprocess.run([sys.executable, "-c", "pass"], preexec_fn=lambda: None, check=True, timeout=30)
print("child ran", flush=True)
# A forked child that forks again (a worker that starts Spark) must not drop what it inherited.
pid = os.fork()
if pid == 0:
    subprocess.run([sys.executable, "-c", "pass"], preexec_fn=lambda: None, check=True, timeout=30)
    os._exit(0)
deadline = time.monotonic() + 30
while time.monotonic() < deadline and os.waitpid(pid, os.WNOHANG) == (0, 0):
    time.sleep(0.1)
print("grandchild ran" if time.monotonic() < deadline else "grandchild hung", flush=True)
"""


def test_a_process_that_used_hdfs_can_still_fork_a_child_that_runs_python(hdfs_root):
    # fsspec clears its instance cache in every forked child; were that the last reference to the HDFS
    # client, its drop would wait on a runtime whose threads the child does not have, for ever.
    store.write_atomically(store.location(None, f"{hdfs_root}/marker"), "x")
    script = subprocess.Popen(
        [sys.executable, "-c", FORK_AFTER_HDFS, hdfs_root],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=PROJECT_ROOT,
        start_new_session=True,  # a hung fork child is in the group too, and goes with it
    )
    try:
        stdout, stderr = script.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        os.killpg(script.pid, signal.SIGKILL)
        stdout, stderr = script.communicate()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(script.pid, signal.SIGKILL)
    assert script.returncode == 0 and "child ran" in stdout, stdout + stderr[-3000:]
    assert "grandchild ran" in stdout, stdout + stderr[-3000:]


def test_a_write_refused_while_the_namenode_is_in_safe_mode_waits_for_it_to_leave_and_succeeds(hdfs, folder):
    """A restarted NameNode refuses every change (SafeModeException) until its DataNodes have reported
    their blocks: a driver's exit record or lease release made then must wait, not fail. Stops the
    session's HDFS daemons and brings them back."""
    target = folder / "safe-mode" / "exit.json"
    store.write_atomically(target, "before")
    hdfs.stop_datanodes()
    hdfs.stop_namenode()
    hdfs.start_namenode(wait=False)
    deadline = time.monotonic() + 60
    while hdfs.namenode_state().get("Safemode", "") == "" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert hdfs.namenode_state().get("Safemode"), "the NameNode did not come up in safe mode"
    datanode = threading.Timer(3.0, hdfs.start_datanodes)
    datanode.start()
    try:
        began = time.monotonic()
        store.write_atomically(target, "after")
        assert time.monotonic() - began >= 2.5, "written while the NameNode was in safe mode"
    finally:
        datanode.join()
    assert store.read_bytes(target) == b"after"
    hdfs._wait(hdfs.ready, 90, "HDFS to take writes again", "namenode")


def test_a_call_made_while_the_namenode_restarts_waits_for_it_and_succeeds(hdfs, folder):
    """Last in this module: it stops the session's NameNode (the DataNode and the metadata stay)."""
    target = folder / "outage" / "lease.json"
    store.write_atomically(target, "before")
    hdfs.stop_namenode()
    restarted = threading.Timer(3.0, hdfs.start_namenode)
    restarted.start()
    try:
        began = time.monotonic()
        assert store.read_bytes(target) == b"before"
        assert time.monotonic() - began >= 2.5, "the NameNode answered while it was down"
    finally:
        restarted.join()
    assert hdfs.ready()
    store.write_atomically(target, "after")
    assert store.read_bytes(target) == b"after"
