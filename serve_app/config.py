"""The serve app's typed configuration: the ``args`` of the application in ``serve_config.yaml``.

``serve run serve_config.yaml`` hands the application's ``args`` to ``serve_app.app:build_app``, which
calls :func:`load_app_config`. Every mistake this schema can see is reported there, at deploy time, as
one :class:`~core.errors.ConfigError` that lists each problem as ``<field path>: <message>``
(for example ``variants[1].name: duplicate variant name 'tiny'``), instead of surfacing later as a
replica that cannot be placed or an engine that crashes while loading.

Check a file without Ray running::

    python -m serve_app.config serve_config.yaml
"""

from __future__ import annotations

import argparse
import math
import sys
import typing
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from core.config import ConfigProblems, StrictModel, raise_if_any
from core.errors import ConfigError
from engines.config import EngineConfig
from router import LatencyProfile, RouterConfig
from router.config import ReplicaChoice
from router.serve_autoscaling import AutoscalingSpec
from serve_app.auth import AuthConfig
from serve_app.placement import replica_placement
from serve_app.ray_compat import fixed_replicas

# URL- and metric-label-safe, and short enough to embed in deployment and replica names.
VARIANT_NAME_PATTERN = r"^[a-zA-Z0-9][a-zA-Z0-9._-]{0,62}$"

# LimitsConfig's defaults, also used to size a lone VariantConfig's drain timeout.
DEFAULT_MAX_TOKENS_LIMIT = 4096
DEFAULT_REQUEST_TIMEOUT_S = 600.0
# Added to a computed drain timeout: Serve checks for open requests every graceful_shutdown_wait_loop_s
# (2 s) and then runs the replica's __del__ (engine shutdown) inside the same budget.
DRAIN_MARGIN_S = 10.0


class ReplicaResources(StrictModel):
    """What one replica reserves from the Ray cluster (becomes Ray Serve's ``ray_actor_options``)."""

    num_cpus: float = Field(
        1.0,
        gt=0,
        description="Logical CPUs reserved per replica. Fractions let several replicas share a small "
        "machine; note that Ray then sets OMP_NUM_THREADS=1 in the replica (see engine num_threads).",
    )
    num_gpus: float = Field(
        0.0,
        ge=0,
        description="GPUs reserved per replica; Ray sets CUDA_VISIBLE_DEVICES to them. Must cover the "
        "engine's tensor_parallel_size. Fractions (< 1) share one GPU; above 1 it must be whole.",
    )
    memory_bytes: int | None = Field(
        None,
        ge=1,
        description="Heap memory reserved per replica, in bytes (Ray's 'memory' resource); None reserves "
        "none. Only a scheduling hint: Ray does not cap the process at it.",
    )
    accelerator_type: str | None = Field(
        None,
        description="Ray accelerator type the replica must land on (for example 'H100', 'H200', 'A100'); "
        "None accepts any node with free GPUs.",
    )
    resources: dict[str, float] = Field(
        default_factory=dict,
        description="Custom Ray resources reserved per replica (for example {'h200_node': 0.01} to pin "
        "replicas to labelled nodes). CPU and GPU belong in num_cpus / num_gpus.",
    )

    @field_validator("num_gpus")
    @classmethod
    def _whole_above_one(cls, value: float) -> float:
        # Ray only accepts fractional resource requests below 1; 1.5 GPUs cannot be scheduled.
        if value > 1 and not value.is_integer():
            raise ValueError(f"must be a whole number when above 1, got {value}")
        return value

    @field_validator("resources")
    @classmethod
    def _custom_resources(cls, value: dict[str, float]) -> dict[str, float]:
        for name, quantity in value.items():
            if name in ("CPU", "GPU", "memory"):
                raise ValueError(f"{name!r} is not a custom resource: use num_cpus / num_gpus / memory_bytes")
            if quantity < 0:
                raise ValueError(f"{name!r}: quantity must be >= 0, got {quantity}")
        return value

    def to_ray_actor_options(self) -> dict[str, Any]:
        """Ray Serve ``ray_actor_options``; unset optional resources are left out (Ray's defaults)."""
        options: dict[str, Any] = {"num_cpus": self.num_cpus, "num_gpus": self.num_gpus}
        if self.memory_bytes is not None:
            options["memory"] = self.memory_bytes
        if self.accelerator_type is not None:
            options["accelerator_type"] = self.accelerator_type
        if self.resources:
            options["resources"] = dict(self.resources)
        return options


