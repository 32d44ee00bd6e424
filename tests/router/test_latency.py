"""The latency model: its predictions from a profile, and what it learns from finished requests."""

from __future__ import annotations

import random

import pytest

from router import LatencyModel, LatencyProfile, Load
from router.latency import MAX_SLOWDOWN

PROFILE = LatencyProfile(
    prefill_tokens_per_s=1000.0,
    base_ttft_ms=50.0,
    tpot_ms_at_batch_1=40.0,
    tpot_ms_per_extra_seq=2.0,
    mean_output_tokens=100.0,
)


def load(**fields) -> Load:
    idle = {"running": 0.0, "queued": 0.0, "queued_prompt_tokens": 0.0, "waiting_for_slot": 0.0}
    return Load(**(idle | fields), max_running=16)


# A replica unlike the default profile: faster prefill, lower base, cheaper decode, shorter answers, and a
# first token that waits for two decode steps of the running batch.
def true_ttft(prompt_tokens: int, queued_tokens: float, waiting: float, batch: float) -> float:
    steps = 2.0 * (true_tpot(batch) - true_tpot(1.0))
    return 20.0 + 0.2 * (prompt_tokens + queued_tokens) + waiting * 40.0 * true_tpot(batch) / batch + steps


def true_tpot(batch: float) -> float:
    return 5.0 + 0.5 * (batch - 1.0)


def feed(model: LatencyModel, n: int, seed: int = 0, noise: float = 0.05) -> None:
    rng = random.Random(seed)
    for _ in range(n):
        prompt, queued = rng.randint(10, 3000), rng.choice([0, 0, 500, 2000])
        batch, waiting = rng.randint(1, 16), rng.choice([0, 0, 0, 1, 3])
        model.observe(
            prompt,
            true_ttft(prompt, queued, waiting, batch) * rng.uniform(1 - noise, 1 + noise),
            true_tpot(batch) * rng.uniform(1 - noise, 1 + noise),
            batch,
            queued,
            waiting_for_slot=waiting,
        )


# --- predictions -----------------------------------------------------------------------------------


def test_ttft_is_base_plus_prefill_of_the_prompt_and_the_tokens_queued_ahead():
    model = LatencyModel(PROFILE)

    assert model.predict_ttft_ms(100, load()) == pytest.approx(150.0)
    assert model.predict_ttft_ms(100, load(queued_prompt_tokens=400)) == pytest.approx(550.0)


def test_ttft_includes_waiting_for_running_requests_to_finish():
    model = LatencyModel(PROFILE)
    # Every slot busy at TPOT 70 ms: one of 16 running requests finishes every 100 x 70 / 16 ms; and the
    # prompt waits through 1.5 decode steps of the full batch, 30 ms longer each than at batch 1.
    full = load(running=16, queued=1, waiting_for_slot=2)

    assert model.predict_ttft_ms(100, full) == pytest.approx(150.0 + 2 * 100 * 70.0 / 16 + 1.5 * 30.0)


def test_ttft_grows_with_the_decode_steps_of_the_running_batch():
    model = LatencyModel(PROFILE)  # a step of 16 sequences takes 70 ms, 30 more than one of a single sequence

    assert model.predict_ttft_ms(100, load(running=15)) == pytest.approx(150.0 + 1.5 * 30.0)


def test_ttft_includes_the_startup_time_of_a_variant_with_no_ready_replica():
    model = LatencyModel(PROFILE)

    assert model.predict_ttft_ms(100, load(startup_ms=5000.0)) == pytest.approx(5150.0)


def test_tpot_grows_with_the_running_batch():
    model = LatencyModel(PROFILE)

    assert model.predict_tpot_ms(1) == pytest.approx(40.0)
    assert model.predict_tpot_ms(9) == pytest.approx(56.0)
    assert model.predict_tpot_ms(0) == pytest.approx(40.0)  # an empty batch decodes as one


