"""Pieces any benchmark needs: a private broker, robust summaries of repeated timings, machine facts
and a results file. Nothing here knows what is being measured."""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stream_pipelines.core.config import PipelineConfig, load_config
from stream_pipelines.devtools.processes import Proc, descendants, process_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

LOOPBACK = "127.0.0.1"
SPARK_LAUNCHER_CLASS = "org.apache.spark.deploy.SparkSubmit"


class BenchmarkError(RuntimeError):
    """A run did not do what it was meant to (wrong row count, failed query); its numbers mean nothing."""


# --------------------------------------------------------------------------- isolation


def free_ports(count: int) -> list[int]:
    """Distinct free loopback ports. All sockets stay bound until every port is known, so the kernel
    cannot hand out the same port twice; another process may still grab one before the broker binds it."""
    with ExitStack() as stack:
        probes = [stack.enter_context(socket.socket()) for _ in range(count)]
        for probe in probes:
            probe.bind((LOOPBACK, 0))
        return [probe.getsockname()[1] for probe in probes]


def private_overrides(data_root: Path) -> list[str]:
    """Overrides that aim a run at its own data root and a local broker on free loopback ports, so
    nothing it starts can touch a shared broker or the user's data."""
    port, controller = free_ports(2)
    return [
        f"paths.data_root={data_root}",
        "broker.manage_local=true",
        f"broker.port={port}",
        f"broker.controller_port={controller}",
        f"kafka.bootstrap_servers={LOOPBACK}:{port}",
    ]


@contextmanager
def private_broker(
    env: str | None = None,
    overrides: Sequence[str] = (),
    *,
    conf_dir: str | None = None,
    prefix: str = "bench-",
) -> Iterator[PipelineConfig]:
    """A configured KRaft broker with the configured topics, on free ports under a temporary data root.

    Yields the config pointing at it (data root, broker and bootstrap overridden after ``overrides``, so
    nothing can aim the run at a shared broker or the user's data). The broker is stopped and the data
    root deleted on the way out, whether the body finished, raised or was interrupted.
    """
    from stream_pipelines.devtools.broker import LocalBroker
    from stream_pipelines.kafka.topics import ensure_topics

    data_root = Path(tempfile.mkdtemp(prefix=prefix))
    broker: LocalBroker | None = None
    try:
        config = load_config(
            env,
            [
                *overrides,
                *private_overrides(data_root),
                # The env's client properties (SASL, TLS) are for its own cluster, not this plaintext broker.
                "kafka.client_properties={}",
            ],
            conf_dir=conf_dir,
        )
        broker = LocalBroker(config)
        broker.start()
        ensure_topics(config)
        yield config
    finally:
        with signals_ignored():
            try:
                if broker is not None:
                    broker.stop()
            finally:
                shutil.rmtree(data_root, ignore_errors=True)


class Interrupts:
    """Ctrl-C and SIGTERM, acted on at safe points.

    The first signal is only noted; ``check()`` raises KeyboardInterrupt at the next safe point. Raising
    straight from the handler could land inside a py4j call and leave the Spark gateway out of step, so
    the cleanup that follows would fail. A second signal raises at once, for when a step hangs.
    """

    def __init__(self) -> None:
        self.received: str | None = None

    def install(self) -> None:
        """(Re)install the handlers; needed again after creating a SparkContext, which takes SIGINT."""
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, self._on_signal)

    def check(self) -> None:
        if self.received is not None:
            raise KeyboardInterrupt(self.received)

    def _on_signal(self, signum: int, _frame: object) -> None:
        if self.received is not None:
            raise KeyboardInterrupt(self.received)
        self.received = signal.Signals(signum).name
        log(f"{self.received}: stopping at the end of the current step (send it again to stop at once)")

    @contextmanager
    def installed(self) -> Iterator[Interrupts]:
        previous = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
        self.install()
        try:
            yield self
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)


