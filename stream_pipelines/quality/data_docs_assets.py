"""Great Expectations Data Docs that open offline.

GX's page templates load Bootstrap, jQuery, Font Awesome, bootstrap-table and Vega from public CDNs,
and its logo from S3 with the data context's id in the query string. Offline (an air-gapped cluster,
a reviewer's laptop on a train) the pages open unstyled and their tables stay empty. ``make setup``
fetches the same files, pinned and integrity-checked, from the npm registry into the web cache
(``cache_root``).
After each Data Docs build, ``localize`` copies them into the site's ``static/vendor`` folder (so
the site stays self-contained) and rewrites every CDN reference to a relative path.

The npm copies are the CDN's bytes: bootstrap 4.3.1's and popper.js 1.12.9's files have the SHA-384
that GX's own ``integrity`` attributes pin. Those attributes (and ``crossorigin``) are dropped on
rewritten tags, because browsers refuse subresource integrity on ``file://`` pages; the sha512 of
each npm tarball is checked at fetch time instead.
"""

from __future__ import annotations

import base64
import hashlib
import io
import logging
import os
import re
import shutil
import sys
import tarfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from stream_pipelines.core.shipped import cache_dir

CACHE_VARIABLE = "PIPELINE_WEB_ASSET_CACHE"
REGISTRY = "https://registry.npmjs.org"
VENDOR_DIR = "static/vendor"
LOGO = "static/images/logo-long.png"

log = logging.getLogger(__name__)


class WebAssetError(RuntimeError):
    """A pinned web asset could not be fetched or failed its integrity check."""


@dataclass(frozen=True)
class NpmPackage:
    name: str
    version: str
    # The registry's dist.integrity for the tarball (sha512, base64).
    integrity: str
    # Files or folders (ending in "/") inside the package to keep.
    keep: tuple[str, ...]

    @property
    def folder(self) -> str:
        return f"{self.name.rsplit('/', 1)[-1]}-{self.version}"

    @property
    def tarball_url(self) -> str:
        return f"{REGISTRY}/{self.name}/-/{self.folder}.tgz"


def _package(name: str, version: str, integrity: str, *keep: str) -> NpmPackage:
    return NpmPackage(name, version, integrity, keep)


