import os
import subprocess
import sys
import time

import pytest

from bench import pyspy
from bench.pyspy import summarize_profiles, top_functions

RAW = "\n".join(
    [
        "main (app.py:1);loop (app.py:5);step (engine.py:10) 6",
        "main (app.py:1);loop (app.py:5);step (engine.py:11) 2",
        "main (app.py:1);loop (app.py:5);send (net.py:3) 2",
        "garbage line",
    ]
)


def test_self_time_per_function_not_per_line():
    assert top_functions(RAW) == [("step (engine.py)", 0.8), ("send (net.py)", 0.2)]


def test_inclusive_time_counts_every_function_on_the_stack_once():
    inclusive = dict(top_functions(RAW, inclusive=True))
    assert inclusive["main (app.py)"] == pytest.approx(1.0)
    assert inclusive["step (engine.py)"] == pytest.approx(0.8)
    assert top_functions("") == []


def test_summary_names_each_role(tmp_path):
    (tmp_path / "p-engine.txt").write_text(RAW)
    text = summarize_profiles({"engine": tmp_path / "p-engine.txt", "missing": tmp_path / "nope.txt"})
    assert "== engine: 10 samples" in text
    assert "80.0%  step (engine.py)" in text
    assert "== missing: 0 samples" in text


@pytest.mark.skipif(not pyspy.available(), reason="py-spy is not installed")
def test_records_a_running_process(tmp_path):
    busy = subprocess.Popen([sys.executable, "-c", "def spin():\n while True: pass\nspin()"])
    try:
        with pyspy.recording({"busy": busy.pid}, tmp_path, "t") as paths:
            time.sleep(1.5)
    finally:
        busy.kill()
        busy.wait()
    if not paths["busy"].is_file():  # py-spy needs ptrace rights, which some containers withhold
        pytest.skip("py-spy could not attach here")
    assert top_functions(paths["busy"].read_text())[0][0].startswith("spin")


def test_finds_children_by_role():
    # The arguments after -c's code only name the process: it looks like an engine server to role_of.
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "transformers", "serve"])
    try:
        assert pyspy.pids_by_role(os.getpid())["engine_server"] == child.pid
    finally:
        child.kill()
        child.wait()
