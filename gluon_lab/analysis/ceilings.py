"""Notebook 00-ceilings: the ceilings of a run, the RMSNorm baseline grid, the timer study.

Kernel-facing (the only places this module reaches into kernels / experiments / codegen):
    measure()          gluon_lab.experiments.run_ceilings(results_dir=, quick=)
    baseline_source()  gluon_lab.kernels.baselines.rms_norm_triton_kernel (its .fn source)
    census_table()     gluon_lab.codegen.inspect_variant("rms_norm", "triton", N=, dtype=), codegen.census_table
"""
from __future__ import annotations

from .. import plots
from . import common as cm

NB = "00-ceilings"
BASELINES = ("torch", "inductor", "triton")
DELTA_PAIRS = (("torch", "inductor"), ("inductor", "triton"), ("torch", "triton"))
TIMERS = ("do_bench-l2flush", "cudagraph")


# ---- kernel-facing -------------------------------------------------------------------------------
def measure(ctx: cm.Context, quick: bool = False):
    """Measure mode: run the plan (the same function `python -m gluon_lab bench 00-ceilings` runs)."""
    from ..experiments import run_ceilings
    _, where = run_ceilings(results_dir=str(ctx.results_dir), quick=quick)
    return where


def baseline_source() -> str:
    """Source of the plain one-row Triton RMSNorm kernel (the baseline every pattern is compared with)."""
    import inspect
    from ..kernels import baselines
    return inspect.getsource(baselines.rms_norm_triton_kernel.fn)


def census_table(Ns=(4096, 5120, 16384), dtype: str = "bfloat16"):
    """sm_90 census (compiled on this CPU) of the Triton baseline at each N."""
    from .. import codegen
    rows = {}
    for N in Ns:
        _, rows[f"triton rms_norm N={N}"] = codegen.inspect_variant("rms_norm", "triton", N=N, dtype=dtype)
    return codegen.census_table(rows)


def census_view(ct) -> list:
    """[census table without its all-zero columns, short names; the note naming the dropped columns]."""
    return cm.compact_census(ct)


# ---- ceilings ------------------------------------------------------------------------------------
def ceilings_table(df, spec):
    """Datasheet vs measured copy GB/s and bf16 matmul TFLOP/s of the newest run; None if missing."""
    import pandas as pd
    ceil = cm.ceilings(df)
    if not ceil or not spec:
        return None
    return pd.DataFrame({
        "datasheet": [spec.hbm_gbps, spec.bf16_tflops],
        "measured (this run)": [ceil["copy_gbps"], ceil["matmul_tflops"]],
        "measured / datasheet %": [100 * ceil["copy_gbps"] / spec.hbm_gbps,
                                   100 * ceil["matmul_tflops"] / spec.bf16_tflops],
        "timer": [ceil["copy_timer"], ceil["matmul_timer"]],
    }, index=[f"copy GB/s ({ceil['copy_bytes'] / 2**30:.0f} GiB moved)",
              f"bf16 matmul TFLOP/s ({ceil['matmul_shape']})"]).round(1)


CEILINGS_MISSING = "**Ceilings: missing** (no ceiling records for this GPU)."


# ---- the baseline grid ---------------------------------------------------------------------------
def baseline_grid(df):
    """The RMSNorm grid records (config {}) and the per-shape copies, the copies labelled 'copy'."""
    if not len(df):
        return df.copy()
    sel = ((df["op"] == "rms_norm") & (df["config_key"] == "{}")) | ((df["op"] == "copy") & df["M"].notna())
    grid = df[sel].copy()
    grid.loc[grid["op"] == "copy", "variant"] = "copy"
    return grid


def best_baseline_cells(grid):
    """Per (M, N): the fastest baseline's record (variant kept), and the same-shape copy's, as two frames."""
    g = grid[grid["variant"] != "copy"] if len(grid) else grid
    g = cm.passed(g)
    if not len(g):
        return g, g
    best = g.loc[g.groupby(["M", "N"])["ms_median"].idxmin()]
    return best, grid[grid["variant"] == "copy"]


def headline_figure(grid, spec, slug: str):
    """Headline (read at ~900 px): the fastest baseline per cell in % of datasheet bandwidth, its name in
    the cell, next to a device copy of the same shape. None without a grid."""
    import matplotlib.pyplot as plt
    best, copies = best_baseline_cells(grid)
    if not len(best):
        return None
    rows = sorted(best["M"].unique())
    cols = sorted(best["N"].unique())
    short = {"inductor": "compile", "torch": "eager", "triton": "triton"}
    fig, axes = plt.subplots(1, 2 if len(copies) else 1, figsize=(13, 4.8), squeeze=False)
    ax = axes[0, 0]
    plots.sol_heatmap(best, rows=rows, cols=cols, ax=ax, title="fastest baseline per cell", colorbar=False)
    who = {(r.M, r.N): r.variant for r in best.itertuples()}
    k = 0
    for i in rows:
        for j in cols:
            t = ax.texts[k]
            k += 1
            if (i, j) in who:
                t.set_text(f"{t.get_text()}%\n{short.get(who[(i, j)], who[(i, j)])}")
    if len(copies):
        plots.sol_heatmap(copies, rows=rows, cols=cols, ax=axes[0, 1], title="y.copy_(x), same shape", colorbar=False)
        for t in axes[0, 1].texts:
            if t.get_text() != "missing":
                t.set_text(t.get_text() + "%")
    tb = f"{spec.hbm_gbps / 1000:.1f} TB/s" if spec else "the datasheet"
    fig.suptitle(f"RMSNorm bf16 on {slug}: % of {tb} (eager = torch, compile = torch.compile)")
    cm.headline_fonts(fig, cells=11)
    fig.tight_layout()
    return fig


