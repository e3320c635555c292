"""pipelinectl: the front door for what people do by hand.

    pipelinectl setup-jvm                      resolve the pinned JVM artifacts and build the drivers'
                                               class archive once (make setup does it)
    pipelinectl setup-web-assets               fetch the files Data Docs load, once (make setup does it)
    pipelinectl broker start|stop|status       the local single-node KRaft broker (+ topics on start)
    pipelinectl topics                         create the configured topics (idempotent) on any cluster
    pipelinectl produce ...                    generate events to Kafka or to JSON-lines files
    pipelinectl run APP [--trigger ...]        run a streaming app through spark-submit
    pipelinectl stop APP                       ask a running app to stop gracefully (drain, commit, exit 0)
    pipelinectl checkpoint inspect APP         the resume point and health of an app's checkpoints
    pipelinectl checkpoint reset APP --from committed|offsets|time [--query Q] [--offsets JSON]
                [--time ISO] --confirm APP     a new checkpoint from those offsets (state is lost)
    pipelinectl control APP ACTION             stop|start|restart|pause|resume, as the pipeline_control DAG
    pipelinectl reconcile --date D             the nightly reconciliation for event day D, without Airflow
    pipelinectl outputs sweep [--dry-run]      remove output files the sinks' logs do not list (debris)
    pipelinectl status | up | down             the local stack (make status / up / down)
    pipelinectl demo                           the scripted end-to-end scenario (make demo)

Every command takes --env, --conf-dir and --set KEY=VALUE like the apps do.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from datetime import UTC, date, datetime
from pathlib import Path

from stream_pipelines.config import PipelineConfig, add_config_arguments, config_or_report
from stream_pipelines.exit_codes import ExitCode
from stream_pipelines.kafka_clients import KafkaAccessRefused, check_access
from stream_pipelines.registry import APP_NAMES


def main(argv: Sequence[str] | None = None) -> int:
    parser = _build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return ExitCode.BAD_CONFIG
    config = config_or_report(args, "pipelinectl")
    if config is None:
        return ExitCode.BAD_CONFIG
    try:
        return int(args.handler(config, args) or 0)
    except UserFacingError as error:
        print(f"pipelinectl: {error}", file=sys.stderr)
        return 1
    except KafkaAccessRefused as error:
        print(f"pipelinectl: {error}", file=sys.stderr)
        return ExitCode.BAD_CONFIG


class UserFacingError(RuntimeError):
    pass


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pipelinectl", description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    commands = parser.add_subparsers(title="commands")

    def command(name: str, handler, help_text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text, description=help_text)
        add_config_arguments(sub)
        sub.set_defaults(handler=handler)
        return sub

    command(
        "setup-jvm",
        _setup_jvm,
        "check Java 17+, resolve the pinned JVM artifacts into .cache/jvm, build the drivers' class archive",
    )
    command(
        "setup-web-assets",
        _setup_web_assets,
        "fetch the pinned scripts and styles Data Docs load into .cache/web, so they open offline",
    )

    broker = command("broker", _broker, "start, stop or show the local Kafka broker")
    broker.add_argument("action", choices=["start", "stop", "status"])

    command("topics", _topics, "create the configured topics, or grow their partitions (idempotent)")

    produce = command("produce", _produce, "generate sensor and ad events to Kafka or JSON-lines files")
    produce.add_argument("--seed", type=int, default=7)
    produce.add_argument("--rate", type=float, default=20.0, help="sensor readings per second of event time")
    produce.add_argument("--ad-rate", type=float, default=10.0, help="impressions per second of event time")
    produce.add_argument("--duration", type=float, default=600.0, help="seconds of event time to generate")
    produce.add_argument("--sensors", type=int, default=50, help="number of distinct sensors")
    produce.add_argument("--users", type=int, default=500)
    produce.add_argument("--ads", type=int, default=20)
    produce.add_argument(
        "--start",
        default=None,
        help="event time of the first event: ISO-8601, or 'now' (default: fixed 2026-01-01)",
    )
    produce.add_argument("--late-share", type=float, default=None, help="share late but inside the watermark")
    produce.add_argument("--beyond-share", type=float, default=None, help="share later than the watermark")
    produce.add_argument(
        "--burst-share", type=float, default=None, help="share of sensors that go offline once"
    )
    produce.add_argument("--duplicate-share", type=float, default=None)
    produce.add_argument("--malformed-share", type=float, default=None)
    produce.add_argument(
        "--stall-partition", type=int, default=None, help="sensors partition that stops receiving"
    )
    produce.add_argument(
        "--stall-after", type=float, default=0.0, help="seconds into the scenario the stall begins"
    )
    produce.add_argument("--to", choices=["kafka", "files"], default="kafka")
    produce.add_argument("--out", default=None, help="folder for --to files (default: source.files_dir)")
    produce.add_argument("--realtime", action="store_true", help="pace sends to event time (live demos)")

    run = command("run", _run, "run a streaming app through spark-submit (Ctrl-C stops it gracefully)")
    run.add_argument("app", choices=APP_NAMES)
    run.add_argument("--trigger", choices=["processing", "available-now"], default="processing")

    stop = command("stop", _stop, "ask a running app to stop after its current batch")
    stop.add_argument("app", choices=APP_NAMES)

    checkpoint = command(
        "checkpoint",
        _checkpoint,
        "show an app's checkpoints and resume point, or reset them (asks to confirm)",
    )
    checkpoint_arguments(checkpoint)

    control = command("control", _control, "operator actions, as the pipeline_control DAG does them")
    control.add_argument("app", choices=APP_NAMES)
    control.add_argument("action", choices=["stop", "start", "restart", "pause", "resume"])
    control.add_argument("--reason", default="", help="recorded with the change")

    reconcile = command("reconcile", _reconcile, "reconcile event day D against the streams (spark-submit)")
    reconcile.add_argument("--date", required=True, type=date.fromisoformat, help="event day D (YYYY-MM-DD)")

    outputs = command(
        "outputs",
        _outputs,
        "remove the files in the streaming outputs that their sink's log does not list (debris of "
        "interrupted batches, which plain Parquet readers would count), once older than the grace period",
    )
    outputs.add_argument("action", choices=["sweep"])
    outputs.add_argument(
        "--grace", default=None, help="e.g. '6 hours' (default: maintenance.orphan_grace in the config)"
    )
    outputs.add_argument("--dry-run", action="store_true", help="report what would go; remove nothing")

    command("status", _status, "what runs: broker, Airflow, monitoring, and each app's state")
    command("up", _up, "start the local stack: broker, Airflow, generator, Prometheus (make up)")
    command("down", _down, "stop everything `up` started, children included (make down)")
    command("demo", _demo, "the scripted end-to-end scenario that `make demo` runs")
    return parser


# --------------------------------------------------------------------------- handlers


def _setup_jvm(config: PipelineConfig, args: argparse.Namespace) -> int:
    from stream_pipelines import class_archive_training, jvm

    try:
        print(f"java {jvm.check_java()} at {jvm.java_executable()}")
        for bundle in jvm.BUNDLES:
            folder = jvm.resolve(bundle)
            print(f"{bundle}: {len(jvm.jars(bundle))} jars in {folder}")
        # Progress goes to stderr: `make setup` keeps this command's stdout quiet, not a minute's wait.
        archive = class_archive_training.ensure(config, say=lambda line: print(line, file=sys.stderr))
    except (jvm.JvmSetupError, class_archive_training.ClassArchiveError) as error:
        raise UserFacingError(str(error)) from None
    print(f"class archive: {archive}" if archive else "class archive: off (spark.class_archive)")
    return 0


def _setup_web_assets(config: PipelineConfig, args: argparse.Namespace) -> int:
    from stream_pipelines import data_docs_assets

    try:
        folders = data_docs_assets.fetch_all()
    except data_docs_assets.WebAssetError as error:
        raise UserFacingError(str(error)) from None
    print(f"{len(folders)} web asset packages in {data_docs_assets.cache_root()}")
    return 0


def _broker(config: PipelineConfig, args: argparse.Namespace) -> int:
    from stream_pipelines import jvm
    from stream_pipelines.devtools.broker import BrokerError, LocalBroker
    from stream_pipelines.topics import ensure_topics

    if not config.broker.manage_local:
        raise UserFacingError(
            f"environment {config.env!r} sets broker.manage_local=false: its brokers are not ours"
        )
    broker = LocalBroker(config)
    try:
        if args.action == "start":
            print(broker.start().describe())
            for topic, outcome in ensure_topics(config).items():
                print(f"topic {topic}: {outcome}")
        elif args.action == "stop":
            print("broker: stopped" if broker.stop() else "broker: was not running")
        else:
            print(broker.status().describe())
    except (BrokerError, jvm.JvmSetupError) as error:
        raise UserFacingError(str(error)) from None
    return 0


def _topics(config: PipelineConfig, args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException

    from stream_pipelines.topics import ensure_topics

    try:
        for topic, outcome in ensure_topics(config).items():
            print(f"topic {topic}: {outcome}")
    except KafkaException as error:
        raise UserFacingError(
            f"could not manage topics on {config.kafka.bootstrap_servers}: {error}"
        ) from None
    return 0


def scenario_from_args(config: PipelineConfig, args: argparse.Namespace):
    """The generator's ScenarioSpec for `produce` options; topic names and partitions come from config."""
    import dataclasses

    from stream_pipelines.devtools import generator

    topics = config.kafka.topics
    mix_overrides = {
        name: value
        for name, value in {
            "late_within_share": args.late_share,
            "late_beyond_share": args.beyond_share,
            "burst_share": args.burst_share,
            "duplicate_share": args.duplicate_share,
            "malformed_share": args.malformed_share,
        }.items()
        if value is not None
    }
    mix = dataclasses.replace(generator.DelayMix(), **mix_overrides)
    spec_values = {
        "seed": args.seed,
        "duration_s": args.duration,
        "sensor_rate": args.rate,
        "ad_rate": args.ad_rate,
        "sensor_count": args.sensors,
        "ad_count": args.ads,
        "user_count": args.users,
        "mix": mix,
        "stalled_partition": args.stall_partition,
        "stall_after_s": args.stall_after,
        "match_interval_s": config.ads.match_interval.seconds,
        "topics": generator.TopicNames(topics.sensors.name, topics.impressions.name, topics.clicks.name),
        "partitions": generator.PartitionCounts(
            topics.sensors.partitions, topics.impressions.partitions, topics.clicks.partitions
        ),
    }
    if args.start:
        spec_values["start"] = (
            datetime.now(UTC).replace(microsecond=0)
            if args.start == "now"
            else datetime.fromisoformat(args.start.replace("Z", "+00:00")).astimezone(UTC)
        )
    spec = generator.ScenarioSpec(**spec_values)
    try:
        spec.mix.validate()
    except ValueError as error:
        raise UserFacingError(f"bad event mix: {error}") from None
    return spec


