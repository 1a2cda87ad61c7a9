# GENERATED from workflow/stages.py by workflow/generate.py -- do not edit by hand.
# Regenerate after changing a stage:  python workflow/generate.py

# Train: the run's model. Its resources come from the run's entry in config/config.yaml (resources:
# cpus, mem_mb, runtime, gpu, gpu_model, nodes, slurm_partition); --profile slurm turns them into
# the SLURM job's request. An interrupted job resumes from work/<run>/train/checkpoints
# (resume_from=auto); only model/, written last, tells Snakemake that training finished.
# metrics.jsonl is not declared to Snakemake (a failed job's outputs are deleted, and a resumed job
# continues the same file): later rules reach it through model/. Distributed runs need nothing here:
# `toolbox train` starts through the run's configured launcher (e.g. strategy=ddp launcher=torchrun
# launcher.nproc=2).


rule train:
    input:
        config=after_compose("work/{run}/config/train.yaml"),
        data="work/{run}/data",
        extra=run_inputs("init_model"),
        upstream=upstream_composes(),
    output:
        model=directory("work/{run}/train/model"),
    log:
        "work/{run}/logs/train.log",
    benchmark:
        "work/{run}/benchmarks/train.tsv"
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
        tasks=train_resource("nodes"),
    shell:
        "( mkdir -p work/{wildcards.run}/train && python workflow/scripts/resume_key.py work/{wildcards.run}/config/train.yaml {input.data} > work/{wildcards.run}/train/checkpoints.config.yaml.new && {{ cmp -s work/{wildcards.run}/train/checkpoints.config.yaml.new work/{wildcards.run}/train/checkpoints.config.yaml || rm -rf work/{wildcards.run}/train/checkpoints; }} && mv work/{wildcards.run}/train/checkpoints.config.yaml.new work/{wildcards.run}/train/checkpoints.config.yaml && TOOLBOX_PROGRESS_FD=3 toolbox train --config work/{wildcards.run}/config/train.yaml --data {input.data} --out work/{wildcards.run}/train resume_from=auto ) 3>&2 > {log} 2>&1 && python workflow/scripts/dvc_record.py train-{wildcards.run}"
