"""lm-eval's log-likelihood requests on the demo model, checked against a direct forward pass.

``loglikelihood`` (context, continuation) and ``loglikelihood_rolling`` (a whole text) run as lm-eval
tasks from local YAML files, through ``toolbox eval backend=lm_eval``; their aggregated metrics are
recomputed here from the model's logits (transformers, one forward pass per text), bos first as
toolbox feeds prompts.
"""

from __future__ import annotations

import json
import math

import pytest
import yaml

from tests.eval.harness_util import run_eval

pytest.importorskip("lm_eval")

# reversed-result additions ("07+45=250" is 7 + 45 = 52): right and wrong completions
PROBLEMS = [
    ("07+45=", "250"),
    ("07+45=", "520"),
    ("13+22=", "530"),
    ("99+01=", "001"),
    ("50+50=", "001"),
    ("38+27=", "560"),
]


def write_task(folder, name: str, output_type: str, target: str, metrics: list[str]):
    data = folder / f"{name}.jsonl"
    data.write_text("".join(json.dumps({"prompt": p, "completion": c}) + "\n" for p, c in PROBLEMS))
    task = {
        "task": name,
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"test": data.name}},
        "test_split": "test",
        "output_type": output_type,
        "doc_to_text": "{{prompt}}",
        "doc_to_target": target,
        "metric_list": [{"metric": m} for m in metrics],
    }
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(task))
    return path


@pytest.fixture(scope="module")
def direct(demo_short):
    """(summed log-prob of ``continuation`` after bos + ``context``, greedy?) from the model's logits."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(demo_short / "model", torch_dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(demo_short / "model")

    @torch.no_grad()
    def score(context: str, continuation: str) -> tuple[float, bool]:
        ctx = [tokenizer.bos_token_id, *tokenizer.encode(context, add_special_tokens=False)]
        cont = tokenizer.encode(continuation, add_special_tokens=False)
        logits = model(torch.tensor([ctx + cont])).logits[0].double()
        logprobs = torch.log_softmax(logits, dim=-1)
        steps = range(len(ctx) - 1, len(ctx) + len(cont) - 1)
        total = sum(float(logprobs[i, t]) for i, t in zip(steps, cont, strict=True))
        greedy = all(int(logprobs[i].argmax()) == t for i, t in zip(steps, cont, strict=True))
        return total, greedy

    return score


@pytest.mark.parametrize("engine", ["hf", "torch"])
def test_loglikelihood_matches_a_forward_pass(demo_short, direct, offline, tmp_path, engine):
    task = write_task(tmp_path, "arith_ll", "loglikelihood", "{{completion}}", ["perplexity", "acc"])
    got = run_eval(demo_short, "backend=lm_eval", f"task={task}", f"engine={engine}", out=tmp_path / "o.json")
    scores = [direct(p, c) for p, c in PROBLEMS]
    lls = [ll for ll, _ in scores]
    assert len(set(lls)) == len(lls)  # distinct texts, distinct numbers: the check is not vacuous
    assert got.keys() == {"eval/lm_eval/arith_ll/perplexity", "eval/lm_eval/arith_ll/acc"}
    assert got["eval/lm_eval/arith_ll/perplexity"] == pytest.approx(math.exp(-sum(lls) / len(lls)), rel=1e-5)
    assert got["eval/lm_eval/arith_ll/acc"] == sum(g for _, g in scores) / len(scores)


def test_loglikelihood_rolling_matches_a_forward_pass(demo_short, direct, offline, tmp_path):
    metrics = ["word_perplexity", "byte_perplexity", "bits_per_byte"]
    task = write_task(tmp_path, "arith_roll", "loglikelihood_rolling", "{{prompt}}{{completion}}", metrics)
    got = run_eval(demo_short, "backend=lm_eval", f"task={task}", out=tmp_path / "o.json")
    texts = [p + c for p, c in PROBLEMS]
    total = sum(direct("", t)[0] for t in texts)  # every token after bos
    words = len(texts)  # one word each
    nbytes = sum(len(t.encode()) for t in texts)
    assert got == pytest.approx(
        {
            "eval/lm_eval/arith_roll/word_perplexity": math.exp(-total / words),
            "eval/lm_eval/arith_roll/byte_perplexity": math.exp(-total / nbytes),
            "eval/lm_eval/arith_roll/bits_per_byte": -total / nbytes / math.log(2),
        },
        rel=1e-5,
    )


def test_loglikelihood_over_http_fails_naming_the_fix(demo_short, tmp_path, capsys):
    """``toolbox serve`` returns no prompt log-probs: one line naming the in-process engines (before
    any request: the port here has no server)."""
    from toolbox.cli import main

    task = write_task(tmp_path, "arith_ll", "loglikelihood", "{{completion}}", ["perplexity"])
    url = "base_url=http://127.0.0.1:9/v1"
    assert main(["eval", "--run", str(demo_short), "backend=lm_eval", f"task={task}", url]) == 2
    err = capsys.readouterr().err
    assert "need the model in process; evaluate with engine=hf or engine=torch" in err
