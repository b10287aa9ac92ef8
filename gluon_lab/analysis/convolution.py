"""Notebook 06-convolution: the implicit-GEMM convolution family on Hopper (fprop, dgrad, wgrad).

Kernel-facing (the only places this module reaches into kernels / experiments / codegen):
    measure()        gluon_lab.experiments.run_conv(results_dir=, quick=, parts=)
    plan_shapes()    gluon_lab.experiments.CONV_SHAPES
    kernel_source()  registry.sources of conv2d gluon-pipelined: tap_shift, tap_box_issue, _conv_tile, _conv_next, conv_fprop_kernel
                     (.fn sources)
    census_table()   gluon_lab.kernels.conv.{fprop,fprop_ws,gather,dgrad,wgrad,triton,wgrad_triton}_codegen
                     -> codegen.compile_sm90 / census
    a_paths()        gluon_lab.kernels.conv.a_path, ConvConfig / GatherConfig.heuristic
    load_timeline()  analysis.timeline.load_timeline (results/<gpu>/06-convolution.timeline.json)

Records: the newest record per case (results.latest); ratios are taken inside one run only.
"""
from __future__ import annotations

from .. import plots
from . import common as cm

NB = "06-convolution"
OP = "conv2d"
DGRAD = "conv2d_input_grad"
DGRAD_TARGET = 1.5
WGRAD = "conv2d_weight_grad"
WGRAD_TARGET = 1.0
VARIANTS = ("torch", "triton", "gluon-pipelined", "gluon-ws", "gluon-gather")
OURS = "gluon-pipelined"
GATHER = "gluon-gather"  # the Gluon fprop of shapes without a tiled-TMA path
BASE = "torch"  # cuDNN (cudnn.benchmark, channels-last)
FPROP_TARGET, FPROP_MOONSHOT = 1.0, 1.1
KEYS = ("B", "Ci", "Co", "H", "W", "R", "stride", "pad")


# ---- kernel-facing -------------------------------------------------------------------------------
def measure(ctx: cm.Context, quick: bool = False, parts=("fprop", "gather", "fprop-sweep")):
    from ..experiments import run_conv
    _, where = run_conv(results_dir=str(ctx.results_dir), quick=quick, parts=tuple(parts))
    return where


def plan_shapes(gather: bool = False, idle: bool = False) -> list[dict]:
    """The plan's shapes (CONV_SHAPES), with the SM-idle ones (IDLE_SHAPES) and / or the gather-only ones."""
    from ..experiments import CONV_SHAPES, GATHER_SHAPES, IDLE_SHAPES
    return [dict(zip(KEYS, t)) for t in CONV_SHAPES + (IDLE_SHAPES if idle else ()) + (GATHER_SHAPES if gather else ())]


def kernel_source() -> str:
    """The pipelined fprop's code by name through the registry: the template's tap-box producer and the kernel."""
    from .. import registry
    return "\n\n".join(registry.sources("conv2d", "gluon-pipelined", n) for n in
                         ("tap_shift", "tap_box_issue", "_conv_tile", "_conv_next", "conv_fprop_kernel"))


def label(s: dict) -> str:
    return f"{s['B']}x{s['Ci']}→{s['Co']} {s['H']}x{s['W']} {s['R']}x{s['R']} s{s['stride']}"


def labels(d) -> list[str]:
    """The shape label of every record of a frame."""
    return [label({k: int(r[k]) for k in KEYS}) for _, r in d.iterrows()]


def a_paths(shapes=None):
    """Per shape: the A path of the Gluon fprop (or why none), its heuristic tile, and the GEMM view."""
    import pandas as pd
    from ..kernels import conv, conv_ws
    from ..specs.conv import gemm_shape
    rows = []
    for s in shapes or plan_shapes(gather=True):
        path, why = conv.a_path(s)
        M, N, K = gemm_shape(s)
        if path == "tma":
            c = conv.ConvConfig.heuristic(s, "bfloat16")
            variant, tile = "gluon-pipelined / gluon-ws", f"{c.TH}x{c.TW} (BM {c.BM}) x {c.BN}, {c.num_stages} st, {c.num_warps} w"
        else:
            c = conv.GatherConfig.heuristic(s, "bfloat16")
            variant, tile = GATHER, f"BM {c.BM} x {c.BN}, {c.num_stages} st, {c.num_warps} w"
        rows.append({"shape": label(s), "M = B·OH·OW": M, "N = Co": N, "K = R·R·Ci": K, "A path": path,
                     "Gluon variant": variant, "why": why, "tile": tile})
    return pd.DataFrame(rows).set_index("shape")


