"""engines.process: the hf engine in its own process, on the real builtin model, against the in-process engine."""

from __future__ import annotations

import asyncio
import contextlib
import os
import pickle
import signal
import time

import psutil
import pytest

from core.errors import (
    ContextTooLongError,
    EngineConfigError,
    EngineDeadError,
    InvalidRequestError,
    ModelNotFoundError,
    OverloadedError,
)
from engines.config import CoalesceConfig, HFEngineConfig
from engines.engine_core import STATS_INTERVAL_S
from engines.factory import make_engine
from engines.hf import HFEngine
from engines.ipc import delta_from_wire, delta_to_wire, portable_error
from engines.process import ProcessEngine
from engines.protocol import Delta, GenerationRequest, SamplingParams

CONFIG = HFEngineConfig(model="builtin:tiny", device="cpu", num_threads=1, max_running_requests=16, engine_process=True)


@pytest.fixture(scope="module")
async def engine():
    eng = make_engine(CONFIG)
    assert isinstance(eng, ProcessEngine)
    await eng.start()
    yield eng
    await eng.shutdown()


def _request(ids, rid="r", **sampling) -> GenerationRequest:
    sampling.setdefault("temperature", 0.0)
    return GenerationRequest(rid, list(ids), SamplingParams(**sampling))


async def _collect(engine, request):
    deltas = [d async for d in engine.generate(request)]
    return deltas, "".join(d.text for d in deltas), [t for d in deltas for t in d.token_ids]


async def _wait_idle(engine) -> None:
    for _ in range(200):  # the child pushes stats every 100 ms and cancels asynchronously; bounded
        s = engine.stats()
        if s.running_requests == 0 and s.queued_requests == 0 and s.registered_requests == 0:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"engine not idle: {engine.stats()}")


def _tokenizer():
    from transformers import AutoTokenizer

    from engines.model_ref import resolve_model

    return AutoTokenizer.from_pretrained(resolve_model("builtin:tiny"))


def test_the_engine_process_option_defaults_on_and_the_factory_honours_it():
    assert HFEngineConfig(model="builtin:tiny").engine_process is True
    assert isinstance(make_engine(HFEngineConfig(model="builtin:tiny")), ProcessEngine)
    assert isinstance(make_engine(HFEngineConfig(model="builtin:tiny", engine_process=False)), HFEngine)
    # The child builds the in-process engine of the same config, never another process engine.
    assert ProcessEngine(CONFIG).config.engine_process is False


def test_the_child_runs_the_in_process_engine_without_a_coalescing_window():
    # The replica applies the stream interval to what the child sends; timers there would only cost its interpreter.
    child = ProcessEngine(CONFIG.model_copy(update={"coalesce": CoalesceConfig(interval_ms=25.0)})).config

    assert (child.engine_process, child.coalesce.interval_ms) == (False, 0.0)


def test_deltas_and_errors_cross_the_wire_intact():
    delta = Delta("héllo", [1, 2], "stop", 3, 2, 1.5, 1.0, None)
    assert delta_from_wire(pickle.loads(pickle.dumps(delta_to_wire(delta)))) == delta
    errors = [
        ContextTooLongError("too long", prompt_tokens=9, context_length=8),
        OverloadedError("busy", retry_after_s=2.5),
        InvalidRequestError("bad", param="top_p"),
        EngineConfigError("engine.model: nope"),
    ]
    for error in errors:
        back = pickle.loads(pickle.dumps(portable_error(error)))
        assert type(back) is type(error)
        assert back.__dict__ == error.__dict__ and str(back) == str(error)

    class Local(Exception):  # defined in a function: cannot be pickled by reference
        pass

    assert isinstance(portable_error(Local("x")), EngineDeadError)


@pytest.mark.slow  # starts a process or loads a model: the full suite only
async def test_starts_a_child_with_the_configured_threads(engine):
    assert engine.child_pid != os.getpid()
    assert psutil.Process(engine.child_pid).ppid() == os.getpid()
    assert engine.child_info["torch_threads"] == CONFIG.num_threads
    assert engine.context_length == engine.stats().context_length > 0
    await engine.check_health()


@pytest.mark.slow  # starts a process or loads a model: the full suite only
async def test_greedy_output_equals_the_in_process_engine(engine):
    local = HFEngine(CONFIG.model_copy(update={"engine_process": False}))
    await local.start()
    try:
        for text in ["The river runs", "今天早上", "def add("]:
            prompt = local.tokenizer.encode(text)
            expected = await _collect(local, _request(prompt, max_tokens=24))
            got = await _collect(engine, _request(prompt, max_tokens=24))
            assert got[1:] == expected[1:], text  # same text, same token ids
            assert got[0][-1].finish_reason == expected[0][-1].finish_reason
            assert got[0][-1].completion_tokens == expected[0][-1].completion_tokens
            assert got[0][0].first_token_time is not None
    finally:
        await local.shutdown()


