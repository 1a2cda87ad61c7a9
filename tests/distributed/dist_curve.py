"""Train a config and record the global loss of every step (all ranks), then the final full weights.

Run under torchrun (``python -m torch.distributed.run --nproc-per-node 2 dist_curve.py OUT overrides...``)
or import ``run_curve`` in one process. The per-step loss is summed over every rank's micro-batches
and divided by the global item count, so a 2-process run and a 1-process run with the same global
batch report the same number when they compute the same thing.
"""

from __future__ import annotations

import sys

import torch


class RecordingObjective:
    """Wraps an objective and sums its loss and item counts between two STEP_END events."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.loss_sum = 0.0
        self.items = 0

    def __call__(self, model, batch):
        out = self.inner(model, batch)
        self.loss_sum += float(out.loss_sum.detach())
        self.items += out.num_items
        return out

    def __getattr__(self, name):
        return getattr(self.inner, name)


def run_curve(overrides: list[str]) -> dict:
    from toolbox.core.events import Event
    from toolbox.experiment import ExperimentBuilder, load_config

    parts = ExperimentBuilder.from_config(load_config(overrides)).build()
    trainer, strategy = parts.trainer, parts.strategy
    recorder = RecordingObjective(trainer.objective)
    trainer.objective = recorder
    losses: list[float] = []

    def on_step_end(_data) -> None:
        loss = strategy.all_reduce_sum(recorder.loss_sum)
        items = strategy.all_reduce_sum(float(recorder.items))
        losses.append(loss / items)
        recorder.loss_sum, recorder.items = 0.0, 0

    trainer.bus.subscribe(Event.STEP_END, on_step_end, priority=-100)
    try:
        metrics = trainer.fit()
        weights = {
            k: v.detach().cpu().clone() for k, v in strategy.full_model_state_dict(trainer.model).items()
        }
    finally:
        strategy.teardown()
    return {
        "losses": losses,
        "weights": weights,
        "metrics": metrics,
        "world_size": parts.context.world_size,
        "is_main": parts.context.is_main,
    }


if __name__ == "__main__":
    result = run_curve(sys.argv[2:])
    if result["is_main"]:
        torch.save(result, sys.argv[1])
