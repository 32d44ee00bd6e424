"""The ``openai_server`` backend: an engine server process beside the replica, spoken to over OpenAI's API.

TensorRT-LLM 1.2 pins fastapi<=0.121 while ray[serve] 2.60 needs fastapi>=0.133, so in practice TensorRT-LLM
lives in its own environment. Each replica then starts its own ``trtllm-serve`` (any command template) on
the GPUs Ray gave it (the child inherits ``CUDA_VISIBLE_DEVICES``), on a free loopback port, and streams
``POST /v1/completions``. Or it talks to an already running server (``url``: vLLM, SGLang, trtllm-serve).

Contract details and why:

* Cancelling the stream closes the HTTP response, which closes the connection: trtllm-serve, vLLM and
  transformers serve all abort a request whose client disconnected. There is no separate abort call.
* SSE is parsed with httpx-sse; ``data: [DONE]`` ends a stream, but a stream may also just end after its
  finishing chunk (transformers serve sends no [DONE]). A stream that ends *before* a finish reason, or
  whose connection breaks, means the server died: ``EngineDeadError``.
* Stop strings are sent to the server and also matched here: servers differ in whether they cut the stop
  string and whether they leak its first characters while it is still undecided (transformers includes
  it; TensorRT-LLM streams a prefix before it cuts), so the text we pass on holds both back.
* Only standard OpenAI fields are sent unless ``sampling_extensions`` is on: strict servers (transformers
  serve) answer 422 to anything else.
* The OpenAI completions protocol returns text, not token ids; deltas carry ids only when the server adds
  them (vLLM's ``token_ids``). Every request asks for the standard final usage chunk
  (``stream_options.include_usage``; trtllm-serve sends usage only when asked, serve/postprocess_handlers.py), and
  the finishing delta waits for it, so the final ``completion_tokens`` is the server's count; with
  ``sampling_extensions`` usage comes in every chunk (``continuous_usage_stats``, trtllm-serve and vLLM), so the
  running count is the server's too; otherwise it counts chunks until then.
* KV cache events (``kv_cache_events``): trtllm-serve's ``POST /kv_cache_events`` (serve/openai_server.py, "TODO:
  workaround before ETCD support") drains ``get_kv_cache_events_async(timeout)``: each event is returned once, the
  answer waits until ``timeout`` passes without a new event (2 s in 1.x builds, 0 in newer ones), and before the
  first request it fails (``aget_kv_events`` asserts, executor.py). So one poll is in flight at a time, every
  ``KV_EVENTS_POLL_S``, with a long timeout; a failed poll is tried again. Events a given-up poll's handler read are
  lost to us, which their ids show (engines/trtllm_kv_events.py then forgets the blocks it can no longer vouch for).
  The server is told to keep events with ``kv_cache_config.event_buffer_max_size`` in the LLM API options.
* Prompt tokens served from the cache: newer trtllm-serve builds put ``prompt_tokens_details.cached_tokens`` in
  every usage (serve/postprocess_handlers.py, from ``RequestOutput.cached_tokens``), vLLM too where enabled; the
  finishing delta carries it. Older builds send none: it stays unknown (None).
* Load: trtllm-serve's ``/metrics`` (iteration stats JSON) answers only after 2 s without a new iteration
  (``get_stats_async(2)`` in serve/openai_server.py), i.e. late or never while it is busy. So one poll is in
  flight at a time with a long timeout, and a reading counts only while the server keeps answering; while it
  does not, load is this replica's open streams against the batch slots (docs/tensorrt-llm.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from httpx_sse import EventSource

from core.errors import EngineConfigError, EngineDeadError, InvalidRequestError, OverloadedError
from engines.checkpoint import CheckpointInfo, validate_engine_config, visible_gpu_count
from engines.coalesce import coalesce, interval_s
from engines.config import OpenAIServerEngineConfig, is_trtllm_serve
from engines.kv_blocks import KvEvents
from engines.model_ref import resolve_model_off_loop
from engines.output import OutputStream
from engines.ports import free_port
from engines.protocol import (
    FINISH_ABORT,
    FINISH_LENGTH,
    FINISH_STOP,
    Delta,
    Engine,
    EngineStats,
    GenerationRequest,
    SamplingParams,
    TokenLogprob,
    check_sampling_fields,
    validate_request,
)
from engines.rate import TokenRate
from engines.trtllm import iteration_load, response_format
from engines.trtllm_kv_events import TrtllmKvEventTranslator
from engines.unprefilled import UnprefilledPrompts

logger = logging.getLogger(__name__)

_LOG_TAIL_BYTES = 4000
KV_EVENTS_POLL_S = 0.2  # the pause between two reads of /kv_cache_events
# Servers' finish reasons -> ours; another (vLLM's, OpenAI's "tool_calls", ...) counts as a stop. TensorRT-LLM
# passes CompletionOutput.finish_reason through (serve/postprocess_handlers.py): 'timeout' (FinishReason.TIMED_OUT)
# and 'not_finished' (disaggregated context-only) are not successes.
_FINISH_REASONS = {
    "stop": FINISH_STOP,
    "length": FINISH_LENGTH,
    "abort": FINISH_ABORT,
    "cancelled": FINISH_ABORT,
    "timeout": FINISH_ABORT,
    "not_finished": FINISH_ABORT,
}


def server_argv(command: list[str], **fields: Any) -> list[str]:
    """The command template with its placeholders filled; EngineConfigError for one without a value (a None
    would render as an empty argument, which trtllm-serve's int flags refuse at start)."""
    try:
        argv = [arg.format(**fields) for arg in command]
    except KeyError as e:
        raise EngineConfigError(f"engine.command uses {{{e.args[0]}}}, which has no value here") from None
    unset = sorted(name for name, value in fields.items() if value is None and "{" + name + "}" in " ".join(command))
    if unset:
        raise EngineConfigError(f"engine.command uses {{{unset[0]}}}, but engine.{unset[0]} is not set")
    return argv


def parse_logprobs(block: Any, alternatives: int = 20) -> list[TokenLogprob] | None:
    """A completions chunk's ``logprobs`` (OpenAI's parallel lists: tokens, token_logprobs, top_logprobs) as one
    entry per token with at most ``alternatives`` alternatives, likeliest first; None when the chunk has none.
    Entries follow the server's tokens: a stop string we cut from the text keeps its tokens' entries."""
    if not isinstance(block, dict) or not isinstance(block.get("tokens"), list):
        return None
    tokens = block["tokens"]
    values = block.get("token_logprobs") or [None] * len(tokens)
    tops = block.get("top_logprobs") or [None] * len(tokens)
    return [
        TokenLogprob(
            token=str(token),
            logprob=float(value) if value is not None else -9999.0,  # trtllm-serve's floor for an unscored token
            top=tuple(sorted(((str(t), float(lp)) for t, lp in (top or {}).items()), key=lambda x: -x[1]))[
                :alternatives
            ],
        )
        for token, value, top in zip(tokens, values, tops, strict=False)
    ]


def completion_body(
    request: GenerationRequest,
    *,
    model: str,
    prompt: list[int] | str,
    max_tokens: int,
    extensions: bool,
    trtllm_serve: bool = False,
) -> dict[str, Any]:
    """The ``/v1/completions`` request for ``request``: standard fields, plus extensions when allowed."""
    s: SamplingParams = request.sampling
    body: dict[str, Any] = {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,  # always: servers' defaults are tiny (16 in OpenAI's API)
        "temperature": s.temperature,
        "top_p": s.top_p,
        "stream": True,
    }
    # The server's count of tokens, not of chunks: a standard final usage-only chunk after the finish chunk (read
    # before the finish is passed on), and with extensions usage in every chunk. transformers serve 5.25 streams
    # text pieces that hold several tokens or none, so counting chunks undercounts.
    body["stream_options"] = {"include_usage": True, **({"continuous_usage_stats": True} if extensions else {})}
    asked = s.requested_fields()
    if s.seed is not None:
        body["seed"] = s.seed
    if s.stop:
        body["stop"] = list(s.stop)
    if "presence_penalty" in asked:
        body["presence_penalty"] = s.presence_penalty
    if "frequency_penalty" in asked:
        body["frequency_penalty"] = s.frequency_penalty
    if "logit_bias" in asked:
        body["logit_bias"] = {str(token): bias for token, bias in s.logit_bias.items()}  # JSON keys are strings
    if s.guided is not None:  # only with structured_output (check_sampling_fields)
        body["response_format"] = response_format(s.guided, trtllm_serve=trtllm_serve)
    # Greedy as top_k 1 where allowed: temperature 0 alone is greedy on TensorRT-LLM main but not under 1.0's
    # rule (SamplingParams._greedy_decoding: top_k None or 1 and top_p None or 0).
    top_k = 1 if s.greedy and extensions else s.top_k or None
    wanted: dict[str, Any] = {
        # Completions' integer form. 0 (the token's own alone) reads as off in TensorRT-LLM (return_log_probs =
        # bool(logprobs)), so 1 is asked for and the alternatives are trimmed back (parse_logprobs).
        "logprobs": None if s.logprobs is None else max(1, s.logprobs),
        "top_k": top_k,
        "ignore_eos": s.ignore_eos or None,
        "stop_token_ids": s.stop_token_ids,
        "repetition_penalty": s.repetition_penalty if "repetition_penalty" in asked else None,
        "min_tokens": s.min_tokens or None,
    }
    wanted = {k: v for k, v in wanted.items() if v}
    if wanted and not extensions:
        names = ", ".join(wanted)
        raise InvalidRequestError(
            f"this model's engine server accepts only standard OpenAI sampling fields: {names} not supported.",
            param=next(iter(wanted)),
        )
    body.update(wanted)
    return body


@dataclass(slots=True)
class ServerLoad:
    """What the server's metrics endpoint said last (None: it does not say)."""

    queued: int | None = None
    running: int | None = None
    kv_used: int = 0
    kv_total: int = 0
    max_running: int = 0  # batch slots (trtllm-serve's maxNumActiveRequests); 0: not said
    # trtllm-serve's iteration stats: this replica is the server's only client, so its open streams bound the
    # requests (an idle server's last entry is stale).
    bounded_by_open: bool = False


def parse_metrics(content_type: str, body: str, open_requests: int) -> ServerLoad | None:
    """Load from trtllm-serve's ``/metrics`` (iteration stats JSON) or Prometheus text (vLLM); None if neither."""
    if "json" in content_type:
        entries = json.loads(body)
        if isinstance(entries, list) and entries and isinstance(entries[-1], dict):
            queued, running, kv_used, kv_total = iteration_load(entries[-1], open_requests)
            max_running = int(entries[-1].get("maxNumActiveRequests", 0))
            return ServerLoad(queued, running, kv_used, kv_total, max_running, bounded_by_open=True)
        return None  # no iteration since the last read: entries are consumed when read
    from prometheus_client.parser import text_string_to_metric_families

    values: dict[str, float] = {}
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            values[sample.name] = values.get(sample.name, 0.0) + sample.value
    if "vllm:num_requests_running" not in values:
        return None
    kv = values.get("vllm:kv_cache_usage_perc", values.get("vllm:gpu_cache_usage_perc", 0.0))
    return ServerLoad(
        queued=int(values.get("vllm:num_requests_waiting", 0)),
        running=int(values["vllm:num_requests_running"]),
        kv_used=round(kv * 1000),  # a fraction, reported in thousandths of the cache
        kv_total=1000,
    )


def usage_cached_tokens(usage: dict[str, Any]) -> int | None:
    """``usage.prompt_tokens_details.cached_tokens`` (OpenAI's, and trtllm-serve's UsageInfo), or None if absent."""
    details = usage.get("prompt_tokens_details")
    value = details.get("cached_tokens") if isinstance(details, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    # Ray kills a failed replica with SIGKILL; without this its server would live on, holding the GPUs.
    if sys.platform == "linux":
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class OpenAIServerEngine(Engine):
    """A per-replica engine server process (or a remote URL) behind the engine contract."""

    def __init__(self, config: OpenAIServerEngineConfig) -> None:
        self._config = config
        self._process: subprocess.Popen | None = None
        self._log_path: Path | None = None
        self._client: httpx.AsyncClient | None = None
        self._base_url = ""
        self._served_model = config.served_model_name or config.model
        self._tokenizer: Any = None
        self._checkpoint: CheckpointInfo | None = None
        self._context_length = 0
        self._open = 0
        self._unprefilled = UnprefilledPrompts()  # stats' queued_prompt_tokens (the server reports none)
        self._load: ServerLoad | None = None
        self._load_at = 0.0  # monotonic time of the last answer of the metrics endpoint
        self._max_running = config.batch_slots() or 0  # batch slots: configured, else learnt from the metrics
        self._options_path: Path | None = None  # the YAML file of {llm_api_options}
        self._stats_task: asyncio.Task | None = None
        self._kv = TrtllmKvEventTranslator(config.kv_block_tokens()) if config.kv_events_enabled() else None
        self._kv_task: asyncio.Task | None = None
        self._submitted = False  # a request was sent: the server's event iterator exists from then
        self._cache_hit_tokens = 0  # prompt tokens taken from the cache, over requests whose count the server said
        self._cache_prompt_tokens = 0  # prompt tokens of those requests
        self._rate = TokenRate()
        self._closed: str | None = None

    @property
    def context_length(self) -> int:
        return self._context_length

    @property
    def base_url(self) -> str:
        return self._base_url

    @property
    def kv_block_tokens(self) -> int | None:
        return self._kv.block_tokens if self._kv is not None else None

    def kv_events(self) -> KvEvents | None:
        return self._kv.drain() if self._kv is not None else None

    @property
    def process(self) -> subprocess.Popen | None:
        """The managed server process (None with ``url``)."""
        return self._process

    @property
    def log_path(self) -> Path | None:
        """Where the managed server's stdout and stderr go."""
        return self._log_path

    async def start(self) -> None:
        config = self._config
        model = await resolve_model_off_loop(config.model)
        self._served_model = config.served_model_name or model
        # trtllm-serve's backend must be able to load it; a remote server's GPUs are not ours to count.
        self._checkpoint = validate_engine_config(
            config, model=model, num_gpus=None if config.url else visible_gpu_count()
        )
        if config.prompt_format == "text":
            self._tokenizer = await asyncio.to_thread(_load_tokenizer, config.tokenizer or model)
        if config.url:
            self._base_url = config.url.rstrip("/")
        else:
            port = free_port()
            self._base_url = f"http://127.0.0.1:{port}"
            argv = server_argv(
                config.command,
                model=model,
                host="127.0.0.1",
                port=port,
                tp=config.tensor_parallel_size,
                max_seq_len=config.max_seq_len,
                llm_api_options=self._write_llm_api_options(),
            )
            self._start_process(argv)
        self._client = httpx.AsyncClient(
            base_url=self._base_url,
            timeout=httpx.Timeout(config.stream_idle_timeout_s, connect=config.health_timeout_s),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=32),
        )
        try:
            await self._wait_until_healthy()
            self._context_length = await self._resolve_context_length()
            # One read before start() returns: whatever the server says about its capacity (a vLLM KV cache)
            # is in stats() from the moment this replica counts as ready. Bounded: a busy trtllm-serve may hold it.
            has_metrics = await self._read_metrics(timeout_s=self._config.health_timeout_s)
        except BaseException:
            await self.shutdown()
            raise
        if has_metrics:
            self._stats_task = asyncio.create_task(self._poll_metrics(), name="openai-server-metrics")
        if self._kv is not None:
            self._kv_task = asyncio.create_task(self._poll_kv_events(), name="openai-server-kv-events")

    def _write_llm_api_options(self) -> str | None:
        """Writes llm_api_options to a YAML file for {llm_api_options}; its path (None: the command has none)."""
        if "{llm_api_options}" not in " ".join(self._config.command):
            return None
        import yaml

        fd, name = tempfile.mkstemp(prefix="trtllm-llm-api-options-", suffix=".yaml")
        with os.fdopen(fd, "w") as f:
            yaml.safe_dump(self._config.server_llm_api_options(), f)
        self._options_path = Path(name)
        return name

    def _start_process(self, argv: list[str]) -> None:
        fd, log_name = tempfile.mkstemp(prefix="openai-server-", suffix=".log")
        self._log_path = Path(log_name)
        env = {**os.environ, **self._config.env}
        try:
            # Its own process group (session): shutdown() signals the server and its workers together.
            self._process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=fd,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        except OSError as e:
            self._log_path.unlink(missing_ok=True)
            raise EngineConfigError(
                f"cannot start the engine server {argv[0]!r}: {e}. Is it installed in this environment "
                "(or set engine.url to a running server)? See docs/tensorrt-llm.md."
            ) from None
        finally:
            os.close(fd)
        logger.info("started engine server pid %s: %s (log %s)", self._process.pid, argv, self._log_path)

    async def _wait_until_healthy(self) -> None:
        deadline = time.monotonic() + self._config.startup_timeout_s
        pause = 0.1
        while True:
            exited = self._exit_reason()
            if exited is not None:
                raise EngineConfigError(f"the engine server exited while starting: {exited}")
            try:
                response = await self._client_or_dead().get("/health", timeout=self._config.health_timeout_s)
                if response.status_code == 200:
                    return
            except httpx.TransportError:
                pass  # not listening yet
            if time.monotonic() > deadline:
                raise EngineConfigError(
                    f"the engine server at {self._base_url} did not answer /health within "
                    f"{self._config.startup_timeout_s:g} s{self._log_tail_note()}"
                )
            await asyncio.sleep(pause)
            pause = min(pause * 2, 2.0)

    async def _resolve_context_length(self) -> int:
        if self._config.max_seq_len is not None:
            return self._config.max_seq_len
        if self._checkpoint is not None and self._checkpoint.max_seq_len:
            return self._checkpoint.max_seq_len
        with contextlib.suppress(httpx.HTTPError, ValueError, KeyError, IndexError, TypeError):
            # vLLM and SGLang say it in /v1/models.
            models = (await self._client_or_dead().get("/v1/models")).json()["data"]
            max_model_len = next((m.get("max_model_len") for m in models if m.get("max_model_len")), None)
            if max_model_len:
                return int(max_model_len)
        raise EngineConfigError(
            f"cannot tell the context length of {self._config.model!r} (no local config.json and the server "
            "does not say): set engine.max_seq_len."
        )

    def generate(self, request: GenerationRequest) -> AsyncGenerator[Delta, None]:
        return coalesce(self._stream(request), interval_s(self._config))

    async def _stream(self, request: GenerationRequest) -> AsyncIterator[Delta]:
        client = self._client_or_dead()
        validate_request(request, context_length=self._context_length)
        check_sampling_fields(request, self._config.sampling_fields(), "the engine server (backend openai_server)")
        n_prompt = len(request.prompt_token_ids)
        prompt: list[int] | str = request.prompt_token_ids
        if self._tokenizer is not None:
            prompt = self._tokenizer.decode(request.prompt_token_ids, skip_special_tokens=True)
        body = completion_body(
            request,
            model=self._served_model,
            prompt=prompt,
            max_tokens=min(request.sampling.max_tokens, self._context_length - n_prompt),
            extensions=self._config.sampling_extensions,
            trtllm_serve=self._config.url is None and is_trtllm_serve(self._config.command),
        )
        self._open += 1
        self._submitted = True
        self._unprefilled.add(request.request_id, n_prompt)
        prefilling = True
        cached: int | None = None
        try:
            async with client.stream("POST", "/v1/completions", json=body) as response:
                await _raise_for_status(response)
                async for delta in self._deltas(request, response):
                    if prefilling:  # its first output: the prompt is prefilled
                        prefilling = False
                        self._unprefilled.done(request.request_id)
                    cached = delta.cached_tokens if delta.cached_tokens is not None else cached
                    yield delta
        except httpx.TransportError as e:  # connection refused / reset / cut mid-body / idle timeout
            await self._let_a_dying_server_exit()
            raise EngineDeadError(self._dead_reason(f"the engine server's stream broke ({e!r})")) from None
        finally:
            self._open -= 1
            self._unprefilled.done(request.request_id)
            if cached is not None:
                self._cache_hit_tokens += cached
                self._cache_prompt_tokens += n_prompt

    async def _deltas(self, request: GenerationRequest, response: httpx.Response) -> AsyncIterator[Delta]:
        stream = OutputStream(request, self._rate)
        asked = request.sampling.logprobs
        completion_tokens = 0
        cached: int | None = None  # prompt tokens the server took from its cache, once a usage says
        # The finishing chunk's delta (all but its count) and its count, until the usage chunk that follows it.
        held: Callable[..., Delta | None] | None = None
        async for event in EventSource(response).aiter_sse():
            if event.data.strip() == "[DONE]":
                break
            chunk = json.loads(event.data)
            if "error" in chunk or chunk.get("object") == "error":
                error = chunk.get("error", chunk.get("message"))
                raise EngineDeadError(f"the engine server failed mid-stream: {error}")
            usage = chunk.get("usage") or {}
            said = usage_cached_tokens(usage)
            cached = said if said is not None else cached
            if held is not None:
                # After the finish only the usage-only chunk comes (stream_options.include_usage).
                completion_tokens = usage.get("completion_tokens") or completion_tokens
                break
            choices = chunk.get("choices") or [{}]
            choice: dict[str, Any] = next((c for c in choices if c.get("index", 0) == 0), {})
            piece = choice.get("text") or ""
            ids = list(choice.get("token_ids") or [])
            tokens = len(ids) or (1 if piece else 0)  # a chunk without ids: one token, until usage says more
            completion_tokens += tokens
            completion_tokens = usage.get("completion_tokens") or completion_tokens
            logprobs = parse_logprobs(choice.get("logprobs"), asked) if asked is not None else None
            if logprobs is None and asked is not None and (piece or ids):
                # It accepted the field and sent none: dropping it silently is what this project refuses to do.
                raise EngineDeadError("the engine server sent no logprobs although the request asked for them")
            reason = choice.get("finish_reason")
            finish = None if reason is None else _FINISH_REASONS.get(reason, FINISH_STOP)
            output = functools.partial(
                stream.from_text,
                piece,
                ids,
                finish=finish,
                tokens=tokens,
                # trtllm-serve and vLLM say stop_reason; TensorRT-LLM's stop words truncate only the token ids, so
                # that string's start was streamed before the finishing chunk.
                engine_stopped_at_string=finish == FINISH_STOP and isinstance(choice.get("stop_reason"), str),
                logprobs=logprobs,
            )
            if finish is not None and not usage:
                held = output  # its count may still be the chunks': the usage chunk follows at once
                continue
            delta = output(completion_tokens=completion_tokens)
            if delta is None:
                continue
            delta.cached_tokens = cached
            yield delta
            if delta.finished:
                return  # a stop string we cut ourselves: leaving closes the stream, the server aborts
        if held is not None:
            delta = held(completion_tokens=completion_tokens)
            if delta is not None:
                delta.cached_tokens = cached
                yield delta
                if delta.finished:
                    return
        raise EngineDeadError(self._dead_reason("the engine server ended the stream before the request finished"))

    async def _poll_metrics(self) -> None:
        # One poll in flight at a time: trtllm-serve's /metrics handler keeps reading its stats until 2 s pass
        # without a new one, so a poll given up (and the next one started) would leave two readers splitting the
        # consumed-on-read entries between them.
        while True:
            await asyncio.sleep(self._config.stats_interval_s)
            if not await self._read_metrics(timeout_s=self._config.metrics_timeout_s):
                return

    async def _read_metrics(self, *, timeout_s: float) -> bool:
        """Reads the server's load once into ``self._load``; False when there is nothing to poll (no
        ``metrics_path``, or the server has no such endpoint)."""
        path = self._config.metrics_path
        if path is None:
            return False
        try:
            response = await self._client_or_dead().get(path, timeout=httpx.Timeout(timeout_s, connect=5.0))
            if response.status_code == 404:
                logger.info("engine server has no %s: load falls back to open streams", path)
                return False
            if response.status_code == 200:
                self._load_at = time.monotonic()
                load = parse_metrics(response.headers.get("content-type", ""), response.text, self._open)
                if load is not None:
                    self._load = load
                    self._max_running = self._config.batch_slots() or load.max_running or self._max_running
        except asyncio.CancelledError:
            raise
        except Exception as e:  # metrics are best effort; health checks catch a dead server
            logger.debug("engine server metrics unavailable: %r", e)
        return True

    async def _poll_kv_events(self) -> None:
        # One poll in flight at a time: the events a poll's handler reads are gone from the server whether or not
        # its answer reaches us. Long timeout: a 1.x handler answers only 2 s after the last event.
        kv = self._kv
        assert kv is not None
        timeout = httpx.Timeout(self._config.metrics_timeout_s, connect=5.0)
        warned = False
        while True:
            await asyncio.sleep(KV_EVENTS_POLL_S)
            try:
                response = await self._client_or_dead().post("/kv_cache_events", timeout=timeout)
            except asyncio.CancelledError:
                raise
            except EngineDeadError:
                return
            except Exception as e:  # best effort; health checks catch a dead server
                logger.debug("engine server KV cache events unavailable: %r", e)
                continue
            if response.status_code in (404, 405):
                logger.warning("engine server has no POST /kv_cache_events: the router approximates its cache")
                self._kv = None  # kv_block_tokens None: nothing will be said of this cache
                return
            if response.status_code != 200:
                # Before the first request trtllm-serve fails it (500): expected. Later failures are logged once.
                log = logger.debug if warned or not self._submitted else logger.warning
                warned = warned or self._submitted
                log("engine server's /kv_cache_events answered %s: %s", response.status_code, response.text[:200])
                continue
            try:
                events = response.json()
            except ValueError:
                continue
            if isinstance(events, list):
                kv.feed(events)

    def _current_load(self) -> ServerLoad | None:
        """The last reading while the server keeps answering its metrics endpoint, else None.

        A trtllm-serve that is busy holds /metrics (it answers 2 s after its last new iteration): the reading
        from before is then stale in the direction that matters (it shows the server emptier than it is)."""
        if self._load is None:
            return None
        fresh_s = 3 * self._config.stats_interval_s + self._config.health_timeout_s
        return self._load if time.monotonic() - self._load_at <= fresh_s else None

    def stats(self) -> EngineStats:
        load = self._current_load()
        if load is not None and load.running is not None:
            queued, running = load.queued or 0, load.running
            if load.bounded_by_open:
                running = min(running, self._open)
                queued = self._open - running
            kv_used, kv_total = load.kv_used, load.kv_total
        else:
            # No current reading: our own streams are the server's requests (this replica is its only client),
            # running up to the batch slots and queued beyond them; the KV cache is unknown (0).
            running = min(self._open, self._max_running) if self._max_running else self._open
            queued, kv_used, kv_total = self._open - running, 0, 0
        now = time.monotonic()
        return EngineStats(
            queued_requests=queued,
            running_requests=running,
            queued_prompt_tokens=self._unprefilled.total,
            kv_blocks_used=kv_used,
            kv_blocks_total=kv_total,
            tokens_per_s=self._rate.rate(now),
            recent_tpot_ms=self._rate.tpot_ms(now),
            recent_decode_batch=self._rate.decode_batch(now),
            healthy=self._closed is None and self._exit_reason() is None,
            context_length=self._context_length,
            max_running_requests=self._max_running,
            cached_blocks=len(self._kv) if self._kv is not None else 0,
            cache_hit_tokens=self._cache_hit_tokens,
            cache_prompt_tokens=self._cache_prompt_tokens,
        )

    async def check_health(self) -> None:
        client = self._client_or_dead()
        try:
            response = await client.get("/health", timeout=self._config.health_timeout_s)
        except httpx.HTTPError as e:
            raise EngineDeadError(self._dead_reason(f"the engine server's /health failed ({e!r})")) from None
        if response.status_code != 200:
            raise EngineDeadError(
                self._dead_reason(f"the engine server's /health answered {response.status_code}: {response.text}")
            )

    async def _let_a_dying_server_exit(self) -> None:
        # A killed server's sockets close a moment before it can be reaped: give it that moment, so that
        # the error says the server died (and how) rather than only that the stream broke.
        if self._process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                await asyncio.to_thread(self._process.wait, 1.0)

    def _client_or_dead(self) -> httpx.AsyncClient:
        if self._closed is not None:
            raise EngineDeadError(self._closed)
        exited = self._exit_reason()
        if exited is not None:
            raise EngineDeadError(f"the engine server died: {exited}")
        if self._client is None:
            raise EngineDeadError("the openai_server engine is not started")
        return self._client

    def _dead_reason(self, fallback: str) -> str:
        exited = self._exit_reason()
        if self._closed is not None:
            return self._closed
        return f"the engine server died: {exited}" if exited is not None else fallback

    def _exit_reason(self) -> str | None:
        if self._process is None or self._process.poll() is None:
            return None
        return f"exit code {self._process.returncode}{self._log_tail_note()}"

    def _log_tail_note(self) -> str:
        if self._log_path is None:
            return ""
        try:
            with self._log_path.open("rb") as f:
                f.seek(max(0, self._log_path.stat().st_size - _LOG_TAIL_BYTES))
                tail = f.read().decode("utf-8", "replace").strip()
        except OSError:
            return ""
        return f"\n--- last lines of its output ({self._log_path}) ---\n{tail}" if tail else ""

    async def shutdown(self) -> None:
        self._closed = "the openai_server engine was shut down"
        for task in (self._stats_task, self._kv_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if self._client is not None:
            await self._client.aclose()
        if self._process is not None:
            died = self._process.poll() is not None
            await asyncio.to_thread(_terminate, self._process, self._config.shutdown_grace_s)
            if not died and self._log_path is not None:
                # A server that died keeps its log for the post-mortem; a clean stop leaves no litter.
                self._log_path.unlink(missing_ok=True)
        if self._options_path is not None:
            self._options_path.unlink(missing_ok=True)


async def _raise_for_status(response: httpx.Response) -> None:
    if response.status_code == 200:
        return
    detail = (await response.aread()).decode("utf-8", "replace")[:2000]
    status = response.status_code
    if status == 429:
        raise OverloadedError(f"the engine server is overloaded: {detail}")
    if 400 <= status < 500:
        raise InvalidRequestError(f"the engine server refused the request ({status}): {detail}")
    raise EngineDeadError(f"the engine server failed ({status}): {detail}")


def _terminate(process: subprocess.Popen, grace_s: float) -> None:
    """SIGTERM the server's process group, SIGKILL it after ``grace_s``; waits for the server to exit."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=grace_s)
    # Also any worker (MPI ranks) the server left behind in its group.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _load_tokenizer(path: str) -> Any:
    from engines.tokenizer import load_tokenizer

    try:
        return load_tokenizer(path)
    except (OSError, ValueError) as e:
        raise EngineConfigError(f"prompt_format 'text' needs a tokenizer, but {path!r} has none: {e}") from None
