"""Notebook 02-chunked-reductions: gluon-chunked (any N as power-of-2 TMA chunks, zero-filled tail)
over the N set of real hidden sizes, the CHUNK sweep, cached vs streaming rows, GroupNorm / InstanceNorm.

Kernel-facing (the only places this module reaches into kernels / experiments / codegen):
    measure()          gluon_lab_old.experiments.run_chunked(results_dir=, quick=, parts=)
    plan()             gluon_lab_old.experiments.ChunkedPlan() (.Ns, .stream_M, .stream_Ns)
    kernel_source()    gluon_lab_old.kernels.chunked.chunked_norm_kernel (.fn source)
    norm_math_sources() gluon_lab_old.kernels.norm_math.chunk_sum_sq_dev, layer_row (.fn sources)
    chunk_plan()       gluon_lab_old.kernels.chunked.ChunkPlan.for_row(op, N, dtype) -> .num_warps, .chunk,
                       .num_chunks, .tail, .rows, .smem_bytes, .streaming, .waste_pct
    plan_source()      ChunkPlan.for_row (source);  group_plan_source(): chunked.GroupPlan.make (source)
    census_table()     gluon_lab_old.codegen.inspect_variant("layer_norm", "gluon-chunked" | "triton", N=, dtype=),
                       codegen.census_table
"""
from __future__ import annotations

from .. import plots
from . import common as cm

NB = "02-chunked-reductions"
V = "gluon-chunked"
BASELINES = ("torch", "inductor", "triton", "liger")
HEADLINE_OPS = ("rms_norm", "layer_norm")
OTHER_CASES = (("rms_norm", "float32"), ("layer_norm", "float32"), ("l2_norm", "bfloat16"), ("add_rms_norm", "bfloat16"))
TARGETS = (("rms_norm", 1.15), ("layer_norm", 1.3))  # the pattern's targets: geomean vs torch.compile
TIE = 0.98


# ---- kernel-facing -------------------------------------------------------------------------------
def measure(ctx: cm.Context, quick: bool = False, parts=("bf16", "fp32", "others", "chunk", "stream", "groupnorm")):
    from ..experiments import run_chunked
    _, where = run_chunked(results_dir=str(ctx.results_dir), quick=quick, parts=tuple(parts))
    return where


def plan():
    """The measurement plan (its N set and the streaming study's M and Ns)."""
    from ..experiments import ChunkedPlan
    return ChunkedPlan()


def kernel_source() -> str:
    import inspect
    from ..kernels import chunked
    return inspect.getsource(chunked.chunked_norm_kernel.fn)


def norm_math_sources() -> str:
    import inspect
    from ..kernels import norm_math
    return "\n".join(inspect.getsource(f.fn) for f in (norm_math.chunk_sum_sq_dev, norm_math.layer_row))


def plan_source() -> str:
    import inspect
    from ..kernels import chunked
    return inspect.getsource(chunked.ChunkPlan.for_row)


def group_plan_source() -> str:
    import inspect
    from ..kernels import chunked
    return inspect.getsource(chunked.GroupPlan.make)


def chunk_plan(op: str, N: int, dtype: str):
    """The heuristic's plan for one row: (num_warps, CHUNK, chunks, tail, rows, smem bytes, streaming, waste %)."""
    from ..kernels import chunked
    p = chunked.ChunkPlan.for_row(op, int(N), dtype)
    return {"warps": p.num_warps, "CHUNK": p.chunk, "chunks": p.num_chunks, "tail": p.tail, "rows/CTA": p.rows,
            "smem_bytes": p.smem_bytes, "streaming": p.streaming, "waste_pct": p.waste_pct}


def census_table(Ns=(2880, 5120, 14336, 24576), op: str = "layer_norm", dtype: str = "bfloat16"):
    """sm_90 census (this CPU) of gluon-chunked and the pad-to-pow2 Triton kernel, the relevant columns."""
    from .. import codegen
    cen = {}
    for N in Ns:
        _, cen[f"{V} N={N}"] = codegen.inspect_variant(op, V, N=N, dtype=dtype)
        _, cen[f"triton N={N}"] = codegen.inspect_variant(op, "triton", N=N, dtype=dtype)
    ct = codegen.census_table(cen)
    cols = [c for c in ct.columns if any(k in c for k in ("UTMALDG", "ld_global", "st_global", "registers", "spill",
                                                          "smem", "ld_shared", "predicated", "mbarrier"))]
    return ct[cols] if cols else ct


