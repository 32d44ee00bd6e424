"""A variant of two emulated replicas deployed as its own app on the shared Serve, for tests that kill one."""

from __future__ import annotations

from typing import Any

VARIANT = "pair"


def deploy_pair(serve_url: str, app: str, model: str, profile: dict[str, Any]) -> str:
    """Deploys ``app`` at ``/<app>``: one variant of two replicas of the tiny emulated engine with ``profile``'s
    figures changed; its URL."""
    from ray import serve

    from serve_app.app import build_app

    engine = {"backend": "emulated", "preset": "cpu-builtin-tiny", "profile": profile, "startup_time_scale": 0.0}
    args = {
        "model_name": model,
        "tokenizer": "builtin:tiny",
        "variants": [{"name": VARIANT, "engine": engine, "resources": {"num_cpus": 0.1}, "num_replicas": 2}],
        "ingress": {"num_cpus": 0.1},
        "limits": {"request_timeout_s": 60},
    }
    serve.run(build_app(args), name=app, route_prefix=f"/{app}")
    return f"{serve_url}/{app}"


def replica_pids(app: str) -> dict[str, int]:
    """Each of the pair's replicas by name: its process id (asked until both have answered)."""
    from ray import serve

    handle = serve.get_deployment_handle(f"variant-{VARIANT}", app_name=app)
    pids: dict[str, int] = {}
    for _ in range(50):
        info = handle.info.remote().result()
        pids[info["replica"]] = info["pid"]
        if len(pids) == 2:
            return pids
    raise AssertionError(f"found only {pids}")


def connect_channels(url: str, app: str, model: str) -> None:
    """Sends short requests until both replicas have the ingress's delta channel connected, so that the test's
    own streams come on it (a replica's first request from an ingress goes over Serve's stream)."""
    import time
    from concurrent.futures import ThreadPoolExecutor

    import httpx
    from ray import serve

    handle = serve.get_deployment_handle(f"variant-{VARIANT}", app_name=app)
    body = {"model": model, "prompt": [300] * 4, "max_tokens": 1}
    connected: dict[str, bool] = {}
    deadline = time.monotonic() + 60
    with ThreadPoolExecutor(4) as pool:
        while not (len(connected) == 2 and all(connected.values())):
            assert time.monotonic() < deadline, f"channels connected: {connected}"
            list(pool.map(lambda _: httpx.post(f"{url}/v1/completions", json=body, timeout=30), range(4)))
            for _ in range(8):
                info = handle.info.remote().result()
                connected[info["replica"]] = bool(info["delta_channels"])
