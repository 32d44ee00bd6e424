"""Per-phase durations (median, min-max) over a set of replicas from timeline.py's JSON."""
import json, statistics, sys
data = json.load(open(sys.argv[1]))
ids = sys.argv[2].split(",") if len(sys.argv) > 2 and sys.argv[2] else None
phases = [
    ("Serve autoscaler decision (\"Upscaling\") -> \"Starting Replica\" (next control-loop tick)", "upscale", "starting"),
    ("Starting -> actor creation task begins in a warm worker (lease + push)", "starting", "actor_create"),
    ("ReplicaActor.__init__ (actor creation task)", "actor_create", "actor_created"),
    ("actor ready -> controller sees is_allocated, sends initialize_and_get_metadata -> our __init__ starts", "actor_created", "ctor_start"),
    ("our __init__ before engine.start (config validation, make_engine)", "ctor_start", "engine_start_begin"),
    ("engine.start(): emulated cold start (6.0 s sleep)", "engine_start_begin", "engine_started"),
    ("rest of our __init__", "engine_started", "ctor_end"),
    ("Serve after __init__: _on_initialized (gRPC server), reconfigure, gc.collect+freeze -> initial check_health", "ctor_end", "first_check_health"),
    ("  of which Serve's gRPC server start (_on_initialized)", "_on_initialized_begin", "_on_initialized_end"),
    ("  of which set_sync_method_threadpool_limit (hop to the user loop)", "set_sync_method_threadpool_limit_begin", "set_sync_method_threadpool_limit_end"),
    ("  of which gc.collect() before gc.freeze() (RAY_SERVE_FREEZE_GC_ON_STARTUP)", "gc_collect_begin", "check_health_begin"),
    ("check_health -> controller marks RUNNING (reply + control-loop tick)", "first_check_health", "running"),
    ("RUNNING -> ingress's Serve router has it (long poll)", "running", "router_update_replicas_new"),
    ("RUNNING -> first request routed to it (router backoff / arrivals)", "running", "router_first_routed"),
    ("routed -> our generate() runs on it", "router_first_routed", "first_generate"),
    ("our __init__ end -> our RoutingTable counts it (first stats post + 0.1 s refresh)", "ctor_end", "table_ready"),
    ("TOTAL Starting -> RUNNING (controller's 'after X s')", "starting", "running"),
    ("TOTAL Upscaling -> first request on the replica", "upscale", "first_generate"),
]
rows = [r for r in data["rows"] if (ids is None or r["replica"] in ids)]
print("| step | median (min-max) s | n |\n|---|---:|---:|")
for name, a, b in phases:
    v = [r["raw"][b] - r["raw"][a] for r in rows if a in r["raw"] and b in r["raw"]]
    if v:
        print(f"| {name} | {statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f}) | {len(v)} |")