def test_the_batch_a_request_decodes_in_counts_what_runs_and_queues_ahead_up_to_the_slots():
    assert load(running=3, queued=2).batch_when_running == 6
    assert load(running=16, queued=5).batch_when_running == 16


def test_an_unprofiled_model_is_seeded_with_the_profile_defaults():
    # The interference reads back explicitly: by default, the prefill time of a token (1000 / 2000 tok/s).
    assert LatencyModel().profile() == LatencyProfile(decode_ms_per_prefill_token=0.5)
    assert LatencyModel(PROFILE).profile() == PROFILE.model_copy(update={"decode_ms_per_prefill_token": 1.0})


# --- learning --------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed_profile", [None, PROFILE], ids=["defaults", "profile"])
def test_predictions_move_to_the_observed_latencies(seed_profile: LatencyProfile | None):
    model = LatencyModel(seed_profile)
    probes = [
        (100, load()),
        (2000, load(queued_prompt_tokens=1000)),
        (500, load(running=16, waiting_for_slot=2)),
    ]

    def ttft_error() -> float:
        return max(
            abs(
                model.predict_ttft_ms(p, ld)
                - true_ttft(p, ld.queued_prompt_tokens, ld.waiting_for_slot, ld.batch_when_running)
            )
            / true_ttft(p, ld.queued_prompt_tokens, ld.waiting_for_slot, ld.batch_when_running)
            for p, ld in probes
        )

    def tpot_error() -> float:
        return max(abs(model.predict_tpot_ms(b) - true_tpot(b)) / true_tpot(b) for b in (1, 8, 16))

    before = ttft_error(), tpot_error()
    feed(model, 200)
    after = ttft_error(), tpot_error()

    assert before[0] > 0.3 and before[1] > 0.3
    assert after[0] < 0.1 and after[1] < 0.1
    assert model.observations == 200


def test_learned_figures_read_back_as_a_profile():
    model = LatencyModel(PROFILE)

    feed(model, 300)

    learned = model.profile()
    assert learned.prefill_tokens_per_s == pytest.approx(5000.0, rel=0.1)
    assert learned.tpot_ms_at_batch_1 == pytest.approx(5.0, rel=0.1)
    assert learned.tpot_ms_per_extra_seq == pytest.approx(0.5, rel=0.1)
    assert learned.mean_output_tokens == pytest.approx(40.0, rel=0.2)


def test_one_outlier_barely_moves_a_trained_model():
    model = LatencyModel(PROFILE)
    feed(model, 200)
    before_ttft, before_tpot = model.predict_ttft_ms(500, load()), model.predict_tpot_ms(8)

    # A request stalled 100x (a GC pause, a swapped-out replica) reports once.
    model.observe(500, 100 * true_ttft(500, 0, 0, 8), 100 * true_tpot(8), 8, 0)

    assert model.predict_ttft_ms(500, load()) == pytest.approx(before_ttft, rel=0.15)
    assert model.predict_tpot_ms(8) == pytest.approx(before_tpot, rel=0.15)


def test_a_lasting_change_of_speed_is_learned_despite_outlier_clipping():
    model = LatencyModel(PROFILE)
    feed(model, 200)

    # The replica becomes 4x slower to decode (say, a noisy neighbour), and stays so.
    for batch in [1, 4, 8, 16] * 40:
        model.observe(100, 100.0, 4 * true_tpot(batch), batch, 0)

    assert model.predict_tpot_ms(8) == pytest.approx(4 * true_tpot(8), rel=0.1)


def test_a_single_token_answer_teaches_ttft_only():
    model = LatencyModel(PROFILE)

    for _ in range(20):
        model.observe(100, 30.0, None, 1, 0)

    assert model.predict_ttft_ms(100, load()) == pytest.approx(30.0, rel=0.1)
    assert model.predict_tpot_ms(1) == pytest.approx(40.0)


