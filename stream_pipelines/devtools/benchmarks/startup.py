"""Start-up benchmark: spark-submit of each app to its first committed batch, split into phases.

One run starts a private broker and produces two minutes of generated sensor and ad events, so every
app's first batch carries data. Then, per app and repeat, it spark-submits the app exactly as the
supervisor does (``submit.spark_submit_command``, processing trigger) against fresh checkpoints and
outputs, and timestamps what the driver does as it happens:

  launcher         spark-submit until the Python driver process exists (the launcher JVM, which also
                   hosts the driver's SparkContext later)
  python+preflight the driver's imports, config, topic check and checkpoint preflight, up to the
                   "checkpoint preflight for" line
  session          lease, scratch clean-up and the SparkSession, up to "Spark session ready"
  query start      metrics exporter, batch log and the queries' start, up to "started N queries"
  first batch      until the app's first query has written commits/0

The total is spark-submit to commits/0. Each app then stops gracefully (its stop marker), as
``pipelinectl stop`` does; the stop is not timed. Medians, minima and maxima per phase over the
repeats; apps run one at a time, alone. Results: a table on stdout and JSON in data/bench/startup.json.
The goal beside the total is the efficiency issue's: cold start to first commit at most 12 s.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stream_pipelines.control.control_store import ControlStore
from stream_pipelines.core.config import PROJECT_ROOT, PipelineConfig, add_config_arguments
from stream_pipelines.core.registry import APP_NAMES, APPS, entry_point
from stream_pipelines.devtools.benchmarks.common import (
    BenchmarkError,
    Interrupts,
    Summary,
    add_results_argument,
    benchmark_parser,
    derive_config,
    isolated_overrides,
    load_average,
    log,
    machine_info,
    positive_int,
    private_broker,
    run_and_report,
)
from stream_pipelines.devtools.processes import descendants, stop_process_group
from stream_pipelines.launching.submit import spark_submit_command, submit_environment

DEFAULT_OUT = PROJECT_ROOT / "data" / "bench" / "startup.json"
DEFAULT_REPEATS = 3
FIRST_BATCH_TIMEOUT_S = 240.0
STOP_TIMEOUT_S = 60.0
GOAL_TOTAL_S = 12.0
# The driver's own lines that close a phase, in order (lifecycle.py writes them).
PHASE_MARKERS = (
    ("python+preflight", re.compile(r"^checkpoint preflight for ")),
    ("session", re.compile(r": Spark session ready")),
    ("query start", re.compile(r": started \d+ queries")),
)
PHASES = ("launcher", *(name for name, _ in PHASE_MARKERS), "first batch")


class StartTimeline:
    """Monotonic moments of one start: the launch, the driver process, each marker line, commits/0."""

    def __init__(self) -> None:
        self.launched = time.monotonic()
        self.moments: dict[str, float] = {}
        self._lock = threading.Lock()

    def mark(self, phase: str) -> None:
        with self._lock:
            self.moments.setdefault(phase, time.monotonic())

    def read_lines(self, stream: Any, log_file: Any) -> None:
        for raw in stream:
            line = raw.decode(errors="replace")
            log_file.write(line)
            for phase, pattern in PHASE_MARKERS:
                if pattern.search(line):
                    self.mark(phase)

    def phases(self) -> dict[str, float]:
        """Seconds per phase, each from the end of the one before; BenchmarkError when one is missing."""
        missing = [phase for phase in PHASES if phase not in self.moments]
        if missing:
            raise BenchmarkError(f"the start never reached {', '.join(missing)}")
        durations, previous = {}, self.launched
        for phase in PHASES:
            durations[phase] = self.moments[phase] - previous
            previous = self.moments[phase]
        durations["total"] = previous - self.launched
        return durations


def _driver_started(script: str, launcher_pid: int) -> bool:
    """Whether the Python driver of ``script`` runs below this launcher (spark-submit starts it as
    ``python <script> ...``); other drivers of the same app elsewhere on the machine do not count."""
    for pid in descendants(launcher_pid):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if len(command) > 1 and command[1].decode(errors="replace").endswith(script):
            return True
    return False


def driver_overrides(config: PipelineConfig, run: str) -> list[str]:
    """What the driver needs on its command line to load the benchmark's config: the private broker and
    data root, free metrics ports, and the run's own checkpoints and outputs."""
    return [
        f"paths.data_root={config.paths.data_root}",
        f"kafka.bootstrap_servers={config.kafka.bootstrap_servers}",
        "kafka.client_properties={}",
        # A `make up` stack on the default ports must not turn a start into a refusal.
        *(f"metrics.ports.{app}=0" for app in APP_NAMES),
        *isolated_overrides(run),
    ]


def time_one_start(
    config: PipelineConfig, app: str, overrides: Sequence[str], log_path: Path, interrupts: Interrupts
) -> dict[str, float]:
    command = spark_submit_command(config, APPS[app], "processing", overrides)
    with first_batch(config, app, command, entry_point(app), log_path, interrupts) as started:
        pass
    return started.timeline.phases()


