"""What a profile says a closed-loop level measures: the simulator's replica on the bench's own load."""

from __future__ import annotations

import pytest

from bench.expectation import closed_loop
from tests.sim.helpers import profile


def test_one_stream_waits_one_prefill_iteration_then_decodes_at_the_lone_step():
    p = profile()  # 10 ms a step, 0.1 ms a prompt token
    e = closed_loop(p, concurrency=1, requests=3, prompt_tokens=100, max_tokens=11)
    assert e.ttft_p50_ms == pytest.approx(10.0 + 10.0)
    assert e.tpot_p50_ms == pytest.approx(10.0)
    assert e.tokens_per_s == pytest.approx(3 * 11 / (3 * (20.0 + 10 * 10.0) / 1e3))


def test_streams_sent_together_start_behind_the_first_and_then_decode_together():
    p = profile(max_running_requests=4)
    e = closed_loop(p, concurrency=4, requests=8, prompt_tokens=10, max_tokens=5)
    # As in the engines: the first request starts an iteration alone, the other three join the next one.
    assert e.ttft_p50_ms == pytest.approx(p.step_ms(0, 10) + p.step_ms(1, 30))
    assert p.step_ms(3, 0) < e.tpot_p50_ms <= p.step_ms(4, 0)


def test_each_request_its_own_length_counts_the_tokens_it_made():
    p = profile()
    same = closed_loop(p, concurrency=1, requests=2, prompt_tokens=100, max_tokens=11)
    mixed = closed_loop(p, concurrency=1, requests=2, prompt_tokens=100, max_tokens=[6, 11])
    # One stream in a row: the shorter first request saves five decode steps and five tokens.
    assert mixed.tokens_per_s == pytest.approx((6 + 11) / ((2 * 20.0 + 5 * 10.0 + 10 * 10.0) / 1e3))
    assert mixed.tokens_per_s != pytest.approx(same.tokens_per_s)
