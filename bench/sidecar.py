"""The engine servers of ``python -m bench overhead``'s ``engine_server`` and ``sidecar`` paths.

``sidecar`` is this project's stack in front of an engine server: one variant on the ``openai_server`` backend
(the TensorRT-LLM path, where trtllm-serve runs beside each replica), reaching the server by ``url``. The server is
started by the bench beside the local cluster, not by the replica: a managed sidecar asks its replica for a GPU per
tensor-parallel rank (serve_app.config), and a CPU machine has none. As the bench's child its CPU is counted as
``engine_server`` (bench.process_cpu), so the relay's cost per token (the engine replica, the ingress) stands
beside the server's own, and beside the same server loaded alone (``engine_server``).

Two servers (``--engine-server``):

* ``transformers``: ``transformers serve`` on the bench's model with the hf engine's KV settings (the stand-in
  for trtllm-serve; bench/engine_server.py). It streams one event per token and accepts standard OpenAI fields
  only, so the variant sends text prompts and no ``ignore_eos``: the sidecar's server loads a copy of the model
  whose end-of-sequence id is out of the vocabulary (:func:`endless_copy`), so every output runs to max_tokens
  as on the other paths.
* ``fake-trtllm``: the tests' fake trtllm-serve (``tests/engines/fakes/trtllm_serve.py``, in a checkout only): a
  scripted model at a TensorRT-LLM-like rate (``--fake-step-ms`` per decode step), token-id prompts,
  ``ignore_eos`` and per-chunk usage, and trtllm-serve's ``stream_interval`` (``--stream-interval``: a response at
  the first decoding iteration, then every N-th and at the end). It does no model work: its CPU is the server's
  HTTP and SSE framing only.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

from bench import server_process
from engines.config import DEFAULT_LLM_API_OPTIONS, CoalesceConfig, OpenAIServerEngineConfig

EngineServerKind = Literal["transformers", "fake-trtllm"]
ENGINE_SERVERS: tuple[EngineServerKind, ...] = ("transformers", "fake-trtllm")
REPO = Path(__file__).resolve().parents[1]
FAKE_TRTLLM_SERVE = REPO / "tests" / "engines" / "fakes" / "trtllm_serve.py"
FAKE_MODEL = "/models/fake"  # the fake loads nothing; its model field is a name
FAKE_BATCH_SLOTS = 256
FAKE_CONTEXT = 4096


def fake_unavailable_reason() -> str | None:
    """Why the fake trtllm-serve cannot run here (it is a test fixture: a checkout has it, a wheel does not)."""
    if not FAKE_TRTLLM_SERVE.is_file():
        return f"the fake trtllm-serve ({FAKE_TRTLLM_SERVE}) is not here: run from a checkout"
    return None


def endless_copy(model_dir: str, into: Path) -> Path:
    """A copy of ``model_dir`` whose end-of-sequence id is never produced: the sidecar's outputs run to
    max_tokens without ``ignore_eos`` (transformers serve refuses unknown fields, and the variant sends none)."""
    target = into / f"{Path(model_dir).name}-endless"
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(model_dir, target)
    config = json.loads((target / "config.json").read_text())
    never = int(config["vocab_size"]) + 1000
    config["eos_token_id"] = never
    (target / "config.json").write_text(json.dumps(config))
    generation = target / "generation_config.json"
    settings = json.loads(generation.read_text()) if generation.exists() else {}
    settings["eos_token_id"] = never
    generation.write_text(json.dumps(settings))
    return target


def fake_argv(port: int, options_path: Path) -> list[str]:
    return [
        sys.executable,
        str(FAKE_TRTLLM_SERVE),
        "serve",
        FAKE_MODEL,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max_batch_size",
        str(FAKE_BATCH_SLOTS),
        "--extra_llm_api_options",
        str(options_path),
    ]


@contextlib.contextmanager
def running_fake(port: int, *, stream_interval: int, step_ms: float, work: Path) -> Iterator[str]:
    """Starts the fake trtllm-serve with ``stream_interval`` in its LLM API options; yields its base URL."""
    work.mkdir(parents=True, exist_ok=True)
    options = work / f"llm-api-options-{port}.yaml"
    options.write_text(json.dumps({**DEFAULT_LLM_API_OPTIONS, "stream_interval": stream_interval}))  # YAML too
    log_path = work / f"fake-trtllm-serve-{port}.log"
    url = f"http://127.0.0.1:{port}"
    try:
        with server_process.running(
            fake_argv(port, options),
            env={**os.environ, "FAKE_TRTLLM_STEP_S": str(step_ms / 1000)},
            log_path=log_path,
            url=url,
            what="the fake trtllm-serve",
            startup_timeout_s=120.0,
            poll_s=0.2,
        ):
            yield url
    finally:
        options.unlink(missing_ok=True)


def sidecar_engine(
    kind: EngineServerKind, url: str, *, model_dir: str, coalesce: CoalesceConfig, batch_slots: int
) -> OpenAIServerEngineConfig:
    """The sidecar variant's engine: ``openai_server`` reaching the running server at ``url``.

    ``max_batch_size``: neither server's load endpoint says its batch slots under load (transformers serve has
    none), and without them the router would count the streams beyond the slots it does not know as queued and
    shed them (docs/tensorrt-llm.md, "The sidecar hop")."""
    if kind == "transformers":
        return OpenAIServerEngineConfig(
            model=model_dir,
            url=url,
            prompt_format="text",  # it takes strings only
            max_batch_size=batch_slots,
            coalesce=coalesce,
            startup_timeout_s=300,
        )
    return OpenAIServerEngineConfig(
        model=FAKE_MODEL,
        url=url,
        max_seq_len=FAKE_CONTEXT,
        sampling_extensions=True,  # ignore_eos, and usage in every chunk, as trtllm-serve takes them
        max_batch_size=FAKE_BATCH_SLOTS,
        coalesce=coalesce,
        startup_timeout_s=300,
    )
