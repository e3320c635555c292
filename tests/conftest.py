"""Shared fixtures: one SparkSession per test process, one real Kafka broker per session."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from stream_pipelines.core.config import (
    DEFAULT_CONF_DIR,
    PROJECT_ROOT,
    PipelineConfig,
    load_config,
    override_variables,
)
from stream_pipelines.core.registry import app as declared_app
from stream_pipelines.devtools.postgres import LocalPostgres, MetadataDatabase
from stream_pipelines.devtools.processes import free_port
from stream_pipelines.devtools.tls import KEY_PASSWORD, Identity, LoopbackPki, make_test_pki
from stream_pipelines.launching import jvm

# `TEST_WORKERS=N make test` runs the suite on N pytest-xdist workers (`--dist loadgroup`); `make test`
# runs it in one process, which on two cores was no slower (docs/development.md). Each worker starts its
# own session servers (broker, Spark, S3, HDFS, YARN, PostgreSQL, Airflow's home) on its own ports.
#
# A module runs whole on one worker, so its module-scoped stack is built once. The tests that run the
# installed wheel share one worker, so the wheel and its packed environment are built once a session,
# and so does the nightly job in YARN: the YARN test finds no driver bundle left in the temp folder
# after its launches, which a bundle of another worker's launch would blur.
SAME_WORKER_AS = {
    "tests/test_packed_environment.py": "installed-site",
    "tests/test_installed_package.py": "installed-site",
    "tests/test_yarn_cluster_mode.py": "installed-site",
    "tests/test_reconcile.py": "installed-site",
}
# The longest modules start first, so that neither worker is left with one at the end (measured:
# docs/development.md#where-ci-time-goes). This orders the run; it never selects or skips a test.
LONGEST_FIRST = (
    "tests/test_day_lifecycle.py",
    "tests/test_reconcile.py",
    "tests/test_yarn_cluster_mode.py",
    "tests/test_object_store.py",
    "tests/test_chaos_smoke.py",
    "tests/test_crash_equivalence.py",
    "tests/test_hdfs_store.py",
    "tests/test_secured_kafka.py",
)


# With --servers-on-one-worker, every test outside the unit tier is one group: one worker runs them in
# the order above, as one process would, and the unit tier (no JVM, no broker, no Airflow) runs beside
# them on the other worker (`TEST_WORKERS=2 make test`; docs/development.md says what it measured).
SERVERS_GROUP = "servers"
UNIT_TIER = "tests/unit/"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--servers-on-one-worker",
        action="store_true",
        help="with -n: the tests that start servers run in order on one worker, the unit tier beside them",
    )


# Before xdist's own hook, which reads the group marker to give each test its group: run after it, the
# marker is unseen and every test is sent on its own (a module's fixtures then start on both workers).
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    servers_together = config.getoption("--servers-on-one-worker")

    def group_of(module: str) -> str:
        if servers_together and not module.startswith(UNIT_TIER):
            return SERVERS_GROUP
        return SAME_WORKER_AS.get(module, module)

    first: dict[str, int] = {}
    for n, module in enumerate(LONGEST_FIRST):
        first.setdefault(group_of(module), n)
    module_rank = {module: n for n, module in enumerate(LONGEST_FIRST)}
    modules = {item: item.nodeid.split("::")[0] for item in items}
    groups = {item: group_of(module) for item, module in modules.items()}
    # Stable: the rest keep their order.
    items.sort(
        key=lambda item: (
            first.get(groups[item], len(first)),
            module_rank.get(modules[item], len(module_rank)),
        )
    )
    if config.pluginmanager.hasplugin("xdist"):  # its marker exists only with it
        for item in items:
            item.add_marker(pytest.mark.xdist_group(groups[item]))


@pytest.fixture(scope="session")
def broker_ports() -> tuple[int, int]:
    return free_port(), free_port()


@pytest.fixture(scope="session")
def session_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("pipeline")


def overrides_for(data_root: Path, ports: tuple[int, int], *extra: str) -> list[str]:
    """--set values pointing the local config at a private data root and the test broker."""
    port, controller = ports
    return [
        f"paths.data_root={data_root}",
        f"broker.port={port}",
        f"broker.controller_port={controller}",
        f"kafka.bootstrap_servers=127.0.0.1:{port}",
        "spark.shuffle_partitions=2",
        "spark.driver_memory=1g",
        "metrics.enabled=false",
        *extra,
    ]


def private_source_topics() -> list[str]:
    """--set values naming the three source topics after this test alone (the broker is shared)."""
    import uuid

    suffix = uuid.uuid4().hex[:6]
    return [f"kafka.topics.{name}.name={name}-{suffix}" for name in ("sensors", "impressions", "clicks")]


# What the supervisor tests run an app with: small batches, a 1 s trigger, quick restarts.
SUPERVISED_ARCHIVE = (
    "kafka.max_offsets_per_trigger=200",
    "archive.trigger=1 seconds",
    "supervision.retry_delay=1 seconds",
    "supervision.max_retry_delay=5 seconds",
)


def produce_scenario(config: PipelineConfig, seed: int) -> list:
    """Five minutes of generated sensor and ad events on the config's input topics (made if missing),
    produced; the records, to count the output against."""
    from stream_pipelines.devtools import generator
    from stream_pipelines.kafka.topics import ensure_topics

    ensure_topics(config)
    spec = generator.ScenarioSpec(
        seed=seed,
        duration_s=300,
        sensor_rate=10,
        ad_rate=3,
        topics=generator.TopicNames(*(topic.name for topic in config.kafka.topics.inputs())),
    )
    records = generator.generate(spec)
    generator.produce_to_kafka(records, config.kafka_client_config())
    return records


def config_for(data_root: Path, ports: tuple[int, int], *extra: str) -> PipelineConfig:
    return load_config("local", overrides_for(data_root, ports, *extra))


def make_overrides_config(overrides: list[str]) -> PipelineConfig:
    return load_config("local", overrides)


@dataclass(frozen=True)
class SecuredKafka:
    """The session broker's secured listeners: SASL_SSL with a SCRAM-SHA-512 user, and mutual TLS."""

    pki: LoopbackPki
    sasl_ssl_port: int
    ssl_port: int
    user: str
    password: str
    password_variable: str = "KAFKA_PASSWORD"

    def sasl_ssl(self) -> list[str]:
        """conf/cluster.yaml's kafka.security as it stands, pointed at this broker and its test CA: the
        username and the password come from the environment (``environment``), as there."""
        cluster = yaml.safe_load((DEFAULT_CONF_DIR / "cluster.yaml").read_text())["kafka"]["security"]
        assert cluster["protocol"] == "SASL_SSL" and cluster["sasl_password_env"] == self.password_variable
        settings = {**cluster, "ca_file": str(self.pki.ca)}
        return [
            f"kafka.bootstrap_servers=127.0.0.1:{self.sasl_ssl_port}",
            *(f"kafka.security.{key}={value}" for key, value in settings.items()),
        ]

    key_password_variable: str = "KAFKA_KEY_PASSWORD"

    def mutual_tls(self, identity: Identity | None = None, ca: Path | None = None) -> list[str]:
        """The mutual TLS listener with a client identity (by default: a key encrypted as openssl 3
        encrypts one by default, its password in ``environment()``)."""
        identity = identity or self.pki.client
        password = [f"kafka.security.key_password_env={self.key_password_variable}"] * bool(
            identity.key_password
        )
        return [
            f"kafka.bootstrap_servers=127.0.0.1:{self.ssl_port}",
            "kafka.security.protocol=SSL",
            f"kafka.security.ca_file={ca or self.pki.ca}",
            f"kafka.security.certificate_file={identity.certificate}",
            f"kafka.security.key_file={identity.key}",
            *password,
        ]

    def environment(self, password: str | None = None, key_password: str | None = None) -> dict[str, str]:
        return {
            "KAFKA_USERNAME": self.user,
            self.password_variable: password or self.password,
            self.key_password_variable: key_password or KEY_PASSWORD,
        }


