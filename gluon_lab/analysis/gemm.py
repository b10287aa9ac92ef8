"""Notebook 04-warp-specialization, the GEMM: gluon-ws (a 1-warp TMA or cp.async producer, cooperative or
ping-pong consumer warpgroups over EMPTY/FULL barrier pairs) against gluon-pipelined, Triton's tl.dot and
cuBLAS, by shape and by config.

What it shows, and where each fact comes from:
    the GEMM grid         gemm_candidates / gemm_records / gemm_table / gemm_targets: the matmul records (no
                          study) of 04's file and pattern 3's (the four GEMMs were measured side by side there),
                          the newest run holding all four (gemm_grid.gemm_table / gemm_configs)
    ws-sweep              the 'ws-sweep' study (producer_regs x tile) of 04's file and the earlier one of 03's,
                          against ws_plan()'s configs (gemm_fits: whether an unrecorded config fits)
    the shape sweep       the newest 'gemm-shapes' run (SHAPE_STUDY): every schedule x tile beside cuBLAS
                          (GEMM_PEER, timed before and after each shape's Gluon cases: peer_time), what
                          variant="auto" picks there (auto_pick), SHAPE_TARGETS; from it the shape buckets of the
                          heuristic (shape_bucket, bucket_proposal), the noise floor (same_config_spread) and
                          the stream-K / cp.async / ws-vs-pipelined tables
    waves                 wave_table: computed (no GPU), the persistent grid's wave quantization per shape and tile
    consumer schedules    consumer_schedule: the kernels' gl.warp_specialize calls, read from the current source;
                          the measured GEMM timeline results/<gpu>/04-warp-specialization.gemm-timeline.json
                          (experiments.capture_gemm_timeline): gemm_timeline_stats / gemm_timeline_figure
    the probe, clusters   in gemm_probe.py: ci/gemm_probe.py's logs and the installed triton's cluster / multicast API
    takeaways             gemm_takeaways (the grid, its targets, ws-sweep) and shape_takeaways (the consumer
                          schedules and every shape), lines for warp_specialized.takeaways; verdict (gluon-ws vs
                          gluon-pipelined in words) is shared with the norms' lines

warp_specialized (the notebook's module) imports this one; nothing here imports it.

Kernel-facing (the only places this module reaches into kernels / experiments / codegen):
    ws_plan()             gluon_lab.experiments.WarpSpecializedPlan() (ws_sweep_shapes, ws_sweep_tiles, ws_sweep_regs)
    gemm_fits()           pipelined.gemm_config(BM=, BN=, BK=, num_warps=, num_stages=, producer_regs=).validate(dtype)
    gemm_source()         registry.sources("matmul", "gluon-ws", name): the GEMM kernels by plain name
                          (ws_gemm_kernel, _ws_consumer, ws_pingpong_gemm_kernel, _pp_consumer)
    auto_pick()           gluon_lab.selection.candidates(specs.get("matmul"), shape, "bfloat16", device.gpu_slug(gpu))
    wave_table()          gluon_lab.experiments.GEMM_SHAPE_SWEEP, gluon_lab.kernels.hopper.H200_SMS
    and through pipelined: gemm_config; 03's GEMM grid (gemm_table, gemm_configs, sweep_tile,
    ws_sweep_records, square_ratio) is gemm_grid's
"""
from __future__ import annotations

import json
import re

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from .. import plots
from . import common as cm
from . import pipelined as P
from . import gemm_grid as GG
from . import timeline as tl

NB = "04-warp-specialization"  # the notebook whose records hold these studies
NB3 = P.NB  # pattern 3's records: the GEMM comparison
GEMM4 = GG.GEMM_VARIANTS
EMPTY = P.EMPTY
WS_VS_PIPE = 0.98  # gluon-ws on par with gluon-pipelined: within 2% (the pattern's target; the norms' cells use it too)


# ---- kernel-facing -------------------------------------------------------------------------------
def ws_plan():
    from ..experiments import WarpSpecializedPlan
    return WarpSpecializedPlan()


def gemm_source(*names: str) -> str:
    """Current source of the named functions of the gluon-ws GEMM (registry.sources: looked up in the
    variant's launch closure by plain name, e.g. "ws_gemm_kernel", "_ws_consumer")."""
    from .. import registry
    return "\n".join(registry.sources("matmul", "gluon-ws", n) for n in names)


def gemm_fits(tile, regs: int, dtype: str = "bfloat16") -> str:
    """Whether a (BM, BN, BK, num_warps, num_stages) tile with producer_regs fits (GemmConfig.validate)."""
    try:
        P.gemm_config(BM=tile[0], BN=tile[1], BK=tile[2], num_warps=tile[3], num_stages=tile[4],
                      producer_regs=regs).validate(dtype)
        return "no record (fits: not run)"
    except ValueError as e:
        return f"does not fit: {e}"


# the notebook's missing-data note and "which run" line (warp_specialized has the same two)
def nodata(ctx, what: str, stale: str = "flag") -> str:
    return cm.nodata(ctx, what, stale, name="")


def about(g, what: str) -> list:
    return cm.about(g, what, with_files=True)


# ---- the GEMM grid: the four GEMMs of one run (04's file or 03's) ---------------------------------
def gemm_candidates(use, use03):
    """Every GEMM-grid record of both files (matmul, no study, not a ceiling)."""
    parts = [d[(d.op == "matmul") & cm.study(d).isna() & (d.pattern != "ceiling")] for d in (use, use03) if len(d)]
    return pd.concat(parts, ignore_index=True) if parts else EMPTY


def gemm_records(mm):
    """The newest run holding all four GEMMs (one run only)."""
    if not len(mm):
        return mm
    gm = cm.pick(mm, mm.op == "matmul", require=GEMM4)
    return gm if set(GEMM4) <= set(gm.variant) else gm.iloc[:0]


