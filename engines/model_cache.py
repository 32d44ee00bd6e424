"""Building a generated model directory once, safely shared by several processes (Serve replicas, benches)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from core.errors import EngineConfigError


def build_once(target: Path, build: Callable[[Path], None], *, what: str) -> Path:
    """Returns ``target``, first running ``build(tmp_dir)`` and publishing it there if it does not exist yet."""
    if target.is_dir():
        return target
    import filelock  # installed with transformers (huggingface_hub); imported late to keep imports light

    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        # The lock only saves duplicate work; correctness comes from the atomic rename below, which
        # also holds where file locks do not (some network file systems).
        with filelock.FileLock(str(target) + ".lock"):
            if target.is_dir():
                return target
            tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
            try:
                build(tmp)
                tmp.chmod(0o755)  # mkdtemp makes it private; the cache may be shared by several users
                os.rename(tmp, target)
            except OSError:
                if not target.is_dir():  # not just "someone else finished first"
                    raise
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    except OSError as e:
        raise EngineConfigError(
            f"Cannot generate {what} under {target.parent}: {e}. "
            "Point VARIANT_SERVE_CACHE at a writable directory with room for the weights."
        ) from e
    return target
