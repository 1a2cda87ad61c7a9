# Publish: results/<run>/ (a directory() target, so `snakemake results/<run>/` builds the run).
# Nothing else writes inside results/<run>/ (Snakemake's ChildIOException); large files are links.
# Stages added later (traces -> dataset, serve + bench) publish through this rule's inputs.


rule publish:
    input:
        **stage_input("publish"),
    output:
        **stage_output("publish"),
    log:
        stage_log("publish"),
    benchmark:
        stage_benchmark("publish")
    conda:
        "../envs/toolbox.yaml"
    params:
        cmd=stage_cmd("publish"),
        # the run's overrides: if compose failed after a change (Snakemake then deletes its
        # outputs and would forget the change), publish still sees it and asks for compose again
        run_overrides=lambda wildcards: " ".join(
            stages.overrides(wildcards.run, entry(wildcards.run))
        ),
    shell:
        "( {params.cmd} ) > {log} 2>&1"
