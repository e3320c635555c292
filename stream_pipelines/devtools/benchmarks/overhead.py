"""Overhead benchmark: each app as deployed against the same queries run as a bare PySpark script.

One run starts a private broker and, per app, a producer sending about ``--rows`` records per trigger
(event time = now) for the whole run. Per app and repeat, two spark-submits, one after the other
against fresh checkpoints and outputs (starting at the topics' end), in alternating order:

  app   ``spark_apps/<app>.py`` exactly as the supervisor launches it: start checks, lease and its
        keeper, metrics exporter, batch log, the watch loop and in-driver recovery
  bare  ``bare_driver.py`` with the same Spark settings: the app's session and queries built by the
        same code, started, awaited; nothing else

For each: the cold start (spark-submit to the app's first query's commits/0), then, after ``--settle``
seconds, the CPU of the launcher and every process below it (JVM, Python driver, Python workers) over
``--window`` seconds, as CPU seconds per trigger. The app is then stopped by its stop marker and the
bare script by a signal; neither stop is timed. The table gives medians over the repeats and the
ratio app / bare beside the goal of the restart issue: at most 1.2 for both. Results: a table on
stdout and JSON in data/bench/overhead.json.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from stream_pipelines.core import registry
from stream_pipelines.core.config import PROJECT_ROOT, PipelineConfig, add_config_arguments
from stream_pipelines.core.registry import APP_NAMES, entry_point
from stream_pipelines.devtools.benchmarks.common import (
    BenchmarkError,
    Interrupts,
    add_results_argument,
    benchmark_parser,
    derive_config,
    load_average,
    log,
    machine_info,
    positive_float,
    positive_int,
    private_broker,
    run_and_report,
)
from stream_pipelines.devtools.benchmarks.startup import driver_overrides, first_batch
from stream_pipelines.devtools.benchmarks.streaming.load import PacedProducer
from stream_pipelines.devtools.processes import tree_cpu_seconds
from stream_pipelines.launching.submit import driver_args, spark_submit_command

DEFAULT_OUT = PROJECT_ROOT / "data" / "bench" / "overhead.json"
BARE_DRIVER = Path(__file__).with_name("bare_driver.py")
VARIANTS = ("app", "bare")
GOAL_RATIO = 1.2
FIGURES = ("cold_start_s", "cpu_s_per_trigger")
# Both variants start at the topics' end, so neither reads more history than the other.
VARIANT_OVERRIDES = ("kafka.starting_offsets=latest",)


def bare_command(
    app_command: Sequence[str], config: PipelineConfig, app: str, overrides: Sequence[str]
) -> list[str]:
    """The app's spark-submit command (``submit.spark_submit_command``) with the bare driver in place of
    the app's script: the same launcher, master and Spark settings, the same config for the driver."""

    script = entry_point(app)
    if script not in app_command:
        raise BenchmarkError(f"the app's command does not run {script}: {' '.join(app_command)}")
    at = list(app_command).index(script)
    return [*app_command[:at], str(BARE_DRIVER), "--app", app, *driver_args(config, (), overrides)]


def measure_variant(
    config: PipelineConfig,
    app: str,
    variant: str,
    overrides: Sequence[str],
    log_path: Path,
    args: argparse.Namespace,
    interrupts: Interrupts,
) -> dict[str, float]:
    """One start of ``variant``: its cold start, then its CPU per trigger once it has run ``--settle`` s."""

    command = spark_submit_command(config, registry.app(app), "processing", overrides)
    script = entry_point(app)
    if variant == "bare":
        command, script = bare_command(command, config, app, overrides), str(BARE_DRIVER)
    trigger_s = registry.APPS[app].trigger_interval(config).seconds
    with first_batch(
        config, app, command, script, log_path, interrupts, graceful=variant == "app"
    ) as started:
        cold_start_s = started.timeline.moments["first batch"] - started.timeline.launched
        started.run_for(args.settle)
        cpu_before, window_start = tree_cpu_seconds(started.launcher.pid), time.monotonic()
        started.run_for(args.window)
        cpu_s = tree_cpu_seconds(started.launcher.pid) - cpu_before
        window_s = time.monotonic() - window_start
    return {
        "cold_start_s": cold_start_s,
        "cpu_s": cpu_s,
        "window_s": window_s,
        "cpu_s_per_trigger": cpu_s * trigger_s / window_s,
    }


