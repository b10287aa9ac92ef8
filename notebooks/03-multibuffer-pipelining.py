# ---
# jupyter:
#   gluon_lab:
#     pattern: Multi-buffer pipelining
#     summary: A persistent grid walks its row blocks (or a GEMM's k-steps) through a ring of
#       shared-memory slots, each with its own mbarrier, so the copies of the next blocks are in flight
#       while the current one is computed. It buys overlap of memory and compute inside one CTA, shown
#       here on a measured timeline, on the norm grids and on a TMA + wgmma GEMM against cuBLAS.
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
# # 03 — Multi-buffer pipelining
#
# The one-row-per-CTA kernels of notebooks 01 and 02 (`gluon-tma`, `gluon-chunked`) issue a row's TMA
# copy, **wait for it**, compute, store and exit. Inside a CTA nothing overlaps the copy; the SM only
# hides it by running other CTAs at the same time.
#
# Pattern 3 makes the overlap explicit. A **persistent** grid (about `ctas_per_sm` CTAs per SM) walks the
# row blocks `p, p + grid, p + 2·grid, …` through a **ring of `NUM_STAGES` shared-memory slots**, each slot
# with **its own mbarrier**. Block `i` lives in slot `i % NUM_STAGES`, and the wait for it uses the phase
# `(i // NUM_STAGES) & 1`: the barrier flips once per fill, so the same barrier can be reused lap after
# lap without re-initialising it. Before computing block `i` the CTA issues the copy of block
# `i + NUM_STAGES − 1` into the slot block `i − 1` has just released: `NUM_STAGES − 1` copies are in flight
# while one block is reduced, normalized and stored. The weight (and bias) are TMA-loaded **once per CTA**
# on their own barrier, not once per row. `NUM_STAGES = 1` is the no-overlap reference: issue, wait,
# compute, in turn.
#
# The same ring drives the K loop of a **TMA + wgmma GEMM** (`gluon-pipelined` for `matmul`): persistent
# over output tiles in GROUP_M-grouped order (row tiles that share a column band of B run together, so
# B stays in L2), one `[BM, BK]` and one `[BK, BN]` box per k-step into the ring, asynchronous `wgmma`
# with one MMA group in flight (after `warpgroup_mma_wait(1)` the MMA of step k−1 has retired, so its slot
# is refilled), the k-step counter running **across** tiles so the ring never drains between tiles, and an
# epilogue that stages C in shared memory and leaves by TMA store, overlapped with the next tile's
# main loop.

# %% tags=["parameters"]
mode = "auto"              # "auto": measure on an sm_90+ GPU, else replay; "measure" | "replay" force it
quick = False              # measure mode only: a small grid (smoke run)
results_dir = None         # None: the repository's results/; else a path (relative to the cwd) to read/append
gpu = None                 # replay: results/<gpu>/ to show (None -> "h200"); measure: the GPU present
run = None                 # replay: show only this run (id, unique prefix, "newest"); None: each section its newest run
compare_to = None          # the "Compare runs" section: run A (None: the newest earlier run sharing cases with the shown run)
parts = ["norms", "stages", "others", "gemm", "gemm-sweep", "pipe-sweep", "ws-sweep", "fence", "timeline"]  # measure mode
stale = "flag"             # "flag": show records whose kernel source changed since, marked STALE; "drop": leave them out

# %%
from gluon_lab.analysis import common as cm, norm_grids as ng, pipelined as ana, timeline as tl
from gluon_lab.analysis import gemm_grid as gg  # the GEMM grid vs cuBLAS and its tile sweeps

ctx = cm.setup(ana.NB, mode=mode, gpu=gpu, results_dir=results_dir, run=run, quick=quick, max_columns=40, max_rows=200, max_colwidth=160)
spec, slug = ctx.spec, ctx.slug
print(ctx.describe(), f" stale records: {stale}")

