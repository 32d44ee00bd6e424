"""Placement of one replica: GPUs of a tensor-parallel replica on one node, accelerator types, reservations;
and the options are accepted by the real Ray Serve API (no cluster started)."""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any

import pytest
from ray import serve
from ray.serve import Deployment

from serve_app.config import VariantConfig, load_config_file
from serve_app.placement import WorkerLayout, replica_bundles, replica_placement, worker_layout

ROOT = Path(__file__).resolve().parents[2]


def variant(engine: dict[str, Any], **resources: Any) -> VariantConfig:
    return VariantConfig.model_validate({"name": "v", "engine": engine, "resources": resources})


def trtllm(tp: int, **extra: Any) -> dict[str, Any]:
    return {"backend": "trtllm", "model": "/models/m", "tensor_parallel_size": tp, **extra}


def ray_workers(tp: int) -> dict[str, Any]:
    return trtllm(tp, extra_llm_args={"orchestrator_type": "ray"})


class _Replica:
    pass


def _deployment(**options: Any) -> Deployment:
    return typing.cast(Deployment, serve.deployment(_Replica)).options(**options)


def test_mpi_tp4_replica_reserves_four_gpus_itself():
    placement = replica_placement(variant(trtllm(4), num_cpus=16, num_gpus=4, accelerator_type="H200"))

    assert placement == {"ray_actor_options": {"num_cpus": 16, "num_gpus": 4, "accelerator_type": "H200"}}


@pytest.mark.parametrize(
    "engine",
    [
        trtllm(2),
        {"backend": "hf", "model": "builtin:tiny", "device": "cuda"},
        {"backend": "openai_server", "model": "/models/m", "tensor_parallel_size": 2},
    ],
    ids=["trtllm-mpi", "hf", "openai_server"],
)
def test_engines_with_ranks_in_the_replica_get_num_gpus(engine: dict[str, Any]):
    placement = replica_placement(variant(engine, num_gpus=2))

    assert worker_layout(variant(engine, num_gpus=2).engine) is WorkerLayout.IN_REPLICA
    assert "placement_group_bundles" not in placement
    assert placement["ray_actor_options"]["num_gpus"] == 2


def test_ray_actor_ranks_get_one_strict_pack_bundle_per_gpu():
    placement = replica_placement(
        variant(ray_workers(4), num_cpus=2, num_gpus=4, memory_bytes=1024, accelerator_type="H100")
    )

    assert placement["placement_group_strategy"] == "STRICT_PACK"
    replica, *gpus = placement["placement_group_bundles"]
    assert replica == {"CPU": 2, "memory": 1024}
    assert gpus == [{"GPU": 1.0, "accelerator_type:H100": 0.001}] * 4
    options = placement["ray_actor_options"]
    assert (options["num_cpus"], options["num_gpus"], options["memory"]) == (2, 0, 1024)
    assert options["runtime_env"]["env_vars"]["TRTLLM_RAY_BUNDLE_INDICES"] == "1,2,3,4"


def test_custom_resources_are_reserved_by_the_replica_and_its_bundle():
    placement = replica_placement(variant(ray_workers(2), num_gpus=2, resources={"h200_node": 0.01}))

    assert placement["placement_group_bundles"][0]["h200_node"] == 0.01
    assert placement["ray_actor_options"]["resources"] == {"h200_node": 0.01}


@pytest.mark.parametrize("engine", [trtllm(4), ray_workers(4)], ids=["mpi", "ray-actors"])
def test_both_layouts_are_valid_serve_deployment_options(engine: dict[str, Any]):
    placement = replica_placement(variant(engine, num_cpus=1, num_gpus=4, memory_bytes=2**30, accelerator_type="H100"))

    deployment = _deployment(**placement)  # Serve validates the first bundle against the actor's options

    assert deployment.ray_actor_options == placement["ray_actor_options"]


def test_replica_bundles_of_an_actor_name_its_accelerator_type():
    bundles = replica_bundles(variant(trtllm(4), num_cpus=16, num_gpus=4, accelerator_type="H200"))

    assert bundles == [{"CPU": 16.0, "GPU": 4.0, "accelerator_type:H200": 0.001}]


def test_replica_bundles_sum_to_the_placement_group():
    bundles = replica_bundles(variant(ray_workers(2), num_cpus=1, num_gpus=2))

    assert sum(bundle.get("GPU", 0) for bundle in bundles) == 2
    assert len(bundles) == 3


def test_variant_deployment_options_use_the_placement():
    config = load_config_file(ROOT / "configs" / "gpu-trtllm.yaml")

    for each in config.variants:
        options = each.deployment_options()
        assert options["ray_actor_options"] == replica_placement(each)["ray_actor_options"]
        _deployment(**options)


def test_a_variants_runtime_env_joins_the_placements_own_environment():
    spec = {
        "name": "v",
        "engine": ray_workers(2),
        "resources": {"num_gpus": 2},
        "runtime_env": {"py_executable": "/opt/trtllm/bin/python", "env_vars": {"TLLM_LOG_LEVEL": "INFO"}},
    }
    placement = replica_placement(VariantConfig.model_validate(spec))

    runtime_env = placement["ray_actor_options"]["runtime_env"]
    assert runtime_env["py_executable"] == "/opt/trtllm/bin/python"
    assert runtime_env["env_vars"] == {
        "TLLM_LOG_LEVEL": "INFO",
        "TRTLLM_RAY_BUNDLE_INDICES": "1,2",
        "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "1",
    }
    _deployment(**placement)