@pytest.mark.slow  # starts a process or loads a model: the full suite only
async def test_concurrent_streams_complete_with_their_lengths(engine):
    prompt = _tokenizer().encode("Hello")
    lengths = [8 + i for i in range(12)]
    results = await asyncio.gather(
        *[
            _collect(engine, _request(prompt, rid=f"c{i}", max_tokens=n, ignore_eos=True, temperature=0.8))
            for i, n in enumerate(lengths)
        ]
    )
    for (deltas, _, ids), n in zip(results, lengths, strict=True):
        assert len(ids) == n
        assert deltas[-1].finish_reason == "length"
        assert deltas[-1].completion_tokens == n
    await _wait_idle(engine)


@pytest.mark.slow  # starts a process or loads a model: the full suite only
async def test_closing_a_stream_aborts_it_in_the_child(engine):
    prompt = _tokenizer().encode("Once")
    stream = engine.generate(_request(prompt, rid="close-me", max_tokens=900, ignore_eos=True))
    got = 0
    async for delta in stream:
        got += len(delta.token_ids)
        if got >= 3:
            break
    for _ in range(100):  # the child's stats show the request running (bounded)
        if engine.stats().running_requests + engine.stats().queued_requests >= 1:
            break
        await asyncio.sleep(0.05)
    assert engine.stats().registered_requests >= 1
    await stream.aclose()
    await _wait_idle(engine)


@pytest.mark.slow  # starts a process or loads a model: the full suite only
async def test_task_cancellation_aborts_the_request_in_the_child(engine):
    prompt = _tokenizer().encode("Once")
    started = asyncio.Event()

    async def consume():
        async for _ in engine.generate(_request(prompt, rid="task", max_tokens=900, ignore_eos=True)):
            started.set()

    tasks = [asyncio.create_task(consume()) for _ in range(3)]
    await asyncio.wait_for(started.wait(), timeout=60)
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError):
            await task
    await _wait_idle(engine)


@pytest.mark.slow  # starts a process or loads a model: the full suite only
async def test_errors_raised_in_the_child_keep_their_type_and_fields(engine):
    too_long = [300] * (engine.context_length + 1)
    with pytest.raises(ContextTooLongError, match="context length") as info:
        await _collect(engine, _request(too_long, max_tokens=4))
    assert (info.value.prompt_tokens, info.value.context_length) == (len(too_long), engine.context_length)
    assert info.value.param == "prompt"
    with pytest.raises(InvalidRequestError, match="max_tokens") as bad:
        await _collect(engine, _request([5, 6], max_tokens=0))
    assert bad.value.param == "max_tokens"
    # The engine still serves after refusing.
    _, _, ids = await _collect(engine, _request([5, 6], max_tokens=3, ignore_eos=True))
    assert len(ids) == 3
    await _wait_idle(engine)


@pytest.mark.slow  # starts a process or loads a model: the full suite only
async def test_the_child_s_limits_are_known_as_soon_as_start_returns():
    """The ready message carries the started engine's stats: no wait for the first push, nor a first request."""
    eng = ProcessEngine(CONFIG)
    await eng.start()
    try:
        stats = eng.stats()
        assert stats.kv_blocks_total > 0
        assert stats.max_running_requests == CONFIG.max_running_requests
        assert stats.context_length == eng.context_length > 0
        assert stats.healthy
    finally:
        await eng.shutdown()


@pytest.mark.slow  # starts a process or loads a model: the full suite only
async def test_a_start_error_in_the_child_surfaces_with_its_message():
    eng = ProcessEngine(HFEngineConfig(model="builtin:no-such-model", device="cpu"))
    with pytest.raises(ModelNotFoundError, match="no-such-model"):
        await eng.start()
    assert not eng._process.is_alive()
    with pytest.raises(EngineDeadError):
        await eng.check_health()


@pytest.mark.slow  # starts a process or loads a model: the full suite only
async def test_a_killed_child_fails_open_streams_new_requests_and_the_health_check():
    eng = ProcessEngine(CONFIG)
    await eng.start()
    try:
        prompt = _tokenizer().encode("Once")
        stream = eng.generate(_request(prompt, rid="doomed", max_tokens=900, ignore_eos=True))
        await anext(stream)
        os.kill(eng.child_pid, signal.SIGKILL)
        with pytest.raises(EngineDeadError, match="exited unexpectedly"):
            async for _ in stream:
                pass
        with pytest.raises(EngineDeadError):
            await eng.check_health()
        with pytest.raises(EngineDeadError):
            await _collect(eng, _request(prompt, max_tokens=4))
        assert not eng.stats().healthy
    finally:
        await eng.shutdown()


