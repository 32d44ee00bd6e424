"""Can an app's replicas be placed on a cluster of a given shape, and how far can each variant scale?

Run before a deploy (``python -m cluster check serve_config.yaml --nodes 2x4xH100``, or ``--live`` for the
running cluster) and from the app builder when a cluster shape is known, so that an impossible config (a
TP8 variant on 4-GPU nodes, an H100-only variant on L40S nodes) fails at once with a message that names the
variant and the reason, instead of a replica that stays PENDING forever.

The check packs the replicas Serve starts at deploy time (fixed ``num_replicas``, or the autoscaling
``initial_replicas`` / ``min_replicas``) and the ingress replicas onto empty nodes, first-fit with the largest
replicas first; each replica's bundles all go to one node (``serve_app.placement``), and GPUs are handed out
per bundle as Ray does (whole GPUs for ``num_gpus >= 1``, a share of one GPU below 1). Then it adds replicas of
each variant, the others held at their deploy counts, to find the most that fit. First-fit is a heuristic:
when it reports a fit, the fit exists; in rare mixes of sizes an optimal packer could place more.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from pydantic import BaseModel, Field

from cluster.shape import ClusterShape, NodeShape
from core.errors import ConfigError
from serve_app.config import AppConfig, VariantConfig
from serve_app.placement import ACCELERATOR_RESOURCE_PREFIX, replica_bundles, tensor_parallel_size

INGRESS = "ingress"
_EPSILON = 1e-9


class VariantFit(BaseModel):
    """How one variant (or the ingress) fits the cluster."""

    name: str = Field(description="Variant name, or 'ingress'.")
    bundles: list[dict[str, float]] = Field(description="Resources of one replica; all bundles on one node.")
    deploy_replicas: int = Field(description="Replicas Serve starts at deploy time.")
    max_replicas: int = Field(description="Most replicas the config allows.")
    placed_replicas: int = Field(description="Deploy-time replicas the packing placed.")
    max_placeable: int = Field(
        description="Most replicas that fit while every other deployment keeps its deploy-time replicas "
        "(capped at max_replicas)."
    )
    nodes: list[str] = Field(description="The node of each placed deploy-time replica.")


class FeasibilityReport(BaseModel):
    """The answer of :func:`check_feasibility`."""

    cluster: str = Field(description="The cluster shape, in words.")
    fits: list[VariantFit] = Field(description="One entry per variant, then the ingress.")
    problems: list[str] = Field(description="Why the deploy-time replicas cannot all be placed; empty if they can.")
    warnings: list[str] = Field(description="Limits that do not block the deploy (autoscaling cannot reach max).")

    @property
    def ok(self) -> bool:
        return not self.problems

    def describe(self) -> str:
        lines = [f"cluster: {self.cluster}"]
        for fit in self.fits:
            lines.append(
                f"  {fit.name}: {fit.placed_replicas}/{fit.deploy_replicas} deploy replicas placed, "
                f"up to {fit.max_placeable} of max {fit.max_replicas} fit; one replica = {fit.bundles}"
            )
        lines += [f"problem: {problem}" for problem in self.problems]
        lines += [f"warning: {warning}" for warning in self.warnings]
        return "\n".join(lines)


@dataclass
class _Node:
    """A node's free resources while packing."""

    shape: NodeShape
    free: dict[str, float]
    gpu_free: list[float] = field(default_factory=list)

    @classmethod
    def empty(cls, shape: NodeShape) -> _Node:
        free = {name: quantity for name, quantity in shape.resources.items() if name != "GPU"}
        return cls(shape=shape, free=free, gpu_free=[1.0] * shape.gpus)

    def copy(self) -> _Node:
        return _Node(shape=self.shape, free=dict(self.free), gpu_free=list(self.gpu_free))

    def try_place(self, bundles: list[dict[str, float]]) -> bool:
        """Reserve ``bundles`` here if all of them fit; leave the node untouched otherwise."""
        free = dict(self.free)
        gpu_free = list(self.gpu_free)
        for bundle in bundles:
            for name, quantity in bundle.items():
                if name == "GPU":
                    continue
                if free.get(name, 0.0) + _EPSILON < quantity:
                    return False
                free[name] = free.get(name, 0.0) - quantity
            if not _take_gpus(gpu_free, bundle.get("GPU", 0.0)):
                return False
        self.free, self.gpu_free = free, gpu_free
        return True


