"""router.views: a variant's view from its replicas' reports, as the app's routing table and the simulator build it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from router import LatencyModel, LatencyProfile, VariantView
from router.views import REFRESH_PERIOD_S, STARTING_OVERDUE_S, starting_ready_in_ms, variant_view

MODEL = LatencyModel(LatencyProfile())


@dataclass(frozen=True)
class Figures:
    context_length: int = 4096
    max_running_requests: int = 16
    queued_requests: int = 0
    running_requests: int = 0
    queued_prompt_tokens: int = 0
    kv_used_fraction: float = 0.0
    recent_tpot_ms: float = 0.0
    recent_decode_batch: float = 0.0
    context_tokens: int = 0


def _view(replicas: list[Figures], starting: Sequence[float] = (), now: float = 100.0, **overrides: Any) -> VariantView:
    fields: dict[str, Any] = {
        "quality": 0.8,
        "cost_per_1k_tokens": 0.2,
        "latency": MODEL,
        "sampling_fields": frozenset({"seed"}),
        "replicas": replicas,
        "starting_serves_at": starting,
        "known_context_length": 2048,
        "now": now,
    }
    return variant_view("v", **(fields | overrides))


def test_a_view_sums_its_replicas_load_and_takes_their_smallest_limits():
    view = _view(
        [
            Figures(
                running_requests=3,
                queued_requests=1,
                queued_prompt_tokens=500,
                kv_used_fraction=0.2,
                context_tokens=1200,
                recent_tpot_ms=20.0,
                recent_decode_batch=3.0,
            ),
            Figures(
                context_length=2048,
                max_running_requests=8,
                running_requests=5,
                queued_prompt_tokens=100,
                kv_used_fraction=0.6,
                context_tokens=3000,
                recent_tpot_ms=30.0,
                recent_decode_batch=5.0,
            ),
        ]
    )

    assert (view.ready_replicas, view.context_length, view.max_running_requests) == (2, 2048, 8)
    assert (view.running_requests, view.queued_requests, view.queued_prompt_tokens) == (8, 1, 600)
    assert view.kv_used_fraction == 0.6  # the fullest replica's
    assert view.context_tokens == 4200
    assert view.recent_decode_batch == 8.0 and 20.0 < view.recent_tpot_ms < 30.0  # router.load.decode_pace
    assert (view.quality, view.cost_per_1k_tokens, view.sampling_fields) == (0.8, 0.2, frozenset({"seed"}))
    assert view.latency is MODEL


def test_starting_replicas_beside_ready_ones_count_with_when_they_serve():
    view = _view([Figures()], starting=[102.0, 104.0, 100.0 - STARTING_OVERDUE_S - 1.0])

    assert (view.starting_replicas, view.starting_ready_in_ms) == (2, pytest.approx(4000.0))


def test_a_variant_with_no_ready_replica_shows_one_starting_replica_of_one_slot_and_its_known_context():
    view = _view([], starting=[104.0])

    assert (view.ready_replicas, view.starting_replicas, view.max_running_requests) == (0, 1, 1)
    assert (view.context_length, view.starting_ready_in_ms, view.context_tokens) == (2048, 0.0, 0)


def test_a_batch_size_of_zero_reported_counts_as_one_slot():
    assert _view([Figures(max_running_requests=0)]).max_running_requests == 1


def test_a_starting_replica_is_counted_until_it_is_overdue_and_one_due_now_from_the_next_refresh():
    now = 100.0

    assert starting_ready_in_ms([], now) == (0, 0.0)
    assert starting_ready_in_ms([now + 2.0, now + 0.5], now) == (2, pytest.approx(2000.0))
    assert starting_ready_in_ms([now - 0.5], now) == (1, REFRESH_PERIOD_S * 1000.0)
    assert starting_ready_in_ms([now - STARTING_OVERDUE_S - 0.1], now) == (0, 0.0)