@contextmanager
def signals_ignored() -> Iterator[None]:
    """Let cleanup run to the end: a further Ctrl-C must not leave a broker running without its data."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, signal.SIG_IGN) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


# --------------------------------------------------------------------------- configs and runs


def derive_config(config: PipelineConfig, overrides: Sequence[str]) -> PipelineConfig:
    """``config`` with ``key.path=value`` overrides applied and validated exactly as ``--set`` is.

    For variants of the private broker's config (another state store, watermark or source) without
    repeating how the broker's ports and data root were set.
    """
    # The override parser is the config module's own, so a value means here what it means on --set.
    from stream_pipelines.core.config import _apply_override

    raw = config.model_dump()
    for item in overrides:
        key, _, value = item.partition("=")
        _apply_override(raw, key.strip(), value, origin=f"benchmark override {key.strip()}")
    return PipelineConfig.model_validate({**raw, "conf_dir": config.conf_dir})


@contextmanager
def isolated_run(config: PipelineConfig, name: str) -> Iterator[PipelineConfig]:
    """``config`` with checkpoints, outputs, quarantine and archive in a folder of their own, removed
    on the way out.

    A run needs both halves to start afresh: its own checkpoints, or it resumes an earlier run, and
    its own output folders, because a file sink skips every batch id already in its folder's
    ``_spark_metadata`` log: a second run into the same folder would read its input and do no work.
    """
    root = Path(config.project_path(config.paths.data_root)) / "runs" / name
    try:
        yield derive_config(config, isolated_overrides(name))
    finally:
        shutil.rmtree(root, ignore_errors=True)


def isolated_overrides(name: str) -> list[str]:
    """The ``--set`` overrides that give a run its own checkpoints and outputs (see ``isolated_run``)."""
    return [
        f"paths.{entry}=runs/{name}/{entry}" for entry in ("checkpoints", "outputs", "quarantine", "archive")
    ]


def await_queries(queries: Sequence[StreamingQuery], interrupts: Interrupts, poll_s: float = 0.5) -> None:
    """Wait until every (available-now) query has ended; any that failed raises BenchmarkError.

    Short waits, so that an interrupt is acted on within ``poll_s`` and never inside a py4j call.
    All queries are stopped on the way out, however it is left.
    """
    try:
        while active := [query for query in queries if query.isActive]:
            # A failed query ends the wait at once; the others would only run on for nothing.
            if any(query.exception() is not None for query in queries if query not in active):
                break
            active[0].awaitTermination(poll_s)
            interrupts.check()
    finally:
        for query in queries:
            if query.isActive:
                query.stop()
    for query in queries:
        if query.exception() is not None:
            raise BenchmarkError(f"query {query.name} failed: {query.exception()}")


def batch_progress(query: StreamingQuery) -> list[dict[str, Any]]:
    """Every batch's progress of a finished query, in batch order.

    Raises BenchmarkError when Spark no longer holds some of them: it keeps only the last
    ``spark.sql.streaming.numRecentProgressUpdates`` (100 by default).
    """
    progress = sorted(query.recentProgress, key=lambda update: int(update["batchId"]))
    batch_ids = [int(update["batchId"]) for update in progress]
    if batch_ids != list(range(len(batch_ids))):
        raise BenchmarkError(
            f"query {query.name} kept progress for batches {batch_ids[:3]}..{batch_ids[-3:]} only; "
            "raise spark.sql.streaming.numRecentProgressUpdates"
        )
    return progress


def spark_driver_jvm(table: dict[int, Proc], pids: Sequence[int]) -> int | None:
    """Of these processes, the Java one running Spark's launcher class (pyspark starts its JVM through
    spark-submit); a benchmark's private broker is a Java child of its process too."""
    for pid in pids:
        proc = table.get(pid)
        if proc and proc.argv and Path(proc.argv[0]).name == "java" and SPARK_LAUNCHER_CLASS in proc.argv:
            return pid
    return None


def own_spark_jvm() -> int | None:
    """The JVM PySpark started for this process, or None before the session."""
    return spark_driver_jvm(process_table(), sorted(descendants(os.getpid())))


def own_spark_jvm_or_fail() -> int:
    """The JVM PySpark started for this process; a BenchmarkError when there is none."""
    jvm = own_spark_jvm()
    if jvm is None:
        raise BenchmarkError("found no Spark driver JVM under this process: did the Spark session start?")
    return jvm


# --------------------------------------------------------------------------- summaries


@dataclass(frozen=True)
class Summary:
    median: float
    minimum: float
    maximum: float
    count: int

    @classmethod
    def of(cls, samples: Iterable[float]) -> Summary:
        values = list(samples)
        if not values:
            raise ValueError("no samples to summarize")
        return cls(statistics.median(values), min(values), max(values), len(values))

    def as_dict(self) -> dict[str, float | int]:
        return {"median": self.median, "min": self.minimum, "max": self.maximum, "count": self.count}


# --------------------------------------------------------------------------- machine and results


def kafka_version() -> str:
    """The version of the kafka-clients jar the broker and the Kafka tools run from."""
    from stream_pipelines.launching import jvm

    for jar in jvm.jars("kafka-broker"):
        match = re.fullmatch(r"kafka-clients-(.+)\.jar", jar.name)
        if match:
            return match.group(1)
    return "unknown"


def java_version() -> str:
    from stream_pipelines.launching import jvm

    result = subprocess.run([jvm.java_executable(), "-version"], capture_output=True, text=True, check=False)
    lines = (result.stderr or result.stdout).strip().splitlines()
    return lines[0] if lines else "unknown"


