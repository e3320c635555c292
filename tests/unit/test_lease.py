"""The app lease: one owner at a time, stale leases taken over, a lost lease noticed, released on exit."""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import threading
import time

import pytest

from stream_pipelines.control.lease import Lease, LeaseHeldError, LeaseLostError
from stream_pipelines.core import store
from stream_pipelines.core.config import load_config

APP = "raw_archive"


@pytest.fixture
def config(stored_root: list[str]):
    return load_config(
        "local",
        [*stored_root, "supervision.heartbeat_interval=1 seconds", "supervision.lease_timeout=3 seconds"],
        environ={},
    )


def test_a_second_owner_is_refused_with_the_owner_named(config):
    first = Lease(config, APP)
    held = first.acquire(log=print)
    with pytest.raises(LeaseHeldError) as refused:
        Lease(config, APP).acquire(log=print)
    message = str(refused.value)
    assert f"owner {held.owner} (pid {os.getpid()}" in message
    assert re.search(r"heartbeat [0-2]s ago", message), message
    assert "pipelinectl stop raw_archive" in message


def test_the_lease_lives_beside_the_apps_checkpoints(config):
    Lease(config, APP).acquire(log=print)
    assert (
        store.location(config.spark.extra_conf, config.checkpoint_dir(APP, "archive")).parent / "lease.json"
    ).is_file()


def test_a_stale_lease_is_taken_over_and_the_takeover_is_logged(config):
    old = Lease(config, APP)
    record = old.acquire(log=print)
    # Heartbeat older than the timeout, from another host (so its pid cannot be checked here).
    record.heartbeat_at, record.host = time.time() - 10, "elsewhere"
    old.path.write_text(json.dumps(record.__dict__))
    said: list[str] = []
    new = Lease(config, APP).acquire(log=said.append)
    assert new.owner != record.owner
    assert said and said[0].startswith(f"took over a stale lease: owner {record.owner}")
    with pytest.raises(LeaseLostError, match="lease lost, now held by owner"):
        old.renew(record)


def test_a_dead_drivers_lease_on_this_host_is_stale_at_once(config):
    old = Lease(config, APP)
    record = old.acquire(log=print)
    record.pid = 2**22 + 4321  # no such process
    old.path.write_text(json.dumps(record.__dict__))
    said: list[str] = []
    Lease(config, APP).acquire(log=said.append)
    assert "took over a stale lease" in said[0]


def test_a_killed_drivers_lease_is_stale_at_once_even_while_it_is_an_unreaped_zombie(config, zombie):
    # Under a container's PID 1 that does not reap orphans (as on CI), a kill -9'd driver stays a zombie:
    # its /proc entry remains, but it is gone and must not hold the app until the lease times out.
    old = Lease(config, APP)
    record = old.acquire(log=print)
    record.pid = zombie
    old.path.write_text(json.dumps(record.__dict__))
    said: list[str] = []
    Lease(config, APP).acquire(log=said.append)
    assert "took over a stale lease" in said[0]


def test_without_proc_a_live_drivers_lease_still_holds_and_a_dead_ones_is_stale(config, monkeypatch):
    # Off Linux there is no /proc to read a process state from: liveness falls back to signal 0.
    from stream_pipelines.core import procfs

    monkeypatch.setattr(procfs, "_has_proc", lambda: False)
    monkeypatch.setattr(procfs, "proc_stat", lambda _pid: [])
    live = Lease(config, APP)
    live.acquire(log=print)
    with pytest.raises(LeaseHeldError):
        Lease(config, APP).acquire(log=print)
    record = live.read()
    record.pid = 2**22 + 4321  # no such process
    live.path.write_text(json.dumps(record.__dict__))
    said: list[str] = []
    Lease(config, APP).acquire(log=said.append)
    assert "took over a stale lease" in said[0]


def test_renewal_moves_the_heartbeat_and_release_frees_the_app(config):
    lease = Lease(config, APP)
    record = lease.acquire(log=print)
    before = lease.read().heartbeat_at
    time.sleep(0.05)
    record.queries = {"raw_archive.archive": {"batch_id": 7}}
    lease.renew(record)
    current = lease.read()
    assert current.heartbeat_at > before and current.queries["raw_archive.archive"]["batch_id"] == 7
    lease.release()
    assert lease.read() is None
    Lease(config, APP).acquire(log=print)


def test_release_by_a_driver_that_lost_the_lease_leaves_the_new_owners(config):
    old = Lease(config, APP)
    record = old.acquire(log=print)
    record.heartbeat_at, record.host = 0.0, "elsewhere"
    old.path.write_text(json.dumps(record.__dict__))
    new = Lease(config, APP)
    new.acquire(log=print)
    old.release()
    assert new.read().owner == new.owner


def _race(config_args: list[str], environ: dict[str, str], start_at: float, results, all_reported) -> None:
    os.environ.update(environ)  # a forkserver child has the server's environment: the test's S3 credentials
    config = load_config("local", config_args, environ=dict(os.environ))
    while time.time() < start_at:
        pass
    try:
        Lease(config, APP).acquire(log=lambda _message: None)
        results.put("won")
        # The winner is a live driver until every racer has tried: a dead one's lease is stale at once.
        all_reported.wait(120)
    except LeaseHeldError:
        results.put("refused")


