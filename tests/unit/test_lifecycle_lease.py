"""The driver's lease from the moment it is taken: no JVM, no broker."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from stream_pipelines.control.lease import live_owner
from stream_pipelines.core.exit_codes import ExitCode
from stream_pipelines.driver import lifecycle


def test_the_heartbeat_goes_on_while_a_slow_jvm_starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Taking the lease comes before the JVM starts. A start slower than the lease timeout (a loaded
    host) must not leave a stale lease, which a watchdog would kill and a second driver take over."""
    monkeypatch.setattr(lifecycle, "preflight", lambda config, app: ExitCode.OK)
    seen = {}

    def slow_start(config, app, *_owned_and_more):
        time.sleep(2.5)  # the JVM and the queries coming up, past the 1 s lease timeout
        seen["owner"] = live_owner(config, app.name)
        return ExitCode.OK

    monkeypatch.setattr(lifecycle, "_run_owned", slow_start)
    settings = [
        f"paths.data_root={tmp_path}",
        "supervision.heartbeat_interval=0.2 seconds",
        "supervision.lease_timeout=1 seconds",
    ]
    argv = [item for setting in settings for item in ("--set", setting)]
    assert lifecycle.run_app("raw_archive", argv) == ExitCode.OK
    assert seen["owner"] is not None, "the lease went stale while the driver was starting"
    assert (
        live_owner(lifecycle.load_app_config(lifecycle.declared_app("raw_archive"), argv)[0], "raw_archive")
        is None
    )
