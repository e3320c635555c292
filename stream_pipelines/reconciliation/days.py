"""Each event day's way to final, signed-off compliance figures, decided by the data, never backwards.

Completeness, from the batch log's newest committed batches and the Kafka partitions they read:

    open    the streams have not closed D
    closed  every reconciled query's committed watermark has passed the end of D's last window, and in
            every partition it reads it has read the first record stamped at or after D's end: the
            stream has written every window of D it ever will. Spark's watermark is the newest event
            time over all partitions, so a stalled partition would not hold it back; the partition
            check does, and D stays open until that partition delivers past D's end.
    final   closed, and the archive has read every partition past the first record stamped at or after
            D's end + the late horizon: no event of D can still arrive

Then the reconciliations and the sign-off:

    reconciled_provisional  a run recorded while D was closed but not final (pending diffs expected)
    reconciled_final        a run recorded once D was final: its figures are the compliance figures
    signed_off              a reviewer approved the final run's report; a rejection is recorded and
                            leaves D unsigned

Each day is one JSON document through the store layer (``<reports>/reconciliation/days/<D>.json``),
changed only under ``store.update_json``, so it works on every store. ``watch`` moves completeness
forward and says which runs are due (at least once: a due run with no recorded outcome is asked for
again, after ``reconciliation.claim_wait`` while no run has claimed it, else after
``reconciliation.request_retry``); the reconciliation DAG claims a run with ``begin_run``,
which declines one whose outcome is already recorded, so no day is reconciled twice for one reason.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

from stream_pipelines.core import store
from stream_pipelines.core.config import PipelineConfig
from stream_pipelines.core.registry import AD_MATCHING, RAW_ARCHIVE, SENSOR_AGGREGATION, Dataset
from stream_pipelines.driver import batch_log
from stream_pipelines.driver.batch_log import CommittedProgress

OPEN, CLOSED, FINAL = "open", "closed", "final"
COMPLETENESS = (OPEN, CLOSED, FINAL)
# The kinds of run: a provisional one when D closes, the final one when D is final.
PROVISIONAL = "provisional"
RUN_KINDS = (PROVISIONAL, FINAL)
# The states a day shows, in the order it passes them.
RECONCILED_PROVISIONAL, RECONCILED_FINAL, SIGNED_OFF = (
    "reconciled_provisional",
    "reconciled_final",
    "signed_off",
)
STATES = (OPEN, CLOSED, RECONCILED_PROVISIONAL, FINAL, RECONCILED_FINAL, SIGNED_OFF)
APPROVED, REJECTED = "approved", "rejected"
# What Prometheus scrapes of the day records (the "Streaming pipeline" plugin exports it); the
# ReconciliationOverdue alert reads it.
OVERDUE_METRIC = "pipeline_reconciliation_overdue_days"


# --------------------------------------------------------------------------- what closes a day


def _last_window_end(day_end_ms: int, length_ms: int, step_ms: int) -> int:
    """The end of the last window that starts within the day (windows start every ``step`` from the
    epoch, as Spark's do): the stream has written all of D's windows once its watermark reaches it."""
    return (day_end_ms - 1) // step_ms * step_ms + length_ms


@dataclass(frozen=True)
class ReconciledQuery:
    """A query whose output the reconciliation checks, and the moment its watermark must reach for D."""

    app: str
    query: str
    needed_for: Callable[[PipelineConfig, int], int]

    @property
    def name(self) -> str:
        return f"{self.app}.{self.query}"


RECONCILED_QUERIES = (
    ReconciledQuery(
        SENSOR_AGGREGATION.name,
        "tumbling",
        lambda config, end: _last_window_end(
            end, config.sensors.window.milliseconds, config.sensors.window.milliseconds
        ),
    ),
    ReconciledQuery(
        SENSOR_AGGREGATION.name,
        "sliding",
        lambda config, end: _last_window_end(
            end, config.sensors.sliding_window.milliseconds, config.sensors.slide.milliseconds
        ),
    ),
    # An impression of D is written, matched or not, once the watermark passes it + the match interval.
    ReconciledQuery(
        AD_MATCHING.name, "matches", lambda config, end: end + config.ads.match_interval.milliseconds
    ),
)
ARCHIVE_QUERY = (RAW_ARCHIVE.name, RAW_ARCHIVE.queries[0].name)


def day_end_ms(day: date) -> int:
    """D's end, as the registry's day units end (midnight UTC after D)."""
    return int(Dataset.unit_end(day.isoformat()).timestamp() * 1000)


def horizon_end_ms(day: date, config: PipelineConfig) -> int:
    """When no event of D can still arrive: D's end + the late horizon."""
    return day_end_ms(day) + config.reconciliation.late_horizon.milliseconds


@dataclass(frozen=True)
class Progress:
    """One query's progress against the moment D needs of it."""

    query: str
    # The committed watermark (the archive: when its newest committed batch was planned); None: no batch.
    reached_ms: int | None
    needed_ms: int
    # Partitions whose first record at or after the moment the query has not read ("sensors[2]").
    behind: tuple[str, ...] = ()

    @property
    def done(self) -> bool:
        return self.reached_ms is not None and self.reached_ms >= self.needed_ms and not self.behind

    def why_not(self) -> str:
        if self.reached_ms is None:
            return f"{self.query}: no committed batch yet"
        reasons = []
        if self.reached_ms < self.needed_ms:
            reasons.append(f"at {_iso(self.reached_ms)}, needs {_iso(self.needed_ms)}")
        if self.behind:
            reasons.append(f"not yet past {_iso(self.needed_ms)} in {', '.join(self.behind)}")
        return f"{self.query}: {'; '.join(reasons)}"

    def as_json(self) -> dict[str, Any]:
        return {
            "query": self.query,
            "reached": _iso(self.reached_ms),
            "needed": _iso(self.needed_ms),
            "behind": list(self.behind),
            "done": self.done,
        }


@dataclass(frozen=True)
class DayEvidence:
    """What the data says about D at one moment."""

    day: date
    queries: tuple[Progress, ...]
    archive: Progress
    now_ms: int

    @property
    def completeness(self) -> str:
        if not all(progress.done for progress in self.queries):
            return OPEN
        if self.now_ms >= self.archive.needed_ms and self.archive.done:
            return FINAL
        return CLOSED

    def holding(self) -> list[str]:
        """Why D is not further along, one line per query that holds it."""
        waiting = [p for p in self.queries if not p.done]
        if not waiting and self.completeness == CLOSED:
            waiting = [self.archive]
        return [progress.why_not() for progress in waiting]


# A Kafka lookup: per partition, the offset of the first record stamped at or after a moment (None: none
# yet). kafka.clients.first_offsets_at with a consumer bound to it.
FirstOffsets = Callable[[Iterable[tuple[str, int]], int], Mapping[tuple[str, int], int | None]]


def _progress(
    name: str,
    committed: CommittedProgress | None,
    reached_ms: int | None,
    needed_ms: int,
    first_offsets: FirstOffsets,
) -> Progress:
    if committed is None or reached_ms is None or reached_ms < needed_ms:
        return Progress(name, reached_ms, needed_ms)
    firsts = first_offsets(committed.kafka_ends, needed_ms)
    behind = tuple(
        f"{topic}[{partition}]"
        for (topic, partition), end in sorted(committed.kafka_ends.items())
        if (first := firsts.get((topic, partition))) is None or end <= first
    )
    return Progress(name, reached_ms, needed_ms, behind)


def evidence(
    config: PipelineConfig,
    day: date,
    now_ms: int,
    committed: Mapping[str, CommittedProgress | None],
    first_offsets: FirstOffsets,
) -> DayEvidence:
    """D's completeness from each query's newest committed batch (``committed``, by query name) and
    Kafka's answer about the partitions they read."""
    end = day_end_ms(day)
    queries = tuple(
        _progress(
            query.name,
            committed.get(query.name),
            (progress.watermark_ms if (progress := committed.get(query.name)) else None),
            query.needed_for(config, end),
            first_offsets,
        )
        for query in RECONCILED_QUERIES
    )
    archive_name = ".".join(ARCHIVE_QUERY)
    archived = committed.get(archive_name)
    archive = _progress(
        archive_name,
        archived,
        archived.planned_at_ms if archived else None,
        horizon_end_ms(day, config),
        first_offsets,
    )
    return DayEvidence(day, queries, archive, now_ms)


def committed_progress(config: PipelineConfig) -> dict[str, CommittedProgress | None]:
    """The newest committed batch of every query the day states read, by query name."""
    wanted = [(q.app, q.query) for q in RECONCILED_QUERIES] + [ARCHIVE_QUERY]
    return {f"{app}.{query}": batch_log.newest_committed(config, app, query) for app, query in wanted}


# --------------------------------------------------------------------------- the day's record


def days_dir(config: PipelineConfig) -> Path:
    return store.location(config.spark.extra_conf, f"{config.data_path('reports')}/reconciliation/days")


def day_path(config: PipelineConfig, day: date) -> Path:
    return days_dir(config) / f"{day.isoformat()}.json"


def read_day(config: PipelineConfig, day: date) -> dict[str, Any]:
    return store.read_json(day_path(config, day)) or _new_record(day)


def _new_record(day: date) -> dict[str, Any]:
    return {"day": day.isoformat(), "completeness": OPEN, "history": [], "requests": {}, "runs": {}}


def state_of(record: Mapping[str, Any]) -> str:
    """The furthest state the day has reached (``STATES``). A run that failed (unexplained diffs, a
    failed gate) reconciled nothing: the day stays where it was, with the failed run shown beside."""
    runs = record.get("runs", {})
    if (record.get("sign_off") or {}).get("decision") == APPROVED:
        return SIGNED_OFF
    if _succeeded(runs.get(FINAL)):
        return RECONCILED_FINAL
    if record.get("completeness") == FINAL:
        return FINAL
    if _succeeded(runs.get(PROVISIONAL)):
        return RECONCILED_PROVISIONAL
    return record.get("completeness", OPEN)


# A run's statuses that reconcile the day (the job's own: passed, or a day without events).
RECONCILED_STATUSES = ("passed", "empty_day")


def _finished(run: Mapping[str, Any] | None) -> bool:
    """The run's outcome is recorded, whatever it was: it is not asked for again (a failed one waits for
    a person, who reruns the day by hand)."""
    return bool(run and run.get("finished_at"))


def _succeeded(run: Mapping[str, Any] | None) -> bool:
    return _finished(run) and (run or {}).get("status") in RECONCILED_STATUSES


def final_reconciled(record: Mapping[str, Any]) -> bool:
    """D has final figures: a final run that passed. Until then D counts toward its deadline."""
    return _succeeded((record.get("runs") or {}).get(FINAL))


def _iso(ms: int | None) -> str | None:
    return None if ms is None else datetime.fromtimestamp(ms / 1000, UTC).isoformat()


def _now_iso(now_ms: int) -> str:
    return _iso(now_ms) or ""


def advance(
    record: dict[str, Any], seen: DayEvidence, config: PipelineConfig
) -> tuple[dict[str, Any], str | None]:
    """The record with completeness moved forward (never back) to what the evidence shows, and the run
    due now, if any: provisional once closed (not when D is final already), final once final; a run asked
    for and not finished is due again (``_ask_again_after_ms``)."""
    record = {**_new_record(seen.day), **record}
    now = _now_iso(seen.now_ms)
    if COMPLETENESS.index(seen.completeness) > COMPLETENESS.index(record["completeness"]):
        record["completeness"] = seen.completeness
        record["history"] = [
            *record["history"],
            {
                "state": seen.completeness,
                "at": now,
                "evidence": [p.as_json() for p in (*seen.queries, seen.archive)],
            },
        ]
    record["holding"] = seen.holding()
    record["checked_at"] = now
    wanted = {CLOSED: PROVISIONAL, FINAL: FINAL}.get(record["completeness"])
    if wanted is None or _finished(record["runs"].get(wanted)) or _finished(record["runs"].get(FINAL)):
        return record, None
    asked = record["requests"].get(wanted)
    if asked and seen.now_ms - _ms(asked["at"]) < _ask_again_after_ms(record, asked, config):
        return record, None
    record["requests"] = {
        **record["requests"],
        wanted: {"at": now, "times": (asked or {}).get("times", 0) + 1},
    }
    return record, wanted


def _ask_again_after_ms(record: Mapping[str, Any], asked: Mapping[str, Any], config: PipelineConfig) -> int:
    """How long after an ask it is repeated: ``request_retry`` once a run has claimed D since the ask
    (it is running, or died before recording an outcome); sooner while none has, since its asset event
    may be lost (``claim_wait``, doubling with each ask, never longer than ``request_retry``)."""
    retry_ms = config.reconciliation.request_retry.milliseconds
    asked_ms = _ms(asked["at"])
    if any(_ms(run["started_at"]) >= asked_ms for run in record["runs"].values() if run.get("started_at")):
        return retry_ms
    doublings = min(max(asked.get("times", 1), 1) - 1, 16)  # 16: far past any request_retry
    return min(retry_ms, config.reconciliation.claim_wait.milliseconds * 2**doublings)


def _ms(iso: str) -> int:
    return int(datetime.fromisoformat(iso).timestamp() * 1000)


# --------------------------------------------------------------------------- the watcher


@dataclass(frozen=True)
class Due:
    day: date
    kind: str


@dataclass(frozen=True)
class Watched:
    """One pass of the watcher: the runs now due, each day's state, the first day without a final run."""

    due: list[Due]
    states: dict[str, str]
    first_unfinished: date


def cursor_path(config: PipelineConfig) -> Path:
    return days_dir(config) / "_cursor.json"


def first_unfinished_day(config: PipelineConfig, first_day: date) -> date:
    """The oldest day without a final run: the watcher starts there, so that a watcher down for weeks
    skips no day, and the days it reads stay about the late horizon's worth."""
    cursor = store.read_json(cursor_path(config)) or {}
    recorded = cursor.get("first_unfinished")
    return max(first_day, date.fromisoformat(recorded)) if recorded else first_day


def watch(
    config: PipelineConfig,
    now: datetime,
    first_day: date,
    first_offsets: FirstOffsets,
    committed: Mapping[str, CommittedProgress | None] | None = None,
) -> Watched:
    """Move every ended day from the first unfinished one forward, and say which runs are due."""
    now_ms = int(now.timestamp() * 1000)
    committed = committed_progress(config) if committed is None else committed
    looked_up: dict[tuple[tuple[tuple[str, int], ...], int], Mapping[tuple[str, int], int | None]] = {}

    def cached(partitions: Iterable[tuple[str, int]], moment_ms: int) -> Mapping[tuple[str, int], int | None]:
        key = (tuple(sorted(partitions)), moment_ms)
        if key not in looked_up:
            looked_up[key] = first_offsets(key[0], moment_ms)
        return looked_up[key]

    due: list[Due] = []
    states: dict[str, str] = {}
    start = first_unfinished_day(config, first_day)
    unfinished: date | None = None
    day = start
    while day_end_ms(day) <= now_ms:
        seen = evidence(config, day, now_ms, committed, cached)
        wanted: list[str] = []

        def change(current: Any, seen: DayEvidence = seen, wanted: list[str] = wanted) -> dict[str, Any]:
            record, kind = advance(current or {}, seen, config)
            wanted[:] = [kind] if kind else []
            return record

        record = store.update_json(day_path(config, day), change)
        due.extend(Due(day, kind) for kind in wanted)
        states[day.isoformat()] = state_of(record)
        if unfinished is None and not final_reconciled(record):
            unfinished = day
        day += timedelta(days=1)
    first = unfinished or day
    if first != start:
        store.write_json(cursor_path(config), {"first_unfinished": first.isoformat(), "at": now.isoformat()})
    return Watched(due, states, first)


# --------------------------------------------------------------------------- runs and sign-off


@dataclass(frozen=True)
class Claim:
    """What a reconciliation run of D is: its kind, or why it should not run."""

    day: date
    kind: str | None
    reason: str


def begin_run(
    config: PipelineConfig,
    day: date,
    *,
    requested_kind: str | None,
    manual: bool,
    run_id: str,
    now: datetime,
    declare_final: str = "",
) -> Claim:
    """Claim D's run. Its kind is what D's completeness allows (final once final, else provisional);
    a run asked for by the day states (``requested_kind``) is declined when that kind's outcome is
    already recorded, or when D is not yet closed. A manual rerun always runs: as final when D is
    final, else as provisional (or ``manual`` while D is still open), and is recorded like any other.

    ``declare_final`` (a manual run's reason, e.g. a partition that will never deliver again) makes D
    final by hand before the claim: recorded in D's history with the run and the reason, so the run is
    D's final one, can be signed off, and D stops counting toward its deadline."""
    claim: list[Claim] = []

    def change(current: Any) -> dict[str, Any]:
        record = {**_new_record(day), **(current or {})}
        if manual and declare_final and record["completeness"] != FINAL:
            record["completeness"] = FINAL
            record["history"] = [
                *record["history"],
                {"state": FINAL, "at": now.isoformat(), "by_hand": run_id, "reason": declare_final},
            ]
        completeness = record["completeness"]
        kind = FINAL if completeness == FINAL else PROVISIONAL if completeness == CLOSED else None
        if not manual:
            if kind is None:
                claim.append(
                    Claim(
                        day,
                        None,
                        f"{day} is still open: {'; '.join(record.get('holding', [])) or 'not checked yet'}",
                    )
                )
                return record
            if requested_kind == PROVISIONAL and kind == FINAL and not _finished(record["runs"].get(FINAL)):
                kind = FINAL  # D went final since it was asked: the final run replaces the provisional one
            if _finished(record["runs"].get(kind)):
                claim.append(Claim(day, None, f"the {kind} reconciliation of {day} is already recorded"))
                return record
        kind = kind or "manual"
        record["runs"] = {
            **record["runs"],
            kind: {
                **record["runs"].get(kind, {}),
                "started_at": now.isoformat(),
                "run_id": run_id,
                "manual": manual,
            },
        }
        claim.append(Claim(day, kind, "manual rerun" if manual else f"{kind} run"))
        return record

    store.update_json(day_path(config, day), change)
    return claim[-1]


# Left out of the digest the sign-off binds to: what the day states add to a report after its run,
# and the PDF copy's outcome, which every rewrite of the report renders again.
REVIEW_SECTIONS = ("sign_off", "day_state", "pdf")


def report_digest(document: Mapping[str, Any]) -> str:
    """sha256 of a report's content, without the sections the day states add to it afterwards (the day's
    runs side by side, the sign-off) and the PDF copy's outcome."""
    content = {key: value for key, value in document.items() if key not in REVIEW_SECTIONS}
    return "sha256:" + hashlib.sha256(json.dumps(content, sort_keys=True, default=str).encode()).hexdigest()


def figures(document: Mapping[str, Any]) -> dict[str, Any]:
    """The figures a day's page shows side by side for its provisional and final runs."""
    diffs = [*document.get("diffs", []), *document.get("ad_match_diffs", [])]
    verdicts: dict[str, int] = {}
    for item in diffs:
        verdicts[item.get("verdict", "?")] = verdicts.get(item.get("verdict", "?"), 0) + 1
    return {
        "status": document.get("status"),
        "window_counts": document.get("window_counts", {}),
        "diffs": verdicts,
        "late_event_ledger": (document.get("late_event_ledger") or {}).get("count"),
        "compliance_rows": document.get("compliance_rows"),
    }


def record_run(
    config: PipelineConfig, day: date, kind: str, document: Mapping[str, Any], report_html: str, now: datetime
) -> dict[str, Any]:
    """The outcome of D's run of ``kind``, from its report: status, figures, the report's digest."""
    outcome = {
        "finished_at": now.isoformat(),
        "status": document.get("status"),
        "report_digest": report_digest(document),
        "report": report_html,
        "figures": figures(document),
    }

    def change(current: Any) -> dict[str, Any]:
        record = {**_new_record(day), **(current or {})}
        record["runs"] = {**record["runs"], kind: {**record["runs"].get(kind, {}), **outcome}}
        if kind == FINAL and (record.get("sign_off") or {}).get("report_digest") != outcome["report_digest"]:
            # A new final report needs its own sign-off: an earlier one signed other figures.
            record.pop("sign_off", None)
        return record

    return store.update_json(day_path(config, day), change)


def rerun_in_progress(run: Mapping[str, Any]) -> bool:
    """The run was claimed again after its last outcome: its figures are about to be replaced."""
    return bool(run.get("started_at")) and str(run.get("started_at")) > str(run.get("finished_at") or "")


class SignOffRefused(RuntimeError):
    """The decision was made on a report other than the day's current final one."""


def record_sign_off(
    config: PipelineConfig,
    day: date,
    *,
    decision: str,
    by: str,
    comment: str,
    shown_digest: str,
    current_digest: str,
    now: datetime,
) -> dict[str, Any]:
    """A reviewer's decision on D's final report. Refused (and not recorded) when the report they were
    shown is not the one that stands now: nobody signs figures they did not see."""
    if decision not in (APPROVED, REJECTED):
        raise ValueError(f"decision must be {APPROVED!r} or {REJECTED!r}, not {decision!r}")
    if shown_digest != current_digest:
        raise SignOffRefused(
            f"the reviewer was shown report {shown_digest} but {day}'s report is now {current_digest}: "
            "not signed; the new report asks for its own sign-off"
        )
    sign_off = {
        "decision": decision,
        "by": by,
        "at": now.isoformat(),
        "comment": comment,
        "report_digest": shown_digest,
    }

    def change(current: Any) -> dict[str, Any]:
        record = {**_new_record(day), **(current or {})}
        final = record["runs"].get(FINAL) or {}
        if not _succeeded(final):
            raise SignOffRefused(f"{day}'s final run did not pass ({final.get('status')}): nothing to sign")
        if rerun_in_progress(final):
            raise SignOffRefused(
                f"a rerun of {day} started at {final['started_at']} is in progress: not signed; its report "
                "asks for its own sign-off"
            )
        if final.get("report_digest") != shown_digest:
            raise SignOffRefused(
                f"{day}'s final run recorded report {final.get('report_digest')}, "
                f"not {shown_digest}: not signed"
            )
        record["sign_off"] = sign_off
        record["sign_offs"] = [*record.get("sign_offs", []), sign_off]
        return record

    return store.update_json(day_path(config, day), change)


def day_section(record: Mapping[str, Any]) -> dict[str, Any]:
    """What a day's report shows of its record: the state and each run's figures, side by side."""
    return {
        "state": state_of(record),
        "runs": {
            kind: {key: run.get(key) for key in ("status", "finished_at", "manual", "figures")}
            for kind, run in (record.get("runs") or {}).items()
            if run.get("finished_at")
        },
    }


# --------------------------------------------------------------------------- reading for pages and alerts


def recent_days(config: PipelineConfig, count: int) -> list[dict[str, Any]]:
    """The newest ``count`` day records, newest first, each with its ``state``."""
    folder = days_dir(config)
    if not folder.is_dir():
        return []
    names = sorted(
        (n for n in store.entries(folder) if n.endswith(".json") and not n.startswith("_")), reverse=True
    )
    records = []
    for name in names[:count]:
        record = store.read_json(folder / name)
        if record:
            records.append({**record, "state": state_of(record)})
    return records


def overdue_days(config: PipelineConfig, first_day: date, now: datetime) -> list[str]:
    """Days past D's end + the late horizon + ``reconciliation.final_deadline`` with no final run.

    Read from the records, not from the watcher, so a dead watcher makes the alert fire, not hide."""
    now_ms = int(now.timestamp() * 1000)
    late: list[str] = []
    day = first_unfinished_day(config, first_day)
    while deadline_ms(day, config) <= now_ms:
        if is_overdue(store.read_json(day_path(config, day)) or {}, day, config, now_ms):
            late.append(day.isoformat())
        day += timedelta(days=1)
    return late


def deadline_ms(day: date, config: PipelineConfig) -> int:
    """When D's final reconciliation is overdue: its end + the late horizon + the final deadline."""
    return horizon_end_ms(day, config) + config.reconciliation.final_deadline.milliseconds


def is_overdue(record: Mapping[str, Any], day: date, config: PipelineConfig, now_ms: int) -> bool:
    return not final_reconciled(record) and now_ms >= deadline_ms(day, config)


def diffs_text(figures: Mapping[str, Any]) -> str:
    """A run's diffs by verdict, as people read them: "3 explained_late, 1 pending" or "none"."""
    return (
        ", ".join(f"{n} {verdict}" for verdict, n in sorted((figures.get("diffs") or {}).items())) or "none"
    )
