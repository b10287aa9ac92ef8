"""variant="auto": pick the fastest recorded variant for this GPU, op, dtype and nearest shape.

Reads results/<gpu-slug>/*.jsonl once per process. Only records that passed correctness and whose
kernel source is unchanged (not stale) vote. Returns None when nothing is recorded, and the
caller falls back to ops.AUTO_PREFERENCE."""
from __future__ import annotations

import functools
import math
import os
from pathlib import Path

RESULTS_DIR = Path(os.environ.get("GLUON_LAB_RESULTS", Path(__file__).resolve().parent.parent / "results"))


@functools.lru_cache(maxsize=8)
def _table(slug: str):
    from . import ops, results
    d = RESULTS_DIR / slug
    if not d.is_dir():
        return None
    df = results.load(d, on_error="warn")
    if not len(df):
        return None
    df = df[df["passed"].fillna(False).astype(bool) & df["ms_median"].notna()]
    # Only grid records (no sweep/study configs: auto runs the heuristic config, so a fast swept
    # config must not vote for its variant), newest per case, same-source only.
    df = df[~df["config_key"].str.contains('"study"') & ~df["config_key"].str.contains('"tma_store": true')]
    df = results.mark_stale(results.latest(df), ops.current_hash)
    return df[~df["stale"]]


def best_variant(op: str, inputs) -> str | None:
    from . import device
    x = inputs[0]
    if not getattr(x, "is_cuda", False):
        return None
    info = device.gpu_info(x.device.index or 0)
    df = _table(info["gpu_slug"]) if info else None
    if df is None or not len(df):
        return None
    dt = str(x.dtype).replace("torch.", "")
    sub = df[(df["op"] == op) & (df["dtype"] == dt)]
    if op == "matmul" or not len(sub):
        return None
    if op in ("group_norm", "instance_norm"):
        G = inputs[1] if op == "group_norm" else x.shape[1]
        nearest = nearest_group_cases(sub, x, G)
        best = nearest.groupby("variant")["ms_median"].median().sort_values()
        return str(best.index[0]) if len(best) else None
    N = x.shape[-1]
    M = max(1, x.numel() // max(N, 1))
    dist = ((sub["N"].astype(float) / N).map(math.log).abs() * 4 + (sub["M"].astype(float) / M).map(math.log).abs())
    nearest = sub[dist == dist.min()]
    best = nearest.groupby("variant")["ms_median"].median().sort_values()
    return str(best.index[0]) if len(best) else None


def tensor_layout(x) -> str:
    """ "channels_last" when C is x's innermost dimension (and x is not also plain contiguous)."""
    if x.dim() >= 3 and not x.is_contiguous() and x.movedim(1, -1).is_contiguous():
        return "channels_last"
    return "nchw"


def nearest_group_cases(sub, x, G: int):
    """Records of group_norm / instance_norm nearest to x with G groups: same layout, then the
    nearest (group length (C/G)*S, group count B*G) on a log scale, group length weighted 4x
    (as N and M for row norms)."""
    sub = sub[sub["layout"].fillna("nchw") == tensor_layout(x)]
    if not len(sub):
        return sub
    B, C = x.shape[0], x.shape[1]
    S = max(1, x.numel() // max(B * C, 1))
    s_rec = sub[["D", "H", "W"]].astype(float).fillna(1.0).prod(axis=1)
    c_rec, b_rec = sub["C"].astype(float), sub["B"].astype(float)
    g_rec = sub["G"].astype(float).fillna(c_rec)  # instance_norm records carry no G: G = C
    length, count = (C // G) * S, B * G
    dist = ((c_rec / g_rec * s_rec / length).map(math.log).abs() * 4 + (b_rec * g_rec / count).map(math.log).abs())
    return sub[dist == dist.min()]
