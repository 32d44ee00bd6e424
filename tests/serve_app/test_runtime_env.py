"""A variant's own Ray runtime_env (VariantConfig.runtime_env): typed, checked at deploy time (also by Ray's own
RuntimeEnv), passed to the engine deployment's ray_actor_options only, and present in the engine replica's
process, not in the ingress's."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest
from ray import serve

from serve_app.config import load_app_config, load_config_file
from tests.serve_app.test_config import _deployment, problems_of

ROOT = Path(__file__).resolve().parents[2]

ENGINE = {"backend": "emulated", "preset": "cpu-builtin-tiny", "startup_time_scale": 0.0}


def app_args(runtime_env: dict[str, Any] | None, **variant: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": "own-env", "engine": ENGINE, "resources": {"num_cpus": 0.1}, **variant}
    if runtime_env is not None:
        spec["runtime_env"] = runtime_env
    return {
        "model_name": "env-test",
        "tokenizer": "builtin:tiny",
        "variants": [spec],
        "ingress": {"num_cpus": 0.1},
    }


def test_the_runtime_env_goes_to_the_engine_deployment_only():
    runtime_env = {
        "py_executable": "/opt/trtllm-venv/bin/python",
        "env_vars": {"TLLM_LOG_LEVEL": "INFO"},
        "setup_timeout_s": 1200,
    }
    config = load_app_config(app_args(runtime_env))
    options = config.variants[0].deployment_options()
    assert options["ray_actor_options"]["runtime_env"] == {
        "py_executable": "/opt/trtllm-venv/bin/python",
        "env_vars": {"TLLM_LOG_LEVEL": "INFO"},
        "config": {"setup_timeout_seconds": 1200},
    }
    _deployment(**options)  # Ray Serve accepts it as deployment options
    assert "runtime_env" not in config.ingress.deployment_options()["ray_actor_options"]
    assert "runtime_env" not in load_app_config(app_args(None)).variants[0].deployment_options()["ray_actor_options"]


def test_a_container_image_with_env_vars_is_accepted():
    config = load_app_config(app_args({"image_uri": "nvcr.io/nvidia/tensorrt-llm/release:1.2.0", "env_vars": {}}))
    runtime_env = config.variants[0].deployment_options()["ray_actor_options"]["runtime_env"]
    assert runtime_env == {"image_uri": "nvcr.io/nvidia/tensorrt-llm/release:1.2.0"}


def test_the_shipped_example_gives_each_engine_deployment_its_own_environment():
    config = load_config_file(ROOT / "configs" / "gpu-trtllm-runtime-env.yaml")
    envs = {v.name: v.deployment_options()["ray_actor_options"]["runtime_env"] for v in config.variants}
    assert envs["llama-8b-int4"]["py_executable"] == "/opt/trtllm-venv/bin/python"
    assert envs["llama-70b-fp8"]["image_uri"].endswith("-ray2.55.1")
    assert "runtime_env" not in config.ingress.deployment_options()["ray_actor_options"]


@pytest.mark.parametrize(
    ("runtime_env", "expected"),
    [
        ({"pip": ["tensorrt-llm"], "conda": "trtllm"}, "variants[0].runtime_env: Ray refuses this runtime_env"),
        ({"image_uri": "trtllm:1.2", "pip": ["x"]}, "variants[0].runtime_env: Ray refuses this runtime_env"),
        ({"env_vars": {"CUDA_VISIBLE_DEVICES": "0"}}, "variants[0].runtime_env.env_vars: CUDA_VISIBLE_DEVICES"),
        ({"envvars": {"A": "1"}}, "variants[0].runtime_env.envvars"),
        ({"setup_timeout_s": 0}, "variants[0].runtime_env.setup_timeout_s"),
        ({"env_vars": {"A": 1}}, "variants[0].runtime_env.env_vars.A"),
    ],
)
def test_runtime_env_mistakes_fail_at_deploy_time_naming_the_field(runtime_env: dict[str, Any], expected: str):
    assert expected in problems_of(app_args(runtime_env))


def _serve_replicas(app: str) -> dict[str, list[psutil.Process]]:
    """The Serve replica processes of ``app`` on this machine, by deployment (Ray names them after it)."""
    prefix = f"ray::ServeReplica:{app}:"
    found: dict[str, list[psutil.Process]] = {}
    for process in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(process.info["cmdline"] or [])
        if cmdline.startswith(prefix):
            found.setdefault(cmdline[len(prefix) :].split()[0].split(".")[0], []).append(process)
    return found


@pytest.mark.serve
def test_the_engine_replica_runs_in_its_runtime_env_and_the_ingress_does_not(serve_url, tmp_path: Path):
    # Another Python, as a venv with tensorrt_llm would be: a wrapper that marks its processes, then runs ours.
    python = tmp_path / "engine-python"
    python.write_text(f'#!/bin/sh\nexport VARIANT_SERVE_ENGINE_PYTHON="{python}"\nexec "{sys.executable}" "$@"\n')
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    runtime_env = {"py_executable": str(python), "env_vars": {"VARIANT_SERVE_TEST_MARK": "engine-only"}}
    from serve_app.app import build_app

    app = "runtime-env"
    serve.run(build_app(app_args(runtime_env)), name=app, route_prefix=f"/{app}")
    try:
        info = serve.get_deployment_handle("variant-own-env", app_name=app).info.remote().result()
        engine = psutil.Process(info["pid"]).environ()
        assert engine.get("VARIANT_SERVE_TEST_MARK") == "engine-only"
        assert engine.get("VARIANT_SERVE_ENGINE_PYTHON") == str(python)
        ingresses = _serve_replicas(app).get("Ingress", [])
        assert ingresses, f"no ingress replica of {app} found"
        for ingress in ingresses:
            assert "VARIANT_SERVE_TEST_MARK" not in ingress.environ()
            assert "VARIANT_SERVE_ENGINE_PYTHON" not in ingress.environ()
        assert os.environ.get("VARIANT_SERVE_TEST_MARK") is None  # nor did it leak into the driver
    finally:
        serve.delete(app)