# Environment variables Ray or the replica placement set for each engine replica (serve_app/placement.py): a
# variant's runtime_env may not set them, since that would undo the GPU assignment.
RESERVED_ENGINE_ENV_VARS = frozenset(
    {"CUDA_VISIBLE_DEVICES", "TRTLLM_RAY_BUNDLE_INDICES", "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"}
)


class EngineRuntimeEnv(StrictModel):
    """The Ray ``runtime_env`` of one variant's engine replicas, apart from the ingress's (which keeps the job's).

    Ray starts each engine replica in a worker process made for this environment: another Python (a virtualenv
    holding ``tensorrt_llm`` for the in-process backend), a container image, extra packages or environment
    variables. That Python must import this package and the cluster's exact Ray version (every Ray process of a
    cluster runs one version; docs/tensorrt-llm.md, "Recipe C"). Becomes the deployment's
    ``ray_actor_options.runtime_env``; Ray's own ``RuntimeEnv`` checks it at deploy time too.
    """

    py_executable: str | None = Field(
        None,
        description="The Python the engine replicas run on, or a command that starts one (Ray's py_executable), "
        "e.g. /opt/trtllm-venv/bin/python: a virtualenv on every GPU node with tensorrt_llm, this package and the "
        "cluster's Ray version.",
    )
    image_uri: str | None = Field(
        None,
        description="A container image the engine replicas run in (Ray's image_uri; the nodes need podman), "
        "holding the cluster's Ray version, this package and the engine. Only env_vars may go with it.",
    )
    pip: list[str] | None = Field(
        None, description="Packages pip installs into a virtualenv made for these replicas (Ray's pip)."
    )
    uv: list[str] | None = Field(None, description="The same, installed with uv (Ray's uv).")
    conda: str | None = Field(None, description="A conda environment's name (Ray's conda).")
    working_dir: str | None = Field(
        None, description="A local directory or a zip URI that becomes the replicas' working directory."
    )
    py_modules: list[str] | None = Field(None, description="Local directories or URIs put on the replicas' path.")
    env_vars: dict[str, str] = Field(
        default_factory=dict,
        description="Environment variables of the engine replicas (and the engine servers they start). "
        "CUDA_VISIBLE_DEVICES and the placement's own are refused: Ray sets them per replica.",
    )
    setup_timeout_s: int | None = Field(
        None,
        gt=0,
        description="How long Ray may take to build this environment on a node (pip, image pull) before the "
        "replica fails (Ray's config.setup_timeout_seconds; its default is 600 s).",
    )

    @field_validator("env_vars")
    @classmethod
    def _no_reserved_env_vars(cls, env_vars: dict[str, str]) -> dict[str, str]:
        reserved = sorted(set(env_vars) & RESERVED_ENGINE_ENV_VARS)
        if reserved:
            raise ValueError(f"{', '.join(reserved)}: set by Ray and the replica placement for each replica")
        return env_vars

    @model_validator(mode="after")
    def _ray_accepts_it(self) -> EngineRuntimeEnv:
        # Ray's own checks (pip / uv / conda exclusive, image_uri only with env_vars, each field's type), at deploy
        # time rather than when a node first builds the environment. Imported here: ray is slow to import.
        from ray.runtime_env import RuntimeEnv

        try:
            RuntimeEnv(**self.to_ray())
        except (ValueError, TypeError) as error:
            raise ValueError(f"Ray refuses this runtime_env: {error}") from None
        return self

    def to_ray(self) -> dict[str, Any]:
        """Ray's ``runtime_env`` dict: the fields that are set, Ray's names."""
        env: dict[str, Any] = self.model_dump(exclude_none=True, exclude={"setup_timeout_s", "env_vars"})
        if self.env_vars:
            env["env_vars"] = dict(self.env_vars)
        if self.setup_timeout_s is not None:
            env["config"] = {"setup_timeout_seconds": self.setup_timeout_s}
        return env


