"""The simulator's named scenarios: the heterogeneous fleet exercises what it is there for."""

from __future__ import annotations

from collections import Counter

from sim.scenario import heterogeneous_scenario, simulate

LONG_POOL = "llama-70b-fp8"


def test_prompts_beyond_the_8b_context_all_go_to_the_70b():
    scenario = heterogeneous_scenario(duration_s=30.0)

    result, run = simulate(scenario, "least_loaded", "static")

    long_ones = [r for r in result.records if r.prompt_tokens + r.max_tokens > 8192]
    assert long_ones
    assert {r.variant for r in long_ones} == {LONG_POOL}
    assert run.summary.failed == 0


def test_under_load_reservation_moves_batch_jobs_off_the_pool_that_long_prompts_need():
    # At nine times the base rate the 70B pool is near its limit with the long prompts that only it holds.
    scenario = heterogeneous_scenario(duration_s=60.0, rate_scale=9.0)
    off = scenario.model_copy(update={"router": scenario.router.model_copy(update={"reserve_slack": 0.0})})

    def batch_on_70b(s) -> int:
        result, _ = simulate(s, "slo", "static")
        return Counter(r.variant for r in result.records if r.slo_tier == "batch")[LONG_POOL]

    assert batch_on_70b(scenario) < batch_on_70b(off) / 2
