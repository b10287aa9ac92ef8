"""Notebook 03-multibuffer-pipelining: persistent CTAs through a NUM_STAGES mbarrier ring (norms and a
TMA + wgmma GEMM). Also the pieces notebook 04 (warp_specialized.py, gemm.py, ws_sanitizer.py) builds
on, which read the same kinds of records: the measured %globaltimer timelines and every CTA's finish,
the norm grids against the copy ceiling and the baselines, row blocks per CTA, the GEMM-vs-cuBLAS
table, the correctness table and the compute-sanitizer lines.

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

NB = "03-multibuffer-pipelining"
BIG = 64 * 2**20  # M*N (elements) from which the pattern's target asks for >= 97% of the copy ceiling
BASELINES = ("torch", "inductor", "inductor-max-autotune", "triton", "liger")
NORM_ORDER = BASELINES + ("gluon-tma", "gluon-chunked", "gluon-pipelined", "gluon-ws")
GEMM_VARIANTS = ("torch", "triton", "gluon-pipelined", "gluon-ws")
SQUARE = (8192, 8192, 8192)
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


# ---- records: stale policy, one run per section, notes ------------------------------------------
def keep(df, stale: str = "flag"):
    """stale='flag': every record (stale ones are shown, marked); 'drop': only the current ones."""
    if stale not in ("flag", "drop"):
        raise ValueError(f"stale must be 'flag' or 'drop', got {stale!r}")
    return df if stale == "flag" else cm.current(df)


def mask(s):
    """NA-safe boolean mask (shape columns are nullable integers)."""
    return pd.Series(s).fillna(False).astype(bool)


def study(df):
    """The `study` of each record's config (None for the grids)."""
    if not len(df):
        return pd.Series([], dtype=object, index=df.index)
    return cm.config_value(df, "study")


def pick(df, m=None, require=()):
    """The newest run holding this section's records (and every variant in require), one run only."""
    if not len(df):
        return df.copy()
    return cm.newest_run(df, None if m is None else mask(m), require=require).copy()


def about(g, what: str, with_files: bool = False) -> list:
    """Which run, how many records, which timers (Markdown), and a STALE note when any record is."""
    if not len(g):
        return []
    return [cm.section_line(g, what, with_files=with_files), cm.stale_note(g, what)]


def where(ctx: cm.Context, name: str | None = None) -> str:
    """results/<gpu>/<name> as shown in notes: relative to the repository when it lies inside it."""
    p = ctx.results_dir / ctx.slug / (name or "")
    try:
        p = p.relative_to(cm.REPO)
    except ValueError:
        pass
    return str(p).rstrip("/") + ("" if name else "/")


def nodata(ctx: cm.Context, what: str, stale: str = "flag", name: str | None = None) -> str:
    """'No records for <what> in <file>' (name=None: this notebook's .jsonl)."""
    name = f"{ctx.notebook}.jsonl" if name is None else name
    return (f"**No records for {what}** in `{where(ctx, name)}`"
            + (" (stale records dropped: `stale='drop'`)" if stale == "drop" else "") + ".")


def stale_records(allrec, title: str = "**Stale records** (kernel source changed since the run):") -> list:
    """The stale-records table under its title, or a line saying there is none."""
    t = cm.stale_table(allrec)
    return [title, t] if len(t) else ["no stale records"]


def tag(g) -> str:
    """' (run `X`, STALE)' / ' (run `X`)' for a takeaway drawn from the records g."""
    return f" (run `{g.run_id.iloc[0]}`{', STALE' if g.stale.any() else ''})"


def shape_str(idx) -> str:
    return "x".join(str(int(d)) for d in idx)


def table(t):
    """t, or None when it is empty (common.show skips None: no empty table on the page)."""
    return t if t is not None and len(t) else None


def bullets(lines) -> str:
    """Markdown bullet list like common.takeaways, where a line that starts with two spaces is a
    sub-item of the line before it."""
    return "\n".join((f"  - {ln.strip()}" if ln.startswith("  ") else f"- {ln}") for ln in lines if ln)


# ---- measured timelines (%globaltimer), shared with notebook 04 ---------------------------------
def load_timeline(ctx: cm.Context, notebook: str | None = None, suffix: str = ".timeline.json"):
    """results/<gpu>/<notebook><suffix> as written by plan_common.save_timeline, or None."""
    p = timeline_path(ctx, notebook, suffix)
    return json.loads(p.read_text()) if p.exists() else None


def timeline_path(ctx: cm.Context, notebook: str | None = None, suffix: str = ".timeline.json") -> Path:
    return ctx.results_dir / ctx.slug / f"{notebook or ctx.notebook}{suffix}"


def timeline_blocks(TL, st, k: int = 3) -> list:
    """One (blocks, k) array of ns stamps per traced CTA of the NUM_STAGES=st timeline."""
    return [np.asarray(c, dtype=float).reshape(-1, k) for c in TL["timelines"][str(st)]["ns"] if len(c)]


def stamp_granularity(TL) -> int:
    """The timer's observed granularity: gcd of every positive stamp (ns)."""
    stamps = np.concatenate([np.asarray(c, dtype=np.int64).ravel() for t in TL["timelines"].values()
                             for c in t["ns"] if len(c)])
    return int(np.gcd.reduce(stamps[stamps > 0])) if (stamps > 0).any() else 0


def stage_keys(TL) -> list:
    return sorted(TL["timelines"], key=int)


def itemsize(dtype: str) -> int:
    return 2 if dtype in ("bfloat16", "float16") else 4


def timeline_source(TL, allrec):
    """(records of the timeline's run, its gluon-pipelined rms_norm records, a phrase on staleness)."""
    tl_run = allrec[allrec.run_id == TL["run_id"]]
    tl_src = tl_run[(tl_run.op == "rms_norm") & (tl_run.variant == "gluon-pipelined")]
    state = ("no gluon-pipelined rms_norm record of that run to check the kernel source against" if not len(tl_src)
             else "STALE: the kernel source has changed since" if tl_src.stale.any()
             else "the kernel source is unchanged since")
    return tl_run, tl_src, state


def timeline_note(ctx: cm.Context, TL, allrec, stale: str = "flag") -> str:
    """Provenance of the measured timeline, or the missing note."""
    if TL is None:
        return nodata(ctx, f"the measured timeline ({timeline_path(ctx).name} is missing)", stale)
    _, _, state = timeline_source(TL, allrec)
    return (f"MEASURED with `%globaltimer` on **{TL['gpu']}**, run `{TL['run_id']}` ({state}); "
            f"RMSNorm {TL['dtype']} M={TL['M']} N={TL['N']}; stamps are multiples of {stamp_granularity(TL)} ns "
            "(the timer's observed granularity).")


