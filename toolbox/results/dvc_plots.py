"""DVC plots that render with no network.

``dvc plots show`` writes a page whose scripts (vega, vega-lite, vega-embed) load from a CDN, so
offline it shows nothing. Snakemake vendors the same libraries (vega 5.21, vega-lite 5.2,
vega-embed 6.20, under ``snakemake/assets/data/``) for its self-contained report; this module
inlines them into an HTML template for DVC's ``--html-template`` option::

    toolbox report --dvc-plots dvc_plots        # dvc plots show with the template: dvc_plots/index.html
    toolbox report --dvc-template .dvc/offline.html && dvc plots show --html-template .dvc/offline.html
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from toolbox.core.atomic import atomic_write_text
from toolbox.core.errors import ToolboxError

SCRIPTS = ("vega/vega.js", "vega-lite/vega-lite.js", "vega-embed/vega-embed.js")

PAGE = """<!DOCTYPE html>
<html>
<head>
    {refresh_tag}
    <meta charset="utf-8">
    <title>DVC Plot</title>
    {scripts}
    <style>table { border-spacing: 15px; }</style>
</head>
<body>
    {plot_divs}
</body>
</html>
"""


def vendored_script(name: str) -> str:
    """One of Snakemake's vendored JavaScript assets, as text."""
    import snakemake.assets

    path = Path(snakemake.assets.__file__).parent / "data" / name
    if not path.is_file():
        raise ToolboxError(
            f"{path} is missing: this snakemake install carries no vendored {name}; reinstall snakemake "
            "from requirements.lock (its wheel includes the report assets)."
        )
    return path.read_text(encoding="utf-8")


def offline_template() -> str:
    """DVC's page with the three libraries inlined (no ``{scripts}`` placeholder: nothing from a CDN)."""
    scripts = "\n".join(f"<script>{vendored_script(n)}</script>" for n in SCRIPTS)
    # the template is filled with str.replace on {refresh_tag} and {plot_divs}; the JS must not
    # contain those two placeholders (checked) -- any other brace in it is left alone
    for placeholder in ("{plot_divs}", "{refresh_tag}", "{scripts}"):
        if placeholder in scripts:
            raise ToolboxError(f"a vendored script contains DVC's placeholder {placeholder}")
    return PAGE.replace("{scripts}", scripts, 1)


def write_template(path: Path) -> Path:
    atomic_write_text(path, offline_template())
    return path


def _dvc() -> str:
    found = shutil.which("dvc") or str(Path(sys.executable).parent / "dvc")
    if not Path(found).exists():
        raise ToolboxError("toolbox report --dvc-plots needs dvc on the PATH (it is in requirements.lock).")
    return found


def show(root: Path, out: Path) -> Path:
    """``dvc plots show`` in ``root`` with the offline template; returns ``out/index.html``."""
    with tempfile.TemporaryDirectory() as tmp:
        template = write_template(Path(tmp) / "offline.html")
        res = subprocess.run(
            [_dvc(), "plots", "show", "--html-template", str(template), "-o", str(out.resolve())],
            cwd=root,
            capture_output=True,
            text=True,
        )
    if res.returncode != 0:
        raise ToolboxError(f"dvc plots show failed:\n{res.stderr[-3000:]}")
    return out / "index.html"
