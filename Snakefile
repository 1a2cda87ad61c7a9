# The reproducible workflow: one rule per lifecycle stage, each one `toolbox` command.
#
#   snakemake -c2 results/demo/                 build one run (config/config.yaml names the runs)
#   snakemake -c2                               build every run
#   snakemake -n results/demo/                  dry run: what would run, and why
#   snakemake --profile slurm results/demo/     every rule a SLURM job (profile: slurm/config.yaml)
#
# The stages are defined once in workflow/stages.py; the rule files workflow/rules/*.smk (but
# common.smk, table.smk and compare.smk) and dvc.yaml are generated from them: python workflow/generate.py.
# See docs/workflow.md.


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/compose.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/eval.smk"
include: "workflow/rules/check.smk"
include: "workflow/rules/plot.smk"
include: "workflow/rules/traces.smk"
include: "workflow/rules/serve_bench.smk"
include: "workflow/rules/publish.smk"
include: "workflow/rules/table.smk"
include: "workflow/rules/compare.smk"


rule all:
    default_target: True
    input:
        expand("results/{run}", run=sorted(RUNS)),
        [
            f"work/{r}/bench.json"
            for r in sorted(RUNS)
            if runs.runs_stage(RUNS[r], stages.BY_NAME["serve_bench"])
        ],
        expand("results/tables/{table}.md", table=sorted(TABLES)),
        runs.COMPARE_PLOTS,  # every run's curves overlaid: the report's comparison page
