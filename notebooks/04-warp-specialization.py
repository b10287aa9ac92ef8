# ---
# jupyter:
#   gluon_lab:
#     pattern: Warp specialization
#     summary: Splits each CTA with gl.warp_specialize into a one-warp TMA producer with a small
#       register budget and consumer warps that only compute, handing ring slots back and forth over
#       EMPTY / FULL barrier pairs. It buys copies issued ahead of the math without the consumers
#       stalling on them, measured per partition on a timeline, on the norm grids against pattern 3
#       and on a cooperative GEMM against cuBLAS.
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
# # 04 — Warp specialization
#
# Pattern 3's ring (notebook 03) is run by **one** instruction stream: every warp of the CTA issues the
# refill of a slot, then waits for its own data, then computes. Whoever issues the copy is also the one
# who stalls on it, and the refill of block `i + NUM_STAGES − 1` is issued only when the CTA gets round
# to it between two blocks of math.
#
# `gl.warp_specialize` splits the CTA into **partitions**, each its own instruction stream with its own
# warps and its own register budget:
#
# * a **producer** worker partition: **1 warp**, with a small register budget (`setmaxnreg`, the
#   `PRODUCER_REGS` knob). It only computes coordinates, waits for a ring slot to be **EMPTY**, expects the
#   bytes on the slot's **FULL** barrier and issues the TMA boxes. It never touches the data.
# * the **consumer** default partition: the kernel's `num_warps` warps (a multiple of 4). It waits **FULL**,
#   computes from shared memory (a norm: reduce, normalize, store; the GEMM: async `wgmma`), and arrives on
#   **EMPTY** to hand the slot back.
#
# Two barriers per slot (count 1 each), over the partition's running block / k-step counter `i`:
# `slot = i % S`, `phase = (i // S) & 1`; the producer waits `EMPTY[slot]` for parity `phase ^ 1` (a fresh
# barrier counts as having completed phase "1", so the first lap passes at once), the consumer waits
# `FULL[slot]` for parity `phase`. What the compiler did implicitly in a plain Triton kernel (one stream,
# `num_stages` software pipelining) is explicit here: who waits on what, and how many registers each
# role gets. Every buffer and barrier is allocated (and the norm's weight loaded) **before the fork**.
#
# This notebook shows the code, the measured per-partition timeline, the codegen evidence
# (`setmaxnreg` per partition, barrier waits, wgmma), and the measurements: the norms, where the producer
# warp has little to hide, and the GEMM, where the consumer warpgroups keep the tensor cores busy.

# %% tags=["parameters"]
mode = "auto"              # "auto": measure on an sm_90+ GPU, else replay; "measure" | "replay" force it
quick = False              # measure mode only: a small grid (smoke run)
results_dir = None         # None: the repository's results/; else a path (relative to the cwd) to read/append
gpu = None                 # replay: results/<gpu>/ to show (None -> "h200"); measure: the GPU present
run = None                 # replay: show only this run (id, unique prefix, "newest"); None: each section its newest run
compare_to = None          # the "Compare runs" section: run A (None: the newest earlier run sharing cases with the shown run)
parts = ["norms", "gemm", "norm-sweep", "ws-sweep", "timeline"]  # measure mode: parts of the plan
stale = "flag"             # "flag": show records whose kernel source changed since, marked STALE; "drop": leave them out

# %%
from gluon_lab.analysis import common as cm, norm_grids as ng, pipelined as P, timeline as tl, warp_specialized as ana
from gluon_lab.analysis import gemm as gana, gemm_probe as gprobe, ws_sanitizer as wsan  # the GEMM studies, the probe logs; section 8's sanitizer reading
from gluon_lab.analysis import ws_timeline as wtl  # the per-partition timeline and every CTA's finish (section 2)
from gluon_lab.analysis import gemm_grid as gg  # 03's GEMM grid helpers (the bars, the geomean line)

ctx = cm.setup(ana.NB, mode=mode, gpu=gpu, results_dir=results_dir, run=run, quick=quick, max_columns=40, max_rows=200, max_colwidth=160)
spec, slug = ctx.spec, ctx.slug
print(ctx.describe(), f" stale records: {stale}")

# %% [markdown]
# ## 0. Measure (GPU) or replay (CPU)
#
# `gluon_lab.experiments.run_ws` is the plan; `python -m gluon_lab bench 04-warp-specialization --parts ...`
# runs the same function in a batch on the lent H200. Every run measures its own ceilings first (a 2 GiB
# device copy and an 8192³ bf16 `torch.matmul`). Each section picks the **newest run that holds its data**
# and names it. This notebook also reads pattern 3's file (`03-multibuffer-pipelining.jsonl`): the GEMM
# comparison of all four GEMMs side by side was measured there, and its pipelined timeline is the
# single-stream reference for section 2. Records whose kernel source changed since they were measured are
# **STALE**: shown and marked with `stale="flag"`, left out with `stale="drop"`.

# %%
if ctx.run_mode == "measure":
    print("appended", ana.measure(ctx, quick=quick, parts=parts))
allrec, rec03 = cm.load(ctx), ana.load_03(ctx)  # this notebook's records and pattern 3's
cm.show(ana.overview(ctx, allrec, rec03))
use, use03 = cm.keep(allrec, stale), cm.keep(rec03, stale)  # what every section below reads

