#!/bin/bash
# Session 21: the 10x step through the real stack before and after the replica start changes (the warm pool's heap
# frozen at prestart, the routing tasks woken when a replica is added), interleaved (A B A B A B), our policy only:
#   git worktree add /tmp/wt-s21-a 9703fba; git worktree add /tmp/wt-s21-b <the change>
#   bash results/spike/starts_ab_s21/ab.sh /tmp/wt-s21-a /tmp/wt-s21-b
set -u
here=${3:-$(cd "$(dirname "$0")" && pwd)}  # 3rd argument: where the results go (default: here)
bash "$(dirname "$0")/../ab_step.sh" "$1" "$2" "$here" 3 /tmp/starts-ab
