"""How one replica of a variant lands on a Ray cluster: the one place that turns a variant's resources and
engine into Ray Serve placement options.

A tensor-parallel replica needs all of its GPUs on one node (NCCL between ranks inside a node). How that is
guaranteed depends on where the engine's ranks run:

* **In the replica's process tree** (``hf`` with a device map, ``trtllm`` with MPI, the ``openai_server``
  sidecar): the replica actor itself reserves ``num_gpus = tensor_parallel_size``. One actor always sits on
  one node, and its children inherit ``CUDA_VISIBLE_DEVICES``.
* **In separate Ray actors** (``trtllm`` with ``orchestrator_type: ray``): the replica reserves a placement
  group, ``STRICT_PACK`` (one node), whose first bundle holds the replica (CPUs, memory) and which has one
  ``{"GPU": 1}`` bundle per rank. Serve schedules the replica's child actors into that group, and TensorRT-LLM's
  Ray executor uses the current placement group at the bundle indices in ``TRTLLM_RAY_BUNDLE_INDICES``
  (``tensorrt_llm/executor/ray_executor.py``) instead of creating a second one that would double-book GPUs.

Everything here is a pure function of the config, so the feasibility check and the manifests generator see
exactly the placement the app deploys.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any, Protocol

ACCELERATOR_RESOURCE_PREFIX = "accelerator_type:"
# What Ray itself asks of a node for ray_actor_options' accelerator_type (ray._private.accelerators): a
# sliver of the node's 1.0 "accelerator_type:<name>" resource, so any number of replicas can share a node.
ACCELERATOR_REQUEST = 0.001
# Bundle index of the replica actor: Serve always puts the replica in bundle 0.
REPLICA_BUNDLE = 0


class WorkerLayout(StrEnum):
    """Where an engine runs its tensor-parallel ranks."""

    IN_REPLICA = "in_replica"  # the replica process and its children (MPI, device map, a sidecar server)
    RAY_ACTORS = "ray_actors"  # one Ray actor per rank, created by the replica


class _Resources(Protocol):
    """What the placement reads of a replica's resources (``serve_app.config.ReplicaResources``)."""

    @property
    def num_cpus(self) -> float: ...
    @property
    def memory_bytes(self) -> int | None: ...
    @property
    def accelerator_type(self) -> str | None: ...
    @property
    def resources(self) -> dict[str, float]: ...
    def to_ray_actor_options(self) -> dict[str, Any]: ...


class _RuntimeEnv(Protocol):
    """What the placement reads of a variant's runtime_env (``serve_app.config.EngineRuntimeEnv``)."""

    def to_ray(self) -> dict[str, Any]: ...


class PlacedVariant(Protocol):
    """What the placement reads of a variant (``serve_app.config.VariantConfig``): spelled out here rather than
    imported, since the config's ``deployment_options`` calls this module (no import cycle)."""

    @property
    def engine(self) -> Any: ...  # an engines.config engine config
    @property
    def resources(self) -> _Resources: ...
    @property
    def runtime_env(self) -> _RuntimeEnv | None: ...


def accelerator_resource(accelerator_type: str) -> str:
    """The node resource Ray advertises for an accelerator type (``'H100'`` -> ``'accelerator_type:H100'``)."""
    return f"{ACCELERATOR_RESOURCE_PREFIX}{accelerator_type}"


def worker_layout(engine: Any) -> WorkerLayout:
    """Where ``engine`` (an ``engines.config`` engine config) runs its ranks."""
    if engine.backend == "trtllm" and engine.extra_llm_args.get("orchestrator_type") == "ray":
        return WorkerLayout.RAY_ACTORS
    return WorkerLayout.IN_REPLICA


def tensor_parallel_size(engine: Any) -> int:
    """Ranks of one replica: the engine's ``tensor_parallel_size``; 1 for engines without one (``hf``)."""
    return int(getattr(engine, "tensor_parallel_size", 1))


