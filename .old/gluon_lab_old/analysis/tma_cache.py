"""Notebook 01-tma-caching: gluon-tma (one TMA copy of the row to shared memory, both passes read it)
against every baseline, the knob sweeps behind its heuristic, the Inductor code it is compared with.

Kernel-facing (the only places this module reaches into kernels / experiments / codegen):
    measure()            gluon_lab_old.experiments.run_tma_caching(results_dir=, quick=, parts=)
    kernel_source()      gluon_lab_old.kernels.tma_cache.tma_cache_norm_kernel (.fn source)
    norm_math_sources()  gluon_lab_old.kernels.norm_math.chunk_sum, rms_row, layer_row, normalize_chunk (.fn sources)
    heuristic_source()   gluon_lab_old.kernels.tma_cache.TmaCacheConfig.heuristic (source)
    max_n_table()        TmaCacheConfig.min_n(dtype), TmaCacheConfig.max_n(op, dtype)
    census_table()       TmaCacheConfig.heuristic(op, N, dtype), TmaCacheConfig.make(op, N, dtype, param_tma=,
                         tma_store=), codegen.inspect_variant(op, variant, N=, dtype=, config=),
                         codegen.census_table; census keys "sass"/"UTMALDG" and "tma_boxes"/"block_size"
"""
from __future__ import annotations

from .. import plots
from . import common as cm

NB = "01-tma-caching"
OPS = ("rms_norm", "layer_norm", "add_rms_norm", "l2_norm")
OTHER_OPS = ("layer_norm", "add_rms_norm", "l2_norm")
RMS_LABELS = ("torch", "inductor", "inductor-max-autotune", "triton", "liger", "gluon-tma", "gluon-tma (TMA store)",
              "copy")
STRONGEST = ("gluon-tma", "inductor", "inductor-max-autotune", "liger")
SWEEP_FLAGS = ("tma_store", "one_box", "param_tma")
TIE = 0.98  # a ratio >= 0.98 counts as a tie


# ---- kernel-facing -------------------------------------------------------------------------------
def measure(ctx: cm.Context, quick: bool = False, parts=("rms", "others", "sweep", "ln-sweep", "inductor-code")):
    from ..experiments import run_tma_caching
    _, where = run_tma_caching(results_dir=str(ctx.results_dir), quick=quick, parts=tuple(parts))
    return where


def kernel_source() -> str:
    import inspect
    from ..kernels import tma_cache
    return inspect.getsource(tma_cache.tma_cache_norm_kernel.fn)


def norm_math_sources() -> str:
    import inspect
    from ..kernels import norm_math
    return "\n".join(inspect.getsource(f.fn) for f in (norm_math.chunk_sum, norm_math.rms_row, norm_math.layer_row,
                                                            norm_math.normalize_chunk))


def heuristic_source() -> str:
    import inspect
    from ..kernels import tma_cache
    return inspect.getsource(tma_cache.TmaCacheConfig.heuristic)


def max_n_table():
    """Largest power-of-2 N a cached row takes, per op (rows) and dtype (columns)."""
    import pandas as pd
    from ..kernels import tma_cache
    C = tma_cache.TmaCacheConfig
    rows = [{"op": op, "dtype": dt, "min N": C.min_n(dt), "max N (power of 2)": C.max_n(op, dt)}
            for op in OPS for dt in ("bfloat16", "float16", "float32")]
    return pd.DataFrame(rows).pivot(index="op", columns="dtype", values="max N (power of 2)")


