"""The SLO policy on constructed states: context limits, pinning, SLO-meeting choice, objectives,
degrade vs reject, admission control and shedding, replicas that are not (yet) serving."""

from __future__ import annotations

import pytest

from router import SLO, Reason, RequestFeatures, RouterConfig, RouterState, route
from router.config import Policy
from tests.router.views import big, saturated, small, with_error_margins

INTERACTIVE = SLO(ttft_ms=300.0, tpot_ms=50.0)
ALL_POLICIES: list[Policy] = ["slo", "round_robin", "least_loaded", "length_threshold", "largest"]


def request(prompt_tokens: int = 100, max_tokens: int = 128, **fields) -> RequestFeatures:
    fields.setdefault("slo", INTERACTIVE)
    return RequestFeatures(prompt_tokens=prompt_tokens, max_tokens=max_tokens, **fields)


def decide(req: RequestFeatures, variants, **config):
    return route(req, variants, RouterConfig(**config), RouterState())


# --- SLO-meeting choice ----------------------------------------------------------------------------


def test_idle_big_model_meets_a_tight_slo_so_it_gets_the_request():
    decision = decide(request(), [small(), big()])

    assert decision.variant == "big"
    assert decision.reason == Reason.SLO_MET_BEST_QUALITY
    assert decision.predictions["big"].meets_slo
    assert decision.predictions["big"].ttft_ms == pytest.approx(150.0)  # 50 base + 100 tokens x 1 ms
    assert decision.predictions["big"].tpot_ms == pytest.approx(40.0)


def test_queued_big_model_sends_the_interactive_request_to_the_small_one():
    decision = decide(request(), [small(), big(**saturated(queued=4))])

    assert decision.variant == "small"
    assert decision.reason == Reason.SLO_MET_BEST_QUALITY
    assert not decision.predictions["big"].meets_slo
    assert decision.predictions["big"].waiting_for_slot == pytest.approx(5.0)  # 4 queued + itself
    assert decision.predictions["small"].meets_slo


def test_a_big_model_whose_sequences_decode_slower_than_its_model_says_loses_the_tight_request():
    # big's model predicts 43 ms/token at a batch of 4 (under the 50 ms target); its engine has measured 90.
    slowed = big(running_requests=3, recent_tpot_ms=90.0, recent_decode_batch=3.0)
    decision = decide(request(), [small(), slowed])

    assert decision.variant == "small"
    assert decision.predictions["big"].tpot_ms == pytest.approx(90.0 * 43.0 / 42.0)
    assert decide(request(), [small(), big(running_requests=3)]).variant == "big"  # the model alone: big


def test_requests_the_ingress_has_in_flight_count_before_the_engines_report_them():
    # The engines still report big idle, but this ingress has just sent it 40 requests.
    decision = decide(request(), [small(), big(inflight=40, inflight_prompt_tokens=40 * 500)])

    assert decision.variant == "small"


def test_loose_slo_keeps_the_best_quality_even_when_it_is_queued():
    decision = decide(request(slo=SLO(ttft_ms=None, tpot_ms=None)), [small(), big(**saturated(queued=4))])

    assert decision.variant == "big"


def test_the_headroom_keeps_a_prediction_just_under_the_target_from_counting_as_met():
    # big predicts 150 ms TTFT: inside a 160 ms target, but not inside 90% of it.
    req = request(slo=SLO(ttft_ms=160.0, tpot_ms=None))

    assert decide(req, [small(), big()], slo_headroom=0.0).variant == "big"
    assert decide(req, [small(), big()], slo_headroom=0.1).variant == "small"


def test_the_path_outside_the_ingress_comes_off_the_ttft_target():
    # big predicts 150 ms TTFT at the ingress: inside 90% of a 300 ms target, not once 150 ms of the client's
    # TTFT are spent outside the ingress (300 - 150 = 150, of which 90% is 135).
    req = request(slo=SLO(ttft_ms=300.0, tpot_ms=None))

    assert decide(req, [small(), big()]).variant == "big"
    far = decide(req, [small(), big()], ttft_path_ms=150.0)
    assert far.variant == "small"
    assert not far.predictions["big"].meets_slo
    assert far.predictions["big"].ttft_ms == pytest.approx(150.0)  # the prediction itself is the ingress's
    # A path that uses up the whole target leaves every variant missing it.
    assert decide(req, [small(), big()], ttft_path_ms=300.0).reason == Reason.DEGRADED_SMALLEST_VIOLATION


