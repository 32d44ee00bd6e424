"""``python -m cluster``: feasibility checks, manifests and the local multi-node cluster.

python -m cluster check serve_config.yaml --nodes 1x0:cpus=2
python -m cluster check configs/gpu-trtllm-serve.yaml --nodes 2x4xH100      # shape spec: see cluster/shape.py
python -m cluster check configs/gpu-trtllm-serve.yaml --live                 # the cluster at RAY_ADDRESS
python -m cluster manifests configs/gpu-trtllm-serve.yaml --out cluster/
python -m cluster local up --nodes 2 --gpus-per-node 4 --accelerator-type H100
python -m cluster local down
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from core.errors import ConfigError


def _check(options: argparse.Namespace) -> int:
    from cluster.feasibility import check_feasibility
    from cluster.shape import parse_shape, read_live_shape
    from serve_app.config import load_config_file

    config = load_config_file(options.file, options.app)
    if options.live:
        import ray

        ray.init(address=options.address or "auto", log_to_driver=False)
        shape = read_live_shape()
    else:
        shape = parse_shape(options.nodes)
    report = check_feasibility(config, shape)
    print(report.describe())
    print("OK: every deploy-time replica fits" if report.ok else "FAIL: some replicas cannot be placed")
    return 0 if report.ok else 1


def _manifests(options: argparse.Namespace) -> int:
    from cluster.manifests import write_manifests

    for path in write_manifests(options.file, options.out, options.image):
        print(f"wrote {path}")
    return 0


def _local(options: argparse.Namespace) -> int:
    from cluster import local

    if options.action == "_supervise":
        local.supervise(local.LocalClusterSpec.model_validate_json(options.spec), options.state_file)
        return 0
    if options.action == "down":
        print("stopped" if local.down(options.state_file) else "no local cluster runs")
        return 0
    spec = local.LocalClusterSpec(
        nodes=options.nodes,
        gpus_per_node=options.gpus_per_node,
        accelerator_type=options.accelerator_type,
        cpus_per_node=options.cpus_per_node,
    )
    state = local.up(spec, options.state_file)
    print(f"local cluster up: {spec.nodes} nodes x {spec.gpus_per_node} logical GPUs, pid {state['pid']}")
    print(f"export RAY_ADDRESS={state['address']} RAY_AUTH_MODE=token")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cluster", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)

    check = commands.add_parser("check", help="can the config's replicas be placed on a cluster?")
    check.add_argument("file", type=Path, help="a Ray Serve config YAML")
    check.add_argument("--app", default=None, help="application name (default: the first)")
    where = check.add_mutually_exclusive_group(required=True)
    where.add_argument("--nodes", action="append", help="cluster shape spec, e.g. 2x4xH100 (repeatable)")
    where.add_argument("--live", action="store_true", help="check against the running Ray cluster")
    check.add_argument("--address", default=None, help="with --live: the cluster address (default: auto)")
    check.set_defaults(run=_check)

    manifests = commands.add_parser("manifests", help="generate ray-cluster.yaml and rayservice.yaml")
    manifests.add_argument("file", type=Path, help="a Ray Serve config YAML (e.g. configs/gpu-trtllm-serve.yaml)")
    manifests.add_argument("--out", type=Path, default=Path("cluster"), help="output directory")
    manifests.add_argument("--image", default=None, help="container image holding Ray, the engines and this package")
    manifests.set_defaults(run=_manifests)

    local = commands.add_parser("local", help="a multi-node Ray cluster with logical GPUs on this machine")
    local.add_argument("action", choices=["up", "down", "_supervise"])
    local.add_argument("--nodes", type=int, default=2)
    local.add_argument("--gpus-per-node", type=int, default=4)
    local.add_argument("--accelerator-type", default="H100")
    local.add_argument("--cpus-per-node", type=float, default=2.0)
    local.add_argument("--spec", help=argparse.SUPPRESS)
    local.add_argument("--state-file", type=Path, default=None)
    local.set_defaults(run=_local)

    options = parser.parse_args(argv)
    if getattr(options, "state_file", "unset") is None:
        from cluster.local import DEFAULT_STATE_FILE

        options.state_file = DEFAULT_STATE_FILE
    if getattr(options, "image", "unset") is None:
        from cluster.manifests import DEFAULT_IMAGE

        options.image = DEFAULT_IMAGE
    try:
        return int(options.run(options))
    except (ConfigError, RuntimeError) as error:
        print(getattr(error, "message", str(error)), file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
