"""The live generator `make up` runs (`pipelinectl produce --start now --realtime`), against the real
broker: an event stamped at a moment must reach Kafka at that moment, not after the rest of the
scenario has been generated. Events sent late by a constant push every watermark back by it, so the
tumbling output and the watermark-lag alert would both run that much behind wall-clock time."""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka import Consumer

from stream_pipelines.kafka.topics import ensure_topics
from tests.conftest import kill_processes_of, make_overrides_config, private_source_topics

# A day of events, as the stack's generator is started: generating all of it up front takes seconds.
SCENARIO_S = 86_400
RECORDS_TO_SEE = 20
SEE_WITHIN_S = 60.0
# On-time deliveries are stamped 0-5 s after their event time and sent at that stamp; what is measured
# is the send against the stamp, so anything beyond a second or two is the generator running behind.
MAX_MEDIAN_SEND_LAG_S = 2.0


def test_live_generator_sends_each_event_when_it_is_stamped(broker, make_overrides, tmp_path: Path) -> None:
    overrides = make_overrides(*private_source_topics())
    config = make_overrides_config(overrides)
    ensure_topics(config)
    consumer = Consumer(
        {
            **config.kafka_client_config(),
            "group.id": f"live-generator-{tmp_path.name}",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([config.kafka.topics.sensors.name])
    command = [
        sys.executable,
        "-m",
        "stream_pipelines.cli",
        "produce",
        "--start",
        "now",
        "--realtime",
        "--duration",
        str(SCENARIO_S),
        "--rate",
        "5",
        "--ad-rate",
        "2",
        "--seed",
        "3",
        *(argument for item in overrides for argument in ("--set", item)),
    ]
    generator = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lags: list[float] = []
    try:
        deadline = time.monotonic() + SEE_WITHIN_S
        while len(lags) < RECORDS_TO_SEE and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None or message.error():
                continue
            _kind, stamped_ms = message.timestamp()
            lags.append(time.time() - stamped_ms / 1000)
            assert generator.poll() is None, f"the generator exited early: {generator.stdout.read()}"
    finally:
        generator.terminate()
        output, _ = generator.communicate(timeout=30)
        consumer.close()
        kill_processes_of(tmp_path / "data")
    assert len(lags) == RECORDS_TO_SEE, f"saw {len(lags)} sensor readings in {SEE_WITHIN_S:.0f}s: {output}"
    assert statistics.median(lags) < MAX_MEDIAN_SEND_LAG_S, (
        f"sensor readings reached Kafka a median {statistics.median(lags):.1f}s after their stamp "
        f"(lags {[round(lag, 1) for lag in lags]})"
    )
