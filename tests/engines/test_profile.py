"""Engine profiles: the step model, the router seed, and the roofline estimate's arithmetic."""

from __future__ import annotations

import pytest

from engines.presets import PRESETS
from engines.profile import Roofline
from sim.seed import router_seed
from tests.sim.helpers import profile


def test_step_time_is_linear_in_decoding_sequences_and_prefill_tokens():
    p = profile()
    assert p.step_ms(1, 0) == pytest.approx(10.0)
    assert p.step_ms(5, 0) == pytest.approx(14.0)
    assert p.step_ms(1, 1000) == pytest.approx(110.0)


def test_the_router_seed_is_the_engines_own_speed():
    seed = router_seed(profile(overhead_ms=3.0), mean_output_tokens=99)
    assert (seed.tpot_ms_at_batch_1, seed.tpot_ms_per_extra_seq, seed.prefill_tokens_per_s) == (10.0, 1.0, 10_000.0)
    assert seed.base_ttft_ms == pytest.approx(13.0)
    assert seed.mean_output_tokens == 99


def test_roofline_decode_reads_the_weights_once_per_step():
    # 10 B params x 1 byte over 1 TB/s at full efficiency: 10 ms, plus 1 ms overhead, one GPU.
    line = Roofline(
        params_b=10,
        bytes_per_param=1,
        layers=10,
        kv_heads=1,
        head_dim=64,
        hbm_tb_per_s=1.0,
        hbm_gb=80,
        tflops=100,
        bandwidth_efficiency=1.0,
        compute_efficiency=1.0,
        step_overhead_ms=1.0,
    )
    p = line.profile(max_running_requests=8, context_length=4096, startup_s=1.0)
    assert p.step_ms_at_batch_1 == pytest.approx(11.0)
    assert p.prefill_tokens_per_s == pytest.approx(100e12 / 20e9)
    assert line.kv_bytes_per_token == 2 * 10 * 64


def test_tensor_parallel_splits_the_weights_and_adds_all_reduces():
    kwargs = dict(
        params_b=70, bytes_per_param=1, layers=80, kv_heads=8, head_dim=128, hbm_tb_per_s=4.8, hbm_gb=141, tflops=1979
    )
    one = Roofline(**kwargs, tp=1).profile(max_running_requests=8, context_length=4096, startup_s=1.0)
    four = Roofline(**kwargs, tp=4).profile(max_running_requests=8, context_length=4096, startup_s=1.0)
    assert four.step_ms_at_batch_1 < one.step_ms_at_batch_1 / 2
    assert four.gpus_per_replica == 4


def test_builtin_profiles_put_the_small_model_ahead_of_the_large_one():
    small, large = PRESETS["h200-llama-3.1-8b-int4"], PRESETS["h200-llama-3.1-70b-fp8-tp4"]
    assert small.step_ms_at_batch_1 < large.step_ms_at_batch_1
    assert (small.gpus_per_replica, large.gpus_per_replica) == (1, 4)
