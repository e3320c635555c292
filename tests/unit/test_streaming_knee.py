"""The streaming benchmark's knee: the highest passing rate is the knee only when a failing rate above
it brackets it; otherwise the table says it is a lower bound. The goal stands beside the sensor app's."""

from __future__ import annotations

from stream_pipelines.devtools.benchmarks.streaming.report import knee, knee_line
from stream_pipelines.devtools.benchmarks.streaming.search import Search, Step, propose_rate
from stream_pipelines.devtools.benchmarks.streaming.settings import SENSOR_APP


def step(rate: float, passed: bool, p95_s: float = 5.0, asked: float | None = None) -> Step:
    return Step(
        target_rate=asked or rate,
        input_rate=rate,
        passed=passed,
        reason="ok" if passed else "p95 too long",
        restarted=False,
        window_s=30.0,
        p95_s=p95_s,
        load_generator_cores=0.3,
        queries={},
        load_average=[],
    )


def search(*steps: Step) -> Search:
    return Search(SENSOR_APP, "tuned", 10.0, list(steps), 900.0, [], [])


def test_a_failing_rate_above_the_best_pass_brackets_the_knee() -> None:
    # A failure below the best pass (noise) does not bracket it.
    found = knee(
        search(step(2000, True), step(1500, False), step(8000, False), step(4000, True), step(4600, False))
    )
    assert found["rate"] == 4000
    assert found["fails_at"] == 4600
    assert found["bracketed"]
    assert round(found["bracket"], 2) == 0.15
    line = knee_line(SENSOR_APP, {"knee": found, "seconds": 900.0})
    assert line.startswith(f"{SENSOR_APP} knee: sustains 4,000/s")
    assert line.endswith("goal >= 20,000/s")


def test_without_a_failure_above_it_the_best_pass_is_a_lower_bound() -> None:
    found = knee(search(step(2000, True), step(1500, False), step(4000, True)))
    assert not found["bracketed"]
    line = knee_line(SENSOR_APP, {"knee": found, "seconds": 120.0})
    assert "at least 4,000/s" in line and "a lower bound, not the knee" in line


def test_when_the_generator_falls_short_twice_the_search_stops_and_says_it_set_the_bound() -> None:
    # As measured: asked for 27,877/s, the in-process producer sent 17-21k/s, and every step passed.
    steps = [
        step(6421, True, asked=6830),
        step(19401, True, 6.8, asked=25683),
        step(21444, True, 6.3, asked=27877),
    ]
    assert propose_rate(steps, 10.0) is None
    found = knee(search(*steps))
    assert found["generator_bound"] and not found["bracketed"]
    line = knee_line(SENSOR_APP, {"knee": found, "seconds": 300.0})
    assert line.startswith(f"{SENSOR_APP}: at least 21,444/s (p95 6.3s)")
    assert "asked up to 27,877/s" in line and "a lower bound set by the generator, not the knee" in line


def test_one_short_step_or_a_failing_one_keeps_the_search_going() -> None:
    assert propose_rate([step(4000, True), step(7000, True, asked=9000)], 10.0) is not None
    assert propose_rate([step(7000, True, asked=9000), step(12000, False)], 10.0) is not None
    assert not knee(search(step(4000, True), step(7000, True, asked=9000)))["generator_bound"]
