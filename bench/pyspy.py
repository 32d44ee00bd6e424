"""Sampling profiles of a running serving path with py-spy (``pip install py-spy``), summarised as text.

``recording`` runs one ``py-spy record --format raw`` per process while a level runs (``--nonblocking``: the
target is never paused, so the profile costs it almost nothing) and stops them with SIGINT, on which py-spy
writes its file. The raw format is collapsed stacks, one ``frame;frame;...;leaf COUNT`` per line;
:func:`top_functions` turns one into the functions that hold the most samples, by self time (the leaf) or
inclusive time (anywhere on the stack).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path

import psutil

from bench.commands import find_command
from bench.process_cpu import role_of

_LINE = re.compile(r"^(.*) (\d+)$")
_FRAME = re.compile(r"^(.*) \((.*?)(?::\d+)?\)$")


def available() -> bool:
    return find_command("py-spy") is not None


def pids_by_role(pid: int | None = None) -> dict[str, int]:
    """One process per role among ``pid``'s descendants (the Python ones worth profiling)."""
    root = psutil.Process(pid or os.getpid())
    found: dict[str, int] = {}
    for process in root.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            role = role_of(" ".join(process.cmdline()))
            if role not in ("ray_system", "other", "controller"):
                found.setdefault(role, process.pid)
    return found


@contextlib.contextmanager
def recording(pids: Mapping[str, int], out_dir: Path, prefix: str, rate: int = 100) -> Iterator[dict[str, Path]]:
    """Profiles each ``role: pid`` until the block ends; yields (and then fills) ``role: raw profile path``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {role: out_dir / f"{prefix}-{role}.txt" for role in pids}
    py_spy = find_command("py-spy") or "py-spy"
    processes = [
        subprocess.Popen(
            [py_spy, "record", "--pid", str(pid), "--format", "raw", "--output", str(paths[role]),
             "--rate", str(rate), "--nonblocking"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for role, pid in pids.items()
    ]  # fmt: skip
    try:
        yield paths
    finally:
        for process in processes:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGINT)
        for process in processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _function(frame: str) -> str:
    """``name (path/to/file.py:123)`` -> ``name (file.py)``: one entry per function, not per line."""
    match = _FRAME.match(frame)
    if match is None:
        return frame
    return f"{match.group(1)} ({os.path.basename(match.group(2))})"


def top_functions(raw: str, n: int = 15, *, inclusive: bool = False) -> list[tuple[str, float]]:
    """The ``n`` functions with the largest share of samples in collapsed stacks ``raw``."""
    counts: Counter[str] = Counter()
    total = 0
    for line in raw.splitlines():
        match = _LINE.match(line.strip())
        if match is None:
            continue
        stack, count = match.group(1).split(";"), int(match.group(2))
        total += count
        if inclusive:
            for name in {_function(frame) for frame in stack}:  # a recursive function counts once per sample
                counts[name] += count
        else:
            counts[_function(stack[-1])] += count
    return [(name, count / total) for name, count in counts.most_common(n)] if total else []


def summarize_profiles(paths: Mapping[str, Path], n: int = 12) -> str:
    """A text summary of several raw profiles: the top self-time and inclusive functions of each."""
    lines = []
    for role, path in paths.items():
        raw = path.read_text() if path.is_file() else ""
        samples = sum(int(m.group(2)) for line in raw.splitlines() if (m := _LINE.match(line.strip())))
        lines.append(f"== {role}: {samples} samples ({path.name})")
        for title, inclusive in (("self", False), ("inclusive", True)):
            lines.append(f"-- {title}")
            lines += [f"{share:6.1%}  {name}" for name, share in top_functions(raw, n, inclusive=inclusive)]
    return "\n".join(lines) + "\n"
