"""The natural split's capacity (sim/capacity.py): where streams go, what a pool's burst measures, the min rule."""

from __future__ import annotations

import pytest

from bench.calibration import mix_capacity
from router import LatencyModel, RequestFeatures, RouterConfig, VariantView
from router.baselines import length_threshold
from router.types import RouterState
from sim.capacity import (
    burst_requests,
    burst_seconds,
    estimate_capacity,
    natural_split,
    split_capacity,
    stream_rate,
)
from sim.scenario import SCENARIOS, PoolSpec, Scenario, available_scenarios, two_variant_scenario
from sim.simulator import Simulation
from sim.workload import Stream
from tests.sim.helpers import profile
from traffic.arrivals import PoissonArrivals, SpikeArrivals
from traffic.mix import mean_length
from traffic.prefix import mean_prompt_tokens
from traffic.workload import FixedLength, NormalLength, WorkloadConfig


def _view(pool: PoolSpec) -> VariantView:
    p = pool.engine_profile()
    return VariantView(
        name=pool.name,
        context_length=p.context_length,
        quality=pool.quality,
        cost_per_1k_tokens=pool.cost_per_1k_tokens,
        ready_replicas=pool.pool_replicas,
        max_running_requests=p.max_running_requests,
        latency=LatencyModel(),
    )


def _router_choice(scenario: Scenario, stream: Stream) -> str:
    """What router.baselines.length_threshold itself picks for the stream's typical request (its whole prompt: a
    shared prefix or a conversation's history included)."""
    workload = stream.workload
    output = round(mean_length(workload.output_len))
    prompt = round(mean_prompt_tokens(workload.prefix, mean_length(workload.input_len), output))
    fitting = [_view(p) for p in scenario.pools if prompt + output <= p.engine_profile().context_length]
    request = RequestFeatures(prompt_tokens=prompt, max_tokens=output)
    return length_threshold(request, fitting, {}, scenario.router, RouterState()).name


def _stream(name: str, prompt: int, output: int, rate: float = 1.0, seed: int = 1) -> Stream:
    workload = WorkloadConfig(input_len=FixedLength(value=prompt), output_len=FixedLength(value=output), seed=seed)
    return Stream(name=name, arrivals=PoissonArrivals(rate=rate), workload=workload)


def _pool(name: str, context: int, quality: float, gpus: int = 1) -> PoolSpec:
    return PoolSpec(name=name, profile=profile(context_length=context), gpus=gpus, quality=quality)


@pytest.mark.parametrize("name", available_scenarios())
def test_the_split_of_every_scenario_is_what_length_threshold_picks_for_a_typical_request(name):
    scenario = SCENARIOS[name]()
    split = natural_split(scenario)
    assert split == {s.name: _router_choice(scenario, s) for s in scenario.streams}


def test_two_variant_sends_short_chat_to_the_8b_and_long_rag_to_the_70b():
    assert natural_split(two_variant_scenario()) == {"short": "llama-8b-int4", "long": "llama-70b-bf16-tp2"}


def test_ties_on_context_go_by_quality_and_a_pool_too_small_for_the_request_is_passed_over():
    pools = [_pool("small", 4096, 0.5), _pool("big-lo", 32768, 0.7), _pool("big-hi", 32768, 0.9)]
    streams = [
        _stream("short", 500, 100),
        _stream("long", 3000, 100),
        _stream("short-but-long-output", 500, 6000),  # a short prompt the 4k pool cannot hold
    ]
    scenario = Scenario(name="t", duration_s=10, pools=pools, streams=streams)
    split = natural_split(scenario)
    assert split == {"short": "small", "long": "big-hi", "short-but-long-output": "big-lo"}
    assert split == {s.name: _router_choice(scenario, s) for s in streams}


def test_a_stream_no_pool_can_hold_is_named_in_the_error():
    scenario = Scenario(name="t", duration_s=10, pools=[_pool("small", 4096, 0.5)], streams=[_stream("huge", 5000, 10)])
    with pytest.raises(ValueError, match="'huge'"):
        natural_split(scenario)


def test_capacity_is_the_rate_at_which_the_first_pool_saturates():
    # 40 req/s of short requests at 75% of the mix saturate at 53.3 req/s; 8 of long at 25% at 32.
    assert split_capacity({"fast": (40.0, 0.75), "big": (8.0, 0.25)}) == pytest.approx((32.0, "big"))
    assert split_capacity({"fast": (30.0, 0.75), "big": (80.0, 0.25)}) == pytest.approx((40.0, "fast"))
    assert split_capacity({"fast": (40.0, 0.75), "big": (8.0, 0.25)})[0] == pytest.approx(mix_capacity(40, 8, 0.75))
    # A pool that takes no traffic never saturates; three pools: the least of the three.
    assert split_capacity({"a": (10.0, 1.0), "idle": (0.0, 0.0)}) == (10.0, "a")
    assert split_capacity({"a": (10.0, 0.5), "b": (3.0, 0.25), "c": (100.0, 0.25)}) == pytest.approx((12.0, "b"))
    with pytest.raises(ValueError):
        split_capacity({"idle": (5.0, 0.0)})