def census_table(Ns=(4096, 16384), op: str = "rms_norm", dtype: str = "bfloat16"):
    """sm_90 census (compiled on this CPU): gluon-tma as the heuristic picks it, gluon-tma with a TMA store
    and the weight by ld.global, and the Triton one-row kernel, at each N."""
    from .. import codegen
    from ..kernels import tma_cache
    C = tma_cache.TmaCacheConfig
    cen = {}
    for N in Ns:
        cfg = C.heuristic(op, N, dtype)
        _, cen[f"gluon-tma N={N} {cfg.num_warps}w R={cfg.rows_per_cta} w-by-TMA={cfg.param_tma}"] = \
            codegen.inspect_variant(op, "gluon-tma", N=N, dtype=dtype, config=cfg)
        cfg2 = C.make(op, N, dtype, param_tma=False, tma_store=True)
        _, cen[f"gluon-tma N={N} TMA store, w by ld.global"] = \
            codegen.inspect_variant(op, "gluon-tma", N=N, dtype=dtype, config=cfg2)
        _, cen[f"triton N={N}"] = codegen.inspect_variant(op, "triton", N=N, dtype=dtype)
    ct = codegen.census_table(cen)
    ct["UTMALDG (SASS)"] = [c["sass"]["UTMALDG"] for c in cen.values()]
    ct["TMA box"] = [c["tma_boxes"][0]["block_size"] if c["tma_boxes"] else "no TMA" for c in cen.values()]
    return ct


def census_view(ct) -> list:
    """[census without its all-zero columns, short names; the note naming the dropped columns]."""
    return cm.compact_census(ct, keep=("UTMALDG (SASS)", ))


# ---- Inductor's kernels (recorded on the GPU) ----------------------------------------------------
def inductor_kernels(ctx: cm.Context):
    """The unique Inductor kernels of results/<gpu>/01-tma-caching.inductor-kernels.json (empty if absent)."""
    return cm.inductor_kernels(ctx.path(".inductor-kernels.json"))


def inductor_table(ik):
    """Per (op, N): reduction loops, global reads of the reused row, eviction hints, kernel count."""
    if not len(ik):
        return None
    return ik.drop(columns=["source"]).groupby(["op", "N", "reduction loops", "global reads of the reused row",
                                                "eviction hints"]).size().rename("kernels (M = 4096..32768)").reset_index()


def inductor_example(ik, op: str = "rms_norm", N: int = 4096) -> str | None:
    sub = ik[(ik.op == op) & (ik.N == N)] if len(ik) else ik
    return sub.iloc[0]["source"] if len(sub) else None


INDUCTOR_MISSING = "**Inductor kernels: missing** (no capture recorded for this GPU)."


# ---- the grids -----------------------------------------------------------------------------------
def grid_of(allrec, op: str):
    """The newest run's grid records of op (no study), with `label` telling the TMA-store path apart."""
    if not len(allrec):
        return allrec.assign(label=[])
    sel = (allrec["op"] == op) & ~allrec["config_key"].str.contains('"study"', regex=False)
    g = cm.newest_run(allrec, sel).copy()
    g["label"] = g["variant"]
    if len(g):
        ts = cm.config_value(g, "tma_store", False).fillna(False).astype(bool)
        g.loc[(g["variant"] == "gluon-tma") & ts, "label"] = "gluon-tma (TMA store)"
    return g


def as_labels(g):
    """The records with variant := label (the TMA-store path becomes its own variant)."""
    g = g.copy()
    if len(g):
        g["variant"] = g["label"]
    return g


def rms_run(allrec):
    """The RMSNorm headline run: (rms grid, the run's per-shape copies labelled 'copy', its ceilings, run id)."""
    rms = grid_of(allrec, "rms_norm")
    run_id = rms["run_id"].iloc[0] if len(rms) else None
    if run_id is None:
        return rms, allrec.iloc[0:0].assign(label=[]), None, None
    copies = allrec[(allrec["op"] == "copy") & (allrec["run_id"] == run_id) & allrec["M"].notna()].copy()
    copies["label"] = "copy"
    return rms, copies, cm.ceilings(allrec[allrec["run_id"] == run_id]), run_id


def run_line(rms, ceil, spec, run_id) -> str | None:
    """One line: the run, its ceilings, timers, passed and stale counts."""
    if not ceil or not len(rms):
        return None
    pct = f" ({100 * ceil['copy_gbps'] / spec.hbm_gbps:.1f}% of datasheet)" if spec else ""
    return (f"run {run_id}: copy ceiling {ceil['copy_gbps']:.0f} GB/s{pct}, bf16 matmul {ceil['matmul_tflops']:.0f} "
            f"TFLOP/s; timers: {sorted(rms.timer.dropna().unique())}; records passed: {int(rms.passed.sum())}/{len(rms)}; "
            f"stale: {int(rms.stale.sum())}")


