"""Rendering monitoring/ for other ports and a faster pace changes only what it is asked to."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from stream_pipelines.observability.monitoring_rules import (
    ALERTMANAGER_CONFIG,
    APPS_JOB,
    PROMETHEUS_CONFIG,
    render_alertmanager_config,
    render_prometheus_config,
    render_rules,
    rule_files,
    target_group,
    write_target_groups,
)


def without(document: dict, *keys: str) -> dict:
    """``document`` with ``keys`` removed from every mapping inside it."""
    if isinstance(document, dict):
        return {key: without(value, *keys) for key, value in document.items() if key not in keys}
    if isinstance(document, list):
        return [without(item, *keys) for item in document]
    return document


def test_rendered_rules_differ_only_in_for_and_interval() -> None:
    rendered = render_rules(for_duration="5s", interval="1s")
    assert set(rendered) == {path.name for path in rule_files()}
    for path in rule_files():
        source = yaml.safe_load(path.read_text())
        document = rendered[path.name]
        assert without(document, "for", "interval") == without(source, "for", "interval")
        for group, source_group in zip(document["groups"], source["groups"], strict=True):
            assert group["interval"] == "1s"
            for rule, source_rule in zip(group["rules"], source_group["rules"], strict=True):
                # A rule without `for:` fires at once in production; it stays so.
                assert rule.get("for") == ("5s" if "for" in source_rule else None), rule["alert"]
    assert any(
        "for" in rule for document in rendered.values() for g in document["groups"] for rule in g["rules"]
    )


def test_rendering_without_changes_is_the_source() -> None:
    for path in rule_files():
        assert render_rules()[path.name] == yaml.safe_load(path.read_text())


@pytest.mark.parametrize("field", ["for_duration", "interval"])
def test_a_bad_duration_is_refused_naming_the_field(field: str) -> None:
    with pytest.raises(ValueError, match=f"{field} must be a Prometheus duration.*'5 seconds'"):
        render_rules(**{field: "5 seconds"})


def test_prometheus_config_keeps_only_the_named_targets_and_its_job_settings(tmp_path: Path) -> None:
    source = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    rules = tmp_path / "rules.yml"
    targets_file = tmp_path / "prometheus" / "stream_pipelines.json"
    config = render_prometheus_config(
        targets={"sensor_aggregation": "127.0.0.1:5555"},
        app_targets_file=targets_file,
        rule_paths=[rules],
        interval="1s",
        alertmanager="127.0.0.1:6666",
    )
    assert config["global"] == {**source["global"], "scrape_interval": "1s", "evaluation_interval": "1s"}
    assert config["rule_files"] == [str(rules)]
    assert config["alerting"] == {"alertmanagers": [{"static_configs": [{"targets": ["127.0.0.1:6666"]}]}]}
    (job,) = config["scrape_configs"]
    source_job, days_job = source["scrape_configs"]
    assert job["job_name"] == APPS_JOB
    assert without(job, "file_sd_configs") == without(source_job, "file_sd_configs")
    # The apps are discovered in the file, re-read at the test's pace; the named app is written there.
    assert job["file_sd_configs"] == [{"files": [str(targets_file)], "refresh_interval": "1s"}]
    assert json.loads(targets_file.read_text()) == [
        {"targets": ["127.0.0.1:5555"], "labels": {"app": "sensor_aggregation"}}
    ]

    # A component of the stack is named by its label; without a targets file no apps job.
    with_days = render_prometheus_config(targets={"airflow-api-server": "127.0.0.1:7777"}, rule_paths=[rules])
    assert with_days["scrape_configs"] == [
        {
            **days_job,
            "static_configs": [
                {"targets": ["127.0.0.1:7777"], "labels": {"component": "airflow-api-server"}}
            ],
        }
    ]

    no_alerting = render_prometheus_config(
        targets={"raw_archive": "127.0.0.1:1"}, app_targets_file=targets_file, rule_paths=[rules]
    )
    assert "alerting" not in no_alerting and no_alerting["global"] == source["global"]
    # Without an interval, the file is re-read at monitoring/prometheus.yml's own pace.
    assert no_alerting["scrape_configs"][0]["file_sd_configs"] == [
        {**source_job["file_sd_configs"][0], "files": [str(targets_file)]}
    ]


def test_prometheus_config_points_the_apps_job_at_a_file_its_caller_keeps(tmp_path: Path) -> None:
    targets_file = tmp_path / "stream_pipelines.json"
    config = render_prometheus_config(app_targets_file=targets_file, rule_paths=[], interval="2s")
    (job,) = config["scrape_configs"]
    assert job["file_sd_configs"] == [{"files": [str(targets_file)], "refresh_interval": "2s"}]
    assert not targets_file.exists(), "no app named: the file is its caller's to write"


def test_prometheus_config_wants_a_file_to_discover_the_apps_in() -> None:
    with pytest.raises(
        ValueError, match=r"discovers the apps \['raw_archive'\] in a file: pass app_targets_file"
    ):
        render_prometheus_config(targets={"raw_archive": "127.0.0.1:1"}, rule_paths=[])


def test_target_groups_are_written_whole_and_only_when_they_change(tmp_path: Path) -> None:
    path = tmp_path / "sd" / "stream_pipelines.json"
    groups = [target_group("raw_archive", "node-3.example:9401")]
    assert write_target_groups(path, groups) is True
    assert json.loads(path.read_text()) == [
        {"targets": ["node-3.example:9401"], "labels": {"app": "raw_archive"}}
    ]
    written = path.stat()

    assert write_target_groups(path, [target_group("raw_archive", "node-3.example:9401")]) is False
    assert path.stat().st_ino == written.st_ino and path.stat().st_mtime_ns == written.st_mtime_ns

    # A change replaces the file by a rename: a reader holding the old one still reads it whole.
    with path.open() as held:
        assert write_target_groups(path, []) is True
        assert json.loads(held.read()) == groups
    assert path.stat().st_ino != written.st_ino
    assert json.loads(path.read_text()) == []
    assert [entry.name for entry in path.parent.iterdir()] == [path.name], "no temporary file left"


def test_alertmanager_config_changes_only_the_receivers_host_and_port() -> None:
    source = yaml.safe_load(ALERTMANAGER_CONFIG.read_text())
    config = render_alertmanager_config("http://127.0.0.1:4321")
    urls = {
        receiver["name"]: [hook["url"] for hook in receiver["webhook_configs"]]
        for receiver in config["receivers"]
    }
    source_urls = {
        receiver["name"]: [hook["url"] for hook in receiver["webhook_configs"]]
        for receiver in source["receivers"]
    }
    assert urls == {
        name: [url.replace("http://127.0.0.1:9095", "http://127.0.0.1:4321") for url in hooks]
        for name, hooks in source_urls.items()
    }
    assert all("127.0.0.1:9095" in url for hooks in source_urls.values() for url in hooks)
    masked = copy.deepcopy(config)
    for receiver, source_receiver in zip(masked["receivers"], source["receivers"], strict=True):
        for hook, source_hook in zip(
            receiver["webhook_configs"], source_receiver["webhook_configs"], strict=True
        ):
            hook["url"] = source_hook["url"]
    assert masked == source


def test_alertmanager_config_refuses_a_url_without_host() -> None:
    with pytest.raises(ValueError, match="receiver_base_url must look like http://host:port"):
        render_alertmanager_config("127.0.0.1:4321")
