"""Plot return against env steps from the JSON files ``run.py`` wrote: one line per seed, one panel per file.

    python examples/ppo_cartpole/plot.py examples/ppo_cartpole/results/cartpole.json \\
        examples/ppo_cartpole/results/acrobot.json --out examples/ppo_cartpole/returns.png
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, nargs="+", help="JSON files written by run.py")
    parser.add_argument("--out", type=Path, required=True, help="the PNG to write")
    args = parser.parse_args(argv)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(args.results), figsize=(5 * len(args.results), 3.6), squeeze=False)
    for ax, path in zip(axes[0], args.results, strict=True):
        result = json.loads(path.read_text())
        for run in result["runs"]:
            steps, returns = zip(*run["curve"], strict=True) if run["curve"] else ((), ())
            ax.plot(steps, returns, label=f"seed {run['seed']}", linewidth=1.2)
        env = result["runs"][0]["env_id"] if result["runs"] else path.stem
        extra = " ".join(result.get("overrides") or [])
        ax.set_title(f"{env} {extra}".strip(), fontsize=9)
        ax.set_xlabel("environment steps")
        ax.set_ylabel("mean return, last 20 episodes")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_name(f".tmp-{args.out.name}")
    fig.savefig(tmp, dpi=110, format="png")
    tmp.replace(args.out)
    return args.out


if __name__ == "__main__":
    print(main())
