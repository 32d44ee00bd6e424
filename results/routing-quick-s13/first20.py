"""First 20% of each point's duration (start_s < 2 s of 10, the report's STEADY_FROM) against the rest."""
import json, pathlib, sys
for run in sys.argv[1:]:
    root = pathlib.Path(run)
    for f in sorted(root.glob("*/rate-*/records.jsonl")):
        recs = [json.loads(l) for l in f.open()]
        head = [r for r in recs if r["start_s"] < 2.0]; rest = [r for r in recs if r["start_s"] >= 2.0]
        met = lambda rs: 100.0 * sum(bool(r["slo_met"]) for r in rs) / len(rs) if rs else float("nan")
        print(f"{root.name} {f.parent.parent.name:16} {f.parent.name:10} n={len(recs):3} all {met(recs):5.1f} first20 {met(head):5.1f} (n={len(head)}) rest {met(rest):5.1f}")
