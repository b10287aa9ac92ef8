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
    out.append(host_headline(df))
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
    lines += dispatch_takeaways(df)
    lines += block_takeaways(df)
    clock = next((c for c in CLOCK_FIELDS if c in df and df[c].notna().any()), None) if len(df) else None
    blk = [c.get("sm_clock_mhz") for c in block_records(df)["config"]] if len(df) else []
    blk = [c for c in blk if isinstance(c, (int, float))]
    if clock:
        lines.append(f"SM clock: {df[clock].dropna().median():.0f} MHz (median over the records).")
    elif blk:
        lines.append(f"SM clock right after the compiled-block timings: {min(blk):.0f}–{max(blk):.0f} MHz (NVML); the "
                     "ceiling records carry none, so the matmul ceiling is not tied to a clock.")
    else:
        lines.append("SM clock: not recorded (no record carries one), so the matmul ceiling is not tied to a clock.")
    stale = int(df["stale"].sum()) if len(df) else 0
    lines.append(f"{len(df)} records shown, {stale} stale (kernel source changed since they were measured).")
    return lines


# ---- host cost of a call (the dispatch study) ----------------------------------------------------
DISPATCH_ORDER = ("auto", "torch", "inductor", "triton", "liger", "quack", "gluon-tma", "gluon-chunked",
                  "gluon-pipelined", "gluon-ws")
HOST_TARGET_US = 20.0  # every gluon-lab variant, per call (QuACK's level; eager torch's is 10-16 us)
HOST_VS_TORCH_M1 = 1.5  # at M = 1 (decode): at most 1.5x eager torch's host path
AUTO_OVERHEAD_US = 5.0  # auto on top of the variant it chose


def dispatch_records(df):
    """The dispatch study's host-loop records, with `size` (M, or B for group/instance norm), `us`
    and `fastpath` (True: the plan cache on) columns."""
    if not len(df) or "timer" not in df:
        return df.iloc[0:0].copy() if len(df) else df.copy()
    d = df[(df["timer"] == "host-loop") & df["config_key"].str.contains('"study": "dispatch"', regex=False)].copy()
    if not len(d):
        return d
    d = d[d["run_id"] == _newest_run(d)]  # one run: its variants were timed side by side
    d["fastpath"] = [bool((c or {}).get("fastpath", False)) for c in d["config"]]
    size = d["M"] if "M" in d else None
    if "B" in d:
        size = d["B"] if size is None else size.fillna(d["B"])
    d["size"] = size.astype("Int64")
    d["us"] = 1000 * d["ms_median"].astype(float)
    return d


def _newest_run(d):
    return d.sort_values("timestamp")["run_id"].iloc[-1]


def _row_label(r) -> str:
    return f"{r['op']} {'B' if r['op'] in ('group_norm', 'instance_norm') else 'M'}={r['size']}"


def dispatch_table(df, fastpath: bool = True):
    """µs per call (host-loop median) per (op, M or B) × variant; a failed variant says so."""
    d = dispatch_records(df)
    d = d[d["fastpath"] == fastpath] if len(d) else d
    if not len(d):
        return None
    d = d.assign(row=d.apply(_row_label, axis=1), cell=[round(u, 1) if p else "failed" for u, p in
                                                         zip(d["us"], d["passed"].astype(bool))])
    piv = d.pivot_table(index=["op", "size", "row"], columns="variant", values="cell", aggfunc="first")
    piv = piv.droplevel([0, 1]) if len(piv) else piv
    cols = [c for c in DISPATCH_ORDER if c in piv.columns] + [c for c in piv.columns if c not in DISPATCH_ORDER]
    piv = piv[cols]
    piv.index.name = "µs per call" + ("" if fastpath else " (fast path off)")
    return piv


def dispatch_saving(df):
    """rms_norm: the gluon-lab variants with the fast path off vs on (µs), and what the plan saves."""
    d = dispatch_records(df)
    if not len(d) or not (~d["fastpath"]).any():
        return None
    d = cm.passed(d)
    if not d["fastpath"].any() or d["fastpath"].all():
        return None
    off = d[~d["fastpath"]].pivot_table(index=["op", "size"], columns="variant", values="us")
    on = d[d["fastpath"]].pivot_table(index=["op", "size"], columns="variant", values="us")
    import pandas as pd
    cols = [c for c in off.columns if c in on.columns]
    out = pd.concat({"off (µs)": off[cols], "on (µs)": on.reindex(off.index)[cols],
                     "off / on (x)": off[cols] / on.reindex(off.index)[cols]}, axis=1)
    return out.round(1)


