"""OpenAI request bodies we accept, validated with pydantic, and their mapping onto engine sampling params.

Unknown fields are ignored (clients such as the ``openai`` SDK send fields like ``user``); known fields are
checked for type and range, and every failure names its field (OpenAI's ``error.param``).

* The optional sampling fields (penalties, logit_bias, seed, min_tokens, ...; ``engines.protocol.SAMPLING_FIELDS``)
  are implemented by some backends and not others: the router sends a request that uses one only to a variant
  whose backend implements it, and refuses it with a 400 naming the field otherwise (docs/openai-api.md).
* Structured output (``response_format``) and tool calls that ``tool_choice`` requires are guided decoding: a
  sampling field like the others (``GuidedDecoding`` in the engine's params), routed to a variant whose engine has
  a guided decoder and refused naming the field elsewhere. Tools themselves are rendered by the chat template and
  the output read back as ``tool_calls`` (serve_app/tool_calls.py); docs/openai-api.md says what each backend does.
* OpenAI fields that change what a client gets back and that no backend here implements (``suffix``, audio,
  ...) are refused with a 400 naming them when set to anything but their neutral value, never silently dropped:
  :data:`UNSUPPORTED_COMPLETION` and :data:`UNSUPPORTED_CHAT` list them (from the ``openai`` package's
  ``completion_create_params`` and ``chat/completion_create_params``).
* Fields that change nothing a client sees (``user``, ``metadata``, ``store``, ``service_tier``,
  ...) are ignored.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, ClassVar, Literal, cast

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    ValidationError,
    field_validator,
    model_validator,
)

from core.errors import InvalidRequestError
from engines.protocol import GuidedDecoding, SamplingParams
from serve_app.tool_calls import NamedToolChoice, Tool, ToolChoice, call_schema

# The most choices (``n``) one request may ask for: each is an engine request of its own.
MAX_CHOICES = 8
# Integer fields are bounded as the gRPC API's (grpc_api/llm.proto) types bound them, so that no value a client sends
# reaches an engine or the router's arithmetic outside what they take (an int of 4,000 digits is valid JSON). The seed
# is OpenAI's int64 (its API reference gives the range).
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
# A temperature below this is greedy (vLLM's _SAMPLING_EPS): dividing logits by 1e-120 overflows them to inf, and the
# engine's sampler then fails the request (torch.multinomial: "probability tensor contains either inf, nan or
# element < 0"; found by tests/serve_app/test_fuzz_schema.py).
GREEDY_BELOW_TEMPERATURE = 1e-5


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")
    include_usage: bool = False


class JSONSchemaFormat(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")
    description: str | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema", description="The JSON schema the output follows.")
    strict: bool | None = None


class ResponseFormat(BaseModel):
    """OpenAI's ``response_format``: ``text`` (no constraint), ``json_object`` (any JSON object) or ``json_schema``
    (JSON following ``json_schema.schema``); the last two need a guided decoder in the engine."""

    model_config = ConfigDict(extra="ignore")
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JSONSchemaFormat | None = None

    @model_validator(mode="after")
    def _schema_for_json_schema(self) -> ResponseFormat:
        if self.type == "json_schema" and self.json_schema is None:
            raise ValueError("type 'json_schema' needs a 'json_schema' object (name, schema)")
        return self

    def guided(self) -> GuidedDecoding | None:
        if self.type == "text":
            return None
        schema = self.json_schema.schema_ if self.json_schema is not None else None
        if self.type == "json_object" or schema is None:  # OpenAI's schema is optional: then any JSON object
            return GuidedDecoding("json_object", param="response_format")
        return GuidedDecoding("json", schema, param="response_format")


class _SamplingFields(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str = Field(min_length=1)
    max_tokens: int | None = Field(None, description="Tokens to generate; the server default applies when absent.")
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(0, ge=0, le=INT32_MAX, description="Extension (vLLM): 0 disables top-k.")
    seed: int | None = Field(None, ge=INT64_MIN, le=INT64_MAX)
    stop: str | list[str] | None = None
    stop_token_ids: list[Annotated[int, Field(ge=0, le=INT32_MAX)]] = Field(
        default_factory=list, description="Extension (vLLM)."
    )
    ignore_eos: bool = Field(False, description="Extension (vLLM): keep generating past end-of-sequence.")
    # strict: a JSON false is not a penalty of 0, nor a string a number.
    presence_penalty: float | None = Field(None, ge=-2.0, le=2.0, strict=True, description="0 (or absent) is off.")
    frequency_penalty: float | None = Field(None, ge=-2.0, le=2.0, strict=True, description="0 (or absent) is off.")
    repetition_penalty: float | None = Field(
        None,
        gt=0.0,
        strict=True,
        description="Extension (vLLM, TensorRT-LLM): > 1 discourages repeats; 1 (or absent) is off.",
    )
    min_tokens: int | None = Field(
        None,
        ge=0,
        strict=True,
        description="Extension (vLLM, TensorRT-LLM): no EOS or stop token id before this many tokens.",
    )
    logit_bias: dict[str, StrictFloat] | None = Field(
        None, description="Token id (as a string) -> bias in [-100, 100] added to its logit."
    )
    n: int = Field(
        1,
        ge=1,
        le=MAX_CHOICES,
        description="Choices to generate: one engine request each (a seed is offset by the choice's index).",
    )
    response_format: ResponseFormat | None = Field(
        None,
        description="Structured output: json_object or json_schema, enforced by the engine's guided decoding "
        "(backends that have it only: docs/openai-api.md). On completions an extension (vLLM, trtllm-serve).",
    )
    stream: bool = False
    stream_options: StreamOptions | None = None
    priority: int | None = Field(
        None,
        ge=INT32_MIN,
        le=INT32_MAX,
        description="Extension: higher may wait in longer queues; None takes the SLO tier's priority.",
    )

    @field_validator("stop")
    @classmethod
    def _stop_strings(cls, v: str | list[str] | None) -> str | list[str] | None:
        stops = [v] if isinstance(v, str) else (v or [])
        if len(stops) > 4:
            raise ValueError("at most 4 stop sequences are allowed")
        if any(s == "" for s in stops):
            raise ValueError("stop sequences must not be empty")
        return v

    @field_validator("logit_bias")
    @classmethod
    def _token_biases(cls, v: dict[str, StrictFloat] | None) -> dict[str, StrictFloat] | None:
        for token, bias in (v or {}).items():
            # ASCII digits only: str.isdigit() is true of '²', which int() refuses; and a token id fits int32.
            if not (token.isascii() and token.isdigit() and len(token) <= 10 and int(token) <= INT32_MAX):
                raise ValueError(f"keys must be token ids (non-negative integers as strings), got {token!r}")
            if not -100.0 <= bias <= 100.0:
                raise ValueError(f"biases must be in [-100, 100], got {bias} for token {token}")
        return v

    def stop_list(self) -> list[str]:
        return [self.stop] if isinstance(self.stop, str) else list(self.stop or [])

    def requested_logprobs(self) -> int | None:
        """Top alternatives per token to report (0: the token's own log probability alone); None: none."""
        return None

    def guided(self) -> GuidedDecoding | None:
        """The constraint on the output's text, if the request asks for one."""
        return self.response_format.guided() if self.response_format is not None else None

    def sampling(self, max_tokens: int) -> SamplingParams:
        if self.min_tokens is not None and self.min_tokens > max_tokens:  # caught here, not a round trip later
            raise InvalidRequestError(
                f"min_tokens ({self.min_tokens}) must not exceed max_tokens ({max_tokens}).", param="min_tokens"
            )
        return SamplingParams(
            max_tokens=max_tokens,
            temperature=0.0 if self.temperature < GREEDY_BELOW_TEMPERATURE else self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            seed=self.seed,
            stop=self.stop_list(),
            stop_token_ids=list(self.stop_token_ids),
            ignore_eos=self.ignore_eos,
            presence_penalty=self.presence_penalty or 0.0,
            frequency_penalty=self.frequency_penalty or 0.0,
            repetition_penalty=1.0 if self.repetition_penalty is None else self.repetition_penalty,
            min_tokens=self.min_tokens or 0,
            logit_bias={int(token): bias for token, bias in (self.logit_bias or {}).items()},
            logprobs=self.requested_logprobs(),
            guided=self.guided(),
        )

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


# Field -> the values that ask for nothing (what absent means). Anything else is refused with a 400 naming the field.
# The sampling fields some backends implement (penalties, logit_bias, min_tokens, seed, ...) are not here: the router
# sends a request using them only to a variant whose backend implements them (engines.protocol.SAMPLING_FIELDS).
UNSUPPORTED_COMPLETION: dict[str, tuple[Any, ...]] = {
    # Fill-in-the-middle: no backend here has a model and prompt format for it (trtllm-serve refuses it too).
    "suffix": (None, ""),
}
UNSUPPORTED_CHAT: dict[str, tuple[Any, ...]] = {
    "audio": (None,),
    # The deprecated form of tools: a client that sends it gets told, rather than its functions being ignored.
    "function_call": (None, "none", "auto"),
    "functions": (None, []),
    "modalities": (None, ["text"]),
    "moderation": (None,),
    "prediction": (None,),
    "web_search_options": (None,),
}


# Fields accepted and ignored because they change nothing a client gets back from these engines (billing, storage
# and caching hints; reasoning and verbosity knobs of models that have none here; parallel_tool_calls: a required
# call is one call, and under "auto" the model writes as many as it does, both as OpenAI allows). Listed so that
# every field of OpenAI's request bodies is accounted for (tests/serve_app/test_openapi_doc.py) and described in
# /openapi.json.
IGNORED_COMPLETION: tuple[str, ...] = ("user",)
IGNORED_CHAT: tuple[str, ...] = (
    "metadata",
    "parallel_tool_calls",
    "prompt_cache_options",
    "prompt_cache_retention",
    "reasoning_effort",
    "safety_identifier",
    "service_tier",
    "store",
    "user",
    "verbosity",
)


def refuse_unsupported(body: dict[str, Any], unsupported: dict[str, tuple[Any, ...]]) -> None:
    """Raises ``InvalidRequestError`` for the first field of ``unsupported`` set to a value that asks for something."""
    for name, neutral in unsupported.items():
        if name in body and not any(body[name] == value and type(body[name]) is type(value) for value in neutral):
            raise InvalidRequestError(
                f"'{name}' is not supported by this server, so it is refused rather than ignored: "
                f"remove it (or send {json.dumps(neutral[-1])}).",
                param=name,
            )


class CompletionRequest(_SamplingFields):
    """POST /v1/completions. ``prompt`` is one prompt (text or token ids) or a batch of them (:meth:`prompts`)."""

    unsupported: ClassVar[dict[str, tuple[Any, ...]]] = UNSUPPORTED_COMPLETION
    ignored: ClassVar[tuple[str, ...]] = IGNORED_COMPLETION

    prompt: str | list[int] | list[str] | list[list[int]] = Field(
        description="A prompt (text, or token ids), or a batch of them (a list of texts, or of token-id lists): "
        "each prompt gets 'n' choices, choice j of prompt i at index i * n + j."
    )
    echo: StrictBool | None = Field(
        None, description="Send the prompt back before the completion (a token-id prompt as its decoded text)."
    )
    logprobs: int | None = Field(
        None,
        ge=0,
        le=20,
        strict=True,
        description="Each generated token's log probability and this many likeliest alternatives' (backends "
        "that implement it only: docs/openai-api.md).",
    )

    best_of: int | None = Field(
        None,
        ge=1,
        le=MAX_CHOICES,
        strict=True,
        description="Sample this many sequences per choice and return the one with the highest cumulative log "
        "probability (backends that implement it only: docs/openai-api.md). Not with stream, as OpenAI.",
    )

    @model_validator(mode="after")
    def _best_of_is_whole(self) -> CompletionRequest:
        if self.best_of is not None and self.best_of > 1:
            if self.stream:  # OpenAI's rule: the best is known only once every sequence has finished
                raise InvalidRequestError("'best_of' > 1 cannot be streamed: send stream false.", param="best_of")
            if self.best_of < self.n:
                raise InvalidRequestError(f"'best_of' must be at least 'n' ({self.n}).", param="best_of")
        return self

    def sampling(self, max_tokens: int) -> SamplingParams:
        params = super().sampling(max_tokens)
        params.best_of = self.best_of or 1
        return params

    def requested_logprobs(self) -> int | None:
        if self.logprobs is not None and self.echo:
            # The prompt's own log probabilities would be needed (prompt_logprobs), which no backend here returns.
            raise InvalidRequestError("'echo' together with 'logprobs' is not supported: send one.", param="echo")
        return self.logprobs

    def prompts(self) -> list[str | list[int]]:
        """The request's prompts: its one prompt, or the batch (OpenAI's list of texts or of token-id lists)."""
        prompt = self.prompt
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], str | list):
            return list(prompt)
        return [cast("str | list[int]", prompt)]  # not a batch: text, or token ids (perhaps none)


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "user", "assistant", "developer", "tool"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = Field(None, description="An assistant's calls, for templates with tools.")
    tool_call_id: str | None = Field(None, description="Which call a tool message answers.")

    def for_template(self) -> dict[str, Any]:
        """The message as chat templates take it: OpenAI's 'developer' is the system role of every template."""
        message: dict[str, Any] = {"role": "system" if self.role == "developer" else self.role, "content": self.text()}
        for key in ("name", "tool_calls", "tool_call_id"):
            value = getattr(self, key)
            if value is not None:
                message[key] = value
        return message

    def text(self) -> str:
        if isinstance(self.content, list):  # OpenAI content parts: we take the text parts
            parts = []
            for part in self.content:
                if part.get("type") != "text" or not isinstance(part.get("text"), str):
                    raise ValueError("only text content parts are supported")
                parts.append(part["text"])
            return "".join(parts)
        return self.content or ""


