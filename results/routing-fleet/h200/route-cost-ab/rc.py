"""`python -m bench route-cost` without the bench package's other subcommands' imports (the device has no venv)."""

import argparse
import sys

from bench import route_cost

parser = argparse.ArgumentParser()
route_cost.add_parser(parser.add_subparsers())
sys.exit(route_cost.run(parser.parse_args(["route-cost", *sys.argv[1:]])))
