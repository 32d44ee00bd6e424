#!/bin/bash
# Session 17: the 10x step through the real stack before (1c1ad01) and after the likely tier's headroom under
# 'reject' (6b127e8), interleaved (A B A B), each tree from its own worktree, our policy only, by session
# 16's script with this folder for results:
#   git worktree add /tmp/wt-s17-lb 1c1ad01; git worktree add /tmp/wt-s17-la 6b127e8
#   bash results/spike/likely_ab_s17/ab.sh /tmp/wt-s17-lb /tmp/wt-s17-la
here=$(cd "$(dirname "$0")" && pwd)
exec bash "$here/../gate_ab_s16/ab.sh" "$1" "$2" "$here"
