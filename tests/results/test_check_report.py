"""Declared expectations (toolbox check), the generated result tables (toolbox report), and the
before/after metrics of a run that starts from another run's model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from toolbox.cli import main
from toolbox.core.errors import ConfigError
from toolbox.results.expect import check, describe, markdown_table, validate
from toolbox.results.report import replace_block


def test_rules_pass_and_fail_at_their_bounds() -> None:
    metrics = {"eval/exact_match": 0.95, "eval/loss": 0.2, "eval/accuracy": 0.91}
    rows = check(
        metrics,
        {
            "eval/exact_match": {"min": 0.95},
            "eval/loss": {"max": 0.1},
            "eval/accuracy": {"value": 0.93, "tolerance": 0.02},
            "gain/eval/exact_match": {"min": 0.1},
        },
    )
    assert [(r.metric, r.passed, r.got) for r in rows] == [
        ("eval/exact_match", True, 0.95),
        ("eval/loss", False, 0.2),
        ("eval/accuracy", True, 0.91),
        ("gain/eval/exact_match", False, None),
    ]
    assert [r.expected for r in rows] == [">= 0.95", "<= 0.1", "0.93 ± 0.02", ">= 0.1"]
    assert describe({"min": 0.5, "max": 0.9}) == "0.5 .. 0.9"
    assert check({"eval/loss": float("nan")}, {"eval/loss": {"max": 1}})[0].passed is False


@pytest.mark.parametrize(
    ("expect", "message"),
    [
        ({"eval/exact_match": {"minimum": 0.9}}, "unknown rule ['minimum']"),
        ({"eval/exact_match": {"value": 0.9}}, "'value' and 'tolerance' go together"),
        ({"eval/exact_match": {"min": "high"}}, "eval/exact_match.min: must be a finite number"),
        ({"eval/exact_match": 0.9}, "must be a rule such as {min: 0.95}"),
        ([0.9], "must map metric names to rules"),
    ],
)
def test_bad_expectations_name_the_key(expect, message: str) -> None:
    with pytest.raises(ConfigError, match=None) as e:
        validate(expect, "runs.demo.expect")
    assert message in str(e.value) and "runs.demo.expect" in str(e.value)


def test_check_fails_with_a_table_of_expected_vs_got(tmp_path: Path, capsys) -> None:
    (tmp_path / "eval.json").write_text(json.dumps({"eval/exact_match": 0.435, "eval/loss": 0.35}))
    expect = json.dumps({"eval/exact_match": {"min": 0.95}, "eval/loss": {"max": 0.5}})
    out = tmp_path / "check.json"
    code = main(
        [
            "check",
            "--eval",
            str(tmp_path / "eval.json"),
            "--expect",
            expect,
            "--run",
            "demo",
            "--out",
            str(out),
        ]
    )
    err = capsys.readouterr().err
    assert code == 1 and not out.exists()
    assert "run demo does not reach what it declares (eval/exact_match)" in err
    assert "| demo | eval/exact_match | >= 0.95 | 0.435 | **NO** |" in err
    assert "| demo | eval/loss | <= 0.5 | 0.35 | yes |" in err

    (tmp_path / "eval.json").write_text(json.dumps({"eval/exact_match": 1.0, "eval/loss": 0.01}))
    assert (
        main(
            [
                "check",
                "--eval",
                str(tmp_path / "eval.json"),
                "--expect",
                expect,
                "--run",
                "demo",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    record = json.loads(out.read_text())
    assert record["passed"] is True and [r["got"] for r in record["rows"]] == [1.0, 0.01]


def test_check_names_a_missing_eval_file(tmp_path: Path, capsys) -> None:
    assert main(["check", "--eval", str(tmp_path / "none.json"), "--expect", "{}"]) == 2
    assert "does not exist; run the eval stage first" in capsys.readouterr().err


def test_check_reads_a_second_metrics_file_with_nested_keys(tmp_path: Path, capsys) -> None:
    """An agent run's check reads eval.json and agent_eval.json (nested: after/..., gain/...)."""
    (tmp_path / "eval.json").write_text(json.dumps({"eval/loss": 0.5}))
    agent = {"after": {"answer_accuracy": 0.6}, "gain": {"answer_accuracy": 0.25}, "model": "m"}
    (tmp_path / "agent_eval.json").write_text(json.dumps(agent))
    args = ["check", "--eval", str(tmp_path / "eval.json"), "--eval", str(tmp_path / "agent_eval.json")]
    expect = {
        "eval/loss": {"max": 1},
        "gain/answer_accuracy": {"min": 0.2},
        "after/answer_accuracy": {"min": 0.5},
    }
    out = tmp_path / "check.json"
    assert main([*args, "--expect", json.dumps(expect), "--out", str(out)]) == 0
    assert [r["got"] for r in json.loads(out.read_text())["rows"]] == [0.5, 0.25, 0.6]
    assert main([*args, "--expect", json.dumps({"gain/answer_accuracy": {"min": 0.3}})]) == 1
    assert "gain/answer_accuracy" in capsys.readouterr().err
    (tmp_path / "agent_eval.json").write_text(json.dumps({"eval/loss": 0.1}))
    assert main([*args, "--expect", "{}"]) == 2
    assert "metric 'eval/loss' is in two of" in capsys.readouterr().err


