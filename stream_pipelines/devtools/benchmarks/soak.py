"""Soak benchmark: the `make up` stack run for a long time at a fast trigger, sampled slice by slice, to
find what grows with run time and project it to 90 and 365 days at the configured trigger.

One run starts the stack as `make up` does (``devtools.stack.up``: the broker, Airflow with the three
supervisor DAGs unpaused, the live generator with its late, duplicate and malformed events) on a
temporary data root and private broker ports, with every app's trigger set to ``--trigger`` (1 s by
default: an hour of run is ten hours of batches at the default 10 s) and the generator at ``--rate`` /
``--ad-rate``. Then, every ``--slice-minutes`` for ``--minutes``:

  batches     per query, the batches committed in the slice and their duration, p50 and p95 (from the
              checkpoint: ``offsets/N`` written as the batch starts, ``commits/N`` as it ends; polled
              often enough that Spark's cleanup of old entries never hides one); batches that wrote a
              sink log's compact file apart from the others
  drivers     per app, the driver JVM's resident memory and its heap after a full GC (``jcmd GC.run``
              then ``jstat -gc``: the heap the driver keeps live)
  state       per query, the state rows and state store memory its metrics endpoint reports, and the
              state store's bytes on disk
  checkpoint  per query, the checkpoint's bytes and files
  sink logs   per file sink, the files its ``_spark_metadata`` log lists, the newest compact file's
              bytes, and how long reading the log takes (every Spark reader and the output sweep do)
  datasets    per file sink, data files and bytes
  batch log   files and bytes (the reconciliation's copy of every batch's offsets)
  nightly     with ``--nightly``, the nightly reconciliation of today (spark-submit) timed at the end of
              the first and of the last slice (it takes minutes on a busy machine: more would bend the
              slices it runs in)

Each figure's change per committed batch is fitted over the slices and projected to 90 and 365 days
at the configured (not the benchmark's) trigger. Figures that are the data itself (dataset files and
bytes) are projected but not counted as degradation; every other figure that grows with run time is
listed, largest relative growth first. Results: a table on stdout and JSON in data/bench/soak.json.
Everything the run started is stopped and its data root deleted, however it ends.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from stream_pipelines.checkpoint import format as checkpoint_format
from stream_pipelines.control.control_store import ControlStore
from stream_pipelines.core import registry, store
from stream_pipelines.core.config import (
    PROJECT_ROOT,
    Duration,
    PipelineConfig,
    add_config_arguments,
    load_config,
)
from stream_pipelines.devtools import stack
from stream_pipelines.devtools.benchmarks.common import (
    Interrupts,
    add_results_argument,
    benchmark_parser,
    load_average,
    log,
    machine_info,
    positive_float,
    run_and_report,
    spark_driver_jvm,
)
from stream_pipelines.devtools.benchmarks.stack_cost import (
    START_TIMEOUT_S,
    check_components,
    committed,
    nearest_rank,
    private_stack,
    wait_for,
)
from stream_pipelines.devtools.processes import process_table
from stream_pipelines.tables.maintenance import SINK_LOG, data_files, file_sinks

DEFAULT_OUT = PROJECT_ROOT / "data" / "bench" / "soak.json"
SECONDS_PER_DAY = 86400
PROJECTION_DAYS = (90, 365)
# Spark compacts a file sink's log every this many batches (spark.sql.streaming.fileSink.log.compactInterval).
SINK_LOG_COMPACT_INTERVAL = 10
# A figure that changed by less than this share of its first value over the run is flat.
FLAT_SHARE = 0.2
# Figures that are the data itself: they grow with the data by design.
DATA_FIGURES = ("dataset files", "dataset bytes")
BATCH_POLL_S = 15.0


# --------------------------------------------------------------------------- batch durations


@dataclass
class BatchTimer:
    """Every batch's duration per query, from its checkpoint's ``offsets/N`` and ``commits/N`` times."""

    config: PipelineConfig
    # (app, query) -> batch id -> (offsets written, commit written), epoch seconds.
    batches: dict[tuple[str, str], dict[int, tuple[float, float]]] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> BatchTimer:
        self._thread = threading.Thread(target=self._run, name="soak-batch-timer", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
        self.poll()

    def _run(self) -> None:
        while not self._stop.wait(BATCH_POLL_S):
            self.poll()

    def poll(self) -> None:
        for app in registry.APPS.values():
            for query in app.queries:
                checkpoint = Path(self.config.checkpoint_dir(app.name, query.name))
                started = _mtimes(checkpoint / "offsets")
                ended = _mtimes(checkpoint / "commits")
                with self._lock:
                    known = self.batches.setdefault((app.name, query.name), {})
                    for batch, end in ended.items():
                        if batch in started and batch not in known:
                            known[batch] = (started[batch], end)

    def durations(self, since: float, until: float) -> dict[tuple[str, str], list[tuple[int, float]]]:
        """(batch id, seconds) of each batch committed in [since, until), per query."""
        with self._lock:
            return {
                key: [
                    (batch, end - start)
                    for batch, (start, end) in sorted(found.items())
                    if since <= end < until
                ]
                for key, found in self.batches.items()
            }


def _mtimes(folder: Path) -> dict[int, float]:
    times = {}
    for batch, path in checkpoint_format.batch_files(folder).items():
        try:
            times[batch] = path.stat().st_mtime
        except FileNotFoundError:  # Spark's cleanup took it between the listing and the stat
            continue
    return times


def batch_figures(
    durations: Sequence[tuple[int, float]], compacting_batches: set[int] | None = None
) -> dict[str, Any]:
    seconds = [value for _, value in durations]
    figures: dict[str, Any] = {
        "batches": len(seconds),
        "p50_s": statistics.median(seconds) if seconds else None,
        "p95_s": nearest_rank(seconds, 0.95) if seconds else None,
    }
    if compacting_batches is not None:
        compacting = [value for batch, value in durations if batch in compacting_batches]
        figures["compacting_p50_s"] = statistics.median(compacting) if compacting else None
    return figures


def compacting_batch_ids(durations: Sequence[tuple[int, float]]) -> set[int]:
    """The batches that wrote their sink log's compact file (ids 9, 19, 29, ...)."""
    return {batch for batch, _ in durations if (batch + 1) % SINK_LOG_COMPACT_INTERVAL == 0}


