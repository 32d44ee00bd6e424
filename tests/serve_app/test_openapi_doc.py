"""/openapi.json's document, built without Serve: every OpenAI request field accounted for, errors described."""

from __future__ import annotations

import typing

import pytest
from openai.types import completion_create_params
from openai.types.chat import completion_create_params as chat_create_params

from serve_app import openapi_doc
from serve_app.ingress import app
from serve_app.openai_api import ChatCompletionRequest, CompletionRequest


@pytest.fixture(scope="module")
def document() -> dict:
    return openapi_doc.build(app)


@pytest.mark.parametrize(
    ("model", "params"),
    [
        (CompletionRequest, completion_create_params.CompletionCreateParamsBase),
        (ChatCompletionRequest, chat_create_params.CompletionCreateParamsBase),
    ],
)
def test_every_field_of_openais_request_is_in_the_schema(model, params):
    # Implemented, refused unless neutral, or ignored: none is left out, so none can be silently dropped unnoticed.
    described = set(openapi_doc.request_schema(model)["properties"])
    assert set(typing.get_type_hints(params)) <= described


def test_refused_fields_list_the_values_they_accept(document):
    properties = document["components"]["schemas"]["CompletionRequest"]["properties"]
    assert properties["suffix"]["enum"] == [None, ""]
    chat = document["components"]["schemas"]["ChatCompletionRequest"]["properties"]
    assert chat["functions"]["enum"] == [None, []]


@pytest.mark.parametrize(
    ("path", "request_model", "response_model"),
    [
        ("/v1/completions", "CompletionRequest", "Completion"),
        ("/v1/chat/completions", "ChatCompletionRequest", "ChatCompletion"),
    ],
)
def test_generation_routes_describe_their_bodies_and_errors(document, path, request_model, response_model):
    operation = document["paths"][path]["post"]
    assert operation["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": f"#/components/schemas/{request_model}"
    }
    ok = operation["responses"]["200"]["content"]
    assert ok["application/json"]["schema"] == {"$ref": f"#/components/schemas/{response_model}"}
    assert "text/event-stream" in ok
    error = operation["responses"]["400"]["content"]["application/json"]["schema"]
    assert error == {"$ref": "#/components/schemas/ErrorResponse"}
    components = document["components"]["schemas"]
    assert {request_model, response_model, "ErrorResponse", "ErrorObject"} <= set(components)
    assert set(components["ErrorObject"]["properties"]) == {"message", "type", "param", "code"}


def test_every_reference_resolves(document):
    components = document["components"]["schemas"]

    def refs(node: object) -> typing.Iterator[str]:
        if isinstance(node, dict):
            if isinstance(node.get("$ref"), str):
                yield node["$ref"]
            for value in node.values():
                yield from refs(value)
        elif isinstance(node, list):
            for value in node:
                yield from refs(value)

    for ref in refs(document):
        assert ref.startswith("#/components/schemas/") and ref.rsplit("/", 1)[1] in components, ref


def test_a_deployments_document_names_the_models_it_serves():
    document = openapi_doc.build(app, ["local-llama", "tiny"])
    model = document["components"]["schemas"]["ChatCompletionRequest"]["properties"]["model"]
    assert model["enum"] == ["local-llama", "tiny"] and model["type"] == "string"
