"""Rate steps and the search for the highest rate each app sustains."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from stream_pipelines.core import registry
from stream_pipelines.core.config import PipelineConfig
from stream_pipelines.devtools.benchmarks.common import (
    BenchmarkError,
    Interrupts,
    load_average,
    log,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

from stream_pipelines.devtools.benchmarks.streaming.load import (
    BrokerOffsets,
    LoadedApp,
    PacedProducer,
    StepFailed,
)
from stream_pipelines.devtools.benchmarks.streaming.settings import (
    AIM,
    GENERATOR_SHORTFALL,
    MIN_RATE,
    MIN_WINDOW_BATCHES,
    POLL_S,
    RESOLUTION,
    Profile,
    percentile,
    restore_settings,
    session_settings,
    trend,
)

# --------------------------------------------------------------------------- rate steps and the search


@dataclass
class QueryStep:
    batches: int
    p95_s: float | None
    max_s: float | None
    backlog_growth: float  # records over the window, from the trend
    backlog_last: float | None
    rows: int
    busy_s: float
    # Per batch in the window: start (seconds into the window), duration, rows read, backlog seen.
    detail: list[tuple[float, float, int, int | None]] = field(default_factory=list)
    state_operators: list[str] = field(default_factory=list)


@dataclass
class Step:
    target_rate: float
    input_rate: float  # measured on the broker over the window
    passed: bool
    reason: str
    restarted: bool
    window_s: float
    p95_s: float | None  # worst query
    load_generator_cores: float | None  # CPU the producer (this process) took during the window
    queries: dict[str, QueryStep]
    load_average: list[float]

    @property
    def rows_per_busy_s(self) -> float | None:
        """Rows per second of batch time over the app's queries; None unless every one had batches
        in the window (the cheap ones alone would flatter a variant whose stateful ones stalled)."""
        if not self.queries or any(q.batches == 0 for q in self.queries.values()):
            return None
        rows = sum(q.rows for q in self.queries.values())
        busy = sum(q.busy_s for q in self.queries.values())
        return rows / busy if busy > 0 else None


def run_step(
    app: LoadedApp,
    producer: PacedProducer,
    rate: float,
    trigger_s: float,
    measure_s: float,
    restart: bool,
    interrupts: Interrupts,
) -> Step:
    producer.set_rate(rate)
    if restart:
        app.restart(grace_s=trigger_s)
    changed = time.time()
    failure = None
    before = after = None
    cpu_before = cpu_after = 0.0
    window_start = window_end = changed
    try:
        # The first batch after a change still holds data from before it. After a restart the first
        # batch also pays for planning and cold caches, and the next one catches up on what arrived
        # meanwhile; the window starts once they are done.
        settled = app.settle(changed, 2 if restart else 1, timeout_s=max(6 * trigger_s, measure_s, 60.0))
        if not settled:
            log(f"{app.name}: still settling after the change; measuring anyway")
        window_start = max(time.time(), changed + trigger_s)
        app.watch_until(window_start)
        before = app.offsets.total()
        cpu_before = time.process_time()
        app.watch_until(window_start + measure_s)
        # Batches longer than the window would leave it empty; it stretches until every query has
        # a few, within a cap. A passing step has them long before.
        cap = window_start + max(3 * measure_s, measure_s + 60.0)
        while time.time() < cap and not app.finished_in(window_start, MIN_WINDOW_BATCHES):
            app.watch_until(time.time() + POLL_S)
        window_end = time.time()
        after = app.offsets.total()
        cpu_after = time.process_time()
        app.wait_for(app.running(), timeout_s=max(3 * trigger_s, 30.0))
    except StepFailed as error:
        failure = str(error)
    producer.check()
    interrupts.check()
    input_rate = rate
    load_cores = None
    if before is not None and after is not None and after[0] > before[0]:
        input_rate = (after[1] - before[1]) / (after[0] - before[0])
        # This process is the load: the producer thread, librdkafka's threads and the polling.
        load_cores = (cpu_after - cpu_before) / (after[0] - before[0])

    queries: dict[str, QueryStep] = {}
    for name in sorted({b.query for b in app.batches if b.run == app.run}):
        mine = [
            b
            for b in app.batches
            if b.query == name and b.run == app.run and window_start <= b.started < window_end
        ]
        durations = [b.duration_s for b in mine]
        backlog = [(b.seen_at, float(b.backlog)) for b in mine if b.backlog is not None]
        growth = trend(backlog) * (backlog[-1][0] - backlog[0][0]) if len(backlog) > 1 else 0.0
        queries[name] = QueryStep(
            batches=len(mine),
            p95_s=percentile(durations, 0.95) if durations else None,
            max_s=max(durations) if durations else None,
            backlog_growth=growth,
            backlog_last=backlog[-1][1] if backlog else None,
            rows=sum(b.rows for b in mine),
            busy_s=sum(durations),
            detail=[(round(b.started - window_start, 2), b.duration_s, b.rows, b.backlog) for b in mine],
            state_operators=sorted({operator for b in mine for operator in b.state}),
        )
    worst = max((q.p95_s for q in queries.values() if q.p95_s is not None), default=None)
    reasons = []
    if failure:
        reasons.append(failure)
    for name, query in queries.items():
        short = name.split(".", 1)[-1]
        if query.batches == 0:
            reasons.append(f"{short}: no batch finished in the {window_end - window_start:.0f}s window")
        elif query.p95_s is not None and query.p95_s > trigger_s:
            reasons.append(f"{short}: p95 {query.p95_s:.1f}s > {trigger_s:g}s")
        if query.backlog_growth > input_rate * trigger_s:
            reasons.append(f"{short}: backlog grew by {query.backlog_growth:,.0f}")
    if not queries:
        reasons.append("no batches")
    return Step(
        target_rate=rate,
        input_rate=input_rate,
        passed=not reasons,
        reason="; ".join(reasons) or "ok",
        restarted=restart,
        window_s=window_end - window_start,
        p95_s=worst,
        load_generator_cores=load_cores,
        queries=queries,
        load_average=load_average(),
    )


def generator_bound(steps: Sequence[Step]) -> bool:
    """Whether the last two steps passed with the load generator well short of the rates asked of it:
    then asking more measures the generator, not the app, and the best pass is its lower bound."""
    last = steps[-2:]
    return len(last) == 2 and all(
        step.passed and step.input_rate < GENERATOR_SHORTFALL * step.target_rate for step in last
    )


def propose_rate(steps: Sequence[Step], trigger_s: float) -> float | None:
    """The next rate to try, or None when the bracket is tight enough or the generator is the limit."""
    if generator_bound(steps):
        return None
    passed = [step.input_rate for step in steps if step.passed]
    failed = [step.input_rate for step in steps if not step.passed]
    low = max(passed, default=None)
    high = min(failed, default=None)
    if low is not None and high is not None and high <= low * (1 + RESOLUTION):
        return None
    if len(steps) >= 2 and not steps[-1].passed and not steps[-2].passed:
        (slower, faster) = sorted(steps[-2:], key=lambda step: step.input_rate)
        if (
            slower.p95_s is not None
            and faster.p95_s is not None
            and faster.input_rate > 1.5 * slower.input_rate
            and faster.p95_s < 1.25 * slower.p95_s
        ):
            # Batches barely got shorter at a much lower rate: their fixed cost alone is over the
            # trigger, and no rate passes.
            return None
    target = AIM * trigger_s
    points = sorted(
        {(step.input_rate, step.p95_s) for step in steps if step.p95_s is not None},
        key=lambda p: abs(p[1] - target),
    )
    last = steps[-1].input_rate
    guess = None
    if len(points) >= 2 and points[0][0] != points[1][0]:
        (r1, d1), (r2, d2) = points[:2]
        slope = (d2 - d1) / (r2 - r1)
        if slope > 0:
            guess = r1 + (target - d1) / slope
    if guess is None and points:
        rate, duration = points[0]
        # Batch time proportional to rate: optimistic, as it ignores the fixed cost of a batch.
        guess = rate * target / duration if duration > 0 else rate * 4
    if guess is None:
        guess = last / 2 if not steps[-1].passed else last * 2
    guess = min(max(guess, last / 4), last * 4)
    if (
        low is not None
        and high is not None
        and not low * (1 + RESOLUTION / 2) < guess < high / (1 + RESOLUTION / 2)
    ):
        guess = math.sqrt(low * high)
    elif low is not None and guess <= low * (1 + RESOLUTION):
        guess = low * (1 + 2 * RESOLUTION)
    elif high is not None and guess >= high / (1 + RESOLUTION):
        guess = high / (1 + 2 * RESOLUTION)
    return guess if guess >= MIN_RATE else None


@dataclass
class Search:
    app: str
    variant: str
    trigger_s: float
    steps: list[Step]
    seconds: float
    load_average_before: list[float]
    load_average_after: list[float]

    @property
    def sustained(self) -> Step | None:
        return max((step for step in self.steps if step.passed), key=lambda s: s.input_rate, default=None)

    @property
    def lowest_failure(self) -> Step | None:
        return min((step for step in self.steps if not step.passed), key=lambda s: s.input_rate, default=None)


def search_sustained(
    spark: SparkSession,
    config: PipelineConfig,
    app: str,
    variant: str,
    start_rate: float,
    profile: Profile,
    interrupts: Interrupts,
) -> Search:
    trigger_s = registry.app(app).trigger_interval(config).seconds
    started = time.monotonic()
    load_before = load_average()
    offsets = BrokerOffsets(config, app)
    producer = PacedProducer(config, app).start()
    loaded = LoadedApp(spark, config, app, f"{app}-{variant}", offsets, interrupts)
    previous = session_settings(spark, config)
    steps: list[Step] = []
    try:
        rate: float | None = start_rate
        # The first step starts the queries, and settles as long as after a restart.
        restart = True
        # A step takes its settling triggers, the window and about one batch to finish.
        step_s = profile.measure_s + 3 * trigger_s
        while rate is not None and len(steps) < profile.max_steps:
            if steps and time.monotonic() - started + step_s > profile.search_s:
                break
            log(f"{app} {variant}: {rate:,.0f} records/s for {profile.measure_s:g}s ...")
            step = run_step(loaded, producer, rate, trigger_s, profile.measure_s, restart, interrupts)
            steps.append(step)
            worst = "n/a" if step.p95_s is None else f"{step.p95_s:.1f}s"
            log(
                f"{app} {variant}: {step.input_rate:,.0f} records/s in: p95 batch {worst} -> "
                f"{'pass' if step.passed else 'FAIL'} ({step.reason})"
            )
            # A failed step leaves a backlog (or a long batch) behind; start the next from scratch.
            restart = not step.passed
            rate = propose_rate(steps, trigger_s)
    finally:
        producer.close()
        try:
            loaded.stop(grace_s=trigger_s)
        finally:
            offsets.close()
            restore_settings(spark, previous)
    producer.check()
    check_settings_took_hold(config, app, variant, steps)
    return Search(
        app=app,
        variant=variant,
        trigger_s=trigger_s,
        steps=steps,
        seconds=time.monotonic() - started,
        load_average_before=load_before,
        load_average_after=load_average(),
    )


def check_settings_took_hold(config: PipelineConfig, app: str, variant: str, steps: Sequence[Step]) -> None:
    """The variants differ only in session settings; make sure the queries really ran with them."""
    expected = f"/{config.spark.state_store}/{config.spark.shuffle_partitions}"
    seen = {
        operator for step in steps for query in step.queries.values() for operator in query.state_operators
    }
    wrong = sorted(operator for operator in seen if not operator.endswith(expected))
    if wrong:
        raise BenchmarkError(f"{app} {variant}: state operators ran as {wrong}, expected *{expected}")
