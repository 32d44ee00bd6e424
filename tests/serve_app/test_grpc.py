"""The gRPC API end to end: Serve's real gRPC proxy on the shared cluster, the official grpcio client, the default
serve_config.yaml app (and a second app with API keys for auth and limits). The same pipeline as HTTP, so the
answers are compared with HTTP's."""

from __future__ import annotations

import time

import grpc
import httpx
import pytest
from google.rpc import error_details_pb2, status_pb2

from serve_app.grpc_api import LLMServiceStub, llm_pb2

pytestmark = pytest.mark.serve

MODEL = "local-llama"  # serve_config.yaml's public model name
APP = [("application", "llm")]  # more than one app runs on the shared cluster: name the one to call


@pytest.fixture(scope="module")
def stub(llm_url, grpc_port):
    with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
        yield LLMServiceStub(channel)


def _generate(stub, metadata=APP, **fields) -> tuple[list, grpc.RpcError | None]:
    """Every message of one Generate call, and the error that ended it (None when it ended OK)."""
    call = stub.Generate(llm_pb2.GenerateRequest(**fields), metadata=metadata, timeout=120)
    messages = []
    try:
        for message in call:
            messages.append(message)
    except grpc.RpcError as e:
        return messages, e
    return messages, None


def _metadata(error: grpc.RpcError) -> dict:
    return dict(error.trailing_metadata() or ())


def test_streamed_text_equals_the_http_answer_for_greedy_sampling(stub, llm_url, default_app_args):
    variant = default_app_args["variants"][0]["name"]  # pinned: both answers from the same model
    messages, error = _generate(stub, model=variant, prompt="Once upon", max_tokens=10, temperature=0)
    assert error is None, error
    http = httpx.post(
        f"{llm_url}/v1/completions",
        json={"model": variant, "prompt": "Once upon", "max_tokens": 10, "temperature": 0},
        timeout=120,
    ).json()
    assert "".join(m.text for m in messages) == http["choices"][0]["text"]
    last = messages[-1]
    assert last.finish_reason == http["choices"][0]["finish_reason"]
    assert not any(m.finish_reason for m in messages[:-1])
    assert last.usage.prompt_tokens == http["usage"]["prompt_tokens"]
    assert last.usage.completion_tokens == http["usage"]["completion_tokens"]
    assert last.usage.total_tokens == http["usage"]["total_tokens"]
    assert sum(len(m.token_ids) for m in messages) == last.usage.completion_tokens
    assert (last.route.variant, last.route.reason) == (variant, "pinned")
    assert last.request_id


def test_a_routed_request_says_where_it_went_and_why(stub, default_app_args):
    messages, error = _generate(stub, model=MODEL, prompt="Hi", max_tokens=3, tier="interactive", ttft_ms=5000)
    assert error is None, error
    route = messages[-1].route
    assert route.variant in {v["name"] for v in default_app_args["variants"]}
    assert route.reason
    if route.reason != "no_live_stats":  # with live stats the router predicts what the client will see
        assert route.HasField("predicted_ttft_ms") and route.HasField("predicted_tpot_ms")


def test_chat_messages_stream(stub):
    messages, error = _generate(
        stub,
        model=MODEL,
        messages=[llm_pb2.ChatMessage(role="user", content="Say hello")],
        max_tokens=8,
        temperature=0,
    )
    assert error is None, error
    assert messages[-1].finish_reason in {"stop", "length"}
    assert messages[-1].usage.completion_tokens >= 1


def test_n_choices_stream_each_with_its_index(stub):
    messages, error = _generate(stub, model=MODEL, prompt="Once upon", max_tokens=5, n=3, ignore_eos=True)
    assert error is None, error
    texts: dict[int, str] = {}
    for m in messages:
        texts[m.index] = texts.get(m.index, "") + m.text
    assert sorted(texts) == [0, 1, 2] and all(texts.values())
    assert sorted(m.index for m in messages if m.finish_reason) == [0, 1, 2]  # each choice finishes once
    last = messages[-1]
    assert last.usage.completion_tokens == 3 * 5  # every choice's tokens, on the stream's last message
    assert last.route.variant and last.request_id


def test_models_lists_the_public_model_and_variants(stub, default_app_args):
    models = stub.Models(llm_pb2.ModelsRequest(), metadata=APP, timeout=60).models
    assert [m.id for m in models] == [MODEL] + [v["name"] for v in default_app_args["variants"]]
    assert [m.routed for m in models] == [True] + [False] * len(default_app_args["variants"])


def _variant(llm_url: str, name: str) -> dict:
    data = httpx.get(f"{llm_url}/variants", timeout=30).json()
    return next(v for v in data["variants"] if v["name"] == name)


def test_cancelling_mid_stream_frees_the_engine(stub, llm_url, default_app_args):
    name = default_app_args["variants"][-1]["name"]
    request = llm_pb2.GenerateRequest(model=name, prompt="Long story", max_tokens=2000, ignore_eos=True)
    call = stub.Generate(request, metadata=APP, timeout=120)
    assert next(call).text is not None  # streaming has begun
    deadline = time.monotonic() + 30
    while _variant(llm_url, name)["running_requests"] < 1:  # the board shows the stream running
        assert time.monotonic() < deadline, _variant(llm_url, name)
        time.sleep(0.1)
    call.cancel()
    assert call.code() == grpc.StatusCode.CANCELLED
    deadline = time.monotonic() + 30  # the client is gone: the engine must drop the request
    while (v := _variant(llm_url, name))["running_requests"] or v["queued_requests"]:
        assert time.monotonic() < deadline, v
        time.sleep(0.2)