def grid_heatmaps(grid, spec, slug: str):
    """% of datasheet bandwidth per baseline and the same-shape copy (None if no grid)."""
    tb = f"{spec.hbm_gbps / 1000}" if spec else "?"
    return cm.heatmaps(grid, list(BASELINES) + ["copy"],
                       suptitle=f"RMSNorm bf16 on {slug}: % of datasheet bandwidth ({tb} TB/s); "
                                "'copy' = y.copy_(x) at the same shape")


def measured_heatmaps(grid):
    """The grid against the copy ceiling measured in the same run (sol_measured_pct)."""
    return cm.heatmaps(grid[grid["variant"] != "copy"] if len(grid) else grid, list(BASELINES),
                       value="sol_measured_pct",
                       suptitle="RMSNorm bf16: % of the 2 GiB copy ceiling measured in the same run")


def roofline(df, spec, slug: str):
    """Roofline of the baseline grid (config {}) and the ceilings; None without records."""
    if not len(df):
        return None
    return plots.roofline(df[(df["config_key"] == "{}") | (df["pattern"] == "ceiling")], spec, cm.ceilings(df),
                          title=f"Roofline on {slug}: RMSNorm baselines (bf16) under the datasheet and measured roofs")


def delta_tables(grid) -> list:
    """Markdown titles and seed-format `baseline -> variant (delta)` tables for DELTA_PAIRS."""
    out = []
    have = set(grid["variant"]) if len(grid) else set()
    for b, v in DELTA_PAIRS:
        if {b, v} <= have:
            out += [f"**{b} -> {v}**", plots.delta_table(grid, b, v)]
    return out


# ---- timer study ---------------------------------------------------------------------------------
def timer_records(df):
    if not len(df):
        return df.copy()
    return df[df["config_key"].str.contains('"study": "timers"', regex=False)].copy()


def timer_study(df):
    """(repeats table, do_bench-vs-graph table) of the timer study; (None, None) when missing.

    repeats: µs median/fastest/slowest over the repeats per (variant, cell, timer);
    versus: do_bench / graph latency ratio and the median SOL % under each timer, per (variant, cell)."""
    import pandas as pd
    t = timer_records(df)
    if not len(t) or not set(TIMERS) <= set(t["timer"]):
        return None, None
    t["cell"] = t["M"].astype(str) + "x" + t["N"].astype(str)
    summ = t.groupby(["variant", "cell", "timer"])["ms_median"].agg(["median", "min", "max", "count"])
    summ[["median", "min", "max"]] *= 1000
    summ.columns = ["us: median of repeats", "us: fastest repeat", "us: slowest repeat", "repeats"]
    piv = t.pivot_table(index=["variant", "cell"], columns="timer", values="ms_median", aggfunc="median")
    sol = {tm: t[t.timer == tm].groupby(["variant", "cell"])["sol_datasheet_pct"].median() for tm in TIMERS}
    versus = pd.DataFrame({"do_bench / graph (x)": piv["do_bench-l2flush"] / piv["cudagraph"],
                           "SOL% do_bench": sol["do_bench-l2flush"], "SOL% graph": sol["cudagraph"]})
    return summ.round(2), versus.round(2)


# ---- headline numbers ----------------------------------------------------------------------------
#: record fields that would carry the SM clock, if a run recorded it (none does yet)
CLOCK_FIELDS = ("sm_clock_mhz", "clock_mhz", "sm_clock")


