"""`make chaos`: faults injected at random into a private copy of the local stack, then a verification.

The stack is the one `make up` starts (Kafka broker, PostgreSQL, Airflow api-server, two schedulers and
the dag-processor with the LocalExecutor, each kept running by devtools/keeper.py, the supervisor DAGs
of the chosen apps unpaused, the live generator), in its own data root and on free ports, with short
supervision timings. The data root is on the local disk, or (``--store hdfs|s3``) on an HDFS or S3
server the stack starts on loopback. While the generator produces, it injects faults drawn at random
(seeded) from these classes:

- ``driver-kill``: kill -9 of an app's driver process group (the spark-submit JVM and its Python);
- ``runner-kill``: kill -9 of the Airflow task runner above spark-submit (the task is retried and must
  adopt the orphaned driver, not start a second one);
- ``scheduler-restart``: the scheduler running a supervisor task (of two) stopped (SIGTERM to its group)
  and started again;
- ``scheduler-kill``: kill -9 of the scheduler running a supervisor task, which its keeper starts again
  (as a service manager would) after a pause; the other schedules meanwhile and takes the killed one's
  tasks over: their next tries adopt the drivers, never with a second one;
- ``metadata-db-restart``: Airflow's PostgreSQL stopped for 10-60 s, then started: the drivers stream
  on, and Airflow's components and the supervisor tasks come back by themselves;
- ``driver-freeze``: SIGSTOP of a driver JVM for longer than the supervisor's watchdog window, then
  SIGCONT (the watchdog must find the JVM silent, kill it, and the supervisor restart it from its
  checkpoint);
- ``query-failure`` (local store): one query's next checkpoint write refused, as a store refuses one
  write in an outage (a folder where the offset log's next entry goes), taken away once the query has
  failed: the driver must restart the query itself, with no new driver;
- ``broker-restart``: the Kafka broker stopped (controlled shutdown) and started again;
- ``storage-outage`` (with ``--store``): the store gone for 30-60 s under every app: the NameNode
  stopped and started again, or the S3 server frozen (moto keeps objects in memory, so a restart would
  erase them rather than interrupt them). Each app rides it out or is restarted by its supervisor.

After each fault it waits until the app has recovered (a batch committed after the fault, one driver,
its supervisor task running), with a timeout that counts as a failure to recover, then a small random
gap. A thread samples the process table every second and counts the drivers of each app (a live
process naming the app's entry script whose parent does not; zombies ignored).

At the end it stops the generator, lets the apps drain to the end of the topics, stops them gracefully
and verifies: the archive holds every produced offset exactly once, with no gap; the sensor and ad
outputs equal an exact recompute from the archive except where the batch log explains a difference
(the nightly reconciliation, when both of those apps ran); never more than one driver per app. It
prints a table per fault class (count, seconds from the fault to the next committed batch, restarts,
adoptions, watchdog kills) and writes everything to a JSON file. Exit 0 only when all of it holds.

    python -m stream_pipelines.devtools.chaos --faults 20 --seed 7          (make chaos CHAOS_ARGS=...)
    python -m stream_pipelines.devtools.chaos --store hdfs --classes storage-outage,driver-kill
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from stream_pipelines.control.control_store import ControlStore
from stream_pipelines.control.lease import Lease
from stream_pipelines.core import store
from stream_pipelines.core.config import PROJECT_ROOT, PipelineConfig, load_config, override_variables
from stream_pipelines.core.procfs import process_age_s
from stream_pipelines.core.registry import APP_NAMES, APPS
from stream_pipelines.core.resource_manager import (
    ResourceManager,
    ResourceManagerError,
    application_of_container,
)
from stream_pipelines.devtools.hdfs import LocalHdfs
from stream_pipelines.devtools.keeper import kept_pid
from stream_pipelines.devtools.object_store import CREDENTIALS, ObjectStoreServer
from stream_pipelines.devtools.postgres import MetadataDatabase, MetadataUnavailable, PostgresError
from stream_pipelines.devtools.processes import (
    Proc,
    alive,
    descendants,
    environment_of,
    free_port,
    parent_pid,
    process_table,
    started_with,
    stop_process_group,
    stop_processes,
)
from stream_pipelines.devtools.stack import (
    SCHEDULERS,
    airflow_components,
    airflow_environment,
    generator_component,
    metadata_server,
    migrate_airflow_db,
    stack_dir,
    start_component,
    start_components,
    stop_components,
)
from stream_pipelines.devtools.yarn import LocalYarn
from stream_pipelines.observability.monitoring_rules import AIRFLOW_API_SERVER

DEFAULT_ROOT = PROJECT_ROOT / "data" / "chaos"
ROOT_MARKER = ".chaos-root"
# Everything a stack starts carries its root in one of these (``paths.local_root``, or a local
# ``paths.data_root`` as the tests' stacks set it), handed on.
ROOT_VARIABLES = ("PIPELINE__PATHS__LOCAL_ROOT", "PIPELINE__PATHS__DATA_ROOT")
FAULT_CLASSES = (
    "driver-kill",
    "container-kill",
    "runner-kill",
    "scheduler-restart",
    "scheduler-kill",
    "metadata-db-restart",
    "driver-freeze",
    "broker-restart",
    "nodemanager-restart",
    "storage-outage",
    "query-failure",
)
FAULT_LABELS = {
    "driver-kill": "kill -9 of a driver's process group",
    "container-kill": "kill -9 of a driver's YARN container (its process group)",
    "runner-kill": "kill -9 of the task runner above spark-submit, or following the application",
    "scheduler-restart": "restart of one of the two schedulers",
    "scheduler-kill": "kill -9 of one of the two schedulers, started again by its keeper",
    "metadata-db-restart": "Airflow's PostgreSQL stopped for 10-60 s, then started",
    "driver-freeze": "SIGSTOP of a driver JVM past the watchdog window, then SIGCONT",
    "broker-restart": "restart of the Kafka broker",
    "nodemanager-restart": "the NodeManager stopped (its containers with it) and started again",
    "storage-outage": "the store down for 30-60 s: NameNode stopped and started, or S3 server frozen",
    "query-failure": "one query's next checkpoint write refused until it fails (recovered in the driver)",
}
# Where the drivers run: child processes of their Airflow tasks (client mode), or YARN containers
# (``--cluster yarn``: a ResourceManager and a NodeManager on loopback over their HDFS, the data root).
CLUSTERS = ("local", "yarn")
# Faults of one kind of cluster only: a driver's process group is spark-submit's on the worker, a
# container's in YARN; only YARN has a NodeManager to restart.
YARN_FAULTS = {"container-kill", "nodemanager-restart"}
WORKER_DRIVER_FAULTS = {"driver-kill", "query-failure"}
# What `make chaos --cluster yarn` draws from unless --classes says otherwise.
YARN_DEFAULT_CLASSES = (
    "container-kill",
    "runner-kill",
    "scheduler-restart",
    "scheduler-kill",
    "metadata-db-restart",
    "driver-freeze",
    "nodemanager-restart",
    "broker-restart",
)
# On YARN a launch's spark-submit returns once the application is accepted (seconds); one that stays
# longer on the worker holds a driver there, which cluster mode must not.
WORKER_SUBMIT_LIMIT_S = 120.0
NODEMANAGER_DOWN_S = 5.0
METADATA_DB_DOWN_S = (10.0, 60.0)
# Faults of Airflow or its database, not of a driver: every driver streams on through them.
ORCHESTRATION_FAULTS = {"scheduler-restart", "scheduler-kill", "metadata-db-restart"}
SCHEDULER_FAULTS = ("scheduler-restart", "scheduler-kill")
# Where the stack keeps its data root: the local disk, or a store server it starts on loopback.
STORES = ("local", "hdfs", "s3")
STORE_FAULTS = {"storage-outage"}
# Injected by a folder on the local disk, where the store keeps the checkpoints.
LOCAL_FAULTS = {"query-failure"}
OUTAGE_S = (30.0, 60.0)
APP_FAULTS = {"driver-kill", "container-kill", "runner-kill", "driver-freeze", "query-failure"}
S3_BUCKET = "pipeline-chaos"
TRIGGER_S = 3
# Short supervision timings, so that 20 faults fit in half an hour; the guard must not trip during them.
STACK_SETTINGS = (
    "kafka.max_offsets_per_trigger=5000",
    f"archive.trigger={TRIGGER_S} seconds",
    f"sensors.trigger={TRIGGER_S} seconds",
    f"ads.trigger={TRIGGER_S} seconds",
    "spark.shuffle_partitions=2",
    "spark.driver_memory=1g",
    "metrics.enabled=false",
    "supervision.retry_delay=2 seconds",
    "supervision.max_retry_delay=10 seconds",
    "supervision.heartbeat_interval=2 seconds",
    # 10 heartbeats: a loaded 2-core machine delays renewals by several seconds.
    "supervision.lease_timeout=20 seconds",
    "supervision.drain_timeout=15 seconds",
    "supervision.poll_interval=5 seconds",
    "supervision.max_restarts=50",
)
# The watchdog's window as shipped (2 minutes): a shorter one calls the stateful apps' slow first
# batches on a loaded 2-core machine hangs and kills them in a loop.
WATCHDOG_SETTINGS = ("supervision.watchdog_triggers=5", "supervision.watchdog_min_window=2 minutes")
AIRFLOW_COMPONENTS = (AIRFLOW_API_SERVER, *SCHEDULERS, "airflow-dag-processor")


def say(message: str) -> None:
    print(f"[{datetime.now().strftime('%H:%M:%S')}] {message}", flush=True)


# --------------------------------------------------------------------------- the process table


def drivers_in(table: dict[int, Proc], apps: Sequence[str], root: Path | None = None) -> dict[str, list[int]]:
    """Per app, its drivers: live processes naming its entry script whose parent does not name it (the
    spark-submit JVM, whose Python child is the same driver; an orphaned Python alone counts too). With
    ``root``, only those of the stack with that data root (other stacks and tests may run the same app)."""
    found: dict[str, list[int]] = {}
    for app in apps:
        script = APPS[app].entry_point
        naming = {
            pid
            for pid, proc in table.items()
            if proc.state != "Z" and script in proc.argv and (root is None or of_stack(pid, root))
        }
        found[app] = sorted(pid for pid in naming if table[pid].ppid not in naming)
    return found


def of_stack(pid: int, root: Path) -> bool:
    """Whether the process runs with the stack's root in its environment (all it starts does): as its
    host-local root, or, on a stack that keeps everything on the local disk, as its data root."""
    return any(started_with(pid, variable, str(root)) for variable in ROOT_VARIABLES)


class Sampler:
    """Counts each app's drivers every ``interval_s`` in a thread (``sample``, by its subclass); keeps
    when each driver was first and last seen and when it started."""

    name = "sampler"

    def __init__(self, apps: Sequence[str], interval_s: float = 1.0) -> None:
        self.apps, self.interval_s = tuple(apps), interval_s
        self.samples = 0
        self.max_drivers = dict.fromkeys(self.apps, 0)
        self.violations: list[dict[str, Any]] = []
        # driver (pid, or YARN application id) -> app, first and last seen (wall clock), when it started
        self.seen: dict[Any, dict[str, Any]] = {}
        self.current: dict[str, list[Any]] = {app: [] for app in self.apps}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)

    def start(self) -> Sampler:
        self.sample()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stopping.wait(self.interval_s):
            self.sample()

    def sample(self) -> dict[str, list[Any]]:
        raise NotImplementedError

    def _count(
        self, now: float, app: str, drivers: Sequence[Any], described: Callable[[], dict[str, Any]]
    ) -> None:
        """One sample of an app's drivers (under the lock): its maximum, and a violation with what
        ``described`` says of them when there are two or more."""
        self.max_drivers[app] = max(self.max_drivers[app], len(drivers))
        if len(drivers) > 1:
            self.violations.append(
                {"at": datetime.fromtimestamp(now, UTC).isoformat(), "app": app, **described()}
            )

    def drivers(self, app: str) -> list[Any]:
        with self._lock:
            return list(self.current.get(app, []))

    def first_seen(self, driver: Any) -> float:
        with self._lock:
            return self.seen.get(driver, {}).get("first_seen", time.time())

    def started(self, driver: Any) -> float:
        """When a driver the sampler saw started (now for one it never saw)."""
        with self._lock:
            return self.seen.get(driver, {}).get("started", time.time())

    def first_launch(self, app: str) -> float | None:
        """When the app's first launch seen so far started (wall clock); None before one."""
        return min((self.started(driver) for driver in self.driver_pids(app, True)), default=None)

    def driver_pids(self, app: str, launches_only: bool = False) -> set[Any]:
        """Every driver of the app seen so far; with ``launches_only``, its launches only."""
        with self._lock:
            return {
                driver
                for driver, record in self.seen.items()
                if record["app"] == app and not (launches_only and record["kind"] != "launch")
            }