def group_census_table(cases=(("nchw", 8, 320, 64 * 64, 32), ("channels_last", 8, 320, 64 * 64, 32),
                                ("nchw", 16, 1280, 16 * 16, 1280)), dtype: str = "bfloat16"):
    """sm_90 census (this CPU) of the GroupNorm kernels as they launch: gluon-split's three launches
    (kernels.chunked.SplitPlan.make + split_codegen_specs) and gluon-chunked's (inspect_variant), per
    (layout, B, C, S, G) case: 128-bit global accesses, no TMA in the split, no spills."""
    from .. import codegen
    from ..kernels import chunked
    cen = {}
    for lay, B, C, S, G in cases:
        tag = f"{lay} B={B} C={C} S={S} G={G}"
        plan = chunked.SplitPlan.make(lay, B, C, S, G, dtype)
        for spec in chunked.split_codegen_specs(plan, B, C, S, G):
            cen[f"split {spec['fn'].__name__.replace('gn_', '').replace('_kernel', '')} | {tag}"] = \
                codegen.census(codegen.compile_sm90(**{k: v for k, v in spec.items() if k != "options"}))
        H = int(round(S ** 0.5))
        shape = {"B": B, "C": C, "H": H, "W": S // H, "layout": lay}
        op = "group_norm" if G != C else "instance_norm"
        if G != C:
            shape["G"] = G
        _, cen[f"chunked | {tag}"] = codegen.inspect_variant(op, V, shape=shape, dtype=dtype)
    ct = codegen.census_table(cen)
    cols = [c for c in ct.columns if any(k in c for k in ("UTMALDG", "ld_global", "st_global", "registers", "spill",
                                                          "smem", "bar", "mbarrier"))]
    return ct[cols] if cols else ct


def census_view(ct) -> list:
    """[census without its all-zero columns, short names; the note naming the dropped columns]."""
    return cm.compact_census(ct)


# ---- the chunk plan table (CPU) ------------------------------------------------------------------
def plan_table(Ns, dtypes=("bfloat16", "float32"), op: str = "layer_norm"):
    """The heuristic's plan per N and dtype, with the padding waste of next_power_of_2(N) next to it."""
    import pandas as pd
    rows = []
    for N in Ns:
        for dt in dtypes:
            p = chunk_plan(op, N, dt)
            pw = 1 << (int(N) - 1).bit_length()
            rows.append({"N": N, "dtype": dt, "warps": p["warps"], "CHUNK": p["CHUNK"], "chunks": p["chunks"],
                         "tail": p["tail"], "rows/CTA": p["rows/CTA"], "smem KB": round(p["smem_bytes"] / 1024, 1),
                         "streaming": p["streaming"], "waste %": round(p["waste_pct"], 1),
                         "pow2 waste %": round(100 * (pw - N) / pw, 1)})
    return pd.DataFrame(rows)


# ---- grids ---------------------------------------------------------------------------------------
def grid(cur, op: str, dtype: str = "bfloat16"):
    """The newest run's grid records (no study) of op in dtype, among the non-stale records `cur`."""
    if not len(cur):
        return cur.copy()
    sel = (cur["op"] == op) & (cur["dtype"] == dtype) & ~cur["config_key"].str.contains('"study"', regex=False) \
        & cur["N"].notna()
    return cm.newest_run(cur, sel).copy()


def best_vs(g):
    """(ms pivot of the passed records, best baseline / gluon-chunked per cell, best baseline per cell)."""
    return cm.vs_best_baseline(g, V)


def headline_table(g):
    """Per (M, N): gluon-chunked and best-baseline SOL %, which baseline, speedups vs best and vs torch.compile."""
    import pandas as pd
    piv, vb, who = best_vs(g)
    if not len(vb):
        return pd.DataFrame()
    sol = g.pivot_table(index=["M", "N"], columns="variant", values="sol_datasheet_pct")
    return pd.DataFrame({f"{V} SOL%": sol[V].round(1),
                         "best baseline SOL%": sol[[c for c in sol.columns if c != V]].max(axis=1).round(1),
                         "best baseline": who, "speedup vs best": vb.round(3),
                         "vs torch.compile": cm.ratio(piv, "inductor", V).round(3)})


def headline(cur) -> dict:
    """{op: (run id, headline table)} for the bf16 RMSNorm and LayerNorm grids that have records."""
    out = {}
    for op in HEADLINE_OPS:
        g = grid(cur, op)
        t = headline_table(g) if len(g) else None
        if t is not None and len(t):
            out[op] = (g.run_id.iloc[0], t)
    return out


def headline_items(heads) -> list:
    """Markdown titles and tables of headline(), a missing note for an op without records."""
    out = []
    for op in HEADLINE_OPS:
        if op not in heads:
            out.append(f"**{op} bf16: missing**")
            continue
        run, t = heads[op]
        out += [f"**{op} bf16** (run {run})", t]
    return out


OP_NAMES = {"rms_norm": "RMSNorm", "layer_norm": "LayerNorm", "add_rms_norm": "add+RMSNorm", "l2_norm": "L2Norm",
            "group_norm": "GroupNorm", "instance_norm": "InstanceNorm"}
M_COLORS = ("#17becf", "#1f4e79", "#9467bd", "#8c564b")


def is_pow2(n) -> bool:
    n = int(n)
    return n > 0 and not n & (n - 1)


def headline_figure(heads):
    """Headline (read at ~900 px): gluon-chunked's speed against the fastest baseline of each cell, by N
    (evenly spaced, the N set's values), one line per M, one panel per op; 1.0 = as fast (None if empty)."""
    import matplotlib.pyplot as plt
    if not heads:
        return None
    fig, axes = plt.subplots(1, len(heads), figsize=(6.8 * len(heads), 4.8), sharey=True, squeeze=False)
    lo, hi = 1.0, 1.0
    for ax, (op, (run, t)) in zip(axes[0], heads.items()):
        Ns = sorted(t.index.get_level_values("N").unique())
        for k, (M, sub) in enumerate(t.groupby(level="M")):
            r = sub["speedup vs best"].droplevel("M").reindex(Ns)
            ax.plot(range(len(Ns)), r.to_numpy(dtype=float), "o-", color=M_COLORS[k % len(M_COLORS)], lw=2, ms=6,
                    label=f"M = {plots.fmt_size(M)}")
            lo, hi = min(lo, r.min()), max(hi, r.max())
        ax.axhline(1.0, color="k", lw=1)
        ax.axhspan(0, 1.0, color="#d62728", alpha=0.06)
        ax.set_xticks(range(len(Ns)), [plots.fmt_size(n) for n in Ns], rotation=45, ha="right")
        ax.set_title(f"{OP_NAMES.get(op, op)} bf16")
        ax.set_xlabel("N (row length; none is a power of two)" if not any(is_pow2(n) for n in Ns) else "N")
        ax.grid(alpha=.3)
    axes[0][0].set_ylabel("speed / fastest baseline (×)")
    pad = 0.05 * (hi - lo or 1)
    axes[0][0].set_ylim(lo - pad, hi + pad)
    axes[0][-1].legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, fontsize=12)  # outside the data
    run = next(iter(heads.values()))[0]
    fig.suptitle(f"gluon-chunked vs the fastest of eager, torch.compile, Triton, Liger per cell (run {cm.run_short(run)}; "
                 "below 1.0: slower)")
    cm.headline_fonts(fig, cells=None)
    fig.tight_layout()
    return fig


