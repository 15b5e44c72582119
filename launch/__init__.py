"""Multi-node launch (torchrun, deepspeed, SLURM). Never imports torch."""
