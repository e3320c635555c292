"""`make demo`: a scripted scenario on the embedded local default, with a summary of what happened.

It runs in its own data root (data/demo) against its own broker ports, so it never disturbs a
`make up` stack, and starts from scratch each time so that its numbers are reproducible.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from stream_pipelines.config import PROJECT_ROOT, PipelineConfig, load_config

DEMO_OVERRIDES = (
    f"paths.data_root={PROJECT_ROOT / 'data' / 'demo'}",
    "broker.port=9192",
    "broker.controller_port=9193",
    "kafka.bootstrap_servers=127.0.0.1:9192",
    "kafka.max_offsets_per_trigger=2000",
    "archive.trigger=2 seconds",
)


def say(message: str) -> None:
    print(f"==> {message}", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    overrides = [*DEMO_OVERRIDES, *(argv or [])]
    config = load_config("local", overrides)
    root = Path(config.project_path(config.paths.data_root))

    from stream_pipelines import generator
    from stream_pipelines.broker import LocalBroker, ensure_topics

    broker = LocalBroker(config)
    broker.stop()
    shutil.rmtree(root, ignore_errors=True)
    say(f"starting a fresh local Kafka broker (KRaft) on {broker.bootstrap}, data in {root}")
    broker.start()
    try:
        ensure_topics(config)
        spec = generator.ScenarioSpec(
            seed=42,
            duration_s=900,
            sensor_rate=20,
            ad_rate=10,
            mix=generator.DelayMix(burst_share=0.1),
            match_interval_s=config.ads.match_interval.seconds,
        )
        records = generator.generate(spec)
        say(f"producing {len(records)} events (15 minutes of event time, seed {spec.seed})")
        generator.produce_to_kafka(records, config.kafka.bootstrap_servers)
        summary = generator.summarize(records)
        for name, count in sorted(summary.items()):
            if name.startswith("kind:"):
                print(f"    {name[5:]:<28} {count:>7}")

        archive_rows = _run_raw_archive_with_a_crash(config, overrides)
        _report(config, records, archive_rows)
    finally:
        broker.stop()
    return 0


def _run_raw_archive_with_a_crash(config: PipelineConfig, overrides: list[str]) -> int:
    from stream_pipelines.submit import spark_submit_command, submit_environment

    checkpoint = Path(config.checkpoint_dir("raw_archive", "archive"))
    say("running raw_archive (spark-submit, continuous trigger) and killing it with kill -9 mid-batch")
    process = subprocess.Popen(
        spark_submit_command(config, "raw_archive", "processing", overrides),
        env=submit_environment(),
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    killed_batch = None
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and process.poll() is None:
        offsets = {int(p.name) for p in (checkpoint / "offsets").glob("[0-9]*")}
        commits = {int(p.name) for p in (checkpoint / "commits").glob("[0-9]*")}
        pending = offsets - commits
        if commits and pending:
            killed_batch = max(pending)
            os.killpg(process.pid, signal.SIGKILL)
            break
        time.sleep(0.02)
    process.wait()
    if killed_batch is None:
        raise SystemExit("demo: the archive app ended before a batch could be interrupted; see data/demo")
    print(f"    killed the driver during batch {killed_batch} (offsets logged, not committed)")

    say("restarting raw_archive from its checkpoint (available-now: drain, then exit)")
    started = time.monotonic()
    resumed = subprocess.run(
        spark_submit_command(config, "raw_archive", "available-now", overrides),
        env=submit_environment(),
        capture_output=True,
        text=True,
        check=False,
    )
    if resumed.returncode != 0:
        sys.stderr.write(resumed.stderr[-4000:])
        raise SystemExit(f"demo: raw_archive failed after the restart (exit {resumed.returncode})")
    print(f"    resumed at batch {killed_batch} and drained the topics in {time.monotonic() - started:.0f}s")
    return killed_batch


def _report(config: PipelineConfig, records: list, killed_batch: int) -> None:
    from pyspark.sql import functions as F

    from stream_pipelines.parsing import CLICK, IMPRESSION, SENSOR_READING, parse_events, quarantined_events
    from stream_pipelines.runtime import get_spark

    spark = get_spark(config, "demo-report")
    archive = spark.read.parquet(config.data_path("archive"))
    total = archive.count()
    distinct = archive.select("topic", "partition", "offset").distinct().count()
    say("what happened")
    print(f"    events produced                {len(records):>7}")
    print(f"    rows in the raw archive        {total:>7}  ({distinct} distinct Kafka coordinates)")
    print(f"    exactly once after kill -9     {'yes' if total == distinct == len(records) else 'NO'}")
    topics = config.kafka.topics
    for event_type, topic in (
        (SENSOR_READING, topics.sensors),
        (IMPRESSION, topics.impressions),
        (CLICK, topics.clicks),
    ):
        raw = archive.where(F.col("topic") == topic.name)
        bad = quarantined_events(parse_events(raw, event_type, config.quality), event_type)
        by_reason = {
            row["kind"]: row["count"]
            for row in bad.select(F.split("reason", ":")[0].alias("kind")).groupBy("kind").count().collect()
        }
        detail = ", ".join(f"{k}={v}" for k, v in sorted(by_reason.items())) or "none"
        print(f"    {topic.name:<14} quarantined    {sum(by_reason.values()):>7}  ({detail})")
    print(f"    archive                        {config.data_path('archive')}")
    print(f"    checkpoint                     {config.checkpoint_dir('raw_archive', 'archive')}")
    spark.stop()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
