"""The GEMM against cuBLAS as notebook 03 measures it and notebook 04 reads it: the newest grid run of the four
GEMMs (cuBLAS, Triton's tl.dot, gluon-pipelined, gluon-ws) as TFLOP/s and ratios, the configs the records ran,
the speed bars, the pattern's GEMM targets (8192^3 and the geomean against cuBLAS, at least Triton's speed), and
the two tile sweeps (03's `gemm-sweep`: tile x NUM_STAGES of gluon-pipelined; `ws-sweep`: gluon-ws's producer
registers x stages x tiles). Split from `pipelined` (03's page keeps its norms, stages, schedule and sanitizer
sections there); `gemm` (04's GEMM studies) builds on it.

Records: as `pipelined`'s, the records DataFrame `common.load` returns, the newest run holding a section's
variants (`common.pick`); missing data gives empty tables and None figures.
"""
from __future__ import annotations

import json
import re

import pandas as pd

from .. import plots
from . import common as cm

GEMM_VARIANTS = ("torch", "triton", "gluon-pipelined", "gluon-ws")
SQUARE = (8192, 8192, 8192)
EMPTY = pd.DataFrame()


def gemm_records(df, require=("torch", "gluon-pipelined")):
    """The newest GEMM grid run (matmul, no study, not the ceiling) holding the required variants."""
    if not len(df):
        return df.copy()
    gm = cm.pick(df, (df.op == "matmul") & cm.study(df).isna() & (df.pattern != "ceiling"), require=require)
    if len(gm):
        gm["shape"] = gm.M.astype(str) + "x" + gm.N.astype(str) + "x" + gm.K.astype(str)
    return gm


def gemm_table(gm, variants=GEMM_VARIANTS, pairs=(("gluon-pipelined", "triton"), )):
    """TFLOP/s per shape (M, N, K) of the passed records, each variant / cuBLAS (`torch`), and the
    extra `a / b` ratios of pairs where both are present."""
    if not len(gm):
        return EMPTY
    piv = gm[gm.passed.astype(bool)].pivot_table(index=["M", "N", "K"], columns="variant", values="tflops")
    vs = [v for v in variants if v in piv]
    t = piv[vs].round(1)
    for v in vs:
        if v != "torch" and "torch" in piv:
            t[f"{v} / cuBLAS"] = (piv[v] / piv["torch"]).round(3)
    for a, b in pairs:
        if {a, b} <= set(piv):
            t[f"{a} / {b}"] = (piv[a] / piv[b]).round(3)
    return t


def geomeans(t) -> dict:
    """{ratio column: geomean over the shapes} of a GEMM table."""
    return {c: plots.geomean(t[c]) for c in t.columns if "/" in c}


def geomean_line(t) -> str | None:
    g = geomeans(t)
    return ("geomean over the shapes: " + ", ".join(f"{k} **{v:.3f}**" for k, v in g.items())) if g else None


def gemm_cfg_label(c) -> str:
    c = json.loads(c)
    return (f"{c.get('BM')}x{c.get('BN')}x{c.get('BK')} s{c.get('num_stages')} w{c.get('num_warps')}"
            + (f" group_m{c['group_m']}" if "group_m" in c else ""))


def gemm_configs(gm):
    """The config each gluon GEMM record ran with, per shape (and gluon-ws's producer registers)."""
    gg = gm[gm.variant.str.startswith("gluon")] if len(gm) else gm
    if not len(gg):
        return EMPTY
    cfgs = gg.assign(config=gg.config_key.map(gemm_cfg_label)).pivot_table(
        index=["M", "N", "K"], columns="variant", values="config", aggfunc="first")
    if "gluon-ws" in set(gg.variant):
        cfgs["gluon-ws producer_regs"] = gg[gg.variant == "gluon-ws"].set_index(["M", "N", "K"]).config_key.map(
            lambda c: json.loads(c).get("producer_regs"))
    return cfgs


def gemm_bars(gm, variants=GEMM_VARIANTS):
    """Speed vs cuBLAS per shape (None without a GEMM grid)."""
    if not len(gm) or "torch" not in set(gm.variant):
        return None
    vs = [v for v in variants if v in set(gm.variant) and v != "torch"]
    return plots.speedup_bars(gm[gm.passed.astype(bool)], "torch", vs, by=("M", "N", "K"),
                              title=f"bf16 GEMM vs cuBLAS, run {gm.run_id.iloc[0]} (timer {'/'.join(sorted(gm.timer.dropna().unique()))})")


def gemm_views(gm, t) -> list:
    """The GEMM table, its geomeans, the configs of the gluon records and the speed-vs-cuBLAS bars."""
    if not len(gm):
        return []
    return [cm.table(t), geomean_line(t), "configs the gluon records ran with:", cm.table(gemm_configs(gm)), gemm_bars(gm)]


def square_ratio(t, col):
    """t[col] at 8192^3 (None when that shape is missing)."""
    sq = [i for i in t.index if tuple(int(d) for d in i) == SQUARE]
    return float(t.loc[sq[0], col]) if sq else None


