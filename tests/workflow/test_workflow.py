"""The Snakemake workflow and dvc.yaml: one definition of the stages, a validated config, exact reruns.

Fast checks (dry runs, schema, graphs) run by default; the end-to-end runs of a tiny pipeline are
marked slow (each trains a 1-layer model for 20 steps, about a minute on 2 cores).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from workflow_copy import REPO, TINY_OVERRIDES, TINY_RUN, Workflow, copy_workflow, tiny_config, tool

sys.path.insert(0, str(REPO / "workflow"))
sys.path.insert(0, str(REPO / "workflow" / "scripts"))
import dvc_yaml  # noqa: E402
import run_config  # noqa: E402
import runs  # noqa: E402
import slice_config  # noqa: E402
import stages  # noqa: E402

STAGE_NAMES = {"defaults", "compose", "data", "train", "eval", "check", "plot", "publish"}


# -- one definition, two pipelines ----------------------------------------------------------------
def test_dvc_yaml_is_generated_from_the_config_and_up_to_date() -> None:
    cfg = run_config.load_config(REPO / "config" / "config.yaml")
    assert (REPO / "dvc.yaml").read_text() == dvc_yaml.dvc_yaml_text(cfg["runs"], cfg.get("tables")), (
        "dvc.yaml is out of date with config/config.yaml: run `python workflow/generate.py`"
    )


def test_repo_config_is_valid_and_has_the_demo(tmp_path: Path) -> None:
    cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    assert cfg["runs"]["demo"]["experiment"] == "demo"
    from jsonschema import Draft202012Validator

    schema = yaml.safe_load((REPO / "workflow" / "schemas" / "config.schema.yaml").read_text())
    assert not list(Draft202012Validator(schema).iter_errors(cfg))


ACROSS_RUNS = {"compare"}  # rules of no run: every run's curves overlaid (workflow/rules/compare.smk)


def snakemake_job_graph(dot: str) -> set[tuple[tuple[str, str | None], tuple[str, str | None]]]:
    """Edges (rule, run) -> (rule, run) of `snakemake --dag`. A node's label names a wildcard only
    where it first appears, so a job's run is inherited from the jobs it depends on."""
    rules, runs = {}, {}
    for node, label in re.findall(r'^\s*(\d+)\[label = "([^"]*)"', dot, flags=re.M):
        parts = label.split("\\n")
        rules[node] = parts[0]
        runs[node] = next((p.split(": ", 1)[1] for p in parts[1:] if p.startswith("run: ")), None)
    edges = re.findall(r"^\s*(\d+) -> (\d+)", dot, flags=re.M)
    for _ in rules:
        for a, b in edges:
            if runs[b] is None and runs[a] is not None and rules[b] not in ACROSS_RUNS:
                runs[b] = runs[a]
    return {((rules[a], runs[a]), (rules[b], runs[b])) for a, b in edges if "all" not in (rules[a], rules[b])}


