"""The engine contract: what every backend (transformers, TensorRT-LLM, a sidecar server) looks like.

Streaming rules every backend keeps (modelled on Ray Serve LLM's ``LLMEngine`` protocol):

* ``generate(request)`` returns an async iterator of :class:`Delta` for that one request. Each delta
  carries only what is *new* (text and token ids since the previous delta); the last one carries a
  ``finish_reason``. Text never splits a UTF-8 character and never contains any part of a stop string.
* Closing the iterator (``aclose()``) or cancelling the task that iterates it aborts the request inside
  the engine and frees its slot. A consumer that stops early never leaks engine work.
* Errors are raised as :mod:`core.errors` types: before the first delta for bad input or overload,
  during the stream (``EngineDeadError``) when the engine fails.
* ``stats()`` is cheap and non-blocking: the router and autoscaler call it often.
"""

from __future__ import annotations

import abc
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any, Literal

from core.errors import ContextTooLongError, InvalidRequestError
from engines.kv_blocks import KvEvents

FINISH_STOP = "stop"  # EOS, a stop token id or a stop string
FINISH_LENGTH = "length"  # max_tokens reached (or the context is full)
FINISH_ABORT = "abort"  # cancelled by the client or the server


@dataclass(frozen=True, slots=True)
class GuidedDecoding:
    """A constraint on the output's text, enforced by the engine while it decodes (TensorRT-LLM's
    ``GuidedDecodingParams`` through xgrammar / llguidance): OpenAI's ``response_format``, or the JSON of a tool
    call that ``tool_choice`` requires.

    ``kind`` is ``json`` (``spec``: a JSON schema, a dict), ``json_object`` (any JSON object; ``spec`` None) or
    ``regex`` (``spec``: the pattern). ``param`` is the OpenAI field that asked for it: a backend without guided
    decoding refuses the request naming it."""

    kind: Literal["json", "json_object", "regex"]
    spec: Any = None
    param: Literal["response_format", "tool_choice"] = "response_format"


@dataclass(slots=True)
class SamplingParams:
    """Per-request decoding settings (OpenAI's names and meanings)."""

    max_tokens: int = 16
    temperature: float = 1.0  # 0 means greedy
    top_p: float = 1.0
    top_k: int = 0  # 0 means disabled
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    presence_penalty: float = 0.0  # OpenAI: subtracted once from the logit of every token already in the output
    frequency_penalty: float = 0.0  # OpenAI: subtracted per occurrence in the output
    repetition_penalty: float = 1.0  # extension (vLLM, TensorRT-LLM): divides logits of seen tokens; 1 is off
    min_tokens: int = 0  # extension (vLLM, TensorRT-LLM): no EOS / stop token id before this many tokens
    logit_bias: dict[int, float] = field(default_factory=dict)  # OpenAI: token id -> bias added to its logit
    # Per generated token, its log probability and the ``logprobs`` likeliest alternatives' (0: the token's alone);
    # None: none. OpenAI's completions ``logprobs`` and chat ``logprobs`` / ``top_logprobs``.
    logprobs: int | None = None
    guided: GuidedDecoding | None = None  # structured output (response_format, a required tool call); None: free text
    # OpenAI's best_of: sample this many sequences, answer with the one of the highest cumulative log probability
    # (so the answer comes whole, when all have finished). 1: one sequence.
    best_of: int = 1

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0 or self.top_k == 1

    def requested_fields(self) -> frozenset[str]:
        """The optional fields (:data:`SAMPLING_FIELDS`) this request sets to something that changes its output:
        the ones a backend must implement to serve it. A seed asks for nothing when decoding is greedy."""
        asked = {
            "seed": self.seed is not None and not self.greedy,
            "top_k": self.top_k > 1,
            "ignore_eos": self.ignore_eos,
            "stop_token_ids": bool(self.stop_token_ids),
            "presence_penalty": self.presence_penalty != 0.0,
            "frequency_penalty": self.frequency_penalty != 0.0,
            "repetition_penalty": self.repetition_penalty != 1.0,
            "min_tokens": self.min_tokens > 0,
            "logit_bias": any(self.logit_bias.values()),
            "logprobs": self.logprobs is not None,
            "response_format": self.guided is not None and self.guided.param == "response_format",
            "tool_choice": self.guided is not None and self.guided.param == "tool_choice",
            "best_of": self.best_of > 1 and not self.greedy,  # greedy sequences are all the same one
        }
        return frozenset(name for name, on in asked.items() if on)


