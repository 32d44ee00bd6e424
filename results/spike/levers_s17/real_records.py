"""The real step runs' records (session 16's gate A/B, ``/tmp/gate-ab/RUN/step/engine_load/records.jsonl``, not
committed): ``python results/spike/levers_s17/real_records.py [RUN ...]``. Per run: the step's first 11 s (15-26 s)
by outcome and route reason, the misses by half-second, and the 70B's requests in flight (its 8 slots)."""

from __future__ import annotations

import collections
import json
import sys


def main(runs: list[str]) -> None:
    for run in runs or ["after-1", "after-2", "before-1", "before-2"]:
        with open(f"/tmp/gate-ab/{run}/step/engine_load/records.jsonl") as f:
            recs = [json.loads(line) for line in f]
        first = [r for r in recs if 15 <= r["arrival_s"] < 26]
        during = [r for r in recs if 15 <= r["arrival_s"] < 75]
        kinds = collections.Counter(
            ("rejected" if r["status"] != 200 else f"{r['route_reason']} on {r['variant']}", r["slo_met"])
            for r in first
        )
        print(
            f"## {run}\n\nduring the step: {len(during)} requests, {sum(not r['slo_met'] for r in during)} missed, "
            f"{sum(r['status'] != 200 for r in during)} rejected; in its first 11 s: {len(first)} requests, "
            f"{sum(r['slo_met'] for r in first)} met\n"
        )
        for (kind, met), n in sorted(kinds.items()):
            print(f"* {kind}, {'met' if met else 'missed'}: {n}")
        misses = [r for r in during if not r["slo_met"]]
        print(f"\nmisses after 26 s: {sum(r['arrival_s'] >= 26 for r in misses)}")
        ok = [r for r in recs if r["status"] == 200]
        print("\n| t (s) | arrivals in 0.5 s | rejected | late | 70B in flight | 8B in flight |")
        print("|---:|---:|---:|---:|---:|---:|")
        for i in range(30, 52):
            t = i / 2

            def flying(name: str, t: float = t, ok: list = ok) -> int:
                return sum(1 for r in ok if r["variant"] == name and r["start_s"] <= t < r["start_s"] + r["e2e_s"])

            arr = [r for r in recs if t <= r["arrival_s"] < t + 0.5]
            print(
                f"| {t} | {len(arr)} | {sum(r['status'] != 200 for r in arr)} | "
                f"{sum(r['status'] == 200 and not r['slo_met'] for r in arr)} | {flying('llama-70b-fp8')} | "
                f"{flying('llama-8b-int4')} |"
            )
        print()


if __name__ == "__main__":
    main(sys.argv[1:])
