#!/usr/bin/env bash
# The held-out check of variant="auto" on the lent H200, after a refresh on the same warm machine:
# adopt the refresh's records ($REFRESH_DIR, default /tmp/gluon-lab-refresh) into this copy of results/,
# bring the launch hashes and the selection table up to date (as `adopt`, `launches`, `select` do here), then
# measure 00-ceilings' part auto-check against that table. The device's copy of results/ is replaced by the
# caller's tree on every call, so each call re-adopts; the caller adopts the same records, and its `select`
# gives the same table (the seed in $OUT/selection.json says which table the check read).
# Usage (device, repo root):  GLUON_LAB_GIT_COMMIT=<sha> [PARTS=auto-check] bash ci/h200_auto_check.sh
# Writes under $OUT: results/h200/00-ceilings.jsonl (the check), selection.json, auto-check.log.
set -uo pipefail
export PYTHONUNBUFFERED=1 TQDM_MININTERVAL=30
OUT=${OUT:-/tmp/out}
DIR=${REFRESH_DIR:-/tmp/gluon-lab-refresh}
if [ -z "${GLUON_LAB_GIT_COMMIT:-}" ]; then
  echo "h200_auto_check.sh: set GLUON_LAB_GIT_COMMIT to the full sha of the committed tree being measured" >&2
  exit 2
fi
mkdir -p "$OUT/results"
{
  if [ -d "$DIR" ]; then python3 -m gluon_lab adopt "$DIR"; fi
  python3 -m gluon_lab launches --jobs 16 | tail -n 3
  python3 -m gluon_lab select
  python3 -c "import json; print('table seed', json.load(open('gluon_lab/selection.json'))['seed'])"
} > "$OUT/auto-check.log" 2>&1
cp gluon_lab/selection.json "$OUT/selection.json"
CHECK_DIR=$(mktemp -d)
python3 -m gluon_lab bench 00-ceilings --parts "${PARTS:-auto-check}" --results-dir "$CHECK_DIR" 2>&1 \
  | grep -v " cases, [0-9]* s, ~" | tail -n 25 | tee -a "$OUT/auto-check.log"
rc=${PIPESTATUS[0]}
cp -r "$CHECK_DIR"/. "$OUT/results/"
tail -n 8 "$OUT/auto-check.log"
exit $rc
