"""Moved to :mod:`traffic.workload`: the simulator uses it too, and sim/ imports nothing of bench/."""

from traffic.workload import (
    HEADER_TIER,
    HEADER_TPOT,
    HEADER_TTFT,
    FixedLength,
    LengthDist,
    NormalLength,
    RequestSpec,
    Slo,
    SloTier,
    UniformLength,
    WorkloadConfig,
    build_requests,
    make_prompt,
    parse_length,
    parse_tier,
    trace_requests,
)

__all__ = [
    "HEADER_TIER",
    "HEADER_TPOT",
    "HEADER_TTFT",
    "FixedLength",
    "LengthDist",
    "NormalLength",
    "RequestSpec",
    "Slo",
    "SloTier",
    "UniformLength",
    "WorkloadConfig",
    "build_requests",
    "make_prompt",
    "parse_length",
    "parse_tier",
    "trace_requests",
]
