"""huge_pages.py: the runner's weights and KV cache move into 2 MiB pages in place (same bytes, same
numbers); tensors it cannot move are left alone."""

from __future__ import annotations

import os
import sys

import pytest
import torch

from tests.serving.conftest import make_bench_model
from toolbox.serving.engines.torch import huge_pages
from toolbox.serving.engines.torch.runner import SlotRunner


def _kernel_collapses() -> bool:
    """Linux 6.1 or newer (MADV_COLLAPSE)."""
    if not sys.platform.startswith("linux"):
        return False
    major, minor = (int(x) for x in os.uname().release.split(".")[:2])
    return (major, minor) >= (6, 1)


def _huge_kib(tensor: torch.Tensor) -> int:
    """AnonHugePages (KiB) of the mapping that holds ``tensor``'s first element (/proc/self/smaps)."""
    address = tensor.data_ptr()
    inside = False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and all(c in "0123456789abcdef-" for c in head):
                start, end = (int(x, 16) for x in head.split("-"))
                inside = start <= address < end
            elif inside and head == "AnonHugePages:":
                return int(line.split()[1])
    return 0


@pytest.mark.skipif(not _kernel_collapses(), reason="MADV_COLLAPSE needs Linux >= 6.1")
def test_a_tensor_moves_into_huge_pages_with_its_contents():
    tensor = torch.randn(4 << 20)  # 16 MiB: at least 6 whole 2 MiB blocks inside it
    before = tensor.clone()
    moved = huge_pages.collapse([tensor])
    assert moved >= 6 * huge_pages.HUGE_PAGE
    assert _huge_kib(tensor) >= 6 * 2048
    assert torch.equal(tensor, before)


def test_what_cannot_move_is_skipped():
    assert huge_pages.collapse([None, torch.empty(0), torch.empty(3, device="meta")]) == 0


def test_the_runner_gives_the_same_logits_with_and_without_huge_pages(tokenizer):
    """The 512-wide benchmark model (oneDNN-packed weights): prefill and three decode steps, bit for bit."""
    model = make_bench_model(tokenizer)
    out = {}
    with torch.inference_mode():
        for huge in (False, True):
            runner = SlotRunner(model, 4, 32, linear="auto", huge_pages=huge)
            logits = [runner.prefill([0, 1, 2], [[5, 6, 7], [8, 9, 10, 11], [12]])]
            tokens = logits[0].argmax(-1)
            for step in range(3):
                positions = torch.tensor([3 + step, 4 + step, 1 + step])
                logits.append(runner.decode(tokens, positions, 4 + step, 1 + step))
                tokens = logits[-1].argmax(-1)
            out[huge] = torch.cat(logits)
    assert runner.huge_pages and runner.onednn
    assert torch.equal(out[False], out[True])