def test_snakemake_and_dvc_describe_the_same_stage_graph(tmp_path: Path) -> None:
    cfg = tiny_config()
    cfg["runs"]["other"] = {"experiment": "demo", "overrides": ["trainer.max_steps=5"]}
    cfg["runs"]["tuned"] = tuned_entry()  # starts from tiny's model
    cfg["runs"]["actor"] = {  # agent -> traces -> dataset
        **tiny_config()["runs"][TINY_RUN], "agent": {"script": "agent.py"}, "to_dataset": ["--format", "sft"],
    }  # fmt: skip
    cfg["runs"]["learner"] = {"experiment": "agent_sft", "init_from": "actor", "data_from_traces": "actor"}
    wf = copy_workflow(tmp_path / "repo", cfg)
    (wf.root / "agent.py").write_text("# the agent script of run 'actor'\n")
    wf.git_dvc_init()
    # compose is a checkpoint: the jobs after it are known exactly once it has run (~10 s)
    wf.snakemake("-c2", *(f"work/{r}/config/full.yaml" for r in cfg["runs"]))

    smk = snakemake_job_graph(wf.snakemake("--dag", "--quiet").stdout)
    names = {
        s.dvc_name(r): (s.name, r)
        for s in stages.STAGES
        for r in (sorted(cfg["runs"]) if s.per_run else [None])
        if s.applies(cfg["runs"].get(r) if r else None)
    }
    names["compare"] = ("compare", None)  # every run's curves overlaid (workflow/rules/compare.smk)
    ddot = wf.dvc("dag", "--dot").stdout
    dvc = {
        (names[a], names[b])
        for a, b in re.findall(r'"?([\w-]+)"?\s*->\s*"?([\w-]+)"?', ddot)
        if a in names and b in names
    }

    assert smk == dvc, f"only in Snakemake: {sorted(smk - dvc)}\nonly in DVC: {sorted(dvc - smk)}"
    assert {job for edge in smk for job in edge} == set(names.values())
    assert (("train", "tiny"), ("plot", "tiny")) in smk  # plot reads train's metrics.jsonl
    assert {(("train", "tiny"), ("data", "tuned")), (("train", "tiny"), ("train", "tuned"))} <= smk
    # agent run -> traces -> dataset -> the learner's data; the agent's eval is published
    assert {(("train", "actor"), ("agent", "actor")), (("agent", "actor"), ("traces", "actor")),
            (("traces", "actor"), ("data", "learner")), (("agent", "actor"), ("publish", "actor"))} <= smk  # fmt: skip
    assert ("agent", "tiny") not in {job for edge in smk for job in edge}


# -- a run that starts from another run's model (init_from) ---------------------------------------
TUNED_OVERRIDES = [
    "data.source.num_train=256", "data.source.num_test=32", "trainer.max_steps=2",
    "trainer.prompts_per_step=2", "trainer.num_generations=2", "trainer.eval_every=0",
    "trainer.save_every=0", "eval.exact_match.max_examples=8", "device=cpu",
]  # fmt: skip


def tuned_entry() -> dict:
    """GRPO (experiment grpo_arith) from the tiny run's SFT model: the pattern of grpo_run."""
    return {"experiment": "grpo_arith", "init_from": TINY_RUN, "overrides": list(TUNED_OVERRIDES)}


def test_init_from_points_the_run_at_the_other_runs_model(tmp_path: Path) -> None:
    cfg = tiny_config()
    cfg["runs"]["tuned"] = tuned_entry()
    assert run_config.config_errors(cfg) == []
    model = "work/tiny/train/model"
    assert runs.overrides("tuned", cfg["runs"]["tuned"])[:6] == [
        "experiment=grpo_arith", "run_name=tuned", "model=pretrained", f"model.path={model}",
        "tokenizer=pretrained", f"tokenizer.path={model}",
    ]  # fmt: skip
    dvc = dvc_yaml.dvc_stages(cfg["runs"])["stages"]
    assert model in dvc["data-tuned"]["deps"] and model in dvc["train-tuned"]["deps"]
    # eval scores the starting model too (before/, gain/), so it follows it as well
    assert model in dvc["eval-tuned"]["deps"] and model in dvc["eval-tiny"]["deps"]
    assert f"--model work/tuned/train/model --before {model} --out" in dvc["eval-tuned"]["cmd"]
    assert "--before" not in dvc["eval-tiny"]["cmd"]
    assert not any(model.replace("tiny", "tuned") in d for d in dvc["train-tiny"]["deps"])

    wf = copy_workflow(tmp_path / "repo", cfg)
    out = wf.snakemake("-n", "results/tuned/").stdout
    # the tuned run needs tiny's model, hence tiny's train (and its data and compose), not its eval
    assert re.search(r"^train\s+2$", out, flags=re.M) and re.search(r"^data\s+2$", out, flags=re.M), out
    assert re.search(r"^eval\s+1$", out, flags=re.M), out