def rms_heatmaps(rms, copies):
    """Every variant of the RMSNorm run: (gluon-tma and the strongest baselines, the rest incl. the TMA-store
    path and the copy); each None when it has nothing to draw."""
    import pandas as pd
    h = as_labels(pd.concat([rms, copies]))
    have = set(h["variant"]) if len(h) else set()
    first = [v for v in STRONGEST if v in have]
    rest = [v for v in RMS_LABELS if v in have and v not in first]
    gpu = ", ".join(sorted(rms["gpu_name"].dropna().unique())) if len(rms) else "?"
    return (cm.heatmaps(h, first, suptitle=f"RMSNorm bf16 on the {gpu}: % of datasheet bandwidth, gluon-tma vs the "
                                           "strongest baselines"),
            cm.heatmaps(h, rest, suptitle="RMSNorm bf16: % of datasheet bandwidth (eager, plain Triton, TMA-store "
                                          "path, copy)"))


OP_NAMES = {"rms_norm": "RMSNorm", "layer_norm": "LayerNorm", "add_rms_norm": "add+RMSNorm", "l2_norm": "L2Norm"}


def vs_best_cells(g):
    """Per (M, N) of one grid (TMA-store path left out): gluon-tma's SOL % and its speed vs the fastest
    baseline, as a frame with M, N, sol, ratio columns (empty without gluon-tma or a baseline)."""
    import pandas as pd
    g = g[g["label"] != "gluon-tma (TMA store)"] if len(g) else g
    _, vb, who = cm.vs_best_baseline(g, "gluon-tma", only_passed=False)
    if not len(vb):
        return pd.DataFrame(columns=["M", "N", "sol", "ratio", "best baseline"])
    sol = g[g["variant"] == "gluon-tma"].set_index(["M", "N"])["sol_datasheet_pct"]
    return pd.DataFrame({"sol": sol.reindex(vb.index), "ratio": vb, "best baseline": who}).reset_index()


def headline_figure(rms):
    """Headline (read at ~900 px): gluon-tma's % of datasheet bandwidth per cell, and its speed against
    the fastest baseline of the cell on a diverging scale centred on 1.0. None without the grid."""
    import matplotlib.pyplot as plt
    t = vs_best_cells(rms)
    if not len(t):
        return None
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8))
    plots.sol_heatmap(t, value="sol", ax=axes[0], title="gluon-tma: % of datasheet bandwidth", colorbar=False)
    plots.ratio_heatmap(t, value="ratio", ax=axes[1], title="gluon-tma speed / fastest baseline",
                        faster="gluon-tma faster", slower="baseline faster", target=TIE, fontsize=12)
    run = rms["run_id"].iloc[0]
    fig.suptitle(f"RMSNorm bf16, run {cm.run_short(run)} (✗: more than 2% slower than the fastest baseline)")
    cm.headline_fonts(fig)
    fig.tight_layout()
    return fig


