"""Notebook 05-fused-qk-norm-rope: the fused QK-norm + RoPE sweep, its targets, the census.

Kernel-facing (the only places this module reaches into kernels / experiments / codegen):
    measure()       gluon_lab.experiments.run_qk_norm_rope(results_dir=, quick=, parts=)
    kernel_source() gluon_lab.kernels.qk_norm_rope.qk_norm_rope_kernel (its .fn source)
    census_table()  gluon_lab.kernels.qk_norm_rope.{fused,triton}_codegen -> codegen.compile_sm90 / census
"""
from __future__ import annotations

from .. import plots
from . import common as cm

NB = "05-fused-qk-norm-rope"
OP = "qk_norm_rope"
VARIANTS = ("torch", "inductor", "triton", "gluon-fused", "gluon-persistent")
OURS = "gluon-fused"
BASE = "inductor"  # torch.compile(dynamic=False) of the native formula: the baseline vLLM's reviewers ask for
SWEEP_D = 128
GEOMEAN_TARGET, CELL_TARGET, SOL_TARGET, SOL_FROM_T = 3.0, 1.0, 80.0, 4096


# ---- kernel-facing -------------------------------------------------------------------------------
def measure(ctx: cm.Context, quick: bool = False, parts=("sweep", "dims")):
    from ..experiments import run_qk_norm_rope
    _, where = run_qk_norm_rope(results_dir=str(ctx.results_dir), quick=quick, parts=tuple(parts))
    return where


def kernel_source() -> str:
    """The one-tile-per-CTA kernel and the helpers it shares with the persistent one."""
    import inspect
    from ..kernels import qk_norm_rope as q
    return "\n\n".join(inspect.getsource(k.fn) for k in (q._tile_load, q._halves, q._weights, q._tile_finish,
                                                             q.qk_norm_rope_kernel, q.qk_norm_rope_persistent_kernel))


def census_table(Ds=(64, 128, 256)):
    """sm_90 census (compiled here on the CPU) of gluon-fused (NeoX and GPT-J, 1 and 4 warps),
    gluon-persistent (its heuristic config) and the Triton baseline at (Hq, Hk) = (32, 8), bf16."""
    from .. import codegen
    from ..kernels import qk_norm_rope as q
    rows = {}
    for D in Ds:
        shape = {"T": 4096, "Hq": 32, "Hk": 8, "D": D}
        for neox in (True, False):
            for nw in (1, 4):
                spec = q.fused_codegen(shape, "bfloat16", config=q.FusedConfig(nw), is_neox=neox)
                k = codegen.compile_sm90(**{a: b for a, b in spec.items() if a != "options"})
                rows[f"gluon-fused D={D} {'neox' if neox else 'gptj'} {nw}w"] = codegen.census(k)
        spec = q.persistent_codegen(shape, "bfloat16")
        rows[f"gluon-persistent D={D} neox"] = codegen.census(codegen.compile_sm90(**{a: b for a, b in spec.items()
                                                                                       if a != "options"}))
        spec = q.triton_codegen(shape, "bfloat16")
        rows[f"triton D={D} neox"] = codegen.census(codegen.compile_sm90(**{a: b for a, b in spec.items()
                                                                              if a != "options"}))
    return codegen.census_table(rows)


def census_view(ct) -> list:
    return cm.compact_census(ct)


# ---- records -------------------------------------------------------------------------------------
def _newest(df):
    from .. import results
    d = df[df["op"] == OP]
    return results.latest(d) if len(d) else d.copy()


def sweep(df):
    """The heuristic-config records of this op (newest per case, passing) with T, Hq, Hk, D, R and µs;
    the knob sweep's records are `persistent_sweep`'s."""
    if not len(df):
        return df.copy()
    d = cm.passed(_newest(df)).copy()
    d = d[~d["config_key"].str.contains('"study"', regex=False)]
    d["us"] = 1000 * d["ms_median"].astype(float)
    return d


def persistent_sweep(df):
    """gluon-persistent's num_warps x ctas_per_sm sweep (newest run holding it): SOL % per cell and config,
    gluon-fused's SOL in the same cells for comparison."""
    if not len(df):
        return None
    d = cm.passed(_newest(df))
    s = d[d["config_key"].str.contains('"study": "persistent-sweep"', regex=False)].copy()
    if not len(s):
        return None
    s["config"] = [f"{c.get('num_warps')}w × {c.get('ctas_per_sm')}/SM" for c in s["config"]]
    piv = s.pivot_table(index=["Hq", "Hk", "T"], columns="config", values="sol_datasheet_pct")
    f = sweep(df)
    f = f[(f["variant"] == OURS) & (f["D"] == SWEEP_D)].set_index(["Hq", "Hk", "T"])["sol_datasheet_pct"] \
        if len(f) else None
    if f is not None:
        piv[f"{OURS} (heuristic)"] = f.reindex(piv.index)
    piv.columns.name = "SOL % of datasheet, D = 128"
    return piv.round(1)


