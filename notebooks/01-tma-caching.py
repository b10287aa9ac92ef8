# ---
# jupyter:
#   gluon_lab:
#     pattern: TMA caching of reused inputs
#     summary: 'row(s) TMA-copied once to smem, both passes read smem: RMSNorm, LayerNorm,
#       L2Norm, add+RMSNorm'
#   jupytext:
#     notebook_metadata_filter: gluon_lab,kernelspec,language_info,-jupytext.text_representation.jupytext_version
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
#   language_info:
#     name: python
# ---

# %% [markdown]
# # 01 — TMA caching of reused inputs
#
# A normalization reads its input **twice**: once to reduce (Σx², or mean and variance), once to
# normalize. Compilers pick one of two answers:
#
# * keep the row in **registers** between the passes (Triton one-row kernels, Liger, Inductor's
#   *persistent* reductions) — fine until the row outgrows the register file, then it spills;
# * read it from **DRAM twice** (Inductor's *looped* reductions) and hope the second read hits L2.
#
# Gluon lets us write the third answer explicitly: each CTA issues **one TMA copy** of its row(s) into
# shared memory, in the input's narrow dtype, waits on one mbarrier, and every pass reads the row from
# shared memory, converting to fp32 only at the point of use. The output leaves through plain 128-bit
# stores or, from shared memory, through a TMA store. `add_rms_norm` caches two inputs (x and the
# residual) and writes two outputs (y and x + residual), like vLLM's `fused_add_rmsnorm`.
#
# This notebook shows the kernel, proves from the sm_90 code that the pattern is what the kernel does,
# and measures it on the H200 against every baseline, in one run, with the CUDA-graph timer.

# %% tags=["parameters"]
mode = "auto"              # "auto": measure on an sm_90+ GPU, else replay; "measure" | "replay" force it
quick = False              # measure mode only: a small grid (smoke run)
results_dir = "../results" # where records are appended (measure) and read (replay)
gpu = None                 # replay: results/<gpu>/ to show (None -> "h200")
parts = ["rms", "others", "sweep", "ln-sweep", "inductor-code"]  # measure mode: which parts of the plan run

# %%
import inspect, json
import numpy as np
import pandas as pd
from IPython.display import Markdown, display

import gluon_lab as gll
from gluon_lab import codegen, device, notebook as nbk, plots
from gluon_lab.kernels import baselines, norm_math, tma_cache

pd.set_option("display.width", 220)
pd.set_option("display.max_columns", 30)
run_mode = nbk.resolve_mode(mode)
slug = nbk.gpu_slug(gpu, run_mode)
spec = device.DATASHEET.get(slug)
NB = "01-tma-caching"
print(f"mode={run_mode}  gpu={slug}")

# %% [markdown]
# ## 1. Measure (GPU) or replay (CPU)
#
# `gluon_lab.experiments.run_tma_caching` is the plan (the batch CLI
# `python -m gluon_lab bench 01-tma-caching --parts ...` runs the same function on the lent H200).
# Every run starts by measuring the copy and matmul ceilings, so SOL against a *measured* ceiling
# always compares numbers taken minutes apart. The results store keeps history: sections below pick
# the newest run that holds the data they show, and flag records whose kernel source has changed since
# (stale).

# %%
if run_mode == "measure":
    from gluon_lab.experiments import run_tma_caching
    _, where = run_tma_caching(results_dir=results_dir, quick=quick, parts=tuple(parts))
    print("appended", where)
allrec = nbk.load(results_dir, slug, NB, newest_only=False)
display(nbk.provenance_table(allrec))
note = nbk.missing_note(allrec, f"{NB} on {slug}")
if note:
    display(Markdown(note))

# %% [markdown]
# ## 2. The kernel
#
# One program handles `R` rows. The descriptor is rank 3 — global `[M, N/256, 256]` with the row
# stride as its outer stride, block `[R, N/256, 256]` — so a whole row is **one TMA box** (a box is at
# most 256 elements per dimension; a `[R, N]` block would be split into N/256 boxes). The same bytes
# are then viewed as `[R, N]` in shared memory. One `mbarrier.expect` carries the bytes of every copy
# that completes on the barrier (x, the residual, and optionally the weight/bias): an expect is also
# an arrive, so a second one would complete the phase before the row has landed.

# %% tags=["show-code"]
print(inspect.getsource(tma_cache.tma_cache_norm_kernel.fn))

