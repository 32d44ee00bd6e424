#!/bin/bash
# Session 23's delta channel against Serve's per-request gRPC streams (the default before it), the bar command
# interleaved (before, after, ... PAIRS times), each from its own worktree:
#   git worktree add /tmp/wt-s23-before 8824729; git worktree add /tmp/wt-s23-after HEAD
#   bash results/streaming/session23/cpu-ab/ab.sh /tmp/wt-s23-before /tmp/wt-s23-after [OUT] [PAIRS]
set -u
here=${3:-$(cd "$(dirname "$0")" && pwd)}  # 3rd argument: where the results go (default: here)
bash "$(dirname "$0")/../../ab_bar.sh" "$1" "$2" "$here" "${4:-3}" /tmp/s23ab