def headline_numbers(cur) -> list:
    """2-4 (label, value) pairs for the page's headline block: gluon-chunked against the fastest baseline
    at non-power-of-2 N (bf16 RMSNorm and LayerNorm), its best SOL, and against torch.compile."""
    heads = headline(cur)
    if not heads:
        return [("gluon-chunked vs best baseline", "missing: no bf16 RMSNorm / LayerNorm grid with gluon-chunked and a "
                                                   "baseline in the current records")]
    import pandas as pd
    allt = pd.concat({op: t for op, (_, t) in heads.items()}, names=["op"])
    Ns = allt.index.get_level_values("N")
    odd = allt[[not is_pow2(n) for n in Ns]]
    run = cm.run_short(next(iter(heads.values()))[0])
    ops = " + ".join(OP_NAMES.get(op, op) for op in heads)
    out = []
    if len(odd):
        r = odd["speedup vs best"]
        on = sorted(set(odd.index.get_level_values("N")))
        out.append(("gluon-chunked vs best baseline, non-power-of-2 N",
                    f"{plots.geomean(r):.2f}× geomean over {len(r)} cells ({ops} bf16, N {plots.fmt_size(on[0])}–"
                    f"{plots.fmt_size(on[-1])}); wins or ties (≥ {TIE}×) in {int((r >= TIE).sum())} of them (run {run})"))
    else:
        out.append(("gluon-chunked vs best baseline, non-power-of-2 N", "not measured: every N of the grid is a power of two"))
    ev = allt[[is_pow2(n) for n in Ns]]
    if len(ev):
        out.append(("… at power-of-2 N", f"{plots.geomean(ev['speedup vs best']):.2f}× geomean over {len(ev)} cells"))
    b = allt["gluon-chunked SOL%"].idxmax()
    out.append(("best SOL", f"{allt.loc[b, 'gluon-chunked SOL%']:.0f}% of datasheet bandwidth at {int(b[1])}×{int(b[2])} "
                            f"({OP_NAMES.get(b[0], b[0])} bf16)"))
    gi = plots.geomean(allt["vs torch.compile"])
    out.append(("vs torch.compile", f"{gi:.2f}× geomean over the same cells" if gi == gi else
                "not computed: no torch.compile record in the run"))
    return out


