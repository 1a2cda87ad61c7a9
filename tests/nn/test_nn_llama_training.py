"""The lean Llama training forward computes what transformers' Llama computes, loss and gradients."""

from __future__ import annotations

import pytest
import torch

from toolbox.core.registries import MODELS
from toolbox.nn.llama_training import LlamaTrainingForward, training_forward
from toolbox.objectives.supervised import CausalLMLoss

VOCAB = 40


def build_llama(**settings):
    torch.manual_seed(0)
    sizes = {"hidden_size": 64, "num_layers": 2, "num_heads": 2, "intermediate_size": 96}
    return MODELS.build(
        {"name": "tiny_llama", **sizes, **settings},
        path="model",
        vocab_size=VOCAB,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )


def right_padded_batch(lengths=(9, 6, 11, 4), prompt=(3, 2, 5, 4), seed=1):
    """Right-padded rows; the completion is everything after the row's prompt."""
    g = torch.Generator().manual_seed(seed)
    width = max(lengths)
    ids = torch.zeros((len(lengths), width), dtype=torch.long)
    attention = torch.zeros_like(ids)
    completion = torch.zeros_like(ids)
    for i, (n, p) in enumerate(zip(lengths, prompt, strict=True)):
        ids[i, :n] = torch.randint(3, VOCAB, (n,), generator=g)
        attention[i, :n] = 1
        completion[i, p:n] = 1
    return {"input_ids": ids, "attention_mask": attention, "completion_mask": completion}


def loss_and_grads(model, forward, batch, objective=None):
    model.zero_grad(set_to_none=True)
    out = (objective or CausalLMLoss())(forward, batch)
    out.loss_sum.backward()
    return out, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def assert_same_gradients(grads, ref_grads):
    """Equal up to float reassociation: within 1e-5 of each tensor's largest entry."""
    assert grads.keys() == ref_grads.keys()
    for name, ref in ref_grads.items():
        err = float((grads[name] - ref).abs().max())
        assert err <= 1e-5 * float(ref.abs().max()), f"{name}: off by {err}"


@pytest.mark.parametrize("settings", [{}, {"num_kv_heads": 1}, {"tie_word_embeddings": False}])
def test_loss_and_gradients_equal_the_models(settings) -> None:
    model = build_llama(**settings)
    fast = training_forward(model)
    assert isinstance(fast, LlamaTrainingForward)
    batch = right_padded_batch()
    ref, ref_grads = loss_and_grads(model, model, batch)
    out, grads = loss_and_grads(model, fast, batch)
    assert out.num_items == ref.num_items
    assert out.metrics == ref.metrics
    torch.testing.assert_close(out.loss_sum, ref.loss_sum, rtol=1e-6, atol=1e-6)
    assert_same_gradients(grads, ref_grads)


@pytest.mark.parametrize("completion_only", [True, False])
def test_exact_mode_gives_bitwise_the_models_gradients(completion_only) -> None:
    model = build_llama()
    fast = training_forward(model, exact=True)
    assert not fast.accepts_logits_mask  # every position computed, as transformers does
    batch = right_padded_batch()
    objective = CausalLMLoss(completion_only=completion_only)
    ref, ref_grads = loss_and_grads(model, model, batch, objective)
    out, grads = loss_and_grads(model, fast, batch, objective)
    assert torch.equal(out.loss_sum, ref.loss_sum)
    assert all(torch.equal(grads[name], grad) for name, grad in ref_grads.items())
    ids = batch["input_ids"]
    keep = batch["completion_mask"].bool()
    assert torch.equal(fast(ids, logits_mask=keep).logits, model(ids).logits[keep])


def test_every_token_scored_and_full_logits() -> None:
    model = build_llama()
    fast = training_forward(model)
    batch = right_padded_batch()
    objective = CausalLMLoss(completion_only=False)
    ref, ref_grads = loss_and_grads(model, model, batch, objective)
    out, grads = loss_and_grads(model, fast, batch, objective)
    torch.testing.assert_close(out.loss_sum, ref.loss_sum, rtol=1e-6, atol=1e-6)
    assert_same_gradients(grads, ref_grads)
    # without a logits mask: every position's logits, as the model gives them
    ids = batch["input_ids"]
    torch.testing.assert_close(fast(ids).logits, model(ids).logits, rtol=1e-5, atol=1e-6)
    mask = torch.rand(ids.shape, generator=torch.Generator().manual_seed(3)) < 0.3
    torch.testing.assert_close(
        fast(ids, logits_mask=mask).logits, model(ids).logits[mask], rtol=1e-5, atol=1e-6
    )