# %% [markdown]
# ## 0. Measure (GPU) or replay (CPU)
#
# `gluon_lab.experiments.run_pipelined` is the plan; `python -m gluon_lab bench 03-multibuffer-pipelining
# --parts ...` runs the same function in a batch on the lent H200. Every run measures its own ceilings
# first (a large device copy and a large bf16 `torch.matmul`; the sizes are printed with them below). Each section below picks the **newest
# run that holds its data** and names it. Records whose kernel source has changed since they were measured
# are **STALE**: with `stale="flag"` they are shown and marked, with `stale="drop"` they are left out.

# %%
if ctx.run_mode == "measure":
    print("appended", ana.measure(ctx, quick=quick, parts=parts))
allrec = cm.load(ctx)
use = cm.keep(allrec, stale)  # what every section below reads
cm.show(cm.overview(ctx, allrec), cm.stale_records(allrec))

# %% [markdown]
# ## 1. The pattern in code
#
# ### The norm: `pipelined_norm_kernel`
#
# A ring slot holds `R` rows as `NUM_CHUNKS` power-of-2 `[R, CHUNK]` boxes (pattern 2's chunking: any N
# with `N·itemsize % 16 == 0`, the last box zero-filled by TMA). `_load_block` puts **one** `expect` with
# every box's bytes on the slot's barrier and issues the boxes; the main loop refills, waits on
# `(slot, phase)`, computes from shared memory and stores with 128-bit `st.global`. The `INSTRUMENT`
# build adds three `%globaltimer` reads per block (section 2).

# %% tags=["fold"] fold_summary="kernel source: gluon_lab/kernels/pipelined.py (_load_block, pipelined_norm_kernel)"
print(ana.kernel_source("_load_block", "pipelined_norm_kernel"))

# %% [markdown]
# The host side picks the knobs (rows per slot, ring depth, CTAs per SM) from N, the dtype and, in the
# current source, M. The config each record ran with is stored in the record, so tables below show what
# was measured, and the sweep section compares it with what this heuristic picks now.

# %% tags=["fold"] fold_summary="heuristic source: PipeConfig.heuristic (gluon_lab/kernels/pipelined.py)"
print(ana.kernel_source("PipeConfig.heuristic"))

# %% [markdown]
# ### The GEMM: `persistent_gemm_kernel`
#
# Same ring, K loop instead of rows: `tma_k_step` (the template's TMA producer, `kernels/igemm/producers.py`) fills a slot with the A and B boxes of one k-step of
# one tile. The load stream runs `NUM_STAGES − 1` k-steps ahead of the MMAs, across tile boundaries, and
# `_next_k_step` advances its (k-step, tile) position incrementally: the MMA warps issue the loads
# themselves, and per-step integer divisions on that path cost issue slots (the first H200 run, with
# them, read 0.84x cuBLAS at 8192³).

# %% tags=["fold"] fold_summary="kernel source: gluon_lab/kernels/igemm/producers.py (tma_k_step), gluon_lab/kernels/gemm.py (_next_k_step, persistent_gemm_kernel)"
print(ana.kernel_source("tma_k_step", "_next_k_step", "persistent_gemm_kernel"))

# %% [markdown]
# ## 2. The ring, measured: one CTA's timeline for NUM_STAGES = 1 vs 3
#
# An `INSTRUMENT` build of `gluon-pipelined` RMSNorm writes three `%globaltimer` stamps per block for the
# first programs: **before** the slot wait, when the data is **ready** (wait returned), and when the block's
# stores are **issued**. `ready − before` is time the CTA stalls on its copy; `stored − ready` is compute
# plus store issue. These are **measured on the GPU** (`experiments.capture_timeline`, second launch after a
# compile launch), not simulated. Stamps are ns relative to the earliest one.

# %%
TL = tl.load_timeline(ctx)
tl_stats = tl.timeline_stats(TL)
cm.show(tl.timeline_note(ctx, TL, allrec, stale), tl.timeline_table(tl_stats))

# %%
cm.show(tl.timeline_gantt(TL, tl_stats), tl.timeline_gantt(TL, tl_stats, zoom=True), tl.finish_figure(TL, tl_stats))

