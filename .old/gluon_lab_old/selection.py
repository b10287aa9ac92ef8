"""variant="auto": a small committed selection table, no I/O on the call path.

``python -m gluon_lab_old select`` (``build`` + ``write``) turns the current records into
``gluon_lab_old/selection.json``: for each GPU, op, dtype and shape bucket (the spec's ``bucket``,
e.g. (log2 N, log2 M) for row norms), the gluon-lab variants whose geomean time over the bucket's
shapes is below MARGIN x eager torch's (each ratio from one run), fastest first, then "torch". Only records that passed, are current
(their code hash matches the code now), ran the variant's heuristic config (no sweep or study
config votes, except a study's cases marked 'heuristic': auto runs the heuristic) and are the newest of their case count.

``choose(spec, inputs)`` reads that table once per process, and remembers its answer per call
signature (shapes, strides, dtype, device, 16-byte alignment), so a repeated call costs one dict
lookup. It picks the first variant of the nearest bucket whose check accepts the input, and
"torch" when nothing in the table is close enough, the GPU is not in the table, or the input is
not on a CUDA device. It never picks a peer library or a compile-on-first-call baseline.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

TABLE_PATH = Path(__file__).resolve().parent / "selection.json"
MAX_DISTANCE = 8  # weighted bucket distance beyond which the table does not speak for a shape
WEIGHTS = (4, 1, 1, 1)  # numeric bucket components in order: the first (row length / group length / M) counts 4x
FALLBACK = "torch"
# A gluon-lab variant is chosen only where it beats eager torch by more than run-to-run noise:
# repeated GEMM runs on the H200 moved same-shape ratios by 1-3% (03 vs 04 runs of 2026-12-01),
# so a 1% "win" would flip the choice between builds.
MARGIN = 0.98
# config keys that name a record's study / conditions, not a knob it overrode
STUDY_META = frozenset({"study", "heuristic", "sm_clock_mhz", "call"})

_table: dict | None = None
_decisions: dict = {}
_slugs: dict = {}


# ----------------------------------------------------------------------------------------------
# building the table (report / bench time, never on the call path)

def _votes(df):
    """Records that may vote: passed, timed, current, the heuristic config, newest per case."""
    import dataclasses
    from . import registry, results, specs
    df = df[df["passed"].fillna(False).astype(bool) & df["ms_median"].notna() & df["op"].isin(specs.names())
            & (df["pattern"] != "ceiling") & (df["timer"] != "host-loop")]
    from . import currency
    df = currency.mark_stale(results.latest(df), registry.current_hash)
    df = df[~df["stale"]]
    keep = []
    for i, r in df.iterrows():
        cfg = r["config"] or {}
        if "study" in cfg and not (cfg.get("heuristic") or (r["variant"] == FALLBACK and not set(cfg) - STUDY_META)):
            continue  # a study's configs do not vote; its heuristic-marked cases and its plain torch cases do
        try:
            v = registry.get_variant(r["op"], r["variant"])
        except ValueError:
            continue
        if not (v.ours or r["variant"] == FALLBACK):
            continue
        if v.configure is not None:
            try:
                resolved = json.loads(json.dumps(dataclasses.asdict(v.resolve(dict(r["shape"]), r["dtype"]))))
            except (ValueError, TypeError, KeyError):
                continue
            if any(cfg.get(k) != val for k, val in resolved.items()):
                continue  # a record of an override (or of an older heuristic) does not speak for auto
        keep.append(i)
    return df.loc[keep]


def build(results_dir) -> dict:
    from . import device, results, specs
    stores = sorted(p for p in Path(results_dir).glob("*/*.jsonl") if p.name != "sanitizer.jsonl")  # not Records
    df = results.load(stores, on_error="raise", history=True)  # the newest passing current record may be archived
    entries: dict = {}
    runs: dict = {}
    if len(df):
        df = _votes(df)
    for (gpu, op, dtype), g in (df.groupby(["gpu_name", "op", "dtype"]) if len(df) else []):
        spec = specs.get(op)
        slug = device.gpu_slug(gpu)
        runs.setdefault(slug, set()).update(g["run_id"])
        buckets: dict = {}
        for _, r in g.iterrows():
            buckets.setdefault(tuple(spec.bucket(r["shape"])), []).append(r)
        out = []
        for b, rows in sorted(buckets.items(), key=lambda kv: [str(c) for c in kv[0]]):
            by_shape: dict = {}  # (run, shape) -> {variant: ms}: a ratio pairs records of one run only
            for r in rows:
                by_shape.setdefault((r["run_id"], json.dumps(r["shape"], sort_keys=True)), {})[r["variant"]] = float(r["ms_median"])
            ratios: dict = {}
            for cell in by_shape.values():
                if FALLBACK not in cell:
                    continue
                for v, ms in cell.items():
                    ratios.setdefault(v, []).append(ms / cell[FALLBACK])
            geo = {v: math.exp(sum(map(math.log, rs)) / len(rs)) for v, rs in ratios.items()}
            order = sorted((v for v in geo if v != FALLBACK and geo[v] < MARGIN), key=lambda v: (geo[v], v))
            out.append({"bucket": list(b), "order": order + [FALLBACK],
                        "vs_torch": {v: round(geo[v], 4) for v in sorted(geo) if v != FALLBACK},
                        "shapes": len({shape for _, shape in by_shape})})
        entries.setdefault(slug, {}).setdefault(op, {})[dtype] = out
    return {"version": 1,
            "rule": f"per bucket: gluon-lab variants whose geomean time over the bucket's shapes is below {MARGIN} x "
                    "eager torch's, fastest first, then torch; current, passing, heuristic-config records only",
            "runs": {k: sorted(v) for k, v in sorted(runs.items())}, "entries": entries}


def write(table: dict, path: Path = TABLE_PATH) -> Path:
    global _table
    from .results import atomic_write_text
    atomic_write_text(path, json.dumps(table, indent=1, sort_keys=True) + "\n")
    _table = None  # this process reads the new table on its next auto call
    _decisions.clear()
    from . import fastpath
    fastpath.clear()  # plans of variant="auto" calls replay the variant the old table chose
    return path


# ----------------------------------------------------------------------------------------------
# the call path

def load_table(path: Path = TABLE_PATH) -> dict:
    global _table
    if _table is None:
        try:
            _table = json.loads(Path(path).read_text())
        except FileNotFoundError:
            _table = {"entries": {}}
    return _table


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


def _distance(a, b) -> float:
    """Weighted L1 distance of two buckets; string components (a layout) must match exactly and
    do not use up a weight (group buckets are (layout, log2 group length, log2 group count))."""
    d, i = 0.0, 0
    for x, y in zip(a, b):
        if isinstance(x, str) or isinstance(y, str):
            if x != y:
                return math.inf
            continue
        d += WEIGHTS[min(i, len(WEIGHTS) - 1)] * abs(x - y)
        i += 1
    return d


def candidates(spec, shape: dict, dtype: str, slug: str) -> list[str]:
    """The table's ordered candidates for this shape (nearest bucket), ending in "torch"."""
    rows = load_table().get("entries", {}).get(slug, {}).get(spec.name, {}).get(dtype, [])
    if not rows or spec.bucket is None:
        return [FALLBACK]
    b = list(spec.bucket(shape))
    best = min(rows, key=lambda r: (_distance(b, r["bucket"]), str(r["bucket"])))
    return best["order"] if _distance(b, best["bucket"]) <= MAX_DISTANCE else [FALLBACK]


def choose(spec, inputs) -> str:
    key = (spec.name, signature(inputs))
    hit = _decisions.get(key)
    if hit is not None:
        return hit
    from . import registry
    x = inputs[0]
    name = FALLBACK
    if getattr(x, "is_cuda", False):
        dtype = str(x.dtype).replace("torch.", "")
        known = registry.variants(spec.name)
        for v in candidates(spec, spec.shape_of(*inputs), dtype, _slug(x.device.index or 0)):
            if v == FALLBACK or (v in known and registry.eligible(registry.get_variant(spec.name, v), inputs)):
                name = v  # a name the table holds but the registry no longer has is skipped
                break
    _decisions[key] = name
    return name