BAD_REQUESTS = [
    ("no prompt", {"model": MODEL}, grpc.StatusCode.INVALID_ARGUMENT, "prompt"),
    (
        "two prompts",
        {"model": MODEL, "prompt": "x", "prompt_token_ids": [5]},
        grpc.StatusCode.INVALID_ARGUMENT,
        "prompt",
    ),
    ("no model", {"prompt": "x"}, grpc.StatusCode.INVALID_ARGUMENT, "model"),
    (
        "max_tokens zero",
        {"model": MODEL, "prompt": "x", "max_tokens": 0},
        grpc.StatusCode.INVALID_ARGUMENT,
        "max_tokens",
    ),
    (
        "temperature",
        {"model": MODEL, "prompt": "x", "temperature": 3.5},
        grpc.StatusCode.INVALID_ARGUMENT,
        "temperature",
    ),
    ("unknown tier", {"model": MODEL, "prompt": "x", "tier": "platinum"}, grpc.StatusCode.INVALID_ARGUMENT, "tier"),
    ("bad ttft", {"model": MODEL, "prompt": "x", "ttft_ms": -1}, grpc.StatusCode.INVALID_ARGUMENT, "ttft_ms"),
    (
        "token id outside vocab",
        {"model": MODEL, "prompt_token_ids": [10**9]},
        grpc.StatusCode.INVALID_ARGUMENT,
        "prompt",
    ),
    ("unknown model", {"model": "gpt-17", "prompt": "x"}, grpc.StatusCode.NOT_FOUND, "model"),
]


@pytest.mark.parametrize(("case", "fields", "code", "param"), BAD_REQUESTS, ids=[c[0] for c in BAD_REQUESTS])
def test_bad_requests_get_their_status_code(stub, case, fields, code, param):
    messages, error = _generate(stub, **fields)
    assert error is not None and error.code() == code, (error, messages)
    assert error.details()
    assert _metadata(error)["error-param"] == param
    # The one message of a failed stream: it carries the status's trailing metadata through Serve.
    assert [m.finish_reason for m in messages] == ["error"]


def test_still_serving_after_bad_requests(stub):
    messages, error = _generate(stub, model=MODEL, prompt="Still", max_tokens=4)
    assert error is None and messages[-1].finish_reason in {"stop", "length"}


# ---------------------------------------------------------------- a second app with API keys and limits

ADMIN, RATED = "sk-grpc-admin-01", "sk-grpc-rated-02"
SECURE = [("application", "grpc-secure")]


@pytest.fixture(scope="module")
def secure_app(serve_url):
    from ray import serve

    from serve_app.app import build_app

    args = {
        "model_name": "secure-llama",
        "variants": [
            {
                "name": "only",
                "engine": {"backend": "hf", "model": "builtin:tiny", "device": "cpu", "max_running_requests": 4},
                "resources": {"num_cpus": 0.25},
                "num_replicas": 1,
            }
        ],
        "ingress": {"num_cpus": 0.1},
        "limits": {"default_max_tokens": 4},
        "auth": {
            "keys": [
                {"name": "ops", "key": ADMIN, "admin": True},
                {"name": "one-a-minute", "key": RATED, "requests_per_minute": 1},
            ]
        },
    }
    serve.run(build_app(args), name="grpc-secure", route_prefix="/grpc-secure")
    yield
    serve.delete("grpc-secure")


def _key(key: str) -> list[tuple[str, str]]:
    return [*SECURE, ("authorization", f"Bearer {key}")]


@pytest.mark.parametrize("metadata", [SECURE, _key("sk-wrong")], ids=["missing key", "wrong key"])
def test_requests_without_a_valid_key_are_unauthenticated(stub, secure_app, metadata):
    _, error = _generate(stub, metadata=metadata, model="secure-llama", prompt="Hi")
    assert error is not None and error.code() == grpc.StatusCode.UNAUTHENTICATED, error
    with pytest.raises(grpc.RpcError) as models:
        stub.Models(llm_pb2.ModelsRequest(), metadata=metadata, timeout=60)
    assert models.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_a_valid_key_in_metadata_is_served(stub, secure_app):
    messages, error = _generate(stub, metadata=_key(ADMIN), model="secure-llama", prompt="Hi")
    assert error is None, error
    assert messages[-1].usage.completion_tokens >= 1
    assert stub.Models(llm_pb2.ModelsRequest(), metadata=_key(ADMIN), timeout=60).models[0].id == "secure-llama"


def test_a_key_over_its_rate_gets_resource_exhausted_with_retry_info(stub, secure_app):
    _, error = _generate(stub, metadata=_key(RATED), model="secure-llama", prompt="Hi")
    assert error is None, error
    _, error = _generate(stub, metadata=_key(RATED), model="secure-llama", prompt="Hi")
    assert error is not None and error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, error
    trailers = _metadata(error)
    seconds = int(trailers["retry-after"])
    assert seconds >= 1
    assert int(trailers["grpc-retry-pushback-ms"]) == 1000 * seconds
    status = status_pb2.Status.FromString(trailers["grpc-status-details-bin"])
    assert status.code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
    retry = error_details_pb2.RetryInfo()
    assert status.details[0].Unpack(retry)
    assert retry.retry_delay.seconds == seconds