def _take_gpus(gpu_free: list[float], request: float) -> bool:
    if request <= 0:
        return True
    if request >= 1:
        idle = [index for index, share in enumerate(gpu_free) if share >= 1 - _EPSILON]
        if len(idle) < request:
            return False
        for index in idle[: int(request)]:
            gpu_free[index] = 0.0
        return True
    # A fraction shares one GPU; take the fullest one that still has room, as a best fit.
    candidates = [index for index, share in enumerate(gpu_free) if share + _EPSILON >= request]
    if not candidates:
        return False
    best = min(candidates, key=lambda index: gpu_free[index])
    gpu_free[best] -= request
    return True


def _place(nodes: list[_Node], bundles: list[dict[str, float]]) -> _Node | None:
    for node in nodes:
        if node.try_place(bundles):
            return node
    return None


def deploy_replicas(variant: VariantConfig) -> int:
    """Replicas Serve starts when the variant is deployed."""
    if variant.autoscaling is None:
        return variant.num_replicas or 1
    if variant.autoscaling.initial_replicas is not None:
        return variant.autoscaling.initial_replicas
    return variant.autoscaling.min_replicas


def max_replicas(variant: VariantConfig) -> int:
    """Most replicas the variant's config allows."""
    if variant.autoscaling is None:
        return variant.num_replicas or 1
    return variant.autoscaling.max_replicas


def _total(bundles: list[dict[str, float]]) -> dict[str, float]:
    total: dict[str, float] = {}
    for bundle in bundles:
        for name, quantity in bundle.items():
            total[name] = total.get(name, 0.0) + quantity
    return total


def _quantity(value: float, name: str) -> str:
    if value == math.inf:
        return "unbounded"
    if name == "memory":
        return f"{value / 2**30:g} GiB"
    return f"{value:g}"


def why_no_node_fits(name: str, bundles: list[dict[str, float]], gpus: int, shape: ClusterShape) -> str | None:
    """Why no node of ``shape``, even empty, can host one replica; None when some node can."""
    if any(_Node.empty(node).try_place(bundles) for node in shape.nodes):
        return None
    total = _total(bundles)
    one_node = " on one node" if total.get("GPU", 0) > 1 else ""
    for resource in sorted(total):
        if resource == "GPU":
            continue
        if not any(resource in node.resources for node in shape.nodes):
            if resource.startswith(ACCELERATOR_RESOURCE_PREFIX):
                wanted = resource.removeprefix(ACCELERATOR_RESOURCE_PREFIX)
                have = sorted({kind for node in shape.nodes for kind in node.accelerator_types})
                return (
                    f"{name}: needs accelerator type {wanted!r} but no node has it "
                    f"(the cluster has {', '.join(have) or 'no typed GPUs'})"
                )
            return f"{name}: needs custom resource {resource!r} but no node has it"
    # The nodes that have every resource the replica names (the right accelerator type, the labels).
    eligible = [node for node in shape.nodes if all(resource in node.resources for resource in total)]
    wanted_gpus = total.get("GPU", 0.0)
    most_gpus = max((node.gpus for node in eligible), default=0)
    if wanted_gpus > most_gpus:
        kind = next(
            (r.removeprefix(ACCELERATOR_RESOURCE_PREFIX) for r in total if r.startswith(ACCELERATOR_RESOURCE_PREFIX)),
            None,
        )
        where = f"{kind} node" if kind else "node"
        tp = f" (tensor_parallel_size {gpus})" if gpus > 1 else ""
        return f"{name}: one replica needs {wanted_gpus:g} GPUs{one_node}{tp}, but the largest {where} has {most_gpus}"
    for resource in ("CPU", "memory", *sorted(total)):
        if resource not in total or resource == "GPU":
            continue
        most = max((node.resources.get(resource, 0.0) for node in eligible), default=0.0)
        if total[resource] > most + _EPSILON:
            return (
                f"{name}: one replica needs {_quantity(total[resource], resource)} {resource}{one_node}, "
                f"but the largest eligible node has {_quantity(most, resource)}"
            )
    return f"{name}: no node can host one replica {bundles} (the cluster: {shape.describe()})"


@dataclass
class _Deployment:
    name: str
    bundles: list[dict[str, float]]
    gpus_per_replica: int
    deploy: int
    maximum: int


