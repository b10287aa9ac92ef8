"""Notebook 05-fused-qk-norm-rope: the fused QK-norm + RoPE sweep, its targets, the census.

Kernel-facing (the only places this module reaches into kernels / experiments / codegen):
    measure()          gluon_lab_old.experiments.run_qk_norm_rope(results_dir=, quick=, parts=)
    kernel_source()    gluon_lab_old.kernels.qk_norm_rope: the Gluon kernels' .fn sources
    census_table()     gluon_lab_old.kernels.qk_norm_rope.{fused,persistent,tma,triton}_codegen -> codegen.compile_sm90 / census
    inductor_census()  codegen.ptx_census / ptxas_info over the PTX Inductor's kernels compiled to on the GPU
                       (results/<gpu>/05-fused-qk-norm-rope.inductor-kernels.json)

"best Gluon" is, per cell, the fastest of the Gluon variants measured in the same run — what
variant="auto" runs once `python -m gluon_lab_old select` has read these records (auto picks the fastest
passing variant per shape bucket, and every sweep cell is its own bucket).
"""
from __future__ import annotations

from .. import plots
from . import common as cm

NB = "05-fused-qk-norm-rope"
OP = "qk_norm_rope"
VARIANTS = ("torch", "inductor", "triton", "gluon-fused", "gluon-persistent", "gluon-tma")
GLUON = ("gluon-fused", "gluon-persistent", "gluon-tma")
OURS = "best Gluon"
BASE = "inductor"  # torch.compile(dynamic=False) of the native formula: the baseline vLLM's reviewers ask for
SWEEP_D = 128
GEOMEAN_TARGET, CELL_TARGET, SOL_TARGET, SOL_FROM_T = 3.0, 1.0, 80.0, 4096


# ---- kernel-facing -------------------------------------------------------------------------------
def measure(ctx: cm.Context, quick: bool = False, parts=("sweep", "dims", "tma-sweep", "inductor-code")):
    from ..experiments import run_qk_norm_rope
    _, where = run_qk_norm_rope(results_dir=str(ctx.results_dir), quick=quick, parts=tuple(parts))
    return where


def kernel_source() -> str:
    """The one-tile-per-CTA kernel and the helpers it shares with the persistent one."""
    import inspect
    from ..kernels import qk_norm_rope as q
    return "\n\n".join(inspect.getsource(k.fn) for k in (q._tile_load, q._halves, q._pack, q._weight_halves, q._weights,
                                                             q._tile_finish, q.qk_norm_rope_kernel,
                                                             q.qk_norm_rope_persistent_kernel))


def tma_kernel_source() -> str:
    import inspect
    from ..kernels import qk_norm_rope as q
    return "\n\n".join(inspect.getsource(k.fn) for k in (q._tma_issue, q._tma_positions, q._tma_cos_sin,
                                                             q._weight_halves, q.qk_norm_rope_tma_kernel))


