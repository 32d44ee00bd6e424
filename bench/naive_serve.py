"""A naive Ray Serve app over the same engine: path (c) of ``python -m bench overhead``.

What a first attempt at "an LLM on Ray Serve" looks like: an engine deployment whose generator yields each
engine step (one token per request) as its own Ray object, and a FastAPI ingress that pulls them through a
plain streaming handle and writes one SSE event per token. No coalescing (interval 0), no limits, no
router, minimal error handling. The one thing it does *not* copy from a first attempt is Serve's default
``max_ongoing_requests`` (5): that would queue streams in front of the engine and measure the queue instead
of the streaming path.

Only ``POST /v1/completions`` with a token-id prompt and ``stream: true`` is served: the bench's requests.
"""

# No `from __future__ import annotations` here: FastAPI must resolve the route parameters' annotations.
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any, cast

from fastapi import FastAPI, Request
from pydantic import BaseModel, TypeAdapter
from ray import serve
from ray.serve import Application, Deployment
from starlette.responses import StreamingResponse

from engines.config import CoalesceConfig, EngineConfig
from engines.protocol import GenerationRequest, SamplingParams

app = FastAPI(docs_url=None, redoc_url=None)

NAIVE_MAX_ONGOING_REQUESTS = 4096


class NaiveEngine:
    """Holds one started engine; yields its deltas one by one (one per engine step: a token)."""

    async def __init__(self, engine_config: dict) -> None:  # type: ignore[misc]  # Serve awaits it
        from engines.factory import make_engine  # the backend (torch for hf): only inside the replica

        config = TypeAdapter(EngineConfig).validate_python(engine_config)
        config = config.model_copy(update={"coalesce": CoalesceConfig(interval_ms=0)})
        self.engine = make_engine(config)
        await self.engine.start()

    async def generate(self, prompt: list[int], max_tokens: int, sampling: dict) -> AsyncIterator[dict]:
        request = GenerationRequest(
            f"naive-{uuid.uuid4().hex}", prompt, SamplingParams(max_tokens=max_tokens, **sampling)
        )
        async for delta in self.engine.generate(request):
            yield {"text": delta.text, "tokens": len(delta.token_ids), "done": delta.finished}

    async def __del__(self) -> None:
        await self.engine.shutdown()


def _sse(payload: dict) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


@serve.deployment(max_ongoing_requests=NAIVE_MAX_ONGOING_REQUESTS)
@serve.ingress(app)
class NaiveIngress:
    def __init__(self, engine: Any) -> None:
        self.engine = engine.options(stream=True)

    @app.get("/health")
    async def health(self) -> dict:
        return {"status": "ok"}

    @app.post("/v1/completions")
    async def completions(self, request: Request) -> StreamingResponse:
        body = await request.json()
        sampling = {
            "temperature": float(body.get("temperature", 1.0)),
            "top_p": float(body.get("top_p", 1.0)),
            "top_k": int(body.get("top_k", 0)),
            "ignore_eos": bool(body.get("ignore_eos", False)),
        }
        stream = self.engine.generate.remote(list(body["prompt"]), int(body.get("max_tokens", 16)), sampling)
        return StreamingResponse(
            self._events(stream, body.get("model", ""), len(body["prompt"])), media_type="text/event-stream"
        )

    async def _events(self, stream: Any, model: str, prompt_tokens: int) -> AsyncIterator[bytes]:
        rid, created, completion_tokens = f"cmpl-{uuid.uuid4().hex}", int(time.time()), 0
        try:
            async for item in stream:
                completion_tokens += item["tokens"]
                choice = {"index": 0, "text": item["text"], "finish_reason": "length" if item["done"] else None}
                yield _sse(
                    {"id": rid, "object": "text_completion", "created": created, "model": model, "choices": [choice]}
                )
            usage = {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            }
            yield _sse(
                {
                    "id": rid,
                    "object": "text_completion",
                    "created": created,
                    "model": model,
                    "choices": [],
                    "usage": usage,
                }
            )
            yield b"data: [DONE]\n\n"
        finally:
            stream.cancel()  # a client that went away must not leave the engine generating


def build_naive_app(engine: BaseModel, *, engine_actor_options: dict, ingress_cpus: float = 0.25) -> Application:
    """The naive app: ``NaiveIngress`` -> ``NaiveEngine`` (one replica each) on ``engine``."""
    # cast: mypy sees serve.deployment's decorator overload, not the Deployment it returns for a class.
    engine_deployment = cast(Deployment, serve.deployment(NaiveEngine)).options(
        name="naive-engine",
        ray_actor_options=engine_actor_options,
        max_ongoing_requests=NAIVE_MAX_ONGOING_REQUESTS,
    )
    return (
        cast(Deployment, NaiveIngress)
        .options(ray_actor_options={"num_cpus": ingress_cpus})
        .bind(engine_deployment.bind(engine.model_dump(mode="json")))
    )
