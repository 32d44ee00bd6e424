"""The serve app's config schema: shipped files validate, mistakes are named by field path, and the
options it produces are accepted by the real Ray Serve API (no Ray cluster is started)."""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel
from ray import serve
from ray.serve import Deployment
from ray.serve.config import AutoscalingConfig

from core.errors import ConfigError
from serve_app.config import format_loc, load_app_config, load_config_file, main
from serve_app.ray_compat import RAY_2_60, ray_version

ROOT = Path(__file__).resolve().parents[2]
PRODUCTION_CONFIGS = sorted((ROOT / "configs").glob("gpu-trtllm*.yaml"))
GPU_BENCH_CONFIGS = sorted((ROOT / "configs").glob("gpu-hf-two-variants*.yaml"))


def valid_args() -> dict[str, Any]:
    return {
        "model_name": "public",
        "variants": [
            {"name": "tiny", "engine": {"backend": "hf", "model": "builtin:tiny", "device": "cpu"}},
            {
                "name": "small",
                "engine": {"backend": "hf", "model": "builtin:small", "device": "cpu"},
                "resources": {"num_cpus": 0.5},
                "autoscaling": {"min_replicas": 1, "max_replicas": 3, "target_ongoing_requests": 8},
            },
        ],
    }


def problems_of(args: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as info:
        load_app_config(args)
    return info.value.message


class _Replica:
    pass


def _deployment(**options: Any) -> Deployment:
    # Builds the deployment exactly as the app does; validating options needs no running Ray.
    deployment = typing.cast(Deployment, serve.deployment(_Replica))  # ray types the decorator loosely
    return deployment.options(**options)


# --- shipped files ---------------------------------------------------------------------------------


def test_default_config_is_valid_and_fits_a_two_core_cpu_laptop():
    config = load_config_file(ROOT / "serve_config.yaml")

    assert len(config.variants) >= 2
    for variant in config.variants:
        assert variant.engine.backend == "hf"
        assert variant.engine.model.startswith("builtin:")
        assert variant.engine.device == "cpu"
        assert variant.resources.num_gpus == 0
    most_replicas = [
        variant.autoscaling.max_replicas if variant.autoscaling else (variant.num_replicas or 1)
        for variant in config.variants
    ]
    cpus = sum(v.resources.num_cpus * n for v, n in zip(config.variants, most_replicas, strict=True))
    cpus += config.ingress.num_cpus * config.ingress.num_replicas
    assert cpus <= 2


def test_default_config_names_the_app_builder():
    raw = yaml.safe_load((ROOT / "serve_config.yaml").read_text())

    assert [app["import_path"] for app in raw["applications"]] == ["serve_app.app:build_app"]


def test_production_configs_exist():
    assert {path.name for path in PRODUCTION_CONFIGS} >= {"gpu-trtllm.yaml", "gpu-trtllm-serve.yaml"}


@pytest.mark.parametrize("path", PRODUCTION_CONFIGS, ids=lambda path: path.name)
def test_production_config_is_valid(path: Path):
    config = load_config_file(path)

    for variant in config.variants:
        engine: Any = variant.engine  # a GPU backend's config, whichever union member it is
        assert variant.resources.num_gpus >= engine.tensor_parallel_size
        assert variant.autoscaling is not None


@pytest.mark.parametrize("path", GPU_BENCH_CONFIGS, ids=lambda p: p.name)
def test_the_two_gpu_bench_configs_put_each_variant_on_its_own_gpu_the_fast_one_with_less_context(path: Path):
    config = load_config_file(path)

    assert [(v.engine.backend, v.engine.device, v.resources.num_gpus) for v in config.variants] == [
        ("hf", "cuda", 1),
        ("hf", "cuda", 1),
    ]
    contexts = sorted(v.engine.context_length for v in config.variants)
    assert contexts[0] < contexts[1]


def test_production_configs_describe_int4_8b_and_fp8_70b_with_tp4():
    for path in PRODUCTION_CONFIGS:
        variants = load_config_file(path).variants
        engines: dict[str, Any] = {variant.name: variant.engine for variant in variants}

        assert (engines["llama-8b-int4"].quantization, engines["llama-8b-int4"].tensor_parallel_size) == (
            "int4_awq",
            1,
        )
        assert (engines["llama-70b-fp8"].quantization, engines["llama-70b-fp8"].tensor_parallel_size) == (
            "fp8",
            4,
        )


# --- cross-field mistakes: each is named by its field path -------------------------------------------


def _duplicate_name(args):
    args["variants"][1]["name"] = "tiny"


def _unknown_default_variant(args):
    args["default_variant"] = "huge"


def _variant_named_like_the_model(args):
    args["variants"][1]["name"] = "public"


def _cuda_without_gpu(args):
    args["variants"][0]["engine"]["device"] = "cuda"


def _min_above_max(args):
    args["variants"][1]["autoscaling"].update(min_replicas=4, max_replicas=2)


def _initial_outside_bounds(args):
    args["variants"][1]["autoscaling"]["initial_replicas"] = 5


def _replicas_and_autoscaling(args):
    args["variants"][1]["num_replicas"] = 2


def _default_above_limit(args):
    args["limits"] = {"max_tokens_limit": 100, "default_max_tokens": 200}


def _fractional_gpus_above_one(args):
    args["variants"][0]["resources"] = {"num_gpus": 1.5}


def _cpu_as_custom_resource(args):
    args["variants"][0]["resources"] = {"resources": {"CPU": 1}}


def _bad_variant_name(args):
    args["variants"][0]["name"] = "has space"


def _unknown_engine_transport(args):
    args["ingress"] = {"engine_transport": "http"}


MISTAKES = [
    (_duplicate_name, "variants[1].name: duplicate variant name 'tiny'"),
    (_unknown_default_variant, "default_variant: 'huge' is not a variant name"),
    (_variant_named_like_the_model, "variants[1].name: 'public' equals model_name"),
    (_cuda_without_gpu, "variants[0].resources.num_gpus: is 0 but engine.device is 'cuda'"),
    (_min_above_max, "variants[1].autoscaling.min_replicas: 4 is above max_replicas (2)"),
    (_initial_outside_bounds, "variants[1].autoscaling.initial_replicas: 5 is outside"),
    (_replicas_and_autoscaling, "variants[1].num_replicas: set either num_replicas or autoscaling"),
    (_default_above_limit, "limits.default_max_tokens: 200 is above max_tokens_limit (100)"),
    (_fractional_gpus_above_one, "variants[0].resources.num_gpus: must be a whole number"),
    (_cpu_as_custom_resource, "variants[0].resources.resources: 'CPU' is not a custom resource"),
    (_bad_variant_name, "variants[0].name: String should match pattern"),
    (_unknown_engine_transport, "ingress.engine_transport: Input should be 'channel', 'grpc' or 'ray'"),
]


@pytest.mark.parametrize(("mistake", "expected"), MISTAKES, ids=lambda item: getattr(item, "__name__", ""))
def test_mistake_is_reported_at_its_field_path(mistake, expected):
    args = valid_args()
    mistake(args)

    assert expected in problems_of(args)


def test_valid_args_pass():
    # The mistakes above are mistakes only because this base is valid.
    assert load_app_config(valid_args()).default_variant_name == "tiny"


def test_every_problem_is_listed_on_its_own_line():
    args = valid_args()
    _min_above_max(args)
    _default_above_limit(args)
    args["variants"][0]["engine"]["device"] = "cuda"

    lines = problems_of(args).splitlines()[1:]

    assert [line.split(":")[0].strip() for line in lines] == [
        "variants[0].resources.num_gpus",
        "variants[1].autoscaling.min_replicas",
        "limits.default_max_tokens",
    ]


@pytest.mark.parametrize("backend", ["trtllm", "openai_server"])
def test_tensor_parallel_size_above_reserved_gpus_is_rejected(backend: str):
    args = valid_args()
    args["variants"][1]["engine"] = {"backend": backend, "model": "/models/x", "tensor_parallel_size": 4}
    args["variants"][1]["resources"] = {"num_gpus": 2}

    message = problems_of(args)

    assert "variants[1].engine.tensor_parallel_size: 4 needs 4 GPUs per replica" in message


@pytest.mark.parametrize("backend", ["trtllm", "openai_server"])
def test_tensor_parallel_size_within_reserved_gpus_is_accepted(backend: str):
    args = valid_args()
    args["variants"][1]["engine"] = {"backend": backend, "model": "/models/x", "tensor_parallel_size": 4}
    args["variants"][1]["resources"] = {"num_gpus": 4}

    assert load_app_config(args).variants[1].resources.num_gpus == 4


def test_a_remote_engine_server_needs_no_gpu_in_the_replica():
    args = valid_args()
    args["variants"][1]["engine"] = {
        "backend": "openai_server",
        "model": "/models/x",
        "url": "http://gpu-box:8000",
        "tensor_parallel_size": 4,
    }

    assert load_app_config(args).variants[1].resources.num_gpus == 0


# --- TensorRT-LLM settings that would fail at start or on the first long prompt (docs/tensorrt-llm.md) ----


def trtllm_serve_command(*flags: str) -> list[str]:
    return ["trtllm-serve", "serve", "{model}", "--port", "{port}", *flags]


@pytest.mark.contract
@pytest.mark.parametrize(
    ("engine", "field"),
    [
        ({"backend": "trtllm", "enable_chunked_prefill": False}, "variants[1].engine.enable_chunked_prefill"),
        (
            {"backend": "openai_server", "command": trtllm_serve_command("--max_num_tokens", "8192")},
            "variants[1].engine.llm_api_options",
        ),
        (
            {
                "backend": "openai_server",
                "command": trtllm_serve_command("--extra_llm_api_options", "{llm_api_options}"),
                "llm_api_options": {"enable_iter_perf_stats": True, "max_num_tokens": 8192},
            },
            "variants[1].engine.llm_api_options",
        ),
    ],
    ids=["trtllm", "trtllm-serve-flags", "trtllm-serve-yaml"],
)
def test_chunked_prefill_off_below_the_prompt_limit_is_refused_at_deploy_time(engine: dict, field: str):
    """D1: the PyTorch backend without chunked prefill refuses prompts over max_num_tokens (8192 by default)."""
    args = valid_args()
    args["variants"][1]["engine"] = {"model": "/models/x", **engine}
    args["variants"][1]["resources"] = {"num_gpus": 1}
    args["limits"] = {"max_prompt_tokens": 24576}

    message = problems_of(args)

    assert f"{field}: chunked prefill is off and max_num_tokens is 8192" in message
    assert "(24576, limits.max_prompt_tokens)" in message


@pytest.mark.contract
@pytest.mark.parametrize(
    "engine",
    [
        {"backend": "trtllm", "enable_chunked_prefill": False, "max_num_tokens": 32768},
        {"backend": "trtllm"},  # chunked prefill on by default
        {"backend": "trtllm", "enable_chunked_prefill": False, "max_seq_len": 8193},  # prompts up to 8192
        {"backend": "openai_server", "command": trtllm_serve_command("--enable_chunked_prefill")},
        {"backend": "openai_server"},  # the default command passes chunked prefill in its YAML
        {"backend": "openai_server", "command": ["vllm", "serve", "{model}", "--port", "{port}"]},  # not ours to tell
    ],
)
def test_prompt_limits_within_the_prefill_are_accepted(engine: dict):
    args = valid_args()
    args["variants"][1]["engine"] = {"model": "/models/x", **engine}
    args["variants"][1]["resources"] = {"num_gpus": 1}
    args["limits"] = {"max_prompt_tokens": 24576}

    load_app_config(args)


@pytest.mark.contract
def test_an_unset_max_seq_len_in_the_command_is_refused_at_deploy_time():
    """D4: it would render as an empty argument, and trtllm-serve (click, type=int) exits at start."""
    args = valid_args()
    command = trtllm_serve_command("--max_seq_len", "{max_seq_len}")
    args["variants"][1]["engine"] = {"backend": "openai_server", "model": "/models/x", "command": command}
    args["variants"][1]["resources"] = {"num_gpus": 1}

    assert "variants[1].engine: max_seq_len: is not set, but the command passes {max_seq_len}" in problems_of(args)


# --- unknown keys and nested paths ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        (lambda args: args, "colour: unknown field"),
        (lambda args: args["variants"][0], "variants[0].colour: unknown field"),
        (lambda args: args["variants"][1]["engine"], "variants[1].engine.colour: unknown field"),
        (lambda args: args["variants"][1]["autoscaling"], "variants[1].autoscaling.colour: unknown field"),
    ],
)
def test_unknown_key_is_rejected_by_name(where, expected):
    args = valid_args()
    where(args)["colour"] = "blue"

    assert expected in problems_of(args)


