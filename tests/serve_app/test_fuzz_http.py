"""A property-based run over the whole HTTP surface of the served app, and over gRPC's bytes: pathological requests,
not only what /openapi.json describes (test_fuzz_schema.py sends what it describes).

Each HTTP request is generated whole: a method, a path (the routes, their neighbours, unknown paths with escapes such as
``%00`` and ``%ff``), a query, headers (those the app reads and any others, with values of any visible or obs-text
byte), and a body: arbitrary bytes, JSON nested thousands deep, integers of thousands of digits, numbers beyond a
double, NaN and Infinity, keys sent twice, invalid UTF-8 and lone surrogates in strings, a body over the size limit, and
OpenAI bodies (completions with batched prompts, chat) with any of those in any field. Generation stays short: a valid
body asks for at most 3 tokens, 4 prompts and 2 choices. The property: no response is a 5xx; every error is OpenAI's
error object (``message``, ``type``, ``param``, ``code``); a stream ends with ``data: [DONE]`` and has no error event.

gRPC: ``Generate`` and ``Models`` called with raw bytes (corrupt wire format, strings that are not UTF-8, valid
messages cut short or with bytes appended) and arbitrary metadata: no call ends with a status that means a server
fault (UNKNOWN, INTERNAL, DATA_LOSS, UNAVAILABLE, DEADLINE_EXCEEDED, UNIMPLEMENTED).

Left out, because they never reach the app: headers that frame the HTTP message (Content-Length, Transfer-Encoding,
Host, Connection, Upgrade, Expect, TE, Trailer, Keep-Alive), which the HTTP server and the proxy before it own, and
header blocks larger than the proxy takes.

``FUZZ_HTTP_EXAMPLES`` sets the number of HTTP requests (a few hundred by default, for CI; gRPC gets a quarter as
many); docs/operating.md has the long run's command and count. The requests sent and their statuses are printed at
the end of the report.
"""

from __future__ import annotations

import json
import os
from collections import Counter

import grpc
import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from serve_app.grpc_api import llm_pb2

pytestmark = pytest.mark.serve

