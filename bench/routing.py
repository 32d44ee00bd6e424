"""``python -m bench routing``: every routing policy against the same mixed traffic at a sweep of rates.

Starts its own local Ray cluster and Serve (HTTP on a free loopback port), deploys the app of
``serve_config.yaml`` once, calibrates its variants (latency figures and capacity, through the app,
pinned by name), then for each policy deploys an ingress beside it whose ``router.policy`` is that
policy and which routes to the same engine replicas, and drives it with Poisson arrivals of a mix of
short interactive prompts (tight SLO) and long prompts (loose SLO; only the large-context variant holds
them) at each rate. Writes ``sweep.json``, ``report.md`` (table + route reasons + the SLO policy's target),
``sweep.png`` and each point's ``records.jsonl`` into ``--out``.

Why one ingress per policy instead of redeploying the app: a redeploy restarts every replica (Serve gives
an imperatively deployed deployment a new version each time), which costs more than the quick sweep's
budget and hands every policy cold engines. The engines are what the policies share; only the ingress
holds the policy, so only the ingress changes.

Why variants are held at a fixed replica count (their autoscaling ``min_replicas``): with autoscaling a
policy that loads a variant would leave it scaled up for the next policy (downscale delays are tens of
seconds), so the comparison would depend on the order of the sweep. ``--autoscale`` keeps autoscaling.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import dataclasses
import json
import os
import shlex
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import yaml
from pydantic import BaseModel, Field

from bench.calibration import ProbePlan, VariantCalibration, calibrate_variant, mix_capacity
from bench.client import TargetConfig
from bench.load import drive
from bench.loadgen import LoadConfig
from bench.local_serve import local_serve
from bench.policy_apps import EngineLimits, app_names, engine_limits, run_policy_ingresses
from bench.routing_plot import sweep_plot
from router.config import SETUPS, RouterConfig, SLOTier
from sim.scenario import SCENARIOS
from traffic.arrivals import PoissonArrivals, arrival_times
from traffic.mix import MixConfig, mean_length, mixed_requests, routing_mix, slo_window_s
from traffic.prefix import SharedPrefix
from traffic.records import RequestRecord, read_jsonl, write_jsonl
from traffic.report import machine_info
from traffic.routing_results import (
    FULL_FRACTIONS,
    QUICK_FRACTIONS,
    STEADY_FROM,
    Bar,
    SweepPoint,
    bar,
    bar_verdict,
    interference_table,
    markdown_table,
    prediction_table,
    prefix_table,
    reasons_table,
    steady_attainment,
    sweep_point,
)
from traffic.workload import RequestSpec

POLICIES = ("slo", "round_robin", "least_loaded", "length_threshold", "largest")  # the default comparison
BASE_APP = "llm"  # the app that holds the engines (and its own, idle, ingress)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "routing",
        help="every routing policy on a mixed short/long workload at a sweep of rates (starts its own Ray)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--config", type=Path, default=Path("serve_config.yaml"), help="the Serve config to deploy")
    p.add_argument(
        "--scenario",
        choices=sorted(SCENARIOS),
        default=None,
        help="instead of --config: a simulator fleet on the emulated engine, the simulator beside it "
        "(bench/routing_fleet.py); rates are fractions of the simulator's capacity estimate",
    )
    p.add_argument(
        "--ingress-replicas",
        type=int,
        default=1,
        help="with --scenario: ingress replicas of each policy (one ingress streams every token of its fleet)",
    )
    p.add_argument(
        "--parallel",
        action="store_true",
        help="with --scenario: a fleet of its own per policy, all policies driven at once (a host with the cores)",
    )
    p.add_argument(
        "--fleet-scale",
        type=float,
        default=1.0,
        help="with --scenario: run this share of the fleet's replicas at the same share of its traffic",
    )
    p.add_argument("--quick", action="store_true", help="2 rates x 5 policies x 10 s (about 4-5 minutes)")
    p.add_argument(
        "--policies",
        nargs="+",
        choices=list(SETUPS),
        default=list(POLICIES),
        help="router setups (router.config.SETUPS): the policies, and slo_blind (slo without the prefix caches)",
    )
    p.add_argument("--rates", nargs="+", type=float, default=None, help="req/s; default: from calibration")
    p.add_argument(
        "--rate-fractions",
        nargs="+",
        type=float,
        default=None,
        help=f"rates as fractions of the calibrated capacity (default {FULL_FRACTIONS}, quick {QUICK_FRACTIONS})",
    )
    p.add_argument("--duration-s", type=float, default=None, help="seconds of arrivals per point (60, quick 10)")
    p.add_argument(
        "--request-timeout-s",
        type=float,
        default=None,
        help="hard limit per request (default: 30, quick 8, or the longest SLO window of the mix if longer)",
    )
    p.add_argument("--interactive-share", type=float, default=0.75, help="share of short interactive requests")
    p.add_argument("--long-tier", default="standard", help="SLO tier of the long prompts")
    p.add_argument(
        "--shared-prefix",
        type=_shared_prefix,
        default=None,
        metavar="GROUPS:TOKENS",
        help="the long prompts start with one of GROUPS shared prefixes of TOKENS tokens (their own part keeps the "
        "long class's length); each policy gets prefixes of its own, so that on the shared engines no policy "
        "finds another's in the cache",
    )
    p.add_argument(
        "--no-profile",
        dest="profile",
        action="store_false",
        help="do not seed the router's latency models with the calibrated figures",
    )
    p.add_argument("--autoscale", action="store_true", help="keep the config's autoscaling (see above)")
    p.add_argument("--router", type=json.loads, default={}, help="JSON merged into the router config")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=None, help="default results/routing[-quick]")
    p.add_argument("--json", type=Path, default=None, help="also write the sweep summary JSON here")
    p.add_argument(
        "--rescore",
        type=Path,
        default=None,
        metavar="DIR",
        help="run nothing: add what this bench now derives from records (each point's steady attainment) to a "
        "finished run's --out DIR (its sweep.json and records.jsonl files) and rewrite its report",
    )


# ---------------------------------------------------------------------- pure helpers


def _shared_prefix(text: str) -> SharedPrefix:
    groups, _, tokens = text.partition(":")
    try:
        return SharedPrefix(groups=int(groups), prefix_tokens=int(tokens))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"--shared-prefix {text!r}: GROUPS:TOKENS, two positive integers") from exc


def with_shared_prefix(mix: MixConfig, prefix: SharedPrefix | None, content_seed: int) -> MixConfig:
    """``mix`` with its long class's prompts starting with ``prefix``'s groups, their content seeded apart."""
    if prefix is None:
        return mix
    classes = [
        c.model_copy(update={"prefix": prefix.model_copy(update={"content_seed": content_seed})})
        if c.name == "long"
        else c
        for c in mix.classes
    ]
    return mix.model_copy(update={"classes": classes})


def app_args_from_file(path: Path, app_name: str | None = None) -> dict[str, Any]:
    """The ``args`` of one application of a Serve config file (the first, unless named)."""
    apps = yaml.safe_load(path.read_text())["applications"]
    app = apps[0] if app_name is None else next(a for a in apps if a["name"] == app_name)
    return copy.deepcopy(app["args"])


def fixed_replicas(args: dict[str, Any]) -> dict[str, Any]:
    """``args`` with each autoscaled variant held at its ``min_replicas`` (at least 1)."""
    out = copy.deepcopy(args)
    for variant in out["variants"]:
        scaling = variant.pop("autoscaling", None)
        if scaling is not None:
            variant["num_replicas"] = max(1, int(scaling.get("min_replicas", 1)))
    return out


def sweep_rates(capacity: float, fractions: tuple[float, ...] | list[float]) -> list[float]:
    return [round(capacity * f, 2) for f in fractions]


# ---------------------------------------------------------------------- the summary


class RoutingSweep(BaseModel):
    command: str
    date: str
    machine: dict[str, str]
    wall_s: float = Field(description="The whole command, Ray start to shutdown.")
    notes: list[str]
    mix: MixConfig
    calibration: list[VariantCalibration]
    capacity_rps: float = Field(description="Estimated capacity of the mix (see bench.calibration).")
    rates: list[float]
    duration_s: float
    points: list[SweepPoint]
    bar: Bar | None


def _num(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def render_report(sweep: RoutingSweep, variants: list[str], tiers: list[str], plot: str) -> str:
    cal = [
        "| variant | base TTFT (ms) | prefill (tok/s) | TPOT batch 1 (ms) | +TPOT per seq (ms) | "
        "burst TPOT alone / beside long prompts decoding / arriving (ms) | +TPOT per 1k context (ms) | "
        "decode ms per 1k prefill tokens | short burst (req/s) | one long probe (s) | long burst (req/s) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c in sweep.calibration:
        p = c.profile
        i = p.decode_ms_per_prefill_token
        cal.append(
            f"| {c.variant} | {p.base_ttft_ms:.0f} | {p.prefill_tokens_per_s:,.0f} | {p.tpot_ms_at_batch_1:.1f} "
            f"| {p.tpot_ms_per_extra_seq:.2f} "
            f"| {c.tpot_burst_ms:.1f} / {_num(c.tpot_context_ms, 1)} / {_num(c.tpot_prefill_ms, 1)} "
            f"| {1e3 * p.tpot_ms_per_context_token:.2f} | {_num(None if i is None else 1e3 * i, 1)} "
            f"| {c.short_per_s:.1f} | {c.long_s:.2f} | {_num(c.long_per_s)} |"
        )
    b = sweep.bar
    verdict = bar_verdict(b)
    lines = [
        "# Routing policies on mixed traffic",
        "",
        f"* Command: `{sweep.command}`",
        f"* Date: {sweep.date}; wall time {sweep.wall_s:.0f} s",
        "* Machine: " + ", ".join(f"{k} {v}" for k, v in sweep.machine.items()),
        *(f"* {n}" for n in sweep.notes),
        "",
        "## Calibration (pinned requests through the app)",
        "",
        *cal,
        "",
        f"Estimated capacity of the mix: {sweep.capacity_rps:.2f} req/s; rates: "
        + ", ".join(f"{r:.2f}" for r in sweep.rates),
        "",
        "## Results",
        "",
        markdown_table(sweep.points, variants, tiers),
        "",
        f"**Target:** {verdict}",
        "",
        "## Route reasons (x-route-reason)",
        "",
        reasons_table(sweep.points),
        "",
        "## Short requests behind long prompts (met / sent)",
        "",
        "A short request is 'behind long' when a long prompt was in flight on the variant it went to.",
        "",
        interference_table(sweep.points),
        "",
        "## The router's predictions (measured / predicted)",
        "",
        "What each served request measured against what the router predicted for it when it chose the variant",
        "(x-route-predicted-ttft-ms / -tpot-ms; the mean predictions, before the error margin). Above 1: the",
        "prediction was optimistic. The router predicts the ingress's TTFT, from its taking the request to the",
        "first token back (server-timing 'ingress' before dispatch + 'engine' after); the client also waits for",
        "the path outside the ingress (the Serve proxy both ways: the client's TTFT less the ingress's).",
        "",
        prediction_table(sweep.points),
        "",
        *(
            ["## Prefix caches", "", prefix_table([(p.policy, p.rate, p.summary) for p in sweep.points]), ""]
            if any(p.summary.prefix_hit_rate is not None for p in sweep.points)
            else []
        ),
        f"![attainment and goodput vs rate]({plot})",
        "",
    ]
    return "\n".join(lines)


# ---------------------------------------------------------------------- driving the app


@dataclass(frozen=True)
class SweepTarget:
    """What the sweep sends: the served model, the traffic mix and its tiers' targets, the per-request limit."""

    model: str
    mix: MixConfig
    tiers: dict[str, SLOTier]
    timeout_s: float

    def at(self, url: str, model: str | None = None) -> TargetConfig:
        return TargetConfig(url=url, model=model or self.model, request_timeout_s=self.timeout_s)


