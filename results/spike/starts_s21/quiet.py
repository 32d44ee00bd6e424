"""Quiet-cluster replica starts: the bench's fleet (engine_load, warm pool of 24) on a local cluster; three cycles
of a burst of 6 requests (the 8B's policy asks ~4 replicas) then a 2 req/s drip for 25 s, then 30 s of nothing
(the fleet scales back to 1). Run from the worktree with PYTHONPATH and STARTTRACE_DIR set."""
import asyncio, json, sys, time
from pathlib import Path

from bench.client import MonotonicClock, TargetConfig
from bench.loadgen import LoadConfig, run_load
from bench.local_serve import local_serve
from bench.spike import APP, cluster_cpus, warm_pool_env
from bench.spike_fleet import MODEL, app_args, fleet_for, workload
from traffic.workload import build_requests

out = Path(sys.argv[1]); out.mkdir(parents=True, exist_ok=True)
fleet = fleet_for("step")
times = []
CYCLE = 60.0
for c in range(3):
    t0 = 10.0 + c * CYCLE
    times += [t0 + 0.05 * i for i in range(6)]
    times += [t0 + 1.0 + 0.5 * i for i in range(50)]
duration = 10.0 + 3 * CYCLE

with local_serve("s21-quiet", num_cpus=cluster_cpus(2, 24), env=warm_pool_env(24)) as url:
    import ray
    from ray import serve
    from serve_app.app import build_app
    serve.run(build_app(app_args(fleet, "engine_load")), name=APP, route_prefix="/")
    time.sleep(10)
    began = time.time()
    specs = build_requests(workload(fleet, 0), times)
    target = TargetConfig(url=url, model=MODEL, request_timeout_s=120.0)
    res = asyncio.run(run_load(target, LoadConfig(duration_s=duration, progress=False), specs, clock=MonotonicClock()))
    node = ray._private.worker._global_node
    (out / "session.txt").write_text(node.get_session_dir_path() + "\n")
    (out / "began.txt").write_text(f"{began}\n")
    with open(out / "records.jsonl", "w") as f:
        for r in res.records:
            f.write(json.dumps({k: getattr(r, k, None) for k in ("index", "start_time", "start_s", "variant", "replica", "ttft_s", "status", "route_reason", "slo_met")}, default=str) + "\n")
    serve.delete(APP)
print("done", flush=True)
