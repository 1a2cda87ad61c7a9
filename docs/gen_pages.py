"""The docs site's generated pages, as an MkDocs hook (``hooks:`` in mkdocs.yml), so that
``mkdocs build`` and ``mkdocs serve`` always document the code as it is now.

Generated from the code, never copied: the component catalog (``toolbox.catalog.render_catalog``,
from the registries), the CLI reference (the argparse parsers of ``toolbox.cli.build_parser``), the
config reference (every group option under ``toolbox/configs``, composed with its defaults), one API
page per toolbox subpackage (mkdocstrings, from docstrings), one page per ``examples/*/README.md``
and the performance tables (``benchmarks/results/**/*.json``), with the charts ``docs/plots.py``
draws from the same files (and from an example's ``results/``). The navigation is built from the
pages that exist, so a guide another branch adds (``docs/<topic>.md``) appears under Guides.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "toolbox"
CONFIGS = PACKAGE / "configs"

# the hand-written pages, in reading order (missing ones are left out of the nav)
HANDWRITTEN = {
    "Home": "index.md",
    "Getting started": "getting-started.md",
    "Concepts": [
        "concepts/registries.md",
        "concepts/config.md",
        "concepts/builder.md",
        "concepts/trainer.md",
        "concepts/callbacks.md",
        "concepts/launchers.md",
        "concepts/engines.md",
    ],
    "Lifecycle stages": [
        "stages/compose.md",
        "stages/data.md",
        "stages/train.md",
        "stages/eval.md",
        "stages/launch.md",
        "stages/serve.md",
        "stages/traces.md",
        "stages/check.md",
        "stages/bundle.md",
    ],
    "Workflow": "workflow.md",
    "Serving and the benchmark": "serving.md",
    "Standard harnesses (lm-eval, inspect_ai)": "harness.md",
    "Troubleshooting": "troubleshooting.md",
}
NOT_IN_SITE = {
    "catalog.md",
    "gen_pages.py",
    "plots.py",
    "rest_docstrings.py",
}  # docs/catalog.md is `make catalog`'s file; the site generates its own


# ---------- the CLI reference ----------


def cli_commands(parser: argparse.ArgumentParser | None = None, prefix: str = "toolbox"):
    """Every (command path, parser) of the ``toolbox`` CLI, subcommands of subcommands included."""
    if parser is None:
        from toolbox.cli import build_parser

        parser = build_parser()
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                path = f"{prefix} {name}"
                out.append((path, sub))
                out += cli_commands(sub, path)
    return out


def _help(parser: argparse.ArgumentParser) -> str:
    import os

    os.environ.setdefault("COLUMNS", "100")
    return parser.format_help()


def render_cli() -> str:
    from toolbox.cli import build_parser

    parser = build_parser()
    lines = ["# CLI reference", "", "Generated from the argparse parsers (`toolbox.cli.build_parser`).", ""]
    lines += ["```text", _help(parser).rstrip(), "```", ""]
    for path, sub in cli_commands(parser):
        lines += [f"## `{path}`", "", "```text", _help(sub).rstrip(), "```", ""]
    return "\n".join(lines) + "\n"


def command_help(path: str) -> str:
    for p, sub in cli_commands():
        if p == path:
            return "```text\n" + _help(sub).rstrip() + "\n```\n"
    raise KeyError(f"no CLI command {path!r}")


# ---------- the config reference ----------


def config_groups() -> dict[str, list[str]]:
    return {
        g.name: sorted(o.stem for o in g.glob("*.yaml"))
        for g in sorted(CONFIGS.iterdir())
        if g.is_dir() and any(g.glob("*.yaml"))
    }


def _option_node(group: str, option: str):
    """The option's node with every default filled in (as ``load_config`` composes it)."""
    from omegaconf import OmegaConf

    from toolbox.experiment import load_config
    from toolbox.experiment.compose import fill_defaults

    file = CONFIGS / group / f"{option}.yaml"
    text = file.read_text()
    if "defaults:" in text or "@package" in text:  # a file that composes others: the full compose
        return load_config([f"{group}={option}"]).get(group)
    # the group alone: fill_defaults reads only a component's own node (the whole config, copied
    # and filled once per option, made this page a third of the site's build)
    return fill_defaults(OmegaConf.create({group: OmegaConf.load(file)})).get(group)