def gemm_table(gm):
    if not len(gm):
        return EMPTY
    return GG.gemm_table(gm, GEMM4, pairs=(("gluon-ws", "gluon-pipelined"), ))


def older_runs_line(gm, mm) -> str | None:
    """The other GEMM runs of both files, left out (one run per comparison)."""
    older = sorted(set(mm.run_id) - {gm.run_id.iloc[0]}) if len(gm) else []
    return ("other GEMM runs not used here: " + ", ".join(older)) if older else None


def gemm_ceiling_lines(gm, use, use03) -> list:
    """The GEMM run's own cuBLAS ceiling, and records more than 5% above it."""
    if not len(gm):
        return []
    run = gm.run_id.iloc[0]
    both = pd.concat([d for d in (use, use03) if len(d)], ignore_index=True)
    gce = cm.ceilings(both[both.run_id == run])
    if not gce:
        return []
    out = [f"run {run}: its own cuBLAS ceiling ({gce['matmul_shape']}, {gce['matmul_timer']}) = {gce['matmul_tflops']:.0f} TFLOP/s"]
    for r in gm[gm.tflops > 1.05 * gce["matmul_tflops"]].sort_values("tflops", ascending=False).itertuples():
        out.append(f"  note: {r.variant} {r.M}x{r.N}x{r.K} reached {r.tflops:.0f} TFLOP/s, "
                   f"{100 * (r.tflops / gce['matmul_tflops'] - 1):.0f}% above "
                   "that ceiling (different shape and timer; not investigated here)")
    return out


def gemm_configs(gm):
    """The config each gluon GEMM record ran with, per shape (tile, stages, warps, GROUP_M; producer
    registers for gluon-ws): pattern 3's gemm_configs."""
    return GG.gemm_configs(gm)


def gemm_targets(t):
    """gluon-ws >= 1.0x cuBLAS at 8192^3 (moonshot 1.05x), geomean >= 0.98x, >= gluon-pipelined everywhere."""
    if not len(t):
        return EMPTY
    r = t["gluon-ws / cuBLAS"]
    sq = GG.square_ratio(t, "gluon-ws / cuBLAS")
    rows = [{"target": f"gluon-ws bf16 GEMM at M = N = K = 8192: at least {goal:.2f}× cuBLAS (torch.matmul) in the same run"
                       + (" (the stretch goal)" if name == "moonshot" else ""),
             "measured": f"{sq:.3f}x" if sq is not None else "no 8192^3 record",
             "met": bool(sq is not None and sq >= goal), "short": f">= {goal:.2f}x cuBLAS at 8192^3 ({name})"}
            for goal, name in ((1.0, "target"), (1.05, "moonshot"))]
    gmn = plots.geomean(r)
    rows.append({"target": "gluon-ws: geometric-mean speed over the shape set at least 0.98× cuBLAS",
                 "measured": f"{gmn:.3f}x over {r.notna().sum()} shapes", "met": bool(gmn >= 0.98),
                 "short": ">= 0.98x cuBLAS, geomean"})
    rp = t["gluon-ws / gluon-pipelined"]
    rows.append({"target": "gluon-ws at least as fast as the pipelined GEMM of pattern 3 (gluon-pipelined) at every shape",
                 "measured": f"{int((rp >= 1).sum())}/{rp.notna().sum()} shapes; worst {rp.min():.3f}x at {cm.shape_str(rp.idxmin())}",
                 "met": bool((rp >= 1).all()), "short": ">= gluon-pipelined at every shape"})
    return pd.DataFrame(rows)


def gemm_targets_view(gt):
    """gemm_targets as a coloured table (the short labels, for the takeaways, left out)."""
    return cm.target_list(gt.drop(columns=["short"], errors="ignore")) if len(gt) else None


# ---- ws-sweep: producer_regs x tile ------------------------------------------------------------
TILE_KEYS = ("BM", "BN", "BK", "num_warps", "num_stages")
tile_of = GG.sweep_tile
ws_sweep_records = GG.ws_sweep_records


def sweep_table(ws):
    """(TFLOP/s per (shape, tile) x producer_regs with 'does not fit' where a record holds that error,
    passed records, failed records)."""
    if not len(ws):
        return EMPTY, ws, ws
    ok, bad = ws[ws.passed.astype(bool)], ws[~ws.passed.astype(bool)]
    tab = ok.pivot_table(index=["shape", "tile"], columns="producer_regs", values="tflops").round(1).astype(object)
    for r in bad.itertuples():
        m = re.search(r"needs \d+ B of shared memory > \d+", r.notes or "")
        tab.loc[(r.shape, r.tile), r.producer_regs] = "does not fit" + (f" ({m.group(0)})" if m else "")
    return tab.sort_index(), ok, bad


def sweep_spread_line(ok) -> str | None:
    if not len(ok):
        return None
    s = ok.groupby(["shape", "tile"]).tflops.agg(lambda x: 100 * (x.max() / x.min() - 1))
    return "spread over producer_regs, max/min - 1 (%): " + ", ".join(f"{sh} {t}: {v:.1f}" for (sh, t), v in s.items())


def sweep_skipped(ws, plan=None):
    """The configs of the current plan without a record, and whether they fit. Returns (table, line)."""
    plan = plan or ws_plan()
    planned = [(M, N, K, t, r) for (M, N, K) in plan.ws_sweep_shapes for t in plan.ws_sweep_tiles for r in plan.ws_sweep_regs]
    have = {(int(r.M), int(r.N), int(r.K), tuple(json.loads(r.config_key).get(k) for k in TILE_KEYS),
             json.loads(r.config_key).get("producer_regs")) for r in ws.itertuples()}
    skipped = [{"shape": f"{M}x{N}x{K}", "tile": t, "producer_regs": r, "why": gemm_fits(t, r)}
               for (M, N, K, t, r) in planned if (M, N, K, t, r) not in have]
    n_bad = int((~ws.passed.astype(bool)).sum())
    return (pd.DataFrame(skipped), f"{len(planned)} configs in the current plan; {len(have)} recorded; {n_bad} recorded as "
            f"errors; {len(skipped)} without a record")


