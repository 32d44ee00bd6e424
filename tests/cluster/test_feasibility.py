"""The feasibility check: impossible configs fail with a message naming the variant and the reason; the
most replicas per variant follow from the GPUs left."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cluster.feasibility import check_feasibility, ensure_feasible, fits_all
from cluster.shape import parse_shape
from core.errors import ConfigError
from serve_app.config import AppConfig, load_app_config, load_config_file

ROOT = Path(__file__).resolve().parents[2]
GPU_CONFIG = ROOT / "configs" / "gpu-trtllm.yaml"


def app(*variants: dict[str, Any], ingress_cpus: float = 0.25) -> AppConfig:
    return load_app_config({"model_name": "m", "variants": list(variants), "ingress": {"num_cpus": ingress_cpus}})


def gpu_variant(name: str, tp: int, accelerator: str | None = "H100", **scaling: Any) -> dict[str, Any]:
    resources: dict[str, Any] = {"num_cpus": 1, "num_gpus": tp}
    if accelerator:
        resources["accelerator_type"] = accelerator
    return {
        "name": name,
        "engine": {"backend": "trtllm", "model": "/m", "tensor_parallel_size": tp},
        "resources": resources,
        **scaling,
    }


def fit(report, name):
    return next(each for each in report.fits if each.name == name)


def test_tp8_on_four_gpu_nodes_names_the_variant_and_the_gpu_count():
    report = check_feasibility(app(gpu_variant("big", 8)), parse_shape("4x4xH100"))

    assert not report.ok
    assert report.problems == [
        "big: one replica needs 8 GPUs on one node (tensor_parallel_size 8), but the largest H100 node has 4"
    ]


def test_h100_variant_on_l40s_cluster_names_the_missing_accelerator_type():
    with pytest.raises(ConfigError) as info:
        ensure_feasible(app(gpu_variant("fast", 1)), parse_shape("2x8xL40S"))

    assert "fast: needs accelerator type 'H100' but no node has it (the cluster has L40S)" in info.value.message


def test_a_replica_never_straddles_nodes():
    # 8 GPUs in all and 8 asked for, but after the two TP3 replicas each node has 1 GPU left: TP2 needs 2 of one.
    config = app(gpu_variant("tp3", 3, num_replicas=2), gpu_variant("tp2", 2, num_replicas=1))

    report = check_feasibility(config, parse_shape("2x4xH100"))

    assert [problem.split(":")[0] for problem in report.problems] == ["tp2"]
    assert check_feasibility(config, parse_shape("3x4xH100")).ok


def test_largest_replicas_are_packed_first():
    # First-come order (tp1 first) would split the GPUs so that tp4 does not fit; largest-first fits both.
    config = app(gpu_variant("tp1", 1, num_replicas=4), gpu_variant("tp4", 4, num_replicas=1))

    report = check_feasibility(config, parse_shape("2x4xH100"))

    assert report.ok
    assert len(set(fit(report, "tp4").nodes)) == 1


def test_max_replicas_per_variant_hold_the_others_at_their_deploy_count():
    config = load_config_file(GPU_CONFIG)

    report = check_feasibility(config, parse_shape("1x8xH200"))

    assert report.ok
    assert (fit(report, "llama-70b-fp8").max_placeable, fit(report, "llama-8b-int4").max_placeable) == (1, 4)
    assert report.warnings == ["llama-70b-fp8: at most 1 of max 2 replicas fit on this cluster"]


def test_production_config_fits_one_head_and_two_h200_nodes_at_max():
    config = load_config_file(GPU_CONFIG)
    shape = parse_shape("1x0:cpus=32+2x8xH200:cpus=192,memory=2Ti")
    at_max = {"llama-8b-int4": 4, "llama-70b-fp8": 2}

    assert fits_all(config, shape, at_max)
    assert not fits_all(config, parse_shape("1x0:cpus=32+1x8xH200:cpus=192,memory=2Ti"), at_max)


def test_cpu_and_memory_are_checked_when_the_shape_gives_them():
    config = load_config_file(GPU_CONFIG)

    report = check_feasibility(config, parse_shape("2x8xH200:cpus=192,memory=100Gi"))

    assert report.problems[0].startswith("llama-70b-fp8: one replica needs 200 GiB memory")


def test_default_config_fits_a_two_core_machine_but_not_one_core():
    config = load_config_file(ROOT / "serve_config.yaml")

    assert check_feasibility(config, parse_shape("1x0:cpus=2")).ok
    report = check_feasibility(config, parse_shape("1x0:cpus=1"))
    assert [problem.split(":")[0] for problem in report.problems] == ["ingress"]


def test_fractional_gpus_share_one_gpu_but_never_straddle_two():
    half = gpu_variant("half", 1, accelerator=None, num_replicas=2)
    half["resources"]["num_gpus"] = 0.6
    half["engine"] = {"backend": "hf", "model": "builtin:tiny", "device": "cuda"}

    assert check_feasibility(app(half), parse_shape("1x2")).ok
    assert not check_feasibility(app(half), parse_shape("1x1")).ok  # 1.2 > 1 although "1 GPU" would hold 2x0.5


def test_scale_to_zero_variant_that_can_never_fit_is_a_warning():
    config = app(gpu_variant("lazy", 8, autoscaling={"min_replicas": 0, "max_replicas": 1}), gpu_variant("ok", 1))

    report = check_feasibility(config, parse_shape("1x4xH100"))

    assert report.ok
    assert report.warnings[0].startswith("lazy: one replica needs 8 GPUs")
