"""`make demo`: the whole pipeline on the embedded local default, under Airflow, with a summary.

Scenario: a fresh broker; 20 minutes of sensor and ad events ending now, with late (inside and
beyond the watermark), duplicate, bursty and malformed records; the three supervisor DAGs run by real
Airflow (`dag.test()`, one process each) launching the apps with spark-submit; sensor_aggregation is
killed with kill -9 mid-stream and Airflow restarts it from its checkpoint; once every app has caught
up, each is stopped gracefully through the same control path the UI uses. Then it prints what
happened and where the outputs are.

It runs in its own data root (data/demo) against its own ports, so it never disturbs a `make up`
stack, and starts from scratch each time so that its numbers are reproducible.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from stream_pipelines.checkpoint.format import batch_ids, kafka_offsets, read_offsets
from stream_pipelines.core import registry, store
from stream_pipelines.core.config import PROJECT_ROOT, PipelineConfig, load_config, override_variables
from stream_pipelines.core.registry import APP_NAMES, APPS
from stream_pipelines.devtools import hdfs, yarn
from stream_pipelines.devtools.processes import processes_started_with, stop_processes
from stream_pipelines.devtools.stack import migrate_airflow_db

DEMO_ROOT = PROJECT_ROOT / "data" / "demo"
DEMO_OVERRIDES = (
    f"paths.local_root={DEMO_ROOT}",
    "broker.port=9192",
    "broker.controller_port=9193",
    "kafka.bootstrap_servers=127.0.0.1:9192",
    "kafka.max_offsets_per_trigger=3000",
    "archive.trigger=2 seconds",
    "sensors.trigger=2 seconds",
    "ads.trigger=2 seconds",
    "supervision.retry_delay=2 seconds",
    "supervision.max_retry_delay=10 seconds",
    "metrics.ports={raw_archive: 9491, sensor_aggregation: 9492, ad_matching: 9493}",
)
# Under a config whose HDFS the demo starts itself (conf/hdfs.yaml), its private one answers here, so that
# a `make up` stack's HDFS on the config's own port is left alone.
DEMO_NAMENODE = "hdfs://127.0.0.1:9820"
# And under a config whose YARN it starts (conf/yarn.yaml), its private ResourceManager answers here.
DEMO_RESOURCEMANAGER = "http://127.0.0.1:9288"
KILLED_APP = "sensor_aggregation"
# Where the demo's native output goes: its own Spark JVM's start-up lines and the Kafka clients' log.
NATIVE_LOG = DEMO_ROOT / "spark-and-kafka-clients.log"
PROGRESS_EVERY_S = 5.0


def say(message: str) -> None:
    print(f"\n==> {message}", flush=True)


def wait_for(
    condition: Callable[[], bool], timeout_s: float, what: str, progress: Callable[[], None] | None = None
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        if progress is not None:
            progress()
        time.sleep(0.2)
    raise SystemExit(f"demo: timed out after {timeout_s:.0f}s waiting for {what}; logs are in {DEMO_ROOT}")


def demo_overrides(selected: PipelineConfig) -> list[str]:
    """The demo's settings over the selected config (``PIPELINE_ENV``): its own ports and host-local root;
    its data root on the local disk, or, under a config that starts its own HDFS, on a private one."""
    if selected.hdfs.manage_local:
        private_hdfs = [*DEMO_OVERRIDES, f"spark.extra_conf.spark.hadoop.fs.defaultFS={DEMO_NAMENODE}"]
        if selected.yarn.manage_local:
            return [*private_hdfs, f"yarn.resourcemanager_url={DEMO_RESOURCEMANAGER}"]
        return private_hdfs
    if "://" in selected.project_path(selected.paths.data_root):
        raise SystemExit(
            f"demo: runs on the local default or on conf/hdfs.yaml (an HDFS it starts itself), not on "
            f"{selected.env}'s data root {selected.paths.data_root}, which it would have to empty"
        )
    return [*DEMO_OVERRIDES, f"paths.data_root={DEMO_ROOT}"]


def main(argv: Sequence[str] | None = None) -> int:
    overrides = [*demo_overrides(load_config()), *(argv or [])]
    config = load_config(None, overrides)

    from stream_pipelines.devtools.broker import LocalBroker

    broker = LocalBroker(config)
    _stop_a_previous_run()
    broker.stop()
    if config.yarn.manage_local:
        yarn.stop_for(config)
    if config.hdfs.manage_local:
        hdfs.stop_for(config)
    shutil.rmtree(DEMO_ROOT, ignore_errors=True)
    with native_output_to(NATIVE_LOG):
        return _run(config, overrides, broker)


def _stop_a_previous_run() -> None:
    """An interrupted demo leaves its drivers running (spark-submit runs detached from its task); one
    that lived on would hold its app's lease in the next run. Everything a demo starts carries its root."""
    left = stop_processes(processes_started_with("PIPELINE__PATHS__LOCAL_ROOT", str(DEMO_ROOT)))
    if left:
        say(f"stopped {left} process(es) an interrupted demo left running")


