"""Capacity reservation in the SLO policy: requests that have another variant meeting their SLO leave a busy
variant to the requests that only it can take (router/reservation.py), and never at the cost of their own SLO.

Views (tests/router/views.py): ``big`` holds 8k tokens and prefills 1 token/ms after a 50 ms base; ``small``
holds 2k, so a 3000-token prompt is exclusive to ``big``. Latency models start with no error margin, so the
room a reservation computes is plain arithmetic: 1 - predicted / target.
"""

from __future__ import annotations

from router import SLO, LatencyModel, Reason, RequestFeatures, RouterConfig, RouterState, VariantView, route
from router.policy import route_idle
from router.reservation import record_exclusive
from tests.router.views import SMALL_PROFILE, big, saturated, small

LONG = SLO(ttft_ms=10_000.0, tpot_ms=100.0)  # a long prompt only big holds
NO_SLO = SLO()  # a batch job
INTERACTIVE = SLO(ttft_ms=300.0, tpot_ms=50.0)


def request(prompt_tokens: int, slo: SLO) -> RequestFeatures:
    return RequestFeatures(prompt_tokens=prompt_tokens, max_tokens=128, slo=slo)


def busy_big(queued_prompt_tokens: int = 5000):
    return big(queued_requests=2, queued_prompt_tokens=queued_prompt_tokens)


def seen_a_long_prompt(config: RouterConfig) -> RouterState:
    state = RouterState()
    decision = route(request(3000, LONG), [small(), big()], config, state)
    assert decision.variant == "big"
    assert (LONG.ttft_ms, LONG.tpot_ms) in state.exclusive["big"]
    return state


def test_a_batch_job_leaves_a_busy_big_model_to_the_long_prompts_only_it_holds():
    config = RouterConfig()
    state = seen_a_long_prompt(config)

    # A long prompt arriving after the job on big: 50 + 3000 + 5000 queued + 1000 = 9050 ms of 10000.
    decision = route(request(1000, NO_SLO), [small(), busy_big()], config, state)

    assert decision.variant == "small"
    assert decision.reason == Reason.SLO_MET_AROUND_RESERVATION


def test_without_exclusive_demand_the_batch_job_takes_the_best_quality():
    decision = route(request(1000, NO_SLO), [small(), busy_big()], RouterConfig(), RouterState())

    assert decision.variant == "big"
    assert decision.reason == Reason.SLO_MET_BEST_QUALITY


def test_an_idle_big_model_still_takes_flexible_requests():
    config = RouterConfig()
    state = seen_a_long_prompt(config)

    # 50 + 3000 + 1000 = 4050 ms of 10000 leaves 0.6 of the target: more than reserve_slack (0.2).
    decision = route(request(1000, NO_SLO), [small(), big()], config, state)

    assert decision.variant == "big"
    assert decision.reason == Reason.SLO_MET_BEST_QUALITY


def test_the_room_kept_is_judged_on_the_ttft_target_less_the_path_outside_the_ingress():
    # 4050 ms of a 10000 ms target leave 0.6; with 7000 ms of it spent outside the ingress, 4050 of the 3000 left
    # leave none: the flexible request goes around big.
    config = RouterConfig(ttft_path_ms=7000.0)
    state = seen_a_long_prompt(RouterConfig())

    decision = route(request(1000, NO_SLO), [small(), big()], config, state)

    assert decision.variant == "small"
    assert decision.reason == Reason.SLO_MET_AROUND_RESERVATION


def test_a_reservation_never_costs_a_request_its_own_slo():
    config = RouterConfig()
    state = RouterState()
    record_exclusive(state.exclusive, "big", request(3000, SLO(ttft_ms=5000.0)), state.decisions)
    # big: 50 + 100 + 1500 = 1650 ms meets 3000 (less 10% headroom), but leaves a long prompt 350 ms of 5000;
    # small has 30 requests waiting for a slot ahead of this one and is predicted to miss.
    variants = [small(**saturated(queued=30)), busy_big(queued_prompt_tokens=1500)]

    decision = route(request(100, SLO(ttft_ms=3000.0)), variants, config, state)

    assert not decision.predictions["small"].meets_slo
    assert decision.variant == "big"


