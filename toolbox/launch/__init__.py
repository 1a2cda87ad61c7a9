"""Launch commands: run an experiment locally, under torchrun, or as a SLURM job."""