# %% [markdown]
# ## 1. The pattern in code
#
# ### The norm: `ws_norm_kernel` = pattern 3's ring, split in two
#
# The parent allocates the ring (`NUM_STAGES × NUM_CHUNKS` boxes of `[R, CHUNK]`), the EMPTY and FULL
# barriers, loads the weight (and bias) once, and forks. The producer (`_wsn_producer`, 1 warp) walks this
# CTA's row blocks `pid, pid + grid, …` and for each one waits EMPTY, then `_load_block` (pattern 3's helper:
# one `expect` with every box's bytes, then the boxes). The consumer (`_wsn_consumer`, `num_warps` warps)
# walks the same blocks, waits FULL, computes from shared memory exactly as pattern 3 does, stores with
# 128-bit `st.global`, and arrives on EMPTY once every read of the slot is done. Both partitions run the
# same loop bounds (they must agree on the trip count of the protocol). The `INSTRUMENT` build adds
# `%globaltimer` stamps in **both** partitions (section 2).

# %% tags=["fold"] fold_summary="kernel source: gluon_lab/kernels/warp_specialized.py (_wsn_producer, _wsn_consumer, ws_norm_kernel)"
print(ana.kernel_source("_wsn_producer", "_wsn_consumer", "ws_norm_kernel"))

# %% [markdown]
# The knobs: the ring (rows per slot, depth, CTAs per SM) comes from pattern 3's heuristic, the consumer gets
# at least one warpgroup (4 warps), the ring is one stage deeper than pattern 3's (from the norm-sweep of
# section 5), and `producer_regs` is the producer's `setmaxnreg` budget. A 1-warp producer still occupies a
# whole warpgroup of the register file (`threads() = 32 × (num_warps + 4)`).

# %% tags=["fold"] fold_summary="config and heuristic source: WsNormConfig (gluon_lab/kernels/warp_specialized.py)"
print(ana.kernel_source("WsNormConfig"))

# %% [markdown]
# ### The GEMM: `ws_gemm_kernel`
#
# The producer walks this CTA's output tiles (persistent, GROUP_M-grouped order) and their k-steps with a
# global k-step counter `g`, waits EMPTY and issues the A `[BM, BK]` and B `[BK, BN]` boxes. The consumer is
# **8 warps = two warpgroups cooperating on one 128×256 tile**: the accumulator layout puts the warps along M
# (`warps_per_cta=[num_warps, 1]`), so each warpgroup owns 64 rows of the same tile. It waits FULL, issues
# an async `wgmma`, and after `warpgroup_mma_wait(1)` (the MMA of step g−1 has retired) arrives on EMPTY for
# the previous slot. Epilogue: accumulator → shared memory → **TMA store**; the store of tile t is waited for
# only when tile t+1's epilogue needs the buffer, so it overlaps the next main loop.

# %% tags=["fold"] fold_summary="kernel source: gluon_lab/kernels/igemm (tma_producer, ws_ring_barriers) + gemm_ws.py (_ws_consumer, ws_gemm_kernel)"
print(ana.kernel_source("tma_producer", "_ws_consumer", "ws_ring_barriers", "ws_gemm_kernel"))

# %% [markdown]
# ### The protocol, lap by lap (computed from the formulas in the source, NUM_STAGES = 3)

# %%
cm.show(ana.protocol_table(S=3))

# %% [markdown]
# ## 2. The partitions, measured: per-partition timeline, NUM_STAGES = 1 vs 3
#
# An `INSTRUMENT` build of `gluon-ws` RMSNorm (M = N = 8192, bf16) writes five `%globaltimer` stamps per row
# block, for **every CTA** of the grid: the producer **before its EMPTY wait** and when its copies are
# **issued**; the consumer **before its FULL wait**, when the data is **ready**, and when its stores are
# **issued**. These are **measured on the GPU** (`experiments.capture_ws_timeline`, the second of two
# launches), not simulated; ns relative to the earliest stamp of the launch.
#
# * producer `issued − before EMPTY wait`: time the producer waits for a free slot (plus issuing the boxes);
# * **run-ahead** = consumer `before FULL wait − producer issued`: how long before the consumer asks for a
#   block its copy was already issued (negative: the consumer is waiting before the copy even left);
# * consumer `ready − before FULL wait`: the consumer's **stall** on its data; `stored − ready`: its work;
# * **blocks ahead**: how many blocks (this one included) the producer had issued but the consumer had not
#   yet started waiting for, at the moment the consumer starts waiting.

# %%
TL4, TL3 = tl.load_timeline(ctx), tl.load_timeline(ctx, ana.NB3)
ws_tl, pipe_tl = wtl.ws_timeline_stats(TL4), wtl.pipe_timeline_summary(TL3)
cm.show(wtl.timeline_views(ctx, TL4, TL3, allrec, rec03, ws_tl, pipe_tl, stale))

# %%
cm.show(wtl.ws_gantt(TL4, ws_tl), wtl.runahead_hist(TL4, ws_tl))
if len(ws_tl):
    print("\n".join(wtl.timeline_lines(ws_tl, pipe_tl)))

# %% [markdown]
# ### Every CTA: when does each one finish?
#
# The norm kernels of patterns 3 and 4 are **persistent**: about one CTA per SM, and CTA `p` takes row
# blocks `p, p + grid, p + 2·grid, …` — a **static round-robin** schedule fixed at launch. The launch lasts
# as long as its **slowest** CTA. The table uses all traced CTAs of both timelines: per-CTA finish = its last
# stamp; `tail` = slowest finish vs the median; `block-count imbalance` is what the round-robin split alone
# explains (some CTAs get one block more); `per-CTA pace` is each CTA's median block period.

# %%
fin = wtl.finish_spreads(TL3, TL4)  # {(kernel, NUM_STAGES): every traced CTA's finish, blocks, pace}
spread = wtl.spread_table(fin)
cm.show(cm.table(spread.round(1)) if len(spread) else ana.nodata(ctx, "per-CTA finish times (no timeline file)", stale),
        wtl.spread_figure(fin))

