"""``variant-serve run`` starts and stops like a well-behaved server, as a user runs it: in a terminal (a
pseudo-terminal here, Ctrl-C through its line discipline) or under a process supervisor (SIGTERM to its process
group, as ``timeout`` and container runtimes send).

Each test stops a server at several moments of its life and starts the next one right after, on the same ports:
right after Ray has started, then, on a server that answers, after HAProxy has been reloaded (the server that
answers is a reloaded HAProxy; one test also redeploys a changed config) and with streams in flight. After each
stop: no process of the server and no listening port of its within 10 s, status 0 (or 143 for SIGTERM), no stack
dump, warning or traceback printed, and every stream in flight ended by an error event and ``data: [DONE]``.
Processes are found by a marker in their environment, which every process the server starts inherits.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import httpx
import psutil
import pytest
import yaml

from engines.ports import free_port
from serve_app.fast_path import DIRECT_INGRESS_RANGES, HAPROXY_FIXED_PORTS, isolate_cluster_ports
from serve_app.haproxy_errors import MARKER

pytestmark = pytest.mark.slow  # starts Ray, three times per test

REPO = Path(__file__).resolve().parents[2]
MARKER_ENV = "VARIANT_SERVE_START_STOP_TEST"
LEFTOVER_LIMIT_S = 10.0  # from the stop signal to no process and no listening port left
START_TIMEOUT_S = 300.0  # a start takes 16-70 s on a loaded 2-core machine
# The process group's leader makes the pseudo-terminal its controlling terminal, then becomes the server: Ctrl-C
# written to the terminal reaches its foreground process group, as in a shell.
_CONTROLLING_TTY = (
    "import fcntl, os, sys, termios; fcntl.ioctl(0, termios.TIOCSCTTY, 0); os.execvp(sys.argv[1], sys.argv[1:])"
)
# What a stop must not print: Ray's native stack dump, Serve's 30 s timeout, any traceback, warning or error line.
_NOISE = re.compile(r"\*\*\* SIG|Traceback|failed to shut down|\bWARNING\b|\bERROR\b|\bError\b")


def _command() -> list[str]:
    script = Path(sys.executable).with_name("variant-serve")  # the console script users run
    return [str(script)] if script.exists() else [sys.executable, "-m", "serve_app.fast_path"]


class Server:
    """One ``variant-serve run CONFIG`` in a pseudo-terminal."""

    def __init__(self, config: Path, env: dict[str, str]) -> None:
        master, slave = os.openpty()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _CONTROLLING_TTY, *_command(), "run", str(config)],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            cwd=REPO,
            start_new_session=True,
        )
        os.close(slave)
        self._master = master
        self._output = bytearray()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.stopped_at: float | None = None
        self._output_at_stop = 0

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self._master, 65536)
            except OSError:  # the terminal's last process is gone
                return
            if not data:
                return
            self._output.extend(data)

    @property
    def output(self) -> str:
        return self._output.decode(errors="replace").replace("\r", "")

    def output_after_stop(self) -> str:
        return self._output[self._output_at_stop :].decode(errors="replace").replace("\r", "")

    def wait_for_output(self, pattern: str, timeout_s: float = START_TIMEOUT_S) -> re.Match[str]:
        deadline = time.monotonic() + timeout_s
        while (found := re.search(pattern, self.output)) is None:
            assert self.proc.poll() is None, f"the server exited:\n{self.output[-3000:]}"
            assert time.monotonic() < deadline, f"no {pattern!r} in the output:\n{self.output[-3000:]}"
            time.sleep(0.2)
        return found

    def ctrl_c(self) -> None:
        self._mark_stop()
        os.write(self._master, b"\x03")  # the terminal's interrupt character: SIGINT to its foreground group

    def sigterm(self) -> None:
        self._mark_stop()
        os.killpg(self.proc.pid, signal.SIGTERM)  # the whole process group, as `timeout` does

    def _mark_stop(self) -> None:
        self.stopped_at = time.monotonic()
        self._output_at_stop = len(self._output)

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self._reader.join(timeout=5)
        os.close(self._master)


def _server_env(marker: str) -> dict[str, str]:
    """A fresh shell's environment (no Ray settings) with its own HAProxy and direct-ingress ports, so that it runs
    beside the test session's cluster, and the marker."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("RAY_", "VARIANT_SERVE_"))}
    isolate_cluster_ports(env)
    env[MARKER_ENV] = marker
    env["HF_HUB_OFFLINE"] = "1"
    return env


def _config(tmp_path: Path) -> tuple[Path, dict]:
    """serve_config.yaml on free HTTP and gRPC ports."""
    config = yaml.safe_load((REPO / "serve_config.yaml").read_text())
    config["http_options"]["port"] = free_port("0.0.0.0")
    config["grpc_options"]["port"] = free_port("0.0.0.0")
    path = tmp_path / "serve_config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path, config