def _run(config: PipelineConfig, overrides: Sequence[str], broker) -> int:
    from stream_pipelines.devtools import generator
    from stream_pipelines.kafka.topics import ensure_topics

    say(
        f"a fresh Kafka broker (KRaft, Maven Central jars) on {broker.bootstrap}; "
        f"data in {config.project_path(config.paths.data_root)}"
    )
    print(f"    Spark's and the Kafka clients' own output: {NATIVE_LOG}")
    broker.start()
    supervisors: dict[str, subprocess.Popen] = {}
    try:
        if config.hdfs.manage_local:
            say("a fresh single-node HDFS on 127.0.0.1 for the data root (the lab's layout)")
            print(f"    {hdfs.start_for(config)}")
        if config.yarn.manage_local:
            say("a fresh YARN (ResourceManager + NodeManager) on 127.0.0.1: each app's driver in a container")
            print(f"    {yarn.start_for(config)}")
        ensure_topics(config)
        start = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=20)
        spec = generator.ScenarioSpec(
            seed=42,
            start=start,
            duration_s=1200,
            sensor_rate=15,
            ad_rate=8,
            mix=generator.DelayMix(burst_share=0.1),
            match_interval_s=config.ads.match_interval.seconds,
        )
        records = generator.generate(spec)
        generator.produce_to_kafka(records, config.kafka_client_config())
        summary = generator.summarize(records)
        say(f"produced {len(records)} events (20 minutes of event time ending now, seed {spec.seed})")
        for name, count in sorted(summary.items()):
            if name.startswith("kind:"):
                print(f"    {name[5:]:<28} {count:>7}")

        airflow_env = _airflow_environment(overrides)
        say("Airflow: migrating a SQLite metadata DB, then running the three supervisor DAGs (dag.test)")
        failure = migrate_airflow_db(airflow_env)
        if failure:
            raise SystemExit(f"demo: `airflow db migrate` failed:\n{failure}")
        # Written once here: three dag.test() processes registering the same DAG file at once race on
        # the dag table's primary key, and the loser's run dies before it starts its app.
        subprocess.run(
            [str(Path(sys.executable).parent / "airflow"), "dags", "reserialize"],
            env=airflow_env,
            check=True,
            capture_output=True,
        )
        for app in APP_NAMES:
            supervisors[app] = _start_supervisor(app, airflow_env)
        progress = ProgressLine(config)
        restart_seconds = _kill_and_measure_restart(config, supervisors, progress)
        say("waiting for every app to catch up with the topics")
        wait_for(
            supervised(supervisors, lambda: _caught_up(config, records)),
            900,
            "the apps to catch up",
            progress,
        )
        time.sleep(3)  # one more trigger, so the last watermark closes what it can
        metrics = {app: _scrape(config, app) for app in APP_NAMES}

        say("stopping the apps gracefully (pipeline_control action=stop): drain, commit, exit 0")
        from stream_pipelines.control.control_store import apply_action

        for app in APP_NAMES:
            apply_action(config, APPS[app], "stop", by="demo", reason="end of the demo")
        for app, process in supervisors.items():
            process.wait(300)
            print(f"    {app}: supervisor run {_dag_state(app)}")
        _report(config, records, metrics, restart_seconds)
    finally:
        for process in supervisors.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
        broker.stop()
        if config.yarn.manage_local:
            yarn.stop_for(config)
        if config.hdfs.manage_local:
            hdfs.stop_for(config)
    return 0