def test_a_reservation_lapses_when_no_exclusive_request_came_for_a_while():
    config = RouterConfig(reservation_window=3)
    state = seen_a_long_prompt(config)
    for _ in range(3):
        route(request(100, NO_SLO), [small(), busy_big()], config, state)

    decision = route(request(1000, NO_SLO), [small(), busy_big()], config, state)

    assert decision.variant == "big"


def test_reserve_slack_zero_turns_reservations_off():
    config = RouterConfig(reserve_slack=0.0)
    state = seen_a_long_prompt(config)

    decision = route(request(1000, NO_SLO), [small(), busy_big()], config, state)

    assert decision.variant == "big"


def test_when_every_variant_is_reserved_the_one_left_with_the_most_room_takes_the_request():
    config = RouterConfig()
    state = seen_a_long_prompt(config)
    record_exclusive(state.exclusive, "small", request(100, INTERACTIVE), state.decisions)
    # small after the job: 10 + (100 + 1500 + 1000) x 0.1 = 270 ms of 300 (room 0.1); big: none left.
    variants = [small(queued_requests=1, queued_prompt_tokens=1500), busy_big(queued_prompt_tokens=7000)]

    decision = route(request(1000, NO_SLO), variants, config, state)

    assert decision.variant == "small"
    assert decision.reason == Reason.SLO_MET_AROUND_RESERVATION


def test_requests_without_targets_reserve_nothing():
    state = RouterState()

    record_exclusive(state.exclusive, "big", request(3000, NO_SLO), decision=1)

    assert state.exclusive == {}


def test_the_tightest_kind_of_exclusive_demand_sets_the_reservation():
    # small was recently the only home of one interactive request and of many loose ones. A cheap batch job
    # after which an interactive request on small would wait 10 + (100 + 1500 + 1000) x 0.1 = 270 ms of 300
    # (room 0.1) goes to big, however many loose requests (whose targets it leaves room under) came since.
    config = RouterConfig(objective="cost")
    state = RouterState()
    record_exclusive(state.exclusive, "small", request(100, INTERACTIVE), state.decisions)
    for _ in range(30):
        record_exclusive(state.exclusive, "small", request(100, SLO(ttft_ms=10_000.0)), state.decisions)

    decision = route(request(1000, NO_SLO), [small(queued_requests=1, queued_prompt_tokens=1500), big()], config, state)

    assert decision.variant == "big"
    assert decision.reason == Reason.SLO_MET_AROUND_RESERVATION


def test_a_request_missed_everywhere_reserves_room_where_it_fits_best_when_idle():
    # Both queued far beyond the interactive target; idle, small would give 20 ms and big 150 ms.
    variants = [
        small(queued_requests=1, queued_prompt_tokens=20_000),
        big(queued_requests=1, queued_prompt_tokens=3000),
    ]
    state = RouterState()

    decision = route(request(100, INTERACTIVE), variants, RouterConfig(shed_ttft_ratio=None), state)

    assert decision.reason == Reason.DEGRADED_SMALLEST_VIOLATION
    assert (INTERACTIVE.ttft_ms, INTERACTIVE.tpot_ms) in state.exclusive["small"]
    assert "big" not in state.exclusive