def composed_dry_run_jobs(wf: Workflow, target: str) -> list[str]:
    """The jobs of ``snakemake -n -p target`` once every run's compose has run (its outputs newer than
    its inputs, so that the jobs read through the checkpoint show their inputs), without job ids and
    reasons; sorted."""
    cfg = yaml.safe_load((wf.root / "config" / "config.yaml").read_text())
    paths = [stages.DEFAULTS] + [f"work/{run}/config/{n}.yaml" for run in cfg["runs"] for n in ("full", "data", "train", "eval")]  # fmt: skip
    for path in paths:
        (wf.root / path).parent.mkdir(parents=True, exist_ok=True)
        (wf.root / path).write_text("x: 1\n")
        os.utime(wf.root / path, (2e9, 2e9))
    out = wf.snakemake("-n", "-p", target).stdout
    blocks = re.findall(
        r"^(?:local)?(?:rule|checkpoint) \w+:\n(?:    .*\n)+Shell command: .*$", out, flags=re.M
    )
    return sorted(re.sub(r"^    (jobid|reason): .*\n", "", b, flags=re.M) for b in blocks)


def test_a_runs_jobs_do_not_depend_on_the_other_runs_having_run_inputs(tmp_path: Path) -> None:
    """Where no run has an input or value of another run (init_from, an agent), common.smk gives
    Snakemake none (no per-job function); the run's jobs are those it gets where another run has one."""
    alone = composed_dry_run_jobs(copy_workflow(tmp_path / "alone", tiny_config()), f"results/{TINY_RUN}/")
    cfg = tiny_config()
    cfg["runs"]["tuned"] = tuned_entry()
    beside = composed_dry_run_jobs(copy_workflow(tmp_path / "beside", cfg), f"results/{TINY_RUN}/")
    assert len(alone) == 6 and any("--before" not in b and "rule eval:" in b for b in alone), alone
    assert alone == beside


@pytest.mark.parametrize(
    ("init_from", "expected"),
    [
        ("tiyn", "runs.tuned.init_from: 'tiyn' is not a run of this file (the runs: tiny, tuned)"),
        ("tuned", "runs.tuned.init_from: a cycle (tuned -> tuned); a run cannot start from itself"),
    ],
)
def test_init_from_must_name_another_run_without_a_cycle(init_from: str, expected: str) -> None:
    cfg = tiny_config()
    cfg["runs"]["tuned"] = {**tuned_entry(), "init_from": init_from}
    assert run_config.config_errors(cfg) == [expected]


def test_init_from_cycle_through_two_runs_is_refused() -> None:
    cfg = tiny_config()
    cfg["runs"]["tuned"] = tuned_entry()
    cfg["runs"]["tiny"]["init_from"] = "tuned"
    assert run_config.config_errors(cfg) == [
        "runs.tiny.init_from: a cycle (tiny -> tuned -> tiny); a run cannot start from itself",
        "runs.tuned.init_from: a cycle (tuned -> tiny -> tuned); a run cannot start from itself",
    ]


def test_snakemake_runs_the_commands_of_dvc_yaml(workflow_copy: Workflow) -> None:
    out = workflow_copy.snakemake("-n", "-p", f"results/{TINY_RUN}/").stdout
    dvc = yaml.safe_load((workflow_copy.root / "dvc.yaml").read_text())["stages"]
    for name in sorted(STAGE_NAMES):
        key = name if name == "defaults" else f"{name}-{TINY_RUN}"
        cmd = dvc[key]["cmd"]
        assert cmd.startswith("mkdir -p ") and " && " in cmd
        assert cmd.split(" && ", 1)[1] in out, f"{key}: DVC's command is not what Snakemake runs:\n{cmd}"


# -- the config -----------------------------------------------------------------------------------
def test_dry_run_lists_every_stage_and_why(workflow_copy: Workflow) -> None:
    res = workflow_copy.snakemake("-n", f"results/{TINY_RUN}/")
    assert workflow_copy.ran(res.stdout) == STAGE_NAMES
    assert "reason: Missing output files: work/tiny/train/model" in res.stdout
    assert "This was a dry-run" in res.stdout