def test_markdown_table_rows() -> None:
    rows = check({"eval/exact_match": 1.0}, {"eval/exact_match": {"min": 0.95}})
    assert (
        markdown_table(rows)
        == "| metric | expected | got | ok |\n|---|---|---|---|\n| eval/exact_match | >= 0.95 | 1 | yes |\n"
    )


def _matrix(folder: Path) -> None:
    expect = {"eval/exact_match": {"min": 0.95}}
    for seed, forward, value in [(0, "lean", 1.0), (1, "lean", 0.97), (0, "exact", 0.9)]:
        run = folder / f"s{seed}-{forward}"
        run.mkdir(parents=True)
        (run / "eval.json").write_text(json.dumps({"eval/exact_match": value, "eval/loss": 1 - value}))
        (run / "run.json").write_text(
            json.dumps(
                {
                    "name": "demo",
                    "seed": seed,
                    "forward": forward,
                    "threads": 1,
                    "minutes": 2.5,
                    "expect": expect,
                    "command": "python examples/sft_arith/matrix.py",
                }
            )
        )


def test_report_of_a_matrix_states_the_spread_and_fills_a_readme_block(tmp_path: Path) -> None:
    _matrix(tmp_path / "m")
    readme = tmp_path / "README.md"
    readme.write_text("# x\n\n<!-- report:demo -->\nold numbers\n<!-- /report:demo -->\n\nafter\n")
    html = tmp_path / "r.html"
    assert (
        main(
            [
                "report",
                "--matrix",
                str(tmp_path / "m"),
                "--into",
                str(readme),
                "--block",
                "demo",
                "--html",
                str(html),
            ]
        )
        == 0
    )
    text = readme.read_text()
    assert "old numbers" not in text and text.endswith("<!-- /report:demo -->\n\nafter\n")
    assert "| eval/exact_match | 0.9 | 0.97 | 1 | >= 0.95 |" in text
    assert "2 of 3 runs meet the expectation. Produced by `python examples/sft_arith/matrix.py`." in text
    assert "| 0 | exact | 1 | 2.5 | 0.9 | 0.1 | **NO** |" in text
    page = html.read_text()
    assert "<script" not in page and "<td><b>NO</b></td>" in page and "http" not in page


def test_report_of_a_matrix_shows_only_the_metrics_asked_for(tmp_path: Path) -> None:
    _matrix(tmp_path / "m")
    md = tmp_path / "r.md"
    assert (
        main(["report", "--matrix", str(tmp_path / "m"), "--metrics", "eval/exact_match", "--md", str(md)])
        == 0
    )
    text = md.read_text()
    assert "| eval/exact_match | 0.9 | 0.97 | 1 | >= 0.95 |" in text and "eval/loss" not in text
    assert "| 0 | exact | 1 | 2.5 | 0.9 | **NO** |" in text


def test_report_of_a_matrix_names_every_command_that_produced_it(tmp_path: Path) -> None:
    """A matrix run in two parts (``--threads 1``, then ``--threads 2``) names both commands."""
    _matrix(tmp_path / "m")
    point = tmp_path / "m" / "s0-exact" / "run.json"
    point.write_text(json.dumps({**json.loads(point.read_text()), "command": "toolbox matrix --threads 2"}))
    md = tmp_path / "r.md"
    assert main(["report", "--matrix", str(tmp_path / "m"), "--md", str(md)]) == 0
    assert (
        "Produced by `python examples/sft_arith/matrix.py` and `toolbox matrix --threads 2`."
        in md.read_text()
    )


def test_report_of_a_matrix_checks_the_expectation_given(tmp_path: Path, capsys) -> None:
    """--expect replaces the points' own expectation (>= 0.95 fails the 0.9 point; >= 0.85 does not)."""
    _matrix(tmp_path / "m")
    md = tmp_path / "r.md"
    args = ["report", "--matrix", str(tmp_path / "m"), "--metrics", "eval/exact_match", "--md", str(md)]
    assert main([*args, "--expect", '{"eval/exact_match": {"min": 0.85}}']) == 0
    text = md.read_text()
    assert "| eval/exact_match | 0.9 | 0.97 | 1 | >= 0.85 |" in text and "**NO**" not in text
    assert main([*args, "--expect", "{min: 0.85}"]) == 2
    assert "--expect: not JSON" in capsys.readouterr().err
    assert main([*args, "--expect", "{}", "--expect-run", "demo"]) == 2
    assert "give one expectation, not both" in capsys.readouterr().err


def test_report_block_must_exist() -> None:
    with pytest.raises(ConfigError, match="has no block '<!-- report:demo -->'"):
        replace_block("no block here", "demo", "x")


