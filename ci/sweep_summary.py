"""Summarize a 01-tma-caching sweep (records under a results dir): best configs per N and the
median effect of each boolean knob. Used on the GPU machine to print a short table last."""
import collections
import json
import sys
from pathlib import Path

rows = [json.loads(l) for p in Path(sys.argv[1]).rglob("01-tma-caching.jsonl") for l in open(p)]
by_n = collections.defaultdict(list)
for r in rows:
    c = r["config"]
    if c.get("study") == "sweep" and r.get("ms_median"):
        by_n[r["shape"]["N"]].append((r["ms_median"], r["sol_datasheet_pct"], c, r["passed"]))
bad = [r for r in rows if r.get("passed") is False]
for N, v in sorted(by_n.items()):
    v.sort(key=lambda t: t[0])
    print(f"N={N}: {len(v)} configs")
    for ms, sol, c, ok in v[:5]:
        print(f"   {ms * 1e3:8.2f} us {sol:5.1f}% nw={c['num_warps']} R={c['rows_per_cta']} tma_store={c['tma_store']} "
              f"one_box={c['one_box']} param_tma={c['param_tma']} ok={ok}")
    for k in ("tma_store", "one_box", "param_tma"):
        t = sorted(x[0] for x in v if x[2][k])
        f = sorted(x[0] for x in v if not x[2][k])
        if t and f:
            print(f"   {k}: median {t[len(t) // 2] * 1e3:.2f} us (True) vs {f[len(f) // 2] * 1e3:.2f} us (False)")
print(f"{len(rows) - len(bad)} passed, {len(bad)} failed")
