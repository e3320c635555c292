"""The nightly report's pure parts (report.json -> summary -> HTML, report.json -> plots) and its writing.

The fixture is a real report.json, written by the nightly job over the scripted scenario of
tests/test_reconcile.py (two late deliveries dropped, one duplicate counted, one window still open):
tests/unit/fixtures/reconciliation/report.json (and empty_day_report.json, a day without events).
"""

from __future__ import annotations

import base64
import copy
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from stream_pipelines.reconciliation import pdf, plots
from stream_pipelines.reconciliation.report import write_document
from stream_pipelines.reconciliation.report_html import DETAIL_ROWS, LABELS, render_html
from stream_pipelines.reconciliation.summary import TOP_CORRECTIONS, report_summary

FIXTURES = Path(__file__).parent / "fixtures" / "reconciliation"
FIXTURE = FIXTURES / "report.json"
# The scenario's facts (tests/test_reconcile.py): 9 valid sensor deliveries of 8 events, 2 dropped
# as late (one whole window), 1 duplicate counted, the 00:30 window not closed by the stream.
LATE_DROPPED, DUPLICATES, EVENTS, DELIVERIES = 2, 1, 8, 9


@pytest.fixture
def document() -> dict:
    return json.loads(FIXTURE.read_text())


def rendered(document: dict) -> str:
    figures = plots.plot_figures(document)
    return render_html(document, {name: (plots.png(f), caption) for name, (f, caption) in figures.items()})


class Page(HTMLParser):
    """What the tests read back from the HTML: labelled keys with their text, sources, links, text."""

    def __init__(self, page: str) -> None:
        super().__init__()
        self.labelled: list[tuple[str, str]] = []
        self.sources: list[str] = []
        self.links: list[str] = []
        self.sections: list[str] = []
        self.text: list[str] = []
        self.styles: list[str] = []
        self._key: str | None = None
        self._in_style = False
        self.feed(page)

    def handle_starttag(self, tag: str, attrs: list) -> None:
        found = dict(attrs)
        if "data-key" in found:
            self._key = found["data-key"]
            self.labelled.append((self._key, ""))
        if found.get("src") is not None:
            self.sources.append(found["src"])
        if found.get("href") is not None:
            self.links.append(found["href"])
        if tag == "section":
            self.sections.append(found["id"])
        self._in_style = tag == "style"

    def handle_endtag(self, tag: str) -> None:
        self._key = None
        self._in_style = False

    def handle_data(self, data: str) -> None:
        if self._in_style:
            self.styles.append(data)
            return
        self.text.append(data)
        if self._key is not None:
            key, text = self.labelled[-1]
            self.labelled[-1] = (key, text + data)


def test_the_summary_gives_the_scenarios_figures(document):
    summary = report_summary(document)

    assert summary["status"] == "passed" and summary["headline"].startswith("PASSED")
    assert summary["events"]["sensor_events"] == EVENTS
    assert summary["events"]["sensor_deliveries"] == DELIVERIES
    assert summary["events"]["archive_rows_read"] == document["inputs"]["archive_rows_read"]
    assert summary["windows"] == {
        "exact": 5,
        "streaming": 3,
        "matching": 1,
        "explained": 3,
        "unexplained": 0,
        "pending": 1,
    }
    assert summary["late"]["dropped_deliveries"] == LATE_DROPPED
    assert summary["duplicates"]["deliveries"] == DUPLICATES
    # Exact: 8 events. The stream: 2 dropped, 1 duplicate counted, 1 reading in the open window.
    assert summary["day_totals"]["exact_readings"] == EVENTS
    assert summary["day_totals"]["streaming_readings"] == EVENTS - LATE_DROPPED + DUPLICATES - 1
    # sensor-0001 changed in two windows (+1 dropped reading, -1 duplicate), sensor-0002 in one.
    assert [(s["sensor_id"], s["windows"], s["readings_changed"]) for s in summary["largest_by_sensor"]] == [
        ("sensor-0001", 2, 2),
        ("sensor-0002", 1, 1),
    ]
    assert {(w["window"], w["sensor_id"], w["readings_corrected"]) for w in summary["largest_by_window"]} == {
        ("2026-01-01 00:00-00:05", "sensor-0001", 1),
        ("2026-01-01 00:00-00:05", "sensor-0002", 1),
        ("2026-01-01 00:05-00:10", "sensor-0001", -1),
    }
    pending = summary["pending"]
    assert pending["count"] == pending["not_closed"] == 1
    assert "2026-01-01T00:35:00" in pending["advice"][0]
    assert "2026-01-04 00:00:00 UTC" in pending["advice"][-1], "D's end plus the 2-day late horizon"


