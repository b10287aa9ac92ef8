"""Notebook 03-multibuffer-pipelining: persistent CTAs through a NUM_STAGES mbarrier ring (norms and a
TMA + wgmma GEMM). Also the pieces notebook 04 (warp_specialized.py, gemm.py, ws_sanitizer.py) builds
on: row blocks per CTA, the correctness table and the compute-sanitizer lines. The GEMM grid against cuBLAS
and its tile sweeps live in gemm_grid.py, the norm grids against the copy ceiling and their targets in
norm_grids.py, the measured %globaltimer timelines in timeline.py, and the per-section record helpers (keep,
pick, nodata, ...) in common.py: each is read the same way by several notebooks.

Records: every function takes the records DataFrame as `common.load` returns it (after the notebook's
`stale` choice: `keep(df, stale)`), and picks per section the newest run that holds its data
(`pick`), never mixing runs in one comparison. Missing data never raises: empty tables, None figures,
and a note saying what is missing (`nodata`).

Kernel-facing (the only places this module reaches into kernels / experiments / codegen / ops):
    measure()            gluon_lab.experiments.run_pipelined(results_dir=, quick=, parts=)
    other_ops()          gluon_lab.experiments.PipelinedPlan().other_ops
    kernel_source()      inspect.getsource of gluon_lab.kernels.pipelined._load_block.fn, .norm_block.fn,
                         .pipelined_norm_kernel.fn, .PipeConfig.heuristic; gluon_lab.kernels.gemm
                         tma_k_step (igemm.producers), _next_k_step, persistent_gemm_kernel (registry.sources)
    pipe_heuristic()     gluon_lab.kernels.pipelined.PipeConfig.heuristic(op, N, dtype, M, **overrides)
                         (fields num_warps, rows, num_stages, ctas_per_sm)
    gemm_config()        gluon_lab.kernels.gemm.GemmConfig(**kw) / GemmConfig.heuristic(M, N, dtype)
                         (fields BM, BN, BK, num_stages, num_warps, group_m, producer_regs; .validate(dtype))
    norm_compile()       gluon_lab.codegen.inspect_variant(op, "gluon-pipelined", N=, dtype=, config=PipeConfig)
    gemm_compile()       gluon_lab.kernels.gemm.codegen_spec(cfg, dtype) (gluon-pipelined) and
                         gluon_lab.kernels.gemm_ws.codegen_spec(cfg, dtype) (gluon-ws), compiled
                         with codegen.compile_sm90 + codegen.census (matmul variants register no codegen)
    sanitize_driver()    ci/sanitize.py (CASES, TOOLS, ws_gemm_without_invalidate), loaded from its file
"""
from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from .. import plots
from . import common as cm
from . import norm_grids as ng
from . import timeline as tl
from .norm_grids import BASELINES, BIG, NORM_ORDER  # noqa: F401  (the grids' constants, used here and by notebook 04)
from .gemm_grid import gemm_records, gemm_table, square_ratio  # 03's GEMM grid (headline, takeaways)

NB = "03-multibuffer-pipelining"
EMPTY = pd.DataFrame()


# ---- kernel-facing -------------------------------------------------------------------------------
def measure(ctx: cm.Context, quick: bool = False, parts=()):
    """Measure mode: run the plan (the same function `python -m gluon_lab bench 03-...` runs)."""
    from ..experiments import run_pipelined
    kw = {"parts": tuple(parts)} if parts else {}
    _, where = run_pipelined(results_dir=str(ctx.results_dir), quick=quick, **kw)
    return where


def other_ops() -> tuple:
    """The ops of the plan's 'others' part (L2Norm, add+RMSNorm)."""
    from ..experiments import PipelinedPlan
    return tuple(PipelinedPlan().other_ops)


SOURCE_VARIANTS = {"_load_block": ("rms_norm", "gluon-pipelined"), "norm_block": ("rms_norm", "gluon-pipelined"),
                   "pipelined_norm_kernel": ("rms_norm", "gluon-pipelined"),
                   "PipeConfig": ("rms_norm", "gluon-pipelined"), "tma_k_step": ("matmul", "gluon-pipelined"),
                   "_next_k_step": ("matmul", "gluon-pipelined"), "persistent_gemm_kernel": ("matmul", "gluon-pipelined")}


def _source(name: str):
    """The named object of gluon-pipelined's norm or GEMM code, through the registry (registry.source_object)."""
    from .. import registry
    head, _, attr = name.partition(".")
    obj = registry.source_object(*SOURCE_VARIANTS[head], head)
    return getattr(obj, attr) if attr else obj


SOURCE_GROUPS = {"norm": ("_load_block", "norm_block", "pipelined_norm_kernel"), "heuristic": ("PipeConfig.heuristic", ),
                 "gemm": ("tma_k_step", "_next_k_step", "persistent_gemm_kernel")}


def kernel_source(*names: str) -> str:
    """Current source of the named kernel functions (or of a group in SOURCE_GROUPS), one after the other."""
    import inspect
    names = [n for name in names for n in SOURCE_GROUPS.get(name, (name, ))]
    return "\n".join(inspect.getsource(_source(n)) for n in names)


def pipe_heuristic(op: str, N: int, dtype: str = "bfloat16", M: int | None = None, **overrides):
    """The config gluon-pipelined picks now for (op, N, dtype[, M]); ValueError for a refused row."""
    from ..kernels import pipelined
    return pipelined.PipeConfig.heuristic(op, N, dtype, M, **overrides)


def gemm_config(M: int | None = None, N: int | None = None, dtype: str = "bfloat16", **kw):
    """GemmConfig(**kw), or with M and N the heuristic's pick for that output."""
    from ..kernels import gemm
    if M is not None and N is not None:
        return gemm.GemmConfig.heuristic(M, N, dtype, **kw)
    return gemm.GemmConfig(**kw)