VEGA = _package(
    "vega", "5.33.1",
    "sha512-1fArfVDUqVbb5z8n+/nVQb+VNBzx8svY6CrsyTK4Ujm4yrd9I1auoKxBAPXLCavY1LcrbHUskQbGUP8gXOzyQw==",
    "build/vega.min.js",
)  # fmt: skip
VEGA_LITE = _package(
    "vega-lite", "5.23.0",
    "sha512-l4J6+AWE3DIjvovEoHl2LdtCUkfm4zs8Xxx7INwZEAv+XVb6kR6vIN1gt3t2gN2gs/y4DYTs/RPoTeYAuEg6mA==",
    "build/vega-lite.min.js",
)  # fmt: skip
VEGA_EMBED = _package(
    "vega-embed", "6.29.0",
    "sha512-PmlshTLtLFLgWtF/b23T1OwX53AugJ9RZ3qPE2c01VFAbgt3/GSNI/etzA/GzdrkceXFma+FDHNXUppKuM0U6Q==",
    "build/vega-embed.min.js",
)  # fmt: skip
BOOTSTRAP_DARK = _package(
    "@forevolve/bootstrap-dark", "1.1.0",
    "sha512-A3ucpEpxPoTVO490lZZCfjPXxv832l7mm1IxX3bXyxvgwnPGXDLyh7dWrphXKO8YBAu3EswbBEu3VSW8NRMW3A==",
    "dist/css/bootstrap-prefers-dark.css",
)  # fmt: skip
DATEPICKER = _package(
    "bootstrap-datepicker", "1.9.0",
    "sha512-9rYYbaVOheGYxjOr/+bJCmRPihfy+LkLSg4fIFMT9Od8WwWB/MB50w0JO1eBgKUMbb7PFHQD5uAfI3ArAxZRXA==",
    "dist/css/bootstrap-datepicker.min.css", "dist/js/bootstrap-datepicker.min.js",
)  # fmt: skip
FONT_AWESOME = _package(
    "@fortawesome/fontawesome-free", "6.6.0",
    "sha512-60G28ke/sXdtS9KZCpZSHHkCbdsOGEhIUGlwq6yhY74UpTiToIh8np7A8yphhM4BWsvNFtIvLpi4co+h9Mr9Ow==",
    "css/all.min.css", "webfonts/",  # the stylesheet loads its fonts from ../webfonts/
)  # fmt: skip
BOOTSTRAP = _package(
    "bootstrap", "4.3.1",
    "sha512-rXqOmH1VilAt2DyPzluTi2blhk17bO7ef+zLLPlWvG494pDxcM234pJ8wTc/6R40UWizAIIMgxjvxZg5kmsbag==",
    "dist/css/bootstrap.min.css", "dist/js/bootstrap.min.js",
)  # fmt: skip
BOOTSTRAP_TABLE_1_19_0 = _package(
    "bootstrap-table", "1.19.0",
    "sha512-L+USHm3X9FKocx/6yngGu12yF6r6s1Ntuc+hoIK2a2QQJjHw5kcySLiE2HY/9sEaSGAOfPbfQOtBH3uKkcpqEA==",
    "dist/extensions/filter-control/bootstrap-table-filter-control.css",
    "dist/extensions/filter-control/bootstrap-table-filter-control.min.css",
)  # fmt: skip
BOOTSTRAP_TABLE = _package(
    "bootstrap-table", "1.19.1",
    "sha512-WvV+l1AI/C+zThaKmfHmi/IuayVNB0qdFyEhFx1jyZhO0oLtNJNANkCR3rvJf6Dkh72dsLElxpE/bzK9seEQLA==",
    "dist/bootstrap-table.min.css", "dist/bootstrap-table.min.js",
    "dist/extensions/filter-control/bootstrap-table-filter-control.min.js",
)  # fmt: skip
POPPER = _package(
    "popper.js", "1.12.9",
    "sha512-s0EEi9xiSCdqz9lV4IiVH5yIZnDX/U1t0tCjB+0jXx9jW8lrR7kOpVupiUg175ogqVoudpDXHF1p6dKATCHMeg==",
    "dist/umd/popper.min.js",
)  # fmt: skip
JQUERY = _package(
    "jquery", "3.7.1",
    "sha512-m4avr8yL8kmFN8psrbFFFmB/If14iN5o9nw/NgnnM+kybDJpRsAynV2BsfpTYrTRysYUdADVD7CkUUizgkpLfg==",
    "dist/jquery.min.js",
)  # fmt: skip
PACKAGES = (
    VEGA, VEGA_LITE, VEGA_EMBED, BOOTSTRAP_DARK, DATEPICKER, FONT_AWESOME, BOOTSTRAP,
    BOOTSTRAP_TABLE_1_19_0, BOOTSTRAP_TABLE, POPPER, JQUERY,
)  # fmt: skip