def sweep_best(ok):
    """Best config per shape vs the default GemmConfig() in the same sweep."""
    if not len(ok):
        return EMPTY
    best = ok.sort_values("tflops").groupby("shape").tail(1).set_index("shape")[["tile", "producer_regs", "tflops"]]
    d0 = P.gemm_config()
    d = ok[(ok.tile == f"{d0.BM}x{d0.BN}x{d0.BK} w{d0.num_warps} s{d0.num_stages}") & (ok.producer_regs == d0.producer_regs)]
    best["default config TFLOP/s (same sweep)"] = d.set_index("shape").tflops.reindex(best.index)
    best["best / default"] = best.tflops / best["default config TFLOP/s (same sweep)"]
    return best


def run_to_run(gm, ok):
    """The same gluon-ws config and shape timed in the GEMM grid's run and in the sweep."""
    if not len(gm) or not len(ok):
        return EMPTY
    keys = TILE_KEYS + ("producer_regs", )
    rr = []
    for r in gm[gm.variant == "gluon-ws"].itertuples():
        c = json.loads(r.config_key)
        m_ = ok[(ok.M == r.M) & (ok.N == r.N) & (ok.K == r.K)]
        m_ = m_[m_.config_key.map(lambda k: all(json.loads(k).get(x) == c.get(x) for x in keys))]
        if len(m_):
            rr.append({"shape": f"{r.M}x{r.N}x{r.K}", "config": tile_of(r.config_key) + f" regs {c.get('producer_regs')}",
                       f"GEMM grid run {r.run_id}": r.tflops, f"ws-sweep run {m_.run_id.iloc[0]}": float(m_.tflops.iloc[0]),
                       "sweep / grid": float(m_.tflops.iloc[0]) / r.tflops})
    return pd.DataFrame(rr).set_index("shape") if rr else EMPTY


def ws_sweep_views(ctx, wsw, gm, stale: str = "flag"):
    """The ws-sweep section: table, spread, configs without a record, best vs default, run to run.
    Returns (outputs, passed records)."""
    if not len(wsw):
        return [nodata(ctx, "the gluon-ws GEMM ws-sweep", stale)], wsw
    tab, ok, bad = sweep_table(wsw)
    skipped, line = sweep_skipped(wsw)
    out = about(wsw, "ws-sweep") + [f"**ws-sweep, run {wsw.run_id.iloc[0]}**: TFLOP/s (columns: producer_regs)", tab,
                                    sweep_spread_line(ok), cm.table(skipped), line]
    if len(ok):
        out += ["best config per shape vs the default `GemmConfig()` in the same sweep:", sweep_best(ok).round(3)]
        rr = run_to_run(gm, ok)
        if len(rr):
            out += ["**Run to run**: the same gluon-ws config and shape, timed in two runs:", rr.round(3)]
    return out, ok


def old_ws_sweep_views(use03) -> list:
    """The earlier producer-registers x stages sweep of pattern 3's file (which held configs that do not fit)."""
    old = ws_sweep_records(use03)
    if not len(old):
        return []
    tab, ok, _ = sweep_table(old)
    return about(old, "earlier ws-sweep (pattern 3's file)") + [
        f"**earlier ws-sweep, run {old.run_id.iloc[0]} ({NB3}.jsonl)**: TFLOP/s (columns: producer_regs)", tab, sweep_spread_line(ok)]


# ---- the GEMM shape sweep ('gemm-shapes'): every schedule x tile beside cuBLAS, one run ----
SHAPE_STUDY = "gemm-shapes"
GEMM_PEER = "torch"  # torch.matmul = cuBLAS
SHAPE_TARGETS = {"geomean": 1.0, "every cell": 0.95, "8192^3": 1.03}  # best gluon / cuBLAS (the GEMM issue's)


def shape_sweep_records(use):
    """The newest run holding the 'gemm-shapes' study (matmul records of every variant in it)."""
    if not len(use):
        return use
    mm = use[use.op == "matmul"]
    return cm.newest_run(mm, cm.config_value(mm, "study") == SHAPE_STUDY) if len(mm) else mm


def gemm_config_label(cfg: dict) -> str:
    """'ws 128x128x64 4w s4 pp' style label of a study record's config ('heuristic' when it set no tile; either
    with ' padded copy' when the padded-copy producer staged the operands)."""
    pad = " padded copy" if cfg.get("pad_rows") else ""
    if cfg.get("heuristic") or not any(k in cfg for k in ("BM", "BN", "BK")):  # the study marks its heuristic cases
        return "heuristic" + pad
    lab = f"{cfg.get('BM')}x{cfg.get('BN')}x{cfg.get('BK')} {cfg.get('num_warps')}w s{cfg.get('num_stages')}"
    return (lab + (" ping-pong" if cfg.get("pingpong") else "") + (" swap-AB" if cfg.get("swap_ab") else "")
            + (f" split-K {cfg['split_k']}" if cfg.get("split_k", 1) > 1 else "")
            + (" (last wave)" if cfg.get("split_last_wave") else "") + (" cp.async" if cfg.get("cp_async") else "")
            + (f" stream-K {cfg['stream_k']}w" if cfg.get("stream_k") else "") + pad)


def labelled(ok):
    """Matmul records with a 'label' column (record_labels), and their parsed configs: (records, configs)."""
    cfgs = ok["config_key"].map(json.loads)
    return ok.assign(label=record_labels(ok, cfgs)), cfgs


