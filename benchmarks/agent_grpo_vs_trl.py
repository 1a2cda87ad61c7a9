"""Our agent_grpo trainer vs TRL's GRPOTrainer with tools: the calculator task, one model, the same GRPO settings.

    python benchmarks/agent_grpo_vs_trl.py [--base DIR] [--steps 30] [--warmup 2] [--prompts 8]
        [--generations 8] [--lr 5e-5] [--rounds 3] [--out F]

The task is examples/agent_tools' (``experiment=agent_grpo``): word problems of the
``arithmetic_tools`` source with agent_tools' settings, a ``calculator`` tool, reward 1 when the
final answer's last integer is the answer. Both sides start every round from the same model folder
(``--base``; by default the agent_tools base this script trains first with ``toolbox train
experiment=agent_tools``, which stops once half its held-out first calls are right) and train it
``--warmup + --steps`` GRPO steps with the experiment's settings but two (``--lr``, default 5e-5,
on both sides, and no dynamic sampling, which TRL does not have): ``--prompts`` problems ×
``--generations`` episodes a step, at most ``max_turns`` replies of at most ``max_reply_tokens``
tokens each and ``env.max_tokens`` tokens after the prompt, temperature 1, the objective's loss
type, beta and clip range, one optimizer step per round, our optimizer and scheduler (handed to
TRL, as ``trainer=trl_grpo`` does).

- **toolbox**: ``trainer=agent_grpo`` (episodes through our engine, ``toolbox.rl.episodes``); no
  traces written (TRL writes none).
- **trl**: TRL's ``GRPOTrainer(tools=[calculator])`` on CPU without vLLM (``use_vllm=False``: the
  model's ``generate``, TRL's ``_tool_call_loop``), built from ``trainer=trl_grpo``'s mapping of
  the same settings (``trainer/trl/grpo.py``), plus ``generation_kwargs={"max_new_tokens":
  max_reply_tokens}`` and ``max_tool_calling_iterations = max_turns - 1``. TRL needs a chat
  template that renders ``tools`` and ``tool_calls`` (our tokenizers' template renders only
  ``content``; ``GRPOTrainer.__init__`` raises "The provided chat template does not support tool
  calling") and a ``response_template`` to parse the replies: ``HERMES_TEMPLATE`` writes the same
  text our server's rendering does (``toolbox.data.hermes.calls.template_messages``: the tools as a
  ``<tools>`` system message, calls as ``<tool_call>`` blocks). The script checks that TRL's prompt
  ids are ours before it trains, and on the warm-up step that every TRL episode holds our runner's
  tokens (``checked_rendered_as_ours`` of ``checked_episodes``). The reward function is the
  environment's: 1.0 when the last message is an answer (no call, not cut at the reply limit) whose
  last integer is the answer.

Reported per side: seconds per step (median over the measured steps, wall and CPU), the rollout's
seconds per step, tool calls per episode, the mean training reward of the last ``--tail`` steps,
and the trained model's held-out answer accuracy and tool-call success (the ``tool_calls``
evaluator: ``--eval-problems`` held-out problems, greedy, scored as the agent scores them; the
base's own numbers beside them), over alternating rounds under the same process-wide torch
settings (benchmarks/harness). Round r trains both sides with seed ``--seed`` + r: each side
samples with its own random streams and draws the problems in its own order, so the rewards differ
by sampling noise as well (a seed rerun repeats its rewards exactly), and the rounds give the
rewards over seeds while the timing stays paired. One JSON object; ``training_rewards`` holds every
round's reward per step.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import Report, Rounds
from harness.report import common_arguments, settings_from

REPO = Path(__file__).resolve().parents[1]

# The chat template TRL renders with: the text our tokenizers' template gives after
# ``template_messages`` (tools as a system message ``<tools>[...]</tools>`` of each function's name,
# description and parameters without per-property descriptions; an assistant's calls appended to its
# content as ``<tool_call>{"name":...,"arguments":{...}}</tool_call>``), compact JSON throughout.
HERMES_TEMPLATE = (
    "{% if bos_token %}{{ bos_token }}{% endif %}"
    "{% if tools %}{{ '<|system|><tools>[' }}"
    "{% for t in tools %}{% set f = t.function if t.function is defined else t %}"
    "{% if not loop.first %},{% endif %}"
    "{{ '{\"name\":' ~ (f.name | tojson) ~ ',\"description\":' ~ (f.description | tojson) }}"
    '{{ \',"parameters":{"type":"object","properties":{\' }}'
    "{% for k, v in f.parameters.properties.items() %}{% if not loop.first %},{% endif %}"
    "{{ (k | tojson) ~ ':{\"type\":' ~ (v.type | tojson) ~ '}' }}{% endfor %}"
    "{{ '},\"required\":' ~ (f.parameters.required | tojson(separators=(',', ':'))) ~ '}}' }}"
    "{% endfor %}{{ ']</tools>' }}{% if eos_token %}{{ eos_token }}{% endif %}{% endif %}"
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>' }}{{ message['content'] or '' }}"
    "{% if message.tool_calls is defined and message.tool_calls %}{% for c in message.tool_calls %}"
    "{{ '<tool_call>{\"name\":' ~ (c.function.name | tojson) ~ ',\"arguments\":' }}"
    "{{ (c.function.arguments | tojson(separators=(',', ':'))) ~ '}</tool_call>' }}"
    "{% endfor %}{% endif %}"
    "{% if eos_token %}{{ eos_token }}{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)

# How transformers' ``parse_response`` (which TRL calls on every reply) reads a reply in that format.
RESPONSE_TEMPLATE = {
    "defaults": {"role": "assistant"},
    "start_anchor": "<|assistant|>",
    "fields": {
        "tool_calls": {
            "open": "<tool_call>",
            "close_pattern": r"</tool_call>\s*",
            "repeats": True,
            "content": "json",
            "transform": {"type": "function", "function": "{content}"},
        },
        "content": {"close_pattern": r"<\|eos\|>\s*", "content": "text"},
    },
}


def calculator(expression: str) -> str:
    """a+b, a-b or a*b of two integers

    Args:
        expression: the expression, such as 12+30
    """
    from toolbox.data.sources.arithmetic_tools import calculate

    return calculate(expression)


def base_model(args) -> str:
    """The model folder both sides start from: ``--base``, else agent_tools' base, trained once here."""
    if args.base:
        return args.base
    tag = (
        hashlib.sha1(" ".join(args.base_overrides).encode()).hexdigest()[:10]
        if args.base_overrides
        else "default"
    )
    folder = Path(tempfile.gettempdir()) / f"toolbox-bench-agent-base-s{args.seed}-{tag}"
    if not (folder / "model" / "model.safetensors").is_file():
        cmd = [sys.executable, "-m", "toolbox.cli", "train", "experiment=agent_tools",
               f"run_dir={folder}", f"seed={args.seed}", f"num_threads={args.threads}",
               *args.base_overrides]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        subprocess.run(cmd, cwd=REPO, env=env, check=True, stdout=subprocess.DEVNULL)
    return str(folder / "model")


