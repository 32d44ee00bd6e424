"""The local Ray cluster and Serve instance a bench runs against, started as users get them.

Every bench that deploys the stack starts its own cluster from this process (its processes inherit
``os.environ``), with Serve's fast streaming path on unless the bench's ``--serve-env`` says otherwise
(serve_app/fast_path.py), and HAProxy's own listeners on free ports so that it can run beside another cluster.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping

from engines.ports import free_port
from serve_app.fast_path import apply_fast_path_env, isolate_cluster_ports


@contextlib.contextmanager
def local_serve(namespace: str, *, num_cpus: int | None = None, env: Mapping[str, str] | None = None) -> Iterator[str]:
    """Starts Ray and Serve, yields Serve's HTTP URL, and stops both (a failed Serve shutdown included).

    ``num_cpus``: logical CPUs (default: at least 4, so that the default config's fractional replicas fit a
    2-core machine; all of a bigger host's). ``env``: set before the fast-path defaults, so it wins over them.
    """
    import ray
    from ray import serve

    os.environ.update(env or {})
    # The fast-path defaults include the replicas' priority (RAY_worker_niceness=0): at Ray's 15 this process,
    # the load generator, would always win the CPU over the stack it measures.
    apply_fast_path_env()
    isolate_cluster_ports()
    ray.init(
        num_cpus=num_cpus or max(4, os.cpu_count() or 1),
        include_dashboard=False,
        log_to_driver=False,
        namespace=f"{namespace}-{os.getpid()}",
    )
    try:
        port = free_port()
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        yield f"http://127.0.0.1:{port}"
    finally:
        with contextlib.suppress(Exception):
            serve.shutdown()
        ray.shutdown()
