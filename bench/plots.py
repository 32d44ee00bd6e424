"""Moved to :mod:`traffic.plots`: the simulator uses it too, and sim/ imports nothing of bench/."""

from traffic.plots import (
    latency_over_time,
    load_over_time,
    offered_load,
    spike_plot,
    ttft_cdf,
    write_plots,
)

__all__ = [
    "latency_over_time",
    "load_over_time",
    "offered_load",
    "spike_plot",
    "ttft_cdf",
    "write_plots",
]