class DriverSampler(Sampler):
    """Samples the process table: a driver is a process (its pid)."""

    name = "driver-sampler"

    def __init__(self, apps: Sequence[str], root: Path, interval_s: float = 1.0) -> None:
        super().__init__(apps, interval_s)
        self.root = root

    def sample(self) -> dict[str, list[int]]:
        table = process_table()
        found = drivers_in(table, self.apps, self.root)
        now = time.time()
        with self._lock:
            self.samples += 1
            self.current = found
            for app, pids in found.items():
                self._count(
                    now,
                    app,
                    pids,
                    lambda pids=pids: {
                        "drivers": {pid: " ".join(table[pid].argv)[:300] for pid in pids},
                        "states": {pid: table[pid].state for pid in pids},
                    },
                )
                for pid in pids:
                    # A spark-submit (bash, then the same pid exec'd into the JVM), or a Python driver
                    # left on its own when its JVM died.
                    kind = "python" if Path(table[pid].argv[0]).name.startswith("python") else "launch"
                    if pid not in self.seen:
                        # When it started, from /proc: it may have started before this sampler did.
                        age_s = process_age_s(pid)
                        self.seen[pid] = {
                            "app": app,
                            "first_seen": now,
                            "started": now - age_s if age_s is not None else now,
                            "ppid": table[pid].ppid,
                            "kind": kind,
                        }
                    self.seen[pid]["last_seen"] = now
        return found


class ApplicationSampler(Sampler):
    """On YARN: asks the ResourceManager for each app's applications that are not over (a driver is an
    application there, each one a launch). A ResourceManager that does not answer is asked again at the
    next sample."""

    name = "application-sampler"

    def __init__(self, rm: ResourceManager, apps: Sequence[str], interval_s: float = 1.0) -> None:
        super().__init__(apps, interval_s)
        self.rm = rm
        self.unanswered = 0

    def sample(self) -> dict[str, list[str]]:
        try:
            found = {app: self.rm.applications(app) for app in self.apps}
        except ResourceManagerError:
            with self._lock:
                self.unanswered += 1
                return {app: list(ids) for app, ids in self.current.items()}
        now = time.time()
        with self._lock:
            self.samples += 1
            self.current = {app: [a.id for a in applications] for app, applications in found.items()}
            for app, applications in found.items():
                self._count(
                    now,
                    app,
                    applications,
                    lambda applications=applications: {"applications": {a.id: a.state for a in applications}},
                )
                for application in applications:
                    record = self.seen.setdefault(
                        application.id,
                        {
                            "app": app,
                            "first_seen": now,
                            "started": application.started_ms / 1000 if application.started_ms else now,
                            "kind": "launch",
                        },
                    )
                    record.update(last_seen=now, state=application.state)
        return {app: list(ids) for app, ids in self.current.items()}


# --------------------------------------------------------------------------- the private stack