def test_a_single_token_answer_is_not_held_to_a_tpot_target():
    strict_tpot = SLO(ttft_ms=None, tpot_ms=1.0)

    one_token = decide(request(max_tokens=1, slo=strict_tpot), [small(), big()])
    two_tokens = decide(request(max_tokens=2, slo=strict_tpot), [small(), big()])

    assert one_token.reason == Reason.SLO_MET_BEST_QUALITY
    assert two_tokens.reason == Reason.DEGRADED_SMALLEST_VIOLATION


# --- objectives ------------------------------------------------------------------------------------


def test_quality_objective_takes_the_best_quality_that_meets_the_slo():
    decision = decide(request(), [small(), big()], objective="quality")

    assert (decision.variant, decision.reason) == ("big", Reason.SLO_MET_BEST_QUALITY)


def test_cost_objective_takes_the_cheapest_that_meets_the_slo():
    decision = decide(request(), [small(), big()], objective="cost")

    assert (decision.variant, decision.reason) == ("small", Reason.SLO_MET_LOWEST_COST)


def test_cost_objective_skips_a_cheap_variant_that_would_miss_the_slo():
    decision = decide(request(), [small(**saturated(queued=30)), big()], objective="cost")

    assert decision.variant == "big"


# --- no variant meets the SLO: degrade or reject ---------------------------------------------------


def test_degrade_takes_the_smallest_predicted_violation():
    impossible = SLO(ttft_ms=5.0, tpot_ms=None)

    decision = decide(request(slo=impossible), [big(), small()], on_violation="degrade")

    assert decision.variant == "small"  # 20 ms against 5 ms beats 150 ms against 5 ms
    assert decision.reason == Reason.DEGRADED_SMALLEST_VIOLATION
    assert not decision.rejected
    assert 0 < decision.predictions["small"].violation < decision.predictions["big"].violation


def test_degrade_goes_where_the_mean_prediction_misses_least_not_the_conservative_one():
    # small: 10 + (100 + 1100 queued) x 0.1 = 130 ms, but its outcomes ran 100% over its predictions
    # (conservative: 130 x 2.5 = 325 ms); big: 150 ms with no error seen. Target 100 ms: both miss.
    variants = [with_error_margins(small(queued_prompt_tokens=1100), ttft=1.0), big()]

    decision = decide(request(slo=SLO(ttft_ms=100.0)), variants)

    assert decision.reason == Reason.DEGRADED_SMALLEST_VIOLATION
    assert decision.predictions["small"].ttft_upper_ms > decision.predictions["big"].ttft_upper_ms
    assert decision.variant == "small"  # 130 ms expected beats 150 ms


def test_when_no_variant_is_sure_to_meet_the_slo_one_likely_to_takes_the_request():
    # big: 50 + 100 + 130 queued = 280 ms: under the 300 ms target, not under 300 less the 10% headroom.
    variants = [small(**saturated(queued=30)), big(queued_requests=1, queued_prompt_tokens=130)]

    decision = decide(request(), variants)

    assert not decision.predictions["big"].meets_slo
    assert decision.variant == "big"
    assert decision.reason == Reason.SLO_LIKELY


def test_under_reject_a_likely_variant_must_clear_the_headroom_on_its_mean():
    # big: 280 ms expected against a 300 ms target: likely (under 300), not within 300 less the 10% headroom (270).
    variants = [small(**saturated(queued=30)), big(queued_requests=1, queued_prompt_tokens=130)]

    rejected = decide(request(), variants, on_violation="reject")
    assert rejected.rejected and rejected.reason == Reason.REJECTED_SLO

    # big: 50 + 100 + 80 queued = 230 ms expected: within the headroom on the mean, not sure on the conservative one.
    variants = [small(**saturated(queued=30)), with_error_margins(big(queued_prompt_tokens=80), ttft=1.0)]
    taken = decide(request(), variants, on_violation="reject")
    assert not taken.predictions["big"].meets_slo
    assert (taken.variant, taken.reason) == ("big", Reason.SLO_LIKELY)


