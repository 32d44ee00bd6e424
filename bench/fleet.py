"""A simulator scenario as a real fleet: the Serve app of its pools on the emulated engine, and its traffic.

``python -m bench routing --scenario NAME`` runs the simulator's fleets (``sim.scenario.SCENARIOS``) through the
real stack: every pool becomes a variant whose replicas run the emulated engine on the pool's engine profile
(the real clock, real batching, no model work), seeded in the router exactly as the simulator seeds it
(``sim.seed.router_seed``), and every stream's requests are sent as token-id prompts of the lengths the
simulator draws for them. So the same scenario at the same rate can be run both ways, and what differs is what
the simulator leaves out: HTTP, the ingress, Serve's replica choice and queues, stats that arrive late, real
clocks.

``fleet_scale`` shrinks a fleet and its traffic together (half the replicas of every pool at half the rate), so
a fleet that needs more CPU than this machine has for the stack around it keeps each replica's load; the
simulator runs the same scaled scenario.
"""

from __future__ import annotations

import random
from typing import Any

from router.config import RouterConfig
from sim.scenario import PoolSpec, Scenario
from sim.seed import router_seed
from sim.workload import sim_requests
from traffic.segments import segment_token_ids
from traffic.workload import RequestSpec, make_prompt

TOKENIZER = "builtin:tiny"  # the emulated engines stream its ids; prompts are drawn from its plain tokens
TOKEN_ID_RANGE = (256, 500)


def variant_args(pool: PoolSpec, replica_choice: str = "least_prefill") -> dict[str, Any]:
    """One pool as a variant of the app's config: the emulated engine on the pool's profile, at its size."""
    profile = pool.engine_profile()
    return {
        "name": pool.name,
        "description": f"{pool.name} (emulated: {profile.source or 'engine profile'})",
        "engine": {
            "backend": "emulated",
            "profile": profile.model_dump(mode="json"),
            "tokenizer": TOKENIZER,
            "startup_time_scale": 0.0,  # a static fleet: every replica serves before the first point
        },
        # The emulated engine costs almost no CPU; a small logical share keeps many replicas on two cores.
        "resources": {"num_cpus": 0.05},
        "num_replicas": pool.pool_replicas,
        "replica_choice": replica_choice,
        "max_ongoing_requests": pool.max_ongoing_requests,
        "quality": pool.quality,
        "cost_per_1k_tokens": pool.cost_per_1k_tokens,
        # What the simulator seeds its router with: the figures a bench measurement of this engine would give.
        "latency_profile": router_seed(profile, pool.mean_output_tokens).model_dump(mode="json"),
    }


def app_args(scenario: Scenario, model_name: str = "fleet", ingress_replicas: int = 1) -> dict[str, Any]:
    """The ``args`` of ``serve_app.app:build_app`` that run ``scenario``'s pools with its router config."""
    longest = max(p.engine_profile().context_length for p in scenario.pools)
    return {
        "model_name": model_name,
        "default_variant": scenario.pools[0].name,
        "tokenizer": TOKENIZER,
        "variants": [variant_args(p, scenario.replica_choice) for p in scenario.pools],
        "router": scenario.router.model_dump(mode="json", exclude_defaults=True),
        "ingress": {"num_replicas": ingress_replicas, "num_cpus": 0.25, "max_ongoing_requests": 4096},
        "limits": {
            "max_prompt_tokens": longest,
            "max_tokens_limit": longest,
            "request_timeout_s": 600,
        },
    }


def scenario_requests(scenario: Scenario) -> list[RequestSpec]:
    """The requests the simulator runs for ``scenario`` (send times, lengths, SLOs), as token-id prompts."""
    router: RouterConfig = scenario.router
    prompts = random.Random(f"{scenario.seed}:fleet-prompts")
    return [
        RequestSpec(
            index=r.index,
            send_at=r.arrival_s,
            # Shared prefixes as the same token ids wherever the segments repeat (traffic.segments).
            prompt=segment_token_ids(r.segments, TOKEN_ID_RANGE)
            if r.segments
            else make_prompt(r.prompt_tokens, "token_ids", TOKEN_ID_RANGE, prompts),
            prompt_tokens=r.prompt_tokens,
            max_tokens=r.max_tokens,
            slo=r.slo,
            segments=r.segments,
            turn=r.turn,
        )
        for r in sim_requests(scenario.streams, scenario.duration_s, router)
    ]
