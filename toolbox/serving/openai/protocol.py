"""Request bodies of ``toolbox serve`` (the OpenAI API subset it serves), as pydantic models.

Every field OpenAI defines for these two routes is either implemented or refused with a 400 that
names it (``echo``, ``suffix``, ``best_of`` other than ``n``); a field neither OpenAI nor vLLM's
extensions define is refused too, unless the server runs with ``--allow-unknown-fields`` (then it is
dropped; ``request.py`` does that before validation). vLLM's extensions (``top_k``,
``min_p``, ``repetition_penalty``, ``ignore_eos``, ``stop_token_ids``, ``return_tokens_as_token_ids``,
``return_token_ids``) are accepted. Ranges are OpenAI's: temperature 0..2, presence and frequency
penalties -2..2, logit_bias values -100..100 keyed by integer token ids. Bodies are validated in
strict mode (``request.validate``): a boolean is ``true`` or ``false``, never ``0``.

Fields the official client may send to a chat completion that change nothing a local model does
(``IGNORED_FIELDS``: storage, metadata, reasoning and verbosity hints, service tiers, prompt-cache
keys, a predicted output) are accepted with their OpenAI types and ignored; the response names
them (``X-Ignored-Fields``) and the server logs a warning, as vLLM does. Those it cannot honour
(``audio``, ``functions``, ``function_call``, ``moderation``, ``web_search_options``) stay 400s.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, WithJsonSchema, model_validator
from pydantic_core import PydanticCustomError

from toolbox.serving.engine import SamplingParams

MAX_N = 16  # completions per prompt; a request's prompts x n are at most 64 (request.py)
Strict = ConfigDict(extra="forbid", allow_inf_nan=False)
Penalty = Annotated[float, Field(ge=-2.0, le=2.0)]
NonEmpty = Annotated[str, Field(min_length=1)]


def _only_false(value: bool) -> bool:
    if value:
        raise ValueError("not supported: only false")
    return value


# a boolean that must be false (``Literal[False]`` would take 0, which strict JSON does not)
OnlyFalse = Annotated[bool, AfterValidator(_only_false), WithJsonSchema({"type": "boolean", "const": False})]


class StreamOptions(BaseModel):
    model_config = Strict
    include_usage: bool = False


class JSONSchemaFormat(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    name: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[a-zA-Z0-9_-]+$")]
    description: str | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    strict: bool | None = None


class TextFormat(BaseModel):
    model_config = Strict
    type: Literal["text"]


class JSONObjectFormat(BaseModel):
    model_config = Strict
    type: Literal["json_object"]


class JSONSchemaResponseFormat(BaseModel):
    model_config = Strict
    type: Literal["json_schema"]
    json_schema: JSONSchemaFormat


# {"type": "text"}, {"type": "json_object"} or {"type": "json_schema", "json_schema": {"name",
# "schema", ...}}: the last two by constrained decoding (structured.py)
ResponseFormat = Annotated[
    TextFormat | JSONObjectFormat | JSONSchemaResponseFormat, Field(discriminator="type")
]


def combination_error(message: str) -> PydanticCustomError:
    """Fields that are each valid but not together (a 400 with code ``invalid_combination``)."""
    return PydanticCustomError("invalid_combination", message)


class _Sampling(BaseModel):
    model_config = Strict

    model: str
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    temperature: Annotated[float, Field(ge=0.0, le=2.0)] = 1.0
    top_p: Annotated[float, Field(gt=0.0, le=1.0)] = 1.0
    top_k: Annotated[int, Field(ge=-1)] = 0
    min_p: Annotated[float, Field(ge=0.0, le=1.0)] = 0.0
    repetition_penalty: Annotated[float, Field(gt=0.0, le=10.0)] = 1.0
    presence_penalty: Penalty = 0.0
    frequency_penalty: Penalty = 0.0
    logit_bias: (
        Annotated[
            dict[Annotated[str, Field(pattern=r"^[0-9]{1,9}$")], Annotated[float, Field(ge=-100, le=100)]],
            Field(max_length=300),
        ]
        | None
    ) = None
    n: Annotated[int, Field(ge=1, le=MAX_N)] = 1
    seed: Annotated[int, Field(ge=0, le=2**63 - 1)] | None = None
    stop: NonEmpty | Annotated[list[NonEmpty], Field(max_length=16)] | None = None
    stop_token_ids: Annotated[list[Annotated[int, Field(ge=0)]], Field(max_length=64)] | None = None
    ignore_eos: bool = False
    # vLLM's: name every token of the logprobs objects "token_id:{id}" rather than by its text
    return_tokens_as_token_ids: bool = False
    # vLLM's: the generated ids in every choice (and chunk), the prompt's ids beside them
    return_token_ids: bool = False
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = None
    response_format: ResponseFormat | None = None

    def sampling_params(self, max_tokens: int, logprobs: bool, top_logprobs: int = 0) -> SamplingParams:
        stop = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        return SamplingParams(
            max_tokens=max_tokens,
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=max(self.top_k, 0),
            min_p=self.min_p,
            repetition_penalty=self.repetition_penalty,
            presence_penalty=self.presence_penalty,
            frequency_penalty=self.frequency_penalty,
            logit_bias={int(k): float(v) for k, v in (self.logit_bias or {}).items()},
            n=self.n,
            seed=self.seed,
            stop=stop,
            stop_token_ids=list(self.stop_token_ids or []),
            logprobs=logprobs,
            top_logprobs=top_logprobs if logprobs else 0,
            ignore_eos=self.ignore_eos,
        )


TokenIds = Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=1)]


class CompletionRequest(_Sampling):
    """``POST /v1/completions``: a prompt (text, token ids, or a list of either)."""

    prompt: (
        str
        | Annotated[list[str], Field(min_length=1, max_length=64)]
        | TokenIds
        | Annotated[list[TokenIds], Field(min_length=1, max_length=64)]
    )
    max_tokens: Annotated[int, Field(ge=1)] | None = 16
    logprobs: Annotated[int, Field(ge=0, le=5)] | None = None
    echo: OnlyFalse = Field(False, description="not supported: only false")
    suffix: None = Field(None, description="not supported: only null")
    best_of: Annotated[int, Field(ge=1, le=MAX_N)] | None = Field(
        None, description="supported only equal to n (the n completions are all returned)"
    )

    @model_validator(mode="after")
    def _best_of_is_n(self) -> CompletionRequest:
        if self.best_of is not None and self.best_of != self.n:
            raise combination_error(
                f"best_of={self.best_of} is not supported: this server returns every completion it "
                f"generates, so best_of must equal n ({self.n}) or be left out"
            )
        return self

    def prompts(self) -> list[str | list[int]]:
        p = self.prompt
        if isinstance(p, str):
            return [p]
        if p and all(isinstance(x, int) for x in p):
            return [list(p)]  # type: ignore[arg-type]
        return list(p)  # type: ignore[arg-type]


class ContentPart(BaseModel):
    model_config = Strict
    type: Literal["text"]
    text: str


class FunctionCall(BaseModel):
    model_config = Strict
    name: str
    arguments: str  # JSON text, as OpenAI sends it


class ToolCall(BaseModel):
    model_config = Strict
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


Content = str | list[ContentPart]


class _Message(BaseModel):
    model_config = Strict
    name: str | None = None

    content: Content | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


class SystemMessage(_Message):
    role: Literal["system", "developer"]
    content: Content
    tool_calls: None = None
    tool_call_id: None = None


class UserMessage(_Message):
    role: Literal["user"]
    content: Content
    tool_calls: None = None
    tool_call_id: None = None


class AssistantMessage(_Message):
    """Its ``content`` may be null (a turn that only called tools)."""

    role: Literal["assistant"]
    tool_call_id: None = None


class ToolMessage(_Message):
    role: Literal["tool"]
    content: Content
    tool_call_id: str
    tool_calls: None = None


ChatMessage = Annotated[
    SystemMessage | UserMessage | AssistantMessage | ToolMessage, Field(discriminator="role")
]


class FunctionDefinition(BaseModel):
    model_config = Strict
    name: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[a-zA-Z0-9_-]+$")]
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(BaseModel):
    model_config = Strict
    type: Literal["function"]
    function: FunctionDefinition


class NamedFunction(BaseModel):
    model_config = Strict
    name: str


class NamedToolChoice(BaseModel):
    model_config = Strict
    type: Literal["function"]
    function: NamedFunction


class PredictedContent(BaseModel):
    """``prediction``: a guess at the output, a speed hint for OpenAI's models (ignored here)."""

    model_config = Strict
    type: Literal["content"]
    content: Content


