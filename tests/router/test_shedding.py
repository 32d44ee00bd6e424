"""Shedding hopeless requests (router/shedding.py): a request that the queues on every variant would make
miss its TTFT target by far is answered 429 with a Retry-After instead of being served late.

Views (tests/router/views.py): ``big`` prefills 1 token/ms after a 50 ms base, ``small`` 10 tokens/ms after
10 ms; with no error margins learned, predictions are plain arithmetic. The default ratio is 1.5.
"""

from __future__ import annotations

import pytest

from router import SLO, Reason, RequestFeatures, RouterConfig, RouterState, route
from router.shedding import MIN_OBSERVATIONS
from tests.router.views import big, small

TTFT_300 = SLO(ttft_ms=300.0)


def request(prompt_tokens: int = 100, slo: SLO = TTFT_300) -> RequestFeatures:
    return RequestFeatures(prompt_tokens=prompt_tokens, max_tokens=64, slo=slo)


def decide(req: RequestFeatures, variants, **config):
    return route(req, variants, RouterConfig(**config), RouterState())


def queued(view, tokens: int, *, learned: bool = True):
    """``view`` with ``tokens`` of prompts waiting for prefill (and no batch, so no decode steps to wait for),
    whose latency model has learned from enough requests to shed (unless ``learned`` is False)."""
    v = view(queued_prompt_tokens=tokens)
    if learned:
        v.latency.observations = MIN_OBSERVATIONS
    return v


def test_a_request_the_queues_make_hopeless_everywhere_is_shed_with_a_retry_after():
    # small: 10 + (100 + 6000) x 0.1 = 620 ms; big: 50 + 100 + 1000 = 1150 ms; both beyond 1.5 x 300 ms.
    decision = decide(request(), [queued(small, 6000), queued(big, 1000)])

    assert (decision.variant, decision.reason) == (None, Reason.SHED_HOPELESS)
    # The shortest queue should have room in 620 - 300 ms: never less than the configured floor.
    assert decision.retry_after_s == pytest.approx(1.0)
    assert decision.predictions["small"].ttft_ms == pytest.approx(620.0)


def test_the_retry_after_is_when_the_shortest_queue_should_have_room():
    decision = decide(request(), [queued(small, 30_000), queued(big, 5000)], retry_after_s=0.5)

    assert decision.reason == Reason.SHED_HOPELESS
    assert decision.retry_after_s == pytest.approx((3020 - 300) / 1000)  # small: 10 + (100 + 30000) x 0.1


def test_shedding_off_degrades_the_same_request():
    decision = decide(request(), [queued(small, 6000), queued(big, 1000)], shed_ttft_ratio=None)

    assert decision.reason == Reason.DEGRADED_SMALLEST_VIOLATION
    assert decision.variant == "small"


def test_a_miss_within_the_ratio_is_degraded_not_shed():
    # small: 10 + (100 + 3000) x 0.1 = 320 ms: a miss, by less than 1.5 x 300 ms.
    decision = decide(request(), [queued(small, 3000), queued(big, 1000)])

    assert decision.reason == Reason.DEGRADED_SMALLEST_VIOLATION
    assert decision.variant == "small"


def test_a_request_too_slow_for_its_target_even_on_an_idle_replica_is_not_shed():
    # Only big holds 3000 tokens: 50 + 3000 = 3050 ms idle against a 1000 ms target; the queue adds more,
    # but shedding would not help this request (or others like it) meet the target.
    decision = decide(request(3000, SLO(ttft_ms=1000.0)), [small(), queued(big, 5000)])

    assert decision.reason == Reason.DEGRADED_SMALLEST_VIOLATION
    assert decision.variant == "big"


def test_requests_without_a_ttft_target_are_never_shed():
    decision = decide(request(slo=SLO(tpot_ms=5.0)), [queued(small, 60_000), queued(big, 60_000)])

    assert decision.variant is not None


def test_a_model_still_at_its_seed_never_sheds():
    # The same hopeless queues, but small's model has not learned from enough requests to be trusted.
    decision = decide(request(), [queued(small, 6000, learned=False), queued(big, 1000)])

    assert decision.reason == Reason.DEGRADED_SMALLEST_VIOLATION
    assert decision.variant == "small"
