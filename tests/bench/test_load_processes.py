"""The load generator over several processes: how a closed loop is split, merged, and run through real children
against a real HTTP server."""

import itertools

import psutil
import pytest

from bench.client import TargetConfig
from bench.load_processes import LoadProcesses, merge, processes_for, split
from bench.loadgen import LoadConfig, LoadResult
from traffic.records import RequestRecord
from traffic.workload import FixedLength, WorkloadConfig, build_requests

WORKLOAD = WorkloadConfig(input_len=FixedLength(value=4), output_len=FixedLength(value=3))


def test_one_process_per_64_streams_and_a_quarter_of_the_cores_at_most():
    assert processes_for(64, cores=16) == 1
    assert processes_for(65, cores=16) == 2
    assert processes_for(256, cores=16) == 4
    assert processes_for(1024, cores=16) == 4  # a quarter of the cores
    assert processes_for(256, cores=2) == 1  # a small host keeps its cores for the server


def test_split_deals_streams_evenly_and_requests_round_robin():
    specs = list(build_requests(WORKLOAD, itertools.repeat(None, 10)))
    shares = split(5, specs, 2)
    assert [streams for streams, _ in shares] == [3, 2]
    assert [[s.index for s in share] for _, share in shares] == [[0, 2, 4, 6, 8], [1, 3, 5, 7, 9]]
    # Never more shares than streams or requests.
    assert [streams for streams, _ in split(2, specs, 4)] == [1, 1]
    assert len(split(8, specs[:3], 4)) == 3


def _record(index: int, start_s: float, e2e_s: float) -> RequestRecord:
    return RequestRecord(
        request_id=str(index), index=index, start_time=0.0, start_s=start_s, arrival_s=None, prompt_tokens=1,
        max_tokens=1, e2e_s=e2e_s,
    )  # fmt: skip


def test_merge_puts_every_share_on_the_earliest_ones_clock():
    early = LoadResult(records=[_record(0, 0.0, 1.0)], wall_start=100.0, duration_s=1.0)
    late = LoadResult(records=[_record(1, 0.0, 0.2)], wall_start=100.5, duration_s=0.2)
    merged = merge([late, early])
    assert merged.wall_start == 100.0
    assert [(r.index, r.start_s) for r in merged.records] == [(1, 0.5), (0, 0.0)]  # completion order
    assert merged.duration_s == pytest.approx(1.0)


def test_a_closed_loop_through_two_processes_sends_each_request_once(fake_server):
    target = TargetConfig(url=fake_server.url, model="m", extra_body={"first_delay_s": 0.01, "gap_s": 0.001})
    specs = list(build_requests(WORKLOAD, itertools.repeat(None, 12)))
    peers = fake_server.app.state.peers
    with LoadProcesses(2) as pool:
        children = psutil.Process().children()
        assert len(children) >= 2  # the two load generators (and multiprocessing's resource tracker, if any)
        before = len(peers)
        result = pool.run(target, LoadConfig(concurrency=4, num_requests=10, progress=False), specs, processes=2)
        # A second level through the same children.
        again = pool.run(target, LoadConfig(concurrency=2, num_requests=4, progress=False), specs, processes=2)
    assert sorted(r.index for r in result.records) == list(range(10))  # num_requests bounds the whole loop
    assert all(r.ok and r.done and r.output_tokens == 3 for r in result.records)
    assert len({r.request_id for r in result.records}) == 10
    assert len({r.request_id.split("-")[1] for r in result.records}) == 2  # bench-<a run's id>-<index>: two runs
    assert len(set(peers[before : before + 10])) == 4  # one connection per stream
    assert min(r.start_s for r in result.records) >= 0.0
    assert result.duration_s == pytest.approx(max(r.end_s for r in result.records))
    assert len(again.records) == 4 and all(r.ok for r in again.records)


def test_only_a_closed_loop_bounded_by_requests_is_split(fake_server):
    target = TargetConfig(url=fake_server.url, model="m")
    specs = list(build_requests(WORKLOAD, itertools.repeat(None, 2)))
    pool = LoadProcesses(1)  # not started: the checks come first
    with pytest.raises(ValueError, match="closed loops"):
        pool.run(target, LoadConfig(num_requests=2, progress=False), specs, processes=1)
    with pytest.raises(ValueError, match="duration_s"):
        pool.run(target, LoadConfig(concurrency=2, duration_s=1.0, progress=False), specs, processes=1)
