"""What operators want of each app, and what it is doing: one store that owns every control record.

Records under ``paths.control`` (small JSON, each written whole by ``store.write_atomically``):
- ``<app>.desired.json``: ``running`` (the default), ``stopped`` or ``paused`` (supervision paused for
  maintenance: a running app keeps running, but nothing restarts it), with who/when/why;
- ``<app>.stop``: the stop marker the app polls between batches (drain, commit, exit 0);
- ``<app>.starting.json``: the launcher's pid from spark-submit until the app's queries run (written by
  the supervisor and ``pipelinectl run``), so status says ``starting`` while the JVM comes up;
- ``<app>.running.json``: the driver's pid and host while it runs, and where it serves its metrics
  (written by the app's lifecycle; Prometheus finds the drivers through it, ``metrics_targets``);
- ``<app>.exit.json``: how the app last ended (stopped / finished / failed), written by the app;
- ``<app>.restarts.json``: every restart, the supervisor's of the driver and the driver's of a failed
  query (the totals, exported as metrics), the recent ones (for the crash-loop guard, which both kinds
  share) and the last one's kind and cause, counted once, under a lock;
- ``<app>.crashloop.json``: present while the guard has tripped; cleared by start/restart/resume.
- ``<app>.watchdog.json``: how often the liveness watchdog restarted the app as stuck, and the last
  reason (the total is exported as a metric).

The CLI, the DAGs, the apps and the metrics exporter all read and write them through ``ControlStore``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from stream_pipelines.core import resource_manager, store
from stream_pipelines.core.config import PipelineConfig
from stream_pipelines.core.procfs import process_exists, this_host
from stream_pipelines.core.registry import App
from stream_pipelines.core.store import read_json, write_json

Desired = Literal["running", "stopped", "paused"]
Action = Literal["stop", "start", "restart", "pause", "resume"]
ExitStatus = Literal["stopped", "finished", "failed"]
# A restart of the whole driver (by its supervisor), or of one failed query inside the running driver.
RestartKind = Literal["driver", "in-driver"]
IN_DRIVER: RestartKind = "in-driver"


class CrashLoopError(RuntimeError):
    """Too many restarts within the window: restarts stop until a person intervenes."""


@dataclass(frozen=True)
class Restarts:
    total: int = 0
    # ISO times of the restarts still inside the crash-loop window when last counted.
    recent: list[str] = field(default_factory=list)
    # Of the total, the failed queries restarted inside their running driver (no new JVM).
    in_driver: int = 0
    # The last restart: "driver" or "in-driver", its cause and when.
    last_kind: RestartKind | None = None
    last_cause: str | None = None
    last_at: str | None = None
    # The last restart of a whole driver (an in-driver restart leaves it).
    last_driver_at: str | None = None

    def describe_last(self) -> str | None:
        if self.last_kind is None:
            return None
        how = "query restarted inside the driver" if self.last_kind == IN_DRIVER else "driver restarted"
        return f"{how} at {self.last_at}: {self.last_cause}"


@dataclass(frozen=True)
class MetricsEndpoint:
    """Where a running driver serves its metrics, by a name Prometheus can reach."""

    host: str
    port: int

    @property
    def address(self) -> str:
        """host:port, as a Prometheus target; an IPv6 address takes brackets."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


@dataclass(frozen=True)
class RunningDriver:
    """An app's running record: the driver's pid on its host, when it started, where its metrics are."""

    pid: int | None
    # None in a record written before records named their host.
    host: str | None
    started_at: str | None
    # None when the driver serves no metrics (metrics.enabled false).
    metrics: MetricsEndpoint | None

    def alive_here(self) -> bool:
        """Its pid runs on this host, the one that wrote the record (records without a host are older
        than drivers elsewhere: this host's). A driver on another host (a YARN container) cannot be
        looked at from here, and its pid here would be some other process."""
        return self.host in (None, this_host()) and process_exists(self.pid)


def _now() -> datetime:
    return datetime.now(UTC)


