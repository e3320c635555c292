"""Every relative link in README.md and docs/ leads somewhere: the file exists, and an ``#anchor`` names a
heading of the page it points into (GitHub's anchors: lowercase, punctuation dropped except hyphens,
each space a hyphen, a repeated heading numbered ``-1``, ``-2``, ...)."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

from stream_pipelines.core.config import PROJECT_ROOT

DOCUMENTS = sorted(
    [
        PROJECT_ROOT / "README.md",
        PROJECT_ROOT / "monitoring" / "README.md",
        *(PROJECT_ROOT / "docs").rglob("*.md"),
    ]
)

_FENCE = re.compile(r"^ {0,3}(```|~~~)")
_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")
# [text](target) or ![alt](target), with an optional "title"; <target> allows spaces.
_INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(\S+)")
_EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")  # http:, https:, mailto:, ...


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks."""
    lines, fence = [], None
    for number, line in enumerate(text.splitlines(), start=1):
        opening = _FENCE.match(line)
        if fence is None and opening:
            fence = opening.group(1)
        elif fence is not None and line.lstrip().startswith(fence):
            fence = None
        elif fence is None:
            lines.append((number, line))
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text."""
    text = _CODE_SPAN.sub(lambda match: match.group(2), heading)  # code keeps its text, loses its ticks
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link keeps its text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(document: Path) -> set[str]:
    """Every anchor a page offers: its headings' slugs, numbered when repeated, and explicit ids."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    text = document.read_text()
    for _number, line in prose_lines(text):
        heading = _HEADING.match(line)
        if heading:
            base = slug(heading.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
        found.update(re.findall(r"<a\s+(?:name|id)=\"([^\"]+)\"", line))
    return found


def links(document: Path) -> list[tuple[int, str]]:
    """(line number, target) of every link in the page's prose, code spans and code blocks left out."""
    found = []
    for number, line in prose_lines(document.read_text()):
        prose = _CODE_SPAN.sub("", line)
        targets = [match.group(1) for match in _INLINE_LINK.finditer(prose)]
        reference = _REFERENCE.match(prose)
        if reference:
            targets.append(reference.group(1))
        found.extend((number, target.strip("<>")) for target in targets)
    return found


def broken_links(document: Path, root: Path = PROJECT_ROOT) -> list[str]:
    """Each relative link of ``document`` that leads nowhere, as ``file:line: target: why``."""
    problems = []
    for number, target in links(document):
        if _EXTERNAL.match(target):
            continue
        where = f"{document.relative_to(root)}:{number}: {target}"
        path_part, _, anchor = target.partition("#")
        destination = (document.parent / unquote(path_part)).resolve() if path_part else document
        if not destination.exists():
            problems.append(f"{where}: {destination} does not exist")
            continue
        if not anchor:
            continue
        if destination.is_dir() or destination.suffix.lower() != ".md":
            problems.append(f"{where}: an anchor into {destination.name}, which is not a Markdown page")
        elif unquote(anchor) not in anchors(destination):
            problems.append(
                f"{where}: no heading of {destination.relative_to(root)} has the anchor #{anchor}"
            )
    return problems


def test_the_documents_are_there():
    names = {str(path.relative_to(PROJECT_ROOT)) for path in DOCUMENTS}
    assert {"README.md", "docs/architecture.md", "docs/operations.md", "docs/clusters.md"} <= names
    assert sum(len(links(path)) for path in DOCUMENTS) > 50, "the link reader found almost no links"


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: str(path.relative_to(PROJECT_ROOT)))
def test_every_relative_link_leads_to_a_file_and_heading(document: Path):
    assert broken_links(document) == []


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("Kafka: authentication and encryption", "kafka-authentication-and-encryption"),
        ("Raw archive (`raw_archive`)", "raw-archive-raw_archive"),
        ("Fault injection (`make chaos`)", "fault-injection-make-chaos"),
        ("S3 and Spark's own files", "s3-and-sparks-own-files"),
        ("Late data: the rule the tests pin down", "late-data-the-rule-the-tests-pin-down"),
        ('The "Streaming pipeline" page', "the-streaming-pipeline-page"),
        ("Not served: hdfs://", "not-served-hdfs"),
        ("`make bench-stack`", "make-bench-stack"),
        ("Stop, start -- and  pause", "stop-start----and--pause"),
        ("See [the docs](docs/x.md)", "see-the-docs"),
    ],
)
def test_anchors_follow_githubs_rules(heading: str, anchor: str):
    assert slug(heading) == anchor


def test_a_broken_file_a_missing_heading_and_a_repeated_heading_are_told_apart(tmp_path: Path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "other.md").write_text(
        "# Other\n\n## Part\n\n## Part\n\n```\n## Not a heading\n```\n"
    )
    page = tmp_path / "README.md"
    page.write_text(
        "# Title\n\n"
        "[ok](docs/other.md) [ok](docs/other.md#part) [ok](docs/other.md#part-1) [ok](#title)\n"
        "[site](https://example.com/x#y) `[code](missing.md)`\n"
        "```\n[in a block](missing.md)\n```\n"
        "[gone](docs/missing.md)\n"
        "[no such part](docs/other.md#part-2)\n"
        "[inside a code block](docs/other.md#not-a-heading)\n"
        "[here](#nowhere)\n"
    )
    problems = broken_links(page, root=tmp_path)
    assert [problem.split(": ", 2)[:2] for problem in problems] == [
        ["README.md:8", "docs/missing.md"],
        ["README.md:9", "docs/other.md#part-2"],
        ["README.md:10", "docs/other.md#not-a-heading"],
        ["README.md:11", "#nowhere"],
    ]
