"""Scheduling: closed and open loops, bounds, and the records they leave, on a driven clock."""

import itertools

import httpx
import pytest

from bench.client import TargetConfig
from bench.loadgen import LoadConfig, run_load
from tests.bench.fake_openai import FIRST_DELAY_S, GAP_S, ManualClock, clocked_transport
from traffic import arrivals
from traffic.records import RequestRecord
from traffic.workload import FixedLength, WorkloadConfig, build_requests

WORKLOAD = WorkloadConfig(input_len=FixedLength(value=4), output_len=FixedLength(value=11))


async def run_clocked(load, send_times, model="m", extra_body=None):
    clock = ManualClock()
    target = TargetConfig(url="http://127.0.0.1:9", model=model, extra_body=extra_body or {})
    async with httpx.AsyncClient(transport=clocked_transport(clock)) as client:
        seen: list[RequestRecord] = []
        result = await run_load(
            target,
            load,
            build_requests(WORKLOAD, send_times),
            client=client,
            clock=clock,
            on_record=seen.append,
        )
    assert seen == result.records
    return result


async def test_closed_loop_of_one_is_sequential_and_exact():
    load = LoadConfig(concurrency=1, num_requests=3, progress=False)
    result = await run_clocked(load, itertools.repeat(None))
    e2e = FIRST_DELAY_S + 10 * GAP_S
    assert [r.index for r in result.records] == [0, 1, 2]
    assert [r.start_s for r in result.records] == pytest.approx([0, e2e, 2 * e2e], abs=1e-9)
    assert all(r.arrival_s is None for r in result.records)
    for r in result.records:
        assert r.ttft_s == pytest.approx(FIRST_DELAY_S, abs=1e-9)
        assert r.itl_s == pytest.approx([GAP_S] * 10, abs=1e-9)
        assert r.tpot_s == pytest.approx(GAP_S, abs=1e-9)
    assert result.duration_s == pytest.approx(3 * e2e, abs=1e-9)
    assert len({r.request_id for r in result.records}) == 3


async def test_closed_loop_stops_at_duration():
    # Each request takes 0.7 s on the driven clock: requests start at 0, 0.7, 1.4; not at 2.1.
    load = LoadConfig(concurrency=1, duration_s=2.0, progress=False)
    result = await run_clocked(load, itertools.repeat(None))
    assert len(result.records) == 3


async def test_open_loop_sends_at_the_arrival_times():
    load = LoadConfig(num_requests=5, progress=False)
    # An instant server, so the driven clock moves only with the schedule.
    result = await run_clocked(load, arrivals.constant(2.0), extra_body={"first_delay_s": 0, "gap_s": 0})
    records = sorted(result.records, key=lambda r: r.index)
    assert [r.arrival_s for r in records] == [0.0, 0.5, 1.0, 1.5, 2.0]
    assert [r.start_s for r in records] == pytest.approx([0.0, 0.5, 1.0, 1.5, 2.0], abs=1e-9)
    assert all(r.ok for r in records)


async def test_open_loop_stops_at_duration_and_at_the_end_of_the_workload():
    load = LoadConfig(duration_s=2.0, progress=False)
    result = await run_clocked(load, arrivals.constant(2.0), extra_body={"first_delay_s": 0, "gap_s": 0})
    assert sorted(r.arrival_s for r in result.records) == [0.0, 0.5, 1.0, 1.5]
    load = LoadConfig(num_requests=100, progress=False)
    result = await run_clocked(load, [0.0, 0.1], extra_body={"first_delay_s": 0, "gap_s": 0})
    assert len(result.records) == 2


async def test_open_loop_needs_send_times():
    with pytest.raises(ValueError, match="send times"):
        await run_clocked(LoadConfig(num_requests=1, progress=False), itertools.repeat(None))


async def test_failed_requests_are_records_too():
    load = LoadConfig(concurrency=2, num_requests=4, progress=False)
    result = await run_clocked(load, itertools.repeat(None), model="overloaded")
    assert [(r.status, r.error_type) for r in result.records] == [(429, "overloaded")] * 4


def test_a_run_must_be_bounded():
    with pytest.raises(ValueError, match="bound the run"):
        LoadConfig(concurrency=4)


async def test_real_http_open_loop(fake_server):
    target = TargetConfig(url=fake_server.url, model="m", extra_body={"first_delay_s": 0.05, "gap_s": 0.01})
    load = LoadConfig(num_requests=6, progress=False)
    workload = WORKLOAD.model_copy(update={"output_len": FixedLength(value=3)})
    result = await run_load(target, load, build_requests(workload, arrivals.constant(50.0)))
    assert len(result.records) == 6
    assert all(r.ok and r.output_tokens == 3 and r.variant == "tiny" for r in result.records)
    due = sorted(r.arrival_s or 0.0 for r in result.records)
    assert due == pytest.approx([i / 50 for i in range(6)])
    # A request is never sent before it is due (up to the event loop's 1 ns clock resolution).
    assert all(r.start_s >= (r.arrival_s or 0.0) - 1e-6 for r in result.records)


async def test_each_stream_keeps_one_connection_alive(fake_server):
    """A closed loop of two streams sends eight requests over two connections: each stream's next request goes on
    the connection its last one used (the response is read to its end), none waits for another's."""
    target = TargetConfig(url=fake_server.url, model="m", extra_body={"first_delay_s": 0.01, "gap_s": 0.001})
    load = LoadConfig(concurrency=2, num_requests=8, progress=False)
    peers = fake_server.app.state.peers
    before = len(peers)
    result = await run_load(target, load, build_requests(WORKLOAD, itertools.repeat(None)))
    assert len(result.records) == 8 and all(r.ok and r.done for r in result.records)
    assert len(set(peers[before:])) == 2