def census_table():
    """sm_90 census (compiled here) of the Gluon fprop at each plan shape (heuristic config) and the Triton
    baseline at one."""
    from .. import codegen
    from ..kernels import conv, conv_ws

    def cen(spec):
        return codegen.census(codegen.compile_sm90(**{a: b for a, b in spec.items() if a != "options"}))

    rows = {}
    for s in plan_shapes(gather=True):
        if conv.a_path(s)[0] == "tma":
            rows[f"gluon-pipelined {label(s)}"] = cen(conv.fprop_codegen(s, "bfloat16"))
        else:
            rows[f"gluon-gather {label(s)}"] = cen(conv.gather_codegen(s, "bfloat16"))
    s, s2 = plan_shapes()[1], plan_shapes()[2]
    rows[f"gluon-ws {label(s)}"] = cen(conv_ws.fprop_ws_codegen(s, "bfloat16"))
    rows[f"gluon-gather {label(s)}"] = cen(conv.gather_codegen(s, "bfloat16"))
    rows[f"dgrad gluon-pipelined {label(s)}"] = cen(conv.dgrad_codegen(s, "bfloat16"))
    rows[f"dgrad gluon-pipelined {label(s2)} (largest of 4 sub-problems)"] = cen(conv.dgrad_codegen(s2, "bfloat16"))
    rows[f"wgrad gluon-pipelined {label(s)}"] = cen(conv.wgrad_codegen(s, "bfloat16"))
    rows[f"triton {label(s)}"] = cen(conv.triton_codegen(s, "bfloat16"))
    rows[f"wgrad triton {label(s)}"] = cen(conv.wgrad_triton_codegen(s, "bfloat16"))
    ct = codegen.census_table(rows)
    for k in ("UTMALDG", "UTMASTG", "HGMMA"):
        ct[f"{k} (SASS)"] = [c["sass"][k] for c in rows.values()]
    return ct


def census_view(ct) -> list:
    return cm.compact_census(ct, keep=("UTMALDG (SASS)", "UTMASTG (SASS)", "HGMMA (SASS)"))


# ---- records -------------------------------------------------------------------------------------
def _newest(df, op: str = OP):
    from .. import results
    d = df[df["op"] == op] if len(df) else df
    return results.latest(d) if len(d) else d.copy()


def fprop(df, op: str = OP):
    """The records of op (fprop; DGRAD: the input gradient) of the plan's main part (no knob study), newest
    per case, with a shape label."""
    if not len(df):
        return df.copy()
    d = cm.passed(_newest(df, op)).copy()
    if not len(d):
        return d
    d = d[~d["config_key"].str.contains('"study"', regex=False)]
    d["shape"] = labels(d)
    d["us"] = 1000 * d["ms_median"].astype(float)
    return d


def tflops_table(df, op: str = OP):
    """TFLOP/s per shape x variant and the Gluon kernels vs cuDNN, taken within the newest run holding both
    (rounded for display; the numbers below use _tflops, unrounded). op: OP (fprop) or DGRAD."""
    t = _tflops(df, op)
    return None if t is None else t.round(2)


def _tflops(df, op: str = OP):
    d = fprop(df, op)
    if not len(d):
        return None
    d = cm.newest_run(d, require=(OURS, BASE))
    piv = d.pivot_table(index="shape", columns="variant", values="tflops", sort=False)
    piv = piv[[v for v in VARIANTS if v in piv.columns]]
    if {OURS, BASE} <= set(piv.columns):
        piv[f"{OURS} vs cuDNN (x)"] = piv[OURS] / piv[BASE]
    if GATHER in piv.columns and OURS in piv.columns:  # the Gluon fprop of a shape: the TMA kernel, else the gather
        piv[f"{OURS} vs cuDNN (x)"] = piv[f"{OURS} vs cuDNN (x)"].fillna(piv[GATHER] / piv[BASE])
    if {GATHER, BASE} <= set(piv.columns):
        piv[f"{GATHER} vs cuDNN (x)"] = piv[GATHER] / piv[BASE]
    if {"gluon-ws", BASE} <= set(piv.columns):
        piv["gluon-ws vs cuDNN (x)"] = piv["gluon-ws"] / piv[BASE]
    if {"triton", BASE} <= set(piv.columns):
        piv["triton vs cuDNN (x)"] = piv["triton"] / piv[BASE]
    piv.columns.name = f"TFLOP/s (run {cm.run_short(d['run_id'].iloc[0])})"
    return piv