def _marked(marker: str) -> list[psutil.Process]:
    """The running processes with the marker in their environment (every process the server started)."""
    found = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if proc.status() != psutil.STATUS_ZOMBIE and proc.environ().get(MARKER_ENV) == marker:
                found.append(proc)
    return found


def _listening(ports: set[int]) -> set[int]:
    return {c.laddr.port for c in psutil.net_connections("tcp") if c.status == psutil.CONN_LISTEN} & ports


def _server_ports(config: dict, env: dict[str, str], output: str) -> set[int]:
    """Every port the server listens on that is known in advance: Serve's HTTP and gRPC, HAProxy's stats and
    metrics, the fallback proxy's, the ingress replicas' direct-ingress ranges, Ray's dashboard."""
    ports = {config["http_options"]["port"], config["grpc_options"]["port"]}
    ports |= {int(env[key]) for key in HAPROXY_FIXED_PORTS}
    for low, high in DIRECT_INGRESS_RANGES:
        ports |= set(range(int(env[low]), int(env[high]) + 1))
    dashboard = re.search(r"dashboard at \S*http://127\.0\.0\.1:(\d+)", output)
    if dashboard:
        ports.add(int(dashboard.group(1)))
    return ports


def _assert_stopped_cleanly(server: Server, marker: str, ports: set[int], *, statuses: tuple[int, ...]) -> None:
    assert server.stopped_at is not None
    deadline = server.stopped_at + LEFTOVER_LIMIT_S
    try:
        status = server.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        pytest.fail(f"variant-serve still running {LEFTOVER_LIMIT_S:g} s after the stop:\n{server.output[-3000:]}")
    while (left := _marked(marker)) or _listening(ports):
        if time.monotonic() > deadline:
            names = sorted(_describe(p) for p in left)
            pytest.fail(f"left {LEFTOVER_LIMIT_S:g} s after the stop: {names}, listening on {_listening(ports)}")
        time.sleep(0.2)
    assert status in statuses, f"exit status {status}:\n{server.output[-3000:]}"
    noise = [line for line in server.output_after_stop().splitlines() if _NOISE.search(line)]
    assert not noise, "the stop printed:\n" + "\n".join(noise)


def _describe(proc: psutil.Process) -> str:
    try:
        return f"{proc.pid} {' '.join(proc.cmdline())[:80]}"
    except psutil.Error:
        return f"{proc.pid} (gone)"


def _kill_marked(marker: str) -> None:
    """After a failed test: the processes it started, and only those."""
    for proc in _marked(marker):
        with contextlib.suppress(psutil.Error):
            proc.kill()


def _completion(url: str, **fields) -> httpx.Response:
    body = {"model": "local-llama", "prompt": "Hello", "max_tokens": 1, **fields}
    return httpx.post(f"{url}/v1/completions", json=body, timeout=60)


def _wait_until_it_answers(server: Server, url: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        assert server.proc.poll() is None, f"the server exited:\n{server.output[-3000:]}"
        with contextlib.suppress(httpx.TransportError):
            if _completion(url).status_code == 200:
                return
        assert time.monotonic() < deadline, f"no answer on {url}:\n{server.output[-3000:]}"
        time.sleep(1)


def _haproxies(marker: str) -> dict[int, list[str]]:
    """The server's HAProxy processes and their command lines (Serve replaces them at each reload)."""
    found = {}
    for proc in _marked(marker):
        with contextlib.suppress(psutil.Error):
            if proc.name() == "haproxy":
                found[proc.pid] = proc.cmdline()
    return found


class Streams:
    """Streams in flight: long completions on the larger variant, each read to its end in a thread."""

    def __init__(self, url: str, count: int = 4) -> None:
        self.lines: list[list[str]] = [[] for _ in range(count)]
        self._started = [threading.Event() for _ in range(count)]
        self._threads = [threading.Thread(target=self._stream, args=(url, i), daemon=True) for i in range(count)]
        for thread in self._threads:
            thread.start()

    def _stream(self, url: str, i: int) -> None:
        body = {"model": "small", "prompt": "Once upon a time", "max_tokens": 3000, "ignore_eos": True, "stream": True}
        with (
            contextlib.suppress(httpx.HTTPError),
            httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=120) as response,
        ):
            for line in response.iter_lines():
                if line.strip():
                    self.lines[i].append(line)
                    self._started[i].set()
        self._started[i].set()

    def wait_until_streaming(self) -> None:
        for started, lines in zip(self._started, self.lines, strict=True):
            assert started.wait(timeout=120) and lines and lines[0].startswith("data: {"), lines

    def assert_each_ended_with_an_error_event_and_done(self) -> None:
        for thread in self._threads:
            thread.join(timeout=60)
        for lines in self.lines:
            assert lines[-1:] == ["data: [DONE]"], f"a stream did not end with [DONE]: {lines[-3:]}"
            last = json.loads(lines[-2].removeprefix("data: "))
            assert "error" in last or last["choices"][0]["finish_reason"], lines[-3:]


