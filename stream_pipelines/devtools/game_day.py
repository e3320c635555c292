"""`make game-day`: each paging alert's condition caused for real, and what reaches on-call counted.

It runs a private copy of the `make up` stack (devtools/chaos.py's ``Stack``: Kafka broker, PostgreSQL,
Airflow's api-server, two schedulers and dag-processor, the three apps under their supervisor DAGs, the
live generator) with the apps' exporters on, and beside it the monitoring as it ships:

- Prometheus with monitoring/prometheus.yml and monitoring/rules as they are (15 s scrapes, every
  rule's own ``for:``), finding the drivers through ``pipelinectl metrics-targets``, scraping the
  api-server's plugin;
- Alertmanager with monitoring/alertmanager.yml as it is (routes, group waits, inhibitions), its
  receivers' URLs pointed at monitoring/webhook_receiver.py, which logs every notification.

The stack's config is conf/local.yaml but for what ``GAME_DAY_SETTINGS`` says and why. Then it plays
the scenes of ``SCENES`` in order: each lays a fault, holds it as long as the alert it should raise
needs, heals it and waits until the stack is quiet again (no page firing or pending, the app committing).
Per scene it records what reached the receivers while it played (``SceneRecord``): the first
notification, its text, when it came against its bound (the rule's ``for:``, one evaluation and the
route's group_wait after Prometheus first saw the condition), every page and ticket, and the alerts
that fired in Prometheus and were held back. It prints the table and writes the JSON report; exit 0
only when each scene sent the pages it expects (one naming its cause, or none) within its bound.

    python -m stream_pipelines.devtools.game_day                      (make game-day)
    python -m stream_pipelines.devtools.game_day --scenes broker-outage,driver-kill
    python -m stream_pipelines.devtools.game_day --store hdfs --scenes storage-outage
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from stream_pipelines.core.config import PROJECT_ROOT
from stream_pipelines.core.registry import AD_MATCHING, APP_NAMES, RAW_ARCHIVE, SENSOR_AGGREGATION
from stream_pipelines.devtools import alerting
from stream_pipelines.devtools.chaos import Chaos, Stack, drivers_in, say
from stream_pipelines.devtools.processes import alive, free_port, process_table, stop_process_group
from stream_pipelines.devtools.stack import generator_component, start_component
from stream_pipelines.observability import prometheus_api
from stream_pipelines.observability.monitoring_rules import (
    AIRFLOW_API_SERVER,
    ALERTMANAGER_CONFIG,
    PROMETHEUS_CONFIG,
    render_alertmanager_config,
    render_prometheus_config,
    rule_files,
)

DEFAULT_ROOT = PROJECT_ROOT / "data" / "game-day"
# The live generator's rates as `make up` runs it: sensor readings and impressions per second.
RATES = (5.0, 2.0)
# What the slow-processing scene's producers write per second: ten times what the apps may read.
BURST_RATE = 100.0
GAME_DAY_SETTINGS = (
    "metrics.enabled=true",
    # The ad matching's watermarks at the sensors' 2 minutes instead of 10: the stalled input's page
    # needs the lag past twice the delay for 5 minutes, so 7 minutes instead of 25.
    "ads.impressions_watermark=2 minutes",
    "ads.clicks_watermark=2 minutes",
    # A cap of 30 offsets per second per query at the 10 s trigger: four times what the live generator
    # sends, a tenth of what the slow-processing scene sends.
    "kafka.max_offsets_per_trigger=300",
)
# How long a scene waits for the stack to be quiet before it starts, and for a fault to heal.
QUIET_TIMEOUT_S = 900.0
QUERY_TIMEOUT_S = 10.0


# --------------------------------------------------------------------------- the shipped timings


def duration_s(text: str) -> float:
    """A Prometheus duration of one unit (``30s``, ``5m``, ``1h``) in seconds."""
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
    for unit in ("ms", "s", "m", "h", "d"):
        if text.endswith(unit) and text[: -len(unit)].isdigit():
            return int(text[: -len(unit)]) * units[unit]
    raise ValueError(f"not a one-unit Prometheus duration: {text!r}")


@functools.cache
def shipped_rules() -> dict[tuple[str, str | None], dict[str, Any]]:
    """(alertname, case) -> the rule as monitoring/rules has it."""
    return {
        (rule["alert"], rule.get("labels", {}).get("case")): rule
        for path in rule_files()
        for group in yaml.safe_load(path.read_text())["groups"]
        for rule in group["rules"]
        if "alert" in rule
    }


def paging_alerts() -> list[tuple[str, str | None]]:
    return [key for key, rule in shipped_rules().items() if rule["labels"]["severity"] == "page"]


def notification_bound_s(alert: tuple[str, str | None]) -> float:
    """How long after Prometheus first sees an alert's condition its notification may come: the rule's
    ``for:``, one evaluation (the one that fires it) and the group_wait of the route it takes."""
    rule = shipped_rules()[alert]
    evaluation = duration_s(yaml.safe_load(PROMETHEUS_CONFIG.read_text())["global"]["evaluation_interval"])
    route = yaml.safe_load(ALERTMANAGER_CONFIG.read_text())["route"]
    group_wait = route["group_wait"]
    for child in route.get("routes", []):
        if f'severity="{rule["labels"]["severity"]}"' in child.get("matchers", []):
            group_wait = child.get("group_wait", group_wait)
    return duration_s(rule.get("for", "0s")) + evaluation + duration_s(group_wait)


def longest_group_wait_s() -> float:
    """The longest group_wait of monitoring/alertmanager.yml's routes: how long a new group is held."""
    route = yaml.safe_load(ALERTMANAGER_CONFIG.read_text())["route"]
    waits = [
        route["group_wait"],
        *(child.get("group_wait", route["group_wait"]) for child in route["routes"]),
    ]
    return max(duration_s(wait) for wait in waits)