class VariantConfig(StrictModel):
    """One engine variant: an engine config, the replicas that run it and the facts the router weighs."""

    name: str = Field(
        pattern=VARIANT_NAME_PATTERN,
        description="Variant name, unique within the app: letters, digits, '.', '_', '-' (max 63). "
        "Clients may address a variant directly by it; it also names the Serve deployment.",
    )
    engine: EngineConfig = Field(description="The engine this variant runs, selected by its 'backend' field.")
    description: str = Field("", description="Free text for humans (shown in /v1/models).")
    resources: ReplicaResources = Field(
        default_factory=ReplicaResources, description="What each replica of this variant reserves."
    )
    max_ongoing_requests: int = Field(
        64,
        ge=1,
        description="Streams Serve sends to one replica at once. Ray's default (5) would queue streams "
        "in front of an engine that batches dozens; the engine's own queue limit answers overload.",
    )
    num_replicas: int | None = Field(
        None,
        ge=1,
        description="A fixed number of replicas. Set this or autoscaling, not both; neither means 1.",
    )
    autoscaling: AutoscalingSpec | None = Field(
        None, description="Autoscale the replicas between bounds. Set this or num_replicas, not both."
    )
    graceful_shutdown_timeout_s: float | None = Field(
        None,
        ge=0,
        description="How long a replica being stopped (scale-down, redeploy) may drain its open streams "
        "before it is killed. None sizes it so that no accepted stream is cut (see drain_timeout_s): "
        "Serve stops sending the replica requests, waits for its open ones, then stops it.",
    )
    drain_tokens_per_s: float = Field(
        10.0,
        gt=0,
        description="A conservative (slow) decode speed of one stream on this variant under full load, in "
        "tokens/s; with the app's max_tokens_limit it sizes the default graceful_shutdown_timeout_s.",
    )
    health_check_period_s: float = Field(10.0, gt=0, description="Seconds between health checks of a replica.")
    health_check_timeout_s: float = Field(
        30.0, gt=0, description="Seconds a health check may take before the replica counts as unhealthy."
    )
    quality: float = Field(
        1.0,
        gt=0,
        le=1,
        description="Relative answer quality in (0, 1], higher is better; the router trades it against "
        "latency and cost. Only comparisons between variants of one app matter.",
    )
    cost_per_1k_tokens: float = Field(
        0.0,
        ge=0,
        description="Relative cost of 1000 tokens (prompt + output) on this variant, for the router.",
    )
    replica_choice: ReplicaChoice = Field(
        "least_prefill",
        description="How a request finds its replica within this variant: 'least_prefill' ranks replicas by the "
        "prompt work not yet prefilled, from what the ingress sent them and their own reports on the stats board "
        "(serve_app/replica_router.py; keeps short prompts from queueing behind long ones), 'power_of_two' is "
        "Serve's default (ongoing requests).",
    )
    runtime_env: EngineRuntimeEnv | None = Field(
        None,
        description="The engine replicas' own Ray runtime_env (another Python, a container image, packages, "
        "environment variables), apart from the ingress's; None keeps the job's. See docs/tensorrt-llm.md.",
    )
    latency_profile: LatencyProfile | None = Field(
        None,
        description="Measured latency figures that seed the router's latency model for this variant "
        "(from `python -m bench engine` or published figures); None starts from conservative defaults. "
        "The model keeps learning from every finished request either way.",
    )

    @model_validator(mode="after")
    def _consistent(self) -> VariantConfig:
        problems = []
        if self.num_replicas is not None and self.autoscaling is not None:
            problems.append(("num_replicas", "set either num_replicas or autoscaling, not both"))
        # Only GPU backends declare tensor_parallel_size (hf has device instead, checked below); an
        # engine reached at a URL runs elsewhere, so the replica itself needs no GPU.
        tensor_parallel_size = getattr(self.engine, "tensor_parallel_size", None)
        remote = getattr(self.engine, "url", None) is not None
        if not remote and tensor_parallel_size is not None and tensor_parallel_size > self.resources.num_gpus:
            # With MPI (TensorRT-LLM's default) the TP workers inherit the replica's visible GPUs.
            problems.append(
                (
                    "engine.tensor_parallel_size",
                    f"{tensor_parallel_size} needs {tensor_parallel_size} GPUs per replica but "
                    f"resources.num_gpus is {self.resources.num_gpus:g}",
                )
            )
        if getattr(self.engine, "device", None) == "cuda" and self.resources.num_gpus == 0:
            # Ray hides every GPU (CUDA_VISIBLE_DEVICES="") from a replica that reserved none.
            problems.append(("resources.num_gpus", "is 0 but engine.device is 'cuda': reserve a GPU"))
        raise_if_any(problems)
        return self

    def drain_timeout_s(
        self, max_tokens: int = DEFAULT_MAX_TOKENS_LIMIT, request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S
    ) -> float:
        """graceful_shutdown_timeout_s when set; else the seconds a stopping replica needs to finish every
        stream it accepted: its queue drains in ``max_ongoing_requests / batch slots`` rounds of
        ``max_tokens`` at ``drain_tokens_per_s``, but never longer than ``request_timeout_s`` (the ingress
        ends any stream then), plus a margin for Serve's drain loop and the engine's shutdown."""
        if self.graceful_shutdown_timeout_s is not None:
            return self.graceful_shutdown_timeout_s
        slots = getattr(self.engine, "max_running_requests", None) or getattr(self.engine, "max_batch_size", None)
        rounds = math.ceil(self.max_ongoing_requests / slots) if slots else 1
        return min(request_timeout_s, rounds * max_tokens / self.drain_tokens_per_s) + DRAIN_MARGIN_S

    @property
    def deployment_name(self) -> str:
        """The Serve deployment running this variant (prefixed: it can never collide with the ingress)."""
        return f"variant-{self.name}"

    def deployment_options(self) -> dict[str, Any]:
        """Keyword arguments for ``serve.deployment(...).options(**...)`` of this variant's deployment."""
        options: dict[str, Any] = {
            "name": self.deployment_name,
            **replica_placement(self),
            "max_ongoing_requests": self.max_ongoing_requests,
            "graceful_shutdown_timeout_s": self.drain_timeout_s(),
            "health_check_period_s": self.health_check_period_s,
            "health_check_timeout_s": self.health_check_timeout_s,
        }
        if self.autoscaling is not None:
            options["autoscaling_config"] = self.autoscaling.to_serve_autoscaling_config()
        else:
            options.update(fixed_replicas(self.num_replicas or 1))  # Ray 2.55 needs it spelled as autoscaling
        if self.replica_choice == "least_prefill":
            from serve_app.replica_router import IMPORT_PATH

            profile = self.latency_profile or LatencyProfile()
            options["request_router_config"] = {
                "request_router_class": IMPORT_PATH,
                "request_router_kwargs": {"prefill_tokens_per_s": profile.prefill_tokens_per_s},
            }
        return options

    def prefix_cache(self) -> tuple[int, bool] | None:
        """``(tokens per KV block, whether its engine reports its cache)`` where the variant's engine reuses cached
        prompt blocks; None where it does not (the router then assumes nothing is cached there). An engine that
        reuses blocks but reports nothing is indexed from what the router sent it (router/prefix_index.py)."""
        engine = self.engine
        if engine.backend == "emulated":
            profile = engine.engine_profile()
            return (profile.kv_block_tokens, True) if profile.block_reuse else None
        if engine.backend == "trtllm":
            # A prebuilt engine directory's block size is its build's: the engine reports it with its stats, and
            # the routing table follows what the replicas report (RoutingTable._follow_block_size).
            kv = engine.kv_cache
            return (kv.tokens_per_block, kv.kv_events) if kv.enable_block_reuse else None
        if engine.backend == "openai_server":  # trtllm-serve reuses blocks by default
            return engine.kv_block_tokens(), engine.kv_events_enabled()
        if engine.backend == "hf":  # transformers' continuous batching shares page_size blocks (engines/hf.py)
            return engine.page_size, True
        return None


