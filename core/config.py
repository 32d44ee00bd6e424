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
