"""Per-batch fixed cost: what a micro-batch costs each app's queries at ~1, 50, 500 and 5,000 rows.

One run starts a private broker and one Spark session (local mode: the driver JVM is also the
executor). Per app, its own queries (``build_sinks``, every sink as deployed, metrics exporter off)
run with their configured processing-time trigger while a background thread produces generator
records (event time = now) at ``size / trigger`` records per second, so each batch carries about
``size`` rows. After each size change the queries finish ``--warmup`` batches, then ``--batches``
batches per query are measured:

  per query   median ``durationMs`` parts as Spark reports them (triggerExecution and its addBatch,
              queryPlanning, latestOffset, walCommit, commitOffsets, ...), and the median rows;
  per app     CPU seconds per batch of the JVM and the Python workers under it (user + system from
              /proc, over the measured window, divided by the batches each query ran), and the cores
              that works out to at that trigger.

Each size's figures say how long the driver JVM had run when they were taken: the same batch costs
less the longer it runs, because the driver's per-batch code (planning each query, scheduling,
committing state) runs a few times a trigger and the JIT compiles it over many minutes. A size given
more than once (``--sizes 50 50 50 50``) measures that curve.

The slowest query's median triggerExecution is the app's batch time: its queries run side by side
on the same trigger, so a batch of the app is done when its slowest query is. The goal beside the
sensor app's ~50-row figure is the efficiency issue's: at most 1 s. The producer runs in this
Python process, which is not counted. Results: a table on stdout and JSON in data/bench/batch_cost.json.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

from stream_pipelines.core import registry
from stream_pipelines.core.config import PROJECT_ROOT, PipelineConfig
from stream_pipelines.core.procfs import process_age_s
from stream_pipelines.devtools.benchmarks.common import (
    BenchmarkError,
    Interrupts,
    add_results_argument,
    benchmark_parser,
    load_average,
    log,
    machine_info,
    own_spark_jvm_or_fail,
    positive_int,
    private_broker,
    run_and_report,
    stop_session,
)
from stream_pipelines.devtools.benchmarks.streaming.load import (
    Batch,
    BrokerOffsets,
    LoadedApp,
    PacedProducer,
    unknown_queries,
)
from stream_pipelines.devtools.processes import tree_cpu_seconds

DEFAULT_OUT = PROJECT_ROOT / "data" / "bench" / "batch_cost.json"
SIZES = (1, 50, 500, 5_000)
GOAL_APP, GOAL_SIZE, GOAL_BATCH_S = registry.SENSOR_AGGREGATION.name, 50, 1.0
# The parts of durationMs shown in the table; the JSON keeps every part Spark reports.
SHOWN_PARTS = ("triggerExecution", "addBatch", "queryPlanning", "latestOffset", "walCommit", "commitOffsets")
BENCH_OVERRIDES = (
    "metrics.enabled=false",
    "kafka.starting_offsets=latest",
    # The cap would only bind above rate x trigger; the benchmark sizes batches by the rate instead.
    "kafka.max_offsets_per_trigger=null",
)


def median_parts(batches: Sequence[Batch]) -> dict[str, float]:
    parts = sorted({part for batch in batches for part in batch.durations})
    return {
        part: statistics.median(batch.durations.get(part, 0) for batch in batches) / 1000 for part in parts
    }


def measure_size(
    loaded: LoadedApp,
    producer: PacedProducer,
    size: int,
    trigger_s: float,
    jvm: int,
    args: argparse.Namespace,
) -> dict[str, Any]:
    """Batches of about ``size`` rows: their durationMs parts per query and the app's CPU per batch."""
    producer.set_rate(size / trigger_s)
    wait_s = trigger_s * (args.warmup + args.batches + 2) + 120
    # Batches that started before the new rate carry the old size; wait them out.
    late = f"{loaded.app}: too few batches within {wait_s:.0f}s at {size} rows per batch"
    if not loaded.settle(time.time(), args.warmup, wait_s):
        raise BenchmarkError(late)
    producer.check()
    window_start, cpu_start, jvm_age_s = time.time(), tree_cpu_seconds(jvm), process_age_s(jvm)
    if not loaded.settle(window_start, args.batches, wait_s):
        raise BenchmarkError(late)
    window_s, cpu_s = time.time() - window_start, tree_cpu_seconds(jvm) - cpu_start
    producer.check()
    queries = {}
    for query in loaded.queries:
        batches = loaded.seen(str(query.name), window_start)
        queries[str(query.name)] = {
            "batches": len(batches),
            "rows_median": statistics.median(batch.rows for batch in batches),
            "seconds_median": median_parts(batches),
        }
    batches_per_query = statistics.mean(query["batches"] for query in queries.values())
    return {
        "size": size,
        # The same batch costs less the longer the JVM runs (its JIT), so each figure says when it was taken.
        "jvm_age_s": jvm_age_s,
        "queries": queries,
        "app_batch_s": max(query["seconds_median"]["triggerExecution"] for query in queries.values()),
        "window_s": window_s,
        "cpu_s": cpu_s,
        "cpu_s_per_batch": cpu_s / batches_per_query,
        "cores": cpu_s / window_s,
    }


