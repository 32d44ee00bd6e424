"""The hot path's rewrite changes no decision: ``router.route`` against the pre-rewrite oracle
(``tests/router/route_reference.py``) over random fleets, loads, requests, configs and model snapshots.

Each case keeps one fleet and interleaves decisions with "snapshots": new engine figures on every view and
new observations on every latency model (its weights and error margins move). The oracle predicts with the
model's long forms on its live weights, so a fast path that kept a figure of an earlier snapshot would
decide differently here. Decisions must be equal in every field, predictions included (exact floats), and
the two router states (round-robin position, reservations) must stay equal.
"""

from __future__ import annotations

import pytest

from router import RouterState, route
from router.load import replica_load, serving_replicas
from tests.router import route_reference
from tests.router.random_cases import SEEDS, decisions


@pytest.mark.parametrize("seed", SEEDS)
def test_route_decides_as_the_reference_over_random_fleets_and_snapshots(seed: int):
    fast, reference = RouterState(), RouterState()
    for req, views, cfg in decisions(seed):
        for v in views:
            if serving_replicas(v, cfg):
                assert replica_load(v, cfg) == route_reference.replica_load(v, cfg)  # every field
        got = route(req, views, cfg, fast)
        assert got == route_reference.route(req, views, cfg, reference)
        assert fast == reference


def test_the_cases_reach_every_path_of_the_policy():
    """The random cases above are worth something only if they reach the reservation, the yield, the
    likely-meeting pick, the shedding and each rejection."""
    seen = set()
    for seed in SEEDS:
        state = RouterState()
        seen.update(str(route_reference.route(req, views, cfg, state).reason) for req, views, cfg in decisions(seed))
    assert {
        "slo_met_best_quality",
        "slo_met_lowest_cost",
        "slo_met_around_reservation",
        "slo_likely",
        "degraded_smallest_violation",
        "yielded_to_reservation",
        "shed_hopeless",
        "rejected_slo",
        "rejected_overloaded",
        "rejected_context",
        "rejected_unavailable",
        "rejected_unsupported_field",
        "rejected_unknown_variant",
        "pinned",
        "round_robin",
        "least_loaded",
        "length_threshold",
        "largest",
    } - seen == set()