@dataclass
class Stack:
    """A private copy of the local stack: its own data root, ports and Airflow home."""

    root: Path
    apps: tuple[str, ...]
    seed: int
    rate: float
    ad_rate: float
    extra: tuple[str, ...] = ()
    # The config a private stack runs with under its data root, ports and store: chaos's short timings.
    settings: tuple[str, ...] = (*STACK_SETTINGS, *WATCHDOG_SETTINGS)
    store: str = "local"
    cluster: str = "local"
    airflow_port: int = field(default_factory=free_port)
    broker_port: int = field(default_factory=free_port)
    controller_port: int = field(default_factory=free_port)
    # Processes the stack started that a fault orphaned (a killed scheduler's workers): stopped with it.
    strays: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        # On YARN the data root is on the cluster's own HDFS, which its applications stage on too.
        self.yarn = LocalYarn(home=self.root / "yarn") if self.cluster == "yarn" else None
        if self.yarn is not None:
            self.store = "hdfs"
        self.store_server = self._store_server()
        self.overrides = [
            f"paths.local_root={self.root}",
            *self._store_settings(),
            f"broker.port={self.broker_port}",
            f"broker.controller_port={self.controller_port}",
            f"kafka.bootstrap_servers=127.0.0.1:{self.broker_port}",
            *self.settings,
            *self.extra,
        ]
        self.config = load_config("local", self.overrides)
        self.metadata = metadata_server(self.config)

    # ---- the store

    def _store_server(self) -> Any:
        """The store server this stack runs its data root on (None for the local disk)."""
        if self.yarn is not None:
            return self.yarn.hdfs
        if self.store == "hdfs":
            return LocalHdfs(home=self.root / "hdfs")
        if self.store == "s3":
            return ObjectStoreServer(self.root / "object-store")
        return None

    def _store_settings(self) -> list[str]:
        if self.yarn is not None:
            return self.yarn.pipeline_settings(self.yarn.hdfs.url("chaos"))
        if self.store == "hdfs":
            return [f"paths.data_root={self.store_server.url('chaos')}"]
        if self.store == "s3":
            return [f"paths.data_root=s3a://{S3_BUCKET}/chaos", *self.store_server.settings()]
        return [f"paths.data_root={self.root}"]

    def start_store(self) -> None:
        if self.yarn is not None:
            self.yarn.start()
            say(
                f"YARN: ResourceManager {self.yarn.rm_url} ({self.yarn.memory_mb} MB for containers), "
                f"HDFS {self.yarn.default_fs}, data root {self.config.paths.data_root}"
            )
            return
        if self.store_server is None:
            return
        self.store_server.start()
        if self.store == "s3":
            # This process reads the store too (commit times, the control store, the verification).
            os.environ.update(CREDENTIALS)
            self.store_server.create_bucket(S3_BUCKET)
            say(f"S3 server (moto) on {self.store_server.endpoint}, data root in bucket {S3_BUCKET}")
        else:
            say(f"HDFS on {self.store_server.default_fs}, data root {self.config.paths.data_root}")

    def stop_store(self) -> None:
        if self.yarn is not None:
            self.yarn.stop()  # its containers, then its HDFS
            return
        if self.store_server is not None:
            if self.store == "s3":
                self.resume_store()  # a stopped process ignores SIGTERM until continued
            self.store_server.stop()

    def store_pid(self) -> int:
        return self.store_server._process.pid

    def resume_store(self) -> None:
        with contextlib.suppress(ProcessLookupError, AttributeError):
            os.kill(self.store_pid(), signal.SIGCONT)

    def watchdog_window_s(self, app: str) -> float:
        """The watchdog's window: no progress for this long while offsets wait is a stall."""
        from stream_pipelines.observability.watchdog import WatchdogSettings

        return WatchdogSettings.of(self.config, APPS[app]).window_s

    # ---- environment and components

    def environment(self) -> dict[str, str]:
        environment = airflow_environment(self.config, self.metadata.database(), self.airflow_port)
        environment.update(
            {
                # The code of this checkout, in every process the stack starts (tasks, drivers included).
                "PYTHONPATH": os.pathsep.join(
                    p for p in (str(PROJECT_ROOT), os.environ.get("PYTHONPATH")) if p
                ),
                # Only the supervisors of the chosen apps run: everything else stays paused.
                "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
                "AIRFLOW__API__WORKERS": "1",
                "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "60",
            }
        )
        if self.store == "s3":
            environment.update(CREDENTIALS)
        environment.update(override_variables(self.overrides))
        return environment

    def keeper_restarts(self) -> dict[str, int]:
        """How often each Airflow component's keeper has started it again (its log's own lines)."""
        counts = {}
        for name in AIRFLOW_COMPONENTS:
            log = stack_dir(self.config) / "logs" / f"{name}.log"
            with contextlib.suppress(FileNotFoundError):
                counts[name] = log.read_text(errors="replace").count(f"keeper {name}: pid ")
        return counts

    def airflow_home(self) -> Path:
        return Path(self.environment()["AIRFLOW_HOME"])

    def components(self) -> dict[str, Any]:
        found = {c.name: c for c in airflow_components(self.airflow_port) if c.name in AIRFLOW_COMPONENTS}
        found["generator"] = generator_component(
            self.seed, rate=self.rate, ad_rate=self.ad_rate, duration_s=21600
        )
        return found

    def start_component(self, name: str) -> int:
        return start_component(self.config, self.components()[name], self.environment())

    def pid(self, name: str) -> int | None:
        try:
            pid = int((stack_dir(self.config) / f"{name}.pid").read_text())
        except (FileNotFoundError, ValueError):
            return None
        return pid if alive(pid) else None

    def airflow(self, *args: str, timeout_s: float = 300) -> subprocess.CompletedProcess:
        airflow = str(Path(sys.executable).parent / "airflow")
        return subprocess.run(
            [airflow, *args],
            env=self.environment(),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )

    def broker(self):
        from stream_pipelines.devtools.broker import LocalBroker

        return LocalBroker(self.config)

    # ---- up and down

    def up(self) -> None:
        from stream_pipelines.kafka.topics import ensure_topics

        if self.root.exists():
            if not (self.root / ROOT_MARKER).exists() and any(self.root.iterdir()):
                raise SystemExit(
                    f"chaos: {self.root} is not empty and not a chaos root; choose another --root"
                )
            # A run left with --keep: its daemons hold the ports this one reuses.
            for left in (LocalYarn.attach(self.root / "yarn"), LocalHdfs.attach(self.root / "hdfs")):
                if left is not None:
                    left.stop()
            self.metadata.remove()  # its data may live outside the root (run as root: see postgres.py)
            shutil.rmtree(self.root)
        self.root.mkdir(parents=True)
        (self.root / ROOT_MARKER).write_text("a private stack of `make chaos`; deleted at its next run\n")
        self.start_store()
        say(
            f"private stack in {self.root}: broker on 127.0.0.1:{self.broker_port}, "
            f"Airflow on :{self.airflow_port}"
        )
        self.broker().start()
        ensure_topics(self.config)
        try:
            self.metadata.start()
        except PostgresError as error:
            raise SystemExit(f"chaos: Airflow's metadata database: {error}") from None
        say(f"Airflow's metadata database: {self.metadata.describe()}")
        failure = migrate_airflow_db(self.environment())
        if failure:
            raise SystemExit(f"chaos: `airflow db migrate` failed:\n{failure}")
        reserialized = self.airflow("dags", "reserialize")
        if reserialized.returncode != 0:
            raise SystemExit(f"chaos: `airflow dags reserialize` failed:\n{reserialized.stderr[-3000:]}")
        for app in self.apps:
            unpaused = self.airflow("dags", "unpause", f"supervise_{app}")
            if unpaused.returncode != 0:
                raise SystemExit(f"chaos: unpausing supervise_{app} failed:\n{unpaused.stderr[-3000:]}")
        say(
            f"supervisors unpaused: {', '.join(f'supervise_{app}' for app in self.apps)} "
            "(the other DAGs stay paused)"
        )
        pid = self.start_component("generator")
        say(
            f"live generator producing (pid {pid}, seed {self.seed}, {self.rate}/s sensor readings, "
            f"{self.ad_rate}/s ads)"
        )
        components = self.components()
        try:
            start_components(
                self.config,
                [components[name] for name in AIRFLOW_COMPONENTS],
                self.environment(),
                self.airflow_port,
                say=say,
            )
        except RuntimeError as error:
            raise SystemExit(f"chaos: {error}") from None
        say("Airflow started: " + ", ".join(f"{name} pid {self.pid(name)}" for name in AIRFLOW_COMPONENTS))

    def stop_airflow(self) -> None:
        below = stop_components(self.config, ["generator", *reversed(AIRFLOW_COMPONENTS)])
        # A stray's pid may belong to another process by now (a long run): only Airflow's own processes
        # (titled "airflow ...": executor workers, task runners) are stopped, never a driver.
        titles = {pid: " ".join(proc.argv) for pid, proc in process_table().items()}
        strays = {pid for pid in self.strays if titles.get(pid, "").startswith("airflow ")}
        left = stop_processes(below | strays)
        if left:
            say(f"{left} process(es) left behind by Airflow tasks: stopped")

    def down(self) -> None:
        """Everything this stack started, whatever state it is in."""
        with contextlib.suppress(Exception):
            self.stop_airflow()
        for app, pids in drivers_in(process_table(), APP_NAMES, self.root).items():
            for pid in pids:
                for target in (pid, *descendants(pid)):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(target, signal.SIGCONT)
                        os.kill(target, signal.SIGKILL)
                say(f"{app}: driver pid {pid} killed at tear-down")
        with contextlib.suppress(Exception):
            self.broker().stop()
        with contextlib.suppress(Exception):
            self.stop_store()
        with contextlib.suppress(Exception):
            self.metadata.remove()


# --------------------------------------------------------------------------- observations


def commit_times(config: PipelineConfig, app: str) -> dict[str, list[float]]:
    """Per query of the app, when each of its commits was written (epoch seconds, ascending)."""
    found = {}
    for query in APPS[app].query_names:
        commits = store.location(config.spark.extra_conf, config.checkpoint_dir(app, query)) / "commits"
        listed = store.entries(commits)
        found[query] = sorted(modified for name, (_, modified) in listed.items() if name.isdigit())
    return found


def committed_since(config: PipelineConfig, app: str, moment: float) -> float | None:
    """When every query of the app had committed its first batch after ``moment``; None until then."""
    firsts = [next((t for t in times if t > moment), None) for times in commit_times(config, app).values()]
    return None if None in firsts else max(firsts)


def run_app_task(database: MetadataDatabase, app: str) -> dict[str, Any] | None:
    """The newest try of the app's run_app task: run id, state, try number, id; None while the metadata
    database does not answer."""
    try:
        row = database.query_one(
            "select run_id, state, try_number, id::text from task_instance "
            "where dag_id = %s and task_id = 'run_app' order by start_date desc nulls last limit 1",
            (f"supervise_{app}",),
        )
    except MetadataUnavailable:
        return None
    return dict(zip(("run_id", "state", "try_number", "id"), row, strict=True)) if row else None


def supervisor_tries(database: MetadataDatabase, app: str) -> dict[str, int]:
    """Per task of the app's supervisor DAG, the highest try it has run (1 when none failed); empty
    while the metadata database does not answer."""
    try:
        row = database.query_one(
            "select json_object_agg(task_id, tries) from (select task_id, max(try_number) as tries "
            "from task_instance where dag_id = %s group by task_id) as per_task",
            (f"supervise_{app}",),
        )
    except MetadataUnavailable:
        return {}
    return dict(row[0]) if row and row[0] else {}


def live_schedulers(database: MetadataDatabase, since: float) -> int:
    """How many schedulers have heartbeated since ``since`` (epoch seconds); 0 while the database does
    not answer."""
    try:
        row = database.query_one(
            "select count(*) from job where job_type = 'SchedulerJob' and state = 'running' "
            "and extract(epoch from latest_heartbeat) > %s",
            (since,),
        )
    except MetadataUnavailable:
        return 0
    return int(row[0]) if row else 0


RUNNER_TITLE = "airflow worker -- "


