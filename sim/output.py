"""A simulated run written exactly as ``python -m bench load`` writes a real one (records, summary,
replicas, plots, report), so the two compare file for file."""

from __future__ import annotations

from pathlib import Path

from sim.simulator import SimResult
from traffic.output import write_outputs
from traffic.summary import Summary


def write_run(out: Path, result: SimResult, *, command: str, json_path: Path | None = None) -> Summary:
    """``records.jsonl``, ``summary.json``, ``replicas.jsonl``, the bench's PNG plots and ``report.md``."""
    # Offered load over an hour reads better in 10 s bins than in the bench's 1 s ones.
    bin_s = 10.0 if result.end_s > 600 else 1.0
    return write_outputs(out, result.records, result.replica_samples, command=command, bin_s=bin_s, json_path=json_path)
