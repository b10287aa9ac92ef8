# ---
# jupyter:
#   gluon_lab:
#     pattern: Chunked non-power-of-2 reductions
#     summary: Cuts a row of any length into power-of-2 chunks, TMA-copies each into its own
#       shared-memory slot (the hardware zero-fills the tail) and masks only where zeros would bias the
#       result, streaming rows too long to cache. It buys Gluon norms for real hidden sizes such as
#       2880, 5120 or 14336 without padding the row to the next power of two, and GroupNorm and
#       InstanceNorm from the same machinery.
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
# # 02 — Chunked non-power-of-2 reductions
#
# Gluon and Triton register tiles are powers of two; real hidden sizes are not (2880, 3584, 5120, 7168,
# 14336...). A one-row Triton kernel pads the row to `BLOCK = next_power_of_2(N)`: at N = 5120 that is
# 8192 lanes, 37.5% of them masked, and the whole padded row sits in registers.
#
# The chunked pattern cuts the row into `NUM_CHUNKS = cdiv(N, CHUNK)` power-of-2 chunks, one register
# tile each (`CHUNK = 16-byte vector x 32 lanes x warps`), TMA-copies every chunk into its own
# shared-memory slot (`[NUM_CHUNKS, R, CHUNK]`, R rows per CTA), all on one mbarrier. The last box runs
# past the row end and **TMA zero-fills it** (bounds are per descriptor dimension, so it never reads the
# next row). Both passes walk the chunks from shared memory. Zeros are harmless in Σx and Σx², but not in
# LayerNorm's centred variance: each padded lane would add (0 − mean)², so the last chunk is masked there
# and in the stores.
#
# Rows whose cached copy would exceed 100 KB of shared memory **stream**: a ring of chunk slots, each
# with its own mbarrier, carries the row through twice (pass 1: statistics; LayerNorm by Chan-merged
# per-chunk moments of x − K, K = the first chunk's mean; pass 2: normalize and store). The second read
# comes from L2 or HBM. GroupNorm and InstanceNorm reuse the machinery: a (sample, group) is a 2-D region
# of boxes.

# %% tags=["parameters"]
mode = "auto"              # "auto": measure on an sm_90+ GPU, else replay; "measure" | "replay" force it
quick = False              # measure mode only: a small grid (smoke run)
results_dir = None         # None: the repository's results/; else a path (relative to the cwd) to read/append
gpu = None                 # replay: results/<gpu>/ to show (None -> "h200")
run = None                 # replay: show only this run (id, unique prefix, "newest"); None: each section its newest run
compare_to = None          # the "Compare runs" section: run A (None: the newest earlier run sharing cases with the shown run)
parts = ["bf16", "fp32", "others", "chunk", "stream", "groupnorm"]  # measure mode: parts of the plan

# %%
from gluon_lab.analysis import chunked as ana, common as cm

ctx = cm.setup(ana.NB, mode=mode, gpu=gpu, results_dir=results_dir, run=run, quick=quick)
spec, slug = ctx.spec, ctx.slug
PLAN = ana.plan()
print(ctx.describe())

# %% [markdown]
# ## 1. Measure (GPU) or replay (CPU)
#
# `gluon_lab.experiments.run_chunked` is the plan; `python -m gluon_lab bench 02-chunked-reductions
# --parts ...` runs the same function in a batch on the lent H200. Every run measures the copy and
# matmul ceilings first. All timings use the CUDA-graph timer over rotated inputs (> 3x L2), so L2 is
# cold and host launch time is off the clock. Sections pick the newest run holding their data; records
# whose kernel source changed since are flagged stale and not used for conclusions.

# %%
if ctx.run_mode == "measure":
    print("appended", ana.measure(ctx, quick=quick, parts=parts))
allrec = cm.load(ctx)
cm.show(cm.overview(ctx, allrec))
cur = cm.current(allrec)

# %% [markdown]
# ## 2. The kernel
#
# One program handles `R` rows (`R` = the box's first dimension). `N` arrives as a runtime value in
# 16-byte vectors (`N_v = N / VEC`): one compile serves every N with the same `NUM_CHUNKS`, and the
# compiler can prove every masked access is 128-bit.

# %% tags=["fold"] fold_summary="kernel source: gluon_lab/kernels/chunked.py (chunked_norm_kernel)"
print(ana.kernel_source())

# %% tags=["fold"] fold_summary="shared arithmetic: gluon_lab/kernels/norm_math.py (chunk_sum_sq_dev, layer_row)"
print(ana.norm_math_sources())

