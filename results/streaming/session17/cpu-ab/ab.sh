#!/bin/bash
# Session 17: the last-step-before-due send rule (a05c3aa), before (bcfe17c) and after, the bar command interleaved
# (before, after, before, after), each from its own worktree, by session 16's script with this folder for results:
#   git worktree add /tmp/wt-s17-before bcfe17c; git worktree add /tmp/wt-s17-after a05c3aa
#   bash results/streaming/session17/cpu-ab/ab.sh /tmp/wt-s17-before /tmp/wt-s17-after
here=$(cd "$(dirname "$0")" && pwd)
exec bash "$here/../../session16/cpu-ab/ab.sh" "$1" "$2" "$here"
