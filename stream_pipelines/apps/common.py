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
    """An app's whole life: config, session, metrics exporter, batch log, queries until they end or stop."""
    from stream_pipelines.batch_log import BatchLogRecorder
    from stream_pipelines.checkpoint.inspect import CheckpointError, preflight, record_fingerprints
    from stream_pipelines.exit_codes import ExitCode
    from stream_pipelines.metrics import MetricsExporter
    from stream_pipelines.runtime import get_spark, run_streams

    config, trigger = parse_app_args(app, description, argv)
    try:
        # Before the session: a refused start costs no JVM, and the resume point lands in the log.
        print(preflight(config, app).describe(), file=sys.stderr, flush=True)
    except CheckpointError as error:
        print(f"{app}: {error}", file=sys.stderr, flush=True)
        return ExitCode.CHECKPOINT_REFUSED
    spark = get_spark(config, app)
    exporter = MetricsExporter(config, app).start(spark)
    batch_log = BatchLogRecorder(config, app)
    try:
        sinks = build_sinks(spark, config)
        # A new checkpoint remembers the settings that shape its state, for the preflight to compare.
        record_fingerprints(config, app)
        return run_streams(config, app, sinks, trigger, on_started=batch_log.start)
    finally:
        batch_log.stop()
        exporter.stop()