def test_weights_stay_physical_whatever_is_observed():
    model = LatencyModel(PROFILE)

    for _ in range(50):
        model.observe(4000, 0.0, 0.0, 16, 2000, waiting_for_slot=5)

    profile = model.profile()  # validated: a negative or zero rate would not construct
    assert profile.base_ttft_ms >= 0 and profile.tpot_ms_per_extra_seq >= 0
    assert model.predict_ttft_ms(100, load()) >= 0
    assert model.predict_tpot_ms(8) > 0


def test_a_weight_pinned_at_its_bound_leaves_the_correction_to_the_others():
    # Seeded with a 200 ms base; the replica answers 100-token prompts in 20 ms. Shared out, the
    # correction would push the base below 0: it stops at 0 and the prefill rate must take up the rest.
    model = LatencyModel(LatencyProfile(base_ttft_ms=200.0, prefill_tokens_per_s=1000.0), prior_observations=0.25)

    for _ in range(3):
        model.observe(100, 20.0, None, 1, 0)

    assert model.profile().base_ttft_ms == 0.0
    assert model.predict_ttft_ms(100, load()) == pytest.approx(20.0, rel=0.1)


def test_a_long_run_without_queueing_keeps_the_model_finite():
    # Forgetting grows the uncertainty of a term no observation exercises (here the slot wait) by 1/0.95
    # each time; unbounded, it would overflow to inf and turn every weight into NaN.
    model = LatencyModel(PROFILE)

    for _ in range(20_000):
        model.observe(100, 40.0, 6.0, 4, 0)

    assert model.predict_ttft_ms(100, load(running=16, waiting_for_slot=1)) < 1e5
    assert model.predict_ttft_ms(100, load(running=3)) == pytest.approx(40.0, rel=0.05)  # the batch of 4 it saw


# --- prefill interference, margins, censoring -------------------------------------------------------


def test_tpot_grows_with_the_prefill_its_steps_share():
    model = LatencyModel(PROFILE)  # 1 ms per prompt token
    # 500 prompt tokens/s take half of every second: decode steps take twice as long.
    assert model.predict_tpot_ms(1, prefill_tokens_per_s=500.0) == pytest.approx(80.0)
    # A replica that cannot keep up is predicted very slow, never negative or infinite.
    assert 40.0 * 10 < model.predict_tpot_ms(1, prefill_tokens_per_s=5000.0) < 1e6


def test_tpot_grows_with_the_context_the_batch_holds_and_the_prompt_joining_it():
    model = LatencyModel(PROFILE.model_copy(update={"tpot_ms_per_context_token": 0.01}))
    assert model.predict_tpot_ms(1, context_tokens=2000) == pytest.approx(60.0)
    # A request joining a batch of 3 holding 1000 tokens with a 3000-token prompt: batch 4, 4000 tokens.
    assert model.predict_load_tpot_ms(load(running=3.0, context_tokens=1000.0), None, 3000) == pytest.approx(86.0)
    # The steps a new prompt waits through are longer by the same context.
    short = model.predict_ttft_ms(100, load(running=3.0))
    assert model.predict_ttft_ms(100, load(running=3.0, context_tokens=1000.0)) == pytest.approx(short + 1.5 * 10.0)
    assert model.profile().tpot_ms_per_context_token == pytest.approx(0.01)


def test_the_cost_of_context_is_learned_from_outcomes():
    model = LatencyModel(PROFILE.model_copy(update={"tpot_ms_per_context_token": 0.0025}))  # half the truth
    rng = random.Random(1)
    for _ in range(300):
        batch, context = rng.randint(1, 16), rng.choice([0, 500, 4000, 12_000])
        tpot = 40.0 + 2.0 * (batch - 1) + 0.005 * context
        model.observe_tpot(tpot * rng.uniform(0.97, 1.03), batch, context_tokens=context)
    assert model.profile().tpot_ms_per_context_token == pytest.approx(0.005, rel=0.2)
    assert model.predict_tpot_ms(8, context_tokens=10_000) == pytest.approx(40.0 + 14.0 + 50.0, rel=0.05)


