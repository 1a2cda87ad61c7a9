"""benchmarks/agent_grpo_vs_trl.py: TRL's GRPOTrainer with tools runs on CPU without vLLM on the
same text as ours. TRL refuses our tokenizers' own chat template (the line quoted in
examples/agent_tools/README.md, checked here against the installed TRL); the script's template
renders every conversation as our server does and its response template parses replies as our
parser does; with the same scripted agent both trainers roll out the same episodes (a call, the
calculator's reply, the answer) with the same rewards; the script at a tiny size writes both sides."""

from __future__ import annotations

import copy
import inspect
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import agent_grpo_vs_trl as bench  # noqa: E402

from tests.rl.conftest import ScriptedEngine, call, solve  # noqa: E402
from toolbox.data.datasets.chat import Chat  # noqa: E402
from toolbox.data.hermes.calls import parse  # noqa: E402
from toolbox.data.sources.arithmetic_tools import TOOLS  # noqa: E402
from toolbox.experiment import ExperimentBuilder, load_config  # noqa: E402

TINY_MODEL = [
    "model.hidden_size=64",
    "model.num_layers=1",
    "model.num_heads=2",
    "model.intermediate_size=128",
]
REFUSAL = "The provided chat template does not support tool calling."


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A tiny untrained model of agent_tools (its BPE tokenizer and chat template), saved as a folder."""
    folder = tmp_path_factory.mktemp("base")
    parts = ExperimentBuilder.from_config(
        load_config(
            [
                "experiment=agent_tools",
                *TINY_MODEL,
                "data.source.num_train=64",
                "data.source.num_test=8",
                "eval=none",
                "callbacks=none",
                "device=cpu",
                f"run_dir={folder}/run",
            ]
        )  # fmt: skip
    ).build()
    parts.model.save_pretrained(folder / "model")
    parts.tokenizer.save_pretrained(folder / "model")
    return str(folder / "model"), parts.tokenizer


def hermes(tokenizer):
    out = copy.deepcopy(tokenizer)
    out.chat_template = bench.HERMES_TEMPLATE
    out.response_template = bench.RESPONSE_TEMPLATE
    return out


def conversations():
    question = {
        "role": "user",
        "content": "A shop has 12 apples and gets 30 more. How many apples does it have now?",
    }
    calls = [("12+30", "42"), ("42*3", "126")]
    ours, theirs = [question], [question]
    yield ours, theirs
    for expression, result in calls:
        args = {"expression": expression}
        ours = [*ours, {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "calculator", "arguments": json.dumps(args)}}]},
            {"role": "tool", "content": result}]  # fmt: skip
        theirs = [*theirs, {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "calculator", "arguments": args}}]},
            {"role": "tool", "name": "calculator", "content": result}]  # fmt: skip
        yield ours, theirs
    yield (
        [*ours, {"role": "assistant", "content": "The answer is 126."}],
        [
            *theirs,
            {"role": "assistant", "content": "The answer is 126."},
        ],
    )


def test_trl_refuses_our_template_and_takes_the_scripts(base):
    """The two refusals examples/agent_tools/README.md quotes, from the installed TRL's source and
    behaviour: our template renders no tool calls; a template TRL does not know needs a parser."""
    from trl import chat_template_utils
    from trl.chat_template_utils import (
        add_response_schema,
        is_chat_template_prefix_preserving,
        supports_tool_calling,
    )
    from trl.trainer import grpo_trainer

    _, tokenizer = base
    init = inspect.getsource(grpo_trainer.GRPOTrainer.__init__)
    assert "if not supports_tool_calling(processing_class):" in init and REFUSAL in init
    assert "processing_class = add_response_schema(processing_class)" in init
    assert "Unrecognized chat template" in inspect.getsource(chat_template_utils.add_response_schema)
    assert not supports_tool_calling(tokenizer)  # ours renders only content: TRL refuses it
    template_only = copy.deepcopy(tokenizer)
    template_only.chat_template = bench.HERMES_TEMPLATE
    assert supports_tool_calling(template_only) and is_chat_template_prefix_preserving(template_only)
    with pytest.raises(ValueError, match="Unrecognized chat template"):
        add_response_schema(template_only)  # what GRPOTrainer calls without a response_template
    # ... which GRPOTrainer skips for a tokenizer that has one (the script's)
    assert 'has_template = getattr(self._tokenizer, "response_template", None) is not None' in init


def test_the_template_renders_every_turn_as_our_server(base):
    _, tokenizer = base
    chat = Chat(tokenizer, max_length=1 << 30)
    trl = hermes(tokenizer)
    for ours, theirs in conversations():
        for prompt in (True, False):
            expected = chat.render(ours, add_generation_prompt=prompt, tools=TOOLS)
            got = trl.apply_chat_template(
                theirs, tools=[bench.calculator], tokenize=False, add_generation_prompt=prompt
            )
            assert got == expected
    assert expected.count("<tool_call>") == 2 and expected.startswith("<|bos|><|system|><tools>[{")


def test_replies_parse_as_our_server_parses_them(base):
    from trl.chat_template_utils import parse_response

    _, tokenizer = base
    trl = hermes(tokenizer)
    prefix = trl.apply_chat_template([{"role": "user", "content": "q"}], add_generation_prompt=True)[
        "input_ids"
    ]
    replies = [call("calculator", expression="12+30"), "The answer is 42.", call("calculator", expression="1+2") * 2,
               'x <tool_call>{"name": bad</tool_call>']  # fmt: skip
    for text in replies:
        got = parse_response(trl, trl.encode(text + "<|eos|>", add_special_tokens=False), prefix=prefix)
        content, calls = parse(text)
        assert got["content"] == (content or "")
        assert [(c["function"]["name"], c["function"]["arguments"]) for c in got.get("tool_calls", [])] == [
            (c.name, json.loads(c.arguments)) for c in calls
        ]


def right_on_sums(prompt: str) -> str:
    """The scripted agent, whose answers are right on the sums only."""
    reply = solve(prompt)
    if reply.startswith("The answer") and "more" not in prompt.rsplit("<|user|>", 1)[-1]:
        return "The answer is 100000."
    return reply


def ours_rewards(parts) -> dict[str, float]:
    """agent_grpo's rewards per problem with the scripted agent as its engine; one optimizer step."""
    t, rewards = parts.trainer, {}
    t.runner.engine = ScriptedEngine(parts.tokenizer, policy=right_on_sums)
    for _ in range(2):
        t.rollout(t.loader.next_batch())
        for e in t.last_episodes:
            rewards[e.task["question"]] = e.reward
            assert sum(len(turn.step.tool_runs) for turn in e.turns if turn.step) == 1
    assert t.train_step()["optimizer_steps"] == 1
    t.teardown()
    return rewards


