"""``python -m bench spike``: a traffic spike against our app, autoscaled by each policy in turn.

Starts a local Ray cluster (logical CPUs) and, for each autoscaling policy (ours, ``engine_load``, and
Serve's default, ``ongoing_requests``), deploys the app in-process with one autoscaled variant (``--model``:
``builtin:tiny`` on the hf engine, or ``emulated:<preset>``, whose replicas take the preset's start-up time
times ``--startup-time-scale`` and add real capacity even on two cores), replays the *same* seeded trace (a
steady rate, a step to several times it, back down), then waits a bounded time for the variant to scale back
down. Reports, per policy: SLO attainment before, during and after the spike, replicas over time
(``GET /variants``; plotted beside the offered load), requests rejected (429/503), streams cut (a 200 stream
that ended in an error: must be zero), and the replica-seconds used against a fixed fleet of ``max_replicas``
sized for the peak.

Writes ``--out DIR/<policy>/`` (records, replicas, plots, the load report) and ``DIR/report.md``; the
comparison also goes to ``--json PATH``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shlex
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from pydantic import BaseModel, Field

from bench import plots
from bench.arrivals import SpikeArrivals, arrival_times
from bench.client import MonotonicClock, TargetConfig
from bench.loadgen import LoadConfig, run_load
from bench.local_serve import local_serve
from bench.records import RequestRecord, write_jsonl
from bench.replicas import ReplicaSample, poll_variants, write_samples
from bench.report import machine_info
from bench.workload import FixedLength, WorkloadConfig, build_requests
from engines.presets import EMULATED_PREFIX

POLICIES = ("engine_load", "ongoing_requests")
MODEL = "spike-llama"
VARIANT = "tiny"
PHASES = ("before", "during", "after")


class SpikeShape(BaseModel):
    """The trace and the variant's scaling settings of one bench run (the same for every policy)."""

    base_rate: float = Field(description="Requests per second before and after the spike.")
    spike_rate: float = Field(description="Requests per second during the spike.")
    spike_start_s: float
    spike_duration_s: float
    after_s: float = Field(description="Seconds of base rate after the spike.")
    cooldown_s: float = Field(description="Most seconds waited after the trace for the variant to scale down.")
    input_tokens: int
    output_tokens: int
    slo_ttft_ms: float
    slo_tpot_ms: float
    max_running_requests: int = Field(description="Batch slots per replica.")
    min_replicas: int
    max_replicas: int
    upscale_delay_s: float
    downscale_delay_s: float
    look_back_period_s: float
    metrics_interval_s: float
    target_ongoing_requests: float = Field(
        description="Serve's default policy: tuned to the same per-replica load the engine-load policy aims "
        "for (batch slots x its 0.75 utilization target), so that the comparison is of signals, not targets."
    )

    @property
    def duration_s(self) -> float:
        return self.spike_start_s + self.spike_duration_s + self.after_s

    def phase(self, t_s: float) -> str:
        if t_s < self.spike_start_s:
            return "before"
        return "during" if t_s < self.spike_start_s + self.spike_duration_s else "after"


QUICK = SpikeShape(
    base_rate=1.0,
    spike_rate=5.0,
    spike_start_s=10.0,
    # Long enough for replicas that take ~20 s to start on a busy 2-core machine to serve part of it.
    spike_duration_s=50.0,
    after_s=15.0,
    cooldown_s=30.0,
    input_tokens=128,
    output_tokens=64,
    slo_ttft_ms=1000.0,
    slo_tpot_ms=100.0,
    max_running_requests=4,
    min_replicas=1,
    max_replicas=3,
    upscale_delay_s=2.0,
    downscale_delay_s=5.0,
    look_back_period_s=3.0,
    metrics_interval_s=0.5,
    target_ongoing_requests=3.0,
)
FULL = QUICK.model_copy(update={"spike_start_s": 30.0, "spike_duration_s": 90.0, "after_s": 60.0, "cooldown_s": 60.0})