def headline_numbers(allrec) -> list:
    """2-4 (label, value) pairs for the page's headline block, computed from the newest grids."""
    out = []
    rms = grid_of(allrec, "rms_norm")
    t = vs_best_cells(rms)
    if len(t):
        run = cm.run_short(rms["run_id"].iloc[0])
        Ms, Ns = sorted(t["M"].unique()), sorted(t["N"].unique())
        out.append(("gluon-tma vs best baseline",
                    f"{plots.geomean(t['ratio']):.2f}× geomean over {len(t)} RMSNorm bf16 cells (M {plots.fmt_size(Ms[0])}–"
                    f"{plots.fmt_size(Ms[-1])} × N {plots.fmt_size(Ns[0])}–{plots.fmt_size(Ns[-1])}); wins or ties "
                    f"(≥ {TIE}×) in {int((t['ratio'] >= TIE).sum())} of them (run {run})"))
        b = t.loc[t["sol"].idxmax()]
        out.append(("best SOL", f"{b['sol']:.0f}% of datasheet bandwidth at {int(b['M'])}×{int(b['N'])} "
                                "(RMSNorm bf16, gluon-tma)"))
        piv, _ = ratio_table(allrec, "rms_norm")
        gi = plots.geomean(cm.ratio(piv, "inductor", "gluon-tma"))
        out.append(("vs torch.compile", f"{gi:.2f}× geomean (RMSNorm bf16)" if gi == gi else
                    "not computed: no torch.compile record in the run"))
    else:
        out.append(("gluon-tma vs best baseline", "missing: no RMSNorm grid with gluon-tma and a baseline in the records"))
    cells = [(op, vs_best_cells(grid_of(allrec, op))) for op in OPS]
    cells = [(op, c) for op, c in cells if len(c)]
    if len(cells) > 1:
        n = sum(len(c) for _, c in cells)
        w = sum(int((c["ratio"] >= TIE).sum()) for _, c in cells)
        out.append(("all norms", f"gluon-tma wins or ties the best baseline in {w} of {n} cells ("
                                 + ", ".join(OP_NAMES.get(op, op) for op, _ in cells) + ", bf16)"))
    return out


def slow_copy_caveat(rms, copies, ceil, spec, below_pct: float = 70.0) -> str | None:
    """Markdown: the per-shape copies that read below `below_pct` % of the datasheet, next to what RMSNorm
    reaches at those cells in the same run (None when no copy is that slow)."""
    if not len(copies):
        return None
    slow = copies[copies.sol_datasheet_pct < below_pct]
    if not len(slow):
        return None
    same = rms[rms.set_index(["M", "N"]).index.isin(slow.set_index(["M", "N"]).index)]
    fast = same.groupby("label")["sol_datasheet_pct"].min().sort_values(ascending=False)
    session = (f", and the 2 GiB do_bench copy (the ceiling behind `sol_measured_pct`) reached "
               f"{100 * ceil['copy_gbps'] / spec.hbm_gbps:.0f}%") if ceil and spec else ""
    return (f"**Caveat, measured not explained:** the graph-timed `y.copy_(x)` reads only "
            f"{slow.sol_datasheet_pct.min():.0f}-{slow.sol_datasheet_pct.max():.0f}% at "
            + ", ".join(f"{int(r.M)}x{int(r.N)}" for r in slow.itertuples())
            + ", while at those cells RMSNorm reaches at least "
            + ", ".join(f"{v:.0f}% ({k})" for k, v in fast.head(4).items())
            + f" in the same run{session}. The per-shape copy is one torch kernel, not a bound.")


def rms_caveats(rms, copies, ceil, spec) -> list:
    """The slow per-shape copy caveat and the schema-1 graph-timer caveat of the RMSNorm run (None each if n/a)."""
    import pandas as pd
    return [slow_copy_caveat(rms, copies, ceil, spec), cm.graph_output_caveat(pd.concat([rms, copies]))]


def best_baseline_rows(g, name: str | None = "best baseline"):
    """Per (M, N) the record of the fastest non-Gluon variant, renamed to `name` (None: keep its variant)."""
    b = g[~g["variant"].str.startswith("gluon")]
    if not len(b):
        return b
    bb = b.loc[b.groupby(["M", "N"])["ms_median"].idxmin()].copy()
    if name:
        bb["variant"] = name
    return bb


def rms_delta_tables(rms) -> list:
    """`baseline -> gluon-tma` tables for inductor, max-autotune and the best baseline, then which baseline
    is best per cell."""
    import pandas as pd
    rv = as_labels(rms)
    if not len(rv) or "gluon-tma" not in set(rv.variant):
        return [cm.missing_note(rv.iloc[0:0], "the RMSNorm grid")]
    best = best_baseline_rows(rv)
    out = []
    why = not_measured(rv)
    for b in ("inductor", "inductor-max-autotune", "best baseline"):
        if b != "best baseline" and b not in set(rv.variant):
            out.append(f"**{b} -> gluon-tma: {b} is not in this run** (no current record of it: it was not "
                       "re-measured with the code its records are hashed with)")
            continue
        out += [f"**{b} -> gluon-tma**", plots.delta_table(pd.concat([rv, best]), b, "gluon-tma", missing=why)]
    out += ["**which baseline is best per cell**",
            best_baseline_rows(rv, None).pivot(index="M", columns="N", values="variant")]
    return out