# %% [markdown]
# ### The chunk plan for the N set of this notebook (real hidden sizes; computed on this CPU)
#
# `waste` is the padded share of the last chunk; `pow2 waste` is what `next_power_of_2(N)` padding costs.

# %% tags=["fold"] fold_summary="heuristic source: ChunkPlan.for_row (gluon_lab/kernels/chunked.py)"
print(ana.plan_source())

# %%
plan_tab = ana.plan_table(PLAN.Ns + (131072, ))
plan_tab

# %% [markdown]
# ## 3. Codegen evidence: chunked Gluon vs the "pad to next power of two" Triton kernel (sm_90, this CPU)
#
# What the pattern promises: x arrives only by TMA (`UTMALDG`, no `ld.global` of x); the only
# `ld.global` left are weight/bias chunks; all global accesses stay 128-bit for any N (N is passed in
# vectors); no spills. The Triton kernel holds `next_pow2(N)` elements per row in registers: its
# predicated loads cover the padded lanes, and past ~16K elements it spills.

# %%
cm.show(ana.census_view(ana.census_table(Ns=(2880, 5120, 14336, 24576))))

# %% [markdown]
# ## 4. bf16 RMSNorm and LayerNorm over the N set — every variant, one run
#
# Headline: gluon-chunked's speed against the fastest baseline of each cell (torch eager, torch.compile,
# the one-row Triton kernel, Liger), by N and M; the table behind it (SOL % of the datasheet bandwidth
# for both) is folded below the figure.

# %% tags=["headline-numbers"]
cm.show(cm.headline(ana.headline_numbers(cur)))

# %% tags=["headline"]
heads = ana.headline(cur)
fig = ana.headline_figure(heads)

# %% tags=["fold"] fold_summary="the headline's numbers per cell: SOL %, best baseline, speedups"
cm.show(ana.headline_items(heads))

# %%
for op in ana.HEADLINE_OPS:
    cm.show(ana.grid_section(cur, op))

# %% [markdown]
# ## 5. fp32, and L2Norm / add+RMSNorm (bf16, M = 16384)

# %%
for op, dt in ana.OTHER_CASES:
    cm.show(ana.other_section(cur, op, dt))

# %% [markdown]
# ## 6. The CHUNK sweep (warps x rows per CTA), bf16, M = 16384
#
# `CHUNK = VEC x 32 x warps`. The heuristic takes the largest tile up to 8 warps whose padding stays
# <= 12.5%, and 2 rows per CTA while a row is <= 8 KB; then 16 warps (a 4096-element chunk) when
# shared memory caps an SM below 48 resident warps — the rule this sweep measured (16 warps was swept
# for N >= 8192 only). The sweep was not re-run after that change: shown from its run, marked STALE.

# %%
sw = ana.chunk_sweep(cur)
if not len(sw):  # not re-measured with the current code: the newest sweep, marked STALE
    sw = ana.chunk_sweep(allrec)
    if len(sw):
        cm.show(ana.stale_study_note(sw, "CHUNK sweep"))
cm.show(ana.heuristic_vs_best(sw) if len(sw) else "**CHUNK sweep: missing**")

# %% tags=["fold"] fold_summary="the whole CHUNK sweep: SOL % by (op, N) and (warps, rows per CTA)"
cm.show(ana.sweep_view(sw))

# %% [markdown]
# ## 7. Where streaming takes over (bf16 and fp32, M = 4096)
#
# Cached (whole row in shared memory, one CTA per row, as long as it fits at all) vs streaming through a
# ring of 2/4/8 chunk slots, next to the baselines that can take the row (the Triton one-row kernel and
# Liger stop at 65536 elements: register tile limit) and a copy of the same bytes. Streaming reads the
# row twice: its SOL % (counted on one read + one write) tops out near two thirds of the copy's. The
# streamed statistics stay in per-lane registers and are reduced once per row (a CTA-wide
# reduction per 4 KB chunk before): the ~55% plateau did not move, so the second read, not the
# reductions, is what bounds it. The crossover sits at the same ~100 KB of cached row in both dtypes.

# %%
for dt in PLAN.stream_dtypes:
    st, copies = ana.stream_records(cur, PLAN, dt)
    if not len(st):  # not re-measured with the current code: show the newest study, marked STALE
        st, copies = ana.stream_records(allrec, PLAN, dt)
        if len(st):
            cm.show(ana.stale_study_note(st, f"{dt} streaming study"))
    if len(st):
        cm.show(ana.stream_figure(st, copies), ana.stream_view(st), ana.refused(st))
    else:
        cm.show(f"**{dt} streaming study: missing**")

