"""Where Prometheus finds the drivers' metrics: target groups for its file-based service discovery
(file_sd), made from the control store's running records.

A driver writes where its exporter serves into ``<app>.running.json`` (``ControlStore.mark_running``),
wherever it runs: on this host, or in a YARN container on whichever node YARN picked.
``pipelinectl metrics-targets`` writes the groups into the file Prometheus watches
(monitoring/prometheus.yml, the ``stream_pipelines`` job), once or every few seconds.

Which records count: every one with a metrics endpoint, unless an operator stopped the app. A driver
removes its record at a clean exit; one that died without it (kill -9, a lost container or node) leaves
it, and stays a target that does not answer, ``up == 0``, which QueryDown pages on after 2 minutes,
unless its supervisor's restart overwrites the record first. Whether the driver lives is not asked:
one on another host cannot be looked at from here, and the page is the same wherever it ran.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from stream_pipelines.control.control_store import ControlStore
from stream_pipelines.core.config import PipelineConfig
from stream_pipelines.core.registry import APP_NAMES
from stream_pipelines.observability.monitoring_rules import target_group, write_target_groups


def target_groups(config: PipelineConfig) -> list[dict[str, Any]]:
    """One file_sd target group per app whose running record says where its metrics are, unless an
    operator stopped it, in the registry's order of the apps."""
    store = ControlStore(config)
    groups = []
    for app in APP_NAMES:
        driver = store.running_driver(app)
        if driver is None or driver.metrics is None or store.desired(app)["desired"] == "stopped":
            continue
        groups.append(target_group(app, driver.metrics.address))
    return groups


def describe(groups: list[dict[str, Any]]) -> str:
    if not groups:
        return "no driver serves metrics"
    return ", ".join(f"{group['labels']['app']} at {', '.join(group['targets'])}" for group in groups)


def publish(
    config: PipelineConfig, out: Path, log: Callable[[str], None], every_s: float | None = None
) -> None:
    """Write the target groups into ``out`` now and, with ``every_s``, again every ``every_s`` seconds
    until interrupted; the file is rewritten only when they change. Logs the targets at first and
    whenever they change.

    In the loop, a control store that does not answer (HDFS or S3 down), or a file that cannot be
    written, is logged and the file left as it is: Prometheus keeps scraping the targets it had."""
    logged: list[dict[str, Any]] | None = None
    while True:
        try:
            groups = target_groups(config)
            write_target_groups(out, groups)
        except OSError as error:
            if every_s is None:
                raise
            log(f"could not update {out} ({error}); it keeps the targets it has")
        else:
            if groups != logged:
                log(f"{out}: {describe(groups)}")
                logged = groups
        if every_s is None:
            return
        time.sleep(every_s)