def _deployments(config: AppConfig) -> list[_Deployment]:
    deployments = [
        _Deployment(
            name=variant.name,
            bundles=replica_bundles(variant),
            gpus_per_replica=tensor_parallel_size(variant.engine),
            deploy=deploy_replicas(variant),
            maximum=max_replicas(variant),
        )
        for variant in config.variants
    ]
    ingress = config.ingress
    deployments.append(
        _Deployment(
            name=INGRESS,
            bundles=[{"CPU": ingress.num_cpus}],
            gpus_per_replica=0,
            deploy=ingress.num_replicas,
            maximum=ingress.num_replicas,
        )
    )
    return deployments


def _size_key(deployment: _Deployment) -> tuple[float, float, float]:
    total = _total(deployment.bundles)
    return (-total.get("GPU", 0.0), -total.get("CPU", 0.0), -total.get("memory", 0.0))


def check_feasibility(config: AppConfig, shape: ClusterShape) -> FeasibilityReport:
    """Whether every deployment's deploy-time replicas fit on ``shape``, and how far each can scale.

    Pure: reads nothing but its arguments. ``problems`` lists each deployment that cannot be placed, with
    the reason; ``warnings`` lists autoscaling maxima the cluster cannot reach.
    """
    deployments = _deployments(config)
    problems: list[str] = []
    hopeless: set[str] = set()
    for deployment in deployments:
        if deployment.deploy == 0 and deployment.maximum == 0:
            continue
        reason = why_no_node_fits(deployment.name, deployment.bundles, deployment.gpus_per_replica, shape)
        if reason is not None:
            hopeless.add(deployment.name)
            if deployment.deploy > 0:
                problems.append(reason)

    nodes = [_Node.empty(node) for node in shape.nodes]
    placed: dict[str, list[str]] = {deployment.name: [] for deployment in deployments}
    for deployment in sorted(deployments, key=_size_key):
        if deployment.name in hopeless:
            continue
        for _ in range(deployment.deploy):
            node = _place(nodes, deployment.bundles)
            if node is None:
                break
            placed[deployment.name].append(node.shape.name)
        missing = deployment.deploy - len(placed[deployment.name])
        if missing:
            problems.append(
                f"{deployment.name}: {missing} of its {deployment.deploy} deploy-time replicas do not fit beside "
                f"the other deployments (one replica = {deployment.bundles}; cluster: {shape.describe()})"
            )

    warnings: list[str] = []
    fits: list[VariantFit] = []
    for deployment in deployments:
        count = len(placed[deployment.name])
        if deployment.name not in hopeless:
            trial = [node.copy() for node in nodes]
            while count < deployment.maximum and _place(trial, deployment.bundles) is not None:
                count += 1
        if deployment.name in hopeless and deployment.deploy == 0:
            warnings.append(
                why_no_node_fits(deployment.name, deployment.bundles, deployment.gpus_per_replica, shape)
                or deployment.name
            )
        elif count < deployment.maximum and not problems:
            warnings.append(
                f"{deployment.name}: at most {count} of max {deployment.maximum} replicas fit on this cluster"
            )
        fits.append(
            VariantFit(
                name=deployment.name,
                bundles=deployment.bundles,
                deploy_replicas=deployment.deploy,
                max_replicas=deployment.maximum,
                placed_replicas=len(placed[deployment.name]),
                max_placeable=count,
                nodes=placed[deployment.name],
            )
        )
    return FeasibilityReport(cluster=shape.describe(), fits=fits, problems=problems, warnings=warnings)


def fits_all(config: AppConfig, shape: ClusterShape, replicas: dict[str, int]) -> bool:
    """Whether ``replicas`` (deployment name -> count; the ingress is named ``'ingress'``, a missing name means
    its deploy-time count) all fit on ``shape`` together, by the same packing as :func:`check_feasibility`."""
    nodes = [_Node.empty(node) for node in shape.nodes]
    for deployment in sorted(_deployments(config), key=_size_key):
        for _ in range(replicas.get(deployment.name, deployment.deploy)):
            if _place(nodes, deployment.bundles) is None:
                return False
    return True


def ensure_feasible(config: AppConfig, shape: ClusterShape) -> FeasibilityReport:
    """:func:`check_feasibility`, raising ConfigError that lists every problem when a replica cannot fit."""
    report = check_feasibility(config, shape)
    if not report.ok:
        lines = "\n".join(f"  {problem}" for problem in report.problems)
        raise ConfigError(f"the app's replicas cannot be placed on this cluster ({report.cluster}):\n{lines}")
    return report
