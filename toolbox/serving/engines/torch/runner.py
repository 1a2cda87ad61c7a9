"""The model side of the torch engine: a slot KV cache and a lean forward for causal LMs.

``SlotRunner`` keeps one preallocated key/value cache per layer, ``[slots, kv_heads, capacity,
head_dim]``; the sequence in slot ``s`` holds its first ``length[s]`` positions there, at their true
positions (no padding), so every sequence of a batch sees exactly what it would see alone. The
running sequences occupy slots ``0 .. B-1`` (the scheduler keeps them packed), so one decode step
reads the cache through views, with a ``[B, 1, 1, L]`` mask hiding each row's unused tail.

The forward reuses the model's own modules (embedding, norms, projections, rotary embedding, MLP,
head), so the numbers are the model's, and only orchestrates them around the cache, skipping
transformers' per-call machinery (mask building, cache objects, output classes). Supported: Llama,
Mistral, Qwen2 (q/k/v biases), Qwen3 (q/k norms), Gemma, Gemma2 and Gemma 3 text (without
attention-logit softcapping) and GPT-2; ``architectures.py`` maps each onto the one layer
computed here and names what it refuses.

On a CPU the projections run through oneDNN with weights reordered once into its blocked layout
(``linear="auto"``, for models at least ``ONEDNN_MIN_WIDTH`` wide), as vLLM's CPU backend does:
1.2-1.9x faster than ``F.linear`` (MKL) at the row counts of decoding (measured here, one thread,
512-wide layers), equal to it within float rounding (~1e-6 relative). The reordered copies are
rebuilt with the other cached weights when the parameters change. Each layer's tensors as the
forward uses them, and the two kernels, are in ``layer_weights.py``. Decode steps of many sequences
can run their attention through a kernel compiled at start-up instead of SDPA (``attention``;
``decode_attention.py``: 1.5-1.8x faster on the benchmark model's 40-sequence batches). On a CPU
the packed weights and the KV cache are moved into 2 MiB pages once built (``huge_pages.py``): the
same bytes, read faster (decode steps 1.16x / 1.14x / 1.05x faster at batch 1 / 8 / 32 on the
512-wide model, one thread, logits bit for bit).

Why this file is longer than ~400 lines: it is one class over one cache; its entry points (prefill,
prefill_at for chunked prefill, extend, decode, copy_slot, read_slot/write_slot for the prefix
cache) each build the attention over that cache
in their own shape and share its private state (capacity, slot ids, positions, cached weights).
"""

from __future__ import annotations

import logging
from typing import Any

import torch
import torch.nn.functional as F

import toolbox.serving.engines.torch.decode_attention as decode_attention
from toolbox.core.errors import ConfigError
from toolbox.serving.engines.torch.architectures import SUPPORTED, Layout
from toolbox.serving.engines.torch.huge_pages import collapse
from toolbox.serving.engines.torch.layer_weights import (
    ONEDNN_MIN_WIDTH,
    LayerWeights,
    apply_norm,
    keep_weight,
    norm_of,
    onednn_linear,
    onednn_pack,
    onednn_usable,
)

__all__ = ["SUPPORTED", "SlotRunner"]

log = logging.getLogger(__name__)


