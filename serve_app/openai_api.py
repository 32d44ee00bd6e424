"""OpenAI request bodies we accept, validated with pydantic, and their mapping onto engine sampling params.

Unknown fields are ignored (clients such as the ``openai`` SDK send fields like ``user``); known fields are
checked for type and range, and every failure names its field (OpenAI's ``error.param``).

* The optional sampling fields (penalties, logit_bias, seed, min_tokens, ...; ``engines.protocol.SAMPLING_FIELDS``)
  are implemented by some backends and not others: the router sends a request that uses one only to a variant
  whose backend implements it, and refuses it with a 400 naming the field otherwise (docs/openai-api.md).
* OpenAI fields that change what a client gets back and that no backend here implements (tools,
  structured output, ...) are refused with a 400 naming them when set to anything but their neutral value, never
  silently dropped: :data:`UNSUPPORTED_COMPLETION` and :data:`UNSUPPORTED_CHAT` list them (from the ``openai``
  package's ``completion_create_params`` and ``chat/completion_create_params``).
* Fields that change nothing a client sees (``user``, ``metadata``, ``store``, ``service_tier``,
  ``prompt_cache_key``, ...) are ignored.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, ValidationError, field_validator

from engines.errors import InvalidRequestError
from engines.protocol import SamplingParams

# The most choices (``n``) one request may ask for: each is an engine request of its own.
MAX_CHOICES = 8


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")
    include_usage: bool = False


class _SamplingFields(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str = Field(min_length=1)
    max_tokens: int | None = Field(None, description="Tokens to generate; the server default applies when absent.")
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(0, ge=0, description="Extension (vLLM): 0 disables top-k.")
    seed: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] = Field(default_factory=list, description="Extension (vLLM).")
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
    stream: bool = False
    stream_options: StreamOptions | None = None
    priority: int | None = Field(
        None, description="Extension: higher may wait in longer queues; None takes the SLO tier's priority."
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
            if not token.isdigit():
                raise ValueError(f"keys must be token ids (non-negative integers as strings), got {token!r}")
            if not -100.0 <= bias <= 100.0:
                raise ValueError(f"biases must be in [-100, 100], got {bias} for token {token}")
        return v

    def stop_list(self) -> list[str]:
        return [self.stop] if isinstance(self.stop, str) else list(self.stop or [])

    def requested_logprobs(self) -> int | None:
        """Top alternatives per token to report (0: the token's own log probability alone); None: none."""
        return None

    def sampling(self, max_tokens: int) -> SamplingParams:
        if self.min_tokens is not None and self.min_tokens > max_tokens:  # caught here, not a round trip later
            raise InvalidRequestError(
                f"min_tokens ({self.min_tokens}) must not exceed max_tokens ({max_tokens}).", param="min_tokens"
            )
        return SamplingParams(
            max_tokens=max_tokens,
            temperature=self.temperature,
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
        )

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


# Field -> the values that ask for nothing (what absent means). Anything else is refused with a 400 naming the field.
# The sampling fields some backends implement (penalties, logit_bias, min_tokens, seed, ...) are not here: the router
# sends a request using them only to a variant whose backend implements them (engines.protocol.SAMPLING_FIELDS).
UNSUPPORTED_COMPLETION: dict[str, tuple[Any, ...]] = {
    "best_of": (None, 1),
    "suffix": (None, ""),
}
UNSUPPORTED_CHAT: dict[str, tuple[Any, ...]] = {
    "audio": (None,),
    "function_call": (None, "none", "auto"),
    "functions": (None, []),
    "modalities": (None, ["text"]),
    "moderation": (None,),
    "prediction": (None,),
    "response_format": (None, {"type": "text"}),
    "tool_choice": (None, "none", "auto"),
    "tools": (None, []),
    "web_search_options": (None,),
}


# Fields accepted and ignored because they change nothing a client gets back from these engines (billing, storage
# and caching hints; reasoning and verbosity knobs of models that have none here; parallel_tool_calls only means
# something with tools, which are refused). Listed so that every field of OpenAI's request bodies is accounted for
# (tests/serve_app/test_openapi_doc.py) and described in /openapi.json.
IGNORED_COMPLETION: tuple[str, ...] = ("user",)
IGNORED_CHAT: tuple[str, ...] = (
    "metadata",
    "parallel_tool_calls",
    "prompt_cache_key",
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
    """POST /v1/completions. ``prompt`` is text or a list of token ids (one prompt per request)."""

    unsupported: ClassVar[dict[str, tuple[Any, ...]]] = UNSUPPORTED_COMPLETION
    ignored: ClassVar[tuple[str, ...]] = IGNORED_COMPLETION

    prompt: str | list[int] | list[str] | list[list[int]]
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

    def requested_logprobs(self) -> int | None:
        if self.logprobs is not None and self.echo:
            # The prompt's own log probabilities would be needed (prompt_logprobs), which no backend here returns.
            raise InvalidRequestError("'echo' together with 'logprobs' is not supported: send one.", param="echo")
        return self.logprobs

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, v: Any) -> str | list[int]:
        if isinstance(v, list) and v and isinstance(v[0], str | list):
            if len(v) != 1:
                raise ValueError("only one prompt per request is supported; send a string or a list of token ids")
            return v[0]
        return v


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
    logprobs: StrictBool | None = Field(
        None, description="Return each generated token's log probability (backends that implement it only)."
    )
    top_logprobs: int | None = Field(
        None, ge=0, le=20, strict=True, description="With logprobs: this many likeliest alternatives per token."
    )

    def requested_logprobs(self) -> int | None:
        if not self.logprobs:
            if self.top_logprobs:  # OpenAI's rule: top_logprobs needs logprobs true
                raise InvalidRequestError("'top_logprobs' needs 'logprobs': true.", param="top_logprobs")
            return None
        return self.top_logprobs or 0

    def effective_max_tokens(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens


def parse_request(model: type[BaseModel], body: Any) -> Any:
    """Validates ``body`` as ``model``; the first problem becomes an ``InvalidRequestError`` naming the field."""
    if not isinstance(body, dict):
        raise InvalidRequestError("The request body must be a JSON object.")
    refuse_unsupported(body, getattr(model, "unsupported", {}))
    try:
        return model.model_validate(body)
    except ValidationError as e:
        err = e.errors()[0]
        param = ".".join(str(p) for p in err["loc"]) or None
        kind = err["type"]
        if kind == "missing":
            msg = f"'{param}' is a required property"
        else:
            got = err.get("input")
            msg = f"Invalid value for '{param}': {err['msg']}" + (
                f" (got {got!r})" if not isinstance(got, dict | list) else ""
            )
        raise InvalidRequestError(msg, param=param) from None