def speed_table(df, D: int = SWEEP_D):
    """µs per call per (Hq, Hk, T) x variant at head_dim D, and gluon-fused's speed vs torch.compile."""
    d = sweep(df)
    d = d[d["D"] == D] if len(d) else d
    if not len(d):
        return None
    piv = d.pivot_table(index=["Hq", "Hk", "T"], columns="variant", values="us")
    piv = piv[[v for v in VARIANTS if v in piv.columns]]
    if {OURS, BASE} <= set(piv.columns):
        piv[f"{OURS} vs {BASE} (x)"] = piv[BASE] / piv[OURS]
    piv.columns.name = f"µs per call, D = {D}"
    return piv.round(3)


def ratios(df, D: int = SWEEP_D):
    t = speed_table(df, D)
    col = f"{OURS} vs {BASE} (x)"
    return None if t is None or col not in t else t[col]


def sol_table(df):
    """SOL % of the datasheet of every variant per (D, Hq, Hk, T)."""
    d = sweep(df)
    if not len(d):
        return None
    piv = d.pivot_table(index=["D", "Hq", "Hk", "T"], columns="variant", values="sol_datasheet_pct")
    return piv[[v for v in VARIANTS if v in piv.columns]].round(1)


def targets(df):
    """Met/missed grid: rows T, columns (target, Hq/Hk at D): gluon-fused ≥ 1.0× torch.compile per cell
    (D = 128), ≥ 80% of the datasheet at T ≥ 4096 (every D measured)."""
    import pandas as pd
    d = sweep(df)
    if not len(d):
        return None
    vals, stat = {}, {}
    r = ratios(df)
    if r is not None:
        for (hq, hk, T), x in r.items():
            k = (int(T), f"≥ {CELL_TARGET:.1f}× torch.compile", f"{int(hq)}/{int(hk)}")
            vals[k], stat[k] = x, "met" if x >= CELL_TARGET else "missed"
    big = d[(d["variant"] == OURS) & (d["T"] >= SOL_FROM_T)]
    for _, row in big.iterrows():
        k = (int(row["T"]), f"≥ {SOL_TARGET:.0f}% datasheet", f"{int(row['Hq'])}/{int(row['Hk'])} D={int(row['D'])}")
        vals[k], stat[k] = row["sol_datasheet_pct"], "met" if row["sol_datasheet_pct"] >= SOL_TARGET else "missed"
    if not vals:
        return None
    V, S = pd.Series(vals).unstack([1, 2]), pd.Series(stat).unstack([1, 2])
    V.index.name = "T"
    return cm.met_grid(V, S.reindex(index=V.index, columns=V.columns).fillna("n/a"), fmt="{:.2f}",
                       legend={"values": "speed vs torch.compile (x), or SOL % of the datasheet", "n/a": "not a cell "
                               "of that target"})


def headline_figure(df, spec, slug: str):
    """SOL % of the datasheet vs T, one panel per (Hq, Hk) at D = 128, one line per variant."""
    import matplotlib.pyplot as plt
    d = sweep(df)
    d = d[d["D"] == SWEEP_D] if len(d) else d
    if not len(d):
        return None
    heads = sorted({(int(a), int(b)) for a, b in zip(d["Hq"], d["Hk"])})
    fig, axes = plt.subplots(1, len(heads), figsize=(4.6 * len(heads), 3.8), sharey=True, squeeze=False)
    for ax, (hq, hk) in zip(axes[0], heads):
        g = d[(d["Hq"] == hq) & (d["Hk"] == hk)]
        for v in VARIANTS:
            s = g[g["variant"] == v].sort_values("T")
            if len(s):
                ax.plot(s["T"], s["sol_datasheet_pct"], marker=plots._marker(v), color=plots._color(v), label=v)
        ax.set_xscale("log", base=2)
        ax.axhline(SOL_TARGET, color="0.5", lw=0.8, ls="--")
        ax.set_title(f"Hq={hq}, Hk={hk}, D={SWEEP_D}")
        ax.set_xlabel("tokens T")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("% of datasheet HBM bandwidth")
    axes[0][-1].legend(loc="center left", bbox_to_anchor=(1.02, 0.5), frameon=False)
    fig.suptitle(f"qk_norm_rope on {slug}: speed of light vs tokens (bf16, NeoX, full rotary; dashed: {SOL_TARGET:.0f}%)")
    fig.tight_layout()
    return fig


def roofline(df, spec, slug: str):
    d = sweep(df)
    if not len(d):
        return None
    return plots.roofline(d, spec, cm.ceilings(df), title=f"Roofline on {slug}: qk_norm_rope, every variant and shape")


