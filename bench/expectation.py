"""What an engine profile says a closed-loop level should measure: the simulator's replica, stepped in virtual
time on the very load the bench sends (``concurrency`` workers, each sending its next request when the last ends).

This is the yardstick of the emulated engine's direct path in ``python -m bench overhead``: the emulated engine
and the simulator share one scheduler (``engines.batching``), so whatever separates the two is the real clock
(timers, the event loop, the stream path's CPU), which is what the comparison is for.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from pydantic import BaseModel, Field

from engines.profile import EngineProfile
from router import SLO, RequestFeatures
from sim.replica import ReplicaState, SimReplica
from sim.request import SimRequest
from traffic.workload import Slo


class Expectation(BaseModel):
    ttft_p50_ms: float = Field(description="Median time from a request's dispatch to its first token.")
    tpot_p50_ms: float = Field(description="Median time per output token after the first.")
    tokens_per_s: float = Field(description="Output tokens over the level's duration.")


def _request(index: int, prompt_tokens: int, max_tokens: int) -> SimRequest:
    return SimRequest(
        index=index,
        arrival_s=0.0,
        prompt_tokens=prompt_tokens,
        max_tokens=max_tokens,
        slo=Slo(),
        features=RequestFeatures(prompt_tokens=prompt_tokens, max_tokens=max_tokens, slo=SLO()),
    )


def closed_loop(
    profile: EngineProfile, *, concurrency: int, requests: int, prompt_tokens: int, max_tokens: int | Sequence[int]
) -> Expectation:
    """The profile's engine on ``requests`` requests, ``concurrency`` at a time, in virtual time; ``max_tokens`` is
    every request's output length, or each one's in order."""
    lengths = [max_tokens] * requests if isinstance(max_tokens, int) else list(max_tokens)
    replica = SimReplica("expected", profile, ready_s=0.0)
    replica.state = ReplicaState.READY
    sent = 0
    end: float | None = None
    now = 0.0

    def send() -> None:
        nonlocal sent, end
        changed = replica.submit(_request(sent, prompt_tokens, lengths[sent]), now)
        sent += 1
        if changed is not None:
            end = changed

    for _ in range(min(concurrency, requests)):
        send()
    done: list[SimRequest] = []
    while end is not None:
        now = end
        finished, end = replica.step_end(now)
        done.extend(finished)
        for _ in finished:
            if sent < requests:
                send()
    ttft = [
        1e3 * (r.first_token_s - r.dispatched_s)
        for r in done
        if r.first_token_s is not None and r.dispatched_s is not None
    ]
    tpot = [
        1e3 * (r.end_s - r.first_token_s) / (r.max_tokens - 1)
        for r in done
        if r.end_s is not None and r.first_token_s is not None and r.max_tokens > 1
    ]
    return Expectation(
        ttft_p50_ms=statistics.median(ttft),
        tpot_p50_ms=statistics.median(tpot) if tpot else 0.0,
        tokens_per_s=sum(r.max_tokens for r in done) / now if now else 0.0,
    )