class PhaseStats(BaseModel):
    requests: int
    slo_met: int
    slo_attainment: float | None


class PolicyReport(BaseModel):
    policy: str
    requests: int
    succeeded: int
    rejected: int = Field(description="Answered 429 or 503 before streaming (admission control, overload).")
    streams_cut: int = Field(description="Accepted (200) streams that ended in an error instead of [DONE].")
    other_failures: int
    phases: dict[str, PhaseStats]
    peak_replicas: int
    replicas_at_end: int | None = Field(description="Replicas at the last sample, after the cool-down.")
    scaled_down_after_s: float | None = Field(
        description="Seconds from the end of the spike until the variant was back at min_replicas; None if not."
    )
    replica_seconds: float = Field(description="Replicas integrated over the trace (0 to its end).")
    fixed_fleet_replica_seconds: float = Field(description="max_replicas for the whole trace.")
    replica_seconds_saved: float = Field(description="1 - replica_seconds / fixed_fleet_replica_seconds.")
    replicas_over_time: list[tuple[float, int]]


def engine_args(model: str, shape: SpikeShape, startup_time_scale: float) -> dict[str, Any]:
    """The variant's engine: the hf engine on ``model``, or the emulated one for ``emulated:<preset>``."""
    if model.startswith(EMULATED_PREFIX):
        return {
            "backend": "emulated",
            "preset": model,
            "profile": {"max_running_requests": shape.max_running_requests},
            "tokenizer": "builtin:tiny",
            "startup_time_scale": startup_time_scale,
        }
    return {"backend": "hf", "model": model, "device": "cpu", "max_running_requests": shape.max_running_requests}


def app_args(
    policy: str, shape: SpikeShape, model: str = "builtin:tiny", startup_time_scale: float = 1.0
) -> dict[str, Any]:
    """The served app: one autoscaled variant of ``model`` under ``policy``."""
    return {
        "model_name": MODEL,
        "tokenizer": "builtin:tiny",
        "variants": [
            {
                "name": VARIANT,
                "engine": engine_args(model, shape, startup_time_scale),
                "resources": {"num_cpus": 0.25},
                "max_ongoing_requests": 32,
                "autoscaling": {
                    "policy": policy,
                    "min_replicas": shape.min_replicas,
                    "max_replicas": shape.max_replicas,
                    "target_ongoing_requests": shape.target_ongoing_requests,
                    "upscale_delay_s": shape.upscale_delay_s,
                    "downscale_delay_s": shape.downscale_delay_s,
                    "look_back_period_s": shape.look_back_period_s,
                    "metrics_interval_s": shape.metrics_interval_s,
                },
            }
        ],
    }


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


