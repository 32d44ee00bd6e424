#!/bin/bash
# Session 22: the 10x step through the real stack before and after the policy skips the upscale delay while the SLO
# breaks (breaking_upscale_delay_s 0), interleaved (A B A B A B), our policy only:
#   git worktree add /tmp/wt-s22-a <before>; git worktree add /tmp/wt-s22-b <after>
#   bash results/spike/urgent_s22/ab.sh /tmp/wt-s22-a /tmp/wt-s22-b
set -u
here=${3:-$(cd "$(dirname "$0")" && pwd)}  # 3rd argument: where the results go (default: here)
bash "$(dirname "$0")/../ab_step.sh" "$1" "$2" "$here" "${4:-3}" /tmp/urgent-ab
