"""What a stack costs with no traffic: CPU by role of a `serve run` tree, and optionally py-spy of some replicas.

Run from the repository root, on configs from configs.sh:
    python results/streaming/session25/idle/idle.py /tmp/s25/idle/ing1.yaml [--spy Ingress StatsBoard]
"""

import argparse
import json
import subprocess
import time

import httpx

from bench.process_cpu import cpu_by_role, cpu_delta, roles_by_pid

SECONDS = 30


def wait_ready() -> None:
    for _ in range(600):
        try:
            if httpx.get("http://127.0.0.1:8000/v1/models", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise TimeoutError("the app never answered /v1/models")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("config")
    parser.add_argument("--spy", nargs="*", default=[], help="roles to py-spy instead of reading CPU by role")
    args = parser.parse_args()
    with open(args.config + ".log", "w") as log:
        serve = subprocess.Popen(["serve", "run", args.config], stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_ready()
            time.sleep(20)  # past the replicas' start-up
            if args.spy:
                pids = {role: pid for pid, (role, _) in roles_by_pid(serve.pid).items() if role in args.spy}
                spies = [
                    subprocess.Popen(
                        [
                            *("py-spy", "record", "--pid", str(pid), "--duration", str(SECONDS), "--rate", "200"),
                            *("--format", "raw", "--nonblocking", "-o", f"{args.config}.{role}.txt"),
                        ],
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                    for role, pid in pids.items()
                ]
                for spy in spies:
                    spy.wait()
            else:
                before = cpu_by_role(serve.pid)
                time.sleep(SECONDS)
                spent = cpu_delta(before, cpu_by_role(serve.pid))
                print(args.config, json.dumps({role: round(s / SECONDS, 4) for role, s in spent.items()}))
        finally:
            serve.terminate()
            serve.wait(60)


if __name__ == "__main__":
    main()
