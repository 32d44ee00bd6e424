"""Moved to :mod:`traffic.summary`: the simulator uses it too, and sim/ imports nothing of bench/."""

from traffic.summary import (
    NO_STATUS,
    GroupStats,
    LatencyStats,
    Summary,
    latency_stats,
    summarize,
)

__all__ = [
    "NO_STATUS",
    "GroupStats",
    "LatencyStats",
    "Summary",
    "latency_stats",
    "summarize",
]
