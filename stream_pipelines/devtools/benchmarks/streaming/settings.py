"""What the streaming benchmark runs with: its constants, the load profile and small helpers."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from stream_pipelines.core.config import PROJECT_ROOT, PipelineConfig

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


DEFAULT_OUT = PROJECT_ROOT / "data" / "bench" / "streaming.json"
SENSOR_APP = "sensor_aggregation"
AD_APP = "ad_matching"
APPS = (SENSOR_APP, AD_APP)
TUNED, NAIVE = "tuned", "naive"
# What a tutorial leaves at Spark's defaults; the transforms themselves stay the same.
NAIVE_OVERRIDES = ("spark.shuffle_partitions=200", "spark.state_store=hdfs")
DELAYS_MINUTES = (1, 2, 5, 10)
PARTITIONS = 3
# Enough sensors and users that key hashing spreads the load over partitions and join keys.
SENSOR_COUNT = 1_000
USER_COUNT = 100_000
# A step passes while the p95 batch stays within the trigger; the search aims a little below.
AIM = 0.9
# The search stops once the highest pass and the lowest failure are this close (ratio - 1).
RESOLUTION = 0.15
# A passing step whose producer sent less than this share of the rate asked was held back by the
# producer (it shares the machine's cores with Spark), not by the app.
GENERATOR_SHORTFALL = 0.85
POLL_S = 0.5
MIN_WINDOW_BATCHES = 2
# Below this the search gives up on finding a passing rate.
MIN_RATE = 10.0
# Sleeping until each record is due costs a wake-up per record at these rates; sends go in bursts
# of this much time instead, which is nothing next to a 10 s trigger.
PACE_SLACK_S = 0.005
SEGMENT_S = 6 * 3600.0
SEED_BASE = 1_000


@dataclass(frozen=True)
class Profile:
    """How long each part runs: the full run (~10 min on 2 idle cores), a quick smoke run, or the knee
    (the tuned queries only, with the budget to bracket the highest sustained rate)."""

    name: str
    measure_s: float  # per rate step, after settling
    search_s: float  # per app and variant, start-up included
    max_steps: int
    state_batch_s: int  # event time per state batch (and per file)
    state_slides: int  # slides of steady state measured per delay
    trigger: str | None  # overrides the apps' triggers when set
    naive: bool = True  # also search the naive variant
    state: bool = True  # also replay state against watermark delay


FULL = Profile(
    "full", measure_s=30, search_s=120, max_steps=4, state_batch_s=60, state_slides=2, trigger=None
)
QUICK = Profile(
    "quick", measure_s=10, search_s=25, max_steps=1, state_batch_s=150, state_slides=1, trigger="5 seconds"
)
KNEE = Profile(
    "knee",
    measure_s=30,
    search_s=1800,
    max_steps=14,
    state_batch_s=60,
    state_slides=2,
    trigger=None,
    naive=False,
    state=False,
)
DEFAULT_START_RATES = {SENSOR_APP: 2_000.0, AD_APP: 1_000.0}
# The efficiency issue's goal for the sensor app: a sustained input rate of at least this, 10 s trigger.
GOAL_SUSTAINED = {SENSOR_APP: 20_000.0}


# --------------------------------------------------------------------------- small helpers


def percentile(values: Sequence[float], fraction: float) -> float:
    """Linear interpolation between the closest ranks (numpy's default); the max of one sample."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("no values")
    position = fraction * (len(ordered) - 1)
    lower = math.floor(position)
    upper = min(lower + 1, len(ordered) - 1)
    return ordered[lower] + (ordered[upper] - ordered[lower]) * (position - lower)


def trend(points: Sequence[tuple[float, float]]) -> float:
    """Least-squares slope of y over x; 0 for fewer than two distinct x."""
    if len(points) < 2:
        return 0.0
    mean_x = statistics.fmean(x for x, _ in points)
    mean_y = statistics.fmean(y for _, y in points)
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    if spread == 0:
        return 0.0
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / spread


def epoch_seconds(timestamp: str) -> float:
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


def offsets_by_partition(value: object) -> dict[tuple[str, int], int]:
    """A Kafka source's offsets as {(topic, partition): offset}; empty for other sources or none."""
    from stream_pipelines.driver.runtime import parse_offsets

    parsed = parse_offsets(value) if value not in (None, "None") else {}
    return {
        (topic, int(partition)): int(offset)
        for topic, partitions in parsed.items()
        if isinstance(partitions, dict)
        for partition, offset in partitions.items()
    }


def session_settings(spark: SparkSession, config: PipelineConfig) -> dict[str, str | None]:
    """Set the session's SQL settings to ``config``'s and return the previous values.

    Shuffle partitions and the state store provider are read when a query starts from a fresh
    checkpoint, so one session serves both variants.
    """
    from stream_pipelines.launching.spark_conf import spark_conf

    previous: dict[str, str | None] = {}
    for key, value in spark_conf(config).items():
        if key.startswith("spark.sql.") and spark.conf.get(key, None) != value:
            previous[key] = spark.conf.get(key, None)
            spark.conf.set(key, value)
    return previous


def restore_settings(spark: SparkSession, previous: dict[str, str | None]) -> None:
    for key, value in previous.items():
        if value is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, value)