# %% [markdown]
# The tail, next to the timed records of the same cell. A one-row-per-CTA kernel (`gluon-tma`) launches one
# CTA per row block (thousands of CTAs); the **hardware block scheduler** hands the next CTA to whichever SM
# frees up, so an SM that runs slower simply takes fewer rows. A persistent grid cannot rebalance: its split
# is fixed at launch. `whole-grid GB/s from stamps` covers only first-stamp → last-store-issued (no launch,
# no weight load before the first stamp, no drain of the last stores), so it is an upper bound for the
# launch, not a substitute for the timed records.

# %%
chk = wtl.spread_check(spread, TL3, TL4, use, use03)
cm.show(wtl.spread_check_view(chk), wtl.tail_note(spread, wtl.norm_grid_run(use), TL3, TL4))
for line in wtl.spread_check_lines(chk):
    print(line)

# %% [markdown]
# ## 3. Codegen census on sm_90 (compiled on this CPU)
#
# Static counts from the PTX / SASS (lines, not executed instructions) of the **current source**, next to the
# pattern 3 counterparts with the same shapes. `setmaxnreg` values are read from the PTX and assigned to
# partitions by how the warp-specialize lowering uses them: the default (consumer) warps raise their budget
# for the parent code and lower it to the consumer budget when the partition starts (the first two
# `setmaxnreg` in PTX order); the producer runs at `PRODUCER_REGS`; the worker warpgroup's warps park at
# another budget between partitions. The register file
# check multiplies each budget by its warps (the producer warp's whole warpgroup counts).

# %% tags=["fold"] fold_summary="norm census: gluon-ws next to gluon-pipelined per (op, N), and the partitions' registers"
norm_cen, errors = ana.norm_census()
if errors:
    print("\n".join(errors))
cm.show(ana.census_views(norm_cen, "norms"))

# %% tags=["fold"] fold_summary="GEMM census: gluon-ws next to gluon-pipelined, two tiles, and the partitions' registers"
gemm_cen, errors = ana.gemm_census()
if errors:
    print("\n".join(errors))
cm.show(ana.census_views(gemm_cen, "GEMM"))

# %%
cm.show(ana.census_notes(norm_cen, gemm_cen))

# %% [markdown]
# ## 4. The norms: gluon-ws vs gluon-pipelined vs gluon-tma vs the baselines (bf16, one run)
#
# M ∈ {256 … 32768} × N ∈ {4096, 5120, 8192, 16384}, RMSNorm and LayerNorm, plus add+RMSNorm at M = 16384.
# The reference of each cell is the copy of the same (M, N) timed the same way in the same run; where
# M·N ≥ 64 Mi elements it is **max(per-shape copy, the run's 2 GiB session copy)**: at the largest tensors the
# graph-timed per-shape `copy_` falls far below the session copy while the norms move their bytes faster
# (printed below; notebook 03, section 4, shows the evidence). `% of ceiling` = GB/s ÷ that reference.

# %%
grids = ana.norm_grids(use)  # {op: one run's grid with gluon-ws and gluon-pipelined, pct_ceiling}
ct, ce = ng.grid_ceiling(use, grids)
cm.show(ana.grid_notes(ctx, grids, stale))
if ce:
    print(ng.session_line(ng.grid_run(grids), ce))
if ana.low_copy_line(grids, ct):
    print(ana.low_copy_line(grids, ct))

# %% tags=["fold"] fold_summary="the copy reference of every cell (per-shape copy, session copy, which one counts)"
cm.show(cm.table(ct.sort_index().round(1)))

# %% [markdown]
# ### Headline: gluon-ws vs gluon-pipelined, cell by cell
#
# Speed ratio gluon-ws / gluon-pipelined per cell, on a scale centred on 1 (green: gluon-ws faster, red:
# slower); a cell marked ✗ misses the target (≥ 0.98, i.e. within 2% or better). Below it, both kernels in
# % of the copy ceiling, then every variant on its own.

# %% tags=["headline-numbers"]
cm.show(cm.headline(ana.headline_numbers(grids, use, use03)))

# %% tags=["headline"]
cm.show(ana.headline_figure(grids, slug) or ana.nodata(ctx, "the headline (no rms_norm / layer_norm grid)", stale))

# %%
cm.show(ana.grid_figure(grids, slug))

# %%
cm.show(ng.variant_maps(ana.heat_grids(grids), "gluon-pipelined", "gluon-ws", with_timer=False))

# %% [markdown]
# ### Target: gluon-ws within 2% of gluon-pipelined, or better, in every cell
#
# `met` is strict (ratio ≥ 0.98); `wins` counts cells where gluon-ws is faster (ratio > 1). `row blocks per CTA`
# comes from the recorded gluon-ws config (rows per slot, CTAs per SM) and the run's SM count: with few
# blocks per CTA there is little for a producer running ahead to hide, while the fork, the extra barriers
# and the producer's warpgroup are paid in full.

# %% tags=["targets"]
targets = ana.target_tables(grids, spec)
norm_summary, blocks = ana.norm_summary(targets), ana.by_blocks(targets)
cm.show(ana.target_views(ctx, grids, targets, norm_summary, blocks, stale))

# %% tags=["fold"] fold_summary="the numbers behind the target grids, cell by cell"
cm.show(ana.target_details(grids, targets))

# %% [markdown]
# ## 5. The norm-sweep: producer registers × consumer warps × ring depth
#
# `gluon-ws` RMSNorm and LayerNorm over five shapes, every combination of `producer_regs` ∈ {24, 40, 56},
# consumer `num_warps` ∈ {4, 8} and `num_stages` ∈ {2, 3, 4} (the other knobs from the heuristic of that time;
# combinations that do not fit were not planned). GB/s.

