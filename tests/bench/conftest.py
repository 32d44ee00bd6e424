from collections.abc import Iterator

import pytest

from tests.bench.fake_openai import ServerThread, make_app

VARIANTS = [{"name": "small", "replicas": 2, "max_context": 2048}, {"name": "large", "replicas": 1}]


@pytest.fixture(scope="session")
def fake_server() -> Iterator[ServerThread]:
    """The fake OpenAI server on loopback, with GET /variants."""
    with ServerThread(make_app(variants=VARIANTS)) as server:
        yield server


@pytest.fixture(scope="session")
def bare_server() -> Iterator[ServerThread]:
    """The fake OpenAI server without GET /variants (like any other OpenAI server)."""
    with ServerThread(make_app()) as server:
        yield server