def test_missing_engine_model_is_reported_at_its_path():
    args = valid_args()
    del args["variants"][0]["engine"]["model"]

    assert "variants[0].engine.model: Field required" in problems_of(args)


def test_format_loc_drops_the_union_tag_after_engine():
    assert format_loc(("variants", 0, "engine", "hf", "model")) == "variants[0].engine.model"
    assert format_loc(("limits", "default_max_tokens")) == "limits.default_max_tokens"


def test_load_config_file_picks_the_named_application(tmp_path: Path):
    second = valid_args()
    second["model_name"] = "other"
    path = tmp_path / "two.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "applications": [
                    {"name": "a", "route_prefix": "/a", "import_path": "m:f", "args": valid_args()},
                    {"name": "b", "route_prefix": "/b", "import_path": "m:f", "args": second},
                ]
            }
        )
    )

    assert load_config_file(path).model_name == "public"
    assert load_config_file(path, "b").model_name == "other"
    with pytest.raises(ConfigError, match="no application named 'c'"):
        load_config_file(path, "c")


def test_load_config_file_reports_a_bad_serve_file(tmp_path: Path):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"applications": [{"name": "a", "args": valid_args()}]}))

    with pytest.raises(ConfigError, match=r"applications\[0\]\.import_path"):
        load_config_file(path)


