"""The traces callback records every GRPO rollout (prompt, completion, reward per function) and every
evaluation generation; the records convert into preference pairs."""

from __future__ import annotations

import torch

from toolbox.core.events import Event
from toolbox.core.registries import REWARDS
from toolbox.experiment import ExperimentBuilder, load_config
from toolbox.tracing import Query, open_store

torch.set_num_threads(1)


@REWARDS.register("_test_trace_len")
def _length(**_):
    """A dense reward: the completion's length (so siblings differ)."""
    return lambda prompts, completions, **fields: [float(len(c)) for c in completions]


def test_grpo_rollouts_and_eval_generations_land_in_the_store(tiny_overrides, tmp_path):
    overrides = [o for o in tiny_overrides if not o.startswith(("trainer.batch_size", "eval="))] + [
        "trainer=grpo", "objective=grpo", "data.dataset.name=prompt_only", "data.dataset.max_length=16",
        "eval=generation", "eval.exact_match.max_examples=5", "~eval.perplexity",
        "trainer.prompts_per_step=3", "trainer.num_generations=4", "trainer.max_completion_length=4",
        "trainer.max_steps=2", "trainer.eval_every=0", "trainer.save_every=0",
        "+trainer.rewards.length={name: _test_trace_len, weight: 0.5}",
        "+callbacks.traces={name: traces, path: traces.sqlite}",
    ]  # fmt: skip
    parts = ExperimentBuilder.from_config(load_config(overrides)).build()
    rollouts = []
    parts.trainer.bus.subscribe(Event.ROLLOUT_END, lambda d: rollouts.append((d.step, d.payload["rollout"])))
    parts.trainer.fit()
    assert [s for s, _ in rollouts] == [1, 2]
    path = tmp_path / "run" / "traces.sqlite"
    with open_store(path, readonly=True) as store:
        calls = list(store.query(Query(name="rollout")))
        groups = list(store.query(Query(name="grpo_group")))
        evals = list(store.query(Query(name="eval/exact_match")))
    assert len(calls) == 2 * 3 * 4 and len(groups) == 2 * 3 and len(evals) == 5
    step1 = rollouts[0][1]
    first = [c for c in calls if c.metadata["step"] == 1]
    got = {(c.inputs[0]["parts"][0]["content"], c.outputs[0]["parts"][0]["content"]) for c in first}
    assert got == set(zip(step1.prompts, step1.completions, strict=True))
    for c in first:
        completion = c.outputs[0]["parts"][0]["content"]
        assert c.score("reward/length").value == float(len(completion))
        assert c.score("reward/correct").value in (0.0, 1.0)
        total = c.score("reward/correct").value + 0.5 * len(completion)
        assert abs(c.score("reward").value - total) < 1e-5
        assert c.parent_id in {g.id for g in groups} and c.output_tokens <= 4
    assert all(e.score("correct").source == "eval" and "reference" in e.metadata for e in evals)

    from datasets import load_from_disk

    from toolbox.tracing.dataset import to_dataset
    from toolbox.tracing.record_filters import RecordFilter

    card = to_dataset(path, tmp_path / "pref", format="preference", score="reward", text=True,
                      test_fraction=0.0, filters=RecordFilter(names=["rollout"]))  # fmt: skip
    rows = list(load_from_disk(str(tmp_path / "pref"))["train"])
    assert rows and all(r["score_chosen"] > r["score_rejected"] for r in rows)
    assert (
        card["rows_out"]["train"]
        + card["removed"].get("tied_siblings", 0)
        + card["removed"].get("exact_dup", 0)
        == 6
    )