def _airflow_environment(overrides: Sequence[str]) -> dict[str, str]:
    environment = {
        **os.environ,
        "AIRFLOW_HOME": str(DEMO_ROOT / "airflow"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(PROJECT_ROOT / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    environment.update(override_variables(overrides))
    return environment


def _start_supervisor(app: str, environment: dict[str, str]) -> subprocess.Popen:
    script = (
        "from airflow.dag_processing.dagbag import DagBag\n"
        f"run = DagBag({str(PROJECT_ROOT / 'dags')!r}).get_dag('supervise_{app}').test()\n"
        "print('DAG RUN STATE', run.state, flush=True)\n"
    )
    log = (DEMO_ROOT / f"supervise_{app}.log").open("w")
    print(f"    supervise_{app}: log in {DEMO_ROOT / f'supervise_{app}.log'}")
    return subprocess.Popen(
        [sys.executable, "-c", script],
        env=environment,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


@contextlib.contextmanager
def native_output_to(log_path: Path) -> Iterator[None]:
    """Writes to file descriptors 1 and 2 from native code and child processes (the demo's Spark JVM
    start-up lines, librdkafka's log) go to ``log_path``; Python's own prints still reach the terminal.

    A child inherits the descriptors it starts with, so a JVM started inside keeps writing to the log.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    terminal = {fd: os.dup(fd) for fd in (1, 2)}
    python_streams = sys.stdout, sys.stderr
    sys.stdout = os.fdopen(os.dup(terminal[1]), "w", buffering=1)
    sys.stderr = os.fdopen(os.dup(terminal[2]), "w", buffering=1)
    with log_path.open("ab") as log:
        for fd in (1, 2):
            os.dup2(log.fileno(), fd)
    try:
        yield
    finally:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
            stream.close()
        sys.stdout, sys.stderr = python_streams
        for fd, original in terminal.items():
            os.dup2(original, fd)
            os.close(original)


class ProgressLine:
    """Every few seconds, one line: per app, its last batch, rows, watermark and restarts.

    Read from each app's Prometheus endpoint (its first query, the one the others follow) and from the
    control store's restart counts: the same sources on-call reads.
    """

    def __init__(self, config: PipelineConfig, every_s: float = PROGRESS_EVERY_S) -> None:
        self._config = config
        self._every_s = every_s
        self._started = time.monotonic()
        self._next_at = self._started

    def __call__(self) -> None:
        now = time.monotonic()
        if now < self._next_at:
            return
        self._next_at = now + self._every_s
        parts = [self.describe(app) for app in APP_NAMES]
        print(f"    [{now - self._started:4.0f}s] " + " | ".join(parts), flush=True)

    def describe(self, app: str) -> str:
        from stream_pipelines.control.control_store import ControlStore, app_status

        restarts = ControlStore(self._config).restarts(app).total
        samples = query_samples(self._config, app, APPS[app].query_names[0])
        if not samples or "pipeline_batch_id" not in samples:
            return f"{app} {app_status(self._config, app).state}, restarts {restarts}"
        parts = [app, f"batch {samples['pipeline_batch_id']:.0f}"]
        parts.append(f"rows {samples.get('pipeline_input_rows_total', 0.0):.0f}")
        if "pipeline_watermark_delay_seconds" in samples:
            watermark = samples.get("pipeline_watermark_seconds")
            parts.append(
                "watermark "
                + (datetime.fromtimestamp(watermark, UTC).strftime("%H:%M:%S") if watermark else "none")
            )
        return " ".join(parts) + f", restarts {restarts}"


def query_samples(config: PipelineConfig, app: str, query: str) -> dict[str, float] | None:
    """One query's samples (not those per partition) from the app's endpoint; None when it does not answer."""
    from stream_pipelines.airflow import health

    try:
        text = health.http_get(health.metrics_url(config, APPS[app])).decode()
    except health.SourceUnreachable:
        return None
    return {
        sample.name: sample.value
        for sample in health.parse_exposition(text)
        if sample.labels.get("query") == registry.spark_query_name(app, query)
        and "partition" not in sample.labels
    }


def _committed(config: PipelineConfig, app: str, query: str) -> list[int]:
    return batch_ids(store.location(config.spark.extra_conf, config.checkpoint_dir(app, query)) / "commits")


def supervised(supervisors: dict[str, subprocess.Popen], condition: Callable[[], bool]) -> Callable[[], bool]:
    """``condition``, but a supervisor that has ended stops the demo at once, naming its log."""

    def check() -> bool:
        for app, process in supervisors.items():
            if process.poll() is not None:
                raise SystemExit(
                    f"demo: the supervisor of {app} ended early (exit {process.returncode}); "
                    f"see {DEMO_ROOT / f'supervise_{app}.log'}"
                )
        return condition()

    return check


def _kill_and_measure_restart(
    config: PipelineConfig, supervisors: dict[str, subprocess.Popen], progress: Callable[[], None]
) -> float:
    from stream_pipelines.control.control_store import ControlStore

    store = ControlStore(config)
    say(f"the apps start under Airflow; a progress line every {PROGRESS_EVERY_S:.0f}s")
    wait_for(
        supervised(supervisors, lambda: len(_committed(config, KILLED_APP, "tumbling")) >= 3),
        600,
        f"{KILLED_APP} to commit batches",
        progress,
    )
    pid = store.running_pids(KILLED_APP)[0]
    last = _committed(config, KILLED_APP, "tumbling")[-1]
    say(f"kill -9 {KILLED_APP}'s driver (pid {pid}) after batch {last}")
    killed_at = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    wait_for(
        supervised(supervisors, lambda: _committed(config, KILLED_APP, "tumbling")[-1] > last + 1),
        600,
        f"Airflow to restart {KILLED_APP}",
        progress,
    )
    seconds = time.monotonic() - killed_at
    print(f"    Airflow restarted it from its checkpoint; next committed batch {seconds:.0f}s after the kill")
    return seconds


def _caught_up(config: PipelineConfig, records: list) -> bool:
    return caught_up(config)


def topic_ends(config: PipelineConfig) -> dict[tuple[str, str], int]:
    """(topic, partition as text) -> the next offset to be written, for every input topic."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**config.kafka_client_config(), "group.id": "demo-progress"})
    try:
        ends = {}
        for topic in config.kafka.topics.inputs():
            for partition in range(topic.partitions):
                ends[(topic.name, str(partition))] = consumer.get_watermark_offsets(
                    TopicPartition(topic.name, partition), timeout=10
                )[1]
    finally:
        consumer.close()
    return ends


def caught_up(config: PipelineConfig, apps: Sequence[str] = APP_NAMES) -> bool:
    """Whether every query of those apps has committed a batch that reaches the end of its topics."""
    ends = topic_ends(config)
    for app in (APPS[name] for name in apps):
        topics = app.source_topic_names(config)
        for query in app.query_names:
            commits = _committed(config, app.name, query)
            if not commits:
                return False
            checkpoint = store.location(config.spark.extra_conf, config.checkpoint_dir(app.name, query))
            entry = read_offsets(checkpoint / "offsets" / str(commits[-1]))
            done = {
                (topic, str(partition)): offset
                for topic, partitions in kafka_offsets(entry.sources).items()
                for partition, offset in partitions.items()
            }
            if any(done.get(key, -1) < end for key, end in ends.items() if key[0] in topics):
                return False
    return True


def produced_offsets(config: PipelineConfig, timeout_s: float = 120) -> dict[tuple[str, int], list[int]]:
    """Every offset that holds a record in the input topics, read back from the broker."""
    from confluent_kafka import Consumer, TopicPartition

    ends = {key: end for key, end in topic_ends(config).items() if end > 0}
    consumer = Consumer(
        {**config.kafka_client_config(), "group.id": "demo-verify", "enable.auto.commit": False}
    )
    found: dict[tuple[str, int], list[int]] = {(topic, int(p)): [] for topic, p in ends}
    try:
        consumer.assign([TopicPartition(topic, int(p), 0) for topic, p in ends])
        pending = {(topic, int(p)): end for (topic, p), end in ends.items()}
        deadline = time.monotonic() + timeout_s
        while pending and time.monotonic() < deadline:
            for message in consumer.consume(1000, timeout=1):
                if message.error():
                    continue
                key = (message.topic(), message.partition())
                found[key].append(message.offset())
                if message.offset() >= pending.get(key, 0) - 1:
                    pending.pop(key, None)
        if pending:
            raise RuntimeError(
                f"could not read the topics back to their ends within {timeout_s:.0f}s: {pending}"
            )
    finally:
        consumer.close()
    return found


@dataclass(frozen=True)
class ArchiveCheck:
    """The archive against what the topics hold: every offset exactly once, no gap."""

    produced: int
    archived: int
    lost: list[tuple[str, int, int]]
    duplicated: list[tuple[str, int, int, int]]
    unexpected: list[tuple[str, int, int]]

    @property
    def exactly_once(self) -> bool:
        return not (self.lost or self.duplicated or self.unexpected)

    def describe(self) -> str:
        verdict = "exactly once, no gap" if self.exactly_once else "MISMATCH"
        return (
            f"produced {self.produced}, archived {self.archived} rows: {len(self.lost)} lost, "
            f"{len(self.duplicated)} duplicated, {len(self.unexpected)} not in the topics ({verdict})"
        )


def check_archive(spark, config: PipelineConfig, produced: dict[tuple[str, int], list[int]]) -> ArchiveCheck:
    """Each produced (topic, partition, offset) in the archive exactly once, and nothing else in it."""
    from pyspark.sql import functions as F

    archive = spark.read.parquet(registry.ARCHIVE.location(config))
    counts = {
        (row["topic"], row["partition"], row["offset"]): row["n"]
        for row in archive.groupBy("topic", "partition", "offset").agg(F.count("*").alias("n")).collect()
    }
    expected = {
        (topic, partition, offset) for (topic, partition), offsets in produced.items() for offset in offsets
    }
    return ArchiveCheck(
        produced=len(expected),
        archived=sum(counts.values()),
        lost=sorted(expected - counts.keys()),
        duplicated=sorted((*key, n) for key, n in counts.items() if n > 1),
        unexpected=sorted(counts.keys() - expected),
    )


def _scrape(config: PipelineConfig, app: str) -> dict[str, float]:
    """The app's own Prometheus endpoint, summed over label sets per metric name (the watermark lag kept
    per query, as a maximum is what matters there)."""
    from stream_pipelines.airflow import health

    totals: dict[str, float] = {}
    try:
        text = health.http_get(health.metrics_url(config, APPS[app]), timeout_s=5).decode()
    except health.SourceUnreachable:
        return totals
    for sample in health.parse_exposition(text):
        if not sample.name.startswith("pipeline_"):
            continue
        key = sample.name
        if key == "pipeline_watermark_lag_seconds":
            key = f"{key}{{query={sample.labels.get('query')}}}"
        totals[key] = totals.get(key, 0.0) + sample.value
    return totals


def _dag_state(app: str) -> str:
    log = (DEMO_ROOT / f"supervise_{app}.log").read_text(errors="replace")
    match = re.search(r"DAG RUN STATE (\w+)", log)
    return match.group(1) if match else "(no final state logged)"


def _report(
    config: PipelineConfig, records: list, metrics: dict[str, dict[str, float]], restart_s: float
) -> None:
    from stream_pipelines.driver.runtime import get_spark

    spark = get_spark(config, "demo-report")
    spark.sparkContext.setLogLevel("ERROR")
    by_topic: dict[str, int] = {}
    for record in records:
        by_topic[record.topic] = by_topic.get(record.topic, 0) + 1
    topics = config.kafka.topics

    def rows(path: str) -> int:
        try:
            return spark.read.parquet(path).count()
        except Exception:
            return 0

    say("what happened")
    archived = check_archive(spark, config, produced_offsets(config))
    print(f"    raw_archive         in {len(records):>7}   {archived.describe()}")
    print(
        f"    sensor_aggregation  in {by_topic.get(topics.sensors.name, 0):>7}   "
        f"tumbling windows {rows(registry.SENSOR_WINDOWS.location(config)):>5}   "
        f"quarantined {rows(registry.SENSOR_QUARANTINE.location(config)):>4}"
    )
    ad_events = by_topic.get(topics.impressions.name, 0) + by_topic.get(topics.clicks.name, 0)
    print(
        f"    ad_matching         in {ad_events:>7}   "
        f"matches {rows(registry.AD_MATCHES.location(config)):>5}   "
        f"CTR rows {rows(registry.AD_CTR.location(config)):>4}   "
        f"quarantined {rows(registry.AD_QUARANTINE.location(config)):>4}"
    )
    late_within = sum(r.kind == "late_within" for r in records)
    late_beyond = sum(r.kind == "late_beyond" for r in records)
    print(f"    late events sent: {late_within} inside the watermark, {late_beyond} beyond it")
    for app in ("sensor_aggregation", "ad_matching"):
        values = metrics.get(app, {})
        lags = [v for k, v in values.items() if k.startswith("pipeline_watermark_lag_seconds")]
        dropped = values.get("pipeline_late_rows_dropped_total", 0)
        print(
            f"    {app}: since its last start: rows dropped by the watermark {dropped:.0f}, "
            f"quarantined {values.get('pipeline_quarantined_rows_total', 0):.0f}, "
            f"watermark lag now {max(lags) if lags else float('nan'):.0f}s "
            f"(from its Prometheus endpoint)"
        )
    say("restarts and resume points (from the supervisor task logs)")
    print(f"    {KILLED_APP}: killed with -9; next committed batch {restart_s:.0f}s after the kill")
    for app in APP_NAMES:
        log = (DEMO_ROOT / f"supervise_{app}.log").read_text(errors="replace")
        restarts = re.findall(r"reason='([^']*from its checkpoint[^']*)'", log)
        resume_points = list(
            dict.fromkeys(
                re.findall(r"(\S+): \S+\n\s+query id [^\n]*\n\s+(last committed batch \d+ \([^)]*\))", log)
            )
        )
        for reason in dict.fromkeys(restarts):
            print(f"    {app}: {reason}")
        for query, point in resume_points:
            print(f"    {query}: resumed after {point}")
    reconciled = _reconcile(config, spark, records)
    say("where the outputs are")
    sinks = [query.sink for app in APPS.values() for query in app.queries if query.sink is not None]
    for label, path in (
        *((dataset.name, dataset.location(config)) for dataset in sinks),
        ("checkpoints", config.data_path("checkpoints")),
        ("supervisor logs", str(DEMO_ROOT)),
    ):
        print(f"    {label:<30} {path}")
    print(
        f"    {'live averages':<30} Kafka topic {topics.sliding_averages.name} "
        f"on {config.kafka.bootstrap_servers}"
    )
    if reconciled is not None:
        print(f"    {'reconciliation':<30} {reconciled.report_html}")
    print(f"    {'pipeline page (Airflow UI)':<30} {_pipeline_page()}")
    spark.stop()
    if reconciled is not None and reconciled.unexplained:
        raise SystemExit("demo: the reconciliation found unexplained differences (see the report above)")


def _pipeline_page() -> str:
    """The page's address when the `make up` stack runs; otherwise how to get it (the demo has no UI)."""
    from stream_pipelines.devtools import stack

    if stack.airflow_api_server_running(load_config()):
        return stack.pipeline_page()
    return f"{stack.pipeline_page()} once `make up` runs the stack"


def _reconcile(config: PipelineConfig, spark, records: list):
    """The nightly job over the demo's event day(s), without Airflow, and its summary."""
    days = sorted({r.event_time.date() for r in records if r.event_time is not None})
    return reconcile_day(config, spark, days[-1])


def reconcile_day(config: PipelineConfig, spark, day):
    """The nightly job over one event day, without Airflow: the exact recompute from the archive against
    the streams' outputs, with the batch log explaining differences. Prints a summary, returns the result."""
    from stream_pipelines.reconciliation.job import progress_printer, run_reconciliation

    say(f"nightly reconciliation over event day {day} (exact recompute from the raw archive)")
    result = run_reconciliation(
        config, day, spark=spark, fail_on_unexplained=False, progress=progress_printer()
    )
    verdicts: dict[str, int] = {}
    for diff in [*result.diffs, *result.match_diffs]:
        verdicts[diff.verdict] = verdicts.get(diff.verdict, 0) + 1
    print(f"    status {result.status}; windows compared: {result.window_counts}")
    print(f"    diffs by verdict: {verdicts or 'none'}; late events in the ledger: {result.ledger_count}")
    if result.recommended_watermark_s is not None:
        print(
            f"    recommended watermark (p99 delay + margin): {result.recommended_watermark_s:.0f}s "
            f"(configured: {config.sensors.watermark})"
        )
    for what_if in result.what_if:
        print(
            f"    what-if delay {what_if.delay_s / 60:>4.0f} min: {what_if.dropped_share:6.2%} dropped, "
            f"~{what_if.expected_state_rows:.0f} state rows, output after ~{what_if.output_latency_s:.0f}s"
        )
    return result


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