def _first_field(path: str, name: str) -> str | None:
    try:
        for line in Path(path).read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == name:
                return value.strip()
    except OSError:
        pass
    return None


def machine_info() -> dict[str, Any]:
    import pyspark

    memory_kb = _first_field("/proc/meminfo", "MemTotal")
    return {
        "hostname": platform.node(),
        "platform": platform.platform(),
        "cpu_model": _first_field("/proc/cpuinfo", "model name") or platform.processor() or "unknown",
        "cpu_count": os.cpu_count(),
        # Differs from cpu_count in containers and under taskset; it is what the JVMs can use.
        "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "memory_gib": round(int(memory_kb.split()[0]) / 1024**2, 1) if memory_kb else None,
        "python": sys.version.split()[0],
        "pyspark": pyspark.__version__,
        "kafka": kafka_version(),
        "java": java_version(),
    }


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages; other work on the machine skews every timing."""
    try:
        return [round(value, 2) for value in os.getloadavg()]
    except OSError:
        return []


def write_results(path: Path, results: dict[str, Any]) -> Path:
    """Write results as JSON, replacing the file only once the new one is complete."""
    path.parent.mkdir(parents=True, exist_ok=True)
    stamped = {"written_at": datetime.now(UTC).isoformat(timespec="seconds"), **results}
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(json.dumps(stamped, indent=2, sort_keys=False) + "\n")
    temporary.replace(path)
    return path


def positive_int(text: str) -> int:
    """argparse type: a whole number of at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    """argparse type: a whole number of at least 0."""
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {value}")
    return value


def positive_float(text: str) -> float:
    """argparse type: a number above zero."""
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be above zero, got {text}")
    return value


def log(message: str) -> None:
    print(f"[{datetime.now(UTC):%H:%M:%S}] {message}", file=sys.stderr, flush=True)


def stop_session(spark: SparkSession) -> None:
    """Stop every query still running, then the session, even when a query's stop fails."""
    try:
        for query in spark.streams.active:
            query.stop()
    finally:
        spark.stop()


def print_and_save(
    format_table: Callable[[dict[str, Any]], str], out: Path
) -> Callable[[dict[str, Any]], int]:
    """The usual ``finish`` for run_main: the table on stdout, the results as JSON at ``out``."""

    def finish(results: dict[str, Any]) -> int:
        print(format_table(results))
        print(f"results: {write_results(out, results)}")
        return 0

    return finish


def benchmark_parser(module: str, doc: str | None) -> argparse.ArgumentParser:
    """A benchmark's option parser: run as ``python -m <module>``, its docstring as the description."""
    return argparse.ArgumentParser(
        prog=f"python -m {module}", description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )


def add_results_argument(parser: argparse.ArgumentParser, default: Path) -> None:
    """``--out``: where the results JSON goes."""
    from stream_pipelines.core.config import PROJECT_ROOT

    shown = default.relative_to(PROJECT_ROOT) if default.is_relative_to(PROJECT_ROOT) else default
    parser.add_argument("--out", type=Path, default=default, help=f"results JSON (default: {shown})")


def run_and_report(
    name: str,
    args: argparse.Namespace,
    run_benchmark: Callable[[argparse.Namespace, Interrupts], dict[str, Any]],
    format_table: Callable[[dict[str, Any]], str],
) -> int:
    """The whole ``main`` of a benchmark whose results are a table on stdout and JSON at ``args.out``."""
    return run_main(
        name, lambda interrupts: run_benchmark(args, interrupts), print_and_save(format_table, args.out)
    )


def run_main(
    name: str,
    run: Callable[[Interrupts], dict[str, Any]],
    finish: Callable[[dict[str, Any]], int],
    expected_errors: tuple[type[Exception], ...] = (),
) -> int:
    """A benchmark's entry point: ``run`` it with Ctrl-C handled, then ``finish`` prints and saves.

    Exit codes: what ``finish`` returns, 1 for an error the user can act on (said in one line, no
    traceback), 130 when interrupted.
    """
    from stream_pipelines.core.config import ConfigError
    from stream_pipelines.devtools.broker import BrokerError
    from stream_pipelines.launching.jvm import JvmSetupError

    interrupts = Interrupts()
    try:
        with interrupts.installed():
            results = run(interrupts)
    except KeyboardInterrupt:
        log("interrupted: whatever the benchmark started is stopped and its private data removed")
        return 130
    except (BenchmarkError, BrokerError, ConfigError, JvmSetupError, *expected_errors) as error:
        print(f"{name}: {error}", file=sys.stderr)
        return 1
    return finish(results)
