"""The start-up topic check: a missing topic is a config error, an unreachable broker is not."""

from __future__ import annotations

from pathlib import Path

from stream_pipelines.core.config import load_config
from stream_pipelines.core.registry import app as declared_app
from stream_pipelines.kafka.topics import require_topics


def test_an_unreachable_broker_does_not_refuse_the_start_but_says_it_could_not_check(tmp_path: Path):
    # Port 9 on loopback: nothing listens. A broker restart must not stop supervision for good
    # (a config error is never retried); Spark's own source retries the connection.
    config = load_config(
        "local", [f"paths.data_root={tmp_path}", "kafka.bootstrap_servers=127.0.0.1:9"], environ={}
    )
    warning = require_topics(config, declared_app("raw_archive"), timeout_s=1.0)
    assert warning is not None
    assert "could not check" in warning and "127.0.0.1:9" in warning and "sensors" in warning