class IngressConfig(StrictModel):
    """The ingress deployment: HTTP parsing, tokenizing, routing and SSE framing (no model weights)."""

    num_replicas: int = Field(1, ge=1, description="Ingress replicas; raise it when one CPU cannot frame all streams.")
    num_cpus: float = Field(
        0.25, gt=0, description="Logical CPUs reserved per ingress replica (mostly waits on engine replicas)."
    )
    max_ongoing_requests: int = Field(
        1024,
        ge=1,
        description="Concurrent HTTP requests per ingress replica; an open stream holds one for its whole life.",
    )
    engine_transport: Literal["channel", "grpc", "ray"] = Field(
        "channel",
        description="How engine replicas stream deltas to the ingress. 'channel': one TCP connection per ingress "
        "and engine replica carries every stream's deltas, one frame per event-loop turn (serve_app/delta_channel; "
        "each request still goes through Serve's handle, for its replica choice, limits, cancellation and "
        "draining); 'grpc': one Serve gRPC stream per request (Serve's inter-deployment gRPC server); 'ray': one "
        "Ray object per delta (Serve's default handle transport). 'channel' needs the engine replicas' nodes to "
        "accept TCP connections on an ephemeral port from the ingress's.",
    )

    def deployment_options(self) -> dict[str, Any]:
        """Keyword arguments for ``serve.deployment(...).options(**...)`` of the ingress deployment."""
        return {
            "num_replicas": self.num_replicas,
            "ray_actor_options": {"num_cpus": self.num_cpus},
            "max_ongoing_requests": self.max_ongoing_requests,
        }


