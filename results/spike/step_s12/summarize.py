"""Session 12's step runs with the bench's defaults, side by side: attainment, where the misses were, when the
scale-up was decided and served, and the machine's load average over each trace (the bench's own
``loadavg.jsonl``: the 1-minute load average every 5 s).

    python results/spike/step_s12/summarize.py results/spike/step_s12/run*
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

STEP_S, END_S = 15.0, 75.0
CHEAP = "llama-8b-int4"


def summarize(folder: Path, mode_name: str) -> str:
    mode = folder / mode_name
    records = [json.loads(line) for line in (mode / "records.jsonl").read_text().splitlines()]
    during = [r for r in records if STEP_S <= r["arrival_s"] < END_S]
    ok = sum(1 for r in during if r["status"] == 200 and r["slo_met"])
    rejected = sum(1 for r in during if r["status"] != 200)
    late = [r for r in during if r["status"] == 200 and not r["slo_met"]]
    ratios = sorted(r["ttft_s"] * 1000 / r["predicted_ttft_ms"] for r in late if r["predicted_ttft_ms"])
    starts = [json.loads(line) for line in (mode / "starts.jsonl").read_text().splitlines()]
    # The step's scale-up: the cheap variant's starts decided in its first 5 s.
    scale_up = [s for s in starts if s["variant"] == CHEAP and STEP_S <= s["decided_s"] < STEP_S + 5]
    if scale_up:
        decided = f"{min(s['decided_s'] for s in scale_up) - STEP_S:.1f} s"
        last = max(s["decided_s"] + s["total_s"] for s in scale_up) - STEP_S
        served = f"{last:.1f} s ({max(s['overhead_s'] for s in scale_up):.1f} s beyond the constructor)"
    else:
        decided = served = "-"
    loads = [json.loads(line)["load_1m"] for line in (mode / "loadavg.jsonl").read_text().splitlines()]
    load = f"{sum(loads) / len(loads):.1f} / {max(loads):.1f}" if loads else "-"
    report = json.loads((folder / "spike.json").read_text())["serve"][mode_name]
    ratio = report["replica_seconds"] / report["fixed_replica_seconds"]
    median = f"{ratios[len(ratios) // 2]:.2f}x" if ratios else "-"
    return (
        f"| {folder.name} | {mode_name} | {ok / len(during):.1%} | {rejected} | {len(late)} | {median} | {decided} | "
        f"{served} | {ratio:.2f} | {load} |"
    )


if __name__ == "__main__":
    print(
        "| run | mode | attainment during | rejected | late accepted | late: TTFT / predicted (median) | scale-up "
        "decided after the step | its last replica served after the step | replica-s / fixed | load average 1 min "
        "during the trace: mean / max |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for arg in sys.argv[1:]:
        folder = Path(arg)
        for name in ("engine_load", "ongoing_requests"):
            if (folder / name / "records.jsonl").exists():
                print(summarize(folder, name))
