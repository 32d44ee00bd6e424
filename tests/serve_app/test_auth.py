"""serve_app.auth: key lookup, per-key rate limits and stream limits, with a clock the test controls."""

from __future__ import annotations

import logging

import pytest

from core.errors import AuthenticationError, ConfigError, OverloadedError
from serve_app.auth import ApiKeyConfig, AuthConfig, KeyStore


def _store(**limits) -> KeyStore:
    return KeyStore(AuthConfig(keys=[ApiKeyConfig(name="alice", key="sk-alice-secret", **limits)]))


def test_no_keys_means_open():
    store = KeyStore(AuthConfig())
    assert not store.enabled
    assert store.authenticate(None) is None


@pytest.mark.parametrize("header", [None, "", "Bearer", "Bearer ", "Basic sk-alice-secret", "sk-alice-secret"])
def test_missing_or_malformed_header_is_refused(header):
    with pytest.raises(AuthenticationError, match="Missing API key"):
        _store().authenticate(header)


def test_wrong_key_is_refused_and_right_key_names_the_caller():
    store = _store()
    with pytest.raises(AuthenticationError, match="Invalid API key"):
        store.authenticate("Bearer sk-nope")
    assert store.authenticate("Bearer sk-alice-secret").name == "alice"
    assert store.authenticate("bearer sk-alice-secret").name == "alice"  # the scheme is case-insensitive


def test_key_from_environment(monkeypatch):
    monkeypatch.setenv("ALICE_KEY", "from-env")
    store = KeyStore(AuthConfig(keys=[ApiKeyConfig(name="alice", key_env="ALICE_KEY")]))
    assert store.authenticate("Bearer from-env").name == "alice"
    monkeypatch.delenv("ALICE_KEY")
    with pytest.raises(ConfigError, match="ALICE_KEY"):
        KeyStore(AuthConfig(keys=[ApiKeyConfig(name="alice", key_env="ALICE_KEY")]))


def test_keys_file(tmp_path):
    path = tmp_path / "keys.yaml"
    path.write_text("- {name: bob, key: sk-bob, admin: true}\n")
    store = KeyStore(AuthConfig(keys_file=str(path)))
    caller = store.authenticate("Bearer sk-bob")
    assert caller.name == "bob" and caller.admin


def test_a_key_needs_exactly_one_source():
    with pytest.raises(ValueError, match="exactly one"):
        ApiKeyConfig(name="x")
    with pytest.raises(ValueError, match="exactly one"):
        ApiKeyConfig(name="x", key="a", key_env="B")


def test_key_never_appears_in_reprs_or_logs(caplog):
    config = AuthConfig(keys=[ApiKeyConfig(name="alice", key="sk-alice-secret")])
    store = KeyStore(config)
    with caplog.at_level(logging.DEBUG):
        logging.getLogger("test").info("config %r store %r", config, store)
        with pytest.raises(AuthenticationError) as err:
            store.authenticate("Bearer sk-wrong-secret")
    text = caplog.text + repr(config) + repr(store) + str(err.value) + config.model_dump_json()
    assert "sk-alice-secret" not in text and "sk-wrong-secret" not in text


def test_requests_per_minute_refills_over_time():
    store = _store(requests_per_minute=2)
    caller = store.authenticate("Bearer sk-alice-secret")
    store.admit(caller, 10, now=0.0)
    store.admit(caller, 10, now=0.0)
    with pytest.raises(OverloadedError) as err:
        store.admit(caller, 10, now=1.0)
    assert err.value.retry_after_s == pytest.approx(29.0)  # one request back every 30 s, 1 s already passed
    store.admit(caller, 10, now=31.0)


def test_tokens_per_minute_charges_prompt_plus_max_tokens():
    store = _store(tokens_per_minute=1000)
    caller = store.authenticate("Bearer sk-alice-secret")
    store.admit(caller, 600, now=0.0)
    with pytest.raises(OverloadedError, match="tokens per minute"):
        store.admit(caller, 600, now=0.0)
    with pytest.raises(OverloadedError, match="more than key 'alice' may use per minute"):
        store.admit(caller, 5000, now=100.0)


def test_a_request_refused_for_tokens_does_not_use_up_a_request():
    store = _store(requests_per_minute=2, tokens_per_minute=1000)
    caller = store.authenticate("Bearer sk-alice-secret")
    store.admit(caller, 900, now=0.0)
    for _ in range(3):  # refused by the token bucket: the request bucket gives its token back
        with pytest.raises(OverloadedError, match="tokens per minute"):
            store.admit(caller, 900, now=0.0)
    store.admit(caller, 50, now=0.0)  # the second request of the minute is still there


def test_concurrent_streams_are_limited_and_released():
    store = _store(max_concurrent_streams=1)
    caller = store.authenticate("Bearer sk-alice-secret")
    store.admit(caller, 1, now=0.0)
    with pytest.raises(OverloadedError, match="in flight"):
        store.admit(caller, 1, now=0.0)
    store.release(caller)
    store.admit(caller, 1, now=0.0)


def test_a_request_of_several_choices_takes_a_stream_slot_each_all_or_none():
    store = _store(max_concurrent_streams=3)
    caller = store.authenticate("Bearer sk-alice-secret")
    store.admit(caller, 1, now=0.0, streams=2)
    with pytest.raises(OverloadedError, match="in flight"):
        store.admit(caller, 1, now=0.0, streams=2)
    store.admit(caller, 1, now=0.0, streams=1)
    with pytest.raises(OverloadedError, match="needs 4 streams"):  # never admitted, whatever is in flight
        store.admit(caller, 1, now=0.0, streams=4)
    for _ in range(3):
        store.release(caller)
    assert caller is not None and caller.streams == 0