# %% tags=["fold"] fold_summary="the norm-sweep: every config, best per knob value, knob costs, the heuristic's pick"
sw = ana.norm_sweep_records(use)
full, per_knob, sweep_eff = ana.norm_sweep_tables(sw)
heur = ana.sweep_vs_heuristic(sw, grids)
cm.show(ana.about(sw, "norm-sweep") or ana.nodata(ctx, "the gluon-ws norm-sweep", stale),
        ana.norm_sweep_views(full, per_knob, sweep_eff, heur))

# %% [markdown]
# ## 6. The GEMM: gluon-ws vs gluon-pipelined vs cuBLAS vs Triton (bf16)
#
# The four GEMMs were measured **side by side in one run** by pattern 3's `gemm` part, so this section reads
# `03-multibuffer-pipelining.jsonl` (and this notebook's own file, should its `gemm` part have run later):
# the newest run holding all four variants. Older runs in the 03 file hold an older gluon-pipelined GEMM
# (before its load-indexing fix) and are not mixed in. `torch` = `torch.matmul` (cuBLAS), `triton` = the
# persistent `tl.dot` kernel. TFLOP/s = 2·M·N·K / time.

# %%
mm = gana.gemm_candidates(use, use03)  # the GEMM grids of both files
gm = gana.gemm_records(mm)             # the newest run holding all four GEMMs
gemm_tab = gana.gemm_table(gm)
cm.show(ana.about(gm, "GEMM grid") or ana.nodata(ctx, "a GEMM run with all of " + ", ".join(gana.GEMM4), stale))
if gana.older_runs_line(gm, mm):
    print(gana.older_runs_line(gm, mm))
cm.show(cm.table(gemm_tab), gg.geomean_line(gemm_tab))
if gana.gemm_ceiling_lines(gm, use, use03):
    print("\n".join(gana.gemm_ceiling_lines(gm, use, use03)))
if len(gm):
    cm.show("configs the gluon records ran with:", gana.gemm_configs(gm), gg.gemm_bars(gm, gana.GEMM4))

# %% [markdown]
# ### GEMM targets
#
# gluon-ws ≥ 1.0× cuBLAS at 8192³ (moonshot 1.05×), geomean ≥ 0.98× cuBLAS over the shape set, and ≥
# gluon-pipelined at every shape. `met` is strict.

# %% tags=["targets"]
gt = gana.gemm_targets(gemm_tab)
cm.show([f"run `{gm.run_id.iloc[0]}`" + (" — STALE records" if gm.stale.any() else ""), gana.gemm_targets_view(gt)]
        if len(gt) else ana.nodata(ctx, "the GEMM targets", stale))

# %% [markdown]
# ### ws-sweep: producer registers × tile × ring depth
#
# `gluon-ws` GEMM over three shapes, tiles `(BM, BN, BK, num_warps, num_stages)` × `producer_regs` ∈ {24, 40, 56,
# 88}. A config that does not fit in shared memory is not a measurement: where the plan skipped it or a record
# holds its error, it is listed as **does not fit**. Below it, the earlier producer-registers × stages sweep
# in pattern 3's file, which did hold such configs.

# %% tags=["fold"] fold_summary="the ws-sweep tables: TFLOP/s by tile and producer registers, configs without a record"
wsw = gana.ws_sweep_records(use)
views, ws_ok = gana.ws_sweep_views(ctx, wsw, gm, stale)
cm.show(views, gana.old_ws_sweep_views(use03))

# %% [markdown]
# ## 7. Consumer schedules: cooperative and ping-pong
#
# Hopper GEMMs with warp specialization come in two consumer schedules. **Cooperative**: both consumer
# warpgroups work on the same output tile, splitting its rows, so the tile's epilogue (accumulator →
# smem → TMA store) stalls both and the tensor cores idle meanwhile. **Ping-pong** (CUTLASS's
# `KernelTmaWarpSpecializedPingpong`, QuACK's `pingpong=True`): each consumer warpgroup owns alternate
# tiles of the CTA's list with a whole BM × BN accumulator (≤ 128 fp32 registers per thread: 128 × 128
# or 64 × 256), and an ORDER barrier pair makes their mainloops take turns, so one warpgroup's epilogue
# runs while the other's MMAs keep the tensor cores busy. `GemmConfig(pingpong=True)` selects
# `ws_pingpong_gemm_kernel`; the producer warp and the ring are the cooperative kernel's. The turn-taking
# is also what keeps the ring's FULL waits exact: a warpgroup starts waiting on tile j's slots only after
# every slot of tile j − 1 has been waited on, so no slot is ever two phases ahead of the parity asked for.
# The structure of both kernels, read from their source:

# %%
print("\n".join(gana.consumer_schedule()))

