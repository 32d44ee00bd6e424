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
