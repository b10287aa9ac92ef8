"""Notebook 00, section "variant='auto' on held-out shapes" (part auto-check, gluon_lab.holdout).

Per cell (one run, every variant through the public API): what auto chose, its time, the fastest
gluon-lab variant's, eager torch's. "auto / best" is best ms / auto ms (1.0: auto is as fast as the
fastest gluon-lab variant; a cell where auto ran that same variant reads run-to-run noise), "auto /
torch" is torch ms / auto ms.

Kernel-facing: table_seed() reads gluon_lab/selection.json (the committed table); todays_draw() asks
gluon_lab.holdout (the plans' shapes and the table's cells excluded) for the cells today's code draws.
"""
from __future__ import annotations

import json
import math

from . import common as cm

STUDY = "auto-check"
TARGETS = {"near": 0.97, "share": 0.95, "floor": 0.90, "torch": 0.98}
SHORT = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


def table_seed():
    """The committed selection table's seed (None without a table)."""
    from .. import selection
    return selection.load_table().get("seed")


def holdout_records(df):
    """The newest auto-check run's records (empty when there is none)."""
    if not len(df):
        return df.copy()
    d = df[df["config_key"].str.contains(f'"study": "{STUDY}"', regex=False)]
    if not len(d):
        return d.copy()
    return d[d["run_id"] == d.sort_values("timestamp")["run_id"].iloc[-1]].copy()


def _shape(s: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in s.items())


def holdout_table(df):
    """One row per cell of the newest check: op, dtype, shape, chosen, ms of auto / best / torch, the two
    ratios, whether auto ran the best variant itself. Empty when there is no check."""
    import pandas as pd
    d = holdout_records(df)
    rows = []
    if not len(d):
        return pd.DataFrame()
    d = d.assign(_s=d["shape"].map(lambda s: json.dumps(s, sort_keys=True)))
    for (op, dt, s), g in d.groupby(["op", "dtype", "_s"], sort=True):
        by = {r.variant: r for r in g.itertuples()}
        a, t = by.get("auto"), by.get("torch")
        ours = {v: r for v, r in by.items() if v not in ("auto", "torch") and r.passed and not cm.is_missing(r.ms_median)}
        best = min(ours, key=lambda v: ours[v].ms_median) if ours else None
        ok = a is not None and bool(a.passed) and not cm.is_missing(a.ms_median)
        chosen = (a.config or {}).get("chosen") if a is not None else None
        rows.append({"op": op, "dtype": SHORT.get(dt, dt), "shape": _shape(json.loads(s)), "chosen": chosen,
                     "auto ms": a.ms_median if ok else math.nan, "best": best,
                     "best ms": ours[best].ms_median if best else math.nan,
                     "torch ms": t.ms_median if t is not None and t.passed else math.nan,
                     "auto / best": ours[best].ms_median / a.ms_median if ok and best else math.nan,
                     "auto / torch": t.ms_median / a.ms_median if ok and t is not None and t.passed else math.nan,
                     "same kernel": chosen == best, "auto passed": ok,
                     "note": "" if ok else (getattr(a, "notes", "") or "auto not measured")[:160],
                     "seed": (a.config or {}).get("table_seed") if a is not None else None})
    return pd.DataFrame(rows)


def holdout_summary(t):
    """Per (op, dtype): cells, auto / best min and geomean, auto / torch min, how often auto ran torch (None
    without a check)."""
    import pandas as pd
    if not len(t):
        return None
    rows = []
    for (op, dt), g in t.groupby(["op", "dtype"], sort=False):
        b, tt = g["auto / best"].dropna(), g["auto / torch"].dropna()
        rows.append({"op": op, "dtype": dt, "cells": len(g),
                     "auto / best min": b.min() if len(b) else math.nan,
                     "auto / best geomean": cm.geomean(b) if len(b) else math.nan,
                     "auto / torch min": tt.min() if len(tt) else math.nan,
                     "auto ran torch": int((g["chosen"] == "torch").sum()),
                     "failed": int((~g["auto passed"]).sum())})
    return pd.DataFrame(rows).round(3)