# %% [markdown]
# ### The shape sweep: every schedule × tile beside cuBLAS
#
# The 'gemm-shapes' study times cuBLAS (`torch.matmul`, before and after each shape's Gluon cases: the
# peer is the geomean of the two, `cuBLAS drift` = after / before shows how far the clock moved meanwhile),
# gluon-pipelined and gluon-ws at their heuristics (the cases marked `heuristic`, which are also what the
# `variant="auto"` table is built from), twelve explicit schedule × tile configs, split-K 2 / 4 / 8 where
# 128 × 128 tiles are fewer than the SMs and swap-AB (`GemmConfig(swap_ab=True)`: the MMA computes
# Cᵀ = Bᵀ Aᵀ, so N fills the wgmma's 64-row side and a 16- or 32-row M tile is its N), alone and with
# split-K 2 / 4, at M ≤ 64, and stream-K (`GemmConfig(stream_k=1 | 2)`, its own section below) where
# 128 × 128 tiles leave a partial wave within the first eight, on 29 shapes in one run: square, the
# Llama-3-8B projections (q/k/v fused, o, gate+up fused, down) at M = 128 … 16384, ragged shapes (no
# dimension a multiple of 128), long K, the long-N / skinny shapes and three decode batches (M = 16 … 64). `best / cuBLAS` ≥ 1: the best Gluon config leads;
# `ping-pong / cooperative` > 1: the best ping-pong gluon-ws config beats the best cooperative one. The
# SM clock (NVML, read right after each timing) is printed with cuBLAS's TFLOP/s: absolute numbers depend
# on it, the ratios come from one run. `auto` is what `variant="auto"` runs at that shape (the selection
# model over the committed records: a Gluon GEMM only where the cells near the shape score it 2% faster than
# cuBLAS).
#
# **Records vs code.** Every Gluon record here carries the source hash of the variant's kernels and
# heuristic; the table marks a record STALE when the code has changed since it ran, and `variant="auto"`
# uses only current records (otherwise cuBLAS). The newest sweep ran on the committed code of its
# `git_commit`; see the "about" line above the table.
#
# `GemmConfig.heuristic` (`gemm.shape_pick`) was written from this table; its thresholds carry the cells they
# were read from in `gluon_lab/kernels/gemm.py`. gluon-ws: M ≤ 32 swap-AB with split-K while its tiles
# leave SMs idle; M ≤ 64 a 64 × 256 ping-pong tile; M ≤ 256 64 × 128 or 64 × 64 tiles (unless 128 × 256
# tiles still fill 80% of a wave); larger M the 128 × 256 cooperative tile when it gives ≥ 4 waves or a
# last wave ≥ 84% full, else split-K (few tiles, long K), a split last wave (ragged waves, ≥ 48 k-steps),
# or 128 × 128 with two consumer warpgroups when that fills the waves better; and stream-K on the 128 × 256
# tile where those tiles fill more than a wave but leave a last wave of ≤ 10% of the SMs (`SK_TAIL`). gluon-pipelined takes the
# tile rules only.

# %%
shape_rec = gana.shape_sweep_records(use)
shape_tab = gana.shape_sweep_table(shape_rec)
if len(shape_tab):
    cm.show(ana.about(shape_rec, "GEMM shape sweep"), cm.dashed(shape_tab),
            cm.target_list(gana.shape_sweep_targets(shape_tab)),
            "Per shape bucket (M class × 128×256-tile waves × long K), the config within 2% of the best Gluon "
            "config on the most shapes: what a shape-bucketed `GemmConfig.heuristic` is written from.",
            cm.dashed(gana.bucket_proposal(shape_rec)))
else:
    cm.show("The 'gemm-shapes' study has not run on a GPU yet: the table appears after "
            "`python -m gluon_lab bench 04-warp-specialization --parts gemm-shapes`.")
pick_chk = P.stale_pick_check(shape_rec)  # records vs code: a STALE heuristic case's shape, run today
if len(pick_chk):
    diff = pick_chk[~pick_chk["same config today"]]
    cm.show(f"Records vs code: {len(pick_chk)} heuristic cases of this run read STALE (not re-measured on the current "
            f"code); at {len(diff)} of them the current heuristic launches another config than the one timed:",
            diff if len(diff) else "none.")

# %% [markdown]
# ### How far to trust one cell: the noise floor, and 8192³ in interleaved rounds
#
# Each cell above is one timing per config. Where a heuristic case resolved to the same config as an
# explicit case, the run timed that kernel twice: `heuristic / explicit` is its run-to-run spread (first
# line and table). The `best / cuBLAS` column is the best of many such timings, so it leans upward by about
# that spread; the heuristic columns are one pre-chosen config each and do not. For the 8192³ target the
# probe's `order` part (`ci/gemm_probe.py order`, `results/h200/gemm-probe-order.log`) times cuBLAS and the
# default gluon-ws tile at four tile orders (`GROUP_M` row-tiles per column band) in five interleaved rounds
# and takes the per-round ratio (second table): the median is the number to quote, min / max its range.

# %%
if len(shape_rec):
    same_cfg = gana.same_config_spread(shape_rec)  # (not `spread`: the norm sections' name)
    if len(same_cfg):
        q = same_cfg["heuristic / explicit"]
        cm.show(f"Same config timed twice in run {shape_rec.run_id.iloc[0]}: {len(q)} pairs, heuristic / explicit "
                f"median {q.median():.3f}, middle half {q.quantile(0.25):.3f}–{q.quantile(0.75):.3f}, "
                f"range {q.min():.3f}–{q.max():.3f}.",
                same_cfg[(q - 1).abs() > 0.02].sort_values("heuristic / explicit"))
order_probe = gprobe.order_table(gprobe.probe_records(gprobe.probe_path(None, "gemm-probe-order.log")))
if len(order_probe):
    cm.show(order_probe)

# %% [markdown]
# ### gluon-ws vs gluon-pipelined where the epilogue matters (small K)
#
# With K ≤ 2048 a tile's epilogue is a large share of its time. `pipe / ws` ≥ 1: gluon-ws is at least as
# fast (the target on these shapes), at the two heuristics and between the best configs of each.

# %%
if len(shape_rec):
    cm.show(cm.dashed(gana.ws_vs_pipe_table(shape_rec)))