def packed_batch(rows=((5, 7, 3), (9, 4)), seed=2):
    """Rows of examples back to back, as the packing collators give them: positions restarting per
    example, a 4-D additive mask keeping each to itself, the first token of each never scored."""
    g = torch.Generator().manual_seed(seed)
    width = max(sum(r) for r in rows) + 1  # one padding token at the end of the longest row
    ids = torch.zeros((len(rows), width), dtype=torch.long)
    positions = torch.zeros_like(ids)
    segment = torch.full_like(ids, -1)
    completion = torch.zeros_like(ids)
    for r, lengths in enumerate(rows):
        start = 0
        for s, n in enumerate(lengths):
            ids[r, start : start + n] = torch.randint(3, VOCAB, (n,), generator=g)
            positions[r, start : start + n] = torch.arange(n)
            segment[r, start : start + n] = s
            completion[r, start + 1 : start + n] = 1
            start += n
        positions[r, start:] = torch.arange(width - start)  # the padding: one more sequence
        segment[r, start:] = len(lengths)
    causal = torch.arange(width)[None, :] <= torch.arange(width)[:, None]
    allowed = (segment[:, :, None] == segment[:, None, :]) & causal
    mask = torch.zeros(allowed.shape, dtype=torch.float32).masked_fill(
        ~allowed, torch.finfo(torch.float32).min
    )
    return {
        "input_ids": ids,
        "position_ids": positions,
        "attention_mask": mask[:, None],
        "completion_mask": completion,
    }


@pytest.mark.parametrize("settings", [{}, {"num_kv_heads": 1}])
def test_packed_rows_run_lean_and_equal_the_models(settings) -> None:
    model = build_llama(**settings)
    fast, exact = training_forward(model), training_forward(model, exact=True)
    batch = packed_batch()
    ids, positions, mask = batch["input_ids"], batch["position_ids"], batch["attention_mask"]
    assert fast.covers(ids, mask, positions)  # the lean path, not the fallback
    assert not fast.covers(ids, None, positions)  # positions without a packed mask: the model's
    ref = model(input_ids=ids, attention_mask=mask, position_ids=positions).logits
    lean = fast(ids, attention_mask=mask, position_ids=positions).logits
    torch.testing.assert_close(lean, ref, rtol=1e-5, atol=1e-6)
    keep = batch["completion_mask"].bool()
    kept = fast(ids, attention_mask=mask, position_ids=positions, logits_mask=keep).logits
    torch.testing.assert_close(kept, ref[keep], rtol=1e-5, atol=1e-6)
    assert torch.equal(exact(ids, attention_mask=mask, position_ids=positions).logits, ref)
    # each packed example's logits are those of the example run alone
    alone = model(input_ids=ids[:1, 5:12]).logits[0]
    torch.testing.assert_close(lean[0, 5:12], alone, rtol=1e-5, atol=1e-6)
    ref_out, ref_grads = loss_and_grads(model, model, batch)
    out, grads = loss_and_grads(model, fast, batch)
    torch.testing.assert_close(out.loss_sum, ref_out.loss_sum, rtol=1e-6, atol=1e-6)
    assert_same_gradients(grads, ref_grads)
    exact_out, exact_grads = loss_and_grads(model, exact, batch)
    assert torch.equal(exact_out.loss_sum, ref_out.loss_sum)
    assert all(torch.equal(exact_grads[name], grad) for name, grad in ref_grads.items())


def test_what_it_does_not_cover_falls_back_to_the_model() -> None:
    model = build_llama()
    fast = training_forward(model)
    ids = right_padded_batch()["input_ids"]
    left = torch.ones_like(ids)
    left[0, :3] = 0  # left padding: the model's own masked forward
    keep = torch.ones_like(ids, dtype=torch.bool)
    torch.testing.assert_close(
        fast(ids, attention_mask=left, logits_mask=keep).logits,
        model(ids, attention_mask=left).logits[keep],
    )
    nothing = torch.zeros_like(keep)
    assert fast(ids, logits_mask=nothing).logits.shape == (0, VOCAB)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        torch.testing.assert_close(fast(ids).logits, model(ids).logits)


def test_only_plain_llamas_get_one() -> None:
    assert training_forward(MODELS.build({"name": "transformer_lm", "vocab_size": VOCAB})) is None
    assert training_forward(torch.nn.Linear(2, 2)) is None
    llama = build_llama()
    llama.config.hidden_act = "gelu"
    assert training_forward(llama) is None


def test_the_model_keeps_its_parameters_and_state_dict() -> None:
    model = build_llama()
    keys = list(model.state_dict())
    fast = training_forward(model)
    CausalLMLoss()(fast, right_padded_batch()).loss_sum.backward()
    assert list(model.state_dict()) == keys
    assert all(p.grad is not None for p in model.parameters())


