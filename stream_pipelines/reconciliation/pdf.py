"""A PDF copy of the HTML report, printed by headless Chromium through Playwright.

Optional by design: where Chromium is missing (a slim cluster image), the report is written without
the PDF and says why; a reviewer can still print report.html, whose print stylesheet gives the same.
"""

from __future__ import annotations

from pathlib import Path

# Debian's package (infra/scripts/install_test_servers.sh installs it); Playwright's own browsers are
# not used, so no download happens at runtime.
CHROMIUM = Path("/usr/bin/chromium")
# Open every collapsed list before printing (the page's own beforeprint handler does not run here).
OPEN_DETAILS = "document.querySelectorAll('details').forEach(d => d.open = true)"


class PdfNotRendered(RuntimeError):
    """Why the PDF copy could not be printed; the report records the message."""


def render_pdf(page: str, chromium: Path | None = None) -> bytes:
    """``page`` (a self-contained HTML document) printed to A4 PDF bytes by ``chromium`` (default
    :data:`CHROMIUM`)."""
    chromium = chromium or CHROMIUM
    if not chromium.is_file():
        raise PdfNotRendered(
            f"{chromium} is not installed (infra/scripts/install_test_servers.sh installs it)"
        )
    try:
        from playwright.sync_api import Error, sync_playwright
    except ImportError as error:
        raise PdfNotRendered(f"playwright is not importable: {error}") from error
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=str(chromium), args=["--no-sandbox"])
            try:
                tab = browser.new_page()
                tab.set_content(page, wait_until="load")
                tab.evaluate(OPEN_DETAILS)
                return tab.pdf(
                    format="A4",
                    print_background=True,
                    margin={"top": "12mm", "bottom": "12mm", "left": "10mm", "right": "10mm"},
                )
            finally:
                browser.close()
    except Error as error:
        raise PdfNotRendered(f"headless Chromium failed: {str(error).splitlines()[0]}") from error
