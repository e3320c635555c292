"""What operators want of each app, and what it is doing: the one place the CLI and the DAGs share.

Files under ``<data_root>/control`` (small JSON, written atomically):
- ``<app>.desired.json``: ``running`` (the default), ``stopped`` or ``paused`` (supervision paused for
  maintenance: a running app keeps running, but nothing restarts it), with who/when/why;
- ``<app>.stop``: the stop marker the app polls between batches (drain, commit, exit 0);
- ``<app>.exit.json``: how the app last ended (written by the app: stopped/finished/failed);
- ``<app>.restart_history.json``: when the supervisor restarted it, for the crash-loop guard;
- ``<app>.crashloop.json``: present while the guard has tripped; cleared by start/restart/resume.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from stream_pipelines.config import PipelineConfig
from stream_pipelines.registry import APP_NAMES

Desired = Literal["running", "stopped", "paused"]
Action = Literal["stop", "start", "restart", "pause", "resume"]


class CrashLoopError(RuntimeError):
    """Too many restarts within the window: restarts stop until a person intervenes."""


def _control_dir(config: PipelineConfig) -> Path:
    return Path(config.data_path("control"))


def _read(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except json.JSONDecodeError:
        return {"unreadable": str(path)}


def _write(path: Path, payload: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps(payload, indent=2))
    temporary.replace(path)


def _now() -> datetime:
    return datetime.now(UTC)


def desired_state(config: PipelineConfig, app: str) -> dict[str, Any]:
    return _read(_control_dir(config) / f"{app}.desired.json") or {"desired": "running", "by": "default"}


def crash_loop(config: PipelineConfig, app: str) -> dict[str, Any] | None:
    return _read(_control_dir(config) / f"{app}.crashloop.json")


def last_exit(config: PipelineConfig, app: str) -> dict[str, Any] | None:
    return _read(_control_dir(config) / f"{app}.exit.json")


def apply_action(config: PipelineConfig, app: str, action: Action, *, by: str, reason: str = "") -> str:
    """Carry out an operator's action; returns a sentence saying what will happen."""
    if app not in APP_NAMES:
        raise ValueError(f"unknown app {app!r}; the apps are: {', '.join(APP_NAMES)}")
    control = _control_dir(config)
    stamp = {"by": by, "at": _now().isoformat(), "reason": reason}
    if action in ("start", "restart", "resume"):
        (control / f"{app}.crashloop.json").unlink(missing_ok=True)
    if action == "stop":
        _write(control / f"{app}.desired.json", {"desired": "stopped", **stamp})
        request_graceful_stop(config, app)
        return f"{app}: asked to stop after its current batch; supervision will not restart it until started"
    if action == "restart":
        _write(control / f"{app}.desired.json", {"desired": "running", **stamp})
        request_graceful_stop(config, app)
        return (
            f"{app}: asked to stop after its current batch; the supervisor then starts it from its checkpoint"
        )
    if action in ("start", "resume"):
        _write(control / f"{app}.desired.json", {"desired": "running", **stamp})
        return f"{app}: supervision on; the supervisor starts it if it is not running"
    if action == "pause":
        _write(control / f"{app}.desired.json", {"desired": "paused", **stamp})
        return f"{app}: supervision paused; a running app keeps running, but nothing restarts it"
    raise ValueError(f"unknown action {action!r}; use stop, start, restart, pause or resume")


def request_graceful_stop(config: PipelineConfig, app: str) -> Path:
    marker = config.stop_marker(app)
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.touch()
    return marker


def clear_stale_stop_marker(config: PipelineConfig, app: str) -> bool:
    """Before a start: a marker left by an earlier stop would end the new run at once."""
    marker = config.stop_marker(app)
    existed = marker.exists()
    marker.unlink(missing_ok=True)
    return existed


def should_run(config: PipelineConfig, app: str) -> tuple[bool, str]:
    """Whether the supervisor may (re)start the app now, and why not if not."""
    looping = crash_loop(config, app)
    if looping:
        return False, (
            f"{app} is crash-looping since {looping.get('at')}: {looping.get('reason')}. "
            "Fix the cause, then run pipeline_control with action=start (or `pipelinectl control APP start`)."
        )
    desired = desired_state(config, app)
    who = f"by {desired.get('by')} at {desired.get('at')} ({desired.get('reason') or 'no reason given'})"
    if desired["desired"] == "stopped":
        return False, f"{app} was stopped {who}; start it with pipeline_control action=start"
    if desired["desired"] == "paused":
        return False, f"supervision of {app} is paused {who}; resume it with pipeline_control action=resume"
    return True, f"{app} should run"


def record_restart_attempt(
    config: PipelineConfig, app: str, *, limit: int, window: timedelta, cause: str
) -> int:
    """Count a restart; at the limit within the window, mark the app crash-looping and raise."""
    history_path = _control_dir(config) / f"{app}.restart_history.json"
    now = _now()
    history = [
        moment
        for moment in (_read(history_path) or {}).get("restarts", [])
        if now - datetime.fromisoformat(moment) < window
    ]
    if len(history) >= limit:
        reason = (
            f"{len(history)} restarts within {window} (limit {limit}); last failure: {cause}. "
            "Restarts stopped."
        )
        _write(_control_dir(config) / f"{app}.crashloop.json", {"at": now.isoformat(), "reason": reason})
        raise CrashLoopError(f"{app} is crash-looping: {reason}")
    history.append(now.isoformat())
    _write(history_path, {"restarts": history})
    return len(history)


@dataclass(frozen=True)
class AppStatus:
    app: str
    state: str  # running | stopped | paused | crash-looping | failed | not started
    detail: str


def app_status(config: PipelineConfig, app: str, running_pids: list[int]) -> AppStatus:
    looping = crash_loop(config, app)
    desired = desired_state(config, app)
    ended = last_exit(config, app) or {}
    if looping:
        return AppStatus(app, "crash-looping", looping.get("reason", ""))
    if running_pids:
        suffix = " (supervision paused)" if desired["desired"] == "paused" else ""
        return AppStatus(app, "running", f"pid {', '.join(map(str, running_pids))}{suffix}")
    if desired["desired"] == "stopped":
        return AppStatus(app, "stopped", f"by {desired.get('by')} at {desired.get('at')}")
    if desired["desired"] == "paused":
        return AppStatus(app, "paused", f"supervision paused by {desired.get('by')} at {desired.get('at')}")
    if ended.get("status") == "failed":
        return AppStatus(app, "failed", f"{ended.get('detail')} at {ended.get('at')}")
    return AppStatus(app, "not running", f"last exit: {ended.get('status', 'never ran')}")


def mark_running(config: PipelineConfig, app: str) -> None:
    """Called by the app's driver at start; status and the supervisor read it."""
    _write(
        _control_dir(config) / f"{app}.running.json", {"pid": os.getpid(), "started_at": _now().isoformat()}
    )


def mark_not_running(config: PipelineConfig, app: str) -> None:
    (_control_dir(config) / f"{app}.running.json").unlink(missing_ok=True)


def running_app_pids(config: PipelineConfig, app: str) -> list[int]:
    """The driver's pid when it is alive (a kill -9 leaves the file, but not the process)."""
    record = _read(_control_dir(config) / f"{app}.running.json") or {}
    pid = record.get("pid")
    return [pid] if isinstance(pid, int) and Path(f"/proc/{pid}").exists() else []
