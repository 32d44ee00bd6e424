import dataclasses

import pytest

from bench.calibration import BesideLong, ProbePlan, fit_profile, mix_capacity, probe_specs
from traffic.records import RequestRecord


def probe(prompt_tokens, ttft_s, tpot_s, e2e_s=1.0, **kw):
    base = RequestRecord(
        request_id="p", index=0, start_time=1e9, start_s=0.0, arrival_s=None, prompt_tokens=prompt_tokens,
        max_tokens=32, output_tokens=32, ttft_s=ttft_s, tpot_s=tpot_s, e2e_s=e2e_s, status=200,
    )  # fmt: skip
    return dataclasses.replace(base, **kw)


def failed(prompt_tokens):
    return probe(prompt_tokens, None, None, error_type="timeout")


def fit(short, long, burst, long_burst=(), burst_wall_s=2.0, long_burst_wall_s=3.0):
    return fit_profile(
        "v", short, long, burst, long_burst,
        burst_wall_s=burst_wall_s, long_burst_wall_s=long_burst_wall_s, mean_output_tokens=48,
    )  # fmt: skip


def test_fit_by_hand():
    # 64 tokens in 100 ms and 1064 tokens in 600 ms: 0.5 ms a token (2000 tok/s) on a base of 68 ms.
    short = [probe(64, 0.100, 0.010), probe(64, 0.180, 0.014)]
    long = [probe(1064, 0.600, 0.012, e2e_s=1.0), probe(1064, 0.900, 0.012, e2e_s=2.0)]
    # TPOT 10 ms alone, 24 ms in a burst of 8: 2 ms more per extra sequence.
    burst = [probe(64, 0.2, 0.024) for _ in range(8)]
    c = fit(short, long, burst, long_burst=[probe(1064, 1.0, 0.02)] * 3)
    assert c.profile.prefill_tokens_per_s == pytest.approx(2000)
    assert c.profile.base_ttft_ms == pytest.approx(68)
    assert c.profile.tpot_ms_at_batch_1 == pytest.approx(10)
    assert c.profile.tpot_ms_per_extra_seq == pytest.approx(2)
    assert c.profile.mean_output_tokens == 48
    # The fastest single probes (least disturbed), the burst's median.
    assert (c.ttft_short_ms, c.ttft_long_ms, c.tpot_burst_ms) == pytest.approx((100, 600, 24))
    assert c.short_per_s == pytest.approx(8 / 2.0)
    assert c.long_s == pytest.approx(1.5)
    assert c.long_per_s == pytest.approx(3 / 3.0)


def test_the_cost_of_context_is_what_the_burst_beside_long_prompts_lost_beyond_its_larger_batch():
    short = [probe(64, 0.100, 0.010), probe(64, 0.180, 0.014)]
    long = [probe(1064, 0.600, 0.012)]
    burst = [probe(64, 0.2, 0.024) for _ in range(8)]  # 2 ms per extra sequence, as in test_fit_by_hand
    # Beside 2 long prompts holding 4000 tokens: 38 ms, of which 2 x 2 ms are the two more sequences.
    beside = [probe(64, 0.2, 0.038) for _ in range(8)] + [failed(64)]
    c = fit_profile(
        "v", short, long, burst, (), burst_wall_s=2.0, long_burst_wall_s=0.0, mean_output_tokens=48,
        context=BesideLong(beside, context_tokens=4000, sequences=2),
    )  # fmt: skip
    assert c.tpot_context_ms == pytest.approx(38)
    assert c.profile.tpot_ms_per_context_token == pytest.approx(10 / 4000)
    # No slower beside them, or not probed: no cost.
    same = fit_profile(
        "v", short, long, burst, (), burst_wall_s=2.0, long_burst_wall_s=0.0, mean_output_tokens=48,
        context=BesideLong(burst, context_tokens=4000, sequences=2),
    )  # fmt: skip
    assert same.profile.tpot_ms_per_context_token == 0.0
    assert fit(short, long, burst).profile.tpot_ms_per_context_token == 0.0
    assert fit(short, long, burst).tpot_context_ms is None


