"""Where the sidecar hop's time to first token goes, at trtllm-serve's stream_interval 1 against N (#23's anomaly).

One local cluster (as bench overhead starts it), two fake trtllm-serves (tests/engines/fakes/trtllm_serve.py) at
stream_interval 1 and N, two one-variant apps on the openai_server backend in front of them (/si1, /siN). Rounds
alternate between the two so that both see the same machine: each round sends ``--streams`` requests at once,
to the fake directly and through the stack, and records per request the client's TTFT and the stack's
Server-Timing split (``ingress``: taking the request to dispatching it; ``engine``: dispatch to the first delta back
at the ingress; the rest is Serve's proxy and the network).

  python results/sidecar-hop/ttft_probe.py --interval 4 --streams 16 --rounds 6 --json out.json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench import sidecar  # noqa: E402
from bench.local_serve import local_serve  # noqa: E402
from engines.config import CoalesceConfig  # noqa: E402
from engines.model_ref import resolve_model  # noqa: E402
from engines.ports import free_port  # noqa: E402


async def one(client: httpx.AsyncClient, url: str, body: dict) -> dict:
    started = time.perf_counter()
    out: dict = {"ttft_ms": None, "ingress_ms": None, "engine_ms": None, "events": 0, "first_text": None}
    async with client.stream("POST", url, json=body) as response:
        response.raise_for_status()
        timing = response.headers.get("server-timing")
        if timing:
            for part in timing.split(","):
                name, _, dur = part.strip().partition(";dur=")
                out[f"{name}_ms"] = float(dur)
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            text = "".join(c.get("text") or "" for c in chunk.get("choices") or [])
            if text:
                out["events"] += 1
                if out["ttft_ms"] is None:
                    out["ttft_ms"] = (time.perf_counter() - started) * 1e3
                    out["first_text"] = text
    return out


def median(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return round(statistics.median(values), 1) if values else None


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--interval", type=int, default=4, help="the second fake's stream_interval")
    parser.add_argument("--streams", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--step-ms", type=float, default=5.0)
    parser.add_argument("--coalesce-ms", type=float, default=None)
    parser.add_argument("--serve-env", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    coalesce = CoalesceConfig() if args.coalesce_ms is None else CoalesceConfig(interval_ms=args.coalesce_ms)
    tokenizer = resolve_model("builtin:tiny")
    work = Path("/tmp") / f"ttft-probe-{free_port()}"
    intervals = (1, args.interval)
    env = dict(item.split("=", 1) for item in args.serve_env)
    with contextlib.ExitStack() as stack:
        fakes = {
            si: stack.enter_context(
                sidecar.running_fake(free_port(), stream_interval=si, step_ms=args.step_ms, work=work)
            )
            for si in intervals
        }
        url = stack.enter_context(local_serve("ttft-probe", env=env))
        from ray import serve

        from bench.overhead import stack_app_args
        from serve_app.app import build_app

        for si, fake_url in fakes.items():
            engine = sidecar.sidecar_engine(
                "fake-trtllm", fake_url, model_dir=tokenizer, coalesce=coalesce, batch_slots=0
            )
            app_args = stack_app_args(engine, device="cpu", max_tokens=args.max_tokens, max_concurrency=args.streams)
            app_args["tokenizer"] = tokenizer
            serve.run(build_app(app_args), name=f"si{si}", route_prefix=f"/si{si}")
        body = {"prompt": [5, 6, 7, 8, 9, 10, 11, 12], "max_tokens": args.max_tokens, "stream": True}
        body.update(ignore_eos=True, temperature=1.0, top_p=1.0)
        results: dict[str, list[dict]] = {}

        async def run() -> None:
            limits = httpx.Limits(max_connections=None, max_keepalive_connections=4 * args.streams)
            async with httpx.AsyncClient(timeout=120, limits=limits) as client:
                targets = {}
                for si, fake_url in fakes.items():
                    targets[f"fake si={si}"] = (f"{fake_url}/v1/completions", {**body, "model": sidecar.FAKE_MODEL})
                    targets[f"stack si={si}"] = (f"{url}/si{si}/v1/completions", {**body, "model": "bench"})
                for target, b in targets.values():  # warm-up: connections, first requests
                    await asyncio.gather(*(one(client, target, b) for _ in range(2)))
                for r in range(args.rounds):
                    order = list(targets.items()) if r % 2 == 0 else list(reversed(targets.items()))
                    for name, (target, b) in order:
                        done = await asyncio.gather(*(one(client, target, b) for _ in range(args.streams)))
                        for row in done:
                            row["round"] = r
                        results.setdefault(name, []).extend(done)

        asyncio.run(run())
    summary = {
        name: {
            "requests": len(rows),
            "ttft_p50_ms": median([r["ttft_ms"] for r in rows]),
            "server_timing_ingress_p50_ms": median([r["ingress_ms"] for r in rows]),
            "server_timing_engine_p50_ms": median([r["engine_ms"] for r in rows]),
            "outside_p50_ms": median(
                [r["ttft_ms"] - r["ingress_ms"] - r["engine_ms"] for r in rows if r["ingress_ms"] is not None]
            ),
            "first_text_chars_p50": median([len(r["first_text"] or "") for r in rows]),
            "first_text_chars_max": max(len(r["first_text"] or "") for r in rows),
            "events_p50": median([r["events"] for r in rows]),
            # What one bench overhead level of one round measures: each round's p50, in the order they ran.
            "ttft_p50_ms_by_round": [
                median([r["ttft_ms"] for r in rows if r["round"] == k]) for k in range(args.rounds)
            ],
        }
        for name, rows in results.items()
    }
    for name, row in summary.items():
        print(f"{name:12s} {json.dumps(row)}", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"args": vars(args) | {"json": str(args.json)}, "summary": summary}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
