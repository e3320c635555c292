"""The on-call runbooks (docs/runbooks.md, which the package ships) and the alert rules' links into them.

Every alerting rule carries two links, built on the ``pipeline_ui`` external label that Prometheus' config
sets to the Airflow UI's address (``render_prometheus_config`` sets it from the api-server's target):

- ``runbook_url``: the rule's section of the runbooks, as the "Streaming pipeline" plugin serves them
  (``ROUTE``), so the page matches the installed rules;
- ``pipeline_page``: the plugin's page at the app's row.

A section's anchor is the GitHub slug of its heading, so one link works in the repository's rendering of
docs/runbooks.md and in the served page.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

from stream_pipelines.core.shipped import SHIPPED

RUNBOOKS = SHIPPED / "docs" / "runbooks.md"
UI_LABEL = "pipeline_ui"
PAGE_PREFIX = "/streaming-pipeline"
ROUTE = f"{PAGE_PREFIX}/runbooks"


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, only letters, digits, ``-`` and ``_``, spaces as ``-``."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchor(alert: str, case: str | None = None) -> str:
    """The section of ``alert`` (and its ``case`` label, for an alert with several)."""
    return slug(f"{alert}: {case}" if case else alert)


def runbook_url(alert: str, case: str | None = None) -> str:
    """The rule annotation, a Prometheus template."""
    return f"{{{{ $externalLabels.{UI_LABEL} }}}}{ROUTE}#{anchor(alert, case)}"


def pipeline_page(app_label: bool, section: str | None = None) -> str:
    """The rule annotation that links the page: at the app's row for a rule with an ``app`` label, else at
    the page's ``section`` (its top when None)."""
    base = f"{{{{ $externalLabels.{UI_LABEL} }}}}{PAGE_PREFIX}/"
    if not app_label:
        return f"{base}#{section}" if section else base
    return f"{base}?dag_id=supervise_{{{{ $labels.app }}}}#app-{{{{ $labels.app }}}}"


@dataclass(frozen=True)
class RenderedRunbooks:
    html: str
    anchors: tuple[str, ...]


def render(markdown: str) -> RenderedRunbooks:
    """The runbooks as HTML with an ``id`` on every heading. A link to another doc of the repository
    becomes its path in plain text: the served page has only this doc."""
    from markdown_it import MarkdownIt

    parser = MarkdownIt("commonmark", {"html": False})
    tokens = parser.parse(markdown)
    anchors = []
    for index, token in enumerate(tokens):
        if token.type == "heading_open":
            anchors.append(slug(tokens[index + 1].content))
            token.attrSet("id", anchors[-1])
        link_tag = "a"  # the tag of the link being closed (links do not nest)
        for child in token.children or ():
            if child.type == "link_open":
                href = str(child.attrGet("href") or "")
                if not href.startswith(("#", "http://", "https://")):
                    child.tag, child.attrs = "span", {"class": "doc", "title": f"docs/{href}"}
                link_tag = child.tag
            elif child.type == "link_close":
                child.tag = link_tag
    return RenderedRunbooks(parser.renderer.render(tokens, parser.options, {}), tuple(anchors))


@cache  # the shipped file changes only with the package: read and render it once per process
def read() -> RenderedRunbooks:
    return render(RUNBOOKS.read_text())