class ChatCompletionRequest(_SamplingFields):
    """POST /v1/chat/completions."""

    unsupported: ClassVar[dict[str, tuple[Any, ...]]] = UNSUPPORTED_CHAT
    ignored: ClassVar[tuple[str, ...]] = IGNORED_CHAT

    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = None
    prompt_cache_key: str | None = Field(
        None,
        max_length=1024,
        description="Requests that share a key go to the replica the key's last request went to while their prompt "
        "continues that request's (an affinity hint for the prefix caches; docs/prefix-routing.md).",
    )
    logprobs: StrictBool | None = Field(
        None, description="Return each generated token's log probability (backends that implement it only)."
    )
    top_logprobs: int | None = Field(
        None, ge=0, le=20, strict=True, description="With logprobs: this many likeliest alternatives per token."
    )
    tools: list[Tool] | None = Field(
        None,
        max_length=128,
        description="Functions the model may call, rendered by the model's chat template (one that renders tools).",
    )
    tool_choice: ToolChoice | None = Field(
        None,
        description="'auto' (the default with tools): the model decides, its calls read back as tool_calls. "
        "'required' or a named function: a call is enforced by guided decoding (backends that have it only). "
        "'none': the tools are not shown to the model.",
    )

    @model_validator(mode="after")
    def _tool_choice_names_a_tool(self) -> ChatCompletionRequest:
        # InvalidRequestError is no ValueError: pydantic lets it through, with the field it names.
        choice = self.tool_choice
        if (choice == "required" or isinstance(choice, NamedToolChoice)) and not self.tools:
            raise InvalidRequestError("A 'tool_choice' that requires a call needs 'tools'.", param="tool_choice")
        if isinstance(choice, NamedToolChoice) and choice.function.name not in self.tool_names():
            raise InvalidRequestError(
                f"'tool_choice' names function {choice.function.name!r}, which is not in 'tools'.", param="tool_choice"
            )
        names = [t.function.name for t in self.tools or ()]
        if len(set(names)) != len(names):
            raise InvalidRequestError("Two of 'tools' have the same name.", param="tools")
        return self

    def tool_names(self) -> frozenset[str]:
        return frozenset(t.function.name for t in self.tools or ())

    def effective_tool_choice(self) -> str:
        """'none', 'auto', 'required' or the name of the required function (OpenAI's default: auto with tools)."""
        choice = self.tool_choice
        if isinstance(choice, NamedToolChoice):
            return choice.function.name
        return choice or ("auto" if self.tools else "none")

    def template_tools(self) -> list[dict[str, Any]] | None:
        """The tools as chat templates take them (OpenAI's JSON), or None when the model is not to see any."""
        if not self.tools or self.effective_tool_choice() == "none":
            return None
        return [t.model_dump(exclude_none=True) for t in self.tools]

    def parsed_tool_names(self) -> frozenset[str] | None:
        """The tools whose calls the output is read back for (serve_app/tool_calls.py); None: plain content."""
        return self.tool_names() if self.template_tools() is not None else None

    def guided(self) -> GuidedDecoding | None:
        choice = self.effective_tool_choice()
        response = super().guided()
        if choice in ("none", "auto"):
            return response
        if response is not None:
            raise InvalidRequestError(
                "'response_format' and a 'tool_choice' that requires a call both constrain the output; send one.",
                param="tool_choice",
            )
        return GuidedDecoding(
            "json", call_schema(self.tools or [], None if choice == "required" else choice), "tool_choice"
        )

    def requested_logprobs(self) -> int | None:
        if not self.logprobs:
            if self.top_logprobs:  # OpenAI's rule: top_logprobs needs logprobs true
                raise InvalidRequestError("'top_logprobs' needs 'logprobs': true.", param="top_logprobs")
            return None
        return self.top_logprobs or 0

    def effective_max_tokens(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens


_TYPE_TAGS = frozenset({"str", "int", "float", "bool", "dict", "list", "none"})


def _union_tag(part: Any) -> bool:
    """Whether a part of a pydantic error's location names a union member ("str", "list[int]", "literal[...]",
    "NamedToolChoice"), not a field: ``param`` names the client's field alone."""
    return isinstance(part, str) and (part in _TYPE_TAGS or "[" in part or "-" in part or part[:1].isupper())


def parse_request(model: type[BaseModel], body: Any) -> Any:
    """Validates ``body`` as ``model``; the first problem becomes an ``InvalidRequestError`` naming the field."""
    if not isinstance(body, dict):
        raise InvalidRequestError("The request body must be a JSON object.")
    refuse_unsupported(body, getattr(model, "unsupported", {}))
    try:
        return model.model_validate(body)
    except ValidationError as e:
        err = e.errors()[0]
        param = ".".join(str(p) for p in err["loc"] if not _union_tag(p)) or None
        kind = err["type"]
        if kind == "missing":
            msg = f"'{param}' is a required property"
        else:
            got = err.get("input")
            msg = f"Invalid value for '{param}': {err['msg']}" + (
                f" (got {got!r})" if not isinstance(got, dict | list) else ""
            )
        raise InvalidRequestError(msg, param=param) from None
