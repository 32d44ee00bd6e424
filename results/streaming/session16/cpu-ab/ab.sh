#!/bin/bash
# Session 16's whole change on the streaming path, before (7f29ef3) and after (the session's last tree), the bar
# command interleaved (before, after, before, after), each from its own worktree:
#   git worktree add /tmp/wt-s16-before 7f29ef3; git worktree add /tmp/wt-s16-after HEAD
#   bash results/streaming/session16/cpu-ab/ab.sh /tmp/wt-s16-before /tmp/wt-s16-after
set -u
here=${3:-$(cd "$(dirname "$0")" && pwd)}  # 3rd argument: where the results go (default: here)
bash "$(dirname "$0")/../../ab_bar.sh" "$1" "$2" "$here" 2 /tmp/s16ab