# %% [markdown]
# ## 8. GroupNorm and InstanceNorm on SD-UNet / SD-VAE activations (bf16, B = 1, 2, 8, 16, G = 32)
#
# **gluon-chunked**: one CTA per (sample, group). A (sample, group) is a rectangle of a 2-D view of x: in
# NCHW the group's Cg = C/G channel rows of H·W elements, [1, CHUNK] TMA boxes along H·W (the tail
# zero-filled); in channels-last S spatial rows of the group's Cg channels, boxes starting at the
# 16-byte vector that holds the group's first channel (a TMA box must start 16-byte aligned: starting
# at channel g·Cg was the "illegal instruction" of its first H200 run, located by compute-sanitizer on
# that copy). Cached when the group fits in 100 KB, else streamed through an 8-slot ring; the
# statistics are per-lane shifted sums reduced once.
#
# **gluon-split**: a group split across CTAs (two-phase reduction): stats (per-slice shifted sums per
# column of the reduction) → finalize (sum the K slices, merge a group's columns by Chan's formula) →
# apply (y = x·a + b', slices in reverse order so the last-read ones are still in L2). Every SM gets
# work when B·G is small; x is read twice.

# %%
gn = ana.group_records(cur)
cm.show([ana.group_runs(gn), ana.group_figure(gn), ana.group_view(gn)] if len(gn)
        else "**GroupNorm / InstanceNorm: missing**")

# %% tags=["fold"] fold_summary="sm_90 census of the GroupNorm kernels (compiled here, on the CPU)"
cm.show(ana.census_view(ana.group_census_table()))

# %% tags=["fold"] fold_summary="heuristic source: GroupPlan.make (gluon_lab/kernels/chunked.py)"
print(ana.group_plan_source())

# %% [markdown]
# ## 9a. Small M, mid N: gluon-chunked's CHUNK x rows against Liger, QuACK, torch.compile
#
# At M = 2048 / 4096 the grid above has few rows per SM (a handful of waves of CTAs), and the peers
# read x once from registers (Liger, QuACK: one row per program, 4-16 warps; QuACK 64-128 threads a
# row, no cluster below N = 16K) where gluon-chunked caches the row in shared memory. The study sweeps
# warps x rows per CTA with the peers in the same run; `peer / heuristic` >= 1 means the config the
# current code picks leads. The finding (16 warps at N = 14336, R = 2 at 2048 x 6144) is recorded in
# `ChunkPlan.for_row` but not adopted: `ChunkPlan` is in GroupNorm's code hash, and no grid cell
# changes side with it.

# %%
mid = ana.mid_n_study(cur)
cm.show(mid if len(mid) else "No run of the current code holds the mid-n study.")

# %% [markdown]
# ## 9b. The every-gluon scoreboard: best Gluon variant vs best peer
#
# Per cell of the bf16 odd-N grid (gluon-chunked, -pipelined and -ws side by side in one run), the
# bf16 add+RMSNorm / L2Norm grid and the fp32 grid: `ratio` = best peer µs ÷ best gluon µs (≥ 1:
# Gluon leads). Targets: every cell ≥ 1.0×; geomean ≥ 1.05× (RMSNorm, add+RMSNorm) and ≥ 1.3×
# (LayerNorm). A QuACK case that ran and failed is a failed record of the run, not a peer result.

# %% tags=["scoreboard"]
cm.show(ana.scoreboard_view(cur))

# %% [markdown]
# ## 9. Targets, checked against the records above
#
# Green: met, red: missed. "Fastest baseline" is the fastest of eager PyTorch, torch.compile, the
# one-row Triton kernel and Liger in each cell of the same run.

# %% tags=["targets"]
cm.show(ana.targets_view(cur))

# %% [markdown]
# ## 10. Takeaways (computed from the data shown)

# %% tags=["takeaways"]
cm.show(cm.takeaways(ana.takeaways(cur)))

# %% [markdown]
# ## Compare runs
#
# Per-case time ratios of two runs of this notebook (time B / time A; below 1.0 run B is faster), to
# judge a kernel change against the previous run. Run B is the run shown (parameter `run`, default
# the newest), run A the parameter `compare_to` (default: the newest earlier run sharing cases with
# B). `code` says whether the variant's kernel source changed between the two records. The same
# from a shell: `python -m gluon_lab compare NOTEBOOK RUN_A RUN_B`.

# %%
cm.show(cm.compare_runs(ctx, compare_to))
