"""Where each policy's attainment went in a fleet routing run (``bench routing --scenario``'s ``--out`` folder),
the real stack against the simulator on the same requests. Run on the machine that holds the records:
``python bench/device/fleet_digest.py OUT_DIR [COMPACT.jsonl.gz]``.

Per policy (each ``POLICY/rate-R/records.jsonl`` beside its ``sim-records.jsonl``):

* **tiers**: p50 / p90 in ms of the client's TTFT; the ingress's own view from dispatch to the first token
  (``server-timing`` 'engine'); what lay outside the ingress (the client's TTFT less the ingress's); the
  simulator's TTFT for the same requests.
* **agreement**: how many requests went to the same variant as in the simulator, and attainment of those that
  did and did not, real / sim.
* **misses the simulator met**, by tier and variant, by cause: an error or timeout; TTFT already late at the
  ingress; TTFT late only at the client (the path outside the ingress); TPOT.
* **replicas** (the records name them: ``x-route-replica``): per variant, requests and prompt tokens of the
  busiest and idlest replica, and attainment per replica (worst / best).
* **behind a long prefill**: short requests (prompt < 1024) whose replica was still prefilling a long prompt
  (>= 1024, sent before it, first token after it was sent) when they were sent, split by whether that long
  prompt came through the same ingress (``x-route-ingress``: its least-prefill choice knew of it) or another one
  (it could not), with their attainment; and short requests with no long prefill ahead on their replica.
* **predictions**: measured / predicted TTFT at the ingress (real) and in the simulator, p50 / p90 per variant.
* **divergence**: for requests the two sides sent to different variants, what each expected of the variant the
  simulator chose (``x-route-candidates``: mean and conservative TTFT, conservative TPOT, prefill ahead) and how
  often it judged that variant to meet the SLO.

``COMPACT``: also write one line per request (real and simulated side by side, no token timings) there, small
enough to come back from the device.
"""

from __future__ import annotations

import gzip
import json
import sys
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

from router.explain import parse_candidates
from traffic.records import RequestRecord, read_jsonl

LONG_PROMPT = 1024


def _q(values: list[float], p: float) -> int | None:
    return round(sorted(values)[min(len(values) - 1, int(len(values) * p))]) if values else None


def _pair(values: list[float]) -> str:
    return f"{_q(values, 0.5)} {_q(values, 0.9)}"


def _pct(met: int, total: int) -> str:
    return f"{100.0 * met / total:.1f}%" if total else "-"


def _ratio_pair(values: list[float]) -> str:
    if not values:
        return "- -"
    ordered = sorted(values)
    return f"{ordered[len(ordered) // 2]:.2f} {ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]:.2f}"


def _ingress_ttft_ms(r: RequestRecord) -> float | None:
    if r.server_engine_ms is None:
        return None
    return (r.server_ingress_ms or 0.0) + r.server_engine_ms


def miss_cause(r: RequestRecord) -> str:
    """Why a missed request missed: ``error``, ``ttft_ingress`` (late at the ingress already), ``ttft_path``
    (on time at the ingress, late at the client), ``tpot``."""
    if not r.ok or r.ttft_s is None:
        return "error"
    if r.slo_ttft_ms is not None and 1e3 * r.ttft_s > r.slo_ttft_ms:
        at_ingress = _ingress_ttft_ms(r)
        if at_ingress is not None and at_ingress <= r.slo_ttft_ms:
            return "ttft_path"
        return "ttft_ingress"
    return "tpot"