def narrow(t, max_cols: int = 6):
    """A table with more columns than rows and more than max_cols columns, transposed (the N set as rows):
    a 2 x 12 table of 'a -> b (d%)' cells reads better, and fits the page, as 12 x 2."""
    return t.T if t is not None and t.shape[1] > max(max_cols, t.shape[0]) else t


def grid_section(cur, op: str) -> list:
    """[heatmaps of every variant, title, torch.compile -> gluon-chunked table] of op bf16 ([] if no records)."""
    g = grid(cur, op)
    if not len(g):
        return []
    vs = [v for v in BASELINES + (V, ) if v in set(g.variant)]
    return [cm.heatmaps(g, vs, suptitle=f"{op} bf16: % of datasheet bandwidth"),
            f"**{op}: torch.compile -> {V}**", narrow(plots.delta_table(g, "inductor", V))]


def other_section(cur, op: str, dtype: str) -> list:
    """fp32 / L2Norm / add+RMSNorm: a summary line and the torch.compile -> gluon-chunked table."""
    g = grid(cur, op, dtype)
    if not len(g):
        return [f"**{op} {dtype}: missing**"]
    piv, vb, who = best_vs(g)
    if not len(vb):
        return [f"**{op} {dtype}: missing** ({V} or baselines without passed records)"]
    return [f"**{op} {dtype}** (run {g.run_id.iloc[0]}): {V} vs best baseline, geomean "
            f"{plots.geomean(vb):.3f}x; wins or ties (>= {TIE}x) in {int((vb >= TIE).sum())}/{len(vb)} cells",
            narrow(plots.delta_table(g, "inductor", V))]


# ---- CHUNK sweep ---------------------------------------------------------------------------------
def chunk_sweep(cur):
    """The newest CHUNK sweep records, with warps and rows columns."""
    if not len(cur):
        return cur.copy()
    sw = cm.newest_run(cur, cm.config_value(cur, "study") == "chunk").copy()
    sw["warps"] = cm.config_value(sw, "num_warps") if len(sw) else []
    sw["rows"] = cm.config_value(sw, "rows") if len(sw) else []
    return sw


def sweep_table(sw):
    """SOL % by (op, N) rows and (warps, rows) columns."""
    return sw.pivot_table(index=["op", "N"], columns=["warps", "rows"], values="sol_datasheet_pct").round(1)


SWEEP_LEGEND = ("Empty cells: **not swept**: the plan times 16 warps only for N ≥ 8192; **no fit**: these rows per CTA "
                "do not fit one CTA's shared memory (the configure hook refuses them, the plan skips them); "
                "**not measured**: no record of this config in the sweep's run.")


def sweep_reason(sw, dtype: str = "bfloat16"):
    """Why a (op, N) x (warps, rows) cell of the sweep table is empty: 'not swept' (the plan's 16-warp rule),
    'no fit' (the configure hook refuses the config now) or 'not measured' (no record in the run)."""
    M = int(sw["M"].iloc[0]) if len(sw) else 16384

    def why(idx, col):
        op, N = idx
        w, r = col
        if int(w) == 16 and int(N) < 8192:
            return "not swept"
        if cm.refusal(op, V, {"M": M, "N": int(N)}, dtype, {"num_warps": int(w), "rows": int(r), "streaming": False}):
            return "no fit"
        return "not measured"
    return why


def sweep_view(sw):
    """[sweep_table with every empty cell saying why, the legend of those reasons]."""
    if not len(sw):
        return []
    return [cm.fill_reasons(sweep_table(sw), sweep_reason(sw)), SWEEP_LEGEND]


def heuristic_vs_best(sw, dtype: str = "bfloat16"):
    """Per (op, N): the heuristic's (warps x rows) and its SOL % next to the best swept config."""
    import pandas as pd
    rows = []
    for (op, N), sub in sw.groupby(["op", "N"]):
        p = chunk_plan(op, int(N), dtype)
        b = sub.loc[sub.sol_datasheet_pct.idxmax()]
        h = sub[(sub.warps == p["warps"]) & (sub.rows == p["rows/CTA"])]
        rows.append({"op": op, "N": int(N), "heuristic": f"{p['warps']}w x {p['rows/CTA']}r",
                     "heuristic SOL%": (round(h.sol_datasheet_pct.iloc[0], 1) if len(h) else
                                        f"not measured in run {cm.run_short(sub.run_id.iloc[0])}"),
                     "best": f"{b.warps}w x {b.rows}r", "best SOL%": round(b.sol_datasheet_pct, 1)})
    return pd.DataFrame(rows)


