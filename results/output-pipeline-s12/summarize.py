"""The A/B's table: one row per run of every set (tokens/s, TTFT p50, the engine's CPU per token, load average)."""

import json
import re
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).parent
by_side: dict[str, list[float]] = {"before": [], "after": []}
print("| set | run | side | tokens/s | TTFT p50 ms | CPU ms/token | load average (1 min) at start |")
print("|---|---|---|---|---|---|---|")
for run in sorted(HERE.glob("set*/*.json"), key=lambda p: (p.parent.name, int(p.stem.split("-")[0]))):
    level = json.loads(run.read_text())["paths"]["direct"]["levels"]["16"]
    cpu = level["cpu_s"]["engine_in_process"] / level["output_tokens"] * 1e3
    start = run.with_suffix(".log").read_text().splitlines()[0]
    load = re.search(r"load average: ([\d.]+)", start).group(1)
    n, side = run.stem.split("-")
    if run.parent.name in ("set1", "set2-profiled", "set3"):
        by_side[side].append(level["tokens_per_s"])
    print(f"| {run.parent.name} | {n} | {side} | {level['tokens_per_s']:.0f} | {level['ttft_p50_ms']:.1f} | {cpu:.2f} | {load} |")
for side, values in by_side.items():
    if values:
        print(f"{side}: n={len(values)} mean {statistics.mean(values):.0f} tok/s, range {min(values):.0f}-{max(values):.0f}",
              file=sys.stderr)
