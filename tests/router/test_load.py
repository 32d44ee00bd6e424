"""A variant's per-replica load: engine reports merged with the ingress's in-flight count, KV limits,
replicas that are starting, and the queue bound a request accepts."""

from __future__ import annotations

import dataclasses
import math

import pytest

from router import RouterConfig
from router.load import decode_pace, queue_bound, replica_load, serving_replicas
from tests.router.views import big

CONFIG = RouterConfig()


def test_an_idle_replica_has_a_free_slot_for_a_new_request():
    load = replica_load(big(), CONFIG)

    assert (load.running, load.queued, load.waiting_for_slot, load.startup_ms) == (0, 0, 0, 0)
    assert load.batch_when_running == 1


def test_unreported_in_flight_requests_take_free_slots_first_then_queue():
    # The engine reports 10 running; the ingress has 20 of its own in flight, 10 not yet reported.
    view = big(running_requests=10, inflight=20, inflight_prompt_tokens=20 * 300, max_running_requests=16)
    load = replica_load(view, CONFIG)

    assert load.running == 16
    assert load.queued == 4
    assert load.queued_prompt_tokens == pytest.approx(10 * 300)  # the unreported ones' prompts
    assert load.waiting_for_slot == 5  # 4 queued ahead + the new request itself


def test_in_flight_requests_already_reported_are_not_counted_twice():
    load = replica_load(big(running_requests=10, queued_requests=2, inflight=8), CONFIG)

    assert (load.running, load.queued) == (10, 2)


def test_a_full_kv_cache_leaves_no_free_slot():
    roomy = replica_load(big(running_requests=8, kv_used_fraction=0.5), CONFIG)
    full = replica_load(big(running_requests=8, kv_used_fraction=0.97), CONFIG)

    assert roomy.waiting_for_slot == 0
    assert full.waiting_for_slot == 1


def test_load_is_averaged_over_ready_replicas_and_a_free_slot_anywhere_is_taken():
    two = big(ready_replicas=2, running_requests=31, queued_requests=0)
    three_queued = big(ready_replicas=2, running_requests=32, queued_requests=6, queued_prompt_tokens=600)

    assert replica_load(two, CONFIG).waiting_for_slot == 0
    load = replica_load(three_queued, CONFIG)
    assert (load.running, load.queued, load.queued_prompt_tokens) == (16, 3, 300)
    assert load.waiting_for_slot == 4


def test_starting_replicas_serve_only_where_waiting_is_allowed_and_carry_the_startup_time():
    starting = big(ready_replicas=0, starting_replicas=2)

    assert serving_replicas(starting, RouterConfig(wait_for_starting_replicas=False)) == 0
    assert serving_replicas(starting, RouterConfig(wait_for_starting_replicas=True)) == 2
    assert replica_load(starting, RouterConfig(replica_startup_ms=1234.0)).startup_ms == 1234.0


def test_replicas_about_to_serve_bound_the_wait_for_a_slot_while_they_have_room_for_the_request():
    # Two ready replicas of 16 slots, all taken, 6 queued; two more starting, due in 50 ms with 32 slots between them.
    full = dict(ready_replicas=2, running_requests=32, queued_requests=6)
    load = replica_load(big(**full, starting_replicas=2, starting_ready_in_ms=50.0), CONFIG)

    assert load.slot_by_ms == 50.0
    assert load.waiting_for_slot == 4  # the wait for a running sequence to finish is what it was
    model = big().latency
    no_wait = model.predict_ttft_ms(100, dataclasses.replace(load, waiting_for_slot=0.0))
    assert model.predict_ttft_ms(100, load) == pytest.approx(no_wait + 50.0)
    assert model.predict_request(100, load)[0] == pytest.approx(no_wait + 50.0)


@pytest.mark.parametrize(
    "view",
    [
        big(ready_replicas=2, running_requests=32, queued_requests=40, starting_replicas=2, starting_ready_in_ms=50.0),
        big(ready_replicas=2, running_requests=32, queued_requests=6, starting_replicas=2),  # no estimate posted
        big(ready_replicas=2, running_requests=20, starting_replicas=2, starting_ready_in_ms=50.0),  # a slot is free
    ],
    ids=["the-queue-ahead-fills-them", "no-estimate", "no-wait"],
)
def test_starting_replicas_bound_nothing_without_room_an_estimate_or_a_wait(view):
    assert replica_load(view, CONFIG).slot_by_ms == math.inf


