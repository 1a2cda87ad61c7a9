# GENERATED from workflow/stages.py by workflow/generate.py -- do not edit by hand.
# Regenerate after changing a stage:  python workflow/generate.py

# Eval: eval.json of the trained model, from the run's eval slice (an eval-only change reruns only
# this rule and publish).


rule eval:
    input:
        config=after_compose("work/{run}/config/eval.yaml"),
        data="work/{run}/data",
        model="work/{run}/train/model",
        extra=run_inputs("init_model"),
        upstream=upstream_composes(),
    output:
        eval="work/{run}/eval.json",
    log:
        "work/{run}/logs/eval.log",
    benchmark:
        "work/{run}/benchmarks/eval.tsv"
    conda:
        "../envs/toolbox.yaml"
    params:
        before=run_value("before"),
    shell:
        "( toolbox eval --config work/{wildcards.run}/config/eval.yaml --data {input.data} --model {input.model}{params.before} --out {output.eval} ) 3>&2 > {log} 2>&1 && python workflow/scripts/dvc_record.py eval-{wildcards.run}"
