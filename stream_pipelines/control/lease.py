"""One owner per app: a lease kept beside the app's checkpoints, renewed by the driver on its own timer.

Spark itself does not stop two drivers in different JVMs from using one checkpoint, and a supervisor
that lost track of its driver (a killed Airflow task runner) would start a second. So a driver takes
the app's lease before it starts any query:

- no lease: created if absent (an exclusive create: of two drivers racing, one wins);
- a live lease (heartbeat younger than ``supervision.lease_timeout``, and on this host a live pid):
  refused, naming the owner and its heartbeat age (exit ``OWNED_ELSEWHERE``);
- a stale lease: taken over, and the takeover is logged. The stale file is renamed aside first, so of
  two drivers taking over at once only one succeeds.

The owner renews it every ``supervision.heartbeat_interval`` (``LeaseKeeper``, a thread) from the
moment it takes it (a JVM slow to start must not look dead), and once the queries run with each
query's last batch and end offsets, so a supervisor can follow the app through the lease alone. A
renewal that finds another owner means this driver was frozen past the timeout and replaced: it
must stop at once. A graceful exit releases the lease.

``Lease`` is the one class that touches the lease file. It works on every store the file layer serves:
on a local (or mounted) filesystem with an atomic create (``link``) and rename, on S3 with conditional
PUTs (``If-None-Match: *`` to create, ``If-Match: <etag>`` to take over and to renew).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from stream_pipelines.core import resource_manager, store
from stream_pipelines.core.config import PipelineConfig
from stream_pipelines.core.procfs import ended_on_this_host, this_host

LEASE_FILE = "lease.json"
STALE_LEASES_KEPT = 3


@dataclass
class LeaseRecord:
    owner: str
    host: str
    pid: int
    started_at: float
    heartbeat_at: float
    spark_app_id: str | None = None
    # Per query: last batch id, its input rows, its watermark and when it was reported.
    queries: dict[str, dict[str, Any]] = field(default_factory=dict)
    # How long the driver's current call into its JVM has gone unanswered (0 once answered): a frozen
    # JVM cannot say so itself, and the Python side that renews the lease still runs.
    jvm_silent_s: float = 0.0

    def heartbeat_age(self, now: float | None = None) -> float:
        return max((now or time.time()) - self.heartbeat_at, 0.0)

    def describe(self, now: float | None = None) -> str:
        spark_app = self.spark_app_id or "not started"
        return (
            f"owner {self.owner} (pid {self.pid} on {self.host}, Spark app {spark_app}), "
            f"heartbeat {self.heartbeat_age(now):.0f}s ago"
        )


class LeaseHeldError(RuntimeError):
    """Another driver owns the app: starting a second one would write the same checkpoint and sinks."""

    def __init__(self, app: str, record: LeaseRecord) -> None:
        self.record = record
        super().__init__(
            f"{app} is already running: {record.describe()}. Not starting a second driver on the same "
            f"checkpoint; stop the running one first (`pipelinectl stop {app}`)"
        )


class LeaseLostError(RuntimeError):
    """This driver's lease was taken over: it was frozen or cut off longer than the lease timeout."""


