"""YARN's ResourceManager, asked over its REST API: the one place that knows how an application looks there.

With ``spark.master: yarn`` and ``deploy_mode: cluster`` a driver runs in its application's
ApplicationMaster container, somewhere in the cluster; the supervisor follows it here, not by pid. Every
submission carries two tags (``spark.yarn.tags``): the project's, and the app's (``tags_of``), which is
how a supervisor finds an app's applications without knowing their ids, before it submits (never two of
one app) and after a task runner died (adoption).

The REST API answers JSON; Hadoop 3.4 writes it without the root element (``{"apps": [...]}``) where
older ones wrap it (``{"apps": {"app": [...]}}``): ``unwrap`` reads both.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stream_pipelines.core.config import PipelineConfig

PROJECT_TAG = "stream-pipelines"
# YARN's states of an application that is not over, and of one that is.
ACTIVE_STATES = ("NEW", "NEW_SAVING", "SUBMITTED", "ACCEPTED", "RUNNING")
ENDED_STATES = ("FINISHED", "FAILED", "KILLED")


class ResourceManagerError(RuntimeError):
    """The ResourceManager did not answer, or refused; the message names the call."""


def app_tag(name: str) -> str:
    """The tag of every application of one app or job (YARN lower-cases tags; names are lower case)."""
    return f"{PROJECT_TAG}-{name}".lower()


def tags_of(name: str) -> str:
    """``spark.yarn.tags`` of a submission of ``name``."""
    return f"{PROJECT_TAG},{app_tag(name)}"


def launch_tag(launch_id: str) -> str:
    """The tag of one submission: which of an app's applications a launcher's spark-submit made."""
    return f"{PROJECT_TAG}-launch-{launch_id}".lower()


def application_of_container(container_id: str | None) -> str | None:
    """``application_<ts>_<n>`` of a container id (``container_[e<epoch>_]<ts>_<n>_<attempt>_<i>``): how
    a driver in YARN knows its application before its JVM starts (``CONTAINER_ID`` in its environment)."""
    if not container_id or not container_id.startswith("container_"):
        return None
    parts = [part for part in container_id.split("_")[1:] if not part.startswith("e")]
    return f"application_{parts[0]}_{parts[1]}" if len(parts) >= 4 else None


def for_config(config: PipelineConfig, timeout_s: float = 10.0) -> ResourceManager | None:
    """The ResourceManager of a config on YARN; None for any other master."""
    if not config.on_yarn or config.yarn.resourcemanager_url is None:
        return None
    return ResourceManager(config.yarn.resourcemanager_url, timeout_s=timeout_s)


def unwrap(answer: dict[str, Any], key: str, inner: str | None = None) -> Any:
    """``answer[key]``, or ``answer[key][inner]`` when the server wrapped the list in its element name."""
    value = answer.get(key)
    if isinstance(value, dict) and inner is not None and inner in value:
        return value[inner]
    if value is None and inner is None:
        return answer
    return value


@dataclass(frozen=True)
class YarnApplication:
    id: str
    name: str
    state: str
    final_status: str
    tags: tuple[str, ...]
    tracking_url: str
    diagnostics: str
    started_ms: int
    finished_ms: int
    am_container_logs: str
    am_host: str

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES

    @property
    def ended(self) -> bool:
        return self.state in ENDED_STATES

    @property
    def am_container_id(self) -> str | None:
        """The ApplicationMaster's container (the driver's, in cluster mode), from its log link."""
        tail = self.am_container_logs.rstrip("/").split("/")
        found = [part for part in tail if part.startswith("container_")]
        return found[0] if found else None

    @property
    def attempt(self) -> int | None:
        """The attempt the AM container belongs to (``container_<ts>_<app>_<attempt>_<n>``)."""
        container = self.am_container_id
        if container is None:
            return None
        parts = container.split("_")
        # container_e<epoch>_<ts>_<app>_<attempt>_<n> on an RM with an epoch, else without it.
        try:
            return int(parts[-2])
        except (IndexError, ValueError):
            return None

    def describe(self) -> str:
        finished = self.final_status not in ("", "UNDEFINED")
        outcome = f"{self.state}/{self.final_status}" if finished else self.state
        attempt = f", attempt {self.attempt}" if self.attempt else ""
        return f"YARN application {self.id} ({outcome}{attempt}, tracking {self.tracking_url or 'n/a'})"

    @classmethod
    def of(cls, record: dict[str, Any]) -> YarnApplication:
        tags = record.get("applicationTags") or ""
        return cls(
            id=record["id"],
            name=record.get("name", ""),
            state=record.get("state", ""),
            final_status=record.get("finalStatus", ""),
            tags=tuple(tag for tag in tags.split(",") if tag),
            tracking_url=record.get("trackingUrl") or "",
            diagnostics=(record.get("diagnostics") or "").strip(),
            started_ms=int(record.get("startedTime") or 0),
            finished_ms=int(record.get("finishedTime") or 0),
            am_container_logs=record.get("amContainerLogs") or "",
            am_host=record.get("amHostHttpAddress") or "",
        )


class ResourceManager:
    """The REST API of one ResourceManager (``http://<host>:<port>``, its web address)."""

    def __init__(self, url: str, timeout_s: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any] | None:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            f"{self.url}{path}",
            data=data,
            method=method,
            headers={"Accept": "application/json", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                text = response.read().decode()
        except urllib.error.HTTPError as error:
            if error.code == 404:
                return None
            raise ResourceManagerError(
                f"{method} {self.url}{path}: HTTP {error.code} {error.read().decode(errors='replace')[:300]}"
            ) from None
        except (OSError, urllib.error.URLError) as error:
            raise ResourceManagerError(
                f"{method} {self.url}{path}: the ResourceManager did not answer: {error}"
            ) from None
        return json.loads(text) if text.strip() else {}

    def applications(self, name: str, states: tuple[str, ...] = ACTIVE_STATES) -> list[YarnApplication]:
        """The applications of one app or job in ``states``, oldest first."""
        return self.tagged(app_tag(name), states)

    def tagged(self, tag: str, states: tuple[str, ...] = ACTIVE_STATES) -> list[YarnApplication]:
        query = urllib.parse.urlencode({"applicationTags": tag, "states": ",".join(states)})
        answer = self._call("GET", f"/ws/v1/cluster/apps?{query}") or {}
        records = unwrap(answer, "apps", "app") or []
        found = [YarnApplication.of(record) for record in records]
        # Keep the exact tag only, whatever the server's filter matched.
        return sorted((app for app in found if tag in app.tags), key=lambda app: app.started_ms)

    def application(self, application_id: str) -> YarnApplication | None:
        answer = self._call("GET", f"/ws/v1/cluster/apps/{application_id}")
        if answer is None:
            return None
        return YarnApplication.of(unwrap(answer, "app"))

    def kill(self, application_id: str) -> None:
        """Ask YARN to kill the application (its containers, the driver's first); returns at once."""
        self._call("PUT", f"/ws/v1/cluster/apps/{application_id}/state", {"state": "KILLED"})

    def driver_log_tail(self, application: YarnApplication, name: str = "stderr", size: int = 8192) -> str:
        """The last ``size`` bytes of the driver's container log, from its NodeManager; empty when the
        NodeManager no longer has it (deleted after its retention, or the node is gone)."""
        container, host = application.am_container_id, application.am_host
        if not container or not host:
            return ""
        url = f"http://{host}/ws/v1/node/containers/{container}/logs/{name}?size=-{size}"
        try:
            with urllib.request.urlopen(url, timeout=self.timeout_s) as response:
                return response.read().decode(errors="replace")
        except (OSError, urllib.error.URLError):
            return ""
