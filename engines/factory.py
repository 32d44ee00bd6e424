"""Builds an engine from its config: in this process (``engines.backends``) or in an engine process."""

from __future__ import annotations

from engines.backends import in_process_engine
from engines.config import EngineConfig, HFEngineConfig
from engines.protocol import Engine


def make_engine(config: EngineConfig) -> Engine:
    """The engine for ``config`` (not started: call ``await engine.start()``)."""
    if isinstance(config, HFEngineConfig) and config.engine_process:
        # Imported only when asked: the engine process spawns a child and its socket loop.
        from engines.process import ProcessEngine

        return ProcessEngine(config)  # the child process builds the in-process engine of the same config
    return in_process_engine(config)
