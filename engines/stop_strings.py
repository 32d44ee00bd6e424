"""Stop strings on a text stream: cut the output before the first stop string, and never leak any of it.

Text arrives in pieces, and a stop string may be split across them ("...END" as "..E", "ND"). So the
matcher holds back the longest tail of the text that could still be the start of a stop string, until
the next piece decides it: either the stop string completes (emit what precedes it, stop) or it cannot
(emit the held text).
"""

from __future__ import annotations

from collections.abc import Sequence

from core.errors import InvalidRequestError


def validate_stops(stops: Sequence[str]) -> list[str]:
    """Returns ``stops`` as a list, raising ``InvalidRequestError`` (param ``stop``) for a bad entry."""
    if isinstance(stops, str):  # a bare string would be read as a sequence of one-character stops
        raise InvalidRequestError("stop must be a list of strings here, not a single string.", param="stop")
    checked = list(stops)
    for stop in checked:
        if not isinstance(stop, str):
            kind = type(stop).__name__
            raise InvalidRequestError(f"stop entries must be strings, got {kind}.", param="stop")
        if not stop:
            raise InvalidRequestError("stop entries must not be empty strings.", param="stop")
    return checked


class StopStringMatcher:
    """Feeds text through, holding back possible stop-string prefixes; see the module docstring."""

    def __init__(self, stops: Sequence[str]) -> None:
        self._stops = validate_stops(stops)
        # A held-back tail is a proper prefix of a stop string. Not a set of every prefix: that is quadratic in a
        # stop's length (a client's 1 MB stop string would be ~500 GB of prefixes).
        self._longest_prefix = max((len(stop) - 1 for stop in self._stops), default=0)
        self._held = ""
        self._stopped = False

    @property
    def stopped(self) -> bool:
        return self._stopped

    def feed(self, text: str) -> tuple[str, bool]:
        """Adds ``text``; returns (text safe to emit now, whether a stop string was found)."""
        if not self._stops:
            return text, False
        if self._stopped:
            return "", True
        buffer = self._held + text
        hits = [i for i in (buffer.find(stop) for stop in self._stops) if i >= 0]
        if hits:
            self._stopped, self._held = True, ""
            return buffer[: min(hits)], True
        keep = self._held_tail_length(buffer)
        self._held = buffer[len(buffer) - keep :]
        return buffer[: len(buffer) - keep], False

    def flush(self) -> str:
        """Returns the held-back text when the stream ends for another reason (EOS, length)."""
        held, self._held = self._held, ""
        return held

    def _held_tail_length(self, buffer: str) -> int:
        for n in range(min(len(buffer), self._longest_prefix), 0, -1):
            tail = buffer[-n:]
            if any(len(stop) > n and stop.startswith(tail) for stop in self._stops):
                return n
        return 0
