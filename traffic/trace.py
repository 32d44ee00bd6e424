"""Trace files: recorded traffic to replay, one request per row.

Two formats, chosen by the file's suffix:

* ``.jsonl``: one JSON object a line, ``{"timestamp": 0.25, "input_tokens": 512, "output_tokens":
  128, "tier": "interactive"}`` (``tier`` optional).
* ``.csv``: a header row naming the same columns, e.g. ``timestamp,input_tokens,output_tokens,tier``.

``timestamp`` is in seconds on any origin (epoch seconds work): replay shifts the first to 0.
Rows are replayed in timestamp order.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

from traffic.segments import Segments


@dataclass(frozen=True, slots=True)
class TraceRow:
    timestamp: float
    input_tokens: int
    output_tokens: int
    tier: str | None = None
    # The prompt's content when the trace says which blocks requests share (traffic.mooncake); () otherwise.
    segments: Segments = ()


def _row(fields: dict[str, object], where: str) -> TraceRow:
    try:
        tier = fields.get("tier")
        row = TraceRow(
            timestamp=float(fields["timestamp"]),  # type: ignore[arg-type]
            input_tokens=int(fields["input_tokens"]),  # type: ignore[call-overload]
            output_tokens=int(fields["output_tokens"]),  # type: ignore[call-overload]
            tier=str(tier) if tier not in (None, "") else None,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{where}: bad trace row {fields!r} ({exc})") from exc
    if row.input_tokens < 1 or row.output_tokens < 1:
        raise ValueError(f"{where}: token counts must be >= 1")
    return row


def load_trace(path: str | Path) -> list[TraceRow]:
    """Read a ``.jsonl`` or ``.csv`` trace, sorted by timestamp (stable for equal timestamps)."""
    path = Path(path)
    rows: list[TraceRow] = []
    if path.suffix == ".csv":
        with path.open(newline="") as f:
            for n, fields in enumerate(csv.DictReader(f), start=2):
                rows.append(_row(dict(fields), f"{path}:{n}"))
    elif path.suffix in (".jsonl", ".ndjson"):
        with path.open() as f:
            for n, line in enumerate(f, start=1):
                if line.strip():
                    rows.append(_row(json.loads(line), f"{path}:{n}"))
    else:
        raise ValueError(f"{path}: a trace is a .jsonl or .csv file")
    if not rows:
        raise ValueError(f"{path}: the trace is empty")
    return sorted(rows, key=lambda r: r.timestamp)