class Lease:
    """The lease file of one app, beside its checkpoints, on whichever store holds them (see ``store``)."""

    def __init__(self, config: PipelineConfig, app: str) -> None:
        self.app = app
        self.path = (
            store.location(config.spark.extra_conf, config.data_path("checkpoints")) / app / LEASE_FILE
        )
        self.timeout_s = config.supervision.lease_timeout.seconds
        self.owner = uuid.uuid4().hex
        self.host = this_host()
        # The version of the lease as this owner last wrote it: on an object store a renewal is a
        # conditional PUT on it, so a renewal can never overwrite a takeover.
        self._written: str | None = None
        # On YARN, where a driver's application tells whether it ended, wherever it ran.
        self.resource_manager = resource_manager.for_config(config, timeout_s=5.0)

    def _read_versioned(self) -> tuple[LeaseRecord, str] | None:
        found = store.read_versioned(self.path)
        if found is None:
            return None
        data, version = found
        try:
            fields = json.loads(data)
            # A field this version does not know (a newer driver's) is left out, not a broken lease.
            known = {
                name: value for name, value in fields.items() if name in LeaseRecord.__dataclass_fields__
            }
            return LeaseRecord(**known), version
        except (ValueError, TypeError, AttributeError):
            # Half-written by a crashed writer cannot happen (atomic writes); a hand-edited file can.
            return LeaseRecord(
                owner="unreadable", host="?", pid=-1, started_at=0.0, heartbeat_at=0.0
            ), version

    def read(self) -> LeaseRecord | None:
        found = self._read_versioned()
        return found[0] if found else None

    def is_live(self, record: LeaseRecord, now: float | None = None) -> bool:
        if record.heartbeat_age(now) >= self.timeout_s:
            return False
        if self._application_ended(record):
            return False
        # On this host a dead pid ends the lease at once: a kill -9 must not delay the restart.
        return not ended_on_this_host(record.host, record.pid)

    def _application_ended(self, record: LeaseRecord) -> bool:
        """A driver in YARN whose application is FINISHED, FAILED or KILLED holds nothing, at once: its
        host may be another, and its heartbeat may look young for a lease timeout more."""
        if self.resource_manager is None or not (record.spark_app_id or "").startswith("application_"):
            return False
        try:
            application = self.resource_manager.application(record.spark_app_id or "")
        except resource_manager.ResourceManagerError:
            return False  # unknown: the heartbeat decides
        return application is not None and application.ended

    def acquire(self, log: Callable[[str], None]) -> LeaseRecord:
        """Own the app, or raise LeaseHeldError naming the live owner."""
        now = time.time()
        mine = LeaseRecord(self.owner, self.host, os.getpid(), now, now)
        # In a YARN container the application is known before the JVM starts: a supervisor can follow
        # it, and tell its end, from the first heartbeat.
        mine.spark_app_id = resource_manager.application_of_container(os.environ.get("CONTAINER_ID"))
        for _attempt in range(3):
            self._written = store.create_exclusive(self.path, self._encode(mine))
            if self._written is not None:
                return mine
            found = self._read_versioned()
            if found is None:
                continue  # released between our create and read: try again
            current, version = found
            if self.is_live(current):
                raise LeaseHeldError(self.app, current)
            aside = self.path.with_name(f"{LEASE_FILE}.stale-{time.time_ns()}-{uuid.uuid4().hex[:8]}")
            # Of two drivers taking over at once only one succeeds: the stale lease is moved aside
            # (a rename, on a filesystem) or replaced only if still unchanged (an object store).
            self._written = store.replace_if_unchanged(self.path, version, self._encode(mine), aside=aside)
            if self._written is None:
                continue  # another driver took it over first; look again
            log(f"took over a stale lease: {current.describe()} (kept as {aside.name})")
            self._forget_old_stale_leases()
            return mine
        raise LeaseHeldError(self.app, self.read() or mine)

    def _forget_old_stale_leases(self) -> None:
        """Keep the last few taken-over leases to look at; a crash loop must not pile up one per kill."""
        with contextlib.suppress(FileNotFoundError):  # another driver tidying up at the same time
            # Their names start with the takeover time in nanoseconds: name order is age order.
            aside = sorted(self.path.parent.glob(f"{LEASE_FILE}.stale-*"), key=lambda p: p.name)
            for old in aside[:-STALE_LEASES_KEPT]:
                old.unlink(missing_ok=True)

    @staticmethod
    def _encode(record: LeaseRecord) -> str:
        return json.dumps(asdict(record))

    def renew(self, record: LeaseRecord) -> None:
        record.heartbeat_at = time.time()
        renewed = (
            store.replace_if_unchanged(self.path, self._written, self._encode(record))
            if self._written
            else None
        )
        if renewed is not None:
            self._written = renewed
            return
        current = self.read()
        if current is None or current.owner != self.owner:
            taker = current.describe() if current else "nobody (the lease file is gone)"
            raise LeaseLostError(f"{self.app}: lease lost, now held by {taker}")
        # Still ours but not as last written (a filesystem without compare-and-swap): write it whole.
        store.write_atomically(self.path, self._encode(record))
        found = store.read_versioned(self.path)
        self._written = found[1] if found else None

    def release(self) -> None:
        current = self.read()
        if current is not None and current.owner == self.owner:
            self.path.unlink(missing_ok=True)