def test_load_config_file_names_the_application_in_errors(tmp_path: Path):
    args = valid_args()
    _duplicate_name(args)
    path = tmp_path / "dup.yaml"
    path.write_text(yaml.safe_dump({"applications": [{"name": "a", "import_path": "m:f", "args": args}]}))

    with pytest.raises(ConfigError, match=r"applications\[0\]\.args") as info:
        load_config_file(path)
    assert "variants[1].name: duplicate variant name 'tiny'" in info.value.message


def test_cli_prints_ok_or_the_problems(tmp_path: Path, capsys):
    assert main([str(ROOT / "serve_config.yaml")]) == 0
    assert capsys.readouterr().out.startswith("OK: ")

    args = valid_args()
    _unknown_default_variant(args)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"applications": [{"name": "a", "import_path": "m:f", "args": args}]}))

    assert main([str(path)]) == 1
    assert "default_variant: 'huge' is not a variant name" in capsys.readouterr().err


# --- what the config produces for Ray Serve ---------------------------------------------------------


def test_fixed_replica_options_are_accepted_by_ray_serve():
    args = valid_args()
    args["variants"][0].update(
        num_replicas=2,
        max_ongoing_requests=48,
        graceful_shutdown_timeout_s=90,
        health_check_period_s=5,
        health_check_timeout_s=20,
        resources={
            "num_cpus": 0.5,
            "num_gpus": 0.5,
            "memory_bytes": 2**30,
            "accelerator_type": "H200",
            "resources": {"node_a": 0.01},
        },
    )
    variant = load_app_config(args).variants[0]

    deployment = _deployment(**variant.deployment_options())

    assert deployment.name == "variant-tiny"
    config = deployment._deployment_config
    if ray_version() >= RAY_2_60:
        assert deployment.num_replicas == 2
        assert config.autoscaling_config is None
    else:  # Ray 2.55 starts no fixed-count engine replica: min = max autoscaling instead (serve_app/ray_compat.py)
        scaling = config.autoscaling_config
        assert (scaling.min_replicas, scaling.max_replicas, scaling.initial_replicas) == (2, 2, 2)
    assert deployment.max_ongoing_requests == 48
    assert deployment.ray_actor_options == {
        "num_cpus": 0.5,
        "num_gpus": 0.5,
        "memory": 2**30,
        "accelerator_type": "H200",
        "resources": {"node_a": 0.01},
    }
    assert config.graceful_shutdown_timeout_s == 90
    assert (config.health_check_period_s, config.health_check_timeout_s) == (5, 20)


