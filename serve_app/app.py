"""The application builder named by ``serve_config.yaml`` (``import_path: serve_app.app:build_app``)."""

from __future__ import annotations

from ray import serve
from ray.serve import Application

from serve_app.config import load_app_config
from serve_app.engine_deployment import EngineDeployment
from serve_app.ingress import Ingress
from serve_app.stats_board import StatsBoard


def variant_deployment_name(variant: str) -> str:
    return f"variant-{variant}"


def build_app(args: dict) -> Application:
    """Validates ``args`` (deploy-time errors name the field), then wires ingress, variants and stats board."""
    config = load_app_config(args)
    board = StatsBoard.bind()
    variants = {}
    for variant in config.variants:
        options = variant.deployment_options()
        options["name"] = variant_deployment_name(variant.name)
        variants[variant.name] = (
            serve.deployment(EngineDeployment).options(**options).bind(variant.model_dump(mode="json"), board)
        )
    ingress = config.ingress
    return Ingress.options(
        num_replicas=ingress.num_replicas,
        max_ongoing_requests=ingress.max_ongoing_requests,
        ray_actor_options={"num_cpus": ingress.num_cpus},
    ).bind(config.model_dump(mode="json"), variants, board)
