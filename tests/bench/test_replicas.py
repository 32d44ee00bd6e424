import asyncio

import httpx

from bench.client import MonotonicClock
from bench.replicas import (
    ReplicaSample,
    parse_variants,
    poll_variants,
    read_samples,
    variants_url,
    write_samples,
)


def test_parse_variants_skips_malformed_entries():
    payload = {
        "variants": [
            {"name": "a", "replicas": 2},
            {"name": "b"},
            {"replicas": 1},
            "c",
            {"name": "d", "replicas": 0},
        ]
    }
    assert parse_variants(payload, 1.5) == [ReplicaSample(1.5, "a", 2), ReplicaSample(1.5, "d", 0)]
    assert parse_variants({"other": 1}, 0) == []
    assert parse_variants([1, 2], 0) == []


def test_variants_url():
    assert variants_url("http://127.0.0.1:8000/") == "http://127.0.0.1:8000/variants"
    assert variants_url("http://127.0.0.1:8000/v1") == "http://127.0.0.1:8000/variants"


async def poll(url, seconds):
    stop = asyncio.Event()
    clock = MonotonicClock()
    async with httpx.AsyncClient() as client:
        task = asyncio.create_task(
            poll_variants(client, url, interval_s=0.05, stop=stop, clock=clock, run_start=clock.now())
        )
        await asyncio.sleep(seconds)
        stop.set()
        return await asyncio.wait_for(task, 5)


async def test_poller_samples_each_variant(fake_server):
    samples = await poll(fake_server.url, 0.3)
    assert {(s.variant, s.replicas) for s in samples} == {("small", 2), ("large", 1)}
    assert len(samples) >= 2
    times = [s.t_s for s in samples]
    assert times == sorted(times)


async def test_poller_without_the_endpoint_gives_nothing(bare_server):
    assert await poll(bare_server.url, 0.1) == []
    assert await poll("http://127.0.0.1:1", 0.1) == []


def test_samples_round_trip(tmp_path):
    samples = [ReplicaSample(0.0, "a", 1), ReplicaSample(1.0, "a", 2)]
    assert read_samples(write_samples(samples, tmp_path / "r.jsonl")) == samples
