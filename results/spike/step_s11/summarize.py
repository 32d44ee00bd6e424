"""Session 11's repeated step runs, side by side: attainment, where the misses were, when the scale-up was decided
and served, and the machine's load average over each run (``loadavg.log``: /proc/loadavg every 10 s).

    python results/spike/step_s11/summarize.py results/spike/step_s11/run*
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

STEP_S, END_S = 15.0, 75.0
CHEAP = "llama-8b-int4"


def summarize(folder: Path) -> str:
    mode = folder / "engine_load"
    records = [json.loads(line) for line in (mode / "records.jsonl").read_text().splitlines()]
    during = [r for r in records if STEP_S <= r["arrival_s"] < END_S]
    ok = sum(1 for r in during if r["status"] == 200 and r["slo_met"])
    rejected = sum(1 for r in during if r["status"] != 200)
    late = [r for r in during if r["status"] == 200 and not r["slo_met"]]
    ratios = sorted(r["ttft_s"] * 1000 / r["predicted_ttft_ms"] for r in late if r["predicted_ttft_ms"])
    starts = [json.loads(line) for line in (mode / "starts.jsonl").read_text().splitlines()]
    # The step's scale-up: the cheap variant's starts decided in its first 5 s.
    scale_up = [s for s in starts if s["variant"] == CHEAP and STEP_S <= s["decided_s"] < STEP_S + 5]
    decided = min(s["decided_s"] for s in scale_up) - STEP_S
    served = max(s["decided_s"] + s["total_s"] for s in scale_up) - STEP_S
    overhead = max(s["overhead_s"] for s in scale_up)
    log = folder / "loadavg.log"  # absent for runs recorded before session 11
    loads = [float(line.split()[1]) for line in log.read_text().splitlines()] if log.exists() else []
    load = f"{sum(loads) / len(loads):.1f} / {max(loads):.1f}" if loads else "-"
    report = json.loads((folder / "spike.json").read_text())["serve"]["engine_load"]
    ratio = report["replica_seconds"] / report["fixed_replica_seconds"]
    median = ratios[len(ratios) // 2] if ratios else float("nan")
    return (
        f"| {folder.name} | {ok / len(during):.1%} | {rejected} | {len(late)} | {median:.2f}x | {decided:.1f} s | "
        f"{served:.1f} s ({overhead:.1f} s beyond the constructor) | {ratio:.2f} | "
        f"{load} |"
    )


if __name__ == "__main__":
    print(
        "| run | attainment during | rejected | late accepted | late: TTFT / predicted (median) | scale-up decided "
        "after the step | its last replica served after the step | replica-s / fixed | load average 1 min: mean / max |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for arg in sys.argv[1:]:
        print(summarize(Path(arg)))
