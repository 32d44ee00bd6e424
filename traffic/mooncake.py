"""Mooncake traces (FAST'25): real request streams whose prompts share prefixes, as blocks of 512 tokens.

One JSON object a line: ``timestamp`` (ms from the first request), ``input_length`` and ``output_length`` (tokens),
``hash_ids`` (the prompt's 512-token blocks, remapped: equal ids at the same position are a shared prefix). There is
no text; a row becomes segments ``(block id, 512)``, the last one cut to end at ``input_length`` (in the published
traces ``512 * (len(hash_ids) - 1) < input_length <= 512 * len(hash_ids)``: the last block is the partial tail).
A row that says more tokens than its ids cover gets a tail segment of its own; one with ids past its length loses
them. Equal ids then give equal tokens on the bench and equal block hashes in the simulator (``traffic.segments``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, Field

from traffic.segments import Segment, Segments, segment_id
from traffic.trace import TraceRow

BLOCK_TOKENS = 512  # tokens of one hash_ids block in the published traces


def row_segments(hash_ids: Sequence[int], input_length: int, namespace: str, row: int) -> Segments:
    """A row's prompt as segments: its blocks, cut to ``input_length``, and a tail of its own if they fall short."""
    segments: list[Segment] = []
    left = input_length
    for block in hash_ids:
        if left <= 0:
            break
        segments.append((segment_id("mooncake", namespace, block), min(BLOCK_TOKENS, left)))
        left -= BLOCK_TOKENS
    if left > 0:
        segments.append((segment_id("mooncake_tail", namespace, row), left))
    return tuple(segments)


def load_mooncake(path: str | Path, namespace: str | None = None) -> list[TraceRow]:
    """Every row of a Mooncake trace, in timestamp order (stable), timestamps in seconds.

    ``namespace`` keeps this trace's block ids apart from other traces' (each trace remaps its ids from 0);
    None: the file's name.
    """
    path = Path(path)
    namespace = path.name if namespace is None else namespace
    rows: list[TraceRow] = []
    with path.open() as f:
        for n, line in enumerate(f, start=1):
            if not line.strip():
                continue
            fields = json.loads(line)
            try:
                input_length = int(fields["input_length"])
                row = TraceRow(
                    timestamp=float(fields["timestamp"]) / 1e3,
                    input_tokens=input_length,
                    output_tokens=int(fields["output_length"]),
                    segments=row_segments([int(h) for h in fields["hash_ids"]], input_length, namespace, n),
                )
            except (KeyError, TypeError, ValueError) as exc:
                raise ValueError(f"{path}:{n}: bad Mooncake row {fields!r} ({exc})") from exc
            if row.input_tokens < 1 or row.output_tokens < 1:
                raise ValueError(f"{path}:{n}: token counts must be >= 1")
            rows.append(row)
    if not rows:
        raise ValueError(f"{path}: the trace is empty")
    return sorted(rows, key=lambda r: r.timestamp)


class MooncakeTrace(BaseModel):
    """A Mooncake trace to replay, at a chosen speed, in whole or its beginning."""

    path: Path = Field(
        description="The trace file (.jsonl), e.g. ../shared/traces/mooncake-fast25/synthetic_trace.jsonl."
    )
    speedup: float = Field(
        1.0, gt=0, description="Replay this many times faster than recorded: the request rate scales by it."
    )
    max_rows: int | None = Field(None, ge=1, description="Replay only the first rows (in time order).")
    duration_s: float | None = Field(
        None, gt=0, description="Replay only requests sent within this many seconds of replay (after speedup)."
    )
    namespace: str | None = Field(
        None, description="Keeps this trace's block ids apart from other traces'; None: the file's name."
    )

    def rows(self) -> list[TraceRow]:
        rows = load_mooncake(self.path, self.namespace)
        if self.max_rows is not None:
            rows = rows[: self.max_rows]
        if self.duration_s is not None:
            first = rows[0].timestamp
            rows = [r for r in rows if (r.timestamp - first) / self.speedup < self.duration_s]
        return rows
