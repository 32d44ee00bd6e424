#!/usr/bin/env bash
# Session 13, before (eafed30) and after (this stop's HEAD), interleaved in one sitting on this 2-core CPU: the hf
# engine (--quick, 16 streams, 128 requests: eight rounds on both trees) and the emulated 8B at 64 streams.
set -u
d=/work/main/results/streaming/session13/ab-final
for i in 1 2; do
  (cd /tmp/wt-before && PYTHONPATH=/tmp/wt-before python -c "import bench, engines.config as c; print(bench.__file__, c.HFEngineConfig.model_fields[\"engine_process\"].default)") >> $d/runs.txt 2>&1
  for side in before after; do
    tree=/work/main; [ $side = before ] && tree=/tmp/wt-before
    (cd $tree && PYTHONPATH=$tree python -m bench overhead --quick --concurrency 16 --num-requests 128 --paths direct stack \
      --json $d/$i-$side-hf.json > $d/$i-$side-hf.log 2>&1)
    (cd $tree && PYTHONPATH=$tree python -m bench overhead --model emulated:h200-llama-3.1-8b-int4 --concurrency 64 --paths direct stack \
      --json $d/$i-$side-emulated.json > $d/$i-$side-emulated.log 2>&1)
  done
done
