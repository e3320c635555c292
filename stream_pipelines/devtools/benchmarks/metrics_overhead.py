"""Metrics overhead benchmark: the sensor app's throughput with the Prometheus exporter on and off.

One run starts a private broker and produces N sensor readings (the ingest benchmark's data: the
generator's payloads from 1,000 sensors, ~1% malformed). It then runs the sensor_aggregation app's
own queries (``build_sinks``: tumbling -> Parquet, sliding -> Kafka, quarantine -> Parquet) over all
N readings with an available-now trigger, alternately without and with the exporter (off, on, off,
on, ...), after unmeasured warm-up pairs. Every run starts from fresh checkpoints and output folders.

  off  the app as it runs with ``metrics.enabled=false``
  on   ``MetricsExporter(config, app).start(spark)`` on a free port, as the app's launcher does, and a
       scraper that GETs /metrics every second while the queries run, so the listener, the
       collection and the HTTP path are all paid for. That is Prometheus at 15 times its default
       scrape rate.

The ``DataFrame.observe`` metrics the app puts in its plans are there in both modes (the app always
observes; the switch only decides whether anything is listening), so they are not part of the
measured difference.

A run's rate is the rows its queries read divided by their summed ``triggerExecution`` (all three
queries read the same N rows, concurrently, on the same cores), which leaves out query start-up.
Overhead = 1 - median(on) / median(off); the goal is under 3%. The median of the per-pair overheads
(each "on" run against the "off" run just before it) is reported too: neighbours share the machine's
mood, so it is less exposed to slow drift in other load. Results: a table on stdout and JSON in
data/bench/metrics_overhead.json.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from http.client import HTTPException
from typing import TYPE_CHECKING, Any

from stream_pipelines.core import registry
from stream_pipelines.core.config import PROJECT_ROOT, PipelineConfig
from stream_pipelines.devtools.benchmarks.common import (
    BenchmarkError,
    Interrupts,
    Summary,
    add_results_argument,
    await_queries,
    batch_progress,
    benchmark_parser,
    isolated_run,
    load_average,
    log,
    machine_info,
    positive_float,
    positive_int,
    private_broker,
    run_and_report,
    stop_session,
)
from stream_pipelines.devtools.benchmarks.ingest import PARTITIONS, Dataset, produce_dataset

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

SENSOR_APP = "sensor_aggregation"
DEFAULT_OUT = PROJECT_ROOT / "data" / "bench" / "metrics_overhead.json"
DEFAULT_EVENTS = 300_000
DEFAULT_REPEATS = 3
GOAL = 0.03
OFF, ON = "off", "on"
SCRAPE_TIMEOUT_S = 5.0
SERVED_TIMEOUT_S = 30.0


@dataclass
class ScrapeStats:
    scrapes: int = 0
    failures: int = 0
    bytes_total: int = 0
    seconds_total: float = 0.0
    last_error: str | None = None


class Scraper:
    """GETs a metrics URL every ``interval_s`` on a thread of its own, as Prometheus would."""

    def __init__(self, url: str, interval_s: float) -> None:
        self.url = url
        self.interval_s = interval_s
        self.stats = ScrapeStats()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="metrics-scraper", daemon=True)

    def start(self) -> Scraper:
        self._thread.start()
        return self

    def stop(self) -> ScrapeStats:
        self._stop.set()
        self._thread.join(SCRAPE_TIMEOUT_S + self.interval_s)
        return self.stats

    def _run(self) -> None:
        # Prometheus keeps a fixed cadence whatever a scrape costs; so does this.
        next_at = time.monotonic()
        while not self._stop.is_set():
            self.scrape()
            next_at += self.interval_s
            self._stop.wait(max(next_at - time.monotonic(), 0.0))

    def scrape(self) -> None:
        started = time.perf_counter()
        try:
            body = fetch(self.url)
        except (OSError, HTTPException) as error:
            self.stats.failures += 1
            self.stats.last_error = str(error)
            return
        self.stats.scrapes += 1
        self.stats.bytes_total += len(body)
        self.stats.seconds_total += time.perf_counter() - started


def fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=SCRAPE_TIMEOUT_S) as response:
        return response.read().decode("utf-8", errors="replace")


@dataclass
class Run:
    mode: str
    index: int  # position in the whole sequence, warm-up included
    warmup: bool
    rows: int  # summed over the app's queries
    busy_seconds: float  # summed triggerExecution over the app's queries
    wall_seconds: float  # first start() to the end of the last query
    queries: dict[str, dict[str, Any]] = field(default_factory=dict)
    scrapes: dict[str, Any] | None = None

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.busy_seconds


# --------------------------------------------------------------------------- one run


def run_app(
    spark: SparkSession,
    config: PipelineConfig,
    dataset: Dataset,
    mode: str,
    index: int,
    warmup: bool,
    scrape_interval_s: float,
    interrupts: Interrupts,
) -> Run:
    from stream_pipelines.apps.sensor_aggregation import build_sinks
    from stream_pipelines.driver.runtime import start_sink
    from stream_pipelines.observability.metrics import MetricsExporter

    scrape_summary = None
    with isolated_run(config, f"{mode}-{index}") as run_config:
        sinks = build_sinks(spark, run_config)
        exporter = MetricsExporter(run_config, registry.app(SENSOR_APP)).start(spark) if mode == ON else None
        scraper = None
        try:
            if exporter is not None:
                if exporter.url is None:
                    raise BenchmarkError("the exporter did not start; is metrics.enabled false?")
                scraper = Scraper(exporter.url, scrape_interval_s).start()
            started = time.perf_counter()
            queries = [
                start_sink(run_config, registry.app(SENSOR_APP), sink, "available-now") for sink in sinks
            ]
            await_queries(queries, interrupts)
            wall = time.perf_counter() - started
            per_query = {str(query.name): query_summary(query, dataset) for query in queries}
            if exporter is not None and scraper is not None and exporter.url is not None:
                stats = scraper.stop()
                check_served(exporter.url, per_query)
                scrape_summary = {
                    "scrapes": stats.scrapes,
                    "failures": stats.failures,
                    "mean_bytes": stats.bytes_total / max(stats.scrapes, 1),
                    "mean_ms": 1000 * stats.seconds_total / max(stats.scrapes, 1),
                    "last_error": stats.last_error,
                }
                if stats.scrapes == 0:
                    raise BenchmarkError(f"no scrape of the exporter succeeded ({stats.last_error})")
        finally:
            if scraper is not None:
                scraper.stop()
            if exporter is not None:
                exporter.stop()
    return Run(
        mode=mode,
        index=index,
        warmup=warmup,
        rows=sum(entry["rows"] for entry in per_query.values()),
        busy_seconds=sum(entry["busy_seconds"] for entry in per_query.values()),
        wall_seconds=wall,
        queries=per_query,
        scrapes=scrape_summary,
    )


def query_summary(query: StreamingQuery, dataset: Dataset) -> dict[str, Any]:
    progress = batch_progress(query)
    rows = sum(int(update["numInputRows"]) for update in progress)
    # Also what catches a run that wrote into an earlier run's output folder and so skipped its work.
    if rows != dataset.events:
        raise BenchmarkError(f"{query.name} read {rows:,} rows, expected exactly {dataset.events:,}")
    return {
        "rows": rows,
        "busy_seconds": sum(int(update["durationMs"]["triggerExecution"]) for update in progress) / 1000,
        "batches": len(progress),
        "last_batch_id": int(progress[-1]["batchId"]),
    }


def check_served(url: str, queries: dict[str, dict[str, Any]]) -> None:
    """The "on" numbers only count if the exporter really served what the queries did.

    Listener events reach Python asynchronously, after the query may already have ended, so the last
    batch can take a moment to show; Prometheus would see it on its next scrape.
    """
    from prometheus_client.parser import text_string_to_metric_families

    deadline = time.monotonic() + SERVED_TIMEOUT_S
    while True:
        served = {
            sample.labels.get("query"): sample.value
            for family in text_string_to_metric_families(fetch(url))
            for sample in family.samples
            if sample.name == "pipeline_batch_id"
        }
        missing = [name for name, entry in queries.items() if served.get(name) != entry["last_batch_id"]]
        if not missing:
            return
        if time.monotonic() > deadline:
            name = missing[0]
            raise BenchmarkError(
                f"after {SERVED_TIMEOUT_S:g}s the exporter still serves batch {served.get(name)} for {name}; "
                f"the query ended with batch {queries[name]['last_batch_id']}"
            )
        time.sleep(0.2)


# --------------------------------------------------------------------------- orchestration


def run_benchmark(args: argparse.Namespace, interrupts: Interrupts) -> dict[str, Any]:
    from stream_pipelines.driver.runtime import get_spark

    # Taken before anything of ours runs, so it shows what else was keeping the machine busy.
    load_before = load_average()
    overrides = [
        f"kafka.topics.sensors.partitions={PARTITIONS}",
        *args.overrides,
        "kafka.starting_offsets=earliest",
        "metrics.enabled=true",
        # A free port: a developer's running app may hold the configured one.
        f"metrics.ports.{SENSOR_APP}=0",
    ]
    with private_broker(args.env, overrides, conf_dir=args.conf_dir, prefix="bench_metrics-") as config:
        log(f"private broker on {config.kafka.bootstrap_servers}, data under {config.paths.data_root}")
        log(f"producing {args.events:,} sensor readings to {config.kafka.topics.sensors.name} ...")
        dataset = produce_dataset(config, args.events, interrupts)
        interrupts.check()
        log(f"produced in {dataset.produce_seconds:.1f}s")

        spark = get_spark(config, "bench_metrics_overhead")
        interrupts.install()
        runs: list[Run] = []
        try:
            interrupts.check()
            # Every batch's progress is checked; Spark keeps only the last 100 by default.
            spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", "1000")
            plan = [(True, mode) for _ in range(args.warmup) for mode in (OFF, ON)]
            plan += [(False, mode) for _ in range(args.repeats) for mode in (OFF, ON)]
            for index, (warmup, mode) in enumerate(plan):
                name = f"{'warm-up' if warmup else 'run'} {index + 1}/{len(plan)} exporter {mode}"
                log(f"{name} ...")
                run = run_app(spark, config, dataset, mode, index, warmup, args.scrape_interval, interrupts)
                scraped = f", {run.scrapes['scrapes']} scrapes" if run.scrapes else ""
                log(f"{name}: {run.rows_per_s:,.0f} rows/s ({run.busy_seconds:.1f}s busy{scraped})")
                runs.append(run)
        finally:
            stop_session(spark)
        results = build_results(config, args, dataset, runs)
        results["load_average"] = {"before": load_before, "after": load_average()}
        return results


def build_results(
    config: PipelineConfig, args: argparse.Namespace, dataset: Dataset, runs: Sequence[Run]
) -> dict[str, Any]:
    measured = [run for run in runs if not run.warmup]
    modes: dict[str, dict[str, Any]] = {}
    for mode in (OFF, ON):
        mine = [run for run in measured if run.mode == mode]
        modes[mode] = {
            "rows_per_s": Summary.of(run.rows_per_s for run in mine).as_dict(),
            "busy_seconds": Summary.of(run.busy_seconds for run in mine).as_dict(),
            "wall_seconds": Summary.of(run.wall_seconds for run in mine).as_dict(),
        }
    off_median = modes[OFF]["rows_per_s"]["median"]
    on_median = modes[ON]["rows_per_s"]["median"]
    # Each "on" run against the "off" run right before it.
    pairs = [
        1 - after.rows_per_s / before.rows_per_s
        for before, after in zip(measured[::2], measured[1::2], strict=True)
        if before.mode == OFF and after.mode == ON
    ]
    off_rates = [run.rows_per_s for run in measured if run.mode == OFF]
    overhead = 1 - on_median / off_median
    scrapes = Counter[str]()
    for run in measured:
        if run.scrapes:
            scrapes.update({"scrapes": run.scrapes["scrapes"], "failures": run.scrapes["failures"]})
    return {
        "benchmark": "metrics_overhead",
        "machine": machine_info(),
        "settings": {
            "app": SENSOR_APP,
            "events": dataset.events,
            "repeats": args.repeats,
            "warmup_pairs": args.warmup,
            "scrape_interval_s": args.scrape_interval,
            "env": config.env,
            "topic": dataset.topic,
            "partitions": dataset.partitions,
            "spark_master": config.spark.master,
            "shuffle_partitions": config.spark.shuffle_partitions,
            "state_store": config.spark.state_store,
            "max_offsets_per_trigger": config.kafka.max_offsets_per_trigger,
            "overrides": list(args.overrides),
        },
        "dataset": asdict(dataset),
        "method": {
            "rows_per_s": "rows read by the app's queries / their summed durationMs.triggerExecution",
            "overhead": "1 - median rows/s with the exporter on / median rows/s with it off",
            "pairwise_overhead": "median over pairs of 1 - on/off, each on run against the off run before it",
            "order": "off, on, off, on, ...; warm-up pairs first, not in the summaries",
            "off": "no listener, no HTTP server (metrics.enabled=false); observe() stays in the plans",
            "on": f"MetricsExporter.start(spark) plus a GET of /metrics every {args.scrape_interval:g}s",
        },
        "modes": modes,
        "overhead": overhead,
        "pairwise_overhead": {"median": statistics.median(pairs), "values": pairs} if pairs else None,
        # How far apart runs of the same code land: an overhead inside this is not told from noise.
        "off_spread": (max(off_rates) - min(off_rates)) / off_median,
        "goal": GOAL,
        "within_goal": overhead < GOAL,
        "scrapes_total": dict(scrapes),
        "runs": [{**asdict(run), "rows_per_s": run.rows_per_s} for run in runs],
    }


def format_table(results: dict[str, Any]) -> str:
    settings, machine, modes = results["settings"], results["machine"], results["modes"]
    load = " / ".join(f"{value:.2f}" for value in results["load_average"]["before"]) or "unknown"
    load_after = " / ".join(f"{value:.2f}" for value in results["load_average"]["after"]) or "unknown"
    warmup = f" (+{settings['warmup_pairs']} warm-up pairs)" if settings["warmup_pairs"] else ""
    lines = [
        f"Metrics overhead: {settings['app']} over {settings['events']:,} sensor readings "
        f"({settings['partitions']} partitions), available-now, {settings['repeats']} runs per mode{warmup}, "
        "order off/on/off/on",
        f"Spark {machine['pyspark']} {settings['spark_master']}, {settings['shuffle_partitions']} shuffle "
        f"partitions, {settings['state_store']} state store; {machine['usable_cpus']} CPUs "
        f"({machine['cpu_model']}); load average before {load}, after {load_after}",
        "",
        f"{'exporter':<10}{'rows/s median':>15}{'min':>12}{'max':>12}{'busy s':>9}{'wall s':>9}",
    ]
    for mode, entry in modes.items():
        rate = entry["rows_per_s"]
        lines.append(
            f"{mode:<10}{rate['median']:>15,.0f}{rate['min']:>12,.0f}{rate['max']:>12,.0f}"
            f"{entry['busy_seconds']['median']:>9.1f}{entry['wall_seconds']['median']:>9.1f}"
        )
    verdict = "within" if results["within_goal"] else "NOT within"
    pairwise = results["pairwise_overhead"]
    scrapes = results["scrapes_total"]
    lines += [
        "",
        f"overhead (1 - on/off of the medians): {results['overhead']:+.1%}, {verdict} the "
        f"{results['goal']:.0%} goal",
        f"per-pair overheads: {', '.join(f'{value:+.1%}' for value in pairwise['values'])} "
        f"(median {pairwise['median']:+.1%})"
        if pairwise
        else "per-pair overheads: none",
        f"spread of the off runs (max - min) / median: {results['off_spread']:.1%}; an overhead "
        "smaller than that is not told apart from noise",
        f"scrapes while on: {scrapes.get('scrapes', 0)} ok, {scrapes.get('failures', 0)} failed "
        f"(every {settings['scrape_interval_s']:g}s)",
        "rows/s = rows read by the app's three queries / their summed triggerExecution; wall s = first "
        "start() to the end of the last query.",
    ]
    return "\n".join(lines)


# --------------------------------------------------------------------------- entry point


def build_parser() -> argparse.ArgumentParser:
    from stream_pipelines.core.config import add_config_arguments

    parser = benchmark_parser("stream_pipelines.devtools.benchmarks.metrics_overhead", __doc__)
    parser.add_argument(
        "--events", type=positive_int, default=DEFAULT_EVENTS, help="readings to produce (default: 300000)"
    )
    parser.add_argument(
        "--repeats", type=positive_int, default=DEFAULT_REPEATS, help="measured runs per mode (default: 3)"
    )
    parser.add_argument(
        "--warmup",
        type=int,
        choices=range(4),
        default=1,
        metavar="PAIRS",
        help="unmeasured off/on pairs first, to warm up the JVM (default: 1)",
    )
    parser.add_argument(
        "--scrape-interval",
        type=positive_float,
        default=1.0,
        metavar="SECONDS",
        help="how often the exporter is scraped while it is on (default: 1)",
    )
    add_results_argument(parser, DEFAULT_OUT)
    # --set can change Spark and Kafka settings; the broker, its ports and the data root are always private.
    add_config_arguments(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_and_report("bench-metrics", args, run_benchmark, format_table)


if __name__ == "__main__":
    sys.exit(main())