def timeline_stats(TL):
    """Per NUM_STAGES of the 3-stamp (before wait, ready, stored) gluon-pipelined timeline: medians of the
    stall, compute+store, store-to-next-wait gap, block period, and the share of time stalled."""
    if TL is None:
        return EMPTY
    rows = []
    for st in stage_keys(TL):
        bs = timeline_blocks(TL, st)
        if not bs:
            continue
        stall = np.concatenate([b[:, 1] - b[:, 0] for b in bs])
        work = np.concatenate([b[:, 2] - b[:, 1] for b in bs])
        gap = np.concatenate([b[1:, 0] - b[:-1, 2] for b in bs])
        period = np.concatenate([np.diff(b[:, 0]) for b in bs])
        frac = np.median([(b[:, 1] - b[:, 0]).sum() / (b[-1, 2] - b[0, 0]) for b in bs])
        cfg = TL["timelines"][st]["config"]
        rows.append({"NUM_STAGES": int(st), "config": ", ".join(f"{k}={v}" for k, v in cfg.items()),
                     "CTAs traced": len(bs), "blocks per CTA": int(np.median([len(b) for b in bs])),
                     "median stall / block (ns)": np.median(stall), "median compute+store (ns)": np.median(work),
                     "median store-to-next-wait gap (ns)": np.median(gap) if len(gap) else np.nan,
                     "median block period (ns)": np.median(period) if len(period) else np.nan,
                     "time stalled (median over CTAs) %": 100 * frac,
                     "rows": cfg.get("rows", 1), "ctas_per_sm": cfg.get("ctas_per_sm")})
    return pd.DataFrame(rows).set_index("NUM_STAGES") if rows else EMPTY


def timeline_table(stats):
    """The per-stage table as shown (without the config fields kept for the checks)."""
    return stats.drop(columns=["rows", "ctas_per_sm"]).round(1) if len(stats) else None


def _gantt(ax, TL, stats, st, xmax_us=None, ctas: int = 4):
    bs = timeline_blocks(TL, st)[:ctas]
    for k, b in enumerate(bs):
        b = b / 1e3  # us
        ax.broken_barh([(s, e - s) for s, e in zip(b[:, 0], b[:, 1])], (k - 0.35, 0.7), color="#d62728",
                       label="stall: wait for the copy" if k == 0 else None)
        ax.broken_barh([(s, e - s) for s, e in zip(b[:, 1], b[:, 2])], (k - 0.35, 0.7), color="#2ca02c",
                       label="compute + store issue" if k == 0 else None)
        ax.broken_barh([(s, e - s) for s, e in zip(b[:-1, 2], b[1:, 0])], (k - 0.15, 0.3), color="#bbbbbb",
                       label="stores issued -> next wait (refill issue, fence, loop)" if k == 0 else None)
    ax.set_yticks(range(len(bs)), [f"CTA {k}" for k in range(len(bs))])
    ax.set_ylim(-0.6, len(bs) - 0.4)
    r = stats.loc[int(st)]
    ax.set_title(f"NUM_STAGES={st}: median stall {r['median stall / block (ns)']:.0f} ns, compute+store "
                 f"{r['median compute+store (ns)']:.0f} ns, period {r['median block period (ns)']:.0f} ns, "
                 f"stalled {r['time stalled (median over CTAs) %']:.0f}% of the time", fontsize=9)
    ax.grid(axis="x", alpha=0.3)
    if xmax_us:
        ax.set_xlim(0, xmax_us)


def timeline_gantt(TL, stats, zoom: bool = False):
    """One panel per NUM_STAGES, the first 4 traced CTAs, every block: stall / compute+store / gap.
    zoom: only the first 8 block periods of the slowest configuration. None without a timeline."""
    if TL is None or not len(stats):
        return None
    sts = list(stats.index)
    xmax = 8 * stats["median block period (ns)"].max() / 1e3 if zoom else None
    fig, axes = plt.subplots(len(sts), 1, figsize=(13, 1.2 + 1.1 * len(sts) * 2), sharex=True, squeeze=False)
    for ax, st in zip(axes[:, 0], sts):
        _gantt(ax, TL, stats, st, xmax)
    axes[-1, 0].set_xlabel("time since the first stamp (us)")
    if zoom:
        fig.suptitle(f"zoom: the first {xmax:.1f} us (8 of the slowest configuration's block periods)", fontsize=10)
        fig.tight_layout()
    else:  # the legend below the panels, outside the bars
        fig.legend(*axes[0, 0].get_legend_handles_labels(), loc="lower center", ncol=3, fontsize=9, frameon=False)
        fig.suptitle(f"MEASURED (%globaltimer, run {TL['run_id']}): gluon-pipelined RMSNorm M={TL['M']} N={TL['N']}, "
                     "first CTAs, every traced block", fontsize=10)
        fig.tight_layout(rect=(0, 0.4 / fig.get_figheight(), 1, 1))
    return fig


def cta_finish(TL, st, k: int = 3):
    """Each traced CTA's finish: its last stamp (ns; the last block's stores issued)."""
    return np.array([b.max() for b in timeline_blocks(TL, st, k)])


def many_ctas_traced(TL, k: int = 3) -> bool:
    """More CTAs traced than the Gantt charts show (4): the per-CTA finish plot is meaningful."""
    return TL is not None and max((len(timeline_blocks(TL, st, k)) for st in stage_keys(TL)), default=0) > 4


def finish_figure(TL, stats):
    """Every traced CTA's finish, sorted, per NUM_STAGES (None when at most 4 CTAs were traced)."""
    if TL is None or not len(stats) or not many_ctas_traced(TL):
        return None
    fig, ax = plt.subplots(figsize=(13, 3))
    for st in stats.index:
        ends = np.sort(cta_finish(TL, st)) / 1e3
        ax.plot(np.arange(len(ends)), ends, ".-", label=f"NUM_STAGES={st}: {len(ends)} CTAs, finish spread "
                f"{ends.max() - ends.min():.1f} us ({100 * (ends.max() - ends.min()) / ends.max():.0f}% of the last finish)")
    ax.set_xlabel("CTAs, sorted by finish")
    ax.set_ylabel("last stores issued (us)")
    ax.grid(alpha=.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)  # outside the data
    ax.set_title(f"MEASURED per-CTA finish times (run {TL['run_id']})", fontsize=10)
    fig.tight_layout()
    return fig


