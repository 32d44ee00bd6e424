"""Shared fixtures: one local Ray cluster and one Serve app (the default serve_config.yaml) per test session.

Starting Ray costs seconds, so every test that needs Serve shares them; the session stops both at the end.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from engines.ports import free_port
from serve_app.fast_path import apply_fast_path_env, isolate_cluster_ports

REPO = Path(__file__).resolve().parent.parent
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # no model hub here: builtin models are generated offline


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[None]:
    import ray

    # The cluster runs Serve as users get it from `variant-serve run` (HAProxy and direct ingress, replicas on
    # their own event loop): its processes read the flags from the environment Ray starts with. The test process
    # itself is a driver like a user's script beside such a cluster, so the flags are taken back once Ray is up:
    # in throughput mode a driver's handles would need an event loop, and the processes tests spawn later
    # (other clusters, benches) choose their own.
    before = dict(os.environ)
    apply_fast_path_env()
    isolate_cluster_ports()  # HAProxy's listeners and direct ingress use fixed ports: two clusters would clash
    try:
        # Logical CPUs: the default config's replicas reserve fractions, and tests add their own apps beside it.
        ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False, namespace="tests")
    finally:
        os.environ.clear()
        os.environ.update(before)
    try:
        yield
    finally:
        ray.shutdown()


@pytest.fixture(scope="session")
def grpc_port() -> int:
    """The port of Serve's gRPC proxy on the shared cluster (tests/serve_app/test_grpc.py)."""
    return free_port()


@pytest.fixture(scope="session")
def serve_url(ray_cluster, grpc_port) -> Iterator[str]:
    from ray import serve

    port = free_port()
    serve.start(
        http_options={"host": "127.0.0.1", "port": port},
        # serve_config.yaml's servicer functions: each proxy imports them (generating the gRPC code if missing).
        grpc_options={
            "port": grpc_port,
            "grpc_servicer_functions": _serve_config()["grpc_options"]["grpc_servicer_functions"],
        },
    )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        serve.shutdown()


def _serve_config() -> dict:
    import yaml

    return yaml.safe_load((REPO / "serve_config.yaml").read_text())


@pytest.fixture(scope="session")
def default_app_args() -> dict:
    return _serve_config()["applications"][0]["args"]


@pytest.fixture(scope="session")
def llm_url(serve_url, default_app_args) -> str:
    """The default serve_config.yaml application, deployed as `serve run` would."""
    from ray import serve

    from serve_app.app import build_app

    serve.run(build_app(default_app_args), name="llm", route_prefix="/")
    return serve_url


# Fixtures that start Ray (the shared cluster, or a cluster.local multi-node one): a test using any of them, directly
# or through another fixture, belongs to the full suite only.
_RAY_FIXTURES = frozenset({"ray_cluster"})


def pytest_collection_modifyitems(config, items) -> None:
    """Marks ``slow`` every test that starts Ray (through a fixture, or marked ``serve`` / ``multinode``): the fast
    lane, ``pytest -m "not slow"``, is the rest (no cluster, no model beyond the builtin tiny one)."""
    for item in items:
        if _RAY_FIXTURES.intersection(getattr(item, "fixturenames", ())) or any(
            item.get_closest_marker(name) for name in ("serve", "multinode")
        ):
            item.add_marker(pytest.mark.slow)


def pytest_report_collectionfinish(config) -> str | None:
    """The test order's seed (pytest-randomly), shown under -q too (CI): ``pytest --randomly-seed=N`` repeats it."""
    if not config.pluginmanager.hasplugin("randomly") or not config.getoption("randomly_reorganize"):
        return None
    return f"random test order: --randomly-seed={config.getoption('randomly_seed')}"
