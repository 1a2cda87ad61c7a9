# Agent run -> traces -> dataset, for runs with `agent:` in config/config.yaml. The agent rule runs
# the run's trained model as an agent (its script), recording every model and tool call into
# work/<run>/traces.sqlite and its held-out scores into agent_eval.json; the traces rule turns the
# traces into a datasets folder (`toolbox traces to-dataset`), which a run with
# `data_from_traces: <run>` trains on.


rule agent:
    input:
        **stage_input("agent"),
    output:
        **stage_output("agent"),
    log:
        stage_log("agent"),
    benchmark:
        stage_benchmark("agent")
    conda:
        "../envs/toolbox.yaml"
    params:
        cmd=stage_cmd("agent"),
    shell:
        "( {params.cmd} ) > {log} 2>&1"


rule traces:
    input:
        **stage_input("traces"),
    output:
        **stage_output("traces"),
    log:
        stage_log("traces"),
    benchmark:
        stage_benchmark("traces")
    conda:
        "../envs/toolbox.yaml"
    params:
        cmd=stage_cmd("traces"),
    shell:
        "( {params.cmd} ) > {log} 2>&1"
