"""Session 23: where a burst's first tokens wait, from bench overhead's records (--out DIR): the first `concurrency`
requests against the rest, TTFT split by the stack's Server-Timing into the ingress's handler, the engine span and the
rest outside the ingress (HAProxy, the ingress's loop before the handler, the way back).
    python results/streaming/session23/burst/split.py results/streaming/session23/burst 128"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path


def q(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p))]


def main(folder: str, concurrency: int) -> None:
    for path in ("direct", "stack"):
        with gzip.open(Path(folder) / f"{path}-c{concurrency}.jsonl.gz", "rt") as f:
            rows = sorted((json.loads(line) for line in f), key=lambda r: r["start_s"])
        rows = [r for r in rows if r["status"] in (200, None) and r["ttft_s"] is not None]  # direct: no status
        for name, part in ((f"first {concurrency}", rows[:concurrency]), ("rest", rows[concurrency:])):
            ttft = [r["ttft_s"] * 1e3 for r in part]
            line = f"{path:6s} {name:10s} TTFT p50/p90 {q(ttft, 0.5):5.0f} / {q(ttft, 0.9):5.0f} ms"
            if path == "stack":
                handler = [r["server_ingress_ms"] for r in part]
                engine = [r["server_engine_ms"] for r in part]
                outside = [t - h - e for t, h, e in zip(ttft, handler, engine, strict=True)]
                line += "".join(
                    f"  {label} {q(v, 0.5):5.1f} / {q(v, 0.9):5.1f}"
                    for label, v in (("handler", handler), ("engine", engine), ("outside", outside))
                )
            print(line)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