def targets(df):
    """Per shape: fprop ≥ 1.0× cuDNN (moonshot 1.1×), dgrad ≥ 1.5× cuDNN, wgrad ≥ 1.0× cuDNN."""
    import pandas as pd
    t = _tflops(df)
    if t is None or f"{OURS} vs cuDNN (x)" not in t:
        return None
    col = t[f"{OURS} vs cuDNN (x)"]
    dg = _tflops(df, DGRAD)
    dcol = dg[f"{OURS} vs cuDNN (x)"].reindex(col.index) if dg is not None and f"{OURS} vs cuDNN (x)" in dg else \
        pd.Series(float("nan"), index=col.index)
    wg = _tflops(df, WGRAD)
    wcol = wg[f"{OURS} vs cuDNN (x)"].reindex(col.index) if wg is not None and f"{OURS} vs cuDNN (x)" in wg else \
        pd.Series(float("nan"), index=col.index)
    c1, c2, c3 = f"fprop ≥ {FPROP_TARGET:.1f}× cuDNN", f"dgrad ≥ {DGRAD_TARGET:.1f}× cuDNN", "wgrad ≥ 1.0× cuDNN"
    V = pd.DataFrame({c1: col, c2: dcol, c3: wcol})

    def state(x, target):
        return "met" if x >= target else "missed" if x == x else "not measured"

    S = pd.DataFrame({c1: [state(x, FPROP_TARGET) for x in col], c2: [state(x, DGRAD_TARGET) for x in dcol],
                      c3: [state(x, WGRAD_TARGET) for x in wcol]}, index=V.index)
    return cm.met_grid(V, S, fmt="{:.2f}", legend={"values": "Gluon TFLOP/s ÷ cuDNN's, same run (fprop: "
                                                             "gluon-pipelined, gluon-gather where no TMA path)"})


GLUON = ("gluon-pipelined", "gluon-ws", "gluon-gather")
# issue 32's bars on the best Gluon kernel of each shape: (geomean, every shape) of its time ÷ cuDNN's, same run
ISSUE_TARGETS = {OP: (1.0, 0.90), DGRAD: (None, 1.5), WGRAD: (1.0, 0.90)}
_OP_NAME = {OP: "fprop", DGRAD: "dgrad", WGRAD: "wgrad"}


def best_gluon(df, op: str = OP):
    """Per shape of the newest run holding cuDNN (cells re-measured later composed in, cm.newest_run): the
    fastest Gluon variant that ran there (what `auto` can pick), its µs, cuDNN's µs and cuDNN ÷ it (same run,
    same FLOPs: the TFLOP/s ratio). None without such a run."""
    import pandas as pd
    d = fprop(df, op)
    if not len(d) or BASE not in set(d["variant"]):
        return None
    d = cm.newest_run(d, require=(BASE, ))
    rows = []
    for shape, g in d.groupby("shape", sort=False):
        us = dict(zip(g["variant"], g["us"]))
        ours = {v: us[v] for v in GLUON if v in us}
        if BASE not in us or not ours:
            continue
        pick = min(ours, key=ours.get)
        rows.append({"shape": shape, "best Gluon": pick, "µs": round(ours[pick], 1), "cuDNN µs": round(us[BASE], 1),
                     "vs cuDNN (x)": us[BASE] / ours[pick], "run": cm.run_short(g["run_id"].iloc[0])})
    if not rows:
        return None
    t = pd.DataFrame(rows).set_index("shape")
    t.columns.name = f"{_OP_NAME[op]}: the fastest Gluon kernel per shape vs cuDNN"
    return t


def issue_targets(df):
    """Issue 32's conv targets on the best Gluon kernel per shape (best_gluon): fprop and wgrad ≥ 1.0× cuDNN
    geomean and ≥ 0.90× on every shape, dgrad ≥ 1.5× on every shape. A (target, measured, met) frame for
    cm.target_list; None without records."""
    import pandas as pd
    rows = []
    for op, (gm, every) in ISSUE_TARGETS.items():
        t = best_gluon(df, op)
        if t is None:
            continue
        r = t["vs cuDNN (x)"]
        worst = r.idxmin()
        if gm is not None:
            g = plots.geomean(list(r))
            rows.append({"target": f"{_OP_NAME[op]} ≥ {gm:.1f}× cuDNN geomean", "measured": f"{g:.3f}× over {len(r)} shapes",
                         "met": "met" if g >= gm else "missed"})
        rows.append({"target": f"{_OP_NAME[op]} ≥ {every:.2f}× cuDNN on every shape",
                     "measured": f"{int((r >= every).sum())} of {len(r)} shapes; worst {r.min():.2f}× ({worst})",
                     "met": "met" if (r >= every).all() else "missed"})
    return pd.DataFrame(rows) if rows else None


