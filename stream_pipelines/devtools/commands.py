"""The developer commands of ``pipelinectl``: the local broker, the event generator, the local stack and
the demo. ``pipelinectl`` adds them when this package is installed (a development checkout); the
package that ships to a cluster leaves the tooling out, and with it these commands.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path

from stream_pipelines.cli import UserFacingError
from stream_pipelines.core.config import PipelineConfig
from stream_pipelines.devtools.postgres import PostgresError
from stream_pipelines.kafka.clients import check_access


def register(command: Callable[..., argparse.ArgumentParser]) -> None:
    """Add the developer commands with pipelinectl's own ``command(name, handler, help)``."""
    broker = command("broker", _broker, "start, stop or show the local Kafka broker")
    broker.add_argument("action", choices=["start", "stop", "status"])

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
    produce.add_argument(
        "--no-clicks",
        action="store_true",
        help="nobody clicks: impressions only, so the ad matching's clicks input stands still",
    )
    produce.add_argument("--to", choices=["kafka", "files"], default="kafka")
    produce.add_argument("--out", default=None, help="folder for --to files (default: source.files_dir)")
    produce.add_argument("--realtime", action="store_true", help="pace sends to event time (live demos)")

    command("up", _up, "start the local stack: broker, Airflow, generator, Prometheus (make up)")
    command("down", _down, "stop everything `up` started, children included (make down)")
    command("demo", _demo, "the scripted end-to-end scenario that `make demo` runs")


def _broker(config: PipelineConfig, args: argparse.Namespace) -> int:
    from stream_pipelines.devtools.broker import BrokerError, LocalBroker
    from stream_pipelines.kafka.topics import ensure_topics
    from stream_pipelines.launching import jvm

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
        **({"click_through": 0.0, "stray_click_share": 0.0} if args.no_clicks else {}),
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


def local_servers_status(config: PipelineConfig) -> list[str]:
    """What `pipelinectl status` prints before the apps in a development checkout: the local servers."""
    from stream_pipelines.devtools import stack

    return stack.servers_status(config)


def _up(config: PipelineConfig, args: argparse.Namespace) -> int:
    from stream_pipelines.devtools import stack

    with _metadata_database_errors_said():
        return stack.up(config)


def _down(config: PipelineConfig, args: argparse.Namespace) -> int:
    from stream_pipelines.devtools import stack

    with _metadata_database_errors_said():
        return stack.down(config)


@contextlib.contextmanager
def _metadata_database_errors_said() -> Iterator[None]:
    """A PostgreSQL that will not start or stop is one line for the user, naming what it is."""
    try:
        yield
    except PostgresError as error:
        raise UserFacingError(f"Airflow's metadata database: {error}") from None


def _demo(config: PipelineConfig, args: argparse.Namespace) -> int:
    from stream_pipelines.devtools import demo

    return demo.main(args.overrides)
