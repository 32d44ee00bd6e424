"""Mooncake traces: rows become 512-token block segments, replayed by the bench and the simulator alike.

``data/mooncake_rows.jsonl`` is 8 rows copied from Mooncake's FAST'25 ``synthetic_trace.jsonl`` (kvcache-ai/Mooncake,
Apache-2.0): rows that share their first blocks, and two one-block rows.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from router import RouterConfig
from sim.workload import mooncake_sim_requests
from traffic.ideal_cache import ideal_prefix_hits
from traffic.mooncake import BLOCK_TOKENS, MooncakeTrace, load_mooncake, row_segments
from traffic.segments import segment_block_hashes, segment_id, segment_token_ids
from traffic.workload import WorkloadConfig, mooncake_requests

FIXTURE = Path(__file__).parent / "data" / "mooncake_rows.jsonl"
ROOT = Path(__file__).resolve().parents[2]
REAL = next(
    (
        p
        for p in (
            ROOT / "shared" / "traces" / "mooncake-fast25" / "synthetic_trace.jsonl",
            ROOT.parent / "shared" / "traces" / "mooncake-fast25" / "synthetic_trace.jsonl",
        )
        if p.exists()
    ),
    None,
)


def _raw(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_rows_are_blocks_of_512_the_last_cut_to_the_input_length():
    rows = load_mooncake(FIXTURE)
    raw = _raw(FIXTURE)
    assert len(rows) == 8
    assert [r.timestamp for r in rows] == [x["timestamp"] / 1e3 for x in raw]
    for row, x in zip(rows, raw, strict=True):
        assert (row.input_tokens, row.output_tokens) == (x["input_length"], x["output_length"])
        assert [seg for seg, _ in row.segments] == [segment_id("mooncake", FIXTURE.name, h) for h in x["hash_ids"]]
        assert all(n == BLOCK_TOKENS for _, n in row.segments[:-1])
        assert sum(n for _, n in row.segments) == row.input_tokens


def test_shared_ids_are_shared_blocks():
    rows = load_mooncake(FIXTURE)
    # Rows 0 and 4 have the same six ids and length: the same prompt. Rows 0 and 2 share their first five blocks.
    assert rows[4].segments == rows[0].segments
    a, b = (segment_block_hashes(rows[i].segments, 64) for i in (0, 2))
    assert a[: 5 * 8] == b[: 5 * 8] and a[5 * 8] != b[5 * 8]
    # The one-block rows of 108 tokens have no whole 512 block, but share 64-token blocks.
    assert segment_block_hashes(rows[6].segments, 512) == []
    assert segment_block_hashes(rows[6].segments, 64) == segment_block_hashes(rows[7].segments, 64) != []


def test_lengths_past_or_short_of_the_ids():
    longer = row_segments([1, 2], 1100, "t", row=5)
    assert [n for _, n in longer] == [512, 512, 76] and longer[-1][0] == segment_id("mooncake_tail", "t", 5)
    assert [n for _, n in row_segments([1, 2, 3], 600, "t", row=5)] == [512, 88]
    assert row_segments([1], 10, "a", row=1) != row_segments([1], 10, "b", row=1)  # traces keep their ids apart


def test_speedup_and_limits():
    trace = MooncakeTrace(path=FIXTURE, speedup=2.0)
    assert len(trace.rows()) == 8
    assert len(trace.model_copy(update={"max_rows": 3}).rows()) == 3
    # The fixture's rows span 3.437 s to 86.164 s; at 2x, 10 replayed seconds hold the first 20 recorded ones.
    assert len(trace.model_copy(update={"duration_s": 10.0}).rows()) == 5
    specs = list(mooncake_requests(trace, WorkloadConfig(slo_ttft_ms=2000)))
    assert [s.send_at for s in specs][:2] == [0.0, pytest.approx((16.669 - 3.437) / 2)]
    assert all(s.slo.ttft_ms == 2000 and s.prompt_tokens == len(s.prompt) for s in specs)
    assert specs[4].prompt == specs[0].prompt


def test_the_bench_and_the_simulator_replay_the_same_requests():
    trace = MooncakeTrace(path=FIXTURE, speedup=4.0)
    workload = WorkloadConfig(slo_ttft_ms=2000, token_id_range=(1000, 30000))
    bench = list(mooncake_requests(trace, workload))
    sim = list(mooncake_sim_requests(trace, workload, RouterConfig()))
    assert [(b.send_at, b.prompt_tokens, b.max_tokens, b.segments) for b in bench] == [
        (r.arrival_s, r.prompt_tokens, r.max_tokens, r.segments) for r in sim
    ]
    assert all(b.prompt == segment_token_ids(b.segments, (1000, 30000)) for b in bench)
    assert all(isinstance(b.prompt, list) and min(b.prompt) >= 1000 and max(b.prompt) < 30000 for b in bench)


def test_text_prompts_are_refused():
    with pytest.raises(ValueError, match="token_ids"):
        list(mooncake_requests(MooncakeTrace(path=FIXTURE), WorkloadConfig(prompt_mode="text")))


@pytest.mark.skipif(REAL is None, reason="the Mooncake trace is not on this machine (../shared/traces)")
def test_the_published_trace_shares_two_thirds_of_its_blocks():
    assert REAL is not None
    raw = _raw(REAL)
    rows = MooncakeTrace(path=REAL).rows()
    assert len(rows) == len(raw) == 3993
    # Every row's ids cover its length, the last block partial (1 to 512 tokens).
    assert all(512 * (len(x["hash_ids"]) - 1) < x["input_length"] <= 512 * len(x["hash_ids"]) for x in raw)
    assert sum(r.input_tokens for r in rows) / len(rows) == pytest.approx(15325.5, abs=0.1)
    # Our whole 512-token blocks hit exactly where the trace's own ids do (less the partial last blocks).
    ours = ideal_prefix_hits(segment_block_hashes(r.segments, BLOCK_TOKENS) for r in rows)
    whole = [x["hash_ids"][: x["input_length"] // 512] for x in raw]
    assert ours.per_request == ideal_prefix_hits(whole).per_request
    assert 0.64 < ours.hit_rate < 0.68
    # Smaller engine blocks see the same sharing, to within the partial blocks at the ends of shared prefixes.
    assert ideal_prefix_hits(segment_block_hashes(r.segments, 64) for r in rows).hit_rate == pytest.approx(
        ours.hit_rate, abs=0.01
    )
