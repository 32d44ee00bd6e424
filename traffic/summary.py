"""The summary of a run: pure functions over its records.

Latencies are summarised over the requests that succeeded (a failed request has no meaningful
TTFT); failures are counted by status and type instead. SLO attainment is over *all* requests:
a failed request missed its SLO. Goodput is the rate of requests that met their SLO.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel, Field

from traffic.records import RequestRecord

NO_STATUS = "none"  # the errors_by_status key of a request that got no HTTP response


class LatencyStats(BaseModel):
    """One latency's distribution, in milliseconds (None where there were no samples)."""

    count: int
    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    max: float | None = None


def latency_stats(values_s: Sequence[float]) -> LatencyStats:
    """Percentiles (linear interpolation, numpy's default) of ``values_s``, reported in ms."""
    if not values_s:
        return LatencyStats(count=0)
    ms = np.asarray(values_s, dtype=float) * 1e3
    p50, p90, p99 = np.percentile(ms, [50, 90, 99])
    return LatencyStats(
        count=len(ms),
        mean=float(ms.mean()),
        p50=float(p50),
        p90=float(p90),
        p99=float(p99),
        max=float(ms.max()),
    )


class GroupStats(BaseModel):
    requests: int
    succeeded: int
    slo_met: int
    slo_attainment: float
    prefix_hit_rate: float | None = Field(
        None, description="Cached / prompt tokens of the requests that succeeded and said (None: none said)."
    )


def prefix_hit_rate(records: Sequence[RequestRecord]) -> float | None:
    """Prompt tokens the engines took from their prefix caches over the prompt tokens of the same requests: the
    successful ones whose usage said how many were cached (None when none did)."""
    told = [r for r in records if r.ok and r.cached_tokens is not None]
    prompt = sum(r.prompt_tokens for r in told)
    return sum(r.cached_tokens or 0 for r in told) / prompt if prompt else None


class Summary(BaseModel):
    requests: int = Field(description="Requests sent.")
    succeeded: int
    failed: int
    duration_s: float = Field(description="First send to last response end.")
    request_rate: float = Field(description="Requests completed (either way) per second over duration_s.")
    offered_rate: float | None = Field(description="Requests sent per second over the send window.")
    input_tokens: int = Field(description="Prompt tokens of the requests that succeeded.")
    output_tokens: int = Field(description="Generated tokens of the requests that succeeded.")
    output_tokens_per_s: float
    chunks: int = Field(0, description="Streamed events that carried text, of the requests that succeeded.")
    ttft_ms: LatencyStats
    itl_ms: LatencyStats = Field(description="Gaps between streamed chunks (a chunk may hold several tokens).")
    tpot_ms: LatencyStats
    e2e_ms: LatencyStats
    errors_by_status: dict[str, int]
    errors_by_type: dict[str, int]
    slo_met: int
    slo_attainment: float = Field(description="Fraction of requests that succeeded within their SLO.")
    goodput: float = Field(description="Requests per second that met their SLO.")
    by_tier: dict[str, GroupStats]
    by_variant: dict[str, GroupStats]
    prefix_hit_rate: float | None = Field(None, description="See prefix_hit_rate(); per replica in by_replica.")
    prefill_tokens: int = Field(
        0, description="Prompt tokens the engines computed for the requests that succeeded: prompt less cached."
    )
    by_replica: dict[str, GroupStats] = Field(default_factory=dict)
    later_turns_ttft_ms: LatencyStats | None = Field(
        None, description="TTFT of the second and later turns of multi-turn conversations (None: no such turn)."
    )


def _later_turns_ttft(ok: Sequence[RequestRecord]) -> LatencyStats | None:
    later = [r.ttft_s for r in ok if r.turn > 0 and r.ttft_s is not None]
    return latency_stats(later) if later else None


def _rate(count: int, seconds: float) -> float:
    return count / seconds if seconds > 0 else 0.0


def _group(records: Sequence[RequestRecord]) -> GroupStats:
    met = sum(r.slo_met for r in records)
    return GroupStats(
        requests=len(records),
        succeeded=sum(r.ok for r in records),
        slo_met=met,
        slo_attainment=met / len(records) if records else 0.0,
        prefix_hit_rate=prefix_hit_rate(records),
    )


def _grouped(records: Sequence[RequestRecord], key: str) -> dict[str, GroupStats]:
    groups: dict[str, list[RequestRecord]] = {}
    for r in records:
        value = getattr(r, key)
        if value is not None:
            groups.setdefault(value, []).append(r)
    return {name: _group(rs) for name, rs in sorted(groups.items())}


def summarize(records: Sequence[RequestRecord], duration_s: float | None = None) -> Summary:
    """Summarise ``records``; ``duration_s`` defaults to first send -> last end."""
    ok = [r for r in records if r.ok]
    failed = [r for r in records if not r.ok]
    starts = sorted(r.start_s for r in records)
    if duration_s is None:
        duration_s = max((r.end_s for r in records), default=0.0) - (starts[0] if starts else 0.0)
    # n sends span n-1 gaps: the rate of an arrival process estimated from its own send times.
    send_window = starts[-1] - starts[0] if len(starts) > 1 else 0.0
    met = sum(r.slo_met for r in records)
    output_tokens = sum(r.output_tokens for r in ok)
    return Summary(
        requests=len(records),
        succeeded=len(ok),
        failed=len(failed),
        duration_s=duration_s,
        request_rate=_rate(len(records), duration_s),
        offered_rate=(len(starts) - 1) / send_window if send_window > 0 else None,
        input_tokens=sum(r.prompt_tokens for r in ok),
        output_tokens=output_tokens,
        output_tokens_per_s=_rate(output_tokens, duration_s),
        chunks=sum(r.chunks for r in ok),
        ttft_ms=latency_stats([r.ttft_s for r in ok if r.ttft_s is not None]),
        itl_ms=latency_stats([gap for r in ok for gap in r.itl_s]),
        tpot_ms=latency_stats([r.tpot_s for r in ok if r.tpot_s is not None]),
        e2e_ms=latency_stats([r.e2e_s for r in ok if r.e2e_s is not None]),
        errors_by_status=dict(
            sorted(Counter(str(r.status) if r.status is not None else NO_STATUS for r in failed).items())
        ),
        errors_by_type=dict(sorted(Counter(r.error_type or "" for r in failed).items())),
        slo_met=met,
        slo_attainment=met / len(records) if records else 0.0,
        goodput=_rate(met, duration_s),
        by_tier=_grouped(records, "slo_tier"),
        by_variant=_grouped(records, "variant"),
        prefix_hit_rate=prefix_hit_rate(records),
        prefill_tokens=sum(r.prompt_tokens - (r.cached_tokens or 0) for r in ok),
        by_replica=_grouped(records, "replica"),
        later_turns_ttft_ms=_later_turns_ttft(ok),
    )