def _produce(config: PipelineConfig, args: argparse.Namespace) -> int:
    from stream_pipelines.devtools import generator

    spec = scenario_from_args(config, args)
    live = args.realtime and args.to == "kafka"
    if live:
        # Generated second by second as it is sent: generating a day first (10 s or more at the demo
        # rate) held back every event by that long, and with it every watermark.
        records: Iterable[generator.Record] = (
            record for chunk in generator.generate_chunks(spec, 1.0) for record in chunk
        )
        of_total, report_every_s = "", 60.0
        print(
            f"producing live from {spec.start.isoformat()} for {spec.duration_s:g}s of event time "
            f"({spec.sensor_rate:g} readings/s, {spec.ad_rate:g} impressions/s)",
            flush=True,
        )
    else:
        records = generator.generate(spec)
        summary = generator.summarize(records)
        print(
            f"generated {len(records)} records: " + ", ".join(f"{k}={v}" for k, v in sorted(summary.items()))
        )
        if args.to == "files":
            out = Path(args.out or config.project_path(config.source.files_dir))
            files = generator.write_jsonl(records, out)
            print(f"wrote {len(files)} files under {out}")
            return 0
        of_total, report_every_s = f"/{len(records)}", 0.0

    started = last_report = time.monotonic()

    def progress(sent: int) -> None:
        nonlocal last_report
        now = time.monotonic()
        if now - last_report >= report_every_s:
            rate = sent / max(now - started, 1e-6)
            print(f"  sent {sent}{of_total} ({rate:,.0f}/s)", file=sys.stderr, flush=True)
            last_report = now

    check_access(config)
    try:
        sent = generator.produce_to_kafka(
            records,
            config.kafka_client_config(),
            realtime=args.realtime,
            # A scenario stamped "now" is sent on the wall clock, whatever the time spent before.
            on_wall_clock=live and args.start == "now",
            progress=progress,
        )
    except RuntimeError as error:
        raise UserFacingError(str(error)) from None
    print(f"sent {sent} records to {config.kafka.bootstrap_servers} in {time.monotonic() - started:.1f}s")
    return 0