# ---- streaming -----------------------------------------------------------------------------------
def stale_study_note(st, what: str) -> str:
    """Banner for a study shown from stale records (not re-measured since its code changed)."""
    n = int(st["stale"].sum()) if "stale" in st else 0
    return (f"**STALE: {what} from run `{st.run_id.iloc[0]}`** ({n} of {len(st)} records measured with code that "
            "has changed since; no run of the current code holds this study). Read it as history, not as a claim "
            "about the current kernels.")


def stream_records(cur, plan_=None, dtype: str = "bfloat16"):
    """(the newest streaming study of dtype with a `label`: cached / stream S=k / baseline, the same run's
    copies of dtype at the study's M and Ns, the newest one per N)."""
    import numpy as np
    if not len(cur):
        return cur.copy(), cur.copy()
    st = cm.newest_run(cur, (cm.config_value(cur, "study") == "stream") & (cur.dtype == dtype)).copy()
    if not len(st):
        return st, st
    p = plan_ or plan()
    st["label"] = st["variant"]
    gm = st.variant == V
    st.loc[gm, "label"] = np.where(cm.config_value(st[gm], "streaming") == True,  # noqa: E712
                                   "stream S=" + cm.config_value(st[gm], "stages").astype(str), "cached")
    copies = cur[(cur.op == "copy") & (cur.run_id == st.run_id.iloc[0]) & (cur.M == p.stream_M)
                 & cur.N.isin(p.stream_Ns) & (cur.dtype == dtype)].assign(label="copy")
    # the plan measures the copy once per op: keep the newest per N (one point per N on the copy line)
    copies = copies.sort_values("timestamp", kind="stable").groupby("N").tail(1)
    return st, copies


def stream_figure(st, copies):
    """SOL % vs N (log2) per label, one panel per op, copies dotted (None if no study)."""
    import matplotlib.pyplot as plt
    import pandas as pd
    if not len(st):
        return None
    fig, axes = plt.subplots(1, 2, figsize=(14, 4.2), sharey=True)
    Ns = sorted(st.N.dropna().unique())
    for ax, op in zip(axes, HEADLINE_OPS):
        s = pd.concat([st[st.op == op], copies])
        for lab, sub in cm.passed(s).groupby("label"):
            sub = sub.sort_values("N")
            ax.plot(sub.N, sub.sol_datasheet_pct, "o-" if lab != "copy" else "k:", label=lab)
        M = int(st.M.iloc[0])
        ax.set_xscale("log", base=2)
        ax.set_xticks(Ns, [plots.fmt_size(n) for n in Ns], rotation=45, ha="right")
        ax.minorticks_off()
        ax.set_title(f"{op} {st.dtype.iloc[0]}, M={M}"); ax.set_xlabel("N")
        ax.set_ylabel("% of datasheet BW"); ax.grid(alpha=.3)
    h, lab = axes[0].get_legend_handles_labels()
    fig.legend(h, lab, loc="upper left", bbox_to_anchor=(0.87, 0.92), fontsize=9, frameon=False)
    fig.tight_layout(rect=(0, 0, 0.87, 1))
    return fig


def stream_table(st):
    """SOL % by (op, N) and label (passed records)."""
    return cm.passed(st).pivot_table(index=["op", "N"], columns="label", values="sol_datasheet_pct").round(1)


def stream_reason(st, dtype: str = "bfloat16"):
    """Why a stream_table cell is empty: the baseline refused the row (an error record, listed below the
    table), the row cannot be cached (the configure hook refuses it: shared memory), or no record."""
    failed = {(r.op, int(r.N), r.label) for r in st[~st.passed.astype(bool)].itertuples()} if len(st) else set()
    M = int(st["M"].iloc[0]) if len(st) else 4096

    def why(idx, col):
        op, N = idx
        if (op, int(N), col) in failed:
            return "refused (error below)"
        if col == "cached":
            r = cm.refusal(op, V, {"M": M, "N": int(N)}, dtype, {"streaming": False})
            if r:
                return "cannot cache: smem" if "shared memory" in r else r
        return "not measured"
    return why


def stream_view(st):
    """stream_table with every empty cell saying why."""
    return cm.fill_reasons(stream_table(st), stream_reason(st, st.dtype.iloc[0] if len(st) else "bfloat16"))


def refused(st) -> list:
    """The baselines that refused a row length (recorded as errors), with a title; [] when none."""
    r = st[~st.passed.astype(bool)][["op", "variant", "N", "notes"]] if len(st) else st
    return ["Baselines that refused a row length (recorded as errors, not timed):", r] if len(r) else []


