"""Moved to :mod:`traffic.records`: the simulator uses it too, and sim/ imports nothing of bench/."""

from traffic.records import (
    RequestRecord,
    read_jsonl,
    slo_met,
    time_per_output_token,
    write_jsonl,
)

__all__ = [
    "RequestRecord",
    "read_jsonl",
    "slo_met",
    "time_per_output_token",
    "write_jsonl",
]
