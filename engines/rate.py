"""Generated tokens per second over a sliding window, the ``tokens_per_s`` of engine stats."""

from __future__ import annotations

import collections


class TokenRate:
    """Tokens per second over the last ``window_s`` seconds (cheap: one append per delivered step)."""

    def __init__(self, window_s: float = 5.0) -> None:
        self._window_s = window_s
        self._events: collections.deque[tuple[float, int]] = collections.deque()

    def add(self, n: int, now: float) -> None:
        if n:
            self._events.append((now, n))

    def rate(self, now: float) -> float:
        while self._events and self._events[0][0] < now - self._window_s:
            self._events.popleft()
        return sum(n for _, n in self._events) / self._window_s