def holdout_targets(t):
    """The issue's three targets on the table: (target, measured, met); None without a check."""
    import pandas as pd
    if not len(t):
        return None
    b, tt = t["auto / best"].dropna(), t["auto / torch"].dropna()
    near, floor, vt = TARGETS["near"], TARGETS["floor"], TARGETS["torch"]
    share = float((b >= near).mean()) if len(b) else math.nan
    failed = int((~t["auto passed"]).sum())
    rows = [(f"auto ≥ {near}× the best gluon-lab variant in ≥ {TARGETS['share']:.0%} of cells",
             f"{(b >= near).sum()}/{len(b)} cells ({share:.1%})", share >= TARGETS["share"]),
            (f"auto ≥ {floor}× the best gluon-lab variant in every cell", f"worst {b.min():.3f}× ({_worst(t, 'auto / best')})",
             bool((b >= floor).all())),
            (f"auto ≥ {vt}× eager torch in every cell", f"worst {tt.min():.3f}× ({_worst(t, 'auto / torch')})",
             bool((tt >= vt).all())),
            ("auto passes the float64 check in every cell", f"{failed} failed of {len(t)}", failed == 0)]
    return pd.DataFrame(rows, columns=["target", "measured", "met"])


def _worst(t, col) -> str:
    r = t.loc[t[col].idxmin()]
    return f"{r['op']} {r['dtype']} {r['shape']}: auto ran {r['chosen']}, best {r['best']}"


def misses(t, below: float = TARGETS["near"]):
    """The cells under `below` x the best (or under the torch floor), worst first (None without a check)."""
    if not len(t):
        return None
    m = t[(t["auto / best"] < below) | (t["auto / torch"] < TARGETS["torch"]) | ~t["auto passed"]]
    return m.sort_values("auto / best")[["op", "dtype", "shape", "chosen", "best", "auto / best", "auto / torch",
                                         "same kernel", "note"]].round(3)


def todays_draw(table_seed) -> set:
    """(op, shape, dtype) keys of the cells today's code draws for the table's seed (kernel-facing: the shapes
    it excludes come from gluon_lab.holdout.exclude_keys)."""
    from .. import experiments, holdout
    return {holdout.key(*c) for c in holdout.draw(table_seed, holdout.exclude_keys(experiments.plan_shapes()))}


def seed_note(df, table_seed, drawn: set | None = None) -> str | None:
    """A note when the newest check is not today's: it read another table than the committed one, or (drawn:
    todays_draw(table_seed)) its cells are not what today's code draws for that seed (the sampler or a plan
    changed). Its numbers then check something else: re-run the part."""
    from .. import holdout
    d = holdout_records(df)
    if not len(d):
        return None
    run = cm.run_short(d["run_id"].iloc[0])
    fix = "re-run `python -m gluon_lab bench 00-ceilings --parts auto-check`."
    seeds = {(c or {}).get("table_seed") for c in d["config"]}
    if seeds != {table_seed}:
        return (f"**Stale check:** run {run} checked the table with seed {sorted(seeds)}; the committed table has "
                f"seed {table_seed} (its draw is another set of shapes): {fix}")
    if drawn is not None and {holdout.key(r.op, r.shape, r.dtype) for r in d.itertuples()} != drawn:
        return (f"**Stale check:** run {run}'s cells are not what today's code draws for seed {table_seed} (the "
                f"sampler or a notebook plan changed since): {fix}")
    return None


def takeaways(t) -> list[str]:
    if not len(t):
        return []
    b, tt = t["auto / best"].dropna(), t["auto / torch"].dropna()
    out = [f"On {len(t)} held-out cells (seed {t['seed'].iloc[0]}), auto reached {cm.geomean(b):.3f}× the fastest "
           f"gluon-lab variant (geomean; worst {b.min():.3f}×) and {cm.geomean(tt):.3f}× eager torch (worst {tt.min():.3f}×)."]
    same = t[t["same kernel"]]
    if len(same):
        out.append(f"In {len(same)} of {len(t)} cells auto ran the fastest variant itself; there auto / best reads "
                   f"the run-to-run noise of two timings of one kernel ({same['auto / best'].min():.3f}–"
                   f"{same['auto / best'].max():.3f}×).")
    ran_torch = t[t["chosen"] == "torch"]
    if len(ran_torch):
        out.append(f"Auto ran eager torch in {len(ran_torch)} cells ({', '.join(sorted(set(ran_torch['op'])))}).")
    return out
