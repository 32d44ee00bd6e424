"""The engine-load autoscaling policy on constructed contexts: each signal, their combination, the bounds."""

from __future__ import annotations

import pytest

from router.autoscaling import (
    ReplicaLoad,
    ScalingContext,
    ScalingTargets,
    demand_by_signal,
    desired_replicas,
    held_upscale,
    rising_trend,
    scaled_ahead,
    slo_breaking,
)

TARGETS = ScalingTargets(target_batch_utilization=0.75, target_queued_prompt_tokens=4096, target_kv_fraction=0.8)


def replica(**load) -> ReplicaLoad:
    return ReplicaLoad(**{"max_running_requests": 16, **load})


def context(*replicas: ReplicaLoad, current: int | None = None, **fields) -> ScalingContext:
    current = len(replicas) if current is None else current
    values = {"current_replicas": current, "target_replicas": current, "min_replicas": 1, "max_replicas": 8}
    return ScalingContext(replicas=replicas, **{**values, **fields})


def test_idle_replicas_scale_to_the_minimum():
    decision = desired_replicas(context(replica(), replica(), replica()), TARGETS)

    assert (decision.replicas, decision.signal) == (1, "idle")


def test_idle_replicas_may_scale_to_zero_when_the_minimum_allows():
    assert desired_replicas(context(replica(), min_replicas=0), TARGETS).replicas == 0


def test_load_within_the_slot_target_keeps_one_replica():
    # 12 of 16 slots = the 0.75 target exactly: one replica suffices, float noise must not add one.
    decision = desired_replicas(context(replica(running_requests=12)), TARGETS)

    assert (decision.replicas, decision.signal) == (1, "slots")


def test_running_and_queued_sequences_beyond_the_slots_ask_for_more_replicas():
    # 16 running + 20 queued = 36 sequences; 12 per replica at the target -> 3 replicas.
    decision = desired_replicas(context(replica(running_requests=16, queued_requests=20)), TARGETS)

    assert (decision.replicas, decision.signal) == (3, "slots")


def test_requests_waiting_at_serve_handles_count_as_demand():
    # The engine is full but not over target; 13 more wait at the ingress's handle.
    ctx = context(replica(running_requests=12), handle_queued_requests=13)

    assert desired_replicas(ctx, TARGETS).replicas == 3


def test_serves_own_count_wins_when_engine_reports_lag_behind_it():
    ctx = context(replica(running_requests=2), ongoing_requests=30)

    assert desired_replicas(ctx, TARGETS).replicas == 3


def test_queued_prefill_tokens_scale_out_long_prompts_that_fit_the_slots():
    # Two queued 8k-token prompts: few sequences, but 4 replicas' worth of queued prefill.
    ctx = context(replica(running_requests=2, queued_requests=2, queued_prompt_tokens=16_384))
    decision = desired_replicas(ctx, TARGETS)

    assert (decision.replicas, decision.signal) == (4, "prefill")


def test_a_full_kv_cache_asks_for_more_replicas_with_slots_to_spare():
    # Two replicas at 95% KV with 4 of 16 slots used: 1.9 / 0.8 -> 3 replicas.
    full = replica(running_requests=4, kv_used_fraction=0.95)
    ctx = context(full, full)
    decision = desired_replicas(ctx, TARGETS)

    assert (decision.replicas, decision.signal) == (3, "kv")


def test_the_largest_signal_decides_and_every_signal_is_reported():
    ctx = context(replica(running_requests=6, queued_prompt_tokens=4096, kv_used_fraction=0.4))
    asks = demand_by_signal(ctx, TARGETS)

    assert asks == pytest.approx({"slots": 0.5, "prefill": 1.0, "kv": 0.5})
    assert desired_replicas(ctx, TARGETS).signal == "prefill"


def test_demand_is_absolute_so_starting_replicas_are_not_counted_twice():
    # The same demand reported while a second replica is still starting (target 2, one running) or
    # after it arrived idle asks for the same fleet.
    loaded = replica(running_requests=16, queued_requests=8)
    starting = desired_replicas(context(loaded, current=1, target_replicas=2), TARGETS)
    arrived = desired_replicas(context(loaded, replica(), current=2), TARGETS)

    assert starting.replicas == arrived.replicas == 2


def test_requests_redirected_away_from_the_variant_count_as_its_demand():
    # One full replica (16 of 16 slots) and 24 requests the router spilled elsewhere or shed meanwhile:
    # (16 + 24) / (16 x 0.75) = 3.3 -> 4 replicas, where the engines alone would ask for 2.
    full = replica(running_requests=16)

    assert desired_replicas(context(full), TARGETS).replicas == 2
    decision = desired_replicas(context(full, redirected_requests=24), TARGETS)
    assert (decision.replicas, decision.signal) == (4, "slots")


def test_the_answer_stays_within_min_and_max():
    flooded = context(replica(running_requests=16, queued_requests=500), max_replicas=4)
    idle = context(replica(), replica(), min_replicas=2)

    assert desired_replicas(flooded, TARGETS).replicas == 4
    assert desired_replicas(idle, TARGETS).replicas == 2


