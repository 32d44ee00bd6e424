"""On a local multi-node cluster (2 nodes x 4 logical H100s): replicas placed with serve_app.placement get
the right GPUs, a TP4 replica's GPUs are on one node, one-GPU replicas spread, and a variant asking for an
accelerator type no node has fails the deploy-time check with a clear message instead of hanging.

The replicas are a small probe class, not the LLM engine (except the last test, which serves the default app
across both nodes): what is tested is Ray's placement of the options
this project produces. Logical GPUs prove placement and CUDA_VISIBLE_DEVICES; whether an engine then runs
on those GPUs needs real ones.

A Python process can be connected to one Ray cluster at a time, and the test session's shared cluster
(tests/conftest.py) may already be connected in this one, whatever order the tests run in. So the
multi-node cluster and its driver live in a spawned process of their own (:class:`Driver`): tests send it
this module's functions and assert on what they return.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import typing
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import pytest
import ray
from ray import serve
from ray.serve import Deployment
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from cluster.feasibility import ensure_feasible
from cluster.local import LocalClusterSpec, local_cluster
from cluster.shape import read_live_shape
from core.errors import ConfigError
from engines.ports import free_port
from serve_app.config import VariantConfig, load_app_config
from tests.conftest import REPO

pytestmark = pytest.mark.multinode

SPEC = LocalClusterSpec(nodes=2, gpus_per_node=4, accelerator_type="H100", cpus_per_node=2)


def _where() -> dict[str, Any]:
    return {
        "node": ray.get_runtime_context().get_node_id(),
        "gpu_ids": sorted(str(gpu) for gpu in ray.get_gpu_ids()),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }


@ray.remote(num_cpus=0)
class Rank:
    """Stands in for one tensor-parallel rank actor (TensorRT-LLM's RayGPUWorker asks for num_gpus=1)."""

    def where(self) -> dict[str, Any]:
        return _where()


class Probe:
    """A replica that reports where it landed, and for ray-actor engines where its rank actors landed."""

    async def __call__(self) -> dict[str, Any]:
        report = _where()
        report["ranks"] = []
        indices = os.environ.get("TRTLLM_RAY_BUNDLE_INDICES")
        if indices:
            # As TensorRT-LLM's Ray executor does: one rank per listed bundle of the current placement group.
            group = ray.util.get_current_placement_group()
            assert group is not None, "a ray-actor engine's replica must run in its placement group"
            ranks = [
                Rank.options(  # type: ignore[attr-defined]  # ray.remote hides .options from mypy
                    num_gpus=1,
                    scheduling_strategy=PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=int(i)),
                ).remote()
                for i in indices.split(",")
            ]
            report["ranks"] = await asyncio.gather(*(rank.where.remote() for rank in ranks))
        return report


def variant(
    name: str, tp: int, ray_workers: bool = False, accelerator: str = "H100", replicas: int = 1
) -> VariantConfig:
    engine: dict[str, Any] = {"backend": "trtllm", "model": "/models/m", "tensor_parallel_size": tp}
    if ray_workers:
        engine["extra_llm_args"] = {"orchestrator_type": "ray"}
    resources = {"num_cpus": 0.1, "num_gpus": tp, "accelerator_type": accelerator}
    return VariantConfig.model_validate(
        {"name": name, "engine": engine, "resources": resources, "num_replicas": replicas}
    )


def deploy(config: VariantConfig) -> list[dict[str, Any]]:
    """Run ``config``'s deployment of the probe as its own app; every replica's report."""
    deployment = typing.cast(Deployment, serve.deployment(Probe)).options(**config.deployment_options())
    handle = serve.run(deployment.bind(), name=config.name, route_prefix=None)
    reports: dict[str, dict[str, Any]] = {}
    # Serve picks the replica per call; ask until every replica answered (bounded, never a timing).
    for _ in range(200):
        report = handle.remote().result()
        reports[report["node"] + ",".join(report["gpu_ids"])] = report
        if len(reports) == (config.num_replicas or 1):
            break
    return list(reports.values())


def deployed(*configs: VariantConfig) -> list[list[dict[str, Any]]]:
    """Each config's replica reports (:func:`deploy`, in order); the apps are deleted afterwards."""
    try:
        return [deploy(config) for config in configs]
    finally:
        for config in configs:
            serve.delete(config.name)


# ---------------------------------------------------------------- the driver process

_running = contextlib.ExitStack()  # in the driver process: the cluster, the connection to it and Serve


def _start(http_port: int) -> None:
    started = _running.enter_context(local_cluster(SPEC))
    ray.init(address=started.address, log_to_driver=False, namespace="multinode")
    _running.callback(ray.shutdown)
    serve.start(proxy_location="HeadOnly", http_options={"host": "127.0.0.1", "port": http_port})
    _running.callback(serve.shutdown)


def _stop() -> None:
    _running.close()  # Serve, then the connection, then exactly the nodes _start started


