"""Notebook 01-tma-caching: gluon-tma (one TMA copy of the row to shared memory, both passes read it)
against every baseline, the knob sweeps behind its heuristic, the Inductor code it is compared with.

Kernel-facing (the only places this module reaches into kernels / experiments / codegen):
    measure()            gluon_lab.experiments.run_tma_caching(results_dir=, quick=, parts=)
    kernel_source()      gluon_lab.kernels.tma_cache.tma_cache_norm_kernel (.fn source)
    norm_math_sources()  gluon_lab.kernels.norm_math.chunk_sum, rms_row, layer_row, normalize_chunk (.fn sources)
    heuristic_source()   gluon_lab.kernels.tma_cache.TmaCacheConfig.heuristic (source)
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
    ct["TMA box"] = [c["tma_boxes"][0]["block_size"] if c["tma_boxes"] else "-" for c in cen.values()]
    return ct


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
            f"TFLOP/s; timers: {sorted(rms.timer.unique())}; records passed: {int(rms.passed.sum())}/{len(rms)}; "
            f"stale: {int(rms.stale.sum())}")


def rms_heatmaps(rms, copies):
    """Headline: (gluon-tma and the strongest baselines, the rest incl. the TMA-store path and the copy);
    each None when it has nothing to draw."""
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
    for b in ("inductor", "inductor-max-autotune", "best baseline"):
        if b != "best baseline" and b not in set(rv.variant):
            out.append(f"**{b} -> gluon-tma: {b} is not in this run** (no current record of it: it was not "
                       "re-measured with the code its records are hashed with)")
            continue
        out += [f"**{b} -> gluon-tma**", plots.delta_table(pd.concat([rv, best]), b, "gluon-tma")]
    out += ["**which baseline is best per cell**",
            best_baseline_rows(rv, None).pivot(index="M", columns="N", values="variant")]
    return out


def other_op_section(allrec, op: str, variants=("torch", "inductor", "triton", "liger", "gluon-tma")) -> list:
    """[heatmaps, title, best baseline -> gluon-tma table] of one op, or a missing note."""
    import pandas as pd
    g = as_labels(grid_of(allrec, op))
    if not len(g):
        return [f"**{op}: missing**"]
    fig = cm.heatmaps(g, variants, suptitle=f"{op} bf16: % of datasheet bandwidth")
    return [fig, f"**{op}: best baseline -> gluon-tma**",
            plots.delta_table(pd.concat([g, best_baseline_rows(g)]), "best baseline", "gluon-tma")]


def roofline(allrec, spec, slug: str):
    """Every variant of every op of the newest grid runs, and the headline run's ceilings."""
    import pandas as pd
    grids = pd.concat([as_labels(grid_of(allrec, op)) for op in OPS])
    if not len(grids):
        return None
    _, _, ceil, run_id = rms_run(allrec)
    ceil_rows = allrec[(allrec["pattern"] == "ceiling") & (allrec["run_id"] == run_id) & allrec["M"].isna()]
    return plots.roofline(pd.concat([grids, ceil_rows]), spec, ceil,
                          title=f"Roofline on {slug}: norms (bf16) and the matmul ceiling")


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


def targets(allrec):
    """Issue #3's targets against the newest grids: (target, measured, met) rows."""
    import pandas as pd
    checks = []
    piv, vs_best = ratio_table(allrec, "rms_norm")
    if len(vs_best):
        g = grid_of(allrec, "rms_norm")
        sol = g[g.label == "gluon-tma"].set_index(["M", "N"])["sol_measured_pct"]
        big = [k for k in sol.index if k[0] * k[1] >= 64 * 2**20]
        checks.append(("RMSNorm: gluon-tma >= best baseline in every cell (>= 0.98 ties)",
                       f"{int((vs_best >= TIE).sum())}/{len(vs_best)} cells; worst {vs_best.min():.3f}x",
                       bool((vs_best >= TIE).all())))
        g_ind = plots.geomean(cm.ratio(piv, "inductor", "gluon-tma"))
        checks.append(("RMSNorm: geomean >= 1.05x torch.compile default", f"{g_ind:.3f}x", g_ind >= 1.05))
        checks.append(("RMSNorm: >= 95% of the copy ceiling where M*N >= 64M",
                       f"{int((sol[big] >= 95).sum())}/{len(big)} cells; min {sol[big].min():.1f}%",
                       bool(len(big)) and bool((sol[big] >= 95).all())))
    else:
        checks.append(("RMSNorm: records", "missing", False))
    for op in ("layer_norm", "add_rms_norm"):
        piv, vb = ratio_table(allrec, op)
        if not len(vb):
            checks.append((f"{op}: records", "missing", False))
            continue
        gi = plots.geomean(cm.ratio(piv, "inductor", "gluon-tma"))
        checks.append((f"{op}: geomean >= 1.15x torch.compile", f"{gi:.3f}x", gi >= 1.15))
        checks.append((f"{op}: >= best baseline in every cell",
                       f"{int((vb >= TIE).sum())}/{len(vb)} cells; worst {vb.min():.3f}x", bool((vb >= TIE).all())))
    return pd.DataFrame(checks, columns=["target", "measured", "met"])


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
