"""Stack benchmark: what the whole `make up` stack costs at the default generator rate, how long a
kill -9 under Airflow costs, and how fresh the tumbling output is.

One run starts the stack exactly as `make up` does (``devtools.stack.up``: the broker, PostgreSQL,
Airflow's api-server, two schedulers, dag-processor and triggerer with the streaming DAGs unpaused, the live
generator at its default rate, Prometheus, Alertmanager and the webhook receiver when installed), but
on a temporary data root and private broker ports; the fixed ports of `make up` (Airflow 8080,
Prometheus 9090, ...) must be free. Then, in order:

  start       until every app has committed ``--min-batches`` batches under its supervisor DAG
  settle      ``--settle-seconds`` of steady state, untimed (the issue measured after 4 minutes; the
              drivers' JIT keeps cutting their cost for 10 minutes and more, so a longer settle
              measures a lower figure: docs/benchmarks.md#make-bench-stack)
  idle cost   over ``--measure-seconds``, the CPU (user + system from /proc, reaped children included)
              of each part of the stack: each app's driver JVM with its Python driver and workers,
              the Airflow task runners that supervise them, each stack component with what runs under
              it, and the broker; as CPU seconds per minute and as cores, beside the machine's total
  freshness   from the start of settling to the end of the idle window, when each tumbling window's
              rows became visible in ``sensor_windows`` (the mtime of the file sink's log entry that
              first listed them; readers see nothing before it) minus (window end + watermark delay);
              median and p95 against the floor of one trigger
  restart     ``--kills`` times: kill -9 the app's driver, and time from the kill to the next batch its
              first query commits after Airflow has restarted it from its checkpoint; the app commits
              two more batches before the next kill

``--airflow sqlite,postgres`` does all of it once per Airflow setup, each on a fresh stack, one after
the other: SQLite with one scheduler (the stack before decision 0023), then PostgreSQL with two; a last
table puts each part's cores and memory (PSS: a forked worker's shared pages counted once) side by side.

Everything the run started is stopped (``devtools.stack.down``) and its data root deleted, whether it
finished, failed or was interrupted. Goals beside the figures are the efficiency issue's: the stack at
most 0.5 core, kill -9 to the next committed batch at most 20 s, freshness above the floor (p95) at
most one trigger. Results: a table on stdout and JSON in data/bench/stack_cost.json.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import shutil
import signal
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stream_pipelines.core import registry
from stream_pipelines.core.config import (
    CONF_DIR_VARIABLE,
    ENV_VARIABLE,
    OVERRIDE_PREFIX,
    PROJECT_ROOT,
    PipelineConfig,
    load_config,
    override_variables,
)
from stream_pipelines.devtools.benchmarks.common import (
    LOOPBACK,
    BenchmarkError,
    Interrupts,
    add_results_argument,
    benchmark_parser,
    load_average,
    log,
    machine_info,
    positive_float,
    positive_int,
    private_overrides,
    run_and_report,
    signals_ignored,
    spark_driver_jvm,
)
from stream_pipelines.devtools.processes import Proc, alive, cpu_seconds, process_table

if TYPE_CHECKING:
    from stream_pipelines.devtools.stack import AirflowSetup

DEFAULT_OUT = PROJECT_ROOT / "data" / "bench" / "stack_cost.json"
GOAL_CORES = 0.5
GOAL_RESTART_S = 20.0
# Freshness above its floor of one trigger, in triggers.
GOAL_FRESHNESS_ABOVE_FLOOR_TRIGGERS = 1.0
KILLED_APP = registry.SENSOR_AGGREGATION.name
FRESHNESS_QUERY = "tumbling"
START_TIMEOUT_S = 900.0
RESTART_TIMEOUT_S = 600.0
POLL_S = 0.5
TASK_RUNNERS = "airflow task runners"
BROKER = "broker"
METADATA_DATABASE = "postgres (Airflow's metadata)"


def app_label(app: str) -> str:
    return f"app {app}"


# --------------------------------------------------------------------------- who used the CPU


def label_processes(
    table: Mapping[int, Proc], roots: Mapping[int, str], app_jvms: Mapping[int, str]
) -> dict[int, str]:
    """Each process of the stack and the part it belongs to: the nearest labelled ancestor (itself
    included). Apps' JVMs are labelled by app; the processes between a JVM and the stack component
    above it (Airflow's executor worker, the task's supervisor and the task) are the task runners.
    Processes under none of ``roots`` are left out."""
    labels = dict(roots)
    for jvm, app in app_jvms.items():
        labels[jvm] = app_label(app)
        parent = table[jvm].ppid if jvm in table else None
        while parent is not None and parent in table and parent not in roots:
            labels.setdefault(parent, TASK_RUNNERS)
            parent = table[parent].ppid
    found: dict[int, str] = {}
    for pid in table:
        chain, current = [], pid
        while current in table and current not in labels and current not in found:
            chain.append(current)
            current = table[current].ppid
        label = labels.get(current) or found.get(current)
        if label is None:
            continue
        for member in (*chain, current):
            found[member] = label
    return found


def component_roots(
    table: Mapping[int, Proc], recorded: Mapping[int, str], kept_pids: Collection[int]
) -> dict[int, str]:
    """The processes that head each stack component: its recorded pid, and for a kept one (``kept_pids``,
    a subset of ``recorded``: the keeper's pid is the one recorded) the keeper's children too, so that
    the component itself is its own part and only what it starts for tasks counts as task runners."""
    roots = dict(recorded)
    for pid, process in table.items():
        if process.ppid in kept_pids:
            roots[pid] = recorded[process.ppid]
    return roots


def cpu_by_label(
    labels_at_end: Mapping[int, str], start: Mapping[int, float], end: Mapping[int, float]
) -> dict[str, float]:
    """CPU seconds each part used between two readings. A process that started in between counts all of
    its CPU; one that ended in between counts through its parent (reaped children) or not at all."""
    used: dict[str, float] = {}
    for pid, label in labels_at_end.items():
        if pid in end:
            used[label] = used.get(label, 0.0) + max(0.0, end[pid] - start.get(pid, 0.0))
    return used


def cpu_readings(pids: Sequence[int]) -> dict[int, float]:
    return {pid: cpu_seconds({pid}) for pid in pids if alive(pid)}


def pss_mib(pid: int) -> float:
    """The process's proportional share of memory: its private pages plus its share of those it shares,
    so that Airflow's forked workers and their parent are not each counted whole. 0 once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) / 1024
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        pass
    return 0.0


def memory_by_label(labels: Mapping[int, str]) -> dict[str, float]:
    """MiB (PSS) each part holds now."""
    held: dict[str, float] = {}
    for pid, label in labels.items():
        held[label] = held.get(label, 0.0) + pss_mib(pid)
    return held


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine has been busy since boot (every state but idle and iowait)."""
    fields = [int(value) for value in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


# --------------------------------------------------------------------------- freshness


def nearest_rank(values: Sequence[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def freshness_summary(
    visible_at: Mapping[float, float], delay_s: float, trigger_s: float, since: float
) -> dict[str, Any]:
    """Per tumbling window (keyed by its end, epoch seconds): visible time minus (end + delay), for the
    windows that first became visible after ``since``."""
    lags = sorted(seen - (end + delay_s) for end, seen in visible_at.items() if seen >= since)
    summary: dict[str, Any] = {"windows": len(lags), "floor_s": trigger_s, "lags_s": lags}
    if lags:
        p95 = nearest_rank(lags, 0.95)
        summary |= {
            "median_s": statistics.median(lags),
            "p95_s": p95,
            "p95_above_floor_s": p95 - trigger_s,
            "p95_above_floor_triggers": (p95 - trigger_s) / trigger_s,
        }
    return summary


class TumblingWatcher:
    """Polls a file sink's log and notes when each window end first became visible to readers."""

    def __init__(self, output: Path) -> None:
        self.log_dir = output / "_spark_metadata"
        self.visible_at: dict[float, float] = {}
        self.error: BaseException | None = None
        self._files: set[str] = set()
        self._last_batch = -1
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tumbling-watcher", daemon=True)

    def start(self) -> TumblingWatcher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def check(self) -> None:
        if self.error is not None:
            raise BenchmarkError(f"reading the tumbling output failed: {self.error}")

    def _run(self) -> None:
        try:
            while not self._stop.wait(POLL_S):
                self.poll()
        except Exception as error:  # handed to the main thread by check()
            self.error = error

    def poll(self) -> None:
        import pyarrow.parquet as pq

        from stream_pipelines.checkpoint.format import log_entries, read_file_log

        for batch, entry in log_entries(self.log_dir):
            if batch <= self._last_batch:
                continue
            visible = entry.stat().st_mtime
            for item in read_file_log(entry):
                path = item.get("path")
                if not path or path in self._files or item.get("action", "add") == "delete":
                    continue
                self._files.add(path)
                local = path.removeprefix("file://")
                for end in pq.read_table(local, columns=["window_end"]).column("window_end").to_pylist():
                    # Spark writes INT96 timestamps, which read back without a zone: they are UTC.
                    key = (end if end.tzinfo else end.replace(tzinfo=UTC)).timestamp()
                    self.visible_at[key] = min(self.visible_at.get(key, visible), visible)
            self._last_batch = batch


# --------------------------------------------------------------------------- the stack


def busy_ports(ports: Sequence[int]) -> list[int]:
    busy = []
    for port in ports:
        with socket.socket() as probe:
            # As the servers bind (SO_REUSEADDR): a closed connection's TIME_WAIT does not stop them.
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((LOOPBACK, port))
            except OSError:
                busy.append(port)
    return busy


def fixed_ports(config: PipelineConfig) -> list[int]:
    from stream_pipelines.devtools import stack

    return [
        stack.AIRFLOW_PORT,
        stack.PROMETHEUS_PORT,
        stack.ALERTMANAGER_PORT,
        stack.WEBHOOK_PORT,
        *(config.metrics.ports.get(app) for app in registry.APP_NAMES),
    ]


@contextlib.contextmanager
def environment_overrides(env: str | None, conf_dir: str | None, overrides: Sequence[str]) -> Iterator[None]:
    """The config selection as environment variables (PIPELINE_ENV, PIPELINE_CONF_DIR, PIPELINE__...)
    for this process and everything the stack starts: Airflow hands its environment on to the tasks
    that spark-submit the apps."""
    ours = (ENV_VARIABLE, CONF_DIR_VARIABLE)
    saved = {
        key: value for key, value in os.environ.items() if key.startswith(OVERRIDE_PREFIX) or key in ours
    }
    try:
        for key, value in zip(ours, (env, conf_dir), strict=True):
            if value is not None:
                os.environ[key] = value
        os.environ.update(override_variables(overrides))
        yield
    finally:
        for key in [key for key in os.environ if key.startswith(OVERRIDE_PREFIX) or key in ours]:
            del os.environ[key]
        os.environ.update(saved)


@contextlib.contextmanager
def private_stack(
    env: str | None,
    overrides: Sequence[str],
    conf_dir: str | None,
    generator_rates: tuple[float, float] | None = None,
    airflow: AirflowSetup | None = None,
) -> Iterator[PipelineConfig]:
    from stream_pipelines.devtools import stack

    rates = generator_rates or stack.GENERATOR_RATES

    data_root = Path(tempfile.mkdtemp(prefix="bench_stack-"))
    private = [*overrides, *private_overrides(data_root)]
    config: PipelineConfig | None = None
    try:
        with environment_overrides(env, conf_dir, private):
            config = load_config()
            busy = busy_ports(fixed_ports(config))
            if busy:
                raise BenchmarkError(
                    f"port(s) {', '.join(map(str, busy))} in use: the stack's fixed ports must be free "
                    "(is `make up` running? `make down` stops it)"
                )
            with contextlib.redirect_stdout(sys.stderr):
                if stack.up(config, rates, airflow or stack.AIRFLOW_HA) != 0:
                    raise BenchmarkError(f"the stack did not start; logs under {stack.stack_dir(config)}")
            yield config
    finally:
        with signals_ignored():
            try:
                if config is not None:
                    with (
                        contextlib.redirect_stdout(sys.stderr),
                        environment_overrides(env, conf_dir, private),
                    ):
                        stack.down(config)
                        # Its data may live outside the data root (run as root: devtools/postgres.py).
                        stack.metadata_server(config).remove()
            finally:
                shutil.rmtree(data_root, ignore_errors=True)


def committed(config: PipelineConfig, app: str) -> list[int]:
    from stream_pipelines.checkpoint.format import batch_ids

    return batch_ids(Path(config.checkpoint_dir(app, registry.APPS[app].queries[0].name)) / "commits")


def wait_for(
    condition: Callable[[], bool],
    timeout_s: float,
    what: str,
    interrupts: Interrupts,
    checks: Sequence[Callable[[], None]] = (),
) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        interrupts.check()
        for check in checks:
            check()
        if time.monotonic() > deadline:
            raise BenchmarkError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(POLL_S)


@dataclass(frozen=True)
class StackParts:
    roots: dict[int, str]
    app_jvms: dict[int, str]
    drivers: dict[str, int]


def stack_parts(config: PipelineConfig, table: Mapping[int, Proc]) -> StackParts:
    from stream_pipelines.control.control_store import ControlStore
    from stream_pipelines.devtools import stack
    from stream_pipelines.devtools.broker import LocalBroker

    recorded, kept = {}, set()
    for component in stack.components(config):
        pid = stack.recorded_pid(config, component.name)
        if pid and pid in table:
            recorded[pid] = component.name
            if component.kept:
                kept.add(pid)
    roots = component_roots(table, recorded, kept)
    broker = LocalBroker(config).status()
    if broker.pid:
        roots[broker.pid] = BROKER
    postgres = stack.metadata_server(config).pid()
    if postgres and postgres in table:
        roots[postgres] = METADATA_DATABASE
    store = ControlStore(config)
    drivers, app_jvms = {}, {}
    for app in registry.APP_NAMES:
        for driver in store.running_pids(app):
            drivers[app] = driver
            parent = table[driver].ppid if driver in table else None
            jvm = spark_driver_jvm(table, [parent]) if parent else None
            if jvm is None:
                raise BenchmarkError(f"{app}: found no Spark JVM above its driver (pid {driver})")
            app_jvms[jvm] = app
    return StackParts(roots, app_jvms, drivers)


def measure_idle(
    config: PipelineConfig, seconds: float, interrupts: Interrupts, checks: Sequence[Callable[[], None]]
) -> dict[str, Any]:
    before = process_table()
    parts = stack_parts(config, before)
    start = cpu_readings(list(before))
    busy_start, started = machine_busy_seconds(), time.monotonic()
    wait_for(
        lambda: time.monotonic() - started >= seconds, seconds + 60, "the idle window", interrupts, checks
    )
    after = process_table()
    end = cpu_readings(list(after))
    window_s = time.monotonic() - started
    busy_s = machine_busy_seconds() - busy_start
    parts_after = stack_parts(config, after)
    labels = label_processes(after, parts_after.roots, parts_after.app_jvms)
    used = cpu_by_label(labels, start, end)
    held = memory_by_label(labels)
    restarted = sorted(
        app for app, driver in parts.drivers.items() if parts_after.drivers.get(app) not in (None, driver)
    )
    missing = sorted(set(registry.APP_NAMES) - set(parts_after.drivers))
    return {
        "window_s": window_s,
        "parts": {
            label: {
                "cpu_s": cpu,
                "cpu_s_per_min": cpu * 60 / window_s,
                "cores": cpu / window_s,
                "pss_mib": held.get(label, 0.0),
            }
            for label, cpu in sorted(used.items(), key=lambda item: -item[1])
        },
        "stack_cores": sum(used.values()) / window_s,
        "stack_pss_mib": sum(held.values()),
        "spark_cores": sum(cpu for label, cpu in used.items() if label.startswith("app ")) / window_s,
        "machine_cores": busy_s / window_s,
        "apps_restarted_in_window": restarted,
        "apps_not_running_at_end": missing,
    }


def measure_restarts(
    config: PipelineConfig, app: str, kills: int, interrupts: Interrupts, checks: Sequence[Callable[[], None]]
) -> list[dict[str, Any]]:
    restarts = []
    for kill in range(kills):
        restarts.append(measure_restart(config, app, interrupts, checks))
        log(
            f"kill {kill + 1}/{kills}: the next batch committed {restarts[-1]['seconds']:.1f}s after the kill"
        )
    return restarts


def measure_restart(
    config: PipelineConfig, app: str, interrupts: Interrupts, checks: Sequence[Callable[[], None]]
) -> dict[str, Any]:
    """kill -9 the app's driver; seconds until its first query commits a batch after Airflow restarts it."""
    from stream_pipelines.control.control_store import ControlStore

    store = ControlStore(config)

    def newest() -> int:
        return max(committed(config, app), default=-1)

    wait_for(lambda: bool(store.running_pids(app)), RESTART_TIMEOUT_S, f"{app} to run", interrupts, checks)
    driver = store.running_pids(app)[0]
    killed_at = time.monotonic()
    os.kill(driver, signal.SIGKILL)
    wait_for(lambda: not alive(driver), 30, f"{app}'s driver to die", interrupts, checks)
    # Read once the driver is gone: nothing can commit between this read and the restart.
    last = newest()
    log(f"kill -9 {app} (pid {driver}) after batch {last}")
    what = f"Airflow to restart {app} and the next batch to commit"
    wait_for(lambda: newest() > last, RESTART_TIMEOUT_S, what, interrupts, checks)
    seconds = time.monotonic() - killed_at
    restarted = store.running_pids(app)
    # Back in step before any next kill: two more batches.
    wait_for(
        lambda: newest() >= last + 3,
        RESTART_TIMEOUT_S,
        f"{app} to commit two more batches",
        interrupts,
        checks,
    )
    return {"killed_pid": driver, "last_batch": last, "seconds": seconds, "new_pid": restarted}


def run_benchmark(args: argparse.Namespace, interrupts: Interrupts) -> dict[str, Any]:
    """The stack once per Airflow setup asked for, one after the other, each on a fresh data root."""
    started = time.monotonic()
    load_before = load_average()
    runs = []
    for setup in args.airflow:
        log(f"Airflow on {setup.name} with {len(setup.schedulers)} scheduler(s)")
        runs.append(measure_stack(args, setup, interrupts))
    return {
        "benchmark": "stack_cost",
        "goal": {
            "stack_cores": GOAL_CORES,
            "restart_s": GOAL_RESTART_S,
            "freshness_p95_above_floor_triggers": GOAL_FRESHNESS_ABOVE_FLOOR_TRIGGERS,
        },
        "settle_s": args.settle_seconds,
        "runs": runs,
        "kill_app": args.kill_app,
        "overrides": list(args.overrides),
        "machine": machine_info(),
        "load_average": {"before": load_before, "after": load_average()},
        "seconds": time.monotonic() - started,
    }


def measure_stack(args: argparse.Namespace, setup: AirflowSetup, interrupts: Interrupts) -> dict[str, Any]:
    from stream_pipelines.devtools import stack

    started = time.monotonic()
    with private_stack(args.env, args.overrides, args.conf_dir, airflow=setup) as config:
        log(f"stack up on data root {config.paths.data_root}; logs under {stack.stack_dir(config)}")
        tumbling = registry.APPS[KILLED_APP].query(FRESHNESS_QUERY).sink
        assert tumbling is not None
        watcher = TumblingWatcher(Path(tumbling.location(config))).start()
        checks = [watcher.check, lambda: check_components(config)]
        try:
            for app in registry.APP_NAMES:
                wait_for(
                    lambda app=app: len(committed(config, app)) >= args.min_batches,
                    START_TIMEOUT_S,
                    f"{app} to commit {args.min_batches} batches under Airflow",
                    interrupts,
                    checks,
                )
                log(f"{app}: {args.min_batches} batches committed ({time.monotonic() - started:.0f}s in)")
            settle_from = time.time()
            log(f"settling for {args.settle_seconds:g}s")
            settle_start = time.monotonic()
            wait_for(
                lambda: time.monotonic() - settle_start >= args.settle_seconds,
                args.settle_seconds + 60,
                "settling",
                interrupts,
                checks,
            )
            log(f"measuring the stack's CPU for {args.measure_seconds:g}s")
            idle = measure_idle(config, args.measure_seconds, interrupts, checks)
        finally:
            watcher.stop()
        # The last look once the thread has stopped: two polls at once would read the same log entries.
        watcher.poll()
        watcher.check()
        sensors = config.sensors
        freshness = freshness_summary(
            watcher.visible_at,
            sensors.watermark.seconds,
            registry.APPS[KILLED_APP].trigger_interval(config).seconds,
            settle_from,
        )
        freshness["window_s"] = sensors.window.seconds
        restarts = measure_restarts(
            config, args.kill_app, args.kills, interrupts, [lambda: check_components(config)]
        )
    return {
        "airflow": {"metadata": setup.name, "schedulers": len(setup.schedulers)},
        "idle": idle,
        "freshness": freshness,
        "restarts": restarts,
        "restart_median_s": statistics.median(r["seconds"] for r in restarts) if restarts else None,
        "seconds": time.monotonic() - started,
    }


def check_components(config: PipelineConfig) -> None:
    """The stack's own processes must live through the run; a dead one makes every figure wrong."""
    from stream_pipelines.devtools import stack

    for component in stack.components(config):
        pid = stack.recorded_pid(config, component.name)
        if pid is not None and not alive(pid):
            log_file = stack.stack_dir(config) / "logs" / f"{component.name}.log"
            raise BenchmarkError(f"{component.name} (pid {pid}) ended during the run; see {log_file}")


def format_table(results: dict[str, Any]) -> str:
    tables = [format_run(results, run) for run in results["runs"]]
    if len(results["runs"]) > 1:
        tables.append(format_side_by_side(results["runs"]))
    return "\n\n".join(tables)


def setup_name(run: dict[str, Any]) -> str:
    return f"{run['airflow']['metadata']}, {run['airflow']['schedulers']} scheduler(s)"


def format_side_by_side(runs: Sequence[dict[str, Any]]) -> str:
    """Each part's cores and memory under each Airflow setup, in the order they ran."""
    names = [setup_name(run) for run in runs]
    labels = list(dict.fromkeys(label for run in runs for label in run["idle"]["parts"]))
    width = 26
    lines = [
        "side by side: cores / PSS MiB at the end of the window",
        f"{'part':<40}" + "".join(f"{name:>{width}}" for name in names),
    ]

    def cell(cores: float | None, mib: float | None) -> str:
        shown_cores = "-" if cores is None else format(cores, ".2f")
        return f"{shown_cores} / {'-' if mib is None else format(mib, '.0f')}"

    for label in labels:
        figures = [run["idle"]["parts"].get(label) for run in runs]
        lines.append(
            f"{label:<40}"
            + "".join(
                f"{cell(f['cores'], f.get('pss_mib')) if f else cell(None, None):>{width}}" for f in figures
            )
        )
    lines.append(
        f"{'stack total':<40}"
        + "".join(f"{cell(r['idle']['stack_cores'], r['idle'].get('stack_pss_mib')):>{width}}" for r in runs)
    )
    lines.append(
        f"{'machine total (cores)':<40}" + "".join(f"{r['idle']['machine_cores']:>{width}.2f}" for r in runs)
    )
    return "\n".join(lines)


def format_run(results: dict[str, Any], run: dict[str, Any]) -> str:
    idle, goal = run["idle"], results["goal"]
    cpus = results["machine"].get("usable_cpus", "?")
    lines = [
        f"stack idle cost over {idle['window_s']:.0f}s after {results['settle_s']:g}s of settling, default "
        f"generator rate, {cpus} CPUs; Airflow on {setup_name(run)}",
        f"{'part':<40}{'CPU s/min':>10}{'cores':>8}{'PSS MiB':>9}{'goal':>10}",
    ]
    for label, figures in idle["parts"].items():
        lines.append(
            f"{label:<40}{figures['cpu_s_per_min']:>10.1f}{figures['cores']:>8.2f}"
            f"{figures.get('pss_mib', 0.0):>9.0f}"
        )
    lines.append(
        f"{'  of which Spark (the apps)':<40}{idle['spark_cores'] * 60:>10.1f}{idle['spark_cores']:>8.2f}"
    )
    lines.append(
        f"{'stack total':<40}{idle['stack_cores'] * 60:>10.1f}{idle['stack_cores']:>8.2f}"
        f"{idle.get('stack_pss_mib', 0.0):>9.0f}{'<= ' + format(goal['stack_cores'], 'g'):>10}"
    )
    machine = idle["machine_cores"]
    lines.append(f"{'machine total (everything running)':<40}{machine * 60:>10.1f}{machine:>8.2f}")
    for note, apps in (
        ("restarted during the window", idle["apps_restarted_in_window"]),
        ("not running at its end", idle["apps_not_running_at_end"]),
    ):
        if apps:
            lines.append(f"  note: {', '.join(apps)} {note}")
    restarts = run["restarts"]
    if restarts:
        seconds = [r["seconds"] for r in restarts]
        lines.append(
            f"kill -9 {results['kill_app']} -> next committed batch, under Airflow: median "
            f"{statistics.median(seconds):.1f}s ({min(seconds):.1f}-{max(seconds):.1f}, {len(seconds)} kills)"
            f"   goal <= {goal['restart_s']:g}s"
        )
    fresh = run["freshness"]
    if fresh["windows"]:
        lines.append(
            f"freshness of {KILLED_APP}'s tumbling output ({fresh['window_s']:g}s windows, "
            f"{fresh['windows']} window ends): visible after window end + watermark, median "
            f"{fresh['median_s']:.1f}s, p95 "
            f"{fresh['p95_s']:.1f}s; floor one trigger ({fresh['floor_s']:g}s); p95 above the floor "
            f"{fresh['p95_above_floor_s']:.1f}s = {fresh['p95_above_floor_triggers']:.2f} triggers   goal <= "
            f"{goal['freshness_p95_above_floor_triggers']:g} trigger"
        )
    else:
        lines.append("freshness: no tumbling window closed during the run (lengthen --settle-seconds)")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    from stream_pipelines.core.config import add_config_arguments

    parser = benchmark_parser("stream_pipelines.devtools.benchmarks.stack_cost", __doc__)
    parser.add_argument("--min-batches", type=positive_int, default=3, help="batches each app commits first")
    parser.add_argument("--settle-seconds", type=positive_float, default=240.0, help="steady state before")
    parser.add_argument("--measure-seconds", type=positive_float, default=300.0, help="the idle window")
    parser.add_argument(
        "--kills", type=positive_int, default=3, help="kill -9 of the app's driver, each timed"
    )
    parser.add_argument("--kill-app", choices=registry.APP_NAMES, default=KILLED_APP, help="the app killed")
    parser.add_argument(
        "--airflow",
        type=airflow_setups,
        default="postgres",
        help="Airflow's metadata database, or several comma-separated to measure each in turn on a fresh "
        "stack: postgres (two schedulers, what `make up` runs) or sqlite (one scheduler); default postgres",
    )
    add_results_argument(parser, DEFAULT_OUT)
    add_config_arguments(parser)
    return parser


def airflow_setups(value: str) -> tuple[AirflowSetup, ...]:
    from stream_pipelines.devtools.stack import AIRFLOW_SETUPS

    names = [name.strip() for name in value.split(",") if name.strip()]
    unknown = [name for name in names if name not in AIRFLOW_SETUPS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown Airflow setup {', '.join(unknown) or repr(value)}: "
            f"choose from {', '.join(AIRFLOW_SETUPS)}"
        )
    return tuple(AIRFLOW_SETUPS[name] for name in names)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_and_report("bench-stack", args, run_benchmark, format_table)


if __name__ == "__main__":
    sys.exit(main())
