# Train: the run's model. Its resources come from the run's entry in config/config.yaml
# (resources: cpus, mem_mb, runtime, gpu, gpu_model, nodes, slurm_partition); --profile slurm turns
# them into the SLURM job's request. An interrupted job resumes from work/<run>/train/checkpoints
# (resume_from=auto); only model/, written last, tells Snakemake that training finished.
#
# SCALE-OUT SPOT: the run's strategy (ddp/fsdp) and launcher.nproc start through the launcher
# prefix that workflow/stages.py:launch_prefix() puts before `toolbox train` (empty today: one
# process). The resources below are already the ones the distributed issue needs (gpu, nodes).


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
        slurm_partition=train_resource("slurm_partition"),
    params:
        cmd=stage_cmd("train"),
    shell:
        "( {params.cmd} ) > {log} 2>&1"