class Driver:
    """A spawned process that runs the multi-node cluster and drives it, running the functions it is sent."""

    def __init__(self) -> None:
        self.http_port = free_port()
        self._pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))

    def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        return self._pool.submit(fn, *args).result(timeout=600)  # bounded: a hung cluster fails the test

    def close(self) -> None:
        try:
            self.run(_stop)
        finally:
            self._pool.shutdown(wait=True)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Driver]:
    driver = Driver()
    try:
        driver.run(_start, driver.http_port)
        yield driver
    finally:
        driver.close()


# ---------------------------------------------------------------- what the driver runs


def _alive_nodes() -> list[dict[str, float]]:
    return [node["Resources"] for node in ray.nodes() if node["Alive"]]


def _tp4_in_both_layouts() -> tuple[dict[str, Any], dict[str, Any]]:
    (mpi,), (actors,) = deployed(variant("tp4-mpi", 4), variant("tp4-ray", 4, ray_workers=True))
    return mpi, actors


def _one_gpu_replicas() -> list[dict[str, Any]]:
    (reports,) = deployed(variant("tp1", 1, replicas=2))
    return reports


def _feasibility_error(app: dict[str, Any]) -> str | None:
    try:
        ensure_feasible(load_app_config(app), read_live_shape())  # the running cluster's nodes
    except ConfigError as e:
        return e.message
    return None


def _serve_default_app(args: dict[str, Any]) -> dict[str, str]:
    """Deploys the app as 'default' under /default; each variant's node."""
    from serve_app.app import build_app

    serve.run(build_app(args), name="default", route_prefix="/default")
    names = [v["name"] for v in args["variants"]]
    handles = {name: serve.get_deployment_handle(f"variant-{name}", app_name="default") for name in names}
    return {name: handle.info.remote().result()["node"] for name, handle in handles.items()}


def _delete_app(name: str) -> None:
    serve.delete(name)


# ---------------------------------------------------------------- tests


def test_the_local_cluster_has_two_nodes_of_four_h100(cluster):
    nodes = cluster.run(_alive_nodes)

    assert len(nodes) == 2
    assert all(node["GPU"] == 4 and node["accelerator_type:H100"] == 1 for node in nodes)


def test_tp4_replicas_get_four_gpus_of_one_node_in_both_layouts(cluster):
    mpi, actors = cluster.run(_tp4_in_both_layouts)

    # In-replica ranks (MPI): the replica holds all four GPUs; its children inherit CUDA_VISIBLE_DEVICES.
    assert len(mpi["gpu_ids"]) == 4
    assert sorted(mpi["cuda_visible_devices"].split(",")) == mpi["gpu_ids"]
    # Ray-actor ranks: the replica holds none, each rank one distinct GPU, all on the replica's node.
    assert actors["gpu_ids"] == []
    assert len(actors["ranks"]) == 4
    assert {rank["node"] for rank in actors["ranks"]} == {actors["node"]}
    assert len({gpu for rank in actors["ranks"] for gpu in rank["gpu_ids"]}) == 4
    # Two TP4 replicas on 2 x 4 GPUs: one node each, whatever order Serve placed them in.
    assert mpi["node"] != actors["node"]


def test_one_gpu_replicas_spread_over_the_nodes(cluster):
    reports = cluster.run(_one_gpu_replicas)

    assert [len(report["gpu_ids"]) for report in reports] == [1, 1]
    assert all(report["cuda_visible_devices"] == report["gpu_ids"][0] for report in reports)
    assert len({report["node"] for report in reports}) == 2


def test_missing_accelerator_type_fails_the_deploy_check_instead_of_hanging(cluster):
    app = {"model_name": "m", "variants": [variant("needs-a100", 1, accelerator="A100").model_dump()]}

    message = cluster.run(_feasibility_error, app)

    assert message is not None
    assert "needs-a100: needs accelerator type 'A100' but no node has it (the cluster has H100)" in message


def test_the_default_app_serves_across_nodes(cluster):
    """serve_config.yaml's app with each variant sized to need most of a node: the two engines land on
    different nodes, and the one HTTP endpoint streams from both."""
    import httpx
    import yaml

    args = yaml.safe_load((REPO / "serve_config.yaml").read_text())["applications"][0]["args"]
    for v in args["variants"]:
        v["resources"] = {"num_cpus": 1.5}  # 2 CPUs per node: one engine per node
        v.pop("autoscaling", None)
        v["num_replicas"] = 1
    try:
        nodes = cluster.run(_serve_default_app, args)
        assert len(set(nodes.values())) == 2, nodes
        url = f"http://127.0.0.1:{cluster.http_port}/default/v1/completions"
        for v in args["variants"]:
            r = httpx.post(url, json={"model": v["name"], "prompt": "Hi", "max_tokens": 3}, timeout=120)
            assert r.status_code == 200, r.text
            assert r.headers["x-route-variant"] == v["name"]
    finally:
        cluster.run(_delete_app, "default")