def test_a_report_written_before_the_status_counts_and_day_totals_summarises_the_same(document):
    old = copy.deepcopy(document)
    del old["late_event_ledger"]["tumbling_status_counts"], old["day_totals"]
    current, older = report_summary(document), report_summary(old)
    assert older["late"]["dropped_deliveries"] == current["late"]["dropped_deliveries"] == LATE_DROPPED
    assert older["day_totals"]["streaming_readings"] == current["day_totals"]["streaming_readings"]
    del old["inputs"]["config_digest"]
    assert '<dt data-key="config_digest">Config digest</dt><dd>not recorded</dd>' in rendered(old)


def test_a_failed_run_says_so_first_and_names_the_window(document):
    failed = copy.deepcopy(document)
    failed["status"] = "failed"
    failed["diffs"][2] |= {"verdict": "unexplained", "reasons": ["not reproduced by the ledger"]}
    failed["window_counts"] |= {"explained_diffs": 2, "unexplained_diffs": 1}
    summary = report_summary(failed)
    assert summary["headline"].startswith("FAILED")
    assert summary["largest_by_window"][0]["verdict"] == "unexplained", "what to look at comes first"
    assert any("[2026-01-01 00:05:00, 00:10:00) sensor-0001" in reason for reason in summary["why"])
    page = rendered(failed)
    assert page.index("FAILED") < page.index('id="plots"')
    assert re.search(r"<details open><summary>unexplained \(1\)", page)


def test_the_page_opens_with_the_summary_then_plots_details_and_provenance(document):
    page = Page(rendered(document))
    assert page.sections == ["summary", "plots", "details", "provenance"]
    text = " ".join(page.text)
    assert text.index("PASSED: the stream's figures") < text.index("Largest corrections by sensor")
    for recorded in ("code_version", "config_digest", "archive_path", "archive_rows_read"):
        assert str(document["inputs"][recorded]) in text


def test_every_key_shown_is_labelled_and_no_internal_key_shows(document):
    page = Page(rendered(document))
    keys = {key for key, _ in page.labelled}
    assert set(document["inputs"]) <= keys, "every input is in the provenance block"
    unlabelled = keys - set(LABELS)
    assert not unlabelled, f"add these report keys to report_html.LABELS: {sorted(unlabelled)}"
    for key, text in page.labelled:
        assert text == LABELS[key]
    visible = " ".join(page.text)
    for internal in ("sensor_deliveries_for_day", "final_streaming_watermark", "missing_window", "p99_s"):
        assert internal not in visible


def test_the_page_is_self_contained_with_the_plots_embedded(document):
    page = Page(rendered(document))
    assert len(page.sources) == 2
    for source in page.sources:
        assert source.startswith("data:image/png;base64,")
        assert base64.b64decode(source.removeprefix("data:image/png;base64,")).startswith(b"\x89PNG")
    assert not [link for link in page.links if not link.startswith("#")]
    outside_images = re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "", rendered(document))
    assert not re.search(r"https?:|//[a-z]|@import|url\(", outside_images.replace("file://", ""))


def test_the_print_stylesheet_expands_lists_hides_the_nav_and_breaks_pages(document):
    style = "".join(Page(rendered(document)).styles)
    printed = style[style.index("@media print") :]
    assert re.search(r"nav\{display:none\}", printed)
    assert "details::details-content{content-visibility:visible" in printed
    assert "section{break-before:page}" in printed


def test_long_lists_are_collapsed_and_capped_with_the_rest_in_report_json(document):
    many = copy.deepcopy(document)
    template = many["diffs"][0]
    many["diffs"] = [template] * (DETAIL_ROWS + 50)
    page = rendered(many)
    assert f"<details><summary>explained ({DETAIL_ROWS + 50})" in page
    assert "50 more in report.json (diffs, verdict explained)" in page
    listed_in_summary = TOP_CORRECTIONS
    assert page.count('<tr class="explained">') == DETAIL_ROWS + listed_in_summary


def _marks(axes) -> dict[str, float]:
    return {line.get_gid(): line.get_xdata()[0] for line in axes.get_lines() if line.get_gid()}


def test_the_delay_plot_has_log_counts_and_marks_the_watermarks_and_p99(document):
    figure = plots.delay_figure(document)
    sensors = figure.axes[0]
    assert len(figure.axes) == 1, "topics without deliveries get no empty panel"
    assert sensors.get_yscale() == "log"
    stats = document["delay_analysis"]["per_topic"][0]
    assert _marks(sensors) == pytest.approx(
        {
            plots.CONFIGURED_GID: 120.0,  # sensors.watermark = 2 minutes
            plots.P99_GID: stats["p99_s"],
            plots.RECOMMENDED_GID: document["delay_analysis"]["recommended_watermark_s"],
        }
    )
    (bars,) = sensors.containers
    assert sum(bar.get_height() for bar in bars) == stats["events"]
    assert "impressions" in plots.delay_caption(document)


