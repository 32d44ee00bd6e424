"""Optional sampling fields end to end: a request goes only to a variant whose backend implements every field it
asks for, and one that none (or not its pinned variant) implements is a 400 naming the field, never ignored.

One app with an hf variant (transformers continuous batching: no per-request penalties, logit_bias, min_tokens or
seed) and an emulated one (seed and min_tokens, no logits), through real Serve, real HTTP and the openai client.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import openai
import pytest

from engines.config import EMULATED_SAMPLING_FIELDS, HF_SAMPLING_FIELDS

pytestmark = pytest.mark.serve

PREFIX = "/sampling-fields"
MODEL = "mixed"

# A value of each optional sampling field that asks for something (sent with temperature 0.8: a seed changes
# nothing when greedy). The openai client sends the extensions in extra_body.
ASKING = {
    "presence_penalty": 0.5,
    "frequency_penalty": -0.5,
    "repetition_penalty": 1.3,
    "min_tokens": 3,
    "logit_bias": {"7": -100},
    "seed": 5,
    "logprobs": 2,
}


@pytest.fixture(scope="module")
def mixed_url(serve_url) -> Iterator[str]:
    from ray import serve

    from serve_app.app import build_app

    args = {
        "model_name": MODEL,
        "default_variant": "hf-tiny",
        "variants": [
            {
                "name": "hf-tiny",
                "engine": {"backend": "hf", "model": "builtin:tiny", "device": "cpu", "max_running_requests": 4},
                "resources": {"num_cpus": 0.1},
                "num_replicas": 1,
            },
            {
                "name": "emulated-tiny",
                "engine": {"backend": "emulated", "preset": "cpu-builtin-tiny", "startup_time_scale": 0.0},
                "resources": {"num_cpus": 0.1},
                "num_replicas": 1,
            },
        ],
        "ingress": {"num_cpus": 0.1},
    }
    serve.run(build_app(args), name="sampling-fields", route_prefix=PREFIX)
    url = f"{serve_url}{PREFIX}"
    deadline = time.monotonic() + 120  # both variants report, so the router (not the fallback) decides
    while not all(v["replicas"] for v in httpx.get(f"{url}/variants", timeout=30).json()["variants"]):
        assert time.monotonic() < deadline
        time.sleep(0.2)
    yield url
    serve.delete("sampling-fields")


@pytest.fixture(scope="module")
def client(mixed_url) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{mixed_url}/v1", api_key="unused", max_retries=0, timeout=120)


def _create(client: openai.OpenAI, model: str, field: str, value, **fields):
    standard = field in {"presence_penalty", "frequency_penalty", "logit_bias", "seed", "logprobs"}
    return client.completions.with_raw_response.create(
        model=model,
        prompt="The lighthouse keeper",
        max_tokens=8,
        temperature=0.8,
        **({field: value} if standard else {"extra_body": {field: value}}),
        **fields,
    )


@pytest.mark.parametrize("field", sorted(set(ASKING) - EMULATED_SAMPLING_FIELDS))
def test_a_field_no_variant_implements_is_a_400_naming_it(client, field):
    with pytest.raises(openai.BadRequestError) as err:
        _create(client, MODEL, field, ASKING[field])
    assert err.value.body["param"] == field  # type: ignore[index]
    assert "not implemented" in err.value.message


@pytest.mark.parametrize("field", sorted(set(ASKING) - HF_SAMPLING_FIELDS))
def test_a_field_the_pinned_hf_variant_lacks_is_a_400_naming_it_not_rerouted(client, field):
    with pytest.raises(openai.BadRequestError) as err:
        _create(client, "hf-tiny", field, ASKING[field])
    assert err.value.body["param"] == field  # type: ignore[index]
    assert "'hf-tiny'" in err.value.message


@pytest.mark.parametrize("field", sorted(set(ASKING) & EMULATED_SAMPLING_FIELDS))
def test_the_router_sends_a_field_only_the_emulated_backend_implements_there(client, field):
    for _ in range(3):  # whatever the load, never to hf-tiny
        raw = _create(client, MODEL, field, ASKING[field])
        assert raw.headers["x-route-variant"] == "emulated-tiny"
        assert raw.parse().usage.completion_tokens > 0


def test_min_tokens_reaches_the_engine_and_lengthens_an_answer_that_ended_early(client):
    ask = {"model": "emulated-tiny", "prompt": "The lighthouse keeper", "max_tokens": 900, "seed": 3}
    natural = client.completions.create(**ask)
    assert natural.choices[0].finish_reason == "stop"  # the emulated model's EOS at a paragraph's end
    n = natural.usage.completion_tokens
    longer = client.completions.create(**ask, extra_body={"min_tokens": n + 10})
    assert longer.usage.completion_tokens > n + 10
    assert longer.choices[0].text.startswith(natural.choices[0].text.rstrip("\n"))


def test_neutral_values_go_anywhere_even_pinned_to_hf(client):
    completion = client.completions.create(
        model="hf-tiny",
        prompt="Hi",
        max_tokens=4,
        temperature=0,
        seed=1,  # greedy: the seed changes nothing
        presence_penalty=0,
        frequency_penalty=0,
        logit_bias={},
        extra_body={"repetition_penalty": 1.0, "min_tokens": 0},
    )
    assert completion.usage.completion_tokens > 0


def test_variants_lists_the_sampling_fields_each_backend_implements(mixed_url):
    variants = {v["name"]: v for v in httpx.get(f"{mixed_url}/variants", timeout=30).json()["variants"]}
    assert variants["hf-tiny"]["sampling_fields"] == sorted(HF_SAMPLING_FIELDS)
    assert variants["emulated-tiny"]["sampling_fields"] == sorted(EMULATED_SAMPLING_FIELDS)


def test_chat_refuses_a_penalty_by_name_too(client):
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=4, frequency_penalty=1.0
        )
    assert err.value.body["param"] == "frequency_penalty"  # type: ignore[index]
