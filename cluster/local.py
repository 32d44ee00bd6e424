"""A multi-node Ray cluster on this one machine, with logical GPUs, for development and tests.

``python -m cluster local up --nodes 2 --gpus-per-node 4 --accelerator-type H100`` starts several Ray nodes
(``ray.cluster_utils.Cluster``: one raylet per node) whose GPUs exist only in Ray's bookkeeping: Ray schedules
``num_gpus`` and placement groups against them and sets ``CUDA_VISIBLE_DEVICES`` in each actor, exactly as on
real GPU nodes, so placement can be developed and tested on a CPU machine. Each node also advertises
``accelerator_type:<type>``, as Ray does for real NVIDIA GPUs.

The nodes belong to a small supervisor process started in the background; ``python -m cluster local down``
asks it (SIGTERM, by the PID in the state file) to stop exactly the nodes it started. No ``ray stop``: that
would kill every Ray process of the machine, other people's clusters included.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from serve_app.fast_path import HAPROXY_FIXED_PORTS, isolate_cluster_ports
from serve_app.placement import accelerator_resource

DEFAULT_STATE_FILE = Path(tempfile.gettempdir()) / f"variant-serve-local-cluster-{os.getuid()}.json"
READY_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 90.0
# Ray records the latest cluster started on this machine here (for address="auto"); a dev cluster must not
# redirect other people's `ray.init(address="auto")`, so it is put back after our nodes start.
_RAY_CURRENT_CLUSTER = Path(tempfile.gettempdir()) / "ray" / "ray_current_cluster"


class LocalClusterSpec(BaseModel):
    """The local cluster's shape: ``nodes`` identical nodes."""

    nodes: int = Field(2, ge=1, le=16, description="Ray nodes (raylets) to start; the first is the head.")
    gpus_per_node: int = Field(4, ge=0, description="Logical GPUs per node.")
    accelerator_type: str | None = Field("H100", description="accelerator_type:<type> on every node with GPUs.")
    cpus_per_node: float = Field(
        2.0, gt=0, description="Logical CPUs per node (Ray bookkeeping only: every node shares this machine's cores)."
    )
    object_store_mib: int = Field(150, ge=75, description="Object store per node, MiB (Ray's minimum is 75).")

    def node_args(self) -> dict[str, Any]:
        """Keyword arguments of ``Cluster.add_node`` for one node."""
        resources = {}
        if self.accelerator_type and self.gpus_per_node:
            resources[accelerator_resource(self.accelerator_type)] = 1.0
        return {
            "num_cpus": self.cpus_per_node,
            "num_gpus": self.gpus_per_node,
            "resources": resources,
            "object_store_memory": self.object_store_mib * 2**20,
        }


@contextlib.contextmanager
def local_cluster(spec: LocalClusterSpec) -> Iterator[Any]:
    """Start ``spec`` as a ``ray.cluster_utils.Cluster``; yield it; shut down exactly its nodes on exit."""
    from ray.cluster_utils import Cluster  # imported here: Ray takes seconds to import

    previous = _RAY_CURRENT_CLUSTER.read_text() if _RAY_CURRENT_CLUSTER.exists() else None
    # Another cluster on this machine (an app, the tests'): with Serve's fast path its HAProxy needs listeners of
    # its own, so ports inherited from the caller's environment are replaced by free ones.
    for key in HAPROXY_FIXED_PORTS:
        os.environ.pop(key, None)
    isolate_cluster_ports()
    # No port given: the head's GCS then listens on a free port (Ray's default 6379 may be someone else's).
    head_args = {**spec.node_args(), "include_dashboard": False}
    cluster = Cluster(initialize_head=True, head_node_args=head_args)
    try:
        for _ in range(spec.nodes - 1):
            cluster.add_node(**spec.node_args())
        cluster.wait_for_nodes()
        _restore_current_cluster(previous)
        yield cluster
    finally:
        cluster.shutdown()
        _restore_current_cluster(previous)


def _restore_current_cluster(previous: str | None) -> None:
    with contextlib.suppress(OSError):
        if previous is None:
            _RAY_CURRENT_CLUSTER.unlink(missing_ok=True)
        else:
            _RAY_CURRENT_CLUSTER.write_text(previous)


def supervise(spec: LocalClusterSpec, state_file: Path) -> None:
    """Run the cluster until SIGTERM / SIGINT, with its address and this PID in ``state_file``."""
    stop = False

    def _stop(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    with local_cluster(spec) as cluster:
        state = {"address": cluster.address, "pid": os.getpid(), "spec": spec.model_dump()}
        state_file.write_text(json.dumps(state))
        try:
            while not stop:
                time.sleep(0.5)
        finally:
            state_file.unlink(missing_ok=True)


def read_state(state_file: Path = DEFAULT_STATE_FILE) -> dict[str, Any] | None:
    """The running local cluster's state (address, supervisor pid, spec), or None when none runs."""
    try:
        state: dict[str, Any] = json.loads(state_file.read_text())
    except (OSError, ValueError):
        return None
    try:
        os.kill(state["pid"], 0)
    except (ProcessLookupError, KeyError):
        return None  # the supervisor died without cleaning up: its file is stale
    return state


def up(spec: LocalClusterSpec, state_file: Path = DEFAULT_STATE_FILE) -> dict[str, Any]:
    """Start the supervisor in the background and wait until the cluster is up; returns its state."""
    if (state := read_state(state_file)) is not None:
        raise RuntimeError(f"a local cluster already runs at {state['address']} (pid {state['pid']})")
    state_file.unlink(missing_ok=True)
    log = state_file.with_suffix(".log")
    command = [sys.executable, "-m", "cluster", "local", "_supervise", "--spec", spec.model_dump_json()]
    command += ["--state-file", str(state_file)]
    with log.open("w") as log_file:
        # A new session: the cluster outlives this command and the shell's Ctrl-C.
        process = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if (state := read_state(state_file)) is not None:
            return state
        if process.poll() is not None:
            raise RuntimeError(f"the local cluster failed to start (exit {process.returncode}); see {log}")
        time.sleep(0.5)
    process.terminate()
    raise RuntimeError(f"the local cluster did not come up within {READY_TIMEOUT_S:.0f} s; see {log}")


def down(state_file: Path = DEFAULT_STATE_FILE) -> bool:
    """Stop the local cluster started by :func:`up`; False when none runs."""
    state = read_state(state_file)
    if state is None:
        return False
    os.kill(state["pid"], signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            os.kill(state["pid"], 0)
        except ProcessLookupError:
            return True
        time.sleep(0.5)
    raise RuntimeError(f"the local cluster's supervisor (pid {state['pid']}) did not stop in {STOP_TIMEOUT_S:.0f} s")