# ---- GroupNorm / InstanceNorm --------------------------------------------------------------------
def group_records(cur):
    """GroupNorm / InstanceNorm records: the newest run of each (op, variant), with a C x H x W `shape`."""
    import pandas as pd
    gn = cur[cur.op.isin(["group_norm", "instance_norm"])].copy() if len(cur) else cur.copy()
    if not len(gn):
        return gn
    gn = pd.concat([cm.newest_run(gn, (gn.op == op) & (gn.variant == v))
                    for op in sorted(set(gn.op)) for v in sorted(set(gn.variant))])
    gn["shape"] = gn.B.astype(str) + "x" + gn.C.astype(str) + "x" + gn.H.astype(str) + "x" + gn.W.astype(str)
    return gn


def group_runs(gn) -> str | None:
    """Markdown: which run each variant's records come from (the baselines were not re-measured with every
    gluon-chunked re-run, so a ratio can span two runs: said here, not hidden)."""
    if not len(gn):
        return None
    runs = gn.groupby("variant")["run_id"].agg(lambda r: ", ".join(f"`{x}`" for x in sorted(set(r))))
    note = "; ".join(f"{v}: {r}" for v, r in runs.items())
    mixed = gn["run_id"].nunique() > 1
    return (f"Records by variant: {note}." + (" The ratios below compare records of different runs." if mixed else ""))


def group_ms(gn):
    return gn.pivot_table(index=["op", "layout", "shape"], columns="variant", values="ms_median")


GROUP_VARIANTS = (V, "gluon-split")


def best_group_ms(gtab):
    """The faster of gluon-chunked and gluon-split per cell (ms; NaN where neither ran)."""
    cols = [c for c in GROUP_VARIANTS if c in gtab]
    return gtab[cols].min(axis=1) if cols else None


def group_table(gn):
    """SOL % per variant and the best gluon variant's speed vs eager and vs torch.compile, per (op, layout,
    shape = B x C x H x W)."""
    gtab = group_ms(gn)
    out = gn.pivot_table(index=["op", "layout", "shape"], columns="variant",
                         values="sol_datasheet_pct").round(1).add_suffix(" SOL%")
    best = best_group_ms(gtab)
    if best is not None:
        out["best gluon vs eager"] = (gtab["torch"] / best).round(2) if "torch" in gtab else None
        out["best gluon vs inductor"] = (gtab["inductor"] / best).round(2) if "inductor" in gtab else None
    return out


def group_figure(gn):
    """Headline of the GroupNorm section: torch.compile time / the faster gluon variant's, per (C x H x W, B),
    one panel per (op, layout), green where gluon-lab is faster (None without records)."""
    import matplotlib.pyplot as plt
    import pandas as pd
    if not len(gn):
        return None
    gtab = group_ms(gn)
    best = best_group_ms(gtab)
    if best is None or "inductor" not in gtab:
        return None
    r = (gtab["inductor"] / best).rename("ratio").dropna().reset_index()
    r["B"] = r["shape"].str.split("x").str[0].astype(int)
    r["CHW"] = r["shape"].str.split("x", n=1).str[1]
    panels = [(op, lay) for op in ("group_norm", "instance_norm") for lay in ("nchw", "channels_last")
              if ((r.op == op) & (r.layout == lay)).any()]
    if not panels:
        return None
    rows = sorted(set(r.CHW), key=lambda s: [int(x) for x in s.split("x")])
    cols = sorted(set(r.B))
    span = plots.ratio_span(r.ratio)
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels) + 1.0, 0.42 * len(rows) + 2.0),
                             squeeze=False)
    for ax, (op, lay) in zip(axes[0], panels):
        sub = r[(r.op == op) & (r.layout == lay)]
        plots.ratio_heatmap(sub, value="ratio", row="CHW", col="B", rows=rows, cols=cols, ax=ax, target=1.0,
                            span=span, colorbar=ax is axes[0][-1], fmt="{:.2f}",
                            title=f"{OP_NAMES.get(op, op)}, {lay}")
    fig.suptitle("torch.compile time / the faster of gluon-chunked and gluon-split (> 1: gluon-lab faster), "
                 "bf16, G = 32", fontsize=11)
    fig.tight_layout()
    return fig