# %% [markdown]
# The arithmetic lives in `gluon_lab.kernels.norm_math`, shared by every pattern of this lab (chunked,
# pipelined and warp-specialized kernels call the same helpers):

# %%
for f in (norm_math.row_sum, norm_math.row_stats, norm_math.normalize_chunk):
    print(inspect.getsource(f.fn))

# %% [markdown]
# Configuration is a frozen dataclass; each threshold of its heuristic names the measurement behind it
# (section 6 shows those sweeps). Shared memory bounds N: one CTA may use 227 KB, so a single cached
# bf16 row stops at N = 65536 (fp32: 32768; add+RMSNorm caches two rows: 32768 / 16384).

# %%
print(inspect.getsource(tma_cache.TmaCacheConfig.heuristic))
rows = []
for op in ("rms_norm", "layer_norm", "l2_norm", "add_rms_norm"):
    for dt in ("bfloat16", "float16", "float32"):
        rows.append({"op": op, "dtype": dt, "min N": tma_cache.TmaCacheConfig.min_n(dt),
                     "max N (power of 2)": tma_cache.TmaCacheConfig.max_n(op, dt)})
display(pd.DataFrame(rows).pivot(index="op", columns="dtype", values="max N (power of 2)"))

# %% [markdown]
# ## 3. Codegen evidence, compiled for sm_90 on this CPU
#
# The census counts static PTX/SASS lines (a line in a loop runs many times). What the pattern promises,
# and what the table must show for `gluon-tma`: x arrives by `cp.async.bulk.tensor` (TMA) only — no
# `ld.global` of x; every remaining `ld.global` is the weight (none when the weight rides the TMA
# barrier); both passes read the row with 128-bit `ld.shared`; no spills. The plain Triton kernel reads
# x once into registers with 128-bit `ld.global`.

# %%
cen = {}
for N in (4096, 16384):
    cfg = tma_cache.TmaCacheConfig.heuristic("rms_norm", N, "bfloat16")
    _, cen[f"gluon-tma N={N} {cfg.num_warps}w R={cfg.rows_per_cta} w-by-TMA={cfg.param_tma}"] = \
        codegen.inspect_variant("rms_norm", "gluon-tma", N=N, dtype="bfloat16", config=cfg)
    cfg2 = tma_cache.TmaCacheConfig.make("rms_norm", N, "bfloat16", param_tma=False, tma_store=True)
    _, cen[f"gluon-tma N={N} TMA store, w by ld.global"] = \
        codegen.inspect_variant("rms_norm", "gluon-tma", N=N, dtype="bfloat16", config=cfg2)
    _, cen[f"triton N={N}"] = codegen.inspect_variant("rms_norm", "triton", N=N, dtype="bfloat16")
ct = codegen.census_table(cen)
ct["UTMALDG (SASS)"] = [c["sass"]["UTMALDG"] for c in cen.values()]
ct["TMA box"] = [c["tma_boxes"][0]["block_size"] if c["tma_boxes"] else "-" for c in cen.values()]
display(ct)

# %% [markdown]
# **And Inductor?** The Triton kernels torch.compile generated on the H200 for these ops were kept
# (`results/h200/01-tma-caching.inductor-kernels.json`). They are *looped* reductions: the row is read
# from global memory once per loop — twice for RMSNorm, three times for LayerNorm, and add+RMSNorm
# writes x + residual and reads it back — with `evict_last` on the first read so the second hits L2.

# %%
ik = nbk.inductor_kernels(f"{results_dir}/{slug}/{NB}.inductor-kernels.json")
if len(ik):
    display(ik.drop(columns=["source"]).groupby(["op", "N", "reduction loops", "global reads of the reused row",
                                                 "eviction hints"]).size().rename("kernels (M = 4096..32768)").reset_index())
    print(ik[(ik.op == "rms_norm") & (ik.N == 4096)].iloc[0]["source"])
else:
    display(Markdown("**Inductor kernels: missing** (no capture recorded for this GPU)."))


# %% [markdown]
# So the counts per row of DRAM-or-L2 reads of x are: gluon-tma 1 (TMA), triton/liger 1 (registers),
# inductor 2 (RMSNorm) or 3 (LayerNorm). Section 4 shows what that buys on an H200, whose 50 MB L2
# catches most of Inductor's second reads.
#
# ## 4. RMSNorm bf16 — all variants side by side (one run, graph timer)