# %% [markdown]
# What to read: with one slot every block's copy is issued only after the previous block is done, so
# each block begins with a red stall as long as the DRAM round trip. With three slots the copy of block
# `i + 2` is in flight during block `i`: the stall shrinks and the period follows compute + store. The
# grey gap between a block's stores and the next wait is issue-side work (refill, barrier, fence) that
# the ring does not hide.
#
# Consistency check against the timed records: bandwidth the stamps imply (x read + y written), from the
# median and the mean block period (× grid size, as if every CTA kept that pace) and, when every CTA was
# traced, from the whole launch (first stamp to the last CTA's last store issue). Stores still in flight
# after the last stamp and the launch itself are not in the stamps.

# %%
chk = tl.timeline_check(TL, tl_stats, use, allrec, spec)
cm.show(cm.table(chk))
if len(chk):
    print(tl.timeline_check_notes(chk, tl_stats, spec))

# %% [markdown]
# ## 3. Codegen census on sm_90 (compiled on this CPU)
#
# Static counts (lines of PTX / SASS, not executed instructions). For the norm: RMSNorm bf16 at N = 4096
# and 5120 with `NUM_STAGES` 1…4 (the other knobs from the current heuristic). The prologue issues
# `NUM_STAGES − 1` fills (unrolled) and the loop one, plus the weight once, so the copies **per ring fill**
# are `(TMA copies − weight copies) / NUM_STAGES`; it should equal `NUM_CHUNKS` (one box per chunk).
# Shared memory grows by one slot per stage; the barriers do not multiply in the code (one wait site for
# the ring, one for the weight).

# %% tags=["fold"] fold_summary="norm census: RMSNorm N = 4096, 5120 x NUM_STAGES 1-4 (PTX / SASS counts)"
norm_census, errors = ana.norm_census(Ns=(4096, 5120), stages=(1, 2, 3, 4))
if errors:
    print("\n".join(errors))
cm.show(ana.census_view(norm_census))

# %% [markdown]
# For the GEMM: the default config (its warps form consumer warpgroups stacked along M), the smaller
# tile the heuristic takes when the default tile gives less than one wave of tiles (here for a 2048²
# output), and the warp-specialized `gluon-ws` (pattern 4: a producer warp with `setmaxnreg`, empty/full barrier
# pairs). `wgmma per k-step per CTA` = BM·BN·BK / (m·n·k of the instruction shape), i.e. static wgmma sites
# × warpgroups.

# %% tags=["fold"] fold_summary="GEMM census: default tile, the 2048² heuristic tile, gluon-ws (PTX / SASS counts)"
gemm_census, errors = ana.gemm_census()
if errors:
    print("\n".join(errors))
cm.show(ana.census_view(gemm_census))

# %% [markdown]
# ## 4. The norm grid: RMSNorm and LayerNorm bf16, every variant, one run
#
# M ∈ {256 … 32768} × N ∈ {4096, 5120, 8192, 16384}. The reference at each cell is the **copy ceiling**:
# a `y.copy_(x)` of the same (M, N) timed the same way in the same run (per-shape copy). Where
# M·N ≥ 64 Mi elements the reference is **max(per-shape copy, the run's 2 GiB session copy)** — the next
# cell shows why. `% of ceiling` = GB/s ÷ that reference; `SOL %` columns are of the datasheet bandwidth.

# %%
grids = ng.norm_grids(use)  # {op: one run's grid with its copy reference and pct_ceiling}
ct, ce = ng.grid_ceiling(use, grids)
cm.show(ng.grid_notes(ctx, grids, stale=stale))
if ce:
    print(ng.session_line(ng.grid_run(grids), ce))

# %% tags=["fold"] fold_summary="the copy reference of every cell (per-shape copy, session copy, which one counts)"
cm.show(cm.table(ct.sort_index().round(1)))

# %%
big = ng.big_cells(grids, ct)
cm.show(ng.big_cells_views(grids, big, ce))
if ng.lift_line(big, ce):
    print(ng.lift_line(big, ce))