def test_a_request_sure_to_meet_only_on_a_reserved_variant_moves_to_one_likely_to_meet():
    # small: 10 + (100 + 2500) x 0.1 = 270 ms meets 1000 (less 10% headroom), and leaves an interactive
    # request 10 + 2700 x 0.1 = 280 ms of 300; big: 50 + 100 + 800 = 950 ms is likely (under 1000), not sure.
    config = RouterConfig()
    state = RouterState()
    record_exclusive(state.exclusive, "small", request(100, INTERACTIVE), state.decisions)
    variants = [small(queued_requests=1, queued_prompt_tokens=2500), big(queued_requests=1, queued_prompt_tokens=800)]

    decision = route(request(100, SLO(ttft_ms=1000.0)), variants, config, state)

    assert decision.predictions["small"].meets_slo and not decision.predictions["big"].meets_slo
    assert decision.variant == "big"
    assert decision.reason == Reason.SLO_MET_AROUND_RESERVATION


def test_a_request_does_not_leave_its_variant_to_keep_room_for_its_own_kind():
    # small is the only variant sure to meet interactive requests (big's TPOT: 40 + 7 x 1 = 47 ms, over 50
    # less the 10% headroom). This one leaves the next interactive request 10 + (100 + 2400) x 0.1 = 260 ms
    # of 300 (room 0.13, under reserve_slack), but that one would face the same choice: it stays.
    state = RouterState()
    record_exclusive(state.exclusive, "small", request(100, INTERACTIVE), state.decisions)
    variants = [small(queued_requests=1, queued_prompt_tokens=2300), big(running_requests=8)]

    decision = route(request(100, INTERACTIVE), variants, RouterConfig(), state)

    assert decision.predictions["small"].meets_slo and not decision.predictions["big"].meets_slo
    assert decision.variant == "small"
    assert decision.reason == Reason.SLO_MET_BEST_QUALITY


def test_a_request_no_variant_is_sure_of_keeps_room_where_it_fits_best_idle_not_where_it_went():
    # Only big is likely (280 ms of 300); small is saturated. Idle, small would suit it best (20 ms, 10 ms/tok).
    state = RouterState()
    variants = [small(**saturated(queued=30)), big(queued_requests=1, queued_prompt_tokens=130)]

    decision = route(request(100, INTERACTIVE), variants, RouterConfig(), state)

    assert decision.variant == "big"
    assert decision.reason == Reason.SLO_LIKELY
    assert (INTERACTIVE.ttft_ms, INTERACTIVE.tpot_ms) in state.exclusive["small"]
    assert "big" not in state.exclusive


# Past capacity: a costly loose request gives a variant up to the tighter, cheaper requests kept for it.
LOOSE = SLO(ttft_ms=1000.0)


def kept_for_interactive_on_small() -> RouterState:
    state = RouterState()
    record_exclusive(state.exclusive, "small", request(100, INTERACTIVE), state.decisions)
    return state


def test_a_costly_loose_request_yields_a_variant_whose_tighter_requests_it_would_make_miss():
    # small: the 1500-token request meets its 1000 ms there (10 + 3500 x 0.1 = 360 ms), but an interactive
    # request after it would wait 10 + (100 + 2000 + 1500) x 0.1 = 370 ms of 300; big misses it (1550 ms).
    variants = [small(queued_requests=1, queued_prompt_tokens=2000), big()]

    decision = route(request(1500, LOOSE), variants, RouterConfig(), kept_for_interactive_on_small())

    assert decision.predictions["small"].meets_slo and decision.predictions["big"].ttft_ms > LOOSE.ttft_ms
    assert decision.variant == "big"
    assert decision.reason == Reason.YIELDED_TO_RESERVATION


