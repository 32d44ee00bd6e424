"""API keys and per-key limits: who may call, how often, how much, how many streams at once.

Keys are held only as SHA-256 digests once loaded, so no log line, error or repr can carry one; a key's
``name`` is what logs and metrics show. Rate limits are token buckets refilled continuously (requests per
minute and tokens per minute, the prompt plus ``max_tokens`` charged at admission); time is passed in,
so the limiter is a pure object the tests drive with their own clock.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from pydantic import Field, SecretStr, model_validator

from core.config import StrictModel
from core.errors import AuthenticationError, ConfigError, OverloadedError


class ApiKeyConfig(StrictModel):
    """One client credential and its limits."""

    name: str = Field(min_length=1, description="Shown in logs and metrics instead of the key.")
    key: SecretStr | None = Field(None, description="The key itself (prefer key_env or a keys_file).")
    key_env: str | None = Field(None, description="Name of an environment variable holding the key.")
    admin: bool = Field(False, description="May read operator endpoints (/variants) when they are restricted.")
    requests_per_minute: float | None = Field(None, gt=0, description="Request rate limit; None is unlimited.")
    tokens_per_minute: float | None = Field(
        None, gt=0, description="Token rate limit (prompt + max_tokens per request); None is unlimited."
    )
    max_concurrent_streams: int | None = Field(
        None, ge=1, description="Requests in flight at once for this key; None is unlimited."
    )

    @model_validator(mode="after")
    def _one_source(self) -> ApiKeyConfig:
        if (self.key is None) == (self.key_env is None):
            raise ValueError("give exactly one of 'key' or 'key_env'")
        return self

    def secret(self) -> str:
        if self.key is not None:
            return self.key.get_secret_value()
        value = os.environ.get(self.key_env or "")
        if not value:
            raise ConfigError(f"auth.keys[{self.name}].key_env: environment variable {self.key_env!r} is unset")
        return value


class AuthConfig(StrictModel):
    """API keys for /v1/*; with none configured, the endpoint is open."""

    keys: list[ApiKeyConfig] = Field(default_factory=list, description="Accepted API keys and their limits.")
    keys_file: str | None = Field(
        None, description="A YAML/JSON file with a list of keys in the same format, read at deploy time."
    )
    restrict_variants_endpoint: bool = Field(
        True, description="When keys are configured, GET /variants needs an admin key."
    )

    @property
    def enabled(self) -> bool:
        return bool(self.keys or self.keys_file)

    def all_keys(self) -> list[ApiKeyConfig]:
        keys = list(self.keys)
        if self.keys_file:
            try:
                entries = yaml.safe_load(Path(self.keys_file).read_text()) or []
            except OSError as e:
                raise ConfigError(f"auth.keys_file: cannot read {self.keys_file!r}: {e}") from e
            keys += [ApiKeyConfig.model_validate(entry) for entry in entries]
        return keys


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


@dataclass(slots=True)
class _Bucket:
    capacity: float
    per_s: float
    level: float
    updated: float

    def give_back(self, amount: float) -> None:
        """Returns what a request took but did not use (it was refused by a later check)."""
        self.level = min(self.capacity, self.level + amount)

    def take(self, amount: float, now: float) -> float:
        """Takes ``amount``; returns 0 on success, else the seconds until it would fit (taking nothing)."""
        self.level = min(self.capacity, self.level + (now - self.updated) * self.per_s)
        self.updated = now
        if amount <= self.level:
            self.level -= amount
            return 0.0
        if amount > self.capacity:
            return math.inf
        return (amount - self.level) / self.per_s


@dataclass(slots=True)
class Principal:
    """An authenticated caller and its live usage."""

    name: str
    admin: bool
    max_streams: int | None
    requests: _Bucket | None
    tokens: _Bucket | None
    streams: int = 0


@dataclass
class KeyStore:
    """Looks keys up by digest, in constant time per candidate, and enforces each key's limits."""

    config: AuthConfig
    _by_digest: dict[bytes, Principal] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for key in self.config.all_keys():
            rpm, tpm = key.requests_per_minute, key.tokens_per_minute
            self._by_digest[_digest(key.secret())] = Principal(
                name=key.name,
                admin=key.admin,
                max_streams=key.max_concurrent_streams,
                requests=_Bucket(rpm, rpm / 60.0, rpm, 0.0) if rpm else None,
                tokens=_Bucket(tpm, tpm / 60.0, tpm, 0.0) if tpm else None,
            )

    @property
    def enabled(self) -> bool:
        return bool(self._by_digest)

    def authenticate(self, authorization: str | None) -> Principal | None:
        """The caller for an ``Authorization`` header; None when auth is off. Raises when it is on and fails."""
        if not self._by_digest:
            return None
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise AuthenticationError("Missing API key: send 'Authorization: Bearer <key>'.")
        digest = _digest(token.strip())
        for known, principal in self._by_digest.items():
            if hmac.compare_digest(known, digest):
                return principal
        raise AuthenticationError("Invalid API key.")

    def admit(self, principal: Principal | None, tokens: int, now: float, streams: int = 1) -> None:
        """Charges one request of ``tokens`` tokens and ``streams`` stream slots (one per choice; ``release`` gives
        one back), or raises ``OverloadedError``."""
        if principal is None:
            return
        if principal.max_streams is not None and streams > principal.max_streams:
            raise OverloadedError(too_many_streams(principal.name, streams, principal.max_streams), retry_after_s=60.0)
        if principal.max_streams is not None and principal.streams + streams > principal.max_streams:
            raise OverloadedError(
                f"Key '{principal.name}' already has {principal.streams} requests in flight "
                f"(limit {principal.max_streams}).",
                retry_after_s=1.0,
            )
        if principal.requests is not None:
            wait = principal.requests.take(1, now)
            if wait:
                raise OverloadedError(
                    f"Rate limit for key '{principal.name}': requests per minute.", retry_after_s=wait
                )
        if principal.tokens is not None:
            wait = principal.tokens.take(tokens, now)
            if wait and principal.requests is not None:
                principal.requests.give_back(1)  # the request is refused: it must not count against the key
            if wait == math.inf:
                raise OverloadedError(
                    f"This request needs {tokens} tokens, more than key '{principal.name}' may use per minute.",
                    retry_after_s=60.0,
                )
            if wait:
                raise OverloadedError(f"Rate limit for key '{principal.name}': tokens per minute.", retry_after_s=wait)
        principal.streams += streams

    @staticmethod
    def release(principal: Principal | None) -> None:
        """Gives one stream slot back."""
        if principal is not None:
            principal.streams -= 1


def too_many_streams(name: str, streams: int, limit: int) -> str:
    """The refusal of a request whose choices (its prompts times ``n``) outnumber its key's stream limit."""
    return (
        f"This request needs {streams} streams (one per choice: its prompts times n), more than key '{name}' may "
        f"have in flight ({limit}): send fewer prompts or a smaller n."
    )