def replica_placement(variant: PlacedVariant) -> dict[str, Any]:
    """Serve deployment options that place one replica of ``variant``.

    Returns ``ray_actor_options``, plus ``placement_group_bundles`` and ``placement_group_strategy`` when
    the engine's ranks are separate Ray actors. The keys are those of ``ray.serve.deployment``.
    """
    resources = variant.resources
    if worker_layout(variant.engine) is WorkerLayout.IN_REPLICA:
        return {"ray_actor_options": _with_runtime_env(resources.to_ray_actor_options(), variant, {})}

    ranks = tensor_parallel_size(variant.engine)
    accelerator = (
        {accelerator_resource(resources.accelerator_type): ACCELERATOR_REQUEST}
        if resources.accelerator_type is not None
        else {}
    )
    replica_bundle: dict[str, float] = {"CPU": resources.num_cpus, **resources.resources}
    actor_options: dict[str, Any] = {"num_cpus": resources.num_cpus, "num_gpus": 0}
    if resources.memory_bytes is not None:
        replica_bundle["memory"] = resources.memory_bytes
        actor_options["memory"] = resources.memory_bytes
    if resources.resources:
        actor_options["resources"] = dict(resources.resources)
    # The accelerator type goes on every GPU bundle (the GPUs are what must be H100s); the replica actor does
    # not ask for it, since a resource it asks for must also be in bundle 0.
    gpu_bundles = [{"GPU": 1.0, **accelerator} for _ in range(ranks)]
    placement_env = {
        # TensorRT-LLM's Ray executor: use the current placement group, rank i in bundle i + 1.
        "TRTLLM_RAY_BUNDLE_INDICES": ",".join(str(REPLICA_BUNDLE + 1 + rank) for rank in range(ranks)),
        # The replica reserves no GPU itself, so Ray would hide every GPU from it (CUDA_VISIBLE_DEVICES="")
        # and the engine's GPU count check would see 0; TensorRT-LLM's executor sets the same for its
        # workers, which pick their device from ray.get_gpu_ids().
        "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "1",
    }
    return {
        "ray_actor_options": _with_runtime_env(actor_options, variant, placement_env),
        "placement_group_bundles": [replica_bundle, *gpu_bundles],
        # STRICT_PACK: every bundle on one node, or the replica is not placed at all.
        "placement_group_strategy": "STRICT_PACK",
    }


def _with_runtime_env(
    actor_options: dict[str, Any], variant: PlacedVariant, placement_env: dict[str, str]
) -> dict[str, Any]:
    """``actor_options`` with the variant's runtime_env (VariantConfig.runtime_env) and the placement's own
    environment variables, which the config refuses to let the variant's override. The engine's Ray actors (a
    ``ray_actors`` layout) inherit the replica's runtime_env, as Ray's child actors do."""
    env = variant.runtime_env.to_ray() if variant.runtime_env is not None else {}
    env_vars = {**env.get("env_vars", {}), **placement_env}
    if env_vars:
        env["env_vars"] = env_vars
    if env:
        actor_options["runtime_env"] = env
    return actor_options


def _actor_resources(actor_options: Mapping[str, Any]) -> dict[str, float]:
    demand: dict[str, float] = {
        "CPU": float(actor_options.get("num_cpus", 1)),
        "GPU": float(actor_options.get("num_gpus", 0)),
    }
    if actor_options.get("memory"):
        demand["memory"] = float(actor_options["memory"])
    if actor_options.get("accelerator_type"):
        demand[accelerator_resource(actor_options["accelerator_type"])] = ACCELERATOR_REQUEST
    for name, quantity in actor_options.get("resources", {}).items():
        demand[name] = demand.get(name, 0.0) + float(quantity)
    return {name: quantity for name, quantity in demand.items() if quantity > 0}


def placement_bundles(placement: Mapping[str, Any]) -> list[dict[str, float]]:
    """The resource bundles of one replica placed with ``placement`` (what :func:`replica_placement` returns).

    Every bundle must land on one node: a placement group is ``STRICT_PACK``, a lone actor is one bundle.
    Kept as separate bundles because GPUs are handed out per bundle (two ``{"GPU": 0.5}`` bundles may
    share a GPU, two ``{"GPU": 1}`` bundles never do).
    """
    bundles = placement.get("placement_group_bundles")
    if bundles is None:
        return [_actor_resources(placement["ray_actor_options"])]
    return [{name: float(quantity) for name, quantity in bundle.items() if quantity > 0} for bundle in bundles]


def replica_bundles(variant: PlacedVariant) -> list[dict[str, float]]:
    """The resource bundles one replica of ``variant`` takes from a single node."""
    return placement_bundles(replica_placement(variant))