def gemm_sweep_records(df):
    """The newest gemm-sweep (tile x stages, gluon-pipelined) with tile and shape labels."""
    gs = cm.pick(df, (cm.study(df) == "gemm-sweep") & (df.op == "matmul")) if len(df) else df.copy()
    if len(gs):
        for k in ("BM", "BN", "BK", "num_warps", "num_stages"):
            gs[k] = cm.config_value(gs, k)
        gs["tile"] = gs.BM.astype(str) + "x" + gs.BN.astype(str) + "x" + gs.BK.astype(str) + " w" + gs.num_warps.astype(str)
        gs["shape"] = gs.M.astype(str) + "x" + gs.N.astype(str) + "x" + gs.K.astype(str)
    return gs


def gemm_sweep_views(gs) -> list:
    """TFLOP/s per (shape, tile) x NUM_STAGES, the configs that were not timed, the best per shape."""
    if not len(gs):
        return []
    ok = gs[gs.passed.astype(bool)]
    out = [cm.fill_reasons(ok.pivot_table(index=["shape", "tile"], columns="num_stages", values="tflops").round(1),
                           gemm_sweep_reason(gs))]
    bad = gs[~gs.passed.astype(bool)]
    if len(bad):
        out.append(bad[["shape", "tile", "num_stages", "notes"]])
    best = ok.sort_values("tflops").groupby("shape").tail(1)[["shape", "tile", "num_stages", "tflops"]]
    return out + ["best per shape:", best.set_index("shape")]


def gemm_sweep_reason(gs):
    """Why a (shape, tile) x NUM_STAGES cell of the gemm-sweep is empty: the config does not fit (the
    configure hook refuses it: shared memory), an error record, or no record."""
    failed = {(r.shape, r.tile, int(r.num_stages)) for r in gs[~gs.passed.astype(bool)].itertuples()} if len(gs) else set()

    def why(idx, col):
        shape, tile = idx
        if (shape, tile, int(col)) in failed:
            return "failed (error below)"
        m = re.match(r"(\d+)x(\d+)x(\d+) w(\d+)", tile)
        M, N, K = (int(x) for x in shape.split("x"))
        if m:
            knobs = {"BM": int(m.group(1)), "BN": int(m.group(2)), "BK": int(m.group(3)), "num_warps": int(m.group(4)),
                     "num_stages": int(col)}
            r = cm.refusal("matmul", "gluon-pipelined", {"M": M, "N": N, "K": K}, "bfloat16", knobs)
            if r:
                return "does not fit: smem" if "shared memory" in r else r
        return "not measured"
    return why


def sweep_tile(config_key) -> str:
    """'BMxBNxBK wW sS' of a GEMM record's config."""
    c = json.loads(config_key)
    return f"{c.get('BM')}x{c.get('BN')}x{c.get('BK')} w{c.get('num_warps')} s{c.get('num_stages')}"


def ws_sweep_records(df):
    """The newest gluon-ws GEMM `ws-sweep` of df (producer registers x stages here, x tiles in 04's file),
    with its knobs, tile and shape as columns."""
    ws = cm.pick(df, (cm.study(df) == "ws-sweep") & (df.op == "matmul")) if len(df) else df.copy()
    if len(ws):
        for k in ("producer_regs", "num_stages", "BM", "BN", "BK"):
            ws[k] = cm.config_value(ws, k)
        ws["tile"] = ws.config_key.map(sweep_tile)
        ws["shape"] = ws.M.astype(str) + "x" + ws.N.astype(str) + "x" + ws.K.astype(str)
    return ws


def ws_sweep_views(ws) -> list:
    if not len(ws):
        return []
    out = []
    ok = ws[ws.passed.astype(bool)]
    if len(ok):
        out.append(ok.pivot_table(index=["shape", "producer_regs"], columns="num_stages", values="tflops").round(1))
        spread = ok.groupby(["shape", "num_stages"]).tflops.agg(lambda s: 100 * (s.max() / s.min() - 1))
        out.append("spread over producer_regs (max/min - 1, %): "
                   + ", ".join(f"{sh} s{st}: {v:.1f}%" for (sh, st), v in spread.items()))
    bad = ws[~ws.passed.astype(bool)]
    if len(bad):
        out += [f"{len(bad)} ws-sweep configs were not timed:", bad[["shape", "producer_regs", "num_stages", "notes"]]]
    return out


def gemm_targets(t):
    """The pattern's GEMM targets for gluon-pipelined, in words, with gluon-ws against the same bar."""
    rows = []
    for v in ("gluon-pipelined", "gluon-ws"):
        col = f"{v} / cuBLAS"
        if col not in t:
            continue
        sq = square_ratio(t, col)
        rows.append({"kernel": v, "target": "bf16 GEMM at M = N = K = 8192: at least 0.97× cuBLAS (torch.matmul) in the same run",
                     "measured": f"{sq:.3f}x" if sq is not None else "no 8192^3 record",
                     "met": bool(sq is not None and sq >= 0.97)})
        gmn = plots.geomean(t[col])
        rows.append({"kernel": v, "target": "geometric-mean speed over the shape set (square and LLM projection "
                                            "shapes) at least 0.93× cuBLAS",
                     "measured": f"{gmn:.3f}x over {t[col].notna().sum()} shapes", "met": bool(gmn >= 0.93)})
        if "triton" in t:
            r = t[v] / t["triton"]
            worst = r.idxmin()
            rows.append({"kernel": v, "target": "at least as fast as the persistent Triton tl.dot kernel at every shape",
                         "measured": f"{int((r >= 1).sum())}/{r.notna().sum()} shapes; worst {r.min():.3f}x at {cm.shape_str(worst)}",
                         "met": bool((r >= 1).all())})
    return pd.DataFrame(rows)