def not_measured(g):
    """delta_table's `missing`: '<variant>: not measured in run <id>' for a cell of the grid g."""
    run = cm.run_short(g["run_id"].iloc[0]) if len(g) else "?"
    return lambda M, N, absent: f"{absent}: not measured in run {run}"


def other_op_section(allrec, op: str, variants=("torch", "inductor", "triton", "liger", "gluon-tma")) -> list:
    """[heatmaps, title, best baseline -> gluon-tma table] of one op, or a missing note."""
    import pandas as pd
    g = as_labels(grid_of(allrec, op))
    if not len(g):
        return [f"**{op}: missing**"]
    fig = cm.heatmaps(g, variants, suptitle=f"{op} bf16: % of datasheet bandwidth")
    return [fig, f"**{op}: best baseline -> gluon-tma**",
            plots.delta_table(pd.concat([g, best_baseline_rows(g)]), "best baseline", "gluon-tma", missing=not_measured(g))]


def roofline(allrec, spec, slug: str):
    """Every variant of every op of the newest grid runs, and the headline run's ceilings."""
    import pandas as pd
    grids = pd.concat([as_labels(grid_of(allrec, op)) for op in OPS])
    if not len(grids):
        return None
    _, _, ceil, run_id = rms_run(allrec)
    ceil_rows = allrec[(allrec["pattern"] == "ceiling") & (allrec["run_id"] == run_id) & allrec["M"].isna()]
    return plots.roofline(pd.concat([grids, ceil_rows]), spec, ceil,
                          title=f"Roofline on {slug}: the norms (bf16), one panel per op, under the datasheet and measured roofs")


# ---- sweeps --------------------------------------------------------------------------------------
def _timers_by_n(sw) -> dict:
    return {int(k): v for k, v in sw.groupby("N")["timer"].agg(lambda t: ", ".join(sorted(set(t)))).items()}


def sweep_records(allrec):
    """The newest RMSNorm knob sweep (num_warps x rows_per_cta x tma_store x one_box x param_tma)."""
    if not len(allrec):
        return allrec.copy()
    sw = cm.newest_run(allrec, cm.config_value(allrec, "study") == "sweep").copy()
    for k in ("num_warps", "rows_per_cta") + SWEEP_FLAGS:
        sw[k] = cm.config_value(sw, k) if len(sw) else []
    return sw


def sweep_line(sw) -> str | None:
    if not len(sw):
        return None
    return (f"sweep run `{sw.run_id.iloc[0]}`: {len(sw)} configs, {int(sw.stale.sum())} stale, all passed: "
            f"{bool(sw.passed.all())}  \ntimers by N: {_timers_by_n(sw)}")


def sweep_best_plain(sw):
    """Best SOL % with plain stores, by (N, num_warps) rows and rows_per_cta columns."""
    plain = sw[~sw.tma_store.astype(bool)]
    return plain.groupby(["N", "num_warps", "rows_per_cta"])["sol_datasheet_pct"].max().unstack("rows_per_cta").round(1)


def flag_effects(sw, digits: int | None = 3):
    """Per N, the median over the other knobs of ms(flag False) / ms(flag True), for each boolean flag."""
    import pandas as pd
    eff = []
    for k in SWEEP_FLAGS:
        others = [x for x in SWEEP_FLAGS if x != k]
        piv = sw.pivot_table(index=["N", "num_warps", "rows_per_cta"] + others, columns=k, values="ms_median")
        if False not in piv or True not in piv:
            continue
        eff.append((piv[False] / piv[True]).groupby(level="N").median().rename(f"{k}=True speed vs False (median ratio)"))
    t = pd.concat(eff, axis=1) if eff else pd.DataFrame()
    return t.round(digits) if digits is not None else t