@pytest.fixture(scope="session")
def secured_kafka(session_root: Path) -> SecuredKafka:
    import secrets

    return SecuredKafka(
        make_test_pki(session_root / "tls"), free_port(), free_port(), "pipeline", secrets.token_urlsafe(16)
    )


@pytest.fixture(scope="session")
def broker(
    session_root: Path, broker_ports: tuple[int, int], secured_kafka: SecuredKafka
) -> Iterator[PipelineConfig]:
    """A real single-node KRaft broker on loopback for the whole session; yields its (plaintext) config.
    It also serves the secured listeners of ``secured_kafka``."""
    from stream_pipelines.devtools.broker import LocalBroker, SecuredListeners

    config = config_for(session_root / "broker-root", broker_ports)
    secured = secured_kafka
    listeners = SecuredListeners(
        secured.sasl_ssl_port,
        secured.ssl_port,
        secured.pki.broker_keystore,
        secured.pki.ca,
        {secured.user: secured.password},
    )
    local = LocalBroker(config, listeners)
    local.start()
    try:
        yield config
    finally:
        local.stop()


@pytest.fixture
def make_overrides(tmp_path: Path, broker_ports: tuple[int, int]) -> Iterator[Callable[..., list[str]]]:
    """Overrides for one test: its own data root (checkpoints, outputs), the session's broker. Drivers
    still running on that data root when the test ends are killed (spark-submit runs in a session of
    its own, so killing the supervisor's process group does not reach them)."""

    def build(*extra: str) -> list[str]:
        return overrides_for(tmp_path / "data", broker_ports, *extra)

    yield build
    kill_processes_of(tmp_path / "data")


