"""One launch: the start checks (topics, cluster access, checkpoint preflight) run once per start, in the
launcher, and a refusal costs no spark-submit. A driver started without a launcher still runs them."""

from __future__ import annotations

import subprocess
import sys

import pytest

from stream_pipelines.core.exit_codes import ExitCode
from stream_pipelines.kafka.topics import ensure_topics
from tests.conftest import make_overrides_config, private_source_topics, run_app

pytestmark = [pytest.mark.broker]

PREFLIGHT = "checkpoint preflight for raw_archive"
# What every spark-submit JVM prints first on this Java (Spark adds the vector module).
JVM_STARTED = "Using incubator modules"


def pipelinectl_run(overrides: list[str]) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "stream_pipelines.cli", "run", "raw_archive"]
    command += [
        "--trigger",
        "available-now",
        *(argument for item in overrides for argument in ("--set", item)),
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)


@pytest.mark.slow
def test_a_start_through_the_launcher_checks_once_and_a_bare_driver_checks_itself(broker, make_overrides):
    overrides = make_overrides(*private_source_topics())
    ensure_topics(make_overrides_config(overrides))

    launched = pipelinectl_run(overrides)
    assert launched.returncode == 0, launched.stderr[-3000:]
    assert (launched.stdout + launched.stderr).count(PREFLIGHT) == 1
    # By the launcher, before spark-submit's JVM said anything: the driver did not run it again.
    assert launched.stderr.index(PREFLIGHT) < launched.stderr.index(JVM_STARTED)

    bare = run_app(
        "raw_archive", "available-now", overrides, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    out, err = bare.communicate(timeout=600)
    assert bare.returncode == 0, err[-3000:]
    assert (out + err).count(PREFLIGHT) == 1, "a driver started without a launcher runs the checks itself"


def test_a_refused_start_costs_no_spark_submit(broker, make_overrides):
    overrides = make_overrides("kafka.topics.sensors.name=no-such-topic-here")
    refused = pipelinectl_run(overrides)
    assert refused.returncode == ExitCode.BAD_CONFIG
    assert "no-such-topic-here" in refused.stderr and "pipelinectl topics" in refused.stderr
    assert JVM_STARTED not in refused.stderr, "spark-submit started a JVM for a start that was refused"