def task_runner(table: dict[int, Proc], task_id: str | None) -> int | None:
    """The pid of the Airflow task runner of task instance ``task_id`` (titled ``airflow worker --
    <uuid>``). Both sides are compared without dashes (SQLite kept the id without them); the
    executor's pool workers (``airflow worker -- LocalExecutor: <uuid>``) are not task runners."""
    if not task_id:
        return None
    wanted = task_id.replace("-", "")
    for proc in table.values():
        title = " ".join(proc.argv)
        if title.startswith(RUNNER_TITLE) and title.removeprefix(RUNNER_TITLE).replace("-", "") == wanted:
            return proc.pid
    return None


class TaskLogs:
    """Counts the supervisor's own log lines in the task logs, read incrementally."""

    PATTERNS = {
        "adoptions": r"^adopting {app}:",
        "watchdog": r"^watchdog: {app} is stuck:",
        "starts": r"^starting {app} on ",
        # The driver's own line, streamed into the task log by spark-submit's hook.
        "in_driver_logged": r"^\[[^\]]+\] {app}: query \S+ restarted inside the driver",
    }

    def __init__(self, home: Path, apps: Sequence[str]) -> None:
        self.home, self.apps = home, tuple(apps)
        self.offsets: dict[Path, int] = {}
        self.counts = {app: dict.fromkeys(self.PATTERNS, 0) for app in self.apps}
        self.lines: dict[str, list[str]] = {app: [] for app in self.apps}

    def refresh(self) -> dict[str, dict[str, int]]:
        for app in self.apps:
            folder = self.home / "logs" / f"dag_id=supervise_{app}"
            for path in sorted(folder.glob("run_id=*/task_id=run_app/*.log")):
                start = self.offsets.get(path, 0)
                with path.open("rb") as handle:
                    handle.seek(start)
                    chunk = handle.read()
                complete = chunk.rfind(b"\n") + 1
                self.offsets[path] = start + complete
                for raw in chunk[:complete].decode(errors="replace").splitlines():
                    self._count(app, raw)
        return {app: dict(counts) for app, counts in self.counts.items()}

    def _count(self, app: str, raw: str) -> None:
        text = raw
        with contextlib.suppress(ValueError, TypeError, AttributeError):
            text = str(json.loads(raw).get("event", raw))
        for name, pattern in self.PATTERNS.items():
            if re.match(pattern.format(app=re.escape(app)), text):
                self.counts[app][name] += 1
                self.lines[app].append(text[:300])


# --------------------------------------------------------------------------- faults


@dataclass
class FaultResult:
    number: int
    fault: str
    target: str
    at: str
    recovered: bool = False
    next_batch_s: float | None = None
    # From the fault to the first new launch (a spark-submit's /proc start time; on YARN, when the
    # ResourceManager started the new application): supervision's share of a driver restart; the rest of
    # next_batch_s is the new driver's own cold start.
    new_driver_s: float | None = None
    # query-failure: from the fault to the query's failure (its next batch's refused write); the rest of
    # next_batch_s is the recovery's.
    query_failed_s: float | None = None
    restarts: int = 0
    # Of the restarts, the failed queries restarted inside their driver (no new JVM).
    in_driver_restarts: int = 0
    adoptions: int = 0
    watchdog_kills: int = 0
    new_drivers: int = 0
    # runner-kill: the supervisor task's try before the fault and once it followed the driver again, and
    # the drivers started in between (an adoption starts none).
    task_before: dict[str, Any] | None = None
    task_after: dict[str, Any] | None = None
    spark_submits_until_adopted: int | None = None
    # scheduler-restart and scheduler-kill: the apps whose supervisor task ran under the scheduler hit.
    tasks_hit: list[str] = field(default_factory=list)
    # Airflow components their keepers started again between the fault and the recovery (by name).
    components_started_again: dict[str, int] = field(default_factory=dict)
    expectations: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.recovered and not self.expectations


