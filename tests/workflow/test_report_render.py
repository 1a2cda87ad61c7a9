"""The pages people look at render offline: `snakemake --report` and `dvc plots` (through
`toolbox report --dvc-plots`), opened in headless Chromium (Debian's) driven by Playwright with
every non-file request refused, and screenshotted with the plots on screen.

Slow: it runs the tiny pipeline once through Snakemake and once through DVC (about 2 minutes).
The screenshots are kept under the test's tmp folder (the paths are printed) for a person to look at.
"""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest
from workflow_copy import TINY_RUN, copy_workflow, tool

pytestmark = pytest.mark.slow

CHROMIUM = shutil.which("chromium")


def _colours(png: bytes) -> int:
    from PIL import Image

    return len(Image.open(io.BytesIO(png)).convert("RGB").getcolors(maxcolors=1 << 20) or [])


@pytest.fixture
def browser():
    if CHROMIUM is None:
        pytest.skip("Debian's chromium is not installed (.ci/run installs it: apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


def _offline_page(browser, requests: list[str]):
    """A page that may load only file:, data: and blob: URLs; any other request is refused and recorded."""
    page = browser.new_page(viewport={"width": 1400, "height": 900})

    def route(r):
        if r.request.url.startswith(("file:", "data:", "blob:")):
            r.continue_()
        else:
            requests.append(r.request.url)
            r.abort()

    page.route("**/*", route)
    return page


def test_snakemake_report_and_dvc_plots_render_offline(tmp_path: Path, browser) -> None:
    wf = copy_workflow(tmp_path / "repo")
    wf.snakemake("-c2", f"results/{TINY_RUN}/")
    wf.snakemake("--report", "report.html", f"results/{TINY_RUN}/")

    # the Snakemake report: Results > curves > the plot stage's eye button shows its PNGs inline
    requests: list[str] = []
    page = _offline_page(browser, requests)
    page.goto((wf.root / "report.html").as_uri())
    page.get_by_text("curves", exact=True).click()
    page.locator("tr", has_text="plot").last.locator('a[iconname="eye"]').click()
    page.wait_for_timeout(500)
    widths = page.evaluate(
        "Array.from(document.querySelectorAll('img'))"
        ".filter(i => i.src.startsWith('data:image/png')).map(i => i.naturalWidth)"
    )
    shot = page.screenshot(path=str(tmp_path / "snakemake_report.png"))
    print("screenshot:", tmp_path / "snakemake_report.png")
    assert widths and max(widths) >= 400, widths  # a training curve, decoded and on the page
    assert _colours(shot) > 50  # a plot, not a blank page
    assert requests == []
    page.close()

    # DVC: the same pipeline through dvc repro, then its plots with vega inlined
    wf.git_dvc_init()
    wf.dvc("repro")
    wf.run(tool("toolbox"), "report", "--dvc-plots", "dvc_plots")
    html = wf.root / "dvc_plots" / "index.html"
    assert html.is_file()
    requests = []
    page = _offline_page(browser, requests)
    page.goto(html.as_uri())
    page.wait_for_selector("svg.marks, canvas.marks", timeout=20_000)
    charts = page.locator("svg.marks, canvas.marks").count()
    shot = page.screenshot(path=str(tmp_path / "dvc_plots.png"), full_page=True)
    print("screenshot:", tmp_path / "dvc_plots.png")
    assert charts >= 3, charts  # vega drew each plot (its titles are drawn, not DOM text)
    source = html.read_text()
    for title in ("train-loss", "eval-loss", "eval-token_accuracy"):
        assert f"{TINY_RUN}-{title}" in source
    assert _colours(shot) > 50
    assert requests == []
    page.close()
