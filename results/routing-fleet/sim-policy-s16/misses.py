"""Where the slo policy's interactive misses are on the simulator's two_variant fleet at capacity (150 s, as
``python -m sim sweep --scenario two_variant --fractions 1.0 --duration-s 150``), per seed: the misses by variant,
route reason and measure, the standard (long RAG) requests it sent to the 8B, and how the interactive requests
fared by the long prompts' prefill pending ahead of them on their replica when they were handed to it.

Run from the checkout whose router/ is to be measured (the cwd goes first on the path):

    python results/routing-fleet/sim-policy-s16/misses.py [--seeds 3] [--duration-s 150]
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from typing import cast

sys.path.insert(0, os.getcwd())

from router.config import Policy
from sim import replica as sim_replica
from sim.capacity import estimate_capacity
from sim.scenario import SCENARIOS, simulate
from sim.sweep import make_scenario, reseeded

# Per request index: the standard and the interactive prompt tokens not yet prefilled on its replica when it got
# there (prefilling or waiting), recorded by wrapping SimReplica.submit.
AHEAD: dict[int, tuple[int, int]] = {}
_submit = sim_replica.SimReplica.submit


def _recording_submit(self, request, now):
    pending = [*self.batch.prefilling, *self.batch.waiting]

    def tokens(tier: str) -> int:
        return sum(q.remaining_prefill or q.prompt_tokens for q in pending if q.slo.tier == tier)

    AHEAD[request.index] = (tokens("standard"), tokens("interactive"))
    return _submit(self, request, now)


sim_replica.SimReplica.submit = _recording_submit  # type: ignore[method-assign]


def records(seed: int, duration_s: float, policy: Policy = "slo", scenario: str = "two_variant"):
    make = SCENARIOS[scenario]
    scale = estimate_capacity(make_scenario(make, duration_s, 1.0)).rate_scale
    AHEAD.clear()
    result, _ = simulate(reseeded(make_scenario(make, duration_s, scale), seed), policy, "static")
    return result.records


def miss_kind(r) -> str:
    ttft = r.ttft_s is not None and r.slo_ttft_ms is not None and r.ttft_s * 1000 > r.slo_ttft_ms
    tpot = r.tpot_s is not None and r.slo_tpot_ms is not None and r.tpot_s * 1000 > r.slo_tpot_ms
    if not r.ok:
        return "error"
    return "+".join(k for k, missed in (("ttft", ttft), ("tpot", tpot)) if missed) or "?"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--duration-s", type=float, default=150.0)
    p.add_argument("--policy", default="slo")
    a = p.parse_args()
    for seed in range(a.seeds):
        recs = records(seed, a.duration_s, cast(Policy, a.policy))
        inter = [r for r in recs if r.slo_tier == "interactive"]
        std = [r for r in recs if r.slo_tier == "standard"]
        missed = [r for r in inter if not r.slo_met]
        met = sum(r.slo_met for r in recs) / len(recs)
        print(
            f"seed {seed}: {len(recs)} requests, met {met:.1%}; interactive {len(inter)}, missed {len(missed)}; "
            f"standard {len(std)}, missed {sum(not r.slo_met for r in std)}"
        )
        print("  interactive misses by (variant, reason, measure):")
        for k, n in Counter((r.variant, r.route_reason, miss_kind(r)) for r in missed).most_common():
            print(f"    {n:5d} {k}")
        print("  standard by (variant, reason, met):")
        for k, n in Counter((r.variant, r.route_reason, r.slo_met) for r in std).most_common():
            print(f"    {n:5d} {k}")
        served = [r for r in inter if r.ok and r.index in AHEAD]
        late = [r for r in served if r.ttft_s * 1000 > r.slo_ttft_ms]
        behind = sum(1 for r in late if AHEAD[r.index][0] > 0)
        print(
            f"  interactive TTFT misses with a long prompt's prefill pending ahead on their replica: "
            f"{behind} of {len(late)}"
        )
        print("  interactive TTFT miss rate by the standard prompt tokens pending ahead on their replica:")
        for lo, hi in ((0, 1), (1, 4000), (4000, 8000), (8000, 10**9)):
            sel = [r for r in served if lo <= AHEAD[r.index][0] < hi]
            if sel:
                rate = sum(r.ttft_s * 1000 > r.slo_ttft_ms for r in sel) / len(sel)
                print(f"    [{lo}, {hi}): {len(sel):5d} requests, {rate:.1%} over their TTFT target")


if __name__ == "__main__":
    main()