# --------------------------------------------------------------------------- what is on disk


def folder_size(folder: Path) -> tuple[int, int]:
    """(files, bytes) under ``folder``, through the store layer."""
    found = store.tree_entries(folder) if folder.exists() else {}
    return len(found), sum(size for size, _ in found.values())


def sink_log_figures(folder: Path) -> dict[str, Any]:
    """What a file sink's log costs its readers: the files it lists, its newest compact file's bytes,
    and how long one read of it takes."""
    log_folder = folder / SINK_LOG
    if not log_folder.exists():
        return {"listed_files": 0, "compact_bytes": 0, "read_s": 0.0}
    started = time.perf_counter()
    listed = checkpoint_format.sink_files(folder)
    read_s = time.perf_counter() - started
    compacts = [
        entry for _, entry in checkpoint_format.log_entries(log_folder) if entry.name.endswith(".compact")
    ]
    return {
        "listed_files": len(listed),
        "compact_bytes": compacts[-1].stat().st_size if compacts else 0,
        "read_s": read_s,
    }


# --------------------------------------------------------------------------- drivers and state


def driver_jvms(config: PipelineConfig) -> dict[str, int]:
    """Each running app's driver JVM (the Java parent of its Python driver)."""
    table = process_table()
    control = ControlStore(config)
    found = {}
    for app in registry.APP_NAMES:
        for driver in control.running_pids(app):
            parent = table[driver].ppid if driver in table else None
            jvm = spark_driver_jvm(table, [parent]) if parent else None
            if jvm is not None:
                found[app] = jvm
    return found


