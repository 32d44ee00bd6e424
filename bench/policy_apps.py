"""The apps a routing bench deploys: one ingress per policy over a shared fleet of engines.

Shared by the routing sweep (``bench.routing``) and its fleet scenarios (``bench.routing_fleet``), which the
sweep's command dispatches to: here rather than in either, so neither imports the other back.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import httpx

from router.config import SETUPS


def policy_args(
    args: dict[str, Any],
    policy: str,
    profiles: dict[str, dict[str, float]] | None = None,
    router: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """``args`` with ``router.policy`` set (and other router fields merged) and variants' latency profiles."""
    out = copy.deepcopy(args)
    # A setup name (router.config.SETUPS: a policy, or slo_blind) sets the fields that make it.
    out["router"] = {**out.get("router", {}), **(router or {}), **SETUPS.get(policy, {"policy": policy})}
    for variant in out["variants"]:
        if profiles and variant["name"] in profiles:
            variant["latency_profile"] = profiles[variant["name"]]
    return out


@dataclass(frozen=True)
class EngineLimits:
    """What a variant's engines report about their size (GET /variants)."""

    context_length: int
    max_running_requests: int
    replicas: int = 1


async def engine_limits(url: str) -> dict[str, EngineLimits]:
    """Each variant's context length and batch slots as its engines report them (the smallest replica's)."""
    async with httpx.AsyncClient(timeout=30.0) as client:
        response = await client.get(f"{url}/variants")
        response.raise_for_status()
    return {
        v["name"]: EngineLimits(
            context_length=min(r["context_length"] for r in v["replica_stats"]),
            max_running_requests=min(r["max_running_requests"] for r in v["replica_stats"]),
            replicas=len(v["replica_stats"]),
        )
        for v in response.json()["variants"]
        if v["replica_stats"]
    }


def policy_ingress(args: dict[str, Any], base_app: str) -> Any:
    """An app of one ingress with ``args``' router config, routing to ``base_app``'s engines and board."""
    from ray import serve

    from serve_app.app import _Ingress
    from serve_app.config import load_app_config

    config = load_app_config(args)
    handles = {v.name: serve.get_deployment_handle(v.deployment_name, base_app) for v in config.variants}
    board = serve.get_deployment_handle("StatsBoard", base_app)
    return _Ingress.options(**config.ingress.deployment_options()).bind(config.model_dump(mode="json"), handles, board)


def app_names(policies: list[str]) -> dict[str, str]:
    """Each policy's app name, which is also its route prefix: ``routing-<policy>``."""
    return {policy: f"routing-{policy.replace('_', '-')}" for policy in policies}


def run_policy_ingresses(
    base_args: dict[str, Any],
    names: dict[str, str],
    base_app: str,
    profiles: dict[str, dict[str, float]] | None,
    router: dict[str, Any] | None,
) -> None:
    """Deploys the ingress of each policy in ``names`` (see :func:`app_names`) over ``base_app``'s engines.

    All at once: ingress replicas start in parallel (each loads the tokenizer; seconds apiece)."""
    from ray import serve

    serve.run_many(
        [
            serve.RunTarget(
                policy_ingress(policy_args(base_args, policy, profiles, router), base_app),
                name=name,
                route_prefix=f"/{name}",
            )
            for policy, name in names.items()
        ]
    )