def group_reason(gn):
    """Why a group_table cell is empty: the variant's configure hook refuses the layout / shape now (its
    message, shortened), an error record, or no record."""
    first = {(r.op, r.layout, r.shape): r for r in gn.itertuples()} if len(gn) else {}
    failed = {(r.op, r.layout, r.shape, r.variant) for r in gn[~gn.passed.astype(bool)].itertuples()} if len(gn) else set()
    memo = {}

    def why(idx, col):
        op, layout, shape = idx
        v = V if col.startswith("best gluon") else col.replace(" SOL%", "")
        if (op, layout, shape, v) in failed:
            return f"{v}: failed its check"
        key = (op, layout, shape, v)
        if key not in memo:
            r = first.get(idx)
            s = {"B": int(r.B), "C": int(r.C), "H": int(r.H), "W": int(r.W), "layout": layout} if r is not None else None
            if s is not None and op == "group_norm" and r.G == r.G:
                s["G"] = int(r.G)
            ref = cm.refusal(op, v, s, "bfloat16") if s is not None else None
            memo[key] = ("refused: no channels-last yet" if ref and "channels-last" in ref else ref) or f"{v}: not measured"
        return memo[key]
    return why


def group_view(gn) -> list:
    """group_table split by layout (narrower), every empty cell saying why; a column empty in every row of
    a layout (gluon-chunked on channels-last, which it refuses for now) is left out and named instead."""
    t = group_table(gn)
    if not len(t):
        return []
    why = group_reason(gn)
    out = []
    for layout in sorted(set(t.index.get_level_values("layout")), key=lambda x: x != "nchw"):
        sub = t.xs(layout, level="layout", drop_level=False)
        empty = [c for c in sub.columns if sub[c].isna().all()]
        reasons = sorted({why(sub.index[0], c) for c in empty})
        sub = cm.fill_reasons(sub.drop(columns=empty), why).droplevel("layout")
        out += [f"**{layout}**", sub]
        if empty:
            out.append(f"Not shown for {layout}: {', '.join(f'`{c}`' for c in empty)} — {'; '.join(reasons)}.")
    return out


# ---- targets and takeaways -----------------------------------------------------------------------
BASELINE_WORDS = "eager PyTorch, torch.compile, the one-row Triton kernel and Liger"


def targets(cur):
    """The pattern's targets against the records above, each described in words (what, threshold, against
    which baseline): (target, measured, met) rows; a target without records says what is missing."""
    import pandas as pd
    checks = []
    for op, tgt in TARGETS:
        name = OP_NAMES[op]
        g = grid(cur, op)
        piv, vb, who = best_vs(g)
        if not len(vb):
            checks.append((f"{name} bf16: gluon-chunked against the baselines", f"missing: no {name} bf16 grid with "
                                                                               "gluon-chunked and a baseline", False))
            continue
        k = vb.idxmin()
        checks.append((f"{name} bf16, the non-power-of-2 N set: gluon-chunked at least as fast as the fastest baseline "
                       f"({BASELINE_WORDS}) in every M×N cell; within 2% (ratio ≥ {TIE}) counts as a tie",
                       f"{int((vb >= TIE).sum())} of {len(vb)} cells; slowest cell {vb.min():.3f}× at M×N = "
                       f"{int(k[0])}×{int(k[1])}", bool((vb >= TIE).all())))
        gm = plots.geomean(cm.ratio(piv, "inductor", V))
        checks.append((f"{name} bf16: geometric-mean speed over the grid at least {tgt}× torch.compile",
                       f"{gm:.3f}×", gm >= tgt))
    gn = group_records(cur)
    gtab = group_ms(gn) if len(gn) else None
    best = best_group_ms(gtab) if gtab is not None else None
    if best is not None and "inductor" in gtab:
        r = (gtab["inductor"] / best).dropna()
        for layout in ("nchw", "channels_last"):
            rl = r[r.index.get_level_values("layout") == layout]
            if not len(rl):
                continue
            gm = plots.geomean(rl)
            k = rl.idxmin()
            checks.append((f"GroupNorm + InstanceNorm bf16, {layout} (B 1-16, SD-UNet / VAE C x H x W, "
                           "G = 32): the faster of gluon-chunked / gluon-split at least 1.5× torch.compile "
                           "(geometric mean) and at least 1.0× in every cell",
                           f"geomean {gm:.2f}× over {len(rl)} cells; {int((rl >= 1).sum())} cells ≥ 1.0×; slowest "
                           f"{rl.min():.2f}× ({k[0]} {k[2]})", bool(gm >= 1.5 and (rl >= 1).all())))
    return pd.DataFrame(checks, columns=["target", "measured", "met"])


def targets_view(cur):
    """targets() as a coloured table (green met, red missed)."""
    return cm.target_list(targets(cur))