class LimitsConfig(StrictModel):
    """Limits the ingress enforces on every request before it reaches an engine."""

    max_body_bytes: int = Field(1 << 20, ge=1, description="Largest accepted request body in bytes (413 above it).")
    max_tokens_limit: int = Field(
        DEFAULT_MAX_TOKENS_LIMIT, ge=1, description="Largest 'max_tokens' a request may ask for (400 above it)."
    )
    default_max_tokens: int = Field(
        256, ge=1, description="'max_tokens' of a request that sets none; at most max_tokens_limit."
    )
    max_prompt_tokens: int | None = Field(
        None,
        ge=1,
        description="Largest prompt in tokens (400 above it); None leaves only the variants' context lengths.",
    )
    max_batch_prompts: int = Field(
        64,
        ge=1,
        description="Most prompts one /v1/completions request may batch (OpenAI's list form of 'prompt'; 400 naming "
        "'prompt' above it). Each prompt's n choices are engine requests of their own, each routed on its own "
        "prompt; the key's limits are charged for the whole batch at once.",
    )
    request_timeout_s: float = Field(
        DEFAULT_REQUEST_TIMEOUT_S,
        gt=0,
        description="Wall-clock limit of one request, streaming included; then its engine request is aborted.",
    )

    @model_validator(mode="after")
    def _defaults_within_limits(self) -> LimitsConfig:
        problems = []
        if self.default_max_tokens > self.max_tokens_limit:
            problems.append(
                (
                    "default_max_tokens",
                    f"{self.default_max_tokens} is above max_tokens_limit ({self.max_tokens_limit})",
                )
            )
        raise_if_any(problems)
        return self


