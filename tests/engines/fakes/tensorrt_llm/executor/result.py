"""Mirrors tensorrt_llm/executor/result.py: one mutated result object per request, abort() to stop it.

Kept faithful where our adapter depends on it:
* iterating ``GenerationResult`` yields *the same object* after each step; ``outputs[0].text`` and
  ``token_ids`` hold everything so far, ``text_diff`` / ``token_ids_diff`` slice off what the previous step
  had;
* stop words matched by the executor (``stop_words_path`` "cpp") truncate the token ids only, the text is
  decoded from the ids' diff and so keeps a multi-token stop string's earlier characters (``_handle_sequence``);
  on the older detokenizer path ("python") a stop string is cut from ``text`` only once it is complete, so
  its first characters have already been in an earlier ``text_diff``;
* a per-request executor error surfaces from ``__anext__`` as ``RequestError`` (executor.py
  ``_handle_background_error``);
* ``cached_tokens``: the prompt tokens the request took from the KV cache, on builds that say it (the LLM sets it
  only with ``LLM.reports_cached_tokens``; older builds have no such attribute);
* leaving the loop does nothing; ``abort()`` asks the executor to cancel, and the next step finishes the
  request with finish_reason 'cancelled';
* ``best_of`` > ``n`` (sampling, no beam search): ``best_of`` sequences, and ``outputs`` is the ``n`` of them with
  the highest ``cumulative_logprob``, re-sorted at every read (result.py ``outputs``), so while they run
  ``outputs[0]`` may be a different sequence from one step to the next. Here sequence 0 writes the script and the
  others its case swapped; sequence 0 is the likeliest for the first tokens, then the last one is.
"""

import asyncio
import json
from dataclasses import dataclass, field
from typing import Literal, NamedTuple


class RequestError(RuntimeError):
    """As tensorrt_llm.executor.utils.RequestError (exported by tensorrt_llm.llmapi): one request failed."""


class Logprob(NamedTuple):
    """As executor/result.py: one candidate's log probability and its rank among the candidates."""

    logprob: float
    rank: int | None = None


@dataclass(slots=True)
class CompletionOutput:
    index: int
    text: str = ""
    token_ids: list[int] | None = field(default_factory=list)
    finish_reason: Literal["stop", "length", "timeout", "cancelled"] | None = None
    stop_reason: int | str | None = None
    cumulative_logprob: float | None = None
    # Recent main: TokenLogprobs, one {token_id: Logprob} per output token (the top-k and the chosen token).
    logprobs: list = field(default_factory=list)
    _last_text_len: int = field(default=0, init=False, repr=False)
    _last_token_ids_len: int = field(default=0, init=False, repr=False)
    _last_logprobs_len: int = field(default=0, init=False, repr=False)

    @property
    def length(self) -> int:
        return len(self.token_ids)

    @property
    def text_diff(self) -> str:
        return self.text[self._last_text_len :]

    @property
    def token_ids_diff(self) -> list[int]:
        return self.token_ids[self._last_token_ids_len :]

    @property
    def logprobs_diff(self) -> list:
        return self.logprobs[self._last_logprobs_len :]


