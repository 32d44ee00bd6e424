#!/bin/bash
# Session 16: the 10x step through the real stack before and after the predictive term's window gate (b1b135c),
# interleaved (A B A B), each tree from its own worktree, our policy only:
#   git worktree add /tmp/wt-gate-a b1b135c~1; git worktree add /tmp/wt-gate-b b1b135c
#   bash results/spike/gate_ab_s16/ab.sh /tmp/wt-gate-a /tmp/wt-gate-b
set -u
here=${3:-$(cd "$(dirname "$0")" && pwd)}  # 3rd argument: where the results go (default: here)
bash "$(dirname "$0")/../ab_step.sh" "$1" "$2" "$here" 2 /tmp/gate-ab