def test_default_target_builds_every_run(tmp_path: Path) -> None:
    cfg = tiny_config()
    cfg["runs"]["second"] = {"experiment": "demo", "overrides": TINY_OVERRIDES}
    wf = copy_workflow(tmp_path / "repo", cfg)
    out = wf.snakemake("-n").stdout
    assert re.search(r"^publish\s+2$", out, flags=re.M), out
    assert re.search(r"^defaults\s+1$", out, flags=re.M), out


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            lambda c: c["runs"]["tiny"]["resources"].update(cpus="two"),
            "runs.tiny.resources.cpus: 'two' is not of type 'integer' "
            "(schema: config.schema.yaml#/properties/runs/additionalProperties/properties/resources/properties/cpus/type)",
        ),
        (lambda c: c["runs"]["tiny"].pop("experiment"), "runs.tiny: 'experiment' is a required property"),
        (
            lambda c: c["runs"]["tiny"].update(overides=[]),
            "runs.tiny: Additional properties are not allowed ('overides' was unexpected)",
        ),
        (
            lambda c: c["runs"]["tiny"].update(overrides="trainer.max_steps=5"),
            "runs.tiny.overrides: 'trainer.max_steps=5' is not of type 'array'",
        ),
        (
            lambda c: c["runs"]["tiny"].update(overrides=["not an override"]),
            "runs.tiny.overrides.0: 'not an override' does not match",
        ),
        (
            lambda c: c["runs"]["tiny"]["resources"].update(gpu=-1),
            "runs.tiny.resources.gpu: -1 is less than the minimum of 0",
        ),
        (lambda c: c.update(runs={"bad/name": c["runs"]["tiny"]}), "runs: 'bad/name' does not match"),
        (lambda c: c.update(runs={}), "runs: {} should be non-empty"),
        (
            lambda c: c.update(run={}),
            "(top level): Additional properties are not allowed ('run' was unexpected)",
        ),
    ],
)
def test_config_errors_name_the_key_and_the_schema_path(change, expected: str) -> None:
    cfg = tiny_config()
    assert run_config.config_errors(cfg) == []
    change(cfg)
    errors = run_config.config_errors(cfg)
    assert any(e.startswith(expected) for e in errors), errors
    assert all("(schema: config.schema.yaml#/" in e for e in errors)


def test_snakemake_and_the_generator_refuse_an_invalid_config(workflow_copy: Workflow) -> None:
    cfg = tiny_config()
    cfg["runs"]["tiny"]["resources"]["cpus"] = "two"
    (workflow_copy.root / "config" / "config.yaml").write_text(yaml.safe_dump(cfg))
    res = workflow_copy.snakemake("-n", check=False)
    assert res.returncode != 0
    out = res.stdout + res.stderr
    assert (
        "config/config.yaml is not valid:" in out
        and "runs.tiny.resources.cpus: 'two' is not of type 'integer'" in out
    ), out[-3000:]
    gen = workflow_copy.run(sys.executable, "workflow/generate.py", "dvc", check=False)
    assert gen.returncode == 2 and "runs.tiny.resources.cpus" in gen.stderr


def test_unknown_run_lists_the_runs(workflow_copy: Workflow) -> None:
    res = workflow_copy.snakemake("-n", "results/tiyn/", check=False)
    assert res.returncode != 0
    out = res.stdout + res.stderr
    assert "unknown run 'tiyn'. Did you mean 'tiny'? The runs in config/config.yaml are: tiny." in out, out[
        -3000:
    ]


def test_stale_dvc_yaml_is_reported(workflow_copy: Workflow) -> None:
    (workflow_copy.root / "dvc.yaml").write_text("stages: {}\n")
    res = workflow_copy.snakemake("-n")
    assert "dvc.yaml does not describe the runs" in res.stdout + res.stderr
    check = workflow_copy.run(sys.executable, "workflow/generate.py", "dvc", "--check", check=False)
    assert check.returncode == 1


def test_profiles_parse(workflow_copy: Workflow) -> None:
    local = workflow_copy.snakemake("--profile", "workflow/profiles/local", "-n", f"results/{TINY_RUN}/")
    assert workflow_copy.ran(local.stdout) == STAGE_NAMES
    profile = yaml.safe_load((REPO / "slurm" / "config.yaml").read_text())
    assert profile["executor"] == "slurm" and profile["jobs"] >= 1
    assert set(profile["default-resources"]) >= {"runtime", "mem_mb"}


def test_lint_is_clean(workflow_copy: Workflow) -> None:
    res = workflow_copy.snakemake("--lint")
    assert "Congratulations, your workflow is in a good condition!" in res.stdout + res.stderr


