"""Moved to :mod:`traffic.report`: the simulator uses it too, and sim/ imports nothing of bench/."""

from traffic.report import (
    machine_info,
    render_report,
    write_report,
)

__all__ = [
    "machine_info",
    "render_report",
    "write_report",
]