class AppConfig(StrictModel):
    """The whole application: one public model served by one or more engine variants."""

    model_name: str = Field(
        min_length=1,
        description="The public model name clients send as 'model'; the router picks a variant for it.",
    )
    default_variant: str | None = Field(
        None,
        description="Variant that serves the public model while the router has no live stats from any "
        "variant yet (right after a deploy); None means the first variant. Otherwise the router decides.",
    )
    tokenizer: str | None = Field(
        None,
        description="Tokenizer the ingress counts prompt tokens and applies the chat template with (a path "
        "or 'builtin:<name>'); None uses the first variant's engine tokenizer, else its model. All variants "
        "of one public model must share it: prompt lengths and chat formatting are computed once, before "
        "routing.",
    )
    variants: list[VariantConfig] = Field(min_length=1, description="The engine variants, at least one.")
    ingress: IngressConfig = Field(default_factory=IngressConfig, description="The ingress deployment.")
    limits: LimitsConfig = Field(default_factory=LimitsConfig, description="Per-request limits.")
    auth: AuthConfig = Field(
        default_factory=AuthConfig,
        description="API keys and per-key limits for /v1/*; none configured means the endpoint is open.",
    )
    router: RouterConfig = Field(
        default_factory=RouterConfig,
        description="The routing policy (see router/config.py): which variant serves each request for the "
        "public model, by its SLO tier and the variants' live load.",
    )

    @model_validator(mode="after")
    def _size_drain_timeouts(self) -> AppConfig:
        # A variant that leaves graceful_shutdown_timeout_s unset gets one long enough for the longest
        # stream this app accepts, so that scaling down never cuts one. Set while the (frozen) config is
        # still being built, so every reader sees the sized value.
        limits = self.limits
        sized = [
            variant
            if variant.graceful_shutdown_timeout_s is not None
            else variant.model_copy(
                update={
                    "graceful_shutdown_timeout_s": variant.drain_timeout_s(
                        limits.max_tokens_limit, limits.request_timeout_s
                    )
                }
            )
            for variant in self.variants
        ]
        object.__setattr__(self, "variants", sized)
        return self

    @model_validator(mode="after")
    def _names(self) -> AppConfig:
        problems = []
        seen: set[str] = set()
        for index, variant in enumerate(self.variants):
            if variant.name in seen:
                problems.append((f"variants[{index}].name", f"duplicate variant name {variant.name!r}"))
            seen.add(variant.name)
            if variant.name == self.model_name:
                # A request for `model` must mean the routed public model, never one variant by accident.
                problems.append(
                    (
                        f"variants[{index}].name",
                        f"{variant.name!r} equals model_name; give the variant its own name",
                    )
                )
        if self.default_variant is not None and self.default_variant not in seen:
            problems.append(
                ("default_variant", f"{self.default_variant!r} is not a variant name (one of {sorted(seen)})")
            )
        raise_if_any(problems)
        return self

    @model_validator(mode="after")
    def _prompts_fit_the_prefill(self) -> AppConfig:
        # TensorRT-LLM's PyTorch backend without chunked prefill refuses every prompt above max_num_tokens (llm.py
        # _check_arguments; trtllm-serve answers 400): refused here, at deploy time, instead of on the first long
        # prompt. The longest prompt a variant gets is the app's limit, within its own context.
        problems = []
        for index, variant in enumerate(self.variants):
            engine = variant.engine
            limit_of = getattr(engine, "prefill_token_limit", None)
            limit = limit_of() if limit_of is not None else None
            if limit is None:
                continue
            longest, source = self._longest_prompt(engine)
            if longest is None or longest <= limit:
                continue
            field = "enable_chunked_prefill" if engine.backend == "trtllm" else "llm_api_options"
            problems.append(
                (
                    f"variants[{index}].engine.{field}",
                    f"chunked prefill is off and max_num_tokens is {limit}, below the longest prompt this variant "
                    f"accepts ({longest}, {source}): TensorRT-LLM would refuse every longer prompt. Turn chunked "
                    "prefill on, or raise max_num_tokens to at least the longest prompt",
                )
            )
        raise_if_any(problems)
        return self

    def _longest_prompt(self, engine: Any) -> tuple[int | None, str]:
        """The longest prompt the ingress lets through to ``engine``, and which setting says so (None: unknown
        before the engine reads its checkpoint)."""
        max_seq_len = getattr(engine, "max_seq_len", None)
        in_context = max_seq_len - 1 if max_seq_len is not None else None  # at least one output token
        prompt_limit = self.limits.max_prompt_tokens
        if prompt_limit is not None and (in_context is None or prompt_limit <= in_context):
            return prompt_limit, "limits.max_prompt_tokens"
        return in_context, "engine.max_seq_len - 1"

    @property
    def default_variant_name(self) -> str:
        """The variant used when nothing else picks one."""
        return self.default_variant if self.default_variant is not None else self.variants[0].name

    @property
    def tokenizer_ref(self) -> str:
        """What the ingress loads its tokenizer from: ``tokenizer``, else the first variant engine's own."""
        if self.tokenizer is not None:
            return self.tokenizer
        engine = self.variants[0].engine
        return getattr(engine, "tokenizer", None) or engine.model

    def variant(self, name: str) -> VariantConfig:
        """The variant called ``name``; KeyError when there is none."""
        for variant in self.variants:
            if variant.name == name:
                return variant
        raise KeyError(name)


