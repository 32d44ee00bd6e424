#!/bin/bash
# Session 17: the 10x step through the real stack before (d62efb0) and after the slot wait's spread (70025a8),
# interleaved (A B A B), each tree from its own worktree, our policy only, by session 16's script with this folder
# for results:
#   git worktree add /tmp/wt-s17-gb d62efb0; git worktree add /tmp/wt-s17-ga 70025a8
#   bash results/spike/spread_ab_s17/ab.sh /tmp/wt-s17-gb /tmp/wt-s17-ga
here=$(cd "$(dirname "$0")" && pwd)
exec bash "$here/../gate_ab_s16/ab.sh" "$1" "$2" "$here"
