#!/bin/bash
# Session 21: the 10x step through the real stack before and after the router counts replicas about to serve
# (30e793c), on top of the replica start changes (4ef0a72), interleaved (A B A B A B), our policy only:
#   git worktree add /tmp/wt-s21-b2 4ef0a72; git worktree add /tmp/wt-s21-c 30e793c
#   bash results/spike/starting_ab_s21/ab.sh /tmp/wt-s21-b2 /tmp/wt-s21-c
set -u
here=${3:-$(cd "$(dirname "$0")" && pwd)}  # 3rd argument: where the results go (default: here)
bash "$(dirname "$0")/../ab_step.sh" "$1" "$2" "$here" 3 /tmp/starting-ab
