"""Calibration: replay a real bench run through the simulator and compare the latency percentiles.

The run's own send offsets, prompt lengths and output lengths go through one simulated variant with the
profile under test (as many replicas as the real run had); the measured and simulated TTFT and TPOT
percentiles are then set side by side with their relative error. A profile is trustworthy for a
workload when those errors are small (the target: p50 TTFT within 25%).
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, Field

from engines.profile import EngineProfile
from router import RouterConfig
from sim.seed import router_seed
from sim.simulator import Simulation, SimVariant
from sim.workload import record_requests
from traffic.records import RequestRecord
from traffic.summary import LatencyStats, Summary, summarize

PERCENTILES = ("p50", "p90", "p99")


class Comparison(BaseModel):
    metric: str = Field(description="'ttft_ms' or 'tpot_ms'.")
    percentile: str
    measured: float | None
    simulated: float | None
    relative_error: float | None = Field(description="(simulated - measured) / measured; None without both.")


class Calibration(BaseModel):
    requests: int
    replicas: int
    profile: EngineProfile
    rows: list[Comparison]
    measured: Summary
    simulated: Summary

    def row(self, metric: str, percentile: str) -> Comparison:
        return next(r for r in self.rows if r.metric == metric and r.percentile == percentile)


def relative_error(measured: float | None, simulated: float | None) -> float | None:
    if measured is None or simulated is None or measured == 0:
        return None
    return (simulated - measured) / measured


def compare(measured: Summary, simulated: Summary) -> list[Comparison]:
    """TTFT and TPOT percentiles of two summaries, side by side."""
    rows = []
    for metric in ("ttft_ms", "tpot_ms"):
        real: LatencyStats = getattr(measured, metric)
        sim: LatencyStats = getattr(simulated, metric)
        for p in PERCENTILES:
            m, s = getattr(real, p), getattr(sim, p)
            rows.append(
                Comparison(metric=metric, percentile=p, measured=m, simulated=s, relative_error=relative_error(m, s))
            )
    return rows


def calibrate(
    records: Sequence[RequestRecord],
    profile: EngineProfile,
    *,
    replicas: int = 1,
    max_ongoing_requests: int | None = None,
) -> Calibration:
    """Replays the successful ``records`` on ``replicas`` simulated replicas of ``profile``."""
    served = [r for r in records if r.ok]
    if not served:
        raise ValueError("the run has no successful request to replay")
    # Round robin over one variant: the router only passes requests on, as a single-variant app does.
    router = RouterConfig(
        policy="round_robin", queue_bound_per_replica=1_000_000, sheddable_queue_bound_per_replica=1_000_000
    )
    variant = SimVariant(
        name="calibrated",
        profile=profile,
        num_replicas=replicas,
        max_ongoing_requests=max_ongoing_requests or 1_000_000,
        latency_profile=router_seed(profile),
    )
    result = Simulation([variant], router).run(record_requests(served, router))
    measured = summarize(served)
    simulated = summarize(result.records)
    return Calibration(
        requests=len(served),
        replicas=replicas,
        profile=profile,
        rows=compare(measured, simulated),
        measured=measured,
        simulated=simulated,
    )


def render(calibration: Calibration) -> str:
    lines = [
        f"{calibration.requests} requests replayed on {calibration.replicas} simulated replica(s)",
        "| metric | percentile | measured (ms) | simulated (ms) | error |",
        "|---|---|---:|---:|---:|",
    ]
    for r in calibration.rows:
        err = "-" if r.relative_error is None else f"{r.relative_error:+.1%}"
        meas = "-" if r.measured is None else f"{r.measured:.1f}"
        simu = "-" if r.simulated is None else f"{r.simulated:.1f}"
        lines.append(f"| {r.metric} | {r.percentile} | {meas} | {simu} | {err} |")
    return "\n".join(lines)
