"""A Data Docs site that cannot be rebuilt costs the nightly run nothing but the site: each gate's
result says why, and the report (written after) carries it."""

from __future__ import annotations

import json
from pathlib import Path

from stream_pipelines.core.config import load_config
from stream_pipelines.quality import gates, nightly_job


def test_a_failed_rebuild_is_said_in_each_result_and_the_run_goes_on(monkeypatch, tmp_path):
    def unreachable_store(config, results, now=None):
        raise OSError("the bucket does not answer")

    monkeypatch.setattr(gates, "with_data_docs", unreachable_store)
    said: list[str] = []
    results = [
        gates.GateResult("raw_events", "2026-01-01", True, 6),
        gates.GateResult("compliance_table", "2026-01-01", True, 8),
    ]
    config = load_config("local", [f"paths.data_root={tmp_path}"], environ={})
    assert nightly_job.data_docs_or_why_not(config, results, said.append) is results
    assert [r.data_docs_error for r in results] == ["OSError: the bucket does not answer"] * 2
    assert [r.data_docs for r in results] == [None, None]
    assert said == ["the Data Docs site was not rebuilt: OSError: the bucket does not answer"]


def test_the_report_says_why_the_site_was_not_rebuilt():
    from stream_pipelines.reconciliation.report_html import details_section

    document = json.loads((Path(__file__).parent / "fixtures" / "reconciliation" / "report.json").read_text())
    gate = gates.GateResult("raw_events", "2026-01-01", True, 6, data_docs_error="OSError: <gone>").as_json()
    html = details_section({**document, "quality_gates": [gate]})
    assert "The Data Docs site was not rebuilt: OSError: &lt;gone&gt;" in html