class SlotRunner:
    """Prefill and decode for a ``*ForCausalLM`` of a supported family over a slot KV cache.

    Args:
        model: the causal LM (its modules are used as they are; ``update`` its weights in place).
        max_slots: most sequences cached at once (the engine's max batch size).
        max_model_len: longest sequence (prompt + completion) a slot holds.
        initial_capacity: positions allocated per slot at first; doubled on demand up to
            ``max_model_len``, so short requests do not pay for the longest.
        linear: "auto" (oneDNN with reordered weights on a CPU where torch has it, for float32 and
            bfloat16 models at least ``ONEDNN_MIN_WIDTH`` wide; else ``F.linear``), "onednn" (that,
            or an error) or "torch" (``F.linear``).
        attention: decode attention: "sdpa" (``F.scaled_dot_product_attention`` always), "auto"
            (on a CPU, for models at least ``ONEDNN_MIN_WIDTH`` wide, the kernel of
            ``decode_attention.py``, compiled now, for the steps it serves (``usable``), if
            ``torch.compile`` works here; else SDPA) or "compiled" (that, or an error).
        huge_pages: on a CPU, move the projection weights (as first built: a trainer's updates
            rebuild them each step, and the move would cost each step) and the KV cache into
            2 MiB pages (``huge_pages.py``: the same numbers, read faster).
    """

    def __init__(
        self,
        model: Any,
        max_slots: int,
        max_model_len: int,
        initial_capacity: int = 128,
        linear: str = "auto",
        attention: str = "sdpa",
        huge_pages: bool = True,
    ) -> None:
        config = model.config
        self.layout = layout = Layout(model)  # or a ConfigError naming what is not supported
        window = getattr(config, "sliding_window", None)
        if window and getattr(config, "use_sliding_window", True) and max_model_len > window:
            raise ConfigError(
                f"engine.max_model_len={max_model_len} exceeds the model's sliding window ({window}), "
                f"which the torch engine does not implement; set engine.max_model_len<={window}."
            )
        self.model = model
        self.layers = layout.layers
        self.head_dim, self.num_heads = layout.head_dim, layout.num_heads
        self.num_kv_heads = layout.num_kv_heads
        self.scalings = layout.scalings
        self.gqa = self.num_kv_heads != self.num_heads
        self.max_slots = max_slots
        self.max_model_len = max_model_len
        param = next(model.parameters())
        self.device, self.dtype = param.device, param.dtype
        self.huge_pages = huge_pages and self.device.type == "cpu"
        onednn = onednn_usable(self.device, self.dtype)
        wide = int(config.hidden_size) >= ONEDNN_MIN_WIDTH
        if linear not in ("auto", "onednn", "torch"):
            raise ConfigError(f"engine.linear={linear!r}: use auto, onednn or torch")
        if linear == "onednn" and not onednn:
            raise ConfigError(
                f"engine.linear=onednn needs a CPU model in float32 or bfloat16 and a torch built with "
                f"oneDNN (this one: device {self.device}, {self.dtype}, oneDNN "
                f"{torch.backends.mkldnn.is_available()}); use engine.linear=auto"
            )
        self.onednn = onednn and (linear == "onednn" or (linear == "auto" and wide))
        self._linear = onednn_linear if self.onednn else F.linear
        self._fused_decode = self._decode_kernel(attention, wide)
        self._pack = onednn_pack if self.onednn else keep_weight
        self.capacity = 0
        self.k_cache: list[torch.Tensor] = []
        self.v_cache: list[torch.Tensor] = []
        self._positions = torch.arange(max_model_len, device=self.device)
        self._slot_ids = torch.arange(max_slots, device=self.device)
        self._head_ids = torch.arange(self.num_kv_heads, device=self.device)
        self._sources = list(model.parameters())
        self._version = -1
        self.generation = 0  # bumped whenever the cached weights are rebuilt (the parameters changed)
        self._cached: list[LayerWeights] | None = None
        self._final_norm: Any = None
        self._head: tuple = ()
        self._fast_norm = self.dtype == torch.float32
        self._act = layout.act
        self._tables: dict[Any, tuple[torch.Tensor, torch.Tensor]] | None = None
        if layout.rotary is not None and layout.rope_is_static():
            with torch.no_grad():
                probe = torch.zeros(1, dtype=self.dtype, device=self.device)
                every = self._positions.unsqueeze(0)
                self._tables = {
                    kind: tuple(t[0] for t in self._signed(*layout.rope(probe, every, kind)))
                    for kind in set(layout.rope_kinds)
                }
        self.ensure_capacity(min(initial_capacity, max_model_len))

    def _decode_kernel(self, attention: str, wide: bool) -> Any:
        """The compiled decode attention (``decode_attention.py``) if ``attention`` asks for it and it
        runs here (compiled now, for this model's heads), else None (SDPA)."""
        if attention not in ("auto", "compiled", "sdpa"):
            raise ConfigError(f"engine.attention={attention!r}: use auto, compiled or sdpa")
        if attention == "sdpa" or (attention == "auto" and not (self.device.type == "cpu" and wide)):
            return None
        why = decode_attention.warm_up(
            self.device, self.dtype, self.num_heads, self.num_kv_heads, self.head_dim
        )
        if why is None:
            with torch.inference_mode():
                self._scales = [torch.tensor(float(s), device=self.device) for s in self.scalings]
            return decode_attention.compiled()
        if attention == "compiled":
            raise ConfigError(f"engine.attention=compiled: torch.compile does not run here ({why})")
        log.warning("torch engine: decode attention stays on SDPA, torch.compile failed: %s", why)
        return None

    # cache ---------------------------------------------------------------------------------------
    def ensure_capacity(self, length: int) -> None:
        """Make every slot hold at least ``length`` positions (doubling, capped at max_model_len)."""
        if length <= self.capacity:
            return
        if length > self.max_model_len:
            raise ValueError(f"a sequence of {length} tokens exceeds max_model_len={self.max_model_len}")
        new = max(length, min(self.max_model_len, max(2 * self.capacity, 16)))
        shape = (self.max_slots, self.num_kv_heads, new, self.head_dim)
        k_new, v_new = [], []
        # inference tensors wherever the cache grows (the compiled decode kernel guards on the kind)
        with torch.inference_mode():
            for i in range(len(self.layers)):
                k = torch.zeros(shape, device=self.device, dtype=self.dtype)
                v = torch.zeros(shape, device=self.device, dtype=self.dtype)
                if self.capacity:
                    k[:, :, : self.capacity].copy_(self.k_cache[i])
                    v[:, :, : self.capacity].copy_(self.v_cache[i])
                k_new.append(k)
                v_new.append(v)
        if self.huge_pages:
            collapse(k_new + v_new)
        self.k_cache, self.v_cache, self.capacity = k_new, v_new, new

    def copy_slot(self, src: int, dst: int, length: int) -> None:
        """Copy the first ``length`` cached positions of slot ``src`` into slot ``dst``."""
        for k, v in zip(self.k_cache, self.v_cache, strict=True):
            k[dst, :, :length].copy_(k[src, :, :length])
            v[dst, :, :length].copy_(v[src, :, :length])

    def copy_slots(self, src: list[int], dst: list[int], length: int) -> None:
        """Copy the first ``length`` cached positions of each ``src[i]`` into ``dst[i]`` (one op per layer)."""
        self.ensure_capacity(length)
        src_idx = torch.tensor(src, dtype=torch.long, device=self.device)
        dst_idx = torch.tensor(dst, dtype=torch.long, device=self.device)
        for k, v in zip(self.k_cache, self.v_cache, strict=True):
            k[dst_idx, :, :length] = k[src_idx, :, :length]
            v[dst_idx, :, :length] = v[src_idx, :, :length]

    def read_slot(self, slot: int, length: int) -> torch.Tensor:
        """A copy of the first ``length`` cached positions of ``slot``: ``[layers, 2, kv_heads, length,
        head_dim]`` (a prefix cache entry)."""
        return torch.stack(
            [
                torch.stack((k[slot, :, :length], v[slot, :, :length]))
                for k, v in zip(self.k_cache, self.v_cache, strict=True)
            ]
        )

    def write_slot(self, slot: int, kv: torch.Tensor, length: int) -> None:
        """Put the first ``length`` positions of ``kv`` (from ``read_slot``) at the start of ``slot``."""
        self.ensure_capacity(length)
        for i, (k, v) in enumerate(zip(self.k_cache, self.v_cache, strict=True)):
            k[slot, :, :length].copy_(kv[i, 0, :, :length])
            v[slot, :, :length].copy_(kv[i, 1, :, :length])

    # weights -------------------------------------------------------------------------------------
    def _weights(self) -> list[LayerWeights]:
        """The tensors the forward uses, rebuilt when the model's parameters change.

        q/k/v become one matrix and gate/up another (two matmuls per layer instead of five); the
        rest are the model's own tensors. The parameters stay the source of truth: their version
        counters (bumped by most in-place writes: a foreach optimizer step, ``load_state_dict``,
        ``copy_``) tell when to rebuild. ``refresh()`` after replacing parameter objects or after a
        write that bumps no counter (torch's fused AdamW): ``InferenceEngine.weights_updated``.
        """
        version = sum(p._version for p in self._sources)
        if self._cached is None or version != self._version:
            self._cached, self._version = (
                [
                    LayerWeights.of(layer, self.layout.model_type, self._fast_norm, self._pack)
                    for layer in self.layers
                ],
                version,
            )
            self.generation += 1
            self._final_norm = norm_of(self.layout.final_norm, self._fast_norm)
            head = self.model.lm_head
            self._head = (
                self.layout.embed.weight,
                self._pack(head.weight),
                getattr(head, "bias", None),
            )
            if self.huge_pages and self.generation == 1:  # once: a trainer rebuilds them every
                collapse(  # update, and the copy into huge pages would cost each of its steps
                    [self._head[1]] + [t for w in self._cached for t in (w.w_qkv, w.w_o, w.w_gu, w.w_down)]
                )
        return self._cached

    def weights_generation(self) -> int:
        """The generation of the weights the next forward uses (keys and values cached under another
        were computed by other weights: ``prefix_cache.py``)."""
        self._weights()
        return self.generation

    def refresh(self) -> None:
        """Forget the cached weights (call after assigning new parameter objects to the model)."""
        self._sources = list(self.model.parameters())
        self._cached = None

    # forward -------------------------------------------------------------------------------------
    def _rope_tables(self, x: torch.Tensor, positions: torch.Tensor) -> dict[Any, Any] | None:
        """For each rope kind (one, or Gemma 3's per layer type) cos and a signed sin,
        ``[B, 1, T, D]``: ``rope(x) = x*cos + swap_halves(x)*sin_signed``; None for a model
        without rotary embeddings (GPT-2).

        ``swap_halves(x) * sin_signed`` equals transformers' ``rotate_half(x) * sin`` exactly. The
        tables of position-independent rope types are computed once by the model's own module.
        """
        if self.layout.rotary is None:
            return None
        if self._tables is not None:
            return {
                k: (c[positions].unsqueeze(1), s[positions].unsqueeze(1))
                for k, (c, s) in self._tables.items()
            }
        tables = {}
        for kind in set(self.layout.rope_kinds):
            cos, sin = self._signed(*self.layout.rope(x, positions, kind))
            tables[kind] = (cos.unsqueeze(1), sin.unsqueeze(1))
        return tables

    def _signed(self, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        half = self.head_dim // 2
        return cos, torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)

    def _layer(
        self, i: int, w: LayerWeights, x: torch.Tensor, rope: dict[Any, Any] | None, attend
    ) -> torch.Tensor:
        """One decoder layer; ``attend(i, q, k, v)`` stores k/v in the cache and returns attention."""
        b, t = x.shape[:2]
        nh, nkv, d = self.num_heads, self.num_kv_heads, self.head_dim
        linear = self._linear
        qkv = linear(apply_norm(w.norm1, x), w.w_qkv, w.b_qkv).view(b, t, nh + 2 * nkv, d)
        v = qkv[:, :, nh + nkv :].transpose(1, 2)
        if w.q_norm is not None:
            qk = torch.cat((w.q_norm(qkv[:, :, :nh]), w.k_norm(qkv[:, :, nh : nh + nkv])), 2)
        else:
            qk = qkv[:, :, : nh + nkv]
        qk = qk.transpose(1, 2)
        if rope is not None:
            cos, sin = rope[self.layout.rope_kinds[i]]
            # swap_halves as one op (a roll by half the head: the same values as reshape-flip-reshape,
            # 5 us against 16 at the decode batch of the benchmark model)
            qk = qk * cos + qk.roll(d // 2, -1) * sin
        o = attend(i, qk[:, :nh], qk[:, nh:], v)
        o = linear(o.transpose(1, 2).reshape(b, t, nh * d), w.w_o, w.b_o)
        if w.attn_out_norm is not None:
            o = apply_norm(w.attn_out_norm, o)
        x = x + o
        h = linear(apply_norm(w.norm2, x), w.w_gu, w.b_gu)
        if w.gated:
            gate, up = h.chunk(2, dim=-1)
            h = self._act(gate) * up
        else:
            h = self._act(h)
        h = linear(h, w.w_down, w.b_down)
        if w.mlp_out_norm is not None:
            h = apply_norm(w.mlp_out_norm, h)
        return x + h

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        _, head, bias = self._head
        return self.layout.logits(self._linear(apply_norm(self._final_norm, x), head, bias))

    def prefill(self, slots: list[int], prompts: list[list[int]]) -> torch.Tensor:
        """Run the prompts (right-padded into one batch) into ``slots``; the last position's logits."""
        lengths = [len(p) for p in prompts]
        t = max(lengths)
        self.ensure_capacity(t)
        ids = torch.zeros((len(prompts), t), dtype=torch.long, device=self.device)
        for i, p in enumerate(prompts):
            ids[i, : len(p)] = torch.tensor(p, dtype=torch.long)
        slot_idx = torch.tensor(slots, dtype=torch.long, device=self.device)
        weights = self._weights()

        def attend(i: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            self.k_cache[i][slot_idx, :, :t] = k
            self.v_cache[i][slot_idx, :, :t] = v
            return F.scaled_dot_product_attention(
                q, k, v, is_causal=True, scale=self.scalings[i], enable_gqa=self.gqa
            )

        x = self.layout.embed_tokens(ids, self._positions[:t].unsqueeze(0), self._head[0])
        rope = self._rope_tables(x, self._positions[:t].unsqueeze(0))
        for i, w in enumerate(weights):
            x = self._layer(i, w, x, rope, attend)
        last = torch.tensor([n - 1 for n in lengths], device=self.device)
        return self._logits(x[torch.arange(len(prompts), device=self.device), last])

    def prefill_at(self, slot: int, tokens: list[int], start: int) -> torch.Tensor:
        """Run ``tokens`` at positions ``start ..`` of the sequence in ``slot``, whose first ``start``
        positions are cached there (the next chunk of a long prompt, ``chunked_prefill.py``); the
        logits at the last token ``[1, V]``. Each query attends to the cached prefix and, causally,
        to the chunk: the numbers of prefilling the whole prompt at once, up to float rounding."""
        if start == 0:
            return self.prefill([slot], [tokens])
        t = len(tokens)
        end = start + t
        if end > self.max_model_len:
            raise ValueError(f"a sequence of {end} tokens exceeds max_model_len={self.max_model_len}")
        self.ensure_capacity(end)
        ids = torch.tensor([tokens], dtype=torch.long, device=self.device)
        positions = self._positions[start:end]
        mask = (self._positions[:end].view(1, end) <= positions.view(t, 1)).view(1, 1, t, end)
        weights = self._weights()

        def attend(i: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            kc, vc = self.k_cache[i], self.v_cache[i]
            kc[slot, :, start:end] = k[0]
            vc[slot, :, start:end] = v[0]
            return F.scaled_dot_product_attention(
                q,
                kc[slot : slot + 1, :, :end],
                vc[slot : slot + 1, :, :end],
                attn_mask=mask,
                scale=self.scalings[i],
                enable_gqa=self.gqa,
            )

        x = self.layout.embed_tokens(ids, positions.unsqueeze(0), self._head[0])
        rope = self._rope_tables(x, positions.unsqueeze(0))
        for i, w in enumerate(weights):
            x = self._layer(i, w, x, rope, attend)
        return self._logits(x[:, -1])

    def extend(
        self, chunks: list[list[int]], starts: list[int], slots: list[int] | None = None
    ) -> torch.Tensor:
        """Continue the sequences in slots ``0 .. B-1`` (or ``slots``): slot ``b`` holds ``starts[b]``
        cached positions (a prefix prefilled or copied there); ``chunks[b]`` is run at positions
        ``starts[b] ..`` after them. Returns the logits at each chunk's last token ``[B, V]``.

        Rows are right-padded to the longest chunk; a padded position writes its key/value past the
        row's last real one, where no real query looks. Each query attends to its row's cached
        prefix and, causally, to its own chunk: the same numbers as prefilling prefix + chunk at once.
        """
        b = len(chunks)
        lengths = [len(c) for c in chunks]
        t = max(lengths)
        end = max(s + t for s in starts)
        if end > self.max_model_len:
            raise ValueError(f"a sequence of {end} tokens exceeds max_model_len={self.max_model_len}")
        self.ensure_capacity(end)
        ids = torch.zeros((b, t), dtype=torch.long, device=self.device)
        for i, c in enumerate(chunks):
            ids[i, : len(c)] = torch.tensor(c, dtype=torch.long)
        start = torch.tensor(starts, dtype=torch.long, device=self.device)
        positions = start.unsqueeze(1) + self._positions[:t].unsqueeze(0)  # [B, t]
        # key j is visible to the query at position p of its row iff j <= p
        mask = (self._positions[:end].view(1, 1, end) <= positions.unsqueeze(2)).unsqueeze(
            1
        )  # [B, 1, t, end]
        contiguous = slots is None or slots == list(range(b))
        slot_idx = self._slot_ids[:b] if contiguous else torch.tensor(slots, device=self.device)
        rows = (
            (slot_idx.view(b, 1, 1) * self.num_kv_heads + self._head_ids.view(1, -1, 1)) * self.capacity
            + positions.unsqueeze(1)
        ).reshape(-1)
        weights = self._weights()

        def attend(i: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            kc, vc = self.k_cache[i], self.v_cache[i]
            kc.view(-1, self.head_dim).index_copy_(0, rows, k.reshape(-1, self.head_dim))
            vc.view(-1, self.head_dim).index_copy_(0, rows, v.reshape(-1, self.head_dim))
            keys = kc[:b, :, :end] if contiguous else kc[slot_idx, :, :end]
            values = vc[:b, :, :end] if contiguous else vc[slot_idx, :, :end]
            return F.scaled_dot_product_attention(
                q,
                keys,
                values,
                attn_mask=mask,
                scale=self.scalings[i],
                enable_gqa=self.gqa,
            )

        x = self.layout.embed_tokens(ids, positions, self._head[0])
        rope = self._rope_tables(x, positions)
        for i, w in enumerate(weights):
            x = self._layer(i, w, x, rope, attend)
        last = torch.tensor([n - 1 for n in lengths], device=self.device)
        return self._logits(x[torch.arange(b, device=self.device), last])

    def decode(
        self, tokens: torch.Tensor, positions: torch.Tensor, max_position: int, min_position: int = -1
    ) -> torch.Tensor:
        """One step for the sequences in slots ``0 .. B-1``: ``tokens[b]`` sits at ``positions[b]``.

        ``max_position`` / ``min_position`` are the extremes of ``positions`` (passed in to avoid a
        device sync); when they are equal every row sees the same keys and no mask is needed.
        Returns the next-token logits ``[B, V]``.
        """
        b = tokens.shape[0]
        length = max_position + 1
        self.ensure_capacity(length)
        slot_idx = self._slot_ids[:b]
        weights = self._weights()
        mask = None
        if min_position != max_position:
            mask = (self._positions[:length].unsqueeze(0) <= positions.unsqueeze(1)).view(b, 1, 1, length)

        # row (slot, head, position) of each new key/value in the cache seen as [slots*heads*capacity, D]
        heads = self._head_ids
        fused = self._fused_decode if decode_attention.usable(b, length, self.capacity) else None
        rows = (
            (slot_idx.unsqueeze(1) * self.num_kv_heads + heads) * self.capacity + positions.unsqueeze(1)
        ).view(-1)

        def attend(i: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            kc, vc = self.k_cache[i], self.v_cache[i]
            kc.view(-1, self.head_dim).index_copy_(0, rows, k.reshape(-1, self.head_dim))
            vc.view(-1, self.head_dim).index_copy_(0, rows, v.reshape(-1, self.head_dim))
            if fused is not None:
                return fused(q, kc[:b, :, :length], vc[:b, :, :length], positions, self._scales[i])
            return F.scaled_dot_product_attention(
                q,
                kc[:b, :, :length],
                vc[:b, :, :length],
                attn_mask=mask,
                scale=self.scalings[i],
                enable_gqa=self.gqa,
            )

        x = self.layout.embed_tokens(tokens.view(b, 1), positions.view(b, 1), self._head[0])
        rope = self._rope_tables(x, positions.view(b, 1))
        for i, w in enumerate(weights):
            x = self._layer(i, w, x, rope, attend)
        return self._logits(x[:, 0])