def norm_compile(op: str, N: int, dtype: str, cfg):
    """(CompiledKernel, census) of the gluon-pipelined norm with config cfg, compiled for sm_90 here."""
    from .. import codegen
    return codegen.inspect_variant(op, "gluon-pipelined", N=N, dtype=dtype, config=cfg)


def compile_spec(spec: dict):
    """(CompiledKernel, census) of a codegen spec (compile_sm90 keyword arguments)."""
    from .. import codegen
    k = codegen.compile_sm90(**spec)
    return k, codegen.census(k)


def gemm_spec(cfg, dtype: str = "bfloat16", ws: bool = False) -> dict:
    """The compile spec of the persistent GEMM (gluon-pipelined) or of its warp-specialized sibling."""
    if ws:
        from ..kernels import gemm_ws
        return gemm_ws.codegen_spec(cfg, dtype)
    from ..kernels import gemm
    return gemm.codegen_spec(cfg, dtype)


def gemm_compile(cfg, dtype: str = "bfloat16", ws: bool = False):
    return compile_spec(gemm_spec(cfg, dtype, ws))


def sanitize_driver():
    """ci/sanitize.py as a module (its CASES, TOOLS and diagnostic kernel generator)."""
    import importlib.util
    sp = importlib.util.spec_from_file_location("gl_sanitize", cm.REPO / "ci" / "sanitize.py")
    mod = importlib.util.module_from_spec(sp)
    sp.loader.exec_module(mod)
    return mod