@pytest.mark.slow  # starts a process or loads a model: the full suite only
async def test_shutdown_ends_open_streams_and_leaves_no_child():
    eng = ProcessEngine(CONFIG)
    await eng.start()
    pid = eng.child_pid
    prompt = _tokenizer().encode("Once")
    stream = eng.generate(_request(prompt, rid="cut", max_tokens=900, ignore_eos=True))
    await anext(stream)
    await eng.shutdown()
    with pytest.raises(EngineDeadError, match="shut down"):
        async for _ in stream:
            pass
    assert eng._process.exitcode == 0  # it stopped by itself, not killed
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert pid not in {p.pid for p in psutil.Process().children(recursive=True)}


ORPHAN_SCRIPT = """
import asyncio, sys
from engines.config import HFEngineConfig
from engines.process import ProcessEngine

async def main():
    engine = ProcessEngine(HFEngineConfig(model="builtin:tiny", device="cpu", num_threads=1))
    await engine.start()
    print(engine.child_pid, flush=True)
    await asyncio.sleep(600)

asyncio.run(main())
"""


@pytest.mark.slow  # starts a process or loads a model: the full suite only
def test_the_child_exits_when_its_parent_is_killed(tmp_path):
    import subprocess
    import sys
    import time
    from pathlib import Path

    # A script file without a __main__ guard: spawn would run it again in the child unless it is kept out.
    script = tmp_path / "unguarded.py"
    script.write_text(ORPHAN_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    parent = subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        assert psutil.Process(child).ppid() == parent.pid
    finally:
        parent.kill()
        parent.wait()
    deadline = time.monotonic() + 60
    while psutil.pid_exists(child) and psutil.Process(child).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the engine process outlived its parent"
        time.sleep(0.1)


@pytest.mark.slow  # starts a process or loads a model: the full suite only
async def test_the_replica_side_sends_a_stream_once_per_interval_with_everything_the_child_sent():
    from engines.config import EmulatedEngineConfig

    fast = {"step_ms_at_batch_1": 1.0, "step_ms_per_extra_seq": 0.1, "context_length": 8192}
    config = EmulatedEngineConfig(
        preset="cpu-builtin-tiny", profile=fast, startup_time_scale=0.0, coalesce={"interval_ms": 50.0}
    )
    eng = ProcessEngine(config)
    await eng.start()
    try:
        prompt = _tokenizer().encode("Hello")
        started = time.monotonic()
        deltas, text, ids = await _collect(eng, _request(prompt, max_tokens=120, ignore_eos=True, seed=2))
        streamed_s = time.monotonic() - started
    finally:
        await eng.shutdown()
    # The first message goes at once, with what the child had made by then (one token on an idle machine).
    assert deltas[0].token_ids and len(ids) == 120 == deltas[-1].completion_tokens
    # At most one message per 50 ms interval (and the first token at once), however long a busy machine makes the
    # steps: one message a step would be 120 until the steps take 50 ms each.
    assert len(deltas) <= streamed_s / 0.05 + 2 < 120
    assert text == _tokenizer().decode(ids, skip_special_tokens=True)


@pytest.mark.slow  # starts a process or loads a model: the full suite only
async def test_the_prefix_cache_s_figures_and_events_cross_from_the_child(engine):
    import random

    from engines.kv_blocks import block_hashes

    page = engine.kv_block_tokens
    assert page == CONFIG.page_size
    await _wait_idle(engine)
    rnd = random.Random(11)
    prompt = [rnd.randrange(10, _tokenizer().vocab_size) for _ in range(120)]
    first, _, ids = await _collect(engine, _request(prompt, rid="pc-1", max_tokens=4, ignore_eos=True))
    again, _, _ = await _collect(engine, _request(prompt, rid="pc-2", max_tokens=4, ignore_eos=True))
    assert first[0].cached_tokens == 0
    assert again[0].cached_tokens == (120 - 1) // page * page
    await _wait_idle(engine)
    await asyncio.sleep(3 * STATS_INTERVAL_S)  # the child's events come with its stats, folded here until drained
    events = engine.kv_events()
    assert events is not None and not events.removed
    assert events.stored >= set(block_hashes(prompt + ids[:-1], page))
    assert not engine.kv_events()
    assert engine.stats().cache_hit_tokens >= again[0].cached_tokens
