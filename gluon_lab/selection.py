"""variant="auto": a selection model over the committed records; no I/O on the call path.

The table (``python -m gluon_lab select`` = ``build`` + ``write`` -> ``gluon_lab/selection.json``)
holds the evidence, per GPU and op:

* ``cells``: one per (run, shape, dtype): the median ms of eager torch and of every gluon-lab variant
  measured there at the config auto runs (passing, current records of any run; no study's override; the
  cells of held-out checks a later run has superseded, ``superseded_checks``, included).
* ``always``: the gluon-lab variants that beat eager torch in every cell where both were measured,
  fastest op-wide first (the op's default, and the no-eager-torch rule below).
* ``seed``: a hash of the evidence and of the model's rules (``model_source``), so the held-out check
  (notebook 00, ``auto-check``) draws new shapes each time either changes and the rules cannot be fitted to
  one draw.

The model (``rank``; ``choose`` runs it once per call signature, then it is one dict lookup):

1. Where the call sits: ``spec.bucket(shape, itemsize)`` -> coordinates (log2 sizes in steps that matter
   for the op: row bytes and rows; group bytes and groups; M / N / K; tokens, heads, head bytes; the
   implicit GEMM's M / N / K and image size) and categories that must match (layout, filter, stride).
   A cell of another dtype sits DTYPE_STEP further: the same itemsize a little (fp16 reads bf16's
   cells), another itemsize more (fp32 reads bf16's cells at equal bytes where it has none of its own).
2. The MAX_CELLS nearest cells within CUTOFF are read, each weighing exp(-(d/h)^2 / 2), the bandwidth h the
   distance of the K_NEAR-th nearest cell (at least H_MIN).
3. Scores: a weighted two-way fit over the near cells, log ms[v, cell] = s[v] + b[cell], s[torch] = 0.
   b absorbs each cell's size and run (its clocks), so only same-run ratios carry evidence, and
   variants never measured together are compared through those measured with both.
4. The choice, among the variants whose check accepts the inputs: the lowest score, if it is MARGIN
   faster than torch; never eager torch while an eligible variant is in ``always``; where no eligible
   variant has a cell within NEAR, the op's default (``always``'s first eligible one, else torch).

It never picks a peer library or a compile-on-first-call baseline; "torch" where the GPU is not in the
table or the input is not on a CUDA device.
"""
from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

TABLE_PATH = Path(__file__).resolve().parent / "selection.json"
FALLBACK = "torch"
VERSION = 2
# A gluon-lab variant is chosen over torch only where it is predicted faster by more than run-to-run
# noise: repeated GEMM runs on the H200 moved same-shape ratios by 1-3% (03 vs 04 runs of 2026-12-01),
# so a 1% "win" would flip the choice between builds.
MARGIN = 0.98
CUTOFF = 4.0  # feature units: a cell further than this is not read
MAX_CELLS = 32  # the nearest cells read (the fit stays a few hundred rows: ~1 ms on the first call)
K_NEAR = 6  # the bandwidth: the distance of the K_NEAR-th nearest cell ...
H_MIN = 0.5  # ... at least this (half an octave of the dimension that matters most)
NEAR = 3.0  # a variant is scored only with a cell of its own within this; else the op's default decides (2.5 -> 3.0:
# leave-one-cell-out over the 2026-12-03 table, selection.cross_validate, lifted conv dgrad 0.897 -> 0.939 geomean, no op lower)
DTYPE_STEP = {"same": 0.0, "itemsize": 0.5, "other": 1.5}
# config keys that name a record's study / conditions, not a knob it overrode
STUDY_META = frozenset({"study", "heuristic", "sm_clock_mhz", "call", "table_seed", "chosen", "cudnn_benchmark"})
CHECK_STUDY = "auto-check"  # gluon_lab.holdout.STUDY

_table: dict | None = None
_decisions: dict = {}
_slugs: dict = {}
_prepared: dict = {}


# ----------------------------------------------------------------------------------------------
# building the table (report / bench time, never on the call path)

