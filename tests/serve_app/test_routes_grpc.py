"""serve_app.grpc_routes in-process, without Ray: ``Generate`` and ``Models`` over a real pipeline with a fake
engine handle (``fake_engine.py``), called as Serve's gRPC proxy calls an ingress replica's methods."""

from __future__ import annotations

from contextlib import aclosing
from typing import Any

import grpc
import pytest

from core.errors import EngineDeadError
from serve_app import grpc_api
from serve_app.grpc_api import llm_pb2
from serve_app.grpc_routes import GrpcRoutes
from serve_app.ray_compat import RAY_2_60, ray_version
from tests.serve_app.fake_engine import answer, harness

KEY = "sk-test-1"


class _Context:
    """What the routes use of Serve's ``RayServegRPCContext``."""

    def __init__(self, metadata: dict[str, str] | None = None) -> None:
        self._metadata = list((metadata or {}).items())
        self.code: grpc.StatusCode | None = None
        self.details = ""
        self.trailing: dict[str, Any] = {}

    def invocation_metadata(self) -> list[tuple[str, str]]:
        return self._metadata

    def set_code(self, code: grpc.StatusCode) -> None:
        self.code = code

    def set_details(self, details: str) -> None:
        self.details = details

    def set_trailing_metadata(self, metadata: list[tuple[str, Any]]) -> None:
        self.trailing = dict(metadata)


def _grpc_requests(h: Any) -> dict[str, float]:
    """The gRPC request counter (vs_grpc_requests_total) by code; the HTTP one must stay empty for gRPC calls."""
    assert h.metrics.requests_by_status() == {}
    out: dict[str, float] = {}
    for (name, tags), value in h.metrics.counts.items():
        if name == "grpc_requests":
            code = dict(tags)["code"]
            out[code] = out.get(code, 0) + value
    return out


async def _generate(routes: GrpcRoutes, request: Any, context: _Context) -> list[Any]:
    async with aclosing(routes.Generate(request, context)) as messages:
        return [m async for m in messages]


async def test_generate_streams_deltas_and_ends_with_usage_and_the_route():
    h = harness(lambda r: answer(4, per_delta=2))
    messages = await _generate(
        GrpcRoutes(h.pipeline), llm_pb2.GenerateRequest(model="local-llama", prompt="Hi", max_tokens=4), _Context()
    )
    assert [m.text for m in messages] == ["abab", "abab"]
    last = messages[-1]
    assert (last.finish_reason, last.usage.completion_tokens, last.usage.total_tokens) == ("length", 4, 7)
    assert last.route.variant in ("tiny", "small") and last.route.reason
    assert h.inflight() == 0 and _grpc_requests(h) == {"OK": 1}


async def test_a_bad_request_is_invalid_argument_naming_the_field():
    h = harness()
    context = _Context()
    messages = await _generate(
        GrpcRoutes(h.pipeline), llm_pb2.GenerateRequest(model="local-llama", prompt="Hi", max_tokens=0), context
    )
    assert context.code == grpc.StatusCode.INVALID_ARGUMENT
    assert context.trailing["error-param"] == "max_tokens"
    assert [m.finish_reason for m in messages] == ["error"]
    assert h.streams() == []
    assert _grpc_requests(h) == {"INVALID_ARGUMENT": 1}


async def test_n_is_checked_like_the_http_field():
    h = harness()
    context = _Context()
    request = llm_pb2.GenerateRequest(model="local-llama", prompt="Hi", n=9)  # at most 8 (openai_api.MAX_CHOICES)
    await _generate(GrpcRoutes(h.pipeline), request, context)
    assert (context.code, context.trailing["error-param"]) == (grpc.StatusCode.INVALID_ARGUMENT, "n")
    assert h.streams() == []


async def test_a_missing_key_is_unauthenticated_on_generate_and_models():
    h = harness(auth={"keys": [{"name": "team", "key": KEY}]})
    routes = GrpcRoutes(h.pipeline)
    context = _Context()
    await _generate(routes, llm_pb2.GenerateRequest(model="local-llama", prompt="Hi"), context)
    assert context.code == grpc.StatusCode.UNAUTHENTICATED
    assert _grpc_requests(h) == {"UNAUTHENTICATED": 1}
    context = _Context()
    assert len((await routes.Models(llm_pb2.ModelsRequest(), context)).models) == 0
    assert context.code == grpc.StatusCode.UNAUTHENTICATED
    models = await routes.Models(llm_pb2.ModelsRequest(), _Context({"authorization": f"Bearer {KEY}"}))
    assert [m.id for m in models.models] == ["local-llama", "tiny", "small"]


async def test_an_engine_error_mid_stream_ends_with_its_status_and_aborts_the_engine_request():
    h = harness(lambda r: [*answer(4)[:2], EngineDeadError("The engine stopped.")])
    context = _Context()
    messages = await _generate(
        GrpcRoutes(h.pipeline), llm_pb2.GenerateRequest(model="local-llama", prompt="Hi", max_tokens=4), context
    )
    assert context.code == grpc.StatusCode.UNAVAILABLE
    assert [m.finish_reason for m in messages] == ["", "", "error"]
    assert messages[-1].usage.completion_tokens == 2
    assert h.inflight() == 0 and all(s.cancelled for s in h.streams())
    assert _grpc_requests(h) == {"UNAVAILABLE": 1}  # the status the client got, not an HTTP 503