def ln_sweep_records(allrec):
    if not len(allrec):
        return allrec.copy()
    ln = cm.newest_run(allrec, cm.config_value(allrec, "study") == "ln-sweep").copy()
    for k in ("num_warps", "rows_per_cta", "param_tma"):
        ln[k] = cm.config_value(ln, k) if len(ln) else []
    return ln


def sweep_section(allrec) -> list:
    """The RMSNorm sweep (run line, best plain-store table, flag effects) and the LayerNorm sweep."""
    sw, ln = sweep_records(allrec), ln_sweep_records(allrec)
    out = []
    if len(sw):
        out += [sweep_line(sw), "**best SOL % (plain stores) by N, warps (rows) and rows per CTA (columns)**",
                sweep_best_plain(sw), flag_effects(sw)]
    else:
        out.append("**Sweep: missing**")
    if len(ln):
        out += ["**LayerNorm: SOL % by N, warps, rows per CTA, cached weight+bias**",
                ln.pivot_table(index=["N", "num_warps"], columns=["rows_per_cta", "param_tma"],
                               values="sol_datasheet_pct").round(1),
                f"LayerNorm sweep timers by N: {_timers_by_n(ln)}"]
    return out


# ---- targets and takeaways -----------------------------------------------------------------------
def ratio_table(allrec, op: str):
    """(ms pivot, best baseline / gluon-tma per cell) of op's newest grid, without the TMA-store path."""
    g = grid_of(allrec, op)
    g = g[g.label != "gluon-tma (TMA store)"] if len(g) else g
    return cm.vs_best_baseline(g, "gluon-tma", only_passed=False)[:2]


BASELINE_WORDS = "eager PyTorch, torch.compile, the one-row Triton kernel and Liger"


def _worst(vb) -> str:
    k = vb.idxmin()
    return f"slowest cell {vb.min():.3f}× at M×N = {int(k[0])}×{int(k[1])}"


def targets(allrec):
    """The pattern's targets against the newest grids, each described in words (what, threshold, against
    which baseline): (target, measured, met) rows; a target without records is 'missing: ...', not met."""
    import pandas as pd
    checks = []
    piv, vs_best = ratio_table(allrec, "rms_norm")
    if len(vs_best):
        g = grid_of(allrec, "rms_norm")
        sol = g[g.label == "gluon-tma"].set_index(["M", "N"])["sol_measured_pct"]
        big = [k for k in sol.index if k[0] * k[1] >= 64 * 2**20]
        checks.append((f"RMSNorm bf16: gluon-tma at least as fast as the fastest baseline ({BASELINE_WORDS}) in every "
                       f"M×N cell; within 2% (ratio ≥ {TIE}) counts as a tie",
                       f"{int((vs_best >= TIE).sum())} of {len(vs_best)} cells; {_worst(vs_best)}",
                       bool((vs_best >= TIE).all())))
        g_ind = plots.geomean(cm.ratio(piv, "inductor", "gluon-tma"))
        checks.append(("RMSNorm bf16: geometric-mean speed over the grid at least 1.05× torch.compile (default mode)",
                       f"{g_ind:.3f}×", g_ind >= 1.05))
        checks.append(("RMSNorm bf16: at least 95% of the copy ceiling measured in the same run, in every cell with "
                       "M·N ≥ 64 Mi elements",
                       (f"{int((sol[big] >= 95).sum())} of {len(big)} cells; lowest {sol[big].min():.1f}%" if big
                        else "no cell with M·N ≥ 64 Mi elements in the run"),
                       bool(len(big)) and bool((sol[big] >= 95).all())))
    else:
        checks.append(("RMSNorm bf16: gluon-tma against the baselines", "missing: no RMSNorm grid with gluon-tma and a "
                                                                        "baseline in the records", False))
    for op in ("layer_norm", "add_rms_norm"):
        name = OP_NAMES[op]
        piv, vb = ratio_table(allrec, op)
        if not len(vb):
            checks.append((f"{name} bf16: gluon-tma against the baselines", f"missing: no {name} grid in the records", False))
            continue
        gi = plots.geomean(cm.ratio(piv, "inductor", "gluon-tma"))
        checks.append((f"{name} bf16: geometric-mean speed over the grid at least 1.15× torch.compile",
                       f"{gi:.3f}×", gi >= 1.15))
        checks.append((f"{name} bf16: at least as fast as the fastest baseline in every cell (ratio ≥ {TIE} ties)",
                       f"{int((vb >= TIE).sum())} of {len(vb)} cells; {_worst(vb)}", bool((vb >= TIE).all())))
    return pd.DataFrame(checks, columns=["target", "measured", "met"])


