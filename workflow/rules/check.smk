# GENERATED from workflow/stages.py by workflow/generate.py -- do not edit by hand.
# Regenerate after changing a stage:  python workflow/generate.py

# Check: the run's declared expectations (expect: in config/config.yaml) against its eval.json; a
# failing job prints the table of expected vs got, marks the published results/<run>/check.json as
# failed, and publish waits for it.


rule check:
    input:
        eval=after_compose("work/{run}/eval.json"),
        extra=run_inputs("agent_eval"),
        upstream=upstream_composes(),
    output:
        check="work/{run}/check.json",
        table=report(
            "work/{run}/check.html",
            caption="../report/evaluation.rst",
            category="evaluation",
            subcategory="{run}",
            labels={"run": "{run}", "stage": "check"},
        ),
    log:
        "work/{run}/logs/check.log",
    benchmark:
        "work/{run}/benchmarks/check.tsv"
    conda:
        "../envs/toolbox.yaml"
    params:
        check_extra=run_value("check_extra"),
        expect=run_value("expect"),
    shell:
        "( toolbox check --eval work/{wildcards.run}/eval.json{params.check_extra} --expect {params.expect} --run {wildcards.run} --out {output.check} --html {output.table} --published results/{wildcards.run} ) 3>&2 > {log} 2>&1 || {{ cat {log} >&2; exit 1; }} && python workflow/scripts/dvc_record.py check-{wildcards.run}"
