"""``python -m bench routing --scenario NAME``: a simulator fleet through the real stack, and the simulator beside it.

The fleet is the scenario's pools on the emulated engine (:mod:`bench.fleet`), deployed once; each policy gets
an ingress of its own routing to the same engine replicas (as in :mod:`bench.routing`). The rates are fractions
of the capacity the simulator's engine models give the fleet (``sim.capacity.estimate_capacity``, the figure
``python -m sim sweep`` places its rates by), so neither side chooses its own top rate. At each rate, every
policy gets the scenario's own requests (the simulator's draws: send times, lengths, SLO tiers), and the
simulator runs the same scenario with the same policy; the report puts the two side by side.

No calibration and no warm-up: the router starts from the figures the simulator seeds it with (the engine
profile's, ``sim.seed.router_seed``), as a user's deployment starts from its ``latency_profile``, and the first
requests of a fresh ingress count like any other (the report shows each point's first 20% apart).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import shlex
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import cast

from pydantic import BaseModel, Field

from bench.client import TargetConfig
from bench.fleet import app_args, scenario_requests
from bench.load import drive
from bench.loadgen import LoadConfig
from bench.policy_apps import app_names, engine_limits, policy_args, run_policy_ingresses
from router.config import Policy, RouterConfig
from sim.capacity import CapacityEstimate, estimate_capacity
from sim.scenario import SCENARIOS, Scenario, simulate
from sim.sweep import make_scenario
from traffic.records import RequestRecord, write_jsonl
from traffic.report import machine_info
from traffic.routing_results import STEADY_FROM, Bar, SweepPoint, bar, bar_verdict, prefix_table, sweep_point
from traffic.summary import Summary

BASE_APP = "fleet"
DEFAULT_FRACTIONS = (0.5, 1.0)
MAX_SIM_GAP = 0.03  # the target: each policy within 3 points of the simulator


class FleetPoint(BaseModel):
    """One policy at one rate, measured through the stack and simulated on the same requests."""

    fraction: float
    real: SweepPoint
    sim: SweepPoint


class FleetSweep(BaseModel):
    command: str
    date: str
    machine: dict[str, str]
    wall_s: float
    scenario: str
    fleet_scale: float = Field(description="Share of the scenario's replicas and traffic run (bench.fleet).")
    replicas: dict[str, int] = Field(description="Replicas per variant, as deployed.")
    duration_s: float
    capacity: CapacityEstimate
    points: list[FleetPoint]
    real_bar: Bar | None
    sim_bar: Bar | None


def _points(points: list[FleetPoint], side: str) -> list[SweepPoint]:
    return [getattr(p, side) for p in points]


def sim_gaps(points: list[FleetPoint]) -> dict[tuple[str, float], float]:
    """Real minus simulated attainment per (policy, rate)."""
    return {(p.real.policy, p.real.rate): p.real.summary.slo_attainment - p.sim.summary.slo_attainment for p in points}


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _tier(summary: Summary, tier: str) -> str:
    group = summary.by_tier.get(tier)
    return "-" if group is None else f"{group.slo_attainment:.0%}"


def comparison_table(points: list[FleetPoint], variants: list[str], tiers: list[str]) -> str:
    head = ["policy", "rate (req/s)", "requests", "attainment real / sim", "gap", "after the first 20% (real)"]
    head += [f"{t} real / sim" for t in tiers]
    head += [f"share {v} real / sim" for v in variants]
    head += ["TTFT p50 / p99 real (ms)", "TTFT p50 / p99 sim (ms)", "errors real / sim"]
    lines = [
        "| " + " | ".join(head) + " |",
        "|" + "|".join("---" if i == 0 else "---:" for i in range(len(head))) + "|",
    ]
    for p in points:
        r, s = p.real.summary, p.sim.summary
        cells = [
            p.real.policy,
            f"{p.real.rate:.2f}",
            str(r.requests),
            f"{r.slo_attainment:.1%} / {s.slo_attainment:.1%}",
            f"{r.slo_attainment - s.slo_attainment:+.1%}",
            _pct(p.real.steady_attainment),
        ]
        cells += [f"{_tier(r, t)} / {_tier(s, t)}" for t in tiers]
        cells += [f"{p.real.variant_share.get(v, 0):.0%} / {p.sim.variant_share.get(v, 0):.0%}" for v in variants]
        cells += [
            f"{r.ttft_ms.p50 or 0:,.0f} / {r.ttft_ms.p99 or 0:,.0f}",
            f"{s.ttft_ms.p50 or 0:,.0f} / {s.ttft_ms.p99 or 0:,.0f}",
            f"{sum(r.errors_by_status.values())} / {sum(s.errors_by_status.values())}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def render(sweep: FleetSweep, tiers: list[str]) -> str:
    gaps = sim_gaps(sweep.points)
    top = max((p.real.rate for p in sweep.points), default=0.0)
    top_gaps = {policy: gap for (policy, rate), gap in gaps.items() if rate == top}
    worst = max(top_gaps.items(), key=lambda kv: abs(kv[1]), default=None)
    agreement = (
        "no points"
        if worst is None
        else f"largest gap at the top rate: {worst[0]} {worst[1]:+.1%} (target: every policy within "
        f"{MAX_SIM_GAP:.0%}) -> **{'met' if abs(worst[1]) <= MAX_SIM_GAP else 'NOT met'}**"
    )
    variants = list(sweep.replicas)
    e = sweep.capacity
    return "\n".join(
        [
            f"# Routing through the real stack: {sweep.scenario}",
            "",
            f"* Command: `{sweep.command}`",
            f"* Date: {sweep.date}; wall time {sweep.wall_s:.0f} s",
            "* Machine: " + ", ".join(f"{k} {v}" for k, v in sweep.machine.items()),
            f"* Fleet: {', '.join(f'{v} x{n}' for v, n in sweep.replicas.items())} on the emulated engine "
            f"(fleet scale {sweep.fleet_scale:g} of the scenario's, traffic scaled with it)",
            f"* Each point: the scenario's requests for {sweep.duration_s:g} s, then every request in flight runs to "
            "its end; the simulator runs the same scenario (same requests, same policy, same router seed).",
            "* No calibration and no warm-up: the router starts from the engine profiles' figures.",
            f"* Capacity (simulator's engine models, before any policy ran): {e.capacity:.2f} req/s "
            f"({e.bottleneck} saturates first)",
            "",
            "## Real stack against the simulator",
            "",
            comparison_table(sweep.points, variants, tiers),
            "",
            f"**Target, real stack:** {bar_verdict(sweep.real_bar)}",
            "",
            f"**Target, simulator:** {bar_verdict(sweep.sim_bar)}",
            "",
            f"**Agreement:** {agreement}",
            "",
            *(
                [
                    "## Prefix caches, real stack",
                    "",
                    prefix_table([(p.real.policy, p.real.rate, p.real.summary) for p in sweep.points]),
                    "",
                    "## Prefix caches, simulator",
                    "",
                    prefix_table([(p.sim.policy, p.sim.rate, p.sim.summary) for p in sweep.points]),
                    "",
                ]
                if any(p.real.summary.prefix_hit_rate is not None for p in sweep.points)
                else []
            ),
        ]
    )


async def _send(url: str, model: str, specs: list, duration_s: float, timeout_s: float) -> list[RequestRecord]:
    target = TargetConfig(url=url, model=model, request_timeout_s=timeout_s)
    result, _ = await drive(
        target, LoadConfig(duration_s=duration_s, progress=False), iter(specs), poll=False, poll_interval_s=1.0
    )
    return sorted(result.records, key=lambda r: r.index)


def _point(policy: str, rate: float, records: list[RequestRecord], scenario: Scenario, duration_s: float) -> SweepPoint:
    qualities = {p.name: p.quality for p in scenario.pools}
    long_prompt = scenario.router.length_threshold_tokens  # what length_threshold counts as long
    return sweep_point(
        policy, rate, records, long_prompt_tokens=long_prompt, qualities=qualities, duration_s=duration_s
    )


def _log(started: float, text: str) -> None:
    print(f"[{time.monotonic() - started:5.0f} s] {text}", flush=True)


def _deploy(args: argparse.Namespace, base_args: dict, base_url: str, started: float) -> dict[str, str]:
    """Deploys the fleet and one ingress per policy; each policy's URL. Shared engines (one fleet, the policies
    take turns) by default; ``--parallel``: a fleet of its own per policy, all driven at once."""
    from ray import serve

    from serve_app.app import build_app

    names = app_names(args.policies)
    if args.parallel:
        serve.run_many(
            [
                serve.RunTarget(
                    build_app(policy_args(base_args, policy, None, args.router)), name=name, route_prefix=f"/{name}"
                )
                for policy, name in names.items()
            ]
        )
        _log(started, f"{len(names)} fleets up, one per policy")
        return {policy: f"{base_url}/{name}" for policy, name in names.items()}
    serve.run(build_app(base_args), name=BASE_APP, route_prefix="/")
    limits = asyncio.run(engine_limits(base_url))
    _log(started, f"fleet up: {limits}")
    run_policy_ingresses(base_args, names, BASE_APP, None, args.router)
    _log(started, f"ingresses up: {', '.join(names.values())}")
    return {policy: f"{base_url}/{name}" for policy, name in names.items()}


def _send_blocking(url: str, model: str, specs: list, duration_s: float, timeout_s: float) -> list[RequestRecord]:
    return asyncio.run(_send(url, model, specs, duration_s, timeout_s))


def _drive(
    urls: dict[str, str], model: str, specs: list, duration_s: float, timeout_s: float, parallel: bool
) -> Iterator[tuple[str, list[RequestRecord]]]:
    """Each policy's records for ``specs``: one policy after another, or (``parallel``) all at once, each from a
    load generator process of its own so that no client competes with another for one event loop."""
    if not parallel:
        for policy, url in urls.items():
            yield policy, _send_blocking(url, model, specs, duration_s, timeout_s)
        return
    context = multiprocessing.get_context("spawn")  # a fork of a Ray driver is not safe
    with ProcessPoolExecutor(max_workers=len(urls), mp_context=context) as pool:
        futures = {
            policy: pool.submit(_send_blocking, url, model, specs, duration_s, timeout_s)
            for policy, url in urls.items()
        }
        for policy, future in futures.items():
            yield policy, future.result()


def run(args: argparse.Namespace) -> int:
    from bench.local_serve import local_serve

    started = time.monotonic()
    make = SCENARIOS[args.scenario]
    duration_s = args.duration_s or (20.0 if args.quick else 60.0)
    fractions = args.rate_fractions or list(DEFAULT_FRACTIONS)
    base = make_scenario(make, duration_s, 1.0, args.fleet_scale)
    estimate = estimate_capacity(base)
    base_args = app_args(base, ingress_replicas=args.ingress_replicas)
    timeout_s = args.request_timeout_s or 300.0
    out = args.out or Path(f"results/routing-fleet/{args.scenario}")
    command = shlex.join(["python", "-m", "bench", *getattr(args, "argv", sys.argv[1:])])
    model = base_args["model_name"]
    replicas = {v["name"]: v["num_replicas"] for v in base_args["variants"]}
    points: list[FleetPoint] = []
    with local_serve("bench-routing-fleet") as base_url:
        urls = _deploy(args, base_args, base_url, started)
        for i, fraction in enumerate(fractions):
            scenario = make_scenario(make, duration_s, fraction * estimate.rate_scale, args.fleet_scale)
            # The simulator beside it routes with the same config as the real ingresses (``--router`` too).
            router = RouterConfig.model_validate({**scenario.router.model_dump(), **(args.router or {})})
            # ... and spreads the requests over as many ingress replicas, each picking replicas from its own sends.
            scenario = scenario.model_copy(
                update={"seed": args.seed + i, "router": router, "ingress_replicas": args.ingress_replicas}
            )
            specs = scenario_requests(scenario)
            rate = round(fraction * estimate.capacity, 2)
            for policy, records in _drive(urls, model, specs, duration_s, timeout_s, args.parallel):
                write_jsonl(records, out / policy / f"rate-{rate:g}" / "records.jsonl")
                sim_result, _ = simulate(scenario, cast(Policy, policy), "static")
                write_jsonl(sim_result.records, out / policy / f"rate-{rate:g}" / "sim-records.jsonl")
                point = FleetPoint(
                    fraction=fraction,
                    real=_point(policy, rate, records, scenario, duration_s),
                    sim=_point(policy, rate, sim_result.records, scenario, duration_s),
                )
                points.append(point)
                _log(
                    started,
                    f"{policy} @ {rate:.2f} req/s: {len(records)} requests, real "
                    f"{point.real.summary.slo_attainment:.1%} (first {STEADY_FROM:.0%} excluded: "
                    f"{_pct(point.real.steady_attainment)}), sim {point.sim.summary.slo_attainment:.1%}, "
                    f"errors {point.real.summary.errors_by_status}",
                )

        # Written before Serve shuts down: its shutdown can take a minute, and a run cut short there (a device
        # call's time limit) must not lose the sweep it already measured.
        order = {policy: i for i, policy in enumerate(args.policies)}
        points.sort(key=lambda p: (order[p.real.policy], p.real.rate))
        has_slo = any(p.real.policy == "slo" for p in points)
        sweep = FleetSweep(
            command=command,
            date=datetime.now(UTC).isoformat(timespec="seconds"),
            machine=machine_info(),
            wall_s=time.monotonic() - started,
            scenario=base.name,
            fleet_scale=args.fleet_scale,
            replicas=replicas,
            duration_s=duration_s,
            capacity=estimate,
            points=points,
            real_bar=bar(_points(points, "real")) if has_slo else None,
            sim_bar=bar(_points(points, "sim")) if has_slo else None,
        )
        tiers = sorted({t for p in points for t in p.real.summary.by_tier})
        out.mkdir(parents=True, exist_ok=True)
        for path in (out / "sweep.json", args.json):
            if path is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(sweep.model_dump_json(indent=2) + "\n")
        report = render(sweep, tiers)
        (out / "report.md").write_text(report)
        print(report)
    return 0