def test_when_no_variant_is_sure_the_one_with_the_most_room_wins_over_quality():
    # small: 10 + (100 + 1000 queued) x 0.1 = 120 ms expected, but its outcomes ran 100% over (conservative
    # 300 ms); big: 50 + 100 + 130 = 280 ms, over 300 less the 10% headroom. Both likely; small by far more.
    variants = [with_error_margins(small(queued_prompt_tokens=1000), ttft=1.0), big(queued_prompt_tokens=130)]

    decision = decide(request(slo=SLO(ttft_ms=300.0)), variants)

    assert not decision.predictions["small"].meets_slo and not decision.predictions["big"].meets_slo
    assert decision.variant == "small"
    assert decision.reason == Reason.SLO_LIKELY


def test_reject_answers_429_with_retry_after_and_the_predictions():
    impossible = SLO(ttft_ms=5.0, tpot_ms=None)

    decision = decide(request(slo=impossible), [big(), small()], on_violation="reject", retry_after_s=2.5)

    assert decision.rejected
    assert (decision.variant, decision.retry_after_s) == (None, 2.5)
    assert decision.reason == Reason.REJECTED_SLO
    assert set(decision.predictions) == {"big", "small"}


# --- context limits --------------------------------------------------------------------------------


@pytest.mark.parametrize("policy", ALL_POLICIES)
def test_a_long_prompt_only_goes_to_a_variant_whose_context_holds_it(policy: Policy):
    # 3000 + 128 tokens exceed small's 2048; big is saturated, small idle: every policy would like small.
    for _ in range(3):  # round robin must not take its turn on a variant that cannot hold the request
        decision = decide(request(prompt_tokens=3000), [small(), big(**saturated(queued=1))], policy=policy)

        assert decision.variant == "big"
        assert "small" not in decision.predictions


@pytest.mark.parametrize(("prompt_tokens", "expected"), [(1920, "small"), (1921, "big")])
def test_prompt_plus_max_tokens_must_fit_the_context(prompt_tokens: int, expected: str):
    # small's context is 2048: 1920 + 128 fits exactly, one more token does not.
    decision = decide(request(prompt_tokens=prompt_tokens, slo=SLO()), [small(), big()], objective="cost")

    assert decision.variant == expected


def test_a_request_no_context_holds_is_rejected_with_400_naming_the_sizes():
    decision = decide(request(prompt_tokens=9000), [small(), big()])

    assert decision.rejected
    assert (decision.variant, decision.reason) == (None, Reason.REJECTED_CONTEXT)
    assert decision.retry_after_s is None
    assert "9128" in decision.detail and "8192" in decision.detail


# --- sampling fields -------------------------------------------------------------------------------

PENALTIES = frozenset({"presence_penalty", "frequency_penalty"})


@pytest.mark.parametrize("policy", ALL_POLICIES)
def test_a_request_using_a_sampling_field_only_goes_to_a_variant_whose_backend_implements_it(policy: Policy):
    # big is saturated and small idle: every policy would like small, whose backend has no penalties.
    variants = [small(sampling_fields=frozenset({"seed"})), big(**saturated(queued=1), sampling_fields=PENALTIES)]
    for _ in range(3):  # round robin must not take its turn on a variant that cannot honour the field
        decision = decide(request(sampling_fields=frozenset({"presence_penalty"})), variants, policy=policy)

        assert decision.variant == "big"
        assert "small" not in decision.predictions


def test_a_view_that_declares_no_fields_implements_every_one():
    decision = decide(request(sampling_fields=frozenset({"logit_bias"})), [small()], objective="cost")

    assert decision.variant == "small"


def test_a_field_no_variant_implements_is_rejected_with_400_naming_it():
    variants = [small(sampling_fields=frozenset({"seed"})), big(sampling_fields=PENALTIES)]

    decision = decide(request(sampling_fields=frozenset({"seed", "logit_bias"})), variants)

    assert (decision.variant, decision.reason) == (None, Reason.REJECTED_UNSUPPORTED_FIELD)
    assert decision.param == "logit_bias" and "'logit_bias'" in decision.detail


def test_fields_that_no_single_variant_implements_together_are_rejected_naming_one():
    variants = [small(sampling_fields=frozenset({"seed"})), big(sampling_fields=PENALTIES)]

    decision = decide(request(sampling_fields=frozenset({"seed", "presence_penalty"})), variants)

    assert (decision.variant, decision.reason) == (None, Reason.REJECTED_UNSUPPORTED_FIELD)
    assert decision.param == "presence_penalty"  # the first one small (the first variant) lacks