@dataclass
class Started:
    """A driver that has committed its first batch: its launcher process and the start's timeline."""

    launcher: subprocess.Popen
    timeline: StartTimeline
    log_path: Path
    interrupts: Interrupts

    def run_for(self, seconds: float) -> None:
        """Let it run ``seconds``; a BenchmarkError if it exits meanwhile."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.interrupts.check()
            if self.launcher.poll() is not None:
                raise BenchmarkError(
                    f"the driver exited with {self.launcher.returncode}; see {self.log_path}"
                )
            time.sleep(0.5)


@contextlib.contextmanager
def first_batch(
    config: PipelineConfig,
    app: str,
    command: Sequence[str],
    script: str,
    log_path: Path,
    interrupts: Interrupts,
    *,
    graceful: bool = True,
) -> Iterator[Started]:
    """Run ``command`` (a spark-submit of ``script`` with ``app``'s queries) until the app's first query
    has written commits/0, then yield it still running; on the way out stop it, by its stop marker as
    ``pipelinectl stop`` does (``graceful``) or by a signal to its process group.

    The launcher's output goes to ``log_path``, and its phase lines to the timeline as they come."""

    declared = APPS[app]
    first_commit = Path(config.checkpoint_dir(app, declared.query_names[0])) / "commits" / "0"
    timeline = StartTimeline()
    with log_path.open("w") as log_file:
        launcher = subprocess.Popen(
            command,
            env=submit_environment(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=PROJECT_ROOT,
        )
        reader = threading.Thread(target=timeline.read_lines, args=(launcher.stdout, log_file), daemon=True)
        reader.start()
        try:
            deadline = time.monotonic() + FIRST_BATCH_TIMEOUT_S
            while not first_commit.exists():
                interrupts.check()
                if launcher.poll() is not None:
                    raise BenchmarkError(
                        f"{app} exited with {launcher.returncode} before its first batch; see {log_path}"
                    )
                if time.monotonic() > deadline:
                    raise BenchmarkError(
                        f"{app}: no first batch within {FIRST_BATCH_TIMEOUT_S:.0f}s; see {log_path}"
                    )
                if "launcher" not in timeline.moments and _driver_started(script, launcher.pid):
                    timeline.mark("launcher")
                time.sleep(0.05)
            timeline.mark("first batch")
            yield Started(launcher, timeline, log_path, interrupts)
            if graceful:
                ControlStore(config).request_stop(app)
                try:
                    launcher.wait(STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    log(f"{app}: did not stop within {STOP_TIMEOUT_S:.0f}s; killing it")
        finally:
            if launcher.poll() is None:
                stop_process_group(launcher.pid)
            else:
                # Its own session, so its group is its pid: a Python driver or worker may outlive it.
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(launcher.pid, signal.SIGKILL)
            reader.join(10)


def produce_events(config: PipelineConfig) -> int:
    """Two minutes of generated events ending now, in every input topic."""
    from stream_pipelines.devtools import generator

    spec = generator.recent_scenario(seed=11, match_interval_s=config.ads.match_interval.seconds)
    return generator.produce_to_kafka(generator.generate(spec), config.kafka_client_config())


def run_benchmark(args: argparse.Namespace, interrupts: Interrupts) -> dict[str, Any]:
    apps = args.apps or list(APP_NAMES)
    runs: dict[str, list[dict[str, float]]] = {app: [] for app in apps}
    with private_broker(args.env, args.overrides, conf_dir=args.conf_dir, prefix="bench-startup-") as config:
        events = produce_events(config)
        log(f"produced {events} events; {args.repeats} start(s) per app, one app at a time")
        # Outside the private data root, which goes with the broker: a failed start's log must stay.
        logs = args.out.parent / "startup-logs"
        logs.mkdir(parents=True, exist_ok=True)
        for repeat in range(args.repeats):
            for app in apps:
                run = f"{app}-{repeat}"
                overrides = [*args.overrides, *driver_overrides(config, run)]
                run_config = derive_config(config, overrides)
                phases = time_one_start(run_config, app, overrides, logs / f"{run}.log", interrupts)
                log(f"{app} start {repeat + 1}: {phases['total']:.1f}s to its first commit")
                runs[app].append(phases)
    return {
        "benchmark": "startup",
        "goal_total_s": GOAL_TOTAL_S,
        "repeats": args.repeats,
        "events": events,
        "machine": machine_info(),
        "load_average_after": load_average(),
        "apps": {
            app: {phase: Summary.of(run[phase] for run in app_runs).as_dict() for phase in (*PHASES, "total")}
            for app, app_runs in runs.items()
        },
        "runs": runs,
    }


def format_table(results: dict[str, Any]) -> str:
    columns = (*PHASES, "total")
    header = f"{'app (median s, min-max)':<22}" + "".join(f"{name:>18}" for name in columns) + f"{'goal':>8}"
    lines = [
        f"start-up to first committed batch, {results['repeats']} start(s) per app, alone on "
        f"{results['machine'].get('usable_cpus', '?')} CPUs",
        header,
    ]
    for app, phases in results["apps"].items():
        cells = "".join(
            f"{phases[name]['median']:>8.1f} ({phases[name]['min']:.1f}-{phases[name]['max']:.1f})".rjust(18)
            for name in columns
        )
        lines.append(f"{app:<22}{cells}{'<= ' + format(results['goal_total_s'], '.0f'):>8}")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = benchmark_parser("stream_pipelines.devtools.benchmarks.startup", __doc__)
    parser.add_argument(
        "--repeats", type=positive_int, default=DEFAULT_REPEATS, help="starts per app (default: 3)"
    )
    parser.add_argument("--apps", nargs="+", choices=APP_NAMES, help="apps to start (default: all)")
    add_results_argument(parser, DEFAULT_OUT)
    # --set can change Spark and Kafka settings; the broker, its ports and the data root are always private.
    add_config_arguments(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_and_report("bench-startup", args, run_benchmark, format_table)


if __name__ == "__main__":
    sys.exit(main())
