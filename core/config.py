"""The one base of the project's pydantic configs: strict and immutable."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """A config section: unknown keys are errors, and a built config never changes.

    A typo in a YAML key must fail the deploy, not silently fall back to a default; and one config object is
    shared by everything built from it (replicas, the router, the simulator), so none may change it under the
    others.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)


class ConfigProblems(ValueError):
    """Cross-field problems found by one model's validator, each at a path relative to that model.

    Raised (as a ``ValueError``, so pydantic records it at the model's location) and expanded again by
    ``serve_app.config.format_validation_error``, so that every problem is reported at its own field path.
    """

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = problems
        super().__init__("; ".join(f"{path}: {message}" for path, message in problems))


def raise_if_any(problems: list[tuple[str, str]]) -> None:
    """Raises :class:`ConfigProblems` with ``problems`` (``(field path, message)`` pairs), if there are any."""
    if problems:
        raise ConfigProblems(problems)
