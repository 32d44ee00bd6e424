"""Throwaway (session 12): is the hf engine's own process slower when a Ray worker spawns it, and why?

The hf engine in its own process (engine_process) made ~1,280 tok/s at 64 streams without Ray and 700-900 inside a
Serve replica on the H200, its child burning ~2.5x the CPU per token (session 11). Modes, one after another:
  plain        the probe's driver spawns the engine process (no Ray)
  actor        a Ray actor (num_gpus=1) spawns it: a Ray worker's environment, no Serve, no other load
  actor_clean  the same with RAY_* and OMP_NUM_THREADS removed from the environment before the spawn
  actor_nice0  a Ray actor on a cluster started with RAY_worker_niceness=0 (Ray's workers run at nice 15)
  loaded       no Ray, with LOAD busy-looping processes beside it (the CPU a Serve run's other processes take)
Per mode: tokens/s, TPOT p50, the child's CPU per token and its context switches (nonvoluntary = preempted),
its affinity, nice, cgroup and the environment keys that differ from the driver's.
  python probe_ray_child.py MODEL plain,actor,actor_clean,loaded CONCURRENCY NUM_REQUESTS
"""
import asyncio
import json
import os
import subprocess
import sys
import time

MODEL, MODES, C, N = sys.argv[1], sys.argv[2].split(","), int(sys.argv[3]), int(sys.argv[4])
LOAD = int(os.environ.get("LOAD", "8"))
STAGGER_S = float(os.environ.get("STAGGER_S", "0.07"))


def proc_status(pid: int) -> dict:
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("Cpus_allowed_list", "voluntary_ctxt_switches", "nonvoluntary_ctxt_switches", "Threads"):
                out[k] = v.strip()
    with open(f"/proc/{pid}/cgroup") as f:
        out["cgroup"] = f.read().strip()
    out["nice"] = os.getpriority(os.PRIO_PROCESS, pid)
    with open(f"/proc/{pid}/environ", "rb") as f:
        env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
    out["env"] = {k.decode(): v.decode()[:80] for k, v in env.items()}
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        out["cmdline"] = f.read().replace(b"\0", b" ").decode()[:300]
    return out


async def one(mode: str) -> dict:
    import psutil
    from bench.client import MonotonicClock
    from bench.direct import measure_request, run_direct, sampling_for
    from bench.prompt_pairs import prompt_pairs, request_specs
    from engines.config import HFEngineConfig
    from engines.factory import make_engine
    from engines.model_ref import resolve_model
    from engines.protocol import SamplingParams
    from transformers import AutoTokenizer

    sampling = SamplingParams(temperature=1.0, top_p=1.0, top_k=0)
    if mode == "actor_clean":
        for k in [k for k in os.environ if k.startswith("RAY_") or k == "OMP_NUM_THREADS"]:
            os.environ.pop(k)
    d = resolve_model(MODEL)
    cfg = HFEngineConfig(model=d, device=os.environ.get("DEVICE", "cuda"), max_running_requests=C,
                         max_queued_requests=max(256, 4 * C), engine_process=True)
    cfg = cfg.for_replica(1.0, 1.0 if cfg.device == "cuda" else 0.0)  # what a Serve replica with 1 CPU (+1 GPU) gets
    eng = make_engine(cfg)
    await eng.start()
    tok = AutoTokenizer.from_pretrained(d)
    specs = request_specs(prompt_pairs(tok, N, 64), 128, as_text=False)
    await run_direct(eng, specs[:16], 16, sampling, run_id="w")
    child = psutil.Process(eng.child_pid)
    before = proc_status(child.pid)
    spy = None
    if os.environ.get("PYSPY_OUT"):  # the child, sampled while the measured run goes (bench/pyspy.py's way)
        spy = subprocess.Popen(["py-spy", "record", "--nonblocking", "-r", "100", "-f", "raw", "-o",
                                f"{os.environ['PYSPY_OUT']}-{mode}.txt", "-p", str(child.pid)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    c0 = child.cpu_times()
    w0 = time.monotonic()
    clock = MonotonicClock()
    start, wall, records = clock.now(), time.time(), []
    pending = iter(specs)

    async def worker(i: int) -> None:
        await asyncio.sleep(i * STAGGER_S)
        for spec in pending:
            records.append(await measure_request(eng, spec, sampling_for(spec, sampling), request_id=f"s-{spec.index}",
                                                 clock=clock, run_start=start, wall_start=wall))

    await asyncio.gather(*(worker(i) for i in range(C)))
    w = time.monotonic() - w0
    c1 = child.cpu_times()
    after = proc_status(child.pid)
    if spy is not None:
        import signal
        spy.send_signal(signal.SIGINT)
        spy.wait(30)
    toks = sum(r.output_tokens for r in records)
    tp = sorted(r.tpot_s for r in records if r.tpot_s)
    tt = sorted(r.ttft_s for r in records if r.ttft_s)
    res = {
        "mode": mode, "ttft_p50_ms": round(tt[len(tt) // 2] * 1e3, 1), "occupancy": round(
            sum(r.output_tokens * (r.tpot_s or 0) for r in records) / (w * C), 2), "tok_s": round(toks / w), "tpot_p50_ms": round(tp[len(tp) // 2] * 1e3, 1),
        "child_cpu_ms_per_token": round((c1.user + c1.system - c0.user - c0.system) / toks * 1e3, 3),
        "child_vol_cs": int(after["voluntary_ctxt_switches"]) - int(before["voluntary_ctxt_switches"]),
        "child_nonvol_cs": int(after["nonvoluntary_ctxt_switches"]) - int(before["nonvoluntary_ctxt_switches"]),
        "child": {k: v for k, v in after.items() if k not in ("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")},
        "parent_pid": os.getpid(), "parent_affinity": sorted(os.sched_getaffinity(0)), "wall_s": round(w, 1),
        "child_info": eng.child_info,
    }
    await eng.shutdown()
    return res


def run_actor(mode: str) -> dict:
    import ray

    if mode == "actor_nice0":
        # Ray's core worker calls nice(worker_niceness) at start (RayConfig, default 15); the raylet's environment,
        # inherited by its workers, sets it (ray/src/ray/common/ray_config_def.h, core_worker.cc).
        os.environ["RAY_worker_niceness"] = "0"
    ray.init(num_cpus=16, num_gpus=1, include_dashboard=False)
    try:
        @ray.remote(num_gpus=1, num_cpus=1)
        class Probe:
            async def run(self, mode: str) -> dict:
                return await one(mode)

        return ray.get(Probe.remote().run.remote(mode))
    finally:
        ray.shutdown()
        os.environ.pop("RAY_worker_niceness", None)


def main() -> None:
    driver_env = dict(os.environ)
    for mode in MODES:
        hogs = []
        if mode == "loaded":
            hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(LOAD)]
        try:
            res = run_actor(mode) if mode.startswith("actor") else asyncio.run(one(mode))
        finally:
            for h in hogs:
                h.kill()
        env = res["child"].pop("env")
        res["env_diff"] = {k: v for k, v in env.items() if driver_env.get(k, "")[:80] != v}
        res["env_missing"] = sorted(k for k in driver_env if k not in env)
        print("PROBE " + json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
