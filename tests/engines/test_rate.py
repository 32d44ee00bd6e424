"""engines.rate: tokens per second, and the decode pace the running sequences measured, over a window."""

from __future__ import annotations

import pytest

from engines.rate import TokenRate


def test_rate_counts_every_token_in_the_window():
    rate = TokenRate(window_s=2.0)
    rate.add(4, now=10.0)
    rate.add(6, now=11.0, decode_s=0.3)
    assert rate.rate(11.5) == pytest.approx(5.0)
    assert rate.rate(12.5) == pytest.approx(3.0)  # the first delivery left the window


def test_pace_is_the_time_between_a_sequences_tokens_and_first_tokens_do_not_count():
    rate = TokenRate(window_s=5.0)
    rate.add(1, now=1.0)  # a first token: its wait was TTFT
    rate.add(1, now=1.1, decode_s=0.1)
    rate.add(3, now=1.4, decode_s=0.3)  # three tokens came together after 300 ms: 100 ms each
    rate.add(1, now=1.5, decode_s=0.3)  # another sequence, slower
    assert rate.tpot_ms(1.5) == pytest.approx(1e3 * 0.7 / 5)


def test_decode_batch_is_the_decode_time_delivered_per_second():
    rate = TokenRate(window_s=2.0)
    for step in range(1, 21):  # three sequences decoding at 100 ms a token for 2 s
        for _ in range(3):
            rate.add(1, now=step * 0.1, decode_s=0.1)
    assert rate.decode_batch(2.0) == pytest.approx(3.0)
    assert rate.tpot_ms(2.0) == pytest.approx(100.0)


def test_an_idle_window_reports_no_pace():
    rate = TokenRate(window_s=1.0)
    assert rate.tpot_ms(0.0) == 0.0
    rate.add(1, now=0.0, decode_s=0.05)
    assert rate.tpot_ms(0.5) == pytest.approx(50.0)
    assert (rate.tpot_ms(5.0), rate.decode_batch(5.0), rate.rate(5.0)) == (0.0, 0.0, 0.0)


def test_delivered_times_each_request_from_its_previous_delivery():
    rate = TokenRate()
    first = rate.delivered(1, None)
    assert first is not None
    assert rate.delivered(0, first) == first  # an empty step changes nothing
    second = rate.delivered(2, first)
    assert second is not None and second >= first
    assert rate.tpot_ms(second) == pytest.approx(1e3 * (second - first) / 2)