# %% [markdown]
# ### Headline: gluon-pipelined vs the best baseline, cell by cell
#
# Speed of gluon-pipelined over the fastest baseline of each cell (eager, torch.compile default and
# max-autotune, Triton, Liger): green faster, red slower, pale ≈ 1. Below it, both in % of the copy
# ceiling, then every variant on its own.

# %% tags=["headline-numbers"]
cm.show(cm.headline(ana.headline_numbers(grids, use)))

# %% tags=["headline"]
fig = ng.headline_figure(grids, slug)

# %%
cm.show(ng.grid_figure(grids, slug))

# %%
cm.show(ng.variant_maps(grids, "gluon-chunked", "gluon-pipelined"))

# %% [markdown]
# ## 5. Targets, cell by cell
#
# * gluon-pipelined ≥ gluon-tma (power-of-2 N, where gluon-tma exists) and ≥ the best baseline (torch,
#   torch.compile, Triton, Liger) in every cell;
# * at M ≤ 4096: ≥ 1.10× the one-row-per-CTA kernel (the faster of gluon-tma and gluon-chunked in the
#   cell) — or show why it cannot: `row blocks per CTA` is computed from the recorded config; at ≤ 1
#   block per CTA a persistent ring has nothing to overlap inside a CTA;
# * ≥ 97% of the copy ceiling where M·N ≥ 64 Mi elements.
#
# `met` is strict (ratio ≥ target); `within 2%` counts near-misses separately. No tolerance is folded
# into `met`. Each grid cell holds the measured ratio (or % of ceiling): green met, red missed, grey
# where the target does not apply.

# %% tags=["targets"]
targets = ng.target_tables(grids, spec)
summary = ng.target_summary(targets)
cm.show(ng.target_views(ctx, grids, targets, summary, stale))

# %% tags=["fold"] fold_summary="the numbers behind the target grids, cell by cell"
cm.show(ng.target_details(grids, targets))

# %% [markdown]
# ### The every-gluon scoreboard: the best Gluon variant against the best peer
#
# The lab's question across patterns 1–4: per cell, is the *fastest* Gluon variant (gluon-tma,
# -chunked, -pipelined, -ws, all in this grid's run) at least as fast as the *fastest* peer (torch,
# torch.compile default and max-autotune, Triton, Liger, QuACK when it ran)? `ratio` = best peer µs ÷
# best gluon µs (≥ 1: Gluon leads). Targets: every cell ≥ 1.0×, geomean ≥ 1.05× (RMSNorm,
# add+RMSNorm) and ≥ 1.3× (LayerNorm), ≥ 97% of the copy ceiling where M·N ≥ 64 Mi. A peer that ran
# but failed every case is named below, not silently dropped.

# %% tags=["scoreboard"]
boards = ng.scoreboards(use, grids)
cm.show(ng.failed_peers(grids), cm.scoreboard_summary(boards))
cm.show(cm.target_list(ng.scoreboard_targets(boards)))
for op in ("rms_norm", "layer_norm"):
    if op in boards:
        print(op, "— best peer µs / best gluon µs")
        cm.show(cm.scoreboard_grid(boards[op]))

# %% tags=["fold"] fold_summary="the scoreboards cell by cell: which variant was best on each side"
cm.show(*[cm.table(t.round(3)) for t in boards.values()])

# %% [markdown]
# ## 6. How deep a ring? NUM_STAGES 1…4, and the occupancy knobs
#
# The `stages` study times `gluon-pipelined` RMSNorm with 1, 2, 3 and 4 slots over the whole grid, every
# other knob as the heuristic set it in that run. Where a CTA gets at most one row block (small M, see
# `row blocks per CTA` in section 5) a deeper ring has no second block to overlap; a gain from 1 to 2
# stages there comes from the prologue (read it in the source of section 1): with `NUM_STAGES = 1` the
# first copy of x is issued inside the loop, after the weight's wait, so the weight and x latencies add
# up; with 2 or more stages x's first copy is in flight together with the weight.

# %%
stg = ana.stages_records(use)
stage_tab = ana.stage_table(stg)
cm.show(cm.about(stg, "NUM_STAGES study") or cm.nodata(ctx, "the NUM_STAGES study", stale), ana.stages_figures(stg))

