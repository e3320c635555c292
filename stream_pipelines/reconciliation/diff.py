"""Window-by-window diff of the streaming tumbling output against the exact recompute, attributed.

Three figures per (window_start, sensor_id):
- exact: one delivery per event_id, every event of the day (the compliance truth);
- model: what the stream should have produced given the ledger: every delivery (duplicates too) that
  a committed batch read and the watermark did not drop, in windows the stream had closed;
- streaming: what the stream wrote.
A window where streaming != exact is *explained* iff streaming == model (within tolerances): the
difference is then exactly the ledger's dropped events and the duplicate deliveries. Otherwise it is
unexplained, and the run fails.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from stream_pipelines.core.config import ReconciliationTolerances

STATS = ("reading_count", "avg_temperature", "max_temperature", "min_temperature")
WINDOW_KEY = ("window_start", "sensor_id")

# Diff kinds and verdicts.
MISSING, EXTRA, DIFFERENT = "missing_window", "extra_window", "different_figures"
EXPLAINED, UNEXPLAINED, PENDING = "explained", "unexplained", "pending"


@dataclass(frozen=True)
class WindowDiff:
    window_start: datetime
    window_end: datetime
    sensor_id: str
    kind: str
    verdict: str
    reasons: tuple[str, ...]
    exact: dict[str, float | int | None] = field(default_factory=dict)
    streaming: dict[str, float | int | None] = field(default_factory=dict)
    model: dict[str, float | int | None] = field(default_factory=dict)
    dropped_deliveries: int = 0
    duplicate_deliveries: int = 0

    def label(self) -> str:
        return f"[{self.window_start:%Y-%m-%d %H:%M:%S}, {self.window_end:%H:%M:%S}) {self.sensor_id}"

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["window_start"] = self.window_start.isoformat()
        data["window_end"] = self.window_end.isoformat()
        data["window"] = self.label()
        return data


def _prefixed(frame: DataFrame, prefix: str) -> DataFrame:
    return frame.select(
        "window_start",
        "sensor_id",
        F.col("window_end").alias(f"{prefix}_window_end"),
        *[F.col(stat).alias(f"{prefix}_{stat}") for stat in STATS],
        F.lit(True).alias(f"{prefix}_present"),
    )


def compare_windows(
    exact: DataFrame,
    streaming: DataFrame,
    model: DataFrame,
    evidence: DataFrame,
) -> DataFrame:
    """All three figures side by side, plus per-window dropped and duplicate delivery counts.

    ``evidence`` has window_start, sensor_id, dropped_deliveries, duplicate_deliveries.
    """
    joined = (
        _prefixed(exact, "exact")
        .join(_prefixed(streaming, "streaming"), list(WINDOW_KEY), "full_outer")
        .join(_prefixed(model, "model"), list(WINDOW_KEY), "left")
        .join(evidence, list(WINDOW_KEY), "left")
    )
    return joined.withColumn(
        "window_end", F.coalesce("exact_window_end", "streaming_window_end", "model_window_end")
    )


def differing_rows(compared: DataFrame, tolerances: ReconciliationTolerances) -> DataFrame:
    """The windows whose streaming figures are absent, extra or not within tolerance of the exact ones."""
    return compared.where(~_close("exact", "streaming", tolerances))


def _close(left: str, right: str, tolerances: ReconciliationTolerances) -> F.Column:
    both = F.col(f"{left}_present").isNotNull() & F.col(f"{right}_present").isNotNull()
    limits = {
        "reading_count": tolerances.count,
        "avg_temperature": tolerances.avg,
        "max_temperature": tolerances.max,
        "min_temperature": tolerances.min,
    }
    within = [
        F.abs(F.col(f"{left}_{stat}") - F.col(f"{right}_{stat}")) <= F.lit(limit)
        for stat, limit in limits.items()
    ]
    condition = both
    for check in within:
        condition = condition & F.coalesce(check, F.lit(False))
    return condition


def classify(row: dict[str, Any], tolerances: ReconciliationTolerances) -> WindowDiff:
    """The verdict for one differing window (see the module docstring).

    ``closed_by_stream``: the window ends at or before the watermark of the stream's last committed batch.
    ``archived_for_stream``: it ends at or before the watermark of the last committed batch whose every
    read is in the archive read (ledger.archived_eviction_watermark_ms); past that, a stream row with
    events the archive does not have yet is pending, not wrong.
    """
    figures = {
        side: {stat: row.get(f"{side}_{stat}") for stat in STATS} if row.get(f"{side}_present") else {}
        for side in ("exact", "streaming", "model")
    }
    dropped = int(row.get("dropped_deliveries") or 0)
    duplicates = int(row.get("duplicate_deliveries") or 0)
    evidence = []
    if dropped:
        evidence.append(f"{dropped} delivery(ies) dropped by the watermark (in the ledger)")
    if duplicates:
        evidence.append(f"{duplicates} duplicate delivery(ies) counted by the stream")

    if not figures["streaming"]:
        if not row.get("closed_by_stream"):
            return _diff(row, MISSING, PENDING, ("the stream has not closed this window yet",), figures)
        if not figures["model"]:
            return _diff(row, MISSING, EXPLAINED, tuple(evidence) or ("no delivery was read",), figures)
        return _diff(
            row, MISSING, UNEXPLAINED, ("the stream closed this window but wrote no row for it",), figures
        )
    kind = DIFFERENT if figures["exact"] else EXTRA
    if figures["model"] and _figures_close(figures["model"], figures["streaming"], tolerances):
        return _diff(row, kind, EXPLAINED, tuple(evidence), figures)
    if not row.get("archived_for_stream"):
        reason = "the stream read events the archive did not hold yet when the job read it: rerun later"
        return _diff(row, kind, PENDING, (reason,), figures)
    if not figures["exact"]:
        return _diff(row, EXTRA, UNEXPLAINED, ("no archived event belongs to this window",), figures)
    mismatch = [
        f"{stat}: streaming {figures['streaming'][stat]} vs exact {figures['exact'][stat]}"
        f" (ledger-adjusted {figures['model'].get(stat)})"
        for stat in STATS
        if not _value_close(figures["streaming"][stat], figures["exact"][stat], _limit(stat, tolerances))
    ]
    return _diff(row, DIFFERENT, UNEXPLAINED, ("not reproduced by the ledger", *mismatch), figures)


def _diff(
    row: dict[str, Any], kind: str, verdict: str, reasons: tuple[str, ...], figures: dict[str, dict]
) -> WindowDiff:
    return WindowDiff(
        window_start=row["window_start"],
        window_end=row["window_end"],
        sensor_id=row["sensor_id"],
        kind=kind,
        verdict=verdict,
        reasons=reasons,
        exact=figures["exact"],
        streaming=figures["streaming"],
        model=figures["model"],
        dropped_deliveries=int(row.get("dropped_deliveries") or 0),
        duplicate_deliveries=int(row.get("duplicate_deliveries") or 0),
    )


def _limit(stat: str, tolerances: ReconciliationTolerances) -> float:
    return {
        "reading_count": tolerances.count,
        "avg_temperature": tolerances.avg,
        "max_temperature": tolerances.max,
        "min_temperature": tolerances.min,
    }[stat]


def _value_close(left: float | None, right: float | None, limit: float) -> bool:
    if left is None or right is None:
        return left is right
    return math.isclose(left, right, rel_tol=0, abs_tol=limit) or abs(left - right) <= limit


def _figures_close(left: dict, right: dict, tolerances: ReconciliationTolerances) -> bool:
    return all(_value_close(left[stat], right[stat], _limit(stat, tolerances)) for stat in STATS)