def test_the_what_if_plot_marks_the_current_and_recommended_delay_on_each_panel(document):
    figure = plots.what_if_figure(document)
    dropped, state, latency = figure.axes
    recommended_min = document["delay_analysis"]["recommended_watermark_s"] / 60
    for axes in (dropped, state, latency):
        assert axes.get_xscale() == "log"
        assert _marks(axes) == pytest.approx(
            {plots.CONFIGURED_GID: 2.0, plots.RECOMMENDED_GID: recommended_min}
        )
    rows = document["delay_analysis"]["what_if"]
    assert list(dropped.get_lines()[0].get_ydata()) == pytest.approx([100 * r["dropped_share"] for r in rows])
    assert list(state.get_lines()[0].get_ydata()) == pytest.approx([r["expected_state_rows"] for r in rows])
    assert "estimate" in plots.what_if_caption(document)


def test_without_chromium_the_report_still_writes_and_says_why_there_is_no_pdf(
    document, tmp_path, monkeypatch
):
    (tmp_path / "report.pdf").write_bytes(b"%PDF an earlier run's copy")
    monkeypatch.setattr(pdf, "CHROMIUM", tmp_path / "no-chromium-here")
    write_document(copy.deepcopy(document), tmp_path)

    written = json.loads((tmp_path / "report.json").read_text())
    assert written["pdf"]["rendered"] is False
    assert "no-chromium-here is not installed" in written["pdf"]["reason"]
    assert "report_pdf" not in written["outputs"]
    assert not (tmp_path / "report.pdf").exists(), "a stale PDF would not match the report"
    assert "No PDF copy:" in (tmp_path / "report.html").read_text()


def test_an_empty_day_renders_with_its_reason_and_no_empty_plots():
    empty = json.loads((FIXTURES / "empty_day_report.json").read_text())
    summary = report_summary(empty)
    assert summary["headline"].startswith("EMPTY DAY")
    assert summary["events"]["sensor_events"] == summary["day_totals"]["exact_readings"] == 0
    assert any("no valid sensor event" in reason for reason in summary["why"])
    (axes,) = plots.delay_figure(empty).axes
    assert [text.get_text() for text in axes.texts] == ["no deliveries for this day"]
    page = Page(rendered(empty))
    assert page.sections == ["summary", "plots", "details", "provenance"]
    assert "No window needed a correction." in " ".join(page.text)


def test_a_sign_off_shows_at_the_top_with_who_when_and_the_comment_escaped(document):
    signed = {
        **document,
        "sign_off": {
            "decision": "rejected",
            "by": "ann",
            "at": "2026-11-26T10:00:00+00:00",
            "comment": "<b>window 10:05</b> looks short",
            "report_digest": "sha256:0123456789abcdef0123",
        },
    }
    page = rendered(signed)
    header = page[page.index("<header>") : page.index("</header>")]
    assert (
        '<p class="sign-off rejected"><strong>Rejected</strong> by ann at 2026-11-26 10:00:00 UTC' in header
    )
    assert "&lt;b&gt;window 10:05&lt;/b&gt; looks short" in header and "<b>window" not in page
    assert 'class="sign-off' not in rendered(document)


def test_the_days_runs_show_side_by_side_under_the_title(document):
    run = {"status": "passed", "finished_at": "2026-11-26T10:00:00+00:00", "manual": False}
    day = {
        "state": "reconciled_final",
        "runs": {
            "provisional": {
                **run,
                "figures": {
                    "window_counts": {"exact_windows": 8, "streaming_windows": 7},
                    "diffs": {"pending": 1},
                },
            },
            "final": {
                **run,
                "figures": {
                    "window_counts": {"exact_windows": 8, "streaming_windows": 8},
                    "diffs": {},
                    "compliance_rows": 8,
                },
            },
        },
    }
    page = rendered({**document, "day_state": day})
    header = page[page.index("<header>") : page.index("</header>")]
    assert "Day state: <strong>reconciled (final)</strong>" in header
    assert "<tr><th>provisional</th><td>passed</td><td>8 / 7</td><td>1 pending</td><td>-</td>" in header
    assert "<tr><th>final</th><td>passed</td><td>8 / 8</td><td>none</td><td>8</td>" in header
