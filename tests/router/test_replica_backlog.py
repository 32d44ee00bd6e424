"""The prefill backlog a router estimates for a replica from the prompts it sent it (router/replica_backlog.py)."""

from __future__ import annotations

import pytest

from router.replica_backlog import prefill_backlog, seen_backlog


def test_nothing_sent_is_no_backlog():
    assert prefill_backlog([], now=5.0, tokens_per_s=1000.0) == 0.0


def test_a_prompt_drains_at_the_prefill_rate_from_its_send():
    sent = [(1000, 0.0)]

    assert prefill_backlog(sent, now=0.0, tokens_per_s=1000.0) == pytest.approx(1000.0)
    assert prefill_backlog(sent, now=0.25, tokens_per_s=1000.0) == pytest.approx(750.0)
    assert prefill_backlog(sent, now=2.0, tokens_per_s=1000.0) == 0.0


def test_prompts_queue_behind_each_other_first_come_first_served():
    # The second prompt, sent at 0.5 s, starts when the first is done (1.0 s) and ends at 1.5 s.
    sent = [(500, 0.5), (1000, 0.0)]

    assert prefill_backlog(sent, now=0.75, tokens_per_s=1000.0) == pytest.approx(250.0 + 500.0)
    assert prefill_backlog(sent, now=1.25, tokens_per_s=1000.0) == pytest.approx(250.0)


def test_a_prompt_sent_to_an_idle_replica_starts_at_once():
    # The first prompt was done at 0.1 s; the second, sent at 1.0 s, has had 0.1 s of its 0.2 s.
    sent = [(100, 0.0), (200, 1.0)]

    assert prefill_backlog(sent, now=1.1, tokens_per_s=1000.0) == pytest.approx(100.0)


def test_without_a_report_the_router_sees_only_what_it_sent():
    assert seen_backlog([(1000, 0.0)], None, now=0.25, tokens_per_s=1000.0) == pytest.approx(750.0)


def test_a_report_adds_what_other_routers_sent_and_this_one_sent_since():
    # The replica reported 2000 tokens at 1.0 s (another ingress's long prompt); this router sent 500 at 1.5 s,
    # after the report, and 100 at 0.0 s, which the report already holds (or which was done long before).
    sent = [(100, 0.0), (500, 1.5)]

    # At 2.0 s the report's 2000 have drained 1000 (ends at 3.0 s); the 500 queue behind them.
    assert seen_backlog(sent, (2000, 1.0), now=2.0, tokens_per_s=1000.0) == pytest.approx(1000.0 + 500.0)
    assert prefill_backlog(sent, now=2.0, tokens_per_s=1000.0) == pytest.approx(0.0)  # what it saw before


def test_a_report_of_nothing_never_hides_what_the_router_sent():
    # A backend that reports no queued prompt tokens (0) leaves the router's own estimate as it was.
    sent = [(1000, 0.0), (1000, 0.1)]

    assert seen_backlog(sent, (0, 0.5), now=0.5, tokens_per_s=1000.0) == pytest.approx(
        prefill_backlog(sent, now=0.5, tokens_per_s=1000.0)
    )
