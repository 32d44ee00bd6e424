"""``python -m bench overhead``: the same model and load through four paths, side by side in one run.

``--model emulated:<preset>`` runs the emulated engine (engines/emulated.py) in every path instead: its direct
path is then held against what the preset says for the same load (:mod:`bench.expectation`) and reports the
emulation's own CPU per token; there is no engine server (b) for it.

(a) ``direct``: the hf engine in-process; (b) ``engine_server``: ``transformers serve`` on the same checkpoint;
(c) ``naive_serve``: a naive Ray Serve app yielding one token per Ray object (:mod:`bench.naive_serve`);
(d) ``stack``: this project's app (``serve_app.app.build_app``, one variant, default coalescing); (e) ``sidecar``,
only when asked: the stack in front of (b), one ``openai_server`` variant relaying the engine server (the TensorRT-LLM
sidecar hop; ``--engine-server fake-trtllm`` runs the tests' fake trtllm-serve in (b) and (e), bench/sidecar.py). Each
path runs every concurrency level as a closed loop of identical requests (same prompts, same lengths, outputs
forced to ``max_tokens``) and reports output tokens/s and TTFT p50/p99, plus tokens/s as a fraction of (a)
and (b). The paths run one after another, each alone on the machine (the previous one is stopped first).

``--quick`` is the small run that finishes within ~3 minutes on a 2-core CPU machine, Ray's start included.
Writes ``--json PATH`` (the :class:`~bench.overhead_results.OverheadResult`) and, with ``--out DIR``,
``report.md``, ``tokens_per_s.png``, ``results.json`` and every request's record under ``records/``.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import os
import shlex
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import engine_server, host_speed, overhead_results, pyspy, sidecar
from bench.client import TargetConfig
from bench.direct import run_direct
from bench.engine_server import EngineServerSettings
from bench.expectation import closed_loop
from bench.load_processes import LoadProcesses, processes_for
from bench.loadgen import LoadConfig, LoadResult
from bench.local_serve import local_serve
from bench.overhead_results import (
    DEFAULT_PATHS,
    LOAD_GENERATOR,
    PATHS,
    LevelResult,
    OverheadResult,
    PathResult,
    cpu_breakdown,
    level_result,
)
from bench.process_cpu import cpu_by_role, cpu_delta
from bench.prompt_pairs import PromptPair, output_lengths, prompt_pairs, request_specs
from engines import event_loop
from engines.config import CoalesceConfig, EmulatedEngineConfig, HFEngineConfig, OpenAIServerEngineConfig
from engines.emulated import EmulatedEngine
from engines.factory import make_engine
from engines.ports import free_port
from engines.presets import EMULATED_PREFIX
from engines.protocol import SamplingParams
from traffic.records import write_jsonl
from traffic.report import machine_info
from traffic.summary import latency_stats, summarize
from traffic.workload import RequestSpec

NAME = "overhead"
DEFAULT_CONCURRENCY = (1, 16, 64)
OUTPUT_SPREAD = 0.25  # output lengths within 1 +- this of --max-tokens after the first round (--output-spread)
WARMUP_REQUESTS, WARMUP_TOKENS = 2, 8
# Every path samples alike: OpenAI's defaults, made explicit (temperature 1, no top-p / top-k cut).
SAMPLING = SamplingParams(temperature=1.0, top_p=1.0, top_k=0)
# CPU only: KV cache budget per running sequence and tokens per step, as the hf engine picks them itself
# (engines/hf.py). Set explicitly here so that transformers serve gets the very same values.
CPU_KV_TOKENS_PER_SEQUENCE, CPU_MAX_BATCH_TOKENS = 1024, 256


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        NAME,
        help="one model, one load, four paths (in-process, engine server, naive Serve, our stack)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--model",
        default="builtin:tiny",
        help="builtin:<name>, random:<shape>, an hf model dir, or emulated:<preset> (engines/presets.py)",
    )
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    p.add_argument(
        "--concurrency", nargs="+", type=int, default=None, help=f"streams per level (default {DEFAULT_CONCURRENCY})"
    )
    p.add_argument(
        "--num-requests", type=int, default=None, help="per level (default max(8, 8 x concurrency): eight rounds)"
    )
    p.add_argument("--prompt-tokens", type=int, default=None, help="prompt length (default 64; --quick 32)")
    p.add_argument("--max-tokens", type=int, default=None, help="output length (default 128; --quick 64)")
    p.add_argument(
        "--arrivals",
        choices=("staggered", "lockstep"),
        default="staggered",
        help="staggered (default): each level's first round ends at spread times, so every path runs the steady "
        "state a server sees (prefills mixed into decode iterations); lockstep: all requests start and end together",
    )
    p.add_argument(
        "--output-spread",
        type=float,
        default=OUTPUT_SPREAD,
        help=f"after each level's first round, every request's output length is --max-tokens times a seeded draw "
        f"within 1 +- this (default {OUTPUT_SPREAD}; the same lengths on every path): with one length for all, a "
        "serving path's jitter locks the closed loop's streams into clumps the engine alone never sees "
        "(bench/prompt_pairs.output_lengths); 0: every request --max-tokens",
    )
    p.add_argument(
        "--paths",
        nargs="+",
        choices=list(PATHS),
        default=list(DEFAULT_PATHS),
        help=f"which paths to run (default: {' '.join(DEFAULT_PATHS)})",
    )
    p.add_argument(
        "--engine-server",
        choices=sidecar.ENGINE_SERVERS,
        default="transformers",
        help="the server of engine_server and sidecar: transformers serve on the model, or the tests' fake "
        "trtllm-serve (bench/sidecar.py)",
    )
    p.add_argument(
        "--stream-interval", type=int, default=1, help="fake-trtllm: trtllm-serve's stream_interval (default 1)"
    )
    p.add_argument("--fake-step-ms", type=float, default=5.0, help="fake-trtllm: its decode step (default 5 ms)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads of every engine (default: all)")
    p.add_argument(
        "--max-running-requests", type=int, default=None, help="engine batch size (default: the top concurrency)"
    )
    p.add_argument(
        "--coalesce-ms",
        type=float,
        default=None,
        help="the stack's coalescing interval (default: the engine config's); the naive app always uses 0",
    )
    p.add_argument(
        "--engine-process",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="whether the stack's hf engine runs its batch loop in its own process (engine_process; default: the "
        "config's default, on); the engine alone always runs in-process",
    )
    p.add_argument("--ingress-replicas", type=int, default=1, help="the stack's ingress replicas (default 1)")
    p.add_argument(
        "--engine-transport",
        choices=("channel", "grpc", "ray"),
        default=None,
        help="how the stack's engine replica streams to its ingress (ingress.engine_transport; default: the "
        "config's default, channel)",
    )
    p.add_argument(
        "--serve-env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="environment for the Ray cluster the command starts (every Serve process inherits it), "
        "e.g. RAY_SERVE_THROUGHPUT_OPTIMIZED=1; repeatable",
    )
    p.add_argument(
        "--client-processes",
        type=int,
        default=None,
        help="load-generator processes of the HTTP paths (default: one per 64 streams of a level, at most a quarter "
        "of the host's cores, so one on a small host; bench/load_processes.py)",
    )
    p.add_argument("--quick", action="store_true", help="small and fast: builtin:tiny, fewer, shorter requests")
    p.add_argument("--json", type=Path, default=None, help="write the summary JSON here")
    p.add_argument("--out", type=Path, default=None, help="directory for report.md, the plot and the records")
    p.add_argument("--request-timeout-s", type=float, default=300.0)
    p.add_argument("--progress", action="store_true", help="tqdm progress bars per level")
    p.add_argument(
        "--profile",
        type=Path,
        default=None,
        help="py-spy every process of each path during each level; raw profiles and summaries go here",
    )


# ---------------------------------------------------------------------------------------------- planning


def num_requests(concurrency: Sequence[int], explicit: int | None, quick: bool) -> dict[int, int]:
    """Requests per level: ``explicit``, else eight rounds of the closed loop (``quick`` too: its requests are shorter).

    Eight, not two: a level's first round opens every stream's connection and starts the streams in lockstep,
    and its last round ends with the loop draining; with two rounds those ends were half of what was measured
    (the stack's 64-stream figure on this 2-core CPU: 0.94 of the engine at eight rounds, 0.91-0.95 at two).
    Quick once ran one round: its short requests then ended within a fraction of a second, and the first round's TTFT
    decided the tokens/s (docs/streaming.md)."""
    del quick  # the same rounds; kept in the signature for the callers that say which run they plan
    if explicit is not None:
        return {c: explicit for c in concurrency}
    return {c: max(8, 8 * c) for c in concurrency}


def resolve_device(device: str) -> str:
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def engine_config(
    model_dir: str, device: str, *, threads: int | None, max_running: int, context_length: int
) -> HFEngineConfig:
    """The one engine config every path runs (the stack's variant, the naive replica, the in-process engine)."""
    page_size = HFEngineConfig.model_fields["page_size"].default
    num_blocks = max_batch_tokens = None
    if device == "cpu":
        num_blocks = max(
            math.ceil(max_running * CPU_KV_TOKENS_PER_SEQUENCE / page_size), math.ceil(2 * context_length / page_size)
        )
        max_batch_tokens = CPU_MAX_BATCH_TOKENS
    return HFEngineConfig(
        model=model_dir,
        device="cuda" if device == "cuda" else "cpu",
        # Serve replicas get one OpenMP thread by default; every path gets the same number on purpose.
        num_threads=(threads or len(os.sched_getaffinity(0))) if device == "cpu" else threads,
        max_running_requests=max_running,
        max_queued_requests=max(256, 4 * max_running),
        num_blocks=num_blocks,
        max_batch_tokens=max_batch_tokens,
        engine_process=False,  # the engine alone, in this process; the stack's variant decides its own
    )


def emulated_engine_config(model: str, *, max_running: int | None) -> EmulatedEngineConfig:
    """``emulated:<preset>`` as every path runs it: no start-up delay, a queue that never refuses the bench."""
    figures = {"max_running_requests": max_running} if max_running else {}
    return EmulatedEngineConfig(preset=model, profile=figures, startup_time_scale=0.0, max_queued_requests=1 << 16)


def engine_actor_options(device: str) -> dict[str, Any]:
    return {"num_cpus": 1, "num_gpus": 1 if device == "cuda" else 0}


BenchEngine = HFEngineConfig | EmulatedEngineConfig


def stack_app_args(
    engine: BenchEngine | OpenAIServerEngineConfig,
    *,
    device: str,
    max_tokens: int,
    max_concurrency: int,
    ingress_replicas: int = 1,
    engine_transport: str | None = None,
) -> dict:
    """A one-variant serve_app config on ``engine`` (everything else at its default)."""
    resources = engine_actor_options(device)
    ingress: dict[str, Any] = {"num_replicas": ingress_replicas, "max_ongoing_requests": max(1024, 2 * max_concurrency)}
    if engine_transport is not None:
        ingress["engine_transport"] = engine_transport
    return {
        "model_name": "bench",
        "tokenizer": engine.tokenizer if isinstance(engine, EmulatedEngineConfig) else engine.model,
        "variants": [
            {
                "name": "engine",
                "engine": engine.model_dump(mode="json"),
                "resources": resources,
                "max_ongoing_requests": max(64, 2 * max_concurrency),
                "num_replicas": 1,
            }
        ],
        "ingress": ingress,
        "limits": {"max_tokens_limit": max(4096, max_tokens)},
        # Every path serves every request: admission control (router/shedding.py) would answer a closed loop's
        # queue with 429s, and the comparison would be of policies, not of the streaming path's cost.
        "router": {"shed_ttft_ratio": None},
    }


def _context_length(model_dir: str) -> int:
    config = json.loads((Path(model_dir) / "config.json").read_text())
    return int(config.get("max_position_embeddings") or 2048)


# ---------------------------------------------------------------------------------------------- running


class _Run:
    """One invocation: the plan, the prompts, and where records go."""

    def __init__(self, args: argparse.Namespace) -> None:
        from transformers import AutoTokenizer

        from engines.model_ref import resolve_model

        self.args = args
        self.concurrency = sorted(set(args.concurrency or DEFAULT_CONCURRENCY))
        self.requests = num_requests(self.concurrency, args.num_requests, args.quick)
        self.prompt_tokens = args.prompt_tokens or (32 if args.quick else 64)
        self.max_tokens = args.max_tokens or (64 if args.quick else 128)
        self.emulated = args.model.startswith(EMULATED_PREFIX)
        self.engine: BenchEngine
        if self.emulated:
            if args.engine_process:
                raise SystemExit("--engine-process: an emulated engine has no batch loop of its own to move")
            self.device = "cpu"  # it needs no accelerator: the replicas reserve none
            self.engine = emulated_engine_config(args.model, max_running=args.max_running_requests)
            self.model_dir = resolve_model(self.engine.tokenizer)
        else:
            self.device = resolve_device(args.device)
            self.model_dir = resolve_model(args.model)  # builds builtin / random models once, here
            self.engine = engine_config(
                self.model_dir,
                self.device,
                threads=args.threads,
                max_running=args.max_running_requests or max(self.concurrency),
                context_length=_context_length(self.model_dir),
            )
        tokenizer = AutoTokenizer.from_pretrained(self.model_dir)
        self.pairs: list[PromptPair] = prompt_pairs(tokenizer, max(self.requests.values()), self.prompt_tokens)

    @property
    def serve_env(self) -> dict[str, str]:
        env = {}
        for item in self.args.serve_env:
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise SystemExit(f"--serve-env {item!r}: use KEY=VALUE")
            env[key] = value
        return env

    @property
    def stack_engine(self) -> BenchEngine:
        """The stack's variant: the same engine as a user's replica runs it (the hf engine in its own process, with
        the replica's own thread count on CPU), and --coalesce-ms, --[no-]engine-process and --threads when given."""
        update: dict[str, Any] = {}
        if self.args.coalesce_ms is not None:
            update["coalesce"] = CoalesceConfig(interval_ms=self.args.coalesce_ms)
        if isinstance(self.engine, HFEngineConfig):
            # The engine alone runs in-process (engine_config); the stack's replica has the config's default.
            default = HFEngineConfig.model_fields["engine_process"].default
            update["engine_process"] = default if self.args.engine_process is None else self.args.engine_process
            if self.device == "cpu" and self.args.threads is None:
                # The replica's own choice (HFEngineConfig.for_replica: its reserved CPUs, one here); the engine
                # alone keeps every core. Two OpenMP threads in a replica spin at every barrier while the stack's
                # other processes hold a core (docs/streaming.md).
                update["num_threads"] = None
        return self.engine.model_copy(update=update) if update else self.engine

    def specs(self, concurrency: int, *, as_text: bool) -> list[RequestSpec]:
        return request_specs(
            self.pairs[: self.requests[concurrency]],
            self.max_tokens,
            as_text=as_text,
            staggered=self.staggered(concurrency),
            spread=self.args.output_spread,
        )

    def staggered(self, concurrency: int) -> int:
        return concurrency if self.args.arrivals == "staggered" else 0

    def warmup(self, *, as_text: bool) -> list[RequestSpec]:
        return request_specs(self.pairs[:WARMUP_REQUESTS], WARMUP_TOKENS, as_text=as_text)

    @contextlib.contextmanager
    def observe(self, path: str, concurrency: int) -> Iterator[dict[str, float]]:
        """Reads CPU time by process around one level (and profiles it with --profile); fills the yielded dict."""
        cpu: dict[str, float] = {}
        profiles: contextlib.AbstractContextManager[dict[str, Path]] = contextlib.nullcontext({})
        if self.args.profile is not None:
            pids = {"bench": os.getpid(), **pyspy.pids_by_role()}
            profiles = pyspy.recording(pids, self.args.profile, f"{path}-c{concurrency}")
        before = cpu_by_role()
        with profiles as paths:
            yield cpu
        spent = cpu_delta(before, cpu_by_role())
        # This process is the engine itself in (a), only the client in the HTTP paths.
        own = "engine_in_process" if path == "direct" else LOAD_GENERATOR
        cpu.update({own if role == "bench" else role: s for role, s in spent.items()})
        if paths:
            summary = self.args.profile / f"{path}-c{concurrency}-summary.txt"
            summary.write_text(pyspy.summarize_profiles(paths))

    def keep(
        self, path: str, concurrency: int, result: LoadResult, cpu: dict[str, float], *, client_processes: int = 1
    ) -> LevelResult:
        records = sorted(result.records, key=lambda r: r.index)
        if self.args.out is not None:
            write_jsonl(records, self.args.out / "records" / f"{path}-c{concurrency}.jsonl")
        level = level_result(concurrency, summarize(records), cpu).model_copy(
            update={"client_processes": client_processes}
        )
        clients = f" from {client_processes} client processes" if client_processes > 1 else ""
        print(
            f"  {path:13s} c={concurrency:<4d} {level.tokens_per_s:9.1f} tok/s  TTFT p50 "
            f"{level.ttft_p50_ms or 0:8.1f} ms  p99 {level.ttft_p99_ms or 0:8.1f} ms  message gap p99 "
            f"{level.message_gap_p99_ms or 0:6.1f} ms ({level.tokens_per_message or 0:.1f} tok)  "
            f"errors {level.errors}  "
            f"serving CPU {level.cpu_ms_per_token() or 0:.2f} ms/tok ({cpu_breakdown(level)}){clients}",
            flush=True,
        )
        return level

    # ---------------------------------------------------------------- (a)

    async def direct(self) -> dict[int, LevelResult]:
        engine = make_engine(self.engine)
        await engine.start()
        try:
            await run_direct(engine, self.warmup(as_text=False), WARMUP_REQUESTS, SAMPLING, run_id="warmup")
            levels = {}
            for c in self.concurrency:
                emulation = (
                    (engine.scheduler_cpu_s, engine.generated_tokens, engine.iterations)
                    if isinstance(engine, EmulatedEngine)
                    else None
                )
                with self.observe("direct", c) as cpu:
                    result = await run_direct(engine, self.specs(c, as_text=False), c, SAMPLING)
                levels[c] = self.keep("direct", c, result, cpu)
                if isinstance(engine, EmulatedEngine) and emulation is not None:
                    levels[c] = self.against_profile(engine, c, levels[c], *emulation)
            return levels
        finally:
            await engine.shutdown()

    def against_profile(
        self,
        engine: EmulatedEngine,
        concurrency: int,
        level: LevelResult,
        cpu_before: float,
        tokens_before: int,
        iterations_before: int,
    ) -> LevelResult:
        """The level with what the emulated engine's profile says it should measure, the emulation's CPU and the
        engine's own step at p99 (the iterations of this level)."""
        made = engine.generated_tokens - tokens_before
        # This level's iterations are the deque's last ones (a slice from -0 would be all of them).
        ran = engine.iterations - iterations_before
        steps = list(engine.step_durations_s)[-ran:] if ran > 0 else []
        expected = closed_loop(
            engine.profile,
            concurrency=concurrency,
            requests=self.requests[concurrency],
            prompt_tokens=self.prompt_tokens,
            max_tokens=output_lengths(
                self.requests[concurrency],
                self.max_tokens,
                staggered=self.staggered(concurrency),
                spread=self.args.output_spread,
            ),
        )
        level = level.model_copy(
            update={
                "profile": expected,
                "emulation_us_per_token": 1e6 * (engine.scheduler_cpu_s - cpu_before) / made if made else None,
                "engine_step_p99_ms": latency_stats(steps).p99,
            }
        )
        print(
            f"  {'':13s} profile: {expected.tokens_per_s:9.1f} tok/s  TTFT p50 {expected.ttft_p50_ms:8.2f} ms  "
            f"TPOT p50 {expected.tpot_p50_ms:.2f} ms (measured {level.tpot_p50_ms or 0:.2f})  "
            f"emulation {level.emulation_us_per_token or 0:.2f} us/token  "
            f"step p99 {level.engine_step_p99_ms or 0:.2f} ms",
            flush=True,
        )
        return level

    # ---------------------------------------------------------------- HTTP paths

    def client_processes(self, concurrency: int) -> int:
        """The load generator's processes for a level of ``concurrency`` streams (--client-processes, else
        bench/load_processes.processes_for this host)."""
        if self.args.client_processes is not None:
            return max(1, min(self.args.client_processes, concurrency))
        return processes_for(concurrency, len(os.sched_getaffinity(0)))

    def http_levels(self, path: str, target: TargetConfig, *, as_text: bool) -> dict[int, LevelResult]:
        from bench.load import drive

        # Started before anything is timed, kept for every level of the path (their CPU is the load generator's).
        children = max(self.client_processes(c) for c in self.concurrency)
        with LoadProcesses(children) if children > 1 else contextlib.nullcontext() as pool:

            def load(specs: list[RequestSpec], concurrency: int) -> LoadResult:
                config = LoadConfig(concurrency=concurrency, num_requests=len(specs), progress=self.args.progress)
                processes = self.client_processes(concurrency)
                if pool is not None and processes > 1:
                    return pool.run(target, config, specs, processes=processes)
                result, _ = event_loop.run(drive(target, config, iter(specs), poll=False, poll_interval_s=1.0))
                return result

            load(self.warmup(as_text=as_text), WARMUP_REQUESTS)
            levels = {}
            for c in self.concurrency:
                with self.observe(path, c) as cpu:
                    result = load(self.specs(c, as_text=as_text), c)
                levels[c] = self.keep(path, c, result, cpu, client_processes=self.client_processes(c) if pool else 1)
        return levels

    def http_target(self, url: str, model: str) -> TargetConfig:
        return TargetConfig(
            url=url,
            model=model,
            request_timeout_s=self.args.request_timeout_s,
            extra_body={"temperature": SAMPLING.temperature, "top_p": SAMPLING.top_p},
        )

    def engine_server(self) -> dict[int, LevelResult]:
        with self.running_engine_server(self.model_dir) as (url, settings):
            if settings is None:  # the fake trtllm-serve: token-id prompts and ignore_eos, as trtllm-serve takes
                target = self.http_target(url, sidecar.FAKE_MODEL)
                return self.http_levels("engine_server", target, as_text=False)
            target = engine_server.target(url, settings, SAMPLING).model_copy(
                update={"request_timeout_s": self.args.request_timeout_s}
            )
            return self.http_levels("engine_server", target, as_text=True)

    @contextlib.contextmanager
    def running_engine_server(self, model_dir: str) -> Iterator[tuple[str, EngineServerSettings | None]]:
        """(b)'s server, also (e)'s: transformers serve on ``model_dir`` with the hf engine's KV settings (and its
        settings), or the fake trtllm-serve (None)."""
        out = self.args.out or Path("/tmp")
        if self.args.engine_server == "fake-trtllm":
            work = out / f"fake-trtllm-{os.getpid()}"
            with sidecar.running_fake(
                free_port(), stream_interval=self.args.stream_interval, step_ms=self.args.fake_step_ms, work=work
            ) as url:
                yield url, None
            return
        assert isinstance(self.engine, HFEngineConfig)
        settings = EngineServerSettings(
            model_dir=model_dir,
            device=self.device,
            dtype="bfloat16" if self.device == "cuda" else "float32",  # the hf engine's "auto"
            page_size=self.engine.page_size,
            num_blocks=self.engine.num_blocks,
            max_batch_tokens=self.engine.max_batch_tokens,
            port=free_port(),
        )
        log = out / f"transformers-serve-{os.getpid()}.log"
        threads = self.engine.num_threads
        env = {"OMP_NUM_THREADS": str(threads)} if threads else {}
        with _env(env), engine_server.running_server(settings, log) as url:
            yield url, settings

    def sidecar_path(self, serve_url: str, *, delete: bool) -> dict[int, LevelResult]:
        """(e): the stack's one variant on the openai_server backend, relaying (b)'s server (reached by url)."""
        from serve_app.app import build_app

        kind = self.args.engine_server
        coalesce = (
            CoalesceConfig() if self.args.coalesce_ms is None else CoalesceConfig(interval_ms=self.args.coalesce_ms)
        )
        with contextlib.ExitStack() as stack:
            model_dir = self.model_dir
            if kind == "transformers":
                work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-sidecar-")))
                model_dir = str(sidecar.endless_copy(self.model_dir, work))
            url, _ = stack.enter_context(self.running_engine_server(model_dir))
            batch_slots = self.engine.max_running_requests if isinstance(self.engine, HFEngineConfig) else 0
            engine = sidecar.sidecar_engine(kind, url, model_dir=model_dir, coalesce=coalesce, batch_slots=batch_slots)
            app_args = stack_app_args(  # the server holds the accelerator, not the replica
                engine,
                device="cpu",
                max_tokens=self.max_tokens,
                max_concurrency=max(self.concurrency),
                engine_transport=self.args.engine_transport,
            )
            app_args["tokenizer"] = self.model_dir
            # transformers serve takes no ignore_eos: its model's end never comes (sidecar.endless_copy).
            target = self.http_target(serve_url, "bench").model_copy(update={"ignore_eos": kind != "transformers"})
            return self._serve_app(
                "sidecar", lambda: build_app(app_args), serve_url, "bench", delete=delete, target=target
            )

    def serve_paths(self, wanted: Sequence[str]) -> dict[str, PathResult]:
        """(c) and (d) on one local Ray cluster of our own, one app at a time."""

        from bench.naive_serve import build_naive_app
        from serve_app.app import build_app

        apps: dict[str, Callable[[], Any]] = {
            "naive_serve": lambda: build_naive_app(self.engine, engine_actor_options=engine_actor_options(self.device)),
            "stack": lambda: build_app(
                stack_app_args(
                    self.stack_engine,
                    device=self.device,
                    max_tokens=self.max_tokens,
                    max_concurrency=max(self.concurrency),
                    ingress_replicas=self.args.ingress_replicas,
                    engine_transport=self.args.engine_transport,
                )
            ),
        }
        models = {"naive_serve": "naive", "stack": "bench"}
        results: dict[str, PathResult] = {}
        with local_serve("bench-overhead", env=self.serve_env) as url:
            for name in wanted:
                last = name == wanted[-1]  # serve.shutdown() tears the last app down anyway
                if name == "sidecar":
                    results[name] = _attempt(name, functools.partial(self.sidecar_path, url, delete=not last))
                    continue
                results[name] = _attempt(
                    name, functools.partial(self._serve_app, name, apps[name], url, models[name], delete=not last)
                )
        return results

    def _serve_app(
        self,
        name: str,
        build: Callable[[], Any],
        url: str,
        model: str,
        *,
        delete: bool,
        target: TargetConfig | None = None,
    ) -> dict[int, LevelResult]:
        from ray import serve

        started = time.perf_counter()
        serve.run(build(), name=name, route_prefix="/")
        print(f"  {name} deployed in {time.perf_counter() - started:.1f} s", flush=True)
        levels = self.http_levels(name, target or self.http_target(url, model), as_text=False)
        if not delete:
            return levels
        # The next app gets the machine to itself. A slow teardown is reported, not fatal: the numbers stand.
        started = time.perf_counter()
        try:
            serve.delete(name)
        except TimeoutError as exc:
            print(f"  {name}: {exc}", file=sys.stderr, flush=True)
        print(f"  {name} deleted in {time.perf_counter() - started:.1f} s", flush=True)
        return levels


@contextlib.contextmanager
def _env(values: dict[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, old in saved.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old


def _attempt(name: str, fn: Callable[[], dict[int, LevelResult]]) -> PathResult:
    """Runs one path; a failure becomes the path's ``skipped`` reason (the other paths still run)."""
    print(f"{name}: {PATHS[name]}", flush=True)
    try:
        return PathResult(description=PATHS[name], levels=fn())
    except Exception as exc:
        traceback.print_exc()
        return PathResult(description=PATHS[name], skipped=f"failed: {type(exc).__name__}: {exc}"[:500])


def _machine(device: str) -> dict[str, str]:
    info = machine_info()
    if device == "cuda":
        import torch

        info["gpu"] = f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}"
    return info


def _arrivals_note(run: _Run) -> str:
    if run.args.arrivals == "staggered":
        return (
            "Arrivals staggered: in each level the first request of worker i asks for (i + 1) / concurrency of "
            "max_tokens, so streams end at spread times from then on in every path (bench/prompt_pairs.py)."
        )
    return "Arrivals in lockstep: every level's requests start together and end together (--arrivals lockstep)."


def _lengths_note(run: _Run) -> str:
    spread = run.args.output_spread
    if spread > 0:
        return (
            f"Output lengths after the first round: max_tokens times a seeded draw within 1 +- {spread:g}, the same "
            "on every path, so a path's jitter cannot lock the closed loop's streams into clumps (--output-spread)."
        )
    return "Every request after the first round asks for max_tokens (--output-spread 0)."


def _notes(run: _Run) -> list[str]:
    return [_arrivals_note(run), _lengths_note(run), *_engine_notes(run)]


def _engine_notes(run: _Run) -> list[str]:
    engine = run.engine
    if isinstance(engine, EmulatedEngineConfig):
        profile = engine.engine_profile()
        return [
            f"Every path runs the emulated engine of preset {engine.preset} ({profile.source}): "
            f"{profile.max_running_requests} batch slots, {profile.max_num_tokens} tokens an iteration, no start-up "
            f"delay; tokens of {engine.tokenizer}. It keeps the profile's time and does no model work.",
            "Outputs are forced to max_tokens (ignore_eos). The direct path's 'profile' figures are the simulator's "
            "replica on the same closed loop (bench/expectation.py).",
            f"The stack coalesces tokens every {run.stack_engine.coalesce.interval_ms:g} ms after the first; the "
            "naive app sends every iteration on its own.",
        ]
    notes = [
        f"Every path runs the same engine config: {engine.device}, max_running_requests "
        f"{engine.max_running_requests}, page_size {engine.page_size}, num_blocks {engine.num_blocks}, "
        f"max_batch_tokens {engine.max_batch_tokens}, torch threads {engine.num_threads or 'default'}"
        + (
            " (the stack's replica: its own choice, one thread per reserved CPU)."
            if isinstance(run.stack_engine, HFEngineConfig) and run.stack_engine.num_threads is None
            else "."
        ),
        "Outputs are forced to max_tokens: ignore_eos for (a), (c), (d); a per-request generation_config "
        "with eos_token_id -1 for transformers serve (it refuses unknown fields).",
        "transformers serve shares one sampling config across its batch (no per-request processors); "
        "the hf engine applies per-request temperature/top-p/top-k processors. Same sampling values.",
        "The naive app sets max_ongoing_requests high; Serve's default (5) would queue streams instead.",
        f"The stack coalesces tokens every {run.stack_engine.coalesce.interval_ms:g} ms after the first; the "
        "naive app sends every engine step (one token) on its own.",
    ]
    if getattr(run.stack_engine, "engine_process", False):
        notes.append(
            "The stack's engine ran its batch loop in its own process (engine_process: true); its CPU shows as "
            "'<deployment>/engine_process'."
        )
    if run.args.ingress_replicas != 1:
        notes.append(f"The stack ran {run.args.ingress_replicas} ingress replicas.")
    if run.args.engine_transport is not None:
        notes.append(f"The stack's engine replica streamed to its ingress by '{run.args.engine_transport}'.")
    if run.serve_env:
        notes.append("The Ray cluster ran with " + ", ".join(f"{k}={v}" for k, v in run.serve_env.items()) + ".")
    if run.device == "cpu":
        notes.append(
            "On CPU the load generator, Ray's proxy and replicas share the machine's cores with the engine; "
            "the in-process path has them to itself."
        )
    return notes


def _server_notes(run: _Run) -> list[str]:
    """What (b) and (e) ran against."""
    if not {"engine_server", "sidecar"} & set(run.args.paths):
        return []
    if run.args.engine_server == "fake-trtllm":
        notes = [
            f"engine_server and sidecar ran the tests' fake trtllm-serve (no model work, a decode step of "
            f"{run.args.fake_step_ms:g} ms per stream, stream_interval {run.args.stream_interval}), not the model: "
            "its CPU is the server's HTTP and SSE framing only."
        ]
    else:
        notes = [
            "The sidecar's transformers serve loads a copy of the model whose end-of-sequence id is never produced "
            "(it takes no ignore_eos), with the same KV settings as engine_server's."
        ]
    if "sidecar" in run.args.paths:
        interval = CoalesceConfig().interval_ms if run.args.coalesce_ms is None else run.args.coalesce_ms
        notes.append(
            f"sidecar: one openai_server variant reaching the server by url, coalescing every {interval:g} ms; "
            "the server's CPU is 'engine_server', the relay's the engine replica's and the ingress's."
        )
    return notes


def _engine_server_unavailable(run: _Run) -> str | None:
    """Why (b) and (e) cannot run, or None."""
    if run.args.engine_server == "fake-trtllm":
        return sidecar.fake_unavailable_reason()
    return "an emulated engine has no server of its own" if run.emulated else engine_server.unavailable_reason()


def execute(args: argparse.Namespace) -> OverheadResult:
    started = time.perf_counter()
    if args.profile is not None and not pyspy.available():
        raise SystemExit("--profile needs py-spy (pip install py-spy)")
    run = _Run(args)
    speed = [host_speed.python_ms()]
    print(
        f"overhead: {args.model} on {run.device}, prompts {run.prompt_tokens} tokens, outputs {run.max_tokens} "
        f"tokens, levels {run.concurrency} ({run.requests} requests); host: {speed[0]:.2f} ms of fixed Python work",
        flush=True,
    )
    paths: dict[str, PathResult] = {}
    if "direct" in args.paths:
        paths["direct"] = _attempt("direct", lambda: event_loop.run(run.direct()))
    server_missing = _engine_server_unavailable(run)
    if "engine_server" in args.paths:
        if server_missing is None:
            paths["engine_server"] = _attempt("engine_server", run.engine_server)
        else:
            print(f"engine_server: skipped ({server_missing})", flush=True)
            paths["engine_server"] = PathResult(description=PATHS["engine_server"], skipped=server_missing)
    if "sidecar" in args.paths and server_missing is not None:
        print(f"sidecar: skipped ({server_missing})", flush=True)
        paths["sidecar"] = PathResult(description=PATHS["sidecar"], skipped=server_missing)
    serve_wanted = [p for p in ("naive_serve", "stack", "sidecar") if p in args.paths and p not in paths]
    if serve_wanted:
        try:
            paths.update(run.serve_paths(serve_wanted))
        except Exception as exc:  # Ray itself failed (start, import): the paths measured so far still count
            traceback.print_exc()
            reason = f"failed: {type(exc).__name__}: {exc}"[:500]
            paths.update({p: PathResult(description=PATHS[p], skipped=reason) for p in serve_wanted})
    speed.append(host_speed.python_ms())
    print(f"host: {speed[-1]:.2f} ms of fixed Python work after the last path ({speed[0]:.2f} before the first)")
    command = shlex.join(["python", "-m", "bench", *getattr(args, "argv", sys.argv[1:])])
    return OverheadResult(
        command=command,
        machine=_machine(run.device),
        date=datetime.now(UTC).isoformat(timespec="seconds"),
        model=args.model,
        device=run.device,
        prompt_tokens=run.prompt_tokens,
        max_tokens=run.max_tokens,
        concurrency=run.concurrency,
        num_requests=run.requests,
        paths=overhead_results.with_ratios({name: paths[name] for name in PATHS if name in paths}),
        wall_s=time.perf_counter() - started,
        host_python_ms=[round(ms, 3) for ms in speed],
        notes=_notes(run) + _server_notes(run),
    )


def run(args: argparse.Namespace) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # no hub: models are local directories
    result = execute(args)
    text = result.model_dump_json(indent=2)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n")
    if args.out is not None:
        (args.out / "results.json").parent.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(text + "\n")
        print(f"wrote {overhead_results.write_report(result, args.out)}")
    print()
    print(overhead_results.render_table(result))
    print(f"\n{result.wall_s:.0f} s in all")
    failed = [n for n, p in result.paths.items() if p.skipped is not None and p.skipped.startswith("failed")]
    return 1 if failed else 0
