"""The bar command's A/B runs as one markdown table row each: `python results/streaming/ab_table.py DIR` reads
DIR/{before,after}-N.json (results/streaming/ab_bar.sh's) in the order they ran."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROLES = ("Ingress", "variant-engine", "load_generator")


def row(path: Path) -> str:
    data = json.loads(path.read_text())
    direct, stack = data["paths"]["direct"]["levels"], data["paths"]["stack"]["levels"]
    s64, d64 = stack["64"], direct["64"]
    tokens = s64["output_tokens"]
    cpu = s64["cpu_s"]
    serving = sum(v for k, v in cpu.items() if k != "load_generator") / tokens * 1e3
    ttft = [stack[c]["ttft_p50_ms"] - direct[c]["ttft_p50_ms"] for c in ("1", "64")]
    roles = " | ".join(f"{cpu.get(role, 0.0) / tokens * 1e3:.4f}" for role in ROLES)
    return (
        f"| {path.stem} | {s64['tokens_per_s']:,.0f} ({s64['tokens_per_s'] / d64['tokens_per_s']:.2f}) "
        f"| +{ttft[0]:.1f} / +{ttft[1]:.1f} ms | {s64['message_gap_p99_ms']:.1f} | {serving:.3f} | {roles} "
        f"| {data['host_python_ms'][0]:.2f} |"
    )


def main(folder: str) -> None:
    runs = sorted(Path(folder).glob("*-[0-9].json"), key=lambda p: (p.stem.split("-")[1], p.stem[0] != "b"))
    print(
        "| run | tokens/s at 64 (of the engine) | TTFT overhead at 1 / 64 | gap p99 at 64 | serving CPU ms/token "
        "| Ingress | engine replica | load generator | host probe ms |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for path in runs:
        print(row(path))


if __name__ == "__main__":
    main(sys.argv[1])
