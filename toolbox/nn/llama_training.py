"""A leaner training forward for Hugging Face Llama-layout models: the same weights, fewer ops.

It covers Llama, Mistral, Qwen2 (biases on q/k/v) and Qwen3 (RMSNorm on each head's q and k),
and the same models with LoRA or DoRA adapters (peft): plain LoRA projections (no DoRA, no
dropout) are computed from their tensors by :mod:`toolbox.nn.lora_linear` (q, k and v fused
as for a plain model); others go through the adapted projection modules one by one.
``exact`` mode is bitwise transformers' loss and gradients, except Qwen3's q/k-norm weight
gradients, whose sums over positions reduce in another order (equal within ~1e-8).

A tiny model on a CPU spends much of each step in the per-op overhead of transformers' Llama
forward (mask construction, rotary tables, module and kwargs plumbing) and in positions whose
outputs no loss reads. :class:`LlamaTrainingForward` computes the same function straight from the
model's parameters:

- q, k and v come from one matrix product (the weights are concatenated in the compute path only:
  the model, its state dict and what it saves keep the Hugging Face layout), and the rotary
  embedding rotates q and k in one go;
- the rotary tables are built once per length and reused, and the rotation is one ``roll`` with
  the sign folded into the ``sin`` table (bitwise transformers' ``rotate_half``);
- activations stay ``[tokens, hidden]`` between attention calls, so each projection is one
  matrix product without reshapes;
- right padding needs no mask (causal attention never looks right), so attention takes its fused
  causal path;
- a packed batch (the ``packing`` collators: ``position_ids`` restarting per example and a 4-D
  additive ``attention_mask`` keeping each example to itself) takes the rotary tables at its
  positions and hands its mask to attention, as transformers does;
- given ``logits_mask``, the positions whose logits are needed (the completion tokens of an SFT
  batch), the last layer computes queries, the feed-forward, the final norm and the output
  projection only there; keys and values still cover every position up to the last kept one,
  and later positions are not computed at all. Nothing the kept logits depend on is skipped, so
  the loss and every gradient are those of the full forward.

Anything it does not cover (autocast, weights not in float32, attention dropout or activation
checkpointing while training, left padding, explicit positions without a packed mask, other
architectures or rope types)
falls back to the model's own forward, so the result is always the model's.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from toolbox.nn.lora_linear import fused_linear, is_computable, linear
from toolbox.nn.outputs import CausalLMOutput


class LlamaTrainingForward:
    """Callable like the model for training: ``(input_ids, attention_mask, logits_mask) -> logits``.

    Holds a reference to the model (it owns no parameters and is never saved). With
    ``logits_mask`` (``[batch, seq]`` bool) the returned logits are ``[n, vocab]``, the rows of
    ``logits[logits_mask]`` in the same order; without it ``[batch, seq, vocab]``. ``exact`` keeps
    transformers' order of operations (separate q/k/v products, every position computed), so
    losses and gradients are bitwise those of the model's forward.
    """

    def __init__(self, model: nn.Module, exact: bool = False) -> None:
        self.model = model
        self.exact = exact
        # every projection a plain Linear or plain LoRA (no DoRA, no dropout, unmerged): computed
        # from their tensors, q/k/v in one product; otherwise (and in exact mode) their modules
        self.fused = not exact and _computable(model)
        self.adapters = True  # False: the base alone (see without_adapters)
        self._base_only: LlamaTrainingForward | None = None
        self.accepts_logits_mask = not exact
        config = model.config
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.num_heads
        self.gqa = self.num_kv_heads != self.num_heads
        attn = model.model.layers[0].self_attn
        self.qk_norm = hasattr(attn, "q_norm")  # Qwen3
        self.qkv_bias = attn.q_proj.bias is not None  # Qwen2, Llama with attention_bias
        self._rotary: dict[tuple[int, torch.device, torch.dtype], tuple[Tensor, Tensor]] = {}

    def __call__(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        position_ids: Tensor | None = None,
        logits_mask: Tensor | None = None,
    ) -> CausalLMOutput:
        covered = self._covers(input_ids, attention_mask, position_ids)
        if not self.adapters:  # the base alone (read without grad): never the adapted model's forward
            if not covered:
                raise RuntimeError("without_adapters(): check covers() first; the model would run adapted")
            if logits_mask is not None and not bool(logits_mask.any()):
                return CausalLMOutput(
                    logits=self.model.lm_head.weight.new_zeros((0, self.model.config.vocab_size))
                )
        if not covered or (logits_mask is not None and not bool(logits_mask.any())):
            logits = self.model(
                input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids
            ).logits
            return CausalLMOutput(logits=logits if logits_mask is None else logits[logits_mask])
        packed = (position_ids, attention_mask) if position_ids is not None else None
        if self.exact and logits_mask is not None:  # every position, as transformers computes them
            return CausalLMOutput(logits=self._forward(input_ids, None, packed)[logits_mask])
        return CausalLMOutput(logits=self._forward(input_ids, logits_mask, packed))

    def without_adapters(self) -> LlamaTrainingForward | None:
        """This forward computing the base model alone, as peft's ``disable_adapter()`` in eval
        mode would (no dropout, which the lean forward never has), but without switching the
        model's mode or any adapter flag; ``None`` where its projections are not computed from
        their tensors (then the caller disables the adapters on the model)."""
        if not self.fused:
            return None
        if self._base_only is None:
            base = copy.copy(self)  # shares the model and the rotary tables
            base.adapters = False
            self._base_only = base
        return self._base_only

    def covers(
        self, input_ids: Tensor, attention_mask: Tensor | None = None, position_ids: Tensor | None = None
    ) -> bool:
        """Whether a call with these inputs runs the lean forward (not the model's own)."""
        return self._covers(input_ids, attention_mask, position_ids)

    def _covers(self, input_ids: Tensor, attention_mask: Tensor | None, position_ids: Tensor | None) -> bool:
        model = self.model
        if torch.is_autocast_enabled(input_ids.device.type):
            return False
        if position_ids is not None and not _packed_mask(attention_mask, input_ids.shape):
            return False  # explicit positions: only with the packing collators' 4-D mask
        if model.lm_head.weight.dtype != torch.float32:  # HF's norms round through float32 differently
            return False
        training = model.training and self.adapters  # the base alone is read as in eval mode
        if training and (model.config.attention_dropout or model.model.gradient_checkpointing):
            return False
        if input_ids.shape[1] > model.config.max_position_embeddings:
            return False
        if attention_mask is not None and position_ids is None:  # right padding: no kept logit changes
            if attention_mask.dim() != 2 or not bool((attention_mask[:, 1:] <= attention_mask[:, :-1]).all()):
                return False
        return True

    def _rotary_tables(self, length: int, device: torch.device, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """``cos`` and ``sin`` of positions ``0..length-1``, computed as transformers computes them,
        the first half of ``sin`` negated (what :func:`_rope` multiplies the rolled heads by)."""
        key = (length, device, dtype)
        if key not in self._rotary:
            rotary = self.model.model.rotary_emb
            # plain tensors even when first built inside inference mode (a reference's forward):
            # the policy's forward saves them for backward
            with torch.inference_mode(False), torch.no_grad():
                positions = torch.arange(length, device=device)[None]
                cos, sin = rotary(torch.empty((), dtype=dtype, device=device), positions)
                half = sin.shape[-1] // 2
                signed = torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)
            self._rotary[key] = (cos[0], signed[0])
        return self._rotary[key]

    def _forward(
        self, input_ids: Tensor, logits_mask: Tensor | None, packed: tuple[Tensor, Tensor] | None = None
    ) -> Tensor:
        """Logits (``[batch, seq, vocab]``, or ``[n, vocab]`` at ``logits_mask``); ``packed``: the
        batch's ``(position_ids, 4-D additive attention mask)``."""
        llama = self.model.model
        if logits_mask is not None:
            # causal: no kept logit depends on a later position, so the columns after the last kept
            # one (at least the final token, only ever a target) need no compute at all
            end = int(logits_mask.any(0).nonzero().max()) + 1
            input_ids, logits_mask = input_ids[:, :end], logits_mask[:, :end]
            if packed is not None:
                packed = (packed[0][:, :end], packed[1][..., :end, :end])
        batch, length = input_ids.shape
        x = llama.embed_tokens(input_ids)
        cos, sin = self._rotary_tables(length, x.device, x.dtype)
        mask = None
        if packed is not None:  # each token rotated by its position in its own example: [batch, 1, L, D]
            positions, mask = packed
            cos, sin = F.embedding(positions, cos)[:, None], F.embedding(positions, sin)[:, None]
        layers = llama.layers[: self.model.config.num_hidden_layers]
        for i, layer in enumerate(layers):
            if logits_mask is not None and i == len(layers) - 1:
                x = self._last_layer(layer, x, cos, sin, logits_mask, mask)
            else:
                x = self._layer(layer, x, cos, sin, mask)
        x = _rms_norm(x, llama.norm)
        return self.model.lm_head(x)

    def _layer(self, layer: nn.Module, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor | None) -> Tensor:
        batch, length, hidden = x.shape
        attn = layer.self_attn
        x = x.view(batch * length, hidden)
        h = _rms_norm(x, layer.input_layernorm)
        if not self.fused:  # the projection modules themselves (transformers' op order; LoRA layers)
            q, k, v = (
                proj(h).view(batch, length, -1, self.head_dim)
                for proj in (attn.q_proj, attn.k_proj, attn.v_proj)
            )
            q, k = self._head_norms(attn, q, k)
            q, k, v = (t.transpose(1, 2) for t in (q, k, v))
            q, k = _rope(q, cos, sin), _rope(k, cos, sin)
        else:
            qkv = fused_linear((attn.q_proj, attn.k_proj, attn.v_proj), h, self.adapters).view(
                batch, length, -1, self.head_dim
            )
            q, k, v = qkv.split((self.num_heads, self.num_kv_heads, self.num_kv_heads), dim=2)
            if self.qk_norm:
                q, k = self._head_norms(attn, q, k)
                qk = torch.cat((q, k), dim=2).transpose(1, 2)
            else:
                qk = qkv[:, :, : self.num_heads + self.num_kv_heads].transpose(1, 2)
            v = v.transpose(1, 2)
            q, k = _rope(qk, cos, sin).split((self.num_heads, self.num_kv_heads), dim=1)
        o = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=mask is None, scale=attn.scaling, enable_gqa=self.gqa
        )
        x = self._linear(attn.o_proj, o.transpose(1, 2).reshape(batch * length, -1), x)
        x = self._mlp(layer.mlp, _rms_norm(x, layer.post_attention_layernorm), x)
        return x.view(batch, length, hidden)

    def _linear(self, proj: nn.Module, x: Tensor, residual: Tensor | None = None) -> Tensor:
        """``proj(x)`` (+ ``residual``): from its tensors when fused, else the module itself."""
        if self.fused:
            return linear(proj, x, residual, self.adapters)
        return proj(x) if residual is None else residual + proj(x)

    def _mlp(self, mlp: nn.Module, x: Tensor, residual: Tensor) -> Tensor:
        # (one gate/up product over concatenated weights measured no faster here)
        return self._linear(
            mlp.down_proj, F.silu(self._linear(mlp.gate_proj, x)) * self._linear(mlp.up_proj, x), residual
        )

    def _head_norms(self, attn: nn.Module, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        """Qwen3's RMSNorm over each head of q and k (``[batch, length, heads, head_dim]``)."""
        if not self.qk_norm:
            return q, k
        if self.exact:  # the modules themselves: bitwise their gradients
            return attn.q_norm(q), attn.k_norm(k)
        return _rms_norm(q, attn.q_norm), _rms_norm(k, attn.k_norm)

    def _last_layer(
        self, layer: nn.Module, x: Tensor, cos: Tensor, sin: Tensor, keep: Tensor, mask: Tensor | None
    ) -> Tensor:
        """The last layer at the kept positions only: returns their outputs, ``[n, hidden]``.

        Each row's kept positions are packed to the left (``width`` = the most any row keeps);
        their queries attend to every position up to their own (a packed batch: the rows of its
        ``mask`` at those positions). ``cos``/``sin``: ``[L, D]``, or ``[batch, 1, L, D]`` per token.
        """
        batch, length, hidden = x.shape
        attn = layer.self_attn
        counts = keep.sum(1)
        width = int(counts.max())
        # per row: its kept positions first, in order, then others (computed in spare slots, dropped)
        slots = torch.argsort((~keep).to(torch.uint8), dim=1, stable=True)[:, :width]
        valid = (torch.arange(width, device=x.device) < counts[:, None]).flatten().nonzero().squeeze(1)
        rows = (slots + torch.arange(batch, device=x.device)[:, None] * length).flatten()
        h = _rms_norm(x, layer.input_layernorm).flatten(0, 1)  # [batch * length, hidden]
        if self.fused:
            kv = fused_linear((attn.k_proj, attn.v_proj), h, self.adapters).view(
                batch, length, -1, self.head_dim
            )
            k, v = kv.split((self.num_kv_heads, self.num_kv_heads), dim=2)
        else:
            k, v = (proj(h).view(batch, length, -1, self.head_dim) for proj in (attn.k_proj, attn.v_proj))
        q = self._linear(attn.q_proj, h.index_select(0, rows)).view(batch, width, -1, self.head_dim)
        q, k = self._head_norms(attn, q, k)
        k, v = _rope(k.transpose(1, 2), cos, sin), v.transpose(1, 2)
        if mask is None:
            q_cos, q_sin = F.embedding(slots, cos)[:, None], F.embedding(slots, sin)[:, None]
            allowed = (torch.arange(length, device=x.device) <= slots[..., None])[:, None]  # [B, 1, W, L]
        else:  # the kept positions' own tables and mask rows
            index = slots[:, None, :, None]
            q_cos = cos.gather(2, index.expand(-1, -1, -1, cos.shape[-1]))
            q_sin = sin.gather(2, index.expand(-1, -1, -1, sin.shape[-1]))
            allowed = mask.gather(2, index.expand(-1, -1, -1, length))
        q = _rope(q.transpose(1, 2), q_cos, q_sin)
        o = F.scaled_dot_product_attention(
            q, k, v, attn_mask=allowed, scale=attn.scaling, enable_gqa=self.gqa
        )
        o = o.transpose(1, 2).reshape(batch * width, -1).index_select(0, valid)
        kept = keep.flatten().nonzero().squeeze(1)  # the same tokens, in the same (row-major) order
        x = self._linear(attn.o_proj, o, x.flatten(0, 1).index_select(0, kept))
        return self._mlp(layer.mlp, _rms_norm(x, layer.post_attention_layernorm), x)


def training_forward(model: Any, exact: bool = False) -> LlamaTrainingForward | None:
    """The lean training forward for ``model``, or ``None`` when it is not a plain HF Llama-layout
    model (Llama, Mistral, Qwen2, Qwen3 with default rope, SiLU, no sliding window).

    ``exact``: keep transformers' order of operations, so losses and gradients are bitwise those
    of the model's own forward (no fused q/k/v, no skipped positions); a little slower.
    """
    from toolbox.nn.adapters import is_adapted

    if is_adapted(model):  # LoRA/DoRA: the same forward over the base, calling the adapted projections
        base = model.get_base_model()
        if not getattr(model, "active_adapters", None) or any(
            getattr(model.peft_config[name], "peft_type", None) != "LORA" for name in model.active_adapters
        ):
            return None
        lean = training_forward(base, exact=exact)
        return None if lean is None else LlamaTrainingForward(base, exact=exact)
    if not type(model).__module__.startswith("transformers."):  # no transformers import for others
        return None
    import transformers

    covered = (
        transformers.LlamaForCausalLM,
        transformers.MistralForCausalLM,
        transformers.Qwen2ForCausalLM,
        transformers.Qwen3ForCausalLM,
    )
    if type(model) not in covered:
        return None
    config = model.config
    rope = getattr(config, "rope_parameters", None) or {"rope_type": "default"}
    plain = (
        rope.get("rope_type", "default") == "default"
        and config.hidden_act == "silu"
        and not getattr(config, "mlp_bias", False)
        and getattr(config, "pretraining_tp", 1) == 1
        and not getattr(config, "sliding_window", None)
        and not getattr(config, "use_sliding_window", False)
        and getattr(config, "head_dim", None) in (None, config.hidden_size // config.num_attention_heads)
    )
    return LlamaTrainingForward(model, exact=exact) if plain else None


def left_padded_as_packed(attention_mask: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """A left-padded batch's ``(position_ids, 4-D additive mask)``, the packed form the lean forward
    takes: positions ``0 .. L-1`` whatever the padding (what transformers gives a model called
    without ``position_ids``), each token attending to the real tokens up to itself. A padding
    query attends to itself only, so that its (unread) output stays finite: a fully masked row would
    be NaN, and NaN times a zero gradient is NaN in the weights' gradients."""
    batch, length = attention_mask.shape
    device = attention_mask.device
    positions = torch.arange(length, device=device).expand(batch, length)
    causal = torch.ones((length, length), dtype=torch.bool, device=device).tril()
    allowed = causal & attention_mask.bool()[:, None, :]  # [batch, query, key]
    allowed |= torch.eye(length, dtype=torch.bool, device=device)
    mask = torch.zeros((batch, 1, length, length), dtype=dtype, device=device)
    mask.masked_fill_(~allowed[:, None], torch.finfo(dtype).min)
    return positions, mask


def _packed_mask(mask: Tensor | None, shape: torch.Size) -> bool:
    """Whether ``mask`` is the packing collators' form: additive float ``[batch, 1, L, L]``."""
    batch, length = shape
    return mask is not None and mask.is_floating_point() and tuple(mask.shape) == (batch, 1, length, length)


def _rms_norm(x: Tensor, norm: nn.Module) -> Tensor:
    return F.rms_norm(x, (x.shape[-1],), norm.weight, norm.variance_epsilon)


def _rope(x: Tensor, cos: Tensor, signed_sin: Tensor) -> Tensor:
    """Rotary embedding as transformers applies it, ``x * cos + rotate_half(x) * sin``, bitwise:
    ``rotate_half(x)`` is ``cat(-x2, x1)``, and ``-x2 * sin`` is exactly ``x2 * -sin``, so the
    halves are swapped by one ``roll`` and the sign comes with ``signed_sin``."""
    return x * cos + x.roll(x.shape[-1] // 2, dims=-1) * signed_sin


_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj")
_MLP = ("gate_proj", "up_proj", "down_proj")


def _computable(model: nn.Module) -> bool:
    """Whether every projection of every layer is a plain Linear or a plain LoRA linear (then
    :mod:`toolbox.nn.lora_linear` computes them), all of q, k and v of the same kind."""
    for layer in model.model.layers:
        attn, mlp = layer.self_attn, layer.mlp
        modules = [getattr(attn, n) for n in _PROJECTIONS] + [getattr(mlp, n) for n in _MLP]
        if not all(is_computable(m) for m in modules):
            return False
        if len({type(m) is nn.Linear for m in modules[:3]}) != 1:  # q/k/v: all adapted or none
            return False
    return True