class Chaos:
    def __init__(
        self,
        stack: Stack,
        *,
        recover_timeout_s: float,
        stop_orphans: bool,
        rng: random.Random,
        db_down_s: tuple[float, float] = METADATA_DB_DOWN_S,
    ) -> None:
        self.stack = stack
        self.db_down_s = db_down_s
        self.config = stack.config
        self.home = stack.airflow_home()
        self.database = stack.metadata.database()
        self.recover_timeout_s = recover_timeout_s
        self.stop_orphans = stop_orphans
        self.rng = rng
        # The process table of this host, the Airflow worker's: its drivers in client mode, its
        # spark-submits (which return at once) on YARN.
        self.worker = DriverSampler(stack.apps, stack.root)
        self.rm = ResourceManager(stack.yarn.rm_url) if stack.yarn is not None else None
        self.sampler: Sampler = (
            ApplicationSampler(self.rm, stack.apps) if self.rm is not None else self.worker
        )
        # Per app: its first spark-submit to the first committed batch of all its queries.
        self.cold_start_s: dict[str, float] = {}
        # Per app: the tries its supervisor's tasks took to start it (a failed one is a finding).
        self.startup_tries: dict[str, dict[str, int]] = {}
        self.logs = TaskLogs(self.home, stack.apps)
        self.results: list[FaultResult] = []

    def start_sampling(self) -> None:
        self.sampler.start()
        if self.worker is not self.sampler:
            self.worker.start()

    def stop_sampling(self) -> None:
        self.sampler.stop()
        self.worker.stop()

    # ---- waiting

    def wait(self, condition: Callable[[], bool], timeout_s: float, poll_s: float = 0.5) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if condition():
                return True
            time.sleep(poll_s)
        return condition()

    def healthy(self, app: str, since: float = 0.0) -> bool:
        """One driver that has committed since it started, its supervisor's task running, a batch of
        every query committed since ``since``, and no stop of the app pending."""
        drivers = self.sampler.drivers(app)
        if len(drivers) != 1:
            return False
        task = run_app_task(self.database, app)
        if not task or task["state"] != "running":
            return False
        started = self.sampler.first_seen(drivers[0])
        if committed_since(self.config, app, max(since, started)) is None:
            return False
        # A stop asked for (the watchdog's, after a stall) is still under way: the driver that committed
        # is draining, and its restart has yet to happen.
        return not ControlStore(self.config).stop_marker(app).exists()

    def wait_first_batches(self, timeout_s: float = 900) -> None:
        say("waiting for every app's first committed batches")
        started = time.time()
        for app in self.stack.apps:
            if not self.wait(lambda app=app: self.healthy(app, started - 1), timeout_s):
                raise SystemExit(
                    f"chaos: {app} did not start and commit within {timeout_s:.0f}s; see {self.home / 'logs'}"
                )
            say(f"{app}: running (driver {self.sampler.drivers(app)[0]}), batches committing")
            self.startup_tries[app] = supervisor_tries(self.database, app)
            launched, committed = self.sampler.first_launch(app), committed_since(self.config, app, 0)
            if launched is not None and committed is not None:
                # The app's first start on this stack, shown beside a restart's own cold start.
                self.cold_start_s[app] = round(committed - launched, 1)

    # ---- the injections

    def inject(self, number: int, fault: str, app: str | None) -> FaultResult:
        scope = [app] if app else list(self.stack.apps)
        for name in scope:
            if not self.wait(lambda name=name: self.healthy(name), self.recover_timeout_s):
                say(f"  {name} is not healthy before fault {number}; injecting anyway")
        before = self._counters()
        kept_before = self.stack.keeper_restarts()
        pids_before = {name: self.sampler.driver_pids(name, True) for name in self.stack.apps}
        tasks_before = {name: run_app_task(self.database, name) for name in scope}
        moment = time.time()
        result = FaultResult(number, fault, "", datetime.fromtimestamp(moment, UTC).isoformat())
        action = getattr(self, "_" + fault.replace("-", "_"))
        injected = True
        try:
            result.target = action(app, result) if app else action(result)
        except Exception as error:  # a fault that could not be injected is a finding, not the end of the run
            injected = False
            result.target = f"{app or 'stack'}: not injected: {type(error).__name__}: {error}"
            result.expectations.append(f"could not inject the fault: {error}")
        say(f"fault {number:>2} {fault:<17} {result.target}")
        fault_ended = time.time()
        recovered_at: dict[str, float | None] = {}
        deadline = time.monotonic() + self.recover_timeout_s
        # Recovered means a batch committed after the fault took hold: for a query failure, after the
        # query failed (the batch before it may commit after the fault was laid).
        since = moment + (result.query_failed_s or 0.0)
        # Nothing to recover from a fault that was not injected: no wait of recover_timeout for it.
        for name in scope if injected else []:
            remaining = max(deadline - time.monotonic(), 1)
            settled = self.wait(
                lambda name=name: self.healthy(name, since)
                and self._settled(fault, name, tasks_before, before, set(result.tasks_hit), fault_ended),
                remaining,
            )
            recovered_at[name] = committed_since(self.config, name, since) if settled else None
        result.recovered = injected and all(at is not None for at in recovered_at.values())
        kept_after = self.stack.keeper_restarts()
        result.components_started_again = {
            name: count - kept_before.get(name, 0)
            for name, count in kept_after.items()
            if count > kept_before.get(name, 0)
        }
        if result.components_started_again:
            again = ", ".join(f"{name} x{count}" for name, count in result.components_started_again.items())
            result.notes.append(f"started again by their keepers: {again}")
        launched = [
            self.sampler.started(pid)
            for name in scope
            for pid in self.sampler.driver_pids(name, True) - pids_before[name]
        ]
        if launched:
            result.new_driver_s = round(min(launched) - moment, 1)
        if result.recovered:
            result.next_batch_s = round(max(at - moment for at in recovered_at.values() if at), 1)
        elif injected:
            stuck = [name for name, at in recovered_at.items() if at is None]
            result.notes.append(f"not recovered within {self.recover_timeout_s:.0f}s: {', '.join(stuck)}")
        if fault == "runner-kill" and app:
            result.task_before, result.task_after = tasks_before[app], run_app_task(self.database, app)
            result.spark_submits_until_adopted = len(self.sampler.driver_pids(app, True) - pids_before[app])
            if self.stop_orphans and result.recovered:
                self._stop_orphan(app, result)
        self.results.append(result)
        self._account(result, before, pids_before, scope)
        return result

    def _settled(
        self,
        fault: str,
        app: str,
        tasks_before: dict[str, Any],
        before: dict,
        hit: set[str],
        fault_ended: float,
    ) -> bool:
        if fault in ORCHESTRATION_FAULTS:
            # Airflow whole again: every scheduler heartbeating since the fault, and the app's running
            # task queued by one of them, its task runner alive. A task whose scheduler died (killed, or
            # gone while the database was away) is not that until the survivor has reset it and a new
            # try runs.
            if live_schedulers(self.database, fault_ended) < len(SCHEDULERS):
                return False
            if not self._task_under_a_live_scheduler(app, fault_ended):
                return False
            if app not in hit:
                return True
        if fault not in ("runner-kill", *SCHEDULER_FAULTS):
            return True
        # The killed try is over (a scheduler's stop ends its tasks; a killed scheduler's are reset by
        # the other once it is found dead), a later one runs, and it has either adopted the driver or
        # started one. Until then the database may still call the killed try running.
        task, earlier = run_app_task(self.database, app), tasks_before.get(app) or {}
        if not task or (task["try_number"], task["run_id"]) == (
            earlier.get("try_number"),
            earlier.get("run_id"),
        ):
            return False
        counts = self.logs.refresh()[app]
        return counts["adoptions"] > before[app]["adoptions"] or counts["starts"] > before[app]["starts"]

    def _task_under_a_live_scheduler(self, app: str, since: float) -> bool:
        try:
            row = self.database.query_one(
                "select j.state, extract(epoch from j.latest_heartbeat), ti.id::text from task_instance ti "
                "join job j on j.id = ti.queued_by_job_id "
                "where ti.dag_id = %s and ti.task_id = 'run_app' and ti.state = 'running' "
                "order by ti.start_date desc nulls last limit 1",
                (f"supervise_{app}",),
            )
        except MetadataUnavailable:
            return False
        if row is None or row[0] != "running" or float(row[1]) < since:
            return False
        return task_runner(process_table(), row[2]) is not None

    def _driver(self, app: str) -> int:
        drivers = self.sampler.sample()[app]
        if len(drivers) != 1:
            raise RuntimeError(f"{app} has {len(drivers)} drivers ({drivers}), not one")
        return drivers[0]

    def _driver_kill(self, app: str, result: FaultResult) -> str:
        pid = self._driver(app)
        group = os.getpgid(pid)
        if group == pid:
            os.killpg(group, signal.SIGKILL)
            return f"{app}: kill -9 of process group {group} (spark-submit JVM and its Python driver)"
        # spark-submit still shares its launcher's group: kill the driver's own tree, not its launcher.
        tree = [pid, *sorted(descendants(pid))]
        for target in tree:
            with contextlib.suppress(ProcessLookupError):
                os.kill(target, signal.SIGKILL)
        result.notes.append(
            f"the driver shares process group {group} with its launcher: killed its tree only"
        )
        return (
            f"{app}: kill -9 of driver pid {pid} and its {len(tree) - 1} children "
            f"(group {group} is its launcher's)"
        )

    def _container_driver(self, app: str) -> tuple[str, int]:
        """The app's one application and its driver's Python process, in its container on this host (the
        lease names the process; its ``CONTAINER_ID`` must be of that application)."""
        applications = self.sampler.sample()[app]
        if len(applications) != 1:
            raise RuntimeError(f"{app} has {len(applications)} applications ({applications}), not one")
        record = Lease(self.config, app).read()
        if record is None or not alive(record.pid):
            raise RuntimeError(f"{app}: its lease names no live driver process on this host")
        container = environment_of(record.pid).get("CONTAINER_ID")
        if application_of_container(container) != applications[0]:
            raise RuntimeError(
                f"{app}: the lease's pid {record.pid} runs in {container}, not in {applications[0]}"
            )
        return applications[0], record.pid

    def _container_kill(self, app: str, result: FaultResult) -> str:
        application, pid = self._container_driver(app)
        group = os.getpgid(pid)
        os.killpg(group, signal.SIGKILL)
        return f"{app}: kill -9 of {application}'s driver container (process group {group}, driver pid {pid})"

    def _nodemanager_restart(self, result: FaultResult) -> str:
        assert self.stack.yarn is not None
        started = time.monotonic()
        registered_s = self.stack.yarn.restart_nodemanager(down_s=NODEMANAGER_DOWN_S)
        return (
            f"stack: NodeManager stopped with every container, down {NODEMANAGER_DOWN_S:.0f}s, registered "
            f"again {registered_s:.0f}s after its start ({time.monotonic() - started:.0f}s in all)"
        )

    def _runner_kill(self, app: str, result: FaultResult) -> str:
        if self.rm is not None:
            # On YARN no process of the task is above the driver: kill the runner that follows it.
            runner = task_runner(process_table(), (run_app_task(self.database, app) or {}).get("id"))
            if runner is None:
                raise RuntimeError(f"no task runner found following {app}'s application")
            os.kill(runner, signal.SIGKILL)
            application = self.sampler.drivers(app)
            result.notes.append(f"application {application}")
            return f"{app}: kill -9 of task runner pid {runner} (following application {application})"
        pid = self._driver(app)
        runner = parent_pid(pid)
        table = process_table()
        title = " ".join(table[runner].argv) if runner in table else ""
        how = "above spark-submit"
        if not title.startswith("airflow worker"):
            # An adopted driver has no runner above it: the runner to kill is the one following it.
            runner = task_runner(table, (run_app_task(self.database, app) or {}).get("id"))
            how = "following the adopted driver"
            if runner is None:
                raise RuntimeError(f"no task runner found above or following driver pid {pid}")
        os.kill(runner, signal.SIGKILL)
        result.notes.append(f"driver pid {pid}")
        return f"{app}: kill -9 of task runner pid {runner} ({how}, driver pid {pid})"

    def _driver_freeze(self, app: str, result: FaultResult) -> str:
        # On YARN the driver's JVM is the ApplicationMaster, the parent of the driver's Python.
        pid = parent_pid(self._container_driver(app)[1]) if self.rm is not None else self._driver(app)
        hold_s = self.stack.watchdog_window_s(app) + 30
        os.kill(pid, signal.SIGSTOP)
        frozen_at = time.monotonic()
        say(f"fault    driver-freeze     {app}: SIGSTOP of driver JVM pid {pid}, SIGCONT in {hold_s:.0f}s")
        # Held past the watchdog's window, unless the watchdog kills it first (by its silent JVM).
        self.wait(lambda: not alive(pid), hold_s)
        outcome = f"already gone after {time.monotonic() - frozen_at:.0f}s (killed while frozen)"
        if alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
            outcome = "SIGCONT sent"
        result.notes.append(f"after {hold_s:.0f}s: {outcome}")
        return f"{app}: SIGSTOP of driver JVM pid {pid} for {hold_s:.0f}s, then {outcome}"

    def _query_failure(self, app: str, result: FaultResult) -> str:
        """A folder where one query's next offset-log entry goes: Spark's write of it is refused (the
        file cannot be renamed over a folder), the query fails before its batch writes anything, and
        the folder goes as soon as the failure is recorded, before the driver's restart of the query."""
        if self.stack.store != "local":
            raise RuntimeError("the query-failure fault blocks a checkpoint write on the local disk")
        query = self.rng.choice(APPS[app].query_names)
        offsets = Path(self.config.checkpoint_dir(app, query)) / "offsets"
        control = ControlStore(self.config)
        # The failure shows as an in-driver restart, or (in-driver recovery turned off) as the driver's
        # exit record, written as it gives up, before the supervisor counts the restart.
        restarts_before, exit_before = control.restarts(app).total, control.exit_recorded_at(app) or 0.0

        def query_failed() -> bool:
            exited = (control.exit_recorded_at(app) or 0.0) > exit_before
            return exited or control.restarts(app).total > restarts_before

        latest = max((int(name.name) for name in offsets.iterdir() if name.name.isdigit()), default=-1)
        for batch in (latest + 1, latest + 2):
            block = offsets / str(batch)
            try:
                block.mkdir()
                break
            except FileExistsError:
                continue  # written meanwhile: the one after
        else:
            raise RuntimeError(f"{app}.{query}: batches {latest + 1} and {latest + 2} were written meanwhile")
        blocked_at = time.time()
        try:
            failed = self.wait(query_failed, 120, poll_s=0.2)
        finally:
            block.rmdir()
        if failed:
            # Measured from when the failure was recorded, at most a poll after it.
            result.query_failed_s = round(time.time() - blocked_at, 1)
        result.notes.append(
            f"{app}.{query} batch {batch} refused; " + ("failed" if failed else "did not fail")
        )
        if not failed:
            result.expectations.append(f"{app}.{query} did not fail, or no restart was recorded")
        return f"{app}: offset log entry {batch} of {query} refused until the query failed"

    def _scheduler_of(self, app: str) -> str | None:
        """The scheduler whose executor runs the app's supervisor task (its task runner is below it)."""
        task = run_app_task(self.database, app)
        runner = task_runner(process_table(), task and task["id"])
        for name in SCHEDULERS if runner is not None else ():
            keeper = self.stack.pid(name)
            if keeper and runner in descendants(keeper):
                return name
        return None

    def _busy_scheduler(self, result: FaultResult) -> str:
        """A scheduler that runs supervisor tasks (either when neither does): the fault is felt."""
        owners = {app: self._scheduler_of(app) for app in self.stack.apps}
        name = self.rng.choice(sorted({owner for owner in owners.values() if owner}) or list(SCHEDULERS))
        result.tasks_hit = sorted(app for app, owner in owners.items() if owner == name)
        return name

    def _scheduler_restart(self, result: FaultResult) -> str:
        name = self._busy_scheduler(result)
        old = self.stack.pid(name)
        started = time.monotonic()
        if old:
            stop_process_group(old, timeout_s=30)
        new = self.stack.start_component(name)
        return f"{name} pid {old} stopped in {time.monotonic() - started:.0f}s, started again as pid {new}"

    def _scheduler_kill(self, result: FaultResult) -> str:
        """kill -9 of a scheduler process, as the kernel's OOM killer would: its executor's workers and
        their task runners are orphaned, not stopped. Its keeper starts it again after a pause."""
        name = self._busy_scheduler(result)
        keeper = self.stack.pid(name)
        scheduler = kept_pid(keeper) if keeper else None
        if scheduler is None:
            raise RuntimeError(f"{name} is not running")
        # What it leaves behind is no longer below the stack's components once orphaned: the stack's
        # stop finds it here.
        self.stack.strays |= descendants(scheduler)
        os.kill(scheduler, signal.SIGKILL)
        killed = time.monotonic()
        back = self.wait(lambda: kept_pid(keeper) not in (None, scheduler), 180, poll_s=0.5)
        took = f"started again by its keeper after {time.monotonic() - killed:.0f}s" if back else "not back"
        result.notes.append(f"{name}: {took}")
        return f"{name}: kill -9 of scheduler pid {scheduler}; {took}"

    def _metadata_db_restart(self, result: FaultResult) -> str:
        """Airflow's PostgreSQL stopped (fast shutdown: connections closed, as a failover or a
        maintenance restart closes them), kept down for a time drawn from ``--db-down`` (10-60 s), then
        started on the same data."""
        metadata = self.stack.metadata
        down_s = self.rng.uniform(*self.db_down_s)
        old = metadata.pid()
        metadata.stop(mode="fast")
        say(f"fault    metadata-db-restart PostgreSQL pid {old} stopped; starting it again in {down_s:.0f}s")
        time.sleep(down_s)
        metadata.start()
        result.notes.append(f"database down {down_s:.0f}s")
        return f"PostgreSQL pid {old} stopped, down {down_s:.0f}s, answering again as pid {metadata.pid()}"

    def _broker_restart(self, result: FaultResult) -> str:
        broker = self.stack.broker()
        old = broker.status().pid
        started = time.monotonic()
        broker.stop()
        stopped = time.monotonic() - started
        new = broker.start().pid
        took = time.monotonic() - started
        return f"broker pid {old} stopped in {stopped:.0f}s, answering again as pid {new} after {took:.0f}s"

    def _storage_outage(self, result: FaultResult) -> str:
        """The store every driver writes its checkpoints, outputs and lease to is gone for 30-60 s.

        HDFS: the NameNode stopped and started again on the same metadata (the DataNodes keep their blocks).
        S3: moto keeps its objects in memory, so a restart would erase the store, not interrupt it; its
        server is frozen (SIGSTOP) instead: requests hang, as against an endpoint that does not answer."""
        stack = self.stack
        if stack.store == "local":
            raise RuntimeError("the storage-outage fault needs a store server: run with --store hdfs or s3")
        outage_s = self.rng.uniform(*OUTAGE_S)
        result.notes.append(f"outage {outage_s:.0f}s")
        if stack.store == "hdfs":
            started = time.monotonic()
            stack.store_server.stop_namenode()
            say(f"fault    storage-outage    NameNode stopped; starting it again in {outage_s:.0f}s")
            time.sleep(max(outage_s - (time.monotonic() - started), 0))
            back_s = stack.store_server.start_namenode()
            return (
                f"stack: NameNode stopped for {outage_s:.0f}s, taking writes again {back_s:.0f}s "
                "after its start"
            )
        os.kill(stack.store_pid(), signal.SIGSTOP)
        say(f"fault    storage-outage    S3 server pid {stack.store_pid()} frozen for {outage_s:.0f}s")
        time.sleep(outage_s)
        stack.resume_store()
        return f"stack: S3 server (pid {stack.store_pid()}) frozen for {outage_s:.0f}s, then continued"

    def _stop_orphan(self, app: str, result: FaultResult) -> None:
        """Stop the adopted driver gracefully; supervision must then start one new driver as usual."""
        from stream_pipelines.control.control_store import ControlStore, apply_action

        orphan = self.sampler.drivers(app)
        known = self.sampler.driver_pids(app)
        moment = time.time()
        apply_action(
            self.config, APPS[app], "restart", by="chaos", reason="stop the adopted orphan gracefully"
        )

        def replaced() -> bool:
            current = self.sampler.drivers(app)
            return len(current) == 1 and current[0] not in known and self.healthy(app, moment)

        if self.wait(replaced, self.recover_timeout_s):
            ended = ControlStore(self.config).last_exit(app) or {}
            new = self.sampler.drivers(app)[0]
            result.notes.append(
                f"orphan {orphan} stopped gracefully ({ended.get('status')}); "
                f"supervision started driver {new} "
                f"and it committed {time.time() - moment:.0f}s after the stop request"
            )
            if ended.get("status") != "stopped":
                result.expectations.append(f"the orphan did not end with a graceful stop: {ended}")
        else:
            result.expectations.append(
                "after the orphan's graceful stop, no new driver committed "
                f"within {self.recover_timeout_s:.0f}s"
            )

    # ---- accounting

    def _counters(self) -> dict[str, dict[str, int]]:
        store = ControlStore(self.config)
        counts = self.logs.refresh()
        counters = {}
        for app in self.stack.apps:
            restarts = store.restarts(app)
            counters[app] = {**counts[app], "restarts": restarts.total, "in_driver": restarts.in_driver}
        return counters

    def _account(self, result: FaultResult, before: dict, pids_before: dict, scope: list[str]) -> None:
        """What happened between this fault and the next (or the end): attributed to this fault."""
        self._pending = (result, before, pids_before, scope)

    def settle_accounts(self) -> None:
        pending = getattr(self, "_pending", None)
        if pending is None:
            return
        result, before, pids_before, scope = pending
        self._pending = None
        after = self._counters()
        for app in self.stack.apps:
            result.restarts += after[app]["restarts"] - before[app]["restarts"]
            result.in_driver_restarts += after[app]["in_driver"] - before[app]["in_driver"]
            result.adoptions += after[app]["adoptions"] - before[app]["adoptions"]
            result.watchdog_kills += after[app]["watchdog"] - before[app]["watchdog"]
            result.new_drivers += len(self.sampler.driver_pids(app, True) - pids_before[app])
        self._expect(result, scope)
        mark = "ok" if result.ok else "FAILED"
        said = f"next batch {result.next_batch_s}s" if result.recovered else "NOT RECOVERED"
        if result.new_driver_s is not None:
            said += f" (new launch after {result.new_driver_s}s)"
        say(
            f"   -> {mark}: {said}, restarts {result.restarts} (in the driver {result.in_driver_restarts}), "
            f"adoptions {result.adoptions}, "
            f"watchdog kills {result.watchdog_kills}, new drivers {result.new_drivers}"
            + "".join(f"; {text}" for text in [*result.notes, *result.expectations])
        )

    def _expect(self, result: FaultResult, scope: list[str]) -> None:
        if result.fault == "runner-kill":
            if result.adoptions < 1:
                result.expectations.append("the retried task did not adopt the orphaned driver")
            if result.spark_submits_until_adopted:
                result.expectations.append(
                    f"{result.spark_submits_until_adopted} second spark-submit(s) instead of an adoption"
                )
        if result.fault in ("driver-kill", "container-kill") and result.restarts < 1:
            result.expectations.append("no restart recorded after the driver was killed")
        if result.fault in ORCHESTRATION_FAULTS and result.new_drivers:
            # None touches a driver: a task whose scheduler stopped or died ends (Airflow calls on_kill,
            # which leaves the driver running) and its next try adopts it; a task whose database went
            # away rides it out.
            result.expectations.append(f"{result.new_drivers} new driver(s) after a fault no driver saw")
        if result.fault == "nodemanager-restart" and result.restarts < len(scope):
            result.expectations.append(
                f"{result.restarts} restart(s) recorded after the NodeManager took {len(scope)} drivers down"
            )
        if result.fault == "driver-freeze" and result.watchdog_kills < 1:
            result.expectations.append("the watchdog did not stop the frozen driver")
        if result.fault == "query-failure" and self.config.supervision.in_driver_restarts > 0:
            if result.in_driver_restarts < 1:
                result.expectations.append("the failed query was not restarted inside its driver")
            if result.new_drivers:
                result.expectations.append(
                    f"{result.new_drivers} new driver(s) for a query the driver could restart"
                )

    # ---- the run

    def run(self, schedule: list[tuple[str, str | None]], gap_s: tuple[float, float]) -> None:
        for number, (fault, app) in enumerate(schedule, start=1):
            if (self.stack.root / "finish").exists():
                say(f"{self.stack.root / 'finish'} exists: no more faults, on to the drain and the checks")
                break
            self.inject(number, fault, app)
            gap = self.rng.uniform(*gap_s)
            time.sleep(gap)
            self.settle_accounts()


