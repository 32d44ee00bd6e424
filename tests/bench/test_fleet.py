"""bench.fleet: a simulator scenario as a Serve app on the emulated engine, and its requests."""

from __future__ import annotations

import pytest

from bench.fleet import app_args, scenario_requests
from serve_app.config import load_app_config
from sim.scenario import SCENARIOS
from sim.seed import router_seed
from sim.sweep import make_scenario
from sim.workload import sim_requests


@pytest.mark.parametrize("name", ["two_variant", "tiers"])
def test_the_app_runs_every_pool_on_the_emulated_engine_at_its_size_seeded_as_the_simulator(name: str):
    scenario = make_scenario(SCENARIOS[name], 30.0, 1.0, 1.0)
    config = load_app_config(app_args(scenario))  # validates as a deployment would
    assert [v.name for v in config.variants] == [p.name for p in scenario.pools]
    for variant, pool in zip(config.variants, scenario.pools, strict=True):
        assert variant.engine.backend == "emulated"
        assert variant.engine.engine_profile() == pool.engine_profile()
        assert variant.num_replicas == pool.pool_replicas
        assert variant.max_ongoing_requests == pool.max_ongoing_requests
        assert variant.latency_profile == router_seed(pool.engine_profile(), pool.mean_output_tokens)
        assert variant.replica_choice == scenario.replica_choice
    assert config.router.tiers == scenario.router.tiers


def test_a_fleet_scale_shrinks_replicas_and_traffic_together():
    full = make_scenario(SCENARIOS["two_variant"], 60.0, 1.0, 1.0)
    half = make_scenario(SCENARIOS["two_variant"], 60.0, 1.0, 0.5)
    assert [p.pool_replicas for p in half.pools] == [max(1, round(p.pool_replicas / 2)) for p in full.pools]
    assert len(scenario_requests(half)) < 0.7 * len(scenario_requests(full))


def test_the_requests_are_the_simulators_own_as_token_ids_of_the_drawn_lengths():
    scenario = make_scenario(SCENARIOS["two_variant"], 20.0, 1.0, 0.5)
    specs = scenario_requests(scenario)
    simulated = list(sim_requests(scenario.streams, scenario.duration_s, scenario.router))
    assert len(specs) == len(simulated) > 0
    for spec, sim in zip(specs, simulated, strict=True):
        assert (spec.send_at, spec.prompt_tokens, spec.max_tokens, spec.slo) == (
            sim.arrival_s,
            sim.prompt_tokens,
            sim.max_tokens,
            sim.slo,
        )
        assert isinstance(spec.prompt, list) and len(spec.prompt) == spec.prompt_tokens
    assert scenario_requests(scenario) == specs  # seeded: the same requests every time
