"""CPU time by process role: who burns the machine's cores while a level runs.

On a shared or small machine tokens/s moves with whatever else runs; the CPU seconds each part of a serving
path spends per generated token do not (much). So beside tokens/s, the overhead bench reads the CPU time of
this process and all its descendants (a local Ray cluster started by this process, ``transformers serve``)
before and after each level and attributes it to roles named after what each process is: ``bench`` (this
process and its load-generator children: the load generator, or the engine itself in-process), ``proxy``
(Serve's HTTP proxy), the Serve deployment a replica runs (``Ingress``, ``variant-engine``, ...), ``controller``,
``ray_system`` (raylet, GCS, Ray's helper processes) and ``engine_server``. A replica's engine process
(``engine_process: true``, a multiprocessing spawn child of the replica) is ``<deployment>/engine_process``.
"""

from __future__ import annotations

import os
import re
from collections import defaultdict
from collections.abc import Mapping

import psutil

PROFILER = "profiler"  # py-spy's own processes (bench overhead --profile)
ENGINE_PROCESS = "engine_process"  # suffix of a replica's engine process (engines/process.py)

# "ray::ServeReplica:<app>:<deployment>" and, while it runs a task, ".<method>" after it.
_REPLICA = re.compile(r"^ray::ServeReplica:[^:]*:([^.\s]+)")


def role_of(cmdline: str) -> str:
    """The role of a descendant process, from its command line (Ray renames workers after their actor)."""
    if match := _REPLICA.match(cmdline):
        return match.group(1)
    if "py-spy" in cmdline.split(" ", 1)[0]:
        return PROFILER
    if cmdline.startswith("ray::ProxyActor"):
        return "proxy"
    if cmdline.startswith("ray::ServeController"):
        return "controller"
    # transformers serve, and trtllm-serve (or the tests' fake of it) behind bench overhead's sidecar path.
    if " serve " in f" {cmdline} " and ("transformers" in cmdline or "trtllm" in cmdline):
        return "engine_server"
    if cmdline.startswith("ray::") or "/ray/" in cmdline:
        return "ray_system"
    return "other"


def is_spawn_child(cmdline: str) -> bool:
    """A process started by multiprocessing's spawn context (its command line names spawn_main)."""
    return "multiprocessing.spawn import spawn_main" in cmdline


def roles_by_pid(pid: int | None = None) -> dict[int, tuple[str, float]]:
    """Role and CPU seconds (user + system) so far of process ``pid`` (default: this one) and each descendant."""
    root = psutil.Process(pid or os.getpid())
    found: dict[int, tuple[str, float]] = {}  # parents are listed before their children
    for process in [root, *root.children(recursive=True)]:
        try:
            times = process.cpu_times()
            if process.pid == root.pid:
                role = "bench"
            else:
                cmdline = " ".join(process.cmdline())
                role = role_of(cmdline)
                parent = found.get(process.ppid(), ("other", 0.0))[0]
                if role == "other" and is_spawn_child(cmdline):
                    if parent == "bench":  # the load generator's own processes (bench/load_processes.py)
                        role = "bench"
                    elif parent not in _NOT_REPLICAS:
                        role = f"{parent}/{ENGINE_PROCESS}"
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue  # ended between the listing and the read: its time is lost either way
        found[process.pid] = (role, times.user + times.system)
    return found


def cpu_by_role(pid: int | None = None) -> dict[str, float]:
    """CPU seconds so far of process ``pid`` (default: this one) and its descendants, summed by role."""
    totals: dict[str, float] = defaultdict(float)
    for role, seconds in roles_by_pid(pid).values():
        totals[role] += seconds
    return dict(totals)


_NOT_REPLICAS = frozenset({"bench", "other", "proxy", "controller", "ray_system", "engine_server", PROFILER})


def cpu_delta(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    """CPU seconds spent between two readings, by role (roles that spent nothing measurable left out)."""
    delta = {role: after[role] - before.get(role, 0.0) for role in after}
    return {role: round(s, 3) for role, s in sorted(delta.items(), key=lambda kv: -kv[1]) if s >= 0.005}