# %% [markdown]
# ### Why the ragged shapes lose: misaligned rows, measured (`ci/gemm_probe.py`)
#
# The ragged shapes of the sweep have row strides (K × 2 and N × 2 bytes) that are multiples of 16 bytes, as
# TMA requires, but not of 128: every 128-byte box row of a TMA load then straddles two 128-byte lines. The
# probe times the same logical shapes over row strides padded to 64 elements (`padded-rows`: the same data
# and FLOPs, views into wider buffers) beside the contiguous ones, in one process on the H200 (first table:
# contig / padded). Its `split` part pads one operand at a time (second table): the cost is in the two
# *loaded* operands, A and B, together (padding either alone recovers part of it, C's misaligned TMA stores
# cost little), and the TMA descriptors' L2 promotion (triton's `driver.c` hard-codes `L2_128B`; the probe
# re-ran with it patched to `L2_256B` and `NONE`) does not change it: 256-byte promotion is slower still.
# cuBLAS runs the same shapes within a few percent of their padded times, with TMA kernels of its own
# (third table: `nvjet_sm90_tst_…` kernels whose names carry non-power-of-two tiles such as 128 × 272 and
# 192 × 128 and cluster shapes 2x1 / 4x1 / 1x2, i.e. 2–4-CTA clusters; triton 3.6.0 has neither
# multicast nor such tiles, see "Clusters" below). Which of those saves cuBLAS is not measured here.
# Two producers try to win that back. The padded-copy producer (`GemmConfig(pad_rows=True)`,
# `kernels/igemm/staging.py`) pays for it up front: one extra launch copies each operand whose rows are off
# 128-byte lines into a buffer whose rows are on them, and the ordinary TMA producer reads the copy. It
# costs a read and a write of A and B, so it can only win where the GEMM's time saved exceeds those bytes'
# time: the last table measures it on every ragged shape of the sweep (the heuristic's tile and the
# probe's fastest padded tiles). A `cp.async` producer (`GemmConfig(cp_async=True)`,
# `cp_producer` (kernels/igemm/producers.py): a warpgroup of 16-byte copies into the same swizzled ring, edges zero-filled, each
# thread's `cp.async.mbarrier.arrive.noinc` completing FULL, a proxy fence before the wgmma reads) is
# correct (float64 GPU tests, racecheck / synccheck) but slower than TMA on all four misaligned shapes
# (last table), so no heuristic picks it; why is not diagnosed. The probe's decode part: swap-AB with
# split-K is what reaches cuBLAS at M = 32 with a long K (split slices put every SM on the B stream).

# %%
probe = gprobe.probe_records()
probe_split = gprobe.probe_records(gprobe.probe_path(None, "gemm-probe-split.log"))
if len(probe):
    cm.show(cm.dashed(gprobe.alignment_table(probe)))
if len(probe_split):
    cm.show("Which operand's misaligned rows cost (contig / only that operand padded), under each L2 promotion:",
            cm.dashed(gprobe.operand_split_table(probe_split)), "The kernel cuBLAS runs at each ragged shape:",
            gprobe.cublas_kernels())
if len(probe):
    cm.show(cm.dashed(gprobe.decode_probe_table(probe)))
else:
    cm.show("results/h200/gemm-probe.log is missing: run `PYTHONPATH=. python3 ci/gemm_probe.py > "
            "results/h200/gemm-probe.log` on the GPU.")
prod_tab = gana.producer_table(shape_rec)
cm.show("The sweep's misaligned shapes, gluon-ws's best config per producer: TMA in place, the padded copy, "
        "cp.async (same run; a producer's column is missing where the run did not try it):"
        if len(prod_tab) else "The shape sweep shown tried no producer but TMA in place.",
        *([cm.dashed(prod_tab)] if len(prod_tab) else []))

# %% [markdown]
# ### Ping-pong vs cooperative, tile by tile: the consumer timeline
#
# The INSTRUMENT build of each consumer stamps `%globaltimer` per tile: its mainloop start (before the first
# FULL wait), the issue of its last MMA, and the issue of its TMA store. Same 128 × 128 × 64 tile under both
# schedules (`experiments.GEMM_TIMELINE_CONFIGS`), at a mid and a short K. `mainloop share` = the part of
# each CTA's span covered by at least one warpgroup's mainloop, i.e. the time its tensor cores are fed:
# in the cooperative schedule every epilogue is a gap; in ping-pong the other warpgroup's mainloop should
# fill it.

# %%
GT = gana.load_gemm_timeline(ctx)
if GT:
    cm.show(f"timeline of run `{GT.get('run_id')}` ({GT.get('gpu')})", gana.gemm_timeline_stats(GT),
            gana.gemm_timeline_figure(GT))
else:
    cm.show("The consumer-schedule timeline has not run on a GPU yet: it appears after "
            "`python -m gluon_lab bench 04-warp-specialization --parts gemm-timeline`.")

# %% [markdown]
# ### Wave quantization: why tile shape matters at skinny and ragged shapes
#
# A persistent GEMM runs one tile per SM at a time; with `t` tiles on 132 SMs the last wave holds
# `t mod 132` of them and the rest of the SMs idle. The map below is computed from the shapes alone
# (no GPU): per tile shape, the last-wave efficiency × the useful share of the tiles (a ragged edge tile
# costs a whole tile). At M = 128 a 128 × 256 tile leaves 80–90% of the GPU idle; 64 × 64 or 64 × 128
# tiles fill it, and so does split-K (`GemmConfig(split_k=s)`: s K-slices per tile as separate work units,
# fp32 partials summed in slice order by a second kernel), which the sweep tries wherever 128 × 128 tiles
# are fewer than the SMs. Where they fill whole waves but leave the last one under ¾ full, the sweep
# tries splitting only that last wave (`split_last_wave=True`: the whole waves stay data-parallel, the
# remaining tiles' K-slices fill the SMs; CUTLASS's data-parallel + split-K hybrid). The shape sweep above measures whether the smaller tiles' lower arithmetic intensity
# costs more than the idle SMs.

