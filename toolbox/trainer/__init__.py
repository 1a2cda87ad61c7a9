"""Trainers: the BaseTrainer skeleton, supervised/preference/grpo trainers, callbacks, checkpoints."""
