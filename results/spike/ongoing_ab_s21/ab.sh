#!/bin/bash
# Session 21: the 10x step through the real stack with the 8B's max_ongoing_requests 4 (30e793c) and 2 (its batch
# slots: 30e793c with sim/spike_fleet.py edited), interleaved (A B A B), our policy only:
#   git worktree add /tmp/wt-s21-c 30e793c; git worktree add /tmp/wt-s21-d 30e793c (then the edit)
#   bash results/spike/ongoing_ab_s21/ab.sh /tmp/wt-s21-c /tmp/wt-s21-d
set -u
here=${3:-$(cd "$(dirname "$0")" && pwd)}  # 3rd argument: where the results go (default: here)
bash "$(dirname "$0")/../ab_step.sh" "$1" "$2" "$here" 2 /tmp/ongoing-ab