def test_rotary_tables_first_built_in_inference_mode_serve_a_training_forward() -> None:
    """A preference reference reads in inference mode and may be the first to see a length (its
    forward shares the tables with the policy's where an adapter is disabled): the tables must be
    plain tensors, which the policy's forward saves for backward."""
    model = build_llama()
    fast = training_forward(model)
    batch = right_padded_batch()
    with torch.inference_mode():
        CausalLMLoss()(fast, batch)
    assert not any(t.is_inference() for tables in fast._rotary.values() for t in tables)
    out, grads = loss_and_grads(model, fast, batch)
    ref, ref_grads = loss_and_grads(model, training_forward(model), batch)
    assert torch.equal(out.loss_sum, ref.loss_sum)
    assert grads.keys() == ref_grads.keys() and all(torch.equal(grads[n], g) for n, g in ref_grads.items())


def build_family(architecture, **settings):
    torch.manual_seed(0)
    sizes = {"hidden_size": 64, "num_layers": 2, "num_heads": 2, "intermediate_size": 96}
    return MODELS.build(
        {"name": "hf_causal_lm", "architecture": architecture, **sizes, **settings},
        path="model",
        vocab_size=VOCAB,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )


@pytest.mark.parametrize("architecture", ["mistral", "qwen2", "qwen3"])
@pytest.mark.parametrize("settings", [{}, {"num_kv_heads": 1}])
def test_llama_layout_families_equal_the_models(architecture, settings) -> None:
    """Mistral, Qwen2 (q/k/v biases) and Qwen3 (q/k norms): the lean loss and gradients are the
    model's; exact mode is bitwise the model's."""
    model = build_family(architecture, **settings)
    if architecture == "qwen2":  # random biases, so that dropping one would show
        with torch.no_grad():
            for layer in model.model.layers:
                for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                    proj.bias.normal_(0, 0.5)
    if architecture == "qwen3":
        with torch.no_grad():
            for layer in model.model.layers:
                layer.self_attn.q_norm.weight.uniform_(0.5, 1.5)
                layer.self_attn.k_norm.weight.uniform_(0.5, 1.5)
    batch = right_padded_batch()
    ref, ref_grads = loss_and_grads(model, model, batch)
    out, grads = loss_and_grads(model, training_forward(model), batch)
    torch.testing.assert_close(out.loss_sum, ref.loss_sum, rtol=1e-6, atol=1e-6)
    assert_same_gradients(grads, ref_grads)
    exact, exact_grads = loss_and_grads(model, training_forward(model, exact=True), batch)
    assert torch.equal(exact.loss_sum, ref.loss_sum)
    # bitwise, except Qwen3's q/k-norm weights, whose gradient sums reduce in another order (~1e-8)
    head_norms = {n for n in ref_grads if n.endswith(("q_norm.weight", "k_norm.weight"))}
    assert all(torch.equal(exact_grads[n], g) for n, g in ref_grads.items() if n not in head_norms)
    assert_same_gradients({n: exact_grads[n] for n in head_norms}, {n: ref_grads[n] for n in head_norms})


@pytest.mark.parametrize("architecture", ["gemma", "gpt2"])
def test_other_families_fall_back_to_their_own_forward(architecture) -> None:
    assert training_forward(build_family(architecture)) is None


@pytest.mark.parametrize("use_dora", [False, True])
def test_lora_adapted_llama_equals_the_peft_models(use_dora) -> None:
    """With LoRA/DoRA (random B, so the adapters matter): the lean loss and every trainable
    gradient are the PeftModel's."""
    from toolbox.nn.adapters import LoRA

    model = LoRA(r=4, use_dora=use_dora, modules_to_save=["lm_head"]).apply(
        build_llama(tie_word_embeddings=False)
    )
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.1)
    fast = training_forward(model)
    assert isinstance(fast, LlamaTrainingForward) and fast.fused == (not use_dora)  # DoRA: module by module
    batch = right_padded_batch()
    ref, ref_grads = loss_and_grads(model, model, batch)
    out, grads = loss_and_grads(model, fast, batch)
    torch.testing.assert_close(out.loss_sum, ref.loss_sum, rtol=1e-6, atol=1e-6)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all(grads[n] is not None for n in trainable)
    assert_same_gradients({n: grads[n] for n in trainable}, {n: ref_grads[n] for n in trainable})
    with model.disable_adapter():  # the base alone, as the preference reference reads it
        torch.testing.assert_close(
            fast(batch["input_ids"]).logits, model(batch["input_ids"]).logits, rtol=1e-5, atol=1e-5
        )