def render_config() -> str:
    from omegaconf import OmegaConf

    from toolbox.experiment import load_config

    base = load_config([])
    root = OmegaConf.to_container(base, resolve=False)
    top = {k: v for k, v in root.items() if not isinstance(v, dict)}
    lines = ["# Config reference", ""]
    lines += [
        "Generated: every group under `toolbox/configs/` and each of its options, composed with all "
        "defaults filled in (what `toolbox compose group=option` shows for that node). Select an "
        "option with `group=option`, override a key with `group.key=value`.",
        "",
        "## The root config (`config.yaml`)",
        "",
        "```yaml",
        OmegaConf.to_yaml(OmegaConf.create(top)).rstrip(),
        "```",
        "",
    ]
    for group, options in config_groups().items():
        lines += [f"## `{group}`", "", "Options: " + ", ".join(f"`{o}`" for o in options) + ".", ""]
        for option in options:
            lines += [f"### `{group}={option}`", ""]
            if group == "experiment":  # an overlay of the whole config: its file is the reference
                body = (CONFIGS / group / f"{option}.yaml").read_text().rstrip()
                lines += [f"`toolbox compose experiment={option}` prints it composed.", ""]
            else:
                node = _option_node(group, option)
                body = OmegaConf.to_yaml(node).rstrip() if node is not None else "null"
            lines += ["```yaml", body, "```", ""]
    return "\n".join(lines) + "\n"


# ---------- the API reference, catalog, examples and performance ----------


def subpackages() -> list[str]:
    """Every subpackage and top-level module of toolbox (one API page each)."""
    packages = [p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()]
    modules = [p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"]
    return sorted(packages + modules)


def api_page(sub: str) -> str:
    return f"# `toolbox.{sub}`\n\n::: toolbox.{sub}\n"


def _catalog_link(location: str) -> str:
    parts = location.split("/")
    sub = parts[1].removesuffix(".py").split(":")[0] if len(parts) > 1 and parts[0] == "toolbox" else None
    if sub in subpackages():
        return f"[`{location}`](api/{sub}.md)"
    return f"`{location}`"


def render_catalog_page() -> str:
    from toolbox.catalog import render_catalog

    return render_catalog(link=_catalog_link)


_LINK = re.compile(r"(!?)\[([^\]]*)\]\(([^)\s]+)\)")


def repo_links(markdown: str, source: Path, site_path: str, assets: dict[str, Path] | None = None) -> str:
    """Relative links of a page read from ``source`` (shown at ``site_path``): a link to a docs page
    points at that page, an image is copied next to the page (when ``assets`` is given), and a link
    to any other repository file becomes code text (the site does not serve the repository)."""
    import os

    def fix(m: re.Match) -> str:
        bang, text, target = m.groups()
        if re.match(r"^[a-z]+://|^#|^mailto:", target):
            return m.group(0)
        path, _, anchor = target.partition("#")
        file = (source.parent / path).resolve()
        docs = ROOT / "docs"
        if file.is_relative_to(docs) and file.suffix == ".md":
            rel = os.path.relpath(file.relative_to(docs), Path(site_path).parent)
            return f"{bang}[{text}]({Path(rel).as_posix()}{'#' + anchor if anchor else ''})"
        if bang and assets is not None and file.is_file():
            assets[(Path(site_path).parent / file.name).as_posix()] = file
            return f"![{text}]({file.name})"
        if file.is_relative_to(docs):
            return m.group(0)
        return f"{text} (`{target}`)" if text and text != target else f"`{target}`"

    return _LINK.sub(fix, markdown)


def example_page(readme: Path, assets: dict[str, Path]) -> str:
    """An example's README (its links fixed by ``repo_links``)."""
    return repo_links(readme.read_text(), readme, f"examples/{readme.parent.name}.md", assets)


def _plots():
    """``docs/plots.py`` (the hook is loaded from its file, not as a package: load the sibling so)."""
    import importlib.util
    import sys

    if "toolbox_docs_plots" not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            "toolbox_docs_plots", Path(__file__).with_name("plots.py")
        )
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules["toolbox_docs_plots"] = module
    return sys.modules["toolbox_docs_plots"]


