"""The results of a routing sweep: one point per (policy, rate), its table, and its target at the top rate.

Pure functions over records and summaries, so the table math is tested without a server.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from pydantic import BaseModel, Field

from traffic.prediction import PredictionAccuracy, prediction_accuracy
from traffic.records import RequestRecord
from traffic.summary import Summary, summarize

# The rates of a sweep as fractions of the calibrated capacity: the quick one (and its target), the full one.
QUICK_FRACTIONS = (0.5, 1.0)
FULL_FRACTIONS = (0.25, 0.5, 0.75, 1.0, 1.25)
NO_VARIANT = "none"  # the variant of a request that was refused before reaching one


class SweepPoint(BaseModel):
    """One policy at one offered rate."""

    policy: str
    rate: float = Field(description="Offered rate (Poisson mean, requests per second).")
    summary: Summary
    variant_share: dict[str, float] = Field(
        description="Fraction of all requests per x-route-variant ('none': refused before any variant)."
    )
    reasons: dict[str, int] = Field(description="Requests per x-route-reason ('none': no header came back).")
    long_on_variant: dict[str, int] = Field(
        description="Requests longer than long_prompt_tokens per variant that served them."
    )
    short_behind_long: dict[str, tuple[int, int]] = Field(
        default_factory=dict,
        description="Short requests as (sent, met) by '<variant> behind long' (a long prompt was in flight on "
        "that variant when the short one was sent) or '<variant> clear': what prefill interference costs.",
    )
    quality_met: float | None = Field(
        description="Mean quality of the variants that served the requests meeting their SLO: what the SLO "
        "policy's 'quality' objective buys (None when none met it)."
    )
    prediction: dict[str, PredictionAccuracy] = Field(
        default_factory=dict,
        description="Per variant: measured / predicted TTFT and TPOT of the requests it served, from the "
        "router's x-route-predicted-* headers (traffic.prediction).",
    )
    steady_attainment: float | None = Field(
        None,
        description="SLO attainment of the requests sent after the point's first 20% (STEADY_FROM): what a "
        "policy does once its models have seen the load, apart from a cold start that a short point weighs "
        "heavily (None: no request that late, or a sweep from before this field).",
    )


# A point's steady part starts after this fraction of its arrivals' duration: the SLO policy's misses come in a
# point's first seconds, before the engines' pace and its first checkpoints reach the latency models
# (docs/measurements.md).
STEADY_FROM = 0.2


def steady_attainment(records: Sequence[RequestRecord], from_s: float) -> float | None:
    """SLO attainment of the requests sent at or after ``from_s`` (seconds from the point's start)."""
    late = [r for r in records if r.start_s >= from_s]
    return sum(r.slo_met for r in late) / len(late) if late else None


def variant_shares(records: Sequence[RequestRecord]) -> dict[str, float]:
    counts = Counter(r.variant or NO_VARIANT for r in records)
    total = len(records)
    return {name: n / total for name, n in sorted(counts.items())} if total else {}


def reason_counts(records: Sequence[RequestRecord]) -> dict[str, int]:
    return dict(sorted(Counter(r.route_reason or NO_VARIANT for r in records).items()))


def mean_quality(records: Sequence[RequestRecord], qualities: Mapping[str, float]) -> float | None:
    """Mean quality of the variants that served the requests that met their SLO."""
    served = [qualities[r.variant] for r in records if r.slo_met and r.variant is not None and r.variant in qualities]
    return sum(served) / len(served) if served else None


def short_behind_long(records: Sequence[RequestRecord], long_prompt_tokens: int) -> dict[str, tuple[int, int]]:
    """Short requests as (sent, met), keyed by their variant and whether a long request was in flight on it.

    "In flight" is from the records alone: sent before the short one and not yet ended when it was sent.
    """
    longs = [r for r in records if r.prompt_tokens > long_prompt_tokens and r.variant is not None]
    out: dict[str, list[int]] = {}
    for r in records:
        if r.prompt_tokens > long_prompt_tokens or r.variant is None:
            continue
        behind = any(x.variant == r.variant and x.start_s <= r.start_s < x.end_s for x in longs)
        counts = out.setdefault(f"{r.variant} {'behind long' if behind else 'clear'}", [0, 0])
        counts[0] += 1
        counts[1] += r.slo_met
    return {key: (n, met) for key, (n, met) in sorted(out.items())}


def sweep_point(
    policy: str,
    rate: float,
    records: Sequence[RequestRecord],
    *,
    long_prompt_tokens: int,
    qualities: Mapping[str, float],
    duration_s: float | None = None,
) -> SweepPoint:
    """The figures of one point; ``duration_s``, the point's arrivals' duration, sets its steady part."""
    return SweepPoint(
        policy=policy,
        rate=rate,
        summary=summarize(records),
        variant_share=variant_shares(records),
        reasons=reason_counts(records),
        quality_met=mean_quality(records, qualities),
        short_behind_long=short_behind_long(records, long_prompt_tokens),
        prediction=prediction_accuracy(records),
        long_on_variant=dict(
            sorted(Counter(r.variant or NO_VARIANT for r in records if r.prompt_tokens > long_prompt_tokens).items())
        ),
        steady_attainment=None if duration_s is None else steady_attainment(records, STEADY_FROM * duration_s),
    )


class Bar(BaseModel):
    """The target at the highest rate: the SLO policy's attainment against the best baseline's, at least
    ``min_attainment`` and ahead by at least ``min_margin``."""

    rate: float
    policy: str
    attainment: float
    best_baseline: str | None
    best_baseline_attainment: float | None
    margin: float | None = Field(description="policy attainment - best baseline's; None without baselines.")
    min_attainment: float
    min_margin: float
    met: bool


def bar(
    points: Sequence[SweepPoint], *, policy: str = "slo", min_attainment: float = 0.9, min_margin: float = 0.15
) -> Bar:
    """Judges ``policy`` at the highest rate it ran against every other policy run at that rate."""
    ours = [p for p in points if p.policy == policy]
    if not ours:
        raise ValueError(f"no point of policy {policy!r}")
    top = max(p.rate for p in ours)
    mine = next(p for p in ours if p.rate == top)
    others = [p for p in points if p.policy != policy and p.rate == top]
    best = max(others, key=lambda p: p.summary.slo_attainment, default=None)
    attainment = mine.summary.slo_attainment
    margin = None if best is None else attainment - best.summary.slo_attainment
    return Bar(
        rate=top,
        policy=policy,
        attainment=attainment,
        best_baseline=None if best is None else best.policy,
        best_baseline_attainment=None if best is None else best.summary.slo_attainment,
        margin=margin,
        min_attainment=min_attainment,
        min_margin=min_margin,
        met=attainment >= min_attainment and margin is not None and margin >= min_margin,
    )


def bar_verdict(b: Bar | None, *, bold: bool = True) -> str:
    """The target in the reports' words: the SLO policy against the best baseline at the top rate, met or not."""
    if b is None:
        return "no SLO policy point"
    word = "met" if b.met else "NOT met"
    return (
        f"at {b.rate:.2f} req/s: {b.policy} {b.attainment:.1%}, best baseline {b.best_baseline} "
        f"{(b.best_baseline_attainment or 0):.1%}, margin {(b.margin or 0):+.1%} "
        f"(target: >= {b.min_attainment:.0%} and >= {b.min_margin:+.0%}) -> {f'**{word}**' if bold else word}"
    )


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _errors(summary: Summary) -> str:
    return ", ".join(f"{status}: {n}" for status, n in summary.errors_by_status.items()) or "-"


def _tier(summary: Summary, tier: str) -> str:
    group = summary.by_tier.get(tier)
    return "-" if group is None else f"{group.slo_attainment:.0%}"


def markdown_table(points: Sequence[SweepPoint], variants: Sequence[str], tiers: Sequence[str]) -> str:
    """One row per (policy, rate), in the order given."""
    head = [
        "policy",
        "rate (req/s)",
        "requests",
        "SLO attainment",
        f"after the first {STEADY_FROM:.0%}",
        *(f"attain. {t}" for t in tiers),
        "goodput (req/s)",
        "quality of met",
        "TTFT p50 / p99 (ms)",
        "TPOT p50 / p99 (ms)",
        "errors by status",
        *(f"share {v}" for v in variants),
        "long prompts on",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---:" if i else "---" for i in range(len(head))) + "|"]
    for p in points:
        s = p.summary
        cells = [
            p.policy,
            f"{p.rate:.2f}",
            str(s.requests),
            f"{s.slo_attainment:.1%}",
            "-" if p.steady_attainment is None else f"{p.steady_attainment:.1%}",
            *(_tier(s, t) for t in tiers),
            f"{s.goodput:.2f}",
            "-" if p.quality_met is None else f"{p.quality_met:.2f}",
            f"{_ms(s.ttft_ms.p50)} / {_ms(s.ttft_ms.p99)}",
            f"{_ms(s.tpot_ms.p50)} / {_ms(s.tpot_ms.p99)}",
            _errors(s),
            *(f"{p.variant_share.get(v, 0.0):.0%}" for v in variants),
            ", ".join(f"{v}: {n}" for v, n in p.long_on_variant.items()) or "-",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def reasons_table(points: Sequence[SweepPoint]) -> str:
    """Route reasons per (policy, rate): why requests went where they went."""
    names = sorted({r for p in points for r in p.reasons})
    lines = [
        "| policy | rate | " + " | ".join(names) + " |",
        "|---|---:|" + "---:|" * len(names),
    ]
    for p in points:
        lines.append(f"| {p.policy} | {p.rate:.2f} | " + " | ".join(str(p.reasons.get(n, 0)) for n in names) + " |")
    return "\n".join(lines)


def interference_table(points: Sequence[SweepPoint]) -> str:
    """Short requests per (policy, rate): met / sent, by variant and whether a long prompt was ahead on it."""
    keys = sorted({k for p in points for k in p.short_behind_long})
    lines = ["| policy | rate | " + " | ".join(keys) + " |", "|---|---:|" + "---:|" * len(keys)]
    for p in points:
        cells = []
        for k in keys:
            n, met = p.short_behind_long.get(k, (0, 0))
            cells.append(f"{met}/{n}" if n else "-")
        lines.append(f"| {p.policy} | {p.rate:.2f} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def prediction_table(points: Sequence[SweepPoint]) -> str:
    """Measured / predicted TTFT and TPOT (median, p90) per (policy, rate, variant), where predictions came."""
    lines = [
        "| policy | rate | variant | requests | TTFT at the client / predicted p50 / p90 | at the ingress "
        "/ predicted p50 / p90 | before dispatch p50 (ms) | path p50 (ms) | TPOT p50 / p90 |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for p in points:
        for variant, acc in p.prediction.items():
            lines.append(
                f"| {p.policy} | {p.rate:.2f} | {variant} | {acc.ttft.count} | "
                f"{_ratio(acc.ttft.p50)} / {_ratio(acc.ttft.p90)} | "
                f"{_ratio(acc.server_ttft.p50)} / {_ratio(acc.server_ttft.p90)} | "
                f"{_ms(acc.ingress_ms_p50)} | {_ms(acc.path_ms_p50)} | "
                f"{_ratio(acc.tpot.p50)} / {_ratio(acc.tpot.p90)} |"
            )
    return "\n".join(lines)


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def prefix_table(rows: Sequence[tuple[str, float, Summary]]) -> str:
    """Where the engines reused prompt blocks: per (policy, rate, summary) the TTFT percentiles (of later
    conversation turns too, where there are turns), output tokens per second, the prefix hit rate and the prompt
    tokens computed; policies in the order given, rates ascending."""
    turns = any(s.later_turns_ttft_ms is not None for _, _, s in rows)
    head = ["policy", "rate (req/s)", "TTFT p50 / p90 / p99 (ms)"]
    head += ["later turns' TTFT p50 (ms)"] if turns else []
    head += ["output tokens/s", "prefix hit rate", "prompt tokens computed"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---:" if i else "---" for i in range(len(head))) + "|"]
    order = {policy: i for i, policy in enumerate(dict.fromkeys(policy for policy, _, _ in rows))}
    for policy, rate, s in sorted(rows, key=lambda row: (order[row[0]], row[1])):
        t = s.ttft_ms
        cells = [policy, f"{rate:.2f}", f"{_ms(t.p50)} / {_ms(t.p90)} / {_ms(t.p99)}"]
        if turns:
            later = s.later_turns_ttft_ms
            cells.append(_ms(None if later is None else later.p50))
        hit = "-" if s.prefix_hit_rate is None else f"{s.prefix_hit_rate:.1%}"
        cells += [f"{s.output_tokens_per_s:.0f}", hit, f"{s.prefill_tokens:,}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
