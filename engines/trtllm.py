"""The ``trtllm`` backend: TensorRT-LLM's ``LLM`` API in the replica's own process.

Written against TensorRT-LLM 1.x (NVIDIA/TensorRT-LLM): ``tensorrt_llm/llmapi/llm.py`` (``LLM``,
``generate_async``, ``get_stats_async``), ``llmapi/llm_args.py`` (``TorchLlmArgs``, ``KvCacheConfig``),
``sampling_params.py`` and ``executor/result.py`` (``GenerationResult``, ``CompletionOutput``). What the
mapping relies on, since a wrong guess here fails silently:

* ``generate_async(ids, sampling_params, streaming=True)`` returns one ``RequestOutput`` that iterating
  *mutates* and yields again; ``outputs[0].text`` / ``token_ids`` hold everything so far (``text_diff`` /
  ``token_ids_diff`` slice them). We diff the full values ourselves: the library may cut ``text`` or
  ``token_ids`` back below what the diffs already handed out.
* Stop strings and stop token ids become the executor's stop words. On a match (``FinishReason.STOP_WORDS``,
  result.py ``_handle_sequence``) only the token ids are truncated and the text is decoded from their diff, so
  a stop token is never decoded but a multi-token stop string's earlier characters stay in ``text``; older
  builds also cut a whole stop string from ``text`` (DetokenizedGenerationResultBase). Either way the final
  step's ``stop_reason`` names the string, and the text held back as its possible start is dropped.
* Leaving the ``async for`` does NOT abort the request: the executor keeps generating until
  ``max_tokens``. Only ``RequestOutput.abort()`` frees the slot (result.py, GenerationResult.abort).
* ``SamplingParams.max_tokens`` defaults to 32, so it is always passed. Greedy is ``top_k=1``; sampling sets
  temperature, top_p and top_k explicitly, since which of them left None mean greedy changed between
  versions (``_greedy_decoding``: 1.0 top_k and top_p None; main all three None, or temperature 0).
* ``get_stats_async(timeout)`` yields iteration-stats dicts that are consumed when read (one reader per
  process: this engine), and the PyTorch backend collects them only with ``enable_iter_perf_stats=True``.
  It returns one iterator per LLM: before the first request an empty one (printing a warning each call), and
  once a read has timed out it stays finished until the next request is submitted (``IterationResult``,
  ``mark_undone``). So polling starts with the first request and waits ``stats_timeout_s``, longer than an
  iteration, for each entry.
* A request the executor refuses (e.g. a prompt over ``max_num_tokens`` without chunked prefill on newer
  builds) raises ``tensorrt_llm.llmapi.RequestError`` from the result: the client's 400, not a dead engine.
* Structured output is ``SamplingParams(guided_decoding=GuidedDecodingParams(json=schema | json_object=True |
  regex=...))`` (sampling_params.py; one guide per request, ``_validate``), enforced only by a guided decoder, which
  the LLM builds when it is given ``guided_decoding_backend`` (llm_args.py, default None; newer builds also reset it
  to None for architectures without support, ``_apply_model_feature_fallbacks``). So the backend is asked for at
  load and read back from ``llm.args`` after it: a guide the engine would not enforce is refused, not ignored.
* ``best_of`` > 1 is ``SamplingParams(n=1, best_of=k)``: ``outputs`` is then the sequence with the highest
  ``cumulative_logprob``, re-sorted at every read (result.py ``outputs``: "Pick the top-n outputs, sorted by
  cumulative log probs"), so ``outputs[0]`` may change sequence while they run: the answer is read once, whole,
  when the request has finished. Log probabilities are asked for (cumulative ones come with them).
* ``logit_bias`` is ``SamplingParams.embedding_bias``: a float32 tensor of the vocabulary's size with each bias
  at its token id, as trtllm-serve builds it (openai_protocol.py ``_logit_bias_to_embedding_bias``).
* KV cache events (``KvCacheConfig(event_buffer_max_size > 0, enable_block_reuse=True)``, llm.py
  ``get_kv_cache_events_async``) come from one ``IterationResult`` per LLM, like the stats: it exists only once a
  request was submitted (before that ``aget_kv_events`` asserts, executor.py), ends after ``timeout`` seconds
  without an event and then stays ended until the next request (``mark_undone``). So the reader waits for the first
  request, reads with a long timeout and starts over a moment after each end; engines/trtllm_kv_events.py renames
  the blocks to the router's hashes. (The RPC orchestrator's ``aget_kv_events`` instead fetches the events with a
  blocking call of up to ``timeout``, executor/rpc_proxy.py: there it is 0, as Dynamo's publisher always reads.)
  Recent builds also say per request how many prompt tokens came from the cache (``RequestOutput.cached_tokens``,
  filled by the PyTorch executor; trtllm-serve reports it as ``prompt_tokens_details.cached_tokens``,
  serve/postprocess_handlers.py); older ones have no such attribute.
* Tensor parallelism > 1 starts MPI workers that inherit this process's ``CUDA_VISIBLE_DEVICES``: the
  replica reserves ``num_gpus = tensor_parallel_size`` and nothing else touches placement (see
  docs/tensorrt-llm.md for why ``orchestrator_type="ray"`` must not be used inside a Serve replica).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import inspect
import json
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from pathlib import Path
from typing import Any, NamedTuple

from core.errors import EngineConfigError, EngineDeadError, InvalidRequestError
from engines.checkpoint import CheckpointInfo, validate_engine_config, visible_gpu_count
from engines.coalesce import coalesce, interval_s
from engines.config import KvCacheSettings, TRTLLMEngineConfig
from engines.kv_blocks import KvEvents
from engines.model_ref import resolve_model_off_loop
from engines.output import OutputStream
from engines.protocol import (
    FINISH_ABORT,
    FINISH_LENGTH,
    FINISH_STOP,
    Delta,
    Engine,
    EngineStats,
    GenerationRequest,
    GuidedDecoding,
    SamplingParams,
    TokenLogprob,
    check_sampling_fields,
    validate_request,
)
from engines.rate import TokenRate
from engines.trtllm_kv_events import TrtllmKvEventTranslator
from engines.unprefilled import UnprefilledPrompts

logger = logging.getLogger(__name__)

MISSING_TENSORRT_LLM = (
    "engine backend 'trtllm' runs TensorRT-LLM inside the replica, but the Python package 'tensorrt_llm' is "
    "not importable here ({error}). Either run the replicas in an environment that has TensorRT-LLM 1.x "
    "beside ray[serve] (NVIDIA's TensorRT-LLM container, or `pip install tensorrt-llm` from NVIDIA's index), "
    "or use backend 'openai_server', which starts trtllm-serve from its own environment next to each "
    "replica. See docs/tensorrt-llm.md."
)

# How long one read of the KV cache events waits for the next event before the iterator ends (and stays ended until
# the next request: see the module docstring). Long, so that it ends only when the cache has been quiet that long.
KV_EVENTS_TIMEOUT_S = 10.0
# The pause before reading again after the iterator ended (or failed).
KV_EVENTS_POLL_S = 0.2

# CompletionOutput.finish_reason values (executor/result.py) -> ours.
_FINISH_REASONS = {
    "stop": FINISH_STOP,
    "length": FINISH_LENGTH,
    "cancelled": FINISH_ABORT,
    "timeout": FINISH_ABORT,
}


class _NoRequestError(Exception):
    """Stands in for tensorrt_llm.llmapi.RequestError where a version lacks it: matches nothing."""


class TensorRTLLMAPI(NamedTuple):
    """What the adapter takes from the installed TensorRT-LLM."""

    llm_cls: Any
    sampling_params_cls: Any
    kv_cache_config_cls: Any
    request_error: type[Exception]
    guided_decoding_params_cls: Any  # None where the version has none


def import_tensorrt_llm(engine_format: str) -> TensorRTLLMAPI:
    """The installed TensorRT-LLM's classes the adapter uses, or EngineConfigError."""
    try:
        trtllm = importlib.import_module("tensorrt_llm")
        llmapi = importlib.import_module("tensorrt_llm.llmapi")
    except ImportError as e:
        raise EngineConfigError(MISSING_TENSORRT_LLM.format(error=e)) from None
    llm_cls = trtllm.LLM
    if engine_format == "tensorrt_engine":
        try:
            # The compiled-engine backend left the public LLM in 1.0; it is still in tensorrt_llm._tensorrt_engine
            # on main (commands/serve.py and serve/openai_server.py import it there), but may go.
            llm_cls = importlib.import_module("tensorrt_llm._tensorrt_engine").LLM
        except (ImportError, AttributeError):
            version = getattr(trtllm, "__version__", "?")
            raise EngineConfigError(
                f"the model is a prebuilt TensorRT engine directory, but the installed TensorRT-LLM "
                f"{version} has no engine backend (tensorrt_llm._tensorrt_engine). Serve the Hugging Face "
                "checkpoint instead (engine_format 'pytorch'), or install a TensorRT-LLM that still has it."
            ) from None
    request_error = getattr(llmapi, "RequestError", None)
    if not (isinstance(request_error, type) and issubclass(request_error, Exception)):
        request_error = _NoRequestError
    # Exported by tensorrt_llm.llmapi (serve/openai_protocol.py imports it there); defined in sampling_params.py.
    guided_cls = getattr(llmapi, "GuidedDecodingParams", None)
    return TensorRTLLMAPI(llm_cls, trtllm.SamplingParams, llmapi.KvCacheConfig, request_error, guided_cls)


