"""The replica state machine: iteration timing, chunked prefill, slots, KV admission, cut-short jumps."""

from __future__ import annotations

import pytest

from sim.replica import SimReplica
from tests.sim.helpers import profile, request


def run_to_idle(replica: SimReplica, end: float | None, arrivals=()) -> list:
    """Steps the replica through its iteration ends (and timed arrivals) until it is idle."""
    pending = sorted(arrivals, key=lambda r: r.arrival_s)
    finished = []
    while end is not None or pending:
        if pending and (end is None or pending[0].arrival_s < end):
            r = pending.pop(0)
            new_end = replica.submit(r, r.arrival_s)
            end = new_end if new_end is not None else end
            continue
        assert end is not None
        done, end = replica.step_end(end)
        finished += done
    return finished


def test_a_lone_request_takes_one_prefill_step_then_one_step_per_token():
    replica = SimReplica("v#1", profile(), 0.0)
    r = request(prompt=100, out=5)
    finished = run_to_idle(replica, replica.submit(r, 0.0))

    # Prefill: 10 ms + 100 tokens x 0.1 ms; the first token comes with it, then 4 decode steps of 10 ms.
    assert r.first_token_s == pytest.approx(0.020)
    assert r.end_s == pytest.approx(0.060)
    assert finished == [r]
    assert (replica.running, replica.kv_used, replica.queued_prompt_tokens) == (0, 0, 0)


def test_a_long_prompt_is_prefilled_in_budget_sized_chunks():
    replica = SimReplica("v#1", profile(max_num_tokens=1000), 0.0)
    r = request(prompt=2500, out=1)
    run_to_idle(replica, replica.submit(r, 0.0))

    # Three iterations: 1000 + 1000 + 500 tokens, each 10 ms + 0.1 ms a token.
    assert r.first_token_s == pytest.approx(0.110 + 0.110 + 0.060)


def test_ttft_grows_with_the_queue_ahead():
    replica = SimReplica("v#1", profile(max_running_requests=1), 0.0)
    requests = [request(index=i, prompt=100, out=20) for i in range(4)]
    end = None
    for r in requests:
        new_end = replica.submit(r, 0.0)
        end = new_end if new_end is not None else end
    run_to_idle(replica, end)

    ttfts = [r.first_token_s or 0.0 for r in requests]
    assert all(r.first_token_s is not None for r in requests)
    assert ttfts == sorted(ttfts)
    assert len(set(ttfts)) == 4
    # One slot: each waits for the previous one's whole run (20 ms prefill + 19 decode steps of 10 ms).
    assert ttfts[1] - ttfts[0] == pytest.approx(0.210)


def test_decode_slows_with_the_batch():
    alone = SimReplica("v#1", profile(), 0.0)
    r1 = request(prompt=10, out=11)
    run_to_idle(alone, alone.submit(r1, 0.0))

    shared = SimReplica("v#2", profile(), 0.0)
    batch = [request(index=i, prompt=10, out=11) for i in range(4)]
    end = None
    for r in batch:
        new_end = shared.submit(r, 0.0)
        end = new_end if new_end is not None else end
    run_to_idle(shared, end)

    def tpot(r):
        return (r.end_s - r.first_token_s) / (r.max_tokens - 1)

    assert tpot(r1) == pytest.approx(0.010)
    assert tpot(batch[0]) == pytest.approx(0.013)  # 10 ms + 3 extra sequences x 1 ms
    # The pace the replica reports, as a real engine's recent_tpot_ms: the step its sequences decoded in (the
    # first one decoded one token beside the others' prefill, in a step of 13 - 1 + 0.3 ms).
    now = batch[-1].end_s
    assert shared.pace.tpot_ms(now) == pytest.approx(13.0, rel=0.01)
    assert shared.pace.decode_batch(now) == pytest.approx(4 * 10 * 0.013 / 5.0, rel=0.01)  # 40 tokens in 5 s


def test_an_arrival_cuts_a_decode_jump_at_the_next_iteration_boundary():
    replica = SimReplica("v#1", profile(), 0.0)
    long = request(index=0, prompt=10, out=101)
    late = request(index=1, arrival_s=0.0355, prompt=10, out=2)
    run_to_idle(replica, replica.submit(long, 0.0), arrivals=[late])

    # `long` prefills in 11 ms and then decodes in 10 ms steps: boundaries at 21, 31, 41 ms. The late
    # request is prefilled in the iteration that starts at 41 ms: 10 ms for the one decoding sequence
    # plus 1 ms for its 10 prompt tokens.
    assert late.first_token_s == pytest.approx(0.041 + 0.011)


def test_kv_cache_admission_blocks_until_a_sequence_finishes():
    replica = SimReplica("v#1", profile(kv_cache_tokens=250), 0.0)
    first = request(index=0, prompt=100, out=50)
    second = request(index=1, prompt=100, out=50)
    end = replica.submit(first, 0.0)
    assert replica.submit(second, 0.0) is None
    assert (replica.running, replica.queued) == (1, 1)  # 150 + 150 tokens > 250: it waits

    run_to_idle(replica, end)

    assert second.first_token_s is not None and first.end_s is not None
    assert second.first_token_s > first.end_s


def test_a_report_keeps_the_load_it_posted_while_the_replica_moves_on():
    replica = SimReplica("r", profile(max_running_requests=1), 0.0)
    replica.submit(request(0, prompt=100, out=50), 0.0)
    replica.submit(request(1, prompt=300, out=5), 0.0)

    posted = replica.post_report(0.5)

    assert (posted.at_s, posted.running_requests, posted.queued_requests, posted.queued_prompt_tokens) == (
        0.5,
        1,
        1,
        400,
    )  # both prompts unprefilled
    replica.submit(request(2, prompt=200, out=5), 0.6)
    assert replica.report is posted and replica.report.queued_requests == 1 and replica.queued == 2


def test_a_report_counts_the_kv_context_its_running_sequences_hold():
    # As the engines report it (EngineStats.context_tokens): each running sequence's prompt prefilled so far plus
    # the tokens it made, counted through a decode-only jump as its iterations pass.
    replica = SimReplica("r", profile(), 0.0)
    end = replica.submit(request(0, prompt=100, out=50), 0.0)
    assert replica.post_report(0.01).context_tokens == 0  # its prompt is still being prefilled
    _, end = replica.step_end(end)  # 20 ms: prefilled, with its first token
    assert replica.post_report(0.02).context_tokens == 101
    assert replica.post_report(0.055).context_tokens == 104  # three decode steps (10 ms each) into the jump
    end = replica.submit(request(1, prompt=300, out=5), 0.055)  # cuts the jump short at 60 ms
    assert end is not None
    _, end = replica.step_end(end)
    assert replica.post_report(0.06).context_tokens == 105
    assert end is not None
    now = end
    _, end = replica.step_end(now)  # the second prompt prefilled beside the first's next token
    assert replica.post_report(now).context_tokens == 106 + 301

    run_to_idle(replica, end)
    assert replica.post_report(10.0).context_tokens == 0