# Every URL GX 1.x's templates (render/view/templates/*.j2) load, and the npm file it serves.
CDN_FILES: dict[str, tuple[NpmPackage, str]] = {
    "https://cdn.jsdelivr.net/npm/vega@5": (VEGA, "build/vega.min.js"),
    "https://cdn.jsdelivr.net/npm/vega-lite@5": (VEGA_LITE, "build/vega-lite.min.js"),
    "https://cdn.jsdelivr.net/npm/vega-embed@6": (VEGA_EMBED, "build/vega-embed.min.js"),
    "https://cdn.jsdelivr.net/npm/@forevolve/bootstrap-dark@1.1.0/dist/css/bootstrap-prefers-dark.css": (
        BOOTSTRAP_DARK,
        "dist/css/bootstrap-prefers-dark.css",
    ),
    "https://cdnjs.cloudflare.com/ajax/libs/bootstrap-datepicker/1.9.0/css/bootstrap-datepicker.min.css": (
        DATEPICKER,
        "dist/css/bootstrap-datepicker.min.css",
    ),
    "https://cdnjs.cloudflare.com/ajax/libs/bootstrap-datepicker/1.9.0/js/bootstrap-datepicker.min.js": (
        DATEPICKER,
        "dist/js/bootstrap-datepicker.min.js",
    ),
    "https://cdnjs.cloudflare.com/ajax/libs/font-awesome/6.6.0/css/all.min.css": (
        FONT_AWESOME,
        "css/all.min.css",
    ),
    "https://maxcdn.bootstrapcdn.com/bootstrap/4.3.1/css/bootstrap.min.css": (
        BOOTSTRAP,
        "dist/css/bootstrap.min.css",
    ),
    "https://stackpath.bootstrapcdn.com/bootstrap/4.3.1/js/bootstrap.min.js": (
        BOOTSTRAP,
        "dist/js/bootstrap.min.js",
    ),
    "https://unpkg.com/bootstrap-table@1.19.0/dist/extensions/filter-control/bootstrap-table-filter-control.css": (  # noqa: E501
        BOOTSTRAP_TABLE_1_19_0,
        "dist/extensions/filter-control/bootstrap-table-filter-control.css",
    ),
    "https://unpkg.com/bootstrap-table@1.19.0/dist/extensions/filter-control/bootstrap-table-filter-control.min.css": (  # noqa: E501
        BOOTSTRAP_TABLE_1_19_0,
        "dist/extensions/filter-control/bootstrap-table-filter-control.min.css",
    ),
    "https://unpkg.com/bootstrap-table@1.19.1/dist/bootstrap-table.min.css": (
        BOOTSTRAP_TABLE,
        "dist/bootstrap-table.min.css",
    ),
    "https://unpkg.com/bootstrap-table@1.19.1/dist/bootstrap-table.min.js": (
        BOOTSTRAP_TABLE,
        "dist/bootstrap-table.min.js",
    ),
    "https://unpkg.com/bootstrap-table@1.19.1/dist/extensions/filter-control/bootstrap-table-filter-control.min.js": (  # noqa: E501
        BOOTSTRAP_TABLE,
        "dist/extensions/filter-control/bootstrap-table-filter-control.min.js",
    ),
    "https://cdnjs.cloudflare.com/ajax/libs/popper.js/1.12.9/umd/popper.min.js": (
        POPPER,
        "dist/umd/popper.min.js",
    ),
    "https://code.jquery.com/jquery-3.7.1.min.js": (JQUERY, "dist/jquery.min.js"),
}
# GX's logo, which the site already carries in static/images.
REMOTE_LOGO = re.compile(r"https://great-expectations-web-assets\.s3[^\"']*/logo-long\.png[^\"']*")
_TAG = re.compile(r"<(?:script|link|img)\b[^>]*>", re.IGNORECASE)
_SOURCE = re.compile(r"""\b(?:src|href)\s*=\s*(["'])(.*?)\1""", re.IGNORECASE | re.DOTALL)
_SRI = re.compile(r"""\s+(?:integrity|crossorigin)(?:\s*=\s*(["']).*?\1)?""", re.IGNORECASE | re.DOTALL)


def cache_root() -> Path:
    """PIPELINE_WEB_ASSET_CACHE, else a checkout's .cache/web, else the user's cache folder (core.shipped)."""
    return cache_dir(CACHE_VARIABLE, "web")


def _stamp(package: NpmPackage) -> Path:
    return cache_root() / package.folder / ".fetched"


def is_fetched(package: NpmPackage) -> bool:
    stamp = _stamp(package)
    return stamp.is_file() and stamp.read_text().strip() == package.integrity


def check_integrity(package: NpmPackage, tarball: bytes) -> None:
    algorithm, _, expected = package.integrity.partition("-")
    actual = base64.b64encode(hashlib.new(algorithm, tarball).digest()).decode()
    if actual != expected:
        raise WebAssetError(
            f"{package.name}@{package.version}: the tarball's {algorithm} is {actual}, "
            f"the pinned integrity is {expected}; refusing it"
        )


