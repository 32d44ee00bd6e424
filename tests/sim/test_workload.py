"""Simulated traffic is the bench's traffic: same seeded lengths and tiers, merged streams in time order."""

from __future__ import annotations

import itertools

from router import RouterConfig
from sim.workload import Stream, record_requests, sim_requests, stream_requests
from traffic.arrivals import ConstantArrivals, PoissonArrivals, arrival_times
from traffic.records import RequestRecord
from traffic.workload import NormalLength, SloTier, UniformLength, WorkloadConfig, build_requests

WORKLOAD = WorkloadConfig(
    input_len=NormalLength(mean=300, std=100),
    output_len=UniformLength(low=8, high=64),
    tiers=[SloTier(name="interactive", weight=2, ttft_ms=300), SloTier(name="batch")],
    seed=5,
)


def test_lengths_and_tiers_match_the_bench_for_the_same_seed():
    spec = PoissonArrivals(rate=10.0)
    bench = list(itertools.islice(build_requests(WORKLOAD, arrival_times(spec, WORKLOAD.seed)), 200))
    ours = list(itertools.islice(stream_requests(Stream(name="s", arrivals=spec, workload=WORKLOAD), 1e9), 200))

    assert [(b.send_at, b.prompt_tokens, b.max_tokens, b.slo) for b in bench] == ours


def test_streams_merge_in_time_order_and_stop_at_the_duration():
    streams = [
        Stream(name="a", arrivals=ConstantArrivals(rate=2.0), workload=WORKLOAD),
        Stream(name="b", arrivals=ConstantArrivals(rate=3.0), workload=WORKLOAD.model_copy(update={"seed": 6})),
    ]
    requests = list(sim_requests(streams, 10.0, RouterConfig()))

    assert len(requests) == 20 + 30
    assert [r.index for r in requests] == list(range(50))
    times = [r.arrival_s for r in requests]
    assert times == sorted(times) and times[-1] < 10.0


def test_the_router_sees_the_tiers_targets_and_sheddability():
    requests = list(
        sim_requests([Stream(name="s", arrivals=ConstantArrivals(rate=5.0), workload=WORKLOAD)], 20.0, RouterConfig())
    )
    by_tier = {r.slo.tier: r.features for r in requests}

    assert by_tier["interactive"].slo.ttft_ms == RouterConfig().tiers["interactive"].ttft_ms
    assert by_tier["batch"].sheddable


def test_a_recorded_run_replays_from_its_first_send():
    records = [
        RequestRecord(
            request_id=str(i),
            index=i,
            start_time=0.0,
            start_s=5.0 + i,
            arrival_s=None,
            prompt_tokens=10 * i + 1,
            max_tokens=9,
            output_tokens=7,
            slo_tier="gold",
            slo_ttft_ms=100.0,
        )
        for i in range(3)
    ]
    replayed = list(record_requests(records, RouterConfig()))

    assert [(r.arrival_s, r.prompt_tokens, r.max_tokens) for r in replayed] == [(0.0, 1, 7), (1.0, 11, 7), (2.0, 21, 7)]
    # "gold" is no tier of the simulated router: it routes by the recorded targets instead.
    assert replayed[0].features.slo.ttft_ms == 100.0