def targets_view(allrec):
    """targets() as a coloured table (green met, red missed)."""
    return cm.target_list(targets(allrec))


def takeaways(allrec, ik) -> list[str]:
    """Each line computed from the records (and the Inductor capture) shown above."""
    lines = []
    for op in OPS:
        piv, vb = ratio_table(allrec, op)
        g = grid_of(allrec, op)
        g = g[g.label == "gluon-tma"] if len(g) else g
        if not len(vb) or not len(g):
            continue
        lines.append(f"**{op}**: gluon-tma {cm.sol_range(g.sol_datasheet_pct)}% of datasheet "
                     f"({cm.sol_range(g.sol_measured_pct)}% of the measured copy ceiling); "
                     f"vs best baseline geomean {plots.geomean(vb):.3f}x (wins or ties in {int((vb >= TIE).sum())}/{len(vb)} "
                     f"cells), vs torch.compile {plots.geomean(cm.ratio(piv, 'inductor', 'gluon-tma')):.3f}x, "
                     f"vs eager {plots.geomean(cm.ratio(piv, 'torch', 'gluon-tma')):.2f}x.")
    if len(ik):
        piv, _ = ratio_table(allrec, "rms_norm")
        gi = plots.geomean(cm.ratio(piv, "inductor", "gluon-tma"))
        verdict = (f"reading x once (gluon-tma) is {gi:.3f}x torch.compile on RMSNorm (geomean), so it does not by "
                   "itself beat it" if gi < 1.05 else
                   f"reading x once (gluon-tma) still gains {gi:.3f}x over torch.compile on RMSNorm (geomean)")
        lines.append("Inductor reads the reused row from global memory " +
                     ", ".join(f"{r['global reads of the reused row']}x for {r['op']}"
                               for _, r in ik.drop_duplicates('op').iterrows()) +
                     " (looped reductions, first read `evict_last`); on the H200's 50 MB L2 those re-reads are "
                     f"nearly free: {verdict}.")
    sw = sweep_records(allrec)
    if len(sw):
        for n in sorted(sw.N.unique()):
            w = sw[sw.N == n].groupby("num_warps")["sol_datasheet_pct"].max()
            spread = w.max() - w.min()
            if len(w) < 2:
                lines.append(f"Sweep N={int(n)}: only {int(w.index[0])} warps fit the row; best {w.iloc[0]:.1f}%.")
                continue
            lines.append(f"Sweep N={int(n)} ({', '.join(sorted(set(sw[sw.N == n].timer)))}): best per warp count "
                         + ", ".join(f"{k} warps {v:.1f}%" for k, v in w.items())
                         + (f" — a {spread:.1f}-point spread, within what this sweep resolves." if spread < 2 else
                            f" — {w.idxmax()} warps lead by {spread:.1f} points."))
        eff = flag_effects(sw, digits=None)
        col = "tma_store=True speed vs False (median ratio)"
        if col in eff:
            r = eff[col]
            lines.append("TMA store vs plain 128-bit stores, median speed ratio per N: "
                         + ", ".join(f"{int(k)}: {v:.3f}x" for k, v in r.items())
                         + (" — the TMA-store path is not a win for this bandwidth-bound norm." if (r <= 1.0).all() else
                            f" — the TMA-store path wins at N = {[int(k) for k in r[r > 1.0].index]}."))
    lines.append("What would close the remaining gap: overlap the next row's copy with this row's passes inside a CTA "
                 "(an mbarrier ring, pattern 3) instead of relying on other CTAs on the SM to hide it.")
    return lines