# Sampling fields beyond max_tokens / temperature / top_p / stop, which every backend implements. Each backend
# declares the ones it implements (``EngineConfig.sampling_fields()``); the router sends a request only to a
# variant that implements every one it asks for, and refuses it with a 400 naming the field otherwise.
SAMPLING_FIELDS: frozenset[str] = frozenset(
    {
        "seed",
        "top_k",
        "ignore_eos",
        "stop_token_ids",
        "presence_penalty",
        "frequency_penalty",
        "repetition_penalty",
        "min_tokens",
        "logit_bias",
        "logprobs",
        # Guided decoding: a response_format that constrains the output, and a tool call that tool_choice requires
        # (its arguments' JSON schema). One capability, two names, so that a refusal names what the client sent.
        "response_format",
        "tool_choice",
        "best_of",
    }
)

# The sampling fields that are guided decoding (GuidedDecoding.param): a backend implements both or neither.
GUIDED_FIELDS: frozenset[str] = frozenset({"response_format", "tool_choice"})


def check_sampling_fields(request: GenerationRequest, supported: frozenset[str], backend: str) -> None:
    """Refuses a request that asks for a sampling field this backend does not implement, naming the field (the
    router already keeps such requests away; this holds where it could not, and for direct callers)."""
    missing = sorted(request.sampling.requested_fields() - supported)
    if missing:
        raise InvalidRequestError(unsupported_field_message(missing[0], backend), param=missing[0])


def unsupported_field_message(name: str, backends: str) -> str:
    return (
        f"'{name}' is not implemented by {backends}, so it is refused rather than ignored: "
        "remove it, or send the request to a model whose engine implements it."
    )


@dataclass(slots=True)
class GenerationRequest:
    """One request as an engine sees it: token ids in, sampling settings, an id for logs and aborts."""

    request_id: str
    prompt_token_ids: list[int]
    sampling: SamplingParams = field(default_factory=SamplingParams)
    arrival_time: float = field(default_factory=time.time)
    # For the replica choice in the caller (serve_app/replica_router.py), not for the engine: the prompt tokens
    # each replica of the variant that holds any of this prompt has cached (router/prefix_index.py).
    cached_by_replica: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    """One generated token's log probability and its likeliest alternatives', as text (OpenAI's shapes)."""

    token: str
    logprob: float
    top: tuple[tuple[str, float], ...] = ()


@dataclass(slots=True)
class Delta:
    """What is new in one request's output since the previous delta (possibly several tokens)."""

    text: str
    token_ids: list[int]
    finish_reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0  # tokens generated so far, this delta included
    first_token_time: float | None = None  # wall-clock time (time.time()) of the first generated token
    arrival_time: float | None = None  # wall-clock time the engine received the request
    error: str | None = None  # set on a final delta when the engine failed mid-stream
    logprobs: list[TokenLogprob] | None = None  # with SamplingParams.logprobs: one per generated token, in order
    # Prompt tokens the engine took from its KV cache instead of prefilling them (OpenAI's
    # usage.prompt_tokens_details.cached_tokens); None: the engine does not say. Set from the first token on.
    cached_tokens: int | None = None

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    @property
    def readable(self) -> bool:
        """Whether an SSE client sees this delta: it has text, logprobs or a finish. Tokens that are only part of
        a character (a multi-byte one split across tokens) or text held back as a stop string's possible start
        add ids and no text: the OpenAI API has nothing to show for them until the text completes."""
        return bool(self.text or self.finish_reason or self.logprobs)


@dataclass(slots=True)
class EngineStats:
    """A snapshot of one engine's load, cheap to take and to send across Ray."""

    queued_requests: int = 0  # accepted, not yet scheduled
    running_requests: int = 0  # holding KV cache, generating
    queued_prompt_tokens: int = 0  # prefill work waiting ahead of a new request
    kv_blocks_used: int = 0
    kv_blocks_total: int = 0
    tokens_per_s: float = 0.0  # generated tokens per second over the last few seconds
    # Mean ms between a running sequence's successive tokens over the last few seconds: the decode step as the
    # sequences lived it, prefill sharing it included (0.0: nothing decoded lately). The router's TPOT floor.
    recent_tpot_ms: float = 0.0
    recent_decode_batch: float = 0.0  # sequences decoding at once over the same window, on average
    context_tokens: int = 0  # tokens the running sequences hold in the KV cache (prompt + output so far); 0: unknown
    healthy: bool = True
    context_length: int = 0
    max_running_requests: int = 0
    registered_requests: int = -1  # requests the engine still tracks (0 when idle; more means a leak); -1: unknown
    # Posted once by a replica whose engine is still starting (context_length 0): seconds from that post until it
    # expects to serve (0.0: not starting, or no estimate). The router counts its slots from then (router.load).
    starting_ready_in_s: float = 0.0
    # The prefix cache, where the engine keeps one it can tell of (Engine.kv_block_tokens): blocks it holds now, and
    # since its start the prompt tokens it took from the cache and the prompt tokens it admitted (their ratio is
    # its prefix hit rate).
    cached_blocks: int = 0
    cache_hit_tokens: int = 0
    cache_prompt_tokens: int = 0
    kv_block_tokens: int = 0  # the engine's block size, where it reports its cache (Engine.kv_block_tokens; 0: none)

    @property
    def kv_used_fraction(self) -> float:
        return self.kv_blocks_used / self.kv_blocks_total if self.kv_blocks_total else 0.0