def test_report_of_the_runs_shows_before_after_and_expectations(tmp_path: Path) -> None:
    config = tmp_path / "config" / "config.yaml"
    config.parent.mkdir()
    config.write_text(
        yaml.safe_dump(
            {
                "runs": {
                    "sft": {"experiment": "sft_arith"},
                    "rl": {
                        "experiment": "grpo_arith",
                        "init_from": "sft",
                        "expect": {"eval/exact_match": {"min": 0.95}, "gain/eval/exact_match": {"min": 0.1}},
                    },
                }
            }
        )
    )
    (tmp_path / "results" / "rl").mkdir(parents=True)
    (tmp_path / "results" / "rl" / "eval.json").write_text(
        json.dumps({"eval/exact_match": 0.97, "before/eval/exact_match": 0.6, "gain/eval/exact_match": 0.37})
    )
    md = tmp_path / "report.md"
    assert main(["report", "--config", str(config), "--root", str(tmp_path), "--md", str(md)]) == 0
    text = md.read_text()
    assert "Not run yet (1): sft." in text and "| sft |" not in text
    assert "| rl | eval/exact_match | 0.6 | 0.97 | >= 0.95 | yes | results/rl/eval.json |" in text
    assert "| rl | gain/eval/exact_match | – | 0.37 | >= 0.1 | yes | results/rl/eval.json |" in text


def test_dvc_template_inlines_vega_and_loads_nothing_from_a_cdn() -> None:
    from toolbox.results.dvc_plots import offline_template

    page = offline_template()
    assert "<script src" not in page and "cdn.jsdelivr" not in page
    assert page.count("{plot_divs}") == 1 and "{scripts}" not in page
    assert 'version$1 = "5.21.0"' in page and 'version$1 = "6.20.8"' in page  # vega, vega-embed


def test_check_writes_an_html_table_for_the_snakemake_report(tmp_path: Path) -> None:
    (tmp_path / "eval.json").write_text(json.dumps({"eval/exact_match": 0.9, "before/eval/exact_match": 0.6}))
    page = tmp_path / "check.html"
    expect = json.dumps({"eval/exact_match": {"min": 0.8}})
    assert (
        main(
            [
                "check",
                "--eval",
                str(tmp_path / "eval.json"),
                "--expect",
                expect,
                "--run",
                "rl",
                "--html",
                str(page),
            ]
        )
        == 0
    )
    text = page.read_text()
    assert (
        "<td>rl</td><td>eval/exact_match</td><td>0.6</td><td>0.9</td><td>&gt;= 0.8</td><td>yes</td>" in text
    )
    assert "<script" not in text


def test_report_of_a_run_with_an_agent_reads_its_agent_eval_json(tmp_path: Path) -> None:
    # the check stage reads eval.json and agent_eval.json; the report must see the same metrics
    config = tmp_path / "config" / "config.yaml"
    config.parent.mkdir()
    expect = {"gain/tool_call_success": {"min": 0.1}, "gain/answer_accuracy": {"min": 0.05}}
    runs = {"agent_sft": {"experiment": "agent_sft", "agent": {"script": "agent.py"}, "expect": expect}}
    config.write_text(yaml.safe_dump({"runs": runs}))
    results = tmp_path / "results" / "agent_sft"
    results.mkdir(parents=True)
    (results / "eval.json").write_text(json.dumps({"eval/loss": 0.0078}))
    (results / "agent_eval.json").write_text(
        json.dumps(
            {
                "after": {"tool_call_success": 0.855},
                "gain": {"tool_call_success": 0.15, "answer_accuracy": 0.02},
            }
        )
    )
    md = tmp_path / "report.md"
    assert main(["report", "--config", str(config), "--root", str(tmp_path), "--md", str(md)]) == 0
    text = md.read_text()
    source = "results/agent_sft/eval.json + agent_eval.json"
    assert f"| agent_sft | gain/tool_call_success | – | 0.15 | >= 0.1 | yes | {source} |" in text
    assert f"| agent_sft | gain/answer_accuracy | – | 0.02 | >= 0.05 | **NO** | {source} |" in text


def test_report_of_run_folders_includes_runs_made_with_toolbox_train(tmp_path: Path, capsys) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"runs": {"a": {"expect": {"eval/exact_match": {"min": 0.95}}}}}))
    for name, value in (("a", 0.97), ("mine", 0.5)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "eval.json").write_text(json.dumps({"exact_match": value}))
    assert main(["report", str(tmp_path / "a"), str(tmp_path / "mine"), "--config", str(config)]) == 0
    text = capsys.readouterr().out
    assert f"| a | eval/exact_match | – | 0.97 | >= 0.95 | yes | {tmp_path / 'a' / 'eval.json'} |" in text
    assert f"| mine | eval/exact_match | – | 0.5 | – | – | {tmp_path / 'mine' / 'eval.json'} |" in text
    assert main(["report", str(tmp_path / "nothing")]) == 2
    assert "no eval.json there" in capsys.readouterr().err