def policy_report(
    policy: str, records: Sequence[RequestRecord], samples: Sequence[ReplicaSample], shape: SpikeShape
) -> PolicyReport:
    """The per-policy figures of one run (pure: records and samples in, report out)."""
    phases = {}
    for phase in PHASES:
        rs = [r for r in records if shape.phase(r.start_s) == phase]
        met = sum(r.slo_met for r in rs)
        phases[phase] = PhaseStats(requests=len(rs), slo_met=met, slo_attainment=met / len(rs) if rs else None)
    ours = sorted((s for s in samples if s.variant == VARIANT), key=lambda s: s.t_s)
    spike_end = shape.spike_start_s + shape.spike_duration_s
    back_down = next(
        (s.t_s for s in ours if s.t_s >= spike_end and s.replicas <= shape.min_replicas),
        None,
    )
    used = replica_seconds(ours, 0.0, shape.duration_s)
    fixed = shape.max_replicas * shape.duration_s
    rejected = sum(r.status in (429, 503) for r in records)
    cut = sum(stream_cut(r) for r in records)
    return PolicyReport(
        policy=policy,
        requests=len(records),
        succeeded=sum(r.ok for r in records),
        rejected=rejected,
        streams_cut=cut,
        other_failures=sum(not r.ok for r in records) - rejected - cut,
        phases=phases,
        peak_replicas=max((s.replicas for s in ours), default=0),
        replicas_at_end=ours[-1].replicas if ours else None,
        scaled_down_after_s=None if back_down is None else back_down - spike_end,
        replica_seconds=used,
        fixed_fleet_replica_seconds=fixed,
        replica_seconds_saved=1.0 - used / fixed if fixed else 0.0,
        replicas_over_time=[(round(s.t_s, 2), s.replicas) for s in ours],
    )


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "spike",
        help="a traffic spike against the app under each autoscaling policy; attainment, replicas, cut streams",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--quick", action="store_true", help="a 75 s trace (about 4-5 minutes in all on 2 cores)")
    p.add_argument("--policy", choices=POLICIES, action="append", default=None, help="run only these (repeatable)")
    p.add_argument("--out", type=Path, default=Path("bench/results/spike"), help="directory for all outputs")
    p.add_argument("--json", type=Path, default=None, help="also write the comparison JSON here")
    p.add_argument(
        "--model", default="builtin:tiny", help="builtin:<name> (hf engine) or emulated:<preset> (engines/presets.py)"
    )
    p.add_argument(
        "--startup-time-scale",
        type=float,
        default=1.0,
        help="an emulated preset's start-up time is multiplied by this (its new replicas' cold start)",
    )
    p.add_argument("--num-cpus", type=int, default=8, help="logical CPUs of the local Ray cluster")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-progress", dest="progress", action="store_false")
    return p


async def _replicas_now(client: httpx.AsyncClient, url: str) -> int | None:
    with contextlib.suppress(httpx.HTTPError, ValueError, StopIteration):
        answer = (await client.get(f"{url}/variants", timeout=5)).json()
        return int(next(v["replicas"] for v in answer["variants"] if v["name"] == VARIANT))
    return None


async def drive_spike(
    url: str, shape: SpikeShape, seed: int, progress: bool
) -> tuple[list[RequestRecord], list[ReplicaSample]]:
    """Replay the trace against ``url`` while polling replicas; then poll through the bounded cool-down."""
    workload = WorkloadConfig(
        input_len=FixedLength(value=shape.input_tokens),
        output_len=FixedLength(value=shape.output_tokens),
        slo_ttft_ms=shape.slo_ttft_ms,
        slo_tpot_ms=shape.slo_tpot_ms,
        seed=seed,
    )
    arrivals = SpikeArrivals(
        base_rate=shape.base_rate,
        spike_rate=shape.spike_rate,
        start_s=shape.spike_start_s,
        duration_s=shape.spike_duration_s,
    )
    specs = build_requests(workload, arrival_times(arrivals, seed))
    target = TargetConfig(url=url, model=MODEL, request_timeout_s=120.0)
    load = LoadConfig(duration_s=shape.duration_s, progress=progress)
    clock = MonotonicClock()
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(limits=limits) as client:
        stop = asyncio.Event()
        poller = asyncio.create_task(
            poll_variants(client, url, interval_s=0.5, stop=stop, clock=clock, run_start=clock.now())
        )
        try:
            result = await run_load(target, load, specs, client=client, clock=clock)
            deadline = time.monotonic() + shape.cooldown_s
            while time.monotonic() < deadline:
                replicas = await _replicas_now(client, url)
                if replicas is not None and replicas <= shape.min_replicas:
                    break
                await asyncio.sleep(0.5)
            await asyncio.sleep(1.0)  # one more sample after the last change
        finally:
            stop.set()
        samples = await poller
    return sorted(result.records, key=lambda r: r.index), samples


def _run_policy(policy: str, shape: SpikeShape, url: str, out: Path, args: argparse.Namespace) -> PolicyReport:
    from ray import serve

    from serve_app.app import build_app

    serve.run(build_app(app_args(policy, shape, args.model, args.startup_time_scale)), name="spike", route_prefix="/")
    try:
        records, samples = asyncio.run(drive_spike(url, shape, args.seed, args.progress))
    finally:
        serve.delete("spike")
    folder = out / policy
    folder.mkdir(parents=True, exist_ok=True)
    write_jsonl(records, folder / "records.jsonl")
    write_samples(samples, folder / "replicas.jsonl")
    plots.write_plots(records, folder, samples)
    return policy_report(policy, records, samples, shape)


