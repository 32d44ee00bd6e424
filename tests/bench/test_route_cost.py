"""bench.route_cost: the decision micro-benchmark runs the real router over a loaded fleet (no timing asserted)."""

from __future__ import annotations

import random

from bench.route_cost import fleet, measure, requests
from router import RouterConfig, RouterState, route


def test_the_benchmarked_decisions_are_real_ones_over_every_variant():
    rng = random.Random(0)
    views = fleet(8, rng)
    state = RouterState()
    decisions = [route(r, views, RouterConfig(), state) for r in requests(rng, 200)]
    assert all(len(d.predictions) >= 4 for d in decisions if d.variant is not None)  # every fitting candidate
    assert len({d.variant for d in decisions}) > 1  # a varied fleet: not one variant for everything


def test_the_measurement_reports_ordered_percentiles():
    result = measure(4, 300, "slo", seed=1)
    assert result.variants == 4 and result.decisions == 300
    assert 0 < result.p50_us <= result.p99_us <= result.max_us
    assert 0 < result.idle_p50_us <= result.idle_p99_us
    assert 0 < result.cpu_p50_us <= result.cpu_p99_us
