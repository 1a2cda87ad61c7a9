"""The documentation site: every registered component, CLI command and config group is in the
generated pages; the getting-started commands run as written; the built site renders (Chromium)."""

from __future__ import annotations

import importlib.util
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def _gen():
    spec = importlib.util.spec_from_file_location("gen_pages", DOCS / "gen_pages.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
            assert "Demo finished. Results in results/demo/" in out
            for name in ("config.yaml", "metrics.jsonl", "checkpoints", "model"):
                assert (tmp_path / "results" / "demo" / name).exists(), name
    assert (tmp_path / "results" / "demo" / "eval.json").is_file()
    assert list((tmp_path / "results" / "demo" / "plots").glob("*.png"))


@pytest.mark.slow
def test_make_demo_as_written():
    result = subprocess.run(["make", "demo"], cwd=ROOT, capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Demo finished. Results in results/demo/" in result.stdout


def _site(tmp_path_factory) -> Path:
    site = ROOT / "site"
    if not (site / "index.html").is_file():
        site = tmp_path_factory.mktemp("site")
        subprocess.run(
            [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(site)], cwd=ROOT, check=True
        )
    return site


@pytest.mark.skipif(shutil.which("chromium") is None, reason="Debian's chromium is not installed")
def test_site_renders_in_chromium(tmp_path, tmp_path_factory):
    """Screenshots of the home page and one API page: real PNGs with more than background in them."""
    from PIL import Image

    site = _site(tmp_path_factory)
    for page in ("index.html", "reference/api/trainer/index.html"):
        png = tmp_path / (page.replace("/", "_") + ".png")
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
        shutil.copy(png, ROOT / "site" / png.name) if (ROOT / "site").is_dir() else None


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
