"""Model references as configs spell them: a path or hub id, ``builtin:<name>`` or ``random:<shape>``.

Its own module because it dispatches over both generated kinds, and ``engines.random_models`` builds on
``engines.builtin`` (its tokenizer and cache): the dispatch in either would make the two import each other.
"""

from __future__ import annotations

import asyncio

from engines.builtin import BUILTIN_PREFIX, ensure_builtin
from engines.random_models import RANDOM_PREFIX, resolve_random


def resolve_model(model: str) -> str:
    """Returns a loadable model reference: the generated directory for ``builtin:<name>`` and
    ``random:<shape>`` (built on first use), else ``model``."""
    if model.startswith(RANDOM_PREFIX):  # random weights of a real shape, for GPU measurements
        return str(resolve_random(model))
    if not model.startswith(BUILTIN_PREFIX):
        return model
    return str(ensure_builtin(model.removeprefix(BUILTIN_PREFIX)))


async def resolve_model_off_loop(model: str) -> str:
    """``resolve_model`` for an engine's start on the replica's event loop: a generated model is built on a worker
    thread (seconds of CPU on first use, which would stall every stream the loop serves)."""
    if not model.startswith((BUILTIN_PREFIX, RANDOM_PREFIX)):
        return model
    return await asyncio.to_thread(resolve_model, model)
