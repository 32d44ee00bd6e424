"""Mirrors tensorrt_llm/llmapi/llm.py's LLM (the PyTorch backend) with a scripted stand-in for the model.

The "model" writes ``LLM.script`` one character per step (token id = code point), then the end id, and
repeats the script when ``ignore_eos`` is set. An executor task steps every live request whether or not
anyone reads it, as the real executor does: a request nobody aborts generates until max_tokens.

Also as the real library (each from its source; see docs/tensorrt-llm.md):

* stop strings and stop token ids are the executor's stop words (``LLM.stop_words_path = "cpp"``, the default):
  on a match only the token ids are truncated (result.py ``_handle_sequence``, ``FinishReason.STOP_WORDS``),
  so the stop token is never decoded and a multi-token stop string's earlier characters stay in ``text``;
  ``"python"`` is the older detokenizer-side cut (the whole stop string cut from ``text``);
* ``get_stats_async`` returns one ``IterationResult`` per LLM: before the first request an empty iterable and
  a printed warning; after a read timed out it stays finished until the next ``generate_async``
  (``mark_undone``);
* the PyTorch backend without chunked prefill refuses a prompt above ``max_num_tokens``: a ``ValueError`` from
  ``generate_async`` (``LLM.max_num_tokens_check = "submit"``, llm.py ``_check_arguments``) or, as newer
  builds do, a ``RequestError`` from the result (``"executor"``);
* ``LLM.executor_gate`` (an ``asyncio.Event``) pauses the executor while it is clear: a slow iteration;
* guided decoding (``SamplingParams.guided_decoding``) is enforced only when the LLM was built with
  ``guided_decoding_backend``: the PyTorch executor makes its guided decoder only then (``GuidedDecoder``, from
  the LLM's ``guided_decoding_config``), so without it a guided request gets the unconstrained script. With it the
  "model" writes ``LLM.guided_script`` when that satisfies the guide, else the smallest text that does (a JSON
  schema's minimal instance, ``{}`` for json_object); a regex guide needs a ``guided_script`` that matches it.
  ``LLM.unsupported_guided_architecture`` makes the LLM drop the backend it was given, as newer builds do for
  architectures without support (``_apply_model_feature_fallbacks``: ``args.guided_decoding_backend = None``);
* prefix reuse and KV cache events (fake_kv_cache.py) with ``KvCacheConfig(event_buffer_max_size > 0,
  enable_block_reuse=True)``: ``get_kv_cache_events_async`` returns the one KV events ``IterationResult`` of the LLM,
  which the first ``generate_async`` makes (before it: an ``AssertionError``, executor.py ``aget_kv_events``), with
  the stats' timeout and done-until-the-next-request behaviour; each entry is one event dict. A request's context is
  stored when its first token comes; ``RequestOutput.cached_tokens`` says what it reused (newer builds; set
  ``LLM.reports_cached_tokens`` False for an older one without the attribute). ``LLM.kv_cache_blocks`` is the
  cache's capacity in blocks.
"""

import asyncio
import collections
import itertools
import json
from pathlib import Path
from typing import Any, Literal

from fake_guides import minimal_instance, satisfies
from fake_kv_cache import FakeKvCache

from tensorrt_llm.executor.result import GenerationResult, IterationResult, RequestError
from tensorrt_llm.llmapi.llm_args import TORCH_LLM_ARGS_FIELDS, KvCacheConfig, LlmArgs
from tensorrt_llm.sampling_params import SamplingParams

END_ID = 2
DEFAULT_MAX_NUM_TOKENS = 8192


class RequestOutput(GenerationResult):
    pass


def detokenize(token_ids) -> str:
    return "".join(chr(t) for t in token_ids if t != END_ID)


class _Tokenizer:
    """As llmapi/tokenizer.py's TransformersTokenizer, for decode: the script's token ids are code points."""

    def decode(self, token_ids, *args, **kwargs) -> str:
        return detokenize([token_ids] if isinstance(token_ids, int) else token_ids)