def _votes(df):
    """Records that may vote: passed, timed, current, the config auto runs (of any run: not only the newest)."""
    import dataclasses
    from . import registry, specs
    df = df[df["passed"].fillna(False).astype(bool) & df["ms_median"].notna() & df["op"].isin(specs.names())
            & (df["pattern"] != "ceiling") & (df["timer"] != "host-loop")]
    from . import currency
    df = currency.mark_stale(df, registry.current_hash)  # every current record: a case re-measured in a later run
    # leaves its older run's cell intact (the fit pairs records of one run only)
    df = df[~df["stale"]]
    learned = superseded_checks(df)
    keep = []
    for i, r in df.iterrows():
        cfg = r["config"] or {}
        if cfg.get("study") == CHECK_STUDY:
            if r["run_id"] not in learned:
                continue  # the newest check is the test of the table it read: it never votes in that table
        elif "study" in cfg and not (cfg.get("heuristic") or (r["variant"] == FALLBACK and not set(cfg) - STUDY_META)):
            continue  # a study's configs do not vote; its heuristic-marked cases and its plain torch cases do
        try:
            v = registry.get_variant(r["op"], r["variant"])
        except ValueError:
            continue
        if not (v.ours or r["variant"] == FALLBACK):
            continue
        if v.configure is not None:
            try:
                obj = v.resolve(dict(r["shape"]), r["dtype"])
                resolved = json.loads(json.dumps(dataclasses.asdict(obj)))
            except (ValueError, TypeError, KeyError):
                continue
            # a config field added after a record was measured is missing from it: the record ran its default
            defaults = json.loads(json.dumps({f.name: f.default for f in dataclasses.fields(obj)
                                              if f.default is not dataclasses.MISSING}))
            if any(cfg.get(k, defaults.get(k)) != val for k, val in resolved.items()):
                continue  # a record of an override (or of an older heuristic) does not speak for auto
        keep.append(i)
    return df.loc[keep]


def superseded_checks(df) -> set:
    """Run ids of held-out checks (study CHECK_STUDY) that later runs have superseded: some other run of the
    records started after the check. Such a check read a table that is gone (the evidence changed since),
    so its cells, every variant side by side at shapes no plan measures, become evidence; the check no run
    came after is the test of today's table and never votes in it (its draw excluded the evidence's shapes,
    holdout.exclude_keys)."""
    if not len(df):
        return set()
    is_check = df["config"].map(lambda c: (c or {}).get("study") == CHECK_STUDY)
    newest = max(str(r)[:16] for r in set(df["run_id"]))  # run ids begin with their start, 20261203T123615Z
    return {run for run in set(df.loc[is_check, "run_id"]) if str(run)[:16] < newest}


def _sig(x: float) -> float:
    return float(f"{x:.6g}")