_SWEEP_FMT = {
    "fprop-sweep": lambda c: f"{c['TH']}x{c['TW']}x{c['BN']} {c['num_stages']}st {c['num_warps']}w",
    "tail-sweep": lambda c: f"{c['TH']}x{c['TW']}x{c['BN']} {c['num_stages']}st {c['num_warps']}w {c['ctas_per_sm']}/SM",
    "wgrad-sweep": lambda c: (f"{c['TH']}x{c['TW']} {c['BM']}x{c['BN']} {c['num_stages']}st {c['num_warps']}w "
                              f"split {c['splits'] or 'auto'}"),
    "gather-sweep": lambda c: f"BM {c['BM']} x {c['BN']} {c['num_stages']}st {c['num_warps']}w",
}
_SWEEP_OP = {"fprop-sweep": (OP, OURS), "wgrad-sweep": (WGRAD, OURS), "gather-sweep": (OP, GATHER)}
SCHEDULED = "gluon-ws"  # the template instance that takes the schedules (kernels/conv_ws.py)


def _schedule_label(c: dict) -> str:
    """A schedule-study column: the tile (fprop / dgrad: patch TH x TW x BN; wgrad: patch, BM x BN and the
    consumer warps) and the schedule (serial: the split tiles summed by their last slice in the kernel, no fixup
    launch; flat: a 1x1's tile is a row of TW pixels across images), so two tiles under one schedule are two
    columns; the ring depth and consumer warps are part of the tile (s3 w4), so two points differing only there are
    two columns, not one averaged cell."""
    sk = c.get("split_k", 0)
    sched = "split-K auto" if not sk else ("data-parallel" if sk == 1 else f"split-K {sk}")
    ring = f"s{c['num_stages']} w{c['num_warps']}" if "num_stages" in c and "num_warps" in c else ""
    tile = (f"{c['TH']}x{c['TW']} {c['BM']}x{c['BN']} {ring}" if "BM" in c
            else f"{c['TH']}x{c['TW']}x{c['BN']} {ring}").rstrip()
    return (f"{tile} {sched}" + (" (last wave)" if c.get("split_last_wave") else "")
            + (" slice-major" if c.get("slice_major") and sk != 1 else "")  # data-parallel has no slices
            + (" serial" if c.get("serial") and sk != 1 else "")  # ... and nothing to reduce
            + (" flat" if c.get("flat") else ""))  # 1x1: a row of pixels across images, not a patch


def schedule_table(df, op: str = OP):
    """The 'schedule' study: gluon-ws µs per shape and schedule (data-parallel, split-K 2 / 4 / 8 / the rule's,
    last-wave split; patch TH x TW), newest run."""
    if not len(df):
        return None
    d = cm.passed(_newest(df, op))
    s = d[(d["variant"] == SCHEDULED) & d["config_key"].str.contains('"study": "schedule"', regex=False)].copy()
    if not len(s):
        return None
    s["shape"] = labels(s)
    s["schedule"] = [_schedule_label(c) for c in s["config"]]
    piv = s.pivot_table(index="shape", columns="schedule", values="ms_median") * 1000
    piv.columns.name = f"{SCHEDULED} {op} µs (schedule study, run {s['run_id'].iloc[0]})"
    return piv.round(1)


def _wave_row(sh: dict, patch: str, tiles: int, k_tiles: int, plan: tuple) -> dict:
    from ..kernels.igemm.schedule import wave_fill
    split, _, units = plan
    return {"shape": label(sh), "patch": patch, "tiles": tiles, "data-parallel SM fill": round(wave_fill(tiles), 2),
            "k-steps / tile": k_tiles, "schedule": "data-parallel" if split == 1 else f"split-K {split}",
            "units": units, "units' SM fill": round(wave_fill(units), 2)}