def test_the_cost_of_prefill_to_decode_is_what_the_burst_lost_while_long_prompts_arrived():
    # Prefill alone: 0.5 ms a token (test_fit_by_hand). The burst decoded at 24 ms alone and at 48 with 0.4
    # prompt tokens a ms arriving: half of every step went to prefill, 1.25 ms per prompt token, not 0.5.
    short = [probe(64, 0.100, 0.010), probe(64, 0.180, 0.014)]
    long = [probe(1064, 0.600, 0.012)]
    burst = [probe(64, 0.2, 0.024) for _ in range(8)]
    arriving = BesideLong([probe(64, 0.2, 0.048) for _ in range(8)], prefill_tokens_per_ms=0.4)
    c = fit_profile(
        "v", short, long, burst, (), burst_wall_s=2.0, long_burst_wall_s=0.0, mean_output_tokens=48,
        prefill=arriving,
    )  # fmt: skip
    assert c.tpot_prefill_ms == pytest.approx(48)
    assert c.profile.decode_ms_per_prefill_token == pytest.approx(1.25)
    # Never below the prefill cost alone; without the probe, that cost.
    calm = BesideLong(burst, prefill_tokens_per_ms=0.4)
    assert fit_profile(
        "v", short, long, burst, (), burst_wall_s=2.0, long_burst_wall_s=0.0, mean_output_tokens=48, prefill=calm,
    ).profile.decode_ms_per_prefill_token == pytest.approx(0.5)  # fmt: skip
    assert fit(short, long, burst).profile.decode_ms_per_prefill_token == pytest.approx(0.5)


def test_the_burst_is_timed_on_the_second_half_of_its_streams_once_every_probe_has_joined():
    short = [probe(64, 0.100, 0.010), probe(64, 0.180, 0.014)]
    long = [probe(1064, 0.600, 0.012)]
    # 16 chunks of 2 tokens: 7 gaps of 100 ms while the burst ramps up, then 8 of 32 ms (16 ms a token).
    ramping = probe(64, 0.2, 0.060, chunks=16, itl_s=[0.1] * 7 + [0.032] * 8)
    c = fit(short, long, [ramping] * 8)
    assert c.tpot_burst_ms == pytest.approx(16)
    assert c.profile.tpot_ms_per_extra_seq == pytest.approx((16 - 10) / 7)


def test_failed_probes_are_left_out_and_a_noisy_fit_stays_physical():
    # The long prompt looked faster than the short one (another process slowed the short probes).
    short = [probe(64, 0.300, 0.010), failed(64)]
    long = [probe(1064, 0.200, 0.012)]
    burst = [probe(64, 0.2, 0.008), failed(64)]
    c = fit(short, long, burst)
    assert c.profile.prefill_tokens_per_s > 0 and c.profile.base_ttft_ms >= 0
    assert c.profile.tpot_ms_per_extra_seq == 0  # TPOT never shrinks with the batch
    assert c.short_per_s == pytest.approx(1 / 2.0)  # only the probe that succeeded counts
    assert c.long_per_s is None  # no long burst was sent


def test_a_probe_kind_that_all_failed_is_an_error_that_names_it():
    with pytest.raises(ValueError, match="every long probe failed"):
        fit([probe(64, 0.1, 0.01)], [failed(1064)], [probe(64, 0.1, 0.01)] * 2)


def test_mix_capacity_is_set_by_the_first_variant_to_saturate():
    # 75% short: 10 short/s alone would allow 13.3 req/s, 1 long/s only 4 req/s.
    assert mix_capacity(10.0, 1.0, 0.75) == pytest.approx(4.0)
    assert mix_capacity(3.0, 10.0, 0.75) == pytest.approx(4.0)
    with pytest.raises(ValueError):
        mix_capacity(1.0, 1.0, 1.0)


def test_probe_specs_are_exact_token_id_prompts_without_slo():
    specs = probe_specs(ProbePlan(long_tokens=900), 3, 900, "x")
    assert [len(s.prompt) for s in specs] == [900] * 3
    assert all(s.max_tokens == 32 and s.slo.headers() == {} for s in specs)
    assert {s.max_tokens for s in probe_specs(ProbePlan(long_tokens=900), 2, 900, "x", max_tokens=128)} == {128}
    assert specs == probe_specs(ProbePlan(long_tokens=900), 3, 900, "x")
