"""The reviewers' report: report.json for machines; report.html (self-contained, plots embedded) and a
PDF copy of it for people; the plots also as PNG files.

The pure parts live apart: summary.py (report.json -> the summary's figures), plots.py (report.json ->
figures), report_html.py (report.json + plots -> HTML); this module does the writing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stream_pipelines.core.store import location, write_atomically
from stream_pipelines.reconciliation.pdf import PdfNotRendered, render_pdf
from stream_pipelines.reconciliation.plots import DELAY_PLOT, WHAT_IF_PLOT, plot_figures, png
from stream_pipelines.reconciliation.report_html import render_html

if TYPE_CHECKING:
    from stream_pipelines.core.config import PipelineConfig

__all__ = ["DELAY_PLOT", "WHAT_IF_PLOT", "report_dir", "update_report", "write_document"]
PDF_NAME = "report.pdf"


def report_dir(config: PipelineConfig, day: str) -> Path:
    """Where event day D's report lives (``day`` as YYYY-MM-DD), locally or on the object store."""
    return location(config.spark.extra_conf, f"{config.data_path('reports')}/reconciliation/{day}")


def update_report(folder: Path, section: str, value: Any) -> None:
    """Add a section (e.g. quality gate results) to an existing report and re-render the rest."""
    document = json.loads((folder / "report.json").read_text())
    document[section] = value
    write_document(document, folder)


def write_document(document: dict[str, Any], folder: Path) -> None:
    """The plots, report.json, report.html and its PDF copy for ``document`` (report.json's content)."""
    plots = {name: (png(figure), caption) for name, (figure, caption) in plot_figures(document).items()}
    for name, (data, _) in plots.items():
        write_atomically(folder / name, data)
    document["plots"] = {name: str(folder / name) for name in plots}
    document.pop("pdf", None)
    document.setdefault("outputs", {})
    try:
        write_atomically(folder / PDF_NAME, render_pdf(render_html(document, plots)))
        document["pdf"] = {"rendered": True, "path": str(folder / PDF_NAME)}
        document["outputs"]["report_pdf"] = str(folder / PDF_NAME)
    except PdfNotRendered as reason:
        document["pdf"] = {"rendered": False, "reason": str(reason)}
        document["outputs"].pop("report_pdf", None)
        if (folder / PDF_NAME).exists():  # an earlier run's copy would no longer match the report
            (folder / PDF_NAME).unlink()
    write_atomically(folder / "report.json", json.dumps(document, indent=2, default=str))
    write_atomically(folder / "report.html", render_html(document, plots))