def cells_of(df) -> dict:
    """{(gpu slug, op): [cell, ...]} from voting records: a cell is one run's variants at one shape and
    dtype, {"shape", "dtype", "run", "ms": {variant: ms}}, kept where it compares two or more variants."""
    from . import device
    out: dict = {}
    if not len(df):
        return out
    df = df.assign(_shape=df["shape"].map(lambda s: json.dumps(s, sort_keys=True)))
    for (gpu, op, dtype, run, shape), g in df.groupby(["gpu_name", "op", "dtype", "run_id", "_shape"], sort=True):
        ms: dict = {}
        for v, m in zip(g["variant"], g["ms_median"]):
            ms.setdefault(v, []).append(float(m))
        if len(ms) < 2:
            continue
        cell = {"shape": json.loads(shape), "dtype": dtype, "run": run,
                "ms": {v: _sig(sorted(m)[len(m) // 2]) for v, m in sorted(ms.items())}}
        out.setdefault((device.gpu_slug(gpu), op), []).append(cell)
    return out


def always_beats(cells) -> list[str]:
    """Gluon-lab variants faster than eager torch in every cell where both were measured (at least one),
    fastest first by their geomean ratio over those cells."""
    ratios: dict = {}
    for c in cells:
        t = c["ms"].get(FALLBACK)
        if t is None:
            continue
        for v, m in c["ms"].items():
            if v != FALLBACK:
                ratios.setdefault(v, []).append(m / t)
    geo = {v: math.exp(sum(map(math.log, r)) / len(r)) for v, r in ratios.items() if max(r) < 1.0}
    return sorted(geo, key=lambda v: (geo[v], v))


def build(results_dir) -> dict:
    from . import results
    stores = sorted(p for p in Path(results_dir).glob("*/*.jsonl") if p.name != "sanitizer.jsonl")  # not Records
    df = results.load(stores, on_error="raise", history=True)  # the newest passing current record may be archived
    if len(df):
        df = _votes(df)
    entries: dict = {}
    runs: dict = {}
    for (slug, op), cells in sorted(cells_of(df).items()):
        entries.setdefault(slug, {})[op] = {"cells": cells, "always": always_beats(cells)}
        runs.setdefault(slug, set()).update(c["run"] for c in cells)
    blob = json.dumps(entries, sort_keys=True).encode() + model_source().encode()
    return {"version": VERSION,
            "rule": "per op: same-run cells of eager torch and the gluon-lab variants (current, passing, the config "
                    "auto runs); a call ranks its eligible variants by a weighted fit over the cells near it "
                    f"(gluon_lab.selection): the lowest score if {MARGIN} x faster than torch, never torch while an "
                    "eligible variant beat it in every cell, the op's default where nothing is near",
            "model": model_params(),
            "seed": int(hashlib.sha256(blob).hexdigest()[:8], 16),
            "runs": {k: sorted(v) for k, v in sorted(runs.items())}, "entries": entries}


def model_params() -> dict:
    """The model's constants (the table records them; model_source hashes them)."""
    return {"margin": MARGIN, "cutoff": CUTOFF, "max_cells": MAX_CELLS, "k_near": K_NEAR, "h_min": H_MIN,
            "near": NEAR, "dtype_step": DTYPE_STEP}


def model_source() -> str:
    """The model's rules as code: its constants, the functions that rank (features, distance, fit, explain)
    and every spec's bucket. They enter the seed with the evidence, so a rule change alone draws a new
    held-out check (a check of the old rules says nothing about the new ones)."""
    import inspect
    from . import specs
    parts = [json.dumps(model_params(), sort_keys=True)]
    parts += [inspect.getsource(f) for f in (features, _dtype_step, distance, fit, explain)]
    for spec in sorted(specs.all_specs(), key=lambda s: s.name):
        if spec.bucket is not None:
            parts.append(f"{spec.name}: {inspect.getsource(spec.bucket)}")
    return "\n".join(parts)


def write(table: dict, path: Path = TABLE_PATH) -> Path:
    global _table
    from .results import atomic_write_text
    atomic_write_text(path, json.dumps(table, indent=1, sort_keys=True) + "\n")
    _table = None  # this process reads the new table on its next auto call
    _decisions.clear()
    _prepared.clear()
    from . import fastpath
    fastpath.clear()  # plans of variant="auto" calls replay the variant the old table chose
    return path


# ----------------------------------------------------------------------------------------------
# the model

def load_table(path: Path = TABLE_PATH) -> dict:
    global _table
    if _table is None:
        try:
            _table = json.loads(Path(path).read_text())
        except FileNotFoundError:
            _table = {"entries": {}}
    return _table


def features(spec, shape: dict, dtype: str) -> tuple:
    """(coordinates, categories) of a shape for the model (spec.bucket, see OpSpec)."""
    from .specs import ITEMSIZE
    f = spec.bucket(shape, ITEMSIZE[dtype])
    return (tuple(float(v) for v in f if not isinstance(v, str)), tuple(v for v in f if isinstance(v, str)))


def _entry(spec, slug: str) -> dict | None:
    """The op's table entry with each cell's features computed (once per table and op)."""
    table = load_table()
    hit = _prepared.get((slug, spec.name))
    if hit is None or hit[0] is not table:
        e = table.get("entries", {}).get(slug, {}).get(spec.name)
        if e is not None and spec.bucket is not None:
            e = dict(e, prepared=[(features(spec, c["shape"], c["dtype"]), c["dtype"], c) for c in e["cells"]])
        hit = _prepared[(slug, spec.name)] = (table, e)
    return hit[1]


def _dtype_step(a: str, b: str) -> float:
    from .specs import ITEMSIZE
    if a == b:
        return DTYPE_STEP["same"]
    return DTYPE_STEP["itemsize"] if ITEMSIZE[a] == ITEMSIZE[b] else DTYPE_STEP["other"]


def distance(fa: tuple, da: str, fb: tuple, db: str) -> float:
    """Distance of two (features, dtype) points; inf where a category differs."""
    (xa, ca), (xb, cb) = fa, fb
    if ca != cb or len(xa) != len(xb):
        return math.inf
    return math.sqrt(sum((p - q) ** 2 for p, q in zip(xa, xb)) + _dtype_step(da, db) ** 2)


def fit(near) -> tuple[dict, dict]:
    """Scores {variant: s} (log ms relative to eager torch) and evidence {variant: total weight} from
    [(weight, {variant: ms}), ...]: weighted least squares of log ms = s[variant] + b[cell], s[torch] = 0,
    over the variants connected to torch through cells that measured them together."""
    import numpy as np
    comp = {FALLBACK}
    grow = True
    while grow:  # the variants connected to torch: chained through cells
        grow = False
        for _, ms in near:
            if comp & ms.keys() and not ms.keys() <= comp:
                comp |= ms.keys()
                grow = True
    cells = [(w, {v: m for v, m in ms.items() if v in comp}) for w, ms in near if comp & ms.keys()]
    cells = [(w, ms) for w, ms in cells if len(ms) >= 2]
    evidence: dict = {}
    for w, ms in cells:
        for v in ms:
            evidence[v] = evidence.get(v, 0.0) + w
    vs = sorted(v for v in evidence if v != FALLBACK)
    if not vs:
        return {}, evidence
    col = {v: i for i, v in enumerate(vs)}
    rows, rhs = [], []
    for j, (w, ms) in enumerate(cells):
        sw = math.sqrt(w)
        for v, m in ms.items():
            r = np.zeros(len(vs) + len(cells))
            if v != FALLBACK:
                r[col[v]] = sw
            r[len(vs) + j] = sw
            rows.append(r)
            rhs.append(sw * math.log(m))
    sol = np.linalg.lstsq(np.array(rows), np.array(rhs), rcond=None)[0]
    return {v: float(sol[col[v]]) for v in vs}, evidence


def explain(spec, shape: dict, dtype: str, slug: str, eligible, skip: int | None = None) -> dict:
    """How the model ranks `eligible` (gluon-lab variant names whose check accepts the call; torch is
    always a candidate) at a shape: {"order": [...], "why": str, "scores", "evidence", "cells"}. skip:
    the index of a table cell to leave out (cross_validate)."""
    e = _entry(spec, slug)
    eligible = [v for v in eligible if v != FALLBACK]
    out = {"order": [FALLBACK], "scores": {}, "evidence": {}, "cells": 0}
    if e is None:
        out["why"] = "no evidence for this op on this GPU: eager torch"
        return out
    always = [v for v in e["always"] if v in eligible]
    f = features(spec, shape, dtype)
    by_d = sorted(((distance(f, dtype, fc, dc), i) for i, (fc, dc, _) in enumerate(e["prepared"]) if i != skip))
    by_d = [(d, i) for d, i in by_d if d <= CUTOFF][:MAX_CELLS]
    # the bandwidth adapts to the evidence: the K_NEAR-th nearest cell's distance, at least H_MIN, so a
    # well-measured region is read locally and a sparse one still from its nearest cells
    h = max(H_MIN, by_d[min(K_NEAR, len(by_d)) - 1][0]) if by_d else H_MIN
    near = [(math.exp(-(d / h) ** 2 / 2), e["prepared"][i][2]["ms"]) for d, i in by_d]  # every variant: they chain
    scores, evidence = fit(near) if near else ({}, {})
    nearest: dict = {}
    for d, i in by_d:
        for v in e["prepared"][i][2]["ms"]:
            nearest.setdefault(v, d)
    out.update(cells=len(near), bandwidth=round(h, 3), evidence={v: round(w, 4) for v, w in evidence.items()},
               scores={v: round(s, 4) for v, s in scores.items()}, nearest={v: round(d, 3) for v, d in nearest.items()})
    scored = {v: scores[v] for v in eligible if v in scores and nearest.get(v, math.inf) <= NEAR}
    rest = [v for v in always if v not in scored] + sorted(v for v in eligible if v not in scored and v not in always)
    ranked = sorted(scored, key=lambda v: (scored[v], v)) + rest
    if scored:
        best = ranked[0]
        if scored[best] < math.log(MARGIN) or best in always:
            out["why"] = f"lowest score near the call ({math.exp(scored[best]):.3f} x torch)"
            out["order"] = ranked + [FALLBACK]
        elif always:
            pick = min(always, key=lambda v: (scored.get(v, math.inf), always.index(v)))
            out["why"] = f"torch scores best here, but {pick} beat eager torch in every measured cell"
            out["order"] = [pick] + [v for v in ranked if v != pick] + [FALLBACK]
        else:
            out["why"] = f"torch scores best ({best}: {math.exp(scored[best]):.3f} x torch, margin {MARGIN})"
            out["order"] = [FALLBACK] + ranked
        return out
    if always:
        out["why"] = f"no cell near the call: the op's default ({always[0]} beat eager torch in every measured cell)"
        out["order"] = always + [v for v in ranked if v not in always] + [FALLBACK]
    else:
        out["why"] = "no cell near the call and no variant beat eager torch in every cell: eager torch"
        out["order"] = [FALLBACK] + ranked
    return out


def cross_validate(slug: str = "h200", ops=None):
    """Leave-one-cell-out: per table cell that measured eager torch and a gluon-lab variant, the model's
    choice without that cell among the variants the cell measured, and the cell's own times of it: a
    DataFrame (op, dtype, shape, run, chosen, best, "chosen / best" = best ms / chosen ms over the
    gluon-lab variants, "chosen / torch"). An offline estimate of what the held-out check measures (the
    plans' cells sit on grids, so it is optimistic where the grids are dense)."""
    import pandas as pd
    from . import specs
    rows = []
    for op in ops or sorted(load_table().get("entries", {}).get(slug, {})):
        spec = specs.get(op)
        e = _entry(spec, slug)
        if e is None:
            continue
        for i, c in enumerate(e["cells"]):
            ms = c["ms"]
            mine = {v: m for v, m in ms.items() if v != FALLBACK}
            if FALLBACK not in ms or not mine:
                continue
            pick = rank(spec, c["shape"], c["dtype"], slug, list(mine), skip=i)[0]
            best = min(mine, key=mine.get)
            rows.append({"op": op, "dtype": c["dtype"], "shape": c["shape"], "run": c["run"], "chosen": pick,
                         "best": best, "chosen / best": mine[best] / ms[pick],
                         "chosen / torch": ms[FALLBACK] / ms[pick]})
    return pd.DataFrame(rows)


def rank(spec, shape: dict, dtype: str, slug: str, eligible, skip: int | None = None) -> list[str]:
    """The model's order of the eligible variants (and torch) at a shape: auto runs the first."""
    return explain(spec, shape, dtype, slug, eligible, skip)["order"]


def ours(op: str) -> list[str]:
    """The op's gluon-lab variants (auto's candidates besides eager torch)."""
    from . import registry
    return [n for n in registry.variants(op) if registry.get_variant(op, n).ours]


def candidates(spec, shape: dict, dtype: str, slug: str) -> list[str]:
    """rank() as if every gluon-lab variant of the op took the shape (what a page shows without a GPU)."""
    return rank(spec, shape, dtype, slug, ours(spec.name))


# ----------------------------------------------------------------------------------------------
# the call path

def _slug(index: int) -> str:
    s = _slugs.get(index)
    if s is None:
        import torch
        from .device import gpu_slug
        s = _slugs[index] = gpu_slug(torch.cuda.get_device_name(index))
    return s


def signature(inputs) -> tuple:
    """What a decision depends on: every tensor's shape, strides, dtype, device and 16-byte
    alignment; other inputs by value."""
    key = []
    for t in inputs:
        if hasattr(t, "data_ptr"):
            key.append((t.shape, t.stride(), t.dtype, t.device, t.data_ptr() % 16 == 0))
        else:
            key.append(t)
    return tuple(key)


def eligible_variants(spec, inputs) -> list[str]:
    """The gluon-lab variants of the op whose checks accept these inputs here."""
    from . import registry
    return [n for n in ours(spec.name) if registry.eligible(registry.get_variant(spec.name, n), inputs)]


def choose(spec, inputs) -> str:
    key = (spec.name, signature(inputs))
    hit = _decisions.get(key)
    if hit is not None:
        return hit
    x = inputs[0]
    name = FALLBACK
    if getattr(x, "is_cuda", False) and spec.bucket is not None:
        dtype = str(x.dtype).replace("torch.", "")
        name = rank(spec, spec.shape_of(*inputs), dtype, _slug(x.device.index or 0), eligible_variants(spec, inputs))[0]
    _decisions[key] = name
    return name