def test_without_engine_reports_serves_ongoing_count_is_the_fallback():
    ctx = context(current=2, ongoing_requests=40)
    decision = desired_replicas(ctx, ScalingTargets(fallback_target_ongoing_requests=16))

    assert (decision.replicas, decision.signal) == (3, "ongoing")


def test_engines_that_do_not_report_batch_slots_fall_back_to_the_ongoing_count():
    ctx = context(ReplicaLoad(running_requests=10), ongoing_requests=40)

    assert desired_replicas(ctx, ScalingTargets(fallback_target_ongoing_requests=10)).signal == "ongoing"


def test_at_zero_replicas_the_target_is_kept():
    # Nothing reports at zero replicas; Serve itself starts one when a request waits at a handle.
    ctx = ScalingContext(current_replicas=0, target_replicas=1, min_replicas=0, max_replicas=4)

    assert desired_replicas(ctx, TARGETS).replicas == 1


SLO = ScalingTargets(ttft_target_ms=500, tpot_target_ms=50, slo_headroom=0.1)


def test_a_latency_miss_on_busy_replicas_adds_one_replica():
    # 10 of 16 slots (under the slot target) but TTFT 600 ms > 450 ms budget.
    ctx = context(replica(running_requests=10, ttft_ms=600), replica(running_requests=10, ttft_ms=600))
    decision = desired_replicas(ctx, SLO)

    assert (decision.replicas, decision.signal) == (3, "slo")


def test_a_tpot_miss_counts_like_a_ttft_miss():
    ctx = context(replica(running_requests=10, ttft_ms=100, tpot_ms=60))

    assert desired_replicas(ctx, SLO).signal == "slo"


def test_latency_within_the_budget_adds_nothing():
    ctx = context(replica(running_requests=10, ttft_ms=440, tpot_ms=44))

    assert "slo" not in demand_by_signal(ctx, SLO)


def test_a_slow_but_idle_replica_does_not_scale_out():
    # Too slow for the SLO even alone: more replicas would not help, and it must not pin max_replicas.
    ctx = context(replica(running_requests=1, ttft_ms=2000), replica())

    assert desired_replicas(ctx, SLO).replicas == 1


def test_a_request_waiting_beyond_the_ttft_budget_is_a_miss_before_any_first_token():
    # No request has had its first token yet (no TTFT), but the oldest has waited 700 ms > 450 ms.
    ctx = context(replica(running_requests=16, queued_requests=2, ttft_ms=None, queue_wait_ms=700))

    assert desired_replicas(ctx, SLO).signal == "slo"


def test_the_longer_of_recent_ttft_and_current_wait_is_judged():
    fine_then_stuck = context(replica(running_requests=12, ttft_ms=100, queue_wait_ms=600))
    slow_then_drained = context(replica(running_requests=12, ttft_ms=600, queue_wait_ms=0))
    fine = context(replica(running_requests=12, ttft_ms=100, queue_wait_ms=300))

    assert "slo" in demand_by_signal(fine_then_stuck, SLO)
    assert "slo" in demand_by_signal(slow_then_drained, SLO)
    assert "slo" not in demand_by_signal(fine, SLO)


def test_unreported_latency_is_no_signal():
    ctx = context(replica(running_requests=12, ttft_ms=None, tpot_ms=None))

    assert "slo" not in demand_by_signal(ctx, SLO)