def _engine_backends() -> frozenset[str]:
    # pydantic puts the chosen member's tag into the error location of a discriminated union
    # ('variants', 0, 'engine', 'hf', 'model'); users never write that segment, so paths drop it.
    annotation = VariantConfig.model_fields["engine"].annotation
    members = typing.get_args(annotation) or (annotation,)
    backends = set()
    for member in members:
        field = getattr(member, "model_fields", {}).get("backend")
        if field is not None and isinstance(field.default, str):
            backends.add(field.default)
    return frozenset(backends)


_ENGINE_BACKENDS = _engine_backends()


def format_loc(loc: tuple[int | str, ...]) -> str:
    """``('variants', 0, 'engine', 'model')`` -> ``'variants[0].engine.model'``."""
    path = ""
    previous: int | str | None = None
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif previous == "engine" and part in _ENGINE_BACKENDS:
            pass
        else:
            path += f".{part}" if path else part
        previous = part
    return path


def _join(prefix: str, path: str) -> str:
    if not prefix:
        return path
    return f"{prefix}{path}" if path.startswith("[") else f"{prefix}.{path}"


def format_validation_error(error: ValidationError) -> list[str]:
    """One ``'<field path>: <message>'`` line per problem in ``error``."""
    lines: list[str] = []
    for err in error.errors():
        path = format_loc(tuple(err["loc"]))
        cause = err.get("ctx", {}).get("error")
        if isinstance(cause, ConfigProblems):
            lines.extend(f"{_join(path, sub)}: {message}" for sub, message in cause.problems)
        elif isinstance(cause, ValueError):
            lines.append(f"{path or '<config>'}: {cause}")  # without pydantic's "Value error, " prefix
        elif err["type"] == "extra_forbidden":
            lines.append(f"{path}: unknown field")
        else:
            lines.append(f"{path or '<config>'}: {err['msg']}")
    return lines


def _validate(args: Any, where: str) -> AppConfig:
    try:
        return AppConfig.model_validate(args)
    except ValidationError as error:
        problems = "\n".join(f"  {line}" for line in format_validation_error(error))
        raise ConfigError(f"invalid serve_app config ({where}):\n{problems}") from None


def load_app_config(args: dict[str, Any]) -> AppConfig:
    """Validate an application's ``args`` (what ``build_app`` receives).

    Raises ConfigError whose message lists every problem as ``<field path>: <message>``.
    """
    return _validate(args, "application args")


def load_config_file(path: str | Path, app_name: str | None = None) -> AppConfig:
    """Read a Ray Serve config file; validate the ``args`` of application ``app_name`` (default: the first).

    The file's outer structure is checked with Ray Serve's own schema, as ``serve run`` / ``serve deploy``
    check it. Raises ConfigError for any problem.
    """
    # Imported here: Ray takes seconds to import, and only reading whole files needs it.
    from ray.serve.schema import ServeDeploySchema

    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise ConfigError(f"cannot read {path}: {error}") from None
    try:
        deploy = ServeDeploySchema.model_validate(raw)
    except ValidationError as error:
        problems = "\n".join(f"  {line}" for line in format_validation_error(error))
        raise ConfigError(f"{path} is not a valid Ray Serve config:\n{problems}") from None
    names = [app.name for app in deploy.applications]
    if not names:
        raise ConfigError(f"{path}: applications: the file defines no application")
    if app_name is None:
        index = 0
    elif app_name in names:
        index = names.index(app_name)
    else:
        raise ConfigError(f"{path}: no application named {app_name!r} (found {names})")
    return _validate(deploy.applications[index].args, f"{path}: applications[{index}].args")


def main(argv: list[str] | None = None) -> int:
    """``python -m serve_app.config FILE [--app NAME]``: print OK or every problem; exit status 0 or 1."""
    parser = argparse.ArgumentParser(prog="python -m serve_app.config", description=main.__doc__)
    parser.add_argument("file", type=Path, help="a Ray Serve config YAML (for example serve_config.yaml)")
    parser.add_argument("--app", default=None, help="application name (default: the first one)")
    options = parser.parse_args(argv)
    try:
        config = load_config_file(options.file, options.app)
    except ConfigError as error:
        print(error.message, file=sys.stderr)
        return 1
    variants = ", ".join(variant.name for variant in config.variants)
    print(f"OK: {options.file}: model {config.model_name!r}, variants: {variants}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