async def test_a_cancelled_call_releases_the_request():
    h = harness(lambda r: answer(8))
    routes = GrpcRoutes(h.pipeline)
    messages = routes.Generate(llm_pb2.GenerateRequest(model="local-llama", prompt="Hi", max_tokens=8), _Context())
    await anext(messages)
    await messages.aclose()  # Serve closes the stream when the client cancels
    assert h.inflight() == 0 and _grpc_requests(h) == {"CANCELLED": 1}
    assert all(s.cancelled for s in h.streams())


async def test_n_choices_stream_each_with_its_index_and_the_last_message_has_the_requests_usage():
    h = harness(lambda r: answer(3))
    request = llm_pb2.GenerateRequest(model="local-llama", prompt="Hi", max_tokens=3, n=2)
    messages = await _generate(GrpcRoutes(h.pipeline), request, _Context())
    by_index: dict[int, str] = {}
    for m in messages:
        by_index[m.index] = by_index.get(m.index, "") + m.text
    assert by_index == {0: "ababab", 1: "ababab"}
    assert sorted(m.index for m in messages if m.finish_reason) == [0, 1]  # each choice finishes once
    last = messages[-1]
    assert (last.usage.prompt_tokens, last.usage.completion_tokens) == (3, 6)  # the prompt once, both choices
    assert last.route.variant and last.request_id and not any(m.request_id for m in messages[:-1])
    assert h.inflight() == 0 and _grpc_requests(h) == {"OK": 2}


async def test_an_engine_error_mid_stream_of_n_choices_ends_every_choice_with_its_status():
    h = harness(lambda r: [*answer(4)[:2], EngineDeadError("The engine stopped.")])
    context = _Context()
    request = llm_pb2.GenerateRequest(model="local-llama", prompt="Hi", max_tokens=4, n=2)
    messages = await _generate(GrpcRoutes(h.pipeline), request, context)
    assert context.code == grpc.StatusCode.UNAVAILABLE and messages[-1].finish_reason == "error"
    assert h.inflight() == 0 and all(s.cancelled for s in h.streams())
    assert _grpc_requests(h) == {"UNAVAILABLE": 2}


async def test_n_choices_over_the_keys_streams_are_one_status_before_any_engine_work():
    h = harness(lambda r: answer(3), auth={"keys": [{"name": "team", "key": KEY, "max_concurrent_streams": 1}]})
    context = _Context({"authorization": f"Bearer {KEY}"})
    request = llm_pb2.GenerateRequest(model="local-llama", prompt="Hi", max_tokens=3, n=2)
    messages = await _generate(GrpcRoutes(h.pipeline), request, context)
    assert context.code == grpc.StatusCode.RESOURCE_EXHAUSTED and "retry-after" in context.trailing
    assert [m.finish_reason for m in messages] == ["error"]
    assert _grpc_requests(h) == {"RESOURCE_EXHAUSTED": 1}  # the request is admitted or refused whole
    assert h.streams_held() == {"team": 0} and h.streams() == []


async def test_a_cancelled_call_releases_every_choice():
    h = harness(lambda r: answer(8))
    messages = GrpcRoutes(h.pipeline).Generate(
        llm_pb2.GenerateRequest(model="local-llama", prompt="Hi", max_tokens=8, n=2), _Context()
    )
    await anext(messages)
    await messages.aclose()
    assert h.inflight() == 0 and _grpc_requests(h) == {"CANCELLED": 2}
    assert all(s.cancelled for s in h.streams())


def _deserializers() -> dict[str, Any]:
    """Each method's request deserializer, as the servicer function registers them."""
    registered: dict[str, Any] = {}

    class Server:
        def add_generic_rpc_handlers(self, handlers: Any) -> None:
            """The generic handlers carry no deserializers of their own: nothing to record."""

        def add_registered_method_handlers(self, service: str, handlers: dict[str, Any]) -> None:
            registered.update({name: h.request_deserializer for name, h in handlers.items()})

    grpc_api.add_LLMServiceServicer_to_server(grpc_api.llm_pb2_grpc.LLMServiceServicer(), Server())
    return registered


@pytest.mark.parametrize("raw", [b"\xff\xff\xff", b"\x12\x02\xff\xfe", b"\x0a\x05hel"])  # corrupt, bad UTF-8, cut
async def test_bytes_that_are_no_message_are_invalid_argument_not_unknown(raw):
    if ray_version() < RAY_2_60:
        pytest.skip("this Ray registers only the generic handlers")
    deserialize = _deserializers()
    request = deserialize["Generate"](raw)
    assert isinstance(request, grpc_api.UndecodableRequest)
    assert deserialize["Generate"](llm_pb2.GenerateRequest(prompt="x").SerializeToString()).prompt == "x"
    h = harness()
    context = _Context()
    messages = await _generate(GrpcRoutes(h.pipeline), request, context)
    assert context.code == grpc.StatusCode.INVALID_ARGUMENT and "not a valid message" in context.details
    assert [m.finish_reason for m in messages] == ["error"] and h.streams() == []
    models, request = _Context(), deserialize["Models"](raw)
    await GrpcRoutes(h.pipeline).Models(request, models)
    # Models takes no fields: a string field it does not know is an unknown field, kept as bytes, not an error.
    undecodable = isinstance(request, grpc_api.UndecodableRequest)
    assert models.code == (grpc.StatusCode.INVALID_ARGUMENT if undecodable else None)