def fault_classes(chosen: str | None, store: str, cluster: str = "local") -> tuple[str, ...]:
    """The classes asked for, or every class the store and the cluster allow (a local disk has no server
    to stop; a query failure is injected on the local disk; YARN's own faults on YARN only)."""
    if chosen is not None:
        return tuple(c for c in chosen.split(",") if c)
    if cluster == "yarn":
        return YARN_DEFAULT_CLASSES
    excluded = YARN_FAULTS | (STORE_FAULTS if store == "local" else LOCAL_FAULTS)
    return tuple(c for c in FAULT_CLASSES if c not in excluded)


def refused_classes(classes: Sequence[str], store: str, cluster: str) -> str | None:
    """Why the chosen fault classes cannot run on this store and cluster; None when they can."""
    if cluster == "yarn":
        wrong = sorted(WORKER_DRIVER_FAULTS & set(classes))
        if wrong:
            return (
                f"{', '.join(wrong)} act on a driver process of the Airflow worker; on YARN the drivers "
                "run in containers: use container-kill"
            )
        return None
    if YARN_FAULTS & set(classes):
        return f"{', '.join(sorted(YARN_FAULTS & set(classes)))} need YARN: add --cluster yarn"
    if store == "local" and STORE_FAULTS & set(classes):
        return "storage-outage needs a store server to stop: add --store hdfs or --store s3"
    if store != "local" and LOCAL_FAULTS & set(classes):
        return "query-failure blocks a checkpoint write on the local disk: leave out --store"
    return None


