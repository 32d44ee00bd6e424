"""Session 21: per run of an A/B folder, when the step's new 8B replicas served (Serve's RUNNING, s after the step) and
the requests of each second of the step that were refused (429) or late: python results/spike/starts_ab_s21/persec.py
results/spike/starts_ab_s21 (or starting_ab_s21)."""

import collections
import gzip
import json
import statistics
import sys
from pathlib import Path

STEP_S = 15.0  # the step shape's rise (sim/spike_fleet.py)
folder = Path(sys.argv[1])
for run in ("before-1", "after-1", "before-2", "after-2", "before-3", "after-3"):
    if not (folder / f"{run}-starts.jsonl").exists():
        continue
    with gzip.open(folder / "records" / f"{run}.jsonl.gz", "rt") as f:
        records = [json.loads(line) for line in f]
    with open(folder / f"{run}-starts.jsonl") as f:
        starts = [json.loads(line) for line in f]
    scale_up = [s for s in starts if STEP_S < s["decided_s"] < STEP_S + 10]
    served = statistics.median(s["decided_s"] + s["total_s"] - STEP_S for s in scale_up)
    seconds: collections.Counter = collections.Counter()
    for r in records:
        if STEP_S <= r["arrival_s"] < STEP_S + 60:
            outcome = "refused" if r["status"] == 429 else ("late" if not r["slo_met"] else "met")
            seconds[(int(r["arrival_s"] - STEP_S), outcome)] += 1
    cells = " ".join(f"{s}:{seconds[(s, 'refused')]}/{seconds[(s, 'late')]}" for s in range(2, 10))
    decided = min(s["decided_s"] for s in scale_up) - STEP_S
    print(f"{run}: scale-up decided at +{decided:.2f} s, its replicas running at +{served:.2f} s (median); "
          f"refused/late by second of the step: {cells}")
