#!/bin/bash
cd /tmp/s21/starts/wt
. /work/main/.venv/bin/activate
export HF_HUB_OFFLINE=1 PYTHONPATH=/tmp/s21/starts/wt STARTTRACE_DIR=/tmp/s21/starts/trace/quiet${1:-}
mkdir -p $STARTTRACE_DIR
python /tmp/s21/starts/quiet.py /tmp/s21/starts/quiet_run${1:-}
echo "rc=$?"