def test_a_variant_without_replica_settings_runs_one_replica():
    variant = load_app_config(valid_args()).variants[0]

    deployment = _deployment(**variant.deployment_options())

    assert deployment.num_replicas == 1
    assert deployment.max_ongoing_requests == 64


def test_autoscaling_maps_onto_ray_serve_autoscaling_config():
    args = valid_args()
    args["variants"][1]["autoscaling"] = {
        "min_replicas": 0,
        "initial_replicas": 1,
        "max_replicas": 3,
        "target_ongoing_requests": 12,
        "upscale_delay_s": 5,
        "downscale_delay_s": 120,
    }
    variant = load_app_config(args).variants[1]

    deployment = _deployment(**variant.deployment_options())

    assert "num_replicas" not in variant.deployment_options()
    ray_config = deployment._deployment_config.autoscaling_config
    assert isinstance(ray_config, AutoscalingConfig)
    assert (
        ray_config.min_replicas,
        ray_config.initial_replicas,
        ray_config.max_replicas,
        ray_config.target_ongoing_requests,
        ray_config.upscale_delay_s,
        ray_config.downscale_delay_s,
    ) == (0, 1, 3, 12, 0, 120)
    # The engine_load policy (the default) holds the upscale delay itself: Serve's would add to it.
    assert ray_config.policy.policy_kwargs["upscale_delay_s"] == 5


