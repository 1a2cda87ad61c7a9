"""benchmarks/workflow_overhead.py: CPU time of a child beside its wall time, and alternating rounds
of sides that run no torch in the benchmark's process."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import workflow_overhead  # noqa: E402
from harness import Rounds  # noqa: E402


def test_a_child_is_timed_by_its_cpu_beside_its_wall_time(tmp_path: Path) -> None:
    busy = workflow_overhead.once(
        [
            sys.executable,
            "-c",
            "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass",
        ],
        tmp_path,
    )
    idle = workflow_overhead.once([sys.executable, "-c", "import time; time.sleep(0.5)"], tmp_path)
    assert busy["cpu_s"] >= 0.3 and busy["wall_s"] >= busy["cpu_s"] * 0.9
    assert idle["wall_s"] >= 0.5 and idle["cpu_s"] < 0.4  # sleeping costs no CPU


def test_rounds_without_torch_settings_alternate() -> None:
    calls: list[str] = []

    def side(name: str, seconds: float):
        def run() -> dict[str, float]:
            calls.append(name)
            return {"cpu_s": seconds}

        return run

    rounds = Rounds({"toolbox": side("toolbox", 1.3), "plain": side("plain", 1.0)}, None, 2).run()
    assert calls == ["toolbox", "plain", "plain", "toolbox"]
    assert rounds.values("toolbox", "cpu_s") == [1.3, 1.3]


def test_the_plain_peer_has_the_stated_shape(tmp_path: Path) -> None:
    root = workflow_overhead.plain_snakefile(tmp_path / "plain", runs=3, chain=2, singles=1)
    text = (root / "Snakefile").read_text()
    assert 'RUNS = [f"run{i:04d}" for i in range(3)]' in text
    assert text.count("\nrule ") == 1 + 2 + 1  # all, the chain of 2, one single
    assert 'input: expand("out/{run}/s1", run=RUNS), "single0"' in text


def job(rule: str, run: str | None, checkpoint: bool = False, **files: list[str]) -> dict:
    return {
        "rule": rule,
        "checkpoint": checkpoint,
        "wildcards": [f"run={run}"] if run else [],
        **{field: files.get(field, []) for field in ("input", "output", "log", "benchmark")},
    }


def test_the_plain_peer_mirrors_our_dry_runs_jobs(tmp_path: Path) -> None:
    """Same rules, jobs, inputs, outputs, logs and benchmarks; an input read through the checkpoint
    (<TBD>) is its target; source files exist; Snakemake plans the same shape on it."""
    jobs = [job("all", None, input=["work/a/out", "work/b/out"])]
    for run in ("a", "b"):
        jobs += [
            job("prep", run, True, output=[f"work/{run}/full.yaml", f"work/{run}/x.yaml"]),
            job(
                "step",
                run,
                input=["<TBD>", "src/tool.py"],
                output=[f"work/{run}/out"],
                log=[f"work/{run}/logs/step.log"],
                benchmark=[f"work/{run}/benchmarks/step.tsv"],
            ),
        ]
    root = workflow_overhead.same_shape_snakefile(tmp_path / "plain", jobs)
    text = (root / "Snakefile").read_text()
    assert text.index("rule all:") < text.index("rule prep:")  # the default target first
    assert "    input: 'work/{run}/full.yaml', 'src/tool.py'\n" in text
    assert "    log: 'work/{run}/logs/step.log'\n    benchmark: 'work/{run}/benchmarks/step.tsv'\n" in text
    assert (root / "src" / "tool.py").is_file()
    planned = workflow_overhead.dry_run_jobs(root)
    assert workflow_overhead.shape(planned) == workflow_overhead.shape(jobs) == {
        "jobs": 5, "rules": 3, "inputs": 6, "outputs": 6, "logs": 2, "benchmarks": 2
    }  # fmt: skip
    assert sorted(j["input"] for j in planned if j["rule"] == "step") == [
        ["work/a/full.yaml", "src/tool.py"],
        ["work/b/full.yaml", "src/tool.py"],
    ]