# %% tags=["fold"] fold_summary="GB/s by NUM_STAGES for every cell, the best depth and its gain over 1 and 2 stages"
cm.show(cm.table(stage_tab))

# %% [markdown]
# The `pipe-sweep` study crosses CTAs per SM × ring depth × rows per slot (configs whose CTAs would not
# all be resident are skipped). Best config per shape next to what the **current** heuristic picks for that
# (op, M, N), and that config's GB/s in the same sweep when it was measured.

# %%
ps = ana.pipe_sweep_records(use)
ps_best = ana.pipe_sweep_best(ps)
cm.show(cm.about(ps, "pipe-sweep") or cm.nodata(ctx, "the pipe-sweep (CTAs/SM x stages x rows)", stale),
        ana.pipe_sweep_best_view(ps_best))

# %% tags=["fold"] fold_summary="the pipe-sweep by CTAs per SM and by ring depth"
cm.show(ana.pipe_sweep_views(ps))

# %% [markdown]
# The `fence` study times the heuristic's config with and without the `fence.proxy.async` before each
# refill of a read-only slot (the `FENCE` knob; add+RMSNorm writes its slot and always fences).

# %%
fe = ana.fence_records(use)
fence_tab = ana.fence_table(fe)
cm.show(cm.about(fe, "FENCE study") or cm.nodata(ctx, "the FENCE on/off study", stale), cm.table(fence_tab))

# %% [markdown]
# ### The schedule: static round-robin vs dynamic (atomic counter) row blocks
#
# With `schedule="dynamic"` a CTA takes its next row block from a global counter (`grab_block`: one
# relaxed atomic per block, the last CTA's miss resets it to 0 for the next launch) instead of the
# static `pid, pid + grid, ...`. In `gluon-ws` the producer warp owns the counter and passes each block's
# index to the consumers in shared memory with the block's FULL arrival; in this notebook's single-partition
# kernel the atomic's result must be broadcast to the CTA (thread 0, then a barrier) before the refill, so
# its L2 round trip lands on every block. The `schedule` study times both variants under both schedules
# next to the one-row kernels and Inductor at the large-M shapes, one run; the timeline traces every CTA
# (rms_norm 4096 x 8192, ~31 blocks each) and shows how long the grid waits for its last CTA.
#
# These records are from runs `20261201T182307Z` (rms_norm, add_rms_norm; git dc5e880) and `180134Z`
# (layer_norm too), the timeline from `180624Z`. After them the host side changed without a re-measure (no
# device time was left that session): the dynamic schedule went back to an opt-in knob (the heuristic is
# static again, because a counter must exist per stream before a graph capture), the fast path resolves
# each replay's counter for the stream then current, and a capture that would create a counter is refused.
# The kernels are the same; the records show as stale until the next run.

# %%
sch = ana.schedule_records(use)
sch_tab = ana.schedule_table(sch)
TLS = ana.load_schedule_timeline(ctx)
sch_tl = ana.schedule_timeline_stats(TLS)
cm.show(cm.about(sch, "schedule study") or cm.nodata(ctx, "the schedule study", stale), ana.schedule_view(sch_tab),
        cm.table(sch_tl), cm.bullets(ana.schedule_notes(sch_tab, sch_tl)))

# %%
fig = ana.schedule_finish_figure(TLS)

# %% [markdown]
# ## 7. L2Norm and add+RMSNorm (bf16, M = 16384)

# %%
others = ana.other_grids(use)
cm.show(ana.other_views(ctx, others, stale=stale))

# %% [markdown]
# ## 8. The GEMM: persistent TMA + wgmma vs cuBLAS and Triton (bf16)
#
# `torch` is `torch.matmul` (cuBLAS), `triton` the persistent `tl.dot` kernel, `gluon-pipelined` the kernel of
# section 1 and `gluon-ws` its warp-specialized sibling (pattern 4), measured side by side. Square shapes
# and LLM projection shapes (M = 8192 tokens). TFLOP/s = 2·M·N·K / time.