def _accepts(cls: Any, name: str) -> bool:
    """Whether the argument model ``cls`` has a field ``name`` (pydantic's model_fields; else its signature)."""
    fields = getattr(cls, "model_fields", None)
    if isinstance(fields, dict):
        return name in fields
    try:
        return name in inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return False


def kv_cache_kwargs(kv: KvCacheSettings, engine_format: str, kv_cache_config_cls: Any) -> dict[str, Any]:
    """Keyword arguments for ``tensorrt_llm.llmapi.KvCacheConfig`` (llm_args.py)."""
    kwargs: dict[str, Any] = {
        "free_gpu_memory_fraction": kv.free_gpu_memory_fraction,
        "enable_block_reuse": kv.enable_block_reuse,
        "max_tokens": kv.max_tokens,
        "event_buffer_max_size": kv.event_buffer_max_size,  # 0 (TensorRT-LLM's default): no events
    }
    if engine_format == "tensorrt_engine":
        return kwargs  # a prebuilt engine's block size was fixed when it was built
    # tokens_per_block joined KvCacheConfig in later 1.x builds (a StrictBaseModel: earlier ones refuse the key), whose
    # PyTorch backend used 32 before.
    if _accepts(kv_cache_config_cls, "tokens_per_block"):
        kwargs["tokens_per_block"] = kv.tokens_per_block
    elif kv.tokens_per_block != 32:
        raise EngineConfigError(
            f"engine.kv_cache.tokens_per_block is {kv.tokens_per_block}, but the installed TensorRT-LLM's "
            "KvCacheConfig has no tokens_per_block (its blocks are 32 tokens): remove the field"
        )
    return kwargs