def live_owner(config: PipelineConfig, app: str) -> LeaseRecord | None:
    """The driver that owns the app right now, if any."""
    lease = Lease(config, app)
    owner = lease.read()
    return owner if owner is not None and lease.is_live(owner) else None


class LeaseKeeper:
    """Renews the lease on its own timer while the queries run; reports a lost lease once.

    The heartbeat says the driver process lives; the queries' progress says whether Spark works. They
    are kept apart: progress is asked of the JVM on a thread of its own, and a JVM that does not answer
    (frozen, or in a GC spiral) leaves the last progress in the lease while the heartbeat goes on. The
    supervisor's watchdog then sees a live driver whose batches stand still while data waits, and for
    how long the JVM has not answered (``jvm_silent_s``): a frozen JVM is found in seconds, a live one
    that makes no progress by the progress rule."""

    def __init__(self, lease: Lease, record: LeaseRecord, interval_s: float) -> None:
        self.lease, self.record, self.interval_s = lease, record, interval_s
        self._progress: Callable[[], dict[str, dict[str, Any]]] | None = None
        self._on_lost: Callable[[str], None] | None = None
        self.lost: str | None = None
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"lease-{lease.app}", daemon=True)
        self._asked: threading.Thread | None = None
        self._asked_at = 0.0
        self._answer: list[dict[str, dict[str, Any]]] = []
        # When the lease was last renewed (this process's monotonic clock): a query restarted inside
        # the driver must not start unless the lease is surely still this driver's.
        self.renewed_at = time.monotonic()

    def follow(
        self, progress: Callable[[], dict[str, dict[str, Any]]], on_lost: Callable[[str], None]
    ) -> None:
        """Once the queries run: carry their progress, and report a lost lease (at once if it was lost
        while they started)."""
        self._progress, self._on_lost = progress, on_lost
        if self.lost is not None:
            on_lost(self.lost)

    def start(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def held_surely(self) -> bool:
        """Whether no other driver can have taken the lease over: it is not lost, and its last renewal
        is younger than the lease timeout by a heartbeat's margin."""
        age = time.monotonic() - self.renewed_at
        return self.lost is None and age < self.lease.timeout_s - self.interval_s

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(timeout=self.interval_s + 5)

    def _run(self) -> None:
        while not self._stopping.wait(self.interval_s):
            try:
                progress = self._latest_progress()
                if progress is not None:
                    self.record.queries = progress
                # From before the write: the heartbeat it carries is stamped then, and a slow write
                # must not stretch how long the lease seems surely held.
                renewing_at = time.monotonic()
                self.lease.renew(self.record)
                self.renewed_at = renewing_at
            except LeaseLostError as error:
                self.lost = str(error)
                if self._on_lost is not None:
                    self._on_lost(self.lost)
                return
            except Exception as error:
                print(f"lease ({self.lease.app}): renewal failed, retrying: {error}", flush=True)

    def _latest_progress(self) -> dict[str, dict[str, Any]] | None:
        """The queries' progress if the JVM answers within a moment; None while an earlier ask is
        still unanswered (one ask at a time, so a frozen JVM does not pile up threads)."""
        if self._progress is None:
            return None  # the JVM and the queries are still coming up
        if self._asked is None:
            self._answer.clear()
            self._asked = threading.Thread(target=self._ask, name="lease-progress", daemon=True)
            self._asked_at = time.monotonic()
            self._asked.start()
        self._asked.join(timeout=min(self.interval_s, 2.0))
        if self._asked.is_alive():
            # The supervisor's watchdog reads this to tell a frozen JVM from a slow one.
            self.record.jvm_silent_s = round(time.monotonic() - self._asked_at, 1)
            return None
        self._asked = None
        self.record.jvm_silent_s = 0.0
        return self._answer[0] if self._answer else None

    def _ask(self) -> None:
        try:
            self._answer.append(self._progress())  # type: ignore[misc]
        except Exception as error:  # a query that just ended; the next ask tries again
            print(f"lease ({self.lease.app}): could not read the queries' progress: {error}", flush=True)
