"""Builds an engine from its config; each backend is imported only when a config asks for it."""

from __future__ import annotations

from engines.config import EngineConfig
from engines.errors import EngineConfigError
from engines.protocol import Engine


def make_engine(config: EngineConfig) -> Engine:
    """The engine for ``config`` (not started: call ``await engine.start()``)."""
    backend = config.backend
    if backend == "hf":
        from engines.hf import HFEngine

        return HFEngine(config)
    raise EngineConfigError(f"engine.backend: unknown backend {backend!r}")
