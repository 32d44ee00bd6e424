"""serve_app/preload_gc.py, imported last by a warm Ray worker: the heap its earlier imports built ends up frozen,
so that the collection Serve runs once a replica has started has only the replica's own objects to scan."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


@pytest.mark.slow  # starts a process or loads a model: the full suite only
def test_importing_it_freezes_what_the_process_allocated_before():
    script = (
        "import gc, json; import ray.serve, serve_app.app; before = gc.get_freeze_count(); "
        "import serve_app.preload_gc; print(json.dumps([before, gc.get_freeze_count(), len(gc.get_objects())]))"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120)
    before, frozen, tracked = json.loads(out.stdout.strip().splitlines()[-1])

    assert before == 0
    assert frozen > 100_000  # Ray, Serve and the app: hundreds of thousands of objects, now out of every collection
    assert tracked < frozen / 10  # what a collection still scans