# %%
gm = gg.gemm_records(use)
gemm_tab = gg.gemm_table(gm)
cm.show(cm.about(gm, "GEMM grid") or cm.nodata(ctx, "the GEMM grid", stale), gg.gemm_views(gm, gemm_tab))
pick_chk = ana.stale_pick_check(gm)  # records vs code: what a STALE Gluon record's shape runs today
if len(pick_chk):
    cm.show("Records vs code: the Gluon GEMM records above read STALE (their kernels' or the shared shape heuristic's "
            "source changed after the run; not re-measured on the current code). "
            + ("At every shape the current heuristic still launches the config the run timed."
               if pick_chk["same config today"].all() else
               "At the shapes marked False the current heuristic launches another config than the one timed."),
            pick_chk)

# %% [markdown]
# ### GEMM sweeps: tile × ring depth (`gluon-pipelined`), producer registers × ring depth (`gluon-ws`)
#
# Configs that do not fit in shared memory are not timed; where the plan still listed one, its error is
# shown (a record with `passed = False`), never a number.

# %% tags=["fold"] fold_summary="the GEMM sweeps: TFLOP/s by tile and ring depth; gluon-ws by producer registers"
gs = gg.gemm_sweep_records(use)
wss = gg.ws_sweep_records(use)
cm.show(cm.about(gs, "gemm-sweep") or cm.nodata(ctx, "the GEMM tile x stages sweep", stale), gg.gemm_sweep_views(gs),
        cm.about(wss, "ws-sweep") or cm.nodata(ctx, "the gluon-ws producer-registers x stages sweep", stale),
        gg.ws_sweep_views(wss))

# %% [markdown]
# ### GEMM targets
#
# The targets are for `gluon-pipelined`; `gluon-ws` (pattern 4) is checked against the same bar for
# comparison. cuBLAS is `torch.matmul` in the same run.

# %% tags=["targets"]
gt = gg.gemm_targets(gemm_tab)
cm.show(cm.target_list(gt) if len(gt) else cm.nodata(ctx, "GEMM targets", stale))

# %% [markdown]
# ## 9. One roofline: norms and GEMMs
#
# Achieved TFLOP/s vs arithmetic intensity (nominal FLOPs ÷ compulsory DRAM bytes, both from the records).
# Norms sit at low intensity, under the bandwidth roof; GEMMs far to the right, under the compute roof.
# Lines: the datasheet roof and the roof of the ceilings measured in a run (copy GB/s, cuBLAS TFLOP/s).

# %%
fig, lines = ana.roofline_figure(use, grids, gm, spec, slug)
if lines:
    print("\n".join(lines))
cm.show(fig or cm.nodata(ctx, "the roofline (neither norm nor GEMM records)", stale))

# %% [markdown]
# ## 10. Correctness and compute-sanitizer
#
# Every timed record carries its own check against a float64 reference (fresh random inputs, outputs
# poisoned with NaN first). `ci/sanitize.py` runs `compute-sanitizer --tool racecheck` and `--tool synccheck`
# on one small odd-shaped case of each Gluon kernel (every ring wraps several times, tails are partial)
# and writes `results/<gpu>/sanitizer.jsonl`; it is read here as written.

# %%
cm.show(cm.table(ana.correctness_table([*grids.values(), *others.values(), gm, stg, ps, fe])))
san_path = ana.sanitizer_path(ctx)
san, n_old = ana.load_sanitizer(san_path)
cm.show(ana.sanitizer_views(san, n_old, san_path))

# %% [markdown]
# ## 11. Takeaways (computed from the data above)

# %% tags=["takeaways"]
cm.show(cm.bullets(ana.takeaways(grids=grids, targets=targets, summary=summary, TL=TL, tl_stats=tl_stats, allrec=allrec,
                                  chk=chk, stg=stg, stage_tab=stage_tab, ps=ps, ps_best=ps_best, fe=fe, fence_tab=fence_tab,
                                  gm=gm, gemm_tab=gemm_tab, gs=gs, use=use, san=san)))

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
