"""The alert rules and the Prometheus/Alertmanager configs of monitoring/, rendered for other ports or a
faster pace.

monitoring/ holds the one copy of each. Whoever needs them elsewhere (a test on free ports, a quick
local demo that should page within seconds instead of minutes) renders them from there, changing only
what it names: every rule's ``for:`` and the evaluation interval, the scrape targets and intervals,
the Alertmanager address, the receivers' base URL. Expressions, labels, annotations, routes and
inhibitions always come from monitoring/ as they are.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from stream_pipelines.config import PROJECT_ROOT

MONITORING = PROJECT_ROOT / "monitoring"
RULES_DIR = MONITORING / "rules"
PROMETHEUS_CONFIG = MONITORING / "prometheus.yml"
ALERTMANAGER_CONFIG = MONITORING / "alertmanager.yml"

_PROMETHEUS_DURATION = re.compile(r"(\d+(ms|[smhdwy]))+")


def _duration(name: str, value: str) -> str:
    if not _PROMETHEUS_DURATION.fullmatch(value):
        raise ValueError(f"{name} must be a Prometheus duration such as 5s, 1m or 1h30m, got {value!r}")
    return value


def rule_files(rules_dir: Path = RULES_DIR) -> list[Path]:
    files = sorted(rules_dir.glob("*.yml"))
    if not files:
        raise FileNotFoundError(f"no rule files (*.yml) in {rules_dir}")
    return files


def render_rules(
    *, for_duration: str | None = None, interval: str | None = None, rules_dir: Path = RULES_DIR
) -> dict[str, dict[str, Any]]:
    """File name -> rule file document of monitoring/rules, with every ``for:`` set to ``for_duration``
    (rules without one keep firing at once) and every group evaluated each ``interval``."""
    rendered = {}
    for path in rule_files(rules_dir):
        document = yaml.safe_load(path.read_text())
        for group in document["groups"]:
            if interval is not None:
                group["interval"] = _duration("interval", interval)
            for rule in group["rules"]:
                if for_duration is not None and "for" in rule:
                    rule["for"] = _duration("for_duration", for_duration)
        rendered[path.name] = document
    return rendered


def write_rules(folder: Path, **changes: Any) -> list[Path]:
    """``render_rules(**changes)`` written to ``folder``, one file per rule file; returns the paths."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, document in render_rules(**changes).items():
        path = folder / name
        path.write_text(yaml.safe_dump(document, sort_keys=False, allow_unicode=True))
        written.append(path)
    return written


def render_prometheus_config(
    *,
    targets: Mapping[str, str],
    rule_paths: Sequence[Path],
    interval: str | None = None,
    alertmanager: str | None = None,
) -> dict[str, Any]:
    """monitoring/prometheus.yml scraping only the apps (or stack components, such as
    ``airflow-api-server``) in ``targets`` (name -> host:port) there, loading
    ``rule_paths`` (globs allowed), scraping and evaluating each ``interval``, and sending alerts to the
    ``alertmanager`` host:port (none: no alerting section)."""
    config = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    if interval is not None:
        config["global"]["scrape_interval"] = _duration("interval", interval)
        config["global"]["evaluation_interval"] = interval
    config["rule_files"] = [str(path) for path in rule_paths]
    if alertmanager is None:
        config.pop("alerting", None)
    else:
        config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]}
    declared = set()
    for job in config["scrape_configs"]:
        statics = []
        for static in job["static_configs"]:
            # An app's exporter, or a component of the stack (Airflow's api-server).
            app = static["labels"].get("app") or static["labels"]["component"]
            declared.add(app)
            if app in targets:
                statics.append({**static, "targets": [targets[app]]})
        job["static_configs"] = statics
    unknown = set(targets) - declared
    if unknown:
        raise ValueError(
            f"{PROMETHEUS_CONFIG} scrapes no app named {sorted(unknown)}; it has {sorted(declared)}"
        )
    config["scrape_configs"] = [job for job in config["scrape_configs"] if job["static_configs"]]
    return config


def render_alertmanager_config(receiver_base_url: str) -> dict[str, Any]:
    """monitoring/alertmanager.yml with each webhook URL's scheme, host and port replaced by those of
    ``receiver_base_url``; paths, routes, receivers and inhibitions stay as they are."""
    base = urllib.parse.urlsplit(receiver_base_url)
    if not (base.scheme and base.netloc):
        raise ValueError(f"receiver_base_url must look like http://host:port, got {receiver_base_url!r}")
    config = yaml.safe_load(ALERTMANAGER_CONFIG.read_text())
    for receiver in config["receivers"]:
        for hook in receiver.get("webhook_configs", []):
            hook["url"] = (
                urllib.parse.urlsplit(hook["url"])._replace(scheme=base.scheme, netloc=base.netloc).geturl()
            )
    return config


def write_yaml(path: Path, document: Mapping[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(dict(document), sort_keys=False, allow_unicode=True))
    return path
