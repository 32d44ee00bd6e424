"""The capacity of a scenario's *natural split*, from the engine models alone (no router).

The routing bench (``python -m bench routing``) places its rates at fractions of a calibrated capacity: short
prompts all to the fast small-context variant, long ones all to the large-context variant, and the capacity is
the total rate at which the first of the two is saturated (``bench.calibration.mix_capacity``), each variant's
throughput measured by a burst of requests pinned to it. This module computes the same figure for a simulated
scenario, so that a sweep's top rate is fixed before any policy runs:

1. each stream goes to the pool that ``router.baselines.length_threshold`` would choose for its typical
   request (:func:`natural_split`);
2. each pool that gets traffic serves a burst of requests drawn from its streams, all sent at t = 0, on its
   simulated replicas (:func:`burst_seconds`); its throughput is requests / time until the last one finishes;
3. the capacity is the least, over those pools, of throughput / the pool's share of the request rate
   (:func:`split_capacity`, ``mix_capacity`` for any number of pools).
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections.abc import Mapping, Sequence

from pydantic import BaseModel, Field

from router import RequestFeatures
from router.config import ReplicaChoice
from sim.deployment import SimDeployment
from sim.replica import SimReplica
from sim.request import SimRequest
from sim.scenario import PoolSpec, Scenario
from sim.workload import Stream
from traffic.arrivals import ArrivalSpec, BurstArrivals, ConstantArrivals, PoissonArrivals, SpikeArrivals
from traffic.mix import mean_length
from traffic.prefix import composer, mean_prompt_tokens
from traffic.workload import Slo

# A burst holds this many full batches of the pool (every replica's every slot). The time until the last
# request finishes includes a ramp (the first batch's prefills, with nothing decoding yet) and a drain (the
# last requests decoding in an ever smaller batch), each under one batch's lifetime, so the estimate errs low,
# by a share that shrinks as 1 / waves. In two_variant 2/4/8/16 waves gave 31.3/32.9/33.6/34.1 req/s: 8 is
# within ~3% of the limit and the whole estimate takes a second; tests/sim/test_capacity.py holds 8 within 5%
# of 16.
BURST_WAVES = 8
MIN_BURST = 64  # the bench's burst is 8 requests on a CPU engine; a GPU pool needs far more to saturate


class PoolCapacity(BaseModel):
    """One pool of the natural split: the traffic it gets and what its burst measured."""

    pool: str
    replicas: int = Field(description="Replicas the burst ran on: the whole pool (an autoscaled pool at its max).")
    streams: list[str] = Field(description="The scenario's streams the natural split sends to this pool.")
    share: float = Field(description="This pool's share of the scenario's total request rate (0: no traffic).")
    burst_requests: int = Field(description="Requests of the burst, drawn from the streams weighted by rate.")
    burst_s: float | None = Field(description="Seconds from the burst's send to its last response (None: no burst).")
    throughput: float | None = Field(description="burst_requests / burst_s: requests per second at saturation.")
    capacity: float | None = Field(
        description="throughput / share: the total request rate of the mix at which this pool saturates."
    )


class CapacityEstimate(BaseModel):
    """The natural split's capacity of a scenario, in requests per second and as a rate scale."""

    scenario: str
    split: dict[str, str] = Field(description="Stream -> the pool the natural split sends it to.")
    base_rate: float = Field(
        description="The scenario's total request rate as built (a spiking stream at its peak in the run)."
    )
    pools: list[PoolCapacity]
    capacity: float = Field(description="Total req/s at which the first pool saturates: min of the pools' capacity.")
    bottleneck: str = Field(description="The pool that saturates first.")
    rate_scale: float = Field(
        description="capacity / base_rate: the scenario's rate_scale that offers the capacity (for a scenario "
        "built at rate_scale 1)."
    )


# ---------------------------------------------------------------------------------------- pure parts


def stream_rate(arrivals: ArrivalSpec, duration_s: float) -> float:
    """A stream's request rate for its share of the mix: its mean rate, or a spike's peak within the run.

    The peak, not the mean, because the natural split must hold the spike for the run to stay below capacity;
    a run too short to reach the spike is at its base rate throughout.
    """
    match arrivals:
        case PoissonArrivals() | ConstantArrivals():
            return arrivals.rate
        case BurstArrivals():
            return arrivals.size / arrivals.period_s
        case SpikeArrivals():
            in_spike = arrivals.start_s < duration_s
            outside = arrivals.start_s > 0 or arrivals.start_s + arrivals.duration_s < duration_s
            return max(arrivals.spike_rate if in_spike else 0.0, arrivals.base_rate if outside else 0.0)
    raise ValueError(f"unknown arrivals {arrivals!r}")