class ControlStore:
    """Every control record of every app, in the ``paths.control`` folder."""

    def __init__(self, config: PipelineConfig) -> None:
        self.root = store.location(config.spark.extra_conf, config.data_path("control"))

    def _path(self, app: str, record: str) -> Path:
        return self.root / f"{app}.{record}"

    def _read(self, app: str, record: str) -> dict[str, Any] | None:
        path = self._path(app, record)
        try:
            return read_json(path)
        except ValueError:
            return {"unreadable": str(path)}

    # ---- what operators want

    def desired(self, app: str) -> dict[str, Any]:
        return self._read(app, "desired.json") or {"desired": "running", "by": "default"}

    def set_desired(self, app: str, desired: Desired, *, by: str, reason: str) -> None:
        stamp = {"desired": desired, "by": by, "at": _now().isoformat(), "reason": reason}
        write_json(self._path(app, "desired.json"), stamp)

    def stop_marker(self, app: str) -> Path:
        return self._path(app, "stop")

    def request_stop(self, app: str) -> Path:
        marker = self.stop_marker(app)
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()
        return marker

    def clear_stop(self, app: str) -> bool:
        """Before a start: a marker left by an earlier stop would end the new run at once."""
        marker = self.stop_marker(app)
        existed = marker.exists()
        marker.unlink(missing_ok=True)
        return existed

    # ---- what the app is doing

    def mark_starting(self, app: str) -> None:
        write_json(self._path(app, "starting.json"), {"pid": os.getpid(), "at": _now().isoformat()})

    def starting(self, app: str) -> dict[str, Any] | None:
        """The launch in progress, while its launcher lives (a dead one started nothing)."""
        record = self._read(app, "starting.json") or {}
        pid = record.get("pid")
        return record if process_exists(pid) else None

    def clear_starting(self, app: str) -> None:
        self._path(app, "starting.json").unlink(missing_ok=True)

    def mark_running(self, app: str, metrics: MetricsEndpoint | None = None) -> None:
        """Record this process as the app's driver, and ``metrics``, where it serves its metrics."""
        record: dict[str, Any] = {"pid": os.getpid(), "host": this_host(), "started_at": _now().isoformat()}
        if metrics is not None:
            record["metrics"] = {"host": metrics.host, "port": metrics.port}
        write_json(self._path(app, "running.json"), record)
        self.clear_starting(app)

    def mark_not_running(self, app: str) -> None:
        self._path(app, "running.json").unlink(missing_ok=True)

    def running_driver(self, app: str) -> RunningDriver | None:
        """The app's running record as written, None without one; whether its driver still lives is the
        caller's question: a kill -9 leaves the record, but not the process."""
        record = self._read(app, "running.json")
        return None if record is None else _running_driver_of(record)

    def uncounted_death(self, app: str) -> str | None:
        """Why the next start of the app is a restart nobody counted yet, when it is: called once no
        driver runs the app. Its last driver left its running record (no clean exit: killed, its
        container or node lost) and no driver restart was counted since that driver started, so it died
        while no supervisor followed it (the task runner gone, the scheduler restarting). None when the
        last driver exited cleanly, or its death was counted (the retry policy of the try that followed
        it)."""
        driver = self.running_driver(app)
        if driver is None or not driver.started_at:
            return None
        counted = self.restarts(app).last_driver_at
        if counted and datetime.fromisoformat(counted) >= datetime.fromisoformat(driver.started_at):
            return None
        where = f"pid {driver.pid} on {driver.host}" if driver.host else f"pid {driver.pid}"
        return (
            f"its last driver ({where}, started {driver.started_at}) ended without a clean exit "
            "while no supervisor followed it"
        )

    def running_pids(self, app: str) -> list[int]:
        """The driver's pid when it is alive on this host (a kill -9 leaves the record, but not the
        process; a driver on another host is not this host's process)."""
        driver = self.running_driver(app)
        return [driver.pid] if driver is not None and driver.pid and driver.alive_here() else []

    def record_exit(self, app: str, status: ExitStatus, detail: str) -> None:
        write_json(
            self._path(app, "exit.json"),
            {"app": app, "status": status, "detail": detail, "at": _now().isoformat()},
        )

    def last_exit(self, app: str) -> dict[str, Any] | None:
        return self._read(app, "exit.json")

    def exit_recorded_at(self, app: str) -> float | None:
        """When the exit record was last written (epoch seconds), None if never."""
        path = self._path(app, "exit.json")
        return path.stat().st_mtime if path.is_file() else None

    # ---- restarts and the crash-loop guard

    def restarts(self, app: str) -> Restarts:
        return _restarts_of(self._read(app, "restarts.json"))

    def restarts_path(self, app: str) -> Path:
        return self._path(app, "restarts.json")

    def record_restart(
        self,
        app: str,
        *,
        cause: str,
        limit: int | None = None,
        window: timedelta | None = None,
        kind: RestartKind = "driver",
    ) -> int:
        """Count one restart (a new driver, or a query restarted inside its driver) and return the count
        within the window (the total without a guard).

        With ``limit`` and ``window``: at the limit, mark the app crash-looping and raise instead. One
        lock around read-and-write, so concurrent supervisors never lose a count.
        """
        now = _now()

        def count(record: dict[str, Any] | None) -> dict[str, Any]:
            counted = _restarts_of(record)
            recent = [
                moment
                for moment in counted.recent
                if window is None or now - datetime.fromisoformat(moment) < window
            ]
            if limit is not None and len(recent) >= limit:
                reason = (
                    f"{len(recent)} restarts within {window} (limit {limit}); last failure: {cause}. "
                    "Restarts stopped."
                )
                write_json(self._path(app, "crashloop.json"), {"at": now.isoformat(), "reason": reason})
                raise CrashLoopError(f"{app} is crash-looping: {reason}")
            recent.append(now.isoformat())
            return {
                "app": app,
                "total": counted.total + 1,
                "in_driver": counted.in_driver + (kind == IN_DRIVER),
                "recent": recent,
                "last_kind": kind,
                "last_cause": cause,
                "at": now.isoformat(),
                "driver_at": (record or {}).get("driver_at") if kind == IN_DRIVER else now.isoformat(),
            }

        written = store.update_json(self._path(app, "restarts.json"), count)
        return len(written["recent"]) if limit is not None else written["total"]

    def record_watchdog_restart(self, app: str, reason: str) -> int:
        """Count one restart of a stuck app by the watchdog (``record_restart`` counts it as a crash too)."""

        def count(record: dict[str, Any] | None) -> dict[str, Any]:
            total = _count_of(record) + 1
            return {"app": app, "total": total, "last_reason": reason, "at": _now().isoformat()}

        return store.update_json(self._path(app, "watchdog.json"), count)["total"]

    def watchdog_restarts(self, app: str) -> int:
        return _count_of(self.watchdog_record(app))

    def watchdog_record(self, app: str) -> dict[str, Any] | None:
        """How often the watchdog restarted the app as stuck, the last reason and when; None if never."""
        return self._read(app, "watchdog.json")

    def crash_loop(self, app: str) -> dict[str, Any] | None:
        return self._read(app, "crashloop.json")

    def clear_crash_loop(self, app: str) -> None:
        self._path(app, "crashloop.json").unlink(missing_ok=True)


