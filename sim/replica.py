"""One simulated engine replica: a continuous-batching state machine stepped at iteration level.

An iteration decodes one token of every decoding sequence and prefills up to the token budget of
admitted prompts, first come first served (chunked prefill). Events are not per token: while prompts
wait for prefill the replica steps one iteration per event, and while it only decodes it jumps to the
iteration in which the next sequence finishes (the batch, hence the step time, is constant until then).
A request that arrives during such a jump cuts it short at the next iteration boundary, where the
engine would pick it up.

Admission follows TensorRT-LLM's default (GUARANTEED_NO_EVICT) scheduler: a request takes a batch slot
and reserves its whole context (prompt + max_tokens) in the KV cache, in arrival order; the head of the
queue blocks the rest when it does not fit.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from enum import Enum

from engines.rate import TokenRate
from sim.profile import EngineProfile
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


class SimReplica:
    """One replica of a variant. The simulation calls :meth:`submit` and :meth:`step_end`; both return
    the time of the replica's next iteration end when it changed (push it with :attr:`version`)."""

    def __init__(self, replica_id: str, profile: EngineProfile, ready_s: float) -> None:
        self.replica_id = replica_id
        self.profile = profile
        self.ready_s = ready_s
        self.state = ReplicaState.STARTING
        self.waiting: deque[SimRequest] = deque()  # no slot or KV room yet
        self.prefilling: deque[SimRequest] = deque()  # admitted, prompt not fully prefilled
        self.decoding: list[tuple[int, int, SimRequest]] = []  # heap of (finish step, tie, request)
        self.steps = 0  # decode iterations completed
        self.kv_used = 0
        self.queued_prompt_tokens = 0  # prompt tokens not yet prefilled (waiting + prefilling)
        self.recent = RecentLatency()
        self.pace = TokenRate()  # the engine's decode pace, as the real backends report it (recent_tpot_ms)
        self.started: list[SimRequest] = []  # first tokens since the simulation last took this list
        self.version = 0  # bumps on every (re)scheduled iteration end; older events are stale
        self._seg_start = 0.0
        self._seg_dt = 0.0
        self._seg_k = 0  # iterations in the current segment; 0: idle
        self._seg_chunk: list[tuple[SimRequest, int]] = []
        self._ms_per_prefill_token = profile.prefill_ms_per_token

    # ------------------------------------------------------------------ load, as the engine reports it

    @property
    def running(self) -> int:
        return len(self.prefilling) + len(self.decoding)

    @property
    def queued(self) -> int:
        return len(self.waiting)

    @property
    def ongoing(self) -> int:
        return len(self.prefilling) + len(self.decoding) + len(self.waiting)

    @property
    def kv_used_fraction(self) -> float:
        return self.kv_used / self.profile.kv_cache_tokens

    @property
    def busy(self) -> bool:
        return self._seg_k > 0

    # ------------------------------------------------------------------ events

    def submit(self, request: SimRequest, now: float) -> float | None:
        """Takes a request from the handle; the new iteration end to schedule, if it changed."""
        request.dispatched_s = now
        self.waiting.append(request)
        self.queued_prompt_tokens += request.prompt_tokens
        self._admit()
        if not self.prefilling:
            return None  # waits for a slot: nothing to reschedule
        if self._seg_k == 0:
            return self._plan(now)
        if self._seg_chunk or self._seg_k == 1:
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
        for request, tokens in self._seg_chunk:
            request.remaining_prefill -= tokens
            self.queued_prompt_tokens -= tokens
            if request.remaining_prefill == 0:
                # Prefill completes in FIFO order, so the finished prompt is at the head.
                self.prefilling.popleft()
                request.first_token_s = now
                self.started.append(request)
                self.recent.add(0, now, 1e3 * (now - (request.dispatched_s or now)))
                if request.max_tokens <= 1:
                    self._finish(request, now, finished)
                else:
                    heapq.heappush(self.decoding, (steps + request.max_tokens - 1, next(_sequence), request))
        decoding = self.decoding
        while decoding and decoding[0][0] <= steps:
            self._finish(heapq.heappop(decoding)[2], now, finished)
        self._admit()
        return finished, self._plan(now)

    # ------------------------------------------------------------------ internals

    def _finish(self, request: SimRequest, now: float, finished: list[SimRequest]) -> None:
        request.end_s = now
        self.kv_used -= request.kv_tokens
        if request.max_tokens > 1 and request.first_token_s is not None:
            self.recent.add(1, now, 1e3 * (now - request.first_token_s) / (request.max_tokens - 1))
        finished.append(request)

    def _admit(self) -> None:
        profile = self.profile
        waiting = self.waiting
        while waiting and len(self.prefilling) + len(self.decoding) < profile.max_running_requests:
            request = waiting[0]
            if self.kv_used + request.kv_tokens > profile.kv_cache_tokens and self.running > 0:
                break  # head-of-line: waits for running sequences to free KV (alone, it always runs)
            waiting.popleft()
            self.kv_used += request.kv_tokens
            request.remaining_prefill = request.prompt_tokens
            self.prefilling.append(request)

    def _plan(self, now: float) -> float | None:
        """Plans the next segment from ``now``; its end time, or None when there is nothing to do."""
        decoding = len(self.decoding)
        profile = self.profile
        if self.prefilling:
            budget = max(profile.max_num_tokens - decoding, 1)
            chunk: list[tuple[SimRequest, int]] = []
            taken = 0
            for request in self.prefilling:
                tokens = min(request.remaining_prefill, budget - taken)
                chunk.append((request, tokens))
                taken += tokens
                if taken >= budget:
                    break
            self._seg_chunk = chunk
            self._seg_k = 1
            self._seg_dt = 1e-3 * (
                profile.step_ms_at_batch_1
                + profile.step_ms_per_extra_seq * max(decoding - 1, 0)
                + self._ms_per_prefill_token * taken
            )
        elif decoding:
            self._seg_chunk = []
            self._seg_k = self.decoding[0][0] - self.steps
            self._seg_dt = 1e-3 * (profile.step_ms_at_batch_1 + profile.step_ms_per_extra_seq * (decoding - 1))
        else:
            self._seg_chunk = []
            self._seg_k = 0
            return None
        self._seg_start = now
        self.version += 1
        return now + self._seg_k * self._seg_dt