def test_of_drivers_racing_for_a_free_lease_exactly_one_wins(stored_root):
    args = stored_root
    # forkserver, not fork: a forked child would share the parent's s3 client and its event loop thread.
    # The server is a fresh process that imports this module and the s3 client once; each racer forks
    # from it ready to race (spawned racers imported them six times over, on two cores). A racer has the
    # server's environment, so it is handed the test's.
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([__name__, "s3fs"])
    results, all_reported = context.Queue(), context.Event()
    start_at = time.time() + 0.5
    environ = dict(os.environ)
    racers = [
        context.Process(target=_race, args=(args, environ, start_at, results, all_reported)) for _ in range(6)
    ]
    for racer in racers:
        racer.start()
    outcomes = sorted(results.get(timeout=120) for _ in racers)
    all_reported.set()
    for racer in racers:
        racer.join(30)
    assert outcomes == ["refused"] * 5 + ["won"]


def test_a_lease_timeout_shorter_than_three_heartbeats_is_a_config_error():
    from stream_pipelines.core.config import ConfigError

    with pytest.raises(ConfigError, match=r"lease_timeout .* must be at least 3 heartbeat_intervals"):
        load_config("local", ["supervision.lease_timeout=10 seconds"], environ={})


def test_a_file_url_lease_is_kept_in_that_folder(tmp_path):
    local = load_config("local", [f"paths.checkpoints=file://{tmp_path}/ck"], environ={})
    Lease(local, APP).acquire(log=print)
    assert (tmp_path / "ck" / APP / "lease.json").is_file()


def test_a_frozen_jvm_keeps_the_heartbeat_leaves_the_last_progress_and_says_how_long_it_is_silent(config):
    """Progress is asked of the JVM apart from the heartbeat: a JVM that stops answering must show as
    a live driver whose batches stand still, not as a dead one, and the lease says for how long the
    JVM has not answered (the watchdog's frozen case), back to 0 once it answers."""
    from stream_pipelines.control.lease import LeaseKeeper

    lease = Lease(config, APP)
    record = lease.acquire(log=print)
    frozen, thawed = threading.Event(), threading.Event()
    asks = []

    def progress():
        asks.append(time.time())
        if frozen.is_set():
            thawed.wait(30)  # the JVM does not answer
        return {f"{APP}.archive": {"batch_id": len(asks)}}

    keeper = LeaseKeeper(lease, record, 0.2).start()
    keeper.follow(progress, on_lost=print)
    try:
        time.sleep(1.0)
        before = lease.read()
        assert before.jvm_silent_s == 0.0, "a JVM that answers is not silent"
        frozen.set()
        time.sleep(0.5)
        stuck_at = lease.read().queries[f"{APP}.archive"]["batch_id"]
        heartbeat = lease.read().heartbeat_at
        time.sleep(2.5)
        after = lease.read()
        assert after.heartbeat_at > heartbeat + 1.5, "the heartbeat went on"
        assert after.queries[f"{APP}.archive"]["batch_id"] == stuck_at, "the last progress stayed"
        assert len(asks) <= stuck_at + 1, "one unanswered ask at a time"
        assert 1.5 <= after.jvm_silent_s <= 3.5, after.jvm_silent_s
        frozen.clear()
        thawed.set()
        time.sleep(1.0)
        answered = lease.read()
        assert answered.jvm_silent_s == 0.0
        assert answered.queries[f"{APP}.archive"]["batch_id"] > stuck_at
    finally:
        thawed.set()
        keeper.stop()


def test_a_crash_loop_keeps_only_the_last_few_stale_leases(config):
    """Each takeover keeps the dead owner's lease aside for forensics, but a crash loop must not pile
    one file per kill into the checkpoint folder."""
    for _kill in range(6):
        lease = Lease(config, APP)
        record = lease.acquire(log=print)
        record.pid = 2**22 + 4321  # killed: no such process
        lease.path.write_text(json.dumps(record.__dict__))
    Lease(config, APP).acquire(log=print)
    kept = sorted(p.name for p in Lease(config, APP).path.parent.glob("lease.json.stale-*"))
    assert len(kept) == 3, kept


def test_a_record_replaced_between_its_version_and_its_content_is_read_whole(s3_root, tmp_path):
    """A renewal landing while the supervisor reads the lease: the read returns a whole document (old
    or new), never s3fs's FileExpired, and a replace on the version read first is refused."""
    config = load_config("local", [*s3_root(), f"paths.scratch={tmp_path}/scratch"], environ={})
    target = Lease(config, APP).path
    store.write_json(target, {"heartbeat": 1})
    filesystem, plain_info = target.fs, target.fs.info
    renewals = iter(range(2, 100))

    def info_then_a_renewal_lands(path, **kwargs):
        found = plain_info(path, **kwargs)
        filesystem.pipe_file(target.path, json.dumps({"heartbeat": next(renewals)}).encode())
        return found

    filesystem.info = info_then_a_renewal_lands
    try:
        content, version = store.read_versioned(target)
    finally:
        del filesystem.info
    assert set(json.loads(content)) == {"heartbeat"}
    assert store.replace_if_unchanged(target, version, "{}") is None


def test_a_lease_written_by_a_newer_driver_with_a_field_this_version_lacks_is_read(config):
    """An upgrade in progress: the supervisor must still see the owner, not an unreadable lease."""
    lease = Lease(config, APP)
    mine = lease.acquire(log=print)
    data = json.loads(store.read_versioned(lease.path)[0])
    data["field_of_a_later_version"] = {"x": 1}
    store.write_atomically(lease.path, json.dumps(data))
    read = Lease(config, APP).read()
    assert read is not None and read.owner == mine.owner and read.pid == mine.pid
