"""One request's engine outputs to the deltas its client sees: the one output pipeline every backend feeds.

A backend talks to its engine and hands each step's new output to the request's :class:`OutputStream`, which
decides everything that is the same for every engine: the text (token ids detokenized incrementally, or the
engine's own text), stop token ids and stop strings (held back until decided, never leaked), the finish reason,
the first token's time, the engine's token rate and decode pace (``engines.rate``), and the ``Delta`` itself.
Coalescing the deltas into one message per stream interval is ``engines.coalesce`` (around the backend's
stream, or the emulated engine's batch loop); nothing here runs more than once per engine step of a request.

Two fronts, one tail (``from_ids`` ends in ``from_text``):

* :meth:`OutputStream.from_ids`: engines that give token ids (hf, emulated). A trailing stop token id ends
  the request and is not text; the engine's own end is ``length`` at max_tokens, else ``stop``.
* :meth:`OutputStream.from_text`: engines that give text (trtllm, openai_server), with the finish reason they
  said. Their stop strings are matched again here: engines differ in whether they cut a stop string and whether
  they stream its first characters while it is still undecided.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from engines.detokenizer import IncrementalDetokenizer
from engines.protocol import FINISH_LENGTH, FINISH_STOP, Delta, GenerationRequest, SamplingParams, TokenLogprob
from engines.rate import TokenRate
from engines.stop_strings import StopStringMatcher


def stop_token_ids(sampling: SamplingParams, eos_ids: Iterable[int]) -> set[int]:
    """The ids that end a request: its own stop_token_ids, and EOS unless it asked to ignore it."""
    return set(sampling.stop_token_ids) | (set() if sampling.ignore_eos else set(eos_ids))


class OutputStream:
    """One request's output pipeline; see the module docstring.

    ``rate``: the engine's :class:`TokenRate`, told of every step's tokens (None: the engine counts its tokens
    itself, as the emulated batch loop does once per iteration). ``tokenizer`` and ``stop_ids``: for
    :meth:`from_ids` only.
    """

    __slots__ = ("_arrival_time", "_detok", "_first_token_time", "_last_token_at", "_prompt_tokens", "_rate", "_stops")

    def __init__(
        self,
        request: GenerationRequest,
        rate: TokenRate | None,
        *,
        tokenizer: Any = None,
        stop_ids: Iterable[int] = (),
    ) -> None:
        self._prompt_tokens = len(request.prompt_token_ids)
        self._arrival_time = request.arrival_time
        self._rate = rate
        self._stops = StopStringMatcher(request.sampling.stop)
        self._detok = (
            None if tokenizer is None else (IncrementalDetokenizer(tokenizer, skip_special_tokens=True), set(stop_ids))
        )
        self._first_token_time: float | None = None
        self._last_token_at: float | None = None  # monotonic, for the engine's decode pace

    def from_ids(
        self,
        new_ids: list[int],
        *,
        completion_tokens: int,
        engine_finished: bool,
        length_reached: bool,
        first_token_time: float | None = None,
    ) -> Delta:
        """A step of an engine that gives ids: ``engine_finished``, the engine ended the request with these ids;
        ``length_reached``, at max_tokens; ``first_token_time``, where the engine knows it better (else: now)."""
        assert self._detok is not None, "from_ids needs the tokenizer"
        detok, stop_ids = self._detok
        finish: str | None = None
        text_ids = new_ids
        if new_ids and new_ids[-1] in stop_ids:
            finish, text_ids = FINISH_STOP, new_ids[:-1]  # a stop token is not part of the text
        elif engine_finished:
            finish = FINISH_LENGTH if length_reached else FINISH_STOP
        text = detok.add(text_ids)
        if finish is not None:
            text += detok.flush()
        if first_token_time is not None:
            self._first_token_time = first_token_time
        delta = self.from_text(text, new_ids, finish=finish, completion_tokens=completion_tokens, tokens=len(new_ids))
        assert delta is not None  # a step with ids or a finish always says so
        return delta

    def from_text(
        self,
        piece: str,
        ids: list[int],
        *,
        finish: str | None,
        completion_tokens: int,
        tokens: int,
        engine_stopped_at_string: bool = False,
        logprobs: list[TokenLogprob] | None = None,
    ) -> Delta | None:
        """A step of an engine that gives text: ``piece`` (new text), ``ids`` (its token ids, where the engine
        says), ``finish`` (ours, from the engine's reason; None while it runs), ``tokens`` (how many it made).
        ``engine_stopped_at_string``: the engine ended at a stop string, so the text held back as its possible
        start is that string's, not output. None when the step says nothing new."""
        text, stopped = self._stops.feed(piece)
        if stopped:
            finish = FINISH_STOP  # a stop string ends the request before the engine does
        elif finish is not None and not engine_stopped_at_string:
            text += self._stops.flush()  # held text is real output when the request ended for another reason
        if tokens and self._first_token_time is None:
            self._first_token_time = time.time()
        if self._rate is not None:
            self._last_token_at = self._rate.delivered(tokens, self._last_token_at)
        if not (text or ids or logprobs or finish is not None):
            return None
        return Delta(
            text=text,
            token_ids=ids,
            finish_reason=finish,
            prompt_tokens=self._prompt_tokens,
            completion_tokens=completion_tokens,
            first_token_time=self._first_token_time,
            arrival_time=self._arrival_time,
            logprobs=logprobs,
        )
