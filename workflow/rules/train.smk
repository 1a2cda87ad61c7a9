# Train: the run's model. Its resources come from the run's entry in config/config.yaml
# (resources: cpus, mem_mb, runtime, gpu, gpu_model, nodes, slurm_partition); --profile slurm turns
# them into the SLURM job's request. An interrupted job resumes from work/<run>/train/checkpoints
# (resume_from=auto); only model/, written last, tells Snakemake that training finished.
#
# Distributed runs need nothing here: `toolbox train` starts through the run's configured launcher
# (e.g. overrides strategy=ddp launcher=torchrun launcher.nproc=2 run torchrun inside this job).
# A run with init_from waits for the other run's model (workflow/stages.py: INIT_STAGES).


rule train:
    input:
        **stage_input("train"),
    output:
        **stage_output("train"),
    log:
        stage_log("train"),
    benchmark:
        stage_benchmark("train")
    conda:
        "../envs/toolbox.yaml"
    threads: lambda wildcards: entry(wildcards.run)["resources"]["cpus"]
    resources:
        cpus_per_task=train_resource("cpus"),
        mem_mb=train_resource("mem_mb"),
        runtime=train_resource("runtime"),
        gpu=train_resource("gpu"),
        gpu_model=train_resource("gpu_model"),
        nodes=train_resource("nodes"),
        tasks=train_resource("nodes"),  # one task per node: with --ntasks=1 SLURM shrinks --nodes to 1
        slurm_partition=train_resource("slurm_partition"),
    params:
        cmd=stage_cmd("train"),
    shell:
        "( {params.cmd} ) > {log} 2>&1"