# %% tags=["headline"]
def grid_of(op):
    g = nbk.newest_run(allrec, (allrec["op"] == op) & ~allrec["config_key"].str.contains('"study"')).copy()
    g["label"] = g["variant"]
    ts = nbk.config_value(g, "tma_store", False)
    g.loc[(g["variant"] == "gluon-tma") & ts, "label"] = "gluon-tma (TMA store)"
    return g

rms = grid_of("rms_norm")
run_id = rms["run_id"].iloc[0] if len(rms) else None
copies = allrec[(allrec["op"] == "copy") & (allrec["run_id"] == run_id) & allrec["M"].notna()].copy()
copies["label"] = "copy"
ceil = nbk.ceilings(allrec[allrec["run_id"] == run_id]) if run_id else None
if ceil:
    print(f"run {run_id}: copy ceiling {ceil['copy_gbps']:.0f} GB/s ({100 * ceil['copy_gbps'] / spec.hbm_gbps:.1f}% of "
          f"datasheet), bf16 matmul {ceil['matmul_tflops']:.0f} TFLOP/s; timers: {sorted(rms.timer.unique())}; "
          f"records passed: {int(rms.passed.sum())}/{len(rms)}; stale: {int(rms.stale.sum())}")
labels = [l for l in ("torch", "inductor", "inductor-max-autotune", "triton", "liger", "gluon-tma",
                      "gluon-tma (TMA store)", "copy") if l in set(rms.label) | {"copy"}]
h = pd.concat([rms, copies])
h["variant"] = h["label"]
first = [l for l in ("gluon-tma", "inductor", "inductor-max-autotune", "liger") if l in labels]
fig = plots.sol_heatmaps(h, first, suptitle="RMSNorm bf16 on the H200: % of datasheet bandwidth, gluon-tma vs the strongest baselines")
fig = plots.sol_heatmaps(h, [l for l in labels if l not in first],
                         suptitle="RMSNorm bf16: % of datasheet bandwidth (eager, plain Triton, TMA-store path, copy)")
slow_copy = copies[copies.sol_datasheet_pct < 70]
if len(slow_copy):
    same = rms[rms.set_index(["M", "N"]).index.isin(slow_copy.set_index(["M", "N"]).index)]
    fast = same.groupby("label")["sol_datasheet_pct"].min().sort_values(ascending=False)
    display(Markdown(f"**Caveat, measured not explained:** the graph-timed `y.copy_(x)` reads only "
                     f"{slow_copy.sol_datasheet_pct.min():.0f}-{slow_copy.sol_datasheet_pct.max():.0f}% at "
                     + ", ".join(f"{int(r.M)}x{int(r.N)}" for r in slow_copy.itertuples())
                     + ", while at those cells RMSNorm reaches at least " + ", ".join(f"{v:.0f}% ({k})" for k, v in fast.head(4).items())
                     + f" in the same run, and the 2 GiB do_bench copy (the ceiling behind `sol_measured_pct`) reached "
                     f"{100 * ceil['copy_gbps'] / spec.hbm_gbps:.0f}%. The per-shape copy is one torch kernel, not a bound."))
cav = nbk.graph_output_caveat(pd.concat([rms, copies]))
if cav:
    display(Markdown(cav))

# %% [markdown]
# Seed-format tables — each cell: `baseline SOL% -> gluon-tma SOL% (speed change)`:

# %%
rv = rms.copy(); rv["variant"] = rv["label"]
base_only = rv[~rv["variant"].str.startswith("gluon")]
best = base_only.loc[base_only.groupby(["M", "N"])["ms_median"].idxmin()].copy()
best["variant"] = "best baseline"
for b in ("inductor", "inductor-max-autotune", "best baseline"):
    display(Markdown(f"**{b} -> gluon-tma**"))
    display(plots.delta_table(pd.concat([rv, best]), b, "gluon-tma"))
display(Markdown("**which baseline is best per cell**"))
display(base_only.loc[base_only.groupby(["M", "N"])["ms_median"].idxmin()].pivot(index="M", columns="N", values="variant"))

# %% [markdown]
# ## 5. LayerNorm, add+RMSNorm, L2Norm (bf16, same grid, same run)