EXAMPLES = int(os.environ.get("FUZZ_HTTP_EXAMPLES", "300"))
FUZZ = settings(
    max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True, database=None
)
GRPC_FUZZ = settings(FUZZ, max_examples=max(1, EXAMPLES // 4))

STATUSES: Counter[int] = Counter()  # HTTP requests sent, by status
GRPC_CODES: Counter[str] = Counter()  # gRPC calls made, by status code

MODEL = "local-llama"  # serve_config.yaml's public model name
ROUTES = ["/v1/completions", "/v1/chat/completions", "/v1/models", "/health", "/variants", "/openapi.json"]
GENERATION = ROUTES[:2]
METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"]

# --------------------------------------------------------------------------- pathological pieces of JSON text

ATOMS: list[bytes] = [
    b"NaN",
    b"Infinity",
    b"-Infinity",
    b"1e999",
    b"-1e999",
    b"1e-999",
    b"-0",
    b"0e0",
    b"1.7976931348623157e308",
    b"4.9e-324",
    b"9" * 5000,  # past Python's 4,300-digit conversion limit
    b"-" + b"9" * 4300,
    b"1" + b"0" * 400,
    b"2147483648",
    b"-2147483649",
    b"9223372036854775808",
    b"-9223372036854775809",
    b"18446744073709551616",
    b"true",
    b"false",
    b"null",
    b'""',
    b'"\\ud800"',  # lone surrogates, as JSON escapes
    b'"\\udfff\\ud800"',
    b'"a\\u0000b"',
    b'"\xff\xfe"',  # not UTF-8
    b'"\xc0\xaf"',  # an overlong encoding
    b'"\xed\xa0\x80"',  # a surrogate encoded in UTF-8
    b'"\xe2\x82"',  # a character cut short
    b'"\xf4\x90\x80\x80"',  # past U+10FFFF
    b'"\xef\xbb\xbf"',
    b'"' + b"\\u202e" * 50 + b'"',
    b'"' + b"x" * 300_000 + b'"',
    b'"' + b"\xf0\x9f\x98\x80" * 50_000 + b'"',
    b"[]",
    b"{}",
    b"[[[]]]",
    b'{"": {"": []}}',
]
ATOM = st.sampled_from(ATOMS)
FIELDS = [  # every field the generation routes read, and a few they do not
    "model", "prompt", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "seed",
    "stop", "stop_token_ids", "ignore_eos", "presence_penalty", "frequency_penalty", "repetition_penalty",
    "min_tokens", "logit_bias", "n", "best_of", "echo", "logprobs", "top_logprobs", "response_format", "stream",
    "stream_options", "priority", "suffix", "tools", "tool_choice", "prompt_cache_key", "user", "", "\u0000", "a" * 300,
]  # fmt: skip
KEY = st.sampled_from(FIELDS) | st.text(max_size=10)
TEXT = st.text(max_size=30) | st.lists(st.integers(0xD800, 0xDFFF).map(chr), min_size=1, max_size=3).map("".join)


def _dumps(value: object, ascii_only: bool) -> bytes:
    # ensure_ascii sends lone surrogates as JSON escapes; without it they become bytes that are not UTF-8.
    return json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")


def _json(values: st.SearchStrategy[object]) -> st.SearchStrategy[bytes]:
    return st.builds(_dumps, values, st.booleans())


PLAIN = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)


def _nest(inner: bytes, depth: int, as_object: bool) -> bytes:
    return (b'{"a":' * depth + inner + b"}" * depth) if as_object else (b"[" * depth + inner + b"]" * depth)


DEEP = st.builds(_nest, ATOM | _json(PLAIN), st.integers(1, 5000) | st.sampled_from([63, 64, 65]), st.booleans())
VALUE = ATOM | _json(PLAIN) | DEEP  # any field's value, as JSON text (or not quite)


def _object(pairs: list[tuple[str, bytes]]) -> bytes:
    """A JSON object of ``pairs`` in order: a key sent twice is sent twice."""
    return b"{" + b",".join(_dumps(k, True) + b":" + v for k, v in pairs) + b"}"


# --------------------------------------------------------------------------- OpenAI bodies, bent

PROMPT_TEXT = st.text(max_size=20).filter(str.strip) | st.sampled_from(["Once upon", "The river", "中文"])
TOKEN_IDS = st.lists(st.integers(-2, 1100), min_size=1, max_size=6)
PROMPT = st.one_of(
    _json(PROMPT_TEXT),
    _json(TOKEN_IDS),
    _json(st.lists(PROMPT_TEXT, min_size=1, max_size=4)),  # OpenAI's batched forms
    _json(st.lists(TOKEN_IDS, min_size=1, max_size=4)),
    _json(st.lists(PROMPT_TEXT | TOKEN_IDS, min_size=1, max_size=3)),
    VALUE,
)
MESSAGES = _json(
    st.lists(
        st.fixed_dictionaries(
            {"role": st.sampled_from(["user", "system", "assistant", "developer", "tool", "robot"]), "content": TEXT}
        ),
        min_size=1,
        max_size=3,
    )
) | st.builds(lambda v: b'[{"role": "user", "content": ' + v + b"}]", VALUE)
# Never null, nor anything that validates to more than a few tokens: an absent max_tokens is the server's 256.
MAX_TOKENS = st.integers(1, 3).map(lambda n: str(n).encode()) | st.sampled_from(
    [b"0", b"-1", b"1.5", b'"many"', b"[]", b"{}", b"9" * 5000, b"1e999", b"NaN", b"99999999999999999999", b"-0"]
)
CHOICES = st.sampled_from([b"1", b"2"]) | st.sampled_from([b"0", b"-1", b"9", b"2.5", b'"2"', b"9" * 400, b"null"])
BOUNDED = {"max_tokens": MAX_TOKENS, "n": CHOICES}  # what a valid body may ask for is kept small
EXTRA = st.lists(st.tuples(KEY.filter(lambda k: k not in (*BOUNDED, "max_completion_tokens")), VALUE))


@st.composite
def openai_body(draw: st.DrawFn, chat: bool) -> bytes:
    pairs = [("model", draw(st.just(_dumps(MODEL, True)) | st.sampled_from([b'"tiny"', b'"small"']) | VALUE))]
    pairs.append(("messages", draw(MESSAGES)) if chat else ("prompt", draw(PROMPT)))
    pairs += [("max_tokens", draw(MAX_TOKENS)), ("n", draw(CHOICES))]
    if draw(st.booleans()):
        pairs.append(("stream", draw(st.sampled_from([b"true", b"false"]))))
    pairs += draw(st.just([]) | EXTRA)  # any field, again or for the first time, with any value
    if draw(st.booleans()):  # a key sent twice: the last one counts
        key, value = draw(st.sampled_from(pairs))
        pairs.append((key, draw(BOUNDED.get(key, VALUE)) if draw(st.booleans()) else value))
    return _object(pairs)


OVERSIZE = b'{"model": "local-llama", "prompt": "' + b"a" * (1 << 20) + b'"}'  # past the 1 MiB body limit
BODY = st.one_of(
    openai_body(chat=False),
    openai_body(chat=True),
    openai_body(chat=False),
    VALUE,
    st.binary(max_size=300),
    st.just(OVERSIZE),
    st.builds(lambda body, junk: body + junk, openai_body(chat=False), st.binary(min_size=1, max_size=10)),
)

# --------------------------------------------------------------------------- methods, paths, headers

SEGMENT = st.text(
    alphabet=st.characters(codec="ascii", categories=["L", "N"]) | st.sampled_from(list("-._~!$&'()*+,;=:@")),
    min_size=1,  # a path starting "//" would be a URL with no scheme
    max_size=12,
) | st.sampled_from(["%00", "%ff", "%2e%2e", "%2F", "%C0%AF", "%ED%A0%80", "%25", "..", "v1", "completions", "%"])
PATH = st.one_of(
    st.sampled_from(ROUTES),
    st.sampled_from(ROUTES).map(lambda p: p + "/"),
    st.builds(lambda p, s: f"{p}/{s}", st.sampled_from(ROUTES), SEGMENT),
    st.lists(SEGMENT, min_size=1, max_size=4).map(lambda s: "/" + "/".join(s)),
)
QUERY = st.lists(st.tuples(SEGMENT, SEGMENT), max_size=3).map(lambda kv: "&".join(f"{k}={v}" for k, v in kv))

FRAMING = {"content-length", "transfer-encoding", "host", "connection", "upgrade", "expect", "te", "trailer"}
FRAMING |= {"keep-alive", "proxy-connection"}
TCHAR = "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
HEADER_NAME = st.sampled_from(
    [
        "authorization",
        "content-type",
        "accept",
        "x-slo-tier",
        "x-slo-ttft-ms",
        "x-slo-tpot-ms",
        "x-request-id",
        "x-session-id",
        "content-encoding",
        "accept-encoding",
        "cookie",
        "origin",
        "range",
        "x-forwarded-for",
        "application",
    ]
) | st.text(alphabet=TCHAR, min_size=1, max_size=20).filter(lambda name: name.lower() not in FRAMING)
VISIBLE = [b for b in range(0x21, 0x7F)] + [b for b in range(0x80, 0x100)]  # field-vchar and obs-text
HEADER_VALUE = st.one_of(
    st.lists(st.sampled_from(VISIBLE) | st.just(0x20), max_size=1000).map(bytes).map(bytes.strip),
    st.sampled_from(
        [
            b"nan",
            b"inf",
            b"-1",
            b"0",
            b"1e999",
            b"9" * 400,
            b"interactive",
            b"Bearer",
            b"Bearer \xff\xfe",
            b"Basic YWxhZGRpbjpvcGVuc2VzYW1l",
            b"application/json; charset=utf-16",
            b"text/plain",
            b"gzip",
            b"bytes=0-1",
        ]
    ),
)
HEADERS = st.lists(st.tuples(HEADER_NAME.map(str.encode), HEADER_VALUE), max_size=6)


@st.composite
def http_request(draw: st.DrawFn) -> tuple[str, str, list[tuple[bytes, bytes]], bytes | None]:
    if draw(st.integers(0, 3)):  # most requests: a generation route's POST, the surface with the most to break
        method, path = "POST", draw(st.sampled_from(GENERATION))
    else:
        method, path = draw(st.sampled_from(METHODS)), draw(PATH)
    query = draw(QUERY)
    body = draw(BODY) if method != "HEAD" and (method == "POST" or draw(st.booleans())) else None
    return method, path + (f"?{query}" if query else ""), draw(HEADERS), body


# --------------------------------------------------------------------------- the properties


def _openai_error(response: httpx.Response) -> None:
    try:
        error = response.json()["error"]
    except (ValueError, KeyError, TypeError):
        shown = _shown(response.request)
        pytest.fail(f"{response.status_code} is not OpenAI's error object: {response.text[:300]!r}, for {shown}")
    assert isinstance(error["message"], str) and error["message"], error
    assert isinstance(error["type"], str) and error["type"], error
    assert "param" in error and "code" in error, error


def _check(method: str, response: httpx.Response) -> None:
    STATUSES[response.status_code] += 1
    assert response.status_code < 500, (response.status_code, response.text[:300], _shown(response.request))
    if method == "HEAD":
        return  # no body
    if response.status_code >= 400:
        _openai_error(response)
    elif response.headers.get("content-type", "").startswith("text/event-stream"):
        events = [part[len("data: ") :] for part in response.text.split("\n\n") if part.startswith("data: ")]
        assert events and events[-1] == "[DONE]", response.text[-300:]
        for event in events[:-1]:
            assert "error" not in json.loads(event), event


def _shown(request: httpx.Request) -> str:
    """The request, for a failure's message (its body cut short: it may be a megabyte)."""
    return f"{request.method} {request.url.raw_path!r} {request.headers.raw!r} {request.content[:300]!r}"


@pytest.fixture(scope="module")
def http(llm_url):
    with httpx.Client(base_url=llm_url, timeout=120) as client:
        yield client


@pytest.fixture(scope="module", autouse=True)
def _report(request):
    yield
    lines = []
    for name, counts in (("HTTP", STATUSES), ("gRPC", GRPC_CODES)):
        if counts:
            total, by = sum(counts.values()), ", ".join(f"{k}: {n}" for k, n in sorted(counts.items()))
            lines.append(f"property run, {name}: {total} requests ({by})")
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if lines and reporter is not None and capture is not None:
        with capture.global_and_fixture_disabled():  # teardown output is captured otherwise, even under -s
            reporter.ensure_newline()
            for line in lines:
                reporter.write_line(line)


@FUZZ
@given(request=http_request())
def test_no_request_gets_a_5xx_and_every_error_is_openais(http, request):
    method, url, headers, body = request
    _check(method, http.request(method, url, headers=headers, content=body))


# --------------------------------------------------------------------------- gRPC

SERVER_FAULTS = {"UNKNOWN", "INTERNAL", "DATA_LOSS", "UNAVAILABLE", "DEADLINE_EXCEEDED", "UNIMPLEMENTED"}
# max_tokens first (messages concatenated are one message, merged), so that a message cut short keeps it: an absent
# max_tokens is the server's default of 256.
MESSAGE = st.builds(
    lambda max_tokens, fields: (
        llm_pb2.GenerateRequest(max_tokens=max_tokens).SerializeToString()
        + llm_pb2.GenerateRequest(**fields).SerializeToString()
    ),
    st.integers(-1, 3),
    st.fixed_dictionaries(
        {"model": st.sampled_from([MODEL, "tiny", "nope"])},
        optional={
            "prompt": st.text(max_size=20),
            "prompt_token_ids": st.lists(st.integers(-(2**31), 2**31 - 1), max_size=4),
            "n": st.integers(-1, 3),
            "temperature": st.floats(),
            "ttft_ms": st.floats(),
            "tier": st.text(max_size=8),
            "stop": st.lists(st.text(max_size=4), max_size=5),
        },
    ),
)
RAW = st.one_of(
    st.binary(max_size=200),
    MESSAGE,
    st.builds(lambda m, cut: m[:cut], MESSAGE, st.integers(0, 40)),  # cut short
    st.builds(lambda m, junk: m + junk, MESSAGE, st.binary(min_size=1, max_size=20)),
    st.sampled_from([b"\x12\x02\xff\xfe", b"\x0a\x03\xc0\xaf\x00", b"\x12\xff\xff\xff\xff\x0f", b"\xff" * 10]),
)
METADATA = st.lists(
    st.tuples(
        st.sampled_from(["authorization", "x-request-id", "x-slo-tier"])
        | st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_.", min_size=1, max_size=12).filter(
            lambda k: not k.startswith("grpc-") and not k.endswith("-bin")
        ),
        st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=100).map(str.strip),
    ),
    max_size=4,
)


@pytest.fixture(scope="module")
def channel(llm_url, grpc_port):
    with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
        yield channel


@GRPC_FUZZ
@given(method=st.sampled_from(["Generate", "Generate", "Models"]), raw=RAW, metadata=METADATA)
def test_no_grpc_call_ends_with_a_server_fault(channel, method, raw, metadata):
    path = f"/variant_serve.v1.LLMService/{method}"
    metadata = [("application", "llm"), *metadata]  # more than one app may run on the shared cluster
    code, details = "OK", ""
    try:
        if method == "Generate":
            list(channel.unary_stream(path)(raw, metadata=metadata, timeout=120))  # read the stream to its status
        else:
            channel.unary_unary(path)(raw, metadata=metadata, timeout=120)
    except grpc.RpcError as e:
        code, details = e.code().name, e.details()
    GRPC_CODES[code] += 1
    assert code not in SERVER_FAULTS, (code, details)
