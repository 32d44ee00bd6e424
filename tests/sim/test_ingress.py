"""Which simulated ingress replica takes a request, and what each one starts with (sim/ingress.py)."""

from __future__ import annotations

from router import LatencyProfile, RouterConfig
from sim.ingress import IngressChoice, SimIngress


def test_one_ingress_takes_every_request():
    choice = IngressChoice(1, seed=3)

    assert {choice.pick() for _ in range(50)} == {0}


def test_two_ingresses_share_requests_without_alternating_by_index():
    assert [IngressChoice(2, seed=3).pick() for _ in range(2)] == [IngressChoice(2, seed=3).pick()] * 2  # seeded

    choice = IngressChoice(2, seed=3)
    sequence = [choice.pick() for _ in range(1000)]
    assert 400 < sequence.count(0) < 600
    # Not in turn: whatever alternates by request index (round_robin over two variants) must not line up with it.
    even = [sequence[i] for i in range(0, 1000, 2)]
    assert 0 < even.count(0) < len(even)


def test_each_ingress_starts_with_its_own_models_book_and_state():
    router = RouterConfig()
    profiles = [("a", LatencyProfile(prefill_tokens_per_s=1000.0)), ("b", None)]
    first, second = SimIngress.fresh(profiles, router), SimIngress.fresh(profiles, router)

    assert set(first.models) == {"a", "b"}
    assert first.models["a"] is not second.models["a"]
    assert first.book is not second.book and first.state is not second.state
    assert first.snapshot == {} and first.report_at == {}
