"""Mirrors tensorrt_llm/llmapi/llm.py's LLM (the PyTorch backend) with a scripted stand-in for the model.

The "model" writes ``LLM.script`` one character per step (token id = code point), then the end id, and
repeats the script when ``ignore_eos`` is set. An executor task steps every live request whether or not
anyone reads it, as the real executor does: a request nobody aborts generates until max_tokens.
"""

import asyncio
import collections
import itertools
from pathlib import Path
from typing import Any, Literal

from tensorrt_llm.executor.result import GenerationResult
from tensorrt_llm.llmapi.llm_args import TORCH_LLM_ARGS_FIELDS, LlmArgs
from tensorrt_llm.sampling_params import SamplingParams

END_ID = 2


class RequestOutput(GenerationResult):
    pass


def detokenize(token_ids) -> str:
    return "".join(chr(t) for t in token_ids if t != END_ID)


class _Executor:
    """Steps every live request by one token per iteration; keeps consumed-on-read iteration stats."""

    def __init__(self, llm: "LLM") -> None:
        self._llm = llm
        self.live: dict[int, tuple[GenerationResult, int]] = {}  # request id -> (result, tokens so far)
        self.to_abort: set[int] = set()
        self.stats: collections.deque = collections.deque(maxlen=1000)
        self.stats_event = asyncio.Event()
        self.task = asyncio.get_running_loop().create_task(self._run())
        self.iteration = 0
        self.shut_down = False

    def abort_request(self, request_id: int) -> None:
        self._llm.aborted.append(request_id)
        self.to_abort.add(request_id)

    async def _run(self) -> None:
        script = self._llm.script
        while True:
            await asyncio.sleep(0.001)
            for request_id, (result, n) in list(self.live.items()):
                params = result.sampling_params
                if request_id in self.to_abort:
                    result._queue.put_nowait((None, "cancelled"))
                    del self.live[request_id]
                    continue
                endless = n < len(script) or params.ignore_eos
                token = ord(script[n % len(script)]) if endless else END_ID
                finish = None
                if token == END_ID:
                    finish, token = "stop", None
                elif params.stop_token_ids and token in params.stop_token_ids:
                    finish = "stop"
                elif n + 1 >= params.max_tokens:
                    finish = "length"
                result._queue.put_nowait((token, finish))
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


class _IterationResult:
    """As executor/result.py IterationResult: yields stats dicts, each read once; done after a timeout."""

    def __init__(self, executor: _Executor, timeout: float) -> None:
        self._executor = executor
        self._timeout = timeout

    def __aiter__(self):
        return self

    async def __anext__(self) -> dict:
        executor = self._executor
        if not executor.stats:
            executor.stats_event.clear()
            try:
                await asyncio.wait_for(executor.stats_event.wait(), self._timeout)
            except TimeoutError:
                raise StopAsyncIteration from None
        return executor.stats.popleft()


class LLM:
    instances: list = []  # every LLM built, for the tests to inspect
    script = "Hello, world! This is a fake completion."

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
        )
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
        executor = self._ensure_executor()
        result = RequestOutput(next(self._ids), inputs, sampling_params, executor, detokenize)
        self.requests.append((list(inputs), sampling_params))
        executor.live[result.request_id] = (result, 0)
        return result

    def get_stats_async(self, timeout: float | None = 2) -> _IterationResult:
        return _IterationResult(self._ensure_executor(), timeout)

    def shutdown(self) -> None:
        self._shutdown = True
        if self._executor is not None:
            self._executor.task.get_loop().call_soon_threadsafe(self._executor.task.cancel)


class TrtLLM(LLM):
    """The legacy engine-directory backend (tensorrt_llm._tensorrt_engine.LLM)."""