def takeaways(cur) -> list[str]:
    """Each line computed from the records the sections above show."""
    lines = []
    for op in HEADLINE_OPS:
        g = grid(cur, op)
        piv, vb, who = best_vs(g)
        if not len(vb):
            continue
        win = vb[vb >= TIE].index.get_level_values("N")
        lose = vb[vb < TIE]
        sol = g[g.variant == V].sol_datasheet_pct
        lines.append(f"**{op} bf16**: {V} {cm.sol_range(sol)}% of datasheet; vs best baseline geomean "
                     f"{plots.geomean(vb):.3f}x, wins/ties {len(win)}/{len(vb)} cells; "
                     + (f"loses at N = {sorted(set(int(n) for n in lose.index.get_level_values('N')))}" if len(lose)
                        else "loses in no cell") + f" (worst {vb.min():.3f}x); "
                     f"vs torch.compile {plots.geomean(cm.ratio(piv, 'inductor', V)):.3f}x, "
                     f"vs eager {plots.geomean(cm.ratio(piv, 'torch', V)):.2f}x.")
    sw = chunk_sweep(cur)
    if len(sw):
        for (op, N), sub in sw[sw.warps == 16].groupby(["op", "N"]):
            b8 = sw[(sw.op == op) & (sw.N == N) & (sw.warps == 8)].sol_datasheet_pct.max()
            d16 = sub.sol_datasheet_pct.max()
            lines.append(f"CHUNK sweep, {op} N={int(N)}: best 16-warp config {d16:.1f}% vs best 8-warp {b8:.1f}% "
                         + ("(16 warps would win this cell; the heuristic stops at 8)." if d16 > b8 + 1
                            else "(no gain from 16 warps)."))
    st, _ = stream_records(cur)
    if len(st):
        tab = stream_table(st)
        M = int(st.M.iloc[0])
        for op in HEADLINE_OPS:
            if op not in tab.index.get_level_values("op"):
                continue
            s = tab.loc[op]
            sc = [c for c in s.columns if c.startswith("stream")]
            if "cached" in s and sc:
                d = (s[sc].max(axis=1) - s["cached"]).dropna()
                lines.append(f"{op} M={M}: best streaming minus cached, SOL points by N: "
                             + ", ".join(f"{int(n)}: {v:+.1f}" for n, v in d.items()))
    gn = group_records(cur)
    if len(gn):
        gtab = group_ms(gn)
        best = best_group_ms(gtab)
        if best is not None and "inductor" in gtab:
            for layout in ("nchw", "channels_last"):
                sel = gtab.index.get_level_values("layout") == layout
                r = (gtab["inductor"][sel] / best[sel]).dropna()
                if not len(r):
                    continue
                wins = {v: int((gtab[v][sel] <= best[sel]).sum()) for v in GROUP_VARIANTS if v in gtab}
                lines.append(f"GroupNorm/InstanceNorm {layout}: the faster gluon variant vs torch.compile "
                             f"{r.min():.2f}-{r.max():.2f}x (geomean {plots.geomean(r):.2f}x); fastest gluon variant "
                             f"per cell: " + ", ".join(f"{v} {n}" for v, n in wins.items()) + ".")
    return lines


# ---- issue 16: the every-gluon scoreboard of this notebook's grids, and the mid-N study ----------
#: geomean targets per board; every cell >= 1.0x (fp32: >= best peer in every cell)
SCOREBOARD_GEOMEAN = {"rms_norm bf16": 1.05, "layer_norm bf16": 1.3, "add_rms_norm bf16": 1.05}


def scoreboards(cur) -> dict:
    """{label: cm.scoreboard} over the odd-N bf16 grid (every gluon variant in its run), the bf16
    'others' (add+RMSNorm, L2Norm at one M) and the fp32 grid; boards without records are left out."""
    boards = {f"{op} {short}": cm.scoreboard(grid(cur, op, dt))
              for dt, short in (("bfloat16", "bf16"), ("float32", "fp32"))
              for op in ("rms_norm", "layer_norm", "add_rms_norm", "l2_norm")}
    return {k: v for k, v in boards.items() if len(v)}


def scoreboard_view(cur) -> list:
    boards = scoreboards(cur)
    if not boards:
        return ["No run of the current code holds the grids (scoreboard not computed)."]
    return [cm.scoreboard_summary(boards), cm.target_list(cm.scoreboard_targets(boards, SCOREBOARD_GEOMEAN))]


def mid_n_study(cur):
    """The 'mid-n' study (M = 2048 / 4096, mid N, gluon-chunked warps x rows, peers in the same run)."""
    from ..kernels import chunked
    st = cm.newest_run(cur, cm.config_value(cur, "study") == "mid-n") if len(cur) else cur
    if not len(st):
        return st
    return cm.study_vs_peers(st, ("num_warps", "rows"), lambda op, N, M: chunked.ChunkPlan.for_row(op, N, "bfloat16"))