def engine_tokens_per_block(model: str) -> int | None:
    """A prebuilt engine directory's KV cache block size (config.json build_config.plugin_config.tokens_per_block,
    builder.py), or None where it does not say."""
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        value = json.loads((Path(model) / "config.json").read_text())["build_config"]["plugin_config"]
        value = value["tokens_per_block"]
        if isinstance(value, int) and value > 0:
            return value
    return None


def llm_kwargs(config: TRTLLMEngineConfig, model: str, engine_format: str, kv_cache_config_cls: Any) -> dict:
    """Keyword arguments for ``LLM(...)`` (``TorchLlmArgs`` / ``TrtLlmArgs`` field names)."""
    kwargs: dict[str, Any] = {
        "model": model,
        "tensor_parallel_size": config.tensor_parallel_size,
        "dtype": config.dtype,
        "kv_cache_config": kv_cache_config_cls(**kv_cache_kwargs(config.kv_cache, engine_format, kv_cache_config_cls)),
        "enable_chunked_prefill": config.enable_chunked_prefill,
    }
    if config.tokenizer is not None:
        kwargs["tokenizer"] = config.tokenizer
    for name in ("max_batch_size", "max_num_tokens", "max_seq_len"):
        if getattr(config, name) is not None:
            kwargs[name] = getattr(config, name)
    if engine_format == "pytorch":
        # The PyTorch backend collects iteration stats (our load signal) only when asked.
        kwargs["enable_iter_perf_stats"] = True
    if config.guided_decoding_backend is not None:
        kwargs["guided_decoding_backend"] = config.guided_decoding_backend
    kwargs.update(config.extra_llm_args)
    return kwargs


def guided_decoding_kwargs(guided: GuidedDecoding) -> dict[str, Any]:
    """Keyword arguments for ``tensorrt_llm.GuidedDecodingParams`` (sampling_params.py: one of json, json_object,
    regex, grammar, structural_tag), as trtllm-serve maps response_format (openai_protocol.py
    ``_response_format_to_guided_decoding_params``: json_schema's schema -> ``json``, json_object -> itself)."""
    if guided.kind == "json":
        return {"json": guided.spec}
    if guided.kind == "json_object":
        return {"json_object": True}
    return {"regex": guided.spec}


def response_format(guided: GuidedDecoding, *, trtllm_serve: bool) -> dict[str, Any]:
    """``guided`` as an OpenAI server's ``response_format``. trtllm-serve's own form for it (openai_protocol.py
    ``ResponseFormat``: ``{"type": "json", "schema": ...}``, ``json_object``, ``regex``): every 1.x version reads
    ``json`` + ``schema`` alike, while ``json_schema`` was added later and read its wrapper as the schema in some
    versions. Other servers (vLLM, SGLang) get OpenAI's ``json_schema`` form; they have no regex in it."""
    if guided.kind == "json_object":
        return {"type": "json_object"}
    if guided.kind == "regex":
        if not trtllm_serve:
            raise InvalidRequestError(
                "a regex guide is a trtllm-serve extension of response_format", param=guided.param
            )
        return {"type": "regex", "regex": guided.spec}
    if trtllm_serve:
        return {"type": "json", "schema": guided.spec}
    return {"type": "json_schema", "json_schema": {"name": "output", "schema": guided.spec, "strict": True}}