# %%
summary = []
for op in ("layer_norm", "add_rms_norm", "l2_norm"):
    g = grid_of(op)
    if not len(g):
        display(Markdown(f"**{op}: missing**")); continue
    g["variant"] = g["label"]
    vs = [v for v in ("torch", "inductor", "triton", "liger", "gluon-tma") if v in set(g.variant)]
    plots.sol_heatmaps(g, vs, suptitle=f"{op} bf16: % of datasheet bandwidth")
    b = g[~g.variant.str.startswith("gluon")]
    bb = b.loc[b.groupby(["M", "N"])["ms_median"].idxmin()].copy(); bb["variant"] = "best baseline"
    display(Markdown(f"**{op}: best baseline -> gluon-tma**"))
    display(plots.delta_table(pd.concat([g, bb]), "best baseline", "gluon-tma"))

# %% [markdown]
# ## 6. Roofline: every variant, every op

# %%
grids = pd.concat([grid_of(op) for op in ("rms_norm", "layer_norm", "add_rms_norm", "l2_norm")])
grids["variant"] = grids["label"]
ceil_rows = allrec[(allrec["pattern"] == "ceiling") & (allrec["run_id"] == run_id) & allrec["M"].isna()]
plots.roofline(pd.concat([grids, ceil_rows]), spec, ceil, title=f"Roofline on {slug}: norms (bf16) and the matmul ceiling");

# %% [markdown]
# ## 7. Knobs: warps, rows per CTA, store path, box shape, cached weight
#
# The heuristic's numbers come from these sweeps (RMSNorm bf16 and LayerNorm bf16, M = 16384). They
# were measured with an earlier revision of the kernel module (the NaN-propagation fix and the
# heuristic itself changed its source since), so they are flagged stale: they justify the heuristic,
# the grid above measures its result. **Timers:** the sweeps ran under the first timer policy (graph
# below ~100 µs, `do_bench` above); the grid later showed that `do_bench` can put gluon-tma's host time
# (Python-built descriptors) on the clock at these sizes, so differences of a few percent in the
# `do_bench` rows are not resolved. The timer of each N is printed below.

# %%
sw = nbk.newest_run(allrec, nbk.config_value(allrec, "study") == "sweep").copy()
if len(sw):
    for k in ("num_warps", "rows_per_cta", "tma_store", "one_box", "param_tma"):
        sw[k] = nbk.config_value(sw, k)
    print(f"sweep run {sw.run_id.iloc[0]}: {len(sw)} configs, {int(sw.stale.sum())} stale, all passed: {bool(sw.passed.all())}")
    print("timers by N:", {int(k): v for k, v in sw.groupby("N")["timer"].agg(lambda t: ", ".join(sorted(set(t)))).items()})
    best_plain = sw[~sw.tma_store].groupby(["N", "num_warps", "rows_per_cta"])["sol_datasheet_pct"].max().unstack("rows_per_cta")
    display(Markdown("**best SOL % (plain stores) by N, warps (rows) and rows per CTA (columns)**"))
    display(best_plain.round(1))
    eff = []
    for k in ("tma_store", "one_box", "param_tma"):
        piv = sw.pivot_table(index=["N", "num_warps", "rows_per_cta"] + [x for x in ("tma_store", "one_box", "param_tma") if x != k],
                             columns=k, values="ms_median")
        r = (piv[False] / piv[True]).groupby(level="N").median()
        eff.append(r.rename(f"{k}=True speed vs False (median ratio)"))
    display(pd.concat(eff, axis=1).round(3))
else:
    display(Markdown("**Sweep: missing**"))
ln = nbk.newest_run(allrec, nbk.config_value(allrec, "study") == "ln-sweep").copy()
if len(ln):
    for k in ("num_warps", "rows_per_cta", "param_tma"):
        ln[k] = nbk.config_value(ln, k)
    display(Markdown("**LayerNorm: SOL % by N, warps, rows per CTA, cached weight+bias**"))
    display(ln.pivot_table(index=["N", "num_warps"], columns=["rows_per_cta", "param_tma"], values="sol_datasheet_pct").round(1))
    print("LayerNorm sweep timers by N:", {int(k): v for k, v in ln.groupby("N")["timer"].agg(lambda t: ", ".join(sorted(set(t)))).items()})


# %% [markdown]
# ## 8. Targets (issue #3), checked against the records above

# %%
def ratio_table(op):
    g = grid_of(op); g = g[g.label != "gluon-tma (TMA store)"]
    piv = g.pivot_table(index=["M", "N"], columns="variant", values="ms_median")
    base = [c for c in piv.columns if not c.startswith("gluon")]
    return piv, piv[base].min(axis=1) / piv["gluon-tma"]