def fetch(package: NpmPackage, *, quiet: bool = False) -> Path:
    """Download a package's tarball once, check its integrity, keep the files the Data Docs load."""
    target = cache_root() / package.folder
    if is_fetched(package):
        return target
    if not quiet:
        print(f"fetching {package.name}@{package.version} from the npm registry (once) ...", file=sys.stderr)
    try:
        with urllib.request.urlopen(package.tarball_url, timeout=60) as response:
            tarball = response.read()
    except OSError as error:
        raise WebAssetError(f"could not download {package.tarball_url}: {error}") from None
    check_integrity(package, tarball)
    staging = target.with_name(f".{package.folder}.staging")
    shutil.rmtree(staging, ignore_errors=True)
    with tarfile.open(fileobj=io.BytesIO(tarball), mode="r:gz") as archive:
        members = [
            member
            for member in archive.getmembers()
            if member.isfile() and any(_kept(member.name, kept) for kept in package.keep)
        ]
        archive.extractall(staging, members=members, filter="data")
    missing = [kept for kept in package.keep if not (staging / "package" / kept).exists()]
    if missing:
        raise WebAssetError(f"{package.name}@{package.version} has no {', '.join(missing)}")
    (staging / "package" / ".fetched").write_text(package.integrity)
    shutil.rmtree(target, ignore_errors=True)
    (staging / "package").rename(target)
    shutil.rmtree(staging, ignore_errors=True)
    return target


def _kept(member: str, kept: str) -> bool:
    inside = member.removeprefix("package/")
    return inside.startswith(kept) if kept.endswith("/") else inside == kept


def fetch_all(*, quiet: bool = False) -> list[Path]:
    return [fetch(package, quiet=quiet) for package in PACKAGES]


def remote_assets(page: str) -> list[str]:
    """The scripts, stylesheets and images a page would load over the network."""
    found = []
    for tag in _TAG.findall(page):
        source = _SOURCE.search(tag)
        if source and re.match(r"(?:https?:)?//", source.group(2)):
            found.append(source.group(2))
    return found


def localize(site_root: Path) -> list[str]:
    """Point every Data Docs page at vendored copies of its CDN files; return what stays remote.

    Idempotent: pages already rewritten have nothing left to rewrite. When ``make setup`` has not
    fetched the assets, the pages keep their CDN links (they still work online) and a warning says so.
    """
    missing = [package for package in PACKAGES if not is_fetched(package)]
    if missing:
        log.warning(
            "Data Docs keep their CDN links: %s not in %s; run `make setup` once while the npm "
            "registry is reachable",
            ", ".join(f"{p.name}@{p.version}" for p in missing),
            cache_root(),
        )
        return sorted({url for page in site_root.rglob("*.html") for url in remote_assets(page.read_text())})
    vendor = site_root / VENDOR_DIR
    for package in PACKAGES:
        if not (vendor / package.folder / ".fetched").is_file():
            shutil.rmtree(vendor / package.folder, ignore_errors=True)
            shutil.copytree(cache_root() / package.folder, vendor / package.folder)
    remaining: set[str] = set()
    for page in site_root.rglob("*.html"):
        if VENDOR_DIR in page.relative_to(site_root).as_posix():
            continue
        text = page.read_text()
        rewritten = _rewrite(text, os.path.relpath(site_root, page.parent))
        if rewritten != text:
            page.write_text(rewritten)
        remaining.update(remote_assets(rewritten))
    if remaining:
        log.warning("Data Docs still load from the network: %s", ", ".join(sorted(remaining)))
    return sorted(remaining)


def _rewrite(page: str, to_root: str) -> str:
    def local(url: str) -> str | None:
        if url in CDN_FILES:
            package, path = CDN_FILES[url]
            return f"{to_root}/{VENDOR_DIR}/{package.folder}/{path}"
        if REMOTE_LOGO.fullmatch(url):
            return f"{to_root}/{LOGO}"
        return None

    def tag(match: re.Match[str]) -> str:
        text = match.group(0)
        source = _SOURCE.search(text)
        replacement = local(source.group(2)) if source else None
        if replacement is None:
            return text
        text = text[: source.start(2)] + replacement + text[source.end(2) :]
        return _SRI.sub("", text)

    return _TAG.sub(tag, page)