def behind_long(records: Iterable[RequestRecord]) -> dict[str, tuple[int, int]]:
    """Short requests by what their replica was prefilling when they were sent: ``same_ingress`` / ``other_ingress``
    (a long prompt sent before them, its first token after they were sent, through the same or another ingress),
    ``clear`` (none): ``(met, total)`` each. Times on the client's clock: sent at ``start_s``, first token at
    ``start_s + ttft_s``. Records without a replica are left out."""
    by_replica: dict[str, list[RequestRecord]] = defaultdict(list)
    for r in records:
        if r.replica is not None:
            by_replica[r.replica].append(r)
    out = {"same_ingress": [0, 0], "other_ingress": [0, 0], "clear": [0, 0]}
    for group in by_replica.values():
        longs = [
            (r.start_s, r.start_s + r.ttft_s, r.ingress)
            for r in group
            if r.prompt_tokens >= LONG_PROMPT and r.ttft_s is not None
        ]
        for r in group:
            if r.prompt_tokens >= LONG_PROMPT:
                continue
            ahead = [ingress for sent, first, ingress in longs if sent < r.start_s < first]
            if not ahead:
                key = "clear"
            elif any(ingress == r.ingress for ingress in ahead):
                key = "same_ingress"
            else:
                key = "other_ingress"
            out[key][0] += int(r.slo_met)
            out[key][1] += 1
    return {k: (v[0], v[1]) for k, v in out.items()}


def _tiers(policy: str, records: list[RequestRecord], sim: dict[int, RequestRecord]) -> list[str]:
    lines = []
    for tier in sorted({r.slo_tier for r in records if r.slo_tier}):
        group = [r for r in records if r.slo_tier == tier and r.ttft_s and r.server_engine_ms is not None]
        if not group:
            continue
        client = [1e3 * (r.ttft_s or 0.0) for r in group]
        engine = [r.server_engine_ms or 0.0 for r in group]
        outside = [c - e - (r.server_ingress_ms or 0.0) for c, e, r in zip(client, engine, group, strict=True)]
        simulated = [1e3 * s.ttft_s for r in group if (s := sim.get(r.index)) is not None and s.ttft_s]
        everyone = [r for r in records if r.slo_tier == tier]
        sim_tier = [s for s in sim.values() if s.slo_tier == tier]
        lines.append(
            f"{policy} {tier} {len(everyone)} attained {_pct(sum(r.slo_met for r in everyone), len(everyone))} "
            f"sim {_pct(sum(s.slo_met for s in sim_tier), len(sim_tier))}; TTFT p50/p90 client {_pair(client)} "
            f"engine {_pair(engine)} outside {_pair(outside)} sim {_pair(simulated)}"
        )
    return lines


def _agreement(policy: str, records: list[RequestRecord], sim: dict[int, RequestRecord]) -> list[str]:
    same = [(r, s) for r in records if (s := sim.get(r.index)) is not None and s.variant == r.variant]
    other = [(r, s) for r in records if (s := sim.get(r.index)) is not None and s.variant != r.variant]
    lines = [
        f"{policy} agreement: same variant as the simulator {len(same)} of {len(same) + len(other)}, "
        f"attained real/sim {_pct(sum(r.slo_met for r, _ in same), len(same))} / "
        f"{_pct(sum(s.slo_met for _, s in same), len(same))}; different {len(other)}, "
        f"{_pct(sum(r.slo_met for r, _ in other), len(other))} / {_pct(sum(s.slo_met for _, s in other), len(other))}"
    ]
    moves: dict[tuple[str | None, str | None], int] = defaultdict(int)
    for r, s in other:
        moves[(s.variant, r.variant)] += 1
    for (sim_variant, real_variant), n in sorted(moves.items(), key=lambda kv: -kv[1])[:4]:
        lines.append(f"{policy}   sim {sim_variant} -> real {real_variant}: {n}")
    return lines