def kill_processes_of(data_root: Path) -> int:
    """SIGKILL every process whose command line or environment names the data root; returns how many."""
    import os
    import signal

    marker = str(data_root).encode()
    killed = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            seen = (entry / "cmdline").read_bytes() + (entry / "environ").read_bytes()
        except OSError:
            continue  # gone, or not ours
        if marker in seen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(entry.name), signal.SIGKILL)
                killed += 1
    return killed


@pytest.fixture(scope="session")
def object_store(session_root: Path):
    """An S3-compatible server (moto) on 127.0.0.1 for the whole session."""
    from stream_pipelines.devtools.object_store import ObjectStoreServer

    with ObjectStoreServer(session_root / "object-store") as server:
        yield server


@pytest.fixture
def s3_root(object_store, monkeypatch: pytest.MonkeyPatch) -> Callable[[], list[str]]:
    """Overrides that put a test's data root in a bucket of its own on the loopback object store (the
    credentials go into the environment, the only place the project reads them from)."""
    import os
    import uuid

    from stream_pipelines.devtools.object_store import CREDENTIALS

    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    bucket = object_store.create_bucket(f"test-{uuid.uuid4().hex[:12]}")
    assert os.environ["AWS_ACCESS_KEY_ID"] == CREDENTIALS["AWS_ACCESS_KEY_ID"]
    return lambda: [f"paths.data_root={bucket}/pipeline", *object_store.settings()]


@pytest.fixture(scope="session")
def hdfs(session_root: Path):
    """A real HDFS (NameNode + two DataNodes, ``devtools.hdfs.LocalHdfs``) on 127.0.0.1 for the whole
    session."""
    from stream_pipelines.devtools.hdfs import LocalHdfs

    with LocalHdfs(session_root / "hdfs") as cluster:
        yield cluster


@pytest.fixture(scope="session")
def yarn(session_root: Path, hdfs):
    """A real YARN (ResourceManager + NodeManager, ``devtools.yarn.LocalYarn``) on 127.0.0.1 over the
    session's HDFS, for the whole session. Its teardown stops the NodeManager, which ends its containers."""
    from stream_pipelines.devtools.yarn import LocalYarn

    cluster = LocalYarn(home=session_root / "yarn", hdfs=hdfs, memory_mb=8192).start()
    try:
        yield cluster
    finally:
        cluster.stop(with_hdfs=False)


def run(command: list[str], **options) -> subprocess.CompletedProcess:
    """A command that must succeed (its stderr's end in the failure)."""
    result = subprocess.run(command, capture_output=True, **{"text": True, "timeout": 600, **options})
    assert result.returncode == 0, f"{command[:3]} exited {result.returncode}:\n{result.stderr[-3000:]!r}"
    return result


def outside_environment(**settings: str) -> dict[str, str]:
    """This process's environment without what would point a command at the checkout or its venv."""
    return {
        **{
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("PYTHONPATH", "PIPELINE_", "VIRTUAL_ENV", "PYSPARK_", "SPARK_HOME"))
        },
        **settings,
    }


@dataclass(frozen=True)
class InstalledSite:
    """The package as a platform team installs it: the wheel of the committed files (git archive HEAD) in
    a new virtualenv outside the checkout (the lock as constraints), with the conf dir its own
    `pipelinectl init-conf` wrote (named conf, so the starter's relative paths land beside it)."""

    venv: Path
    conf_dir: Path

    def command(self, name: str) -> str:
        return str(self.venv / "bin" / name)

    def environment(self, **settings: str) -> dict[str, str]:
        """Nothing of the checkout's: its conf dir, and the JVM artifacts `make setup` resolved (jars)."""
        return outside_environment(
            PIPELINE_CONF_DIR=str(self.conf_dir), **{jvm.CACHE_VARIABLE: str(jvm.cache_root())}, **settings
        )


