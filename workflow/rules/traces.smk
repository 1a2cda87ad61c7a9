# GENERATED from workflow/stages.py by workflow/generate.py -- do not edit by hand.
# Regenerate after changing a stage:  python workflow/generate.py

# Agent run -> traces -> dataset, for runs with `agent:` in config/config.yaml. The agent rule runs
# the run's trained model as an agent (its script), recording every model and tool call into
# work/<run>/traces.sqlite and its held-out scores into agent_eval.json.


rule agent:
    input:
        model=after_compose("work/{run}/train/model"),
        extra=run_inputs("agent_script", "init_model"),
        upstream=upstream_composes(),
    output:
        traces="work/{run}/traces.sqlite",
        eval="work/{run}/agent_eval.json",
    log:
        "work/{run}/logs/agent.log",
    benchmark:
        "work/{run}/benchmarks/agent.tsv"
    conda:
        "../envs/toolbox.yaml"
    params:
        agent_script=run_value("agent_script"),
        agent_before=run_value("agent_before"),
        agent_args=run_value("agent_args"),
    shell:
        "( python {params.agent_script} --model work/{wildcards.run}/train/model --traces {output.traces} --eval {output.eval}{params.agent_before} {params.agent_args} ) 3>&2 > {log} 2>&1 && python workflow/scripts/dvc_record.py agent-{wildcards.run}"


# The traces rule turns the traces into a datasets folder (`toolbox traces to-dataset`), which a run
# with `data_from_traces: <run>` trains on.


rule traces:
    input:
        traces=after_compose("work/{run}/traces.sqlite"),
        upstream=upstream_composes(),
    output:
        data=directory("work/{run}/traces_data"),
    log:
        "work/{run}/logs/traces.log",
    benchmark:
        "work/{run}/benchmarks/traces.tsv"
    conda:
        "../envs/toolbox.yaml"
    params:
        to_dataset_args=run_value("to_dataset_args"),
    shell:
        "( toolbox traces to-dataset work/{wildcards.run}/traces.sqlite --out {output.data} --no-progress {params.to_dataset_args} ) 3>&2 > {log} 2>&1 && python workflow/scripts/dvc_record.py traces-{wildcards.run}"
