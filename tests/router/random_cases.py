"""Random fleets, configs, requests and model snapshots for the tests that hold two ways of deciding equal
(tests/router/test_route_equivalence.py, tests/router/test_route_idle.py)."""

from __future__ import annotations

import random
from collections.abc import Iterator

from router import SLO, LatencyModel, LatencyProfile, RequestFeatures, RouterConfig, VariantView

FIELDS = ["logit_bias", "presence_penalty", "frequency_penalty"]


def model(rng: random.Random) -> LatencyModel:
    speed = rng.uniform(0.5, 8.0)
    profile = LatencyProfile(
        prefill_tokens_per_s=rng.uniform(2_000, 40_000) / speed,
        base_ttft_ms=rng.uniform(5, 60) * speed,
        tpot_ms_per_extra_seq=rng.uniform(0.0, 0.5) * speed,
        tpot_ms_at_batch_1=rng.uniform(3, 20) * speed,
        tpot_ms_per_context_token=rng.choice([0.0, 0.0, rng.uniform(1e-5, 1e-3)]),
        mean_output_tokens=rng.uniform(20, 400),
    )
    return LatencyModel(
        profile,
        prior_margin=rng.choice([0.0, 0.5]),
        prior_margin_weight=rng.choice([0.0, 32.0]),
    )


def teach(model: LatencyModel, rng: random.Random, count: int) -> None:
    """Observations that move the weights and both error margins (some censored, some single-token)."""
    for _ in range(count):
        batch = rng.uniform(1, 64)
        prompt = rng.randint(1, 8000)
        tpot = model.predict_tpot_ms(batch) * rng.uniform(0.5, 2.0)
        ttft = model.predict_idle_ttft_ms(prompt) * rng.uniform(0.5, 3.0)
        model.observe_tpot(
            tpot,
            batch,
            prefill_tokens_per_step=rng.choice([0.0, rng.uniform(0, 500)]),
            context_tokens=rng.uniform(0, 100_000),
            predicted_ms=tpot / rng.uniform(0.7, 1.5),
            censored=rng.random() < 0.05,
        )
        model.observe_ttft(
            prompt,
            ttft,
            queued_tokens_ahead=rng.choice([0.0, rng.uniform(0, 20_000)]),
            waiting_for_slot=rng.choice([0.0, rng.uniform(0, 5)]),
            batch_size=batch,
            context_tokens=rng.uniform(0, 100_000),
            predicted_ms=ttft / rng.uniform(0.7, 1.5),
            censored=rng.random() < 0.05,
        )


def view(rng: random.Random, index: int, latency: LatencyModel, quality: float) -> VariantView:
    """One variant with random figures: idle or busy, ready or starting, a full KV cache now and then."""
    ready = rng.choice([0, 1, 1, 2, 4, 8])
    running = rng.randint(0, 150) if ready else 0
    inflight = rng.randint(0, running + 30)
    unstarted = rng.randint(0, min(inflight, 10))
    return VariantView(
        name=f"v{index}",
        context_length=rng.choice([2048, 8192, 32768, 131072]),
        quality=quality,
        cost_per_1k_tokens=rng.choice([0.01, 0.02, 0.05, 0.1]),
        ready_replicas=ready,
        starting_replicas=rng.choice([0, 0, 1]),
        starting_ready_in_ms=(0.0, 400.0, 3000.0)[index % 3],  # not drawn: the cases' other draws stay as they were
        max_running_requests=rng.choice([1, 8, 64, 128]),
        latency=latency,
        sampling_fields=rng.choice([None, None, frozenset(), frozenset(FIELDS[:1]), frozenset(FIELDS)]),
        queued_requests=rng.choice([0, rng.randint(0, 40)]) if ready else 0,
        running_requests=running,
        queued_prompt_tokens=rng.choice([0, rng.randint(0, 80_000)]) if ready else 0,
        kv_used_fraction=rng.choice([0.0, rng.random(), 0.99]) if ready else 0.0,
        inflight=inflight,
        inflight_prompt_tokens=inflight * rng.randint(50, 3000),
        report_age_ms=rng.choice([0.0, rng.uniform(0, 400)]),
        unstarted_requests=unstarted,
        unstarted_prompt_tokens=unstarted * rng.randint(0, 3000),
        fresh_prompt_tokens=rng.choice([0, rng.randint(0, 20_000)]),
        prefill_tokens_per_s=rng.choice([0.0, rng.uniform(0, 80_000)]),
        decode_tokens_left=rng.choice([None, rng.uniform(0, 500)]),
        decode_tokens_left_sd=rng.choice([None, 0.0, rng.uniform(0, 300)]),
        recent_tpot_ms=rng.choice([0.0, rng.uniform(2, 200)]),
        recent_decode_batch=rng.choice([0.0, rng.uniform(0, 150)]),
        context_tokens=rng.choice([0, rng.randint(0, 300_000)]),
    )


