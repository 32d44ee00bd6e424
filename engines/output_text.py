"""A request's generated token ids to the text a client may see: incremental detokenization, stop token ids,
EOS and stop strings, decided the same way in every backend that gets ids from its engine (hf, emulated)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from engines.detokenizer import IncrementalDetokenizer
from engines.protocol import FINISH_LENGTH, FINISH_STOP, SamplingParams
from engines.stop_strings import StopStringMatcher


def stop_token_ids(sampling: SamplingParams, eos_ids: Iterable[int]) -> set[int]:
    """The ids that end a request: its own stop_token_ids, and EOS unless it asked to ignore it."""
    return set(sampling.stop_token_ids) | (set() if sampling.ignore_eos else set(eos_ids))


class OutputText:
    """Feeds one request's new ids through; returns the text to send and the finish reason, if it ended."""

    def __init__(self, tokenizer: Any, sampling: SamplingParams, stop_ids: set[int]) -> None:
        self.stop_ids = stop_ids
        self._detok = IncrementalDetokenizer(tokenizer, skip_special_tokens=True)
        self._stops = StopStringMatcher(sampling.stop)

    def feed(self, new_ids: Sequence[int], *, engine_finished: bool, length_reached: bool) -> tuple[str, str | None]:
        """``engine_finished``: the engine ended the request with these ids; ``length_reached``: at max_tokens."""
        finish: str | None = None
        text_ids = new_ids
        if new_ids and new_ids[-1] in self.stop_ids:
            finish, text_ids = FINISH_STOP, new_ids[:-1]  # a stop token is not part of the text
        elif engine_finished:
            finish = FINISH_LENGTH if length_reached else FINISH_STOP
        text, stopped = self._stops.feed(self._detok.add(text_ids))
        if stopped:
            return text, FINISH_STOP  # a stop string ends the request before the engine does
        if finish is not None:
            tail, _ = self._stops.feed(self._detok.flush())
            text += tail + self._stops.flush()
        return text, finish
