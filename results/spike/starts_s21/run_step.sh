#!/bin/bash
# The helper's instrumented step run in its worktree (/tmp/s21/starts/wt): `run_step.sh` (step_run, traces in
# trace/step) or `run_step.sh step_run_patched` (the patched tree's run, traces in trace/step_patched).
name=${1:-step_run}
cd /tmp/s21/starts/wt
. /work/main/.venv/bin/activate
export HF_HUB_OFFLINE=1 PYTHONPATH=/tmp/s21/starts/wt STARTTRACE_DIR=/tmp/s21/starts/trace/step${name#step_run}
mkdir -p $STARTTRACE_DIR
date -u +%s.%N > /tmp/s21/starts/$name.began
python -m bench spike --shape step --mode engine_load --out /tmp/s21/starts/$name --no-progress
echo "rc=$?"
date -u +%s.%N > /tmp/s21/starts/$name.ended