def _misses(policy: str, records: list[RequestRecord], sim: dict[int, RequestRecord]) -> list[str]:
    counts: dict[tuple[str | None, str | None], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for r in records:
        s = sim.get(r.index)
        if r.slo_met or s is None or not s.slo_met:
            continue
        counts[(r.slo_tier, r.variant)][miss_cause(r)] += 1
    lines = []
    for (tier, variant), causes in sorted(counts.items(), key=lambda kv: -sum(kv[1].values())):
        detail = ", ".join(f"{cause} {n}" for cause, n in sorted(causes.items(), key=lambda kv: -kv[1]))
        lines.append(f"{policy} missed, sim met: {tier} on {variant}: {sum(causes.values())} ({detail})")
    return lines


def _replicas(policy: str, records: list[RequestRecord]) -> list[str]:
    lines = []
    for variant in sorted({r.variant for r in records if r.variant}):
        group: dict[str, list[RequestRecord]] = defaultdict(list)
        for r in records:
            if r.variant == variant and r.replica is not None:
                group[r.replica].append(r)
        if not group:
            lines.append(f"{policy} {variant}: no replica named in the records")
            continue
        sizes = sorted((len(v), sum(r.prompt_tokens for r in v), k) for k, v in group.items())
        rates = sorted(sum(r.slo_met for r in v) / len(v) for v in group.values())
        lines.append(
            f"{policy} {variant}: {len(group)} replicas; requests min/max {sizes[0][0]}/{sizes[-1][0]}, prompt "
            f"tokens min/max {min(s[1] for s in sizes)}/{max(s[1] for s in sizes)}; attainment per replica "
            f"worst/best {100 * rates[0]:.1f}%/{100 * rates[-1]:.1f}%"
        )
    return lines


def _behind(policy: str, records: list[RequestRecord]) -> list[str]:
    lines = []
    for variant in sorted({r.variant for r in records if r.variant}):
        groups = behind_long(r for r in records if r.variant == variant)
        if not sum(total for _, total in groups.values()):
            continue
        text = ", ".join(f"{k} {met}/{total} ({_pct(met, total)})" for k, (met, total) in groups.items())
        lines.append(f"{policy} {variant} short requests behind a long prefill on their replica: {text}")
    return lines


_WEIGHED = ("ttft", "ttft_up", "tpot_up", "ahead")  # the candidates' figures set side by side (router.explain)


def divergence(records: list[RequestRecord], sim: dict[int, RequestRecord]) -> dict[tuple[str, str], dict]:
    """For the requests the real stack and the simulator sent to different variants, grouped by ``(the simulator's
    variant, the real one)``: what each side expected of the variant the simulator chose (from their
    ``x-route-candidates``): the median of each figure in ``_WEIGHED`` as ``(real, sim)`` and the share of requests
    whose SLO it was judged to meet, ``met``. Requests without both sides' candidates are left out."""
    groups: dict[tuple[str, str], list[tuple[dict[str, float], dict[str, float]]]] = defaultdict(list)
    for r in records:
        s = sim.get(r.index)
        if s is None or not r.variant or not s.variant or s.variant == r.variant:
            continue
        real_view = parse_candidates(r.route_candidates).get(s.variant)
        sim_view = parse_candidates(s.route_candidates).get(s.variant)
        if real_view and sim_view:
            groups[(s.variant, r.variant)].append((real_view, sim_view))
    out: dict[tuple[str, str], dict] = {}
    for key, pairs in groups.items():
        figures: dict = {"requests": len(pairs)}
        for name in (*_WEIGHED, "met"):
            real = [v[name] for v, _ in pairs if name in v]
            simulated = [v[name] for _, v in pairs if name in v]
            if name == "met":
                figures[name] = (sum(real) / max(1, len(real)), sum(simulated) / max(1, len(simulated)))
            else:
                figures[name] = (_q(real, 0.5), _q(simulated, 0.5))
        out[key] = figures
    return out


def _divergence(policy: str, records: list[RequestRecord], sim: dict[int, RequestRecord]) -> list[str]:
    lines = []
    for (sim_variant, real_variant), f in sorted(divergence(records, sim).items(), key=lambda kv: -kv[1]["requests"]):
        shown = ", ".join(f"{name} {_num(f[name][0])} / {_num(f[name][1])}" for name in _WEIGHED)
        lines.append(
            f"{policy}   sim {sim_variant} -> real {real_variant} ({f['requests']}): what each expected of "
            f"{sim_variant}, real / sim p50: {shown}; "
            f"judged to meet {100 * f['met'][0]:.0f}% / {100 * f['met'][1]:.0f}%"
        )
    return lines


def _num(value: int | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _predictions(policy: str, records: list[RequestRecord], sim: dict[int, RequestRecord]) -> list[str]:
    lines = []
    for variant in sorted({r.variant for r in records if r.variant}):
        real = [
            t / r.predicted_ttft_ms
            for r in records
            if r.variant == variant and r.predicted_ttft_ms and (t := _ingress_ttft_ms(r)) is not None
        ]
        simulated = [
            1e3 * s.ttft_s / s.predicted_ttft_ms
            for s in sim.values()
            if s.variant == variant and s.predicted_ttft_ms and s.ttft_s
        ]
        lines.append(
            f"{policy} {variant} TTFT measured/predicted p50 p90: real (ingress) {_ratio_pair(real)}, "
            f"sim {_ratio_pair(simulated)}"
        )
    return lines


def compact(policy: str, records: list[RequestRecord], sim: dict[int, RequestRecord]) -> list[dict]:
    """One row per request, the real stack's and the simulator's figures side by side (ms)."""
    rows = []
    for r in records:
        s = sim.get(r.index)
        rows.append(
            {
                "policy": policy,
                "index": r.index,
                "tier": r.slo_tier,
                "prompt": r.prompt_tokens,
                "start_s": round(r.start_s, 4),
                "variant": r.variant,
                "replica": r.replica,
                "ingress": r.ingress,
                "reason": r.route_reason,
                "met": r.slo_met,
                "error": r.error_type,
                "ttft": None if r.ttft_s is None else round(1e3 * r.ttft_s, 1),
                "ingress_ms": r.server_ingress_ms,
                "engine_ms": r.server_engine_ms,
                "tpot": None if r.tpot_s is None else round(1e3 * r.tpot_s, 2),
                "pred_ttft": r.predicted_ttft_ms,
                "pred_tpot": r.predicted_tpot_ms,
                "sim_variant": None if s is None else s.variant,
                "sim_reason": None if s is None else s.route_reason,
                "sim_met": None if s is None else s.slo_met,
                "sim_ttft": None if s is None or s.ttft_s is None else round(1e3 * s.ttft_s, 1),
                "sim_tpot": None if s is None or s.tpot_s is None else round(1e3 * s.tpot_s, 2),
                "sim_pred_ttft": None if s is None else s.predicted_ttft_ms,
                "candidates": r.route_candidates,
                "sim_candidates": None if s is None else s.route_candidates,
            }
        )
    return rows


def digest(out: Path, compact_path: Path | None = None) -> list[str]:
    lines: list[str] = []
    rows: list[dict] = []
    for path in sorted(out.glob("*/rate-*/records.jsonl")):
        policy = f"{path.parent.parent.name}@{path.parent.name.removeprefix('rate-')}"
        records = list(read_jsonl(path))
        sim_path = path.with_name("sim-records.jsonl")
        sim = {r.index: r for r in read_jsonl(sim_path)} if sim_path.exists() else {}
        for part in (
            _tiers(policy, records, sim),
            _agreement(policy, records, sim),
            _divergence(policy, records, sim),
            _misses(policy, records, sim),
            _replicas(policy, records),
            _behind(policy, records),
            _predictions(policy, records, sim),
        ):
            lines.extend(part)
        rows.extend(compact(policy, records, sim))
    if compact_path is not None:
        with gzip.open(compact_path, "wt") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")
    return lines


if __name__ == "__main__":
    print("\n".join(digest(Path(sys.argv[1]), Path(sys.argv[2]) if len(sys.argv) > 2 else None)))