async def drive_point(url: str, t: SweepTarget, rate: float, duration_s: float, seed: int) -> list[RequestRecord]:
    """Poisson arrivals of the mix at ``rate`` for ``duration_s``; every record, in send order."""
    specs = mixed_requests(t.mix, t.tiers, arrival_times(PoissonArrivals(rate=rate), seed))
    return await send_specs(url, t, specs, LoadConfig(duration_s=duration_s, progress=False))


async def send_specs(url: str, t: SweepTarget, specs: Iterable[RequestSpec], load: LoadConfig) -> list[RequestRecord]:
    result, _ = await drive(t.at(url), load, iter(specs), poll=False, poll_interval_s=1.0)
    return sorted(result.records, key=lambda r: r.index)


async def warm(url: str, t: SweepTarget, count: int = 3) -> None:
    """A few short requests, one at a time, through a fresh ingress: its first requests set up its handles.
    Not measured."""
    shortest = min(t.mix.classes, key=lambda c: mean_length(c.input_len))
    mix = t.mix.model_copy(update={"classes": [shortest], "seed": t.mix.seed + 10_000})
    specs = mixed_requests(mix, t.tiers, [None] * count)
    await send_specs(url, t, specs, LoadConfig(concurrency=1, num_requests=count, progress=False))


def probe_burst(max_running_requests: int) -> int:
    """Short probes sent at once: a quarter of the batch slots, 8 to 32. The step time is not linear in the
    batch (a small burst's extra sequences cost far more each than a large batch's: docs/measurements.md), so a
    larger engine is probed at a batch closer to the ones it will run."""
    return max(8, min(32, max_running_requests // 4))


async def calibrate(url: str, limits: dict[str, EngineLimits], t: SweepTarget) -> list[VariantCalibration]:
    classes = t.mix.classes
    mean_output = sum(c.weight * mean_length(c.output_len) for c in classes) / sum(c.weight for c in classes)
    longest = max(mean_length(c.input_len) for c in classes)
    out = []
    async with httpx.AsyncClient() as client:
        largest = max(limits, key=lambda name: limits[name].context_length)
        for variant, limit in limits.items():
            # The long probe: the mix's mean long prompt where the context holds it, else most of the context.
            # Only the largest-context variant's long throughput sets the capacity: probe only its.
            long_tokens = int(min(longest, limit.context_length - 64))
            plan = ProbePlan(
                long_tokens=long_tokens,
                long_burst=3 if variant == largest else 0,
                burst=probe_burst(limit.max_running_requests),
                # Two long prompts per replica decoding beside the second burst; long enough to outlast it.
                context_probes=2 * limit.replicas,
                context_output_tokens=max(2, min(128, limit.context_length - long_tokens - 1)),
                prefill_probes=3 * limit.replicas,
                replicas=limit.replicas,
            )
            out.append(await calibrate_variant(client, url, variant, plan, mean_output_tokens=mean_output))
    return out


# ---------------------------------------------------------------------- Ray and Serve


def _log(started: float, text: str) -> None:
    print(f"[{time.monotonic() - started:5.0f} s] {text}", flush=True)


def rescore(out: Path) -> RoutingSweep:
    """A finished sweep in ``out`` with the figures derived from its records recomputed (see ``--rescore``);
    rewrites its ``sweep.json``, ``sweep.png`` and ``report.md``."""
    sweep = RoutingSweep.model_validate_json((out / "sweep.json").read_text())
    points = []
    for p in sweep.points:
        records = read_jsonl(out / p.policy / f"rate-{p.rate:g}" / "records.jsonl")
        steady = steady_attainment(records, STEADY_FROM * sweep.duration_s)
        points.append(p.model_copy(update={"steady_attainment": steady}))
    note = f"Steady attainment added after the run: python -m bench routing --rescore {out}"
    notes = sweep.notes if note in sweep.notes else [*sweep.notes, note]
    sweep = sweep.model_copy(update={"points": points, "notes": notes})
    (out / "sweep.json").write_text(sweep.model_dump_json(indent=2) + "\n")
    plot = sweep_plot(points, out / "sweep.png")
    variants = [c.variant for c in sweep.calibration]
    tiers = sorted({c.tier for c in sweep.mix.classes})
    (out / "report.md").write_text(render_report(sweep, variants, tiers, plot.name))
    return sweep


def run(args: argparse.Namespace) -> int:
    if args.scenario is not None:
        from bench import routing_fleet

        return routing_fleet.run(args)
    if args.rescore is not None:
        sweep = rescore(args.rescore)
        print(
            markdown_table(
                sweep.points, [c.variant for c in sweep.calibration], sorted({c.tier for c in sweep.mix.classes})
            )
        )
        return 0
    started = time.monotonic()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # builtin models are generated offline
    duration_s = args.duration_s or (10.0 if args.quick else 60.0)
    fractions = args.rate_fractions or list(QUICK_FRACTIONS if args.quick else FULL_FRACTIONS)
    out = args.out or Path("results/routing-quick" if args.quick else "results/routing")
    base_args = app_args_from_file(args.config)
    if not args.autoscale:
        base_args = fixed_replicas(base_args)
    router = RouterConfig.model_validate({**base_args.get("router", {}), **args.router})
    mix = routing_mix(interactive_share=args.interactive_share, long_tier=args.long_tier, seed=args.seed)
    # The default limit never cuts a request before its SLO window ends (traffic.mix.slo_window_s).
    args.request_timeout_s = args.request_timeout_s or max(8.0 if args.quick else 30.0, slo_window_s(mix, router.tiers))
    target = SweepTarget(base_args["model_name"], mix, dict(router.tiers), args.request_timeout_s)
    command = shlex.join(["python", "-m", "bench", *getattr(args, "argv", sys.argv[1:])])

    from ray import serve

    from serve_app.app import build_app

    points: list[SweepPoint] = []
    with local_serve("bench-routing") as base_url:
        serve.run(build_app(base_args), name=BASE_APP, route_prefix="/")
        limits = asyncio.run(engine_limits(base_url))
        _log(started, f"app up, engines {limits}; calibrating")
        calibration = asyncio.run(calibrate(base_url, limits, target))
        for c in calibration:
            _log(started, f"{c.variant}: {c.model_dump_json()}")
        capacity = mix_capacity(
            max(c.short_per_s for c in calibration),
            max(c.long_per_s or 0.0 for c in calibration),
            args.interactive_share,
        )
        rates = args.rates or sweep_rates(capacity, fractions)
        _log(started, f"capacity ~{capacity:.2f} req/s; rates {rates}")
        profiles = {c.variant: c.profile.model_dump() for c in calibration} if args.profile else None
        shortest = min(limit.context_length for limit in limits.values())
        names = app_names(args.policies)
        run_policy_ingresses(base_args, names, BASE_APP, profiles, args.router)
        _log(started, f"ingresses up: {', '.join(names.values())}")
        qualities = {v["name"]: float(v.get("quality", 1.0)) for v in base_args["variants"]}
        for name in names.values():
            asyncio.run(warm(f"{base_url}/{name}", target))
        # Rate by rate, every policy in turn: on a shared machine a slow spell then hurts one point of
        # several policies rather than every point of one.
        for i, rate in enumerate(rates):
            for k, (policy, name) in enumerate(names.items()):
                url = f"{base_url}/{name}"
                mix_k = with_shared_prefix(target.mix, args.shared_prefix, content_seed=1000 * i + k)
                policy_target = dataclasses.replace(target, mix=mix_k)
                records = asyncio.run(drive_point(url, policy_target, rate, duration_s, args.seed + i))
                write_jsonl(records, out / policy / f"rate-{rate:g}" / "records.jsonl")
                point = sweep_point(
                    policy, rate, records, long_prompt_tokens=shortest, qualities=qualities, duration_s=duration_s
                )
                points.append(point)
                s = point.summary
                _log(
                    started,
                    f"{policy} @ {rate:.2f} req/s: {s.requests} requests, attainment {s.slo_attainment:.1%}, "
                    f"goodput {s.goodput:.2f}, errors {s.errors_by_status}, reasons {point.reasons}",
                )

    tiers = sorted({c.tier for c in mix.classes})
    order = {policy: i for i, policy in enumerate(args.policies)}
    points.sort(key=lambda p: (order[p.policy], p.rate))
    sweep = RoutingSweep(
        command=command,
        date=datetime.now(UTC).isoformat(timespec="seconds"),
        machine=machine_info(),
        wall_s=time.monotonic() - started,
        notes=_notes(args, duration_s),
        mix=mix,
        calibration=calibration,
        capacity_rps=capacity,
        rates=rates,
        duration_s=duration_s,
        points=points,
        bar=bar(points) if any(p.policy == "slo" for p in points) else None,
    )
    out.mkdir(parents=True, exist_ok=True)
    for path in (out / "sweep.json", args.json):
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(sweep.model_dump_json(indent=2) + "\n")
    plot = sweep_plot(points, out / "sweep.png")
    report = render_report(sweep, list(limits), tiers, plot.name)
    (out / "report.md").write_text(report)
    print(markdown_table(points, list(limits), tiers))
    print(report.split("**Target:** ")[1].split("\n")[0])
    print(f"wall time {sweep.wall_s:.0f} s; wrote {out / 'report.md'}")
    return 0


def _notes(args: argparse.Namespace, duration_s: float) -> list[str]:
    return [
        f"Each point: Poisson arrivals for {duration_s:g} s, then every request in flight runs to its end "
        f"(hard limit {args.request_timeout_s:g} s per request; a timeout counts as a miss).",
        "Variants held at a fixed replica count (autoscaling min_replicas)"
        if not args.autoscale
        else "Variants autoscale as configured (results depend on the order of the sweep).",
        "Router latency models seeded with the calibrated figures"
        if args.profile
        else "Router latency models start from the config's figures (none: pessimistic defaults).",
        "Attainment counts every request sent: a rejection or failure is a miss.",
    ]
