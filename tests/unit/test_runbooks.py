"""docs/runbooks.md, the section every alert links: what it means, what to check, what to do, with actions
that are commands of the installed package or clicks in the Airflow UI, served by the plugin at the
anchors the rules link (tests/test_alert_rules.py checks the rules' side)."""

from __future__ import annotations

import argparse
import re

import yaml

from stream_pipelines.airflow.plugin import render_runbooks
from stream_pipelines.devtools import commands
from stream_pipelines.observability import runbooks
from stream_pipelines.observability.monitoring_rules import rule_files

TEXT = runbooks.RUNBOOKS.read_text()


def rule_sections() -> dict[str, str]:
    """Anchor -> the text of that rule's section, for every alerting rule."""
    sections = {}
    for path in rule_files():
        for group in yaml.safe_load(path.read_text())["groups"]:
            for rule in group["rules"]:
                if "alert" in rule:
                    section = runbooks.anchor(rule["alert"], rule["labels"].get("case"))
                    sections[section] = section_text(section)
    return sections


def section_text(anchor: str) -> str:
    """The text under the level-2 heading whose slug is ``anchor``, up to the next one."""
    parts = re.split(r"^## (.+)$", TEXT, flags=re.MULTILINE)
    bodies = {runbooks.slug(heading): body for heading, body in zip(parts[1::2], parts[2::2], strict=True)}
    assert anchor in bodies, f"docs/runbooks.md has no section #{anchor}"
    return bodies[anchor]


def test_every_rule_has_a_section_that_says_what_it_means_what_to_check_and_what_to_do():
    sections = rule_sections()
    assert len(sections) == 16
    for anchor, body in sections.items():
        for part in ("**Means.**", "**Check.**", "**Do.**"):
            assert part in body, f"#{anchor} lacks {part}"
        actions = body.split("**Do.**", 1)[1]
        assert re.search(r"^1\. ", actions, flags=re.MULTILINE), f"#{anchor}: its actions are not steps"


def test_every_action_is_a_shipped_command_or_a_ui_click_or_another_section():
    """Each step names a pipelinectl command, an Airflow DAG to trigger, Alertmanager's silence, a
    setting to change, or a section that does; and every pipelinectl command there ships (the
    developer commands of stream_pipelines.devtools are not on a cluster)."""
    developer: list[str] = []
    commands.register(lambda name, _handler, _help: developer.append(name) or argparse.ArgumentParser())
    assert "broker" in developer
    for anchor, body in rule_sections().items():
        steps = re.split(r"^\d+\. ", body.split("**Do.**", 1)[1], flags=re.MULTILINE)[1:]
        for step in steps:
            acts = (
                "`pipelinectl " in step
                or re.search(r"trigger\s+`\w+`", step)
                or "](#" in step
                or "silence" in step
                or "escalate" in step.lower()
                or "Tell " in step
                or "let it" in step.lower()
            )
            assert acts, f"#{anchor}: a step without an action: {step.strip()[:120]}"
    shipped = re.findall(r"`pipelinectl (\S+)", TEXT)
    assert shipped and not set(shipped) & set(developer), shipped


def test_the_links_inside_the_runbooks_resolve():
    anchors = set(runbooks.read().anchors)
    for target in re.findall(r"\]\(#([^)]+)\)", TEXT):
        assert target in anchors, f"docs/runbooks.md links #{target}, which no heading has"


def test_the_served_page_has_each_section_at_its_anchor_and_no_link_into_the_repository():
    rendered = runbooks.read()
    page = render_runbooks(rendered)
    for anchor in rule_sections():
        assert f'id="{anchor}"' in page, anchor
    # Another doc of the repository is named, not linked: the api-server serves only this one.
    assert '<span class="doc" title="docs/operations.md#checkpoints-preflight-inspect-reset">' in page
    assert 'href="operations.md' not in page and 'href="#restart-an-app"' in page


def test_a_heading_slug_is_githubs():
    assert runbooks.slug("WatermarkLagHigh: stalled_input") == "watermarklaghigh-stalled_input"
    assert runbooks.slug("See an app's records") == "see-an-apps-records"
    assert runbooks.anchor("QueryDown") == "querydown"


def test_raw_html_in_the_runbooks_is_shown_as_text():
    assert "<script>" not in runbooks.render("## A\n\n<script>alert(1)</script>\n").html


def test_an_active_alert_on_the_pipeline_page_links_its_runbook_section():
    from types import SimpleNamespace

    from stream_pipelines.airflow import plugin

    alert = {"labels": {"alertname": "WatermarkLagHigh", "case": "slow_processing", "app": "ad_matching"}}
    table = plugin._alerts(SimpleNamespace(alerts_source="Alertmanager at http://am", alerts=[alert]))
    assert 'href="runbooks#watermarklaghigh-slow_processing"' in table
