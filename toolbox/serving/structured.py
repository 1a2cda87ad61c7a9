"""Constrained decoding with llguidance: outputs that must match a JSON schema or a grammar.

A ``StructuredOutput`` (``response_format`` json_object / json_schema, or a tool-call format) is
compiled once per request into an llguidance grammar and checked (``Grammars.matcher``: a bad schema
is a ``ValueError`` naming the field, a server's 400). Every completion then walks its own copy of
the matcher: before each step ``allowed_tokens`` turns the matchers' bitmasks into a ``[B, V]``
mask that ``sampling.process_logits`` applies (a forbidden token gets -inf, so greedy and sampled
rows alike stay inside the grammar); after it the sampled token is consumed, and a matcher that
reached the end of its grammar ends the completion (finish_reason "stop"). A grammar that no token
of the vocabulary can start is refused with the request (a tokenizer without ``{`` cannot write
JSON); one that the vocabulary cannot continue midway (no token allowed: the sampled one breaks
the matcher) ends the completion as cut, finish_reason "length", never "stop": a "stop" output
is always complete.

Why llguidance (not xgrammar or outlines-core): it installs here beside torch 2.13 with no other
dependency (xgrammar pulls triton and a TVM runtime), computes a mask lazily per step with an
Earley parser rather than compiling a whole-schema automaton up front (outlines-core's cost grows
with the schema), and is one of vLLM's structured-output backends, so the same schemas behave the
same on the vllm engine. JSON is compiled without free whitespace, so an output never runs on in
blanks.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import torch

from toolbox.serving.engine import GrammarError, StructuredOutput

_JSON_OPTIONS = {"whitespace_flexible": False}


def grammar_of(spec: StructuredOutput) -> str:
    """The llguidance grammar (its JSON form) of ``spec``; ``ValueError`` naming its field if malformed."""
    import llguidance

    field = spec.field
    chosen = [spec.json_object, spec.json_schema is not None, spec.lark is not None]
    if sum(chosen) != 1:
        raise GrammarError(f"{field}: give exactly one of json_object, json_schema and lark")
    if spec.lark is not None:
        return llguidance.LLMatcher.grammar_from_lark(spec.lark)
    schema = {"type": "object"} if spec.json_object else spec.json_schema
    try:
        return llguidance.LLMatcher.grammar_from_json_schema(json.dumps(schema), defaults=_JSON_OPTIONS)
    except ValueError as e:
        raise GrammarError(f"{field}: the JSON schema cannot be compiled: {e}") from e


class _CharTable:
    """llguidance's view of a tokenizer whose decoder it does not know (e.g. ``tokenizers``' Fuse of a
    character tokenizer): the bytes of every token id, special tokens marked with a leading 0xFF."""

    def __init__(self, tokenizer: Any, vocab_size: int) -> None:
        special = set(tokenizer.all_special_ids)
        self.eos_token_id = tokenizer.eos_token_id
        self.bos_token_id = tokenizer.bos_token_id
        self.special_token_ids = sorted(special)
        self.tokens: list[bytes] = []
        for i in range(vocab_size):
            if i >= len(tokenizer):
                self.tokens.append(b"")
            elif i in special:
                self.tokens.append(b"\xff" + str(tokenizer.convert_ids_to_tokens(i)).encode())
            else:
                self.tokens.append(tokenizer.decode([i]).encode())
        self._tokenizer = tokenizer

    def __call__(self, text: str | bytes) -> list[int]:
        if isinstance(text, bytes):
            text = text.decode("utf-8", errors="replace")
        return list(self._tokenizer(text, add_special_tokens=False)["input_ids"])


class Grammars:
    """Compiles ``StructuredOutput`` for one tokenizer (its llguidance table is built on first use)."""

    def __init__(self, tokenizer: Any, vocab_size: int, eos_ids: frozenset[int] | set[int]) -> None:
        self.tokenizer, self.vocab_size, self.eos_ids = tokenizer, vocab_size, sorted(eos_ids)
        self._table: Any = None
        self._lock = threading.Lock()

    def table(self) -> Any:
        with self._lock:
            if self._table is None:
                self._table = self._build_table()
            return self._table

    def _build_table(self) -> Any:
        import llguidance
        import llguidance.hf

        eos = self.eos_ids or [self.tokenizer.eos_token_id]
        try:
            return llguidance.hf.from_tokenizer(self.tokenizer, n_vocab=self.vocab_size, eos_token=eos)
        except ValueError:  # a decoder llguidance cannot read: give it every token's bytes
            wrapper = llguidance.TokenizerWrapper(_CharTable(self.tokenizer, self.vocab_size))
            return llguidance.LLTokenizer(wrapper, n_vocab=self.vocab_size, eos_token=eos)

    def matcher(self, spec: StructuredOutput) -> Any:
        """A fresh matcher at the start of ``spec``'s grammar (``ValueError`` naming its field)."""
        import llguidance

        matcher = llguidance.LLMatcher(self.table(), grammar_of(spec), log_level=0)
        if matcher.is_error():
            raise GrammarError(f"{spec.field}: the schema or grammar cannot be used: {matcher.get_error()}")
        first = allowed_tokens([matcher], self.vocab_size, "cpu")
        if first is not None and not bool(first[0, self._writable()].any()):
            raise GrammarError(
                f"{spec.field}: this model's vocabulary cannot write any output the schema or grammar "
                "allows (no token of it can start one); use a model whose tokenizer has the characters "
                "JSON needs, or leave the constraint out"
            )
        return matcher

    def _writable(self) -> torch.Tensor:
        """``[V]`` bool: the tokens that write text (not an end of sequence, not a special token:
        llguidance may let a special token through a mask)."""
        special = set(self.eos_ids) | set(getattr(self.tokenizer, "all_special_ids", None) or ())
        mask = torch.ones(self.vocab_size, dtype=torch.bool)
        mask[[i for i in special if 0 <= i < self.vocab_size]] = False
        return mask


def allowed_tokens(matchers: list[Any], vocab_size: int, device: torch.device | str) -> torch.Tensor | None:
    """``[B, V]`` bool: the tokens each row's matcher accepts next (every token for a row without
    one); None when no row has a matcher."""
    if all(m is None for m in matchers):
        return None
    import llguidance.torch as llt

    words = (vocab_size + 31) // 32
    bitmask = torch.full((len(matchers), words), -1, dtype=torch.int32)
    for row, m in enumerate(matchers):
        if m is not None and not m.is_stopped():
            llt.fill_next_token_bitmask(m, bitmask, row)
    bits = torch.arange(32, dtype=torch.int32)
    allowed = ((bitmask.unsqueeze(-1) >> bits) & 1).bool().view(len(matchers), words * 32)[:, :vocab_size]
    return allowed.to(device)


def forced_tool_call(tools: list[dict[str, Any]], name: str | None = None) -> StructuredOutput:
    """The grammar of exactly one Hermes tool call (``toolbox.data.hermes``): to ``name``, or to any of ``tools`` (OpenAI tool dicts)."""
    options = []
    for tool in tools:
        fn = tool["function"]
        if name is not None and fn["name"] != name:
            continue
        params = fn.get("parameters") or {"type": "object"}
        options.append(
            {
                "type": "object",
                "properties": {"name": {"const": fn["name"]}, "arguments": params},
                "required": ["name", "arguments"],
                "additionalProperties": False,
            }
        )
    schema = options[0] if len(options) == 1 else {"anyOf": options}
    lark = 'start: "<tool_call>" call "</tool_call>"\ncall: %json ' + json.dumps(schema) + "\n"
    return StructuredOutput(lark=lark, field="tools")
