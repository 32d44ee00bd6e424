"""The KubeRay ``RayService`` (``ray.io/v1``) fields our manifest uses, as strict pydantic models.

Transcribed from KubeRay's Go types (ray-project/kuberay ``ray-operator/apis/ray/v1/rayservice_types.go`` and
``raycluster_types.go``; json tags as field aliases) and, for the pod template, the subset of Kubernetes
``core/v1`` that the generated manifest writes. Unknown keys are rejected, so a misspelled or misplaced field
fails the tests instead of being dropped silently by the API server's pruning.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class _K8s(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class ContainerPort(_K8s):
    name: str | None = None
    container_port: int = Field(alias="containerPort", ge=1, le=65535)


class ResourceRequirements(_K8s):
    limits: dict[str, str] = Field(default_factory=dict)
    requests: dict[str, str] = Field(default_factory=dict)


class EnvVar(_K8s):
    name: str
    value: str


class Container(_K8s):
    name: str
    image: str
    ports: list[ContainerPort] = Field(default_factory=list)
    resources: ResourceRequirements = Field(default_factory=ResourceRequirements)
    env: list[EnvVar] = Field(default_factory=list)


class Toleration(_K8s):
    key: str
    operator: Literal["Exists", "Equal"]
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None


class PodSpec(_K8s):
    containers: list[Container] = Field(min_length=1)
    tolerations: list[Toleration] = Field(default_factory=list)


class PodTemplateSpec(_K8s):
    spec: PodSpec


class HeadGroupSpec(_K8s):
    ray_start_params: dict[str, str] = Field(alias="rayStartParams")
    template: PodTemplateSpec


class WorkerGroupSpec(_K8s):
    group_name: str = Field(alias="groupName")
    replicas: int | None = Field(None, ge=0)
    min_replicas: int = Field(alias="minReplicas", ge=0)
    max_replicas: int = Field(alias="maxReplicas", ge=0)
    ray_start_params: dict[str, str] = Field(alias="rayStartParams")
    template: PodTemplateSpec


class RayClusterSpec(_K8s):
    head_group_spec: HeadGroupSpec = Field(alias="headGroupSpec")
    worker_group_specs: list[WorkerGroupSpec] = Field(default_factory=list, alias="workerGroupSpecs")
    ray_version: str | None = Field(None, alias="rayVersion")
    enable_in_tree_autoscaling: bool | None = Field(None, alias="enableInTreeAutoscaling")


class RayServiceSpec(_K8s):
    serve_config_v2: str = Field(alias="serveConfigV2")
    ray_cluster_config: RayClusterSpec = Field(alias="rayClusterConfig")


class ObjectMeta(_K8s):
    name: str
    labels: dict[str, str] = Field(default_factory=dict)


class RayService(_K8s):
    api_version: Literal["ray.io/v1"] = Field(alias="apiVersion")
    kind: Literal["RayService"]
    metadata: ObjectMeta
    spec: RayServiceSpec
