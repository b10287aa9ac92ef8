#!/usr/bin/env bash
# Build an importable copy of gluon_lab as it was at COMMIT, renamed gluon_lab_old, under .old/
# (ignored; carry it to the device), so ci/compare_old.py can time old and new kernels side by
# side in one process. Usage: bash ci/old_package.sh [COMMIT]   (default: 5938527, before the redesign)
set -euo pipefail
commit=${1:-5938527}
cd "$(dirname "$0")/.."
rm -rf .old && mkdir -p .old
git archive "$commit" gluon_lab | tar -x -C .old
mv .old/gluon_lab .old/gluon_lab_old
grep -rl "gluon_lab" .old/gluon_lab_old | xargs sed -i 's/\bgluon_lab\b/gluon_lab_old/g'
echo "$commit" > .old/COMMIT
echo ".old/gluon_lab_old from $commit"