def test_rules_are_snakefmt_formatted() -> None:
    res = subprocess.run(
        [tool("snakefmt"), "--check", "Snakefile", "workflow/rules"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr


# -- the slices -----------------------------------------------------------------------------------
FULL = {
    "run_name": "tiny",
    "run_dir": "work/tiny/train",
    "seed": 0,
    "device": "cpu",
    "deterministic": True,
    "resume_from": None,
    "model": {"name": "tiny_llama", "num_layers": 1},
    "tokenizer": {"name": "char"},
    "data": {"source": {"name": "arithmetic", "num_train": 256}},
    "objective": {"name": "causal_lm"},
    "trainer": {"name": "supervised", "max_steps": 20},
    "optimizer": {"name": "adamw", "lr": 0.001},
    "callbacks": {},
    "precision": {"name": "fp32"},
    "strategy": {"name": "single"},
    "launcher": {"name": "local"},
    "eval": {
        "perplexity": {"name": "perplexity"},
        "exact_match": {"name": "exact_match", "max_examples": 16},
    },
}
DEFAULTS = {
    **FULL,
    "run_name": "default",
    "run_dir": "results/default",
    "device": "auto",
    "model": {"name": "tiny_llama", "num_layers": 2},
    "data": {"source": {"name": "arithmetic", "num_train": 5000}},
    "trainer": {"name": "supervised", "max_steps": 200},
    "eval": {"perplexity": {"name": "perplexity"}},
}


def _slices(full: dict) -> dict[str, dict]:
    return {stage: slice_config.slice_config(full, DEFAULTS, stage) for stage in slice_config.KEEP}


def _changed(change) -> set[str]:
    other = json.loads(json.dumps(FULL))
    change(other)
    before, after = _slices(FULL), _slices(other)
    return {stage for stage in before if before[stage] != after[stage]}


@pytest.mark.parametrize(
    ("change", "stages_changed"),
    [
        (lambda c: c["eval"]["exact_match"].update(max_examples=8), {"eval"}),
        (lambda c: c["trainer"].update(max_steps=40), {"train"}),
        (lambda c: c["optimizer"].update(lr=0.01), {"train"}),
        (lambda c: c["model"].update(num_layers=2), {"train"}),
        (lambda c: c["data"]["source"].update(num_train=128), {"data", "train", "eval"}),
        (lambda c: c.update(seed=1), {"data", "train", "eval"}),
        (lambda c: c.update(resume_from="auto"), set()),
    ],
)
def test_a_change_reaches_only_the_slices_that_read_it(change, stages_changed: set[str]) -> None:
    assert _changed(change) == stages_changed


def test_a_run_that_stops_on_eval_metrics_trains_with_its_own_evaluators() -> None:
    """early_stopping reads the evaluators' metrics during training (agent_tools stops on
    eval/tool_call_success, which only its own tool_calls evaluator gives): its train slice keeps
    the run's eval section, so an eval change retrains it; without the callback it does not."""
    stopping = json.loads(json.dumps(FULL))
    stopping["callbacks"] = {"early_stopping": {"name": "early_stopping", "monitor": "eval/exact_match"}}
    assert _slices(stopping)["train"]["eval"] == FULL["eval"] != DEFAULTS["eval"]
    assert _slices(FULL)["train"]["eval"] == DEFAULTS["eval"]
    changed = json.loads(json.dumps(stopping))
    changed["eval"]["exact_match"]["max_examples"] = 8
    assert {k for k, v in _slices(changed).items() if v != _slices(stopping)[k]} == {"train", "eval"}


def test_slices_are_full_configs_normalised_to_the_defaults() -> None:
    s = _slices(FULL)
    assert list(s["train"]) == list(FULL)  # every section, in the composed order
    assert s["train"]["eval"] == DEFAULTS["eval"] and s["train"]["resume_from"] is None
    assert s["data"]["trainer"] == DEFAULTS["trainer"] and s["data"]["data"] == FULL["data"]
    assert s["eval"]["model"] == DEFAULTS["model"] and s["eval"]["eval"] == FULL["eval"]
    assert s["data"]["run_dir"] == s["eval"]["run_dir"] == "work/tiny/train"


# -- end to end (slow) ----------------------------------------------------------------------------
def _set_override(wf: Workflow, key: str, value: str) -> None:
    cfg = yaml.safe_load((wf.root / "config" / "config.yaml").read_text())
    ov = [o for o in cfg["runs"][TINY_RUN]["overrides"] if not o.startswith(f"{key}=")]
    cfg["runs"][TINY_RUN]["overrides"] = [*ov, f"{key}={value}"]
    wf.write_config(cfg)


@pytest.mark.slow
def test_tiny_run_end_to_end_and_exact_reruns(workflow_copy: Workflow) -> None:
    wf = workflow_copy
    first = wf.snakemake("-c2", f"results/{TINY_RUN}/")
    assert wf.ran(first.stdout + first.stderr) == STAGE_NAMES

    results = wf.root / "results" / TINY_RUN
    assert (results / "model" / "model.safetensors").is_symlink()
    assert (results / "model" / "model.safetensors").resolve() == (
        wf.root / "work/tiny/train/model/model.safetensors"
    ).resolve()
    assert (results / "model" / "config.json").is_file()
    metrics = json.loads((results / "eval.json").read_text())
    assert {"eval/loss", "eval/exact_match"} <= set(metrics)
    lines = [json.loads(x) for x in (results / "metrics.jsonl").read_text().splitlines()]
    assert max(r["step"] for r in lines) == 20
    assert json.loads((results / "curves" / "train.json").read_text())[0]["step"] == 1
    assert any(p.suffix == ".png" for p in (results / "plots").iterdir())
    assert yaml.safe_load((results / "config.yaml").read_text())["run_dir"] == "work/tiny/train"
    for stage in STAGE_NAMES:
        log = wf.root / ("work/_defaults" if stage == "defaults" else "work/tiny") / "logs" / f"{stage}.log"
        bench = log.parent.parent / "benchmarks" / f"{stage}.tsv"
        assert log.is_file() and bench.is_file(), stage

    # nothing changed: nothing runs
    again = wf.snakemake("-c2", f"results/{TINY_RUN}/")
    assert "Nothing to be done" in again.stdout + again.stderr
    assert wf.ran(again.stdout + again.stderr) == set()

    # train forced to rerun finds its final checkpoint and resumes a finished run: it adds no line
    # to metrics.jsonl and writes the same model; a second snakemake then has nothing to do
    metrics_before = (results / "metrics.jsonl").read_bytes()
    forced = wf.snakemake("-c2", "--forcerun", "train", f"results/{TINY_RUN}/")
    assert "train" in wf.ran(forced.stdout + forced.stderr)
    assert "resumed from step 20" in (wf.root / "work/tiny/logs/train.log").read_text()
    assert (results / "metrics.jsonl").read_bytes() == metrics_before
    again = wf.snakemake("-c2", f"results/{TINY_RUN}/")
    assert wf.ran(again.stdout + again.stderr) == set(), again.stdout + again.stderr

    # an eval-only change: toolbox plan (which composes first) says only eval, check and publish
    # will run, and they alone do
    _set_override(wf, "eval.exact_match.max_examples", "8")
    planned = wf.run(tool("toolbox"), "plan", f"results/{TINY_RUN}/").stdout
    assert {line.split(" | ")[1] for line in planned.splitlines()[2:]} == {"eval", "check", "publish"}, (
        planned
    )
    res = wf.snakemake("-c2", f"results/{TINY_RUN}/")
    assert wf.ran(res.stdout + res.stderr) == {"eval", "check", "publish"}
    assert "model.safetensors" in {p.name for p in (results / "model").iterdir()}

    # an expectation the run does not reach: only check reruns, and fails the pipeline with the table
    cfg = yaml.safe_load((wf.root / "config" / "config.yaml").read_text())
    cfg["runs"][TINY_RUN]["expect"] = {"eval/exact_match": {"min": 1.5}}
    wf.write_config(cfg)
    res = wf.snakemake("-c2", f"results/{TINY_RUN}/", check=False)
    assert res.returncode != 0 and wf.ran(res.stdout + res.stderr) == {"check"}
    log = (wf.root / "work/tiny/logs/check.log").read_text()
    assert "run tiny does not reach what it declares (eval/exact_match)" in log
    assert "| tiny | eval/exact_match | >= 1.5 |" in log and "| **NO** |" in log
    cfg["runs"][TINY_RUN]["expect"] = {"eval/exact_match": {"min": 0.0}}
    wf.write_config(cfg)
    res = wf.snakemake("-c2", f"results/{TINY_RUN}/")
    assert wf.ran(res.stdout + res.stderr) == {"check", "publish"}
    assert json.loads((results / "check.json").read_text())["passed"] is True

    # a data change: data, train (from scratch: its checkpoints were of another training), eval
    _set_override(wf, "data.source.num_train", "200")
    res = wf.snakemake("-c2", f"results/{TINY_RUN}/")
    assert wf.ran(res.stdout + res.stderr) == {"compose", "data", "train", "eval", "check", "plot", "publish"}
    assert "resumed" not in (wf.root / "work/tiny/logs/train.log").read_text()


@pytest.mark.slow
def test_init_from_run_trains_from_the_other_runs_model_and_follows_it(tmp_path: Path) -> None:
    cfg = tiny_config()
    cfg["runs"]["tuned"] = tuned_entry()
    wf = copy_workflow(tmp_path / "repo", cfg)
    first = wf.snakemake("-c2", "results/tuned/")
    out = first.stdout + first.stderr
    assert re.search(r"^train\s+2$", out, flags=re.M), out[-3000:]  # tiny's SFT, then tuned's GRPO
    assert not (wf.root / "results" / TINY_RUN).exists()  # tiny's model was built, not its deliverables
    composed = yaml.safe_load((wf.root / "results/tuned/config.yaml").read_text())
    assert {k: composed["model"][k] for k in ("name", "path")} == {
        "name": "pretrained",
        "path": "work/tiny/train/model",
    }
    assert composed["trainer"]["name"] == "grpo"
    rows = [json.loads(x) for x in (wf.root / "results/tuned/metrics.jsonl").read_text().splitlines()]
    assert max(r["step"] for r in rows) == 2 and any("reward" in r for r in rows)
    # before and after in the run's own eval JSON: the starting model by the same evaluator, same split
    tuned = json.loads((wf.root / "results/tuned/eval.json").read_text())
    assert {"eval/exact_match", "before/eval/exact_match", "gain/eval/exact_match"} <= set(tuned)
    assert tuned["gain/eval/exact_match"] == tuned["eval/exact_match"] - tuned["before/eval/exact_match"]
    # the tokenizer the tuned run trained with is tiny's
    assert (wf.root / "work/tuned/data/tokenizer/tokenizer.json").read_text() == (
        wf.root / "work/tiny/data/tokenizer/tokenizer.json"
    ).read_text()

    again = wf.snakemake("-c2", "results/tuned/")
    assert wf.ran(again.stdout + again.stderr) == set()

    # tiny trains longer: its model changes, so the tuned run's data and training follow
    _set_override(wf, "trainer.max_steps", "25")
    res = wf.snakemake("-c2", "results/tuned/")
    out = res.stdout + res.stderr
    assert wf.ran(out) == {"compose", "data", "train", "eval", "check", "plot", "publish"}
    made = set(re.findall(r"^\s+output: ([^,\s]+)", out, flags=re.M))
    assert {"work/tiny/train/model", "work/tuned/data", "work/tuned/train/model"} <= made, made
    assert "work/tiny/data" not in made


@pytest.mark.slow
def test_interrupted_train_leaves_nothing_complete_and_resumes(workflow_copy: Workflow) -> None:
    import os
    import signal
    import subprocess
    import time

    wf = workflow_copy
    _set_override(wf, "trainer.max_steps", "400")
    _set_override(wf, "trainer.save_every", "20")
    wf.snakemake("-c2", "work/tiny/data")
    proc = subprocess.Popen(
        [sys.executable, "-m", "snakemake", "-c2", "work/tiny/train/model"],
        cwd=wf.root,
        env=wf.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    ckpts = wf.root / "work/tiny/train/checkpoints"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not any(ckpts.glob("step_*")) and proc.poll() is None:
        time.sleep(0.2)
    assert proc.poll() is None, (
        f"training finished before it could be interrupted:\n{proc.communicate()[0][-3000:]}"
    )
    os.killpg(proc.pid, signal.SIGKILL)  # the machine dies: no clean-up at all
    proc.wait()
    assert not (wf.root / "work/tiny/train/model").exists()

    # a killed Snakemake leaves its lock (--unlock) and marks the job incomplete; --rerun-incomplete
    # (the profiles set it) reruns it, and train resumes from its last checkpoint
    wf.snakemake("--unlock")
    res = wf.snakemake("-c2", "--rerun-incomplete", "work/tiny/train/model")
    assert wf.ran(res.stdout + res.stderr) == {"train"}
    assert "resumed from step" in (wf.root / "work/tiny/logs/train.log").read_text()
    assert (wf.root / "work/tiny/train/model/config.json").is_file()
    steps = [
        json.loads(x)["step"] for x in (wf.root / "work/tiny/train/metrics.jsonl").read_text().splitlines()
    ]
    train_steps = [s for s in steps if s is not None]
    assert max(train_steps) == 400 and min(train_steps) == 1


@pytest.mark.slow
def test_dvc_repro_push_pull_and_fresh_clone(tmp_path: Path) -> None:
    wf = copy_workflow(tmp_path / "repo")
    wf.git_dvc_init()

    first = wf.dvc("repro")
    # dvc repro builds every stage, the serving benchmark and the cross-run comparison too (snakemake
    # results/<run>/ needs neither)
    per_run = STAGE_NAMES - {"defaults"} | {"serve_bench"}
    assert wf.dvc_ran(first.stdout) == {"defaults", "compare", *(f"{s}-tiny" for s in per_run)}, first.stdout
    second = wf.dvc("repro")
    assert wf.dvc_ran(second.stdout) == set() and "Data and pipelines are up to date" in second.stdout

    # train forced to rerun resumes the finished run: the same model bytes, no new metrics line,
    # so nothing downstream is stale and a second repro does nothing
    metrics_before = (wf.root / "work/tiny/train/metrics.jsonl").read_bytes()
    forced = wf.dvc("repro", "-f", "-s", "train-tiny")
    assert wf.dvc_ran(forced.stdout) == {"train-tiny"}, forced.stdout
    assert "resumed from step 20" in (wf.root / "work/tiny/logs/train.log").read_text()
    assert (wf.root / "work/tiny/train/metrics.jsonl").read_bytes() == metrics_before
    third = wf.dvc("repro")
    assert wf.dvc_ran(third.stdout) == set() and "Data and pipelines are up to date" in third.stdout
    assert "up to date" in wf.dvc("status").stdout

    metrics = wf.dvc("metrics", "show", "--json").stdout
    assert "eval/exact_match" in metrics
    plots = wf.dvc("plots", "show", "--json").stdout
    assert "tiny-train-loss" in plots

    # an eval-only change reruns compose (cheap) and only the stages whose slice changed
    _set_override(wf, "eval.exact_match.max_examples", "8")
    res = wf.dvc("repro")
    assert wf.dvc_ran(res.stdout) == {"compose-tiny", "eval-tiny", "publish-tiny"}, res.stdout

    # push to a local remote; a fresh clone pulls and is up to date with nothing retrained
    remote = tmp_path / "remote"
    wf.dvc("remote", "add", "-d", "local", str(remote))
    wf.dvc("push")
    wf.run("git", "add", "-A")
    wf.run("git", "commit", "-qm", "tiny run")
    clone = tmp_path / "clone"
    wf.run("git", "clone", "-q", str(wf.root), str(clone))
    wf.run(tool("dvc"), "pull", cwd=clone)
    status = wf.run(tool("dvc"), "status", cwd=clone)
    assert "up to date" in status.stdout, status.stdout
    res = wf.run(tool("dvc"), "repro", cwd=clone)
    assert wf.dvc_ran(res.stdout) == set(), res.stdout
    assert (clone / "work/tiny/train/model/model.safetensors").is_file()
    assert (clone / "results/tiny/eval.json").is_file()