@pytest.mark.parametrize("stop", ["ctrl_c", "sigterm"])
def test_a_stop_at_any_moment_leaves_nothing_and_a_second_server_starts_right_after(tmp_path, stop):
    config_path, config = _config(tmp_path)
    url = f"http://127.0.0.1:{config['http_options']['port']}"
    statuses = (0,) if stop == "ctrl_c" else (0, 143)
    markers = [uuid.uuid4().hex for _ in range(2)]
    try:
        # Right after start: Ray is up, the app is being deployed.
        env = _server_env(markers[0])
        first = _started(config_path, env, markers[0], lambda s: s.wait_for_output(r"Started a local Ray instance"))
        getattr(first, stop)()
        _assert_stopped_cleanly(first, markers[0], _server_ports(config, env, first.output), statuses=statuses)
        first.close()

        # A second server on the same ports, at once; stopped once it answers through a reloaded HAProxy, with
        # streams in flight.
        env = _server_env(markers[1])
        second = _started(config_path, env, markers[1], lambda s: _wait_until_it_answers(s, url))
        serving = _haproxies(markers[1])
        assert any("-sf" in cmdline for cmdline in serving.values()), f"no reloaded HAProxy: {serving}"
        _assert_haproxy_config_patched(next(iter(serving.values())))
        if stop == "sigterm":
            _redeploy(tmp_path, config, second, markers[1], url)
        streams = Streams(url)
        streams.wait_until_streaming()
        getattr(second, stop)()
        _assert_stopped_cleanly(second, markers[1], _server_ports(config, env, second.output), statuses=statuses)
        streams.assert_each_ended_with_an_error_event_and_done()
        second.close()
    finally:
        for marker in markers:
            _kill_marked(marker)


# What `ray.init` raises when a new node's raylet has not registered with its GCS within the 30 s Ray allows
# (``raylet_start_wait_time_s``, hard-coded in ray/_private/node.py): on a machine overloaded by other work, before any
# of this project's code runs.
RAY_NODE_START_TIMEOUT = "The current node timed out during startup"


def _started(config_path: Path, env: dict[str, str], marker: str, ready: Callable[[Server], object]) -> Server:
    """A server that got as far as ``ready`` checks. A start that Ray itself gave up on (``RAY_NODE_START_TIMEOUT``)
    is tried once more: it is not what these tests are about, and a second start finds the machine as it is."""
    server = Server(config_path, env)
    try:
        ready(server)
        return server
    except AssertionError:
        if RAY_NODE_START_TIMEOUT not in server.output:
            raise
    server.close()
    _kill_marked(marker)
    server = Server(config_path, env)
    ready(server)
    return server


def _assert_haproxy_config_patched(cmdline: list[str]) -> None:
    """Serve runs HAProxy through the launcher that gives its errors OpenAI JSON (serve_app/haproxy_errors.py).
    Serve rewrites the file before each reload and the launcher patches it when the new HAProxy starts: at some
    moments it is not patched yet."""
    path = Path(cmdline[cmdline.index("-f") + 1])
    deadline = time.monotonic() + 60
    while MARKER not in path.read_text():
        assert time.monotonic() < deadline, f"{path} never had HAProxy's OpenAI error pages"
        time.sleep(0.2)


def _redeploy(tmp_path: Path, config: dict, server: Server, marker: str, url: str) -> None:
    """A config change deployed to the running server (``variant-serve deploy``): the ingress is replaced, and Serve
    reloads HAProxy for it; returns once the new ingress replica answers, through a new HAProxy process."""
    before = _completion(url).headers["x-route-ingress"]
    haproxies_before = set(_haproxies(marker))
    changed = json.loads(json.dumps(config))
    changed["applications"][0]["args"]["limits"]["default_max_tokens"] -= 1
    path = tmp_path / "changed.yaml"
    path.write_text(yaml.safe_dump(changed))
    dashboard = server.wait_for_output(r"dashboard at \S*(http://127\.0\.0\.1:\d+)").group(1)
    env = {**os.environ, "RAY_AUTH_MODE": "token"}  # Ray 2.60's token auth, as serve_config.yaml says
    deploy = subprocess.run(
        [*_command(), "deploy", str(path), "-a", dashboard], env=env, capture_output=True, text=True, timeout=120
    )
    assert deploy.returncode == 0, deploy.stderr
    deadline = time.monotonic() + START_TIMEOUT_S
    while _completion(url).headers.get("x-route-ingress") == before:
        assert time.monotonic() < deadline, "the redeployed ingress never answered"
        time.sleep(1)
    assert set(_haproxies(marker)) - haproxies_before, "HAProxy was not reloaded for the new ingress"