checks = []
piv, vs_best = ratio_table("rms_norm")
sol = grid_of("rms_norm").query("label == 'gluon-tma'").set_index(["M", "N"])["sol_measured_pct"]
big = [k for k in sol.index if k[0] * k[1] >= 64 * 2**20]
checks.append(("RMSNorm: gluon-tma >= best baseline in every cell (>= 0.98 ties)",
               f"{int((vs_best >= 0.98).sum())}/{len(vs_best)} cells; worst {vs_best.min():.3f}x", bool((vs_best >= 0.98).all())))
g_ind = plots.geomean(piv["inductor"] / piv["gluon-tma"])
checks.append(("RMSNorm: geomean >= 1.05x torch.compile default", f"{g_ind:.3f}x", g_ind >= 1.05))
checks.append(("RMSNorm: >= 95% of the copy ceiling where M*N >= 64M",
               f"{int((sol[big] >= 95).sum())}/{len(big)} cells; min {sol[big].min():.1f}%", bool((sol[big] >= 95).all())))
for op in ("layer_norm", "add_rms_norm"):
    piv, vb = ratio_table(op)
    gi = plots.geomean(piv["inductor"] / piv["gluon-tma"])
    checks.append((f"{op}: geomean >= 1.15x torch.compile", f"{gi:.3f}x", gi >= 1.15))
    checks.append((f"{op}: >= best baseline in every cell", f"{int((vb >= 0.98).sum())}/{len(vb)} cells; worst {vb.min():.3f}x",
                   bool((vb >= 0.98).all())))
targets = pd.DataFrame(checks, columns=["target", "measured", "met"])
display(targets)

# %% [markdown]
# ## 9. Takeaways (computed from the data shown)

# %%
lines = []
for op in ("rms_norm", "layer_norm", "add_rms_norm", "l2_norm"):
    piv, vb = ratio_table(op)
    g = grid_of(op).query("label == 'gluon-tma'")
    lines.append(f"- **{op}**: gluon-tma {g.sol_datasheet_pct.min():.1f}-{g.sol_datasheet_pct.max():.1f}% of datasheet "
                 f"({g.sol_measured_pct.min():.1f}-{g.sol_measured_pct.max():.1f}% of the measured copy ceiling); "
                 f"vs best baseline geomean {plots.geomean(vb):.3f}x (wins or ties in {int((vb >= 0.98).sum())}/{len(vb)} cells), "
                 f"vs torch.compile {plots.geomean(piv['inductor'] / piv['gluon-tma']):.3f}x, vs eager {plots.geomean(piv['torch'] / piv['gluon-tma']):.2f}x.")
if len(ik):
    lines.append("- Inductor reads the reused row from global memory " +
                 ", ".join(f"{r['global reads of the reused row']}x for {r['op']}" for _, r in ik.drop_duplicates('op').iterrows()) +
                 " (looped reductions, first read `evict_last`); on the H200's 50 MB L2 those re-reads are nearly free, "
                 "so reading x once (gluon-tma) does not by itself beat it.")
if len(sw):
    for n in sorted(sw.N.unique()):
        w = sw[sw.N == n].groupby("num_warps")["sol_datasheet_pct"].max()
        spread = w.max() - w.min()
        if len(w) < 2:
            lines.append(f"- Sweep N={int(n)}: only {int(w.index[0])} warps fit the row; best {w.iloc[0]:.1f}%.")
            continue
        lines.append(f"- Sweep N={int(n)} ({', '.join(sorted(set(sw[sw.N == n].timer)))}): best per warp count "
                     + ", ".join(f"{k} warps {v:.1f}%" for k, v in w.items())
                     + (f" — a {spread:.1f}-point spread, within what this sweep resolves." if spread < 2 else
                        f" — {w.idxmax()} warps lead by {spread:.1f} points."))
    piv = sw.pivot_table(index=["N", "num_warps", "rows_per_cta", "one_box", "param_tma"], columns="tma_store", values="ms_median")
    r = (piv[False] / piv[True]).groupby(level="N").median()
    lines.append("- TMA store vs plain 128-bit stores, median speed ratio per N: " + ", ".join(f"{int(k)}: {v:.3f}x" for k, v in r.items())
                 + " — the TMA-store path is not a win for this bandwidth-bound norm.")
lines.append("- What would close the remaining gap: overlap the next row's copy with this row's passes inside a CTA "
             "(an mbarrier ring, pattern 3) instead of relying on other CTAs on the SM to hide it.")
display(Markdown("\n".join(lines)))
