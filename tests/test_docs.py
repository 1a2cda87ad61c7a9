"""The documentation site: every registered component, CLI command and config group is in the
generated pages; the getting-started commands run as written; the built site renders (Chromium)."""

from __future__ import annotations

import importlib.util
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def _docs_module(name: str):
    """A module of docs/ (not a package: MkDocs loads them by path), loaded the same way."""
    spec = importlib.util.spec_from_file_location(name, DOCS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _gen():
    return _docs_module("gen_pages")


def test_catalog_and_cli_pages_name_every_component_and_command():
    import toolbox.core.registries  # noqa: F401
    from toolbox.core.registry import Registry

    gen = _gen()
    catalog = gen.render_catalog_page()
    missing = [
        f"{kind}: {name}"
        for kind, registry in Registry.all().items()
        for name, _ in registry
        if f"### `{kind}: {name}`" not in catalog
    ]
    assert not missing, f"not in the catalog page: {missing}"
    assert re.search(r"\[`toolbox/[a-z_/]+\.py:\d+`\]\(api/[a-z_]+\.md\)", catalog), "no module:line links"
    cli = gen.render_cli()
    commands = [path for path, _ in gen.cli_commands()]
    assert {"toolbox train", "toolbox eval", "toolbox serve", "toolbox bench serve"} <= set(commands)
    assert [c for c in commands if f"## `{c}`" not in cli] == []
    assert set(gen.subpackages()) >= {"core", "trainer", "serving", "experiment"}
    assert gen.api_page("trainer") == "# `toolbox.trainer`\n\n::: toolbox.trainer\n"


def test_config_page_names_every_group_and_option_with_defaults():
    gen = _gen()
    page = gen.render_config()
    groups = gen.config_groups()
    assert {"model", "trainer", "optimizer", "experiment"} <= set(groups)
    missing = [f"{g}={o}" for g, opts in groups.items() for o in opts if f"### `{g}={o}`" not in page]
    assert not missing, f"not in the config page: {missing}"
    # a default the group file leaves out is filled in (adamw.yaml does not list every field)
    from toolbox.experiment import load_config

    lr = load_config(["optimizer=adamw"]).optimizer.lr
    section = page.split("### `optimizer=adamw`")[1].split("###")[0]
    assert f"lr: {lr}" in section


def _blocks(page: Path) -> list[str]:
    text = page.read_text()
    return [
        line.strip()
        for block in re.findall(r"```bash\n(.*?)```", text, re.S)
        for line in block.splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]


def _run(cmd: str, capsys) -> tuple[int, str, str]:
    """A ``toolbox`` command as its entry point runs it (``toolbox.cli.main``), in this process
    (one torch import for all of them), in the current folder."""
    from toolbox.cli import main

    argv = shlex.split(cmd)
    assert argv[0] == "toolbox", cmd
    code = main(argv[1:])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_getting_started_commands_run_as_written(tmp_path, monkeypatch, capsys):
    """Every command of the page, in order, in a scratch copy of the working folder; `make demo`
    runs as its short variant shown on the page (the full one: the slow test), `make test` is this
    suite itself."""
    commands = _blocks(DOCS / "getting-started.md")
    assert commands[:2] == ["make demo", "make test"]
    short = [c for c in commands if c.startswith("toolbox demo")]
    assert short, "the page shows a short variant of the demo"
    monkeypatch.chdir(tmp_path)
    for cmd in short + [c for c in commands[2:] if not c.startswith("toolbox demo")]:
        code, out, err = _run(cmd, capsys)
        assert code == 0, f"{cmd}:\n{out[-2000:]}\n{err[-2000:]}"
        if cmd.startswith("toolbox demo"):
            assert "Demo finished. Results in outputs/demo/" in out
            for name in ("config.yaml", "metrics.jsonl", "checkpoints", "model"):
                assert (tmp_path / "outputs" / "demo" / name).exists(), name
    assert (tmp_path / "outputs" / "demo" / "eval.json").is_file()
    assert list((tmp_path / "outputs" / "demo" / "plots").glob("*.png"))
    # results/demo/ is the workflow's (snakemake -c2 results/demo/): the demo left nothing there
    assert not (tmp_path / "results").exists()


@pytest.mark.slow
def test_make_demo_as_written():
    result = subprocess.run(["make", "demo"], cwd=ROOT, capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Demo finished. Results in outputs/demo/" in result.stdout


@pytest.fixture(scope="session")
def site(tmp_path_factory) -> Path:
    """The site, built once per session with ``--strict`` (a warning fails it), in this process:
    the tests that read built pages share it, and the modules the hook imports (torch, the
    registries) are the ones already loaded."""
    import os

    from mkdocs.commands.build import build
    from mkdocs.config import load_config

    out = tmp_path_factory.mktemp("site")
    cwd = os.getcwd()
    os.chdir(ROOT)  # the config's relative paths (the hook, the griffe extension) are the repo's
    try:
        build(load_config(str(ROOT / "mkdocs.yml"), site_dir=str(out), strict=True))
    finally:
        os.chdir(cwd)
    return out


def test_performance_and_example_pages_embed_charts_drawn_from_the_json(site):
    """One SVG per benchmark file that compares (drawn from that file at build time), embedded in
    the performance page; an example page shows its runs' chart and the benchmark its README names."""
    import json
    import xml.etree.ElementTree as ET

    page = (site / "performance" / "index.html").read_text()
    charts = sorted((site / "plots").rglob("*.svg"))
    assert len(charts) >= 10
    for chart in charts:
        svg = ET.parse(chart).getroot()
        assert svg.tag.endswith("svg") and svg.findall(".//{*}rect"), chart
    assert 'src="../plots/results/serving.svg"' in page
    # the bars carry the file's numbers: serving's burst throughput, as the file has it
    serving = json.loads((ROOT / "benchmarks" / "results" / "serving.json").read_text())
    ours = serving["loads"]["burst"]["toolbox"]["output_throughput"]
    assert f">{ours:.3g}<" in (site / "plots" / "results" / "serving.svg").read_text()
    ppo = (site / "examples" / "ppo_cartpole" / "index.html").read_text()
    assert 'src="../../plots/results/ppo_vs_cleanrl.svg"' in ppo and 'src="../returns.png"' in ppo
    sft = (site / "examples" / "sft_arith" / "index.html").read_text()
    assert 'src="../../plots/examples/sft_arith.svg"' in sft
    assert (
        "eval/exact_match (expected &gt;= 0.95)"
        in (site / "plots" / "examples" / "sft_arith.svg").read_text()
    )


def test_charts_are_found_from_the_files_shape(tmp_path):
    plots = _gen()._plots()
    data = {
        "settings": {"steps": 6},
        "ours": {"steps_per_s": 4.0, "steps": 6},
        "trl": {"steps_per_s": 1.0, "steps": 6},
        "per_record_us": {"ours_jsonl": 180.0, "otel": 230.0},
        "steps_per_s_ratio": 4.0,
    }
    assert plots.ratios(data) == {"steps_per_s_ratio": 4.0}
    # the equal "steps" is no comparison; "settings" is not a system
    assert plots.comparisons(data) == [
        ("steps_per_s", {"ours": 4.0, "trl": 1.0}),
        ("per_record_us", {"ours_jsonl": 180.0, "otel": 230.0}),
    ]
    assert plots.benchmark_svg({"settings": {"steps": 6}}, "x") is None
    for i, em in enumerate((1.0, 0.9)):
        (tmp_path / f"s{i}").mkdir()
        (tmp_path / f"s{i}" / "eval.json").write_text(f'{{"eval/exact_match": {em}}}')
        (tmp_path / f"s{i}" / "run.json").write_text('{"expect": {"eval/exact_match": {"min": 0.95}}}')
    svg = plots.matrix_svg(tmp_path, "m")
    assert "eval/exact_match (expected &gt;= 0.95)" in svg and ">0.9<" in svg
    assert svg == plots.matrix_svg(tmp_path, "m")  # deterministic: a rebuild writes the same bytes


def _rest():
    return _docs_module("rest_docstrings")


def test_rest_literal_blocks_become_fenced_code():
    rest = _rest()
    doc = "Compose it.\n\n::\n\n    cfg = load()\n      run(cfg)\n\nThen more.\nA store is a folder::\n\n    a/\n\nx ::\n\n  y"
    assert rest.literal_blocks(doc) == (
        "Compose it.\n\n```text\ncfg = load()\n  run(cfg)\n```\n\nThen more.\nA store is a folder:\n\n"
        "```text\na/\n```\n\nx\n\n```text\ny\n```"
    )
    item = "- shapes, one per completion::\n\n      adv = f(r)\n\n  A NaN reward is left out."
    assert rest.literal_blocks(item) == (
        "- shapes, one per completion:\n\n  ```text\n  adv = f(r)\n  ```\n\n  A NaN reward is left out."
    )
    assert (
        rest.literal_blocks("See ``a::b`` here.\n.. note::\n\n   kept")
        == "See ``a::b`` here.\n.. note::\n\n   kept"
    )


def _prose(html: str) -> str:
    """The text of a page outside code: what a reader sees as paragraphs."""
    html = re.sub(r"<(pre|code)\b.*?</\1>", " ", html, flags=re.S)
    return re.sub(r"<[^>]+>", "", html)


def test_api_pages_show_no_rest_markup(site):
    """No reST literal marker (``::`` ending a line) nor role (``:class:`X```) in the rendered API
    prose, in every file (including the ones whose docstrings start with ``::``); the blocks are
    code, and a role links to the object's entry."""
    pages = sorted((site / "reference" / "api").glob("*/index.html"))
    assert len(pages) == len(_gen().subpackages())
    bad = []
    for page in pages:
        for line in _prose(page.read_text()).splitlines():
            if re.search(r"::\s*$", line) or re.search(r":(class|meth|func|attr|mod):`", line):
                bad.append(f"{page.parent.name}: {line.strip()[:100]}")
    assert not bad, bad
    experiment = (site / "reference" / "api" / "experiment" / "index.html").read_text()
    assert re.search(r"<pre><span></span><code>cfg = load_config\(", experiment)
    memory = (site / "reference" / "api" / "memory" / "index.html").read_text()
    assert "A store is a folder:</p>" in memory
    rl = (site / "reference" / "api" / "rl" / "index.html").read_text()
    assert re.search(
        r'<a class="autorefs autorefs-internal"[^>]*href="[^"]*#toolbox\.rl\.envs\.GymEnv\.make"', rl
    )


@pytest.mark.skipif(
    shutil.which("chromium") is None, reason="Debian's chromium is not installed (.ci/run installs it)"
)
def test_site_renders_in_chromium(site):
    """Screenshots of the home page, one API page and the performance page (its charts): real
    PNGs with more than background in them, kept in the built site's ``screenshots/``."""
    from PIL import Image

    shots = site / "screenshots"
    shots.mkdir(exist_ok=True)
    for page in ("index.html", "reference/api/trainer/index.html", "performance/index.html"):
        png = shots / (page.replace("/index.html", "").replace("/", "_").replace(".html", "") + ".png")
        subprocess.run(
            [
                "chromium",
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                f"--screenshot={png}",
                "--window-size=1280,900",
                (site / page).as_uri(),
            ],
            capture_output=True,
            timeout=120,
            check=True,
        )
        image = Image.open(png).convert("L")
        assert image.size == (1280, 900)
        colors = image.getcolors(maxcolors=1 << 16) or []
        assert len(colors) > 50, f"{page}: the screenshot is blank ({len(colors)} grey levels)"
        if (ROOT / "site").is_dir():  # next to `make docs`'s site, to look at
            shutil.copy(png, ROOT / "site" / png.name)


def test_links_to_repository_files_become_text_and_docs_links_resolve():
    """A guide another branch adds may link into the repository: under --strict that would fail the
    build, so such links become code text; links between docs pages stay links."""
    gen = _gen()
    md = "See [the base](../toolbox/trainer/base.py), [memory](memory.md) and [site](https://x.org)."
    out = gen.repo_links(md, DOCS / "guide.md", "guide.md")
    assert out == (
        "See the base (`../toolbox/trainer/base.py`), [memory](memory.md) and [site](https://x.org)."
    )
    readme = ROOT / "examples" / "sft_arith" / "README.md"
    out = gen.repo_links("[w](../../docs/workflow.md#dvc)", readme, "examples/sft_arith.md")
    assert out == "[w](../workflow.md#dvc)"
