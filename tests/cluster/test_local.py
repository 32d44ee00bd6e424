"""On a local multi-node cluster (2 nodes x 4 logical H100s): replicas placed with cluster.placement get
the right GPUs, a TP4 replica's GPUs are on one node, one-GPU replicas spread, and a variant asking for an
accelerator type no node has fails the deploy-time check with a clear message instead of hanging.

The replicas are a small probe class, not the LLM engine (except the last test, which serves the default app
across both nodes): what is tested is Ray's placement of the options
this project produces. Logical GPUs prove placement and CUDA_VISIBLE_DEVICES; whether an engine then runs
on those GPUs needs real ones (issue 12).
"""

from __future__ import annotations

import asyncio
import os
import typing
from collections.abc import Iterator
from typing import Any

import pytest
import ray
from ray import serve
from ray.serve import Deployment
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from cluster.feasibility import ensure_feasible_on_live_cluster
from cluster.local import LocalClusterSpec, local_cluster
from engines.errors import EngineConfigError
from serve_app.config import VariantConfig, load_app_config
from tests.conftest import REPO, free_port

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


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    if ray.is_initialized():
        pytest.skip("Ray is already connected in this process: run tests/cluster in a pytest process of its own")
    with local_cluster(SPEC) as started:
        ray.init(address=started.address, log_to_driver=False, namespace="multinode")
        try:
            started.http_port = free_port()  # type: ignore[attr-defined]
            serve.start(proxy_location="HeadOnly", http_options={"host": "127.0.0.1", "port": started.http_port})
            yield started
        finally:
            serve.shutdown()
            ray.shutdown()


def test_the_local_cluster_has_two_nodes_of_four_h100(cluster):
    nodes = [node for node in ray.nodes() if node["Alive"]]

    assert len(nodes) == 2
    assert all(node["Resources"]["GPU"] == 4 and node["Resources"]["accelerator_type:H100"] == 1 for node in nodes)


def test_tp4_replicas_get_four_gpus_of_one_node_in_both_layouts(cluster):
    (mpi,) = deploy(variant("tp4-mpi", 4))
    (actors,) = deploy(variant("tp4-ray", 4, ray_workers=True))

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
    serve.delete("tp4-mpi")
    serve.delete("tp4-ray")


def test_one_gpu_replicas_spread_over_the_nodes(cluster):
    reports = deploy(variant("tp1", 1, replicas=2))

    assert [len(report["gpu_ids"]) for report in reports] == [1, 1]
    assert all(report["cuda_visible_devices"] == report["gpu_ids"][0] for report in reports)
    assert len({report["node"] for report in reports}) == 2
    serve.delete("tp1")


def test_missing_accelerator_type_fails_the_deploy_check_instead_of_hanging(cluster):
    config = load_app_config(
        {"model_name": "m", "variants": [variant("needs-a100", 1, accelerator="A100").model_dump()]}
    )

    with pytest.raises(EngineConfigError) as info:
        ensure_feasible_on_live_cluster(config)

    assert "needs-a100: needs accelerator type 'A100' but no node has it (the cluster has H100)" in info.value.message


def test_the_default_app_serves_across_nodes(cluster):
    """serve_config.yaml's app with each variant sized to need most of a node: the two engines land on
    different nodes, and the one HTTP endpoint streams from both."""
    import httpx
    import yaml

    from serve_app.app import build_app

    args = yaml.safe_load((REPO / "serve_config.yaml").read_text())["applications"][0]["args"]
    for v in args["variants"]:
        v["resources"] = {"num_cpus": 1.5}  # 2 CPUs per node: one engine per node
        v.pop("autoscaling", None)
        v["num_replicas"] = 1
    serve.run(build_app(args), name="default", route_prefix="/default")
    try:
        nodes = {}
        for v in args["variants"]:
            handle = serve.get_deployment_handle(f"variant-{v['name']}", app_name="default")
            nodes[v["name"]] = handle.info.remote().result()["node"]
        assert len(set(nodes.values())) == 2, nodes
        url = f"http://127.0.0.1:{cluster.http_port}/default/v1/completions"
        for v in args["variants"]:
            r = httpx.post(url, json={"model": v["name"], "prompt": "Hi", "max_tokens": 3}, timeout=120)
            assert r.status_code == 200, r.text
            assert r.headers["x-route-variant"] == v["name"]
    finally:
        serve.delete("default")
