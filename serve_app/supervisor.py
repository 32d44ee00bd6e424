"""``variant-serve run``: Serve's ``serve run`` in a process of its own, which this one starts, watches and stops.

Why two processes. ``serve run`` starts a local Ray cluster whose GCS, raylet and agents share its process group,
and Ray's core worker installs in the driver a failure handler for SIGTERM (absl's) that prints a native stack dump
and, three seconds later, aborts the process (its alarm), whatever Python is still doing. So a SIGTERM to the
process group (``timeout``, a process supervisor, a terminal closing) killed Ray under Serve and ended in SIGABRT,
and a process spawned meanwhile outlived it: an HAProxy started by a reload while its manager was being killed,
still listening on Serve's ports. Here the signals reach only this process, which has no Ray in it; the server runs
in a session of its own, where:

* the stop is ordered: the engines end their open streams first, an error event and ``data: [DONE]`` reaching each
  client through the still running proxy (serve_app/stop_notice.py); then the cluster ends (Ray's shutdown for the
  local cluster ``serve run`` started, Serve's for one it joined with ``--address``); a stop asked for before the
  apps were submitted just ends the processes, since nothing serves yet;
* then, or once ``VARIANT_SERVE_STOP_TIMEOUT_S`` (6 s) has passed, every process the run started that is still there
  is ended (SIGTERM, SIGKILL a second later): each process that carries this run's id in its environment (Ray's
  processes, the replicas, their engine processes and sidecars, HAProxy: they inherit it) or belongs to the
  server's session. Nothing else is touched.

Ctrl-C, SIGTERM or SIGHUP once stops in order, a second one at once; the exit status is 0 after a stop that was
asked for, else the server's own. If this process is killed outright, the server gets SIGINT (the parent-death
signal) and stops in order by itself.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Mapping, Sequence

import psutil

from serve_app import haproxy_errors
from serve_app.ray_compat import RAY_2_60, ray_version
from serve_app.stop_notice import RUN_ID_ENV, announce_stop

STOP_TIMEOUT_ENV = "VARIANT_SERVE_STOP_TIMEOUT_S"
DEFAULT_STOP_TIMEOUT_S = 6.0
# How long the engines get to end their streams before the cluster ends (a replica that died meanwhile holds it).
NOTICE_TIMEOUT_S = 3.0
_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_PR_SET_PDEATHSIG = 1


def wants_supervision(args: Sequence[str]) -> bool:
    """Whether ``variant-serve ARGS`` runs a server here: ``run``, blocking (the default), not ``--help``."""
    return bool(args) and args[0] == "run" and not {"--help", "--non-blocking"} & set(args)


def stop_timeout_s(env: Mapping[str, str] = os.environ) -> float:
    """How long a stop in order may take before the rest is killed (``VARIANT_SERVE_STOP_TIMEOUT_S``)."""
    try:
        return float(env.get(STOP_TIMEOUT_ENV, DEFAULT_STOP_TIMEOUT_S))
    except ValueError:
        return DEFAULT_STOP_TIMEOUT_S


# ---------------------------------------------------------------------------------------------- this process


def supervise(args: Sequence[str], *, server: Sequence[str] = (sys.executable, "-m", "serve_app.supervisor")) -> int:
    """Runs ``serve ARGS`` (a ``run``) in its own session until it ends or a signal stops it; its exit status.
    ``server``: the server's command, given the fd to write its readiness to and ``ARGS`` (:func:`serve_main`)."""
    run_id = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
    env = dict(os.environ)
    env[RUN_ID_ENV] = run_id
    workdir = tempfile.mkdtemp(prefix="variant-serve-")
    try:
        if env.get("RAY_SERVE_ENABLE_HA_PROXY") == "1" and ray_version() >= RAY_2_60:  # 2.55 runs PATH's haproxy
            haproxy_errors.install(env, workdir)
        return _Supervisor([*server], args, env, run_id).run()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