def test_a_long_prompt_yields_a_variant_whose_kept_requests_its_context_would_slow_past_their_tpot():
    # small decodes 8 sequences holding 1000 tokens of context; each context token adds 0.02 ms to its step.
    # An interactive request there now: 10 + 0.1 x 8 + 0.02 x 1100 = 32.8 ms/token of 50. Once the
    # 1500-token prompt decodes there too: 10 + 0.1 x 9 + 0.02 x 2600 = 62.9 ms. Its own TTFT target holds.
    def slowed_by_context(per_token: float):
        model = LatencyModel(SMALL_PROFILE.model_copy(update={"tpot_ms_per_context_token": per_token}))
        return small(running_requests=8, context_tokens=1000, latency=model)

    decision = route(
        request(1500, LOOSE), [slowed_by_context(0.02), big()], RouterConfig(), kept_for_interactive_on_small()
    )

    assert decision.predictions["small"].meets_slo
    assert decision.variant == "big"
    assert decision.reason == Reason.YIELDED_TO_RESERVATION
    # A model that has learned no cost of context keeps it on small.
    no_cost = route(
        request(1500, LOOSE), [slowed_by_context(0.0), big()], RouterConfig(), kept_for_interactive_on_small()
    )
    assert no_cost.variant == "small"


def test_it_keeps_the_variant_while_the_tighter_requests_still_meet_theirs_there():
    # After it: 10 + (100 + 500 + 1500) x 0.1 = 220 ms of 300.
    variants = [small(queued_requests=1, queued_prompt_tokens=500), big()]

    decision = route(request(1500, LOOSE), variants, RouterConfig(), kept_for_interactive_on_small())

    assert decision.variant == "small"


def test_a_loose_request_as_short_as_those_kept_for_yields_too():
    # After it: 10 + (100 + 3000 + 100) x 0.1 = 330 ms of 300: one more request of any length makes them miss.
    variants = [small(queued_requests=1, queued_prompt_tokens=3000), busy_big(queued_prompt_tokens=2000)]

    decision = route(request(100, LOOSE), variants, RouterConfig(), kept_for_interactive_on_small())

    assert decision.variant == "big"
    assert decision.reason == Reason.YIELDED_TO_RESERVATION


def test_a_request_of_the_kind_kept_for_never_yields_to_its_own_kind():
    # small: 10 + (100 + 2750) x 0.1 = 295 ms, likely under 300 (big: 2150 ms, not); the next interactive
    # request would then miss (305 ms), but this one is as entitled to small as that one.
    variants = [small(queued_requests=1, queued_prompt_tokens=2750), busy_big(queued_prompt_tokens=2000)]

    decision = route(request(100, INTERACTIVE), variants, RouterConfig(), kept_for_interactive_on_small())

    assert decision.variant == "small"
    assert decision.reason == Reason.SLO_LIKELY


def test_it_does_not_yield_to_a_variant_it_would_crowd_just_the_same():
    state = kept_for_interactive_on_small()
    record_exclusive(state.exclusive, "big", request(100, INTERACTIVE), state.decisions)
    variants = [small(queued_requests=1, queued_prompt_tokens=2000), big()]

    decision = route(request(1500, LOOSE), variants, RouterConfig(), state)

    assert decision.variant == "small"


# Below that: a loose request that meets its SLO on a variant, leaving the tighter requests kept there room under
# their targets but less than reserve_slack, by a prefill longer than that room, goes to a variant likely to meet it
# instead (router.policy, "Not at the expense of tighter requests"). In the simulator's two_variant fleet at
# capacity the long RAG prompts the 8B took in that state were behind most of its interactive misses
# (docs/routing.md).


def loose_between(small_queued_tokens: int = 1800, big_queued_tokens: int = 100) -> list[VariantView]:
    # For an 800-token request, small: 10 + (1800 + 800) x 0.1 = 270 ms meets its 1000 (less 10% headroom), and
    # leaves an interactive request 10 + (100 + 1800 + 800) x 0.1 = 280 ms of 300: it would still meet (room 0.07,
    # not crowded out), with less room than reserve_slack (0.2), and the 80 ms of its own prefill are more than
    # that slack of 300 ms. big: 50 + 100 + 800 = 950 ms, likely (under 1000), not sure.
    return [
        small(queued_requests=1, queued_prompt_tokens=small_queued_tokens),
        big(queued_requests=1, queued_prompt_tokens=big_queued_tokens),
    ]