def test_a_pinned_request_using_a_field_its_backend_lacks_is_rejected_not_rerouted():
    variants = [small(sampling_fields=frozenset()), big(sampling_fields=PENALTIES)]

    decision = decide(request(pinned="small", sampling_fields=frozenset({"frequency_penalty"})), variants)

    assert (decision.variant, decision.reason, decision.param) == (
        None,
        Reason.REJECTED_UNSUPPORTED_FIELD,
        "frequency_penalty",
    )
    assert "'small'" in decision.detail


# --- pinned requests -------------------------------------------------------------------------------


def test_a_pinned_request_goes_to_its_variant_whatever_the_slo_policy_would_pick():
    decision = decide(request(pinned="big"), [small(), big(**saturated(queued=4))])

    assert (decision.variant, decision.reason) == ("big", Reason.PINNED)
    assert set(decision.predictions) == {"big"}


def test_a_pinned_request_too_long_for_its_variant_is_rejected_not_rerouted():
    decision = decide(request(prompt_tokens=3000, pinned="small"), [small(), big()])

    assert decision.rejected
    assert (decision.variant, decision.reason) == (None, Reason.REJECTED_CONTEXT)
    assert "'small'" in decision.detail


def test_a_request_pinned_to_an_unknown_variant_is_rejected_with_404():
    decision = decide(request(pinned="huge"), [small(), big()])

    assert (decision.variant, decision.reason) == (None, Reason.REJECTED_UNKNOWN_VARIANT)


def test_a_pinned_request_is_still_subject_to_admission_control():
    variants = [small(), big(**saturated(queued=10))]

    decision = decide(request(pinned="big"), variants, queue_bound_per_replica=4)

    assert (decision.variant, decision.reason) == (None, Reason.REJECTED_OVERLOADED)


def test_a_request_pinned_to_a_variant_without_replicas_gets_503():
    decision = decide(request(pinned="big"), [small(), big(ready_replicas=0)])

    assert (decision.variant, decision.reason) == (None, Reason.REJECTED_UNAVAILABLE)
    assert decision.retry_after_s is not None


# --- admission control and shedding ----------------------------------------------------------------


def test_every_queue_past_its_bound_answers_429_with_retry_after():
    variants = [small(**saturated(queued=10)), big(**saturated(queued=10))]

    decision = decide(request(), variants, queue_bound_per_replica=8, retry_after_s=3.0)

    assert decision.rejected
    assert (decision.variant, decision.reason, decision.retry_after_s) == (
        None,
        Reason.REJECTED_OVERLOADED,
        3.0,
    )


def test_sheddable_requests_are_rejected_while_others_are_still_admitted():
    variants = [small(**saturated(queued=4)), big(**saturated(queued=4))]  # 5 waiting for a slot, each
    # Queue bounds alone (shedding by predicted TTFT would turn the interactive request away too).
    config = {"queue_bound_per_replica": 8, "sheddable_queue_bound_per_replica": 2, "shed_ttft_ratio": None}

    interactive = decide(request(), variants, **config)
    batch = decide(request(sheddable=True), variants, **config)

    assert interactive.variant is not None
    assert (batch.variant, batch.reason) == (None, Reason.REJECTED_OVERLOADED)


def test_a_sheddable_request_leaves_a_queued_variant_to_the_interactive_ones():
    # No SLO: by quality it would join big's queue; its lower bound sends it to the idle small one.
    loose = SLO(ttft_ms=None, tpot_ms=None)

    decision = decide(request(slo=loose, sheddable=True), [small(), big(**saturated(queued=4))])

    assert decision.variant == "small"


def test_lower_priority_requests_are_rejected_first():
    variants = [small(**saturated(queued=4)), big(**saturated(queued=4))]  # 5 waiting for a slot, each
    config = {"queue_bound_per_replica": 4, "queue_bound_per_priority": 2, "shed_ttft_ratio": None}

    assert decide(request(priority=0), variants, **config).reason == Reason.REJECTED_OVERLOADED
    assert decide(request(priority=1), variants, **config).variant is not None


