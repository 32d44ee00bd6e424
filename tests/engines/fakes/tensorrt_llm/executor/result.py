"""Mirrors tensorrt_llm/executor/result.py: one mutated result object per request, abort() to stop it.

Kept faithful where our adapter depends on it:
* iterating ``GenerationResult`` yields *the same object* after each step; ``outputs[0].text`` and
  ``token_ids`` hold everything so far, ``text_diff`` / ``token_ids_diff`` slice off what the previous step
  had;
* a stop string is cut from ``text`` only once it is complete (DetokenizedGenerationResultBase), so its
  first characters have already been in an earlier ``text_diff``;
* leaving the loop does nothing; ``abort()`` asks the executor to cancel, and the next step finishes the
  request with finish_reason 'cancelled'.
"""

import asyncio
from dataclasses import dataclass, field
from typing import Literal


@dataclass(slots=True)
class CompletionOutput:
    index: int
    text: str = ""
    token_ids: list[int] | None = field(default_factory=list)
    finish_reason: Literal["stop", "length", "timeout", "cancelled"] | None = None
    stop_reason: int | str | None = None
    _last_text_len: int = field(default=0, init=False, repr=False)
    _last_token_ids_len: int = field(default=0, init=False, repr=False)

    @property
    def length(self) -> int:
        return len(self.token_ids)

    @property
    def text_diff(self) -> str:
        return self.text[self._last_text_len :]

    @property
    def token_ids_diff(self) -> list[int]:
        return self.token_ids[self._last_token_ids_len :]


class GenerationResult:
    def __init__(self, request_id, prompt_token_ids, sampling_params, executor, detokenize) -> None:
        self.id = request_id
        self._prompt_token_ids = list(prompt_token_ids)
        self.sampling_params = sampling_params
        self._executor = executor
        self._detokenize = detokenize
        self._outputs = [CompletionOutput(0)]
        self._queue: asyncio.Queue = asyncio.Queue()  # the executor's responses for this request
        self._done = False
        self._aborted = False

    @property
    def request_id(self) -> int:
        return self.id

    @property
    def prompt_token_ids(self) -> list[int]:
        return self._prompt_token_ids

    @property
    def outputs(self) -> list[CompletionOutput]:
        return self._outputs

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
        token_id, finish_reason = await self._queue.get()
        self._handle_response(token_id, finish_reason)
        return self

    def _handle_response(self, token_id: int | None, finish_reason: str | None) -> None:
        out = self._outputs[0]
        params = self.sampling_params
        out._last_token_ids_len = len(out.token_ids)
        if token_id is not None:
            out.token_ids.append(token_id)
        if finish_reason is not None:
            self._done = True
            out.finish_reason = finish_reason
        if params.detokenize:
            out._last_text_len = len(out.text)
            out.text = self._detokenize(out.token_ids)
            # As DetokenizedGenerationResultBase: a complete stop string ends the request, cut from text.
            if not self._done or out.finish_reason in ("stop", "length"):
                for stop in params._stop_strings():
                    if stop in out.text:
                        out.text = out.text[: out.text.find(stop)]
                        out.finish_reason, out.stop_reason = "stop", stop
                        self.abort()
                        self._done = True
                        break