def resident_bytes(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (FileNotFoundError, ProcessLookupError):
        return None
    return None


def heap_after_gc(pid: int) -> dict[str, int] | None:
    """The JVM's heap right after a full collection: what the driver keeps live (bytes)."""
    try:
        subprocess.run(["jcmd", str(pid), "GC.run"], capture_output=True, timeout=60, check=True)
        stat = subprocess.run(
            ["jstat", "-gc", str(pid)], capture_output=True, text=True, timeout=60, check=True
        )
    except (subprocess.SubprocessError, OSError):
        return None
    return parse_jstat_gc(stat.stdout)


def parse_jstat_gc(text: str) -> dict[str, int] | None:
    """``jstat -gc`` output (KB columns) as bytes: heap used (survivors, eden, old) and old gen used."""
    lines = [line.split() for line in text.strip().splitlines()]
    if len(lines) < 2:
        return None
    row = dict(zip(lines[0], lines[1], strict=False))
    try:
        kilobytes = {name: float(row[name]) for name in ("S0U", "S1U", "EU", "OU")}
    except (KeyError, ValueError):
        return None
    return {
        "heap_used_bytes": int(sum(kilobytes.values()) * 1024),
        "old_used_bytes": int(kilobytes["OU"] * 1024),
    }


_METRIC_LINE = re.compile(
    r'^(pipeline_state_rows|pipeline_state_memory_bytes)\{[^}]*query="([^"]+)"[^}]*\}\s+(\S+)'
)


def state_metrics(config: PipelineConfig) -> tuple[dict[str, dict[str, float]], dict[str, int]]:
    """Per query (``app.query``): state rows and state store memory, from the app's metrics endpoint;
    and per app, how many series the endpoint serves (its label sets: they must not grow with time)."""
    found: dict[str, dict[str, float]] = {}
    series: dict[str, int] = {}
    for app in registry.APPS.values():
        url = f"http://{config.metrics.host}:{app.metrics_port(config)}/metrics"
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                text = response.read().decode()
        except OSError:
            continue
        series[app.name] = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
        for line in text.splitlines():
            match = _METRIC_LINE.match(line)
            if match:
                name, query, value = match.groups()
                found.setdefault(query, {})[name.removeprefix("pipeline_")] = float(value)
    return found, series


# --------------------------------------------------------------------------- one slice


def sample_slice(
    config: PipelineConfig, timer: BatchTimer, since: float, until: float, nightly: bool
) -> dict[str, Any]:
    timer.poll()
    durations = timer.durations(since, until)
    queries: dict[str, Any] = {}
    state, metric_series = state_metrics(config)
    for app in registry.APPS.values():
        for query in app.queries:
            name = registry.spark_query_name(app.name, query.name)
            found = durations.get((app.name, query.name), [])
            checkpoint = Path(config.checkpoint_dir(app.name, query.name))
            _, state_bytes = folder_size(checkpoint / "state")
            files, size = folder_size(checkpoint)
            queries[name] = {
                **batch_figures(found, compacting_batch_ids(found) if query.sink else None),
                "committed_total": committed_count(checkpoint),
                "state_rows": state.get(name, {}).get("state_rows"),
                "state_memory_bytes": state.get(name, {}).get("state_memory_bytes"),
                "state_store_bytes": state_bytes,
                "checkpoint_files": files,
                "checkpoint_bytes": size,
            }
    drivers = {}
    for app, jvm in driver_jvms(config).items():
        drivers[app] = {
            "pid": jvm,
            "rss_bytes": resident_bytes(jvm),
            **(heap_after_gc(jvm) or {}),
            "metric_series": metric_series.get(app),
        }
    datasets = {}
    for dataset in file_sinks():
        folder = store.location(config.spark.extra_conf, dataset.location(config))
        files = data_files(folder) if folder.exists() else {}
        datasets[dataset.name] = {
            "files": len(files),
            "bytes": sum(size for size, _ in files.values()),
            "sink_log": sink_log_figures(folder),
        }
    batch_log_files, batch_log_bytes = folder_size(
        store.location(config.spark.extra_conf, config.data_path("batch_log"))
    )
    sample = {
        "until": until,
        "queries": queries,
        "drivers": drivers,
        "datasets": datasets,
        "batch_log": {"files": batch_log_files, "bytes": batch_log_bytes},
    }
    if nightly:
        sample["nightly_s"] = time_nightly(config)
    return sample


def committed_count(checkpoint: Path) -> int:
    """Batches the query has committed since it began: its newest commit's id + 1 (Spark keeps only the
    last ~100 entries, so counting them would stop at 100)."""
    return max(checkpoint_format.batch_ids(checkpoint / "commits"), default=-1) + 1


def time_nightly(config: PipelineConfig) -> float | None:
    """Seconds the nightly reconciliation of today takes (spark-submit, as the nightly DAG runs it)."""
    day = datetime.now(UTC).date().isoformat()
    started = time.monotonic()
    done = subprocess.run(
        [str(Path(sys.executable).parent / "pipelinectl"), "reconcile", "--date", day],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    seconds = time.monotonic() - started
    # Exit 0 is a reconciled day; 1 is a day with differences (today's are provisional): both timed.
    if done.returncode not in (0, 1):
        log(f"nightly reconciliation of {day} failed (exit {done.returncode}): {done.stderr[-2000:]}")
        return None
    return seconds


# --------------------------------------------------------------------------- trends


@dataclass
class Series:
    """One tracked figure over the slices: each slice's value against the committed batches of the query
    that drives it, and how many days of history retention keeps of it (None: all of it)."""

    values: list[tuple[float, float]] = field(default_factory=list)
    kept_days: float | None = None
    data: bool = False


def _sink_log_kept(spark_query: str, config: PipelineConfig) -> Duration | None:
    """How long the log of the file sink ``spark_query`` writes lists a file (None: no file sink)."""
    for app in registry.APPS.values():
        for query in app.queries:
            if query.sink is not None and registry.spark_query_name(app.name, query.name) == spark_query:
                return query.sink.sink_log_kept(config)
    return None


def _sink_query(dataset: str) -> str:
    for app in registry.APPS.values():
        for query in app.queries:
            if query.sink is not None and query.sink.name == dataset:
                return registry.spark_query_name(app.name, query.name)
    raise KeyError(dataset)


def figure_series(slices: Sequence[Mapping[str, Any]], config: PipelineConfig) -> dict[str, Series]:
    """Every tracked figure, slice by slice, under a readable name."""
    series: dict[str, Series] = {}

    def add(name: str, batches: float, value: float | None, kept: Any = None, data: bool = False) -> None:
        found = series.setdefault(
            name, Series(kept_days=None if kept is None else kept.seconds / 86400, data=data)
        )
        if value is not None:
            found.values.append((batches, value))

    for sample in slices:
        batches = {query: figures["committed_total"] for query, figures in sample["queries"].items()}
        overall = statistics.median(batches.values())
        for query, figures in sample["queries"].items():
            # A batch that rewrites its sink's log takes longer as the log grows: its log's retention
            # bounds it.
            listed = _sink_log_kept(query, config)
            for key in QUERY_FIGURES:
                if figures.get(key) is not None:
                    kept = listed if key == "compacting_p50_s" else None
                    add(f"{query} {key.replace('_', ' ')}", batches[query], figures[key], kept)
        for app, figures in sample["drivers"].items():
            first = registry.spark_query_name(app, registry.APPS[app].queries[0].name)
            for key in ("rss_bytes", "heap_used_bytes", "old_used_bytes", "metric_series"):
                add(f"{app} driver {key.replace('_', ' ')}", batches[first], figures.get(key))
        for dataset, figures in sample["datasets"].items():
            kept = registry.DATASETS[dataset].kept_for(config)
            # The sink's small files, and its log, last until their days are compacted and the log
            # forgets them (compaction.sink_log); the compacted days, a few files each, are not counted.
            listed = registry.DATASETS[dataset].sink_log_kept(config)
            done = batches[_sink_query(dataset)]
            add(f"{dataset} dataset files", done, figures["files"], listed, data=True)
            add(f"{dataset} dataset bytes", done, figures["bytes"], kept, data=True)
            for key, value in figures["sink_log"].items():
                # How long one read of the log takes grows with what it lists, which its retention bounds.
                add(f"{dataset} sink log {key.replace('_', ' ')}", done, value, listed)
        add("batch log files", overall, sample["batch_log"]["files"], config.retention.batch_log)
        add("batch log bytes", overall, sample["batch_log"]["bytes"], config.retention.batch_log)
        if sample.get("nightly_s") is not None:
            add("nightly job s", overall, sample["nightly_s"])
    return series


QUERY_FIGURES = (
    "p50_s",
    "p95_s",
    "compacting_p50_s",
    "state_rows",
    "state_memory_bytes",
    "state_store_bytes",
    "checkpoint_bytes",
    "checkpoint_files",
)


def slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Least-squares change of y per unit of x (0 for fewer than two points or no spread in x)."""
    if len(xs) < 2:
        return 0.0
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    if spread == 0:
        return 0.0
    return sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / spread


def trends(
    slices: Sequence[Mapping[str, Any]], config: PipelineConfig, batches_per_day: float, warmup: int = 0
) -> list[dict[str, Any]]:
    """Per figure: first and last value, change per batch of the query that drives it, projections to
    90 and 365 days of batches at ``batches_per_day`` (without retention, and with the configured one:
    what retention keeps stops growing at its age), and whether it grows with run time (data aside).
    The first ``warmup`` slices are left out: windows fill, state stores reach their working size and
    checkpoints their 100 retained batches there, which is not growth with run time."""
    found = []
    for name, figure in figure_series(slices[warmup:], config).items():
        if len(figure.values) < 2:
            continue
        xs, ys = [x for x, _ in figure.values], [y for _, y in figure.values]
        per_batch = slope(xs, ys)
        first, last = ys[0], ys[-1]
        growth = (last - first) / abs(first) if first else (math.inf if last > first else 0.0)

        grows = per_batch > 0 and growth > FLAT_SHARE
        # A flat or shrinking figure is projected as it stands; a growing one (or the data) along its fit.
        rate = per_batch if grows or figure.data else 0.0

        def at(days: float, xs: list[float] = xs, last: float = last, rate: float = rate) -> float:
            return max(0.0, last + rate * (days * batches_per_day - xs[-1]))

        trend: dict[str, Any] = {
            "figure": name,
            "first": first,
            "last": last,
            "per_batch": per_batch,
            "growth_share": growth,
            "kept_days": figure.kept_days,
            "data": figure.data,
            "grows": grows and not figure.data,
        }
        for days in PROJECTION_DAYS:
            trend[f"{days}d"] = at(days)
            kept = days if figure.kept_days is None else min(days, figure.kept_days)
            trend[f"{days}d_with_retention"] = at(kept)
        found.append(trend)
    return sorted(found, key=lambda trend: -trend["growth_share"] if trend["grows"] else math.inf)


# --------------------------------------------------------------------------- the run


def soak_overrides(trigger: str) -> list[str]:
    return [f"{app.settings_section}.trigger={trigger}" for app in registry.APPS.values()]


def run_benchmark(args: argparse.Namespace, interrupts: Interrupts) -> dict[str, Any]:
    started = time.monotonic()
    load_before = load_average()
    overrides = [*args.overrides, *soak_overrides(args.trigger)]
    default_config = load_config(args.env, list(args.overrides), conf_dir=args.conf_dir)
    default_trigger_s = registry.SENSOR_AGGREGATION.trigger_interval(default_config).seconds
    slices: list[dict[str, Any]] = []
    with private_stack(
        args.env, overrides, args.conf_dir, generator_rates=(args.rate, args.ad_rate)
    ) as config:
        log(f"stack up on data root {config.paths.data_root}; logs under {stack.stack_dir(config)}")
        checks = [lambda: check_components(config)]
        for app in registry.APP_NAMES:
            wait_for(
                lambda app=app: len(committed(config, app)) >= 1,
                START_TIMEOUT_S,
                f"{app} to commit a batch under Airflow",
                interrupts,
                checks,
            )
        timer = BatchTimer(config).start()
        try:
            origin = since = time.time()
            slices_wanted = math.ceil(args.minutes / args.slice_minutes)
            for index in range(slices_wanted):
                slice_end = since + args.slice_minutes * 60
                wait_for(
                    lambda end=slice_end: time.time() >= end,
                    args.slice_minutes * 60 + 60,
                    f"slice {index + 1}",
                    interrupts,
                    checks,
                )
                last = index == slices_wanted - 1
                sample = sample_slice(config, timer, since, slice_end, args.nightly and (index == 0 or last))
                sample["minute"] = round((slice_end - origin) / 60, 1)
                sample["sampled_s"] = round(time.time() - slice_end, 1)
                slices.append(sample)
                log(slice_line(index, sample))
                # The next slice starts once this one is sampled (a timed nightly takes minutes).
                since = time.time()
        finally:
            timer.stop()
    batches = [
        statistics.median(figures["committed_total"] for figures in sample["queries"].values())
        for sample in slices
    ]
    return {
        "benchmark": "soak",
        "trigger": args.trigger,
        "default_trigger_s": default_trigger_s,
        "rate": args.rate,
        "ad_rate": args.ad_rate,
        "slice_minutes": args.slice_minutes,
        "slices": slices,
        "batches": batches,
        "warmup_slices": args.warmup_slices,
        "trends": trends(slices, default_config, SECONDS_PER_DAY / default_trigger_s, args.warmup_slices),
        "overrides": list(args.overrides),
        "machine": machine_info(),
        "load_average": {"before": load_before, "after": load_average()},
        "seconds": time.monotonic() - started,
    }


def slice_line(index: int, sample: Mapping[str, Any]) -> str:
    archive = sample["datasets"][registry.ARCHIVE.name]
    tumbling = sample["queries"][registry.spark_query_name(registry.SENSOR_AGGREGATION.name, "tumbling")]
    return (
        f"slice {index + 1} (minute {sample['minute']:g}): tumbling p50 {tumbling['p50_s'] or 0:.2f}s, "
        f"archive {archive['files']} files, sink log {archive['sink_log']['listed_files']} entries "
        f"({archive['sink_log']['compact_bytes'] / 1e6:.1f} MB compact)"
        + (f", nightly {sample['nightly_s']:.0f}s" if sample.get("nightly_s") else "")
    )


# --------------------------------------------------------------------------- report


def _human(value: float | None, name: str) -> str:
    if value is None:
        return "-"
    if "bytes" in name:
        for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
            if abs(value) >= size:
                return f"{value / size:.1f} {unit}"
        return f"{value:.0f} B"
    if name.endswith((" s", "_s")):
        return f"{value / 86400:.1f} d" if value >= 86400 else f"{value:.2f} s"
    for unit, size, floor in (("G", 1e9, 1e9), ("M", 1e6, 1e6), ("k", 1e3, 1e4)):
        if abs(value) >= floor:
            return f"{value / size:.1f}{unit}"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def format_table(results: dict[str, Any]) -> str:
    slices = results["slices"]
    per_day = SECONDS_PER_DAY / results["default_trigger_s"]
    lines = [
        f"soak: {len(slices)} slice(s) of {results['slice_minutes']:g} min, trigger {results['trigger']}, "
        f"generator {results['rate']:g}/s sensor + {results['ad_rate']:g}/s ad; projections at the "
        f"configured trigger ({results['default_trigger_s']:g} s: {per_day:,.0f} "
        "batches a day)",
        f"trends fitted over the slices after the first {results.get('warmup_slices', 0)} (warm-up); "
        "committed batches (median over queries) at each slice's end: "
        + ", ".join(f"{batch:,.0f}" for batch in results["batches"]),
        "",
        f"{'figure':<58}{'first':>10}{'last':>10}{'90 days':>10}{'365 days':>10}{'kept':>7}"
        f"{'90 d kept':>11}{'365 d kept':>11}",
    ]
    for trend in results["trends"]:
        name = trend["figure"]
        mark = "  GROWS" if trend["grows"] else ("  (data)" if trend["data"] else "")
        kept = "all" if trend["kept_days"] is None else f"{trend['kept_days']:.0f} d"
        lines.append(
            f"{name:<58}{_human(trend['first'], name):>10}{_human(trend['last'], name):>10}"
            f"{_human(trend['90d'], name):>10}{_human(trend['365d'], name):>10}{kept:>7}"
            f"{_human(trend['90d_with_retention'], name):>11}"
            f"{_human(trend['365d_with_retention'], name):>11}{mark}"
        )
    growing = [trend for trend in results["trends"] if trend["grows"]]
    lines.append("")
    if growing:
        lines.append(
            "grows with run time (largest relative growth first): "
            + "; ".join(f"{t['figure']} +{t['growth_share']:.0%}" for t in growing[:8])
        )
    else:
        lines.append(f"nothing but the data grew by more than {FLAT_SHARE:.0%} over the run")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = benchmark_parser("stream_pipelines.devtools.benchmarks.soak", __doc__)
    parser.add_argument("--minutes", type=positive_float, default=60.0, help="length of the soak")
    parser.add_argument("--slice-minutes", type=positive_float, default=10.0, help="one sample per slice")
    parser.add_argument("--trigger", default="1 second", help="every app's trigger during the soak")
    parser.add_argument(
        "--warmup-slices", type=int, default=1, help="first slices left out of the trends (state filling up)"
    )
    parser.add_argument("--rate", type=positive_float, default=20.0, help="sensor readings per second")
    parser.add_argument("--ad-rate", type=positive_float, default=10.0, help="ad impressions per second")
    parser.add_argument(
        "--nightly",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="time the nightly reconciliation of today after the first and the last slice",
    )
    parser.add_argument(
        "--reproject",
        type=Path,
        default=None,
        metavar="RESULTS_JSON",
        help="run nothing: project a saved run's slices again under this config's retention and print it",
    )
    add_results_argument(parser, DEFAULT_OUT)
    add_config_arguments(parser)
    return parser


def reproject(path: Path, config: PipelineConfig) -> str:
    """A saved run's table, its trends fitted again under ``config`` (its retention and compaction)."""
    results = json.loads(path.read_text())
    per_day = SECONDS_PER_DAY / results["default_trigger_s"]
    results["trends"] = trends(results["slices"], config, per_day, results.get("warmup_slices", 1))
    return format_table(results)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.reproject is not None:
        print(reproject(args.reproject, load_config(args.env, list(args.overrides), conf_dir=args.conf_dir)))
        return 0
    if args.minutes / args.slice_minutes < args.warmup_slices + 2:
        raise SystemExit(
            f"--minutes {args.minutes:g} gives fewer than {args.warmup_slices + 2} slices of "
            f"{args.slice_minutes:g} min: a trend needs two slices after the {args.warmup_slices} "
            "warm-up one(s)"
        )
    if args.slice_minutes > args.minutes:
        raise SystemExit(
            f"--slice-minutes ({args.slice_minutes:g}) is longer than --minutes ({args.minutes:g})"
        )
    return run_and_report("bench-soak", args, run_benchmark, format_table)


if __name__ == "__main__":
    sys.exit(main())
