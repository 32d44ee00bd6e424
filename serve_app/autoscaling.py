"""The replica side of the engine-load autoscaling policy: each replica's recent latency, for the figures it reports.

``EngineDeployment.record_autoscaling_stats()`` returns ``router.serve_autoscaling.engine_metrics`` of its engine's
stats and its :class:`RecentLatency`; the policy that reads them in Serve's controller, and the variant's autoscaling
config, are ``router.serve_autoscaling`` (Ray-free, so that the simulator runs them too).
"""

from __future__ import annotations

import time
from collections import deque

from engines.protocol import Delta


class RecentLatency:
    """Mean TTFT and TPOT of the requests a replica served in the last ``window_s`` seconds, and how long
    the oldest request still without a first token has waited.

    Old samples drop out, so a replica that went idle after a slow spell stops reporting the slowness
    (which would otherwise hold the variant scaled up). The waiting requests are what make the signal
    early: TTFT is known only once a first token comes, while a request stuck in an overloaded queue
    reports its wait on every sample. Cheap: one deque append per request event, one dict entry per
    request until its first token.
    """

    def __init__(self, window_s: float = 10.0, clock=time.monotonic) -> None:
        self.window_s = window_s
        self._clock = clock
        self._ttft: deque[tuple[float, float]] = deque()
        self._tpot: deque[tuple[float, float]] = deque()
        self._waiting: dict[str, float] = {}  # request id -> when the replica received it (insertion order)

    def started(self, request_id: str) -> None:
        """The replica received ``request_id``; it waits until its first token or its end."""
        self._waiting[request_id] = self._clock()

    def first_token(self, request_id: str) -> None:
        """``request_id`` has its first token (or ended without one): it no longer waits."""
        self._waiting.pop(request_id, None)

    def oldest_wait_ms(self) -> float:
        """Ms the oldest request still without a first token has waited; 0.0 when none waits."""
        oldest = next(iter(self._waiting.values()), None)  # dicts keep insertion order: the first is the oldest
        return 0.0 if oldest is None else max(0.0, self._clock() - oldest) * 1e3

    def observe(self, delta: Delta) -> None:
        """Takes a request's TTFT from its first delta that carries tokens and its TPOT from its last."""
        if delta.first_token_time is None:
            return
        now = self._clock()
        first = bool(delta.token_ids) and delta.completion_tokens == len(delta.token_ids)
        if first and delta.arrival_time is not None:
            self._ttft.append((now, max(0.0, delta.first_token_time - delta.arrival_time) * 1e3))
        if delta.finish_reason is not None and delta.completion_tokens > 1:
            decode_s = time.time() - delta.first_token_time
            self._tpot.append((now, max(0.0, decode_s) * 1e3 / (delta.completion_tokens - 1)))

    def means_ms(self) -> tuple[float | None, float | None]:
        """(TTFT, TPOT) in ms over the window; None where no sample is recent enough."""
        horizon = self._clock() - self.window_s
        out: list[float | None] = []
        for samples in (self._ttft, self._tpot):
            while samples and samples[0][0] < horizon:
                samples.popleft()
            out.append(sum(v for _, v in samples) / len(samples) if samples else None)
        return out[0], out[1]