def length_threshold_pool(
    prompt_tokens: float, context_tokens: float, pools: Sequence[PoolSpec], threshold: int
) -> str:
    """The pool ``router.baselines.length_threshold`` picks for a request: among the pools whose context holds
    it, the smallest-context one (lowest quality on a tie) for a prompt within ``threshold``, else the
    largest-context one (highest quality on a tie)."""
    fitting = [p for p in pools if context_tokens <= p.engine_profile().context_length]
    if not fitting:
        raise ValueError(f"a request of {context_tokens:.0f} tokens fits no pool's context")

    def key(pool: PoolSpec) -> tuple[int, float]:
        return pool.engine_profile().context_length, pool.quality

    return (min if prompt_tokens <= threshold else max)(fitting, key=key).name


def natural_split(scenario: Scenario) -> dict[str, str]:
    """Stream name -> pool: where ``length_threshold`` sends the stream's typical request (mean lengths).

    Per stream, not per request, like the bench's split (its classes do not overlap in length): the few
    requests of a stream on the other side of the threshold are counted with their stream.
    """
    threshold = scenario.router.length_threshold_tokens
    split = {}
    for stream in scenario.streams:
        workload = stream.workload
        output = mean_length(workload.output_len)
        prompt = mean_prompt_tokens(workload.prefix, mean_length(workload.input_len), output)
        total = prompt + output
        try:
            split[stream.name] = length_threshold_pool(prompt, total, scenario.pools, threshold)
        except ValueError as exc:
            raise ValueError(f"stream {stream.name!r}: {exc}") from None
    return split


def split_capacity(pools: Mapping[str, tuple[float, float]]) -> tuple[float, str]:
    """``pool -> (throughput, share of the request rate)``: the total rate at which the first pool saturates,
    and that pool. Pools with no share take no traffic and never saturate. For two pools this is
    ``bench.calibration.mix_capacity``."""
    loaded = {name: throughput / share for name, (throughput, share) in pools.items() if share > 0}
    if not loaded:
        raise ValueError("no pool takes any traffic")
    bottleneck = min(loaded, key=loaded.__getitem__)
    return loaded[bottleneck], bottleneck


def burst_size(replicas: int, slots_per_replica: int, waves: int = BURST_WAVES) -> int:
    """Enough requests to keep every slot of the pool busy for ``waves`` batches (see ``BURST_WAVES``)."""
    return max(MIN_BURST, waves * replicas * slots_per_replica)


def burst_requests(
    streams: Sequence[tuple[Stream, float]], count: int, context_length: int, seed: int
) -> list[SimRequest]:
    """``count`` requests all sent at t = 0, each from a stream drawn by weight (``(stream, rate)`` pairs).

    Each stream's lengths come from its own seeded draws (``sim.workload.stream_requests``' ``"{seed}:lengths"``),
    so a burst holds the run's first requests of each stream. A request the pool cannot hold is left out
    (``length_threshold`` would send it to a pool that can) and another drawn.
    """
    pick = random.Random(f"{seed}:burst")
    lengths = {s.name: random.Random(f"{s.workload.seed}:lengths") for s, _ in streams}
    # A workload with shared prefixes: each request's whole prompt, prefix or history included, and no segments,
    # so that nothing is cached: the capacity without a prefix cache, the yardstick the rates are set against.
    contents = {s.name: composer(s.workload.prefix, s.workload.seed) for s, _ in streams if s.workload.prefix}
    weights = [rate for _, rate in streams]
    out: list[SimRequest] = []
    for _ in range(100 * count):
        if len(out) == count:
            break
        stream = pick.choices([s for s, _ in streams], weights=weights)[0]
        rng = lengths[stream.name]
        prompt, output = stream.workload.input_len.sample(rng), stream.workload.output_len.sample(rng)
        if stream.name in contents:
            content = contents[stream.name].next(prompt, output)
            prompt, output = content.tokens, content.output_tokens or output
        if prompt + output > context_length:
            continue
        features = RequestFeatures(prompt_tokens=prompt, max_tokens=output)
        out.append(SimRequest(len(out), 0.0, prompt, output, Slo(), features))
    if len(out) < count:
        raise ValueError(f"streams {[s.name for s, _ in streams]}: too few requests fit {context_length} tokens")
    return out


# ---------------------------------------------------------------------------------------- the burst


