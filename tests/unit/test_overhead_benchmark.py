"""The overhead benchmark's two variants and its arithmetic: the bare driver is launched exactly as the
app is, only the script differs; medians per variant, the ratio app / bare, the goal beside each."""

from __future__ import annotations

import pytest

from stream_pipelines.core.config import load_config
from stream_pipelines.core.registry import app as declared_app
from stream_pipelines.core.registry import entry_point
from stream_pipelines.devtools.benchmarks.common import BenchmarkError
from stream_pipelines.devtools.benchmarks.overhead import (
    BARE_DRIVER,
    bare_command,
    format_table,
    summarize,
)
from stream_pipelines.launching.submit import spark_submit_command

OVERRIDES = ("kafka.starting_offsets=latest", "paths.checkpoints=runs/x/checkpoints")


def test_the_bare_driver_gets_the_apps_launcher_and_spark_settings_and_the_same_config() -> None:
    config = load_config("local", OVERRIDES, environ={})
    app_command = spark_submit_command(config, declared_app("sensor_aggregation"), "processing", OVERRIDES)
    command = bare_command(app_command, config, "sensor_aggregation", OVERRIDES)

    at = app_command.index(entry_point("sensor_aggregation"))
    assert command[:at] == app_command[:at]
    assert command[at:] == [
        str(BARE_DRIVER),
        "--app",
        "sensor_aggregation",
        "--env",
        "local",
        "--conf-dir",
        str(config.conf_dir),
        *[argument for override in OVERRIDES for argument in ("--set", override)],
    ]
    assert BARE_DRIVER.exists()


def test_a_command_that_does_not_run_the_app_is_refused() -> None:
    config = load_config("local", (), environ={})
    with pytest.raises(BenchmarkError, match="does not run"):
        bare_command(["spark-submit", "other.py"], config, "raw_archive", ())


def test_medians_per_variant_and_their_ratio() -> None:
    def run(start: float, cpu: float) -> dict[str, float]:
        return {"cold_start_s": start, "cpu_s_per_trigger": cpu}

    summary = summarize({"app": [run(20.0, 2.0), run(30.0, 4.0)], "bare": [run(10.0, 2.0), run(30.0, 2.0)]})
    assert summary["cold_start_s"] == {"app": 25.0, "bare": 20.0, "ratio": 1.25}
    assert summary["cpu_s_per_trigger"] == {"app": 3.0, "bare": 2.0, "ratio": 1.5}

    table = format_table(
        {
            "repeats": 2,
            "rows_per_batch": 50,
            "window_s": 60.0,
            "settle_s": 30.0,
            "machine": {"usable_cpus": 2},
            "goal_ratio": 1.2,
            "apps": {"raw_archive": summary},
        }
    )
    row = table.splitlines()[-1].split()
    assert row == ["raw_archive", "25.0", "20.0", "1.25", "3.00", "2.00", "1.50", "<=", "1.2"]
