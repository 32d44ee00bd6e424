"""``python -m bench soak``: stream against the default app for minutes, cancelling some streams, and
check that nothing leaks.

1. Deploys ``serve_config.yaml``'s application (``serve_app.app.build_app``, as ``serve run`` would) on
   its own local Ray cluster, Serve's HTTP on a free loopback port.
2. Warms up: ``concurrency`` full streams pinned to each variant, so that models, caches and the
   allocations of a full batch are in the starting memory and do not read as growth.
3. Reads the RSS of the ingress and of each engine replica.
4. Streams at a fixed concurrency (closed loop) for ``--minutes``; a ``--cancel-fraction`` of the
   streams is abandoned by the client after a random number of chunks (the connection is dropped, as
   a user who closes the tab does), which is the path where engine requests leak if abort is broken.
5. Settles: polls ``GET /variants`` until every engine replica reports nothing running, queued or
   registered (``EngineStats.registered_requests``), or a deadline passes.
6. Reads the RSS again.

Exit status 1 when an engine still holds a request (or cannot say how many it holds), or when a stream
that was not cancelled failed or ended without ``data: [DONE]``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import itertools
import os
import random
import shlex
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import psutil
from pydantic import BaseModel, Field
from tqdm.auto import tqdm

from bench.client import MonotonicClock, TargetConfig, send_request
from bench.loadgen import LoadConfig, run_load
from bench.local_serve import local_serve
from bench.process_cpu import role_of
from bench.replicas import variants_url
from traffic.records import RequestRecord, write_jsonl
from traffic.report import machine_info
from traffic.summary import NO_STATUS
from traffic.workload import LengthDist, NormalLength, RequestSpec, UniformLength, WorkloadConfig, build_requests

REPO = Path(__file__).resolve().parent.parent
DEFAULT_CONFIG = REPO / "serve_config.yaml"
INGRESS = "Ingress"  # the ingress deployment's name
ENGINE_PREFIX = "variant-"  # engine deployments are "variant-<name>" (VariantConfig.deployment_name)
MISSING_DONE = "missing_done"  # errors_by_type key of a stream that just stopped, without error or [DONE]
MIB = 1 << 20


class SoakConfig(BaseModel):
    duration_s: float = Field(gt=0, description="Start no stream after this many seconds of load.")
    concurrency: int = Field(8, ge=1, description="Streams kept open at once (closed loop), over all models.")
    pin_variants: bool = Field(
        True,
        description="Split the streams between the public model (routed) and each variant by name, so that every "
        "engine sees the load even when the router prefers one; else every stream is routed.",
    )
    cancel_fraction: float = Field(
        0.3, ge=0, le=1, description="Share of streams the client abandons after a random number of chunks."
    )
    input_len: LengthDist = Field(
        default_factory=lambda: UniformLength(low=16, high=256), description="Prompt length in tokens."
    )
    output_len: LengthDist = Field(
        default_factory=lambda: UniformLength(low=16, high=128), description="max_tokens of each stream."
    )
    seed: int = Field(0, description="Seeds the workload and which streams are cancelled where.")
    settle_timeout_s: float = Field(
        60.0, gt=0, description="After the load, how long the engines get to report themselves idle."
    )
    request_timeout_s: float = Field(120.0, gt=0, description="Hard limit on one stream.")


class Outcomes(BaseModel):
    requests: int = Field(description="Streams sent during the load (warm-up not counted).")
    completed: int = Field(description="Ended with data: [DONE] and no error.")
    cancelled: int = Field(description="Abandoned by the client on purpose.")
    failed: int = Field(description="Not cancelled, and ended in an error or without data: [DONE].")
    missing_done: int = Field(description="Of the failed: no error, but the stream stopped without [DONE].")
    errors_by_status: dict[str, int] = Field(description="Failed streams by HTTP status ('none': no response).")
    errors_by_type: dict[str, int] = Field(description="Failed streams by OpenAI error type.")
    by_variant: dict[str, int] = Field(description="Streams by the variant that served them (x-route-variant).")


class EngineState(BaseModel):
    """One engine replica's load as the stats board last saw it."""

    variant: str
    replica: str
    running: int
    queued: int
    registered: int = Field(description="Requests the engine still tracks; -1: the engine cannot say.")

    @property
    def idle(self) -> bool:
        return self.running == 0 and self.queued == 0 and self.registered == 0