def record_labels(df, cfgs) -> list:
    """Each matmul record's label: the peer's name, or 'ws' / 'pipe' + gemm_config_label of its config."""
    return [v if v == GEMM_PEER else f"{'ws' if v == 'gluon-ws' else 'pipe'} {gemm_config_label(c)}"
            for v, c in zip(df.variant, cfgs)]


def shape_sweep_table(st):
    """Per shape of one 'gemm-shapes' run: cuBLAS us / TFLOP/s / SM clock, each Gluon GEMM at its
    heuristic, the best swept config and its ratio to cuBLAS (>= 1: Gluon leads), the best
    ping-pong / best cooperative gluon-ws config (> 1: ping-pong is faster), and what variant="auto"
    picks there with its ratio to cuBLAS."""
    ok = cm.passed(st) if len(st) else st
    rows = []
    if not len(ok):
        return pd.DataFrame()
    ok, cfgs = labelled(ok)
    ok = ok.assign(pingpong=[bool(c.get("pingpong")) for c in cfgs],
                   clock=[c.get("sm_clock_mhz") for c in cfgs])
    for (M, N, K), g in ok.groupby(["M", "N", "K"]):
        peer = g[g.variant == GEMM_PEER]
        gl_ = g[g.variant != GEMM_PEER]
        if not len(peer) or not len(gl_):
            continue
        p, drift = peer_time(peer)
        b = gl_.loc[gl_.ms_median.idxmin()]
        ws = gl_[gl_.variant == "gluon-ws"]
        ws_pp, ws_co = ws[ws.pingpong], ws[~ws.pingpong]
        heur = {v: gl_[(gl_.variant == v) & (gl_.label.str.endswith("heuristic"))] for v in ("gluon-ws", "gluon-pipelined")}
        rows.append({"M": int(M), "N": int(N), "K": int(K), "cuBLAS us": round(1000 * p.ms_median, 1),
                     "cuBLAS TFLOP/s": round(p.tflops, 0), "SM MHz": p.clock, "cuBLAS drift": drift,
                     "ws heuristic / cuBLAS": round(p.ms_median / heur["gluon-ws"].ms_median.min(), 3)
                     if len(heur["gluon-ws"]) else np.nan,
                     "pipe heuristic / cuBLAS": round(p.ms_median / heur["gluon-pipelined"].ms_median.min(), 3)
                     if len(heur["gluon-pipelined"]) else np.nan,
                     "best gluon": b.label, "best TFLOP/s": round(b.tflops, 0), "best SM MHz": b.clock,
                     "best / cuBLAS": round(p.ms_median / b.ms_median, 3),
                     "ping-pong / cooperative": round(ws_co.ms_median.min() / ws_pp.ms_median.min(), 3)
                     if len(ws_pp) and len(ws_co) else np.nan,
                     **auto_pick(int(M), int(N), int(K), p, heur)})
    return pd.DataFrame(rows)


def peer_time(peer):
    """(cuBLAS's row, drift) of a shape: the sweep times cuBLAS before and after the shape's Gluon cases
    ('bracket': 'after'); the row carries the geomean of the two times (TFLOP/s to match), drift = after /
    before (NaN with one timing: runs before the bracket)."""
    cfg = peer["config_key"].map(json.loads)
    after = peer[[c.get("bracket") == "after" for c in cfg]]
    before = peer[[c.get("bracket") != "after" for c in cfg]]
    p = (before if len(before) else peer).iloc[0].copy()
    if len(after) and len(before):
        t0, t1 = float(before.ms_median.iloc[0]), float(after.ms_median.iloc[0])
        p["ms_median"] = float(np.sqrt(t0 * t1))
        p["tflops"] = p["tflops"] * t0 / p["ms_median"]
        return p, round(t1 / t0, 3)
    return p, np.nan


def auto_pick(M: int, N: int, K: int, peer, heur: dict) -> dict:
    """What variant="auto" runs at this shape (the committed selection table, built from these records'
    heuristic cases) and its ratio to cuBLAS in the run (1.0 where auto falls back to torch)."""
    from .. import device, selection, specs
    pick = selection.candidates(specs.get("matmul"), {"M": M, "N": N, "K": K}, "bfloat16",
                                device.gpu_slug(peer.gpu_name))[0]
    h = heur.get(pick)
    ratio = 1.0 if pick == GEMM_PEER else (round(peer.ms_median / h.ms_median.min(), 3) if h is not None and len(h) else np.nan)
    return {"auto": pick, "auto / cuBLAS": ratio}


def shape_sweep_targets(t):
    """The GEMM issue's targets on a shape_sweep_table: (target, measured, met) rows."""
    if not len(t):
        return pd.DataFrame()
    r = t["best / cuBLAS"]
    big = t[(t.M == 8192) & (t.N == 8192) & (t.K == 8192)]["best / cuBLAS"]
    rows = [(f"best gluon >= {SHAPE_TARGETS['geomean']}x cuBLAS geomean over {len(t)} shapes",
             f"{cm.geomean(r):.3f}x", cm.geomean(r) >= SHAPE_TARGETS["geomean"]),
            (f"best gluon >= {SHAPE_TARGETS['every cell']}x cuBLAS in every cell",
             f"{int((r >= SHAPE_TARGETS['every cell']).sum())}/{len(t)} (worst {r.min():.3f}x)",
             bool((r >= SHAPE_TARGETS["every cell"]).all()))]
    if len(big):
        rows.append((f"best gluon >= {SHAPE_TARGETS['8192^3']}x cuBLAS at 8192^3", f"{big.iloc[0]:.3f}x",
                     big.iloc[0] >= SHAPE_TARGETS["8192^3"]))
    return pd.DataFrame(rows, columns=["target", "measured", "met"])