def test_ingress_options_are_accepted_by_ray_serve():
    ingress = load_app_config(valid_args()).ingress

    deployment = _deployment(**ingress.deployment_options())

    assert deployment.num_replicas == 1
    assert deployment.ray_actor_options == {"num_cpus": 0.25}
    assert deployment.max_ongoing_requests == 1024


SHIPPED_CONFIGS = [ROOT / "serve_config.yaml", *PRODUCTION_CONFIGS]


@pytest.mark.parametrize("path", SHIPPED_CONFIGS, ids=lambda path: path.name)
def test_shipped_variants_produce_ray_serve_options(path: Path):
    for variant in load_config_file(path).variants:
        _deployment(**variant.deployment_options())


# --- derived values ---------------------------------------------------------------------------------


def test_tokenizer_and_default_variant_fall_back_to_the_first_variant():
    config = load_app_config(valid_args())

    assert (config.tokenizer_ref, config.default_variant_name) == ("builtin:tiny", "tiny")


def test_tokenizer_falls_back_to_the_engine_tokenizer_before_its_model():
    args = valid_args()
    args["variants"][0] = {
        "name": "engine-dir",
        "engine": {"backend": "trtllm", "model": "/engines/llama", "tokenizer": "/models/llama"},
        "resources": {"num_gpus": 1},
    }

    assert load_app_config(args).tokenizer_ref == "/models/llama"


def test_explicit_tokenizer_and_default_variant_win():
    args = valid_args()
    args.update(tokenizer="builtin:small", default_variant="small")
    config = load_app_config(args)

    assert (config.tokenizer_ref, config.default_variant_name) == ("builtin:small", "small")
    assert config.variant("small").name == "small"
    with pytest.raises(KeyError):
        config.variant("nope")


def test_config_is_immutable():
    config = load_app_config(valid_args())

    with pytest.raises(ValueError, match="frozen"):
        config.model_name = "other"  # type: ignore[misc]


@pytest.mark.parametrize("path", SHIPPED_CONFIGS, ids=lambda path: path.name)
def test_config_survives_a_json_round_trip(path: Path):
    # build_app hands the validated config to replicas as JSON; they validate it again.
    config = load_config_file(path)

    assert load_app_config(config.model_dump(mode="json")) == config