def test_a_pools_burst_throughput_grows_with_its_replicas():
    requests = burst_requests([(_stream("s", 200, 50), 1.0)], 256, 8192, seed=0)
    throughput = {}
    for replicas in (1, 2, 4):
        pool = _pool("p", 8192, 0.5, gpus=replicas)
        throughput[replicas] = len(requests) / burst_seconds(pool, requests, replica_choice="power_of_two")
    assert throughput[1] < throughput[2] < throughput[4]
    assert throughput[4] > 3 * throughput[1]  # nearly linear: each replica runs full batches


def test_the_burst_runs_as_a_simulation_of_the_same_requests_would():
    # The burst's own event loop against Simulation.run with admission control out of the way.
    pool = PoolSpec(name="p", profile=profile(overhead_ms=2.0), gpus=3, max_ongoing_requests=12)
    streams = [
        (
            Stream(
                name="mixed",
                arrivals=PoissonArrivals(rate=1.0),
                workload=WorkloadConfig(
                    input_len=NormalLength(mean=800, std=600, low=16, high=4000),
                    output_len=NormalLength(mean=60, std=30, low=2, high=200),
                    seed=3,
                ),
            ),
            1.0,
        )
    ]
    seconds = burst_seconds(pool, burst_requests(streams, 200, 8192, seed=0), replica_choice="least_prefill")

    router = RouterConfig(policy="largest", queue_bound_per_replica=10**6, sheddable_queue_bound_per_replica=10**6)
    sim = Simulation([pool.sim_variant("static")], router, replica_choice="least_prefill")
    result = sim.run(burst_requests(streams, 200, 8192, seed=0))
    assert {r.status for r in result.records} == {200}
    assert seconds == pytest.approx(max(r.e2e_s or 0.0 for r in result.records))


def test_requests_the_pool_cannot_hold_are_left_out_of_its_burst():
    workload = WorkloadConfig(input_len=NormalLength(mean=6000, std=3000, low=100, high=20000), seed=2)
    requests = burst_requests(
        [(Stream(name="s", arrivals=PoissonArrivals(rate=1.0), workload=workload), 1.0)], 300, 8192, seed=0
    )
    assert len(requests) == 300
    assert max(r.prompt_tokens + r.max_tokens for r in requests) <= 8192
    assert [r.index for r in requests] == list(range(300))


def test_a_spike_counts_at_its_peak_only_when_the_run_reaches_it():
    spike = SpikeArrivals(base_rate=2.0, spike_rate=10.0, start_s=100.0, duration_s=50.0)
    assert stream_rate(spike, 60.0) == 2.0
    assert stream_rate(spike, 120.0) == 10.0
    assert stream_rate(PoissonArrivals(rate=3.5), 10.0) == 3.5


def test_two_variant_estimate_shares_and_scale():
    estimate = estimate_capacity(two_variant_scenario())
    by_pool = {p.pool: p for p in estimate.pools}
    assert by_pool["llama-8b-int4"].share == pytest.approx(0.75)
    assert by_pool["llama-70b-bf16-tp2"].share == pytest.approx(0.25)
    assert estimate.base_rate == pytest.approx(8.0)
    assert estimate.capacity == pytest.approx(min(p.capacity or float("inf") for p in estimate.pools))
    assert estimate.rate_scale == pytest.approx(estimate.capacity / 8.0)
    # The 70B's slow prefill of ~4k-token prompts makes it the bottleneck of this mix.
    assert estimate.bottleneck == "llama-70b-bf16-tp2"


def test_eight_waves_are_within_five_percent_of_sixteen_and_err_low():
    scenario = two_variant_scenario()
    eight, sixteen = estimate_capacity(scenario, waves=8), estimate_capacity(scenario, waves=16)
    assert 0.95 * sixteen.capacity < eight.capacity <= sixteen.capacity


@pytest.mark.parametrize("name", available_scenarios())
def test_every_scenario_has_an_estimate(name):
    estimate = estimate_capacity(SCENARIOS[name](duration_s=60.0))
    assert estimate.capacity > 0
    assert sum(p.share for p in estimate.pools) == pytest.approx(1.0)
    for pool in estimate.pools:
        assert (pool.throughput is not None) == (pool.share > 0)
