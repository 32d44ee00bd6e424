"""The gRPC code is generated from the proto when missing or stale, in a copy of the package (never the live one,
which a running cluster may be importing)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from serve_app.grpc_api import codegen

SOURCES = ("__init__.py", "codegen.py", codegen.PROTO)


@pytest.fixture
def package(tmp_path: Path) -> Path:
    """A fresh clone's serve_app.grpc_api: the proto and the code, no generated files."""
    root = tmp_path / "serve_app"
    (root / "grpc_api").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    for name in SOURCES:
        shutil.copyfile(codegen.PACKAGE_DIR / name, root / "grpc_api" / name)
    return root / "grpc_api"


def test_missing_code_is_generated_once(package):
    assert not codegen.is_current(package)
    assert codegen.ensure_generated(package)
    assert all((package / name).is_file() for name in codegen.OUTPUTS)
    assert codegen.is_current(package)
    assert not codegen.ensure_generated(package)  # current: nothing to do


def test_a_deleted_output_is_regenerated(package):
    codegen.ensure_generated(package)
    (package / "llm_pb2_grpc.py").unlink()
    assert codegen.ensure_generated(package)
    assert (package / "llm_pb2_grpc.py").is_file()


def test_a_changed_proto_makes_the_code_stale(package):
    codegen.ensure_generated(package)
    proto = package / codegen.PROTO
    proto.write_text(proto.read_text().replace("message ModelsRequest {}", "message ModelsRequest { bool all = 1; }"))
    assert not codegen.is_current(package)
    assert codegen.ensure_generated(package)
    assert "all" in (package / "llm_pb2.pyi").read_text()


def test_importing_the_package_generates_it(package):
    """What a fresh clone or a new Ray node does: import the servicer path, with no generated code present."""
    root = package.parent.parent
    env = {**os.environ, "PYTHONPATH": str(root)}
    script = (
        "import serve_app.grpc_api as api; "
        "print(api.__file__); "
        "print(api.add_LLMServiceServicer_to_server.__name__, api.llm_pb2.GenerateRequest(prompt='x').prompt)"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=root, env=env, capture_output=True, text=True, timeout=120, check=True
    ).stdout.split("\n")
    assert out[0].startswith(str(root))  # this copy, not the checkout's package
    assert out[1] == "add_LLMServiceServicer_to_server x"
    assert codegen.is_current(package)
