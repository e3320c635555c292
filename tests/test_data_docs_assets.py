"""Data Docs open offline: their scripts and styles come from the site itself, pinned and checked."""

from __future__ import annotations

import logging
import re
from datetime import date
from pathlib import Path

import pytest

from stream_pipelines.quality import data_docs_assets
from stream_pipelines.quality import gates as quality_gates
from tests.conftest import make_overrides_config

JQUERY_TAG = (
    '<script src="https://code.jquery.com/jquery-3.7.1.min.js" '
    'integrity="sha384-ApNbgh9B+Y1QKtv3Rn7W3mgPxhU9K/ScQsAP7hUibX39j7fakFPskvXusvfa0b4Q" '
    'crossorigin="anonymous"></script>'
)
LOGO_TAG = (
    '<img src="https://great-expectations-web-assets.s3.us-east-2.amazonaws.com/logo-long.png'
    '?d=20261123T182347Z&dataContextId=6bcb633e" alt="logo"/>'
)
NAVIGATION_LINK = '<a href="https://docs.greatexpectations.io/docs/">docs</a>'
_LOCAL_LOADS = re.compile(
    r"""<script\b[^>]*\bsrc="([^"]+)"|<link\b[^>]*rel="stylesheet"[^>]*href="([^"]+)"|<img\b[^>]*src="([^"]+)\""""
)


def page_in(site: Path, relative: str, body: str) -> Path:
    page = site / relative
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(f"<html><head>{body}</head><body>{NAVIGATION_LINK}</body></html>")
    return page


def test_cdn_scripts_and_the_logo_are_rewritten_to_the_sites_vendored_copies(tmp_path):
    page = page_in(tmp_path, "validations/suite/run/batch.html", JQUERY_TAG + LOGO_TAG)

    assert data_docs_assets.localize(tmp_path) == []

    text = page.read_text()
    assert '<script src="../../../static/vendor/jquery-3.7.1/dist/jquery.min.js"></script>' in text
    assert 'src="../../../static/images/logo-long.png"' in text
    # A browser refuses integrity checks on file:// pages; the tarball's sha512 was checked instead.
    assert "integrity" not in text and "crossorigin" not in text
    assert NAVIGATION_LINK in text, "links a reader follows are not assets and stay as they are"
    assert (tmp_path / "static/vendor/jquery-3.7.1/dist/jquery.min.js").is_file()
    assert data_docs_assets.localize(tmp_path) == [] and page.read_text() == text, (
        "a second pass changes nothing"
    )


def test_without_fetched_assets_pages_keep_their_cdn_links_and_a_warning_says_how_to_fetch(
    tmp_path, monkeypatch, caplog
):
    monkeypatch.setenv(data_docs_assets.CACHE_VARIABLE, str(tmp_path / "empty-cache"))
    page = page_in(tmp_path / "site", "index.html", JQUERY_TAG)

    with caplog.at_level(logging.WARNING, logger=data_docs_assets.__name__):
        remaining = data_docs_assets.localize(tmp_path / "site")

    assert remaining == ["https://code.jquery.com/jquery-3.7.1.min.js"]
    assert JQUERY_TAG in page.read_text()
    assert "make setup" in caplog.text and "jquery@3.7.1" in caplog.text


def test_a_tarball_that_does_not_match_its_pinned_integrity_is_refused():
    with pytest.raises(data_docs_assets.WebAssetError, match=r"jquery@3\.7\.1: the tarball's sha512"):
        data_docs_assets.check_integrity(data_docs_assets.JQUERY, b"not the jquery tarball")


def test_every_package_the_cdn_map_names_is_fetched_and_holds_the_file():
    for url, (package, path) in data_docs_assets.CDN_FILES.items():
        assert package in data_docs_assets.PACKAGES, url
        assert (data_docs_assets.cache_root() / package.folder / path).is_file(), url


def test_data_docs_built_by_a_gate_load_nothing_from_the_network(spark, make_overrides):
    config = make_overrides_config(make_overrides())
    [result] = quality_gates.with_data_docs(
        config, [quality_gates.compliance_gate(config, date(2026, 1, 1), spark)]
    )
    site = Path(result.data_docs.removeprefix("file://")).parent

    pages = [page for page in site.rglob("*.html") if data_docs_assets.VENDOR_DIR not in page.as_posix()]
    assert len(pages) >= 3, "index, the suite's page and the validation's page"
    for page in pages:
        text = page.read_text()
        assert data_docs_assets.remote_assets(text) == [], page
        loads = [next(filter(None, match)) for match in _LOCAL_LOADS.findall(text)]
        assert any("static/vendor/bootstrap-4.3.1" in load for load in loads), page
        for load in loads:
            assert (page.parent / load).resolve().is_file(), f"{page} loads {load}, which is not there"
