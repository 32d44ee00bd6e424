"""The app ``bench spike`` deploys for a spike fleet (``sim.spike_fleet``: the fleet, the shapes, the traffic,
which the simulator runs too): every variant under one of the three modes.
"""

from __future__ import annotations

from typing import Any

from sim.seed import router_seed
from sim.spike_fleet import (
    DURATIONS_S,
    FLEET,
    MODEL,
    MODES,
    PEAK_RATE,
    SHAPES,
    FleetVariant,
    Mode,
    SpikeFleet,
    fleet_for,
    workload,
)

__all__ = [
    "DURATIONS_S",
    "FLEET",
    "MODEL",
    "MODES",
    "PEAK_RATE",
    "SHAPES",
    "FleetVariant",
    "Mode",
    "SpikeFleet",
    "app_args",
    "fleet_for",
    "variant_args",
    "workload",
]


def variant_args(fleet: SpikeFleet, variant: FleetVariant, mode: Mode) -> dict[str, Any]:
    """One variant of the app (VariantConfig's fields) under ``mode``."""
    args: dict[str, Any] = {
        "name": variant.name,
        "engine": {
            "backend": "emulated",
            "preset": variant.preset,
            "profile": {"max_running_requests": variant.max_running_requests},
            "tokenizer": "builtin:tiny",
            "startup_time_scale": fleet.startup_time_scale,
            "coalesce": {"interval_ms": fleet.stream_interval_ms},
        },
        "resources": {"num_cpus": fleet.replica_num_cpus},
        "max_ongoing_requests": variant.max_ongoing_requests,
        "quality": variant.quality,
        "cost_per_1k_tokens": variant.cost_per_1k_tokens,
        # The router starts from the engine's own speed, as the simulator's router does (sim.seed).
        "latency_profile": router_seed(variant.profile(fleet.startup_time_scale), fleet.output_tokens).model_dump(),
    }
    if mode == "fixed":
        args["num_replicas"] = variant.max_replicas
    else:
        args["autoscaling"] = fleet.autoscaling(variant, mode)
    return args


def app_args(fleet: SpikeFleet, mode: Mode) -> dict[str, Any]:
    """The served app (AppConfig's fields): every variant of the fleet under ``mode``."""
    return {
        "model_name": MODEL,
        "tokenizer": "builtin:tiny",
        "default_variant": fleet.variants[0].name,
        "variants": [variant_args(fleet, v, mode) for v in fleet.variants],
        "router": fleet.router(),
        "ingress": {"num_replicas": 1, "num_cpus": 0.25, "max_ongoing_requests": 4096},
    }