def headline_numbers(df, spec) -> list:
    """2-4 (label, value) pairs for the page's headline block, computed from the records; a value that
    cannot be computed says why."""
    out = []
    ceil = cm.ceilings(df) if len(df) else None
    if ceil:
        copy = f"{ceil['copy_gbps']:.0f} GB/s"
        mm = f"{ceil['matmul_tflops']:.0f} TFLOP/s"
        if spec:
            copy += f" = {100 * ceil['copy_gbps'] / spec.hbm_gbps:.0f}% of the {spec.hbm_gbps:.0f} GB/s datasheet"
            mm += f" = {100 * ceil['matmul_tflops'] / spec.bf16_tflops:.0f}% of the {spec.bf16_tflops:.0f} TFLOP/s datasheet"
        out.append(("copy ceiling", f"{copy} ({ceil['copy_bytes'] / 2**30:.0f} GiB device copy, run {cm.run_short(ceil['run_id'])})"))
        out.append(("bf16 matmul ceiling", f"{mm} (cuBLAS {ceil['matmul_shape'].replace('x', '×')})"))
    else:
        out.append(("ceilings", "missing: no copy / matmul ceiling record for this GPU"))
    best, _ = best_baseline_cells(baseline_grid(df))
    if len(best):
        s = best["sol_datasheet_pct"].astype(float)
        out.append(("best RMSNorm baseline", f"{s.min():.0f}–{s.max():.0f}% of datasheet bandwidth over {len(best)} "
                                             "M×N cells (bf16; the fastest of eager, torch.compile, Triton per cell)"))
    else:
        out.append(("best RMSNorm baseline", "missing: no RMSNorm baseline grid in the records"))
    clock = next((c for c in CLOCK_FIELDS if c in df and df[c].notna().any()), None) if len(df) else None
    out.append(("SM clock", f"{df[clock].dropna().median():.0f} MHz (median over the records)" if clock else
                "not recorded: the records carry no SM clock field"))
    return out


# ---- takeaways -----------------------------------------------------------------------------------
def takeaways(df, spec) -> list[str]:
    """Each line computed from the records the sections above show."""
    lines = []
    ceil = cm.ceilings(df)
    if ceil and spec:
        lines.append(f"Copy ceiling {ceil['copy_gbps']:.0f} GB/s = {100 * ceil['copy_gbps'] / spec.hbm_gbps:.1f}% of the "
                     f"{spec.hbm_gbps:.0f} GB/s datasheet; bf16 matmul {ceil['matmul_tflops']:.0f} TFLOP/s = "
                     f"{100 * ceil['matmul_tflops'] / spec.bf16_tflops:.1f}% of {spec.bf16_tflops:.0f}. "
                     "Nothing memory-bound here should be read against 100%.")
    grid = baseline_grid(df)
    g = grid[grid["variant"] != "copy"] if len(grid) else grid
    if len(g):
        piv = g.pivot_table(index=["M", "N"], columns="variant", values="ms_median")
        best = piv.idxmin(axis=1)
        counts = best.value_counts()
        lines.append("Fastest baseline per cell: " + ", ".join(f"{v} in {n} of {len(best)}" for v, n in counts.items()) + ".")
        for v in [c for c in ("inductor", "triton") if c in piv and "torch" in piv]:
            r = piv["torch"] / piv[v]
            lines.append(f"{v} vs eager torch: geomean {plots.geomean(r):.2f}x (range {r.min():.2f}-{r.max():.2f}x).")
        sol = g.pivot_table(index=["M", "N"], columns="variant", values="sol_datasheet_pct")
        bestsol = sol.max(axis=1)
        lo, hi = bestsol.idxmin(), bestsol.idxmax()
        copy = grid[grid.variant == "copy"].sol_datasheet_pct
        lines.append(f"Best baseline SOL ranges from {bestsol.min():.1f}% (M×N = {lo[0]}×{lo[1]}) to {bestsol.max():.1f}% "
                     f"({hi[0]}×{hi[1]}) of the datasheet"
                     + (f"; the same-shape copy reaches {cm.sol_range(copy)}%." if len(copy) else "."))
        if "triton" in piv and "inductor" in piv:
            for n in [n for n in sorted(g["N"].unique()) if n & (n - 1)]:
                r = (piv["inductor"] / piv["triton"]).xs(n, level="N")
                lines.append(f"N={n} (not a power of two): triton/inductor speed ratio {r.min():.2f}-{r.max():.2f}x — "
                             f"the Triton kernel pads the row to {1 << (int(n) - 1).bit_length()} lanes.")
    _, versus = timer_study(df)
    if versus is not None:
        r = versus["do_bench / graph (x)"].dropna()
        t = timer_records(df)
        graph_us = 1000 * t[t.timer == "cudagraph"].assign(cell=t["M"].astype(str) + "x" + t["N"].astype(str)) \
            .groupby(["variant", "cell"])["ms_median"].median()
        hi, lo = r.idxmax(), r.idxmin()
        order = graph_us.reindex(r.index).rank()
        trend = ("the gap is largest on the shortest kernel" if order[hi] == order.min() else
                 "the gap is not largest on the shortest kernel")
        lines.append(f"Timer study: do_bench reads {r.min():.2f}-{r.max():.2f}x the graph-timed latency on the same "
                     f"cells: {r[hi]:.2f}x at {hi[0]} {hi[1]} ({graph_us[hi]:.0f} µs graph-timed), {r[lo]:.2f}x at "
                     f"{lo[0]} {lo[1]} ({graph_us[lo]:.0f} µs); {trend}.")
    stale = int(df["stale"].sum()) if len(df) else 0
    lines.append(f"{len(df)} records shown, {stale} stale (kernel source changed since they were measured).")
    return lines