def trl_rewards(args, parts) -> dict[str, float]:
    """TRL's rewards per problem with the scripted agent as its generation; two steps of TRL's loop,
    each round's episodes checked against our rendering."""
    t, rewards = parts.trainer, {}
    trl = bench._trl_trainer(args, t)
    tokenizer = trl.processing_class
    generate, reward = trl._generate, trl.reward_funcs[0]

    def scripted(prompt_ids, images, fields, num_generations, has_tool_images=False):
        texts = [right_on_sums(tokenizer.decode(ids)) for ids in prompt_ids]
        return [tokenizer.encode(x, add_special_tokens=False) + [tokenizer.eos_token_id] for x in texts], None

    def checked(prompts):
        out = generate(prompts)
        seen = bench.rendered_as_ours(t, prompts, out)
        assert seen["checked_rendered_as_ours"] == seen["checked_episodes"] == len(prompts)
        _, _, tool_mask, completions = out[:4]
        for messages, mask in zip(completions, tool_mask, strict=True):
            assert [m["role"] for m in messages] == ["assistant", "tool", "assistant"]
            assert 0 in mask and mask[-1] == 1  # the tool's reply is masked, the answer is not
        return out

    def recorded(prompts, completions, **fields):
        out = reward(prompts, completions, **fields)
        rewards.update({p[0]["content"]: r for p, r in zip(prompts, out, strict=True)})
        return out

    trl._generate_single_turn, trl._generate, trl.reward_funcs[0] = scripted, checked, recorded
    trl.train()
    assert trl.state.global_step == 2
    log = [entry for entry in trl.state.log_history if "reward" in entry]
    assert len(log) == 2 and all(entry["tools/call_frequency"] == 1.0 for entry in log)
    return rewards


def test_both_trainers_roll_out_the_same_episodes_of_one_scripted_agent(base, tmp_path):
    """Each side's generation replaced by the same scripted agent (a right call, then the tool's
    reply as the answer, wrong but on sums): one call per episode, the same rewards per problem (8
    problems, all drawn by both), and TRL's episodes are our rendering of theirs, token for token;
    both then take their optimizer steps."""
    path, _ = base
    args = bench.arguments(["--base", path, "--steps", "1", "--warmup", "1", "--prompts", "4",
                            "--generations", "2", "--eval-problems", "4"])  # fmt: skip
    args.settings.apply()
    found = {}
    for side in ("agent_grpo", "trl_grpo"):
        overrides = [*bench._overrides(args, path, side, str(tmp_path / side), 0), "data.source.num_train=8"]
        parts = ExperimentBuilder.from_config(load_config(overrides)).build()
        found[side] = ours_rewards(parts) if side == "agent_grpo" else trl_rewards(args, parts)
    ours, theirs = found["agent_grpo"], found["trl_grpo"]
    assert len(ours) == len(theirs) == 8 and set(ours.values()) == {0.0, 1.0}
    assert ours == theirs


@pytest.mark.slow
def test_the_script_writes_both_sides(base, tmp_path):
    path, _ = base
    out = tmp_path / "agent.json"
    data = bench.main(["--base", path, "--steps", "2", "--warmup", "1", "--prompts", "2", "--generations", "2",
                       "--eval-problems", "4", "--tail", "2", "--rounds", "2", "--out", str(out)])  # fmt: skip
    assert json.loads(out.read_text()) == json.loads(json.dumps(data))
    assert data["settings"]["threads"] == 1 and data["settings"]["deterministic"] is True
    assert len(data["orders"]) == 2 and data["orders"][0] == list(reversed(data["orders"][1]))
    for side in ("toolbox", "trl"):
        for figures in data["each_round"][side]:
            assert figures["sec_per_step"] > 0 and figures["measured_steps"] == 2
            assert 0 <= figures["reward_tail"] <= 1 and 0 <= figures["heldout_answer_accuracy"] <= 1
    for figures in data["each_round"]["trl"]:
        assert figures["checked_rendered_as_ours"] == figures["checked_episodes"] == 4
    curves = [(c["side"], c["seed"]) for c in data["training_rewards"]]
    assert curves == [("toolbox", 0), ("trl", 0), ("trl", 1), ("toolbox", 1)]  # round r: seed r
    assert (
        data["ratios"]["vs_trl"]["min"]
        <= data["ratios"]["vs_trl"]["median"]
        <= data["ratios"]["vs_trl"]["max"]
    )