def finish_spread(TL, st, k: int = 3, wait_col: int = 0) -> dict | None:
    """Every traced CTA of one timeline: finish min / median / max, the tail (slowest vs median), the
    block-count imbalance of the static round-robin split, each CTA's pace (median period between its
    waits) and the bandwidth the stamps imply (x read + y written over first stamp -> last finish)."""
    bs = timeline_blocks(TL, st, k)
    if not bs:
        return None
    ends = np.array([b.max() for b in bs])
    t0 = min(b.min() for b in bs)
    nb = np.array([len(b) for b in bs])
    pace = np.array([np.median(np.diff(b[:, wait_col])) if len(b) > 1 else np.nan for b in bs])
    moved = TL["M"] * TL["N"] * itemsize(TL["dtype"]) * 2
    return {"NUM_STAGES": int(st), "ends": ends, "blocks": nb, "pace": pace, "CTAs": len(bs),
            "finish min": ends.min(), "finish median": np.median(ends), "finish max": ends.max(),
            "tail %": 100 * (ends.max() / np.median(ends) - 1),
            "spread %": 100 * (ends.max() - ends.min()) / ends.max(),
            "imbalance %": 100 * (nb.max() / nb.min() - 1),
            "whole-grid GB/s": moved / (ends.max() - t0), "even GB/s": moved / (ends.mean() - t0)}


