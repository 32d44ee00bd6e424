#!/bin/bash
# Session 25, the whole change from session 24's start (e6607dd) against this session's end, #21's bar command
# interleaved on this CPU (21:33-21:42 UTC):
#   git worktree add /tmp/wt-s25-e6607dd e6607dd; git worktree add /tmp/wt-s25-head HEAD
#   bash results/streaming/session25/cpu-ab/ab.sh /tmp/wt-s25-e6607dd /tmp/wt-s25-head
#   python results/streaming/ab_table.py results/streaming/session25/cpu-ab
# OUT must be absolute: ab_bar.sh runs each side from its own worktree.
set -u
here=$(cd "$(dirname "$0")" && pwd)
bash "$(dirname "$0")/../../ab_bar.sh" "$1" "$2" "$here" "${3:-2}" /tmp/s25ab