def burst_seconds(
    pool: PoolSpec, requests: Sequence[SimRequest], *, replica_choice: ReplicaChoice, seed: int = 0
) -> float:
    """Seconds from sending ``requests`` (all at t = 0) to the pool's fully provisioned replicas to the last
    response, as the client sees it (the profile's overhead included).

    The simulator's own deployment (handle queue, ``max_ongoing_requests``, replica choice) and replica models,
    driven by the same events as ``Simulation.run`` but with no router in front: nothing is routed, so nothing
    is rejected; every request runs (checked). ``tests/sim/test_capacity.py`` checks it against a
    ``Simulation`` of the same burst.
    """
    variant = pool.sim_variant("static")  # every replica of the pool: an autoscaled pool at its max
    deployment = SimDeployment(
        pool.name,
        variant.profile,
        variant.max_ongoing_requests,
        seed,
        replica_choice,
        prefill_tokens_per_s=variant.router_prefill_tokens_per_s,
    )
    for _ in range(variant.num_replicas):
        deployment.mark_ready(deployment.add_replica(0.0))
    heap: list[tuple[float, int, SimReplica, int]] = []
    order = itertools.count()

    def schedule(replica: SimReplica, end: float | None) -> None:
        if end is not None:
            heapq.heappush(heap, (end, next(order), replica, replica.version))

    for request in requests:
        sent = deployment.dispatch(request, 0.0)
        if sent is not None:
            schedule(*sent)
    finished = 0
    last = 0.0
    while heap:
        now, _, replica, version = heapq.heappop(heap)
        if version != replica.version:
            continue  # a rescheduled iteration end
        done, end = replica.step_end(now)
        schedule(replica, end)
        replica.started.clear()
        finished += len(done)
        for request in done:
            deployment.completed(replica, request)
        if done:
            last = now
            for target, new_end in deployment.drain_handle_queue(now):
                schedule(target, new_end)
    if finished != len(requests):
        raise RuntimeError(f"pool {pool.name!r}: {len(requests) - finished} of the burst's requests never finished")
    return last + variant.profile.overhead_ms / 1e3


def estimate_capacity(scenario: Scenario, *, waves: int = BURST_WAVES) -> CapacityEstimate:
    """The natural split's capacity of ``scenario`` (see the module docstring).

    Throughput is the burst's requests over the time until the last one finishes, as the bench's calibration
    measures it (``short_per_s``: a burst's requests over its wall time) rather than completions in a steady
    window: the two differ by the ramp and the drain, which ``BURST_WAVES`` batches make small, and the
    makespan errs low, so the sweep's top rate is at, not beyond, what the split sustains.
    """
    split = natural_split(scenario)
    rates = {s.name: stream_rate(s.arrivals, scenario.duration_s) for s in scenario.streams}
    base_rate = sum(rates.values())
    if base_rate <= 0:
        raise ValueError(f"scenario {scenario.name!r} sends no traffic")
    pools: list[PoolCapacity] = []
    for index, pool in enumerate(scenario.pools):
        streams = [(s, rates[s.name]) for s in scenario.streams if split[s.name] == pool.name and rates[s.name] > 0]
        share = sum(rate for _, rate in streams) / base_rate
        replicas = pool.pool_replicas
        if not streams:
            pools.append(
                PoolCapacity(
                    pool=pool.name,
                    replicas=replicas,
                    streams=[],
                    share=0.0,
                    burst_requests=0,
                    burst_s=None,
                    throughput=None,
                    capacity=None,
                )
            )
            continue
        profile = pool.engine_profile()
        slots = min(profile.max_running_requests, pool.max_ongoing_requests)
        requests = burst_requests(
            streams, burst_size(replicas, slots, waves), profile.context_length, scenario.seed + index
        )
        seconds = burst_seconds(pool, requests, replica_choice=scenario.replica_choice, seed=scenario.seed)
        throughput = len(requests) / seconds
        pools.append(
            PoolCapacity(
                pool=pool.name,
                replicas=replicas,
                streams=[s.name for s, _ in streams],
                share=share,
                burst_requests=len(requests),
                burst_s=seconds,
                throughput=throughput,
                capacity=throughput / share,
            )
        )
    capacity, bottleneck = split_capacity({p.pool: (p.throughput or 0.0, p.share) for p in pools})
    return CapacityEstimate(
        scenario=scenario.name,
        split=split,
        base_rate=base_rate,
        pools=pools,
        capacity=capacity,
        bottleneck=bottleneck,
        rate_scale=capacity / base_rate,
    )