def _run(config: PipelineConfig, args: argparse.Namespace) -> int:
    from stream_pipelines.control import ControlStore
    from stream_pipelines.submit import spark_submit_command, submit_environment

    command = spark_submit_command(config, args.app, args.trigger, args.overrides)
    store = ControlStore(config)
    # A marker left from an earlier stop would end this run at once.
    store.clear_stop(args.app)
    store.mark_starting(args.app)
    marker = store.stop_marker(args.app)
    process = subprocess.Popen(command, env=submit_environment(), start_new_session=True)

    def request_stop(signum: int, _frame: object) -> None:
        # Ctrl-C or SIGTERM here means "stop after the batch in flight", never a kill mid-batch.
        if not marker.exists():
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.touch()
            print(f"\npipelinectl: stopping {args.app} after its current batch ...", file=sys.stderr)

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    return process.wait()


def _stop(config: PipelineConfig, args: argparse.Namespace) -> int:
    from stream_pipelines.control import apply_action

    print(apply_action(config, args.app, "stop", by="pipelinectl", reason="pipelinectl stop"))
    return 0


def _checkpoint(config: PipelineConfig, args: argparse.Namespace) -> int:
    if args.action == "inspect":
        return checkpoint_inspect(config, args.app, as_json=args.json)
    return checkpoint_reset(config, args.app, args)


