"""One simulated engine replica: the shared continuous batch (:mod:`engines.batching`) stepped in virtual time.

Events are not per token: while prompts wait for prefill the replica steps one iteration per event, and
while it only decodes it jumps to the iteration in which the next sequence finishes (the batch, hence the
step time, is constant until then). A request that arrives during such a jump cuts it short at the next
iteration boundary, where the engine would pick it up. Admission and iteration times are
:class:`~engines.batching.ContinuousBatch`'s, the very code the emulated engine runs on the real clock.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from dataclasses import dataclass
from enum import Enum

from engines.batching import ContinuousBatch, Iteration
from engines.kv_blocks import KvEvents
from engines.profile import EngineProfile
from engines.rate import TokenRate
from sim.request import SimRequest


class ReplicaState(Enum):
    STARTING = "starting"
    READY = "ready"
    DRAINING = "draining"  # scaled down: takes no new requests, finishes its open ones
    STOPPED = "stopped"


class RecentLatency:
    """Mean engine-side TTFT and TPOT (ms) over the last ``window_s`` simulated seconds.

    The simulated counterpart of ``serve_app.autoscaling.RecentLatency``, which reads real deltas and
    clocks; same window, same definitions (TTFT from engine arrival, TPOT over a request's decode).
    """

    def __init__(self, window_s: float = 10.0) -> None:
        self.window_s = window_s
        self._samples: tuple[deque[tuple[float, float]], deque[tuple[float, float]]] = (deque(), deque())
        self._sums = [0.0, 0.0]

    def add(self, which: int, now: float, value_ms: float) -> None:
        self._samples[which].append((now, value_ms))
        self._sums[which] += value_ms

    def means_ms(self, now: float) -> tuple[float | None, float | None]:
        horizon = now - self.window_s
        out: list[float | None] = []
        for which, samples in enumerate(self._samples):
            while samples and samples[0][0] < horizon:
                self._sums[which] -= samples.popleft()[1]
            out.append(self._sums[which] / len(samples) if samples else None)
        return out[0], out[1]


_sequence = itertools.count()  # tie-breaker for equal finish steps; only order matters


@dataclass(frozen=True, slots=True)
class LoadReport:
    """A replica's load as it last posted it to the stats board.

    A real engine replica posts its stats every ``STATS_PERIOD_S`` (serve_app/engine_deployment.py) and each
    ingress reads the board every ``REFRESH_PERIOD_S``: the router routes on figures up to a few hundred ms old,
    and the simulator must not route on fresher ones than the stack can (least_loaded once piled requests
    onto a variant the real board had not yet shown busy, and the simulator, reading the replicas' true queues at
    each refresh, did not).

    Its fields are those of ``engines.protocol.EngineStats`` that the router reads (``router.views.ReplicaFigures``).
    """

    at_s: float
    queued_requests: int
    running_requests: int
    queued_prompt_tokens: int
    kv_used_fraction: float
    recent_tpot_ms: float
    recent_decode_batch: float
    context_tokens: int
    context_length: int
    max_running_requests: int


class SimReplica:
    """One replica of a variant. The simulation calls :meth:`submit` and :meth:`step_end`; both return
    the time of the replica's next iteration end when it changed (push it with :attr:`version`)."""

    def __init__(self, replica_id: str, profile: EngineProfile, ready_s: float) -> None:
        self.replica_id = replica_id
        self.profile = profile
        self.ready_s = ready_s
        self.state = ReplicaState.STARTING
        self.batch: ContinuousBatch[SimRequest] = ContinuousBatch(profile)
        self.decoding: list[tuple[int, int, SimRequest]] = []  # heap of (finish step, tie, request)
        self.steps = 0  # decode iterations completed
        # Sum over self.decoding of (prompt + max_tokens - finish step): their KV context is this plus
        # len(self.decoding) * steps (context_tokens).
        self._decoding_base = 0
        self.recent = RecentLatency()
        self.pace = TokenRate()  # the engine's decode pace, as the real backends report it (recent_tpot_ms)
        self.started: list[SimRequest] = []  # first tokens since the simulation last took this list
        self.version = 0  # bumps on every (re)scheduled iteration end; older events are stale
        self._seg_start = 0.0
        self._seg_dt = 0.0
        self._seg_k = 0  # iterations in the current segment; 0: idle
        self._seg: Iteration[SimRequest] | None = None
        self.report: LoadReport | None = None  # what it last posted to the stats board (None: not yet)
        # Its prefix cache's changes as posted with each report, in order (engines.kv_blocks.KvEvents): what the
        # ingresses' prefix indexes read from the board, each from its own cursor (sim/prefix.py).
        self.kv_posted: list[KvEvents] = []

    # ------------------------------------------------------------------ load, as the engine reports it

    @property
    def running(self) -> int:
        return self.batch.running

    @property
    def queued(self) -> int:
        return len(self.batch.waiting)

    @property
    def ongoing(self) -> int:
        return self.batch.running + len(self.batch.waiting)

    @property
    def queued_prompt_tokens(self) -> int:
        return self.batch.queued_prompt_tokens

    @property
    def kv_used(self) -> int:
        return self.batch.kv_used

    @property
    def kv_used_fraction(self) -> float:
        return self.batch.kv_used / self.profile.kv_cache_tokens

    def post_report(self, now: float) -> LoadReport:
        """Posts its load now, as the engine replica's stats loop does."""
        cache = self.batch.cache
        if cache is not None:
            events = cache.drain_events()
            if events:
                self.kv_posted.append(events)
        self.report = LoadReport(
            at_s=now,
            queued_requests=self.queued,
            running_requests=self.running,
            queued_prompt_tokens=self.queued_prompt_tokens,
            kv_used_fraction=self.kv_used_fraction,
            recent_tpot_ms=self.pace.tpot_ms(now),
            recent_decode_batch=self.pace.decode_batch(now),
            context_tokens=self.context_tokens(now),
            context_length=self.profile.context_length,
            max_running_requests=self.profile.max_running_requests,
        )
        return self.report

    def context_tokens(self, now: float) -> int:
        """Tokens its running sequences hold in KV at ``now``, prompt prefilled and output so far (as the emulated
        engine reports ``EngineStats.context_tokens``)."""
        steps = self.steps
        if self._seg_k and self._seg is not None and not self._seg.chunk and self._seg_dt > 0:
            # Part way through a decode-only jump: each decoding sequence made a token per iteration done since.
            steps += min(int((now - self._seg_start) / self._seg_dt), self._seg_k)
        prefilled = sum(r.prompt_tokens - r.remaining_prefill for r in self.batch.prefilling)
        return self._decoding_base + len(self.decoding) * steps + prefilled

    def oldest_wait_ms(self, now: float) -> float:
        """Ms the oldest request handed to this replica still without a first token has waited (0: none)."""
        waiting = [r.dispatched_s for r in (*self.batch.waiting, *self.batch.prefilling) if r.dispatched_s is not None]
        return max(0.0, now - min(waiting)) * 1e3 if waiting else 0.0

    @property
    def busy(self) -> bool:
        return self._seg_k > 0

    # ------------------------------------------------------------------ events

    def submit(self, request: SimRequest, now: float) -> float | None:
        """Takes a request from the handle; the new iteration end to schedule, if it changed."""
        request.dispatched_s = now
        self.batch.enqueue(request)
        self.batch.admit()
        if not self.batch.prefilling:
            return None  # waits for a slot: nothing to reschedule
        if self._seg_k == 0:
            return self._plan(now)
        if (self._seg is not None and self._seg.chunk) or self._seg_k == 1:
            return None  # the current iteration ends soon; the next one plans the new prompt in
        # A decode-only jump: stop it at the iteration boundary after `now`.
        done = math.floor((now - self._seg_start) / self._seg_dt)
        k = min(done + 1, self._seg_k)
        if k == self._seg_k:
            return None
        self._seg_k = k
        self.version += 1
        return self._seg_start + k * self._seg_dt

    def step_end(self, now: float) -> tuple[list[SimRequest], float | None]:
        """Applies the iteration(s) that end at ``now``: the finished requests, and the next end (or None)."""
        self.steps += self._seg_k
        steps = self.steps
        if self.decoding:  # each decoding sequence made one token per iteration of the segment
            tokens = len(self.decoding) * self._seg_k
            self.pace.add(tokens, now, tokens * self._seg_dt)
        finished: list[SimRequest] = []
        prefilled = self.batch.complete_prefill(self._seg) if self._seg is not None and self._seg.chunk else []
        for request in prefilled:
            request.first_token_s = now
            self.started.append(request)
            self.recent.add(0, now, 1e3 * (now - (request.dispatched_s or now)))
            if request.max_tokens <= 1:
                self._finish(request, now, finished)
            else:
                finish = steps + request.max_tokens - 1
                heapq.heappush(self.decoding, (finish, next(_sequence), request))
                self._decoding_base += request.prompt_tokens + request.max_tokens - finish
        decoding = self.decoding
        while decoding and decoding[0][0] <= steps:
            finish, _, request = heapq.heappop(decoding)
            self._decoding_base -= request.prompt_tokens + request.max_tokens - finish
            self._finish(request, now, finished)
        self.batch.admit()
        return finished, self._plan(now)

    # ------------------------------------------------------------------ internals

    def _finish(self, request: SimRequest, now: float, finished: list[SimRequest]) -> None:
        request.end_s = now
        self.batch.finish(request)
        if request.max_tokens > 1 and request.first_token_s is not None:
            self.recent.add(1, now, 1e3 * (now - request.first_token_s) / (request.max_tokens - 1))
        finished.append(request)

    def _plan(self, now: float) -> float | None:
        """Plans the next segment from ``now``; its end time, or None when there is nothing to do."""
        iteration = self._seg = self.batch.plan()
        if iteration is None:
            self._seg_k = 0
            return None
        # A decode-only batch stays the same until its next sequence finishes: jump there in one event.
        self._seg_k = 1 if iteration.chunk else self.decoding[0][0] - self.steps
        self._seg_dt = iteration.duration_s
        self._seg_start = now
        self.version += 1
        return now + self._seg_k * self._seg_dt