def census_table(Ds=(64, 128, 256)):
    """sm_90 census (compiled here on the CPU) at (Hq, Hk) = (32, 8), bf16: gluon-fused (NeoX and GPT-J,
    1 and 4 warps; partial rotary R = D/2), gluon-persistent and gluon-tma (heuristic configs, both store
    paths) and the Triton baseline."""
    from .. import codegen
    from ..kernels import qk_norm_rope as q

    def cen(spec):
        return codegen.census(codegen.compile_sm90(**{a: b for a, b in spec.items() if a != "options"}))

    rows = {}
    for D in Ds:
        shape = {"T": 4096, "Hq": 32, "Hk": 8, "D": D}
        for neox in (True, False):
            style = "neox" if neox else "gptj"
            for nw in (1, 4):
                rows[f"gluon-fused D={D} {style} {nw}w"] = cen(q.fused_codegen(shape, "bfloat16", config=q.FusedConfig(nw),
                                                                               is_neox=neox))
            rows[f"gluon-fused D={D} R={D // 2} {style} 4w"] = cen(q.fused_codegen({**shape, "R": D // 2}, "bfloat16",
                                                                                   config=q.FusedConfig(4), is_neox=neox))
            for ts in (True, False):
                cfg = q.TmaConfig(tma_store=ts).resolved(shape, "bfloat16")
                rows[f"gluon-tma D={D} {style} {'TMA store' if ts else 'st.global'}"] = cen(
                    q.tma_codegen(shape, "bfloat16", config=cfg, is_neox=neox))
        rows[f"gluon-persistent D={D} neox"] = cen(q.persistent_codegen(shape, "bfloat16"))
        rows[f"triton D={D} neox"] = cen(q.triton_codegen(shape, "bfloat16"))
    ct = codegen.census_table(rows)
    ct["UTMALDG (SASS)"] = [c["sass"]["UTMALDG"] for c in rows.values()]
    ct["UTMASTG (SASS)"] = [c["sass"]["UTMASTG"] for c in rows.values()]
    return ct


# ---- Inductor's kernels (PTX recorded on the GPU, counted here) ----------------------------------
def inductor_census(ctx: cm.Context):
    """One row per Inductor kernel of results/<gpu>/05-...inductor-kernels.json: the case (D, style), the
    kernel, its global loads / stores by width, bar.sync, registers — from the PTX Triton wrote on the
    GPU, counted with the same code as the Gluon census. None if the capture is absent."""
    import json
    import re
    import pandas as pd
    from .. import codegen
    p = ctx.path(".inductor-kernels.json")
    if not p.exists():
        return None
    d = json.loads(p.read_text())
    rows = []
    for case, entries in d["kernels"].items():
        D = int(re.search(r"D=(\d+)", case).group(1))
        style = case.rsplit("/", 1)[-1]
        for e in entries:
            if "ptx" not in e:
                rows.append({"D": D, "style": style, "kernel": "(capture failed)", "note": e.get("error", "")})
                continue
            c = codegen.ptx_census(e["ptx"])
            info = codegen.ptxas_info(codegen.local_ptx(e["ptx"]))  # CUDA 13 PTX, this ptxas
            rows.append({"D": D, "style": style, "kernel": e["name"], "launched": e.get("launched"),
                         "num_warps": e.get("num_warps"),
                         "ld.global by bits": c["ld_global_by_bits"], "st.global by bits": c["st_global_by_bits"],
                         "bar.sync": c["bar_sync"], "registers": info.get("registers"),
                         "loops": e.get("source", "").count("for r0_offset in")})
    return pd.DataFrame(rows)


def inductor_summary(ic):
    """Per (D, style): the kernels Inductor launches for the formula and their global accesses summed —
    the autotuned compile of each kernel where the capture marks it; without marks (the capture could
    not see the autotuners) every distinct kernel once, its accesses as the range over the configs
    Inductor compiled for it (it launches one of them)."""
    import collections
    import pandas as pd
    if ic is None or not len(ic) or "ld.global by bits" not in ic:
        return None
    g0 = ic.dropna(subset=["ld.global by bits"])
    marked = "launched" in g0 and g0["launched"].fillna(False).astype(bool).any()
    out = []
    for (D, style), g in g0.groupby(["D", "style"]):
        row = {"D": D, "style": style, "configs compiled": len(g)}
        if marked:
            g = g[g["launched"].fillna(False).astype(bool)]
            ld, st = collections.Counter(), collections.Counter()
            for a, b in zip(g["ld.global by bits"], g["st.global by bits"]):
                ld.update(a)
                st.update(b)
            row.update({"kernels launched": len(g), "ld.global (all kernels)": dict(sorted(ld.items())),
                        "st.global (all kernels)": dict(sorted(st.items())), "bar.sync": int(g["bar.sync"].sum())})
        else:
            per = g.assign(ld=g["ld.global by bits"].map(lambda d: sum(d.values())),
                           st=g["st.global by bits"].map(lambda d: sum(d.values()))).groupby("kernel")
            lo, hi = per[["ld", "st", "bar.sync"]].min().sum(), per[["ld", "st", "bar.sync"]].max().sum()
            rng = lambda k: f"{int(lo[k])}" if lo[k] == hi[k] else f"{int(lo[k])}–{int(hi[k])}"  # noqa: E731
            row.update({"kernels launched": per.ngroups, "ld.global lines (all kernels)": rng("ld"),
                        "st.global lines (all kernels)": rng("st"), "bar.sync": rng("bar.sync"),
                        "note": "no launch marks: ranges over the compiled configs"})
        out.append(row)
    return pd.DataFrame(out).set_index(["D", "style"])


def inductor_takeaway(ic) -> str | None:
    """One line: how many kernels torch.compile launches for the formula, and their global access lines,
    next to gluon-fused's one kernel (computed from the capture)."""
    s = inductor_summary(ic)
    if s is None or not len(s):
        return None
    n = sorted({int(x) for x in s["kernels launched"]})
    col = "ld.global lines (all kernels)" if "ld.global lines (all kernels)" in s else "ld.global (all kernels)"
    cases = ", ".join(f"D={D} {st}: {row[col]}" for (D, st), row in s.iterrows())
    return (f"torch.compile(dynamic=False) launches {'–'.join(map(str, n))} Triton kernels per call of the formula "
            f"(named for their fused ops: mean-of-squares reductions, normalize-and-rotate, copies back into qkv) where "
            f"gluon-fused launches one; their "
            f"global load lines in the PTX: {cases} (gluon-fused: 2 qkv + 4 weight + 2 cos/sin + 1 position per "
            "thread, NeoX).")


INDUCTOR_MISSING = ("**Inductor kernels: missing** (no capture recorded for this GPU: run the plan's 'inductor-code' "
                    "part on the H200).")


def census_view(ct) -> list:
    return cm.compact_census(ct)


# ---- records -------------------------------------------------------------------------------------
def _newest(df):
    from .. import results
    d = df[df["op"] == OP]
    return results.latest(d) if len(d) else d.copy()


def sweep(df):
    """The heuristic-config records of this op (newest per case, passing) with T, Hq, Hk, D, R and µs;
    the knob sweeps' records are `persistent_sweep`'s and `tma_sweep`'s."""
    if not len(df):
        return df.copy()
    d = cm.passed(_newest(df)).copy()
    d = d[~d["config_key"].str.contains('"study"', regex=False)]
    d["us"] = 1000 * d["ms_median"].astype(float)
    return d


def best_gluon(d):
    """Per (D, Hq, Hk, T): the fastest Gluon variant's record, variant renamed OURS, `which` naming it."""
    g = d[d["variant"].isin(GLUON)] if len(d) else d
    if not len(g):
        return g.assign(which=[])
    b = g.loc[g.groupby(["D", "Hq", "Hk", "T"])["us"].idxmin()].copy()
    b["which"] = b["variant"]
    b["variant"] = OURS
    return b


def with_best(d):
    import pandas as pd
    return d if not len(d) else pd.concat([d, best_gluon(d)], ignore_index=True)


def copy_at_size(df):
    """The per-size copy of each cell: y.copy_(x) of a [T, (Hq + Hk)·D] tensor (the op's Q/K bytes, read +
    write), newest per shape: a Series GB/s indexed by (T, (Hq + Hk)·D)."""
    c = df[(df["op"] == "copy") & df["M"].notna()] if len(df) and "M" in df else df.iloc[0:0]
    if not len(c):
        return None
    c = c.sort_values("timestamp").groupby(["M", "N"]).tail(1)
    return c.set_index([c["M"].astype(int), c["N"].astype(int)])["gbps"]


def _us_at(df, D: int):
    """(records at head_dim D with the best-Gluon rows added, their µs pivot (Hq, Hk, T) x variant), or None."""
    d = sweep(df)
    d = d[d["D"] == D] if len(d) else d
    if not len(d):
        return None
    d = with_best(d)
    return d, d.pivot_table(index=["Hq", "Hk", "T"], columns="variant", values="us")


def speed_table(df, D: int = SWEEP_D):
    """µs per call per (Hq, Hk, T) x variant at head_dim D, the best Gluon variant, and its speed vs
    torch.compile."""
    got = _us_at(df, D)
    if got is None:
        return None
    d, piv = got
    piv = piv[[v for v in VARIANTS + (OURS, ) if v in piv.columns]]
    if {OURS, BASE} <= set(piv.columns):
        piv[f"{OURS} vs {BASE} (x)"] = piv[BASE] / piv[OURS]
        b = best_gluon(d[d["variant"] != OURS]).set_index(["Hq", "Hk", "T"])["which"]
        piv["best Gluon is"] = b.reindex(piv.index)
    piv.columns.name = f"µs per call, D = {D}"
    return piv.round(3)


def ratios(df, D: int = SWEEP_D, variant: str = OURS):
    """torch.compile time / variant time per (Hq, Hk, T) at D (variant OURS: the best Gluon per cell)."""
    got = _us_at(df, D)
    if got is None:
        return None
    piv = got[1]
    if not {variant, BASE} <= set(piv.columns):
        return None
    return (piv[BASE] / piv[variant]).rename(f"{variant} vs {BASE} (x)")


def variant_ratios(df, D: int = SWEEP_D):
    """Geomean / min speed vs torch.compile of every variant over the D sweep (cells where both ran)."""
    import pandas as pd
    rows = {}
    for v in VARIANTS + (OURS, ):
        r = ratios(df, D, v)
        if r is not None and len(r.dropna()):
            r = r.dropna()
            rows[v] = {"cells": len(r), "geomean (x)": plots.geomean(r), "min (x)": r.min(), "max (x)": r.max()}
    return pd.DataFrame(rows).T.round(2) if rows else None


def sol_table(df):
    """SOL % of the datasheet of every variant (and the best Gluon) per (D, Hq, Hk, T)."""
    d = sweep(df)
    if not len(d):
        return None
    piv = with_best(d).pivot_table(index=["D", "Hq", "Hk", "T"], columns="variant", values="sol_datasheet_pct")
    return piv[[v for v in VARIANTS + (OURS, ) if v in piv.columns]].round(1)


def large_t(df):
    """T ≥ SOL_FROM_T, every D: the best Gluon's bandwidth as % of the datasheet, of the run's session copy
    (2 GiB) and of a copy of the same bytes at this size, measured in the same plan."""
    d = sweep(df)
    if not len(d):
        return None
    b = best_gluon(d[d["T"] >= SOL_FROM_T])
    if not len(b):
        return None
    cp = copy_at_size(df)
    t = b.set_index(["D", "Hq", "Hk", "T"])[["which", "us", "gbps", "sol_datasheet_pct", "sol_measured_pct"]].copy()
    t.columns = ["best Gluon", "µs", "GB/s", "% datasheet", "% session copy"]
    if cp is not None:
        same = [cp.get((T, (hq + hk) * D)) for D, hq, hk, T in t.index]
        t["same-size copy GB/s"] = same
        t["% same-size copy"] = 100 * t["GB/s"] / t["same-size copy GB/s"].astype(float)
    return t.sort_index().round(1)


def _study(df, study: str, label, title: str, heuristic: str | None = None):
    """A knob sweep's records (newest per case, passing): SOL % of the datasheet per (Hq, Hk, T) and config
    (label(config) names the column), with `heuristic`'s heuristic-config record of each cell beside them."""
    if not len(df):
        return None
    d = cm.passed(_newest(df))
    s = d[d["config_key"].str.contains(f'"study": "{study}"', regex=False)].copy()
    if not len(s):
        return None
    s["config"] = [label(c) for c in s["config"]]
    piv = s.pivot_table(index=["Hq", "Hk", "T"], columns="config", values="sol_datasheet_pct")
    if heuristic is not None:
        f = sweep(df)
        f = f[(f["variant"] == heuristic) & (f["D"] == SWEEP_D)].set_index(["Hq", "Hk", "T"])["sol_datasheet_pct"]
        if len(f):
            piv[f"{heuristic} (heuristic)"] = f.reindex(piv.index)
    piv.columns.name = title
    return piv.round(1)


def tma_sweep(df):
    """gluon-tma's knob sweep: SOL % per cell and config, and its heuristic in the same cells."""
    return _study(df, "tma-sweep", lambda c: f"bt{c.get('block_t')} {c.get('num_warps')}w {c.get('stages')}st "
                                             f"{c.get('ctas_per_sm')}/SM {'tma-st' if c.get('tma_store') else 'st.global'}",
                  "SOL % of datasheet, D = 128", "gluon-tma")


def fused_sweep(df):
    """gluon-fused's num_warps at the large-T cells: SOL % per cell."""
    return _study(df, "fused-sweep", lambda c: f"{c.get('num_warps')} warps ({4 * c.get('num_warps')} heads/CTA at D=128)",
                  "gluon-fused, SOL % of datasheet, D = 128")


def persistent_sweep(df):
    """gluon-persistent's num_warps x ctas_per_sm sweep: SOL % per cell and config, gluon-fused's heuristic
    in the same cells for comparison."""
    return _study(df, "persistent-sweep", lambda c: f"{c.get('num_warps')}w × {c.get('ctas_per_sm')}/SM",
                  "SOL % of datasheet, D = 128", "gluon-fused")


def targets(df):
    """Met/missed grid: rows T, columns (target, Hq/Hk at D): the best Gluon ≥ 1.0× torch.compile per cell
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
    big = best_gluon(d[d["T"] >= SOL_FROM_T])
    for _, row in big.iterrows():
        k = (int(row["T"]), f"≥ {SOL_TARGET:.0f}% datasheet", f"{int(row['Hq'])}/{int(row['Hk'])} D={int(row['D'])}")
        vals[k], stat[k] = row["sol_datasheet_pct"], "met" if row["sol_datasheet_pct"] >= SOL_TARGET else "missed"
    if not vals:
        return None
    V, S = pd.Series(vals).unstack([1, 2]), pd.Series(stat).unstack([1, 2])
    V.index.name = "T"
    return cm.met_grid(V, S.reindex(index=V.index, columns=V.columns).fillna("n/a"), fmt="{:.2f}",
                       legend={"values": "best Gluon's speed vs torch.compile (x), or its SOL % of the datasheet",
                               "n/a": "not a cell of that target"})


def _sol_panels(df, spec, D: int, title: str):
    import matplotlib.pyplot as plt
    d = sweep(df)
    d = d[d["D"] == D] if len(d) else d
    if not len(d):
        return None
    cp = copy_at_size(df)
    heads = sorted({(int(a), int(b)) for a, b in zip(d["Hq"], d["Hk"])})
    fig, axes = plt.subplots(1, len(heads), figsize=(4.6 * len(heads), 3.8), sharey=True, squeeze=False)
    for ax, (hq, hk) in zip(axes[0], heads):
        g = d[(d["Hq"] == hq) & (d["Hk"] == hk)]
        for v in VARIANTS:
            s = g[g["variant"] == v].sort_values("T")
            if len(s):
                ax.plot(s["T"], s["sol_datasheet_pct"], marker=plots._marker(v), color=plots._color(v), label=v)
        if cp is not None:
            Ts = sorted(T for (T, n) in cp.index if n == (hq + hk) * D)
            if Ts:
                pct = [100 * cp[(T, (hq + hk) * D)] / spec.hbm_gbps for T in Ts]
                ax.plot(Ts, pct, color="black", ls=":", marker="x", label="copy of the same bytes")
        ax.set_xscale("log", base=2)
        ax.axhline(SOL_TARGET, color="0.5", lw=0.8, ls="--")
        ax.set_title(f"Hq={hq}, Hk={hk}, D={D}")
        ax.set_xlabel("tokens T")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("% of datasheet HBM bandwidth")
    axes[0][-1].legend(loc="center left", bbox_to_anchor=(1.02, 0.5), frameon=False)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def headline_figure(df, spec, slug: str):
    """SOL % of the datasheet vs T, one panel per (Hq, Hk) at D = 128, one line per variant and the copy of
    the same bytes."""
    return _sol_panels(df, spec, SWEEP_D, f"qk_norm_rope on {slug}: speed of light vs tokens (bf16, NeoX, full rotary; "
                                    f"dashed: {SOL_TARGET:.0f}%)")


def dims_figure(df, spec, slug: str, D: int):
    return _sol_panels(df, spec, D, f"qk_norm_rope on {slug} at head_dim {D}")


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
    lt = large_t(df)
    if lt is not None:
        big = lt.xs(lt.index.get_level_values("T").max(), level="T")
        txt = (f"{big['% datasheet'].min():.0f}–{big['% datasheet'].max():.0f}% of the datasheet at T = "
               f"{lt.index.get_level_values('T').max()}")
        if "% same-size copy" in big:
            txt += f" ({big['% same-size copy'].min():.0f}–{big['% same-size copy'].max():.0f}% of a copy of the same bytes)"
        out.append(("SOL at the largest T", txt))
    d = sweep(df)
    one = best_gluon(d[d["T"] == 1]) if len(d) else d
    if len(one):
        base = d[(d["variant"] == BASE) & (d["T"] == 1)]["us"]
        out.append(("one token (decode)", f"{one['us'].min():.2f}–{one['us'].max():.2f} µs per call (graph-timed; "
                                         f"torch.compile {base.min():.1f}–{base.max():.1f} µs)"))
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
    vr = variant_ratios(df)
    if vr is not None:
        lines.append("Per variant, geomean vs torch.compile over the D = 128 sweep: " + ", ".join(
            f"{v} {row['geomean (x)']:.2f}×" for v, row in vr.iterrows() if v != OURS) + ".")
    if len(d):
        b = best_gluon(d)
        if len(b):
            wins = b.groupby("which").size().sort_values(ascending=False)
            lines.append("The fastest Gluon variant per cell: " + ", ".join(f"{v} in {n}" for v, n in wins.items())
                         + f" of {len(b)} cells" + (
                             f"; gluon-tma wins {int(((b['which'] == 'gluon-tma') & (b['T'] >= 1024)).sum())} of "
                             f"{int((b['T'] >= 1024).sum())} cells at T ≥ 1024" if "gluon-tma" in wins else "") + ".")
    lt = large_t(df)
    if lt is not None:
        miss = lt[lt["% datasheet"] < SOL_TARGET]
        txt = (f"At T ≥ {SOL_FROM_T}: the best Gluon reaches {lt['% datasheet'].min():.1f}–{lt['% datasheet'].max():.1f}% "
               f"of the datasheet; {len(miss)} of {len(lt)} cells under {SOL_TARGET:.0f}%")
        if len(miss):
            txt += ": " + ", ".join(f"T={T} {hq}/{hk} D={D} ({x:.1f}%)" for (D, hq, hk, T), x in miss["% datasheet"].items())
        if "% same-size copy" in lt and lt["% same-size copy"].notna().any():
            txt += (f". Against a y.copy_(x) of the same bytes timed in the same run it reaches "
                    f"{lt['% same-size copy'].min():.0f}–{lt['% same-size copy'].max():.0f}% (the ≥ 90%-of-copy form of "
                    f"the target: {int((lt['% same-size copy'] >= 90).sum())} of {len(lt)} cells)")
        lines.append(txt + ".")
    if len(d):
        ind = d[(d["variant"] == BASE) & (d["T"] >= SOL_FROM_T)]
        if len(ind):
            lines.append(f"torch.compile of the native formula: {ind['sol_datasheet_pct'].min():.1f}–"
                         f"{ind['sol_datasheet_pct'].max():.1f}% of the datasheet at T ≥ {SOL_FROM_T}; eager torch "
                         f"{d[(d['variant'] == 'torch') & (d['T'] >= SOL_FROM_T)]['sol_datasheet_pct'].max():.1f}% at best.")
        ts = tma_sweep(df)
        if ts is not None:
            cfgs = ts.drop(columns=[c for c in ts.columns if "heuristic" in c])
            lines.append(f"gluon-tma's knob sweep (T ≥ {min(ts.index.get_level_values('T'))}, D = 128): best config on "
                         f"average {cfgs.mean().idxmax()} ({cfgs.mean().max():.1f}% mean), worst {cfgs.mean().idxmin()} "
                         f"({cfgs.mean().min():.1f}%).")
        ps = persistent_sweep(df)
        if ps is not None and "gluon-fused (heuristic)" in ps:
            cfgs = ps.drop(columns=["gluon-fused (heuristic)"])
            best = cfgs.max(axis=1)
            gap = (ps["gluon-fused (heuristic)"] - best)
            lines.append(f"gluon-persistent (register prefetch of the next tile) stays below the one-tile-per-CTA "
                         f"kernel: its best swept config reaches {best.min():.1f}–{best.max():.1f}% at T ≥ "
                         f"{min(ps.index.get_level_values('T'))}, {gap.min():.1f}–{gap.max():.1f} points below gluon-fused "
                         "in the same cells.")
        part = d[d["notes"].fillna("").str.startswith("partial rotation")]
        if len(part):
            lines.append(f"{len(part)} small-T records were timed with partial rotation (256 copies, below 3× L2; named "
                         "in each record): their inputs are partly L2-resident, as a decode step's are.")
    stale = int(df["stale"].sum()) if len(df) else 0
    lines.append(f"{len(df)} records shown, {stale} stale (kernel source changed since they were measured).")
    return lines
