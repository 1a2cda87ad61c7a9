# Table: the mean ± std of one eval metric over each row's runs (seeds) beside its reference, for
# each table of config/config.yaml (results/tables/<table>.md and .json, by `toolbox table`;
# workflow/result_tables.py). Its inputs are the eval.json of the table's runs.
import result_tables  # noqa: E402


rule table:
    input:
        lambda wildcards: result_tables.table_deps(TABLES[wildcards.table], RUNS),
        # re-evaluated once the composes of its runs have run (common.smk: upstream_composes)
        composes=per_job(
            lambda wildcards: composes_pending(
                result_tables.table_upstream(TABLES[wildcards.table], RUNS)
            )
        ),
    output:
        md="results/tables/{table}.md",
        json="results/tables/{table}.json",
    log:
        "work/_tables/logs/{table}.log",
    conda:
        "../envs/toolbox.yaml"
    params:
        cmd=lambda wildcards: result_tables.table_command(
            wildcards.table, TABLES[wildcards.table], RUNS
        ),
    shell:
        "( {params.cmd} ) > {log} 2>&1"
