"""DAPO's dynamic sampling: fill a round with prompt groups whose completions' rewards differ.

A group whose completions all got the same reward has zero group-relative advantage: it gives the
policy loss no gradient, yet its tokens count in the loss's normaliser (and in the KL term). Late
in training most groups are like that (all right), and the few prompts the policy still gets
wrong receive a small share of each update. Dynamic sampling (Yu et al., 2025, "DAPO", §3.2)
keeps only the informative groups and draws further prompts until the round has as many as it
asked for::

    rollout, stats = fill_informative(first, draw, groups_wanted=32, max_draws=4)

``draw(i)`` samples and scores the round's ``i``-th further prompt batch. The round keeps the
first ``groups_wanted`` informative groups in draw order; when no draw has any, it returns the
first draw unchanged (its update is then the KL term alone).
"""

from __future__ import annotations

from collections.abc import Callable

from toolbox.rl.rollouts import TextRollout


def fill_informative(
    first: TextRollout,
    draw: Callable[[int], TextRollout],
    groups_wanted: int,
    max_draws: int,
    pad_token_id: int = 0,
) -> tuple[TextRollout, dict[str, float]]:
    """The informative groups of ``first`` and of further draws (``draw(1)``, ``draw(2)``, ...),
    at most ``groups_wanted`` of them and at most ``max_draws`` draws in all; with the metrics
    ``sampling/draws`` and ``sampling/informative_groups``."""
    n = first.num_generations
    kept, groups, draws, rollout = [], 0, 1, first
    while True:
        rows = rollout.informative_rows()
        if rows:
            kept.append(rollout.select(rows))
            groups += len(rows) // n
        if groups >= groups_wanted or draws >= max_draws:
            break
        rollout = draw(draws)
        draws += 1
    stats = {"sampling/draws": float(draws), "sampling/informative_groups": float(groups)}
    if not kept:
        return first, stats
    merged = TextRollout.concat(kept, pad_token_id)
    return merged.select(range(min(groups, groups_wanted) * n)), stats
