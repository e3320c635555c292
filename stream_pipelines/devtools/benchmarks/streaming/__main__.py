"""The benchmark's entry point: ``python -m stream_pipelines.devtools.benchmarks.streaming``."""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stream_pipelines.devtools.benchmarks.common import (
    Interrupts,
    add_results_argument,
    benchmark_parser,
    derive_config,
    load_average,
    log,
    positive_float,
    positive_int,
    private_broker,
    run_main,
    stop_session,
    write_results,
)

if TYPE_CHECKING:
    pass
from stream_pipelines.devtools.benchmarks import streaming
from stream_pipelines.devtools.benchmarks.streaming.report import build_results, format_table, plot
from stream_pipelines.devtools.benchmarks.streaming.search import Search, search_sustained
from stream_pipelines.devtools.benchmarks.streaming.settings import (
    APPS,
    DEFAULT_OUT,
    DEFAULT_START_RATES,
    FULL,
    KNEE,
    NAIVE,
    NAIVE_OVERRIDES,
    PARTITIONS,
    QUICK,
    TUNED,
    Profile,
)
from stream_pipelines.devtools.benchmarks.streaming.state_delay import run_state_vs_delay

# --------------------------------------------------------------------------- orchestration


def run_benchmark(args: argparse.Namespace, interrupts: Interrupts) -> dict[str, Any]:
    from stream_pipelines.driver.runtime import get_spark

    load_before = load_average()
    profile = QUICK if args.quick else KNEE if args.knee else FULL
    profile = Profile(
        **{
            **asdict(profile),
            **({"measure_s": args.measure_seconds} if args.measure_seconds else {}),
            **({"search_s": args.search_seconds} if args.search_seconds else {}),
            **({"max_steps": args.max_steps} if args.max_steps else {}),
            **({"state_batch_s": args.state_batch_seconds} if args.state_batch_seconds else {}),
        }
    )
    triggers = (
        [f"{section}.trigger={profile.trigger}" for section in ("sensors", "ads")] if profile.trigger else []
    )
    overrides = [
        *(f"kafka.topics.{topic}.partitions={PARTITIONS}" for topic in ("sensors", "impressions", "clicks")),
        *triggers,
        *args.overrides,
        "metrics.enabled=false",
    ]
    started = time.monotonic()
    with private_broker(args.env, overrides, conf_dir=args.conf_dir, prefix="bench_streaming-") as config:
        log(f"private broker on {config.kafka.bootstrap_servers}, data under {config.paths.data_root}")
        spark = get_spark(config, "bench_streaming")
        interrupts.install()
        try:
            interrupts.check()
            spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", "1000")
            state = None
            if profile.state and not args.skip_state:
                state = run_state_vs_delay(spark, config, profile, args.state_keys, interrupts)
            load_config = derive_config(
                config, ["kafka.starting_offsets=latest", "kafka.max_offsets_per_trigger=null"]
            )
            variants = {
                TUNED: load_config,
                NAIVE: derive_config(load_config, list(NAIVE_OVERRIDES)),
            }
            searches: dict[str, dict[str, Search]] = defaultdict(dict)
            for app in args.apps:
                start_rate = args.start_rate.get(app, DEFAULT_START_RATES[app])
                tuned = search_sustained(spark, variants[TUNED], app, TUNED, start_rate, profile, interrupts)
                searches[app][TUNED] = tuned
                if not profile.naive:
                    continue
                # The naive variant starts where the tuned one ended, so both meet at that rate.
                shared = tuned.sustained.input_rate if tuned.sustained else start_rate
                searches[app][NAIVE] = search_sustained(
                    spark, variants[NAIVE], app, NAIVE, shared, profile, interrupts
                )
        finally:
            stop_session(spark)
        results = build_results(config, variants, args, profile, state, searches)
    results["seconds"] = time.monotonic() - started
    results["load_average"] = {"before": load_before, "after": load_average()}
    return results


# --------------------------------------------------------------------------- entry point


def start_rates(text: str) -> dict[str, float]:
    """``app=rate,app=rate``."""
    rates = {}
    for item in text.split(","):
        app, _, rate = item.partition("=")
        if app.strip() not in APPS:
            raise argparse.ArgumentTypeError(f"unknown app {app.strip()!r}; use {', '.join(APPS)}")
        rates[app.strip()] = positive_float(rate)
    return rates


def build_parser() -> argparse.ArgumentParser:
    from stream_pipelines.core.config import add_config_arguments

    parser = benchmark_parser("stream_pipelines.devtools.benchmarks.streaming", streaming.__doc__)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--quick",
        action="store_true",
        help="a smoke run of a few minutes: 5 s triggers, one rate step per variant, coarse state batches",
    )
    mode.add_argument(
        "--knee",
        action="store_true",
        help="find each app's knee: the tuned queries only, up to 14 rate steps within 30 min per app, "
        "no naive variant and no state replay",
    )
    parser.add_argument(
        "--apps", nargs="+", choices=APPS, default=list(APPS), help="apps to load (default: both)"
    )
    parser.add_argument(
        "--start-rate",
        type=start_rates,
        default={},
        metavar="APP=RATE,...",
        help="first rate per app, records/s (default: "
        + ", ".join(f"{app}={rate:g}" for app, rate in DEFAULT_START_RATES.items())
        + ")",
    )
    parser.add_argument(
        "--measure-seconds", type=positive_float, help="window per rate step (full: 30, quick: 10)"
    )
    parser.add_argument(
        "--search-seconds", type=positive_float, help="time budget per app and variant (full: 120, quick: 25)"
    )
    parser.add_argument(
        "--max-steps", type=positive_int, help="rate steps per app and variant (full: 4, quick: 1)"
    )
    parser.add_argument(
        "--state-keys", type=positive_int, default=50, help="sensors in the state replay (default: 50)"
    )
    parser.add_argument(
        "--state-batch-seconds",
        type=positive_int,
        help="event time per state batch; must divide the slide (full: 60, quick: 150)",
    )
    parser.add_argument("--skip-state", action="store_true", help="leave out the state-vs-delay replays")
    add_results_argument(parser, DEFAULT_OUT)
    parser.add_argument("--plot", type=Path, help="plot PNG (default: the JSON's path with .png)")
    # --set can change Spark and Kafka settings; the broker, its ports and the data root are always private.
    add_config_arguments(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    def finish(results: dict[str, Any]) -> int:
        print(format_table(results))
        out = write_results(args.out, results)
        picture = plot(results, args.plot or args.out.with_suffix(".png"))
        print(f"results: {out}, plot: {picture}")
        return 0

    return run_main("bench-streaming", lambda interrupts: run_benchmark(args, interrupts), finish)


if __name__ == "__main__":
    sys.exit(main())
