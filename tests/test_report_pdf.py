"""The nightly report written with its PDF copy: needs headless Chromium (the integration tier).

Chromium comes from Debian, installed by infra/scripts/install_test_servers.sh (``make test`` runs it);
a missing one fails, it does not skip. The report's pure parts, and its writing without Chromium, are
tested in tests/unit/test_report.py over the same fixture.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from stream_pipelines.reconciliation import pdf, plots
from stream_pipelines.reconciliation.report import update_report, write_document

# A real report.json written by the nightly job over the scripted scenario of tests/test_reconcile.py.
FIXTURE = Path(__file__).parent / "unit" / "fixtures" / "reconciliation" / "report.json"


@pytest.fixture
def document() -> dict:
    return json.loads(FIXTURE.read_text())


def test_the_report_writes_html_json_plots_and_a_pdf(document, tmp_path):
    if not pdf.CHROMIUM.is_file():
        pytest.fail(f"{pdf.CHROMIUM} is missing: run infra/scripts/install_test_servers.sh")
    write_document(copy.deepcopy(document), tmp_path)

    written = json.loads((tmp_path / "report.json").read_text())
    assert {k: written[k] for k in document if k not in ("plots", "outputs")} == {
        k: document[k] for k in document if k not in ("plots", "outputs")
    }, "every field report.json had is kept"
    assert written["pdf"] == {"rendered": True, "path": str(tmp_path / "report.pdf")}
    assert written["outputs"]["report_pdf"] == str(tmp_path / "report.pdf")
    assert (tmp_path / "report.pdf").read_bytes().startswith(b"%PDF")
    for name in (plots.DELAY_PLOT, plots.WHAT_IF_PLOT):
        assert (tmp_path / name).read_bytes().startswith(b"\x89PNG")

    update_report(
        tmp_path, "quality_gates", [{"suite": "raw_events", "success": True, "data_docs": "gx/index.html"}]
    )
    page = (tmp_path / "report.html").read_text()
    assert '<a href="gx/index.html">raw_events</a>' in page
    assert json.loads((tmp_path / "report.json").read_text())["day_totals"] == document["day_totals"]
