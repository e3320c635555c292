"""`pipelinectl status [APP]`: the shipped command the runbooks name, over the records of a control store."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from stream_pipelines import cli
from stream_pipelines.control.control_store import ControlStore, CrashLoopError
from stream_pipelines.control.lease import Lease
from stream_pipelines.core.config import load_config
from stream_pipelines.core.registry import APP_NAMES

APP = "sensor_aggregation"


def status(capsys, data_root: Path, *arguments: str) -> list[str]:
    code = cli.main(["status", *arguments, "--set", f"paths.data_root={data_root}"])
    out = capsys.readouterr().out
    assert code == 0, out
    return out.splitlines()


@pytest.fixture
def config(tmp_path: Path):
    return load_config("local", [f"paths.data_root={tmp_path}"], environ={})


def test_every_app_has_a_line_and_a_checkout_names_its_local_servers_first(config, tmp_path, capsys):
    lines = status(capsys, tmp_path)
    apps = [line for line in lines if line.startswith("app ")]
    assert [line.split(":")[0] for line in apps] == [f"app {name}" for name in APP_NAMES]
    assert all(line.endswith("last exit: never ran") for line in apps), apps
    # The devtools are installed here: the local broker's line comes before the apps'.
    assert lines.index(apps[0]) > 0 and lines[0].startswith("broker")


def test_an_apps_records_each_have_a_line_and_the_store_they_are_kept_in(config, tmp_path, capsys):
    control = ControlStore(config)
    control.set_desired(APP, "paused", by="alice", reason="broker upgrade")
    control.record_exit(APP, "failed", "query sensor_aggregation.tumbling failed: disk full")
    control.record_restart(APP, cause="exit 3 (query failed)")
    control.record_restart(APP, cause="query sensor_aggregation.sliding failed", kind="in-driver")
    control.record_watchdog_restart(APP, "no progress for 120s while 5,000 offsets wait")
    lease = Lease(config, APP)
    lease.acquire(lambda _: None)

    lines = status(capsys, tmp_path, APP)

    assert lines[0].startswith(f"app {APP}: ")
    text = "\n".join(lines)
    assert "desired:    paused (by alice" in text and "reason broker upgrade" in text
    assert f"owner {lease.owner}" in text and "; live" in text
    assert "last exit:  failed at " in text and "disk full" in text
    assert "restarts:   2 in all (1 inside the driver), 2 within the crash-loop window" in text
    assert "last: query restarted inside the driver at" in text and "sliding failed" in text
    assert "crash loop: not tripped" in text
    assert "watchdog:   1 restart(s) of a stuck driver" in text and "5,000 offsets wait" in text
    assert lines[-1] == f"  records:    {tmp_path}/control/{APP}.*"

    lease.release()
    with pytest.raises(CrashLoopError):
        for _ in range(10):
            control.record_restart(APP, cause="exit 3", limit=3, window=timedelta(hours=1))
    tripped = "\n".join(status(capsys, tmp_path, APP))
    assert "lease:      free" in tripped
    assert "crash loop: tripped: " in tripped


def test_an_app_that_never_ran_says_so_on_every_line(config, tmp_path, capsys):
    text = "\n".join(status(capsys, tmp_path, "raw_archive"))
    assert "desired:    running (by default)" in text
    assert "lease:      free" in text
    assert "last exit:  none recorded" in text
    assert "restarts:   0 in all" in text
    assert "watchdog:   never restarted it" in text


def test_an_unknown_app_is_refused_by_name(tmp_path, capsys):
    with pytest.raises(SystemExit):
        cli.main(["status", "no_such_app", "--set", f"paths.data_root={tmp_path}"])
    assert "invalid choice: 'no_such_app'" in capsys.readouterr().err