def generated_pages() -> tuple[dict[str, str], dict[str, Path]]:
    """``{site path: Markdown}`` of every generated page and ``{site path: file to copy, or SVG text}``
    of its assets (the example's images, the charts)."""
    assets: dict[str, Path | str] = {}
    plots = _plots().benchmark_plots(ROOT)
    pages = {
        "reference/catalog.md": render_catalog_page(),
        "reference/cli.md": render_cli(),
        "reference/config.md": render_config(),
        "performance.md": _plots().render_performance(ROOT, plots),
    }
    for sub in subpackages():
        pages[f"reference/api/{sub}.md"] = api_page(sub)
    for readme in sorted((ROOT / "examples").glob("*/README.md")):
        page = example_page(readme, assets) + _plots().example_plots(readme, plots)
        pages[f"examples/{readme.parent.name}.md"] = page
    assets.update(plots)
    return pages, assets


def nav(existing: set[str], generated: dict[str, str]) -> list:
    out: list = []
    for title, entry in HANDWRITTEN.items():
        if isinstance(entry, list):
            items = [p for p in entry if p in existing]
            if items:
                out.append({title: items})
        elif entry in existing:
            out.append({title: entry})
    known = {p for e in HANDWRITTEN.values() for p in (e if isinstance(e, list) else [e])}
    guides = sorted(p for p in existing if "/" not in p and p.endswith(".md") and p not in known)
    guides = [p for p in guides if p not in NOT_IN_SITE and p not in generated]
    if guides:
        out.insert(2, {"Guides": guides})
    examples = sorted(p for p in generated if p.startswith("examples/"))
    if examples:
        out.append({"Examples": examples})
    out.append({"Performance": "performance.md"})
    api = sorted(p for p in generated if p.startswith("reference/api/"))
    out.append(
        {
            "Reference": [
                {"Component catalog": "reference/catalog.md"},
                {"CLI": "reference/cli.md"},
                {"Config": "reference/config.md"},
                {"API": api},
            ]
        }
    )
    return out


# ---------- the MkDocs hook ----------

_STATE: dict = {}
_MARK = re.compile(r"<!--\s*cli:\s*([a-z_ -]+?)\s*-->")


def on_config(config):
    pages, assets = generated_pages()
    _STATE["pages"], _STATE["assets"] = pages, assets
    docs = Path(config["docs_dir"])
    existing = {p.relative_to(docs).as_posix() for p in docs.rglob("*.md")}
    config["nav"] = nav(existing, pages)
    return config


def on_files(files, config):
    from mkdocs.structure.files import File

    for f in list(files):
        if f.src_uri in NOT_IN_SITE:
            files.remove(f)
    for path, text in _STATE["pages"].items():
        files.append(File.generated(config, path, content=text))
    for path, src in _STATE["assets"].items():
        if isinstance(src, str):  # a chart drawn at build time
            files.append(File.generated(config, path, content=src))
        else:
            files.append(File.generated(config, path, abs_src_path=str(src)))
    return files


_ERROR = re.compile(r"<!--\s*error:\s*(toolbox [^>]*?)\s*-->")


def error_output(command: str) -> str:
    """What ``command`` prints on stderr (run in process, as the ``toolbox`` entry point does)."""
    import contextlib
    import io
    import shlex

    from toolbox.cli import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(shlex.split(command)[1:])
        except SystemExit as e:
            code = e.code
    if code in (0, None):
        raise RuntimeError(f"docs: `{command}` was shown as an error but succeeded")
    import textwrap

    lines = [w for line in err.getvalue().rstrip().splitlines() for w in textwrap.wrap(line, 100) or [""]]
    return "```text\n$ " + command + "\n" + "\n".join(lines) + "\n```\n"


def on_page_markdown(markdown, page, config, files):
    """``<!-- cli: toolbox train -->`` in a hand-written page becomes that command's --help;
    ``<!-- error: toolbox ... -->`` becomes what that failing command prints."""
    if page.file.generated_by is None:  # a hand-written page (or a guide another branch added)
        markdown = repo_links(markdown, Path(page.file.abs_src_path), page.file.src_uri)
    markdown = _MARK.sub(lambda m: command_help(m.group(1).strip()), markdown)
    return _ERROR.sub(lambda m: error_output(m.group(1)), markdown)
