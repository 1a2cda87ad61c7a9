"""``graph``: the validation and test metrics of a graph objective (accuracy; ROC AUC for links)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from toolbox.core.errors import ConfigError
from toolbox.core.registries import EVALUATORS

if TYPE_CHECKING:
    from toolbox.experiment.build import Components


@EVALUATORS.register("graph_metrics")
class GraphMetrics:
    """Scores the held-out graphs with the run's graph objective: per split, ``eval/<split>_loss``
    (mean over the split's items), ``eval/<split>_accuracy`` and, for link prediction (one score
    per item), ``eval/<split>_roc_auc`` (``sklearn.metrics.roc_auc_score``).

    One forward pass per batch serves every split (node masks of one graph, or graphs of a set).

    Args:
        splits: the splits to report.
        batch_size: graphs per forward pass (a one-graph data set is one pass).
    """

    def __init__(self, splits: list[str] = ["val", "test"], batch_size: int = 64) -> None:  # noqa: B006
        self.splits = tuple(splits)
        self.batch_size = batch_size

    def __call__(self, parts: Components) -> dict[str, float]:
        from toolbox.objectives.base import GraphObjective

        objective = parts.objective
        if not isinstance(objective, GraphObjective):
            raise ConfigError(
                "eval.graph: the objective is not a graph objective (node_classification, "
                "link_prediction, graph_classification); use eval=lm for this run."
            )
        device = parts.strategy.device
        scores: dict[str, list[torch.Tensor]] = {s: [] for s in self.splits}
        targets: dict[str, list[torch.Tensor]] = {s: [] for s in self.splits}
        examples = parts.eval_data
        for start in range(0, len(examples), self.batch_size):
            batch = parts.collator(list(examples[start : start + self.batch_size]))
            batch = {k: v.to(device) if torch.is_tensor(v) else v for k, v in batch.items()}
            with parts.precision.autocast():
                out = objective.predict(parts.model, batch, self.splits)
            for split, (s, t) in out.items():
                scores[split].append(s.float())
                targets[split].append(t)
        metrics: dict[str, float] = {}
        for split in self.splits:
            s, t = torch.cat(scores[split]), torch.cat(targets[split])
            n = max(int(t.shape[0]), 1)
            metrics[f"eval/{split}_loss"] = float(objective.loss_sum(s, t)) / n
            metrics[f"eval/{split}_accuracy"] = objective.num_correct(s, t) / n
            if s.dim() == 1:  # one score per item: a binary (link) task
                from sklearn.metrics import roc_auc_score

                metrics[f"eval/{split}_roc_auc"] = float(roc_auc_score(t.cpu().numpy(), s.cpu().numpy()))
        return metrics