def validate_request(request: GenerationRequest, *, context_length: int, vocab_size: int | None = None) -> None:
    """Checks what every backend must refuse, raising the project's own errors with the field named."""
    s = request.sampling
    if not request.prompt_token_ids:
        raise InvalidRequestError("The prompt is empty: send at least one token.", param="prompt")
    if s.max_tokens is None or s.max_tokens <= 0:
        raise InvalidRequestError(f"max_tokens must be at least 1, got {s.max_tokens}.", param="max_tokens")
    if s.temperature < 0:
        raise InvalidRequestError(f"temperature must be >= 0, got {s.temperature}.", param="temperature")
    if not 0 < s.top_p <= 1:
        raise InvalidRequestError(f"top_p must be in (0, 1], got {s.top_p}.", param="top_p")
    if s.top_k < 0:
        raise InvalidRequestError(f"top_k must be >= 0, got {s.top_k}.", param="top_k")
    if s.min_tokens > s.max_tokens:
        raise InvalidRequestError(
            f"min_tokens ({s.min_tokens}) must not exceed max_tokens ({s.max_tokens}).", param="min_tokens"
        )
    if vocab_size is not None:
        bad = [t for t in request.prompt_token_ids if not 0 <= t < vocab_size]
        if bad:
            raise InvalidRequestError(
                f"Prompt token id {bad[0]} is outside the vocabulary (size {vocab_size}).", param="prompt"
            )
        biased = [t for t in s.logit_bias if not 0 <= t < vocab_size]
        if biased:
            raise InvalidRequestError(
                f"logit_bias names token id {biased[0]}, outside the vocabulary (size {vocab_size}).",
                param="logit_bias",
            )
    n = len(request.prompt_token_ids)
    if n >= context_length:
        raise ContextTooLongError(
            f"The prompt has {n} tokens but this model's context length is {context_length}: shorten the prompt.",
            prompt_tokens=n,
            context_length=context_length,
        )


def check_fits_context(request: GenerationRequest, context_length: int) -> None:
    """Refuses a request whose prompt plus max_tokens would not fit the context (engines that reserve the whole
    sequence at admission, as transformers' cache and TensorRT-LLM's GUARANTEED_NO_EVICT scheduler do)."""
    prompt_len, max_tokens = len(request.prompt_token_ids), request.sampling.max_tokens
    if prompt_len + max_tokens > context_length:
        raise ContextTooLongError(
            f"This model's context length is {context_length} tokens, but {prompt_len + max_tokens} "
            f"were requested ({prompt_len} in the prompt, {max_tokens} for the output): "
            "shorten the prompt or lower max_tokens.",
            prompt_tokens=prompt_len,
            context_length=context_length,
        )


class Engine(abc.ABC):
    """One inference engine instance (one per Serve replica)."""

    @abc.abstractmethod
    async def start(self) -> None:
        """Loads the model and starts the engine's loop. Raises ``EngineConfigError`` when it cannot."""

    @abc.abstractmethod
    def generate(self, request: GenerationRequest) -> AsyncGenerator[Delta, None]:
        """Streams the request's output; closing or cancelling the iterator aborts the request."""

    @abc.abstractmethod
    def stats(self) -> EngineStats:
        """A non-blocking snapshot of the engine's load."""

    @abc.abstractmethod
    async def check_health(self) -> None:
        """Returns when healthy; raises ``EngineDeadError`` otherwise."""

    @abc.abstractmethod
    async def shutdown(self) -> None:
        """Stops the engine; in-flight streams end with ``EngineDeadError``."""

    @property
    @abc.abstractmethod
    def context_length(self) -> int:
        """The longest sequence (prompt + output) this engine accepts."""

    @property
    def expected_startup_s(self) -> float:
        """How long :meth:`start` is expected to take (0.0: not known). A serving replica tells the routers when it
        will serve from this (serve_app/engine_deployment.py)."""
        return 0.0

    @property
    def kv_block_tokens(self) -> int | None:
        """Tokens per KV cache block, where the engine reuses cached prompt blocks and reports them through
        :meth:`kv_events`; None: it tells nothing of its cache (the router then keeps an approximate index from
        what it sent, router/prefix_index.py)."""
        return None

    def kv_events(self) -> KvEvents | None:
        """What the engine's prefix cache stored and removed since the last call (engines/kv_blocks.py), drained;
        None where the engine cannot tell (:attr:`kv_block_tokens` is None). Called a few times a second by the
        replica's stats loop, never on the request path."""
        return None