@pytest.fixture(scope="session")
def installed_site(tmp_path_factory: pytest.TempPathFactory) -> InstalledSite:
    """Built once per session (about a minute): the installed-package tests and the YARN test use it."""
    uv = str(Path(sys.executable).parent / "uv")
    root = tmp_path_factory.mktemp("second-site")
    source = root / "source"
    source.mkdir()
    archive = run(["git", "-C", str(PROJECT_ROOT), "archive", "--format=tar", "HEAD"], text=False)
    subprocess.run(["tar", "-x", "-C", str(source)], input=archive.stdout, check=True)
    run([uv, "build", "--wheel", "--out-dir", str(root / "dist"), str(source)])
    [wheel] = (root / "dist").glob("stream_pipelines-*.whl")
    venv = root / "site"
    run([uv, "venv", "--quiet", "--python", "python3.11", str(venv)])
    python = str(venv / "bin" / "python")
    constraints = str(PROJECT_ROOT / "requirements.lock")
    run([uv, "pip", "install", "--quiet", "--python", python, str(wheel), "--constraint", constraints])
    conf_dir = root / "deployment" / "conf"
    written = run(
        [str(venv / "bin" / "pipelinectl"), "init-conf", str(conf_dir)], cwd=root, env=outside_environment()
    )
    assert f"PIPELINE_CONF_DIR={conf_dir}" in written.stdout and "no such file" not in written.stdout
    assert sorted(path.name for path in conf_dir.iterdir()) == sorted(
        path.name for path in (PROJECT_ROOT / "conf").iterdir()
    )
    return InstalledSite(venv, conf_dir)


@dataclass(frozen=True)
class PackedOnStore:
    """``pipelinectl pack-env``'s two archives, built once per session and uploaded to the session's HDFS."""

    python_environment: str  # its URL on HDFS
    spark_jars_archive: str
    local_folder: Path  # where the command built them

    def settings(self) -> list[str]:
        return [
            f"yarn.python_environment={self.python_environment}",
            f"yarn.spark_jars_archive={self.spark_jars_archive}",
        ]


@pytest.fixture(scope="session")
def packed_on_store(session_root: Path, hdfs, installed_site: InstalledSite) -> Iterator[PackedOnStore]:
    """The installed package's own command, as a deployment runs it once per version (one to two minutes:
    it reads and compresses about 900 MB); its local copies (650 MB) are removed after the session."""
    folder = session_root / "packs"
    done = run(
        [installed_site.command("pipelinectl"), "pack-env", "--out", hdfs.url("apps/stream-pipelines")],
        cwd=session_root,
        env=installed_site.environment(PIPELINE_PACK_CACHE=str(folder)),
        timeout=900,
    )
    config_lines = [line.strip() for line in done.stdout.splitlines() if line.startswith("  ")]
    said = dict(line.split(": ", 1) for line in config_lines if ": " in line)
    yield PackedOnStore(said["python_environment"], said["spark_jars_archive"], folder)
    shutil.rmtree(folder, ignore_errors=True)


def yarn_overrides(yarn, data_root: str) -> list[str]:
    """A config whose drivers run in ``yarn``'s containers (cluster mode), its data under ``data_root``."""
    return yarn.pipeline_settings(data_root)


@pytest.fixture
def hdfs_root(hdfs) -> Iterator[str]:
    """``hdfs://127.0.0.1:<port>/test-<id>``: this test's own folder on the session's HDFS, removed after."""
    import uuid

    from stream_pipelines.core import store

    url = hdfs.url(f"test-{uuid.uuid4().hex[:12]}")
    yield url
    store.remove_tree(store.location(None, url))


@pytest.fixture(scope="session")
def spark(session_root: Path, broker_ports: tuple[int, int]):
    from stream_pipelines.driver.runtime import get_spark

    session = get_spark(config_for(session_root / "spark-root", broker_ports), "tests")
    yield session
    session.stop()