# ---- issue 16: the small-M study (M = 2048 / 4096; the knobs that set the heuristic's small-M rule) ----
def small_m_study(allrec):
    """(the newest 'small-m' study with its peers: cm.study_vs_peers table, its records). Shown as
    recorded even when stale: its gluon-tma records predate the rule they set (the rule changed the
    variant's code hash), which the notebook states."""
    from ..kernels import tma_cache
    st = cm.newest_run(allrec, cm.config_value(allrec, "study") == "small-m") if len(allrec) else allrec
    if not len(st):
        return st, st
    t = cm.study_vs_peers(st, ("num_warps", "rows_per_cta", "param_tma"),
                          lambda op, N, M: tma_cache.TmaCacheConfig.heuristic(op, N, "bfloat16", M))
    return t, st


def regs_records(allrec):
    """The newest 'regs' study's records (every variant of that run), as recorded."""
    return cm.newest_run(allrec, cm.config_value(allrec, "study") == "regs") if len(allrec) else allrec


def regs_study(allrec):
    """The newest 'regs' study (gluon-regs warps x rows, gluon-tma / gluon-chunked at their heuristics
    and the peers, one run) per (op, M, N): gluon-regs at the current heuristic and at its best swept
    config, the other two Gluon variants, the best peer, and best peer / best gluon (>= 1: Gluon
    leads). Empty before the study has run."""
    import pandas as pd
    from ..kernels import regs_cache
    st = regs_records(allrec)
    if not len(st):
        return pd.DataFrame()
    st = cm.passed(st)
    reg = st[(st.variant == "gluon-regs") | ~st.variant.str.startswith(cm.GLUON_PREFIXES)]  # its sweep + the peers
    t = cm.study_vs_peers(reg, ("num_warps", "rows"),
                          lambda op, N, M: regs_cache.RegsConfig.heuristic(op, N, "bfloat16", M)) if (st.variant == "gluon-regs").any() else None
    rows = []
    for (op, M, N), sub in st.groupby(["op", "M", "N"]):
        us = {v: 1000 * d.ms_median.min() for v, d in sub.groupby("variant")}
        peers = {v: x for v, x in us.items() if not v.startswith("gluon")}
        gl_best = min((x for v, x in us.items() if v.startswith("gluon")), default=float("nan"))
        p = min(peers, key=peers.get) if peers else None
        rows.append({"op": op, "M": int(M), "N": int(N), "gluon-regs best us": round(us.get("gluon-regs", float("nan")), 2),
                     "gluon-tma us": round(us["gluon-tma"], 2) if "gluon-tma" in us else "— (power-of-2 N only)",
                     "gluon-chunked us": round(us.get("gluon-chunked", float("nan")), 2),
                     "best peer": p, "peer us": round(peers[p], 2) if p else float("nan"),
                     "best peer / best gluon": round(peers[p] / gl_best, 3) if p else float("nan")})
    out = pd.DataFrame(rows)
    if t is not None and len(t):
        out = out.merge(t[["op", "M", "N", "heuristic", "heuristic us", "best config"]].rename(
            columns={"heuristic": "gluon-regs heuristic", "heuristic us": "gluon-regs heuristic us",
                     "best config": "gluon-regs best config"}), on=["op", "M", "N"], how="left")
    return out


def regs_census(Ns=(4096, 5120, 8192, 16384), ops=("rms_norm", "add_rms_norm"), dtype: str = "bfloat16"):
    """sm_90 census (compiled on this CPU) of gluon-regs as its heuristic picks it, per op and N."""
    from .. import codegen
    from ..kernels import regs_cache
    cen = {}
    for op in ops:
        for N in Ns:
            cfg = regs_cache.RegsConfig.heuristic(op, N, dtype)
            _, cen[f"gluon-regs {op} N={N} {cfg.num_warps}w rows={cfg.rows}"] = \
                codegen.inspect_variant(op, "gluon-regs", N=N, dtype=dtype, config=cfg)
    return codegen.census_table(cen)
