"""The alert rules and the Prometheus/Alertmanager configs of monitoring/, rendered for other ports or a
faster pace.

monitoring/ holds the one copy of each; the package reads them where it ships them (``MONITORING``,
from stream_pipelines.core.shipped), so an install needs no checkout. Whoever needs them elsewhere (a
test on free ports, a quick local demo that should page within seconds instead of minutes) renders
them from there, changing only what it names: every rule's ``for:`` and the evaluation interval, the
scrape targets and intervals, the file the apps' targets are discovered in, the Alertmanager address,
the receivers' base URL.
Expressions, labels, annotations, routes and inhibitions always come from monitoring/ as they are.

Prometheus finds the apps' drivers through a file of target groups (file_sd), written by
``pipelinectl metrics-targets`` from the control store; ``target_group`` and ``write_target_groups``
are its format and its writer.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from stream_pipelines.core.shipped import MONITORING
from stream_pipelines.core.store import write_atomically
from stream_pipelines.observability.runbooks import UI_LABEL

RULES_DIR = MONITORING / "rules"
PROMETHEUS_CONFIG = MONITORING / "prometheus.yml"
ALERTMANAGER_CONFIG = MONITORING / "alertmanager.yml"

# The scrape job of the apps' drivers, whose targets are discovered (file_sd_configs).
APPS_JOB = "stream_pipelines"
# The component of the stack that serves the Airflow UI, the pipeline page and the runbooks.
AIRFLOW_API_SERVER = "airflow-api-server"

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
    rule_paths: Sequence[Path],
    targets: Mapping[str, str] | None = None,
    app_targets_file: Path | None = None,
    interval: str | None = None,
    alertmanager: str | None = None,
) -> dict[str, Any]:
    """monitoring/prometheus.yml loading ``rule_paths`` (globs allowed), scraping, evaluating and
    re-reading its target files each ``interval``, sending alerts to the ``alertmanager`` host:port
    (none: no alerting section), and scraping:

    - the apps' drivers discovered in ``app_targets_file`` (file_sd, as ``pipelinectl metrics-targets``
      writes it); the apps ``targets`` names (app -> host:port) are written there first. Without the
      file, no apps job;
    - a component of the stack (``airflow-api-server``) at the host:port ``targets`` gives it; one not
      named is not scraped.

    The api-server's address is also the ``pipeline_ui`` external label that the alerts' runbook and
    page links are built on (``runbooks``); without it the shipped value stays.
    """
    targets = targets or {}
    config = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    if interval is not None:
        config["global"]["scrape_interval"] = _duration("interval", interval)
        config["global"]["evaluation_interval"] = interval
    config["rule_files"] = [str(path) for path in rule_paths]
    if alertmanager is None:
        config.pop("alerting", None)
    else:
        config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]}
    components = {
        static["labels"]["component"]
        for job in config["scrape_configs"]
        for static in job.get("static_configs", [])
    }
    apps = {name: address for name, address in targets.items() if name not in components}
    if apps:
        if app_targets_file is None:
            raise ValueError(
                f"{PROMETHEUS_CONFIG} discovers the apps {sorted(apps)} in a file: pass app_targets_file "
                f"(the stack's components it scrapes by name are {sorted(components)})"
            )
        write_target_groups(app_targets_file, [target_group(app, address) for app, address in apps.items()])
    scraped = []
    for job in config["scrape_configs"]:
        if job["job_name"] == APPS_JOB:
            if app_targets_file is None:
                continue
            (discovery,) = job["file_sd_configs"]
            discovery["files"] = [str(app_targets_file)]
            if interval is not None:
                discovery["refresh_interval"] = interval
        else:
            job["static_configs"] = [
                {**static, "targets": [targets[static["labels"]["component"]]]}
                for static in job["static_configs"]
                if static["labels"]["component"] in targets
            ]
            if not job["static_configs"]:
                continue
        scraped.append(job)
    config["scrape_configs"] = scraped
    if AIRFLOW_API_SERVER in targets:
        config["global"]["external_labels"][UI_LABEL] = f"http://{targets[AIRFLOW_API_SERVER]}"
    return config


def target_group(app: str, address: str) -> dict[str, Any]:
    """One app's driver as a Prometheus file_sd target group. The app label names the synthetic ``up``
    series (the exporter labels its own samples with app and query)."""
    return {"targets": [address], "labels": {"app": app}}


def write_target_groups(path: Path, groups: Sequence[Mapping[str, Any]]) -> bool:
    """Write ``groups`` as a file_sd file, whole (a temporary file renamed over it: Prometheus never
    reads half a file), and only when they differ from what it holds; whether it wrote."""
    text = json.dumps(list(groups), indent=2) + "\n"
    try:
        if path.read_text() == text:
            return False
    except FileNotFoundError:
        pass
    write_atomically(path, text)
    return True


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
