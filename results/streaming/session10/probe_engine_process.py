"""Throwaway (session 10): the hf engine in-process vs in its own process, no Ray, on the GPU."""
import asyncio, os, sys, time
import psutil
from bench.direct import run_direct
from bench.prompt_pairs import prompt_pairs, request_specs
from engines.config import HFEngineConfig
from engines.factory import make_engine
from engines.model_ref import resolve_model
from engines.protocol import SamplingParams
from engines import event_loop
from transformers import AutoTokenizer

SAMPLING = SamplingParams(temperature=1.0, top_p=1.0, top_k=0)
STAGGER_S = float(os.environ.get('STAGGER_S', '0.07'))
MODEL, MODES, C, N = sys.argv[1], sys.argv[2].split(","), int(sys.argv[3]), int(sys.argv[4])


async def one(mode: str) -> None:
    d = resolve_model(MODEL)
    cfg = HFEngineConfig(model=d, device=os.environ.get("DEVICE", "cuda"), max_running_requests=C, max_queued_requests=max(256, 4 * C))
    if mode.startswith("process"):
        cfg = cfg.model_copy(update={"engine_process": True})
    omp = [part[3:] for part in mode.split("_") if part.startswith("omp")]
    if omp:
        os.environ["OMP_NUM_THREADS"] = omp[0]
    else:
        os.environ.pop("OMP_NUM_THREADS", None)
    eng = make_engine(cfg)
    await eng.start()
    tok = AutoTokenizer.from_pretrained(d)
    specs = request_specs(prompt_pairs(tok, N, 64), 128, as_text=False)
    me = psutil.Process()
    await run_direct(eng, specs[:16], 16, SAMPLING, run_id="w")
    kids = me.children(recursive=True)
    t0 = me.cpu_times(); k0 = [k.cpu_times() for k in kids]
    w0 = time.monotonic()
    if "stagger" in mode:
        # Each worker starts later than the one before (spread over about one request's length), then runs a
        # closed loop of its own: arrivals stay staggered, as they are through an HTTP stack.
        from bench.direct import measure_request, sampling_for
        from bench.client import MonotonicClock
        from types import SimpleNamespace
        clock = MonotonicClock(); start = clock.now(); wall = time.time(); records = []
        pending = iter(specs)
        async def worker(i):
            await asyncio.sleep(i * STAGGER_S)
            for spec in pending:
                records.append(await measure_request(eng, spec, sampling_for(spec, SAMPLING), request_id=f"s-{spec.index}",
                                                     clock=clock, run_start=start, wall_start=wall))
        await asyncio.gather(*(worker(i) for i in range(C)))
        res = SimpleNamespace(records=records)
    else:
        res = await run_direct(eng, specs, C, SAMPLING)
    w = time.monotonic() - w0
    t1 = me.cpu_times(); k1 = [k.cpu_times() for k in kids]
    toks = sum(r.output_tokens for r in res.records)
    own = t1.user + t1.system - t0.user - t0.system
    child = sum(b.user + b.system - a.user - a.system for a, b in zip(k0, k1))
    ttft = sorted(r.ttft_s for r in res.records if r.ttft_s)[len(res.records) // 2]
    tp = sorted(r.tpot_s for r in res.records if r.tpot_s)
    tpot = tp[len(tp) // 2] * 1e3 if tp else float("nan")
    print(f"PROBE {mode:18s} tpot_p50={tpot:6.1f}ms c={C} tok/s={toks / w:7.0f} ttft_p50={ttft * 1e3:6.1f}ms parent_ms/tok={own / toks * 1e3:.3f} "
          f"child_ms/tok={child / toks * 1e3:.3f} wall={w:.1f}", flush=True)
    await eng.shutdown()
    import torch
    if not torch.cuda.is_available():
        return
    print(f"PROBE after shutdown: reserved {torch.cuda.memory_reserved() / 2**30:.1f} GiB "
          f"allocated {torch.cuda.memory_allocated() / 2**30:.1f} GiB", flush=True)
    del eng
    import gc; gc.collect(); torch.cuda.empty_cache()
    print(f"PROBE after empty_cache: reserved {torch.cuda.memory_reserved() / 2**30:.1f} GiB", flush=True)


async def main() -> None:
    for m in MODES:
        await one(m)

event_loop.run(main())