def checkpoint_arguments(parser: argparse.ArgumentParser) -> None:
    """``checkpoint inspect|reset APP [...]`` arguments."""
    from stream_pipelines.checkpoint.reset import RESET_FROM

    parser.add_argument("action", choices=["inspect", "reset"])
    parser.add_argument("app", choices=APP_NAMES)
    parser.add_argument("--json", action="store_true", help="inspect: print the report as JSON")
    parser.add_argument("--query", default="all", help="reset: one query (sink name), or all (default)")
    parser.add_argument(
        "--from",
        dest="reset_from",
        choices=RESET_FROM,
        default=None,
        help="reset: committed = after the last committed batch; offsets = --offsets; time = --time",
    )
    parser.add_argument(
        "--offsets",
        default=None,
        metavar="JSON",
        help='reset --from offsets: {"topic": {"partition": offset}} (-2 earliest, -1 latest), or @file',
    )
    parser.add_argument(
        "--time",
        dest="reset_time",
        default=None,
        metavar="ISO",
        help="reset --from time: e.g. 2026-01-01T00:00Z",
    )
    parser.add_argument("--confirm", default=None, metavar="APP", help="reset: the app's name, to confirm")


def checkpoint_inspect(config: PipelineConfig, app: str, *, as_json: bool = False) -> int:
    """Print the report; exits as the launcher's preflight would (CHECKPOINT_REFUSED when it refuses)."""
    import json

    from stream_pipelines.checkpoint.inspect import inspect
    from stream_pipelines.exit_codes import ExitCode

    report = inspect(config, app)
    print(json.dumps(report.to_dict(), indent=2) if as_json else report.describe())
    return ExitCode.OK if report.ok else ExitCode.CHECKPOINT_REFUSED


def checkpoint_reset(config: PipelineConfig, app: str, args: argparse.Namespace) -> int:
    """Run a reset from parsed arguments; asks for the confirmation on a terminal when it is not given."""
    from stream_pipelines.checkpoint.inspect import CheckpointError
    from stream_pipelines.checkpoint.reset import parse_offsets_argument, parse_reset_time, reset
    from stream_pipelines.exit_codes import ExitCode

    confirm = args.confirm
    if confirm is None and sys.stdin is not None and sys.stdin.isatty():
        confirm = input(f"Resetting {app} ({args.query}) loses its state. Type {app} to confirm: ").strip()
    try:
        if args.reset_from is None:
            raise CheckpointError("reset needs --from committed, --from offsets or --from time")
        result = reset(
            config,
            app,
            args.query,
            from_=args.reset_from,
            offsets=parse_offsets_argument(args.offsets) if args.offsets else None,
            timestamp_ms=parse_reset_time(args.reset_time) if args.reset_time else None,
            confirm=confirm,
        )
    except CheckpointError as error:
        print(f"pipelinectl: {error}", file=sys.stderr)
        return ExitCode.FAILED
    print(result.describe())
    return ExitCode.OK


def _control(config: PipelineConfig, args: argparse.Namespace) -> int:
    from stream_pipelines.control import apply_action

    print(apply_action(config, args.app, args.action, by="pipelinectl", reason=args.reason))
    return 0


def _reconcile(config: PipelineConfig, args: argparse.Namespace) -> int:
    from stream_pipelines.submit import reconcile_submit_command, submit_environment

    command = reconcile_submit_command(config, args.date, args.overrides)
    return subprocess.run(command, env=submit_environment(), check=False).returncode


def _outputs(config: PipelineConfig, args: argparse.Namespace) -> int:
    from stream_pipelines import maintenance
    from stream_pipelines.config import Duration

    try:
        grace = Duration.parse(args.grace) if args.grace else config.maintenance.orphan_grace
    except ValueError as error:
        raise UserFacingError(f"--grace: {error}") from None
    outcome = maintenance.sweep_and_record(config, grace.seconds, dry_run=args.dry_run)
    for line in outcome.lines():
        print(line)
    return 0 if outcome.ok else 1


def _status(config: PipelineConfig, args: argparse.Namespace) -> int:
    from stream_pipelines.devtools import stack

    return stack.status(config)


def _up(config: PipelineConfig, args: argparse.Namespace) -> int:
    from stream_pipelines.devtools import stack

    return stack.up(config)


def _down(config: PipelineConfig, args: argparse.Namespace) -> int:
    from stream_pipelines.devtools import stack

    return stack.down(config)


def _demo(config: PipelineConfig, args: argparse.Namespace) -> int:
    from stream_pipelines.devtools import demo

    return demo.main(args.overrides)


if __name__ == "__main__":
    sys.exit(main())