def wave_map(shapes=None, op: str = OP):
    """Per shape, what gluon-ws runs on the H200 (its config through the registry, the split plan of its largest
    launch; wgrad: Co / BM x taps x Ci / BN tiles whose k-steps are the pixel patches): output tiles, waves of
    data-parallel tiles on 132 SMs, the schedule's split_k and work units and the SMs they fill."""
    import pandas as pd
    from .. import registry
    from ..kernels.hopper import H200_SMS
    from ..specs.conv import out_size
    rows = []
    v = registry.get_variant(op, SCHEDULED)
    for sh in shapes or plan_shapes(idle=True):
        cfg = v.resolve(sh, "bfloat16", {})
        if op == WGRAD:  # M = Co, N = taps x Ci, K = the B·OH·OW pixels in TH x TW patches
            OH, OW = (out_size(sh[d], sh["R"], sh["stride"], sh["pad"]) for d in ("H", "W"))
            tiles = -(-sh["Co"] // cfg.BM) * sh["R"] ** 2 * -(-sh["Ci"] // cfg.BN)
            k_tiles = sh["B"] * -(-OH // cfg.TH) * -(-OW // cfg.TW)
            rows.append(_wave_row(sh, f"{cfg.TH}x{cfg.TW} {cfg.BM}x{cfg.BN}", tiles, k_tiles,
                                  cfg.plan(tiles, k_tiles, H200_SMS)))
            continue
        st = sh["stride"] if op == DGRAD else 1
        OH = sh["H"] // st if op == DGRAD else out_size(sh["H"], sh["R"], sh["stride"], sh["pad"])
        OW = sh["W"] // st if op == DGRAD else out_size(sh["W"], sh["R"], sh["stride"], sh["pad"])
        n_out, n_in = (sh["Ci"], sh["Co"]) if op == DGRAD else (sh["Co"], sh["Ci"])
        taps = (-(-sh["R"] // st)) ** 2 if op == DGRAD else sh["R"] ** 2
        tiles = sh["B"] * -(-OH // cfg.TH) * -(-OW // cfg.TW) * -(-n_out // cfg.BN)
        k_tiles = taps * -(-n_in // cfg.BK)
        rows.append(_wave_row(sh, f"{cfg.TH}x{cfg.TW}x{cfg.BN}", tiles, k_tiles, cfg.plan(tiles, k_tiles, H200_SMS)))
    t = pd.DataFrame(rows).set_index("shape")
    t.columns.name = f"{SCHEDULED} {op}: tiles and schedule (largest launch)"
    return t


def sweep_table(df, study: str = "fprop-sweep", op: str | None = None):
    """A knob study's TFLOP/s per shape and config, the heuristic's (the plan's main-part record) beside it.
    study: fprop-sweep, tail-sweep (op OP or DGRAD), wgrad-sweep, gather-sweep."""
    if not len(df):
        return None
    op, variant = (op, OURS) if op else _SWEEP_OP.get(study, (OP, OURS))
    d = cm.passed(_newest(df, op))
    s = d[d["config_key"].str.contains(f'"study": "{study}"', regex=False)].copy()
    if not len(s):
        return None
    s["shape"] = labels(s)
    s["config"] = [_SWEEP_FMT[study](c) for c in s["config"]]
    piv = s.pivot_table(index="shape", columns="config", values="tflops")
    f = fprop(df, op)
    f = f[f["variant"] == variant].set_index("shape")["tflops"] if len(f) else None
    if f is not None and len(f):
        piv["heuristic"] = f.reindex(piv.index)
    piv.columns.name = f"{variant} {op} TFLOP/s ({study})"
    return piv.round(1)


# ---- the measured timeline of persistent CTAs (%globaltimer, INSTRUMENT build) -------------------
def load_timeline(ctx: cm.Context):
    from .timeline import load_timeline as load
    return load(ctx, NB)


def load_ws_timeline(ctx: cm.Context):
    """results/<gpu>/06-convolution.ws-timeline.json (experiments.capture_conv_ws_timeline), or None."""
    from .timeline import load_timeline as load
    return load(ctx, NB, ".ws-timeline.json")


def ws_timeline_note(WT) -> str:
    """Where the split-K timeline comes from, or why there is none."""
    if not WT or not WT.get("timelines"):
        return ("**No split-K timeline recorded yet** for this GPU: it is a capture of the `ws-timeline` part "
                "(`python -m gluon_lab bench 06-convolution --parts ws-timeline` on an sm_90 GPU), not drawn here.")
    return (f"Timeline of run `{WT.get('run_id')}` ({WT.get('gpu')}): stamps of the INSTRUMENT build, whose timed "
            "build is the one the tables above measure.")


def ws_timeline_stats(WT):
    """The split-K timeline in the GEMM's view (gemm.gemm_timeline_stats: CTAs, units per CTA, median mainloop
    and epilogue per unit, the mainloop's share of a CTA's span, the kernel's span), with each schedule's K-slices
    per tile (the plan it ran: the heuristic's split_choice, or 1)."""
    from .gemm import gemm_timeline_stats
    t = gemm_timeline_stats(WT)
    if t.empty:
        return t
    split = {(shape, sched): d.get("split_k") for shape, by in WT["timelines"].items() for sched, d in by.items()}
    t.insert(2, "K-slices", [split.get((a, b)) for a, b in zip(t["shape"], t["schedule"])])
    return t.rename(columns={"tiles / CTA": "units / CTA"})


def ws_timeline_figure(WT, shape: str | None = None, ctas=tuple(range(8))):
    """Per schedule, the first CTAs' units one lane per CTA, each unit's mainloop coloured by its K-slice."""
    from .gemm import gemm_timeline_figure
    return gemm_timeline_figure(WT, shape, ctas=ctas, lanes="cta")


def timeline_stats(TL):
    """Per traced shape: tiles per CTA and the medians over every tile of every CTA (µs) of the wait for the
    first k-step's data, the k-loop, the epilogue (accumulator -> smem -> TMA store issued) and the gap to the
    next tile's start; the k-loop's share of the CTA's span; the spread of CTA finish times."""
    import numpy as np
    import pandas as pd
    rows = []
    for key, t in (TL or {}).get("timelines", {}).items():
        ctas = [np.asarray(c, dtype=float).reshape(-1, 4) for c in t["ns"] if len(c)]
        if not ctas:
            continue
        wait = np.concatenate([c[:, 1] - c[:, 0] for c in ctas])
        loop = np.concatenate([c[:, 2] - c[:, 1] for c in ctas])
        epi = np.concatenate([c[:, 3] - c[:, 2] for c in ctas])
        gap = np.concatenate([c[1:, 0] - c[:-1, 3] for c in ctas if len(c) > 1] or [np.zeros(0)])
        busy = [float((c[:, 2] - c[:, 1]).sum() / (c[-1, 3] - c[0, 0])) for c in ctas]
        ends = np.array([c[-1, 3] for c in ctas])
        cfg = t["config"]
        rows.append({"shape": label(t["shape"]), "tile": f"{cfg['TH']}x{cfg['TW']}x{cfg['BN']} {cfg['num_stages']}st",
                     "CTAs": len(ctas), "tiles per CTA": f"{min(map(len, ctas))}–{max(map(len, ctas))}",
                     "first-data wait (µs)": np.median(wait) / 1e3, "k-loop (µs)": np.median(loop) / 1e3,
                     "epilogue (µs)": np.median(epi) / 1e3,
                     "gap to next tile (µs)": float(np.median(gap)) / 1e3 if len(gap) else float("nan"),
                     "k-loop share of span": float(np.median(busy)),
                     "CTA finish spread (µs)": (ends.max() - ends.min()) / 1e3})
    return pd.DataFrame(rows).set_index("shape").round(3) if rows else None


def timeline_figure(TL, ctas: int = 6, tiles: int = 12):
    """Gantt of the first `ctas` persistent CTAs per traced shape: per tile the first-data wait, the k-loop and
    the epilogue (first `tiles` tiles); None without a timeline."""
    import matplotlib.pyplot as plt
    import numpy as np
    tl = (TL or {}).get("timelines", {})
    if not tl:
        return None
    fig, axes = plt.subplots(len(tl), 1, figsize=(11, 1.2 + 0.45 * ctas * len(tl)), squeeze=False)
    colors = {"wait": "#d62728", "k-loop": "#1f77b4", "epilogue": "#ff7f0e"}
    for ax, (key, t) in zip(axes[:, 0], tl.items()):
        for y, c in enumerate([np.asarray(c, dtype=float).reshape(-1, 4) for c in t["ns"] if len(c)][:ctas]):
            c = c[:tiles] / 1e3
            for name, a, b in (("wait", 0, 1), ("k-loop", 1, 2), ("epilogue", 2, 3)):
                ax.barh(y, c[:, b] - c[:, a], left=c[:, a], color=colors[name], height=0.7,
                        label=name if y == 0 else None)
        ax.set_yticks(range(min(ctas, len(t["ns"]))), [f"CTA {i}" for i in range(min(ctas, len(t["ns"])))], fontsize=7)
        ax.invert_yaxis()
        ax.set_title(f"{label(t['shape'])}: first {tiles} tiles of {ctas} persistent CTAs", fontsize=9)
        ax.set_xlabel("µs from the first stamp (%globaltimer)")
        ax.legend(loc="upper right", fontsize=7, frameon=False, ncol=3)
    fig.tight_layout()
    return fig


def headline_figure(df, spec, slug: str):
    """TFLOP/s per shape, one bar per variant (same run), the datasheet bf16 peak dashed."""
    import matplotlib.pyplot as plt
    import numpy as np
    t = _tflops(df)
    if t is None:
        return None
    vs = [v for v in VARIANTS if v in t.columns]
    fig, ax = plt.subplots(figsize=(11, 4))
    x = np.arange(len(t))
    w = 0.8 / len(vs)
    for i, v in enumerate(vs):
        ax.bar(x + (i - (len(vs) - 1) / 2) * w, t[v], w, label="cuDNN (torch)" if v == BASE else v, color=plots._color(v))
    if f"{OURS} vs cuDNN (x)" in t:
        for xi, (val, r) in enumerate(zip(t[OURS], t[f"{OURS} vs cuDNN (x)"])):
            ax.annotate(f"{r:.2f}×", (xi + (vs.index(OURS) - (len(vs) - 1) / 2) * w, val), ha="center", va="bottom",
                        fontsize=8)
    ax.axhline(spec.bf16_tflops, color="0.5", ls="--", lw=0.8, label=f"datasheet {spec.bf16_tflops:.0f} TFLOP/s")
    ax.set_xticks(x, t.index, rotation=15, ha="right", fontsize=8)
    ax.set_ylabel("TFLOP/s (bf16)")
    ax.legend(loc="upper right", fontsize=8, frameon=False)
    ax.set_title(f"conv2d fprop on {slug}: TFLOP/s per shape (one run; labels: Gluon ÷ cuDNN)")
    fig.tight_layout()
    return fig


def roofline(df, spec, slug: str):
    d = fprop(df)
    if not len(d):
        return None
    return plots.roofline(d, spec, cm.ceilings(df), title=f"Roofline on {slug}: conv2d fprop, every variant and shape")


def headline_numbers(df, spec) -> list:
    t = _tflops(df)
    col = f"{OURS} vs cuDNN (x)"
    if t is None or col not in t:
        return [("Gluon fprop vs cuDNN", "missing: no run with both in the records")]
    r = t[col].dropna()
    best = t[OURS].idxmax()
    return [("Gluon fprop vs cuDNN", f"{plots.geomean(r):.2f}× geomean over {len(r)} shapes (min {r.min():.2f}×, "
                                      f"max {r.max():.2f}×)"),
            ("fastest Gluon fprop", f"{t.loc[best, OURS]:.0f} TFLOP/s at {best} (cuDNN {t.loc[best, BASE]:.0f})")] + \
        _grad_headline(df, DGRAD, "dgrad", base_range=True) + _grad_headline(df, WGRAD, "wgrad")


def _grad_headline(df, op: str, name: str, base_range: bool = False) -> list:
    """The headline of a backward op (DGRAD / WGRAD): Gluon vs cuDNN geomean over its shapes (with cuDNN's
    TFLOP/s range when base_range)."""
    d = _tflops(df, op)
    col = f"{OURS} vs cuDNN (x)"
    key = f"Gluon {name} vs cuDNN"
    if d is None or col not in d or not len(d[col].dropna()):
        return [(key, f"missing: no {name} run with both in the records")]
    r = d[col].dropna()
    extra = f"; cuDNN's {name} {d[BASE].min():.0f}–{d[BASE].max():.0f} TFLOP/s" if base_range else ""
    return [(key, f"{plots.geomean(r):.2f}× geomean over {len(r)} shapes (min {r.min():.2f}×, max {r.max():.2f}×{extra})")]


def takeaways(df, spec, history=None) -> list[str]:
    """The computed takeaways of the page. history: the archived runs' records (cm.archived), which
    the run-to-run spread of cuDNN counts too."""
    import pandas as pd
    lines = []
    t = _tflops(df)
    col = f"{OURS} vs cuDNN (x)"
    if t is not None and col in t:
        r = t[col].dropna()
        miss = r[r < FPROP_TARGET]
        lines.append(f"Gluon fprop vs cuDNN: geomean {plots.geomean(r):.2f}× over {len(r)} shapes; ≥ {FPROP_TARGET:.1f}× "
                     f"on {len(r) - len(miss)} of {len(r)}" + (": missed at " + ", ".join(f"{k} ({x:.2f}×)" for k, x in
                                                                                   miss.items()) if len(miss) else "")
                     + f"; moonshot ≥ {FPROP_MOONSHOT:.1f}× on {int((r >= FPROP_MOONSHOT).sum())}.")
        if "gluon-ws vs cuDNN (x)" in t:
            wr = t["gluon-ws vs cuDNN (x)"].dropna()
            lines.append(f"gluon-ws (1 producer warp, consumer warpgroups): {plots.geomean(wr):.2f}× cuDNN geomean "
                         f"({wr.min():.2f}–{wr.max():.2f}×); vs gluon-pipelined "
                         f"{plots.geomean((t['gluon-ws'] / t[OURS]).dropna()):.2f}× geomean.")
        if "triton vs cuDNN (x)" in t:
            tr = t["triton vs cuDNN (x)"].dropna()
            lines.append(f"The plain Triton implicit GEMM (pointer gathers, pipelined by Triton into cp.async): "
                         f"{plots.geomean(tr):.2f}× cuDNN geomean ({tr.min():.2f}–{tr.max():.2f}×).")
    if t is not None and f"{GATHER} vs cuDNN (x)" in t:
        gr = t[f"{GATHER} vs cuDNN (x)"].dropna()
        both = t[[OURS, GATHER]].dropna() if OURS in t else None
        lines.append(f"gluon-gather (16-byte cp.async of each pixel's channels, any stride and size): "
                     f"{plots.geomean(gr):.2f}× cuDNN geomean ({gr.min():.2f}–{gr.max():.2f}×)"
                     + (f"; on the shapes the TMA kernel also takes it runs {plots.geomean(both[GATHER] / both[OURS]):.2f}× "
                        "the TMA kernel's TFLOP/s — the price of gathering A with 16 cp.async per thread per k-step "
                        "instead of one box" if both is not None and len(both) else "") + ".")
    dg = _tflops(df, DGRAD)
    if dg is not None and f"{OURS} vs cuDNN (x)" in dg:
        r = dg[f"{OURS} vs cuDNN (x)"].dropna()
        miss = r[r < DGRAD_TARGET]
        if len(r):
            lines.append(f"dgrad (the fprop kernel on grad_output, one launch per output parity with its sub-filter): "
                         f"{plots.geomean(r):.2f}× cuDNN's dgrad geomean; ≥ {DGRAD_TARGET:.1f}× on {len(r) - len(miss)} "
                         f"of {len(r)}" + (" (missed at " + ", ".join(f"{k} {x:.2f}×" for k, x in miss.items()) + ")"
                                           if len(miss) else "") + ".")
            if "triton" in dg:
                tw = dg[dg["triton"] > dg[OURS]]
                if len(tw):
                    lines.append("The Triton dgrad beats the Gluon one at " + ", ".join(
                        f"{k} ({tw.loc[k, 'triton']:.0f} vs {tw.loc[k, OURS]:.0f} TFLOP/s)" for k in tw.index) + ".")
    wg = _tflops(df, WGRAD)
    if wg is not None and f"{OURS} vs cuDNN (x)" in wg:
        r = wg[f"{OURS} vs cuDNN (x)"].dropna()
        if len(r):
            miss = r[r < WGRAD_TARGET]
            lines.append(f"wgrad (split-K over the output pixels, fp32 atomics; split by waves × k-steps): "
                         f"{plots.geomean(r):.2f}× cuDNN's wgrad geomean; ≥ {WGRAD_TARGET:.1f}× on {len(r) - len(miss)} "
                         f"of {len(r)}" + (" (missed at " + ", ".join(f"{k} {x:.2f}×" for k, x in miss.items()) + ")"
                                           if len(miss) else "") + ".")
    for study in ("fprop-sweep", "wgrad-sweep"):
        sw = sweep_table(df, study)
        if sw is not None:
            cfgs = sw.drop(columns=[c for c in ("heuristic", ) if c in sw])
            lines.append(f"{study}: best config per shape " + "; ".join(
                f"{k}: {cfgs.loc[k].idxmax()} ({cfgs.loc[k].max():.0f} TFLOP/s"
                + (f" vs heuristic {sw.loc[k, 'heuristic']:.0f}" if "heuristic" in sw else "") + ")" for k in cfgs.index) + ".")
    if len(df):
        runs = pd.concat([df, history], ignore_index=True) if history is not None and len(history) else df
        tc = cm.passed(runs[(runs["op"] == OP) & (runs["variant"] == BASE)]).copy()  # a spread over every run
        if len(tc) and tc["run_id"].nunique() > 1:
            tc["shape"] = labels(tc)
            g = tc.groupby("shape")["tflops"].agg(["min", "max", "count"])
            g = g[g["count"] > 1]
            if len(g):
                w = (g["max"] / g["min"]).idxmax()
                lines.append(f"cuDNN (cudnn.benchmark) varies between runs more than the Gluon kernel does: over "
                             f"{tc['run_id'].nunique()} runs up to {g.loc[w, 'min']:.0f}–{g.loc[w, 'max']:.0f} TFLOP/s at {w} "
                             "(it picks its algorithm by timing, per process) — why every ratio here is taken inside one "
                             "run.")
    lines.append("Not built yet: a stream-K split of the last wave (the 1x1 shortcut's 192 tiles on 132 CTAs: see "
                 "the timeline), a ping-pong consumer schedule, one persistent launch over the four stride-2 dgrad sub-problems "
                 "(they run side by side on forked streams; the 1-tap ones are 5-k-step tiles), a persistent / stream-K wgrad with 64-wide channel tails "
                 "(320 channels on 128-wide tiles compute 384 x 384 for 320 x 320), and an im2col-free A path at "
                 "channel counts that are not multiples of 8 (gluon-gather pads them on the host).")
    stale = int(df["stale"].sum()) if len(df) else 0
    lines.append(f"{len(df)} records shown, {stale} stale (kernel source changed since they were measured).")
    return lines
