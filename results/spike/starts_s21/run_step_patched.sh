#!/bin/bash
cd /tmp/s21/starts/wt
. /work/main/.venv/bin/activate
export HF_HUB_OFFLINE=1 PYTHONPATH=/tmp/s21/starts/wt STARTTRACE_DIR=/tmp/s21/starts/trace/step_patched
mkdir -p $STARTTRACE_DIR
date -u +%s.%N > /tmp/s21/starts/step_run_patched.began
python -m bench spike --shape step --mode engine_load --out /tmp/s21/starts/step_run_patched --no-progress
echo "rc=$?"
date -u +%s.%N > /tmp/s21/starts/step_run_patched.ended
