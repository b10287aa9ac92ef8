#!/usr/bin/env bash
# Refresh on the lent H200: re-measure what today's code has made stale or never measured
# (python -m gluon_lab refresh: due cells, whole, same-run), resumable across the calls of one warm machine.
# Usage (device, repo root):  GLUON_LAB_GIT_COMMIT=<sha> [BUDGET_S=500] bash ci/h200_refresh.sh [NOTEBOOK...]
# Records go to $REFRESH_DIR (default /tmp/gluon-lab-refresh: outside $OUT, which every call empties, so a
# later call on the same warm machine resumes there) and are copied to $OUT/results/ at the end of each
# call, with the log as $OUT/refresh.log (at most 8 files come back: 6 stores + the log fit). Back here:
# `python -m gluon_lab adopt <the files' folder>`, then `launches` and `select`.
set -uo pipefail
export PYTHONUNBUFFERED=1 TQDM_MININTERVAL=30
OUT=${OUT:-/tmp/out}
DIR=${REFRESH_DIR:-/tmp/gluon-lab-refresh}
if [ -z "${GLUON_LAB_GIT_COMMIT:-}" ]; then
  echo "h200_refresh.sh: set GLUON_LAB_GIT_COMMIT to the full sha of the committed tree being measured" >&2
  exit 2
fi
mkdir -p "$DIR" "$OUT/results"
python3 -m gluon_lab refresh "$@" --results-dir "$DIR" ${BUDGET_S:+--budget-s "$BUDGET_S"} > "$OUT/refresh.log" 2>&1
rc=$?
grep -v " cases, [0-9]* s, ~" "$OUT/refresh.log" | tail -n 40
cp -r "$DIR"/. "$OUT/results/"
ls -l "$OUT/results"/*/ 2>/dev/null
exit $rc