def _restarts_of(record: dict[str, Any] | None) -> Restarts:
    record = record or {}
    try:
        return Restarts(
            int(record.get("total", 0)),
            list(record.get("recent", [])),
            in_driver=int(record.get("in_driver", 0)),
            # Written before restarts had kinds: every restart was the driver's.
            last_kind=record.get("last_kind", "driver" if record.get("last_cause") else None),
            last_cause=record.get("last_cause"),
            last_at=record.get("at"),
            # Written before it was kept: the last restart, when it was the driver's.
            last_driver_at=record.get(
                "driver_at", record.get("at") if record.get("last_kind") != IN_DRIVER else None
            ),
        )
    except (TypeError, ValueError):
        return Restarts()


def _running_driver_of(record: dict[str, Any]) -> RunningDriver:
    pid, host, metrics = record.get("pid"), record.get("host"), record.get("metrics")
    endpoint = None
    if (
        isinstance(metrics, dict)
        and isinstance(metrics.get("host"), str)
        and isinstance(metrics.get("port"), int)
    ):
        endpoint = MetricsEndpoint(metrics["host"], metrics["port"])
    return RunningDriver(
        pid=pid if isinstance(pid, int) else None,
        host=host if isinstance(host, str) else None,
        started_at=record.get("started_at"),
        metrics=endpoint,
    )


def _count_of(record: dict[str, Any] | None) -> int:
    try:
        return int((record or {}).get("total", 0))
    except (TypeError, ValueError):
        return 0