def dispatch_targets(df):
    """Met/missed grid: each gluon-lab variant ≤ HOST_TARGET_US per call, ≤ HOST_VS_TORCH_M1 × torch at
    M = 1, and auto ≤ its chosen variant + AUTO_OVERHEAD_US, per (op, M or B)."""
    import pandas as pd
    d = dispatch_records(df)
    d = d[d["fastpath"]] if len(d) else d
    if not len(d):
        return None
    vals, stat = {}, {}
    for key, g in d.groupby(["op", "size"]):
        r = {row["variant"]: row for _, row in g.iterrows()}
        label = _row_label(next(iter(r.values())))
        torch_us = r["torch"]["us"] if "torch" in r and r["torch"]["passed"] else None
        for v, row in r.items():
            if v in ("auto", "torch", "inductor", "triton", "liger", "quack"):
                continue
            if not row["passed"]:
                vals[(label, f"≤ {HOST_TARGET_US:.0f} µs", v)] = "failed"
                stat[(label, f"≤ {HOST_TARGET_US:.0f} µs", v)] = "missed"
                continue
            vals[(label, f"≤ {HOST_TARGET_US:.0f} µs", v)] = row["us"]
            stat[(label, f"≤ {HOST_TARGET_US:.0f} µs", v)] = "met" if row["us"] <= HOST_TARGET_US else "missed"
            if key[1] == 1 and key[0] not in ("group_norm", "instance_norm") and torch_us:
                ratio = row["us"] / torch_us
                vals[(label, f"≤ {HOST_VS_TORCH_M1}× torch at M=1", v)] = ratio
                stat[(label, f"≤ {HOST_VS_TORCH_M1}× torch at M=1", v)] = "met" if ratio <= HOST_VS_TORCH_M1 else "missed"
        if "auto" in r and r["auto"]["passed"]:
            chosen = (r["auto"]["config"] or {}).get("chosen")
            if chosen in r and r[chosen]["passed"]:
                over = r["auto"]["us"] - r[chosen]["us"]
                k = (label, f"auto − chosen ≤ {AUTO_OVERHEAD_US:.0f} µs", "auto")
                vals[k], stat[k] = f"{over:+.1f} ({chosen})", "met" if over <= AUTO_OVERHEAD_US else "missed"
    if not vals:
        return None
    s_v = pd.Series(vals)
    s_s = pd.Series(stat)
    V = s_v.unstack([1, 2])
    S = s_s.unstack([1, 2])
    V = V.reindex(sorted(V.index, key=lambda lab: (lab.split()[0], int(lab.split("=")[1]))))
    return cm.met_grid(V, S.reindex(index=V.index, columns=V.columns).fillna("n/a"), fmt="{:.1f}",
                       legend={"met": "within the target", "missed": "over it",
                               "values": "µs per call, or the ratio to torch (x)"})


def fastpath_grid(df):
    """Kernel time through the public API (plan replay) vs the variant's launcher (pre-allocated outputs),
    graph-timed in one run: per cell, both µs and the api / fn ratio."""
    if not len(df):
        return None
    d = df[df["config_key"].str.contains('"study": "fastpath"', regex=False)].copy()
    d = cm.passed(d)
    if not len(d):
        return None
    d = d[d["run_id"] == _newest_run(d)]  # both calls of a cell from one run
    d["call"] = [(c or {}).get("call", "fn") for c in d["config"]]
    d["us"] = 1000 * d["ms_median"].astype(float)
    piv = d.pivot_table(index=["op", "variant", "M", "N"], columns="call", values="us")
    if not {"api", "fn"} <= set(piv.columns):
        return None
    piv["api / fn (x)"] = piv["api"] / piv["fn"]
    piv = piv.rename(columns={"api": "µs via gll.<op> (fast path)", "fn": "µs via the launcher"})
    return piv.round(3)


def dispatch_takeaways(df) -> list[str]:
    lines = []
    d = dispatch_records(df)
    d = cm.passed(d[d["fastpath"]]) if len(d) else d
    if len(d):
        ours = d[d["variant"].isin([v for v in DISPATCH_ORDER if v.startswith("gluon-")])]
        tor = d[d["variant"] == "torch"]
        if len(ours):
            worst = ours.loc[ours["us"].idxmax()]
            lines.append(f"Host path through the fast path: gluon-lab variants {ours['us'].min():.1f}–{ours['us'].max():.1f} µs "
                         f"per call over {ours['op'].nunique()} ops (slowest: {worst['op']} {worst['variant']} at "
                         f"{_row_label(worst).split()[1]}); eager torch {tor['us'].min():.1f}–{tor['us'].max():.1f} µs on the "
                         "same shapes.")
        sav = dispatch_saving(df)
        if sav is not None:
            r = sav["off / on (x)"].stack()
            lines.append(f"The plan cache saves {r.min():.0f}–{r.max():.0f}× of rms_norm's host path "
                         f"({sav['off (µs)'].stack().min():.0f}–{sav['off (µs)'].stack().max():.0f} µs with every check, config, "
                         "descriptor and JIT lookup redone per call).")
    fg = fastpath_grid(df)
    if fg is not None:
        r = fg["api / fn (x)"]
        lines.append(f"Kernel time through the API vs the launcher (graph-timed, same run): geomean {plots.geomean(r):.3f}× "
                     f"(range {r.min():.3f}–{r.max():.3f}×) over {len(r)} cells — the replay launches the same kernel.")
    return lines