def create_topic(config: PipelineConfig, name: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(config.kafka_client_config())
    admin.create_topics([NewTopic(name, num_partitions=partitions)])[name].result(30)


def produce(
    config: PipelineConfig, topic: str, messages: list[tuple[str | None, bytes]], partition: int | None = None
):
    from confluent_kafka import Producer

    producer = Producer({**config.kafka_client_config(), "linger.ms": 5})
    for key, value in messages:
        kwargs = {"partition": partition} if partition is not None else {}
        producer.produce(topic, key=key, value=value, **kwargs)
    assert producer.flush(30) == 0


def run_app(app: str, trigger: str, overrides: list[str], **popen) -> subprocess.Popen:
    """Launch an app exactly as the front door does (spark-submit), in its own process group."""
    from stream_pipelines.launching.submit import spark_submit_command, submit_environment

    command = spark_submit_command(load_config("local", overrides), declared_app(app), trigger, overrides)
    return subprocess.Popen(command, env=submit_environment(), start_new_session=True, **popen)


def drain_through_spark_submit(apps: list[str], overrides: list[str], log: Path) -> None:
    """Each app drained with available-now through spark-submit, as the front door runs it; its output
    goes to ``log``, which a failure names."""
    with log.open("ab") as output:
        for app in apps:
            driver = run_app(app, "available-now", overrides, stdout=output, stderr=subprocess.STDOUT)
            assert driver.wait(600) == 0, f"{app} failed; see {log}"


def run_then_reconcile(apps: list[str], overrides: list[str], day, log: Path) -> None:
    """Each app drained with available-now through spark-submit, then the nightly job for ``day``, as the
    front door runs them; their output goes to ``log``, which a failure names."""
    from stream_pipelines.launching.submit import reconcile_submit_command, submit_environment

    config = load_config("local", overrides)
    drain_through_spark_submit(apps, overrides, log)
    with log.open("ab") as output:
        job = subprocess.run(
            reconcile_submit_command(config, day, overrides),
            env=submit_environment(config=config),
            stdout=output,
            stderr=subprocess.STDOUT,
            timeout=600,
        )
    assert job.returncode == 0, f"the reconciliation failed or found unexplained diffs; see {log}"


def compact_through_spark_submit(config: PipelineConfig, overrides: list[str], log: Path) -> None:
    """The compaction job through spark-submit, as the maintenance DAG runs it; its output goes to
    ``log``, which a failure names."""
    from stream_pipelines.launching.submit import compact_submit_command, submit_environment

    with log.open("ab") as output:
        compacted = subprocess.run(
            compact_submit_command(config, overrides=overrides),
            env=submit_environment(),
            stdout=output,
            stderr=subprocess.STDOUT,
            timeout=600,
        )
    assert compacted.returncode == 0, f"the compaction failed; see {log}"


def committed_rows(config: PipelineConfig, output: str, columns: list[str]) -> list[dict]:
    """Every row of the files a file sink's log lists, read with pyarrow through the file layer (as a
    reader other than Spark would), with the partition values from each file's path."""
    import pyarrow.parquet as pq

    from stream_pipelines.checkpoint.format import sink_files
    from stream_pipelines.core import store

    rows = []
    for url in sink_files(store.location(config.spark.extra_conf, output)):
        partitions = dict(part.split("=", 1) for part in url.split("/") if "=" in part)
        with store.location(config.spark.extra_conf, url).open("rb") as handle:
            rows += [{**partitions, **row} for row in pq.read_table(handle, columns=columns).to_pylist()]
    return rows


def wait_for(condition: Callable[[], bool], timeout_s: float, what: str, poll_s: float = 0.05) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(poll_s)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


def python() -> str:
    return sys.executable


class Replay:
    """Deterministic micro-batches for the files source: one JSON-lines file per batch, per topic."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.files = 0

    def batch(self, topic: str, events: list[dict | str]) -> None:
        import json
        import os

        folder = self.root / topic
        folder.mkdir(parents=True, exist_ok=True)
        self.files += 1
        target = folder / f"batch-{self.files:04d}.jsonl"
        temporary = folder / f".batch-{self.files:04d}.tmp"
        temporary.write_text("".join((e if isinstance(e, str) else json.dumps(e)) + "\n" for e in events))
        # The file source orders by modification time; make the order explicit and strictly rising.
        moment = time.time() + self.files
        os.utime(temporary, (moment, moment))
        temporary.rename(target)


def files_source_overrides(replay_root: Path) -> list[str]:
    return ["source.kind=files", f"source.files_dir={replay_root}", "source.max_files_per_trigger=1"]


def run_in_process(
    spark, config: PipelineConfig, app_module, trigger: str = "available-now", *, batch_log: bool = False
):
    """Run a real app's queries in this process (shared session); returns (exit code, queries). With
    ``batch_log``, the batch log is kept as the app's driver keeps it (what the day states read)."""
    from stream_pipelines.driver.batch_log import BatchLogRecorder
    from stream_pipelines.driver.lifecycle import run_streams

    app = declared_app(app_module.APP)
    recorder = BatchLogRecorder(config, app.name) if batch_log else None
    queries: list = []

    def started(running: list) -> None:
        queries.extend(running)
        if recorder is not None:
            recorder.start(running)

    try:
        ended = run_streams(config, app, app_module.build_sinks(spark, config), trigger, on_started=started)
    finally:
        if recorder is not None:
            recorder.stop()
    return ended.code, {query.name.split(".", 1)[1]: query for query in queries}


def committed_batches_of_files(output: Path) -> dict[str, int]:
    """File name -> the micro-batch that committed it, from the file sink's log."""
    import json

    owners: dict[str, int] = {}
    for entry in sorted((output / "_spark_metadata").glob("[0-9]*")):
        for line in entry.read_text().splitlines()[1:]:
            owners[Path(json.loads(line)["path"]).name] = int(entry.name.split(".")[0])
    return owners


def batch_watermarks(checkpoint: Path) -> dict[int, int]:
    """Batch id -> the watermark (epoch ms) in effect for it, from the checkpoint's offset log."""
    import json

    marks = {}
    for entry in (checkpoint / "offsets").glob("[0-9]*"):
        marks[int(entry.name)] = json.loads(entry.read_text().splitlines()[1])["batchWatermarkMs"]
    return marks


@pytest.fixture(scope="session")
def metadata_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalPostgres]:
    """The session's PostgreSQL on 127.0.0.1, for the tests that run Airflow's servers (each on a
    database of its own: ``metadata_database``)."""
    server = LocalPostgres(tmp_path_factory.mktemp("postgres")).start()
    yield server
    server.remove()