def render_report(reports: Sequence[PolicyReport], shape: SpikeShape, command: str, model: str = "builtin:tiny") -> str:
    def pct(value: float | None) -> str:
        return "-" if value is None else f"{value:.1%}"

    lines = [
        "# Autoscaling through a traffic spike",
        "",
        f"* Command: `{command}`",
        f"* Date: {datetime.now(UTC).isoformat(timespec='seconds')}",
        "* Machine: " + ", ".join(f"{k} {v}" for k, v in machine_info().items()),
        f"* Trace: {shape.base_rate:g} req/s, {shape.spike_rate:g} req/s from {shape.spike_start_s:g} s for "
        f"{shape.spike_duration_s:g} s, then {shape.base_rate:g} req/s for {shape.after_s:g} s; "
        f"{shape.input_tokens} prompt / {shape.output_tokens} output tokens; SLO TTFT {shape.slo_ttft_ms:g} ms, "
        f"TPOT {shape.slo_tpot_ms:g} ms",
        f"* Variant: {model} ({'emulated' if model.startswith(EMULATED_PREFIX) else 'hf'} engine), "
        f"{shape.max_running_requests} batch slots, replicas "
        f"{shape.min_replicas}..{shape.max_replicas}, upscale/downscale delay {shape.upscale_delay_s:g}/"
        f"{shape.downscale_delay_s:g} s, look-back {shape.look_back_period_s:g} s; Serve's default policy with "
        f"target_ongoing_requests {shape.target_ongoing_requests:g}",
        "",
        "| policy | attainment before | during | after | rejected | streams cut | peak replicas "
        "| back to min after spike (s) | replica-s | fixed fleet replica-s | saved |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in reports:
        down = "-" if r.scaled_down_after_s is None else f"{r.scaled_down_after_s:.1f}"
        lines.append(
            f"| {r.policy} | {pct(r.phases['before'].slo_attainment)} | {pct(r.phases['during'].slo_attainment)} "
            f"| {pct(r.phases['after'].slo_attainment)} | {r.rejected} | {r.streams_cut} | {r.peak_replicas} "
            f"| {down} | {r.replica_seconds:.0f} | {r.fixed_fleet_replica_seconds:.0f} "
            f"| {r.replica_seconds_saved:.0%} |"
        )
    lines.append("")
    for r in reports:
        lines += [f"## {r.policy}", "", f"![load and replicas]({r.policy}/load_over_time.png)", ""]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:

    shape = QUICK if args.quick else FULL
    policies = args.policy or list(POLICIES)
    reports = []
    with local_serve("bench-spike", num_cpus=args.num_cpus) as url:
        for policy in policies:
            print(f"bench spike: policy {policy}", file=sys.stderr)
            reports.append(_run_policy(policy, shape, url, args.out, args))
    command = shlex.join(["python", "-m", "bench", *getattr(args, "argv", sys.argv[1:])])
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "report.md").write_text(render_report(reports, shape, command, args.model))
    payload = {
        "command": command,
        "shape": shape.model_dump(),
        "policies": {r.policy: r.model_dump() for r in reports},
    }
    for path in (args.out / "spike.json", args.json):
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(payload, indent=2) + "\n")
    for r in reports:
        attainment = ", ".join(f"{p} {r.phases[p].slo_attainment or 0:.0%}" for p in PHASES)
        print(
            f"{r.policy}: attainment {attainment}; peak {r.peak_replicas} replicas; rejected {r.rejected}; "
            f"cut {r.streams_cut}; replica-s {r.replica_seconds:.0f} vs fixed {r.fixed_fleet_replica_seconds:.0f}"
        )
    print(f"wrote {args.out / 'report.md'}")
    return 1 if any(r.streams_cut for r in reports) else 0