def test_a_profile_without_a_cost_of_context_keeps_the_term_off():
    model = LatencyModel(PROFILE)
    for _ in range(50):  # context that happens to come with slower steps teaches nothing
        model.observe_tpot(80.0, 1, context_tokens=8000)
    assert model.predict_tpot_ms(1, context_tokens=8000) == model.predict_tpot_ms(1)
    assert model.profile().tpot_ms_per_context_token == 0.0


def test_the_pace_the_engine_measured_is_a_floor_under_the_tpot_prediction():
    model = LatencyModel(PROFILE)  # 40 ms at batch 1, +2 per extra sequence
    # At a batch of 4 the model says 46 ms; the replica's sequences have been decoding at 138 ms in that batch.
    slow = load(running=4.0, measured_tpot_ms=138.0, measured_batch=4.0)
    assert model.predict_tpot_ms(5.0) == pytest.approx(48.0)
    assert model.predict_load_tpot_ms(slow) == pytest.approx(138.0 * 48.0 / 46.0)  # the new request joins: 5
    assert model.predict_load_tpot_ms(slow, 4.0) == pytest.approx(138.0)
    # The floor is on the prediction inflated by the error margin: the mean is lifted to measured / (1 + margin).
    for error in model._tpot_errors:
        error.value = 0.5
    assert model.predict_load_tpot_ms(slow, 4.0) == pytest.approx(92.0)
    # Measured faster than the model: the model stands (it learns from outcomes, the floor only lifts).
    assert model.predict_load_tpot_ms(load(running=4.0, measured_tpot_ms=20.0, measured_batch=4.0)) == pytest.approx(
        48.0
    )
    assert model.predict_load_tpot_ms(load(running=4.0)) == pytest.approx(48.0)  # no measurement


def test_a_slow_measured_pace_lengthens_the_wait_for_a_slot():
    model = LatencyModel(PROFILE)
    full = load(running=16, queued=1, waiting_for_slot=1, decode_tokens_left=10.0)
    slow = load(
        running=16, queued=1, waiting_for_slot=1, decode_tokens_left=10.0, measured_tpot_ms=210.0, measured_batch=16
    )
    # The slot frees when the first of the running sequences is out (2 x 10 / 17 tokens on average): at 210 ms a
    # token instead of 70. (The model's batch slope carries the pace measured at a batch of 16 over to the
    # running 16: unchanged.) The steps run 3x the model's pace, so the prompt's prefill (100 ms) and the 1.5
    # steps it waits through (1.5 x 30 ms more than at batch 1) stretch 3x as well (LatencyModel.slowdown).
    assert model.slowdown(slow, 100) == pytest.approx(3.0)
    stretched = 2.0 * (100.0 + 1.5 * 30.0)
    assert model.predict_ttft_ms(100, slow) - model.predict_ttft_ms(100, full) == pytest.approx(
        2 * 10 / 17 * 140.0 + stretched
    )


def test_a_slow_measured_pace_stretches_the_prefill_of_a_long_prompt():
    model = LatencyModel(PROFILE)  # 1 ms per prompt token, base 50, 40 ms per token at batch 1 (+2 per sequence)
    # Two sequences decoding at 126 ms a token where the model says 42: every step 3x as long, the prefill too.
    busy = load(running=2.0, measured_tpot_ms=126.0, measured_batch=2.0)
    calm = load(running=2.0)
    assert model.slowdown(calm, 2000) == 1.0
    assert model.slowdown(busy, 2000) == pytest.approx(3.0)
    steps = 1.5 * 2 * 2.0  # the 1.5 steps a prompt waits through, each 4 ms longer at the batch of 3 it joins
    assert model.predict_ttft_ms(2000, calm) == pytest.approx(50.0 + 2000.0 + steps)
    assert model.predict_ttft_ms(2000, busy) == pytest.approx(50.0 + 3.0 * (2000.0 + steps))
    # predict_request gives the same figures in one pass.
    assert model.predict_request(2000, busy)[0] == pytest.approx(model.predict_ttft_ms(2000, busy))
    # Only what the class's TPOT margin does not already cover: a margin of 0.5 leaves 2x.
    for error in model._tpot_errors:
        error.value = 0.5
    assert model.slowdown(busy, 2000) == pytest.approx(2.0)
    # Faster than the model: no stretch (the model learns that from outcomes); a wild figure is capped.
    assert model.slowdown(load(running=2.0, measured_tpot_ms=20.0, measured_batch=2.0), 2000) == 1.0
    assert model.slowdown(load(running=2.0, measured_tpot_ms=1e6, measured_batch=2.0), 2000) == MAX_SLOWDOWN


