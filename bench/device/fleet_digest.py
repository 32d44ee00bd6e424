"""Where each policy's TTFT went in a fleet routing run (``bench routing --scenario``'s ``--out`` folder).

Per policy and tier, p50 / p90 in ms: the client's TTFT; the ingress's own view from dispatch to the first token
(``server-timing`` 'engine'); what lay outside the ingress (the client's TTFT less the ingress's); and the
simulator's TTFT for the same requests. Run on the machine that holds the records:
``python bench/device/fleet_digest.py OUT_DIR``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from traffic.records import read_jsonl


def _q(values: list[float], p: float) -> int | None:
    return round(sorted(values)[int(len(values) * p)]) if values else None


def _pair(values: list[float]) -> str:
    return f"{_q(values, 0.5)} {_q(values, 0.9)}"


def digest(out: Path) -> list[str]:
    lines = []
    for path in sorted(out.glob("*/rate-*/records.jsonl")):
        records = [r for r in read_jsonl(path) if r.ttft_s and r.server_engine_ms is not None]
        sim = {r.index: r for r in read_jsonl(path.with_name("sim-records.jsonl"))}
        for tier in ("interactive", "standard"):
            group = [r for r in records if r.slo_tier == tier]
            if not group:
                continue
            client = [1e3 * (r.ttft_s or 0.0) for r in group]
            engine = [r.server_engine_ms or 0.0 for r in group]
            outside = [c - e - (r.server_ingress_ms or 0.0) for c, e, r in zip(client, engine, group, strict=True)]
            simulated = [1e3 * s.ttft_s for r in group if (s := sim.get(r.index)) is not None and s.ttft_s]
            lines.append(
                f"{path.parent.parent.name} {tier} {len(group)} client p50/p90 {_pair(client)} engine {_pair(engine)} "
                f"outside {_pair(outside)} sim {_pair(simulated)}"
            )
    return lines


if __name__ == "__main__":
    print("\n".join(digest(Path(sys.argv[1]))))