IGNORED_FIELDS = frozenset(
    {
        "store",
        "metadata",
        "reasoning_effort",
        "verbosity",
        "service_tier",
        "prompt_cache_key",
        "prompt_cache_retention",
        "safety_identifier",
        "prediction",
        "modalities",
    }
)


class ChatCompletionRequest(_Sampling):
    """``POST /v1/chat/completions``: messages rendered with the model's chat template."""

    messages: Annotated[list[ChatMessage], Field(min_length=1)]
    max_completion_tokens: Annotated[int, Field(ge=1)] | None = None
    logprobs: bool = False
    top_logprobs: Annotated[int, Field(ge=0, le=20)] | None = None
    tools: Annotated[list[Tool], Field(max_length=128)] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool = True
    # accepted and ignored (IGNORED_FIELDS)
    store: bool | None = None
    metadata: Annotated[dict[str, Annotated[str, Field(max_length=512)]], Field(max_length=16)] | None = None
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = None
    verbosity: Literal["low", "medium", "high"] | None = None
    service_tier: Literal["auto", "default", "flex", "scale", "priority", "fast"] | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: Literal["in_memory", "24h"] | None = None
    safety_identifier: str | None = None
    prediction: PredictedContent | None = None
    modalities: list[Literal["text"]] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> ChatCompletionRequest:
        if self.top_logprobs and not self.logprobs:
            raise combination_error("top_logprobs needs logprobs: true")
        if self.tool_choice not in (None, "none", "auto") and not self.tools:
            raise combination_error("tool_choice needs tools")
        if isinstance(self.tool_choice, NamedToolChoice):
            names = {t.function.name for t in self.tools or []}
            if self.tool_choice.function.name not in names:
                raise combination_error(
                    f"tool_choice names {self.tool_choice.function.name!r}, which is not in tools"
                )
        if (
            self.response_format is not None
            and self.response_format.type != "text"
            and self.tool_choice not in (None, "none")
            and self.tool_choice != "auto"
        ):
            raise combination_error(
                "response_format and a forced tool_choice cannot both constrain the output"
            )
        return self