class GenerationResult:
    def __init__(self, request_id, prompt_token_ids, sampling_params, executor, detokenize, stop_words_path) -> None:
        self.id = request_id
        self._prompt_token_ids = list(prompt_token_ids)
        self.sampling_params = sampling_params
        self._executor = executor
        self._detokenize = detokenize
        self._outputs = [CompletionOutput(i) for i in range(sampling_params.best_of or 1)]
        self._queue: asyncio.Queue = asyncio.Queue()  # the executor's responses for this request
        self._done = False
        self._aborted = False
        self._stop_words_path = stop_words_path
        self.error: RequestError | None = None

    @property
    def request_id(self) -> int:
        return self.id

    @property
    def prompt_token_ids(self) -> list[int]:
        return self._prompt_token_ids

    @property
    def outputs(self) -> list[CompletionOutput]:
        params = self.sampling_params
        if params.use_beam_search or params.n == params.best_of:
            return self._outputs[: params.n]
        ranked = sorted(  # as result.py: "Pick the top-n outputs, sorted by cumulative log probs."
            self._outputs,
            key=lambda x: x.cumulative_logprob if x.cumulative_logprob is not None else float("-inf"),
            reverse=True,
        )
        for i, out in enumerate(ranked):
            out.index = i
        return ranked[: params.n]

    @property
    def finished(self) -> bool:
        return self._done

    def abort(self) -> None:
        self._executor.abort_request(self.request_id)
        self._aborted = True

    def aborted(self) -> bool:
        return self._aborted

    def __aiter__(self):
        return self

    async def __anext__(self):
        if self._done:
            raise StopAsyncIteration
        token_id, finish_reason, stop = await self._queue.get()
        if self.error is not None:
            self._done = True
            raise self.error
        self._handle_response(token_id, finish_reason, stop)
        return self

    def _handle_response(self, token_id: int | None, finish_reason: str | None, stop=None) -> None:
        for sequence, out in enumerate(self._outputs):
            token = token_id
            if sequence and token_id is not None:  # the other sequences write the script's case swapped
                token = ord(chr(token_id).swapcase())
            self._handle_sequence(out, sequence, token, finish_reason, stop)

    def _handle_sequence(self, out, sequence: int, token_id: int | None, finish_reason: str | None, stop) -> None:
        params = self.sampling_params
        out._last_token_ids_len = len(out.token_ids)
        out._last_logprobs_len = len(out.logprobs)
        if token_id is not None:
            out.token_ids.append(token_id)
            if len(self._outputs) > 1:
                # Sequence 0 leads for three tokens, then the last overtakes it (at the fifth) and stays ahead.
                lead = len(out.token_ids) <= 3
                step = (-0.01 if sequence == 0 else -0.1) if lead else -0.1 * (len(self._outputs) - sequence)
                out.cumulative_logprob = (out.cumulative_logprob or 0.0) + step
            if params.logprobs:
                # The chosen token first, then the next candidates: logprobs entries in all (rank 1 = likeliest).
                candidates = [token_id] + [token_id + i for i in range(1, params.logprobs)]
                out.logprobs.append({t: Logprob(-0.5 * rank, rank) for rank, t in enumerate(candidates, start=1)})
        if finish_reason is not None:
            self._done = True
            out.finish_reason = finish_reason
        if stop is not None:
            # FinishReason.STOP_WORDS: truncate the stop word's ids (one id per character here) unless asked to keep it.
            out.stop_reason = stop
            if not params.include_stop_str_in_output:
                cut = 1 if isinstance(stop, int) else len(stop)
                out.token_ids = out.token_ids[:-cut]
                if out.logprobs:
                    out.logprobs = out.logprobs[:-cut]
        if params.detokenize:
            out._last_text_len = len(out.text)
            # Incremental: the text so far plus the decoded diff of the ids (empty after a truncation).
            diff = out.token_ids[out._last_token_ids_len :]
            out.text = out.text + self._detokenize(diff)
            # As DetokenizedGenerationResultBase on older builds: a complete stop string ends the request, cut
            # from the text.
            if self._stop_words_path == "python" and (not self._done or out.finish_reason in ("stop", "length")):
                for stop_string in params._stop_strings():
                    if stop_string in out.text:
                        out.text = out.text[: out.text.find(stop_string)]
                        out.finish_reason, out.stop_reason = "stop", stop_string
                        self.abort()
                        self._done = True
                        break


class IterationResult:
    """As executor/result.py IterationResult: one per LLM and kind (iteration stats, KV cache events); yields dicts,
    each read once; after a read times out it stays done until ``mark_undone`` (called by ``generate_async``)."""

    def __init__(self, entries, arrived: asyncio.Event) -> None:
        self._entries = entries  # a deque the executor appends to
        self._arrived = arrived  # set by the executor when it appends
        self._done = False
        self._timeout = 2

    def set_timeout(self, timeout: float) -> None:
        self._timeout = timeout

    def mark_undone(self) -> None:
        self._done = False

    def __aiter__(self):
        return self

    async def __anext__(self) -> dict:
        if self._done:
            raise StopAsyncIteration
        if not self._entries:
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), self._timeout)
            except TimeoutError:
                self._done = True
                raise StopAsyncIteration from None
        return json.loads(json.dumps(self._entries.popleft()))  # queued as JSON strings (worker.py)