def kept_for_loose_on_big(state: RouterState) -> RouterState:
    # The loose kind has big kept for it too, short of room (a typical one after this: 50 + 100 + 800 + 800 =
    # 1750 ms of 1000): the reservation step finds no free variant and leaves the request on small.
    record_exclusive(state.exclusive, "big", request(800, LOOSE), state.decisions)
    return state


def test_a_long_loose_request_leaving_tighter_requests_short_of_room_goes_to_a_variant_likely_to_meet_it():
    state = kept_for_loose_on_big(kept_for_interactive_on_small())

    decision = route(request(800, LOOSE), loose_between(), RouterConfig(), state)

    assert decision.predictions["small"].meets_slo and not decision.predictions["big"].meets_slo
    assert decision.predictions["big"].ttft_ms < 1000.0  # LOOSE's TTFT target
    assert decision.variant == "big"
    assert decision.reason == Reason.SLO_MET_AROUND_RESERVATION


def test_a_prompt_whose_prefill_is_within_the_slack_stays():
    # 400 tokens: small 10 + (2200 + 400) x 0.1 = 270 ms, an interactive request after it 280 ms (room 0.07), but
    # its own prefill is 40 ms of the 60 that reserve_slack keeps. big: 50 + 500 + 400 = 950 ms, likely.
    state = kept_for_loose_on_big(kept_for_interactive_on_small())

    decision = route(request(400, LOOSE), loose_between(2200, 500), RouterConfig(), state)

    assert decision.variant == "small"
    assert decision.reason == Reason.SLO_MET_BEST_QUALITY


def test_it_stays_where_the_tighter_requests_keep_reserve_slack():
    # After it: 10 + (100 + 1000 + 800) x 0.1 = 200 ms of 300 (room 0.33).
    state = kept_for_loose_on_big(kept_for_interactive_on_small())

    decision = route(request(800, LOOSE), loose_between(small_queued_tokens=1000), RouterConfig(), state)

    assert decision.variant == "small"
    assert decision.reason == Reason.SLO_MET_BEST_QUALITY


def test_it_stays_where_no_other_variant_is_likely_to_meet_it():
    # big: 50 + 1000 + 800 = 1850 ms of 1000.
    state = kept_for_loose_on_big(kept_for_interactive_on_small())

    decision = route(request(800, LOOSE), loose_between(big_queued_tokens=1000), RouterConfig(), state)

    assert decision.variant == "small"


def test_it_does_not_go_to_a_variant_whose_own_tighter_requests_it_would_leave_short():
    state = kept_for_loose_on_big(kept_for_interactive_on_small())
    record_exclusive(state.exclusive, "big", request(100, INTERACTIVE), state.decisions)

    decision = route(request(800, LOOSE), loose_between(), RouterConfig(), state)

    assert decision.variant == "small"


def test_with_on_violation_reject_it_stays_where_it_is_sure_to_be_met():
    state = kept_for_loose_on_big(kept_for_interactive_on_small())

    decision = route(request(800, LOOSE), loose_between(), RouterConfig(on_violation="reject"), state)

    assert decision.variant == "small"


def test_reserve_slack_zero_turns_yielding_off_too():
    variants = [small(queued_requests=1, queued_prompt_tokens=2000), big()]

    decision = route(request(1500, LOOSE), variants, RouterConfig(reserve_slack=0.0), kept_for_interactive_on_small())

    assert decision.variant == "small"


def test_with_on_violation_reject_a_request_that_meets_its_slo_is_served_not_yielded():
    variants = [small(queued_requests=1, queued_prompt_tokens=2000), big()]

    decision = route(
        request(1500, LOOSE), variants, RouterConfig(on_violation="reject"), kept_for_interactive_on_small()
    )

    assert decision.variant == "small"


