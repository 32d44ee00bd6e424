"""The baseline policies behave as named, behind the same ``route`` entry as the SLO policy."""

from __future__ import annotations

from collections import Counter

from router import SLO, Reason, RequestFeatures, RouterConfig, RouterState, route
from tests.router.views import big, saturated, small


def request(prompt_tokens: int = 100) -> RequestFeatures:
    return RequestFeatures(prompt_tokens=prompt_tokens, max_tokens=128, slo=SLO(ttft_ms=300.0, tpot_ms=50.0))


def test_round_robin_takes_each_variant_in_turn_whatever_the_load():
    config = RouterConfig(policy="round_robin")
    state = RouterState()
    variants = [small(), big(**saturated(queued=4))]

    picks = [route(request(), variants, config, state) for _ in range(6)]

    assert [d.variant for d in picks] == ["small", "big"] * 3
    assert {d.reason for d in picks} == {Reason.ROUND_ROBIN}
    assert state.round_robin_next == 6


def test_round_robin_state_belongs_to_the_caller():
    config = RouterConfig(policy="round_robin")
    variants = [small(), big()]
    first, second = RouterState(), RouterState()

    picks = Counter(route(request(), variants, config, state).variant for state in (first, second))

    assert picks == {"small": 2}


def test_least_loaded_takes_the_fewest_running_and_queued_per_replica():
    config = RouterConfig(policy="least_loaded")

    busy_big = route(request(), [small(running_requests=3), big(running_requests=10)], config, RouterState())
    # Per replica: big's 10 over 4 replicas is less than small's 3 on one.
    spread = [small(running_requests=3), big(running_requests=10, ready_replicas=4)]
    spread_big = route(request(), spread, config, RouterState())

    assert (busy_big.variant, busy_big.reason) == ("small", Reason.LEAST_LOADED)
    assert spread_big.variant == "big"


def test_length_threshold_sends_short_prompts_to_the_smallest_context_and_long_ones_to_the_largest():
    config = RouterConfig(policy="length_threshold", length_threshold_tokens=1024)
    variants = [big(), small(**saturated(queued=8))]  # load plays no part

    short = route(request(prompt_tokens=1024), variants, config, RouterState())
    long = route(request(prompt_tokens=1025), variants, config, RouterState())

    assert (short.variant, short.reason) == ("small", Reason.LENGTH_THRESHOLD)
    assert long.variant == "big"


def test_largest_takes_the_highest_quality_that_fits_whatever_the_load():
    config = RouterConfig(policy="largest")

    loaded = route(request(), [small(), big(**saturated(queued=8))], config, RouterState())
    too_long_for_medium = route(
        request(prompt_tokens=3000),
        [small(), big(name="medium", quality=0.7, context_length=3000), big(name="long", quality=0.5)],
        config,
        RouterState(),
    )

    assert (loaded.variant, loaded.reason) == ("big", Reason.LARGEST)
    assert too_long_for_medium.variant == "long"


def test_a_baseline_pick_past_its_queue_bound_is_rejected_not_rerouted():
    config = RouterConfig(policy="largest", queue_bound_per_replica=4)

    decision = route(request(), [small(), big(**saturated(queued=8))], config, RouterState())

    assert (decision.variant, decision.reason) == (None, Reason.REJECTED_OVERLOADED)


def test_baselines_skip_variants_without_serving_replicas_and_still_report_predictions():
    config = RouterConfig(policy="largest")

    decision = route(request(), [small(), big(ready_replicas=0)], config, RouterState())

    assert decision.variant == "small"
    assert set(decision.predictions) == {"small"}


def test_prefix_affinity_takes_the_longest_cached_match_while_loads_are_balanced():
    config = RouterConfig(policy="prefix_affinity")
    cached_big = [small(max_cached_tokens=0), big(max_cached_tokens=900)]
    decision = route(request(1000), cached_big, config, RouterState())
    assert (decision.variant, decision.reason) == ("big", Reason.PREFIX_AFFINITY)
    # Under 10% of the prompt is not worth following: the least loaded, as with nothing cached.
    barely = [small(), big(max_cached_tokens=50, running_requests=8)]
    assert route(request(1000), barely, config, RouterState()).variant == "small"


def test_prefix_affinity_gives_up_the_match_when_loads_are_out_of_balance():
    config = RouterConfig(policy="prefix_affinity")
    variants = [small(), big(max_cached_tokens=900, running_requests=16, queued_requests=8)]
    assert route(request(1000), variants, config, RouterState()).variant == "small"


def test_weighted_prefix_sums_the_match_the_queue_and_the_free_kv_three_two_two():
    config = RouterConfig(policy="weighted_prefix")
    # The match (3 x 0.9) outweighs the other variant's shorter queue (2 x 1) with equal KV.
    variants = [small(), big(max_cached_tokens=900, queued_requests=2)]
    decision = route(request(1000), variants, config, RouterState())
    assert (decision.variant, decision.reason) == ("big", Reason.WEIGHTED_PREFIX)
    # A small match does not: the queue and the KV decide.
    variants = [small(), big(max_cached_tokens=100, queued_requests=2)]
    assert route(request(1000), variants, config, RouterState()).variant == "small"


def test_every_setup_names_a_router_config():
    from router.config import SETUPS

    for name, fields in SETUPS.items():
        config = RouterConfig.model_validate(fields)
        assert config.policy == (name if name != "slo_blind" else "slo")
    assert RouterConfig.model_validate(SETUPS["slo_blind"]).prefix_routing is False
