"""The OpenAPI document at /openapi.json: the real request and response bodies of the generation routes.

The generation routes read and validate their bodies themselves (to answer in OpenAI's error shape), so FastAPI
cannot see them. This adds, per route: the request body (the pydantic model the route validates with, the fields
it refuses unless neutral with the only values it accepts, so that a schema-driven fuzzer's valid requests are
valid here too, and the fields it ignores), the 200 bodies (OpenAI's own response types, or an SSE stream) and
the error body.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel, Field

from serve_app.openai_api import ChatCompletionRequest, CompletionRequest


class ErrorObject(BaseModel):
    message: str
    type: str = Field(description="invalid_request_error, authentication_error, rate_limit_error, server_error, ...")
    param: str | None = Field(description="The request field at fault, when one is.")
    code: str | None = None


class ErrorResponse(BaseModel):
    """Every error, any status (``serve_app/errors.py``); after a stream's first token, its last SSE event."""

    error: ErrorObject


def _response_model(chat: bool) -> type[BaseModel]:
    # The openai package's own response types describe the bodies exactly (its client parses them into these);
    # imported here, lazily, since only the document needs them.
    if chat:
        from openai.types.chat import ChatCompletion

        return ChatCompletion
    from openai.types import Completion

    return Completion


_ROUTES: dict[str, tuple[type[CompletionRequest | ChatCompletionRequest], bool]] = {
    "/v1/completions": (CompletionRequest, False),
    "/v1/chat/completions": (ChatCompletionRequest, True),
}
_ERRORS = {
    "400": "Invalid request; error.param names the field.",
    "401": "Missing or invalid API key.",
    "404": "Unknown model.",
    "413": "The body is larger than limits.max_body_bytes.",
    "429": "A key's limit or overload; see Retry-After.",
    "503": "No replica can serve the request now; see Retry-After.",
    "504": "The request ran past limits.request_timeout_s.",
}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _add(components: dict[str, Any], model: type[BaseModel]) -> None:
    body = model.model_json_schema(ref_template="#/components/schemas/{model}")
    components.update(body.pop("$defs", {}))
    components[model.__name__] = body


def request_schema(
    model: type[CompletionRequest | ChatCompletionRequest], model_names: list[str] | None = None
) -> dict[str, Any]:
    """The JSON schema of a route's body: the model's fields, the refused ones with the values they may hold, the
    ignored ones; with ``model_names``, the only values ``model`` may take here (others are a 404)."""
    body = model.model_json_schema(ref_template="#/components/schemas/{model}")
    properties = body.setdefault("properties", {})
    if model_names:
        properties["model"] = {**properties.get("model", {}), "enum": list(model_names)}
    for name, neutral in model.unsupported.items():
        properties[name] = {
            "enum": list(neutral),
            "description": "Not supported here: refused with a 400 naming it unless it holds one of these values.",
        }
    for name in model.ignored:
        properties[name] = {"description": "Accepted and ignored: it changes nothing these engines return."}
    return body


# The models this process's ingress serves (set once by Ingress.__init__, before the first request).
_served_models: list[str] | None = None


def serve_models(names: list[str]) -> None:
    global _served_models
    _served_models = list(names)


def build(app: FastAPI, model_names: list[str] | None = None) -> dict[str, Any]:
    """The document for ``app``; ``model_names`` (default: what ``serve_models`` set): the public model and the
    variants this deployment serves, the only values ``model`` may take."""
    model_names = model_names if model_names is not None else _served_models
    schema = get_openapi(title=app.title, version=app.version, routes=app.routes)
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    _add(components, ErrorResponse)
    for path, (model, chat) in _ROUTES.items():
        body = request_schema(model, model_names)
        components.update(body.pop("$defs", {}))
        components[model.__name__] = body
        response = _response_model(chat)
        _add(components, response)
        operation = schema["paths"][path]["post"]
        operation["requestBody"] = {"required": True, "content": {"application/json": {"schema": _ref(model.__name__)}}}
        operation["responses"] = {
            "200": {
                "description": "The whole answer, or with stream: true an SSE stream of chunks ending in data: [DONE].",
                "content": {
                    "application/json": {"schema": _ref(response.__name__)},
                    "text/event-stream": {"schema": {"type": "string"}},
                },
            },
            **{
                status: {"description": text, "content": {"application/json": {"schema": _ref("ErrorResponse")}}}
                for status, text in _ERRORS.items()
            },
        }
    return schema