def test_a_variant_whose_long_prompts_are_unchecked_keeps_the_cold_start_margin_for_their_room():
    from router.latency import new_latency_model
    from tests.router.views import BIG_PROFILE

    config = RouterConfig()  # cold start: a margin of 0.5 worth 32 errors, per class of prompt length
    state = seen_a_long_prompt(config)
    model = new_latency_model(BIG_PROFILE, config)
    for _ in range(200):  # big has predicted 1000-token prompts exactly, never a 3000-token one
        model.observe_ttft(1000, 1050.0, predicted_ms=1050.0)
    assert model.ttft_margin_for(1000) < 0.1
    assert model.ttft_margin_for(3000) == 0.5

    # A long prompt after the job, 1000 tokens queued: 50 + 3000 + 1000 + 1000 = 5050 ms (the model's weights
    # learned nothing new: its predictions were right), x (1 + 1.5 x 0.5) = 8838 of 10000: less than
    # reserve_slack left. With one margin for every length the job's class would have set it (x 1.1: 0.44 left).
    decision = route(
        request(1000, NO_SLO),
        [small(), big(queued_requests=1, queued_prompt_tokens=1000, latency=model)],
        config,
        state,
    )

    assert decision.variant == "small"
    assert decision.reason == Reason.SLO_MET_AROUND_RESERVATION


# A 3000-token prompt and its 128 tokens, open on big: beyond small's 2k context, so only big could take it.
HOLDING_LONG = {"long_inflight_tokens": 3128}


def test_a_request_sure_elsewhere_does_not_join_a_variant_holding_work_only_it_could_take():
    # Big meets the chat with room to spare (no exclusive demand recorded, so no predicted reservation either).
    decision = route(request(100, INTERACTIVE), [small(), big(**HOLDING_LONG)], RouterConfig(), RouterState())

    assert decision.variant == "small"
    assert decision.reason == Reason.SLO_MET_AROUND_RESERVATION


def test_work_that_another_variant_could_take_keeps_nothing():
    # 2000 tokens fit small's 2048: that request was not big's alone.
    views = [small(), big(long_inflight_tokens=2000)]
    decision = route(request(100, INTERACTIVE), views, RouterConfig(), RouterState())

    assert decision.variant == "big"
    assert decision.reason == Reason.SLO_MET_BEST_QUALITY


def test_a_request_no_other_variant_is_sure_to_meet_still_joins_the_variant_holding_such_work():
    # Small's queue puts the chat's TTFT past its target there: big is the only sure one.
    views = [small(**saturated(queued=8)), big(**HOLDING_LONG)]
    decision = route(request(100, INTERACTIVE), views, RouterConfig(), RouterState())

    assert decision.predictions["small"].meets_slo is False
    assert decision.variant == "big"


def test_a_request_keeps_away_only_for_a_variant_with_room_of_its_own():
    config = RouterConfig()
    # Small recently was the only one to meet interactive chat, and with 2400 prompt tokens queued a chat after
    # this request would find 10 + 0.1 * (2400 + 100 + 100) = 270 ms of its 300: less than reserve_slack left.
    state = RouterState()
    record_exclusive(state.exclusive, "small", request(100, INTERACTIVE), state.decisions)
    views = [small(running_requests=4, queued_requests=1, queued_prompt_tokens=2400), big(**HOLDING_LONG)]
    decision = route(request(100, SLO(ttft_ms=2000.0, tpot_ms=100.0)), views, config, state)

    assert decision.predictions["small"].meets_slo
    assert decision.variant == "big"


def test_an_idle_fleet_has_no_such_work_on_it():
    views = [small(), big(**HOLDING_LONG)]
    assert route_idle(request(100, INTERACTIVE), views, RouterConfig()).variant == "big"


def test_reserve_slack_zero_turns_keeping_away_from_such_work_off():
    views = [small(), big(**HOLDING_LONG)]
    decision = route(request(100, INTERACTIVE), views, RouterConfig(reserve_slack=0.0), RouterState())
    assert decision.variant == "big"