def host_headline(df):
    """(label, value) of the host path for the headline block."""
    d = dispatch_records(df)
    d = cm.passed(d[d["fastpath"]]) if len(d) else d
    ours = d[d["variant"].str.startswith("gluon-")] if len(d) else d
    if not len(ours):
        return ("host path per call", "missing: no dispatch study in the records")
    tor = d[d["variant"] == "torch"]
    return ("host path per call", f"{ours['us'].min():.0f}–{ours['us'].max():.0f} µs for the gluon-lab variants "
                                  f"(eager torch {tor['us'].min():.0f}–{tor['us'].max():.0f} µs; {ours['op'].nunique()} ops, "
                                  f"M ∈ {{1, 32, 256, 4096}}, run {cm.run_short(ours['run_id'].iloc[0])})")


# ---- gluon-lab inside a compiled model (the Inductor rewrite) ------------------------------------
BLOCK_TARGET, BLOCK_MOONSHOT = 1.0, 1.05  # speed of the block compiled with the rewrite vs without


def block_records(df):
    import pandas as pd
    if not len(df):
        return df.copy()
    d = df[(df["op"] == "llama_block") & df["config_key"].str.contains('"study": "inductor-rewrite"', regex=False)].copy()
    if not len(d):
        return d
    d = pd.concat([g[g["run_id"] == _newest_run(g)] for _, g in d.groupby("dtype")])  # newest run per dtype
    d["B"] = [s["B"] for s in d["shape"]]
    d["S"] = [s["S"] for s in d["shape"]]
    return d


def block_table(df):
    """Per (B, S): the block's graph-timed ms compiled without / with the rewrite (median over the
    alternating repeats), the speed ratio, the custom ops in the generated code, the max error vs
    the uncompiled block; None when missing."""
    import pandas as pd
    d = block_records(df)
    if not len(d):
        return None
    rows = []
    for (dt, B, S), g in d.groupby(["dtype", "B", "S"]):
        by = {v: gv for v, gv in g.groupby("variant")}
        if not {"compiled", "compiled+gluon-lab"} <= set(by):
            continue
        a, b = by["compiled"], by["compiled+gluon-lab"]
        ops = (b["config"].iloc[0] or {}).get("custom_ops", {})
        ta, tb = a["ms_median"].median(), b["ms_median"].median()
        rows.append({"dtype": dt, "B×S (tokens)": f"{int(B)}×{int(S)} ({int(B) * int(S)})", "ms compiled": ta,
                     "ms compiled + gluon-lab": tb, "speed with the rewrite (x)": ta / tb,
                     "custom ops in the code": ", ".join(f"{k} ×{v}" for k, v in ops.items()) or "none",
                     "TFLOP/s with the rewrite": b["tflops"].median(),
                     "max |err| vs eager (with / without)": f"{b['max_abs_err'].max():.3g} / {a['max_abs_err'].max():.3g}",
                     "passed": bool(a["passed"].all() and b["passed"].all())})
    if not rows:
        return None
    return pd.DataFrame(rows).set_index(["dtype", "B×S (tokens)"]).round(4)


def block_targets(df):
    t = block_table(df)
    if t is None:
        return None
    r = t[["speed with the rewrite (x)"]].rename(columns={"speed with the rewrite (x)": f"≥ {BLOCK_TARGET:.2f}×"})
    r[f"moonshot ≥ {BLOCK_MOONSHOT:.2f}×"] = r.iloc[:, 0]
    st = r.copy().astype(object)
    st.iloc[:, 0] = ["met" if v >= BLOCK_TARGET else "missed" for v in r.iloc[:, 0]]
    st.iloc[:, 1] = ["met" if v >= BLOCK_MOONSHOT else "missed" for v in r.iloc[:, 1]]
    return cm.met_grid(r, st, fmt="{:.3f}", legend={"values": "block time without / with the rewrite"})


def block_takeaways(df) -> list[str]:
    t = block_table(df)
    if t is None:
        return []
    out = []
    for dt, g in t.groupby(level="dtype"):
        r = g["speed with the rewrite (x)"]
        short = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}.get(dt, dt)
        out.append(f"Llama-style block ({short}, hidden 4096) compiled with the gluon-lab rewrite vs "
                   f"plain torch.compile: {r.min():.3f}–{r.max():.3f}× over {len(r)} shapes (geomean {plots.geomean(r):.3f}×; "
                   "≥ 1.0 means the rewrite is not slower); outputs " + ("match" if g["passed"].all() else "DO NOT all match")
                   + " the uncompiled block.")
    return out
