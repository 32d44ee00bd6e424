"""Prefix caches in the simulation: the replicas reuse blocks, and the router sees them as the serve app would."""

from __future__ import annotations

import pytest

from router import RouterConfig
from router.explain import parse_candidates
from sim.simulator import Simulation, SimVariant
from sim.workload import Stream, sim_requests
from tests.sim.helpers import profile
from traffic.arrivals import PoissonArrivals
from traffic.prefix import SharedPrefix
from traffic.workload import FixedLength, WorkloadConfig


def _run(prefix_routing: bool, prefix_view: str = "reported"):
    p = profile(kv_cache_tokens=200_000, max_running_requests=16, prefill_tokens_per_s=20_000, context_length=8192)
    variants = [SimVariant("v", p, num_replicas=4, max_ongoing_requests=64)]
    router = RouterConfig(prefix_routing=prefix_routing)
    workload = WorkloadConfig(
        input_len=FixedLength(value=64),
        output_len=FixedLength(value=8),
        prefix=SharedPrefix(groups=6, prefix_tokens=2048),
        slo_ttft_ms=2000,
    )
    stream = Stream(name="groups", arrivals=PoissonArrivals(rate=20.0), workload=workload)
    sim = Simulation(variants, router, replica_choice="least_prefill", prefix_view=prefix_view)  # type: ignore[arg-type]
    return sim.run(sim_requests([stream], 20.0, router)).records


def _hit_rate(records) -> float:
    ok = [r for r in records if r.status == 200]
    return sum(r.cached_tokens or 0 for r in ok) / sum(r.prompt_tokens for r in ok)


def test_the_engines_reuse_prefixes_whatever_the_router_knows():
    records = _run(prefix_routing=False)
    assert all(r.cached_tokens is not None for r in records if r.status == 200)
    assert _hit_rate(records) > 0.3  # each replica caches each group once it has served it
    assert all(parse_candidates(r.route_candidates)["v"]["cached"] == 0 for r in records if r.route_candidates)


def test_a_prefix_aware_router_keeps_groups_on_the_replicas_that_hold_them():
    blind, aware = _run(prefix_routing=False), _run(prefix_routing=True)
    assert _hit_rate(aware) > _hit_rate(blind)
    assert any(parse_candidates(r.route_candidates)["v"]["cached"] > 0 for r in aware if r.route_candidates)


def test_the_reported_index_comes_close_to_the_oracle():
    assert _hit_rate(_run(True, "reported")) == pytest.approx(_hit_rate(_run(True, "oracle")), abs=0.05)