@pytest.fixture
def metadata_database(metadata_server: LocalPostgres) -> MetadataDatabase:
    """A new, empty Airflow metadata database on the session's PostgreSQL."""
    return metadata_server.new_database(f"airflow_{uuid.uuid4().hex[:12]}")


@pytest.fixture(scope="session")
def airflow_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A real Airflow home (SQLite, migrated once per session) for DagBag and dag.test() runs."""
    from stream_pipelines.devtools.stack import migrate_airflow_db

    home = tmp_path_factory.mktemp("airflow-home")
    environment = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(PROJECT_ROOT / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
        "PYTHONPATH": str(PROJECT_ROOT),
    }
    failure = migrate_airflow_db(environment)
    assert failure is None, failure
    return environment


def pipeline_environment(overrides: list[str]) -> dict[str, str]:
    """--set overrides as PIPELINE__ environment variables, the way a deployment configures Airflow."""
    return override_variables(overrides)


def start_dag_test(
    airflow_env: dict[str, str],
    dag_id: str,
    overrides: list[str],
    log: Path,
    secrets: dict[str, str] | None = None,
    site: InstalledSite | None = None,
) -> subprocess.Popen:
    """dag.test() of a real DAG, in its own process (as `airflow dags test` would); ``secrets`` are the
    variables the config reads them from. From the checkout's dags/, or with ``site`` from the DAG files
    the installed `pipelinectl airflow-dags` writes, run by the installed Python with nothing of the
    checkout's (the log's last line lists any module loaded from it)."""
    environment = {**airflow_env, **pipeline_environment(overrides), **(secrets or {})}
    python, cwd = sys.executable, None
    if site is not None:
        dags_folder = log.parent / "site-dags"
        run([site.command("pipelinectl"), "airflow-dags", str(dags_folder)], env=site.environment())
        outside = {key: value for key, value in environment.items() if key not in os.environ}
        environment = {**site.environment(), **outside, "AIRFLOW__CORE__DAGS_FOLDER": str(dags_folder)}
        environment.pop("PYTHONPATH", None)
        python, cwd = site.command("python"), log.parent
    script = (
        "import sys\n"
        "from airflow.dag_processing.dagbag import DagBag\n"
        f"dag = DagBag({environment['AIRFLOW__CORE__DAGS_FOLDER']!r}).get_dag({dag_id!r})\n"
        "run = dag.test()\n"
        "print('DAG RUN STATE', run.state, flush=True)\n"
        "files = [getattr(module, '__file__', None) or '' for module in list(sys.modules.values())]\n"
        f"print('MODULES FROM THE CHECKOUT', [f for f in files if f.startswith({str(PROJECT_ROOT)!r})])\n"
    )
    handle = log.open("w")
    return subprocess.Popen(
        [python, "-c", script],
        env=environment,
        cwd=cwd,
        stdout=handle,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