@pytest.mark.parametrize(
    ("priority", "sheddable", "expected"),
    [(0, False, 10), (0, True, 3), (2, False, 14), (-1, False, 8), (-1, True, 1), (-5, True, 0)],
)
def test_queue_bound_is_lower_for_sheddable_and_lower_priority_requests(priority, sheddable, expected):
    config = RouterConfig(queue_bound_per_replica=10, sheddable_queue_bound_per_replica=3, queue_bound_per_priority=2)

    assert queue_bound(priority, sheddable, config) == expected


def test_prefill_ahead_drains_the_report_by_its_age_and_adds_prompts_sent_since():
    # big prefills 1000 tokens/s: a 200 ms old report of 1000 queued tokens has 800 left; 300 sent since.
    view = big(queued_prompt_tokens=1000, report_age_ms=200.0, fresh_prompt_tokens=300, unstarted_prompt_tokens=300)
    assert replica_load(view, CONFIG).queued_prompt_tokens == pytest.approx(800 + 300)


def test_own_unstarted_prompts_are_a_floor_whatever_a_stale_report_says():
    # The report says nothing is queued, but this ingress has 2000 prompt tokens without a first token.
    view = big(queued_prompt_tokens=0, report_age_ms=50.0, unstarted_prompt_tokens=2000, fresh_prompt_tokens=0)
    assert replica_load(view, CONFIG).queued_prompt_tokens == pytest.approx(2000)


def test_reported_and_own_prompts_are_not_counted_twice():
    # The report already holds the ingress's 500 unstarted tokens (all sent before it): max, not sum.
    view = big(queued_prompt_tokens=800, unstarted_prompt_tokens=500, fresh_prompt_tokens=0)
    assert replica_load(view, CONFIG).queued_prompt_tokens == pytest.approx(800)


def test_the_prompt_rate_and_decode_work_left_are_per_replica():
    view = big(ready_replicas=2, prefill_tokens_per_s=4000.0, decode_tokens_left=30.0)
    load = replica_load(view, CONFIG)
    assert load.prefill_tokens_per_s == pytest.approx(2000.0)
    assert load.decode_tokens_left == 30.0


def test_the_context_per_replica_is_the_engines_report_or_the_own_decoding_prompts_if_more():
    reported = replica_load(big(ready_replicas=2, context_tokens=8000, inflight_prompt_tokens=3000), CONFIG)
    assert reported.context_tokens == 4000.0
    # Unreported: the own requests' prompts, less the 1000 tokens of those still waiting for their prefill.
    own = big(ready_replicas=2, inflight=3, inflight_prompt_tokens=3000, unstarted_prompt_tokens=1000)
    assert replica_load(own, CONFIG).context_tokens == 1000.0


def test_the_variants_pace_weights_each_replica_by_the_sequences_it_decoded():
    # One replica decoded 6 sequences at 100 ms, another 2 at 200 ms; a third decoded nothing lately.
    assert decode_pace([(100.0, 6.0), (200.0, 2.0), (0.0, 0.0)]) == pytest.approx((125.0, 8.0))
    assert decode_pace([]) == (0.0, 0.0)


def test_the_measured_pace_reaches_the_load_per_replica():
    view = big(ready_replicas=2, running_requests=8, recent_tpot_ms=125.0, recent_decode_batch=8.0)
    load = replica_load(view, CONFIG)
    assert (load.measured_tpot_ms, load.measured_batch) == (125.0, 4.0)
    assert replica_load(view, RouterConfig(pace_floor=False)).measured_tpot_ms == 0.0  # the model alone
    # A variant without ready replicas has measured nothing current.
    starting = replica_load(big(ready_replicas=0, starting_replicas=1, recent_tpot_ms=125.0), CONFIG)
    assert starting.measured_tpot_ms == 0.0
