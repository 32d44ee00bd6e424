"""Scoring a spike run: pure functions from records and replica samples to one mode's figures, and the report.

The bench (real Serve) and the simulator (``sim.spike``) hand the same kinds of records and samples to
:func:`mode_report`, so their figures are computed by one piece of code and can be compared line by line.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, Field

from bench.replicas import ReplicaSample
from bench.spike_fleet import SpikeFleet
from traffic.arrivals import Window
from traffic.records import RequestRecord

Source = Literal["serve", "sim"]


class WindowStats(BaseModel):
    requests: int
    slo_met: int
    slo_attainment: float | None = Field(description="slo_met / requests; rejected and failed requests miss.")


class VariantUse(BaseModel):
    peak_replicas: int
    replica_seconds: float = Field(description="Ready replicas integrated over the trace.")
    gpu_seconds: float = Field(description="replica_seconds x the preset's GPUs per replica.")
    served: int = Field(description="Requests this variant answered (200).")
    served_during: int = Field(description="... of them sent inside the peak windows.")


class ModeReport(BaseModel):
    mode: str
    source: Source
    requests: int
    succeeded: int
    rejected: int = Field(description="Answered 429 or 503 before streaming (admission control, overload).")
    streams_cut: int = Field(description="Accepted (200) streams that ended in an error instead of [DONE].")
    other_failures: int = Field(description="Neither: timeouts, connection errors.")
    during: WindowStats = Field(description="Requests sent inside the shape's peak windows.")
    outside: WindowStats
    overall: WindowStats
    ttft_p99_during_ms: float | None
    replica_seconds: float
    gpu_seconds: float
    fixed_replica_seconds: float = Field(description="Every variant at max_replicas for the whole trace.")
    fixed_gpu_seconds: float
    variants: dict[str, VariantUse]
    replicas_over_time: dict[str, list[tuple[float, int]]]

    @property
    def replica_ratio(self) -> float:
        return self.replica_seconds / self.fixed_replica_seconds if self.fixed_replica_seconds else 0.0

    @property
    def gpu_ratio(self) -> float:
        return self.gpu_seconds / self.fixed_gpu_seconds if self.fixed_gpu_seconds else 0.0


def in_windows(t: float, windows: Sequence[Window]) -> bool:
    return any(start <= t < end for start, end in windows)


def replica_seconds(samples: Sequence[ReplicaSample], start_s: float, end_s: float) -> float:
    """Replicas integrated over ``[start_s, end_s]``, each sample holding until the next (a step function).

    Before the first sample the first count holds: the variant was deployed and ready before the run.
    """
    points = sorted((s.t_s, s.replicas) for s in samples)
    if not points or end_s <= start_s:
        return 0.0
    total = 0.0
    for index, (t, n) in enumerate(points):
        begin = start_s if index == 0 else max(t, start_s)
        finish = min(points[index + 1][0], end_s) if index + 1 < len(points) else end_s
        total += n * max(0.0, finish - begin)
    return total


def stream_cut(record: RequestRecord) -> bool:
    """An accepted stream (HTTP 200) that did not end cleanly with [DONE]."""
    return record.status == 200 and not record.ok


def window_stats(records: Sequence[RequestRecord]) -> WindowStats:
    met = sum(r.slo_met for r in records)
    return WindowStats(requests=len(records), slo_met=met, slo_attainment=met / len(records) if records else None)


def _p99(values: Sequence[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


def mode_report(
    mode: str,
    source: Source,
    records: Sequence[RequestRecord],
    samples: Sequence[ReplicaSample],
    fleet: SpikeFleet,
    windows: Sequence[Window],
    duration_s: float,
) -> ModeReport:
    """One mode's figures over ``[0, duration_s]`` (pure: records and samples in, report out)."""
    during = [r for r in records if in_windows(r.start_s, windows)]
    outside = [r for r in records if not in_windows(r.start_s, windows)]
    rejected = sum(r.status in (429, 503) for r in records)
    cut = sum(stream_cut(r) for r in records)
    variants: dict[str, VariantUse] = {}
    over_time: dict[str, list[tuple[float, int]]] = {}
    for v in fleet.variants:
        ours = sorted((s for s in samples if s.variant == v.name), key=lambda s: s.t_s)
        used = replica_seconds(ours, 0.0, duration_s)
        served = [r for r in records if r.ok and r.variant == v.name]
        variants[v.name] = VariantUse(
            peak_replicas=max((s.replicas for s in ours), default=0),
            replica_seconds=used,
            gpu_seconds=used * v.gpus_per_replica,
            served=len(served),
            served_during=sum(in_windows(r.start_s, windows) for r in served),
        )
        over_time[v.name] = [(round(s.t_s, 2), s.replicas) for s in ours]
    return ModeReport(
        mode=mode,
        source=source,
        requests=len(records),
        succeeded=sum(r.ok for r in records),
        rejected=rejected,
        streams_cut=cut,
        other_failures=sum(not r.ok for r in records) - rejected - cut,
        during=window_stats(during),
        outside=window_stats(outside),
        overall=window_stats(records),
        ttft_p99_during_ms=_p99([r.ttft_s * 1e3 for r in during if r.ok and r.ttft_s is not None]),
        replica_seconds=sum(u.replica_seconds for u in variants.values()),
        gpu_seconds=sum(u.gpu_seconds for u in variants.values()),
        fixed_replica_seconds=sum(v.max_replicas for v in fleet.variants) * duration_s,
        fixed_gpu_seconds=sum(v.max_replicas * v.gpus_per_replica for v in fleet.variants) * duration_s,
        variants=variants,
        replicas_over_time=over_time,
    )


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def table(reports: Sequence[ModeReport]) -> list[str]:
    """The comparison table: one row per (mode, source)."""
    lines = [
        "| mode | run | attainment during spike | outside | overall | rejected | streams cut | other failures "
        "| TTFT p99 during (ms) | peak replicas | replica-s (/ fixed) | GPU-s (/ fixed) | served during, by variant |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---|",
    ]
    for r in reports:
        peaks = ", ".join(f"{n} {u.peak_replicas}" for n, u in r.variants.items())
        served = ", ".join(f"{n} {u.served_during}" for n, u in r.variants.items())
        p99 = "-" if r.ttft_p99_during_ms is None else f"{r.ttft_p99_during_ms:,.0f}"
        lines.append(
            f"| {r.mode} | {r.source} | {_pct(r.during.slo_attainment)} | {_pct(r.outside.slo_attainment)} "
            f"| {_pct(r.overall.slo_attainment)} | {r.rejected} | {r.streams_cut} | {r.other_failures} | {p99} "
            f"| {peaks} | {r.replica_seconds:,.0f} ({r.replica_ratio:.2f}) | {r.gpu_seconds:,.0f} ({r.gpu_ratio:.2f}) "
            f"| {served} |"
        )
    return lines


def sim_gap(real: ModeReport, sim: ModeReport) -> dict[str, float | None]:
    """Simulated less measured, in points (attainment) and in ratio (replica-seconds)."""
    a, b = real.during.slo_attainment, sim.during.slo_attainment
    return {
        "attainment_during_points": None if a is None or b is None else 100.0 * (b - a),
        "replica_ratio_points": 100.0 * (sim.replica_ratio - real.replica_ratio),
    }
