"""A driver in a YARN application, as its launchers see it: found after spark-submit, followed to its end,
stopped, and its log's tail read back. ``pipelinectl run`` and the Airflow supervisor both use it.

With ``deploy_mode: cluster`` a streaming app's spark-submit returns once YARN accepted the application
(``spark.yarn.submit.waitAppCompletion=false``): nothing of the driver is left on the launcher's host.
Each launch tags its application with a tag of its own (``resource_manager.launch_tag``), so the launcher
knows which of the app's applications is the one it submitted.
"""

from __future__ import annotations

import dataclasses
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from xml.etree import ElementTree

from stream_pipelines.control.control_store import ControlStore
from stream_pipelines.core import store
from stream_pipelines.core.config import PipelineConfig
from stream_pipelines.core.resource_manager import (
    ResourceManager,
    ResourceManagerError,
    YarnApplication,
    for_config,
    launch_tag,
)

# YARN's words for a driver's exit: "User application exited with status N" (the driver's own exit
# code, from Spark's ApplicationMaster), "... exited with exitCode: N" (the container's, e.g. 137 when
# it was killed with SIGKILL).
_EXIT_PATTERNS = (
    re.compile(r"User application exited with status (-?\d+)"),
    re.compile(r"exited with\s+exitCode:\s*(-?\d+)"),
    re.compile(r"Exit code is:?\s*(-?\d+)", re.IGNORECASE),
)


class DriverNotFound(RuntimeError):
    """spark-submit returned, but the ResourceManager lists no application of that launch."""


def new_launch_tag() -> str:
    return launch_tag(uuid.uuid4().hex[:12])


def resource_manager_of(config: PipelineConfig) -> ResourceManager:
    found = for_config(config)
    if found is None:
        raise ValueError("this config's drivers do not run in YARN (spark.master is not yarn)")
    return found


def submitted(rm: ResourceManager, tag: str, timeout_s: float = 60.0) -> YarnApplication:
    """The application one launch submitted (any state): spark-submit returns once YARN accepted it,
    and the ResourceManager lists it from then on."""
    deadline = time.monotonic() + timeout_s
    states = ("NEW", "NEW_SAVING", "SUBMITTED", "ACCEPTED", "RUNNING", "FINISHED", "FAILED", "KILLED")
    while True:
        try:
            found = rm.tagged(tag, states)
        except ResourceManagerError:
            found = []
        if found:
            return found[-1]
        if time.monotonic() > deadline:
            raise DriverNotFound(f"no YARN application tagged {tag} at {rm.url} within {timeout_s:.0f}s")
        time.sleep(1)


def exit_code(application: YarnApplication) -> int | None:
    """The driver's exit code as YARN reports it, when it says."""
    for pattern in _EXIT_PATTERNS:
        match = pattern.search(application.diagnostics)
        if match:
            return int(match.group(1))
    return None


@dataclass(frozen=True)
class Outcome:
    """How a followed application ended: ``graceful`` for a deliberate stop or a finished run."""

    graceful: bool
    code: int | None
    text: str


def outcome(config: PipelineConfig, app: str, application: YarnApplication) -> Outcome:
    """An ended application's outcome: YARN's final status, the driver's exit record (which says why a
    driver stopped), and its exit code from YARN's diagnostics."""
    ended = ControlStore(config).last_exit(app) or {}
    status = ended.get("status")
    code = exit_code(application)
    succeeded = application.state == "FINISHED" and application.final_status == "SUCCEEDED"
    graceful = succeeded and status in ("stopped", "finished")
    parts = [application.describe()]
    if status:
        parts.append(f"driver's exit record: {status} {ended.get('detail', '')}".rstrip())
    if application.diagnostics:
        parts.append(f"YARN: {application.diagnostics.splitlines()[0][:300]}")
    if code is not None:
        parts.append(f"Error code is: {code}")
    return Outcome(graceful, code, "; ".join(parts))


def follow(
    rm: ResourceManager,
    application: YarnApplication,
    interval_s: float,
    on_look: Callable[[YarnApplication], None] = lambda _application: None,
    should_stop: Callable[[], bool] = lambda: False,
) -> YarnApplication:
    """Look at the application every ``interval_s`` until it ends (its last record), calling ``on_look``
    with each; a ResourceManager that does not answer is asked again. ``should_stop`` ends the following
    early (the application's current record is returned)."""
    current = application
    while not current.ended and not should_stop():
        time.sleep(interval_s)
        try:
            looked = rm.application(current.id)
        except ResourceManagerError:
            continue
        if looked is None:
            # Forgotten by a ResourceManager restarted without recovery: it ran nothing of ours any more.
            return dataclasses.replace(current, state="KILLED", diagnostics="unknown to the ResourceManager")
        current = looked
        on_look(current)
    return current


def end(rm: ResourceManager, application_id: str, drain_timeout_s: float) -> bool:
    """Wait up to the drain timeout for the application to end (a stop was asked), then kill it through
    the ResourceManager and wait for YARN to say so. True when it ended by itself."""
    deadline = time.monotonic() + drain_timeout_s
    while time.monotonic() < deadline:
        current = _look(rm, application_id)
        if current is None or current.ended:
            return True
        time.sleep(1)
    rm.kill(application_id)
    killed_by = time.monotonic() + 60
    while time.monotonic() < killed_by:
        current = _look(rm, application_id)
        if current is None or current.ended:
            break
        time.sleep(0.5)
    return False


def staging_folder(config: PipelineConfig, application_id: str) -> str | None:
    """Where spark-submit put the application's files (its driver bundle among them): Spark's
    ``.sparkStaging/<id>`` under ``spark.yarn.stagingDir``, else under the submitting user's home on the
    default file system. None when the config does not name that file system."""
    extra = config.spark.extra_conf
    root = extra.get("spark.yarn.stagingDir")
    if root is None:
        default_fs = extra.get(store.DEFAULT_FS) or _hadoop_default_fs(config.hadoop_conf_dir())
        if not default_fs:
            return None
        root = f"{default_fs.rstrip('/')}/user/{store.hadoop_user()}"
    return f"{root.rstrip('/')}/.sparkStaging/{application_id}"


def _hadoop_default_fs(conf_dir: str | None) -> str | None:
    """``fs.defaultFS`` of the Hadoop client configuration spark-submit reads (``core-site.xml``)."""
    if conf_dir is None:
        return None
    try:
        root = ElementTree.parse(Path(conf_dir) / "core-site.xml").getroot()
    except (OSError, ElementTree.ParseError):
        return None
    for prop in root.iter("property"):
        if (prop.findtext("name") or "").strip() == "fs.defaultFS":
            return (prop.findtext("value") or "").strip() or None
    return None


def remove_staging(config: PipelineConfig, application: YarnApplication) -> str | None:
    """Remove an ended application's staging folder, which Spark leaves behind when its driver could not
    clean up (a container killed with -9): it holds the driver's bundle, secrets included. Returns what
    went wrong, if anything (a failed removal must not fail the supervisor)."""
    folder = staging_folder(config, application.id) if application.ended else None
    if folder is None:
        return None
    try:
        store.remove_tree(store.location(config.spark.extra_conf, folder))
    except Exception as error:  # the store's errors vary by backend; this is housekeeping
        return f"could not remove {folder}: {error}"
    return None


def _look(rm: ResourceManager, application_id: str) -> YarnApplication | None:
    try:
        return rm.application(application_id)
    except ResourceManagerError:
        return YarnApplication.of({"id": application_id, "state": "UNKNOWN"})