class _Executor:
    """Steps every live request by one token per iteration; keeps consumed-on-read iteration stats."""

    def __init__(self, llm: "LLM") -> None:
        self._llm = llm
        self.scripts: dict[int, str] = {}  # request id -> what the "model" writes for it
        self.live: dict[int, tuple[GenerationResult, int]] = {}  # request id -> (result, tokens so far)
        self.to_abort: set[int] = set()
        self.stats: collections.deque = collections.deque(maxlen=1000)
        self.stats_event = asyncio.Event()
        self.iter_stats_result: IterationResult | None = None  # created with the first request, as the real one
        kv = llm.kv_cache_config
        self.kv_cache = FakeKvCache(
            tokens_per_block=kv.tokens_per_block,
            capacity_blocks=llm.kv_cache_blocks,
            event_buffer_max_size=kv.event_buffer_max_size,
            enable_block_reuse=kv.enable_block_reuse,
        )
        self.kv_events: collections.deque = collections.deque()
        self.kv_events_event = asyncio.Event()
        self.kv_events_result: IterationResult | None = None  # created with the first request, as the real one
        self._publish_kv_events()  # the cache was just created
        self.task = asyncio.get_running_loop().create_task(self._run())
        self.iteration = 0
        self.shut_down = False

    def abort_request(self, request_id: int) -> None:
        self._llm.aborted.append(request_id)
        self.to_abort.add(request_id)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(0.001)
            if self._llm.executor_gate is not None:
                await self._llm.executor_gate.wait()
            for request_id, (result, n) in list(self.live.items()):
                params = result.sampling_params
                if request_id not in self.scripts:
                    self.scripts[request_id] = self._llm.script_for(params)
                script = self.scripts[request_id]
                if request_id in self.to_abort:
                    result._queue.put_nowait((None, "cancelled", None))
                    del self.live[request_id]
                    continue
                if result.error is not None:
                    result._queue.put_nowait((None, None, None))
                    del self.live[request_id]
                    continue
                if n == 0:  # the context is prefilled: what it reused, then its blocks stored
                    if self._llm.reports_cached_tokens:
                        result.cached_tokens = self.kv_cache.reused_tokens(result.prompt_token_ids)
                    self.kv_cache.store(result.prompt_token_ids)
                    self._publish_kv_events()
                endless = n < len(script) or params.ignore_eos
                token = ord(script[n % len(script)]) if endless else END_ID
                finish, stop = None, None
                if token == END_ID:
                    finish, token = "stop", None
                elif (stop := self._stop_word(result, token, self._llm.stop_words_path == "cpp")) is not None:
                    finish = "stop"
                elif n + 1 >= params.max_tokens:
                    finish = "length"
                result._queue.put_nowait((token, finish, stop))
                if finish is None:
                    self.live[request_id] = (result, n + 1)
                else:
                    del self.live[request_id]
            self.iteration += 1
            if self._llm.args.enable_iter_perf_stats and (self.live or self.to_abort):
                used = sum(1 + n // 32 for _, n in self.live.values())
                self.stats.append(
                    {
                        "iter": self.iteration,
                        "numActiveRequests": len(self.live),
                        "numQueuedRequests": 0,
                        "maxNumActiveRequests": self._llm.args.max_batch_size or 2048,
                        "kvCacheStats": {
                            "maxNumBlocks": 1000,
                            "usedNumBlocks": used,
                            "freeNumBlocks": 1000 - used,
                            "tokensPerBlock": 32,
                        },
                    }
                )
                self.stats_event.set()
            self.to_abort.clear()

    def _publish_kv_events(self) -> None:
        events = self.kv_cache.take_events()
        if events:
            self.kv_events.extend(events)
            self.kv_events_event.set()

    def _stop_word(self, result: GenerationResult, token: int, strings: bool) -> str | int | None:
        """The stop word (string or token id) the output ends with once ``token`` is added, as the C++ executor
        matches them (sampling_params._get_stop_reasons_and_words: stop strings tokenized, stop ids as words)."""
        params = result.sampling_params
        if params.stop_token_ids and token in params.stop_token_ids:
            return token
        if not strings:
            return None
        text = detokenize([*result.outputs[0].token_ids, token])
        return next((stop for stop in params._stop_strings() if text.endswith(stop)), None)


async def _empty():
    return
    yield


class _EmptyAsyncIterable:
    def __aiter__(self):
        return _empty()


class LLM:
    instances: list = []  # every LLM built, for the tests to inspect
    script = "Hello, world! This is a fake completion."
    stop_words_path: Literal["cpp", "python"] = "cpp"
    max_num_tokens_check: Literal["submit", "executor"] = "submit"
    executor_gate: asyncio.Event | None = None
    guided_script: str | None = None  # what a guided request writes, when the guide allows it
    unsupported_guided_architecture = False
    stats_warnings = 0  # "Iteration statistics are not available yet" printed (class-wide, reset by the tests)
    kv_cache_blocks = 1000  # the KV cache's capacity
    reports_cached_tokens = True  # RequestOutput.cached_tokens (newer builds)

    def __init__(
        self,
        model: str | Path,
        tokenizer: Any | None = None,
        tokenizer_mode: Literal["auto", "slow"] = "auto",
        skip_tokenizer_init: bool = False,
        trust_remote_code: bool = False,
        tensor_parallel_size: int = 1,
        dtype: str = "auto",
        revision: str | None = None,
        tokenizer_revision: str | None = None,
        **kwargs: Any,
    ) -> None:
        for key in kwargs:
            if key not in TORCH_LLM_ARGS_FIELDS:
                raise ValueError(f"{self.__class__.__name__} got invalid argument: {key}")
        self.kwargs = dict(model=model, tensor_parallel_size=tensor_parallel_size, dtype=dtype, **kwargs)
        if tokenizer is not None:
            self.kwargs["tokenizer"] = tokenizer
        self.args = LlmArgs(
            model=str(model),
            tensor_parallel_size=tensor_parallel_size,
            max_seq_len=kwargs.get("max_seq_len"),
            max_batch_size=kwargs.get("max_batch_size", 2048),  # BaseLlmArgs' default
            enable_iter_perf_stats=kwargs.get("enable_iter_perf_stats", False),
            enable_chunked_prefill=kwargs.get("enable_chunked_prefill", False),
            max_num_tokens=kwargs.get("max_num_tokens", DEFAULT_MAX_NUM_TOKENS),
            guided_decoding_backend=None
            if self.unsupported_guided_architecture
            else kwargs.get("guided_decoding_backend"),
        )
        self.kv_cache_config = kwargs.get("kv_cache_config") or KvCacheConfig()
        self.requests: list[tuple[list[int], SamplingParams]] = []
        self.aborted: list[int] = []
        self._ids = itertools.count()
        self._executor: _Executor | None = None
        self._shutdown = False
        LLM.instances.append(self)

    def _ensure_executor(self) -> _Executor:
        if self._executor is None:
            self._executor = _Executor(self)  # the result queues live on the caller's event loop
        return self._executor

    def script_for(self, params: SamplingParams) -> str:
        """What the "model" writes for a request (see the module docstring for guided decoding)."""
        guide = params.guided_decoding
        if guide is None or self.args.guided_decoding_backend is None:
            return self.script
        allowed = {"schema": guide.json, "regex": guide.regex, "json_object": guide.json_object}
        if self.guided_script is not None and satisfies(self.guided_script, **allowed):
            return self.guided_script
        if guide.regex is not None:
            raise AssertionError("the fake cannot write for a regex guide: set LLM.guided_script to a match")
        if guide.json_object:
            return "{}"
        schema = json.loads(guide.json) if isinstance(guide.json, str) else guide.json
        return json.dumps(minimal_instance(schema))

    @property
    def tokenizer(self) -> _Tokenizer:
        return _Tokenizer()

    @property
    def live_requests(self) -> int:
        return len(self._executor.live) if self._executor else 0

    def generate_async(
        self,
        inputs,
        sampling_params: SamplingParams | None = None,
        lora_request=None,
        prompt_adapter_request=None,
        streaming: bool = False,
        kv_cache_retention_config=None,
        disaggregated_params=None,
        _postproc_params=None,
        scheduling_params=None,
        cache_salt: str | None = None,
    ) -> RequestOutput:
        if self._shutdown:
            raise RuntimeError("LLM is shutting down")
        if not isinstance(inputs, list) or not all(isinstance(t, int) for t in inputs):
            raise TypeError(f"The inputs must be type str or list of int, but got {type(inputs)}")
        sampling_params = sampling_params or SamplingParams()
        if not isinstance(sampling_params, SamplingParams):
            raise TypeError("The sampling_params must be type SamplingParams or None")
        if sampling_params.end_id is None:
            sampling_params.end_id = END_ID  # _prepare_sampling_params -> _setup(tokenizer)
        error = None
        if not self.args.enable_chunked_prefill and len(inputs) > self.args.max_num_tokens:
            message = (
                f"The sum of prompt length ({float(len(inputs))}), query length (0) should not exceed "
                f"max_num_tokens ({self.args.max_num_tokens})"
            )
            if self.max_num_tokens_check == "submit":
                raise ValueError(message)
            error = RequestError(message)
        executor = self._ensure_executor()
        result = RequestOutput(next(self._ids), inputs, sampling_params, executor, detokenize, self.stop_words_path)
        result.error = error
        if self.reports_cached_tokens:
            result.cached_tokens = 0
        self.requests.append((list(inputs), sampling_params))
        executor.live[result.request_id] = (result, 0)
        # executor.py _maybe_initialize_iteration_results: both made with the first request, both undone by each.
        if executor.iter_stats_result is None:
            executor.iter_stats_result = IterationResult(executor.stats, executor.stats_event)
            executor.kv_events_result = IterationResult(executor.kv_events, executor.kv_events_event)
        executor.iter_stats_result.mark_undone()  # "expect more engine stats whenever new prompts are submitted"
        executor.kv_events_result.mark_undone()
        return result

    def get_stats_async(self, timeout: float | None = 2):
        executor = self._ensure_executor()
        if executor.iter_stats_result is None:
            print("Iteration statistics are not available yet. To collect runtime statistics, please call ...")
            LLM.stats_warnings += 1
            return _EmptyAsyncIterable()
        executor.iter_stats_result.set_timeout(timeout)
        return executor.iter_stats_result

    def get_kv_cache_events_async(self, timeout: float | None = 2):
        executor = self._ensure_executor()
        assert executor.kv_events_result is not None, "KV Event IterationResult is not properly instantiated."
        executor.kv_events_result.set_timeout(timeout)
        return executor.kv_events_result

    def shutdown(self) -> None:
        self._shutdown = True
        if self._executor is not None:
            self._executor.task.get_loop().call_soon_threadsafe(self._executor.task.cancel)


class TrtLLM(LLM):
    """The legacy engine-directory backend (tensorrt_llm._tensorrt_engine.LLM)."""
