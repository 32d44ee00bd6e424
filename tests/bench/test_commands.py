import sys
from pathlib import Path

import pytest

from bench.commands import find_command


def _script(directory: Path, name: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


@pytest.fixture
def venv_python(tmp_path, monkeypatch) -> Path:
    """An interpreter in a venv that is not activated: its bin/ is not on PATH."""
    bin_dir = tmp_path / "venv" / "bin"
    python = _script(bin_dir, "python")
    monkeypatch.setattr(sys, "executable", str(python))
    monkeypatch.setenv("PATH", str(tmp_path / "path"))
    return python


def test_a_script_beside_the_interpreter_is_found_without_path(venv_python):
    script = _script(venv_python.parent, "tool")
    assert find_command("tool") == str(script)


def test_the_interpreter_s_own_script_wins_over_one_on_path(venv_python, tmp_path):
    _script(tmp_path / "path", "tool")
    script = _script(venv_python.parent, "tool")
    assert find_command("tool") == str(script)


def test_path_is_searched_when_the_interpreter_has_none_beside_it(venv_python, tmp_path):
    script = _script(tmp_path / "path", "tool")
    assert find_command("tool") == str(script)


def test_a_script_found_nowhere_is_none(venv_python):
    (venv_python.parent / "not-executable").write_text("")
    assert find_command("tool") is None
    assert find_command("not-executable") is None