class SoakResult(BaseModel):
    command: str
    date: str
    url: str
    config: SoakConfig
    load_s: float = Field(description="First stream sent to last stream ended.")
    warmup_failed: int = Field(description="Warm-up streams that did not complete.")
    outcomes: Outcomes
    rss_start: dict[str, int] = Field(description="RSS in bytes after the warm-up, by 'ROLE pid N'.")
    rss_end: dict[str, int] = Field(description="RSS in bytes after the settle, by 'ROLE pid N'.")
    engines: list[EngineState] = Field(description="Each engine replica's state at the end of the settle.")
    registered_requests: int | None = Field(
        description="Engine requests still registered at the end, over all replicas; None if unknown."
    )
    problems: list[str] = Field(description="Why the soak failed; empty when it passed.")

    @property
    def passed(self) -> bool:
        return not self.problems


# ---------------------------------------------------------------- pure parts


def with_cancellations(specs: Iterable[RequestSpec], fraction: float, seed: int) -> Iterator[RequestSpec]:
    """Mark about ``fraction`` of ``specs`` to be abandoned after a random number of chunks (seeded)."""
    rng = random.Random(f"{seed}:cancel")
    for spec in specs:
        if rng.random() < fraction:
            # In the first half of the stream: engines coalesce tokens into chunks, so a stream has at most
            # max_tokens chunks and often fewer, and a point past its end would cancel nothing.
            after = rng.randint(1, max(1, spec.max_tokens // 2))
            yield dataclasses.replace(spec, cancel_after_chunks=after)
        else:
            yield spec


def split_concurrency(total: int, ways: int) -> list[int]:
    """``total`` streams over ``ways`` closed loops, as evenly as can be (the first ones get the remainder)."""
    base, extra = divmod(total, ways)
    return [base + (i < extra) for i in range(ways)]


def interleave_index(specs: Iterable[RequestSpec], loop: int, loops: int) -> Iterator[RequestSpec]:
    """Renumber one loop's specs so that the indices of ``loops`` loops run together never collide."""
    for spec in specs:
        yield dataclasses.replace(spec, index=spec.index * loops + loop)


def stream_failed(record: RequestRecord) -> bool:
    """A stream that was not cancelled and did not end cleanly (an error, or no [DONE])."""
    return not record.cancelled and (not record.ok or not record.done)


def outcomes(records: Sequence[RequestRecord]) -> Outcomes:
    failed = [r for r in records if stream_failed(r)]
    return Outcomes(
        requests=len(records),
        completed=sum(not r.cancelled and not stream_failed(r) for r in records),
        cancelled=sum(r.cancelled for r in records),
        failed=len(failed),
        missing_done=sum(r.ok for r in failed),
        errors_by_status=dict(
            sorted(Counter(str(r.status) if r.status is not None else NO_STATUS for r in failed).items())
        ),
        errors_by_type=dict(sorted(Counter(r.error_type or MISSING_DONE for r in failed).items())),
        by_variant=dict(sorted(Counter(r.variant for r in records if r.variant is not None).items())),
    )


def engine_states(payload: Any) -> list[EngineState]:
    """Each engine replica in a ``GET /variants`` answer (its ``replica_stats``); malformed entries skipped."""
    variants = payload.get("variants") if isinstance(payload, dict) else None
    states = []
    for variant in variants if isinstance(variants, list) else []:
        if not isinstance(variant, dict):
            continue
        for stats in variant.get("replica_stats") or []:
            try:
                states.append(
                    EngineState(
                        variant=variant["name"],
                        replica=stats["replica"],
                        running=stats["running_requests"],
                        queued=stats["queued_requests"],
                        registered=stats.get("registered_requests", -1),
                    )
                )
            except (KeyError, TypeError, ValueError):
                continue
    return states


def registered_total(states: Sequence[EngineState]) -> int | None:
    """Requests still registered over all replicas; None when there are none to ask or one cannot say."""
    if not states or any(s.registered < 0 for s in states):
        return None
    return sum(s.registered for s in states)


def find_problems(result_outcomes: Outcomes, states: Sequence[EngineState], warmup_failed: int) -> list[str]:
    problems = []
    registered = registered_total(states)
    if not states:
        problems.append("no engine replica reported its stats")
    elif registered is None:
        unknown = sorted({s.variant for s in states if s.registered < 0})
        problems.append(f"engines of {', '.join(unknown)} do not report registered requests")
    elif registered > 0:
        problems.append(f"{registered} engine requests still registered after the load ended")
    busy = [s for s in states if s.running or s.queued]
    if busy:
        problems.append(f"{len(busy)} engine replicas still running or queueing requests after the load ended")
    if result_outcomes.requests == 0:
        problems.append("no stream was sent")
    if result_outcomes.failed:
        o = result_outcomes
        problems.append(f"{o.failed} streams that were not cancelled failed ({o.missing_done} without [DONE])")
    if warmup_failed:
        problems.append(f"{warmup_failed} warm-up streams failed")
    return problems


def is_watched(role: str) -> bool:
    return role == INGRESS or role.startswith(ENGINE_PREFIX)


def replica_rss(root_pid: int | None = None) -> dict[str, int]:
    """RSS in bytes of the ingress and engine replicas among this process's descendants, by 'ROLE pid N'.

    A local Ray cluster started by this process is its descendant, and Ray renames each replica's worker
    after its deployment (``ray::ServeReplica:<app>:<deployment>``), so the process tree says which is
    which. Ray's state API (``ray.util.state.list_actors``) would too, but it is served by the dashboard,
    which a cluster started with ``include_dashboard=False`` (this one, and the tests') does not run.
    """
    root = psutil.Process(root_pid or os.getpid())
    found = {}
    for process in root.children(recursive=True):
        try:
            role = role_of(" ".join(process.cmdline()))
            rss = process.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue  # ended between the listing and the read
        if is_watched(role):
            found[f"{role} pid {process.pid}"] = rss
    return dict(sorted(found.items()))


def rss_rows(start: dict[str, int], end: dict[str, int]) -> list[tuple[str, int | None, int | None]]:
    """(process, start bytes, end bytes) for every process seen at either end (replicas come and go)."""
    return [(key, start.get(key), end.get(key)) for key in sorted(start.keys() | end.keys())]


def _length(dist: LengthDist) -> str:
    if isinstance(dist, UniformLength):
        return f"uniform {dist.low}..{dist.high}"
    if isinstance(dist, NormalLength):
        return f"normal {dist.mean:g}±{dist.std:g}"
    return str(dist.value)


def _mib(value: int | None) -> str:
    return "-" if value is None else f"{value / MIB:,.1f}"


def render_report(result: SoakResult) -> str:
    r, o, c = result, result.outcomes, result.config
    lines = [
        "# Soak",
        "",
        f"* Command: `{r.command}`",
        f"* Date: {r.date}",
        "* Machine: " + ", ".join(f"{k} {v}" for k, v in machine_info().items()),
        f"* Load: {c.concurrency} streams at once for {c.duration_s:g} s"
        f"{', split over the routed model and each variant by name' if c.pin_variants else ', all routed'}, "
        f"{c.cancel_fraction:.0%} set to be "
        f"cancelled, prompt tokens {_length(c.input_len)}, max_tokens {_length(c.output_len)}",
        f"* Verdict: **{'passed' if r.passed else 'FAILED'}**",
        *(f"  * {p}" for p in r.problems),
        "",
        "## Streams",
        "",
        "| | |",
        "|---|---:|",
        f"| sent | {o.requests} |",
        f"| completed ([DONE]) | {o.completed} |",
        f"| cancelled by the client | {o.cancelled} |",
        f"| failed | {o.failed} |",
        f"| of which without [DONE] | {o.missing_done} |",
        f"| load (s) | {r.load_s:.1f} |",
        f"| warm-up failures | {r.warmup_failed} |",
        *(f"| served by {name} | {n} |" for name, n in o.by_variant.items()),
        "",
    ]
    if o.failed:
        lines += ["| status | count |", "|---|---:|", *(f"| {k} | {n} |" for k, n in o.errors_by_status.items()), ""]
        lines += ["| type | count |", "|---|---:|", *(f"| {k} | {n} |" for k, n in o.errors_by_type.items()), ""]
    lines += [
        "## Memory (RSS, MiB)",
        "",
        "| process | after warm-up | at the end | change |",
        "|---|---:|---:|---:|",
    ]
    for key, start, end in rss_rows(r.rss_start, r.rss_end):
        change = f"{(end - start) / MIB:+,.1f}" if start is not None and end is not None else "-"
        lines.append(f"| {key} | {_mib(start)} | {_mib(end)} | {change} |")
    registered = "unknown" if r.registered_requests is None else str(r.registered_requests)
    lines += [
        "",
        f"## Engines after the load (registered requests: {registered})",
        "",
        "| variant | replica | running | queued | registered |",
        "|---|---|---:|---:|---:|",
        *(f"| {s.variant} | {s.replica} | {s.running} | {s.queued} | {s.registered} |" for s in r.engines),
        "",
    ]
    return "\n".join(lines)


def headline(result: SoakResult) -> str:
    o = result.outcomes
    registered = "unknown" if result.registered_requests is None else result.registered_requests
    return (
        f"soak {'passed' if result.passed else 'FAILED'}: {o.requests} streams in {result.load_s:.1f} s "
        f"({o.completed} completed, {o.cancelled} cancelled, {o.failed} failed); "
        f"engine requests still registered: {registered}"
    )


# ---------------------------------------------------------------- against a server


async def get_variants(client: httpx.AsyncClient, url: str) -> Any:
    """The ``GET /variants`` answer, or None when it cannot be had right now."""
    try:
        response = await client.get(variants_url(url), timeout=5.0)
        return response.json() if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None


async def settle(
    client: httpx.AsyncClient, url: str, *, timeout_s: float, interval_s: float = 0.5
) -> list[EngineState]:
    """Poll until every engine replica is idle or ``timeout_s`` passes; the last states seen.

    Cancelled streams are aborted asynchronously (the server notices the dropped connection, then the
    engine cleans up), so a count read the instant the load stops could show requests still leaving.
    """
    deadline = time.monotonic() + timeout_s
    states: list[EngineState] = []
    while True:
        payload = await get_variants(client, url)
        if payload is not None:
            states = engine_states(payload)
        if (states and all(s.idle for s in states)) or time.monotonic() >= deadline:
            return states
        await asyncio.sleep(interval_s)


async def warm_up(
    client: httpx.AsyncClient, target: TargetConfig, variants: Sequence[str], specs: Sequence[RequestSpec]
) -> int:
    """Send ``specs`` to each variant (pinned by name), each variant's streams at once; the failures."""
    clock = MonotonicClock()
    failed = 0
    for variant in variants:
        pinned = target.model_copy(update={"model": variant})
        now = clock.now()
        records = await asyncio.gather(
            *(
                send_request(
                    client,
                    pinned,
                    spec,
                    request_id=f"soak-warmup-{variant}-{spec.index}",
                    clock=clock,
                    start=now,
                    run_start=now,
                    wall_start=time.time(),
                )
                for spec in specs
            )
        )
        failed += sum(stream_failed(r) for r in records)
    return failed


async def _load(
    target: TargetConfig,
    variants: Sequence[str],
    config: SoakConfig,
    workload: WorkloadConfig,
    on_record: Callable[[RequestRecord], None],
) -> tuple[list[RequestRecord], float]:
    """The closed loops (routed, then one per pinned variant) run together; all records, in index order."""
    models = [target.model, *variants] if config.pin_variants else [target.model]
    shares = split_concurrency(config.concurrency, len(models))
    loops = []
    for i, (model, concurrency) in enumerate(zip(models, shares, strict=True)):
        if concurrency == 0:
            continue
        seeded = workload.model_copy(update={"seed": workload.seed + i})  # different prompts per loop
        endless = build_requests(seeded, itertools.repeat(None))  # closed loop: no send times
        specs = interleave_index(with_cancellations(endless, config.cancel_fraction, seeded.seed), i, len(models))
        load = LoadConfig(concurrency=concurrency, duration_s=config.duration_s, progress=False)
        pinned = target.model_copy(update={"model": model})
        loops.append(run_load(pinned, load, specs, on_record=on_record))  # its own connections, one per stream
    results = await asyncio.gather(*loops)
    records = sorted((r for result in results for r in result.records), key=lambda r: r.index)
    return records, max(result.duration_s for result in results)


async def soak(
    url: str,
    model: str,
    config: SoakConfig,
    *,
    rss: Callable[[], dict[str, int]] = replica_rss,
    progress: bool = True,
    command: str = "",
) -> tuple[SoakResult, list[RequestRecord]]:
    """Warm up, read RSS, stream with cancellations for ``config.duration_s``, settle, read RSS again.

    Returns the result and the load's records (warm-up left out), by index.
    """
    target = TargetConfig(url=url, model=model, request_timeout_s=config.request_timeout_s)
    workload = WorkloadConfig(input_len=config.input_len, output_len=config.output_len, seed=config.seed)
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(limits=limits) as client:
        payload = await get_variants(client, url)
        variants = [v["name"] for v in (payload or {}).get("variants", [])]
        warmup_specs = list(build_requests(workload, [None] * config.concurrency))
        warmup_failed = await warm_up(client, target, variants, warmup_specs)
        rss_start = rss()
        with tqdm(disable=not progress, unit="req", desc="soak") as bar:
            records, load_s = await _load(target, variants, config, workload, on_record=lambda r: bar.update())
        states = await settle(client, url, timeout_s=config.settle_timeout_s)
        rss_end = rss()
    counted = outcomes(records)
    summary = SoakResult(
        command=command,
        date=datetime.now(UTC).isoformat(timespec="seconds"),
        url=url,
        config=config,
        load_s=load_s,
        warmup_failed=warmup_failed,
        outcomes=counted,
        rss_start=rss_start,
        rss_end=rss_end,
        engines=states,
        registered_requests=registered_total(states),
        problems=find_problems(counted, states, warmup_failed),
    )
    return summary, records


# ---------------------------------------------------------------- command line


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "soak",
        help="stream with cancellations for minutes against the default app; check RSS and leaked requests",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--minutes", type=float, default=5.0, help="how long to stream (default 5)")
    p.add_argument("--quick", action="store_true", help="stream for 1 minute (overrides --minutes)")
    p.add_argument("--concurrency", type=int, default=8, help="streams at once (default 8)")
    p.add_argument("--cancel-fraction", type=float, default=0.3, help="share of streams abandoned (default 0.3)")
    p.add_argument(
        "--routed-only",
        dest="pin_variants",
        action="store_false",
        help="send every stream to the public model (by default the streams are split between it and each "
        "variant by name, so that every engine is soaked even when the router prefers one)",
    )
    p.add_argument("--config", type=Path, default=DEFAULT_CONFIG, help="the Serve config whose app to deploy")
    p.add_argument("--num-cpus", type=int, default=4, help="logical CPUs of the local Ray cluster (default 4)")
    p.add_argument("--settle-timeout-s", type=float, default=60.0, help="deadline for the engines to go idle")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, default=None, help="write the result JSON here")
    p.add_argument("--out", type=Path, default=None, help="write report.md and records.jsonl into this directory")
    p.add_argument("--no-progress", dest="progress", action="store_false")


def app_args(config_path: Path) -> dict[str, Any]:
    """The one application's ``args`` of a Serve config file."""
    import yaml

    return dict(yaml.safe_load(config_path.read_text())["applications"][0]["args"])


def run(args: argparse.Namespace) -> int:
    try:
        config = SoakConfig(
            duration_s=60.0 if args.quick else args.minutes * 60.0,
            concurrency=args.concurrency,
            cancel_fraction=args.cancel_fraction,
            pin_variants=args.pin_variants,
            settle_timeout_s=args.settle_timeout_s,
            seed=args.seed,
        )
        deploy_args = app_args(args.config)
    except (ValueError, OSError, KeyError, IndexError) as exc:
        print(f"bench soak: {exc}", file=sys.stderr)
        return 2
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # builtin models are generated offline; Ray's workers inherit it
    from ray import serve

    from serve_app.app import build_app

    command = shlex.join(["python", "-m", "bench", *getattr(args, "argv", sys.argv[1:])])
    with local_serve("bench-soak", num_cpus=args.num_cpus) as url:
        serve.run(build_app(deploy_args), name="llm", route_prefix="/")
        result, records = asyncio.run(
            soak(url, deploy_args["model_name"], config, progress=args.progress, command=command)
        )
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(result.model_dump_json(indent=2) + "\n")
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        write_jsonl(records, args.out / "records.jsonl")
        (args.out / "report.md").write_text(render_report(result))
    for key, start, end in rss_rows(result.rss_start, result.rss_end):
        print(f"  {key}: RSS {_mib(start)} -> {_mib(end)} MiB")
    print(headline(result))
    for problem in result.problems:
        print(f"  problem: {problem}")
    return 0 if result.passed else 1
