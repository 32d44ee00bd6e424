#!/bin/bash
# Session 22's streaming change, before and after, the bar command interleaved (before, after, ... PAIRS times),
# each from its own worktree:
#   git worktree add /tmp/wt-s22-before 25b7d42; git worktree add /tmp/wt-s22-after HEAD
#   bash results/streaming/session22/cpu-ab/ab.sh /tmp/wt-s22-before /tmp/wt-s22-after [OUT] [PAIRS]
set -u
here=${3:-$(cd "$(dirname "$0")" && pwd)}  # 3rd argument: where the results go (default: here)
bash "$(dirname "$0")/../../ab_bar.sh" "$1" "$2" "$here" "${4:-3}" /tmp/s22ab