@pytest.mark.parametrize(
    "bad",
    [
        {"target_batch_utilization": 0},
        {"target_batch_utilization": 1.5},
        {"target_kv_fraction": 0},
        {"slo_headroom": 1},
        {"target_queued_prompt_tokens": 0},
        {"fallback_target_ongoing_requests": -1},
        {"ttft_target_ms": 0},
    ],
)
def test_impossible_targets_are_refused(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        ScalingTargets(**bad)


# --- the predictive term ------------------------------------------------------------------------------


def test_the_trend_is_the_least_squares_slope_and_never_negative():
    assert rising_trend([(0.0, 1.0), (1.0, 2.0), (2.0, 3.0)]) == pytest.approx(1.0)
    assert rising_trend([(0.0, 3.0), (1.0, 2.0), (2.0, 1.0)]) == 0.0
    assert rising_trend([(0.0, 1.0), (1.0, 2.0)]) == 0.0  # too few points to call it a trend


def test_a_rising_demand_is_met_where_it_will_be_once_new_replicas_are_up():
    ahead = ScalingTargets(scale_ahead_s=10.0, trend_window_s=2.0)
    ctx = context(replica(running_requests=16))
    now = desired_replicas(ctx, ahead)  # 16 / 12 -> 2 replicas
    history = [(0.0, 1.0), (1.0, 1.2), (2.0, 1.4)]  # +0.2 replicas a second

    later = scaled_ahead(now, history, ctx, ahead)

    assert (later.replicas, later.signal) == (4, "trend")  # 1.4 + 0.2 x 10 = 3.4
    assert scaled_ahead(now, history, ctx, ScalingTargets()).replicas == now.replicas  # off by default
    falling = [(0.0, 3.0), (1.0, 2.0), (2.0, 1.4)]
    assert scaled_ahead(now, falling, ctx, ahead).replicas == now.replicas  # never lowers, never early down
    assert scaled_ahead(now, [(0.0, 1.0), (1.0, 50.0), (2.0, 99.0)], ctx, ahead).replicas == 8  # within max
    young = ScalingTargets(scale_ahead_s=10.0, trend_window_s=10.0)
    assert scaled_ahead(now, history, ctx, young).replicas == now.replicas  # 2 s of a 10 s window: no trend yet


def test_a_fleet_with_room_for_its_demand_does_not_scale_ahead_on_its_noise():
    ahead = ScalingTargets(scale_ahead_s=10.0, trend_window_s=2.0)
    rising = [(0.0, 1.0), (1.0, 1.5), (2.0, 2.0)]  # +0.5 replicas a second, now asking for 2
    ctx = context(replica(running_requests=3), replica(running_requests=3))  # 2 replicas run: room for it
    now = desired_replicas(ctx, ahead)

    assert scaled_ahead(now, rising, ctx, ahead) == now  # no projection while the running replicas cover the ask
    short = context(replica(running_requests=3), replica(running_requests=3), current=1)  # one of them still starts
    assert scaled_ahead(desired_replicas(short, ahead), rising, short, ahead).replicas == 7  # 2 + 0.5 x 10


def _held(reports: list[float], every_s: float = 0.5, tick_s: float = 0.1) -> list[tuple[float, float]]:
    """The policy's ``(time, demand)`` history: one point a tick, each report held until the next one."""
    per = round(every_s / tick_s)
    return [(round(i * tick_s, 1), reports[i // per]) for i in range(len(reports) * per)]


def test_a_burst_on_a_fleet_that_held_the_window_is_not_projected_but_a_step_is():
    # The diurnal wave's base on the real stack: one replica of 2 slots, about one sequence in flight,
    # then three requests within a second. Short now (1.76 > 1), but not over the window: the old gate projected
    # the window's slope 20 s ahead and asked for 4 replicas that came after the burst had gone.
    ahead = ScalingTargets(scale_ahead_s=20.0, trend_window_s=10.0)
    base = [0.0, 0.67, 0.0, 0.0, 0.67, 0.67, 0.0, 0.67, 0.0, 0.0, 0.67, 0.67, 0.0, 0.67, 0.67, 0.0]
    burst = _held([*base, 0.67, 1.33, 1.33, 1.76])
    ctx = context(replica(max_running_requests=2, running_requests=2, queued_requests=0.64))
    now = desired_replicas(ctx, ahead)
    assert (now.replicas, now.signal) == (2, "slots")  # 2.64 sequences / 1.5 -> 1.76

    assert rising_trend(burst) > 0  # the slope is there ...
    assert scaled_ahead(now, burst, ctx, ahead) == now  # ... but the window's mean (0.47) is below the one replica

    step = _held([*base, 6.0, 6.0, 6.0, 6.0])  # a 10x step 2 s ago: the window's mean is 1.5, above the replica
    assert scaled_ahead(now, step, ctx, ahead).replicas == 8

    # After a scale-down to 3 replicas, a burst back to 4.75 on a window that averaged 2.6: the real stack asked for
    # 8 again (the crest's replicas, 20 s ahead) and removed them 8 s after they came.
    after = _held(
        [4.0, 3.4, 2.4, 1.8, 2.0, 1.8, 2.0, 1.2, 2.2, 3.4, 2.5, 1.9, 0.9, 1.0, 2.1, 3.0, 3.99, 4.67, 4.75, 4.75]
    )
    three = context(
        *(replica(max_running_requests=2, running_requests=2) for _ in range(3)), handle_queued_requests=1.1
    )
    assert scaled_ahead(desired_replicas(three, ahead), after, three, ahead).signal != "trend"


def test_a_rise_is_answered_once_it_has_held_for_the_delay():
    assert held_upscale(4, 2, None, 100.0, 1.0) == (2, 100.0)  # pending from now
    assert held_upscale(5, 2, 100.0, 100.5, 1.0) == (2, 100.0)  # still held, since the first ask
    assert held_upscale(5, 2, 100.0, 101.0, 1.0) == (5, None)  # held long enough
    assert held_upscale(4, 2, None, 100.0, 0.0) == (4, None)  # no delay: at once
    assert held_upscale(2, 2, 100.0, 100.5, 1.0) == (2, None)  # the ask fell back: the rise starts over
    assert held_upscale(1, 2, 100.0, 100.5, 1.0) == (1, None)  # a fall passes (Serve's downscale delay holds it)


def test_redirected_demand_or_the_slo_signal_means_the_slo_is_breaking():
    busy = replica(running_requests=4, queued_requests=4, max_running_requests=4, queue_wait_ms=3000.0)
    full = context(busy)

    assert not slo_breaking(full, desired_replicas(full, TARGETS))  # full, but nothing missed yet
    spilled = context(busy, redirected_requests=2.0)
    assert slo_breaking(spilled, desired_replicas(spilled, TARGETS))
    late = ScalingTargets(ttft_target_ms=2000.0)  # the oldest request has waited 3 s for its first token
    assert slo_breaking(full, desired_replicas(full, late))