def base_eval(args, base: str) -> dict[str, float]:
    """The base's held-out numbers, by the evaluator that scores both trained models."""
    from toolbox.eval.tool_calls import ToolCalls
    from toolbox.experiment import ExperimentBuilder, load_config

    args.settings.apply()
    parts = ExperimentBuilder.from_config(
        load_config(_overrides(args, base, "agent_grpo", tempfile.mkdtemp(), args.seed))
    ).build()
    try:
        return ToolCalls(max_examples=args.eval_problems)(parts)
    finally:
        parts.trainer.teardown()


def _overrides(args, base: str, trainer: str, run_dir: str, seed: int) -> list[str]:
    common = [
        "experiment=agent_grpo",
        f"model.path={base}",
        f"tokenizer.path={base}",
        "callbacks=none",
        "device=cpu",
        f"seed={seed}",
        *args.settings.overrides(),
        # the settings both sides were measured with, not the experiment's recipe: TRL has no
        # dynamic sampling (DAPO), and lr is the one of benchmarks/results/agent_grpo_vs_trl.json
        f"optimizer.lr={args.lr}",
        f"trainer.max_steps={args.warmup + args.steps}",
        f"trainer.prompts_per_step={args.prompts}",
        f"trainer.num_generations={args.generations}",
        "trainer.eval_every=0",
        "trainer.save_every=0",
        f"eval.tool_calls.max_examples={args.eval_problems}",
        f"run_dir={run_dir}",
    ]
    if trainer == "agent_grpo":
        return [*common, "trainer.traces=null", "trainer.dynamic_sampling=false"]
    # trl_grpo: every GRPO setting of the experiment but the environment's, which the TRL side
    # passes itself (tools, reply limit, turns); its token budget is TRL's max_completion_length
    return [
        *common,
        "trainer=trl_grpo",
        "~trainer.env",
        "~trainer.max_reply_tokens",
        "~trainer.dynamic_sampling",
        "~trainer.max_sampling_draws",
        f"trainer.max_completion_length={args.env['max_tokens']}",
    ]


