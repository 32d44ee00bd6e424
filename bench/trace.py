"""Moved to :mod:`traffic.trace`: the simulator uses it too, and sim/ imports nothing of bench/."""

from traffic.trace import (
    TraceRow,
    load_trace,
)

__all__ = [
    "TraceRow",
    "load_trace",
]
