import gc, os, time
_start = {}
def _cb(phase, info):
    if phase == "start":
        _start["t"] = time.perf_counter()
    else:
        d = time.perf_counter() - _start.get("t", time.perf_counter())
        if info["generation"] >= 1 or d > 0.002:
            with open(f"/tmp/s20/gc/{os.getpid()}.log", "a") as f:
                f.write(f"{time.time():.4f} {info['generation']} {d*1e3:.2f} {info['collected']}\n")
gc.callbacks.append(_cb)
