"""Generates the Python gRPC code for ``llm.proto`` into this package, when it is missing or stale.

The generated modules are build outputs, never committed or edited: a fresh clone, a wheel built elsewhere
and every Ray node that imports the servicer path get code that matches the proto they ship. A stamp beside
the outputs records what they were generated from (the proto's hash and the grpcio-tools version, whose
protoc decides the protobuf runtime the code needs); a mismatch regenerates them. Several processes on one
node import this at once (the proxy, the ingress replicas, a client), so generation holds a file lock and
moves finished files into place, the stamp last: whoever sees a matching stamp sees complete files.

    python -m serve_app.grpc_api.codegen          # regenerate now (also what the first import does)
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import shutil
import sys
import tempfile
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
PROTO = "llm.proto"
STAMP = "_generated.stamp"
# The package path the generated modules live at: protoc derives their imports from the proto's path.
_PROTO_PATH = Path("serve_app", "grpc_api", PROTO)
OUTPUTS = ("llm_pb2.py", "llm_pb2.pyi", "llm_pb2_grpc.py")


def fingerprint(package_dir: Path = PACKAGE_DIR) -> str:
    """What the outputs must have been generated from: the proto's bytes and the code generator's version."""
    digest = hashlib.sha256((package_dir / PROTO).read_bytes())
    digest.update(b"\0grpcio-tools " + _tools_version().encode())
    return digest.hexdigest()


def is_current(package_dir: Path = PACKAGE_DIR) -> bool:
    stamp = package_dir / STAMP
    if not stamp.is_file() or not all((package_dir / name).is_file() for name in OUTPUTS):
        return False
    return stamp.read_text().strip() == fingerprint(package_dir)


def ensure_generated(package_dir: Path = PACKAGE_DIR) -> bool:
    """Makes the generated modules current; True when this call (re)generated them."""
    if is_current(package_dir):
        return False
    from filelock import FileLock

    try:
        lock = FileLock(str(package_dir / ".generate.lock"), timeout=120)
        with lock:
            if is_current(package_dir):  # another process generated them while this one waited
                return False
            _generate(package_dir)
    except PermissionError as e:
        raise RuntimeError(
            f"The gRPC code for {package_dir / PROTO} is missing or stale and {package_dir} is not writable: "
            "run `python -m serve_app.grpc_api.codegen` once as a user who can write there."
        ) from e
    return True


def _generate(package_dir: Path) -> None:
    try:
        from grpc_tools import protoc
    except ImportError as e:  # a dependency in pyproject.toml; say what to install rather than fail obscurely
        raise RuntimeError("Generating the gRPC code needs grpcio-tools: pip install grpcio-tools") from e

    stamp = fingerprint(package_dir)
    with tempfile.TemporaryDirectory(prefix="grpc-gen-", dir=package_dir) as tmp:
        src, out = Path(tmp, "src"), Path(tmp, "out")
        (src / _PROTO_PATH).parent.mkdir(parents=True)
        out.mkdir()
        shutil.copyfile(package_dir / PROTO, src / _PROTO_PATH)
        include = Path(protoc.__file__).parent / "_proto"  # protobuf's well-known types, shipped with the tool
        args = [
            "grpc_tools.protoc",
            f"-I{src}",
            f"-I{include}",
            f"--python_out={out}",
            f"--pyi_out={out}",
            f"--grpc_python_out={out}",
            str(_PROTO_PATH),
        ]
        if protoc.main(args) != 0:
            raise RuntimeError(f"protoc failed on {package_dir / PROTO}; its errors are printed above.")
        generated = out / _PROTO_PATH.parent
        for name in OUTPUTS:
            os.replace(generated / name, package_dir / name)  # same file system: each move is atomic
    (package_dir / (STAMP + ".tmp")).write_text(stamp + "\n")
    os.replace(package_dir / (STAMP + ".tmp"), package_dir / STAMP)


def _tools_version() -> str:
    try:
        return importlib.metadata.version("grpcio-tools")
    except importlib.metadata.PackageNotFoundError:
        return "missing"


if __name__ == "__main__":
    for name in (STAMP, *OUTPUTS):
        (PACKAGE_DIR / name).unlink(missing_ok=True)
    ensure_generated()
    print(f"generated {', '.join(OUTPUTS)} in {PACKAGE_DIR}", file=sys.stderr)