def test_ttft_learned_under_a_slowdown_teaches_the_work_at_the_models_own_pace():
    taught, naive = LatencyModel(PROFILE), LatencyModel(PROFILE)
    for _ in range(40):
        # The replica ran 3x slow and the prediction said so: 50 + 3 x 2000 ms.
        taught.observe_ttft(2000, 6050.0, predicted_ms=6050.0, slowdown=3.0)
        naive.observe_ttft(2000, 6050.0, predicted_ms=6050.0)
    # Told the stretch, the prefill weight stays at 1 ms a token; not told, it learns the slow spell as its own.
    assert taught.prefill_ms_per_token == pytest.approx(1.0, rel=0.05)
    assert naive.prefill_ms_per_token > 2.0


def test_a_measured_cost_of_prefill_to_decode_seeds_the_interference():
    # 1 ms per prompt token to prefill; measured in mixed steps: 2.5 ms per prompt token of decode.
    model = LatencyModel(PROFILE.model_copy(update={"decode_ms_per_prefill_token": 2.5}))
    assert model.predict_tpot_ms(1, prefill_tokens_per_s=200.0) == pytest.approx(40.0 / (1 - 0.5))
    assert model.profile().decode_ms_per_prefill_token == pytest.approx(2.5)
    assert LatencyModel(PROFILE).profile().decode_ms_per_prefill_token == pytest.approx(1.0)


def test_the_error_margin_tracks_how_far_outcomes_exceed_decision_time_predictions():
    model = LatencyModel(PROFILE)
    assert model.ttft_margin_for(100) == 0.0 and model.tpot_margin_for(100) == 0.0
    for _ in range(300):
        model.observe_ttft(100, 150.0 * 1.5, predicted_ms=150.0)  # always 50% late
        model.observe_tpot(40.0, 1.0, predicted_ms=40.0)  # always right
    assert model.ttft_margin_for(100) == pytest.approx(0.5, abs=0.1)
    assert model.tpot_margin_for(100) < 0.05


def test_a_censored_bound_above_the_prediction_moves_it_up_and_one_below_does_not():
    model = LatencyModel(PROFILE)
    idle = load()
    before = model.predict_ttft_ms(100, idle)
    model.observe_ttft(100, before / 2, censored=True)
    assert model.predict_ttft_ms(100, idle) == before
    for _ in range(20):
        model.observe_ttft(100, 4 * before, censored=True)
    assert model.predict_ttft_ms(100, idle) > 2 * before


def test_slot_wait_uses_the_known_decode_work_left_of_running_requests():
    model = LatencyModel(PROFILE)  # mean_output_tokens 100
    full = load(running=16, queued=1, waiting_for_slot=1)
    nearly_done = load(running=16, queued=1, waiting_for_slot=1, decode_tokens_left=10.0)
    assert model.predict_ttft_ms(100, nearly_done) < model.predict_ttft_ms(100, full)
    # The first of 16 running sequences with 10 tokens left on average finishes after 2 x 10 / 17 of them.
    assert model.predict_ttft_ms(100, nearly_done) == pytest.approx(150.0 + 2 * 10 / 17 * 70.0 + 1.5 * 30.0)


