"""``python -m sim sweep``: the routing bench's quick sweep on a simulated fleet, and its target at the top rate.

The bench (``python -m bench routing --quick``) runs every policy at fractions 0.5 and 1.0 of the natural
split's calibrated capacity and judges the SLO policy at the top rate (``traffic.routing_results.bar``). Here the
capacity comes from the engine models (:mod:`sim.capacity`) before any policy runs, so the top rate cannot be
chosen to flatter one; each rate is one ``run_matrix`` of every policy on identical traffic, on static pools
(the capacity assumes every pool fully provisioned).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Literal

from pydantic import BaseModel, Field

from router.config import Setup
from sim.capacity import CapacityEstimate, estimate_capacity
from sim.scenario import PoolSpec, RunResult, Scenario, run_matrix
from traffic.routing_results import QUICK_FRACTIONS, Bar, SweepPoint, bar, bar_verdict, prefix_table

ScenarioMaker = Callable[..., Scenario]  # sim.scenario.SCENARIOS' functions: (duration_s, rate_scale)


class SweepRun(BaseModel):
    """One policy at one fraction of the capacity."""

    fraction: float = Field(description="Offered rate as a fraction of the natural split's capacity.")
    rate_scale: float = Field(description="The scenario's rate_scale for that rate: fraction x capacity scale.")
    rate: float = Field(description="Offered requests per second: fraction x capacity.")
    seed: int = Field(0, description="The traffic's reseeding (:func:`reseeded`); 0: the scenario as built.")
    run: RunResult


class SimSweep(BaseModel):
    """A sweep's capacity estimate, every run and the target's verdict."""

    scenario: str
    gpus: int = Field(0, description="GPUs of the fleet simulated (after any fleet scaling).")
    duration_s: float = Field(description="Seconds of traffic per run.")
    capacity: CapacityEstimate
    fractions: list[float]
    runs: list[SweepRun]
    bar: Bar | None = Field(
        description="The target at the top rate, on the scenario's own traffic (seed 0); None when the SLO "
        "policy did not run."
    )
    seed_bars: list[Bar] = Field(
        default_factory=list, description="The target on each seed's traffic, seed 0 first (with --seeds above 1)."
    )
    wall_s: float = Field(description="Seconds the whole sweep took, estimate and runs.")


def make_scenario(
    make: ScenarioMaker, duration_s: float | None, rate_scale: float, fleet_scale: float = 1.0
) -> Scenario:
    """``make``'s scenario at ``rate_scale``, its fleet and its traffic both scaled by ``fleet_scale`` (twice the
    replicas of every pool at twice the rate keeps each replica's load); ``duration_s`` None: the scenario's."""
    scale = rate_scale * fleet_scale
    scenario = make(rate_scale=scale) if duration_s is None else make(duration_s, scale)
    if fleet_scale == 1.0:
        return scenario
    return scenario.model_copy(update={"pools": scaled_pools(scenario.pools, fleet_scale)})


def scaled_pools(pools: list[PoolSpec], fleet_scale: float) -> list[PoolSpec]:
    """Each pool with ``fleet_scale`` of its replicas (at least one), GPUs to match."""
    if fleet_scale <= 0:
        raise ValueError("fleet_scale must be > 0")
    out = []
    for pool in pools:
        replicas = max(1, round(pool.pool_replicas * fleet_scale))
        out.append(pool.model_copy(update={"gpus": replicas * pool.engine_profile().gpus_per_replica}))
    return out


def reseeded(scenario: Scenario, seed: int) -> Scenario:
    """``scenario`` with other random draws of the same traffic: each stream's arrivals and lengths reseeded
    (its seed + 100 x ``seed``) and the simulator's own seed (replica choice) set to ``seed``. Seed 0 is the
    scenario as built."""
    if seed == 0:
        return scenario
    streams = [
        s.model_copy(update={"workload": s.workload.model_copy(update={"seed": s.workload.seed + 100 * seed})})
        for s in scenario.streams
    ]
    return scenario.model_copy(update={"streams": streams, "seed": seed})


def sweep(
    make: ScenarioMaker,
    *,
    fractions: Sequence[float] = QUICK_FRACTIONS,
    policies: Sequence[Setup] | None = None,
    duration_s: float | None = None,
    seeds: int = 1,
    workers: int | None = None,
    prefix_view: Literal["reported", "oracle"] = "reported",
    fleet_scale: float = 1.0,
) -> SimSweep:
    """Estimates the capacity of ``make``'s scenario at rate scale 1 (its fleet scaled by ``fleet_scale``), then
    runs every policy at each fraction, on ``seeds`` draws of the traffic (:func:`reseeded`)."""
    if seeds < 1:
        raise ValueError("seeds must be at least 1")
    started = time.perf_counter()
    base = make_scenario(make, duration_s, 1.0, fleet_scale)
    estimate = estimate_capacity(base)
    runs: list[SweepRun] = []
    for seed in range(seeds):
        for fraction in fractions:
            scale = fraction * estimate.rate_scale
            scenario = reseeded(make_scenario(make, duration_s, scale, fleet_scale), seed)
            update = {"policies": list(policies or base.policies), "scaling": ["static"], "prefix_view": prefix_view}
            for run in run_matrix(scenario.model_copy(update=update), workers=workers):
                rate = fraction * estimate.capacity
                runs.append(SweepRun(fraction=fraction, rate_scale=scale, rate=rate, seed=seed, run=run))
    bars = [judge([r for r in runs if r.seed == seed]) for seed in range(seeds)]
    return SimSweep(
        scenario=base.name,
        gpus=sum(pool.gpus for pool in base.pools),
        duration_s=base.duration_s,
        capacity=estimate,
        fractions=list(fractions),
        runs=runs,
        bar=bars[0],
        seed_bars=[b for b in bars if b is not None] if seeds > 1 else [],
        wall_s=time.perf_counter() - started,
    )


def judge(runs: Sequence[SweepRun], policy: str = "slo") -> Bar | None:
    """``traffic.routing_results.bar`` on the runs: ``policy`` at the top rate against every other policy there.

    ``bar`` reads a point's policy, rate and summary only; the bench's other per-point figures (route reasons,
    shares) come from records, which a sweep does not keep, and stay empty.
    """
    if not any(r.run.policy == policy for r in runs):
        return None
    points = [
        SweepPoint(
            policy=r.run.policy,
            rate=r.rate,
            summary=r.run.summary,
            variant_share={},
            reasons={},
            long_on_variant={},
            quality_met=None,
        )
        for r in runs
    ]
    return bar(points, policy=policy)


def bar_line(b: Bar | None) -> str:
    """The target's verdict in the bench report's words (``traffic.routing_results.bar_verdict``)."""
    return f"**Target:** {bar_verdict(b, bold=False)}"


def capacity_table(estimate: CapacityEstimate) -> str:
    lines = [
        "| pool | replicas | streams | share of rate | burst (requests) | burst (s) | throughput (req/s) | "
        "saturates at (req/s) |",
        "|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    for p in estimate.pools:
        lines.append(
            f"| {p.pool} | {p.replicas} | {', '.join(p.streams) or '-'} | {p.share:.0%} | {p.burst_requests} | "
            f"{_num(p.burst_s)} | {_num(p.throughput)} | {_num(p.capacity)} |"
        )
    return "\n".join(lines)


def seeds_table(runs: Sequence[SweepRun]) -> str:
    """SLO attainment per (policy, rate) over the seeds: mean (lowest-highest)."""
    seeds = len({r.seed for r in runs})
    lines = [f"| policy | rate (req/s) | SLO attainment over {seeds} seeds: mean (range) |", "|---|---:|---:|"]
    cells: dict[tuple[str, float], list[float]] = {}
    for r in runs:
        cells.setdefault((r.run.policy, r.rate), []).append(r.run.summary.slo_attainment)
    for (policy, rate), values in cells.items():
        mean = sum(values) / len(values)
        lines.append(f"| {policy} | {rate:.2f} | {mean:.1%} ({min(values):.1%}-{max(values):.1%}) |")
    return "\n".join(lines)


def seeds_verdict(bars: Sequence[Bar]) -> str:
    """The target over seeds: its margin per seed, the mean, and the worst pairing (the SLO policy's lowest
    attainment against the best baseline's highest), which no single seed shows."""
    if not bars:
        return ""
    margins = [b.margin or 0.0 for b in bars]
    worst = min(b.attainment for b in bars) - max(b.best_baseline_attainment or 0.0 for b in bars)
    met = sum(b.met for b in bars)
    return (
        f"Over {len(bars)} seeds: margin per seed "
        + ", ".join(f"{m:+.1%}" for m in margins)
        + f"; mean {sum(margins) / len(margins):+.1%}; worst pairing {worst:+.1%}; target met on {met} of {len(bars)}"
    )


def runs_table(runs: Sequence[SweepRun]) -> str:
    """One row per (policy, rate), policies in the order run, rates ascending."""
    tiers = sorted({t for r in runs for t in r.run.summary.by_tier})
    head = ["policy", "rate (req/s)", "rate scale", "requests", "failed", "SLO attainment"]
    head += [f"attain. {t}" for t in tiers] + ["goodput (req/s)", "mean quality"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---:" if i else "---" for i in range(len(head))) + "|"]
    order = {p: i for i, p in enumerate(dict.fromkeys(r.run.policy for r in runs))}
    for r in sorted(runs, key=lambda r: (order[r.run.policy], r.rate)):
        s = r.run.summary
        by_tier = [f"{s.by_tier[t].slo_attainment:.1%}" if t in s.by_tier else "-" for t in tiers]
        cells = [r.run.policy, f"{r.rate:.2f}", f"{r.rate_scale:.2f}", str(s.requests), str(s.failed)]
        cells += [f"{s.slo_attainment:.1%}", *by_tier, f"{s.goodput:.2f}", f"{r.run.mean_quality:.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def render_sweep(result: SimSweep) -> str:
    e = result.capacity
    first = [r for r in result.runs if r.seed == 0]
    return "\n".join(
        [
            f"# {result.scenario}",
            "",
            f"Fleet: {result.gpus} GPUs.",
            "",
            "## The natural split's capacity (engine models only, before any policy runs)",
            "",
            capacity_table(e),
            "",
            f"Capacity: {e.capacity:.2f} req/s (rate scale {e.rate_scale:.3f} of the scenario's {e.base_rate:g} "
            f"req/s; {e.bottleneck} saturates first). Rates: "
            + ", ".join(f"{f:g} x = {f * e.capacity:.2f} req/s" for f in result.fractions),
            "",
            f"## Every policy, static pools, {result.duration_s:g} s of traffic per run",
            "",
            runs_table(first),
            *(
                [
                    "",
                    "## Prefix caches",
                    "",
                    prefix_table([(r.run.policy, r.rate, r.run.summary) for r in first]),
                ]
                if any(r.run.summary.prefix_hit_rate is not None for r in result.runs)
                else []
            ),
            "",
            bar_line(result.bar),
            *(["", seeds_table(result.runs), "", seeds_verdict(result.seed_bars)] if result.seed_bars else []),
        ]
    )


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"
