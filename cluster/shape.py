"""The shape of a Ray cluster: its nodes and the resources each advertises.

A shape comes from a spec written by hand (for the CLI and for planning manifests) or from the running
cluster (``ray.nodes()``). Resources use Ray's own names: ``CPU``, ``GPU``, ``memory`` (bytes) and
``accelerator_type:<type>`` (1.0 on nodes whose GPUs are of that type), so a variant's placement can be
compared with a node as Ray's scheduler compares them.

Shape spec: groups joined by ``+``; a group is ``COUNTxGPUS[xTYPE][:key=value,...]``::

    2x4xH100                            two nodes, four H100 each
    1x0:cpus=16+2x8xH200:cpus=192,memory=2Ti
                                        a CPU-only head and two 8x H200 workers
    3x8xL40S:memory=512Gi,my_label=1    a custom resource on each node too

Keys: ``cpus`` (logical CPUs), ``memory`` (bytes, or with a suffix K/M/G/T (powers of 1000) or
Ki/Mi/Gi/Ti), anything else is a custom resource. CPUs and memory left out are not checked (unbounded).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from core.errors import ConfigError
from serve_app.placement import ACCELERATOR_RESOURCE_PREFIX, accelerator_resource

UNBOUNDED = math.inf
_GROUP = re.compile(r"^(?P<count>\d+)x(?P<gpus>\d+)(?:x(?P<type>[A-Za-z0-9_.-]+))?(?::(?P<extra>.+))?$")
_SIZE = re.compile(r"^(?P<number>\d+(?:\.\d+)?)(?P<unit>[KMGT]i?)?$")
_UNITS: dict[str | None, int] = {
    None: 1,
    **{unit: 1000 ** (index + 1) for index, unit in enumerate("KMGT")},
    **{f"{unit}i": 1024 ** (index + 1) for index, unit in enumerate("KMGT")},
}


class NodeShape(BaseModel):
    """One Ray node and the resources it advertises (Ray's resource names)."""

    model_config = ConfigDict(frozen=True)

    name: str = Field(description="A label for messages: the spec group and index, or the live node's IP.")
    resources: dict[str, float] = Field(
        description="Total resources of the node, as Ray names them (CPU, GPU, memory, accelerator_type:<t>)."
    )

    @property
    def gpus(self) -> int:
        return int(self.resources.get("GPU", 0))

    @property
    def accelerator_types(self) -> list[str]:
        return sorted(
            name.removeprefix(ACCELERATOR_RESOURCE_PREFIX)
            for name in self.resources
            if name.startswith(ACCELERATOR_RESOURCE_PREFIX)
        )

    def describe(self) -> str:
        kind = "/".join(self.accelerator_types)
        gpus = f"{self.gpus}x {kind}".strip() if self.gpus else "no GPU"
        cpus = self.resources.get("CPU", 0)
        return f"{self.name} ({gpus}, {'any' if cpus == UNBOUNDED else f'{cpus:g}'} CPUs)"


class ClusterShape(BaseModel):
    """All nodes of a cluster."""

    model_config = ConfigDict(frozen=True)

    nodes: list[NodeShape] = Field(description="The cluster's nodes, in a stable order.")

    def describe(self) -> str:
        return ", ".join(node.describe() for node in self.nodes) or "no nodes"


def parse_size(text: str) -> float:
    """``'200Gi'`` -> bytes; a plain number is bytes."""
    match = _SIZE.match(text.strip())
    if match is None:
        raise ValueError(f"not a size: {text!r} (examples: 34359738368, 32Gi, 200G)")
    return float(match["number"]) * _UNITS[match["unit"]]


def _group_nodes(index: int, group: str) -> list[NodeShape]:
    match = _GROUP.match(group.strip())
    if match is None:
        raise ConfigError(f"cluster shape group {group!r}: expected COUNTxGPUS[xTYPE][:key=value,...], e.g. 2x4xH100")
    resources: dict[str, float] = {"CPU": UNBOUNDED, "memory": UNBOUNDED, "GPU": float(match["gpus"])}
    if match["type"]:
        if int(match["gpus"]) == 0:
            raise ConfigError(f"cluster shape group {group!r}: an accelerator type needs GPUs")
        resources[accelerator_resource(match["type"])] = 1.0
    for item in (match["extra"] or "").split(","):
        if not item:
            continue
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"cluster shape group {group!r}: {item!r} is not key=value")
        try:
            if key == "cpus":
                resources["CPU"] = float(value)
            elif key == "memory":
                resources["memory"] = parse_size(value)
            else:
                resources[key] = float(value)
        except ValueError as error:
            raise ConfigError(f"cluster shape group {group!r}: {key}: {error}") from None
    return [
        NodeShape(name=f"group{index}-node{node}", resources=dict(resources)) for node in range(int(match["count"]))
    ]


def parse_shape(spec: str | Iterable[str]) -> ClusterShape:
    """A shape from a spec (see the module docstring); several specs (a list) add up."""
    specs = [spec] if isinstance(spec, str) else list(spec)
    groups = [group for text in specs for group in text.split("+") if group.strip()]
    if not groups:
        raise ConfigError("empty cluster shape: give at least one group, e.g. 2x4xH100")
    return ClusterShape(nodes=[node for index, group in enumerate(groups) for node in _group_nodes(index, group)])


def shape_from_ray_nodes(nodes: Iterable[Mapping[str, Any]]) -> ClusterShape:
    """A shape from ``ray.nodes()`` output: the alive nodes and their total resources.

    Ray's per-node bookkeeping resources (``node:<ip>``, ``node:__internal_head__``, ``object_store_memory``)
    are left out: no replica asks for them.
    """
    shape_nodes = []
    for node in nodes:
        if not node.get("Alive", node.get("alive", False)):
            continue
        resources = {
            name: float(quantity)
            for name, quantity in node.get("Resources", {}).items()
            if not name.startswith("node:") and name != "object_store_memory"
        }
        label = node.get("NodeManagerAddress", "?")
        shape_nodes.append(NodeShape(name=f"{label}/{str(node.get('NodeID', ''))[:8]}", resources=resources))
    return ClusterShape(nodes=shape_nodes)


def read_live_shape() -> ClusterShape:
    """The shape of the Ray cluster this process is connected to (``ray.init`` must have run)."""
    import ray  # imported here: the pure parts of this module must not pay for importing Ray

    return shape_from_ray_nodes(ray.nodes())