def test_every_field_has_a_description():
    import serve_app.config as module

    models = [
        value
        for value in vars(module).values()
        if isinstance(value, type) and issubclass(value, BaseModel) and value.__module__ == module.__name__
    ]
    undocumented = [
        f"{model.__name__}.{name}"
        for model in models
        for name, field in model.model_fields.items()
        if not field.description
    ]

    assert models and undocumented == []


# --- the emulated fleet -------------------------------------------------------------------------------


def test_the_emulated_fleet_is_the_production_fleet_on_this_machine():
    emulated = load_config_file(ROOT / "configs" / "emulated-h200.yaml")
    production = load_config_file(ROOT / "configs" / "gpu-trtllm.yaml")

    assert [v.name for v in emulated.variants] == [v.name for v in production.variants]
    for fake, real in zip(emulated.variants, production.variants, strict=True):
        engine: Any = fake.engine
        profile = engine.engine_profile()
        assert engine.backend == "emulated" and fake.resources.num_gpus == 0
        assert profile.max_running_requests == real.engine.max_batch_size == fake.max_ongoing_requests  # type: ignore[union-attr]
        assert profile.gpus_per_replica == real.engine.tensor_parallel_size  # type: ignore[union-attr]
        assert fake.autoscaling is not None and fake.autoscaling.max_replicas > 1
    assert emulated.limits == production.limits
    most = sum(v.resources.num_cpus * v.autoscaling.max_replicas for v in emulated.variants if v.autoscaling)
    assert most + emulated.ingress.num_cpus * emulated.ingress.num_replicas <= 2


@pytest.mark.parametrize(
    ("engine", "path"),
    [
        ({"backend": "emulated", "preset": "h100-nothing"}, "variants[0].engine.preset"),
        ({"backend": "emulated"}, "variants[0].engine"),  # no preset and no figures
        ({"backend": "emulated", "preset": "cpu-builtin-tiny", "profile": {"step_ms_at_batch_1": -1}}, "profile."),
        ({"backend": "emulated", "preset": "cpu-builtin-tiny", "profile": {"no_such_figure": 1}}, "no_such_figure"),
    ],
)
def test_an_emulated_variant_with_a_wrong_profile_fails_at_deploy_time_naming_it(engine, path):
    args = valid_args()
    args["variants"][0]["engine"] = engine
    with pytest.raises(ConfigError) as info:
        load_app_config(args)
    assert path in str(info.value)


def test_an_emulated_variant_takes_its_presets_figures_with_its_own_over_them():
    args = valid_args()
    args["variants"][0]["engine"] = {
        "backend": "emulated",
        "preset": "emulated:h200-llama-3.1-8b-int4",
        "profile": {"max_running_requests": 64},
    }
    engine: Any = load_app_config(args).variants[0].engine
    profile = engine.engine_profile()
    assert (profile.max_running_requests, profile.context_length) == (64, 32768)
    assert engine.model == "emulated:h200-llama-3.1-8b-int4"


@pytest.mark.parametrize("path", sorted((ROOT / "configs").glob("emulated-*.yaml")), ids=lambda p: p.name)
def test_emulated_configs_are_valid_and_need_no_gpu(path: Path):
    config = load_config_file(path)
    assert any(v.engine.backend == "emulated" for v in config.variants)
    assert all(v.resources.num_gpus == 0 for v in config.variants)


@pytest.mark.parametrize("path", sorted((ROOT / "configs").glob("*.yaml")), ids=lambda p: p.name)
def test_every_config_in_configs_validates(path: Path):
    assert load_config_file(path).variants


def test_the_gpu_prefix_config_shares_one_gpu_between_two_replicas_whose_cache_holds_less_than_the_groups():
    config = load_config_file(ROOT / "configs" / "gpu-hf-prefix.yaml")
    (variant,) = config.variants
    engine: Any = variant.engine
    assert (variant.num_replicas, variant.resources.num_gpus) == (2, 0.5)
    assert variant.prefix_cache() == (16, True)  # transformers' 16-token blocks, reported by the engine
    # The bench's 32 groups of 3,072 tokens outgrow one replica's KV blocks (bench/device/run_prefix_hf.sh).
    assert engine.num_blocks * engine.page_size < 32 * 3072
