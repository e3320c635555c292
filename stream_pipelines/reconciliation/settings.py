"""Reconciliation settings and locations, read from the config when it carries them.

The ``reconciliation`` config section and the ``paths.reports``/``paths.compliance``/``paths.gx`` keys
are read duck-typed, so the job runs with these defaults before (and after) the config grows them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from stream_pipelines.config import Duration, PipelineConfig

TWO_DAYS = Duration(2 * 86400)
DEFAULT_WHAT_IF_DELAYS = tuple(Duration(minutes * 60) for minutes in (1, 2, 5, 10, 30))


@dataclass(frozen=True)
class Tolerances:
    """How far a streaming figure may be from the exact one and still count as equal."""

    count: int = 0
    avg: float = 1e-9
    max: float = 1e-9
    min: float = 1e-9


@dataclass(frozen=True)
class ReconciliationSettings:
    # Events for day D that arrive later than D's end plus this are not reconciled for D.
    late_horizon: Duration = TWO_DAYS
    tolerances: Tolerances = field(default_factory=Tolerances)
    # The recommended watermark is p99 of the arrival delay times (1 + margin).
    watermark_margin: float = 0.4
    what_if_delays: tuple[Duration, ...] = DEFAULT_WHAT_IF_DELAYS
    # How many ledger rows the JSON report lists in full (the Parquet ledger has them all).
    report_ledger_rows: int = 1000


DEFAULT_SETTINGS = ReconciliationSettings()


def settings_of(config: PipelineConfig) -> ReconciliationSettings:
    return getattr(config, "reconciliation", None) or DEFAULT_SETTINGS


def data_location(config: PipelineConfig, name: str) -> str:
    """``config.data_path(name)`` when ``paths`` has the key, else ``<data_root>/<name>``."""
    if hasattr(config.paths, name):
        return config.data_path(name)
    root = config.project_path(config.paths.data_root)
    return f"{root.rstrip('/')}/{name}"


def compliance_dir(config: PipelineConfig) -> str:
    return f"{data_location(config, 'compliance')}/sensor_windows"


def ledger_dir(config: PipelineConfig) -> str:
    return f"{data_location(config, 'compliance')}/late_event_ledger"


def report_dir(config: PipelineConfig, day: str) -> str:
    return f"{data_location(config, 'reports')}/reconciliation/{day}"


def gx_dir(config: PipelineConfig) -> str:
    return data_location(config, "gx")