# --------------------------------------------------------------------------- operator decisions


def apply_action(config: PipelineConfig, app: App, action: Action, *, by: str, reason: str = "") -> str:
    """Carry out an operator's action; returns a sentence saying what will happen."""
    name, store = app.name, ControlStore(config)
    if action in ("start", "restart", "resume"):
        store.clear_crash_loop(name)
    if action == "stop":
        store.set_desired(name, "stopped", by=by, reason=reason)
        store.request_stop(name)
        return f"{name}: asked to stop after its current batch; supervision will not restart it until started"
    if action == "restart":
        store.set_desired(name, "running", by=by, reason=reason)
        store.request_stop(name)
        return (
            f"{name}: asked to stop after its current batch; the supervisor then starts it from its "
            "checkpoint"
        )
    if action in ("start", "resume"):
        store.set_desired(name, "running", by=by, reason=reason)
        return f"{name}: supervision on; the supervisor starts it if it is not running"
    if action == "pause":
        store.set_desired(name, "paused", by=by, reason=reason)
        return f"{name}: supervision paused; a running app keeps running, but nothing restarts it"
    raise ValueError(f"unknown action {action!r}; use stop, start, restart, pause or resume")


def should_run(config: PipelineConfig, app: str) -> tuple[bool, str]:
    """Whether the supervisor may (re)start the app now, and why not if not."""
    store = ControlStore(config)
    looping = store.crash_loop(app)
    if looping:
        return False, (
            f"{app} is crash-looping since {looping.get('at')}: {looping.get('reason')}. "
            "Fix the cause, then run pipeline_control with action=start (or `pipelinectl control APP start`)."
        )
    desired = store.desired(app)
    who = f"by {desired.get('by')} at {desired.get('at')} ({desired.get('reason') or 'no reason given'})"
    if desired["desired"] == "stopped":
        return False, f"{app} was stopped {who}; start it with pipeline_control action=start"
    if desired["desired"] == "paused":
        return False, f"supervision of {app} is paused {who}; resume it with pipeline_control action=resume"
    return True, f"{app} should run"


@dataclass(frozen=True)
class AppStatus:
    app: str
    state: str  # running | starting | stopped | paused | crash-looping | failed | not running
    detail: str


def app_status(config: PipelineConfig, app: str) -> AppStatus:
    store = ControlStore(config)
    looping = store.crash_loop(app)
    desired = store.desired(app)
    ended = store.last_exit(app) or {}
    running_pids = store.running_pids(app)
    if looping:
        return AppStatus(app, "crash-looping", looping.get("reason", ""))
    in_yarn = _yarn_application(config, app)
    if in_yarn is not None:
        suffix = " (supervision paused)" if desired["desired"] == "paused" else ""
        return AppStatus(
            app, "running" if in_yarn.state == "RUNNING" else "starting", in_yarn.describe() + suffix
        )
    if running_pids:
        suffix = " (supervision paused)" if desired["desired"] == "paused" else ""
        return AppStatus(app, "running", f"pid {', '.join(map(str, running_pids))}{suffix}")
    starting = store.starting(app)
    if starting:
        return AppStatus(app, "starting", f"launched by pid {starting['pid']} at {starting['at']}")
    if desired["desired"] == "stopped":
        return AppStatus(app, "stopped", f"by {desired.get('by')} at {desired.get('at')}")
    if desired["desired"] == "paused":
        return AppStatus(app, "paused", f"supervision paused by {desired.get('by')} at {desired.get('at')}")
    if ended.get("status") == "failed":
        return AppStatus(app, "failed", f"{ended.get('detail')} at {ended.get('at')}")
    return AppStatus(app, "not running", f"last exit: {ended.get('status', 'never ran')}")


def _yarn_application(config: PipelineConfig, app: str) -> resource_manager.YarnApplication | None:
    """The app's application YARN runs now (id, attempt, tracking URL), on a config whose drivers run in
    YARN; None elsewhere, or when the ResourceManager does not answer (then the local records speak)."""
    if not config.drivers_in_cluster:
        return None
    rm = resource_manager.for_config(config, timeout_s=5.0)
    try:
        running = rm.applications(app) if rm is not None else []
    except resource_manager.ResourceManagerError:
        return None
    return running[-1] if running else None
