"""`python -m bench engine`: an engine alone, in-process, at several concurrency levels.

Measures what the engine itself can do (no Ray, no HTTP): output tokens/s over the whole batch of requests
and time to first token, for each model at each concurrency. The serving-path comparisons build on these.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from engines.config import HFEngineConfig
from engines.protocol import GenerationRequest, SamplingParams

if TYPE_CHECKING:
    from engines.hf import HFEngine

NAME = "engine"


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(NAME, help="engine alone, in-process: tokens/s and TTFT per model and concurrency")
    p.add_argument("--models", nargs="+", default=["builtin:tiny", "builtin:small"])
    p.add_argument("--concurrency", nargs="+", type=int, default=[1, 8, 32])
    p.add_argument("--prompt-tokens", type=int, default=64)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: all cores)")
    p.add_argument("--json", type=Path, default=None, help="write the results here")


async def _one(engine: HFEngine, rid: str, prompt: list[int], max_tokens: int) -> tuple[float, int]:
    start = time.perf_counter()
    ttft = None
    tokens = 0
    request = GenerationRequest(rid, prompt, SamplingParams(max_tokens=max_tokens, ignore_eos=True, temperature=0.8))
    async for delta in engine.generate(request):
        if ttft is None and delta.token_ids:
            ttft = time.perf_counter() - start
        tokens += len(delta.token_ids)
    return ttft or 0.0, tokens


async def measure(engine: HFEngine, concurrency: int, prompt_tokens: int, max_tokens: int) -> dict:
    """Runs ``concurrency`` identical-length requests at once; returns throughput and TTFT figures."""
    vocab = len(engine.tokenizer)
    prompt = [(37 * i + 11) % (vocab - 1) + 1 for i in range(prompt_tokens)]
    await _one(engine, "warmup", prompt, 4)
    start = time.perf_counter()
    results = await asyncio.gather(*[_one(engine, f"b{i}", prompt, max_tokens) for i in range(concurrency)])
    wall = time.perf_counter() - start
    ttfts = sorted(r[0] for r in results)
    tokens = sum(r[1] for r in results)
    return {
        "concurrency": concurrency,
        "output_tokens": tokens,
        "wall_s": round(wall, 3),
        "tokens_per_s": round(tokens / wall, 1),
        "ttft_p50_ms": round(1000 * statistics.median(ttfts), 1),
        "ttft_max_ms": round(1000 * ttfts[-1], 1),
    }


async def _run(args: argparse.Namespace) -> dict:
    from engines.hf import HFEngine  # torch: imported only when this subcommand runs

    rows = []
    for model in args.models:
        engine = HFEngine(
            HFEngineConfig(
                model=model,
                device=args.device,
                num_threads=args.threads,
                max_running_requests=max(args.concurrency),
            )
        )
        await engine.start()
        try:
            for c in args.concurrency:
                row = {"model": model, **await measure(engine, c, args.prompt_tokens, args.max_tokens)}
                rows.append(row)
                print(
                    f"{model:16s} c={c:<4d} {row['tokens_per_s']:9.1f} tok/s   "
                    f"TTFT p50 {row['ttft_p50_ms']:8.1f} ms   max {row['ttft_max_ms']:8.1f} ms",
                    flush=True,
                )
        finally:
            await engine.shutdown()
    return {
        "command": "python -m bench engine",
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.python_implementation()} "
        f"{platform.python_version()}",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "prompt_tokens": args.prompt_tokens,
        "max_tokens": args.max_tokens,
        "results": rows,
    }


def run(args: argparse.Namespace) -> int:
    summary = asyncio.run(_run(args))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))
    return 0