def measure_app(
    spark: Any, config: PipelineConfig, app: str, jvm: int, args: argparse.Namespace, interrupts: Interrupts
) -> dict[str, Any]:
    trigger_s = registry.APPS[app].trigger_interval(config).seconds
    offsets = BrokerOffsets(config, app)
    producer = PacedProducer(config, app).start()
    loaded = LoadedApp(spark, config, app, f"batch-cost-{app}", offsets, interrupts, only=args.queries)
    sizes = []
    try:
        loaded.start()
        for size in args.sizes:
            log(f"{app}: batches of ~{size} rows")
            sizes.append(measure_size(loaded, producer, size, trigger_s, jvm, args))
            interrupts.check()
            shown = sizes[-1]
            log(
                f"{app} ~{size} rows: slowest query {shown['app_batch_s']:.2f}s per batch, "
                f"{shown['cpu_s_per_batch']:.2f} CPU s per batch"
            )
    finally:
        producer.close()
        loaded.stop()
        offsets.close()
    return {"trigger_s": trigger_s, "sizes": sizes}


def run_benchmark(args: argparse.Namespace, interrupts: Interrupts) -> dict[str, Any]:
    from stream_pipelines.driver.runtime import get_spark

    started = time.monotonic()
    overrides = [*BENCH_OVERRIDES, *args.overrides]
    with private_broker(args.env, overrides, conf_dir=args.conf_dir, prefix="bench_batch_cost-") as config:
        log(f"private broker on {config.kafka.bootstrap_servers}, data under {config.paths.data_root}")
        spark = get_spark(config, "bench_batch_cost")
        interrupts.install()
        try:
            spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", "1000")
            jvm = own_spark_jvm_or_fail()
            apps = {app: measure_app(spark, config, app, jvm, args, interrupts) for app in args.apps}
        finally:
            stop_session(spark)
    return {
        "benchmark": "batch_cost",
        "goal": {"app": GOAL_APP, "size": GOAL_SIZE, "app_batch_s": GOAL_BATCH_S},
        "warmup": args.warmup,
        "batches": args.batches,
        "queries": args.queries or "all",
        "overrides": overrides,
        "machine": machine_info(),
        "load_average_after": load_average(),
        "seconds": time.monotonic() - started,
        "apps": apps,
    }


def format_table(results: dict[str, Any]) -> str:
    only = results.get("queries", "all")
    lines = [
        f"per-batch cost, median of {results['batches']} batches per query after {results['warmup']} "
        f"warm-up, on {results['machine'].get('usable_cpus', '?')} CPUs (seconds)"
        + ("" if only == "all" else f"; only the queries {', '.join(only)}, so no goal is shown"),
        f"{'app / query':<34}{'rows':>7}" + "".join(f"{part:>17}" for part in SHOWN_PARTS) + f"{'goal':>8}",
    ]
    goal = results["goal"]
    for app, measured in results["apps"].items():
        for size in measured["sizes"]:
            # The goal is for a batch of all the app's queries.
            is_goal = only == "all" and (app, size["size"]) == (goal["app"], goal["size"])
            target = f"<= {goal['app_batch_s']:g}" if is_goal else ""
            lines.append(
                f"{app + ' ~' + str(size['size']) + ' rows':<34}{'':>7}{size['app_batch_s']:>17.2f}"
                f"{'':>{17 * (len(SHOWN_PARTS) - 1)}}{target:>8}"
            )
            for query, figures in size["queries"].items():
                seconds = figures["seconds_median"]
                lines.append(
                    f"{'  ' + query:<34}{figures['rows_median']:>7.0f}"
                    + "".join(f"{seconds.get(part, 0.0):>17.2f}" for part in SHOWN_PARTS)
                )
            lines.append(
                f"{'  CPU per batch (JVM + workers)':<34}{'':>7}{size['cpu_s_per_batch']:>17.2f}"
                f"   = {size['cores']:.2f} cores at a {measured['trigger_s']:g}s trigger"
                + jvm_age_text(size.get("jvm_age_s"))
            )
    return "\n".join(lines)


def jvm_age_text(seconds: float | None) -> str:
    return "" if seconds is None else f", JVM up {seconds / 60:.1f} min"


def build_parser() -> argparse.ArgumentParser:
    from stream_pipelines.core.config import add_config_arguments

    parser = benchmark_parser("stream_pipelines.devtools.benchmarks.batch_cost", __doc__)
    parser.add_argument(
        "--apps",
        nargs="+",
        choices=sorted(registry.APPS),
        default=[registry.SENSOR_AGGREGATION.name, registry.AD_MATCHING.name, registry.RAW_ARCHIVE.name],
        help="apps to measure, one after another (default: all)",
    )
    parser.add_argument(
        "--sizes",
        nargs="+",
        type=positive_int,
        default=list(SIZES),
        help="rows per batch (default: 1 50 500 5000)",
    )
    parser.add_argument(
        "--queries",
        nargs="+",
        default=[],
        metavar="QUERY",
        help="run only these of the app's queries, to see what each costs (one app only; default: all)",
    )
    parser.add_argument("--warmup", type=positive_int, default=2, help="batches skipped after a size change")
    parser.add_argument("--batches", type=positive_int, default=4, help="batches measured per query and size")
    add_results_argument(parser, DEFAULT_OUT)
    add_config_arguments(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.queries:
        if len(args.apps) != 1:
            parser.error("--queries needs exactly one app in --apps")
        if problem := unknown_queries(args.apps[0], args.queries):
            parser.error(problem)
    return run_and_report("bench-batch-cost", args, run_benchmark, format_table)


if __name__ == "__main__":
    sys.exit(main())
