"""Scratch probe (session 19): where a burst of N new HTTP requests waits before the ingress's handler."""

import asyncio
import json
import os
import ssl
import subprocess
import sys
import time

import httpx
from ray import serve

from bench.local_serve import local_serve
from bench.overhead import emulated_engine_config, stack_app_args

N = int(sys.argv[1]) if len(sys.argv) > 1 else 128
BURSTS = int(sys.argv[2]) if len(sys.argv) > 2 else 5
PROFILE = sys.argv[3] if len(sys.argv) > 3 else ""


async def one(url, ctx, i, out):
    ev = {}

    async def trace(name, info):
        ev[name] = time.time()

    async with httpx.AsyncClient(verify=ctx, limits=httpx.Limits(max_connections=1)) as c:
        t0 = time.time()
        async with c.stream(
            "POST",
            url + "/v1/completions",
            json={"model": "bench", "prompt": "hello world " * 20, "max_tokens": 2, "stream": True},
            extensions={"trace": trace},
        ) as r:
            th = time.time()
            a, f = map(float, r.headers["x-probe-wall"].split())
            async for _ in r.aiter_bytes():
                break
            tb = time.time()
    out.append(
        dict(
            t0=t0,
            connected=ev.get("connection.connect_tcp.complete", 0),
            sent=ev.get("http11.send_request_body.complete", 0),
            arrived=a,
            first=f,
            headers=th,
            body=tb,
            ingress_ms=r.headers.get("server-timing"),
        )
    )


async def burst(url):
    ctx = ssl.create_default_context()
    out = []
    await asyncio.gather(*(one(url, ctx, i, out) for i in range(N)))
    return out


def q(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def main():
    eng = emulated_engine_config("emulated:h200-llama-3.1-8b-int4", max_running=N)
    from serve_app.app import build_app

    with local_serve("probe") as url:
        serve.run(
            build_app(stack_app_args(eng, device="cpu", max_tokens=128, max_concurrency=N)),
            name="stack",
            route_prefix="/",
        )
        pid = subprocess.run(
            "pgrep -f 'ServeReplica:stack:Ingress'", shell=True, capture_output=True, text=True
        ).stdout.split()
        print("ingress pids", pid, flush=True)
        asyncio.run(burst(url))  # warm
        time.sleep(1)
        prof = None
        if PROFILE:
            prof = subprocess.Popen(
                [
                    "py-spy",
                    "record",
                    "--rate",
                    "400",
                    "--format",
                    "raw",
                    "-p",
                    pid[0],
                    "-o",
                    PROFILE,
                    "--duration",
                    "30",
                ]
            )
            time.sleep(1.5)

        def cpu(p):
            f = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()
            return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")

        pids = subprocess.run(
            "pgrep -f 'ServeReplica:stack' ; pgrep haproxy", shell=True, capture_output=True, text=True
        ).stdout.split()
        names = {
            p: open(f"/proc/{p}/cmdline").read().replace("\0", " ")[:60] for p in pids if os.path.exists(f"/proc/{p}")
        }
        c0 = {p: cpu(p) for p in names}
        me0 = time.process_time()
        rows = []
        for _b in range(BURSTS):
            rows += asyncio.run(burst(url))
            time.sleep(1.5)
        if prof:
            prof.wait()
        for p in names:
            print(f"cpu ms/request {1e3 * (cpu(p) - c0[p]) / (N * BURSTS):6.2f} {names[p]}")
        print(f"cpu ms/request {1e3 * (time.process_time() - me0) / (N * BURSTS):6.2f} client")
        json.dump(rows, open("/tmp/s19/burst_rows.json", "w"))
        def base(r):
            return r["t0"]
        for name, f in [
            ("connect", lambda r: r["connected"] - r["t0"]),
            ("sent", lambda r: r["sent"] - r["t0"]),
            ("arrived", lambda r: r["arrived"] - r["t0"]),
            ("sent->arrived", lambda r: r["arrived"] - r["sent"]),
            ("first token at ingress", lambda r: r["first"] - r["t0"]),
            ("headers at client", lambda r: r["headers"] - r["t0"]),
            ("first->headers", lambda r: r["headers"] - r["first"]),
        ]:
            xs = [f(r) * 1e3 for r in rows]
            print(f"{name:24s} p10 {q(xs, 0.1):7.1f} p50 {q(xs, 0.5):7.1f} p90 {q(xs, 0.9):7.1f} max {max(xs):7.1f}")


main()