def headline_numbers(df, spec) -> list:
    out = []
    r = ratios(df)
    if r is not None and len(r.dropna()):
        r = r.dropna()
        out.append((f"{OURS} vs torch.compile", f"{plots.geomean(r):.2f}× geomean over the {len(r)}-case D = {SWEEP_D} "
                                              f"sweep (min {r.min():.2f}×, max {r.max():.2f}×)"))
    else:
        out.append((f"{OURS} vs torch.compile", "missing: no D = 128 sweep with both variants in the records"))
    d = sweep(df)
    big = d[(d["variant"] == OURS) & (d["T"] == d["T"].max())] if len(d) else d
    if len(big):
        out.append(("SOL at the largest T", f"{big['sol_datasheet_pct'].min():.0f}–{big['sol_datasheet_pct'].max():.0f}% "
                                            f"of the datasheet at T = {int(big['T'].max())} "
                                            f"({big['sol_measured_pct'].min():.0f}–{big['sol_measured_pct'].max():.0f}% "
                                            "of the measured copy)"))
    one = d[(d["variant"] == OURS) & (d["T"] == 1)] if len(d) else d
    if len(one):
        out.append(("one token (decode)", f"{one['us'].min():.2f}–{one['us'].max():.2f} µs per call (graph-timed; "
                                         "torch.compile " + (f"{d[(d['variant'] == BASE) & (d['T'] == 1)]['us'].min():.1f}–"
                                                             f"{d[(d['variant'] == BASE) & (d['T'] == 1)]['us'].max():.1f} µs)")))
    return out


def takeaways(df, spec) -> list[str]:
    lines = []
    r = ratios(df)
    d = sweep(df)
    if r is not None and len(r.dropna()):
        r = r.dropna()
        lo = r.idxmin()
        lines.append(f"{OURS} vs torch.compile (D = {SWEEP_D}, {len(r)} cells): geomean {plots.geomean(r):.2f}× "
                     f"(target ≥ {GEOMEAN_TARGET:.0f}×: {'met' if plots.geomean(r) >= GEOMEAN_TARGET else 'MISSED'}); "
                     f"slowest cell {r.min():.2f}× at Hq/Hk = {lo[0]}/{lo[1]}, T = {lo[2]} (every cell ≥ 1.0×: "
                     f"{'met' if r.min() >= CELL_TARGET else 'MISSED'}).")
    if len(d):
        big = d[(d["variant"] == OURS) & (d["T"] >= SOL_FROM_T)]
        if len(big):
            miss = big[big["sol_datasheet_pct"] < SOL_TARGET]
            lines.append(f"At T ≥ {SOL_FROM_T}: {OURS} reaches {big['sol_datasheet_pct'].min():.1f}–"
                         f"{big['sol_datasheet_pct'].max():.1f}% of the datasheet; {len(miss)} of {len(big)} cells under "
                         f"{SOL_TARGET:.0f}%" + (": " + ", ".join(f"T={int(a)} {int(b)}/{int(c)} D={int(e)} "
                                                                  f"({s:.1f}%)" for a, b, c, e, s in
                                                                  zip(miss["T"], miss["Hq"], miss["Hk"], miss["D"],
                                                                      miss["sol_datasheet_pct"])) if len(miss) else "")
                         + ".")
        ind = d[(d["variant"] == BASE) & (d["T"] >= SOL_FROM_T)]
        if len(ind):
            lines.append(f"torch.compile of the native formula: {ind['sol_datasheet_pct'].min():.1f}–"
                         f"{ind['sol_datasheet_pct'].max():.1f}% of the datasheet at T ≥ {SOL_FROM_T}; eager torch "
                         f"{d[(d['variant'] == 'torch') & (d['T'] >= SOL_FROM_T)]['sol_datasheet_pct'].max():.1f}% at best.")
        ps = persistent_sweep(df)
        if ps is not None and f"{OURS} (heuristic)" in ps:
            cfgs = ps.drop(columns=[f"{OURS} (heuristic)"])
            best = cfgs.max(axis=1)
            gap = (ps[f"{OURS} (heuristic)"] - best)
            lines.append(f"gluon-persistent (register prefetch of the next tile, weights once per CTA) is slower than the "
                         f"one-tile-per-CTA kernel: its best swept config ({cfgs.mean().idxmax()} on average) reaches "
                         f"{best.min():.1f}–{best.max():.1f}% at T ≥ {SOL_FROM_T}, {gap.min():.1f}–{gap.max():.1f} points "
                         f"below gluon-fused in the same cells — a grid of one-shot CTAs at full occupancy hides the "
                         "latency better than a few resident CTAs with one tile of prefetch.")
        part = d[d["notes"].fillna("").str.startswith("partial rotation")]
        if len(part):
            lines.append(f"{len(part)} small-T records were timed with partial rotation (256 copies, below 3× L2; named "
                         "in each record): their inputs are partly L2-resident, as a decode step's are.")
    stale = int(df["stale"].sum()) if len(df) else 0
    lines.append(f"{len(df)} records shown, {stale} stale (kernel source changed since they were measured).")
    return lines
