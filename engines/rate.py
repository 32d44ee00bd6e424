"""Generated tokens per second and the pace of decode over a sliding window: ``tokens_per_s``,
``recent_tpot_ms`` and ``recent_decode_batch`` of engine stats."""

from __future__ import annotations

import collections
import time


class TokenRate:
    """Tokens per second, and the mean time between a sequence's tokens, over the last ``window_s`` seconds.

    Cheap: one append per delivered step of a request. The pace is what the running sequences measured
    (each delta's time since the same request's previous one, over its tokens), so it holds everything
    that slows a decode step on this engine, prefill sharing the step included; the router takes it as a
    floor under its model's TPOT prediction (``router.latency``).
    """

    def __init__(self, window_s: float = 5.0) -> None:
        self._window_s = window_s
        # (time, tokens, tokens that followed an earlier token of the same request, the time they took)
        self._events: collections.deque[tuple[float, int, int, float]] = collections.deque()
        self._tokens = 0  # running sums over the window's events, so that a stats read costs only expiry
        self._decode_tokens = 0
        self._decode_s = 0.0

    def add(self, n: int, now: float, decode_s: float | None = None) -> None:
        """``n`` tokens delivered at ``now``; ``decode_s``: the time their decode took, summed over their
        sequences (for one request's delta: the time since its previous delivery). None for a request's
        first tokens, whose wait is TTFT, not decode."""
        if not n:
            return
        decoded = 0 if decode_s is None else n
        spent = 0.0 if decode_s is None else max(decode_s, 0.0)
        self._events.append((now, n, decoded, spent))
        self._tokens += n
        self._decode_tokens += decoded
        self._decode_s += spent

    def delivered(self, n: int, previous_at: float | None) -> float | None:
        """``n`` tokens of one request delivered now, its previous ones at ``previous_at`` (None: none
        yet), on the monotonic clock; returns when this request last delivered, to pass on next time."""
        if not n:
            return previous_at
        now = time.monotonic()
        self.add(n, now, None if previous_at is None else now - previous_at)
        return now

    def rate(self, now: float) -> float:
        """Tokens per second over the window."""
        self._expire(now)
        return self._tokens / self._window_s

    def tpot_ms(self, now: float) -> float:
        """Mean ms between a sequence's successive tokens over the window; 0.0 when nothing decoded."""
        self._expire(now)
        return 1e3 * self._decode_s / self._decode_tokens if self._decode_tokens else 0.0

    def decode_batch(self, now: float) -> float:
        """Sequences decoding at once over the window, on average: the decode time delivered in it per second
        (the batch ``tpot_ms`` was measured at). Low while the window is filling after an idle spell, which
        makes the router carry the pace over to a larger batch than it was measured at: pessimistic."""
        self._expire(now)
        return self._decode_s / self._window_s

    def _expire(self, now: float) -> None:
        events = self._events
        while events and events[0][0] < now - self._window_s:
            _, n, decoded, decode_s = events.popleft()
            self._tokens -= n
            self._decode_tokens -= decoded
            self._decode_s -= decode_s
        if not events:  # no float drift left behind by the running sums
            self._tokens, self._decode_tokens, self._decode_s = 0, 0, 0.0