def same_config_spread(st) -> pd.DataFrame:
    """The sweep's noise floor: where a variant's heuristic case resolved to the same config as one of the
    explicit cases, the two are one kernel timed twice in the run: heuristic time / explicit time per such
    pair (1.0 = no noise). The best-of-many 'best / cuBLAS' column leans upward by about this spread."""
    ok = cm.passed(st) if len(st) else st
    if not len(ok):
        return pd.DataFrame()
    cfgs = ok["config_key"].map(json.loads)
    drop = {"study", "sm_clock_mhz", "heuristic", "bracket"}
    key = [json.dumps({k: v for k, v in c.items() if k not in drop}, sort_keys=True) for c in cfgs]
    t = ok.assign(_key=key, _heur=[bool(c.get("heuristic")) for c in cfgs])
    rows = []
    for (M, N, K, v, k), g in t[t.variant != GEMM_PEER].groupby(["M", "N", "K", "variant", "_key"]):
        h, e = g[g._heur], g[~g._heur]
        if len(h) and len(e):
            rows.append({"M": int(M), "N": int(N), "K": int(K), "variant": v,
                         "heuristic / explicit": round(float(h.ms_median.iloc[0] / e.ms_median.iloc[0]), 3)})
    return pd.DataFrame(rows)


def stream_k_table(st) -> pd.DataFrame:
    """Per shape of a 'gemm-shapes' run that has stream-K cases: the best gluon-ws config without stream-K,
    the best with it, without / with (> 1: stream-K faster) and each one's ratio to the bracketed cuBLAS."""
    ok = cm.passed(st) if len(st) else st
    if not len(ok):
        return pd.DataFrame()
    ok, cfgs = labelled(ok)
    ok = ok.assign(sk=[int(c.get("stream_k") or 0) for c in cfgs])
    rows = []
    for (M, N, K), g_all in ok.groupby(["M", "N", "K"]):
        g, torch_rows = g_all[g_all.variant == "gluon-ws"], g_all[g_all.variant == GEMM_PEER]
        sk, dp = g[g.sk > 0], g[g.sk == 0]
        if not len(sk) or not len(dp) or not len(torch_rows):
            continue
        b_sk, b_dp = sk.loc[sk.ms_median.idxmin()], dp.loc[dp.ms_median.idxmin()]
        peer = float(peer_time(torch_rows)[0].ms_median)
        rows.append({"M": int(M), "N": int(N), "K": int(K), "best without stream-K": b_dp.label,
                     "its / cuBLAS": round(peer / b_dp.ms_median, 3), "best stream-K": b_sk.label,
                     "stream-K / cuBLAS": round(peer / b_sk.ms_median, 3),
                     "without / stream-K": round(b_dp.ms_median / b_sk.ms_median, 3)})
    return pd.DataFrame(rows)


def ws_vs_pipe_table(st, max_k: int = 2048) -> pd.DataFrame:
    """The GEMM issue's 'gluon-ws >= gluon-pipelined where the epilogue matters (small K)': per shape of a
    'gemm-shapes' run with K <= max_k, the heuristics' ratio and the best configs' ratio (pipelined time /
    ws time: >= 1 means gluon-ws is at least as fast)."""
    ok = cm.passed(st) if len(st) else st
    if not len(ok):
        return pd.DataFrame()
    ok, _ = labelled(ok)
    rows = []
    for (M, N, K), g in ok[ok.K <= max_k].groupby(["M", "N", "K"]):
        ws, pp = g[g.variant == "gluon-ws"], g[g.variant == "gluon-pipelined"]
        if not len(ws) or not len(pp):
            continue
        hw, hp = ws[ws.label.str.endswith("heuristic")], pp[pp.label.str.endswith("heuristic")]
        rows.append({"M": int(M), "N": int(N), "K": int(K),
                     "heuristic: pipe / ws": round(hp.ms_median.min() / hw.ms_median.min(), 3) if len(hw) and len(hp) else np.nan,
                     "best: pipe / ws": round(pp.ms_median.min() / ws.ms_median.min(), 3),
                     "best ws": ws.loc[ws.ms_median.idxmin()].label, "best pipe": pp.loc[pp.ms_median.idxmin()].label})
    return pd.DataFrame(rows)


def producer_of(cfg: dict) -> str:
    """Which A/B producer a gluon-ws config ran: PRODUCERS' key."""
    return "cp.async" if cfg.get("cp_async") else "padded copy" if cfg.get("pad_rows") else "TMA"


def producer_table(st) -> pd.DataFrame:
    """Per shape of a 'gemm-shapes' run that tried another producer than TMA in place (rows not 128-byte
    aligned): the best gluon-ws config of each producer, its time / cuBLAS's (> 1: faster than cuBLAS) and the
    best padded-copy / cp.async config's speed-up over the best in-place TMA one (> 1: that producer wins)."""
    ok = cm.passed(st) if len(st) else st
    if not len(ok):
        return pd.DataFrame()
    ok, cfgs = labelled(ok)
    ok = ok.assign(producer=[producer_of(c) for c in cfgs])
    rows = []
    for (M, N, K), g in ok.groupby(["M", "N", "K"]):
        ws = g[g.variant == "gluon-ws"]
        peer = g[g.variant == GEMM_PEER]
        tma = ws[ws.producer == "TMA"]
        if not len(tma) or not len(peer) or set(ws.producer) == {"TMA"}:
            continue
        p, _ = peer_time(peer)
        bt = tma.loc[tma.ms_median.idxmin()]
        row = {"M": int(M), "N": int(N), "K": int(K), "best TMA": bt.label,
               "TMA / cuBLAS": round(p.ms_median / bt.ms_median, 3)}
        for prod in ("padded copy", "cp.async"):
            sub = ws[ws.producer == prod]
            if len(sub):
                b = sub.loc[sub.ms_median.idxmin()]
                row.update({f"best {prod}": b.label, f"{prod} / cuBLAS": round(p.ms_median / b.ms_median, 3),
                            f"{prod} speed-up over TMA": round(bt.ms_median / b.ms_median, 3)})
        rows.append(row)
    return pd.DataFrame(rows)