def reward_fn(eos_ids: set[int]):
    """The calculator environment's reward on TRL's completions (lists of messages)."""
    from toolbox.data.sources.arithmetic_tools import final_answer

    def correct(prompts, completions, completion_ids, answer, **_):
        out = []
        for messages, ids, expected in zip(completions, completion_ids, answer, strict=True):
            last = messages[-1] if messages else {}
            done = last.get("role") == "assistant" and not last.get("tool_calls")
            cut = not ids or ids[-1] not in eos_ids  # a reply cut at the limit: the limit's reward
            out.append(float(done and not cut and final_answer(last.get("content") or "") == str(expected)))
        return out

    return correct


def _trl_trainer(args, t):
    """TRL's GRPOTrainer with the calculator tool on the ``trl_grpo`` trainer's model and settings."""
    import copy

    import datasets
    from transformers import PrinterCallback
    from trl import GRPOTrainer as TRLTrainer

    from toolbox.core.registries import TEXT_ENVS
    from toolbox.data.datasets.chat import Chat
    from toolbox.trainer.trl.bridge import event_bridge

    env = TEXT_ENVS.build({"name": "calculator", **args.env}, "trainer.env")
    rows = []
    for r in t.parts.train_data:
        task = {k: v for k, v in r.items() if k != "prompt_ids" and not k.startswith("_")}
        opening = env.reset(task)
        rows.append({"prompt": opening.messages, "answer": str(task["answer"])})
    tokenizer = copy.deepcopy(t.tokenizer)
    tokenizer.chat_template = HERMES_TEMPLATE
    tokenizer.response_template = RESPONSE_TEMPLATE
    # TRL's prompt ids must be ours: the same text, the same tokens
    chat = Chat(t.tokenizer, max_length=1 << 30)
    for row in rows[:8]:
        ours = chat.encode(chat.render(row["prompt"], add_generation_prompt=True, tools=env.tools()))
        theirs = tokenizer.apply_chat_template(row["prompt"], tools=[calculator], add_generation_prompt=True)
        theirs = list(theirs["input_ids"] if hasattr(theirs, "keys") else theirs)
        if theirs != ours:
            raise RuntimeError(
                "TRL's prompt differs from ours:\n"
                + tokenizer.decode(theirs)
                + "\n"
                + t.tokenizer.decode(ours)
            )
    if t.objective.beta > 0:  # TRL loads its reference from the model's path (trainer=trl_grpo's way)
        ref_dir = Path(tempfile.mkdtemp(prefix="trl_ref_"))
        t.policy.save_pretrained(ref_dir)
        t.policy.config._name_or_path = str(ref_dir)
    config = t.trl_config()
    config.generation_kwargs = {"max_new_tokens": args.max_reply_tokens}
    config.max_tool_calling_iterations = args.env["max_turns"] - 1
    config.reward_weights = [1.0]
    eos = {int(tokenizer.eos_token_id)}
    trainer = TRLTrainer(
        model=t.model,
        reward_funcs=[reward_fn(eos)],
        args=config,
        train_dataset=datasets.Dataset.from_list(rows),
        processing_class=tokenizer,
        optimizers=(t.optimizer, t.scheduler),
        callbacks=[event_bridge(t)],
        tools=[calculator],
    )
    trainer.remove_callback(PrinterCallback)
    return trainer


