"""The local stack behind `make up` / `make down` / `make status`.

Starts, each in its own process group with a pid file and a log under ``<local root>/stack``
(``paths.local_root``, else the data root): the Kafka broker; the HDFS when the config manages one
(``hdfs.manage_local``); PostgreSQL for Airflow's metadata database (``devtools/postgres.py``); Airflow
(api-server, two schedulers, dag-processor, triggerer; LocalExecutor with parallelism sized for 2 cores;
the schedulers once the api-server answers) with the streaming DAGs unpaused; a live generator at a
modest rate; Prometheus with the alert rules, Alertmanager and the example webhook receiver when
installed, with ``pipelinectl metrics-targets`` keeping the file Prometheus discovers the drivers in current.
`down` stops every group it started (children included), then the apps' drivers, the broker, the HDFS
and PostgreSQL.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from stream_pipelines.airflow.nightly import START_DATE_VARIABLE
from stream_pipelines.core.config import PROJECT_ROOT, PipelineConfig
from stream_pipelines.core.registry import APP_NAMES
from stream_pipelines.devtools import hdfs, yarn
from stream_pipelines.devtools.postgres import LocalPostgres, MetadataDatabase
from stream_pipelines.devtools.processes import alive as _alive
from stream_pipelines.devtools.processes import descendants, parent_pid, stop_process_group, stop_processes
from stream_pipelines.observability.monitoring_rules import (
    AIRFLOW_API_SERVER,
    RULES_DIR,
    render_prometheus_config,
    write_yaml,
)

AIRFLOW_PORT = 8080
PROMETHEUS_PORT = 9090
ALERTMANAGER_PORT = 9094
WEBHOOK_PORT = 9095
AIRFLOW_USER = "admin"
# Airflow's supported high availability: two schedulers share the metadata database (row-level locks on
# PostgreSQL), each with its own LocalExecutor; either carries on when the other dies.
SCHEDULERS = ("airflow-scheduler-a", "airflow-scheduler-b")
# What a scheduler whose loop failed (its database went away) prints before it waits, for ever, for its
# running tasks to end: the supervisors, which do not.
SCHEDULER_STUCK = "waiting for running tasks to finish"
# How long `down` lets an app finish its batch in flight before it kills the driver.
APP_DRAIN_S = 60.0
# How often the stack's Prometheus targets are brought up to date with the drivers' running records.
METRICS_TARGETS_EVERY_S = 5
# How long the stack waits for the api-server to answer before it gives up on starting the schedulers.
API_SERVER_START_TIMEOUT_S = 180.0


@dataclass(frozen=True)
class SqliteMetadata:
    """Airflow's metadata in one SQLite file: the stack before PostgreSQL, which `make bench-stack
    --airflow sqlite` measures beside today's (`make demo` and `dag.test()` keep Airflow's own default)."""

    path: Path

    def airflow_settings(self) -> dict[str, str]:
        return {"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{self.path}"}


@dataclass(frozen=True)
class AirflowSetup:
    """Where the stack's Airflow keeps its metadata, and how many schedulers share it."""

    name: str
    schedulers: tuple[str, ...]
    on_postgres: bool


# What `make up` runs (decision 0023).
AIRFLOW_HA = AirflowSetup("postgres", SCHEDULERS, on_postgres=True)
# SQLite allows one scheduler only.
AIRFLOW_SQLITE = AirflowSetup("sqlite", SCHEDULERS[:1], on_postgres=False)
AIRFLOW_SETUPS = {setup.name: setup for setup in (AIRFLOW_HA, AIRFLOW_SQLITE)}


@dataclass(frozen=True)
class Component:
    name: str
    command: list[str]
    # Run under devtools/keeper.py, which starts it again when it dies (Airflow's components: a
    # scheduler killed, or one that gave up while the metadata database was away).
    kept: bool = False
    # A line of its output after which it is stuck, not ending: the keeper kills it (see keeper.py).
    kill_on: str | None = None


def stack_dir(config: PipelineConfig) -> Path:
    """The stack's own host-local state: Airflow's home, pid files, logs, Prometheus's data."""
    return Path(config.local_root()) / "stack"


def metrics_targets_file(config: PipelineConfig) -> Path:
    """Where the stack's Prometheus discovers the drivers (file_sd), kept current by the stack's
    ``pipelinectl metrics-targets``."""
    return stack_dir(config) / "metrics_targets.json"


def prometheus_config_file(config: PipelineConfig) -> Path:
    return stack_dir(config) / "prometheus.yml"


def write_prometheus_config(config: PipelineConfig) -> Path:
    """monitoring/prometheus.yml for the stack: the drivers discovered in its targets file, Airflow's
    api-server, Alertmanager on their ports here, the repository's rules."""
    rendered = render_prometheus_config(
        rule_paths=[RULES_DIR / "*.yml"],
        targets={AIRFLOW_API_SERVER: f"127.0.0.1:{AIRFLOW_PORT}"},
        app_targets_file=metrics_targets_file(config),
        alertmanager=f"127.0.0.1:{ALERTMANAGER_PORT}",
    )
    return write_yaml(prometheus_config_file(config), rendered)


def metadata_server(config: PipelineConfig) -> LocalPostgres:
    """The stack's PostgreSQL, its state under the stack's folder."""
    return LocalPostgres(stack_dir(config) / "postgres")


def airflow_environment(
    config: PipelineConfig, database: MetadataDatabase | SqliteMetadata, port: int = AIRFLOW_PORT
) -> dict[str, str]:
    """Airflow's settings for the stack, its metadata in ``database``."""
    home = stack_dir(config) / "airflow"
    bin_dir = str(Path(sys.executable).parent)
    return {
        **os.environ,
        **database.airflow_settings(),
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(PROJECT_ROOT / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        # 2 cores: a handful of task slots, not the 32 worker processes of the default.
        "AIRFLOW__CORE__PARALLELISM": "6",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        START_DATE_VARIABLE: nightly_start_date(config),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{AIRFLOW_USER}:admin",
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "False",
        # Two schedulers: one silent for scheduler_health_check_threshold (30 s) is dead, and the other
        # takes over its tasks at its next orphan check, every 30 s here instead of every 5 minutes.
        "AIRFLOW__SCHEDULER__ORPHANED_TASKS_CHECK_INTERVAL": "30",
        # A task runner rides out 2.5 minutes without the metadata database (30 failed heartbeats, 5 s
        # apart) instead of 15 s: its driver does not need the database, and its supervisor should not.
        "AIRFLOW__WORKERS__MAX_FAILED_HEARTBEATS": "30",
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
    }


def airflow_components(port: int = AIRFLOW_PORT, setup: AirflowSetup = AIRFLOW_HA) -> list[Component]:
    airflow = str(Path(sys.executable).parent / "airflow")
    api_server = [airflow, "api-server", "--host", "127.0.0.1", "--port", str(port)]
    return [
        Component(AIRFLOW_API_SERVER, api_server, kept=True),
        *(
            Component(name, [airflow, "scheduler"], kept=True, kill_on=SCHEDULER_STUCK)
            for name in setup.schedulers
        ),
        Component("airflow-dag-processor", [airflow, "dag-processor"], kept=True),
        Component("airflow-triggerer", [airflow, "triggerer"], kept=True),
    ]


# The live generator's sensor readings and ad impressions per second: a modest load for two cores.
GENERATOR_RATES = (5.0, 2.0)


def generator_component(
    seed: int,
    *,
    rate: float = GENERATOR_RATES[0],
    ad_rate: float = GENERATOR_RATES[1],
    duration_s: int = 86400,
    options: tuple[str, ...] = (),
) -> Component:
    """The live generator: events stamped now, sent at the pace of event time, with `produce`'s
    ``options`` on top (``--no-clicks``)."""
    return Component(
        "generator",
        [
            str(Path(sys.executable).parent / "pipelinectl"),
            "produce",
            "--realtime",
            "--start",
            "now",
            "--duration",
            str(duration_s),
            "--rate",
            str(rate),
            "--ad-rate",
            str(ad_rate),
            "--seed",
            str(seed),
            *options,
        ],
    )


def components(
    config: PipelineConfig,
    generator_rates: tuple[float, float] = GENERATOR_RATES,
    airflow: AirflowSetup = AIRFLOW_HA,
) -> list[Component]:
    rate, ad_rate = generator_rates
    found = [
        *airflow_components(setup=airflow),
        # Event ids are "<kind>-<seed>-<n>": a fixed seed would give a restarted stack the ids of the
        # events it already produced today, and the nightly would count them as one.
        generator_component(int(time.time()), rate=rate, ad_rate=ad_rate),
    ]
    monitoring = PROJECT_ROOT / "monitoring"
    prometheus = shutil.which("prometheus")
    if prometheus:
        found.append(
            Component(
                "metrics-targets",
                [
                    str(Path(sys.executable).parent / "pipelinectl"),
                    "metrics-targets",
                    "--out",
                    str(metrics_targets_file(config)),
                    "--every",
                    str(METRICS_TARGETS_EVERY_S),
                ],
            )
        )
        found.append(
            Component(
                "prometheus",
                [
                    prometheus,
                    # Written by `up` (write_prometheus_config) before the components start.
                    f"--config.file={prometheus_config_file(config)}",
                    f"--storage.tsdb.path={stack_dir(config) / 'prometheus'}",
                    f"--web.listen-address=127.0.0.1:{PROMETHEUS_PORT}",
                ],
            )
        )
    alertmanager = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    if alertmanager:
        found.append(
            Component(
                "alertmanager",
                [
                    alertmanager,
                    f"--config.file={monitoring / 'alertmanager.yml'}",
                    f"--storage.path={stack_dir(config) / 'alertmanager'}",
                    f"--web.listen-address=127.0.0.1:{ALERTMANAGER_PORT}",
                    "--cluster.listen-address=",
                ],
            )
        )
        found.append(Component("webhook-receiver", [sys.executable, str(monitoring / "webhook_receiver.py")]))
    return found


def _pid_file(config: PipelineConfig, name: str) -> Path:
    return stack_dir(config) / f"{name}.pid"


def recorded_pid(config: PipelineConfig, name: str) -> int | None:
    try:
        return int(_pid_file(config, name).read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def up(
    config: PipelineConfig,
    generator_rates: tuple[float, float] = GENERATOR_RATES,
    airflow: AirflowSetup = AIRFLOW_HA,
) -> int:
    from stream_pipelines.devtools.broker import LocalBroker
    from stream_pipelines.kafka.topics import ensure_topics

    print(LocalBroker(config).start().describe())
    if config.hdfs.manage_local:
        print(hdfs.start_for(config))
    if config.yarn.manage_local:
        print(yarn.start_for(config))
    for topic, outcome in ensure_topics(config).items():
        print(f"topic {topic}: {outcome}")
    if airflow.on_postgres:
        server = metadata_server(config).start()
        print(server.describe())
        database: MetadataDatabase | SqliteMetadata = server.database()
    else:
        database = SqliteMetadata(stack_dir(config) / "airflow" / "airflow.db")
    environment = airflow_environment(config, database)
    failure = migrate_airflow_db(environment)
    if failure:
        print(failure, file=sys.stderr)
        return 1
    if shutil.which("prometheus"):
        write_prometheus_config(config)
    to_start = []
    for component in components(config, generator_rates, airflow):
        pid = recorded_pid(config, component.name)
        if pid and _alive(pid):
            print(f"{component.name}: already running (pid {pid})")
        else:
            to_start.append(component)
    try:
        started = start_components(config, to_start, environment, AIRFLOW_PORT)
    except RuntimeError as error:
        print(error, file=sys.stderr)
        return 1
    for name, pid in started.items():
        print(f"{name}: started (pid {pid}, log {stack_dir(config) / 'logs' / f'{name}.log'})")
    if not shutil.which("prometheus"):
        print("prometheus: not installed (run `make test-deps`); metrics are still served by each app")
    password = airflow_admin_password(environment["AIRFLOW_HOME"])
    login = password or f"see {environment['AIRFLOW_HOME']}/simple_auth_manager_passwords.json.generated"
    print()
    print(f"Airflow UI:     http://127.0.0.1:{AIRFLOW_PORT}  (login {AIRFLOW_USER} / {login})")
    print(f"Pipeline page:  {pipeline_page()}")
    if shutil.which("prometheus"):
        print(f"Prometheus:     http://127.0.0.1:{PROMETHEUS_PORT}")
        print(f"Alertmanager:   http://127.0.0.1:{ALERTMANAGER_PORT}")
    print("Streaming DAGs: supervise_raw_archive, supervise_sensor_aggregation, supervise_ad_matching")
    print("Controls:       DAG pipeline_control (params app, action)")
    print("`make status` shows what runs; `make down` stops everything.")
    return 0


def pipeline_page() -> str:
    """The "Streaming pipeline" page of the stack's Airflow UI."""
    from stream_pipelines.airflow.health import page_address

    return page_address(f"http://127.0.0.1:{AIRFLOW_PORT}")


def airflow_api_server_running(config: PipelineConfig) -> bool:
    pid = recorded_pid(config, AIRFLOW_API_SERVER)
    return bool(pid and _alive(pid))


def migrate_airflow_db(environment: dict[str, str]) -> str | None:
    """Create or upgrade Airflow's metadata DB; the error output when that fails."""
    migrate = subprocess.run(
        [str(Path(sys.executable).parent / "airflow"), "db", "migrate"],
        env=environment,
        capture_output=True,
        text=True,
        check=False,
    )
    return None if migrate.returncode == 0 else migrate.stderr[-3000:] or migrate.stdout[-3000:]


def start_component(config: PipelineConfig, component: Component, environment: dict[str, str]) -> int:
    """Start one component in its own process group, logging to <stack>/logs; its pid (its keeper's,
    when it is kept)."""
    logs = stack_dir(config) / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    command = component.command
    if component.kept:
        keeper = [sys.executable, "-m", "stream_pipelines.devtools.keeper", "--name", component.name]
        if component.kill_on:
            keeper += ["--kill-on", component.kill_on]
        command = [*keeper, "--", *command]
    with (logs / f"{component.name}.log").open("ab") as log:
        process = subprocess.Popen(
            command,
            env=environment,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=PROJECT_ROOT,
        )
    _pid_file(config, component.name).write_text(str(process.pid))
    return process.pid


def api_server_answers(port: int) -> bool:
    """Whether the api-server on ``port`` answers its health check (no login needed)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v2/monitor/health", timeout=5) as answer:
            return answer.status == 200
    except OSError:
        return False


def start_components(
    config: PipelineConfig,
    components: list[Component],
    environment: dict[str, str],
    api_port: int,
    *,
    say: Callable[[str], None] = print,
    timeout_s: float = API_SERVER_START_TIMEOUT_S,
) -> dict[str, int]:
    """Start the stack's components, Airflow's schedulers last: once its api-server on ``api_port``
    answers.

    A task that a scheduler hands its executor before then fails its first try (the task's runner
    cannot reach the execution API and is killed), and the supervisor waits out a retry delay: on the
    chaos stack, whose supervisors are unpaused before Airflow starts, that cost each start 48 s and a
    failed try in the UI. Nothing else runs a task, so the rest starts at once. Returns each started
    component's pid; raises RuntimeError, naming the api-server's log, when it does not answer within
    ``timeout_s`` (what did start is left running, for `make down` or the caller to stop).
    """
    schedulers = [c for c in components if c.name in SCHEDULERS]
    pids = {c.name: start_component(config, c, environment) for c in components if c not in schedulers}
    if schedulers:
        say(f"waiting for Airflow's api-server on 127.0.0.1:{api_port} before starting the schedulers")
        deadline = time.monotonic() + timeout_s
        while not api_server_answers(api_port):
            if time.monotonic() > deadline:
                log = stack_dir(config) / "logs" / f"{AIRFLOW_API_SERVER}.log"
                raise RuntimeError(
                    f"Airflow's api-server did not answer on 127.0.0.1:{api_port} within {timeout_s:.0f}s, "
                    f"so the schedulers were not started; see {log}"
                )
            time.sleep(0.5)
        pids.update({c.name: start_component(config, c, environment) for c in schedulers})
    return pids


def nightly_start_date(config: PipelineConfig) -> str:
    """The stack's first day, kept across restarts: the nightly DAG catches up from there, no earlier."""
    recorded = stack_dir(config) / "nightly_start_date"
    if not recorded.exists():
        recorded.parent.mkdir(parents=True, exist_ok=True)
        recorded.write_text(datetime.now(UTC).date().isoformat())
    return recorded.read_text().strip()


def airflow_admin_password(home: str, timeout_s: float = 90) -> str | None:
    """The generated password of the UI's admin user, once the api-server has written it."""
    generated = Path(home) / "simple_auth_manager_passwords.json.generated"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if generated.exists():
            try:
                return json.loads(generated.read_text()).get(AIRFLOW_USER)
            except json.JSONDecodeError:
                pass
        time.sleep(1)
    return None


def down(config: PipelineConfig) -> int:
    from stream_pipelines.control.control_store import ControlStore
    from stream_pipelines.devtools.broker import LocalBroker

    # Airflow first: it would otherwise see the apps' ends and restart them.
    names = [
        "generator",
        *SCHEDULERS,
        "airflow-scheduler",  # the one scheduler of a stack started before decision 0023
        "airflow-triggerer",
        "airflow-dag-processor",
        AIRFLOW_API_SERVER,
        "webhook-receiver",
        "alertmanager",
        "prometheus",
        "metrics-targets",
    ]
    started_below = stop_components(config, names)
    # With the supervisors gone nothing restarts the apps: SIGTERM is the apps' graceful stop (finish the
    # batch in flight, commit, exit 0); a driver still there after the drain time is killed with its
    # spark-submit parent, which the checkpoint makes safe.
    store = ControlStore(config)
    drivers = {pid: app for app in APP_NAMES for pid in store.running_pids(app)}
    for pid in drivers:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + APP_DRAIN_S
    while any(_alive(pid) for pid in drivers) and time.monotonic() < deadline:
        time.sleep(0.5)
    for pid, app in drivers.items():
        if not _alive(pid):
            print(f"{app}: stopped gracefully (pid {pid})")
            continue
        for target in (pid, parent_pid(pid)):
            if target is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(target, signal.SIGKILL)
        print(f"{app}: driver killed after {APP_DRAIN_S:.0f}s without stopping (pid {pid})")
    leftovers = stop_processes(started_below)
    if leftovers:
        print(f"{leftovers} process(es) left behind by Airflow tasks: stopped")
    print("broker: stopped" if LocalBroker(config).stop() else "broker: was not running")
    if config.yarn.manage_local:
        print("yarn: stopped" if yarn.stop_for(config) else "yarn: was not running")
    if config.hdfs.manage_local:
        print("hdfs: stopped" if hdfs.stop_for(config) else "hdfs: was not running")
    print("postgres: stopped" if metadata_server(config).stop() else "postgres: was not running")
    return 0


def stop_components(config: PipelineConfig, names: list[str]) -> set[int]:
    """Stop each named component's process group; the pids that were below them, some still running.

    Airflow's task workers and their spark-submit children leave the component's process group, so
    the caller stops those too, once nothing would restart them.
    """
    started_below = set().union(
        *(descendants(pid) for name in names if (pid := recorded_pid(config, name)) and _alive(pid))
    )
    for name in names:
        pid = recorded_pid(config, name)
        if pid and _alive(pid):
            stop_process_group(pid)
            print(f"{name}: stopped (pid {pid})")
        _pid_file(config, name).unlink(missing_ok=True)
    return started_below


def servers_status(config: PipelineConfig) -> list[str]:
    """One line per local server this checkout's stack runs: the broker, HDFS and YARN when managed here,
    and each component (Airflow's, Prometheus, the generator)."""
    from stream_pipelines.devtools.broker import LocalBroker

    lines = [LocalBroker(config).status().describe(), metadata_server(config).describe()]
    if config.hdfs.manage_local:
        cluster = hdfs.for_config(config)
        lines.append(f"hdfs: {'running' if cluster.running() else 'stopped'} ({cluster.default_fs})")
    if config.yarn.manage_local:
        resource_manager = yarn.for_config(config)
        up_now = resource_manager.daemon_running("resourcemanager")
        lines.append(f"yarn: {'running' if up_now else 'stopped'} ({resource_manager.rm_url})")
    for component in components(config):
        pid = recorded_pid(config, component.name)
        state = f"running (pid {pid})" if pid and _alive(pid) else "stopped"
        lines.append(f"{component.name}: {state}")
    return lines