def test_a_batch_that_started_together_frees_its_first_slot_when_it_all_finishes():
    """The 10x step: the spill-over filled the 70B's eight slots within a second or two, so they all
    finish together, while the even spread of remaining work (from none to twice the mean) put the first slot free
    after 2 x left / 9 of it: the router predicted 1.0 s for requests that waited 3.6 s on the real stack, and
    admitted them late. With the running ones' spread known, the first completion comes at their least work
    left: all of it when they have the same left, and as before when they are spread evenly from none."""
    model = LatencyModel(PROFILE)  # mean_output_tokens 100
    running = {"running": 8, "queued": 1, "waiting_for_slot": 1, "decode_tokens_left": 90.0}
    unknown = model.predict_ttft_ms(100, load(**running))
    together = model.predict_ttft_ms(100, load(**running, decode_tokens_left_sd=0.0))
    even = model.predict_ttft_ms(100, load(**running, decode_tokens_left_sd=90.0 / 3**0.5))
    tpot_running = model.predict_tpot_ms(8)
    # The first of eight with 90 tokens left each finishes after 90 of them, not after 2 x 90 / 9 = 20.
    assert together - unknown == pytest.approx((90.0 - 2 * 90.0 / 9) * tpot_running)
    assert even == pytest.approx(unknown)
    # Half the spread: the first after 90 - sqrt(3) x 26 = 45 tokens, the k-th after 45 + 2 k 45 / 9.
    half = model.predict_ttft_ms(100, load(**running, decode_tokens_left_sd=45.0 / 3**0.5))
    assert half - unknown == pytest.approx((45.0 + 2 * 45.0 / 9 - 2 * 90.0 / 9) * tpot_running)
    # No slot to wait for: no wait, whatever the spread.
    idle = {"running": 8, "decode_tokens_left": 90.0}
    assert model.predict_ttft_ms(100, load(**idle, decode_tokens_left_sd=0.0)) == model.predict_ttft_ms(
        100, load(**idle)
    )


def test_a_deep_queue_waits_a_whole_answer_per_request_beyond_the_running_ones():
    """Only the first ``running`` completions come from the running sequences' remaining work: each request queued
    ahead beyond them decodes its whole answer first (the queue of a spike, where the router must not accept
    requests it cannot serve in time)."""
    model = LatencyModel(PROFILE)  # mean_output_tokens 100
    halfway = {"running": 2, "queued": 6, "decode_tokens_left": 50.0}
    shallow = model.predict_ttft_ms(100, load(waiting_for_slot=1, **halfway))
    deep = model.predict_ttft_ms(100, load(waiting_for_slot=6, **halfway))
    tpot_running = model.predict_tpot_ms(2)
    # Two completions from the running pair (2 x 50 x 2 / 3 tokens each, over 2), then four whole answers over 2.
    assert deep - shallow == pytest.approx((2 * 2 * 50 * 2 / 3 + 4 * 100 - 2 * 50 * 2 / 3) * tpot_running / 2)
    assert deep - shallow > 4 * 100 * tpot_running / 2  # at least the four answers queued ahead


