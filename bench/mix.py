"""Moved to :mod:`traffic.mix`: the simulator uses it too, and sim/ imports nothing of bench/."""

from traffic.mix import (
    MixConfig,
    RequestClass,
    longest_length,
    mean_length,
    mixed_requests,
    routing_mix,
    slo_of,
    slo_window_s,
)

__all__ = [
    "MixConfig",
    "RequestClass",
    "longest_length",
    "mean_length",
    "mixed_requests",
    "routing_mix",
    "slo_of",
    "slo_window_s",
]
