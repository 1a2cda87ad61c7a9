"""set_determinism: deterministic kernels on, the NaN fill of uninitialised memory off."""

from __future__ import annotations

import torch
import torch.utils.deterministic

from toolbox.core.device import set_determinism


def test_deterministic_kernels_without_the_nan_fill():
    before = torch.are_deterministic_algorithms_enabled(), torch.utils.deterministic.fill_uninitialized_memory
    try:
        set_determinism(True)
        assert torch.are_deterministic_algorithms_enabled()
        assert torch.utils.deterministic.fill_uninitialized_memory is False
        # with the fill on, every torch.empty of floats would be all NaN
        assert not torch.isnan(torch.empty(4096, 64)).all()
        set_determinism(False)
        assert not torch.are_deterministic_algorithms_enabled()
        assert torch.utils.deterministic.fill_uninitialized_memory is False
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=True)
        torch.utils.deterministic.fill_uninitialized_memory = before[1]