def request(rng: random.Random, names: list[str]) -> RequestFeatures:
    # A few pairs of targets, so that reservations of several kinds build up and crowd one another out.
    slo = rng.choice(
        [
            SLO(ttft_ms=300.0, tpot_ms=50.0),
            SLO(ttft_ms=300.0, tpot_ms=50.0),
            SLO(ttft_ms=2000.0, tpot_ms=100.0),
            SLO(ttft_ms=rng.uniform(50, 5000), tpot_ms=rng.uniform(5, 200)),
            SLO(ttft_ms=1000.0),
            SLO(tpot_ms=30.0),
            SLO(),
        ]
    )
    return RequestFeatures(
        prompt_tokens=rng.choice([rng.randint(1, 1024), rng.randint(1000, 40_000)]),
        max_tokens=rng.choice([1, rng.randint(1, 2000)]),
        slo=slo,
        priority=rng.choice([-1, 0, 0, 1, 2]),
        sheddable=rng.random() < 0.1,
        pinned=rng.choice([*names, "nope"]) if rng.random() < 0.05 else None,
        sampling_fields=frozenset(rng.sample(FIELDS, rng.randint(1, 2))) if rng.random() < 0.1 else frozenset(),
    )


def config(rng: random.Random) -> RouterConfig:
    return RouterConfig(
        policy=rng.choice(["slo", "slo", "slo", "round_robin", "least_loaded", "length_threshold", "largest"]),
        objective=rng.choice(["quality", "quality", "cost"]),
        on_violation=rng.choice(["degrade", "degrade", "reject"]),
        shed_ttft_ratio=rng.choice([None, 1.5, 3.0]),
        slo_headroom=rng.choice([0.0, 0.1]),
        pace_floor=rng.random() < 0.8,
        error_margin_scale=rng.choice([0.0, 1.5]),
        quality_tolerance=rng.choice([0.0, 0.05, 0.2]),
        reserve_slack=rng.choice([0.0, 0.2, 0.5]),
        reservation_window=rng.choice([5, 200]),
        queue_bound_per_replica=rng.choice([0, 2, 32]),
        sheddable_queue_bound_per_replica=0,
        wait_for_starting_replicas=rng.random() < 0.7,
    )


def decisions(seed: int) -> Iterator[tuple[RequestFeatures, list[VariantView], RouterConfig]]:
    """One case: a fleet of 1-16 variants and a config, six snapshots of 60 requests each."""
    rng = random.Random(seed)
    count = rng.choice([1, 2, 3, 8, 16])
    models = [model(rng) for _ in range(count)]
    qualities = [rng.choice([0.5, 0.6, 0.7, 0.9, 1.0]) for _ in range(count)]
    names = [f"v{i}" for i in range(count)]
    cfg = config(rng)
    for _snapshot in range(6):
        for m in models:
            teach(m, rng, rng.choice([0, 5, 40]))
        views = [view(rng, i, m, q) for i, (m, q) in enumerate(zip(models, qualities, strict=True))]
        for _ in range(60):
            req = request(rng, names)
            # Now and then a stale variant drops out of the views (the ingress's stale-stats filter).
            subset = views if rng.random() < 0.9 else rng.sample(views, rng.randint(0, count))
            yield req, subset, cfg


SEEDS = range(40)
