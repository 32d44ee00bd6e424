#!/bin/bash
# Session 24, before (e6607dd, the session's start) and after, the bar command interleaved on this CPU:
#   git worktree add /tmp/wt-s24-before e6607dd; git worktree add /tmp/wt-s24-after HEAD
#   bash results/streaming/session24/cpu-ab/ab.sh /tmp/wt-s24-before /tmp/wt-s24-after [OUT] [PAIRS]
set -u
here=${3:-$(cd "$(dirname "$0")" && pwd)}  # 3rd argument: where the results go (default: here)
bash "$(dirname "$0")/../../ab_bar.sh" "$1" "$2" "$here" "${4:-2}" /tmp/s24ab
