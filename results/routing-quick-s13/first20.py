"""First 20% of each point's duration (start_s < 2 s of 10, the report's STEADY_FROM) against the rest."""

import json
import pathlib
import sys


def attainment(records: list[dict]) -> float:
    return 100.0 * sum(bool(r["slo_met"]) for r in records) / len(records) if records else float("nan")


for run in sys.argv[1:]:
    root = pathlib.Path(run)
    for path in sorted(root.glob("*/rate-*/records.jsonl")):
        records = [json.loads(line) for line in path.open()]
        head = [r for r in records if r["start_s"] < 2.0]
        rest = [r for r in records if r["start_s"] >= 2.0]
        print(
            f"{root.name} {path.parent.parent.name:16} {path.parent.name:10} n={len(records):3} "
            f"all {attainment(records):5.1f} first20 {attainment(head):5.1f} (n={len(head)}) "
            f"rest {attainment(rest):5.1f}"
        )