def rendered_as_ours(t, prompts: list, generated: tuple) -> dict[str, int]:
    """How many of TRL's episodes hold the tokens ours would: the opening prompt's ids and, after each
    of the model's replies (the model's own tokens on both sides), the ids our runner appends for the
    environment's messages (``toolbox.rl.episodes``: the template's text for the tool's replies and
    the next generation prompt, tokenized on its own)."""
    import json

    from toolbox.data.datasets.chat import Chat
    from toolbox.data.sources.arithmetic_tools import TOOLS

    chat = Chat(t.tokenizer, max_length=1 << 30)
    prompt_ids, completion_ids, tool_mask, completions = generated[:4]
    same = 0
    for i, messages in enumerate(completions):
        conversation = [dict(m) for m in prompts[i]]
        opening = chat.encode(chat.render(conversation, add_generation_prompt=True, tools=TOOLS))
        pieces, tools = [], []
        for m in [*messages, {"role": "end"}]:
            if m["role"] == "tool":
                tools.append({"role": "tool", "content": m["content"]})
                continue
            if tools:  # the environment's turn after the last reply: our runner's piece
                through = chat.render(conversation, tools=TOOLS)
                following = chat.render([*conversation, *tools], add_generation_prompt=True, tools=TOOLS)
                pieces.append(chat.encode(following[len(through) :]))
                conversation, tools = [*conversation, *tools], []
            m = dict(m)
            if m.get("tool_calls"):
                m["tool_calls"] = [
                    {"type": "function", "function": {"name": c["function"]["name"],
                     "arguments": json.dumps(c["function"]["arguments"], separators=(",", ":"))}}
                    for c in m["tool_calls"]
                ]  # fmt: skip
            conversation.append(m)
        runs, previous = [], 1  # TRL's environment tokens: the runs where its tool mask is 0
        for token, mask in zip(completion_ids[i], tool_mask[i], strict=True):
            if mask == 0:
                runs.append([token]) if previous else runs[-1].append(token)
            previous = mask
        same += list(prompt_ids[i]) == opening and runs == pieces
    return {"checked_episodes": len(completions), "checked_rendered_as_ours": same}


def _run(args, base: str, trainer: str, run_dir: str, seed: int, curves: list) -> dict:
    from toolbox.core.events import Event
    from toolbox.experiment import ExperimentBuilder, load_config

    parts = ExperimentBuilder.from_config(load_config(_overrides(args, base, trainer, run_dir, seed))).build()
    t = parts.trainer
    stamps: list[float] = [time.perf_counter()]
    cpu: list[float] = [time.process_time()]
    rewards: list[float] = []
    calls: list[float] = []
    gen_time: list[float] = []
    checked: dict[str, int] = {}

    def on_end(d):
        stamps.append(time.perf_counter())
        cpu.append(time.process_time())
        m = d.metrics
        ours = trainer == "agent_grpo"
        rewards.append(float(m["episodes/correct"] if ours else m["reward"]))
        calls.append(float(m["episodes/tool_calls_mean"] if ours else m["tools/call_frequency"]))
        if trainer == "agent_grpo":
            gen_time.append(m["rollout_time"])

    t.bus.subscribe(Event.STEP_END, on_end)
    if trainer == "trl_grpo":

        def build():
            trl = _trl_trainer(args, t)
            inner = trl._generate

            def timed(prompts):
                s = time.perf_counter()
                out = inner(prompts)
                gen_time.append(time.perf_counter() - s)
                if len(gen_time) == 1:  # the first (warm-up) step: TRL's episodes are ours, token for token
                    checked.update(rendered_as_ours(t, prompts, out))
                return out

            trl._generate = timed
            stamps[0], cpu[0] = time.perf_counter(), time.process_time()
            return trl

        t._trl_trainer = build
    else:

        def setup(orig=t.setup):
            orig()
            stamps[0], cpu[0] = time.perf_counter(), time.process_time()

        t.setup = setup
    final = t.fit()
    steps = [b - a for a, b in zip(stamps, stamps[1:], strict=False)][args.warmup :]
    cpu_steps = [b - a for a, b in zip(cpu, cpu[1:], strict=False)][args.warmup :]
    tail = rewards[-args.tail :]
    curves.append({"side": "toolbox" if trainer == "agent_grpo" else "trl", "seed": seed, "rewards": rewards})
    return {
        "sec_per_step": statistics.median(steps),
        "steps_per_s": 1.0 / statistics.median(steps),
        "cpu_sec_per_step": statistics.median(cpu_steps),
        "rollout_sec_per_step": statistics.median(gen_time[args.warmup :]),
        "reward_first": rewards[0],
        "reward_tail": sum(tail) / len(tail),
        "tool_calls_per_episode": sum(calls) / len(calls),
        "heldout_answer_accuracy": float(final["eval/answer_accuracy"]),
        "heldout_tool_call_success": float(final["eval/tool_call_success"]),
        "measured_steps": len(steps),
        **checked,
    }


