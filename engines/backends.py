"""Builds the in-process engine of a config; each backend is imported only when a config asks for it.

Apart from ``engines.factory`` because the engine process's child (``engines.engine_core``) builds its engine
here: through the factory it would import ``engines.process``, which imports the child's module back.
"""

from __future__ import annotations

from core.errors import EngineConfigError
from engines.config import (
    EmulatedEngineConfig,
    EngineConfig,
    HFEngineConfig,
    OpenAIServerEngineConfig,
    TRTLLMEngineConfig,
)
from engines.protocol import Engine


def in_process_engine(config: EngineConfig) -> Engine:
    """The engine for ``config`` running in this process (not started: call ``await engine.start()``)."""
    # Backends import heavy or optional packages (torch, tensorrt_llm, httpx): only the one asked for.
    if isinstance(config, HFEngineConfig):
        from engines.hf import HFEngine

        return HFEngine(config)
    if isinstance(config, TRTLLMEngineConfig):
        from engines.trtllm import TRTLLMEngine

        return TRTLLMEngine(config)
    if isinstance(config, OpenAIServerEngineConfig):
        from engines.openai_server import OpenAIServerEngine

        return OpenAIServerEngine(config)
    if isinstance(config, EmulatedEngineConfig):
        from engines.emulated import EmulatedEngine

        return EmulatedEngine(config)
    raise EngineConfigError(f"engine.backend: unknown backend {getattr(config, 'backend', None)!r}")