def timeline_check(TL, stats, use, allrec, spec):
    """Bandwidth the stamps imply vs the timed record of the same config: at the median and mean block
    period (x grid size) and, when every CTA was traced, over the whole launch."""
    if TL is None or not len(stats):
        return EMPTY
    tl_run, _, _ = timeline_source(TL, allrec)
    sms = (int(tl_run.sm_count.dropna().iloc[0]) if len(tl_run) and tl_run.sm_count.notna().any()
           else (spec.sm_count if spec else None))
    M, N, item = TL["M"], TL["N"], itemsize(TL["dtype"])
    chk = []
    cands = use[mask((use.op == "rms_norm") & (use.variant == "gluon-pipelined") & (use.M == M) & (use.N == N))]
    for st, r in stats.iterrows():
        bs = timeline_blocks(TL, st)
        rows_ = int(r["rows"])
        blocks_total = -(-M // rows_)
        grid = min(blocks_total, int(r["ctas_per_sm"]) * sms) if sms and r["ctas_per_sm"] else None
        per_block = rows_ * N * item * 2  # bytes of x read + y written per block
        mean_period = np.mean(np.concatenate([np.diff(b[:, 0]) for b in bs]))
        ends = np.array([b[-1, 2] for b in bs])
        whole = (M * N * item * 2 / (ends.max() - min(b[0, 0] for b in bs))) if grid and len(bs) >= grid else np.nan
        rec = cands[mask((cm.config_value(cands, "num_stages") == st) & (cm.config_value(cands, "rows") == rows_)
                         & (cm.config_value(cands, "ctas_per_sm") == r["ctas_per_sm"]))] if len(cands) else cands
        rec = rec.sort_values("timestamp").tail(1)
        chk.append({"NUM_STAGES": st, "grid (CTAs)": grid, "CTAs traced": len(bs),
                    "GB/s at median period": round(grid * per_block / r["median block period (ns)"]) if grid else None,
                    "GB/s at mean period": round(grid * per_block / mean_period) if grid else None,
                    "whole-grid GB/s from stamps": round(whole) if whole == whole else "not every CTA traced",
                    "CTA finish min / median / max (us)": f"{ends.min() / 1e3:.1f} / {np.median(ends) / 1e3:.1f} / {ends.max() / 1e3:.1f}",
                    "timed GB/s, same config": round(float(rec.gbps.iloc[0])) if len(rec) else None,
                    "timed record run": rec.run_id.iloc[0] if len(rec) else "no record with this config",
                    "stale": bool(rec.stale.iloc[0]) if len(rec) else None})
    return pd.DataFrame(chk).set_index("NUM_STAGES")


def timeline_change(stats) -> dict | None:
    """First vs last NUM_STAGES of the timeline: stall, period, gap, compute+store, share stalled."""
    if len(stats) < 2:
        return None
    a, b = stats.iloc[0], stats.iloc[-1]
    col = {"stall": "median stall / block (ns)", "period": "median block period (ns)",
           "gap": "median store-to-next-wait gap (ns)", "work": "median compute+store (ns)",
           "stalled %": "time stalled (median over CTAs) %"}
    return {"stages": (int(stats.index[0]), int(stats.index[-1])),
            **{k: (float(a[c]), float(b[c])) for k, c in col.items()},
            "period speedup": float(a[col["period"]] / b[col["period"]])}


def timeline_check_notes(chk, stats, spec) -> str:
    """What the check table says, line by line (printed under it)."""
    out = []
    for st, r in chk.iterrows():
        if spec and r["GB/s at median period"] and r["GB/s at median period"] > spec.hbm_gbps:
            out.append(f"NUM_STAGES={st}: the median period implies {r['GB/s at median period']:.0f} GB/s, above the "
                       f"{spec.hbm_gbps:.0f} GB/s datasheet: blocks are not all alike (mean period -> "
                       f"{r['GB/s at mean period']:.0f} GB/s); the median shows a typical block, not the launch")
        if r["timed GB/s, same config"] and not isinstance(r["whole-grid GB/s from stamps"], str):
            out.append(f"NUM_STAGES={st}: whole-grid stamps {r['whole-grid GB/s from stamps']:.0f} GB/s vs timed "
                       f"{r['timed GB/s, same config']:.0f} GB/s ({r['whole-grid GB/s from stamps'] / r['timed GB/s, same config']:.2f}x; "
                       f"timed run {r['timed record run']})")
    c = timeline_change(stats)
    if c:
        (s0, s1), st_, pe, sf = c["stages"], c["stall"], c["period"], c["stalled %"]
        out.append(f"NUM_STAGES {s0} -> {s1}: median stall {st_[0]:.0f} -> {st_[1]:.0f} ns, block period {pe[0]:.0f} -> "
                   f"{pe[1]:.0f} ns ({c['period speedup']:.2f}x), stalled {sf[0]:.0f}% -> {sf[1]:.0f}% of the time")
    return "\n".join(out)


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
            chunk = 16 // itemsize(dtype) * 32 * cfg.num_warps
            nc = -(-N // chunk)
            crow.append({"N": N, "NUM_STAGES": stn, "warps": cfg.num_warps, "rows/slot": cfg.rows, "CHUNK": chunk,
                         "NUM_CHUNKS": nc, "TMA copies (PTX)": c["tma_load"], "UTMALDG (SASS)": c["sass"]["UTMALDG"],
                         "TMA copies per ring fill": (c["tma_load"] - nc) / stn, "mbarrier.init": c["mbarrier_init"],
                         "mbarrier waits": c["mbarrier_wait"], "smem bytes": c["smem_bytes"],
                         "slot bytes (rows x N_pad x 2)": cfg.rows * nc * chunk * itemsize(dtype),
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
                     "smem bytes": c["smem_bytes"], "ring bytes per stage": (cfg.BM * cfg.BK + cfg.BK * cfg.BN) * itemsize(dtype),
                     "registers": c["registers"], "spill bytes": c["spill_bytes"], "ld.global": c["ld_global"]})
    return (pd.DataFrame(grow).set_index("kernel") if grow else EMPTY), errors


# ---- norm grids against the copy ceiling, shared with notebook 04 --------------------------------
def ceiling_table(df, run: str):
    """(reference per (M, N) cell, that run's ceilings): notebook.copy_reference_table with BIG."""
    return cm.copy_reference_table(df, run, BIG)


def norm_grid(df, op: str, require=("gluon-pipelined", "inductor")):
    """One run's bf16 grid of op (every variant), with its copy reference and `pct_ceiling`."""
    st = study(df)
    if not len(df):
        return df.copy()
    g = pick(df, (df.op == op) & (df.dtype == "bfloat16") & st.isna() & df.N.notna() & (df.pattern != "ceiling"),
             require=require)
    if not len(g):
        return g
    ct, _ = ceiling_table(df, g.run_id.iloc[0])
    g = g.join(ct[["reference GB/s", "reference"]], on=["M", "N"])
    g["pct_ceiling"] = 100 * g.gbps / g["reference GB/s"]
    return g


def norm_grids(df, ops=("rms_norm", "layer_norm"), require=("gluon-pipelined", "inductor")) -> dict:
    """{op: norm_grid} for the ops with records (missing ops are left out: see grid_notes)."""
    out = {op: norm_grid(df, op, require) for op in ops}
    return {op: g for op, g in out.items() if len(g)}


def grid_notes(ctx, grids: dict, ops=("rms_norm", "layer_norm"), stale: str = "flag", with_files: bool = False,
               name: str | None = None) -> list:
    """Per op: which run the grid comes from (or that it is missing)."""
    out = []
    for op in ops:
        out += about(grids[op], f"{op} bf16 grid", with_files) if op in grids else [
            nodata(ctx, f"the {op} bf16 grid", stale, name)]
    return out


def grid_run(grids: dict) -> str | None:
    return next(iter(grids.values())).run_id.iloc[0] if grids else None


def grid_ceiling(df, grids: dict):
    """(reference table, ceilings) of the first grid's run (empty, None without a grid)."""
    return ceiling_table(df, grid_run(grids)) if grids else (EMPTY, None)


def session_line(run, ce) -> str | None:
    """The run's session copy and matmul ceilings in one line."""
    if not ce:
        return None
    return (f"run {run}: session copy {ce['copy_gbps']:.0f} GB/s ({ce['copy_bytes'] / 2**30:.0f} GiB moved, "
            f"{ce['copy_timer']}), bf16 matmul {ce['matmul_tflops']:.0f} TFLOP/s ({ce['matmul_shape']}, {ce['matmul_timer']})")


def low_copy_cells(ct):
    """M*N >= 64 Mi cells where the per-shape copy is more than 10% below the session copy."""
    if not len(ct):
        return ct
    big = ct[[m * n >= BIG for m, n in ct.index]]
    return big[big["per-shape copy GB/s"] < 0.9 * big["session copy GB/s"]]


def big_cells(grids: dict, ct):
    """The M*N >= 64 Mi cells of the reference table, with the fastest norm (any variant) of the run."""
    if not grids or not len(ct):
        return EMPTY
    big = ct[[m * n >= BIG for m, n in ct.index]].copy()
    allg = pd.concat(grids.values())
    best = allg.groupby(["M", "N"]).gbps.max()
    who = allg.loc[allg.groupby(["M", "N"]).gbps.idxmax()].set_index(["M", "N"])
    big["fastest norm GB/s (any variant, same run)"] = best.reindex(big.index)
    big["fastest norm"] = (who.op + " " + who.variant).reindex(big.index)
    return big.sort_index()


def why_max_note(grids: dict, big, ce) -> str | None:
    """Why the reference is max(per-shape, session copy) at M*N >= 64 Mi: where the per-shape copy reads
    far below the session copy while norms beat it (None when no such cell)."""
    slow = big[big["per-shape copy GB/s"] < 0.9 * big["session copy GB/s"]] if len(big) else big
    if not len(slow) or not ce:
        return None
    allg = pd.concat(grids.values())
    beat = allg[allg.set_index(["M", "N"]).index.isin(slow.index)]
    beat = beat[beat.gbps.to_numpy() > slow["per-shape copy GB/s"].reindex(beat.set_index(["M", "N"]).index).to_numpy()]
    return (f"**Why max(per-shape, session copy) there:** at {', '.join(f'{m}x{n}' for m, n in slow.index)} "
            f"(tensors of {slow['tensor MiB'].min():.0f}-{slow['tensor MiB'].max():.0f} MiB) the graph-timed per-shape "
            f"`y.copy_(x)` reads only {slow['per-shape copy GB/s'].min():.0f}-{slow['per-shape copy GB/s'].max():.0f} GB/s, "
            f"{100 * slow['per-shape copy GB/s'].max() / ce['copy_gbps']:.0f}% or less of the {ce['copy_gbps']:.0f} GB/s the same "
            f"`copy_` reached on 2 GiB in the same session, while {len(beat)} norm records at those cells "
            f"({beat.variant.nunique()} variants) move their bytes faster "
            f"(up to {slow['fastest norm GB/s (any variant, same run)'].max():.0f} "
            "GB/s), reading and writing as many bytes as the copy and computing on them. A ceiling that kernels doing more "
            "work beat is not a ceiling: at these sizes the per-shape copy measures one torch copy path under the graph "
            "timer, not what the memory system delivers. Measured, not explained; a hypothesis to test is that a "
            "same-dtype contiguous `copy_` is a device-to-device `cudaMemcpyAsync`, which inside a CUDA graph becomes a "
            "memcpy node that the driver may run differently from the stream-launched copy of the session ceiling. "
            "Below 64 Mi elements the per-shape copy stays the reference: small copies pay the same launch and tail "
            "costs as small norms.")


def big_cells_views(grids: dict, big, ce) -> list:
    if not len(big):
        return []
    return [f"**Cells with M·N ≥ 64 Mi elements** (run `{grid_run(grids)}`):", big.round(1), why_max_note(grids, big, ce)]


def lift_line(big, ce) -> str | None:
    """How much max() raises the reference at the other M*N >= 64 Mi cells."""
    if not len(big) or not ce:
        return None
    rest = big[~(big["per-shape copy GB/s"] < 0.9 * big["session copy GB/s"])]
    if not len(rest):
        return None
    lift = 100 * (rest["reference GB/s"] / rest["per-shape copy GB/s"] - 1)
    return (f"at the other {len(rest)} cells with M*N >= 64 Mi the per-shape copy is within 10% of the session copy; "
            f"max() raises their reference by {lift.min():.1f}-{lift.max():.1f}%")


def best_baseline(g, col: str = "gbps"):
    """(best value, which baseline) per (M, N) over the passed baseline records of one grid."""
    b = g[g.variant.isin(BASELINES) & g.passed.astype(bool)]
    piv = b.pivot_table(index=["M", "N"], columns="variant", values=col)
    return piv.max(axis=1), piv.idxmax(axis=1)


def timer_text(g) -> str:
    tm = g.groupby("M").timer.agg(lambda s: "/".join(sorted(set(s.dropna()))))
    return (f"every cell timed by {tm.iloc[0]}" if tm.nunique() == 1 else
            "timers by M: " + ", ".join(f"{m}: {t}" for m, t in tm.items()))


OP_NAMES = {"rms_norm": "RMSNorm", "layer_norm": "LayerNorm", "add_rms_norm": "add+RMSNorm", "l2_norm": "L2Norm",
            "matmul": "GEMM"}
BASELINE_WORDS = "eager PyTorch, torch.compile (default and max-autotune), the one-row Triton kernel and Liger"


def vs_best_frame(g, variant: str = "gluon-pipelined"):
    """Per (M, N) of one grid: variant's % of the copy ceiling, the best baseline's, and variant's speed
    (GB/s) over the fastest baseline's, as a frame with M, N, mine, base, ratio columns."""
    pp = g[(g.variant == variant) & g.passed.astype(bool)].set_index(["M", "N"])
    bb, _ = best_baseline(g, "pct_ceiling")
    bg, _ = best_baseline(g, "gbps")
    return pd.DataFrame({"mine": pp.pct_ceiling, "base": bb.reindex(pp.index), "ratio": pp.gbps / bg.reindex(pp.index)}
                        ).reset_index()


def headline_figure(grids: dict, slug: str, variant: str = "gluon-pipelined", title: str | None = None):
    """Headline (read at ~900 px): per op (RMSNorm, LayerNorm) variant's speed over the fastest baseline of
    each cell, on a diverging scale centred on 1.0 (red: slower, green: faster). None without a grid."""
    heat = {op: g for op, g in grids.items() if op in ("rms_norm", "layer_norm")}
    if not heat:
        return None
    frames = {op: vs_best_frame(g, variant) for op, g in heat.items()}
    frames = {op: t for op, t in frames.items() if len(t) and t["ratio"].notna().any()}
    if not frames:
        return None
    span = plots.ratio_span(pd.concat(frames.values())["ratio"])
    fig, axes = plt.subplots(1, len(frames), figsize=(6.6 * len(frames), 5.0), squeeze=False)
    for ax, (op, t) in zip(axes[0], frames.items()):
        plots.ratio_heatmap(t, value="ratio", ax=ax, title=f"{OP_NAMES.get(op, op)} bf16", span=span,
                            faster=f"{variant} faster", slower="baseline faster", fontsize=12)
    g0 = next(iter(heat.values()))
    fig.suptitle(title or f"{variant} speed / fastest baseline per cell (run {cm.run_short(g0.run_id.iloc[0])}, {slug})"
                 + (" — STALE records" if g0[g0.variant == variant].stale.any() else ""))
    cm.headline_fonts(fig)
    fig.tight_layout()
    return fig


def grid_figure(grids: dict, slug: str):
    """Per op: gluon-pipelined and the best baseline in % of the copy ceiling, and their speed ratio (a
    diverging map centred on 1.0)."""
    if not grids:
        return None
    fig, axes = plt.subplots(len(grids), 3, figsize=(15, 3.6 * len(grids)), squeeze=False)
    frames = {op: vs_best_frame(g) for op, g in grids.items()}
    span = plots.ratio_span(pd.concat(frames.values())["ratio"])  # one colour scale for every op
    for row, (op, t) in zip(axes, frames.items()):
        plots.sol_heatmap(t, value="mine", ax=row[0], vmax=110, title=f"{op}: gluon-pipelined, % of ceiling")
        plots.sol_heatmap(t, value="base", ax=row[1], vmax=110, title=f"{op}: best baseline, % of ceiling")
        plots.ratio_heatmap(t, value="ratio", ax=row[2], title=f"{op}: gluon-pipelined / best baseline (speed)",
                            faster="gluon-pipelined faster", slower="baseline faster", span=span)
    g0 = next(iter(grids.values()))
    fig.suptitle(f"bf16 norms on {slug}, run {g0.run_id.iloc[0]} — {timer_text(g0)} (CUDA-graph replay over rotated, "
                 "L2-cold inputs: no launch overhead on the clock, which matters most at small M)"
                 + (" — STALE gluon-pipelined records" if g0[g0.variant == 'gluon-pipelined'].stale.any() else ""), fontsize=10)
    fig.tight_layout()
    return fig


def headline_numbers(grids: dict, use=EMPTY) -> list:
    """2-4 (label, value) pairs for the page's headline block: gluon-pipelined vs the fastest baseline over
    the RMSNorm and LayerNorm grids, its % of the copy ceiling, and the GEMM vs cuBLAS at 8192³ (the
    newest GEMM grid of `use`)."""
    gm = gemm_records(use) if len(use) else EMPTY
    gemm_tab = gemm_table(gm)
    out = []
    frames = {op: vs_best_frame(g) for op, g in grids.items() if op in ("rms_norm", "layer_norm")}
    frames = {op: t for op, t in frames.items() if len(t) and t["ratio"].notna().any()}
    if frames:
        allt = pd.concat(frames.values())
        r = allt["ratio"].dropna()
        run = cm.run_short(next(iter(grids.values())).run_id.iloc[0])
        out.append(("gluon-pipelined vs best baseline",
                    f"{plots.geomean(r):.2f}× geomean over {len(r)} cells ({' + '.join(OP_NAMES[o] for o in frames)} bf16); "
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


def variant_maps(grids: dict, before: str = "gluon-chunked", after: str = "gluon-pipelined",
                 with_timer: bool = True) -> list:
    """Per op: % of the copy ceiling of every baseline, then of every Gluon kernel (figures), and the
    `before -> after` delta table under its title."""
    out = []
    for op, g in grids.items():
        vs = [v for v in NORM_ORDER if v in set(g.variant)]
        for group, title in (([v for v in vs if v in BASELINES], "baselines"),
                             ([v for v in vs if v not in BASELINES], "Gluon kernels")):
            timer = f" (timer: {'/'.join(sorted(g.timer.dropna().unique()))})" if with_timer else ""
            fig = cm.heatmaps(g, group, value="pct_ceiling", vmax=110,
                              suptitle=f"{op} bf16, {title}, run {g.run_id.iloc[0]}: % of the copy ceiling{timer}")
            if fig is not None:
                out.append(fig)
        if {before, after} <= set(g.variant):
            out += [f"**{op}: {before} -> {after}** (% of ceiling, speed change)",
                    plots.delta_table(g, before, after, metric="pct_ceiling")]
    return out


def blocks_per_cta(recs, spec):
    """Row blocks each CTA walks with the recorded config (rows per slot, CTAs per SM, the run's SMs),
    indexed like recs (M, N index): blocks / min(blocks, ctas_per_sm x SMs)."""
    sms = recs.sm_count.fillna(spec.sm_count if spec else 132).astype(int).to_numpy(dtype=np.int64)
    flat = recs.reset_index()
    rows = np.asarray(cm.config_value(flat, "rows", 1).values, dtype=np.int64)
    ctas = np.asarray(cm.config_value(flat, "ctas_per_sm", 1).values, dtype=np.int64)
    Ms = recs.index.get_level_values("M").to_numpy(dtype=np.int64)
    nblk = -(-Ms // rows)
    return pd.Series(nblk / np.minimum(nblk, ctas * sms), index=recs.index)


# ---- the pattern's targets, cell by cell -------------------------------------------------------
TARGETS = (("met: >= gluon-tma", "vs gluon-tma", 1.0), ("met: >= best baseline", "vs best baseline", 1.0),
           ("met: >= 1.10x one-row (M <= 4096)", "vs one-row kernel", 1.10),
           ("met: >= 97% ceiling (M*N >= 64Mi)", "% of ceiling", 97.0))


def target_cells(g, spec):
    """Every cell of one grid against the pattern's targets (ratios of passed records, strict `met`)."""
    piv = g[g.passed.astype(bool)].pivot_table(index=["M", "N"], columns="variant", values="gbps")
    if "gluon-pipelined" not in piv:
        return EMPTY
    pp = piv["gluon-pipelined"]
    bg, bw = best_baseline(g)
    one_row = [v for v in ("gluon-tma", "gluon-chunked") if v in piv]
    one = piv[one_row].max(axis=1)
    onew = piv[one_row].idxmax(axis=1)
    gp = g[g.variant == "gluon-pipelined"].set_index(["M", "N"])
    t = pd.DataFrame({"gluon-pipelined GB/s": pp,
                      "vs gluon-tma": pp / piv["gluon-tma"] if "gluon-tma" in piv else np.nan,
                      "vs best baseline": pp / bg, "best baseline": bw,
                      "vs one-row kernel": pp / one, "one-row kernel": onew,
                      "row blocks per CTA": blocks_per_cta(gp, spec).reindex(pp.index),
                      "% of ceiling": gp.pct_ceiling.reindex(pp.index), "ceiling": gp["reference"].reindex(pp.index),
                      "stale": gp.stale.reindex(pp.index)})
    Mi = t.index.get_level_values("M")
    Ni = t.index.get_level_values("N")
    t["met: >= gluon-tma"] = np.where(t["vs gluon-tma"].isna(), "n/a", np.where(t["vs gluon-tma"] >= 1, "met", "MISSED"))
    t["met: >= best baseline"] = np.where(t["vs best baseline"] >= 1, "met", "MISSED")
    t["met: >= 1.10x one-row (M <= 4096)"] = np.where(
        Mi > 4096, "n/a", np.where(t["vs one-row kernel"] >= 1.10, "met",
                                   np.where(t["row blocks per CTA"] <= 1, "MISSED (<= 1 block/CTA: nothing to overlap)", "MISSED")))
    t["met: >= 97% ceiling (M*N >= 64Mi)"] = np.where(Mi * Ni < BIG, "n/a", np.where(t["% of ceiling"] >= 97, "met", "MISSED"))
    return t


def target_tables(grids: dict, spec, cells=None) -> dict:
    """{op: cells(grid, spec)} for the grids with a non-empty table (cells: target_cells, or
    another pattern's target function)."""
    out = {op: (cells or target_cells)(g, spec) for op, g in grids.items()}
    return {op: t for op, t in out.items() if len(t)}


#: each target of TARGETS in words (what, threshold, against which kernel) and as a short grid header
TARGET_WORDS = {
    "met: >= gluon-tma": ("at least as fast as gluon-tma (the one-row TMA kernel of notebook 01), where gluon-tma runs "
                          "(power-of-2 N)", "≥ gluon-tma (×; N = 2ᵏ only)"),
    "met: >= best baseline": (f"at least as fast as the fastest baseline of the cell ({BASELINE_WORDS})",
                              "≥ best baseline (×)"),
    "met: >= 1.10x one-row (M <= 4096)": ("at least 1.10× the faster one-row-per-CTA kernel (gluon-tma or gluon-chunked) "
                                          "where M ≤ 4096", "≥ 1.10× one-row kernel (×; M ≤ 4K only)"),
    "met: >= 97% ceiling (M*N >= 64Mi)": ("at least 97% of the copy ceiling where M·N ≥ 64 Mi elements",
                                          "≥ 97% of copy ceiling (M·N ≥ 64 Mi only)"),
}


def target_summary(targets: dict):
    """One row per (op, target), the target in words: cells met, near misses (within 2%), the worst cell,
    stale records."""
    rows = []
    for op, t in targets.items():
        for col, ratio, goal in TARGETS:
            app = t[t[col] != "n/a"]
            if not len(app):
                continue
            met = app[col] == "met"
            worst = app[ratio].idxmin()
            rows.append({"op": op, "target": f"gluon-pipelined {TARGET_WORDS[col][0]}", "goal": col.replace("met: ", ""),
                         "cells met": f"{int(met.sum())}/{len(app)}",
                         "within 2% of target": int(((app[ratio] < goal) & (app[ratio] >= 0.98 * goal)).sum()),
                         "worst": (f"{app[ratio].min():.1f}% of ceiling" if ratio == "% of ceiling" else f"{app[ratio].min():.3f}x")
                                  + f" at (M, N) = ({int(worst[0])}, {int(worst[1])})",
                         "all met": bool(met.all()), "stale records": int(app.stale.sum())})
    return pd.DataFrame(rows)


def na_reason(col, M, N, t) -> str:
    """Why a target does not apply to a cell, as short as the grid needs (the column header names the
    condition): 'n/a' where the cell is outside the target's domain, 'no record' where it is inside it."""
    if col == "met: >= gluon-tma" and not N & (N - 1):
        return "no record"
    return "n/a"


GRID_LEGEND = {"green": "met", "red": "missed",
               "grey n/a": "the target does not apply to the cell (its condition is in the column header: gluon-tma "
                           "takes power-of-2 N only)",
               "‡": "missed where each CTA walks ≤ 1 row block (nothing to overlap inside a CTA)"}


def target_grid(t, cols=TARGETS, words=None, legend=None):
    """The cell table of one grid as a coloured met/missed grid (rows M; columns: target x N): the measured
    ratio (or % of ceiling) in each cell, green met / red missed / grey where the target does not apply
    (the cell says why). ‡ marks a miss where each CTA walks at most one row block. A pandas Styler."""
    if not len(t):
        return None
    words = words or TARGET_WORDS
    Ms = sorted(t.index.get_level_values("M").unique())
    Ns = sorted(t.index.get_level_values("N").unique())
    vals, stat = {}, {}
    for col, ratio, _goal in cols:
        head = words[col][1]
        for N in Ns:
            v, s_ = [], []
            for M in Ms:
                if (M, N) not in t.index:
                    v.append("not measured")
                    s_.append("n/a")
                    continue
                r = t.loc[(M, N)]
                st = str(r[col])
                if st == "n/a":
                    v.append(na_reason(col, int(M), int(N), t))
                    s_.append("n/a")
                    continue
                x = r[ratio]
                txt = (f"{x:.1f}%" if ratio == "% of ceiling" else f"{x:.3f}") if x == x else "not measured"
                v.append(txt + (" ‡" if "block" in st else ""))
                s_.append("met" if st == "met" else "missed")
            vals[(head, plots.fmt_size(N))] = v
            stat[(head, plots.fmt_size(N))] = s_
    idx = pd.Index([plots.fmt_size(m) for m in Ms], name="M")
    V_ = pd.DataFrame(vals, index=idx)
    S_ = pd.DataFrame(stat, index=idx)
    V_.columns = pd.MultiIndex.from_tuples(V_.columns, names=["target", "N"])
    S_.columns = V_.columns
    return cm.met_grid(V_, S_, legend=legend or GRID_LEGEND)


def summary_view(summary, ok_col: str = "all met"):
    """The summary table with `all met` coloured (green: every applicable cell met)."""
    if not len(summary):
        return None
    d = summary.drop(columns=["goal"], errors="ignore")
    d[ok_col] = d[ok_col].map(lambda b: "✓ all met" if b else "✗ not all")
    css = [cm.MET_CSS["met" if str(v).startswith("✓") else "missed"] + ";white-space:nowrap" for v in d[ok_col]]
    text = [c for c in d.columns if c != ok_col]
    return (d.style.hide(axis="index").apply(lambda c: css if c.name == ok_col else [""] * len(c), axis=0)
            .set_properties(subset=text, **{"text-align": "left", "white-space": "normal"}).format(precision=3))


DETAIL_NAMES = {"gluon-pipelined GB/s": "GB/s", "vs gluon-tma": "/ gluon-tma", "vs best baseline": "/ best base",
                "best baseline": "best base", "vs one-row kernel": "/ one-row", "one-row kernel": "one-row",
                "row blocks per CTA": "blocks/CTA", "% of ceiling": "% ceil", "ceiling": "ceiling"}


def target_details(grids: dict, targets: dict) -> list:
    """Per op the numbers behind the grid (short column names, no met columns: the grid has them), each
    empty cell saying why (gluon-tma refuses N that is not a power of two)."""
    out = []
    for op, t in targets.items():
        g = grids.get(op)
        d = t[[c for c in DETAIL_NAMES if c in t]].copy()

        def why(idx, col, g=g):
            M, N = idx
            if col == "vs gluon-tma":
                r = cm.refusal(op, "gluon-tma", {"M": int(M), "N": int(N)}, "bfloat16")
                return ("gluon-tma refuses: N not a power of 2" if r and "power-of-2" in r else r) or "no gluon-tma record"
            return f"not measured in run {cm.run_short(g.run_id.iloc[0]) if g is not None else '?'}"
        d = cm.fill_reasons(d.round(3), why).rename(columns=DETAIL_NAMES)
        out += [f"**{op} bf16, per cell** (ratios are gluon-pipelined GB/s over the named kernel's)", d]
    return out


def target_views(ctx, grids: dict, targets: dict, summary, stale: str = "flag") -> list:
    """Per op the coloured met/missed grid under its run line; then the summary, each target in words."""
    out = []
    for op, g in grids.items():
        if op not in targets:
            out.append(nodata(ctx, f"gluon-pipelined in the {op} grid", stale))
            continue
        t = targets[op]
        out += [f"**{OP_NAMES.get(op, op)} bf16** (run `{g.run_id.iloc[0]}`)"
                + (" — STALE gluon-pipelined records" if t.stale.any() else ""), target_grid(t)]
    if len(summary):
        out += ["**Summary**", summary_view(summary)]
    return out


# ---- NUM_STAGES study, pipe-sweep, FENCE -------------------------------------------------------
def stages_records(df):
    """The newest `stages` study of gluon-pipelined, with num_stages as a column."""
    stg = pick(df, (study(df) == "stages") & (df.variant == "gluon-pipelined")) if len(df) else df.copy()
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
    ps = pick(df, (study(df) == "pipe-sweep") & (df.variant == "gluon-pipelined")) if len(df) else df.copy()
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
    fe = pick(df, (study(df) == "fence") & (df.variant == "gluon-pipelined")) if len(df) else df.copy()
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
    m = mask(study(df) == "schedule")
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
    return load_timeline(ctx, "03-multibuffer-pipelining", ".schedule-timeline.json")


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
    st = study(df)
    for op in ops:
        g = pick(df, (df.op == op) & st.isna() & df.N.notna(), require=("gluon-pipelined", )) if len(df) else df.copy()
        if not len(g):
            continue
        ct, _ = ceiling_table(df, g.run_id.iloc[0])
        g = g.join(ct[["reference GB/s"]], on=["M", "N"])
        g["pct_ceiling"] = 100 * g.gbps / g["reference GB/s"]
        out[op] = g
    return out


def other_table(g):
    """GB/s per variant per cell, gluon-pipelined / best baseline and which baseline."""
    t = g.pivot_table(index=["M", "N"], columns="variant", values="gbps").round(0)
    bg, bw = best_baseline(g)
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
            out += about(others[op], f"{op} bf16") + [cm.fill_reasons(t, variant_reason(op, others[op]))]
        else:
            out.append(nodata(ctx, f"{op} (the 'others' part)", stale))
    return out


# ---- the GEMM, shared with notebook 04 ------------------------------------------------------------
def gemm_records(df, require=("torch", "gluon-pipelined")):
    """The newest GEMM grid run (matmul, no study, not the ceiling) holding the required variants."""
    if not len(df):
        return df.copy()
    gm = pick(df, (df.op == "matmul") & study(df).isna() & (df.pattern != "ceiling"), require=require)
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
    return [table(t), geomean_line(t), "configs the gluon records ran with:", table(gemm_configs(gm)), gemm_bars(gm)]


def square_ratio(t, col):
    """t[col] at 8192^3 (None when that shape is missing)."""
    sq = [i for i in t.index if tuple(int(d) for d in i) == SQUARE]
    return float(t.loc[sq[0], col]) if sq else None


def gemm_sweep_records(df):
    """The newest gemm-sweep (tile x stages, gluon-pipelined) with tile and shape labels."""
    gs = pick(df, (study(df) == "gemm-sweep") & (df.op == "matmul")) if len(df) else df.copy()
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
    ws = pick(df, (study(df) == "ws-sweep") & (df.op == "matmul")) if len(df) else df.copy()
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
                         "measured": f"{int((r >= 1).sum())}/{r.notna().sum()} shapes; worst {r.min():.3f}x at {shape_str(worst)}",
                         "met": bool((r >= 1).all())})
    return pd.DataFrame(rows)


# ---- roofline ------------------------------------------------------------------------------------
def roofline_figure(df, grids: dict, gm, spec, slug: str):
    """Norms (the main variants of each grid) and the passed GEMMs under the datasheet roof and the
    roof of one run's ceilings (the GEMM run's, else the first grid's). Returns (figure, lines)."""
    parts = [g[g.variant.isin(("torch", "inductor", "gluon-tma", "gluon-chunked", "gluon-pipelined", "gluon-ws"))]
             for g in grids.values()]
    if len(gm):
        parts.append(gm[gm.passed.astype(bool)])
    run = gm.run_id.iloc[0] if len(gm) else grid_run(grids)
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
    c = timeline_change(tl_stats)
    if c and TL is not None:
        _, tl_src, _ = timeline_source(TL, allrec)
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
        fs = finish_spread(TL, s1) if many_ctas_traced(TL) else None
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
        lines.append(f"NUM_STAGES study{tag(stg)}: best depth per cell " + ", ".join(f"{int(k)} stages: {v} cells" for k, v in bc.items())
                     + (f"; best vs 1 stage median {stage_tab['best / 1 stage'].median():.3f}x "
                        f"(max {stage_tab['best / 1 stage'].max():.3f}x)"
                        if "best / 1 stage" in stage_tab and stage_tab["best / 1 stage"].notna().any() else "") + ".")
    if len(ps_best):
        bk = ps_best["best (ctas/SM, stages, rows)"].value_counts()
        hb = ps_best["heuristic / best"].dropna()
        lines.append(f"pipe-sweep{tag(ps)}: most frequent best (CTAs/SM, stages, rows): "
                     + ", ".join(f"{k}: {v}" for k, v in bk.head(3).items())
                     + (f"; the current heuristic's pick reaches {hb.min():.3f}-{hb.max():.3f}x of the best over {len(hb)} shapes"
                        if len(hb) else "; the current heuristic's picks were not among the swept configs") + ".")
    if "off / on" in fence_tab:
        r = fence_tab["off / on"].dropna()
        lines.append(f"FENCE off vs on{tag(fe)}: {r.min():.3f}-{r.max():.3f}x over {len(r)} cells (geomean {plots.geomean(r):.3f}x).")
    for v in ("gluon-pipelined", "gluon-ws"):
        col = f"{v} / cuBLAS"
        if col in gemm_tab:
            sq = square_ratio(gemm_tab, col)
            lines.append(f"GEMM {v}{tag(gm[gm.variant == v])}: {gemm_tab[col].min():.3f}-{gemm_tab[col].max():.3f}x cuBLAS, geomean "
                         f"{plots.geomean(gemm_tab[col]):.3f}x" + (f", {sq:.3f}x at 8192^3" if sq is not None else "")
                         + (f"; vs triton geomean {plots.geomean(gemm_tab[v] / gemm_tab['triton']):.3f}x"
                            if "triton" in gemm_tab else "") + ".")
    if len(gs):
        for sh, sub in gs[gs.passed.astype(bool)].groupby("shape"):
            b = sub.loc[sub.tflops.idxmax()]
            s2 = sub[(sub.tile == b.tile)].set_index("num_stages").tflops
            lines.append(f"gemm-sweep {sh}{tag(sub)}: best {b.tile} with {int(b.num_stages)} stages ({b.tflops:.0f} TFLOP/s); "
                         "that tile by stages: "
                         + ", ".join(f"{int(k)}: {v:.0f}" for k, v in s2.sort_index().items()) + ".")
    if grids:
        ct, ce = ceiling_table(use, grid_run(grids))
        low = low_copy_cells(ct)
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


# ---- the every-gluon scoreboard (issue 16): best Gluon variant vs best peer over this grid ---------
#: geomean targets per board (RMSNorm / add+RMSNorm >= 1.05x, LayerNorm >= 1.3x); every cell >= 1.0x
SCOREBOARD_GEOMEAN = {"rms_norm": 1.05, "layer_norm": 1.3, "add_rms_norm (M = 16384)": 1.05}
CEILING_TARGET_PCT = 97.0  # % of the same run's copy ceiling, for M*N >= BIG elements


def scoreboards(use, grids: dict) -> dict:
    """{label: cm.scoreboard} for the grid's ops and the 'others' part (add+RMSNorm, L2Norm at one M)."""
    boards = {op: cm.scoreboard(g) for op, g in grids.items()}
    for op in ("add_rms_norm", "l2_norm"):
        g = norm_grid(use, op, require=("inductor", "gluon-pipelined"))  # the grid's run, not the schedule study's
        if len(g):
            boards[f"{op} (M = {int(g.M.iloc[0])})" if g.M.nunique() == 1 else op] = cm.scoreboard(g)
    return boards


def failed_peers(grids: dict) -> list[str]:
    """Peers that ran in the grid's run but passed no case there, with the first error (stated, never hidden)."""
    out = []
    for op, g in grids.items():
        for v, d in g[~g.variant.str.startswith(cm.GLUON_PREFIXES)].groupby("variant"):
            if not d.passed.astype(bool).any():
                out.append(f"{op}: peer {v!r} ran but failed every case of this run ({d.notes.dropna().iloc[0] if d.notes.notna().any() else 'no note'}); "
                           "it is not in the best-peer column")
    return out


def scoreboard_targets(boards: dict):
    """The issue's targets on these boards: every cell, geomeans, and >= 97% of the copy ceiling where
    M*N >= 64 Mi (the best gluon's % of the same run's reference)."""
    import pandas as pd
    t = cm.scoreboard_targets(boards, SCOREBOARD_GEOMEAN)
    rows = []
    for op in ("rms_norm", "layer_norm"):
        b = boards.get(op)
        if b is None or not len(b) or "% of ceiling" not in b:
            continue
        big = b[b.M * b.N >= BIG]
        if len(big):
            rows.append({"target": f"{op}: best gluon >= {CEILING_TARGET_PCT:.0f}% of the copy ceiling where M*N >= 64 Mi",
                         "measured": f"{int((big['% of ceiling'] >= CEILING_TARGET_PCT).sum())}/{len(big)} cells "
                                     f"({big['% of ceiling'].min():.1f}-{big['% of ceiling'].max():.1f}%)",
                         "met": bool((big["% of ceiling"] >= CEILING_TARGET_PCT).all())})
    return pd.concat([t, pd.DataFrame(rows)], ignore_index=True)


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