# --------------------------------------------------------------------------- what reached on-call


def at(record: dict[str, Any]) -> float:
    return datetime.fromisoformat(record["received_at"]).timestamp()


def notifications_of(records: Sequence[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The receiver logs one record per alert; a notification is one POST: the records of one receiver
    and group that arrived together. Firing notifications only, in order of arrival."""
    grouped: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for record in sorted(records, key=at):
        if record["status"] == "firing":
            key = (record["receiver"], str(record.get("group_key")), record["received_at"])
            grouped.setdefault(key, []).append(record)
    return list(grouped.values())


def alert_key(labels: dict[str, str]) -> tuple[str, str, str, str]:
    return (
        labels.get("alertname", ""),
        labels.get("case", ""),
        labels.get("app", ""),
        labels.get("query", ""),
    )


def describe(labels: dict[str, str]) -> str:
    name = labels.get("alertname", "?")
    if labels.get("case"):
        name += f"/{labels['case']}"
    where = labels.get("query") or labels.get("app") or labels.get("bootstrap_servers") or ""
    return f"{name} {where}".strip()


@dataclass
class SceneRecord:
    """What one scene did and what reached the receivers while it played."""

    scene: str
    fault: str
    expects: str  # "<alert>/<case>" of its one page, or "no page"
    started: float
    ended: float = 0.0
    target: str = ""
    notes: list[str] = field(default_factory=list)
    first: dict[str, Any] | None = None  # the first notification: receiver, alerts, seconds, summary
    pages: list[str] = field(default_factory=list)  # each group paged: its alerts
    tickets: list[str] = field(default_factory=list)  # each group filed as a ticket: its alerts
    notifications: int = 0  # what the receivers got: a group's first notification and its updates
    pending_s: float | None = None  # fault -> Prometheus first saw the expected alert's condition
    page_s: float | None = None  # fault -> the expected page arrived
    bound_s: float | None = None  # pending -> page may take this long
    held_back: list[str] = field(default_factory=list)  # fired in Prometheus, never notified
    problems: list[str] = field(default_factory=list)
    # What Prometheus saw while the scene played: the label sets of the alerts that fired, and when the
    # expected alert first went pending (epoch seconds).
    fired: list[dict[str, str]] = field(default_factory=list)
    pending_since: float | None = None


def account(
    record: SceneRecord,
    expected: tuple[str, str | None] | None,
    received: Sequence[dict[str, Any]],
    until: float,
) -> SceneRecord:
    """Judge a scene from every record the receiver logged: what arrived from its start to ``until``
    (the next scene's start) is the scene's. With ``expected`` a page, exactly one page came, and it is
    the expected alert; a ticket, no page came and the ticket did; None, no page came. No notification
    names the expected alert with another case. Each expected notification came within its bound after
    Prometheus first saw the condition. An alert that began to fire in Prometheus during the scene and
    was not notified from the scene's start on was held back."""
    window = [r for r in received if record.started <= at(r) < until]
    sent = notifications_of(window)
    if sent:
        first = sent[0]
        record.first = {
            "receiver": first[0]["receiver"],
            "alerts": [describe(r["labels"]) for r in first],
            "after_s": round(at(first[0]) - record.started, 1),
            "summary": first[0]["summary"],
            "runbook_url": first[0].get("runbook_url"),
        }
    # A page is a group notified: a pager opens one incident per group key and files the group's later
    # notifications (an alert joining it, a repeat) under it, as PagerDuty and Opsgenie do.
    groups: dict[tuple[str, str], list[str]] = {}
    for notification in sent:
        alerts = groups.setdefault((notification[0]["receiver"], str(notification[0].get("group_key"))), [])
        alerts.extend(a for a in (describe(r["labels"]) for r in notification) if a not in alerts)
    for (receiver, _), alerts in groups.items():
        (record.pages if receiver == "on-call" else record.tickets).append(", ".join(alerts))
    record.notifications = len(sent)
    notified = {
        alert_key(r["labels"]) for r in received if r["status"] == "firing" and at(r) >= record.started
    }
    record.held_back = sorted(
        {describe(labels) for labels in record.fired if alert_key(labels) not in notified}
    )
    if record.pending_since is not None:
        record.pending_s = round(record.pending_since - record.started, 1)
    severity = None if expected is None else shipped_rules()[expected]["labels"]["severity"]
    if severity != "page" and record.pages:
        record.problems.append(f"expected no page, got {len(record.pages)}: {'; '.join(record.pages)}")
    if expected is None:
        return record
    name, case = expected
    firing = [r for r in window if r["status"] == "firing" and r["alertname"] == name]
    wrong = sorted({describe(r["labels"]) for r in firing if r["labels"].get("case") != case})
    if wrong:
        record.problems.append(f"notified as another case: {', '.join(wrong)}")
    receiver = "on-call" if severity == "page" else "ticket"
    matching = [r for r in firing if r["labels"].get("case") == case and r["receiver"] == receiver]
    record.bound_s = notification_bound_s(expected)
    if not matching:
        record.problems.append(
            f"no {receiver} notification of {describe({'alertname': name, 'case': case or ''})}"
        )
    else:
        record.page_s = round(at(matching[0]) - record.started, 1)
        if record.pending_since is not None and at(matching[0]) - record.pending_since > record.bound_s + 5:
            record.problems.append(
                f"notified {at(matching[0]) - record.pending_since:.0f}s after the condition held, "
                f"over its bound of {record.bound_s:.0f}s"
            )
    if severity == "page" and len(record.pages) != 1:
        record.problems.append(f"expected one page, got {len(record.pages)}: {'; '.join(record.pages)}")
    return record


def render_table(records: Sequence[SceneRecord]) -> str:
    header = (
        "scene",
        "expects",
        "first notification",
        "pending",
        "paged",
        "bound",
        "pages",
        "tickets",
        "held back",
    )
    rows = [header]
    for r in records:
        first = (
            f"{r.first['after_s']:.0f}s {r.first['receiver']}: {', '.join(r.first['alerts'])}"
            if r.first
            else "-"
        )
        rows.append(
            (
                r.scene,
                r.expects,
                first,
                "-" if r.pending_s is None else f"{r.pending_s:.0f}s",
                "-" if r.page_s is None else f"{r.page_s:.0f}s",
                "-" if r.bound_s is None else f"+{r.bound_s:.0f}s",
                str(len(r.pages)),
                str(len(r.tickets)),
                ", ".join(r.held_back) or "-",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


# --------------------------------------------------------------------------- the scenes


@dataclass(frozen=True)
class Scene:
    name: str
    fault: str
    expects: tuple[str, str | None] | None  # the one page it should send; None: none
    apps: tuple[str, ...]  # the apps it touches, which must be healthy before and after
    play: Callable[[GameDay, SceneRecord], None]
    settle: bool = True  # wait for the stack to be quiet after it (the last scene need not)
    needs_store: bool = False  # played only with the data root on a store server (--store hdfs or s3)


class GameDay:
    def __init__(self, stack: Stack, folder: Path, prometheus: str) -> None:
        self.stack = stack
        self.folder = folder
        self.prometheus = prometheus
        self.received = folder / "alerts.jsonl"
        self.chaos = Chaos(stack, recover_timeout_s=QUIET_TIMEOUT_S, stop_orphans=False, rng=random.Random(0))

    # ---- Prometheus

    def query(self, expression: str) -> list[dict[str, Any]]:
        return prometheus_api.result(self.prometheus, "/api/v1/query", {"query": expression}, QUERY_TIMEOUT_S)

    def series_between(self, expression: str, start: float, end: float) -> list[dict[str, Any]]:
        return prometheus_api.result(
            self.prometheus,
            "/api/v1/query_range",
            {"query": expression, "start": start, "end": max(end, start + 1), "step": "5s"},
            QUERY_TIMEOUT_S,
        )

    def pages_pending_or_firing(self) -> list[str]:
        return [describe(s["metric"]) for s in self.query('ALERTS{severity="page"}')]

    def quiet(self, apps: Sequence[str], since: float) -> bool:
        """Every app of ``apps`` healthy and committing since ``since``, and no page firing or pending."""
        try:
            if self.pages_pending_or_firing():
                return False
        except (prometheus_api.PrometheusUnreachable, prometheus_api.PrometheusRefused):
            return False
        return all(self.chaos.healthy(app, since) for app in apps)

    def wait_quiet(self, apps: Sequence[str], since: float, what: str) -> None:
        if not self.chaos.wait(lambda: self.quiet(apps, since), QUIET_TIMEOUT_S, poll_s=5.0):
            raise SystemExit(
                f"game day: the stack did not quieten within {QUIET_TIMEOUT_S:.0f}s {what}: "
                f"pages {self.pages_pending_or_firing()}, apps "
                f"{ {app: self.chaos.healthy(app, since) for app in apps} }"
            )

    def wait_for_page(self, alert: tuple[str, str | None], since: float, timeout_s: float) -> bool:
        """Whether ``alert`` reached a receiver since ``since``, waiting up to ``timeout_s``."""

        def paged() -> bool:
            return any(
                r["status"] == "firing"
                and (r["alertname"], r["labels"].get("case")) == alert
                and at(r) >= since
                for r in alerting.notifications(self.received)
            )

        return self.chaos.wait(paged, timeout_s, poll_s=2.0)

    # ---- playing

    def play(self, scene: Scene) -> SceneRecord:
        self.wait_quiet(scene.apps, time.time(), f"before {scene.name}")
        expects = "no page"
        if scene.expects is not None:
            severity = shipped_rules()[scene.expects]["labels"]["severity"]
            expects = f"{severity}: " + describe(
                {"alertname": scene.expects[0], "case": scene.expects[1] or ""}
            )
        record = SceneRecord(scene.name, scene.fault, expects, started=time.time())
        say(f"scene {scene.name}: {scene.fault} (expects {expects})")
        scene.play(self, record)
        healed = time.time()
        if scene.settle:
            self.wait_quiet(scene.apps, healed, f"after {scene.name}")
        # What fired last (a RestartStorm ticket as the app came back) reaches its receiver within its
        # group's wait: counted with this scene, not the next.
        time.sleep(longest_group_wait_s() + 5)
        record.ended = time.time()
        # The alerts that began to fire while the scene played (one firing since before is an earlier
        # scene's).
        record.fired = [
            s["metric"]
            for s in self.series_between('ALERTS{alertstate="firing"}', record.started - 10, record.ended)
            if float(s["values"][0][0]) >= record.started
        ]
        if scene.expects is not None:
            name, case = scene.expects
            selector = f'ALERTS{{alertname="{name}"' + (f',case="{case}"' if case else "") + "}"
            starts = [
                float(s["values"][0][0]) for s in self.series_between(selector, record.started, record.ended)
            ]
            record.pending_since = min(starts, default=None)
        say(f"scene {scene.name}: played in {record.ended - record.started:.0f}s")
        return record

    def hold(self, seconds: float, since: float) -> None:
        time.sleep(max(0.0, since + seconds - time.time()))

    def stop_generator(self) -> None:
        pid = self.stack.pid("generator")
        if pid:
            stop_process_group(pid, timeout_s=10)

    def restart_generator(self, *options: str, rate: float = RATES[0]) -> int:
        """The live generator started again, at ``rate`` sensor readings/s, with `produce`'s ``options``."""
        self.stop_generator()
        component = generator_component(
            self.stack.seed, rate=rate, ad_rate=RATES[1], duration_s=21600, options=options
        )
        return start_component(self.stack.config, component, self.stack.environment())


def kill_driver(pid: int) -> None:
    """kill -9 of a driver's process group: spark-submit's JVM and its Python driver."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(os.getpgid(pid), signal.SIGKILL)


def _broker_outage(day: GameDay, record: SceneRecord) -> None:
    broker = day.stack.broker()
    broker.stop()
    record.target = f"broker 127.0.0.1:{day.stack.broker_port} stopped"
    # Held 3 minutes: past NoProgress's and QueryDown's windows, whose pages Alertmanager must hold back.
    paged = day.wait_for_page(("KafkaUnreachable", None), record.started, 180)
    day.hold(180, record.started)
    broker.start()
    record.notes.append(f"broker started again after {time.time() - record.started:.0f}s; paged: {paged}")


def _storage_outage(day: GameDay, record: SceneRecord) -> None:
    """The store under every app gone for 3 minutes: the NameNode stopped, or the S3 server frozen (moto
    keeps its objects in memory: a stop would erase them)."""
    stack = day.stack
    if stack.store == "hdfs":
        stack.store_server.stop_namenode()
        record.target = "NameNode stopped"
    else:
        os.kill(stack.store_pid(), signal.SIGSTOP)
        record.target = f"S3 server pid {stack.store_pid()} frozen"
    paged = day.wait_for_page(("StoreUnreachable", None), record.started, 180)
    day.hold(180, record.started)
    if stack.store == "hdfs":
        back_s = stack.store_server.start_namenode()
        record.notes.append(f"NameNode started again, taking writes {back_s:.0f}s later")
    else:
        stack.resume_store()
    record.notes.append(f"the store back after {time.time() - record.started:.0f}s; paged: {paged}")


def _driver_kill(day: GameDay, record: SceneRecord) -> None:
    app = RAW_ARCHIVE.name
    pid = day.chaos._driver(app)
    kill_driver(pid)
    record.target = f"{app}: kill -9 of driver pid {pid}'s process group"
    # Watched past QueryDown's 2 minutes: the supervisor's restart must beat it.
    day.hold(150, record.started)


def _crash_loop(day: GameDay, record: SceneRecord) -> None:
    """Every driver of the app killed as soon as it appears, until QueryDown pages (4 minutes at most):
    a driver that dies at start. The supervisor's backoff spaces the restarts (at once, then 15 s, 45 s,
    ...), under its crash-loop guard's 5 within the hour."""
    app = SENSOR_AGGREGATION.name
    kills = 0
    deadline = record.started + 240
    paged = False
    while time.time() < deadline and not paged:
        for pid in drivers_in(process_table(), [app], day.stack.root).get(app, []):
            kill_driver(pid)
            kills += 1
        paged = day.wait_for_page(("QueryDown", None), record.started, 0.5)
    record.target = (
        f"{app}: every driver killed as it appeared, for {time.time() - record.started:.0f}s ({kills} kills)"
    )


def _driver_freeze(day: GameDay, record: SceneRecord) -> None:
    app = AD_MATCHING.name
    pid = day.chaos._driver(app)
    os.kill(pid, signal.SIGSTOP)
    day.chaos.wait(lambda: not alive(pid), 150)
    outcome = "killed while frozen" if not alive(pid) else "SIGCONT after 150 s"
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGCONT)
    record.target = (
        f"{app}: SIGSTOP of the driver JVM pid {pid}; {outcome} after {time.time() - record.started:.0f}s"
    )
    day.hold(150, record.started)


def _stalled_input(day: GameDay, record: SceneRecord) -> None:
    day.restart_generator("--no-clicks")
    record.target = "generator restarted with --no-clicks: impressions flow, no click arrives"
    paged = day.wait_for_page(("WatermarkLagHigh", "stalled_input"), record.started, 720)
    day.restart_generator()
    record.notes.append(f"clicks again after {time.time() - record.started:.0f}s; paged: {paged}")


def _silent_producers(day: GameDay, record: SceneRecord) -> None:
    day.stop_generator()
    record.target = "generator stopped"
    # The ticket's window (no input for 5 minutes, then 5 minutes), a scrape, and its group_wait.
    day.hold(13 * 60, record.started)
    day.restart_generator()


def _slow_processing(day: GameDay, record: SceneRecord) -> None:
    day.restart_generator(rate=BURST_RATE)
    record.target = f"generator at {BURST_RATE:g} sensor readings/s against a cap of 30/s per query"
    paged = day.wait_for_page(("WatermarkLagHigh", "slow_processing"), record.started, 900)
    record.notes.append(f"paged: {paged}; the backlog is left to the tear-down")
    day.hold(60, time.time())


# In this order: each app's restarts count within the supervisor's crash-loop window (an hour) for its
# backoff and guard, so the scenes that restart one app's driver come first, each on another app, and
# the outages, which restart the queries of every app inside their drivers, last but one (the slow
# processing restarts nothing and leaves a backlog). A fault an hour after another finds a longer backoff:
# a driver frozen ten minutes after a Kafka outage waited 3.5 minutes for its restart, and paged QueryDown.
SCENES = (
    Scene(
        "driver-kill", "kill -9 of the raw archive's driver, once", None, (RAW_ARCHIVE.name,), _driver_kill
    ),
    Scene(
        "driver-freeze", "SIGSTOP of the ad matching's driver JVM", None, (AD_MATCHING.name,), _driver_freeze
    ),
    Scene(
        "crash-loop",
        "the sensor app's every driver killed as it starts, until QueryDown pages",
        ("QueryDown", None),
        (SENSOR_AGGREGATION.name,),
        _crash_loop,
    ),
    Scene(
        "stalled-input",
        "no click arrives while impressions flow",
        ("WatermarkLagHigh", "stalled_input"),
        (AD_MATCHING.name,),
        _stalled_input,
    ),
    Scene(
        "silent-producers",
        "the generator stopped for 13 minutes",
        ("WatermarkLagHigh", "silent_producers"),
        APP_NAMES,
        _silent_producers,
    ),
    Scene(
        "storage-outage",
        "the store under every app gone for 3 minutes",
        ("StoreUnreachable", None),
        APP_NAMES,
        _storage_outage,
        needs_store=True,
    ),
    Scene(
        "broker-outage",
        "the Kafka broker stopped for 3 minutes",
        ("KafkaUnreachable", None),
        APP_NAMES,
        _broker_outage,
    ),
    Scene(
        "slow-processing",
        f"producers at {BURST_RATE:g} readings/s, ten times the per-batch cap",
        ("WatermarkLagHigh", "slow_processing"),
        (SENSOR_AGGREGATION.name,),
        _slow_processing,
        settle=False,
    ),
)
# Paging alerts no scene of the local stack causes, and why: the game day says so instead of passing them.
NOT_CAUSED = {
    ("NoProgress", None): "it pages a batch that hangs while its JVM, Kafka and the store all answer (a "
    "deadlock); a hung Kafka or store pages as KafkaUnreachable or StoreUnreachable, which hold it back, "
    "and a frozen JVM is killed by its own driver within jvm_answer_timeout, before NoProgress's 90 s",
    ("ReconciliationOverdue", None): "needs an event day past its final deadline, days after it ended",
}


# --------------------------------------------------------------------------- the monitoring beside the stack


@contextlib.contextmanager
def monitoring(stack: Stack, folder: Path) -> Iterator[str]:
    """The webhook receiver, Alertmanager, the metrics-targets publisher and Prometheus, as shipped;
    yields Prometheus' base URL."""
    received = folder / "alerts.jsonl"
    targets_file = folder / "prometheus" / "stream_pipelines.json"
    with contextlib.ExitStack() as servers:
        receiver = servers.enter_context(alerting.webhook_receiver(received, folder / "receiver"))
        manager = servers.enter_context(
            alerting.alertmanager_server(render_alertmanager_config(receiver), folder / "alertmanager")
        )
        targets_file.parent.mkdir(parents=True, exist_ok=True)
        publisher = subprocess.Popen(
            [
                str(Path(sys.executable).parent / "pipelinectl"),
                "metrics-targets",
                "--out",
                str(targets_file),
                "--every",
                "5",
            ],
            env=stack.environment(),
            stdout=(folder / "metrics-targets.log").open("w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        servers.callback(stop_process_group, publisher.pid, 10)
        config = render_prometheus_config(
            rule_paths=rule_files(),
            app_targets_file=targets_file,
            targets={AIRFLOW_API_SERVER: f"127.0.0.1:{stack.airflow_port}"},
            alertmanager=manager,
        )
        prometheus = servers.enter_context(
            alerting.prometheus_server(config, folder / "prometheus", retention="1d")
        )
        say(
            f"monitoring: Prometheus {prometheus}, Alertmanager http://{manager}, "
            f"receiver {receiver} -> {received}"
        )
        yield prometheus


# --------------------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="game-day", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--scenes",
        default=None,
        help="comma-separated scenes to play, in the order given (default: every scene the store allows: "
        + ", ".join(scene.name for scene in SCENES)
        + ")",
    )
    parser.add_argument(
        "--store",
        choices=("local", "hdfs", "s3"),
        default="local",
        help="where the data root lives: the local disk, or an HDFS or S3 server on loopback (for the "
        "storage-outage scene)",
    )
    parser.add_argument(
        "--root", type=Path, default=DEFAULT_ROOT, help=f"private data root (default {DEFAULT_ROOT})"
    )
    parser.add_argument("--json", type=Path, default=None, help="report file (default <root>/game-day.json)")
    parser.add_argument("--seed", type=int, default=7)
    return parser.parse_args(argv)


def _interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    by_name = {scene.name: scene for scene in SCENES}
    if args.scenes is None:
        chosen = [scene.name for scene in SCENES if args.store != "local" or not scene.needs_store]
    else:
        chosen = [name for name in args.scenes.split(",") if name]
    unknown = [name for name in chosen if name not in by_name]
    if unknown:
        raise SystemExit(f"game day: unknown scene(s) {', '.join(unknown)}; there are {', '.join(by_name)}")
    if args.store == "local" and any(by_name[name].needs_store for name in chosen):
        raise SystemExit("game day: storage-outage needs a store server: run with --store hdfs or s3")
    signal.signal(signal.SIGTERM, _interrupt)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    metrics_ports = tuple(f"metrics.ports.{app}={free_port()}" for app in APP_NAMES)
    stack = Stack(
        args.root.resolve(),
        APP_NAMES,
        seed=args.seed,
        rate=RATES[0],
        ad_rate=RATES[1],
        settings=GAME_DAY_SETTINGS,
        extra=metrics_ports,
        store=args.store,
    )
    folder = stack.root / "monitoring"
    report_path = (args.json or stack.root / "game-day.json").resolve()
    records: list[SceneRecord] = []
    started = time.time()
    report: dict[str, Any] = {"scenes": chosen, "settings": stack.overrides}
    try:
        stack.up()
        with monitoring(stack, folder) as prometheus:
            day = GameDay(stack, folder, prometheus)
            day.chaos.start_sampling()
            day.chaos.wait_first_batches()
            for name in chosen:
                records.append(day.play(by_name[name]))
            day.chaos.stop_sampling()
            received = alerting.notifications(day.received)
            ends = [record.started for record in records[1:]] + [time.time()]
            for record, until in zip(records, ends, strict=True):
                account(record, by_name[record.scene].expects, received, until)
    except BaseException as error:
        report["aborted"] = f"{type(error).__name__}: {error}"
        raise
    finally:
        stack.down()
        report["duration_s"] = round(time.time() - started)
        report["records"] = [asdict(r) for r in records]
        report["not_caused"] = {
            f"{name}/{case}" if case else name: why for (name, case), why in NOT_CAUSED.items()
        }
        report_path.parent.mkdir(parents=True, exist_ok=True)
        report_path.write_text(json.dumps(report, indent=2, default=str))
    print()
    print(render_table(records))
    print()
    for record in records:
        print(f"{record.scene}: {record.target}" + "".join(f"; {note}" for note in record.notes))
        if record.first:
            print(
                f"{record.scene}: first notification ({record.first['receiver']}): {record.first['summary']}"
            )
            print(f"  runbook: {record.first['runbook_url']}")
    for (name, case), why in NOT_CAUSED.items():
        print(f"not caused here: {name}{'/' + case if case else ''}: {why}")
    print(f"report: {report_path}  ({report['duration_s']}s)")
    problems = [f"{r.scene}: {problem}" for r in records for problem in r.problems]
    if problems:
        print("FAILED:\n  " + "\n  ".join(problems))
        return 1
    print("PASSED: each scene sent the pages it expects, each within its bound")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
