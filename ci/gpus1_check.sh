#!/usr/bin/env bash
# Issue 33's one-GPU check on the lent H200: the same plan part measured twice in one call, first as
# today's run (one process) and then through the worker pool (--gpus 1: a spawned worker on GPU 0), into
# one scratch store; `compare` then lists every case with time B / time A. Same cases and ratios within
# the lab's noise (+-1% median, up to +-6%) is the pass. Writes $OUT/gpus1/<gpu>/<nb>.jsonl, $OUT/gpus1.log.
# Usage (device, repo root): GLUON_LAB_GIT_COMMIT=<sha> [NB=04-warp-specialization PARTS=gemm-shapes] bash ci/gpus1_check.sh
set -uo pipefail
export PYTHONUNBUFFERED=1 TQDM_MININTERVAL=30
OUT=${OUT:-/tmp/out}
NB=${NB:-04-warp-specialization}
PARTS=${PARTS:-gemm-shapes}
D=$OUT/gpus1
mkdir -p "$D"
rc=0
for how in "" "--gpus 1"; do
  t0=$(date +%s)
  python3 -m gluon_lab bench "$NB" --quick --parts "$PARTS" --results-dir "$D" $how > "$OUT/gpus1-bench.log" 2>&1
  st=$?; [ "$st" = 0 ] || rc=1
  echo "bench $NB --quick --parts $PARTS $how: exit $st after $(( $(date +%s) - t0 )) s" | tee -a "$OUT/gpus1.log"
  tail -n 5 "$OUT/gpus1-bench.log" | tee -a "$OUT/gpus1.log"
done
rm -f "$OUT/gpus1-bench.log"
SLUG=$(python3 -c "import torch; from gluon_lab.device import gpu_slug; print(gpu_slug(torch.cuda.get_device_name()))")
python3 -m gluon_lab compare "$NB" previous newest --all --gpu "$SLUG" --results-dir "$D" 2>&1 | tee -a "$OUT/gpus1.log" || rc=1
exit $rc
