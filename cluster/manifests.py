"""Cluster manifests generated from a serve config, so that they cannot drift from it.

``python -m cluster manifests configs/gpu-trtllm-serve.yaml --out cluster/`` writes

* ``ray-cluster.yaml``: a Ray cluster launcher config (``ray up``) on AWS, and
* ``rayservice.yaml``: a KubeRay ``RayService`` whose ``serveConfigV2`` is the serve config itself.

Both take their GPU worker type from the variants' ``accelerator_type`` and their worker counts from the
same packing as the feasibility check: ``min`` workers host every deploy-time replica, ``max`` workers host
every variant at its ``max_replicas``. Code reaches the nodes in the container image (``--image``): one image
holds Python, ray[serve] 2.60 and this package (``pip install .``), and trtllm-serve in its own environment (the
shipped source is the sidecar config; TensorRT-LLM's pins cannot share ray[serve] 2.60's, docs/tensorrt-llm.md);
see docs/cluster.md for ``runtime_env`` instead.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from cluster.feasibility import fits_all, max_replicas
from cluster.shape import ClusterShape, NodeShape
from core.errors import ConfigError
from serve_app.config import AppConfig, load_config_file
from serve_app.fast_path import FAST_PATH_ENV
from serve_app.placement import accelerator_resource

RAY_VERSION = "2.60.0"
DEFAULT_IMAGE = "variant-serve:0.1.0"
RAY_CLUSTER_FILE = "ray-cluster.yaml"
RAYSERVICE_FILE = "rayservice.yaml"
GIB = 2**30
MAX_WORKERS_SEARCHED = 64


@dataclass(frozen=True)
class NodeTemplate:
    """One machine type: what Ray sees on it (CPUs, GPUs, memory) and what a pod on it may request."""

    aws_instance_type: str
    gpus: int
    cpus: int
    memory_gib: int
    # A pod cannot take the whole machine: the kubelet and system daemons keep a share.
    pod_cpus: int
    pod_memory_gib: int


# GPU machines per accelerator type (AWS instance types with 8 GPUs of that type).
GPU_NODES = {
    "H200": NodeTemplate("p5e.48xlarge", gpus=8, cpus=192, memory_gib=2048, pod_cpus=180, pod_memory_gib=1800),
    "H100": NodeTemplate("p5.48xlarge", gpus=8, cpus=192, memory_gib=2048, pod_cpus=180, pod_memory_gib=1800),
    "A100": NodeTemplate("p4de.24xlarge", gpus=8, cpus=96, memory_gib=1152, pod_cpus=90, pod_memory_gib=1000),
    "L40S": NodeTemplate("g6e.48xlarge", gpus=8, cpus=192, memory_gib=1536, pod_cpus=180, pod_memory_gib=1400),
}
# The head runs the Serve controller, the HTTP proxy and the ingress replicas: CPUs only.
HEAD_NODE = NodeTemplate("m7i.8xlarge", gpus=0, cpus=32, memory_gib=128, pod_cpus=30, pod_memory_gib=112)


def _accelerator_type(config: AppConfig) -> str:
    kinds = {variant.resources.accelerator_type for variant in config.variants if variant.resources.num_gpus > 0}
    if len(kinds) != 1 or None in kinds:
        raise ConfigError(
            "manifests need every GPU variant to name the same resources.accelerator_type "
            f"(found {sorted(str(kind) for kind in kinds)})"
        )
    kind = kinds.pop()
    assert kind is not None  # for mypy: None was refused above
    if kind not in GPU_NODES:
        raise ConfigError(f"no GPU node type known for accelerator type {kind!r} (known: {sorted(GPU_NODES)})")
    return kind


def _node_shape(name: str, template: NodeTemplate, accelerator: str | None) -> NodeShape:
    resources = {"CPU": float(template.cpus), "GPU": float(template.gpus), "memory": float(template.memory_gib * GIB)}
    if accelerator is not None:
        resources[accelerator_resource(accelerator)] = 1.0
    return NodeShape(name=name, resources=resources)


def workers_needed(config: AppConfig, accelerator: str, replicas: dict[str, int]) -> int:
    """Fewest GPU worker nodes (beside the head) on which ``replicas`` fit; see ``fits_all``."""
    head = _node_shape("head", HEAD_NODE, None)
    for workers in range(MAX_WORKERS_SEARCHED + 1):
        shape = ClusterShape(
            nodes=[head, *(_node_shape(f"gpu{i}", GPU_NODES[accelerator], accelerator) for i in range(workers))]
        )
        if fits_all(config, shape, replicas):
            return workers
    raise ConfigError(
        f"the app does not fit on {MAX_WORKERS_SEARCHED} {accelerator} nodes of {GPU_NODES[accelerator].gpus} GPUs; "
        "check it with python -m cluster check"
    )


@dataclass(frozen=True)
class Plan:
    """What both manifests are made of."""

    source: str
    accelerator: str
    min_workers: int
    max_workers: int
    serve_config: dict[str, Any]


def plan(config_path: Path) -> Plan:
    config = load_config_file(config_path)
    accelerator = _accelerator_type(config)
    at_max = {variant.name: max_replicas(variant) for variant in config.variants}
    raw = yaml.safe_load(config_path.read_text())
    return Plan(
        source=config_path.as_posix(),
        accelerator=accelerator,
        min_workers=workers_needed(config, accelerator, {}),
        max_workers=workers_needed(config, accelerator, at_max),
        serve_config=raw,
    )


def _header(plan: Plan, what: str) -> str:
    return (
        f"# GENERATED by `python -m cluster manifests {plan.source} --out cluster/` -- do not edit.\n"
        f"# {what}\n"
        f"# GPU workers: {plan.min_workers}..{plan.max_workers} x {GPU_NODES[plan.accelerator].gpus}x "
        f"{plan.accelerator} ({plan.min_workers} host the deploy-time replicas, {plan.max_workers} every variant "
        "at max_replicas).\n"
        "# tests/cluster/test_manifests.py fails when this file differs from a fresh generation.\n"
    )


def ray_cluster_config(plan: Plan, image: str = DEFAULT_IMAGE) -> dict[str, Any]:
    """A ``ray up`` cluster launcher config (AWS) for ``plan``."""
    gpu = GPU_NODES[plan.accelerator]
    worker_type = f"gpu-{plan.accelerator.lower()}"
    config_dir = Path(plan.source).parent.as_posix()
    return {
        "cluster_name": "variant-serve",
        "max_workers": plan.max_workers,
        "upscaling_speed": 1.0,
        "idle_timeout_minutes": 20,
        "provider": {"type": "aws", "region": "us-east-1", "cache_stopped_nodes": False},
        "auth": {"ssh_user": "ubuntu"},
        # Code reaches every node in the image: Ray, the engines and this package are installed in it.
        "docker": {
            "image": image,
            "container_name": "variant-serve",
            "pull_before_run": True,
            "run_options": ["--gpus all", "--ipc=host", "--ulimit memlock=-1", "-v /models:/models:ro"],
        },
        # The serve configs, for `serve deploy` on the head (a directory: file mounts of files do not update).
        "file_mounts": {f"~/variant-serve/{config_dir}": config_dir},
        "available_node_types": {
            "head": {
                "node_config": {"InstanceType": HEAD_NODE.aws_instance_type},
                "resources": {"CPU": HEAD_NODE.cpus, "GPU": 0},
                "min_workers": 0,
                "max_workers": 0,
            },
            worker_type: {
                "node_config": {"InstanceType": gpu.aws_instance_type},
                # Declared, not detected: the autoscaler plans with these before the node exists, so the
                # accelerator type must be here for a replica that asks for it to trigger this node type.
                "resources": {"CPU": gpu.cpus, "GPU": gpu.gpus, accelerator_resource(plan.accelerator): 1},
                "min_workers": plan.min_workers,
                "max_workers": plan.max_workers,
            },
        },
        "head_node_type": "head",
        "head_start_ray_commands": [
            "ray stop",
            f"ulimit -n 65536; {_fast_path_prefix()}ray start --head --port=6379 --object-manager-port=8076 "
            "--autoscaling-config=~/ray_bootstrap_config.yaml --dashboard-host=0.0.0.0",
        ],
        "worker_start_ray_commands": [
            "ray stop",
            f"ulimit -n 65536; {_fast_path_prefix()}ray start --address=$RAY_HEAD_IP:6379 --object-manager-port=8076",
        ],
    }


def _fast_path_env() -> list[dict[str, str]]:
    return [{"name": key, "value": value} for key, value in FAST_PATH_ENV.items()]


def _fast_path_prefix() -> str:
    """``KEY=VALUE ...`` before a ``ray start``: every Ray process of the node starts with the fast path."""
    return "".join(f"{key}={value} " for key, value in FAST_PATH_ENV.items())


def _container(name: str, image: str, template: NodeTemplate, ports: list[tuple[str, int]]) -> dict[str, Any]:
    limits = {"cpu": str(template.pod_cpus), "memory": f"{template.pod_memory_gib}Gi"}
    if template.gpus:
        limits["nvidia.com/gpu"] = str(template.gpus)
    container: dict[str, Any] = {
        "name": name,
        "image": image,
        "resources": {"limits": limits, "requests": dict(limits)},
        # Ray 2.60 turns token authentication on; every node and client of the cluster uses it. Serve's fast
        # streaming path (HAProxy, direct ingress, same-loop replicas) is read when Ray starts on each node.
        "env": [{"name": "RAY_AUTH_MODE", "value": "token"}, *_fast_path_env()],
    }
    if ports:
        container["ports"] = [{"name": port_name, "containerPort": port} for port_name, port in ports]
    return container


def rayservice(plan: Plan, image: str = DEFAULT_IMAGE) -> dict[str, Any]:
    """A KubeRay ``RayService`` for ``plan``; its ``serveConfigV2`` is the serve config."""
    gpu = GPU_NODES[plan.accelerator]
    # KubeRay owns the HTTP port (the head service's 'serve' port, 8000): http_options are left to it.
    serve_config = {key: value for key, value in plan.serve_config.items() if key != "http_options"}
    head_ports = [("gcs-server", 6379), ("dashboard", 8265), ("client", 10001), ("serve", 8000)]
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": {"name": "variant-serve", "labels": {"app.kubernetes.io/name": "variant-serve"}},
        "spec": {
            "serveConfigV2": yaml.safe_dump(serve_config, sort_keys=False),
            "rayClusterConfig": {
                "rayVersion": RAY_VERSION,
                "enableInTreeAutoscaling": True,
                "headGroupSpec": {
                    "rayStartParams": {"dashboard-host": "0.0.0.0", "num-gpus": "0"},
                    "template": {"spec": {"containers": [_container("ray-head", image, HEAD_NODE, head_ports)]}},
                },
                "workerGroupSpecs": [
                    {
                        "groupName": f"gpu-{plan.accelerator.lower()}",
                        "replicas": plan.min_workers,
                        "minReplicas": plan.min_workers,
                        "maxReplicas": plan.max_workers,
                        # Lets the autoscaler know, before a pod exists, that this group brings the type.
                        "rayStartParams": {
                            "resources": json.dumps(json.dumps({accelerator_resource(plan.accelerator): 1}))
                        },
                        "template": {
                            "spec": {
                                "containers": [_container("ray-worker", image, gpu, [])],
                                "tolerations": [
                                    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
                                ],
                            }
                        },
                    }
                ],
            },
        },
    }


class _Dumper(yaml.SafeDumper):
    """Writes multi-line strings (serveConfigV2) as readable ``|`` blocks."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def _dump(document: dict[str, Any]) -> str:
    return yaml.dump(document, Dumper=_Dumper, sort_keys=False, width=120)


def render(plan: Plan, image: str = DEFAULT_IMAGE) -> dict[str, str]:
    """File name -> text of both manifests."""
    return {
        RAY_CLUSTER_FILE: _header(plan, "Ray cluster launcher config: ray up cluster/ray-cluster.yaml")
        + _dump(ray_cluster_config(plan, image)),
        RAYSERVICE_FILE: _header(plan, "KubeRay RayService: kubectl apply -f cluster/rayservice.yaml")
        + _dump(rayservice(plan, image)),
    }


def write_manifests(config_path: Path, out: Path, image: str = DEFAULT_IMAGE) -> list[Path]:
    """Generate both manifests from ``config_path`` into ``out``; returns the files written."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in render(plan(config_path), image).items():
        path = out / name
        path.write_text(text)
        written.append(path)
    return written
