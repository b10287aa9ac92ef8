#!/usr/bin/env bash
# One batch on the lent H200 (device tool): the whole GPU test suite, then a notebook's measurement plan.
# Usage (on the device, repo root as cwd):  [REFRESH=all|"NB ..."] bash ci/h200_batch.sh [NOTEBOOK...]
# The GPU suite is a record: every `pytest -m gpu` test, `-n 8` (pytest-xdist; GPU_WORKERS), never a subset (SKIP_GPU_TESTS=1
# runs none); its result goes to results/<gpu-slug>/gpu-tests.json (ci/gpu_tests_record.py, from pytest's
# JUnit XML): commit, time, GPU, torch / triton, counts, failed and skipped ids. Commit that file:
# tests/test_gpu_tests_record.py (CPU) fails when it is older than the kernels or records a failure.
# Writes under $OUT: gpu.txt, gpu-tests.log, results/<gpu-slug>/gpu-tests.json, bench.log (every notebook's,
# appended: one file however many notebooks), results/<gpu-slug>/<nb>.jsonl (+ the timeline JSON of 03/04 when
# PARTS has 'timeline')
# and, with SANITIZE="kernel ...", results/<gpu-slug>/sanitizer.jsonl. The device tool brings back at most 8 files and the
# rest is lost with the call: count them before a call (LOGS=0 writes no gpu.txt / bench.log / gpu-tests.log,
# the logs still print).
# COMPARE=1: first ci/compare_old.py (old vs new kernels in one process; needs .old/ from
# ci/old_package.sh carried) -> results/<gpu>/redesign-compare.jsonl + compare.log.
# GLUON_LAB_EXCLUDE_VARIANTS=a,b leaves those variants out of the plans (time-limited calls).
set -uo pipefail
export PYTHONUNBUFFERED=1 TQDM_MININTERVAL=30
OUT=${OUT:-/tmp/out}
# The device's copy of the tree carries the last *landed* commit in .git, not the commit being measured:
# records must name the commit the caller committed and copied (git rev-parse HEAD on the caller's side).
if [ -z "${GLUON_LAB_GIT_COMMIT:-}" ]; then
  echo "h200_batch.sh: set GLUON_LAB_GIT_COMMIT to the full sha of the committed tree being measured" >&2
  exit 2
fi
if [ -n "${GPU_TESTS:-}${PYTEST_ARGS:-}" ]; then  # a subset (or -x) would make a record of part of the suite
  echo "h200_batch.sh: GPU_TESTS / PYTEST_ARGS are gone: the batch runs the whole GPU suite (pytest -m gpu -n 8) and" \
       "records it in results/<gpu>/gpu-tests.json; SKIP_GPU_TESTS=1 runs none" >&2
  exit 2
fi
mkdir -p "$OUT/results"
LOGDIR="$OUT"; [ "${LOGS:-1}" = 0 ] && LOGDIR=$(mktemp -d)  # LOGS=0: logs off $OUT (they still print)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv | tee "$LOGDIR/gpu.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$LOGDIR/gpu.txt"
rc=0
if [ "${SKIP_GPU_TESTS:-0}" != 1 ]; then
  SLUG=$(python3 -c "import torch; from gluon_lab.device import gpu_slug; print(gpu_slug(torch.cuda.get_device_name()))") \
    || { echo "h200_batch.sh: no GPU name from torch (see above)" >&2; exit 2; }
  mkdir -p "$OUT/results/$SLUG"
  JUNIT=$(mktemp -d)/gpu-tests.xml  # off $OUT: the device tool brings back only a few files
  # GPU_WORKERS: xdist workers (default 8, for an H200's 141 GB; the norm tests take ~14 GB a worker, so an 80 GB
  # H100 runs the same whole suite at GPU_WORKERS=4: at 5 one worker reached 26 GB and a test ran out of memory,
  # H100 run of 2026-12-07)
  GPU_WORKERS=${GPU_WORKERS:-8}
  [[ "$GPU_WORKERS" =~ ^[1-9][0-9]?$ ]] || { echo "h200_batch.sh: GPU_WORKERS must be a whole number 1..99, not '$GPU_WORKERS'" >&2; exit 2; }
  GPU_PYTEST=(python3 -m pytest -q -m gpu tests -n "$GPU_WORKERS" -p no:cacheprovider)  # -q once: -qq prints no "N passed" line
  t0=$(date +%s)
  timeout "${GPU_TEST_TIMEOUT:-900}" "${GPU_PYTEST[@]}" -o junit_family=xunit1 --junitxml "$JUNIT" 2>&1 \
    | tail -n 60 | tee "$LOGDIR/gpu-tests.log"
  pst=${PIPESTATUS[0]}
  [ "$pst" = 0 ] || rc=1
  echo "GPU tests: pytest exit $pst after $(( $(date +%s) - t0 )) s"
  # the record, from pytest's own XML (none when pytest did not finish, e.g. killed by the timeout: exit 124)
  python3 ci/gpu_tests_record.py "$JUNIT" "$OUT/results/$SLUG/gpu-tests.json" --commit "$GLUON_LAB_GIT_COMMIT" \
    --exit-code "$pst" --command "${GPU_PYTEST[*]}" || rc=1
  # a GPU run passes only if GPU tests really ran: pytest's summary must count passed tests (a few
  # documented skips, e.g. configs that do not fit in shared memory, are expected; tests/conftest.py
  # makes "-m gpu" without a usable GPU an error of its own)
  if ! grep -Eq "[1-9][0-9]* passed" "$LOGDIR/gpu-tests.log"; then
    echo "GPU tests: no test passed on the GPU machine (see gpu-tests.log)"; rc=1
  fi
fi
if [ "${COMPARE:-0}" = 1 ]; then
  PYTHONPATH=".old:${PYTHONPATH:-}" python3 ci/compare_old.py "$OUT/results" ${QUICK:+--quick} > "$OUT/compare.log" 2>&1 || rc=1
  tail -n 60 "$OUT/compare.log"
fi
if [ -n "${REFRESH:-}" ]; then  # REFRESH="NOTEBOOK ..." or "all": re-measure what is stale or missing (ci/h200_refresh.sh,
  # resumable on a warm machine; BUDGET_S caps it); its records and refresh.log land under $OUT like the plans'
  [ "$REFRESH" = all ] && REFRESH=""
  bash ci/h200_refresh.sh $REFRESH || rc=1
fi
for nb in "$@"; do
  python3 -m gluon_lab bench "$nb" --results-dir "$OUT/results" ${QUICK:+--quick} ${PARTS:+--parts $PARTS} > "$LOGDIR/bench-$nb.log" 2>&1 || rc=1
  tail -n 120 "$LOGDIR/bench-$nb.log"
  cat "$LOGDIR/bench-$nb.log" >> "$LOGDIR/bench.log" && rm -f "$LOGDIR/bench-$nb.log"
done
if [ -n "${SANITIZE:-}" ]; then  # e.g. SANITIZE="pipelined-norm ws-gemm" (names: ci/sanitize.py CASES)
  # under the GPU's slug (results/h200/sanitizer.jsonl), where `gluon_lab adopt` and the 03/04 pages look
  SLUG=${SLUG:-$(python3 -c "import torch; from gluon_lab.device import gpu_slug; print(gpu_slug(torch.cuda.get_device_name()))")}
  mkdir -p "$OUT/results/$SLUG"
  python3 ci/sanitize.py "$OUT/results/$SLUG/sanitizer.jsonl" $SANITIZE > /dev/null 2>&1 || rc=1
  cut -c1-200 "$OUT/results/$SLUG/sanitizer.jsonl"
fi
exit $rc
