"""A local server process for a bench: started in its own process group, waited for until it answers /health,
and stopped with everything it started.

Shared by ``bench.engine_server`` (``transformers serve``) and ``bench.sidecar`` (the fake trtllm-serve).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import httpx


@contextlib.contextmanager
def running(
    argv: list[str],
    *,
    env: Mapping[str, str],
    log_path: Path,
    url: str,
    what: str,
    startup_timeout_s: float,
    poll_s: float,
) -> Iterator[subprocess.Popen]:
    """Starts ``argv`` (``what``, in errors) with its output in ``log_path``, waits until ``url``/health
    answers 200 (checked every ``poll_s``), yields the process and stops it afterwards."""
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own group: stopped with its children, nothing else
            env=dict(env),
        )
    try:
        deadline = time.monotonic() + startup_timeout_s
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"{what} exited with {process.returncode}:\n{_tail(log_path)}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/health", timeout=2.0).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{what} did not answer /health within {startup_timeout_s:g} s (log: {log_path}):\n"
                    f"{_tail(log_path)}"
                )
            time.sleep(poll_s)
        yield process
    finally:
        _stop(process)


def _stop(process: subprocess.Popen, grace_s: float = 10.0) -> None:
    # Its own process group (start_new_session): a server's workers go with it, nothing else does.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(grace_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def _tail(path: Path, chars: int = 2000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return ""
