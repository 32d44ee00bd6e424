"""Serve's fast streaming path: on by default for `variant-serve`, the tests' cluster, the benches and manifests."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys

import psutil
import pytest

from serve_app.fast_path import (
    DIRECT_INGRESS_RANGES,
    FAST_PATH_ENV,
    HAPROXY_FIXED_PORTS,
    ISOLATED_BY,
    apply_fast_path_env,
    isolate_cluster_ports,
)


def test_the_flags_are_defaults_and_a_value_the_user_set_wins():
    env = {"RAY_SERVE_ENABLE_HA_PROXY": "0"}
    applied = apply_fast_path_env(env)
    assert applied == {**FAST_PATH_ENV, "RAY_SERVE_ENABLE_HA_PROXY": "0"}
    assert env["RAY_SERVE_THROUGHPUT_OPTIMIZED"] == "1"


def test_haproxy_listeners_get_free_ports_unless_named():
    env = {"RAY_SERVE_HAPROXY_STATS_PORT": "18404"}
    isolate_cluster_ports(env)
    assert env["RAY_SERVE_HAPROXY_STATS_PORT"] == "18404"
    assert set(HAPROXY_FIXED_PORTS) <= set(env)
    chosen = [int(env[key]) for key in HAPROXY_FIXED_PORTS[1:]]
    # Distinct, above the direct-ingress ranges and below the ports the kernel hands out: HAProxy binds them again at
    # every reload, and an ephemeral port could have been taken by then.
    assert len(set(chosen)) == len(chosen) and all(30000 <= port < 32768 for port in chosen)


def test_each_isolated_cluster_gets_direct_ingress_port_ranges_of_its_own_unless_named():
    env: dict[str, str] = {}
    isolate_cluster_ports(env)
    (http_low, http_high), (grpc_low, grpc_high) = (
        (int(env[low]), int(env[high])) for low, high in DIRECT_INGRESS_RANGES
    )
    assert 1024 < http_low < http_high < grpc_low < grpc_high < 32768  # disjoint, below the ephemeral ports
    named = {"RAY_SERVE_DIRECT_INGRESS_MIN_HTTP_PORT": "30000"}
    isolate_cluster_ports(named)
    assert not any(high in named for _, high in DIRECT_INGRESS_RANGES)  # the user's ranges are left alone


def test_ports_a_parent_process_isolated_for_its_own_cluster_are_chosen_anew():
    # The test suite's environment reaches the benches it spawns: their clusters must not share its ports.
    inherited = {key: "1" for key in (*HAPROXY_FIXED_PORTS, *(k for pair in DIRECT_INGRESS_RANGES for k in pair))}
    env = {**inherited, ISOLATED_BY: "1"}  # pid 1 chose them, not this process
    isolate_cluster_ports(env)

    assert all(env[key] != "1" for key in inherited)
    assert env[ISOLATED_BY] == str(os.getpid())
    chosen = dict(env)
    isolate_cluster_ports(env)  # this process's own choice stands
    assert env == chosen


@pytest.mark.slow  # starts a process or loads a model: the full suite only
def test_variant_serve_is_serves_own_cli():
    out = subprocess.run(
        [sys.executable, "-m", "serve_app.fast_path", "run", "--help"], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert "CONFIG_OR_IMPORT_PATH" in out.stdout  # `serve run`'s own argument


@pytest.mark.serve
def test_the_shared_cluster_serves_through_haproxy_where_it_is_on(serve_url):
    """The tests' Serve is the one users get: an HAProxy in front of direct-ingress replicas, on a Ray whose HAProxy
    is on by default (2.60); on 2.55 (off by default: it serves no gRPC) Serve's Python proxy holds the port."""
    # The flags the cluster started with: the fixture applied them to this environment, then took them back.
    haproxy = apply_fast_path_env(dict(os.environ))["RAY_SERVE_ENABLE_HA_PROXY"] == "1"
    port = int(serve_url.rsplit(":", 1)[1])
    names: set[str] = set()
    for _ in range(20):  # Serve reloads HAProxy as backends change: a listener may exit while we look (bounded)
        names = set()
        for c in psutil.net_connections(kind="tcp"):
            if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid:
                with contextlib.suppress(psutil.NoSuchProcess):
                    names.add(psutil.Process(c.pid).name())
        if names:
            break
    assert names, f"nothing listens on Serve's port {port}"
    if haproxy:
        assert names == {"haproxy"}, "Serve's Python proxy holds the port"
    else:
        assert "haproxy" not in names, "HAProxy holds the port with its flag off"
