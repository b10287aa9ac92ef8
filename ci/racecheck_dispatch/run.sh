#!/usr/bin/env bash
# On the H200 (device tool): build dispatch.cu and run racecheck / synccheck on each variant; the log
# goes to $OUT/racecheck-dispatch.log (commit it as results/<gpu>/racecheck-dispatch.log).
# dispatch.cu is Triton 3.6.0's warp_specialize dispatch protocol (ConvertWarpSpecializeToLLVM.cpp) in
# ten lines: 4 "default" warps write a state word and 4 "worker" warps, parked in a loop on
# barrier.sync 1 (all 256 threads), read their state byte; variant bits: 1 = one partial barrier
# (bar.sync 0,128, the pre-fork mbarrier-init barriers of every Gluon WS kernel) before the first
# state write; 2 = a partial barrier after the fork instead; 4 = the partial barrier on id 2;
# 8 = the dispatch loop on barrier 0 (9: mixes thread counts on barrier 0, illegal).
set -u
OUT=${OUT:-/tmp/out}
cd "$(dirname "$0")"
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
nvcc -arch=sm_90 -lineinfo -o /tmp/dispatch dispatch.cu || exit 1
{ $CS --version | tail -1
  for v in 0 1 2 3 5 8 9; do echo "== racecheck v=$v"; timeout 60 $CS --tool racecheck /tmp/dispatch $v 2>&1 | grep -vE "^=+ *$|COMPUTE-SANITIZER"; done
  for v in 0 1; do echo "== synccheck v=$v"; timeout 60 $CS --tool synccheck /tmp/dispatch $v 2>&1 | grep -E "SUMMARY|rc="; done
} | tee "$OUT/racecheck-dispatch.log"
