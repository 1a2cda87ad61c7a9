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


def test_snakemake_report_lists_every_curve_and_a_cross_run_page(tmp_path: Path, browser) -> None:
    """Issue 38: the report showed one of the 9 curves of the plot stage (their labels were equal)
    and its search found no "loss"; now every curve is a row of its own, searchable, and the
    comparison category overlays every run."""
    from workflow_copy import TINY_OVERRIDES, tiny_config

    cfg = tiny_config()
    cfg["runs"]["other"] = {"experiment": "demo", "overrides": [*TINY_OVERRIDES, "trainer.max_steps=10"]}
    wf = copy_workflow(tmp_path / "repo", cfg)
    wf.snakemake("-c2", timeout=1500)  # the default target: both runs and their comparison
    curves = sorted(p.stem for p in (wf.root / "work" / TINY_RUN / "plots").glob("*.png"))
    compared = sorted(p.stem for p in (wf.root / "work" / "_compare" / "plots").glob("*.png"))
    assert "loss" in curves and len(curves) >= 8, curves
    assert "loss" in compared, compared
    wf.snakemake("--report", "report.html")
    check_curves_and_comparison(wf.root, tmp_path, browser, curves, compared)


def check_curves_and_comparison(
    root: Path, shots: Path, browser, curves: list[str], compared: list[str]
) -> None:
    """The report of a workflow with runs `tiny` and `other`: every curve of `tiny` a row of its
    own, the search for "loss" finding each run's and the comparison's, the comparison shown."""
    wf_root = root
    requests: list[str] = []
    page = _offline_page(browser, requests)
    page.goto((wf_root / "report.html").as_uri())
    page.get_by_text("curves", exact=True).click()
    page.get_by_text(TINY_RUN, exact=True).click()  # a subcategory per run
    page.wait_for_timeout(500)
    rows = page.locator("tr", has_text="plot")
    listed = [rows.nth(i).inner_text().split() for i in range(rows.count())]
    assert sorted(row[-1] for row in listed) == curves  # every curve its own row
    assert {row[0] for row in listed} == {TINY_RUN}
    page.screenshot(path=str(shots / "report_curves.png"))

    page.goto((wf_root / "report.html").as_uri())
    box = page.get_by_placeholder("Search...")
    box.click()
    box.type("loss", delay=20)
    box.press("Enter")
    page.wait_for_timeout(500)
    found = page.locator("tr", has_text="loss")
    rows = sorted(tuple(found.nth(i).inner_text().split()) for i in range(found.count()))
    # each run's loss and the comparison's
    assert rows == [("all", "compare", "loss"), ("other", "plot", "loss"), (TINY_RUN, "plot", "loss")], rows

    page.goto((wf_root / "report.html").as_uri())
    page.get_by_text("comparison", exact=True).click()
    page.wait_for_timeout(500)
    rows = page.locator("tr", has_text="compare")
    assert sorted(rows.nth(i).inner_text().split()[-1] for i in range(rows.count())) == compared
    rows.filter(has_text="loss").first.locator('a[iconname="eye"]').click()
    page.wait_for_timeout(500)
    shot = page.screenshot(path=str(shots / "report_comparison.png"))
    print("screenshots:", shots / "report_curves.png", shots / "report_comparison.png")
    widths = page.evaluate(
        "Array.from(document.querySelectorAll('img'))"
        ".filter(i => i.src.startsWith('data:image/png')).map(i => i.naturalWidth)"
    )
    assert widths and max(widths) >= 400, widths  # the overlaid loss curve, decoded and on the page
    assert _colours(shot) > 50
    assert requests == []
