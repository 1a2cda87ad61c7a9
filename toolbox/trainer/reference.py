"""The frozen reference model of the preference and policy losses (DPO and kin, GRPO with beta > 0).

The ``ExperimentBuilder`` builds it right after the policy, before any training or resume, so a
resumed run gets the same reference as an uninterrupted one: a frozen copy of the policy as built
(seeded, or loaded from ``model.path``), or the causal LM saved at ``trainer.reference_path``. It
is built only when the trainer declares ``uses_reference`` and the objective ``needs_reference``.
"""

from __future__ import annotations

import copy
from typing import Any

import torch


def frozen_reference(policy: torch.nn.Module, path: str | None, device: Any) -> torch.nn.Module:
    """A copy of ``policy`` (or the model saved at ``path``) on ``device``, in eval mode, without grad."""
    if path:
        from transformers import AutoModelForCausalLM

        reference = AutoModelForCausalLM.from_pretrained(path)
    else:
        reference = copy.deepcopy(policy)
    reference.to(device).eval()
    reference.requires_grad_(False)
    return reference