def embedding_bias(logit_bias: dict[int, float], vocab_size: int) -> Any:
    """OpenAI's logit_bias as TensorRT-LLM's ``embedding_bias``: a float32 tensor of ``vocab_size`` zeros with each
    bias at its token id (trtllm-serve's ``_logit_bias_to_embedding_bias``). torch comes with TensorRT-LLM."""
    import torch

    bias = torch.zeros(vocab_size, dtype=torch.float32)
    for token_id, value in logit_bias.items():
        if not 0 <= token_id < vocab_size:
            raise InvalidRequestError(
                f"logit_bias names token id {token_id}, outside the vocabulary (size {vocab_size}).",
                param="logit_bias",
            )
        bias[token_id] = float(value)
    return bias


def sampling_kwargs(s: SamplingParams, max_tokens: int) -> dict[str, Any]:
    """Keyword arguments for ``tensorrt_llm.SamplingParams`` (sampling_params.py) from ours."""
    kwargs: dict[str, Any] = {
        "max_tokens": max_tokens,  # its default is 32: never leave it out
        "seed": s.seed,
        "ignore_eos": s.ignore_eos,
        "detokenize": True,
    }
    if s.greedy:
        kwargs["top_k"] = 1  # greedy in the C++ sampler; temperature is then irrelevant
    else:
        kwargs.update(temperature=s.temperature, top_p=s.top_p, top_k=s.top_k)  # top_k 0: all logits
    if s.stop:
        kwargs["stop"] = list(s.stop)
        kwargs["include_stop_str_in_output"] = False
    if s.stop_token_ids:
        kwargs["stop_token_ids"] = list(s.stop_token_ids)
    if s.logprobs is not None:
        # 0 (the token's own alone) reads as off there (_get_output_config: return_log_probs=bool(logprobs)): ask
        # for 1 and keep the token's own (token_logprobs).
        kwargs["logprobs"] = max(1, s.logprobs)
    if "best_of" in s.requested_fields():
        # One answer of best_of sequences, ranked by cumulative log probability, which needs log probabilities.
        kwargs.update(n=1, best_of=s.best_of, logprobs=max(1, s.logprobs or 0))
    # Penalties and min_tokens only when they ask for something: None leaves the C++ runtime's neutral default.
    asked = s.requested_fields()
    for name in ("presence_penalty", "frequency_penalty", "repetition_penalty", "min_tokens"):
        if name in asked:
            kwargs[name] = getattr(s, name)
    return kwargs


def token_logprobs(
    token_ids: list[int], values: list[Any], alternatives: int, decode: Callable[[int], str]
) -> list[TokenLogprob]:
    """TensorRT-LLM's per-token logprobs as ours: each value is a ``{token_id: Logprob(logprob, rank)}`` of the
    top-k and the chosen token (TokenLogprobs, recent versions) or the chosen token's float (older 1.x). Floored at
    -9999 as trtllm-serve does (a -inf is no JSON); at most ``alternatives`` alternatives, likeliest first."""
    out = []
    for token_id, value in zip(token_ids, values, strict=False):
        if isinstance(value, dict):
            chosen = value.get(token_id)
            logprob = max(float(chosen.logprob), -9999.0) if chosen is not None else -9999.0
            ranked = sorted(value.items(), key=lambda item: -float(item[1].logprob))[:alternatives]
            top = tuple((decode(t), max(float(lp.logprob), -9999.0)) for t, lp in ranked)
        else:
            logprob, top = max(float(value), -9999.0), ()
        out.append(TokenLogprob(decode(token_id), logprob, top))
    return out


def iteration_load(stats: dict[str, Any] | None, open_requests: int) -> tuple[int, int, int, int]:
    """``(queued, running, kv_used, kv_total)`` from the last iteration stats and our open requests.

    Iteration stats only appear while the engine steps, so when idle the last entry is stale: our own
    count of open requests caps it (this engine is the only client of its LLM).
    """
    stats = stats or {}
    running = min(open_requests, int(stats.get("numActiveRequests", open_requests)))
    kv = stats.get("kvCacheStats") or {}
    return open_requests - running, running, int(kv.get("usedNumBlocks", 0)), int(kv.get("maxNumBlocks", 0))


def _finish_reason(request_finished: bool, reason: str | None) -> str | None:
    """Our finish reason for a step of a RequestOutput (None while it runs)."""
    if reason in _FINISH_REASONS:
        return _FINISH_REASONS[reason]
    # Finished without a reason we know ('not_finished' belongs to disaggregated serving): not a success.
    return FINISH_ABORT if request_finished else None


