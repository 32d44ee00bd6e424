"""The markdown report of a run: the command, the machine, the date, the summary and the plots.

Numbers quoted in the README come from such a report (kept under ``results/``), so it
carries everything needed to reproduce and judge them.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

from traffic.summary import LatencyStats, Summary


def machine_info() -> dict[str, str]:
    return {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "processor": platform.processor() or platform.machine(),
        "cpus": str(os.cpu_count()),
    }


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _latency_rows(summary: Summary) -> list[str]:
    rows = ["| metric | count | mean | p50 | p90 | p99 | max |", "|---|---:|---:|---:|---:|---:|---:|"]
    named: list[tuple[str, LatencyStats]] = [
        ("TTFT (ms)", summary.ttft_ms),
        ("ITL, per chunk (ms)", summary.itl_ms),
        ("TPOT (ms)", summary.tpot_ms),
        ("end-to-end (ms)", summary.e2e_ms),
    ]
    for name, s in named:
        cells = [str(s.count), *(_num(v) for v in (s.mean, s.p50, s.p90, s.p99, s.max))]
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    return rows


def render_report(
    summary: Summary,
    *,
    command: str,
    machine: Mapping[str, str],
    date: datetime,
    plots: Mapping[str, str],
    title: str = "Load run",
) -> str:
    """The report's markdown; ``plots`` maps titles to paths relative to the report."""
    s = summary
    lines = [
        f"# {title}",
        "",
        f"* Command: `{command}`",
        f"* Date: {date.isoformat(timespec='seconds')}",
        "* Machine: " + ", ".join(f"{k} {v}" for k, v in machine.items()),
        "",
        "## Summary",
        "",
        "| | |",
        "|---|---:|",
        f"| requests (succeeded / failed) | {s.requests} ({s.succeeded} / {s.failed}) |",
        f"| duration (s) | {_num(s.duration_s, 2)} |",
        f"| offered rate (req/s) | {_num(s.offered_rate, 2)} |",
        f"| request rate (req/s) | {_num(s.request_rate, 2)} |",
        f"| output tokens/s | {_num(s.output_tokens_per_s)} |",
        f"| SLO attainment | {s.slo_attainment:.1%} ({s.slo_met}/{s.requests}) |",
        f"| goodput (req/s within SLO) | {_num(s.goodput, 2)} |",
        "",
        *_latency_rows(s),
        "",
    ]
    if s.errors_by_status:
        lines += ["## Errors", "", "| status | count |", "|---|---:|"]
        lines += [f"| {status} | {n} |" for status, n in s.errors_by_status.items()]
        lines += ["", "| type | count |", "|---|---:|"]
        lines += [f"| {kind} | {n} |" for kind, n in s.errors_by_type.items()]
        lines.append("")
    for heading, groups in (("By SLO tier", s.by_tier), ("By variant", s.by_variant)):
        if groups:
            lines += [
                f"## {heading}",
                "",
                "| name | requests | succeeded | SLO met | attainment |",
                "|---|---:|---:|---:|---:|",
            ]
            lines += [
                f"| {name} | {g.requests} | {g.succeeded} | {g.slo_met} | {g.slo_attainment:.1%} |"
                for name, g in groups.items()
            ]
            lines.append("")
    if plots:
        lines += ["## Plots", ""]
        for name, rel in plots.items():
            lines += [f"### {name}", "", f"![{name}]({rel})", ""]
    return "\n".join(lines)


def write_report(
    out_dir: str | Path,
    summary: Summary,
    *,
    command: str,
    plots: Mapping[str, Path] | None = None,
    title: str = "Load run",
) -> Path:
    """Write ``report.md`` into ``out_dir``, linking the plots relative to it; its path."""
    out = Path(out_dir)
    text = render_report(
        summary,
        command=command,
        machine=machine_info(),
        date=datetime.now(UTC),
        plots={name: os.path.relpath(path, out) for name, path in (plots or {}).items()},
        title=title,
    )
    path = out / "report.md"
    path.write_text(text)
    return path
