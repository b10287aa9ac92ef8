"""The norm pattern's grids against the copy ceiling and the peers, and its targets cell by cell, read the same
way by notebooks 03 (gluon-pipelined) and 04 (gluon-ws): the grid of one run per op, the ceiling and session lines,
the headline and grid figures, the big-cell and low-copy notes, the per-cell target tables and their summary, and
the every-Gluon scoreboard (best Gluon variant vs best peer) with its geomean targets.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from .. import plots
from . import common as cm

BIG = 64 * 2**20  # M*N (elements) from which the pattern's target asks for >= 97% of the copy ceiling
BASELINES = ("torch", "inductor", "inductor-max-autotune", "triton", "liger")
NORM_ORDER = BASELINES + ("gluon-tma", "gluon-chunked", "gluon-pipelined", "gluon-ws")
EMPTY = pd.DataFrame()


def ceiling_table(df, run: str):
    """(reference per (M, N) cell, that run's ceilings): notebook.copy_reference_table with BIG."""
    return cm.copy_reference_table(df, run, BIG)


def norm_grid(df, op: str, require=("gluon-pipelined", "inductor")):
    """One run's bf16 grid of op (every variant), with its copy reference and `pct_ceiling`."""
    st = cm.study(df)
    if not len(df):
        return df.copy()
    g = cm.pick(df, (df.op == op) & (df.dtype == "bfloat16") & st.isna() & df.N.notna() & (df.pattern != "ceiling"),
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
        out += cm.about(grids[op], f"{op} bf16 grid", with_files) if op in grids else [
            cm.nodata(ctx, f"the {op} bf16 grid", stale, name)]
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
            out.append(cm.nodata(ctx, f"gluon-pipelined in the {op} grid", stale))
            continue
        t = targets[op]
        out += [f"**{OP_NAMES.get(op, op)} bf16** (run `{g.run_id.iloc[0]}`)"
                + (" — STALE gluon-pipelined records" if t.stale.any() else ""), target_grid(t)]
    if len(summary):
        out += ["**Summary**", summary_view(summary)]
    return out


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


