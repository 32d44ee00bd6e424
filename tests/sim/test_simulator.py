"""The event loop driving the real router and autoscaler over simulated replicas: small seeded scenarios."""

from __future__ import annotations

from router import RouterConfig, SLOTier
from router.explain import parse_candidates
from router.serve_autoscaling import AutoscalingSpec
from sim.seed import router_seed
from sim.simulator import Simulation, SimVariant
from sim.workload import Stream, sim_requests
from tests.sim.helpers import profile, request
from traffic.arrivals import ConstantArrivals, PoissonArrivals, SpikeArrivals
from traffic.records import RequestRecord
from traffic.summary import Summary, summarize
from traffic.workload import FixedLength, SloTier, WorkloadConfig

ROUTER = RouterConfig(
    tiers={"fast": SLOTier(ttft_ms=200.0, tpot_ms=30.0)},
    default_tier="fast",
    queue_bound_per_replica=1000,
    sheddable_queue_bound_per_replica=1000,
)


def variant(name: str, **fields) -> SimVariant:
    p = fields.pop("profile", profile())
    return SimVariant(name=name, profile=p, latency_profile=router_seed(p, 16), **fields)


def stream(rate: float, *, prompt: int = 200, out: int = 16, duration_tiers=True, arrivals=None) -> Stream:
    tiers = [SloTier(name="fast", ttft_ms=200.0, tpot_ms=30.0)] if duration_tiers else []
    return Stream(
        name="test",
        arrivals=arrivals or PoissonArrivals(rate=rate),
        workload=WorkloadConfig(input_len=FixedLength(value=prompt), output_len=FixedLength(value=out), tiers=tiers),
    )


def run(variants, router: RouterConfig, streams, duration_s: float):
    sim = Simulation(variants, router, seed=7)
    return sim, sim.run(sim_requests(streams, duration_s, router), horizon_s=duration_s)


def test_round_robin_splits_requests_evenly():
    router = ROUTER.model_copy(update={"policy": "round_robin"})
    _, result = run([variant("a"), variant("b"), variant("c")], router, [stream(30.0)], 20.0)

    counts = summarize(result.records).by_variant
    sizes = [g.requests for g in counts.values()]
    assert len(sizes) == 3 and max(sizes) - min(sizes) <= 1


def test_every_request_is_recorded_as_the_bench_records_it():
    _, result = run([variant("a")], ROUTER, [stream(5.0)], 10.0)

    assert result.records and all(isinstance(r, RequestRecord) for r in result.records)
    ok = [r for r in result.records if r.ok]
    assert ok and all(r.status == 200 and r.variant == "a" and r.output_tokens == 16 for r in ok)
    assert all(r.ttft_s is not None and r.e2e_s is not None and r.ttft_s <= r.e2e_s for r in ok)
    # The candidates the router weighed, as the ingress's x-route-candidates header names them.
    assert all(list(parse_candidates(r.route_candidates)) == ["a"] for r in ok)
    summary = summarize(result.records)
    assert isinstance(summary, Summary)
    assert set(Summary.model_fields) <= set(summary.model_dump())
    assert summary.by_tier["fast"].requests == summary.requests


def test_ttft_grows_with_the_offered_load_on_one_replica():
    one_slot = profile(max_running_requests=2)

    def p50(rate: float) -> float:
        _, result = run([variant("a", profile=one_slot)], ROUTER, [stream(rate)], 30.0)
        value = summarize(result.records).ttft_ms.p50
        assert value is not None
        return value

    assert p50(2.0) < p50(20.0) < p50(40.0)


def test_the_slo_policy_beats_always_largest_when_the_large_variant_is_overloaded():
    # "big" is the better model but has one slow replica; "small" has four fast ones. The traffic is
    # far beyond what "big" can serve within the SLO, well within what both together can.
    big = profile(step_ms_at_batch_1=20.0, max_running_requests=4)
    variants = [variant("big", profile=big, quality=0.9), variant("small", num_replicas=4, quality=0.5)]
    scores = {}
    for policy in ("slo", "largest"):
        _, result = run(variants, ROUTER.model_copy(update={"policy": policy}), [stream(40.0)], 30.0)
        scores[policy] = summarize(result.records).slo_attainment

    assert scores["slo"] > 0.9 > scores["largest"]


