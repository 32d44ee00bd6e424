"""Where the benches find the console scripts they start (``transformers serve``, ``py-spy``)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path


def find_command(name: str) -> str | None:
    """The path of the console script ``name``: beside the running interpreter first, then on ``PATH``.

    pip puts an environment's console scripts next to its interpreter, so a venv's python started without
    activating the venv (its bin/ not on PATH) still finds them, and finds its own before another
    environment's script of the same name. None when neither has it.
    """
    if sys.executable:
        beside = shutil.which(name, path=os.fspath(Path(sys.executable).parent))
        if beside is not None:
            return beside
    return shutil.which(name)
