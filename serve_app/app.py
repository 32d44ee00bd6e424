"""The application builder named by ``serve_config.yaml`` (``import_path: serve_app.app:build_app``)."""

from __future__ import annotations

from typing import Any

from ray import serve
from ray.serve import Application

from serve_app.config import load_app_config
from serve_app.engine_deployment import EngineDeployment
from serve_app.ingress import Ingress
from serve_app.limiter import KeyLimiter
from serve_app.stats_board import StatsBoard

# serve.deployment's decorators add .bind/.options at runtime; typed as Any so mypy follows along.
_Ingress: Any = Ingress
_StatsBoard: Any = StatsBoard
_KeyLimiter: Any = KeyLimiter
_EngineDeployment: Any = serve.deployment(EngineDeployment)


def build_app(args: dict) -> Application:
    """Validates ``args`` (deploy-time errors name the field), then wires ingress, variants, stats board and, with
    API keys, the key limiter that every ingress replica leases its keys' budgets from (limiter.py)."""
    config = load_app_config(args)
    board = _StatsBoard.bind()
    variants = {
        variant.name: _EngineDeployment.options(**variant.deployment_options()).bind(
            variant.model_dump(mode="json"), board
        )
        for variant in config.variants
    }
    ingress = _Ingress.options(**config.ingress.deployment_options())
    # The raw args, not a dump: a dump masks the API keys (SecretStr), and the ingress re-validates anyway.
    limiter = _KeyLimiter.bind() if config.auth.enabled else None
    return ingress.bind(args, variants, board, limiter)