# ---- codegen census (compiled on this CPU) -------------------------------------------------------
def norm_census(Ns=(4096, 5120), stages=(1, 2, 3, 4), op: str = "rms_norm", dtype: str = "bfloat16"):
    """Static PTX / SASS counts of gluon-pipelined per (N, NUM_STAGES), the other knobs from the current
    heuristic. Returns (table, errors): a config the current source refuses is an error line, not a row."""
    crow, errors = [], []
    for N in Ns:
        for stn in stages:
            try:
                cfg = pipe_heuristic(op, N, dtype, num_stages=stn)
                _, c = norm_compile(op, N, dtype, cfg)
            except Exception as e:  # a config the current source refuses: say so, do not invent a row
                errors.append(f"N={N} NUM_STAGES={stn}: {type(e).__name__}: {e}")
                continue
            chunk = 16 // tl.itemsize(dtype) * 32 * cfg.num_warps
            nc = -(-N // chunk)
            crow.append({"N": N, "NUM_STAGES": stn, "warps": cfg.num_warps, "rows/slot": cfg.rows, "CHUNK": chunk,
                         "NUM_CHUNKS": nc, "TMA copies (PTX)": c["tma_load"], "UTMALDG (SASS)": c["sass"]["UTMALDG"],
                         "TMA copies per ring fill": (c["tma_load"] - nc) / stn, "mbarrier.init": c["mbarrier_init"],
                         "mbarrier waits": c["mbarrier_wait"], "smem bytes": c["smem_bytes"],
                         "slot bytes (rows x N_pad x 2)": cfg.rows * nc * chunk * tl.itemsize(dtype),
                         "registers": c["registers"], "spill bytes": c["spill_bytes"], "ld.global": c["ld_global"],
                         "st.global bits": c["st_global_by_bits"], "fence.proxy.async": c["fence_proxy_async"]})
    t = pd.DataFrame(crow)
    if len(t):
        t["smem added per stage"] = t.groupby(["N", "rows/slot"])["smem bytes"].diff()
        t = t.set_index(["N", "NUM_STAGES"])
    return t, errors


def census_view(t, keep=()) -> list:
    """[a census table without its all-zero columns (named in the note instead), the first depth's
    'smem added per stage' saying why it is empty]."""
    if not len(t):
        return [None, None]
    t = t.copy()
    if "smem added per stage" in t:
        t = cm.fill_reasons(t, "first depth", columns=["smem added per stage"])
    return cm.compact_census(t, keep=keep)


def tile_label(cfg) -> str:
    return f"{cfg.BM}x{cfg.BN}x{cfg.BK} s{cfg.num_stages} w{cfg.num_warps}"


def gemm_census(dtype: str = "bfloat16"):
    """The GEMM's default config, the smaller tile the heuristic takes for a 2048^2 output, and gluon-ws
    (pattern 4) with the default config. Returns (table, errors)."""
    cases = [("gluon-pipelined (default)", False, gemm_config()),
             ("gluon-pipelined (heuristic, 2048^2 output)", False, gemm_config(2048, 2048, dtype)),
             ("gluon-ws (default)", True, gemm_config())]
    grow, errors = [], []
    for what, ws, cfg in cases:
        label = f"{what} {tile_label(cfg)}"
        try:
            _, c = gemm_compile(cfg, dtype, ws=ws)
        except Exception as e:
            errors.append(f"{label}: {type(e).__name__}: {e}")
            continue
        shapes = c["wgmma_shapes"]
        mnk = [int(v) for v in re.findall(r"\d+", shapes[0])] if shapes else None
        grow.append({"kernel": label, "wgmma (PTX)": c["wgmma"], "wgmma shape": ", ".join(shapes),
                     "HGMMA (SASS)": c["sass"]["HGMMA"],
                     "wgmma per k-step per CTA": cfg.BM * cfg.BN * cfg.BK // (mnk[0] * mnk[1] * mnk[2]) if mnk else None,
                     "UTMALDG": c["sass"]["UTMALDG"], "UTMASTG": c["sass"]["UTMASTG"], "mbarrier.init": c["mbarrier_init"],
                     "mbarrier waits": c["mbarrier_wait"], "setmaxnreg": c["setmaxnreg_values"], "warps": c["num_warps"],
                     "smem bytes": c["smem_bytes"], "ring bytes per stage": (cfg.BM * cfg.BK + cfg.BK * cfg.BN) * tl.itemsize(dtype),
                     "registers": c["registers"], "spill bytes": c["spill_bytes"], "ld.global": c["ld_global"]})
    return (pd.DataFrame(grow).set_index("kernel") if grow else EMPTY), errors


def headline_numbers(grids: dict, use=EMPTY) -> list:
    """2-4 (label, value) pairs for the page's headline block: gluon-pipelined vs the fastest baseline over
    the RMSNorm and LayerNorm grids, its % of the copy ceiling, and the GEMM vs cuBLAS at 8192³ (the
    newest GEMM grid of `use`)."""
    gm = gemm_records(use) if len(use) else EMPTY
    gemm_tab = gemm_table(gm)
    out = []
    frames = {op: ng.vs_best_frame(g) for op, g in grids.items() if op in ("rms_norm", "layer_norm")}
    frames = {op: t for op, t in frames.items() if len(t) and t["ratio"].notna().any()}
    if frames:
        allt = pd.concat(frames.values())
        r = allt["ratio"].dropna()
        run = cm.run_short(next(iter(grids.values())).run_id.iloc[0])
        out.append(("gluon-pipelined vs best baseline",
                    f"{plots.geomean(r):.2f}× geomean over {len(r)} cells ({' + '.join(ng.OP_NAMES[o] for o in frames)} bf16); "
                    f"at least as fast in {int((r >= 1).sum())} of them (run {run})"))
        out.append(("% of the copy ceiling", f"{allt['mine'].min():.0f}–{allt['mine'].max():.0f}% (gluon-pipelined, "
                                             "same cells; the ceiling is a same-shape copy timed the same way)"))
    else:
        out.append(("gluon-pipelined vs best baseline", "missing: no RMSNorm / LayerNorm grid with gluon-pipelined"))
    col = "gluon-pipelined / cuBLAS"
    if len(gemm_tab) and col in gemm_tab:
        sq = square_ratio(gemm_tab, col)
        tf = square_ratio(gemm_tab, "gluon-pipelined") if "gluon-pipelined" in gemm_tab else None
        run = f" (run {cm.run_short(gm.run_id.iloc[0])})" if len(gm) else ""
        out.append(("GEMM vs cuBLAS at 8192³", (f"{sq:.2f}× cuBLAS, {tf:.0f} TFLOP/s bf16{run}" if sq is not None and tf else
                                               f"{sq:.2f}×{run}" if sq is not None else "not measured: no 8192³ record")))
        out.append(("GEMM vs cuBLAS, all shapes", f"{plots.geomean(gemm_tab[col]):.2f}× geomean over "
                                                  f"{int(gemm_tab[col].notna().sum())} shapes"))
    else:
        out.append(("GEMM vs cuBLAS at 8192³", "missing: no GEMM grid with gluon-pipelined and cuBLAS"))
    return out


# ---- NUM_STAGES study, pipe-sweep, FENCE -------------------------------------------------------
def stages_records(df):
    """The newest `stages` study of gluon-pipelined, with num_stages as a column."""
    stg = cm.pick(df, (cm.study(df) == "stages") & (df.variant == "gluon-pipelined")) if len(df) else df.copy()
    if len(stg):
        stg["num_stages"] = cm.config_value(stg, "num_stages")
    return stg


def stages_figures(stg) -> list:
    """Per op: GB/s against NUM_STAGES, one panel per N, one line per M."""
    figs = []
    if not len(stg):
        return figs
    for op, so in stg.groupby("op"):
        Ns = sorted(so.N.unique())
        fig, axes = plt.subplots(1, len(Ns), figsize=(4 * len(Ns), 3.4), sharey=True, squeeze=False)
        for ax, N in zip(axes[0], Ns):
            for M, sub in so[so.N == N].groupby("M"):
                sub = sub.sort_values("num_stages")
                ax.plot(sub.num_stages, sub.gbps, "o-", label=f"M={M}")
            ax.set_title(f"{op} N={N}", fontsize=10)
            ax.set_xlabel("NUM_STAGES")
            ax.grid(alpha=.3)
            ax.set_xticks(sorted(so.num_stages.unique()))
        axes[0, 0].set_ylabel("GB/s")
        axes[0, -1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)  # outside the data
        fig.suptitle(f"gluon-pipelined {op} bf16, run {so.run_id.iloc[0]}, timer {'/'.join(sorted(so.timer.dropna().unique()))}"
                     + (" — STALE" if so.stale.any() else ""), fontsize=10)
        fig.tight_layout()
        figs.append(fig)
    return figs


def stage_table(stg):
    """GB/s per NUM_STAGES (columns) per (op, M, N), the best depth and its gain over 1 and 2 stages."""
    if not len(stg):
        return EMPTY
    piv = stg.pivot_table(index=["op", "M", "N"], columns="num_stages", values="gbps")
    t = piv.round(0)
    t["best NUM_STAGES"] = piv.idxmax(axis=1)
    t["best / 1 stage"] = (piv.max(axis=1) / piv[1]).round(3) if 1 in piv else np.nan
    t["3 / 2 stages"] = (piv[3] / piv[2]).round(3) if {2, 3} <= set(piv.columns) else np.nan
    return t


def pipe_sweep_records(df):
    ps = cm.pick(df, (cm.study(df) == "pipe-sweep") & (df.variant == "gluon-pipelined")) if len(df) else df.copy()
    for k in ("ctas_per_sm", "num_stages", "rows", "num_warps"):
        if len(ps):
            ps[k] = cm.config_value(ps, k)
    return ps


def pipe_sweep_best(ps, dtype: str = "bfloat16"):
    """Best (CTAs/SM, stages, rows) per shape next to what the current heuristic picks and its GB/s
    in the same sweep (NaN when the heuristic's config was not swept)."""
    if not len(ps):
        return EMPTY
    out = []
    for op, M, N, sub, b, hk, hg in cm.sweep_best_vs_heuristic(
            ps, lambda op, N, M: pipe_heuristic(op, N, dtype, M), ("ctas_per_sm", "num_stages", "rows")):
        out.append({"op": op, "M": int(M), "N": int(N), "configs": len(sub),
                    "best (ctas/SM, stages, rows)": (int(b.ctas_per_sm), int(b.num_stages), int(b.rows)), "best GB/s": round(b.gbps),
                    "best % of datasheet": round(b.sol_datasheet_pct, 1),
                    "heuristic now (ctas/SM, stages, rows)": hk, "heuristic GB/s in sweep": hg,
                    "heuristic / best": hg / b.gbps if hg == hg else np.nan,
                    "worst / best": sub.gbps.min() / b.gbps})
    return pd.DataFrame(out).set_index(["op", "M", "N"])


def pipe_sweep_best_view(best):
    """pipe_sweep_best with the heuristic's empty cells saying why (its config was not among the swept ones)."""
    if not len(best):
        return None
    return cm.fill_reasons(best.round(3), "heuristic's config not swept",
                           columns=["heuristic GB/s in sweep", "heuristic / best"])


PIPE_SWEEP_LEGEND = ("**not swept**: the plan leaves out the (CTAs/SM, stages, rows) configs whose CTAs would not all "
                     "be resident on an SM (shared memory) and those the configure hook refuses.")


def pipe_sweep_views(ps) -> list:
    """Best GB/s per CTAs/SM and per NUM_STAGES (over the other knobs), each under its title; an empty
    cell says 'not swept'."""
    if not len(ps):
        return []
    ok = ps[ps.passed.astype(bool)]
    return ["**Best GB/s per CTAs/SM (columns), over stages and rows**",
            cm.fill_reasons(ok.pivot_table(index=["op", "M", "N"], columns="ctas_per_sm", values="gbps", aggfunc="max").round(0),
                            "not swept"),
            "**Best GB/s per NUM_STAGES (columns), over CTAs/SM and rows**",
            cm.fill_reasons(ok.pivot_table(index=["op", "M", "N"], columns="num_stages", values="gbps", aggfunc="max").round(0),
                            "not swept"),
            PIPE_SWEEP_LEGEND]


def fence_records(df):
    fe = cm.pick(df, (cm.study(df) == "fence") & (df.variant == "gluon-pipelined")) if len(df) else df.copy()
    if len(fe):
        fe["fence"] = cm.config_value(fe, "fence")
    return fe


def fence_table(fe):
    """GB/s with and without the proxy fence before each refill, and off / on."""
    if not len(fe):
        return EMPTY
    fp = fe[fe.passed.astype(bool)].pivot_table(index=["op", "M", "N"], columns="fence", values="gbps")
    t = fp.round(0).rename(columns={True: "GB/s fence on", False: "GB/s fence off"})
    if {True, False} <= set(fp.columns):
        t["off / on"] = (fp[False] / fp[True]).round(3)
    return t


# ---- the schedule study (issue 16): static round-robin vs dynamic (atomic-counter) row blocks ------
SCHED_COLS = ("gluon-pipelined static", "gluon-pipelined dynamic", "gluon-ws static", "gluon-ws dynamic")


def schedule_records(df):
    """Every record of the newest run holding 'schedule' study records (the study, its baselines, the copies)."""
    if not len(df):
        return df.copy()
    m = cm.mask(cm.study(df) == "schedule")
    if not m.any():
        return df.iloc[0:0].copy()
    run = df[m].sort_values("timestamp").run_id.iloc[-1]
    g = df[df.run_id == run].copy()
    g["schedule"] = cm.config_value(g, "schedule")
    return g


def schedule_table(g):
    """GB/s per (op, M, N): the ring variants under both schedules, the one-row kernels and Inductor, the
    copy of the operand; ws dynamic ÷ static, ws dynamic ÷ the best other variant, and the best gluon as %
    of the copy (same run)."""
    if not len(g):
        return EMPTY
    ok = g[g.passed.astype(bool) & g.N.notna()]
    cp = ok[ok.op == "copy"].set_index(["M", "N"])["gbps"]
    n = ok[ok.op.isin(("rms_norm", "add_rms_norm", "layer_norm", "l2_norm"))].copy()
    n["col"] = [f"{v} {s}" if isinstance(s, str) else v for v, s in zip(n.variant, n.schedule)]
    t = n.pivot_table(index=["op", "M", "N"], columns="col", values="gbps")
    order = [c for c in ("inductor", "gluon-tma", "gluon-chunked") + SCHED_COLS if c in t.columns]
    t = t[order]
    if {"gluon-ws static", "gluon-ws dynamic"} <= set(t.columns):
        t["ws dynamic / static"] = t["gluon-ws dynamic"] / t["gluon-ws static"]
        others = [c for c in order if c != "gluon-ws dynamic"]
        t["ws dynamic / best other"] = t["gluon-ws dynamic"] / t[others].max(axis=1)
    gl_cols = [c for c in order if c.startswith("gluon")]
    copy = [cp.get((m, nn), float("nan")) for _, m, nn in t.index]
    t["copy GB/s"] = copy
    pct = 100 * t[gl_cols].max(axis=1) / t["copy GB/s"]
    # a copy slower than a norm moving the same bytes is no ceiling (seen at 32768 x 8192: 2.7 TB/s in two runs)
    t["best gluon % of copy"] = pct.where(pct <= 100.5)
    return t.round({c: 0 for c in order + ["copy GB/s"]}).round(3)


def schedule_view(t):
    """schedule_table for display: empty cells (a variant that does not take the shape, no copy ceiling) as —."""
    return t.astype(object).where(t.notna(), "—") if len(t) else t


def load_schedule_timeline(ctx: cm.Context):
    """results/<gpu>/03-multibuffer-pipelining.schedule-timeline.json (experiments.capture_schedule_timeline)."""
    return tl.load_timeline(ctx, "03-multibuffer-pipelining", ".schedule-timeline.json")


def _schedule_ctas(TL):
    """(variant, schedule, [one (blocks, stamps) array per traced CTA]) of the schedule timeline: 3 stamps a
    block for gluon-pipelined, 5 (both partitions) for gluon-ws."""
    for variant, by in TL["timelines"].items():
        k = 3 if variant == "gluon-pipelined" else 5
        for sched, t in by.items():
            yield variant, sched, [np.asarray(c, dtype=float).reshape(-1, k) for c in t["ns"] if len(c)]


def schedule_timeline_stats(TL):
    """Per variant x schedule of the schedule timeline (every CTA's stamps, rms_norm at TL's M x N): CTAs, row
    blocks per CTA, the kernel's span and how far the first CTA to finish is from the last (the tail)."""
    if not TL:
        return EMPTY
    rows = []
    for variant, sched, ctas in _schedule_ctas(TL):
        if not ctas:
            continue
        ends = np.array([c[:, -1].max() for c in ctas])
        starts = np.array([c[:, 0].min() for c in ctas])
        span = ends.max() - starts.min()
        rows.append({"variant": variant, "schedule": sched, "CTAs": len(ctas),
                     "blocks per CTA": f"{min(map(len, ctas))}–{max(map(len, ctas))}", "span (µs)": span / 1e3,
                     "first CTA done → last (µs)": (ends.max() - ends.min()) / 1e3,
                     "tail (% of span)": 100 * (ends.max() - ends.min()) / span})
    return pd.DataFrame(rows).set_index(["variant", "schedule"]).round(2) if rows else EMPTY


def schedule_finish_figure(TL):
    """Every CTA's finish time (µs), sorted, per variant x schedule: a flat line is a grid that ends together."""
    import matplotlib.pyplot as plt
    if not TL:
        return None
    fig, ax = plt.subplots(figsize=(8, 3.2))
    for variant, sched, ctas in _schedule_ctas(TL):
        ends = sorted(c[:, -1].max() / 1e3 for c in ctas)
        ax.plot(ends, label=f"{variant} {sched}", ls="-" if sched == "dynamic" else "--")
    ax.set_xlabel("CTA (sorted by finish)")
    ax.set_ylabel("last block done (µs)")
    ax.set_title(f"rms_norm {TL['M']} x {TL['N']}: when each CTA finishes (run {TL['run_id']})", fontsize=9)
    ax.legend(fontsize=7, frameon=False)
    fig.tight_layout()
    return fig


def schedule_notes(t, TLs) -> list:
    """Takeaways of the schedule study, computed from its table and timeline."""
    out = []
    if len(t) and "ws dynamic / static" in t:
        r = t["ws dynamic / static"].dropna()
        by_op = r.groupby(level="op").agg(["min", "max"])
        out.append("gluon-ws dynamic ÷ static: " + "; ".join(f"{op} {a:.2f}–{b:.2f}×" for op, (a, b) in by_op.iterrows()))
        b = t["ws dynamic / best other"].dropna()
        out.append(f"gluon-ws dynamic ÷ the best other variant in the cell: {b.min():.2f}–{b.max():.2f}× "
                   f"({int((b >= 1).sum())} of {len(b)} cells ≥ 1.0)")
    if len(t) and {"gluon-pipelined static", "gluon-pipelined dynamic"} <= set(t.columns):
        r = (t["gluon-pipelined dynamic"] / t["gluon-pipelined static"]).dropna()
        out.append(f"gluon-pipelined dynamic ÷ static: {r.min():.2f}–{r.max():.2f}× (the single-partition kernel "
                   "waits for each atomic's broadcast: it keeps the static schedule)")
    if len(t) and "best gluon % of copy" in t:
        bad = t[t["best gluon % of copy"].isna() & t["copy GB/s"].notna()]
        if len(bad):
            out.append("no copy ceiling at " + ", ".join(sorted({f"{m} x {nn}" for _, m, nn in bad.index}))
                       + ": the copy there read slower than the norms moving the same bytes")
    if len(TLs):
        for (v, sch), row in TLs.iterrows():
            out.append(f"timeline {v} {sch}: the first CTA finished {row['first CTA done → last (µs)']:.1f} µs before "
                       f"the last ({row['tail (% of span)']:.1f}% of the span)")
    return out


# ---- L2Norm and add+RMSNorm ----------------------------------------------------------------------
def other_grids(df, ops=None) -> dict:
    """{op: one run's records of op with pct_ceiling} for the 'others' part (ops default: other_ops())."""
    ops = other_ops() if ops is None else ops
    out = {}
    st = cm.study(df)
    for op in ops:
        g = cm.pick(df, (df.op == op) & st.isna() & df.N.notna(), require=("gluon-pipelined", )) if len(df) else df.copy()
        if not len(g):
            continue
        ct, _ = ng.ceiling_table(df, g.run_id.iloc[0])
        g = g.join(ct[["reference GB/s"]], on=["M", "N"])
        g["pct_ceiling"] = 100 * g.gbps / g["reference GB/s"]
        out[op] = g
    return out


def other_table(g):
    """GB/s per variant per cell, gluon-pipelined / best baseline and which baseline."""
    t = g.pivot_table(index=["M", "N"], columns="variant", values="gbps").round(0)
    bg, bw = ng.best_baseline(g)
    if "gluon-pipelined" in t:
        t["gluon-pipelined / best baseline"] = (g[g.variant == "gluon-pipelined"].set_index(["M", "N"]).gbps / bg).round(3)
        t["best baseline"] = bw
    return t


def variant_reason(op: str, g):
    """fill_reasons' reason for a (M, N) x variant table of one grid: the variant's refusal now, else
    'not measured in run X'."""
    run = cm.run_short(g.run_id.iloc[0]) if len(g) else "?"

    def why(idx, col):
        M, N = idx
        r = cm.refusal(op, col, {"M": int(M), "N": int(N)}, "bfloat16") if isinstance(col, str) and "/" not in col else None
        if r and "power-of-2" in r:
            return "refused: N not 2^k"
        return r or f"not measured in run {run}"
    return why


def other_views(ctx, others: dict, ops=None, stale: str = "flag") -> list:
    out = []
    for op in (other_ops() if ops is None else ops):
        if op in others:
            t = other_table(others[op])
            out += cm.about(others[op], f"{op} bf16") + [cm.fill_reasons(t, variant_reason(op, others[op]))]
        else:
            out.append(cm.nodata(ctx, f"{op} (the 'others' part)", stale))
    return out


# ---- roofline ------------------------------------------------------------------------------------
def roofline_figure(df, grids: dict, gm, spec, slug: str):
    """Norms (the main variants of each grid) and the passed GEMMs under the datasheet roof and the
    roof of one run's ceilings (the GEMM run's, else the first grid's). Returns (figure, lines)."""
    parts = [g[g.variant.isin(("torch", "inductor", "gluon-tma", "gluon-chunked", "gluon-pipelined", "gluon-ws"))]
             for g in grids.values()]
    if len(gm):
        parts.append(gm[gm.passed.astype(bool)])
    run = gm.run_id.iloc[0] if len(gm) else ng.grid_run(grids)
    if not parts or not run:
        return None, []
    ceil = cm.ceilings(df[df.run_id == run])
    mm_ceil = df[(df.pattern == "ceiling") & (df.op == "matmul") & (df.run_id == run)]
    lines = [f"norms from run(s): {sorted({g.run_id.iloc[0] for g in grids.values()}) or '-'} "
             f"| GEMMs from run: {gm.run_id.iloc[0] if len(gm) else '-'}"]
    for r in sorted({g.run_id.iloc[0] for g in parts if len(g)}):
        c = cm.ceilings(df[df.run_id == r])
        if c:
            lines.append(f"run {r}: copy {c['copy_gbps']:.0f} GB/s, matmul {c['matmul_tflops']:.0f} TFLOP/s")
    fig = plots.roofline(pd.concat(parts + [mm_ceil]), spec, ceil,
                         title=f"Roofline on {slug}: bf16 norms and GEMMs (dashed roof: ceilings of run {run})")
    return fig, lines


# ---- correctness and compute-sanitizer, shared with notebook 04 ---------------------------------
def correctness_table(frames):
    """Per (run, op, Gluon variant) of the records shown: how many, how many passed, the worst errors."""
    sec = [g for g in frames if len(g)]
    if not sec:
        return EMPTY
    cc = pd.concat(sec)
    cc = cc[cc.variant.str.startswith("gluon")]
    return cc.groupby(["run_id", "op", "variant"]).agg(
        records=("passed", "size"), passed=("passed", lambda s: int(s.astype(bool).sum())),
        max_abs_err=("max_abs_err", "max"), max_rel_err=("rel_err", "max"))


def sanitizer_path(ctx: cm.Context) -> Path:
    return ctx.results_dir / ctx.slug / "sanitizer.jsonl"


def load_sanitizer(path):
    """notebook.load_sanitizer (newest line per (kernel, tool)), plus `warp_specialize` (a ws- kernel).
    Returns (table, number of superseded lines)."""
    san, n_old = cm.load_sanitizer(path)
    if len(san):
        san["warp_specialize"] = san["kernel"].str.startswith("ws-")
    return san, n_old


SAN_COLS = ("kernel", "case", "tool", "exit_code", "errors/hazards (summary)", "summary", "output check", "seconds")


def case_text(c) -> str:
    """A sanitizer line's case [op, variant, shape] as 'op variant MxN'."""
    return f"{c[0]} {c[1]} " + "x".join(str(v) for v in c[2].values()) if isinstance(c, list) and len(c) == 3 else c


def sanitizer_table(san):
    """One row per (kernel, tool): the case, exit code, the error / hazard count the summary states, the
    summary and the float64 check of the sanitized run (the file's raw `count` is left out: the summary's
    count says the same and is also there where `count` was not parsed)."""
    if not len(san):
        return EMPTY
    t = san.assign(**{"output check": san["check passed"]})
    t["case"] = t["case"].map(case_text)
    return cm.fill_reasons(t[[c for c in SAN_COLS if c in t]], "not recorded")


def superseded_line(san, n_old: int, path) -> str | None:
    if not n_old:
        return None
    return f"{len(san) + n_old} lines in {Path(path).name}; {n_old} superseded by a later line for the same (kernel, tool)"


def sanitizer_missing(path) -> str:
    return (f"**No compute-sanitizer records:** `{path}` does not exist, so racecheck and synccheck have "
            "**not been run** on these kernels (or their output was not committed). Nothing is claimed about races "
            "or barrier misuse here. Run `python3 ci/sanitize.py results/<gpu>/sanitizer.jsonl` on the H200.")


def sanitizer_findings(san) -> list:
    """The clean count, then for each run that is not clean its output tail (Markdown)."""
    if not len(san):
        return []
    out = [f"{int(san['clean'].sum())}/{len(san)} sanitizer runs clean (exit code 0 and a summary line stating 0 errors/hazards)"]
    for _, r in san[~san["clean"]].iterrows():
        out.append(f"**{r['kernel']} / {r['tool']}: NOT clean** (exit code {r['exit_code']}). Sanitizer output tail:\n\n```\n"
                   + "\n".join(r.get("tail") or []) + "\n```")
    return out


def sanitizer_not_run(san) -> str | None:
    """The (kernel, tool) pairs ci/sanitize.py knows that the file holds no line for."""
    try:
        sz = sanitize_driver()
    except Exception as e:
        return f"(could not read ci/sanitize.py's case list: {type(e).__name__}: {e})"
    have = set(zip(san.kernel, san.tool)) if len(san) else set()
    miss = [f"{k} / {t}" for k in sz.CASES for t in sz.TOOLS if (k, t) not in have]
    return f"**Not run (no line in the file):** {', '.join(miss)}." if miss else None


def sanitizer_views(san, n_old: int, path) -> list:
    """What notebook 03 shows of sanitizer.jsonl: the table, the clean count, the tails of the runs
    that are not clean, and the cases of ci/sanitize.py without a line; or that there is no file."""
    path = Path(path)
    if not path.exists():
        return [sanitizer_missing(path)]
    if not len(san):
        return []
    return [superseded_line(san, n_old, path), sanitizer_table(san)] + sanitizer_findings(san) + [sanitizer_not_run(san)]


# ---- takeaways -----------------------------------------------------------------------------------
def takeaways(*, grids=None, targets=None, summary=None, TL=None, tl_stats=EMPTY, allrec=EMPTY, chk=EMPTY,
              stg=EMPTY, stage_tab=EMPTY, ps=EMPTY, ps_best=EMPTY, fe=EMPTY, fence_tab=EMPTY, gm=EMPTY,
              gemm_tab=EMPTY, gs=EMPTY, use=EMPTY, san=EMPTY) -> list[str]:
    """Each line computed from the records and tables the sections above show (sub-items start with
    two spaces: `bullets`)."""
    grids, targets = grids or {}, targets or {}
    summary = summary if summary is not None else EMPTY
    lines = []
    for op, t in targets.items():
        g = grids[op]
        pp = g[g.variant == "gluon-pipelined"]
        vb, vo = t["vs best baseline"], t["vs one-row kernel"]
        Mi = t.index.get_level_values("M")
        lines.append(f"**{op} bf16** (run `{g.run_id.iloc[0]}`{', STALE' if pp.stale.any() else ''}): gluon-pipelined "
                     f"{pp.pct_ceiling.min():.1f}-{pp.pct_ceiling.max():.1f}% of the copy ceiling; vs the best baseline geomean "
                     f"{plots.geomean(vb):.3f}x, >= in {int((vb >= 1).sum())}/{len(vb)} cells; vs the one-row kernel geomean "
                     f"{plots.geomean(vo[Mi <= 4096]):.3f}x at M <= 4096 and {plots.geomean(vo[Mi > 4096]):.3f}x at M > 4096.")
        wins = t[vo >= 1.0].index
        if len(wins):
            lines.append(f"  pipelining beats the one-row kernel at {len(wins)} cells: "
                         + ", ".join(f"{int(m)}x{int(n)}" for m, n in wins) + ".")
        few = t[t["row blocks per CTA"] <= 1]
        if len(few):
            lines.append(f"  {len(few)} cells give each CTA at most one row block with the recorded config "
                         f"({', '.join(f'{int(m)}x{int(n)}' for m, n in few.index)}): there the ring cannot overlap anything inside a CTA.")
    for _, s in summary.iterrows():
        lines.append(f"target `{s.get('goal', s['target'])}` ({s['op']}): {s['cells met']} cells met; worst {s['worst']}"
                     + (f"; {s['stale records']} stale records" if s["stale records"] else "") + ".")
    c = tl.timeline_change(tl_stats)
    if c and TL is not None:
        _, tl_src, _ = tl.timeline_source(TL, allrec)
        (s0, s1) = c["stages"]
        last = chk.iloc[-1] if len(chk) else None
        whole = ("" if last is None or isinstance(last["whole-grid GB/s from stamps"], str) or not last["timed GB/s, same config"]
                 else f" Whole-grid bandwidth from the stamps at NUM_STAGES={chk.index[-1]}: "
                      f"{last['whole-grid GB/s from stamps']:.0f} GB/s "
                      f"vs {last['timed GB/s, same config']:.0f} GB/s timed.")
        lines.append(f"Measured timeline (run `{TL['run_id']}`{', STALE source' if tl_src.stale.any() else ''}): NUM_STAGES {s0} -> {s1} "
                     f"cuts the median stall per block {c['stall'][0]:.0f} -> {c['stall'][1]:.0f} ns and the block period "
                     f"{c['period'][0]:.0f} -> {c['period'][1]:.0f} ns; the store-to-next-wait gap is "
                     f"{c['gap'][0]:.0f} / {c['gap'][1]:.0f} ns, compute+store {c['work'][0]:.0f} / {c['work'][1]:.0f} ns." + whole)
        fs = tl.finish_spread(TL, s1) if tl.many_ctas_traced(TL) else None
        if fs:  # every CTA traced: the static schedule's tail
            lines.append(f"Every CTA traced at NUM_STAGES={s1}: the slowest of {fs['CTAs']} CTAs issues its last stores "
                         f"{fs['tail %']:.1f}% after the median CTA ({fs['finish min'] / 1e3:.1f} / {fs['finish median'] / 1e3:.1f} / "
                         f"{fs['finish max'] / 1e3:.1f} us min / median / max), with "
                         + ("the same number of blocks each" if fs["imbalance %"] == 0 else
                            f"{fs['blocks'].min()}-{fs['blocks'].max()} blocks each (block-count imbalance {fs['imbalance %']:.1f}%)")
                         + ": the persistent grid's static round-robin split cannot hand the slow SMs' work to the fast ones, "
                         "while a one-row-per-CTA grid is balanced by the hardware scheduler. That tail is of the order of the "
                         "large-M gap to gluon-tma above; a dynamic (atomic-counter) block scheduler is the next thing to measure.")
    if len(stg) and len(stage_tab):
        bc = stage_tab["best NUM_STAGES"].value_counts()
        lines.append(f"NUM_STAGES study{cm.tag(stg)}: best depth per cell " + ", ".join(f"{int(k)} stages: {v} cells" for k, v in bc.items())
                     + (f"; best vs 1 stage median {stage_tab['best / 1 stage'].median():.3f}x "
                        f"(max {stage_tab['best / 1 stage'].max():.3f}x)"
                        if "best / 1 stage" in stage_tab and stage_tab["best / 1 stage"].notna().any() else "") + ".")
    if len(ps_best):
        bk = ps_best["best (ctas/SM, stages, rows)"].value_counts()
        hb = ps_best["heuristic / best"].dropna()
        lines.append(f"pipe-sweep{cm.tag(ps)}: most frequent best (CTAs/SM, stages, rows): "
                     + ", ".join(f"{k}: {v}" for k, v in bk.head(3).items())
                     + (f"; the current heuristic's pick reaches {hb.min():.3f}-{hb.max():.3f}x of the best over {len(hb)} shapes"
                        if len(hb) else "; the current heuristic's picks were not among the swept configs") + ".")
    if "off / on" in fence_tab:
        r = fence_tab["off / on"].dropna()
        lines.append(f"FENCE off vs on{cm.tag(fe)}: {r.min():.3f}-{r.max():.3f}x over {len(r)} cells (geomean {plots.geomean(r):.3f}x).")
    for v in ("gluon-pipelined", "gluon-ws"):
        col = f"{v} / cuBLAS"
        if col in gemm_tab:
            sq = square_ratio(gemm_tab, col)
            lines.append(f"GEMM {v}{cm.tag(gm[gm.variant == v])}: {gemm_tab[col].min():.3f}-{gemm_tab[col].max():.3f}x cuBLAS, geomean "
                         f"{plots.geomean(gemm_tab[col]):.3f}x" + (f", {sq:.3f}x at 8192^3" if sq is not None else "")
                         + (f"; vs triton geomean {plots.geomean(gemm_tab[v] / gemm_tab['triton']):.3f}x"
                            if "triton" in gemm_tab else "") + ".")
    if len(gs):
        for sh, sub in gs[gs.passed.astype(bool)].groupby("shape"):
            b = sub.loc[sub.tflops.idxmax()]
            s2 = sub[(sub.tile == b.tile)].set_index("num_stages").tflops
            lines.append(f"gemm-sweep {sh}{cm.tag(sub)}: best {b.tile} with {int(b.num_stages)} stages ({b.tflops:.0f} TFLOP/s); "
                         "that tile by stages: "
                         + ", ".join(f"{int(k)}: {v:.0f}" for k, v in s2.sort_index().items()) + ".")
    if grids:
        ct, ce = ng.ceiling_table(use, ng.grid_run(grids))
        low = ng.low_copy_cells(ct)
        if len(low) and ce:
            lines.append(f"Copy ceiling: the graph-timed per-shape copy reads {low['per-shape copy GB/s'].min():.0f}-"
                         f"{low['per-shape copy GB/s'].max():.0f} GB/s at {', '.join(f'{m}x{n}' for m, n in low.index)} vs "
                         f"{ce['copy_gbps']:.0f} GB/s for the 2 GiB session copy; those cells are judged against the session copy.")
    used = [g for g in list(grids.values()) + [stg, ps, gm] if len(g)]
    n_stale = int(pd.concat(used).stale.sum()) if used else 0
    if n_stale:
        lines.append(f"**{n_stale} records used above are STALE** (kernel source changed since they ran): the conclusions on those "
                     "kernels describe the measured source, not the current one.")
    if len(san):
        bad = san[~san["clean"]]
        lines.append(f"compute-sanitizer: {len(san)} runs recorded, {int(san['clean'].sum())} clean"
                     + (f"; NOT clean: {', '.join(bad.kernel + ' / ' + bad.tool)}" if len(bad) else "") + ".")
    else:
        lines.append("compute-sanitizer: no records (not run).")
    return lines


RECORD_ONLY_KEYS = frozenset({"study", "sm_clock_mhz", "heuristic", "bracket"})  # config keys that are not the kernel's


def stale_pick_check(df) -> pd.DataFrame:
    """For the STALE Gluon matmul records of a grid or a study's heuristic cases (no explicit config asked for:
    what the heuristic ran),
    whether today's heuristic resolves each shape to the config the record ran (its stored resolved config):
    'same config today' True means the run timed the config the current code would launch, though its kernel
    source has changed since; False means the current code runs something else there."""
    if not len(df) or "stale" not in df:
        return pd.DataFrame()
    from .. import registry
    st = df[df["stale"].astype(bool) & (df.op == "matmul") & df.variant.str.startswith("gluon")]
    rows = []
    for _, r in st.iterrows():
        full = json.loads(r["config_key"])
        if "study" in full and not full.get("heuristic"):  # a study's explicit config: not what a default call runs
            continue
        cfg = {k: v for k, v in full.items() if k not in RECORD_ONLY_KEYS}
        shape = {d: int(r[d]) for d in ("M", "N", "K")}
        now = dataclasses.asdict(registry.get_variant("matmul", r["variant"]).resolve(shape, r["dtype"], {}))
        rows.append({"variant": r["variant"], **shape, "run": r["run_id"],
                     "same config today": all(now.get(k) == v for k, v in cfg.items())})
    return pd.DataFrame(rows)
