"""``python -m bench load``: drive an OpenAI-compatible server and write records, summary, plots and report.

Writes into ``--out DIR``: ``records.jsonl`` (one :class:`~traffic.records.RequestRecord` a line),
``summary.json`` (:class:`~traffic.summary.Summary`), ``replicas.jsonl`` (when the server answers
``GET /variants``), ``ttft_cdf.png``, ``latency_over_time.png``, ``load_over_time.png`` and ``report.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import shlex
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Literal, TypeVar, cast

import httpx

from bench.client import MonotonicClock, TargetConfig
from bench.loadgen import LoadConfig, LoadResult, run_load
from bench.replicas import ReplicaSample, poll_variants
from engines import event_loop
from traffic.arrivals import (
    ArrivalSpec,
    BurstArrivals,
    ConstantArrivals,
    PoissonArrivals,
    SpikeArrivals,
    arrival_times,
)
from traffic.output import write_outputs
from traffic.summary import Summary
from traffic.trace import TraceRow, load_trace
from traffic.workload import (
    RequestSpec,
    WorkloadConfig,
    build_requests,
    parse_length,
    parse_tier,
    trace_requests,
)

T = TypeVar("T")


def _token_id_range(text: str) -> tuple[int, int]:
    low, sep, high = text.partition("..")
    try:
        return (int(low), int(high)) if sep else (0, int(low))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: use LOW..HIGH or N") from None


def _arg_type(parse: Callable[[str], T]) -> Callable[[str], T]:
    """Turn a parser's ValueError into argparse's usage error."""

    def wrapped(text: str) -> T:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return wrapped


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "load",
        help="drive an OpenAI-compatible server with a workload; write records, summary, plots, report",
        description=__doc__,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    target = p.add_argument_group("target")
    target.add_argument("--url", required=True, help="base URL, e.g. http://127.0.0.1:8000")
    target.add_argument("--model", required=True, help="the model field of each request")
    target.add_argument("--api", choices=["completions", "chat"], default="completions")
    target.add_argument("--api-key", default=None, help="sent as a bearer token")
    target.add_argument("--allow-remote", action="store_true", help="allow a non-loopback URL")
    target.add_argument("--request-timeout-s", type=float, default=300.0, help="hard limit per request")
    target.add_argument("--no-ignore-eos", dest="ignore_eos", action="store_false", help="do not send ignore_eos: true")
    target.add_argument("--extra-body", type=json.loads, default={}, help="JSON object merged into each body")

    when = p.add_argument_group("when (closed loop with --concurrency, else an arrival process)")
    when.add_argument("--concurrency", type=int, default=None, help="closed loop: this many streams")
    when.add_argument("--arrival", choices=["poisson", "constant", "bursts", "spike"], default="poisson")
    when.add_argument("--rate", type=float, default=1.0, help="req/s (poisson, constant; base rate of spike)")
    when.add_argument("--burst-size", type=int, default=8)
    when.add_argument("--burst-period-s", type=float, default=10.0)
    when.add_argument("--spike-rate", type=float, default=10.0, help="req/s during the spike")
    when.add_argument("--spike-start-s", type=float, default=10.0)
    when.add_argument("--spike-duration-s", type=float, default=10.0)
    when.add_argument("--spike-even", action="store_true", help="evenly spaced spike arrivals, not Poisson")
    when.add_argument("--trace", type=Path, default=None, help="replay a .jsonl/.csv trace (times and lengths)")
    when.add_argument("--trace-speedup", type=float, default=1.0, help="replay the trace this many times faster")
    when.add_argument("--num-requests", type=int, default=None, help="send at most this many")
    when.add_argument("--duration-s", type=float, default=None, help="start no request after this")

    what = p.add_argument_group("what")
    what.add_argument(
        "--input-len",
        type=_arg_type(parse_length),
        default="128",
        help="N | uniform:LOW:HIGH | normal:MEAN:STD[:LOW[:HIGH]] prompt tokens",
    )
    what.add_argument(
        "--output-len",
        type=_arg_type(parse_length),
        default="64",
        help="max_tokens, same forms as --input-len",
    )
    what.add_argument(
        "--prompt-mode",
        choices=["token_ids", "text"],
        default=None,
        help="default: token_ids for completions, text for chat",
    )
    what.add_argument(
        "--vocab-size",
        type=_token_id_range,
        default="256..500",
        metavar="LOW..HIGH",
        help="prompt token ids are drawn from [LOW, HIGH) (N means 0..N)",
    )
    what.add_argument("--slo-ttft-ms", type=float, default=None, help="TTFT target sent as x-slo-ttft-ms")
    what.add_argument("--slo-tpot-ms", type=float, default=None, help="TPOT target sent as x-slo-tpot-ms")
    what.add_argument(
        "--tier",
        type=_arg_type(parse_tier),
        action="append",
        default=[],
        help="NAME[:WEIGHT[:TTFT_MS[:TPOT_MS]]], repeatable: x-slo-tier mixed by weight",
    )
    what.add_argument("--seed", type=int, default=0)

    out = p.add_argument_group("output")
    out.add_argument("--out", type=Path, required=True, help="directory for records, summary, plots, report")
    out.add_argument("--json", type=Path, default=None, help="also write the summary JSON here")
    out.add_argument(
        "--no-poll-variants",
        dest="poll_variants",
        action="store_false",
        help="do not poll GET /variants for replica counts",
    )
    out.add_argument("--poll-interval-s", type=float, default=1.0)
    out.add_argument("--bin-s", type=float, default=1.0, help="bin width of the offered-load plot")
    out.add_argument("--no-progress", dest="progress", action="store_false")
    return p


def arrival_spec(args: argparse.Namespace) -> ArrivalSpec:
    match args.arrival:
        case "constant":
            return ConstantArrivals(rate=args.rate)
        case "bursts":
            return BurstArrivals(size=args.burst_size, period_s=args.burst_period_s)
        case "spike":
            return SpikeArrivals(
                base_rate=args.rate,
                spike_rate=args.spike_rate,
                start_s=args.spike_start_s,
                duration_s=args.spike_duration_s,
                poisson=not args.spike_even,
            )
    return PoissonArrivals(rate=args.rate)


def configs(
    args: argparse.Namespace, trace: Sequence[TraceRow] | None = None
) -> tuple[TargetConfig, LoadConfig, WorkloadConfig]:
    prompt_mode = cast(
        Literal["token_ids", "text"], args.prompt_mode or ("text" if args.api == "chat" else "token_ids")
    )
    if args.api == "chat" and prompt_mode != "text":
        raise ValueError("--api chat sends text: use --prompt-mode text")
    if args.trace is not None and args.concurrency is not None:
        raise ValueError("--trace replays its own send times: leave out --concurrency")
    target = TargetConfig(
        url=args.url,
        model=args.model,
        api=args.api,
        api_key=args.api_key,
        ignore_eos=args.ignore_eos,
        extra_body=args.extra_body,
        request_timeout_s=args.request_timeout_s,
        allow_remote=args.allow_remote,
    )
    unbounded = args.num_requests is None and args.duration_s is None
    load = LoadConfig(
        concurrency=args.concurrency,
        # A trace is its own bound.
        num_requests=len(trace) if trace is not None and unbounded else args.num_requests,
        duration_s=args.duration_s,
        progress=args.progress,
    )
    workload = WorkloadConfig(
        input_len=args.input_len,
        output_len=args.output_len,
        prompt_mode=prompt_mode,
        token_id_range=args.vocab_size,
        slo_ttft_ms=args.slo_ttft_ms,
        slo_tpot_ms=args.slo_tpot_ms,
        tiers=args.tier,
        seed=args.seed,
    )
    return target, load, workload


def requests(
    args: argparse.Namespace, workload: WorkloadConfig, trace: Sequence[TraceRow] | None = None
) -> Iterator[RequestSpec]:
    if trace is not None:
        return trace_requests(workload, trace, args.trace_speedup)
    if args.concurrency is not None:
        return build_requests(workload, itertools.repeat(None))  # closed loop: no send times, endless
    return build_requests(workload, arrival_times(arrival_spec(args), workload.seed))


async def drive(
    target: TargetConfig,
    load: LoadConfig,
    specs: Iterator[RequestSpec],
    *,
    poll: bool,
    poll_interval_s: float,
) -> tuple[LoadResult, list[ReplicaSample]]:
    """Run the load and, beside it, the replica poller (when asked)."""
    clock = MonotonicClock()
    if not poll:
        return await run_load(target, load, specs, clock=clock), []  # its own connections, one per stream
    async with httpx.AsyncClient() as client:  # the poller's (a client costs ~35 ms of CPU: only when polling)
        stop = asyncio.Event()
        poller = asyncio.create_task(
            poll_variants(client, target.url, interval_s=poll_interval_s, stop=stop, clock=clock, run_start=clock.now())
        )
        try:
            result = await run_load(target, load, specs, clock=clock)
        finally:
            stop.set()
        samples = await poller
    return result, samples


def _headline(summary: Summary) -> str:
    s = summary
    return (
        f"{s.requests} requests ({s.failed} failed) in {s.duration_s:.1f} s: "
        f"{s.output_tokens_per_s:.1f} output tok/s, TTFT p50 {s.ttft_ms.p50 or 0:.1f} ms "
        f"p99 {s.ttft_ms.p99 or 0:.1f} ms, SLO attainment {s.slo_attainment:.1%}, "
        f"goodput {s.goodput:.2f} req/s"
    )


def run(args: argparse.Namespace) -> int:
    try:
        trace = load_trace(args.trace) if args.trace is not None else None
        target, load, workload = configs(args, trace)
        specs = requests(args, workload, trace)
    except (ValueError, OSError) as exc:  # pydantic's ValidationError is a ValueError
        print(f"bench load: {exc}", file=sys.stderr)
        return 2
    result, samples = event_loop.run(
        drive(target, load, specs, poll=args.poll_variants, poll_interval_s=args.poll_interval_s)
    )
    command = shlex.join(["python", "-m", "bench", *getattr(args, "argv", sys.argv[1:])])
    summary = write_outputs(args.out, result.records, samples, command=command, bin_s=args.bin_s, json_path=args.json)
    print(_headline(summary))
    print(f"wrote {args.out / 'report.md'}")
    return 0
