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
