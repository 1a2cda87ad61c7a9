"""The memory writer: a real tiny training run writes each eval's failed examples into a store; an
agent writes episodes and recalls them into a prompt."""

from __future__ import annotations

import pytest

from toolbox.core.events import Event
from toolbox.experiment import ExperimentBuilder, load_config
from toolbox.memory import EpisodicMemory
from toolbox.memory.episodes import recall, write_episode


def test_training_run_writes_failures_and_summaries(tiny_overrides, tmp_path):
    parts = ExperimentBuilder.from_config(
        load_config(
            [
                *tiny_overrides,
                "trainer.max_steps=4",
                "trainer.eval_every=2",
                "eval=generation",
                "~eval.perplexity",
                "eval.exact_match.max_examples=6",
                "eval.exact_match.max_new_tokens=4",
                "+callbacks.memory_writer={name: memory_writer, max_failures: 5}",
            ]
        )
    ).build()
    seen = []  # what the evaluator reported at each EVAL_END, to compare with the store
    evaluator = parts.evaluators[0]
    parts.trainer.bus.subscribe(
        Event.EVAL_END,
        lambda d: seen.append((d.step, d.metrics["eval/exact_match"], list(evaluator.last_failures))),
    )
    parts.trainer.fit()
    assert [s for s, _, _ in seen] == [2, 4]
    with EpisodicMemory(tmp_path / "run" / "memory") as memory:
        for step, em, failures in seen:
            assert len(failures) == round((1 - em) * 6)
            stored = list(memory.items({"kind": "eval_failure", "step": step}))
            assert [it.metadata["prompt"] for it in stored] == [f["prompt"] for f in failures[:5]]
            first = stored[0]
            assert first.text == (
                f"Prompt: {failures[0]['prompt']}\nExpected: {failures[0]['reference']}\n"
                f"Model answered: {failures[0]['output']}"
            )
            assert first.metadata["run"] == "run" and first.metadata["evaluator"] == "exact_match"
            (summary,) = memory.items({"kind": "eval_summary", "step": step})
            assert summary.metadata["eval/exact_match"] == pytest.approx(em)
        (final,) = memory.items({"kind": "run_summary"})
        assert final.text.startswith("Run run finished at step 4: eval/exact_match=")
        # a later run finds the failures of a prompt it is about to see
        prompt = seen[-1][2][0]["prompt"]
        best = memory.search(prompt, k=1, filters={"kind": "eval_failure"})
        assert best[0].metadata["prompt"] == prompt


def test_a_resumed_run_drops_what_it_wrote_after_its_checkpoint(tmp_path):
    from types import SimpleNamespace

    from toolbox.core.events import EventData
    from toolbox.trainer.callbacks.memory_writer import MemoryWriter

    trainer = SimpleNamespace(context=SimpleNamespace(run_dir=tmp_path / "run"), evaluators=[])
    writer = MemoryWriter(embedder={"name": "hashing", "dim": 32})
    writer.on_fit_start(EventData(Event.FIT_START, trainer, 0, payload={"resumed_from": None}))
    for step in (2, 4, 6):
        writer.on_eval_end(EventData(Event.EVAL_END, trainer, step, metrics={"eval/loss": 1.0 / step}))
    writer.close()  # killed after step 6; the last checkpoint was step 4
    writer.on_fit_start(EventData(Event.FIT_START, trainer, 4, payload={"resumed_from": 4}))
    assert [it.metadata["step"] for it in writer.memory.items()] == [2, 4]
    writer.close()


def test_agent_episodes_are_recalled_into_a_prompt(tmp_path):
    with EpisodicMemory(tmp_path, embedder={"name": "hashing"}) as memory:
        write_episode(
            memory,
            task="book a table for two in Paris",
            steps=["searched restaurants near the Louvre", "called Le Petit Bistro"],
            outcome="booked for 8 pm",
            success=True,
        )
        write_episode(memory, task="convert 100 dollars to euros", outcome="used the ECB rate", success=True)
        block = recall(memory, "book a restaurant table in Paris", k=1, filters={"kind": "agent_episode"})
        assert block.startswith("Relevant memories:\n\n[memory 1, similarity ")
        assert "Step 2: called Le Petit Bistro\nOutcome: booked for 8 pm" in block
        assert memory.get(1).metadata == {
            "kind": "agent_episode",
            "task": "book a table for two in Paris",
            "success": True,
        }
        assert recall(memory, "anything", filters={"success": False}) == ""


def test_callbacks_memory_config_selects_the_writer(compose):
    from toolbox.core.registries import CALLBACKS
    from toolbox.trainer.callbacks.memory_writer import MemoryWriter

    cfg = compose(["callbacks=memory"])
    assert {"console", "jsonl", "memory_writer"} <= set(cfg.callbacks)
    writer = CALLBACKS.build(cfg.callbacks.memory_writer, "callbacks.memory_writer")
    assert isinstance(writer, MemoryWriter) and writer.embedder == {"name": "hashing"}