def worker_launches(worker: DriverSampler) -> dict[str, Any]:
    """On YARN, what of the drivers the Airflow worker's process table held: each launch's spark-submit
    (it returns once YARN accepted the application) and how long the longest stayed; Python drivers
    (none: they run in containers)."""
    lifetimes = [
        record.get("last_seen", record["first_seen"]) - record["started"]
        for record in worker.seen.values()
        if record["kind"] == "launch"
    ]
    return {
        "spark_submits": len(lifetimes),
        "longest_s": round(max(lifetimes), 1) if lifetimes else None,
        "python_drivers": sum(record["kind"] == "python" for record in worker.seen.values()),
        "limit_s": WORKER_SUBMIT_LIMIT_S,
    }


def draw_schedule(
    rng: random.Random,
    faults: int,
    classes: Sequence[str],
    apps: Sequence[str],
    each_once: bool,
    rounds: int = 1,
) -> list[tuple[str, str | None]]:
    chosen = list(classes) * rounds if each_once else [rng.choice(list(classes)) for _ in range(faults)]
    return [(fault, rng.choice(list(apps)) if fault in APP_FAULTS else None) for fault in chosen]


# --------------------------------------------------------------------------- the end


def drain_and_stop(chaos: Chaos, timeout_s: float = 900) -> dict[str, Any]:
    """Stop the generator, let the apps reach the ends of the topics, stop them gracefully."""
    from stream_pipelines.control.control_store import apply_action
    from stream_pipelines.devtools.demo import caught_up

    stack, config = chaos.stack, chaos.config
    generator = stack.pid("generator")
    if generator:
        stop_process_group(generator)
    say("generator stopped; waiting for the apps to drain to the end of the topics")
    drained = chaos.wait(lambda: caught_up(config, stack.apps), timeout_s, poll_s=3)
    time.sleep(2 * TRIGGER_S)  # one more trigger, so that the last watermark closes what it can
    say("drained" if drained else f"NOT drained within {timeout_s:.0f}s")
    for app in stack.apps:
        apply_action(config, APPS[app], "stop", by="chaos", reason="end of the chaos run")
    stopped = chaos.wait(lambda: not any(chaos.sampler.drivers(app) for app in stack.apps), 300, poll_s=1)
    say("apps stopped gracefully" if stopped else "apps did NOT stop within 300s")
    chaos.settle_accounts()
    return {"drained": drained, "stopped_gracefully": stopped}


def verify(stack: Stack, started: datetime, ended: datetime) -> dict[str, Any]:
    """The archive exactly once against the topics; the reconciliation over the run's event days."""
    from stream_pipelines.devtools import demo
    from stream_pipelines.driver.runtime import get_spark

    config = stack.config
    produced = demo.produced_offsets(config)
    spark = get_spark(config, "chaos-verify")
    spark.sparkContext.setLogLevel("ERROR")
    report: dict[str, Any] = {}
    try:
        if "raw_archive" in stack.apps:
            check = demo.check_archive(spark, config, produced)
            say(f"archive: {check.describe()}")
            report["archive"] = {
                "produced": check.produced,
                "archived": check.archived,
                "lost": len(check.lost),
                "duplicated": len(check.duplicated),
                "unexpected": len(check.unexpected),
                "examples": {
                    "lost": check.lost[:20],
                    "duplicated": check.duplicated[:20],
                    "unexpected": check.unexpected[:20],
                },
            }
        if {"raw_archive", "sensor_aggregation", "ad_matching"} <= set(stack.apps):
            days = [
                started.date() + timedelta(days=n) for n in range((ended.date() - started.date()).days + 1)
            ]
            report["reconciliation"] = {}
            for day in days:
                result = demo.reconcile_day(config, spark, day)
                verdicts: dict[str, int] = {}
                for diff in [*result.diffs, *result.match_diffs]:
                    verdicts[diff.verdict] = verdicts.get(diff.verdict, 0) + 1
                report["reconciliation"][day.isoformat()] = {
                    "status": result.status,
                    "unexplained": len(result.unexplained),
                    "verdicts": verdicts,
                    "examples": [str(d)[:300] for d in result.unexplained[:10]],
                }
        else:
            report["reconciliation"] = "skipped: needs raw_archive, sensor_aggregation and ad_matching"
    finally:
        spark.stop()
    return report


def fault_table(results: list[FaultResult]) -> list[dict[str, Any]]:
    rows = []
    for fault in FAULT_CLASSES:
        of_class = [r for r in results if r.fault == fault]
        if not of_class:
            continue
        times = [r.next_batch_s for r in of_class if r.next_batch_s is not None]
        launches = [r.new_driver_s for r in of_class if r.new_driver_s is not None]
        rows.append(
            {
                "class": fault,
                "count": len(of_class),
                "recovered": sum(r.recovered for r in of_class),
                "next_batch_median_s": round(statistics.median(times), 1) if times else None,
                "next_batch_max_s": max(times) if times else None,
                "new_driver_median_s": round(statistics.median(launches), 1) if launches else None,
                "restarts": sum(r.restarts for r in of_class),
                "in_driver": sum(r.in_driver_restarts for r in of_class),
                "adoptions": sum(r.adoptions for r in of_class),
                "watchdog_kills": sum(r.watchdog_kills for r in of_class),
                "new_drivers": sum(r.new_drivers for r in of_class),
                "failed": sum(not r.ok for r in of_class),
            }
        )
    return rows


def render_table(rows: list[dict[str, Any]]) -> str:
    header = (
        f"{'fault class':<20} {'count':>5} {'recovered':>9} {'next batch s (median / max)':>28} "
        f"{'new driver s':>12} "
        f"{'restarts':>8} {'in driver':>9} {'adoptions':>9} {'watchdog kills':>14} {'new drivers':>11} "
        f"{'failed':>6}"
    )
    lines = [header, "-" * len(header)]
    for row in rows:
        median = "-" if row["next_batch_median_s"] is None else f"{row['next_batch_median_s']:.1f}"
        most = "-" if row["next_batch_max_s"] is None else f"{row['next_batch_max_s']:.1f}"
        lines.append(
            f"{row['class']:<20} {row['count']:>5} {row['recovered']:>9} {median + ' / ' + most:>28} "
            f"{'-' if row['new_driver_median_s'] is None else row['new_driver_median_s']:>12} "
            f"{row['restarts']:>8} {row['in_driver']:>9} {row['adoptions']:>9} {row['watchdog_kills']:>14} "
            f"{row['new_drivers']:>11} "
            f"{row['failed']:>6}"
        )
    return "\n".join(lines)