class TRTLLMEngine(Engine):
    """``tensorrt_llm.LLM`` behind the engine contract (see the module docstring for the API it relies on)."""

    def __init__(self, config: TRTLLMEngineConfig) -> None:
        self._config = config
        self._llm: Any = None
        self._sampling_params_cls: Any = None
        self._guided_params_cls: Any = None
        self._vocab_size = 0  # the logits' width (embedding_bias's size); 0: unknown
        self._context_length = 0
        self._max_batch_size = 0  # batch slots; 0: unknown (see _resolve_max_batch_size)
        self._checkpoint: CheckpointInfo | None = None
        self._open: dict[str, Any] = {}  # request_id -> RequestOutput, for stats and shutdown
        self._unprefilled = UnprefilledPrompts()  # stats' queued_prompt_tokens (the LLM API reports none)
        self._iteration_stats: dict[str, Any] | None = None
        self._stats_task: asyncio.Task | None = None
        self._request_error: type[Exception] = _NoRequestError
        self._rate = TokenRate()
        self._dead: str | None = None
        self._stopping: asyncio.Future[None] | None = None  # resolved by shutdown()
        self._submitted = asyncio.Event()  # set by the first request: TensorRT-LLM's event iterator exists from then
        self._kv: TrtllmKvEventTranslator | None = None  # with KV cache events on, once started
        self._kv_task: asyncio.Task | None = None
        self._kv_failures = 0
        self._reports_cached_tokens = False  # RequestOutput.cached_tokens is the PyTorch executor's
        self._cache_hit_tokens = 0  # prompt tokens taken from the cache, over requests whose count the engine said
        self._cache_prompt_tokens = 0  # prompt tokens of those requests

    @property
    def context_length(self) -> int:
        return self._context_length

    @property
    def kv_block_tokens(self) -> int | None:
        return self._kv.block_tokens if self._kv is not None else None

    def kv_events(self) -> KvEvents | None:
        return self._kv.drain() if self._kv is not None else None

    @property
    def checkpoint(self) -> CheckpointInfo | None:
        return self._checkpoint

    async def start(self) -> None:
        config = self._config
        self._stopping = asyncio.get_running_loop().create_future()
        model = await resolve_model_off_loop(config.model)
        # The checkpoint's loader is checked too: it refuses what the chosen backend cannot load.
        self._checkpoint = validate_engine_config(config, model=model, num_gpus=visible_gpu_count())
        engine_format = config.engine_format
        if engine_format == "auto":
            # Prebuilt engines and TensorRT-LLM checkpoints are inputs of the legacy backend only (llm_args.py
            # get_model_format: TLLM_ENGINE / TLLM_CKPT); the PyTorch LLM loads Hugging Face checkpoints.
            is_trt = self._checkpoint is not None and self._checkpoint.trtllm_loader() == "tensorrt"
            engine_format = "tensorrt_engine" if is_trt else "pytorch"
        api = import_tensorrt_llm(engine_format)
        self._sampling_params_cls, self._request_error = api.sampling_params_cls, api.request_error
        self._guided_params_cls = api.guided_decoding_params_cls
        if config.guided_decoding_backend is not None and self._guided_params_cls is None:
            raise EngineConfigError(
                f"engine.guided_decoding_backend is {config.guided_decoding_backend!r}, but the installed TensorRT-LLM "
                f"{getattr(importlib.import_module('tensorrt_llm'), '__version__', '?')} has no GuidedDecodingParams"
            )
        kwargs = llm_kwargs(config, model, engine_format, api.kv_cache_config_cls)
        llm_cls = api.llm_cls
        try:
            # Loading takes minutes and blocks: keep the replica's event loop (health checks) responsive.
            self._llm = await asyncio.to_thread(llm_cls, **kwargs)
        except (ValueError, TypeError, RuntimeError, OSError) as e:
            raise EngineConfigError(f"TensorRT-LLM could not load {model!r}: {e}") from e
        self._context_length = self._resolve_context_length()
        self._max_batch_size = self._resolve_max_batch_size()
        self._vocab_size = self._resolve_vocab_size(model)
        self._check_guided_decoder()
        self._reports_cached_tokens = engine_format == "pytorch"
        # The stats poll starts with the first request (_stream): before it TensorRT-LLM has no stats iterator.
        if config.kv_cache.kv_events:
            block_tokens = config.kv_cache.tokens_per_block
            if engine_format == "tensorrt_engine":
                block_tokens = engine_tokens_per_block(model) or block_tokens
            self._kv = TrtllmKvEventTranslator(block_tokens)
            self._kv_task = asyncio.create_task(self._poll_kv_events(), name="trtllm-kv-events")

    def _resolve_context_length(self) -> int:
        args = getattr(self._llm, "args", None)
        for candidate in (
            self._config.max_seq_len,
            getattr(args, "max_seq_len", None),
            self._checkpoint.max_seq_len if self._checkpoint else None,
        ):
            if isinstance(candidate, int) and candidate > 0:
                return candidate
        raise EngineConfigError(f"cannot tell the context length of {self._config.model!r}: set engine.max_seq_len.")

    def _check_guided_decoder(self) -> None:
        """Refuses to serve structured output the LLM would not enforce: TensorRT-LLM may drop the guided decoding
        backend it was given (newer builds: ``_apply_model_feature_fallbacks``, for architectures without support),
        and then generates unconstrained text for a guided request."""
        wanted = self._config.guided_decoding_backend
        if wanted is None:
            return
        args = getattr(self._llm, "args", None)
        got = getattr(args, "guided_decoding_backend", wanted) if args is not None else wanted
        got = getattr(got, "value", got)  # an enum on some versions
        if got != wanted:
            raise EngineConfigError(
                f"engine.guided_decoding_backend is {wanted!r}, but TensorRT-LLM built {self._config.model!r} "
                f"with guided_decoding_backend={got!r} (the model's architecture may not support guided decoding): "
                "structured output would not be enforced. Unset guided_decoding_backend for this variant."
            )

    def _resolve_vocab_size(self, model: str) -> int:
        """The logits' width, which embedding_bias must match: the checkpoint's vocab_size (config.json, or its
        text_config), else the tokenizer's length; 0 when neither says."""
        config_path = Path(model) / "config.json"
        with contextlib.suppress(OSError, ValueError):
            raw = json.loads(config_path.read_text())
            for source in (raw, raw.get("text_config") or {}):
                if isinstance(source.get("vocab_size"), int) and source["vocab_size"] > 0:
                    return int(source["vocab_size"])
        tokenizer = getattr(getattr(self._llm, "tokenizer", None), "tokenizer", None)
        with contextlib.suppress(TypeError):
            return len(tokenizer) if tokenizer is not None else 0
        return 0

    def _request_sampling_params(self, s: SamplingParams, max_tokens: int) -> Any:
        """``tensorrt_llm.SamplingParams`` for one request: :func:`sampling_kwargs`, the guide and the bias."""
        kwargs = sampling_kwargs(s, max_tokens)
        if s.guided is not None:
            kwargs["guided_decoding"] = self._guided_params_cls(**guided_decoding_kwargs(s.guided))
        if "logit_bias" in s.requested_fields():
            if not self._vocab_size:
                raise InvalidRequestError(
                    f"logit_bias needs the model's vocabulary size, which {self._config.model!r} does not state "
                    "(config.json vocab_size): remove it.",
                    param="logit_bias",
                )
            kwargs["embedding_bias"] = embedding_bias(s.logit_bias, self._vocab_size)
        return self._sampling_params_cls(**kwargs)

    def _resolve_max_batch_size(self) -> int:
        """The batch slots, known from the moment the LLM is built: ours, else the LLM's resolved arguments
        (TorchLlmArgs.max_batch_size defaults to 2048); 0 leaves it to the iteration stats
        (maxNumActiveRequests), which TensorRT-LLM only produces once requests run.

        The KV cache's size has no such early source in the LLM API this backend uses: it comes only with the
        iteration stats' kvCacheStats, so kv_blocks_total stays 0 ("unknown" to the router) until then."""
        candidate = self._config.max_batch_size or getattr(getattr(self._llm, "args", None), "max_batch_size", None)
        return candidate if isinstance(candidate, int) and candidate > 0 else 0

    def generate(self, request: GenerationRequest) -> AsyncGenerator[Delta, None]:
        return coalesce(self._stream(request), interval_s(self._config))

    async def _stream(self, request: GenerationRequest) -> AsyncIterator[Delta]:
        self._ensure_alive()
        validate_request(request, context_length=self._context_length)
        check_sampling_fields(request, self._config.sampling_fields(), "TensorRT-LLM in-process (backend trtllm)")
        n_prompt = len(request.prompt_token_ids)
        # The context bounds the output: finish with 'length' when it is full, as the contract says.
        max_tokens = min(request.sampling.max_tokens, self._context_length - n_prompt)
        params = self._request_sampling_params(request.sampling, max_tokens)
        try:
            output = self._llm.generate_async(request.prompt_token_ids, sampling_params=params, streaming=True)
        except (ValueError, TypeError) as e:  # the LLM API's checks of one request (llm.py _check_arguments)
            raise InvalidRequestError(f"TensorRT-LLM refused the request: {e}") from e
        except RuntimeError as e:  # "LLM is shutting down"
            raise EngineDeadError(f"TensorRT-LLM cannot take requests: {e}") from e
        self._open[request.request_id] = output
        self._unprefilled.add(request.request_id, n_prompt)
        self._submitted.set()
        if self._stats_task is None:
            self._stats_task = asyncio.create_task(self._poll_stats(), name="trtllm-stats")
        finished = False
        prefilling = True
        cached: int | None = None
        try:
            async for delta in self._deltas(request, output):
                if prefilling:  # its first output: the prompt is prefilled
                    prefilling = False
                    self._unprefilled.done(request.request_id)
                finished = delta.finished
                cached = delta.cached_tokens if delta.cached_tokens is not None else cached
                yield delta
        except (InvalidRequestError, EngineDeadError):
            raise
        except Exception as e:
            if isinstance(e, self._request_error):  # this request's error, not the engine's
                raise InvalidRequestError(f"TensorRT-LLM refused the request: {e}") from e
            raise EngineDeadError(f"TensorRT-LLM failed during request {request.request_id}: {e}") from e
        finally:
            self._open.pop(request.request_id, None)
            self._unprefilled.done(request.request_id)
            if cached is not None:
                self._cache_hit_tokens += cached
                self._cache_prompt_tokens += n_prompt
            if not finished:
                # Closing or cancelling the stream: without abort() the executor generates on.
                with contextlib.suppress(Exception):
                    output.abort()

    async def _deltas(self, request: GenerationRequest, output: Any) -> AsyncIterator[Delta]:
        stream = OutputStream(request, self._rate)
        seen_text = 0  # characters of outputs[0].text fed to the output stream
        sent_ids = 0
        sent_logprobs = 0
        want_logprobs = request.sampling.logprobs
        best_of = "best_of" in request.sampling.requested_fields()
        steps = aiter(output)
        while True:
            try:
                out = await self._unless_shut_down(anext(steps))  # the same RequestOutput, mutated, each step
            except StopAsyncIteration:
                break
            if best_of and not out.finished:
                continue  # outputs[0] is whichever sequence leads now: the answer is read once, whole
            completion = out.outputs[0]
            text, ids = completion.text, list(completion.token_ids)
            new_ids = ids[sent_ids:]
            sent_ids = max(sent_ids, len(ids))
            logprobs = None
            if want_logprobs is not None:
                values = list(getattr(completion, "logprobs", None) or [])
                logprobs = token_logprobs(new_ids, values[sent_logprobs:], want_logprobs, self._decode_token)
                sent_logprobs = max(sent_logprobs, len(values))
            finish = _finish_reason(out.finished, completion.finish_reason)
            if finish == FINISH_ABORT and self._dead is not None:
                raise EngineDeadError(self._dead)  # aborted by shutdown(), not by its consumer
            delta = stream.from_text(
                text[seen_text:],
                new_ids,
                finish=finish,
                completion_tokens=len(ids),
                tokens=len(new_ids),
                # The C++ stop words path truncates only the token ids: that string's start stays in the text.
                engine_stopped_at_string=finish == FINISH_STOP and isinstance(completion.stop_reason, str),
                logprobs=logprobs or None,
            )
            seen_text = max(seen_text, len(text))
            if delta is None:
                continue
            delta.cached_tokens = self._cached_tokens(out)
            if delta.finished and finish is None:  # a stop string TensorRT-LLM did not catch (it cuts whole ones)
                output.abort()
            yield delta
            if delta.finished:
                return
        # The iterator ended without a finish reason: the executor dropped the request.
        raise EngineDeadError(f"TensorRT-LLM ended request {request.request_id} without a finish reason")

    def _cached_tokens(self, output: Any) -> int | None:
        """The prompt tokens the engine took from its KV cache for this request, where it says
        (``RequestOutput.cached_tokens``; see the module docstring)."""
        value = getattr(output, "cached_tokens", None) if self._reports_cached_tokens else None
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def _decode_token(self, token_id: int) -> str:
        """One token's text, as trtllm-serve writes it in logprobs (``tokenizer.decode(token_id)``); the id
        itself where the LLM has no tokenizer (skip_tokenizer_init)."""
        tokenizer = getattr(self._llm, "tokenizer", None)
        return str(tokenizer.decode([token_id])) if tokenizer is not None else f"token_id:{token_id}"

    async def _unless_shut_down(self, step: Any) -> Any:
        """Awaits one step of a request, or raises EngineDeadError when shutdown() stops the engine first.

        After LLM.shutdown() no further step may ever arrive, and a stream must not hang on it.
        """
        task = asyncio.ensure_future(step)
        try:
            await asyncio.wait((task, self._stopping), return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            task.cancel()
            raise
        if task.done():
            return task.result()
        task.cancel()
        raise EngineDeadError(self._dead or "the TensorRT-LLM engine was shut down")

    async def _poll_stats(self) -> None:
        interval = self._config.stats_interval_s
        stopping = self._stopping
        assert stopping is not None
        while not stopping.done():
            try:
                # Entries are consumed when read; keep the newest. The iterator ends once no entry came for
                # stats_timeout_s and then stays ended until the next request: the timeout must outlast any
                # iteration, or a long one would freeze the stats while requests run.
                async for entry in self._llm.get_stats_async(timeout=self._config.stats_timeout_s):
                    self._iteration_stats = entry
            except asyncio.CancelledError:
                raise
            except Exception as e:  # stats are best effort: never let them take the engine down
                logger.warning("TensorRT-LLM iteration stats unavailable: %s", e)
            await asyncio.wait((stopping,), timeout=interval)

    async def _poll_kv_events(self) -> None:
        stopping = self._stopping
        assert stopping is not None and self._kv is not None
        first = asyncio.ensure_future(self._submitted.wait())
        try:
            await asyncio.wait((stopping, first), return_when=asyncio.FIRST_COMPLETED)
        finally:
            first.cancel()
        rpc = getattr(getattr(self._llm, "args", None), "orchestrator_type", None) == "rpc"
        timeout = 0.0 if rpc else KV_EVENTS_TIMEOUT_S  # see the module docstring
        while not stopping.done():
            try:
                # Each event as it comes; the iterator ends after KV_EVENTS_TIMEOUT_S without one, and once ended
                # returns at once until the next request (IterationResult._done, mark_undone).
                async for event in self._llm.get_kv_cache_events_async(timeout=timeout):
                    self._kv.feed_one(event)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # events are best effort: never let them take the engine down
                self._kv_failures += 1
                log = logger.warning if self._kv_failures == 1 else logger.debug
                log("TensorRT-LLM KV cache events unavailable: %r", e)
            await asyncio.wait((stopping,), timeout=KV_EVENTS_POLL_S)

    def stats(self) -> EngineStats:
        queued, running, kv_used, kv_total = iteration_load(self._iteration_stats, len(self._open))
        # kvCacheStats carries tokensPerBlock beside the block counts (TensorRT-LLM's own test of the iteration
        # stats asserts it, tests/unittest/llmapi); without it the context is unknown (0).
        tokens_per_block = int(((self._iteration_stats or {}).get("kvCacheStats") or {}).get("tokensPerBlock", 0))
        max_running = self._max_batch_size or int((self._iteration_stats or {}).get("maxNumActiveRequests", 0))
        now = time.monotonic()
        return EngineStats(
            queued_requests=queued,
            running_requests=running,
            queued_prompt_tokens=self._unprefilled.total,
            kv_blocks_used=kv_used,
            kv_blocks_total=kv_total,
            context_tokens=kv_used * tokens_per_block,  # whole blocks: a slight overcount
            tokens_per_s=self._rate.rate(now),
            recent_tpot_ms=self._rate.tpot_ms(now),
            recent_decode_batch=self._rate.decode_batch(now),
            healthy=self._dead is None and self._llm is not None,
            context_length=self._context_length,
            max_running_requests=max_running,
            cached_blocks=len(self._kv) if self._kv is not None else 0,
            cache_hit_tokens=self._cache_hit_tokens,
            cache_prompt_tokens=self._cache_prompt_tokens,
        )

    async def check_health(self) -> None:
        self._ensure_alive()
        executor = getattr(self._llm, "_executor", None)
        if executor is not None and getattr(executor, "is_shutdown", lambda: False)():
            self._dead = "TensorRT-LLM's executor has shut down"
            raise EngineDeadError(self._dead)

    def _ensure_alive(self) -> None:
        if self._llm is None:
            raise EngineDeadError(self._dead or "the TensorRT-LLM engine is not started")
        if self._dead is not None:
            raise EngineDeadError(self._dead)

    async def shutdown(self) -> None:
        self._dead = "the TensorRT-LLM engine was shut down"
        if self._stopping is not None and not self._stopping.done():
            self._stopping.set_result(None)
        for task, pause_s in ((self._stats_task, self._config.stats_interval_s), (self._kv_task, KV_EVENTS_POLL_S)):
            if task is not None:
                task.cancel()
                # Bounded: Python 3.11's wait_for (inside TensorRT-LLM's result queues) can swallow a cancel;
                # the loop then ends by itself at its next turn because _stopping is resolved.
                await asyncio.wait((task,), timeout=pause_s + 1)
        for output in list(self._open.values()):
            with contextlib.suppress(Exception):
                output.abort()
        llm, self._llm = self._llm, None
        if llm is not None:
            await asyncio.to_thread(llm.shutdown)