def arguments(argv=None) -> argparse.Namespace:
    """The command line, with the torch settings and the experiment's environment limits added."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--base", help="the model folder both sides start from (default: agent_tools' base, trained here)"
    )
    p.add_argument("--base-overrides", nargs="*", default=[], help="extra overrides of the base's training")
    p.add_argument("--lr", type=float, default=5e-5, help="both sides' learning rate")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--generations", type=int, default=8)
    p.add_argument(
        "--tail", type=int, default=5, help="the training reward is averaged over the last this many steps"
    )
    p.add_argument("--eval-problems", type=int, default=200)
    p.add_argument(
        "--seed", type=int, default=0, help="the base's seed and the first round's (round r: seed + r)"
    )
    common_arguments(p, sizes=False)
    args = p.parse_args(argv)
    if args.warmup < 1:
        p.error("--warmup must be >= 1: the warm-up step is where TRL's episodes are checked against ours")
    args.settings = settings_from(args)
    # the experiment's environment limits (toolbox/configs/experiment/agent_grpo.yaml)
    from toolbox.experiment import load_config

    cfg = load_config(["experiment=agent_grpo", "model.path=x", "tokenizer.path=x"])
    args.env = {"max_turns": int(cfg.trainer.env.max_turns), "max_tokens": int(cfg.trainer.env.max_tokens)}
    args.max_reply_tokens = int(cfg.trainer.max_reply_tokens)
    return args


def main(argv=None) -> dict:
    args = arguments(argv)
    report = Report("agent_grpo_vs_trl", args, args.settings)
    base = base_model(args)
    report.add("base", base)
    report.add("environment", {**args.env, "max_reply_tokens": args.max_reply_tokens})
    start = base_eval(args, base)
    report.add("base_heldout", start)
    tmp = tempfile.mkdtemp(prefix="agent_grpo_bench_")

    def side(trainer: str):
        numbers = iter(range(args.rounds))

        def run() -> dict:  # round r trains with seed + r, on both sides
            r = next(numbers)
            return _run(args, base, trainer, f"{tmp}/{trainer}{r}", args.seed + r, curves)

        return run

    sides = {"toolbox": side("agent_grpo"), "trl": side("trl_grpo")}
    curves: list[dict] = []
    rounds = Rounds(sides, args.settings, args.rounds).run()
    report.add("training_rewards", curves)  # each round's reward per step, in the order they ran
    ratios = {
        "vs_trl": rounds.ratio("toolbox", "trl", "sec_per_step", higher_is_better=False),
        "vs_trl_cpu": rounds.ratio("toolbox", "trl", "cpu_sec_per_step", higher_is_better=False),
    }
    summary = rounds.summary()

    def both(figure: str) -> str:
        return " vs TRL ".join(f"{summary[side][figure]['median']:.3f}" for side in ("toolbox", "trl"))

    row = {
        "title": f"agent GRPO with a calculator tool from agent_tools' base, {args.prompts} problems x "
        f"{args.generations} episodes of up to {args.env['max_turns']} replies, {args.steps} steps after "
        f"{args.warmup} warm-up, round r with seed {args.seed} + r; medians over the rounds: training "
        f"reward of the last {args.tail} steps ours {both('reward_tail')}, held-out answer accuracy "
        f"after them ours {both('heldout_answer_accuracy')} (the base: {start['eval/answer_accuracy']:.3f})",
        "figure": "steps_per_s",
        "unit": "steps/s",
        "peers": {"trl": "TRL GRPOTrainer(tools=[calculator])"},
        "goal": "none set (issue 33: measured beside TRL)",
    }
    return report.finish(rounds, ratios, row)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    main()
