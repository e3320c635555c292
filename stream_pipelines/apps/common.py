"""Argument handling shared by every streaming app entry point (spark_apps/*.py)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from stream_pipelines.config import ConfigError, PipelineConfig, load_config
from stream_pipelines.runtime import TriggerMode

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from stream_pipelines.runtime import StreamSink

EXIT_BAD_CONFIG = 2


def app_argument_parser(app: str, description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=app, description=description)
    add_config_arguments(parser)
    parser.add_argument(
        "--trigger",
        choices=["processing", "available-now"],
        default="processing",
        help="processing: run continuously at the configured interval; "
        "available-now: process what is there now, then exit (backfills, tests)",
    )
    return parser


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--env", default=None, help="config environment: conf/<env>.yaml (default: local)")
    parser.add_argument("--conf-dir", default=None, help="folder holding <env>.yaml (default: conf/)")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config value, e.g. --set sensors.watermark='10 minutes' (repeatable)",
    )


def config_from_args(args: argparse.Namespace) -> PipelineConfig:
    return load_config(args.env, args.overrides, conf_dir=args.conf_dir)


def parse_app_args(
    app: str, description: str, argv: Sequence[str] | None
) -> tuple[PipelineConfig, TriggerMode]:
    """Config and trigger for an app; a bad config exits 2 with the message, never a stack trace."""
    args = app_argument_parser(app, description).parse_args(argv)
    try:
        return config_from_args(args), args.trigger
    except ConfigError as error:
        print(f"{app}: {error}", file=sys.stderr)
        raise SystemExit(EXIT_BAD_CONFIG) from None


def launch(
    app: str,
    description: str,
    argv: Sequence[str] | None,
    build_sinks: Callable[[SparkSession, PipelineConfig], list[StreamSink]],
) -> int:
    """An app's whole life: config, session, metrics exporter, queries until they end or are stopped."""
    from stream_pipelines.metrics import MetricsExporter
    from stream_pipelines.runtime import get_spark, run_streams

    config, trigger = parse_app_args(app, description, argv)
    spark = get_spark(config, app)
    exporter = MetricsExporter(config, app).start(spark)
    try:
        return run_streams(config, app, build_sinks(spark, config), trigger)
    finally:
        exporter.stop()