@pytest.mark.parametrize("context_cost", [0.0, 0.002])
def test_the_one_pass_prediction_is_the_two_predictions_it_stands_for(context_cost: float):
    """``predict_request`` is the router's hot path: it must give exactly what ``predict_ttft_ms`` and
    ``predict_load_tpot_ms`` give, over loads with and without queues, slot waits, prefill and a measured pace."""
    rng = random.Random(7)
    model = LatencyModel(LatencyProfile(tpot_ms_per_context_token=context_cost))
    feed(model, 50)
    for _ in range(500):
        example = Load(
            running=rng.choice([0.0, 0.5, rng.uniform(1, 100)]),
            queued=rng.choice([0.0, rng.uniform(0, 30)]),
            queued_prompt_tokens=rng.uniform(0, 50_000),
            waiting_for_slot=rng.choice([0.0, rng.uniform(1, 10)]),
            max_running=rng.randint(1, 128),
            context_tokens=rng.uniform(0, 200_000),
            startup_ms=rng.choice([0.0, 60_000.0]),
            prefill_tokens_per_s=rng.choice([0.0, rng.uniform(0, 200_000)]),
            decode_tokens_left=rng.choice([None, rng.uniform(0, 500)]),
            decode_tokens_left_sd=rng.choice([None, 0.0, rng.uniform(0, 300)]),
            measured_tpot_ms=rng.choice([0.0, rng.uniform(1, 100)]),
            measured_batch=rng.choice([0.0, rng.uniform(0.5, 100)]),
        )
        prompt = rng.randint(1, 30_000)
        ttft, tpot = model.predict_request(prompt, example)
        assert ttft == model.predict_ttft_ms(prompt, example)
        assert tpot == model.predict_load_tpot_ms(example, None, prompt)
        idle = Load(
            running=0.0,
            queued=0.0,
            queued_prompt_tokens=0.0,
            waiting_for_slot=0.0,
            max_running=example.max_running,
            startup_ms=example.startup_ms,
        )
        assert model.predict_idle_ttft_ms(prompt, example.startup_ms) == model.predict_ttft_ms(prompt, idle)


def test_a_fresh_model_is_not_trusted_as_if_checked_many_times():
    from router import RouterConfig
    from router.latency import new_latency_model

    model = new_latency_model(PROFILE, RouterConfig())  # cold start: margin 0.5, worth 32 errors
    assert model.ttft_margin_for(100) == model.tpot_margin_for(100) == 0.5
    for _ in range(8):
        model.observe_ttft(100, 150.0, predicted_ms=150.0)  # exact predictions
    assert 0.0 < model.ttft_margin_for(100) < 0.5  # the assumption fades as its own errors come in...
    assert model.tpot_margin_for(100) == 0.5  # ...per measure
    for _ in range(2000):
        model.observe_ttft(100, 150.0, predicted_ms=150.0)
    assert model.ttft_margin_for(100) < 0.01  # and is gone once many say the model is right
    off = new_latency_model(PROFILE, RouterConfig(cold_start_margin=0.0))
    assert off.ttft_margin_for(100) == 0.0


def test_margin_classes_split_prompt_lengths_by_powers_of_four_from_256():
    from router.latency import MARGIN_CLASS_BOUNDS, margin_class

    assert [margin_class(n) for n in (0, 255, 256, 1023, 1024, 4095, 4096, 16383, 16384, 10**6)] == [
        0,
        0,
        1,
        1,
        2,
        2,
        3,
        3,
        4,
        4,
    ]
    assert len(MARGIN_CLASS_BOUNDS) == 4


def test_each_class_of_prompt_length_learns_its_own_margin_from_the_cold_start():
    from router import RouterConfig
    from router.latency import new_latency_model

    model = new_latency_model(PROFILE, RouterConfig())  # cold start: 0.5 in every class, worth 32 errors
    for _ in range(40):
        model.observe_ttft(100, 150.0, predicted_ms=150.0)  # short prompts: exact
        model.observe_tpot(40.0, 1.0, predicted_ms=40.0, prompt_tokens=100)

    assert model.ttft_margin_for(100) == pytest.approx(16.0 / 72.0)  # the short ones' class fades as before
    assert model.tpot_margin_for(100) == pytest.approx(16.0 / 72.0)
    assert model.ttft_margin_for(2000) == 0.5  # a long prompt has not been checked: the assumption stands
    assert model.tpot_margin_for(2000) == 0.5

    for _ in range(3):
        model.observe_ttft(2000, 2500.0, predicted_ms=1000.0)  # long prompts 2.5x their predictions
    assert model.ttft_margin_for(3000) > model.ttft_margin_for(100)  # one class from 1024 to 4096 tokens
    assert model.ttft_margin_for(100) == pytest.approx(16.0 / 72.0)  # untouched by the long ones