# ---- from the shape sweep to a shape-bucketed heuristic ----
WITHIN = 0.02  # a config "holds" a shape when it is within 2% of that shape's best Gluon config


def shape_bucket(M: int, N: int, K: int, sms: int = 132) -> str:
    """The bucket a shape falls in for the GEMM heuristic: M class x how many 128x256 tiles per SM
    (wave count) x long K (K >= 4 max(M, N))."""
    m = "M<=64" if M <= 64 else "M<=256" if M <= 256 else "M<=2048" if M <= 2048 else "M>2048"
    waves = -(-M // 128) * -(-N // 256) / sms
    w = "<1 wave" if waves < 1 else "1-4 waves" if waves < 4 else ">=4 waves"
    return f"{m}, {w}" + (", long K" if K >= 4 * max(M, N) else "")


def bucket_proposal(st):
    """Per bucket of one 'gemm-shapes' run: the config that holds (within WITHIN of the best Gluon
    config) on the most of its shapes, on how many, its worst ratio to the best there, and its geomean
    vs cuBLAS on those shapes: the data a shape-bucketed GemmConfig.heuristic is written from."""
    ok = cm.passed(st) if len(st) else st
    if not len(ok):
        return pd.DataFrame()
    ok, _ = labelled(ok)
    rows = []
    per_shape = {}
    for (M, N, K), g in ok.groupby(["M", "N", "K"]):
        peer, gl_ = g[g.variant == GEMM_PEER], g[g.variant != GEMM_PEER]
        if not len(peer) or not len(gl_):
            continue
        best = gl_.ms_median.min()
        per_shape[(int(M), int(N), int(K))] = (float(peer_time(peer)[0].ms_median), best,
                                               gl_.groupby("label").ms_median.min().to_dict())
    buckets = {}
    for shape, v in per_shape.items():
        buckets.setdefault(shape_bucket(*shape), []).append((shape, v))
    for b, items in sorted(buckets.items()):
        labels = {lab for _, (_, _, by) in items for lab in by if not lab.endswith("heuristic")}  # not circular
        def holds(lab):
            return [s for s, (_, best, by) in items if lab in by and by[lab] <= best * (1 + WITHIN)]
        pick = max(sorted(labels), key=lambda lab: (len(holds(lab)), -max((by[lab] / best for _, (_, best, by) in items
                                                                           if lab in by), default=9)))
        ratios = [best / by[pick] for _, (_, best, by) in items if pick in by]
        vs_cublas = [peer / by[pick] for _, (peer, _, by) in items if pick in by]
        rows.append({"bucket": b, "shapes": len(items), "candidate": pick, "holds on": len(holds(pick)),
                     "worst vs best gluon": round(min(ratios), 3) if ratios else np.nan,
                     "candidate / cuBLAS geomean": round(cm.geomean(vs_cublas), 3) if vs_cublas else np.nan})
    return pd.DataFrame(rows)


# ---- wave quantization of the persistent grid (computed) ----
def wave_table(shapes=None, tiles=((128, 256), (128, 128), (64, 256), (64, 128), (128, 64), (64, 64)), sms=None):
    """Wave quantization of the persistent grid, computed (no GPU): per shape and output tile, the
    tile count, waves = tiles / SMs and the last wave's fill: efficiency = tiles / (ceil(waves) * SMs),
    the share of SM-slots that hold a tile when every tile costs the same. A ragged edge tile costs as
    much as a full one (TMA zero-fills), so it is counted whole."""
    from ..experiments import GEMM_SHAPE_SWEEP
    from ..kernels.hopper import H200_SMS
    sms = sms or H200_SMS
    rows = []
    for (M, N, K) in (shapes or GEMM_SHAPE_SWEEP):
        for (bm, bn) in tiles:
            n = -(-M // bm) * -(-N // bn)
            rows.append({"shape": f"{M}x{N}x{K}", "M": M, "N": N, "K": K, "tile": f"{bm}x{bn}", "tiles": n,
                         "waves": round(n / sms, 2), "efficiency": round(n / (-(-n // sms) * sms), 3),
                         "useful": round(M * N / (-(-M // bm) * bm * -(-N // bn) * bn), 3)})
    return pd.DataFrame(rows)


def wave_figure(wt):
    """Heat map of wave_table: rows = shapes, columns = tiles, colour = last-wave efficiency x the
    useful share of the tiles (the fraction of the MMA work that lands in C)."""
    pv = wt.assign(score=wt.efficiency * wt.useful).pivot_table(index="shape", columns="tile", values="score",
                                                               sort=False)
    fig, ax = plt.subplots(figsize=(7.5, 0.28 * len(pv) + 1.2))
    im = ax.imshow(pv.values, cmap="RdYlGn", vmin=0.3, vmax=1.0, aspect="auto")
    ax.set_xticks(range(len(pv.columns)), pv.columns)
    ax.set_yticks(range(len(pv.index)), pv.index, fontsize=7)
    for i in range(pv.shape[0]):
        for j in range(pv.shape[1]):
            ax.text(j, i, f"{pv.values[i, j]:.2f}", ha="center", va="center", fontsize=6)
    ax.set_title("wave efficiency x useful share of the tile (132 SMs, one tile per SM at a time)", fontsize=9)
    fig.colorbar(im, ax=ax, fraction=0.03)
    fig.tight_layout()
    return fig


# ---- the consumer schedules: the forks in the source, the GEMM timeline (experiments.capture_gemm_timeline) ----
def consumer_schedule() -> list:
    """How the two GEMM kernels fork (partitions, worker warps and registers) and how their consumers
    lay out the accumulator, read from the current source; lines of text."""
    out = []
    for kern, cons in (("ws_gemm_kernel", "_ws_consumer"), ("ws_pingpong_gemm_kernel", "_pp_consumer")):
        src = gemm_source(kern)
        calls = src.split("gl.warp_specialize(")[1:]  # one fork per producer kind (cp.async / TMA)
        acc = re.search(r"warps_per_cta=(\[[^\]]*\])", gemm_source(cons))
        for call in calls:
            m = re.search(r"\],\s*(\[[^\]]*\]),\s*(\[[^\]]*\])\)", call)
            parts = re.findall(r"\((\w+), \(", call[:m.end()] if m else call)
            out.append(f"{kern}: partitions {', '.join(parts)} (the first is the default); worker warps "
                       f"{m.group(1) if m else '?'}, worker registers {m.group(2) if m else '?'}; consumer accumulator "
                       f"warps_per_cta={acc.group(1) if acc else '?'}")
    out += ["cooperative (GemmConfig(pingpong=False)): with num_warps = 8 the two consumer warpgroups split the BM "
            "rows of ONE tile; its epilogue stalls both",
            "ping-pong (GemmConfig(pingpong=True), num_warps = 4 per warpgroup): two _pp_consumer partitions own "
            "alternate tiles, each a whole BM x BN accumulator and its own C buffer; the ORDER barriers make their "
            "mainloops take turns, so one warpgroup's epilogue overlaps the other's MMAs"]
    return out


def load_gemm_timeline(ctx: cm.Context):
    """results/<gpu>/04-warp-specialization.gemm-timeline.json, or None."""
    return tl.load_timeline(ctx, NB, ".gemm-timeline.json")


def _tiles(cta) -> np.ndarray:
    """One CTA's rows [wg + 1, start, mma_issued, stored] as an array (ns from the run's first stamp)."""
    return np.asarray(cta, dtype=float).reshape(-1, 4)


def gemm_timeline_stats(GT) -> pd.DataFrame:
    """Per shape and schedule: traced CTAs, tiles per CTA, the median mainloop (start -> last MMA
    issued) and epilogue (last MMA -> store issued) per tile, and `mainloop share` = the share of each
    CTA's span (its first start to its last store) covered by at least one warpgroup's mainloop: the
    time the CTA keeps the tensor cores fed (cooperative: the epilogue is a gap; ping-pong: the other
    warpgroup's mainloop fills it)."""
    rows = []
    for shape, by_sched in (GT or {}).get("timelines", {}).items():
        for sched, d in by_sched.items():
            ctas = [_tiles(c) for c in d["ns"] if len(c)]
            if not ctas:
                continue
            main = np.concatenate([c[:, 2] - c[:, 1] for c in ctas])
            epi = np.concatenate([c[:, 3] - c[:, 2] for c in ctas])
            share = []
            for c in ctas:
                iv = sorted(zip(c[:, 1], c[:, 2]))
                covered, cur_s, cur_e = 0.0, *iv[0]
                for s0, e0 in iv[1:]:
                    if s0 > cur_e:
                        covered += cur_e - cur_s
                        cur_s, cur_e = s0, e0
                    else:
                        cur_e = max(cur_e, e0)
                covered += cur_e - cur_s
                span = c[:, 3].max() - c[:, 1].min()
                share.append(covered / span if span > 0 else np.nan)
            rows.append({"shape": shape, "schedule": sched, "CTAs": len(ctas),
                         "tiles / CTA": round(float(np.mean([len(c) for c in ctas])), 1),
                         "mainloop us (median)": round(float(np.median(main)) / 1000, 2),
                         "epilogue us (median)": round(float(np.median(epi)) / 1000, 2),
                         "mainloop share": round(float(np.median(share)), 3),
                         "kernel span us": round(float(max(c[:, 3].max() for c in ctas)
                                                       - min(c[:, 1].min() for c in ctas)) / 1000, 1)})
    return pd.DataFrame(rows)


def gemm_timeline_figure(GT, shape: str | None = None, ctas=(0, 1), lanes: str = "tag"):
    """Gantt of the first CTAs under each schedule at one shape (the template's per-unit stamps, igemm.trace):
    mainloop (start -> last MMA issued, solid) and epilogue (-> store issued, light). lanes="tag": one lane per
    tag (the GEMM's consumer warpgroups); lanes="cta": one lane per CTA, its units' mainloops coloured by tag (a
    conv split-K unit's K-slice), for schedules whose CTAs run their units one after another."""
    tl = (GT or {}).get("timelines", {})
    if not tl:
        return None
    shape = shape or next(iter(tl))
    scheds = list(tl[shape])
    per = len(ctas) if lanes == "cta" else 2 * len(ctas)
    fig, axes = plt.subplots(len(scheds), 1, figsize=(9, 1.3 + 0.45 * len(scheds) * per), sharex=True)
    axes = np.atleast_1d(axes)
    palette = plt.get_cmap("tab10").colors
    for ax, sched in zip(axes, scheds):
        data = [_tiles(c) for c in tl[shape][sched]["ns"] if len(c)]
        y, labels = 0, []
        for ci in ctas:
            if ci >= len(data):
                continue
            c = data[ci]
            groups = [(f"CTA {ci}", c)] if lanes == "cta" else \
                [(f"CTA {ci} WG {wg - 1}", c[c[:, 0] == wg]) for wg in sorted(set(c[:, 0].astype(int)))]
            for label, r in groups:
                colors = [palette[(int(t) - 1) % 10] for t in r[:, 0]] if lanes == "cta" else "tab:blue"
                ax.broken_barh(list(zip(r[:, 1] / 1000, (r[:, 2] - r[:, 1]) / 1000)), (y, 0.8), color=colors)
                ax.broken_barh(list(zip(r[:, 2] / 1000, (r[:, 3] - r[:, 2]) / 1000)), (y, 0.8), color="tab:orange",
                               alpha=0.6)
                labels.append(label)
                y += 1
        ax.set_yticks([i + 0.4 for i in range(len(labels))], labels, fontsize=7)
        what = "mainloop (coloured by K-slice)" if lanes == "cta" else "mainloop (blue)"
        ax.set_title(f"{sched} ({shape}): {what} / epilogue (orange)", fontsize=9)
    axes[-1].set_xlabel("us from the first stamp")
    fig.tight_layout()
    return fig


# ---- takeaways -----------------------------------------------------------------------------------
def verdict(r: float) -> str:
    """gluon-ws vs gluon-pipelined, geomean r: pays (> 1), on par (>= 0.98), does not pay."""
    return "WS pays" if r > 1.0 else "on par (geomean within 2%)" if r >= WS_VS_PIPE else "WS does not pay here"


def gemm_takeaways(*, gm=EMPTY, gemm_tab=EMPTY, gt=EMPTY, ws_ok=EMPTY) -> list[str]:
    """The GEMM grid vs cuBLAS and gluon-pipelined, its targets, and what the ws-sweep's knobs move (sub-items
    start with two spaces: pipelined.bullets)."""
    lines = []
    if len(gemm_tab):
        r, rp = gemm_tab["gluon-ws / cuBLAS"], gemm_tab["gluon-ws / gluon-pipelined"]
        sq = GG.square_ratio(gemm_tab, "gluon-ws / cuBLAS")
        sq_tf = GG.square_ratio(gemm_tab, "gluon-ws")
        lines.append(f"**GEMM: {verdict(plots.geomean(rp))} (vs gluon-pipelined)** (run `{gm.run_id.iloc[0]}`): gluon-ws "
                     + (f"{sq_tf:.0f} TFLOP/s = **{sq:.3f}x cuBLAS at 8192³**, " if sq is not None else "")
                     + f"geomean **{plots.geomean(r):.3f}x** cuBLAS and {plots.geomean(gemm_tab['triton / cuBLAS']):.3f}x "
                     "for Triton's tl.dot; "
                     f"vs gluon-pipelined geomean {plots.geomean(rp):.3f}x, ahead at "
                     + (", ".join(cm.shape_str(i) for i in rp[rp >= 1].index) or "no shape")
                     + ", behind at " + (", ".join(f"{cm.shape_str(i)} ({v:.3f}x)" for i, v in rp[rp < 1].items()) or "no shape") + ".")
        if len(gt):
            lines.append("  GEMM targets: " + "; ".join(f"{t.get('short', t['target'])}: {t['measured']} ({'met' if t['met'] else 'MISSED'})"
                                                         for _, t in gt.iterrows()) + ".")
    if len(ws_ok):
        sp_ = ws_ok.groupby(["shape", "tile"]).tflops.agg(lambda s: 100 * (s.max() / s.min() - 1))
        lines.append(f"ws-sweep: the producer's register budget moves a (shape, tile) by {sp_.min():.1f}-{sp_.max():.1f}% "
                     f"(median {sp_.median():.1f}%); the tile matters more: best per shape " + ", ".join(
                         f"{sh}: {t.tile} regs {int(t.producer_regs)} {t.tflops:.0f} TFLOP/s" for sh, t in
                         ws_ok.sort_values("tflops").groupby("shape").tail(1).set_index("shape").iterrows()) + ".")
    return lines


def _sweep(use):
    """(records, shape_sweep_table) of the newest 'gemm-shapes' run in use (empty frames without one)."""
    st = shape_sweep_records(use) if len(use) else pd.DataFrame()
    return st, (shape_sweep_table(st) if len(st) else pd.DataFrame())


def shape_sweep_takeaway(use, sweep=None) -> str:
    """One line on the newest 'gemm-shapes' run: best Gluon and auto vs cuBLAS, the cells under 0.95x."""
    st, t = sweep if sweep is not None else _sweep(use)
    if not len(t):
        return "GEMM at every shape: the 'gemm-shapes' study has not run on a GPU for the current records."
    r, a = t["best / cuBLAS"], t["auto / cuBLAS"].dropna()
    low = t[r < SHAPE_TARGETS["every cell"]]
    return (f"GEMM at every shape ('gemm-shapes' run `{st.run_id.iloc[0]}`, {len(t)} shapes): the best Gluon config is "
            f"{cm.geomean(r):.3f}x cuBLAS (geomean), the heuristic gluon-ws {cm.geomean(t['ws heuristic / cuBLAS'].dropna()):.3f}x, "
            f"and variant=\"auto\" (Gluon only where its heuristic won by > 2%) {cm.geomean(a):.3f}x; under 0.95x: "
            + (", ".join(f"{m}x{n}x{k} ({v:.3f})" for m, n, k, v in zip(low.M, low.N, low.K, low["best / cuBLAS"])) or "none")
            + ".")


def pingpong_takeaway(use, sweep=None) -> str:
    """One line on the consumer schedules from the newest 'gemm-shapes' run (or that there is none)."""
    st, t = sweep if sweep is not None else _sweep(use)
    if not len(t) or t["ping-pong / cooperative"].isna().all():
        return ("Consumer schedules: cooperative and ping-pong (GemmConfig(pingpong=True)) are both built; "
                "no run of the 'gemm-shapes' study holds ping-pong yet, so nothing is claimed about it.")
    r = t["ping-pong / cooperative"].dropna()
    return (f"Consumer schedules: the best ping-pong gluon-ws config beats the best cooperative one on {int((r > 1).sum())} "
            f"of {len(r)} shapes (geomean {cm.geomean(r):.3f}x, 'gemm-shapes' run `{st.run_id.iloc[0]}`).")


def shape_takeaways(use) -> list[str]:
    """The consumer-schedule line and the every-shape line, from one shape_sweep_table of the newest run."""
    sweep = _sweep(use)  # one table for both lines
    return [pingpong_takeaway(use, sweep), shape_sweep_takeaway(use, sweep)]
