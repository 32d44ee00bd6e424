import subprocess
import sys
import time

import pytest

from bench.process_cpu import PROFILER, cpu_by_role, cpu_delta, is_spawn_child, role_of, roles_by_pid


@pytest.mark.parametrize(
    ("cmdline", "role"),
    [
        ("ray::ServeReplica:stack:variant-engine", "variant-engine"),
        ("ray::ServeReplica:stack:Ingress.handle_request_streaming", "Ingress"),  # renamed while a task runs
        ("ray::ProxyActor", "proxy"),
        ("ray::ServeController", "controller"),
        ("/venv/lib/python3.11/site-packages/ray/core/src/ray/raylet/raylet --raylet_socket_name=x", "ray_system"),
        ("ray::IDLE", "ray_system"),
        ("/venv/bin/python3 /venv/bin/transformers serve --continuous-batching /m", "engine_server"),
        ("/opt/trtllm/bin/python /opt/trtllm/bin/trtllm-serve serve /models/m --port 8000", "engine_server"),
        ("/venv/bin/python tests/engines/fakes/trtllm_serve.py serve /models/fake --port 8000", "engine_server"),
        ("py-spy record --pid 12 --format raw", PROFILER),
        ("/usr/bin/sleep 10", "other"),
    ],
)
def test_roles_from_command_lines(cmdline, role):
    assert role_of(cmdline) == role


def test_counts_this_process_and_its_children():
    burn = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass"
    before = cpu_by_role()
    child = subprocess.Popen([sys.executable, "-c", burn + "\nimport time; time.sleep(30)"])
    try:
        for _ in range(200):  # until the child has burnt its CPU (it then sleeps, still a child)
            spent = cpu_delta(before, cpu_by_role())
            if spent.get("other", 0.0) >= 0.3:
                break
            time.sleep(0.05)
        assert spent["other"] >= 0.3
        assert "bench" in cpu_by_role()
    finally:
        child.kill()
        child.wait()


def test_delta_drops_roles_that_spent_nothing_and_sorts_the_rest():
    delta = cpu_delta({"bench": 1.0, "proxy": 2.0}, {"bench": 1.0, "proxy": 2.5, "Ingress": 3.0, "gone": 0.001})
    assert list(delta) == ["Ingress", "proxy"]
    assert delta["proxy"] == pytest.approx(0.5)


def test_recognizes_a_multiprocessing_spawn_child():
    import multiprocessing

    import psutil

    child = multiprocessing.get_context("spawn").Process(target=time.sleep, args=(30,), daemon=True)
    child.start()
    try:
        for _ in range(100):  # the command line is set once the interpreter has started (bounded)
            cmdline = " ".join(psutil.Process(child.pid).cmdline())
            if cmdline:
                break
            time.sleep(0.05)
        assert is_spawn_child(cmdline), cmdline
        assert role_of(cmdline) == "other"  # its role comes from its parent (a replica) in cpu_by_role
    finally:
        child.kill()
        child.join()
    assert not is_spawn_child(f"{sys.executable} -c pass")


def test_a_spawn_child_of_the_bench_counts_as_the_bench():
    """The load generator's own processes (bench/load_processes.py): their CPU is the load generator's.

    Asserted on the child's own role: in the suite, the shared cluster's replicas (and their engine processes)
    are descendants of this process too, and spend CPU of their own meanwhile."""
    import multiprocessing

    child = multiprocessing.get_context("spawn").Process(target=time.sleep, args=(30,), daemon=True)
    child.start()
    try:
        for _ in range(100):  # the command line is set once the interpreter has started (bounded)
            role = roles_by_pid().get(child.pid, ("", 0.0))[0]
            if role == "bench":
                break
            time.sleep(0.05)
        assert role == "bench", roles_by_pid()
    finally:
        child.kill()
        child.join()
