"""A run's files, as ``python -m bench load`` writes them and the simulator too (records, summary, replicas,
plots, report), so that a real run and a simulated one compare file for file."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from traffic import plots, report
from traffic.records import RequestRecord, write_jsonl
from traffic.replicas import ReplicaSample, write_samples
from traffic.summary import Summary, summarize


def write_outputs(
    out: Path,
    records: Iterable[RequestRecord],
    samples: list[ReplicaSample],
    *,
    command: str,
    bin_s: float = 1.0,
    json_path: Path | None = None,
) -> Summary:
    out.mkdir(parents=True, exist_ok=True)
    records = sorted(records, key=lambda r: r.index)
    write_jsonl(records, out / "records.jsonl")
    if samples:
        write_samples(samples, out / "replicas.jsonl")
    summary = summarize(records)
    for path in (out / "summary.json", json_path):
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(summary.model_dump_json(indent=2) + "\n")
    figures = plots.write_plots(records, out, samples, bin_s=bin_s)
    report.write_report(out, summary, command=command, plots=figures)
    return summary