# %%
waves = gana.wave_table()
cm.show(gana.wave_figure(waves))

# %% [markdown]
# ### Stream-K: measured, and why it loses here
#
# Stream-K (`GemmConfig(stream_k=w)`, CUTLASS's stream-K and its data-parallel + stream-K hybrid): the tiles of
# the last `w` waves (the partial one counted; all tiles when there are fewer than SMs) become one list of
# k-steps cut into 132 balanced shares, one per CTA, each share cut again at tile boundaries into pieces;
# a piece that is not a whole tile stores fp32 partials to its own workspace block and
# `streamk_reduce_kernel` sums every split tile's pieces in CTA order (deterministic). The piece mapping is
# checked on the CPU (`tests/test_warp_specialized.py`: every (tile, k-step) once, one block per piece) and
# against float64 on the GPU. In the sweep it is **slower than the best data-parallel / split-K config on
# nearly every shape it ran** (first table, the line above it counts); it only ties the last-wave split at
# 2500 × 1736 × 4104 (280 tiles of 128 × 128, 65 k-steps each), the shape it suits best. Where the time goes,
# from two probes: `phases` (second table, torch.profiler per kernel) shows the fixup kernel moving every
# partial's bytes once more at about the rate split-K's reduce does, so it costs in proportion to the pieces
# (7–13 µs where most tiles are cut, more than split-K's 3 µs at 1024 × 1024 × 32768; unrolling its loads
# changed nothing); `sktrace` (third table, the INSTRUMENT build's per-unit stamps, medians over all CTAs)
# shows the rest inside the GEMM kernel (traced before the partials moved to registers): a partial piece's
# epilogue took longer than a whole tile's bf16 one,
# each CTA ran about two of them on top of its tiles, and every k-step ran slower with the stream-K grid
# than with the data-parallel one. At M = 128
# (128 × 6144 × 4096) the 132 stream-K CTAs each run their k-steps about a third slower than the 96
# data-parallel CTAs, so the kernel spans come out nearly equal: which says that GEMM is bound by the bandwidth
# all CTAs share (every CTA streams the whole 128-row A panel), not by idle SMs, and only fewer A re-reads
# (larger N tiles, or cuBLAS's 2-CTA clusters) would help. Where the span does shrink (2500 × 1736 × 4104,
# stream-K 2), the fixup kernel takes most of the gain back. The partials go straight from registers
# (`store_partial`, kernels/igemm/epilogues.py: no fp32 staging in shared memory, which is what lets the 128 × 256 tile take stream-K)
# and the fixup's loads are unrolled. The probe's `skprobe` part (fourth table: stream-K configs beside the
# gluon-ws heuristic of the time and cuBLAS, three interleaved rounds) finds one kind of shape where it pays:
# more than one wave of 128 × 256 tiles with a thin last wave (2500 × 1736 × 4104 and 777 × 5000 × 1000: 140
# tiles = 132 + 8), where stream-K spreads the 8 tiles' k-steps over every CTA. That is the heuristic's only
# stream-K rule (`SK_TAIL` in `gluon_lab/kernels/gemm.py`); on every other shape probed it loses. Left open:
# an in-kernel fixup (the CTA that finishes a tile adds its peers' partials, as CUTLASS's stream-K scheduler
# does), which would take the fixup kernel's pass over the partials off the critical path.

# %%
sk_tab = gana.stream_k_table(shape_rec)
phases = gprobe.phase_records()
if len(sk_tab):
    w = sk_tab["without / stream-K"]
    top = sk_tab.loc[w.idxmax()]
    cm.show(f"stream-K faster than the best config without it on {int((w > 1).sum())} of {len(w)} shapes; its best "
            f"without / stream-K is {w.max():.3f} at {top.M}x{top.N}x{top.K}.")
cm.show(*([cm.dashed(sk_tab)] if len(sk_tab) else ["The shape sweep shown has no stream-K cases."]),
        *(["Per-kernel GPU time of one call (results/h200/gemm-probe-phases.log):", cm.dashed(phases)]
          if len(phases) else []))
sk_trace = gprobe.sktrace_records()
if len(sk_trace):
    cm.show("Per-unit stamps, medians over every CTA (results/h200/gemm-probe-sktrace.log; measured at commit ec46036, "
            "when the partials were still staged through shared memory for a TMA store; not re-run since they are "
            "stored from registers):", cm.dashed(sk_trace))
sk_probe = gprobe.order_table(gprobe.probe_records(gprobe.probe_path(None, "gemm-probe-skprobe.log")), part="skprobe")
if len(sk_probe):
    cm.show("Stream-K beside the heuristic of the time, cuBLAS / config per interleaved round "
            "(results/h200/gemm-probe-skprobe.log):", sk_probe)

# %% [markdown]
# ### Clusters and TMA multicast on triton 3.6.0
#
# fast.cu and CUTLASS share A or B tiles across a CTA pair with TMA multicast (`cp.async.bulk.tensor …
# .multicast::cluster`). triton 3.6.0's Gluon Hopper TMA copy takes no CTA mask and nothing in its Python
# API says "multicast"; `num_ctas = 2` does launch a 1-D cluster (`.reqnctapercluster 2` in the PTX), but a
# tile declared shared by both CTAs is loaded by each CTA for itself, and there is no distributed shared
# memory, cluster barrier or CTA-rank operation. Checked here on the installed wheel:

# %%
cm.show(gprobe.cluster_evidence())

# ## 8. Correctness and compute-sanitizer
#
# Every timed record carries its own check against a float64 reference. `ci/sanitize.py` runs
# `compute-sanitizer --tool racecheck` and `--tool synccheck` on one small odd-shaped case of each Gluon
# kernel and writes `results/<gpu>/sanitizer.jsonl`; it is read here as written (the newest line per
# (kernel, tool) wins).