class _Supervisor:
    def __init__(self, server: list[str], args: Sequence[str], env: dict[str, str], run_id: str) -> None:
        self.run_id = run_id
        self.timeout_s = stop_timeout_s(env)
        self.requests = 0  # stop signals received
        ready_r, ready_w = os.pipe()
        self._wake_r, wake_w = os.pipe()
        for fd in (self._wake_r, wake_w):
            os.set_blocking(fd, False)
        self._old_wakeup = signal.set_wakeup_fd(wake_w)
        for sig in _SIGNALS:
            signal.signal(sig, self._on_signal)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes the loop (set_wakeup_fd) when the server exits
        self.child = subprocess.Popen(
            [*server, str(ready_w), *args],
            env=env,
            stdin=subprocess.DEVNULL,
            pass_fds=(ready_w,),
            start_new_session=True,
            preexec_fn=_in_server_before_exec,
        )
        os.close(ready_w)
        self._ready_r: int | None = ready_r

    def _on_signal(self, signum: int, frame: object) -> None:
        self.requests += 1

    def run(self) -> int:
        ready = False
        handled = 0
        deadline: float | None = None
        while self.child.poll() is None:
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                self._kill()
                break
            waits = [self._wake_r] + ([self._ready_r] if self._ready_r is not None else [])
            readable, _, _ = select.select(waits, [], [], None if deadline is None else deadline - now)
            with contextlib.suppress(BlockingIOError):
                os.read(self._wake_r, 512)
            if self._ready_r is not None and self._ready_r in readable:
                ready = ready or bool(os.read(self._ready_r, 1))
                if not ready:  # end of file: the server exited before it was ready
                    os.close(self._ready_r)
                    self._ready_r = None
            if self.requests > handled:
                if handled == 0 and ready:
                    # Its handler stops it in order (_serve_then_stop). SIGINT, not SIGTERM: a SIGTERM that came
                    # before its handler was back in place would meet Ray's (a stack dump, then SIGABRT).
                    os.kill(self.child.pid, signal.SIGINT)
                    deadline = time.monotonic() + self.timeout_s
                else:  # a second signal, or the app was not even submitted yet: nothing to stop in order
                    deadline = time.monotonic()
                handled = self.requests
        code = self.child.wait()
        self._sweep()
        signal.set_wakeup_fd(self._old_wakeup)
        return 0 if self.requests else code

    def _kill(self) -> None:
        """Ends the server now: its driver first (no dump: SIGKILL), then everything it started."""
        with contextlib.suppress(ProcessLookupError):
            self.child.kill()
        self.child.wait()
        self._sweep(grace_s=0.0)

    def _sweep(self, grace_s: float = 1.0) -> None:
        """Ends every process this run started that is still there: SIGTERM, then SIGKILL after ``grace_s``. Until
        none is left (a process may spawn another meanwhile), for a few seconds at most."""
        until = time.monotonic() + grace_s + 5.0
        while True:
            left = _processes_of(self.run_id, self.child.pid)
            if not left or time.monotonic() > until:
                return
            for proc in left:
                with contextlib.suppress(psutil.Error):
                    if grace_s > 0:
                        proc.terminate()
                    else:
                        proc.kill()
            _, alive = psutil.wait_procs(left, timeout=grace_s or 1.0)
            for proc in alive:
                with contextlib.suppress(psutil.Error):
                    proc.kill()
            psutil.wait_procs(alive, timeout=1.0)
            grace_s = 0.0


def _processes_of(run_id: str, session: int) -> list[psutil.Process]:
    """The processes this run started: its id in their environment (inherited by every process Ray starts on this
    node), or in the server's session. Not this process."""
    found = []
    for proc in psutil.process_iter():
        if proc.pid == os.getpid():
            continue
        with contextlib.suppress(psutil.Error, OSError):
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue  # exited already: holds nothing, and only its parent can reap it
            if os.getsid(proc.pid) == session or proc.environ().get(RUN_ID_ENV) == run_id:
                found.append(proc)
    return found


def _in_server_before_exec() -> None:
    """In the server's process before it runs Python: SIGINT held until its handler is in place (a stop during its
    start waits instead of raising KeyboardInterrupt), and SIGINT again if this process dies first."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGINT)


# ---------------------------------------------------------------------------------------------- the server


def serve_main(argv: Sequence[str]) -> int:
    """The server's process: ``python -m serve_app.supervisor READY_FD run ...``."""
    ready_fd, args = int(argv[0]), list(argv[1:])
    stop = threading.Event()

    def request_stop(signum: int, frame: object) -> None:
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, request_stop)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})

    from ray.serve.scripts import cli  # after the environment is set: Serve reads it on import

    if "--reload" in args:
        # Serve's own loop (it watches files, redeploys); a stop is its KeyboardInterrupt path.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        _ready(ready_fd)
        return _click(cli, args)
    code = _click(cli, [args[0], "--non-blocking", *args[1:]])  # starts Ray, submits the apps, returns
    if code or not _serve_is_running():
        return code or 1
    # ray.init put Ray's handlers on SIGTERM (Python's, then absl's dump-and-abort in C): ours again.
    signal.signal(signal.SIGTERM, request_stop)
    _ready(ready_fd)
    stop.wait()
    _serve_then_stop()
    return 0


def _click(cli, args: list[str]) -> int:
    try:
        cli.main(args=args, prog_name="variant-serve")
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return 0


def _serve_is_running() -> bool:
    """False after ``serve run`` failed (it prints the error, shuts Serve down and returns)."""
    from ray import serve

    try:
        serve.status()
    except Exception:
        return False
    return True


def _ready(fd: int) -> None:
    os.write(fd, b"r")
    os.close(fd)


def _serve_then_stop() -> None:
    """The ordered stop: the engines end their streams (while the proxy still relays them), then the cluster."""
    import ray
    from ray import serve

    print("variant-serve: stopping (again to stop at once)", file=sys.stderr, flush=True)
    with contextlib.suppress(Exception):
        announce_stop(os.environ[RUN_ID_ENV], NOTICE_TIMEOUT_S)
    if not _started_the_cluster():
        # A cluster it joined (--address): Serve's shutdown there, as `serve run` does; the cluster stays.
        serve.shutdown()
    # The local cluster `serve run` started: Ray ends it. Serve's own shutdown would first drain its deployments
    # tier by tier (the ingress, then the engines, then the stats board, two seconds each at least, after a
    # 30 s window for the ingress behind HAProxy): nothing is left to drain once the engines are down. What Ray
    # leaves running (Serve's HAProxy, an engine process still exiting) the supervising process ends.
    ray.shutdown()


def _started_the_cluster() -> bool:
    """Whether this driver's ``ray.init`` started the cluster it is on (else it joined one)."""
    import ray

    node = getattr(ray._private.worker, "_global_node", None)  # ray.init sets it, head=True where it started one
    return bool(getattr(node, "head", False))


if __name__ == "__main__":
    sys.exit(serve_main(sys.argv[1:]))
