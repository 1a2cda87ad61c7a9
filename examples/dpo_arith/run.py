"""examples/dpo_arith: SFT warm start, then DPO on right-vs-wrong arithmetic answers.

    python examples/dpo_arith/run.py --out work/dpo_arith                 # SFT, then DPO
    python examples/dpo_arith/run.py --out work/dpo_arith --sft-model results/sft_arith/model

Stage 1 (skipped with ``--sft-model``) trains ``experiment=sft_arith`` to the end (100 % held-out
exact match for every seed of its matrix), or until its held-out token accuracy reaches
``--sft-until-token-accuracy`` when that is given (a partly trained start), plus ``--sft-override``s;
stage 2 trains ``experiment=dpo_arith`` from the stage-1 model and tokenizer. Both stages use the
same problem split (source seed 1234, 8000 train / 500 test problems), so the held-out pairs'
prompts were never trained on. Prints, and writes to ``<out>/results.json``, the held-out
preference accuracy before and after DPO, greedy exact match, the seed and the minutes per stage.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path


def _train(overrides: list[str]) -> tuple[dict, float, object]:
    from toolbox.experiment import ExperimentBuilder, load_config

    start = time.perf_counter()
    parts = ExperimentBuilder.from_config(load_config(overrides)).build()
    try:
        before = parts.trainer.evaluate() if "trainer=preference" in " ".join(overrides) else {}
        final = parts.trainer.fit()
    finally:
        parts.strategy.teardown()
    return final, (time.perf_counter() - start) / 60, before


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="work/dpo_arith", help="folder of the two runs and results.json")
    parser.add_argument(
        "--sft-model", default=None, help="skip SFT: a saved model folder (with its tokenizer)"
    )
    parser.add_argument(
        "--sft-override", action="append", default=[], help="extra override for the SFT stage"
    )
    parser.add_argument(
        "--dpo-override", action="append", default=[], help="extra override for the DPO stage"
    )
    parser.add_argument(
        "--sft-until-token-accuracy",
        type=float,
        default=0.0,
        help="stop SFT once the held-out token accuracy is at least this (evaluated every 25 steps; 0: train it all)",
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    out = Path(args.out)
    quiet = ["~callbacks.console", "device=cpu", f"seed={args.seed}"]
    result: dict = {"seed": args.seed, "threads": os.environ.get("OMP_NUM_THREADS", "torch default")}

    sft_model = args.sft_model
    if sft_model is None:
        from toolbox.trainer.callbacks.early_stopping import until_overrides

        until = args.sft_until_token_accuracy
        stop = ["eval=lm", *until_overrides("eval/token_accuracy", until)] if until else []
        sft_metrics, minutes, _ = _train(
            ["experiment=sft_arith", *stop, f"run_dir={out / 'sft'}", *quiet, *args.sft_override]
        )
        sft_model = str(out / "sft" / "model")
        result["sft"] = {
            "minutes": round(minutes, 2),
            "overrides": args.sft_override,
            "eval/exact_match": sft_metrics.get("eval/exact_match"),
        }
    result["sft_model"] = sft_model

    dpo_overrides = [
        "experiment=dpo_arith",
        "trainer=preference",
        f"model.path={sft_model}",
        f"tokenizer.path={sft_model}",
        f"run_dir={out / 'dpo'}",
        *quiet,
        *args.dpo_override,
    ]
    final, minutes, before = _train(dpo_overrides)
    keys = ("eval/accuracy", "eval/margin", "eval/exact_match", "eval/loss")
    result["dpo"] = {
        "minutes": round(minutes, 2),
        "overrides": args.dpo_override,
        "before": {k: round(before[k], 4) for k in keys if k in before},
        "after": {k: round(final[k], 4) for k in keys if k in final},
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