def verdict(report: dict[str, Any]) -> list[str]:
    """What failed, one sentence each; empty when the run passed."""
    problems = []
    archive = report.get("verification", {}).get("archive")
    if archive:
        for key in ("lost", "duplicated", "unexpected"):
            if archive[key]:
                problems.append(f"archive: {archive[key]} offsets {key}")
    reconciliation = report.get("verification", {}).get("reconciliation")
    if isinstance(reconciliation, dict):
        for day, outcome in reconciliation.items():
            if outcome["unexplained"]:
                problems.append(f"reconciliation of {day}: {outcome['unexplained']} unexplained differences")
    for app, count in report["drivers"]["max_per_app"].items():
        if count > 1:
            problems.append(f"{app}: {count} drivers at once")
    worker = report.get("worker")
    if worker:
        if worker["python_drivers"]:
            problems.append(f"the Airflow worker ran {worker['python_drivers']} Python driver(s)")
        if worker["longest_s"] is not None and worker["longest_s"] > worker["limit_s"]:
            problems.append(
                f"a spark-submit stayed {worker['longest_s']:.0f}s on the Airflow worker "
                f"(a driver held there; the limit is {worker['limit_s']:.0f}s)"
            )
    for app, tries in report.get("startup_tries", {}).items():
        for task, try_number in sorted(tries.items()):
            if try_number > 1:
                problems.append(
                    f"{app}: the stack's start failed a try of its supervisor's {task} (try {try_number})"
                )
    for fault in report["faults"]:
        if not fault["recovered"]:
            problems.append(f"fault {fault['number']} ({fault['fault']}): not recovered")
        for text in fault["expectations"]:
            problems.append(f"fault {fault['number']} ({fault['fault']}): {text}")
    for key, value in report.get("end", {}).items():
        if not value:
            problems.append(f"end of run: not {key.replace('_', ' ')}")
    return problems


# --------------------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="chaos", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--faults", type=int, default=20, help="how many faults to inject (default 20)")
    parser.add_argument("--seed", type=int, default=7, help="seeds the draw of faults, targets and gaps")
    parser.add_argument(
        "--apps", default=",".join(APP_NAMES), help="comma-separated apps to run (default: all)"
    )
    parser.add_argument(
        "--classes",
        default=None,
        help=f"comma-separated fault classes ({', '.join(FAULT_CLASSES)}; default: all that the store "
        "allows, storage-outage only with --store hdfs or s3)",
    )
    parser.add_argument(
        "--each-once", action="store_true", help="one fault of each class, in order (the smoke)"
    )
    parser.add_argument(
        "--rounds", type=int, default=1, help="with --each-once: the classes in order this many times"
    )
    parser.add_argument(
        "--stop-orphans", action="store_true", help="after an adoption, stop the orphan gracefully"
    )
    parser.add_argument(
        "--root", type=Path, default=DEFAULT_ROOT, help=f"private data root (default {DEFAULT_ROOT})"
    )
    parser.add_argument(
        "--json", type=Path, default=None, help="report file (default <root>/chaos-report.json)"
    )
    parser.add_argument(
        "--recover-timeout", type=float, default=600, help="seconds a fault may take to recover (default 600)"
    )
    parser.add_argument(
        "--gap",
        type=float,
        nargs=2,
        default=(3.0, 15.0),
        metavar=("MIN", "MAX"),
        help="seconds between one fault's recovery and the next fault, drawn in this range (default 3 15)",
    )
    parser.add_argument(
        "--db-down",
        type=float,
        nargs=2,
        default=METADATA_DB_DOWN_S,
        metavar=("MIN", "MAX"),
        help="seconds metadata-db-restart keeps PostgreSQL stopped, drawn in this range (default 10 60)",
    )
    parser.add_argument("--rate", type=float, default=5.0, help="sensor readings per second")
    parser.add_argument("--ad-rate", type=float, default=2.0, help="impressions per second")
    parser.add_argument(
        "--store",
        choices=STORES,
        default="local",
        help="where the data root lives: the local disk, or an HDFS or S3 server the stack starts on "
        "loopback (needed by storage-outage)",
    )
    parser.add_argument(
        "--cluster",
        choices=CLUSTERS,
        default="local",
        help="where the drivers run: on the Airflow worker (local), or in YARN containers (yarn: a "
        "ResourceManager and NodeManager on loopback over their HDFS, the data root; faults "
        f"{', '.join(YARN_DEFAULT_CLASSES)} unless --classes says otherwise)",
    )
    parser.add_argument("--set", dest="extra", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--keep", action="store_true", help="leave the stack running at the end (debugging)")
    return parser.parse_args(argv)


def _interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    apps = tuple(a for a in args.apps.split(",") if a)
    if args.cluster == "yarn" and args.store not in ("local", "hdfs"):
        raise SystemExit("chaos: on YARN the data root is on the cluster's HDFS: leave out --store")
    store = "hdfs" if args.cluster == "yarn" else args.store
    classes = fault_classes(args.classes, store, args.cluster)
    unknown = [a for a in apps if a not in APPS] + [c for c in classes if c not in FAULT_CLASSES]
    if unknown:
        raise SystemExit(f"chaos: unknown app or fault class: {', '.join(unknown)}")
    refused = refused_classes(classes, store, args.cluster)
    if refused:
        raise SystemExit(f"chaos: {refused}")
    for option, (low, high) in (("--gap", args.gap), ("--db-down", args.db_down)):
        if not 0 <= low <= high:
            raise SystemExit(f"chaos: {option} {low:g} {high:g}: needs 0 <= MIN <= MAX")
    # A SIGTERM (a timeout, a CI cancel) still tears the private stack down and writes what was seen.
    signal.signal(signal.SIGTERM, _interrupt)
    # The verification's Spark session stays on loopback, like everything else of the stack.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    rng = random.Random(args.seed)
    schedule = draw_schedule(rng, args.faults, classes, apps, args.each_once, args.rounds)
    stack = Stack(
        args.root.resolve(),
        apps,
        seed=args.seed,
        rate=args.rate,
        ad_rate=args.ad_rate,
        extra=tuple(args.extra),
        store=store,
        cluster=args.cluster,
    )
    report_path = (args.json or stack.root / "chaos-report.json").resolve()
    report: dict[str, Any] = {
        "seed": args.seed,
        "store": store,
        "cluster": args.cluster,
        "apps": list(apps),
        "schedule": [f"{fault}:{app or 'stack'}" for fault, app in schedule],
        "settings": stack.overrides,
    }
    started = datetime.now(UTC)
    say(
        f"chaos: {len(schedule)} faults, seed {args.seed}, apps {', '.join(apps)}, store {store}, "
        f"drivers {'in YARN containers' if args.cluster == 'yarn' else 'on the Airflow worker'}"
    )
    chaos: Chaos | None = None
    try:
        stack.up()
        chaos = Chaos(
            stack,
            recover_timeout_s=args.recover_timeout,
            stop_orphans=args.stop_orphans,
            rng=rng,
            db_down_s=tuple(args.db_down),
        )
        chaos.start_sampling()
        chaos.wait_first_batches()
        chaos.run(schedule, tuple(args.gap))
        report["end"] = drain_and_stop(chaos)
        stack.stop_airflow()
        chaos.stop_sampling()
        report["verification"] = verify(stack, started, datetime.now(UTC))
    except BaseException as error:
        report["aborted"] = f"{type(error).__name__}: {error}"
        raise
    finally:
        if chaos is not None:
            chaos.stop_sampling()
            chaos.settle_accounts()
            report["faults"] = [{**asdict(r), "ok": r.ok} for r in chaos.results]
            report["table"] = fault_table(chaos.results)
            report["cold_start_s"] = chaos.cold_start_s
            report["startup_tries"] = chaos.startup_tries
            report["drivers"] = {
                "samples": chaos.sampler.samples,
                "max_per_app": chaos.sampler.max_drivers,
                "violations": chaos.sampler.violations[:50],
                "launches": {app: len(chaos.sampler.driver_pids(app, True)) for app in apps},
                "seen": chaos.sampler.seen,
            }
            if chaos.rm is not None:
                report["worker"] = worker_launches(chaos.worker)
            report["log_lines"] = {app: lines[-50:] for app, lines in chaos.logs.lines.items()}
        else:
            report.setdefault("faults", [])
            report.setdefault("drivers", {"max_per_app": {}})
        report["duration_s"] = round((datetime.now(UTC) - started).total_seconds())
        if not args.keep:
            stack.down()
        report["problems"] = verdict(report) + ([report["aborted"]] if "aborted" in report else [])
        report_path.parent.mkdir(parents=True, exist_ok=True)
        report_path.write_text(json.dumps(report, indent=2, default=str))
    print()
    print(render_table(report["table"]))
    print()
    drivers = report["drivers"]
    launches = "YARN applications" if args.cluster == "yarn" else "spark-submits"
    print(
        f"drivers: {drivers['samples']} samples, at most {drivers['max_per_app']} per app; "
        f"{launches} seen {drivers.get('launches')}"
    )
    worker = report.get("worker")
    if worker:
        print(
            f"Airflow worker: {worker['spark_submits']} spark-submits, the longest on it "
            f"{worker['longest_s']}s (limit {worker['limit_s']:.0f}s), Python drivers on it "
            f"{worker['python_drivers']}"
        )
    archive = report["verification"].get("archive")
    if archive:
        print(
            f"archive: {archive['produced']} produced offsets, {archive['lost']} lost, "
            f"{archive['duplicated']} duplicated, {archive['unexpected']} unexpected"
        )
    reconciliation = report["verification"].get("reconciliation")
    if isinstance(reconciliation, dict):
        for day, outcome in reconciliation.items():
            print(
                f"reconciliation {day}: {outcome['status']}, unexplained {outcome['unexplained']}, "
                f"{outcome['verdicts']}"
            )
    else:
        print(f"reconciliation: {reconciliation}")
    print(f"report: {report_path}  ({report['duration_s']}s)")
    if report["problems"]:
        print("FAILED:\n  " + "\n  ".join(report["problems"]))
        return 1
    print(
        "PASSED: nothing lost, nothing duplicated, nothing unexplained, never two "
        + (
            "applications of one app in YARN, no driver on the Airflow worker"
            if worker
            else "drivers of one app"
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