def test_the_engine_load_autoscaler_adds_replicas_during_a_spike_and_removes_them_after():
    spec = AutoscalingSpec(
        min_replicas=1,
        max_replicas=6,
        upscale_delay_s=5,
        downscale_delay_s=30,
        look_back_period_s=5,
        metrics_interval_s=1,
    )
    v = variant("a", profile=profile(max_running_requests=8, startup_s=5.0), autoscaling=spec)
    spike = SpikeArrivals(base_rate=2.0, spike_rate=60.0, start_s=30.0, duration_s=60.0)
    _, result = run([v], ROUTER, [stream(0.0, arrivals=spike)], 200.0)

    counts = [(s.t_s, s.replicas) for s in result.replica_samples if s.variant == "a"]
    before = max(n for t, n in counts if t < 30.0)
    during = max(n for t, n in counts if 30.0 <= t <= 100.0)
    final = counts[-1][1]
    assert before == 1
    assert during >= 3
    assert final < during
    assert result.gpu_seconds["a"] < 6 * 200.0


def test_serves_default_autoscaler_also_scales_but_on_request_counts():
    spec = AutoscalingSpec(
        min_replicas=1,
        max_replicas=6,
        policy="ongoing_requests",
        target_ongoing_requests=4,
        upscale_delay_s=5,
        look_back_period_s=5,
        metrics_interval_s=1,
    )
    v = variant("a", autoscaling=spec)
    _, result = run([v], ROUTER, [stream(0.0, arrivals=ConstantArrivals(rate=40.0))], 60.0)

    assert max(s.replicas for s in result.replica_samples) > 1


def test_a_variant_without_replicas_is_rejected_as_unavailable():
    router = ROUTER.model_copy(update={"wait_for_starting_replicas": False})
    _, result = run([variant("a", num_replicas=0)], router, [stream(2.0)], 5.0)

    assert result.records and all(r.status == 503 for r in result.records)


def test_the_same_seed_gives_the_same_run():
    def outcome():
        _, result = run([variant("a"), variant("b")], ROUTER, [stream(20.0)], 10.0)
        return [(r.variant, r.ttft_s, r.e2e_s) for r in result.records]

    assert outcome() == outcome()


def test_two_ingresses_each_route_round_robin_to_both_variants():
    # A request-index ingress choice in step with round_robin's index alternation would send every request for one
    # variant through one ingress; the real stack's ingresses each take requests of every kind, and each keeps its
    # own round-robin turn.
    router = ROUTER.model_copy(update={"policy": "round_robin"})
    sim = Simulation([variant("a"), variant("b")], router, seed=7, ingress_replicas=2)
    result = sim.run(sim_requests([stream(20.0)], 20.0, router), horizon_s=20.0)

    by_ingress: dict[str | None, set[str | None]] = {}
    for r in result.records:
        by_ingress.setdefault(r.ingress, set()).add(r.variant)
    assert by_ingress == {"0": {"a", "b"}, "1": {"a", "b"}}
    assert all(r.replica is not None and r.replica.startswith(f"{r.variant}#") for r in result.records)


def test_the_router_sees_a_variant_as_its_replicas_last_reported_it():
    # Replicas post their load every report period; between posts the router's view stays as posted, however the
    # queues move (the real stats board's cadence, router.views.STATS_PERIOD_S).
    router = ROUTER.model_copy(update={"policy": "largest"})
    sim = Simulation([variant("a")], router, seed=7, report_period_s=1000.0)
    sim.run(sim_requests([stream(50.0)], 5.0, router), horizon_s=5.0)
    replica = sim.deployments["a"].replicas[0]

    assert replica.report is not None and replica.report.at_s < 1000.0
    view = sim._snapshot_view("a", sim.ingresses[0], 0.0)
    assert (
        view.running_requests == replica.report.running_requests
        and view.queued_requests == replica.report.queued_requests
    )


def test_the_router_sees_the_kv_context_the_replicas_reported():
    # The view is router.views.variant_view of the replicas' reports, as the app builds it: their KV context too.
    sim = Simulation([variant("a")], ROUTER, seed=7)
    first, second = (sim.deployments["a"].add_replica(0.0) for _ in range(2))
    for replica in (first, second):
        sim._mark_ready(replica, 0.0)
    for replica, prompt in ((first, 300), (second, 500)):
        end = replica.submit(request(prompt=prompt, out=20), 0.0)
        assert end is not None
        replica.step_end(end)  # prefilled, with its first token
        replica.post_report(end)

    view = sim._snapshot_view("a", sim.ingresses[0], 1.0)
    assert (view.ready_replicas, view.context_tokens) == (2, 301 + 501)