def run_benchmark(args: argparse.Namespace, interrupts: Interrupts) -> dict[str, Any]:
    apps = args.apps or list(APP_NAMES)
    runs: dict[str, dict[str, list[dict[str, float]]]] = {app: {v: [] for v in VARIANTS} for app in apps}
    with private_broker(args.env, args.overrides, conf_dir=args.conf_dir, prefix="bench-overhead-") as config:
        logs = args.out.parent / "overhead-logs"
        logs.mkdir(parents=True, exist_ok=True)
        for app in apps:
            trigger_s = registry.APPS[app].trigger_interval(config).seconds
            producer = PacedProducer(config, app).start()
            producer.set_rate(args.rows / trigger_s)
            try:
                for repeat in range(args.repeats):
                    # Alternating which goes first, so a drift of the machine favours neither.
                    order = VARIANTS if repeat % 2 == 0 else tuple(reversed(VARIANTS))
                    for variant in order:
                        run = f"{app}-{variant}-{repeat}"
                        overrides = [*args.overrides, *VARIANT_OVERRIDES, *driver_overrides(config, run)]
                        figures = measure_variant(
                            derive_config(config, overrides),
                            app,
                            variant,
                            overrides,
                            logs / f"{run}.log",
                            args,
                            interrupts,
                        )
                        producer.check()
                        log(
                            f"{app} {variant} {repeat + 1}: cold start {figures['cold_start_s']:.1f}s, "
                            f"{figures['cpu_s_per_trigger']:.2f} CPU s per trigger"
                        )
                        runs[app][variant].append(figures)
            finally:
                producer.close()
    return {
        "benchmark": "overhead",
        "goal_ratio": GOAL_RATIO,
        "repeats": args.repeats,
        "rows_per_batch": args.rows,
        "settle_s": args.settle,
        "window_s": args.window,
        "machine": machine_info(),
        "load_average_after": load_average(),
        "apps": {app: summarize(variants) for app, variants in runs.items()},
        "runs": runs,
    }


def summarize(variants: dict[str, list[dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Per figure: the median of each variant over the repeats and their ratio app / bare."""
    summary = {}
    for figure in FIGURES:
        medians = {
            variant: statistics.median(run[figure] for run in variants[variant]) for variant in VARIANTS
        }
        summary[figure] = {**medians, "ratio": medians["app"] / medians["bare"]}
    return summary


def format_table(results: dict[str, Any]) -> str:
    lines = [
        f"each app as deployed (app) against its queries alone (bare), medians of {results['repeats']} "
        f"start(s) each, ~{results['rows_per_batch']} rows per batch, CPU over {results['window_s']:.0f}s "
        f"after {results['settle_s']:.0f}s, on {results['machine'].get('usable_cpus', '?')} CPUs",
        f"{'app':<20}{'cold start s: app':>18}{'bare':>7}{'ratio':>7}"
        f"{'CPU s per trigger: app':>24}{'bare':>7}{'ratio':>7}{'goal':>8}",
    ]
    goal = f"<= {results['goal_ratio']}"
    for app, figures in results["apps"].items():
        start, cpu = figures["cold_start_s"], figures["cpu_s_per_trigger"]
        lines.append(
            f"{app:<20}{start['app']:>18.1f}{start['bare']:>7.1f}{start['ratio']:>7.2f}"
            f"{cpu['app']:>24.2f}{cpu['bare']:>7.2f}{cpu['ratio']:>7.2f}{goal:>8}"
        )
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = benchmark_parser("stream_pipelines.devtools.benchmarks.overhead", __doc__)
    parser.add_argument("--apps", nargs="+", choices=APP_NAMES, help="apps to measure (default: all)")
    parser.add_argument(
        "--repeats", type=positive_int, default=2, help="starts per app and variant (default: 2)"
    )
    parser.add_argument("--rows", type=positive_int, default=50, help="records per trigger (default: 50)")
    parser.add_argument(
        "--settle",
        type=positive_float,
        default=30.0,
        help="seconds after the first batch before the CPU window",
    )
    parser.add_argument(
        "--window", type=positive_float, default=60.0, help="seconds of CPU measured (default: 60)"
    )
    add_results_argument(parser, DEFAULT_OUT)
    add_config_arguments(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_and_report("bench-overhead", args, run_benchmark, format_table)


if __name__ == "__main__":
    sys.exit(main())
