"""The generated manifests: identical to a fresh generation (no drift from the serve config), valid for
`ray up` (Ray's own validator) and for KubeRay's RayService fields, and planned for the config's replicas."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ray.autoscaler._private.kuberay.autoscaling_config import _get_ray_resources_from_group_spec
from ray.autoscaler._private.util import prepare_config, validate_config

from cluster.kuberay_schema import RayService
from cluster.manifests import RAY_CLUSTER_FILE, RAYSERVICE_FILE, plan, render, write_manifests
from serve_app.config import load_app_config

ROOT = Path(__file__).resolve().parents[2]
SOURCE = Path("configs/gpu-trtllm-serve.yaml")  # the primary TensorRT-LLM path (docs/tensorrt-llm.md)


@pytest.fixture(scope="module")
def committed() -> dict[str, dict]:
    return {name: yaml.safe_load((ROOT / "cluster" / name).read_text()) for name in (RAY_CLUSTER_FILE, RAYSERVICE_FILE)}


def test_committed_manifests_equal_a_fresh_generation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(ROOT)  # the manifests name the source by its repo-relative path

    written = write_manifests(SOURCE, tmp_path)

    for path in written:
        assert path.read_text() == (ROOT / "cluster" / path.name).read_text(), (
            f"cluster/{path.name} drifted from {SOURCE}: run python -m cluster manifests {SOURCE} --out cluster/"
        )


def test_ray_cluster_config_passes_rays_validator(committed):
    config = prepare_config(committed[RAY_CLUSTER_FILE])  # what `ray up` does before validating

    validate_config(config)


def test_rayservice_has_only_kuberay_fields(committed):
    RayService.model_validate(committed[RAYSERVICE_FILE])


def test_rayservice_serves_exactly_the_serve_config(committed, monkeypatch: pytest.MonkeyPatch):
    serve_config = yaml.safe_load(committed[RAYSERVICE_FILE]["spec"]["serveConfigV2"])
    source = yaml.safe_load((ROOT / SOURCE).read_text())

    assert serve_config["applications"] == source["applications"]
    load_app_config(serve_config["applications"][0]["args"])


def test_kuberay_autoscaler_sees_the_gpus_and_accelerator_type_of_the_worker_group(committed):
    group = committed[RAYSERVICE_FILE]["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]

    resources = _get_ray_resources_from_group_spec(group, is_head=False)

    assert resources["GPU"] == 8
    assert resources["accelerator_type:H200"] == 1


def test_worker_counts_host_deploy_replicas_and_every_variant_at_max(committed, monkeypatch):
    monkeypatch.chdir(ROOT)
    the_plan = plan(SOURCE)

    # 70B (4 GPUs) + 8B (1 GPU) fit one 8x H200 node; at max, 2x70B + 4x8B need 12 GPUs: two nodes.
    assert (the_plan.min_workers, the_plan.max_workers) == (1, 2)
    workers = committed[RAY_CLUSTER_FILE]["available_node_types"]["gpu-h200"]
    assert (workers["min_workers"], workers["max_workers"]) == (1, 2)
    assert workers["resources"]["accelerator_type:H200"] == 1


def test_a_config_change_changes_the_manifests(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(ROOT)
    changed = tmp_path / "gpu.yaml"
    changed.write_text((ROOT / SOURCE).read_text().replace("max_replicas: 2", "max_replicas: 4"))

    assert render(plan(changed)) != render(plan(SOURCE))
    assert plan(changed).max_workers == 3
