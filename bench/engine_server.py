"""The engine's own server: path (b) of ``python -m bench overhead``, ``transformers serve`` for an hf model.

``transformers serve --continuous-batching`` runs the same continuous-batching manager as our hf engine behind
its own FastAPI app. It differs from an OpenAI server in ways the load must respect (read in
``transformers/cli/serving/completion.py``):

* the prompt must be text (it tokenizes it itself): the bench sends prompts whose encoding is the exact
  token-id prompt the other paths get (:mod:`bench.prompt_pairs`);
* unknown fields are a 422, so no ``ignore_eos``; instead each request carries a ``generation_config`` JSON
  with ``eos_token_id: -1`` (passed per request to the batching manager), which makes outputs run to
  ``max_tokens`` as ``ignore_eos`` does;
* the model field must name the served directory, and there is no ``data: [DONE]`` (the client ends at
  the end of the stream; the final chunk carries usage).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
from collections.abc import Iterator
from pathlib import Path

from pydantic import BaseModel, Field

from bench import server_process
from bench.client import TargetConfig
from bench.commands import find_command
from engines.protocol import SamplingParams


class EngineServerSettings(BaseModel):
    """How ``transformers serve`` is started: the same cache and batch settings as the hf engine's."""

    model_dir: str = Field(description="The checkpoint directory, served pinned (FORCE_MODEL).")
    device: str = Field(description="'cpu' or 'cuda'.")
    dtype: str = Field(description="torch dtype name the weights are loaded in, e.g. 'float32'.")
    page_size: int = Field(description="KV cache block size (--cb-block-size).")
    num_blocks: int | None = Field(None, description="KV cache blocks (--cb-num-blocks); None: its default.")
    max_batch_tokens: int | None = Field(None, description="Tokens per step (--cb-max-batch-tokens).")
    host: str = "127.0.0.1"
    port: int = Field(description="A free local port.")
    startup_timeout_s: float = Field(300.0, gt=0, description="How long /health may take to answer.")


def unavailable_reason() -> str | None:
    """Why ``transformers serve`` cannot run here, or None when it can."""
    if find_command("transformers") is None:
        return "the `transformers` command is neither beside this Python nor on PATH"
    missing = [m for m in ("fastapi", "uvicorn", "openai") if importlib.util.find_spec(m) is None]
    if missing:
        return f"`transformers serve` needs the serving extra (missing: {', '.join(missing)})"
    return None


def serve_command(settings: EngineServerSettings) -> list[str]:
    command = [
        find_command("transformers") or "transformers",
        "serve",
        "--continuous-batching",
        "--device",
        settings.device,
        "--dtype",
        settings.dtype,
        "--host",
        settings.host,
        "--port",
        str(settings.port),
        "--cb-block-size",
        str(settings.page_size),
        "--log-level",
        "warning",
    ]
    if settings.num_blocks is not None:
        command += ["--cb-num-blocks", str(settings.num_blocks)]
    if settings.max_batch_tokens is not None:
        command += ["--cb-max-batch-tokens", str(settings.max_batch_tokens)]
    return [*command, settings.model_dir]


def generation_config_json(sampling: SamplingParams) -> str:
    """The per-request ``generation_config``: the bench's sampling, and no end-of-sequence token."""
    return json.dumps(
        {
            "do_sample": True,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            # transformers' own "no top-k" is None (its default would be 50); OpenAI's is 0.
            "top_k": sampling.top_k or None,
            "eos_token_id": -1,
        }
    )


def target(url: str, settings: EngineServerSettings, sampling: SamplingParams) -> TargetConfig:
    """How the load generator talks to it (see the module docstring)."""
    return TargetConfig(
        url=url,
        model=settings.model_dir,
        ignore_eos=False,
        extra_body={"generation_config": generation_config_json(sampling)},
    )


@contextlib.contextmanager
def running_server(settings: EngineServerSettings, log_path: Path) -> Iterator[str]:
    """Starts ``transformers serve``, waits for /health, yields its base URL and stops it afterwards."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    url = f"http://{settings.host}:{settings.port}"
    with server_process.running(
        serve_command(settings),
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        log_path=log_path,
        url=url,
        what="transformers serve",
        startup_timeout_s=settings.startup_timeout_s,
        poll_s=0.5,
    ):
        yield url
