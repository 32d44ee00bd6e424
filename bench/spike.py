"""``python -m bench spike``: traffic spikes against an emulated fleet through real Serve, per scaling mode.

Starts a local Ray cluster with Serve's fast path and, for each mode in turn (``engine_load``: our policy;
``ongoing_requests``: Serve's default; ``fixed``: every variant at ``max_replicas``, the fleet sized for the
peak), deploys the fleet of ``bench.spike_fleet`` (emulated engines: an 8B INT4 and a 70B FP8 TP4 H200 preset,
cold starts from the presets x ``--startup-time-scale``), replays the *same* seeded trace of the chosen shape
(``step``: 10x; ``ramp``; ``diurnal``: a compressed day; ``bursts``: a burst train; ``trace``: a synthesized
bursty trace after BurstGPT's statistics), polls each variant's ready and starting replicas, and then runs the
same scenario in the simulator (``sim.spike``), once with the presets' start-up times and once with the
start-up time this run measured.

Reports per mode: SLO attainment during the spike (requests sent in the shape's peak windows) and outside
it, rejected requests (429/503: admission control), streams cut (accepted, then an error: must be 0; the
command exits 1 otherwise), replica-seconds and GPU-seconds against the fixed fleet, which variant served the
spike (spill-over), and replicas over time per variant beside the offered load (plots).

Writes ``--out DIR/<shape>/``: ``report.md``, ``spike.json``, ``load_and_replicas.png`` and per mode the records
and replica samples.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import multiprocessing
import os
import shlex
import sys
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.client import MonotonicClock, TargetConfig
from bench.loadgen import LoadConfig, run_load
from bench.local_serve import local_serve
from bench.replicas import ReplicaSample, ReplicaStart, read_samples, replica_starts, write_samples
from bench.spike_fleet import DURATIONS_S, MODEL, MODES, SHAPES, Mode, SpikeFleet, app_args, fleet_for
from bench.spike_report import ModeReport, in_windows, mode_report, sim_gap, table
from sim.replica_starts import MeasuredStart, StartFit, fit_process_starts
from traffic import plots
from traffic.arrivals import SpikeShape, arrival_times
from traffic.records import RequestRecord, read_jsonl, write_jsonl
from traffic.report import machine_info
from traffic.workload import build_requests

APP = "spike"
POLL_S = 0.5
LOADAVG_S = 5.0  # how often the machine's load average is sampled during a trace (loadavg.jsonl)

# What every Serve replica imports before its constructor runs (the Serve replica wrapper and the app): with a warm
# worker pool, a prestarted worker has them loaded already; serve_app.preload_gc, last, then freezes what they
# allocated, so that the gc.collect() Serve runs when a replica has started scans only the replica's own objects.
PRELOAD_MODULES = ("ray.serve", "serve_app.app", "serve_app.preload_gc")

# The bench's warm pool by default: the fleet's 10 replicas at the peak, the ingress, Serve's controller
# and proxy, with room to spare. Without it every new replica first waits, two at a time, for a process to start on
# the cores the spike loads (docs/autoscaling.md), a cost a GPU node does not have.
WARM_WORKERS = 24


def warm_pool_env(workers: int) -> dict[str, str]:
    """Ray's settings for a node that keeps ``workers`` worker processes started, the app imported, before any
    replica asks for one (0: Ray's defaults).

    A raylet prestarts one Python worker per logical CPU, but at most its startup concurrency at once, and that is
    ``min(cores, logical CPUs)``: 2 here, against 100+ on a GPU node. So on this machine every replica of a
    scale-up first waits for a new process to start and import Ray, Serve and the app (seconds of CPU each, two at
    a time, on the cores that serve the spike), a cost the presets' cold starts (x 0.1) leave out of proportion.
    With the concurrency raised to ``workers`` (and that many logical CPUs, :func:`cluster_cpus`) the node starts
    them all with the cluster, each importing :data:`PRELOAD_MODULES` (``RAY_preload_python_modules``), and a new
    replica takes an idle one: its start is its constructor (the engine's cold start) and Serve's own steps.
    """
    if workers <= 0:
        return {}
    return {
        "RAY_worker_maximum_startup_concurrency": str(workers),
        "RAY_preload_python_modules": ",".join(PRELOAD_MODULES),
    }


def cluster_cpus(num_cpus: int, warm_workers: int) -> int:
    """Logical CPUs of the bench's cluster: enough for the raylet to prestart ``warm_workers`` (one per CPU)."""
    return max(num_cpus, warm_workers)


def startup_concurrency(num_cpus: int, warm_workers: int) -> int:
    """How many worker processes the node starts at once: Ray's own rule (``ray/_private/services.py``, 2.60:
    ``min(cores, logical CPUs)``), or the warm pool's setting."""
    if warm_workers > 0:
        return warm_workers
    return max(1, min(multiprocessing.cpu_count(), num_cpus))


def mean_of(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def write_jsonl_dicts(rows: Sequence[Mapping[str, Any]], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(dict(r)) + "\n" for r in rows))


def read_jsonl_dicts(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def trace_starts(starts: Sequence[ReplicaStart], began: float, duration_s: float) -> list[dict[str, Any]]:
    """The variant replica starts of one mode's trace (those that ended while it ran, or up to 30 s after: a
    start decided late in the trace), with the decision's time on the trace's clock (s from its start) and the
    time beyond the replica's constructor: what :func:`start_fit` fits the simulator's start queue to."""
    out = []
    for s in starts:
        if s.app != APP or not s.deployment.startswith("variant-") or s.init_s is None:
            continue
        if began < s.wall_time < began + duration_s + 30.0:
            decided = s.wall_time - s.total_s - began
            out.append(
                {
                    "variant": s.deployment.removeprefix("variant-"),
                    "decided_s": round(decided, 3),
                    "total_s": s.total_s,
                    "overhead_s": round(s.total_s - s.init_s, 3),
                }
            )
    return out


def start_fit(starts_by_mode: Mapping[str, Sequence[Mapping[str, Any]]], windows: Any, concurrency: int) -> Any:
    """The node's worker-process start queue (``sim.replica_starts``) fitted to the starts decided inside the
    shape's peak windows, where the spike loads the machine (a start there takes several times longer beyond
    its constructor than one during the quiet base: docs/measurements.md): the load the simulated scale-ups
    meet. Each mode's trace is its own clock, so the modes are fitted as one queue laid end to end. None
    without such starts."""
    measured: list[MeasuredStart] = []
    offset = 0.0
    for mode_starts in starts_by_mode.values():
        chosen = [s for s in mode_starts if in_windows(float(s["decided_s"]), windows)]
        measured += [MeasuredStart(offset + float(s["decided_s"]), float(s["overhead_s"])) for s in chosen]
        offset += 10_000.0  # far apart: one mode's starts never queue behind another's
    return fit_process_starts(measured, concurrency)


async def _poll_status(stop: asyncio.Event, clock: MonotonicClock, start: float, fleet: SpikeFleet) -> Any:
    """Ready replicas per variant from Serve's controller, every ``POLL_S``."""
    from ray import serve

    ready: list[ReplicaSample] = []
    names = {f"variant-{v.name}": v.name for v in fleet.variants}
    while not stop.is_set():
        with contextlib.suppress(Exception):  # a status call that fails is one sample fewer, not an error
            status = await asyncio.to_thread(serve.status)
            t = clock.now() - start
            for name, deployment in status.applications[APP].deployments.items():
                if name in names:
                    states = {str(k).rsplit(".", 1)[-1]: v for k, v in deployment.replica_states.items()}
                    ready.append(ReplicaSample(t_s=t, variant=names[name], replicas=states.get("RUNNING", 0)))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=POLL_S)
    return ready


async def _poll_loadavg(stop: asyncio.Event, clock: MonotonicClock, start: float) -> list[dict[str, float]]:
    """The machine's 1-minute load average every ``LOADAVG_S`` (the runs share two cores with other work: what
    a figure was measured under)."""
    samples: list[dict[str, float]] = []
    while not stop.is_set():
        samples.append({"t_s": round(clock.now() - start, 1), "load_1m": os.getloadavg()[0]})
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=LOADAVG_S)
    return samples


def load_summary(samples: Sequence[Mapping[str, float]]) -> tuple[float, float] | None:
    """(mean, max) of a trace's 1-minute load averages; None without samples."""
    loads = [float(s["load_1m"]) for s in samples]
    return (sum(loads) / len(loads), max(loads)) if loads else None


async def drive(
    url: str, fleet: SpikeFleet, shape: SpikeShape, duration_s: float, seed: int, progress: bool
) -> tuple[list[RequestRecord], list[ReplicaSample], list[dict[str, float]]]:
    """Replay the trace against ``url`` while polling replicas and the machine's load average."""
    from bench.spike_fleet import workload

    specs = build_requests(workload(fleet, seed), arrival_times(shape, seed))
    target = TargetConfig(url=url, model=MODEL, request_timeout_s=120.0)
    load = LoadConfig(duration_s=duration_s, progress=progress)
    clock = MonotonicClock()
    stop = asyncio.Event()
    start = clock.now()
    poller = asyncio.create_task(_poll_status(stop, clock, start, fleet))
    loads = asyncio.create_task(_poll_loadavg(stop, clock, start))
    try:
        result = await run_load(target, load, specs, clock=clock)  # its own connections, one per stream
    finally:
        stop.set()
    ready = await poller
    return sorted(result.records, key=lambda r: r.index), ready, await loads


def _run_mode(mode: Mode, shape_name: str, url: str, out: Path, args: argparse.Namespace, fleet: SpikeFleet) -> Any:
    from ray import serve

    from serve_app.app import build_app

    shape, duration = SHAPES[shape_name], args.duration_s or DURATIONS_S[shape_name]
    serve.run(build_app(app_args(fleet, mode)), name=APP, route_prefix="/")  # returns once every replica runs
    began = time.time()
    try:
        records, ready, loads = asyncio.run(drive(url, fleet, shape, duration, args.seed, args.progress))
    finally:
        serve.delete(APP)
    folder = out / mode
    folder.mkdir(parents=True, exist_ok=True)
    write_jsonl(records, folder / "records.jsonl")
    write_samples(ready, folder / "replicas.jsonl")
    write_jsonl_dicts(loads, folder / "loadavg.jsonl")
    return records, ready, began, loads


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "spike",
        help="traffic spikes against an emulated fleet per scaling mode (ours, Serve's default, fixed); "
        "attainment, replica-seconds, spill-over, cut streams; and the same scenario simulated",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--shape", choices=sorted(SHAPES), action="append", default=None, help="(repeatable; default step)")
    p.add_argument("--mode", choices=MODES, action="append", default=None, help="run only these (repeatable)")
    p.add_argument("--duration-s", type=float, default=None, help="trace length (default: the shape's)")
    p.add_argument("--startup-time-scale", type=float, default=None, help="presets' cold start x this (default 0.1)")
    p.add_argument(
        "--scale-ahead-s",
        type=float,
        default=None,
        help="our policy's predictive term (AutoscalingSpec.scale_ahead_s; default the fleet's, 20 s): set it to a "
        "new replica's start-up time; 0 turns it off",
    )
    p.add_argument("--sim-only", action="store_true", help="only the simulator (seconds; for sizing a fleet)")
    p.add_argument(
        "--rescore",
        action="store_true",
        help="no new run: score the records and replicas already in --out again (and simulate again, with the "
        "start-up times that run measured): after a change to the report or the simulator",
    )
    p.add_argument(
        "--sim-extra-startup-s",
        type=float,
        default=None,
        help="with --sim-only: also simulate with this much start-up on top of the engine's (what a real run measured)",
    )
    p.add_argument("--out", type=Path, default=Path("results/spike"), help="directory for all outputs")
    p.add_argument("--json", type=Path, default=None, help="also write the comparison JSON here")
    p.add_argument("--num-cpus", type=int, default=8, help="logical CPUs of the local Ray cluster")
    p.add_argument(
        "--warm-workers",
        type=int,
        default=WARM_WORKERS,
        help="keep this many Ray worker processes started, the app imported, before the trace (warm_pool_env; "
        f"default {WARM_WORKERS}: every replica of the fleet and Serve's own actors; 0: Ray's defaults, two "
        "processes at a time on this machine); pass the same value to --rescore (0 for runs recorded without a pool)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-progress", dest="progress", action="store_false")
    return p


def _simulate(
    fleet: SpikeFleet,
    shape_name: str,
    duration: float,
    modes: Sequence[Mode],
    seed: int,
    extra_s: float,
    fit: StartFit | None = None,
) -> list[ModeReport]:
    from sim.spike import simulate_spike

    shape = SHAPES[shape_name]
    out = []
    for mode in modes:
        queue = None if fit is None else fit.queue()  # a fresh queue per mode: each had a cluster of its own
        records, samples = simulate_spike(
            fleet, shape, duration, mode, seed=seed, extra_startup_s=extra_s, process_starts=queue
        )
        out.append(mode_report(mode, "sim", records, samples, fleet, shape.peak_windows(), duration))
    return out


def render(
    shape_name: str,
    fleet: SpikeFleet,
    duration: float,
    command: str,
    real: Sequence[ModeReport],
    sims: Mapping[str, Sequence[ModeReport]],
    startup: dict[str, float | None],
    extra_s: float | None = None,
    fit: StartFit | None = None,
    warm_workers: int = 0,
    loads: Mapping[str, tuple[float, float] | None] | None = None,
) -> str:
    shape = SHAPES[shape_name]
    windows = ", ".join(f"{a:.0f}-{b:.0f} s" for a, b in shape.peak_windows())
    lines = [
        f"# Autoscaling through a traffic spike: {shape_name}",
        "",
        # A rescore's line is already markdown (its runs' commands and its own, each a code span).
        f"* Command: {command}" if command.startswith("`") else f"* Command: `{command}`",
        f"* Date: {datetime.now(UTC).isoformat(timespec='seconds')}",
        "* Machine: " + ", ".join(f"{k} {v}" for k, v in machine_info().items()),
        f'* Shape: `{shape.model_dump_json()}`; {duration:g} s; peak windows ("during"): {windows}',
        f"* Requests: {fleet.input_tokens} prompt / {fleet.output_tokens} output tokens, SLO TTFT "
        f"{fleet.slo_ttft_ms:g} ms, TPOT {fleet.slo_tpot_ms:g} ms; router objective {fleet.objective}",
        "* Fleet: "
        + "; ".join(
            f"{v.name} ({v.preset}, {v.max_running_requests} slots, replicas {v.min_replicas}..{v.max_replicas}, "
            f"{v.gpus_per_replica} GPU each, cold start {v.profile(fleet.startup_time_scale).startup_s:g} s)"
            for v in fleet.variants
        ),
        f"* Scaling: look-back {fleet.look_back_period_s:g} s, metrics every {fleet.metrics_interval_s:g} s, "
        f"target batch utilization {fleet.target_batch_utilization:g}, scale ahead {fleet.scale_ahead_s:g} s; "
        "Serve's default with "
        + ", ".join(f"target_ongoing_requests {v.target_ongoing_requests:g} ({v.name})" for v in fleet.variants),
        f"* Ray worker pool: {warm_workers} warm workers with the app imported"
        if warm_workers
        else "* Ray worker pool: Ray's defaults",
    ]
    lines += [
        f"* Load average (1 min) during the {mode} trace: mean {mean:.1f}, max {peak:.1f}"
        for mode, summary in (loads or {}).items()
        if summary is not None
        for mean, peak in [summary]
    ]
    lines += [
        "",
        "| | |",
        "|---|---|",
    ]
    for name, s in startup.items():
        lines.append(f"| measured mean start-up of a new {name} replica | {'-' if s is None else f'{s:.1f} s'} |")
    lines += ["", "## Real stack and simulator", ""]
    lines += table([*real, *(r for rs in sims.values() for r in rs)])
    lines += [
        "",
        "Runs: `serve`: the real stack; `sim`: `python -m sim`'s engine and Serve models on the same fleet, trace, "
        "router and policy, first with the presets' cold starts only"
        + (
            f", then with this machine's replica starts: Ray starts {fit.concurrency} worker processes at a time, "
            f"{fit.process_s:g} s each, then {fit.after_s:g} s more before the engine's cold start (fitted to the "
            f"starts this run measured during the spike, rms error {fit.rms_error_s:g} s; sim/replica_starts.py)"
            if fit is not None
            else ""
            if extra_s is None
            else f", then with {extra_s:.1f} s more per replica start (what this machine measured)"
        ),
        "",
    ]
    if real and "sim (measured start-up)" in sims:
        lines += ["## Simulated less measured", "", "| mode | attainment during (points) | replica ratio (points) |"]
        lines += ["|---|---:|---:|"]
        for r, simulated in zip(real, sims["sim (measured start-up)"], strict=True):
            gap = sim_gap(r, simulated)
            a = gap["attainment_during_points"]
            lines.append(
                f"| {r.mode} | {'-' if a is None else f'{a:+.1f}'} | {gap['replica_ratio_points'] or 0:+.1f} |"
            )
        lines.append("")
    lines += ["![offered load and replicas per variant](load_and_replicas.png)", ""]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    modes: list[Mode] = args.mode or list(MODES)
    command = shlex.join(["python", "-m", "bench", *getattr(args, "argv", sys.argv[1:])])
    payload: dict[str, Any] = {"command": command, "shapes": {}}
    exit_code = 0
    for shape_name in args.shape or ["step"]:
        fleet = fleet_for(shape_name)
        if args.startup_time_scale is not None:
            fleet = fleet.model_copy(update={"startup_time_scale": args.startup_time_scale})
        if args.scale_ahead_s is not None:
            fleet = fleet.model_copy(update={"scale_ahead_s": args.scale_ahead_s})
        shape, duration = SHAPES[shape_name], args.duration_s or DURATIONS_S[shape_name]
        out = args.out / shape_name
        out.mkdir(parents=True, exist_ok=True)
        real: list[ModeReport] = []
        ready_by_mode: dict[str, list[ReplicaSample]] = {}
        records_by_mode: dict[str, list[RequestRecord]] = {}
        starts_by_mode: dict[str, list[dict[str, Any]]] = {}
        traces: dict[str, float] = {}  # when each autoscaled mode's trace began (epoch s): its replica starts follow
        loads: dict[str, tuple[float, float] | None] = {}
        if not args.sim_only and not args.rescore:
            import ray

            cpus = cluster_cpus(args.num_cpus, args.warm_workers)
            with local_serve("bench-spike", num_cpus=cpus, env=warm_pool_env(args.warm_workers)) as url:
                for mode in modes:
                    print(f"bench spike: {shape_name}, mode {mode}", file=sys.stderr)
                    records, ready, began, samples = _run_mode(mode, shape_name, url, out, args, fleet)
                    real.append(mode_report(mode, "serve", records, ready, fleet, shape.peak_windows(), duration))
                    ready_by_mode[mode], records_by_mode[mode] = ready, records
                    loads[mode] = load_summary(samples)
                    # Which command recorded this mode (a rescore may join modes recorded one run at a time).
                    (out / mode / "command.txt").write_text(f"{command}\n")
                    if mode != "fixed":
                        traces[mode] = began
                node = ray._private.worker._global_node  # this process started the cluster: its logs are local
                logs = Path(node.get_logs_dir_path()) / "serve"  # type: ignore[attr-defined]
                starts = replica_starts(logs)
            # Starts that ended during a trace (serve.run returns once the deploy's replicas run): scale-ups under
            # load, kept beside the mode's records so that --rescore can fit the simulator's start queue again.
            for traced, began in traces.items():
                starts_by_mode[traced] = trace_starts(starts, began, duration)
                write_jsonl_dicts(starts_by_mode[traced], out / traced / "starts.jsonl")
        if args.rescore:
            earlier = json.loads((out / "spike.json").read_text())
            recorded = {m: (out / m / "command.txt") for m in modes}
            if all(path.exists() for path in recorded.values()):
                runs = "; ".join(f"`{path.read_text().strip()}` ({m})" for m, path in recorded.items())
                command = f"{runs}; rescored with `{command}`"
            else:
                command = f"`{earlier.get('command', '?')}`, rescored with `{command}`"
            for mode in modes:
                records, ready = read_jsonl(out / mode / "records.jsonl"), read_samples(out / mode / "replicas.jsonl")
                real.append(mode_report(mode, "serve", records, ready, fleet, shape.peak_windows(), duration))
                ready_by_mode[mode], records_by_mode[mode] = ready, records
                if (out / mode / "loadavg.jsonl").exists():  # runs recorded before the bench sampled it have none
                    loads[mode] = load_summary(read_jsonl_dicts(out / mode / "loadavg.jsonl"))
                if mode != "fixed" and (out / mode / "starts.jsonl").exists():
                    starts_by_mode[mode] = read_jsonl_dicts(out / mode / "starts.jsonl")
        all_starts = [s for mode_starts in starts_by_mode.values() for s in mode_starts]
        startup = {
            v.name: mean_of([s["total_s"] for s in all_starts if s["variant"] == v.name]) for v in fleet.variants
        }
        if args.rescore and not all_starts:
            startup = earlier["measured_startup_s"]  # a run from before starts.jsonl: its mean start-ups only
        sims = {"sim (preset start-up)": _simulate(fleet, shape_name, duration, modes, args.seed, 0.0)}
        concurrency = startup_concurrency(args.num_cpus, args.warm_workers)
        fit = start_fit(starts_by_mode, shape.peak_windows(), concurrency)
        measured = [
            s - v.profile(fleet.startup_time_scale).startup_s
            for v in fleet.variants
            if (s := startup[v.name]) is not None
        ]
        extra = None
        if fit is None and measured:
            # What Serve adds to the engine's own cold start on this machine (a worker process, imports, placement).
            extra = max(0.0, sum(measured) / len(measured))
        elif fit is None and args.sim_extra_startup_s is not None:
            extra = args.sim_extra_startup_s
        if fit is not None or extra is not None:
            sims["sim (measured start-up)"] = _simulate(
                fleet, shape_name, duration, modes, args.seed, extra or 0.0, fit
            )
            if extra is not None:
                payload.setdefault("extra_startup_s", {})[shape_name] = extra
        (out / "report.md").write_text(
            render(shape_name, fleet, duration, command, real, sims, startup, extra, fit, args.warm_workers, loads)
        )
        if records_by_mode:
            plots.spike_plot(
                records_by_mode, ready_by_mode, [v.name for v in fleet.variants], out / "load_and_replicas.png"
            )
        payload["shapes"][shape_name] = {
            "command": command,
            "fleet": fleet.model_dump(),
            "shape": shape.model_dump(),
            "duration_s": duration,
            "measured_startup_s": startup,
            "start_queue": None if fit is None else dataclasses.asdict(fit),
            "warm_workers": args.warm_workers,
            "load_average_1m": {m: None if v is None else {"mean": v[0], "max": v[1]} for m, v in loads.items()},
            "serve": {r.mode: r.model_dump() for r in real},
            "sim": {k: {r.mode: r.model_dump() for r in rs} for k, rs in sims.items()},
        }
        for r in [*real, *sims.get("sim (measured start-up)", sims["sim (preset start-up)"])]:
            print(
                f"{shape_name} {r.mode} ({r.source}): attainment during {r.during.slo_attainment or 0:.1%}, "
                f"overall {r.overall.slo_attainment or 0:.1%}; rejected {r.rejected}; cut {r.streams_cut}; "
                f"replica-s {r.replica_seconds:.0f} ({r.replica_ratio:.2f} of fixed)"
            )
        exit_code = max(exit_code, 1 if any(r.streams_cut for r in real) else 0)
        (out / "spike.json").write_text(json.dumps(payload["shapes"][shape_name], indent=2) + "\n")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
    print(f"wrote {args.out}")
    return exit_code