# %%
cm.show(cm.table(P.correctness_table([*grids.values(), gm])))
san_path = P.sanitizer_path(ctx)
san, n_old = P.load_sanitizer(san_path)
cm.show(wsan.sanitizer_views(san, n_old, san_path))

# %% [markdown]
# ### Where racecheck points: the reported accesses, mapped to the source
#
# The tail of each hazard report names the kernel offset and the `file:line` of each access. The line
# numbers are those of the source **when the sanitizer ran**; the kernel's `def` line is used to shift them
# onto the current file (a docstring edit since moved every line), and the current text of each line is
# shown. The diagnostic `ws-gemm-noinval` is `ws_gemm_kernel` with its trailing `mbarrier.invalidate` loop cut,
# written to a temporary file by `ci/sanitize.py`; its lines are mapped through that same generated file.

# %%
sz = P.sanitize_driver()  # ci/sanitize.py: its cases and the diagnostic kernel's generator
src_lines, defs = wsan.ws_source_lines()
diag_lines, err = wsan.diag_source_lines(sz)
if err:
    print(err)
race_tab, tails = wsan.race_accesses(san, src_lines, defs, diag_lines)
cm.show(tails)
if len(race_tab):
    print(wsan.def_shift_line(race_tab, defs))
cm.show(wsan.race_view(race_tab))

# %% [markdown]
# ### What sits at the reported offsets: SASS of the same kernels, compiled on this CPU
#
# The offsets in the report (`kernel+0x…`) are SASS addresses. Each sanitized case is compiled here for sm_90
# with the config its launcher picks for that shape (`GemmConfig.heuristic(M, N)` in `gemm.prepare`;
# `WsNormConfig.heuristic(op, N, dtype, M)` in `check_norm`; the diagnostic through `ci/sanitize.py`'s own
# generator), and the instruction at each reported offset is read back with a few neighbours. A static
# compile can only reproduce the sanitized binary if compiler, source and config are the same, so each row
# says whether the instruction there is a shared-memory access (what racecheck tracks).

# %% tags=["fold"] fold_summary="SASS at the reported offsets (compiled on this CPU), with a few neighbours"
if len(race_tab) and diag_lines is not None:
    sass_tab, sass_ctx, errors = wsan.sass_check(race_tab, sz)
    if errors:
        print("\n".join(errors))
    if len(sass_tab):
        print(f"compiled with triton {wsan.triton_version()} on this CPU")
    cm.show(wsan.sass_view(sass_tab), wsan.sass_contexts(sass_ctx))
else:
    sass_tab = P.EMPTY
    print("no racecheck findings to locate" if not len(race_tab) else "ci/sanitize.py could not be loaded: no SASS check")

# %%
cm.show(wsan.sanitizer_summary(san, race_tab, sass_tab))

# %% [markdown]
# ### The entry hazard explained: Triton's warp-specialize dispatch, reproduced
#
# Compiled here at the revision of each record, the offsets land on Triton's own code, not on the
# kernels'. `gl.warp_specialize` (3.6.0, `ConvertWarpSpecializeToLLVM.cpp`) parks the worker warps in a
# dispatch loop: each round they wait on `barrier.sync 1` (all of the CTA's threads) and read their
# partition's state byte from a 4-byte table in shared memory (the read at `+0xf0`, `LDS.U8`); the
# default warps write the table (`STS`, the first "write" access) before the fork and again at the
# kernel's exit (the second one), each followed by the same CTA-wide barrier. Write → barrier → read →
# barrier → write: ordered, and synccheck is clean. The table is the function's own allocation: no
# buffer, barrier or capture aliases it (the captures are elided; nothing is stored for them).
#
# What racecheck trips on: before the fork only the default warps run, so the barriers the compiler puts
# between the `mbarrier.init`s become 128-thread partial barriers (`bar.sync 0, 128`). The ten-line CUDA
# program `ci/racecheck_dispatch/dispatch.cu` runs the same protocol with and without such a barrier on
# the H200: the protocol alone reads clean; one partial barrier before the first state write gives two
# hazards of exactly this shape (first read vs the state write, second read vs the exit write), on
# barrier id 0 or 2; the same barrier after the fork reads clean; synccheck reports 0 errors throughout.
# So the hazard is a racecheck false positive that every Gluon warp-specialized kernel with barriers
# initialised before the fork shows; nothing in the kernels can remove it (the workers are parked, so no
# pre-fork barrier can span the CTA). The dynamic-schedule norm's second finding (an index handed from the
# producer to the consumers through shared memory) was ordered by the FULL mbarrier in its PTX; ptxas drops
# the warp barrier before the elected arrive, which racecheck (on SASS) does not see. The current code
# writes one copy per lane and keeps an explicit `gl.thread_barrier()` before the arrive.

# %%
disp = wsan.dispatch_repro()
cm.show(disp if len(disp) else "No `results/h200/racecheck-dispatch.log`: run `ci/racecheck_dispatch/run.sh` on the GPU.")

# %% [markdown]
# ## 9. Takeaways (computed from the data above)

# %% tags=["takeaways"]
cm.show(cm.bullets(ana.takeaways(gm=gm, gemm_tab=gemm_tab, gt=gt, ws_ok=ws_ok, targets=targets, summary=norm_summary,
                                blocks=blocks, TL4=TL4, ws_tl=ws_tl, spread=spread, sw=sw, sweep_eff=sweep_eff, heur=heur,
                                norm_cen=norm_cen, gemm_cen=gemm_cen, san=san, use=use)))

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