def test_a_request_finding_a_free_slot_is_admitted_even_with_a_zero_bound():
    config = {"queue_bound_per_replica": 0, "sheddable_queue_bound_per_replica": 0}

    assert decide(request(), [big(running_requests=15)], **config).variant == "big"
    assert decide(request(), [big(running_requests=16)], **config).reason == Reason.REJECTED_OVERLOADED


# --- replicas that are not serving (yet) ----------------------------------------------------------


@pytest.mark.parametrize("policy", ALL_POLICIES)
def test_variants_without_ready_or_starting_replicas_give_503(policy: Policy):
    no_replicas = decide(request(), [small(ready_replicas=0), big(ready_replicas=0)], policy=policy)
    no_variants = decide(request(), [], policy=policy)

    for decision in (no_replicas, no_variants):
        assert (decision.variant, decision.reason) == (None, Reason.REJECTED_UNAVAILABLE)
        assert decision.retry_after_s is not None


def test_a_starting_variant_carries_its_startup_time_and_loses_a_tight_slo():
    variants = [small(), big(ready_replicas=0, starting_replicas=1)]

    decision = decide(request(), variants, replica_startup_ms=20_000.0)

    assert decision.variant == "small"
    assert decision.predictions["big"].ttft_ms == pytest.approx(20_150.0)


def test_a_starting_variant_may_take_a_request_that_can_wait():
    variants = [small(), big(ready_replicas=0, starting_replicas=1)]
    loose = request(slo=SLO(ttft_ms=None, tpot_ms=None))

    assert decide(loose, variants, wait_for_starting_replicas=True).variant == "big"
    waiting_disallowed = decide(loose, variants, wait_for_starting_replicas=False)
    assert waiting_disallowed.variant == "small"
    assert "big" not in waiting_disallowed.predictions


# --- conservative judgement: error margins, prefill interference, slack among near-equals ----------


def _late_model(factor: float):
    """A big model whose TTFT outcomes have run `factor` x its decision-time predictions."""
    from router import LatencyModel
    from tests.router.views import BIG_PROFILE

    model = LatencyModel(BIG_PROFILE)
    for _ in range(300):
        model.observe_ttft(100, 150.0 * factor, predicted_ms=150.0)
    return model


def test_a_variant_whose_predictions_run_late_must_meet_the_slo_with_its_margin():
    # big's idle TTFT prediction (150 ms at first; it also learns from the late outcomes) is within 300 x 0.9
    # on the mean, but its outcomes have run 1.6x late: with the margin it misses, so the request spills.
    late = big(latency=_late_model(1.6))
    decision = decide(request(), [small(), late])
    assert decision.variant == "small"
    assert decision.predictions["big"].ttft_upper_ms > decision.predictions["big"].ttft_ms
    # Judged on the mean alone (no margin), the same state keeps the request on big.
    assert decide(request(), [small(), big(latency=_late_model(1.0))]).variant == "big"


def test_prefill_arriving_on_a_variant_slows_its_decode_and_spills_tight_tpot_requests():
    # big decodes at 40 ms/token alone; 500 prompt tokens/s (1 ms each) double it past the 50 ms target.
    decision = decide(request(), [small(), big(prefill_tokens_per_s=500.0)])
    assert decision.predictions["big"].tpot_ms == pytest.approx(80.0)
    assert not decision.predictions["big"].meets_slo
    assert decision.variant == "small"


def test_near_equal_quality_variants_are_chosen_by_slack():
    busy = big(name="big-a", running_requests=3)  # TPOT 43 ms of 45: meets, with less room
    idle = big(name="big-b", quality=0.88)  # within the default 0.05 of big-a's quality
    decision = decide(request(), [busy, idle])
    assert decision.variant == "big-b"
    assert decision.predictions["big-b"].slack > decision.predictions["big-a"].slack
    # With no tolerance the better quality wins while it meets the SLO.
    assert decide(request(), [busy, idle], quality_tolerance=0.0).variant == "big-a"


def test_lowest_cost_breaks_ties_by_slack():
    a = small(name="small-a", running_requests=12)
    b = small(name="small-b")
    decision = decide(request(), [big(), a, b], objective="cost")
    assert decision.variant == "small-b"
    assert decision.reason == Reason.SLO_MET_LOWEST_COST
