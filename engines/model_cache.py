"""Building a generated model directory once, safely shared by several processes (Serve replicas, benches)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from core.errors import EngineConfigError, ModelNotFoundError

_T = TypeVar("_T")


def named(table: Mapping[str, _T], prefix: str, name: str) -> _T:
    """``table[name]`` for the model ``<prefix><name>``, raising ``ModelNotFoundError`` that names the known ones."""
    try:
        return table[name]
    except KeyError:
        known = ", ".join(prefix + n for n in table)
        kind = prefix.removesuffix(":")
        raise ModelNotFoundError(f"Unknown {kind} model '{prefix}{name}'. Known: {known}.") from None


def content_key(material: Mapping[str, Any]) -> str:
    """A short hash of everything that shapes a generated model's files: its cache directory's suffix, so that
    a change to any of them builds a new directory instead of reusing a stale one."""
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:12]


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
