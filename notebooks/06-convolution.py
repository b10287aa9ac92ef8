# ---
# jupyter:
#   gluon_lab:
#     pattern: implicit-GEMM convolution on Hopper
#     summary: A 2-D convolution as a GEMM whose A operand is gathered from the image by tiled TMA
#       boxes (no im2col mode in triton 3.6.0), shifted per kernel tap, with a parity-split view for
#       stride 2, or by 16-byte cp.async where no box fits; a persistent wgmma pipeline as in the GEMM.
#       Measured against cuDNN and plain Triton implicit GEMMs on UNet and ResNet shapes, with the
#       backward pair (dgrad as the same kernel once per output parity, wgrad as a split-K GEMM over
#       the output pixels) and the measured timeline of persistent CTAs.
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
# # 06 — Implicit-GEMM convolution on Hopper: fprop, dgrad, wgrad
#
# `gll.conv2d(x, weight, stride, padding)` is `torch.nn.functional.conv2d` for channels-last (NHWC in
# memory) bf16/fp16 activations: R = S ∈ {1, 3}, stride 1 or 2, padding 0 or 1, fp32 accumulation.
# As a GEMM it is **M = B·OH·OW** output pixels × **N = Co** output channels × **K = R·R·Ci**:
# row m of A is the receptive field of one output pixel (im2col), column n of B the filter of one
# output channel. The backward passes are GEMMs too:
# * **dgrad** `gll.conv2d_input_grad(grad_output, weight, H, W, stride, padding)` (or
#   `gll.conv2d_input_grad_like_torch(input_size, weight, grad_output, ...)`, torch.nn.grad's order):
#   at stride 1 it *is* a convolution — of grad_output with the filters flipped in (r, s) and Ci/Co
#   swapped, at padding R − 1 − pad — so it runs the fprop kernel (M = B·H·W, N = Ci, K = R·R·Co).
#   At stride 2 (a transposed convolution) each output parity (ph, pw) of dx is its own stride-1
#   convolution of grad_output with the taps r ≡ ph + pad (mod 2) (`conv.dgrad_subproblems`: for a
#   3 × 3 filter at padding 1, sub-filters of 1 × 1, 1 × 2, 2 × 1 and 2 × 2 taps): four launches of
#   the same kernel side by side on forked streams, each writing its parity through its own view of
#   dx (`[B, H/2, 2, W/2, Ci]` at base dx + pw·Ci: TMA clips every box at Ci, so they never overlap);
# * **wgrad** `gll.conv2d_weight_grad(x, grad_output, R, stride, padding)` (and `…_like_torch`):
#   `grad_W[Co, (r, s, Ci)] = grad_outᵀ[Co, M] @ im2col(x)[M, (r, s, Ci)]` — the long K = M = B·OH·OW
#   is split over CTAs (fp32 atomics into a workspace). Its operands are the same boxes turned
#   around: the grad_output patch box is A (transposed: pixels are K), the x box shifted per tap is B.
#
# The question here is how A gets into shared memory. Hopper's copy engine has an im2col mode, but
# triton 3.6.0 exposes tiled TMA only. So an M-tile is a **spatial patch** of TH × TW output pixels of
# one image, and for each kernel tap (r, s) the patch's receptive field is **one tiled box** of x
# shifted by (r − pad, s − pad): TMA's zero fill outside the image *is* the padding. Stride 2 would need
# an element stride the tiled descriptor does not have — instead x is viewed as
# `[B, H/2, 2, W/2, 2·Ci]` (row parity and column parity as dims), where the stride-2 gather of a tap
# is again a unit-stride box. Where no box fits (odd H or W at stride 2; Ci or Co not a multiple of 8,
# where TMA strides are not 16-byte multiples) `gluon-gather` gathers A pixel by pixel with masked
# 16-byte `cp.async` (Ampere's copy, zero-filled where the mask is off) into the same NVMMA-swizzled
# ring, after padding the channels to a multiple of 8 on the host when needed.

# %% tags=["parameters"]
mode = "auto"              # "auto": measure on an sm_90+ GPU, else replay; "measure" | "replay" force it
quick = False              # measure mode only: a small grid (smoke run)
results_dir = None         # None: the repository's results/; else a path (relative to the cwd) to read/append
gpu = None                 # replay: results/<gpu>/ to show (None -> "h200")
run = None                 # replay: show only this run (id, unique prefix, "newest"); None: each section its newest run
compare_to = None          # the "Compare runs" section: run A (None: the newest earlier run sharing cases with the shown run)
parts = ["fprop", "gather", "fprop-sweep", "tail-sweep", "dgrad", "wgrad", "wgrad-sweep", "timeline", "ws-timeline"]  # measure mode

# %%
from gluon_lab.analysis import common as cm, convolution as ana

ctx = cm.setup(ana.NB, mode=mode, gpu=gpu, results_dir=results_dir, run=run, quick=quick)
spec, slug = ctx.spec, ctx.slug
print(ctx.describe())

# %% [markdown]
# ## 1. Measure (GPU) or replay (CPU)
#
# `gluon_lab.experiments.run_conv` is the plan (`python -m gluon_lab bench 06-convolution` runs the
# same function on the H200): six shapes around the issue's anchors (the Gluon example's 128 × 384 →
# 384 at 64 × 64, SD UNet 3 × 3 at stride 1 and 2, a 1 × 1 shortcut, ResNet-50 stage-3 and downsample
# shapes), each with cuDNN (`cudnn.benchmark = True`, channels-last), the plain Triton implicit GEMM
# and the Gluon fprop (pipelined, warp-specialized and the cp.async gather), bf16, CUDA-graph timing;
# two shapes only the gather takes (an odd-size stride-2 SD shape and an RGB stem); knob sweeps of
# the Gluon tiles; the same shapes' dgrad and wgrad (cuDNN, Triton, Gluon); and the INSTRUMENT
# build's per-tile timeline. Correctness against float64 is checked in every record, and the SM
# clock (NVML) read after every timing is in the record's config.

# %%
if ctx.run_mode == "measure":
    print("appended", ana.measure(ctx, quick=quick, parts=parts))
allrec = cm.load(ctx)
cm.show(cm.overview(ctx, allrec))

# %% [markdown]
# ## 2. How A is gathered, per shape
#
# The A path of each shape and why (`conv.a_path`): tiled TMA boxes where the strides are 16-byte
# multiples (Ci, Co multiples of 8) and, at stride 2, H and W are even; else the cp.async gather (with
# host channel padding for Ci or Co not a multiple of 8). Its GEMM view and the heuristic tile
# (`ConvConfig.heuristic`: BM = 256 as an 8 × 32 patch for 3 × 3 filters on rows ≥ 32 wide, BN 256
# when Co is a multiple of 256, else BM 128 as wide as the row allows; each rule carries its measured
# reason in the source).

# %%
cm.show(ana.a_paths())

# %% [markdown]
# ## 3. The kernel
#
# Persistent CTAs walk (patch, Co band) tiles in grouped order; a ring of NUM_STAGES slots holds, per
# k-step (tap, channel block), the A box `[1, TH, 1, TW, BK]` and the weight box `[BN, 1, BK]` (OHWI
# filters, fed to wgmma as the K-major transpose). The load stream runs NUM_STAGES − 1 steps ahead,
# across tile boundaries; one async wgmma group is in flight; the epilogue stores the patch with one
# TMA box `[1, TH, 1, TW, BN]` of the output's 5-D view `[B, OH', P, OW', P·Co]` (P = 1 for fprop;
# P = 2 for a stride-2 dgrad's parity), clipped at the image edge.

# %% tags=["fold"] fold_summary="kernel source: conv_fprop_kernel and its helpers (gluon_lab/kernels/conv.py)"
print(ana.kernel_source())

# %% [markdown]
# ## 4. What the sm_90 code does (compiled here, on the CPU)
#
# Per k-step two `UTMALDG` (the code holds NUM_STAGES of them: the prologue's and the loop's), no
# `ld.global` and no cp.async at all, BK/16 wgmma per 64-row block, one `UTMASTG` per tile, no spills.
# gluon-ws issues its boxes at one place (the producer warp: 2 `UTMALDG` in the code) under its
# `setmaxnreg` budget. gluon-gather has no TMA load: per k-step (BM + BN)·BK / 8 / threads 16-byte
# `cp.async` per thread (16 at 128 × 128 × 64), a `cp.async.wait_group`, an async-proxy fence and a
# CTA barrier before its wgmma. The Triton baselines gather with cp.async (Triton pipelines their
# pointer loads) into wgmma. `tests/test_conv.py` asserts these counts, and the same for dgrad (the
# fprop kernel; at stride 2 the 2 × 2-tap sub-problem at output parity 1) and wgrad (2 boxes per
# k-step, fp32 atomics, no plain stores).

# %%
cm.show(ana.census_view(ana.census_table()))

# %% [markdown]
# ## 5. Throughput against cuDNN

# %% tags=["headline-numbers"]
cm.show(cm.headline(ana.headline_numbers(allrec, spec)))

# %% tags=["headline"]
fig = ana.headline_figure(allrec, spec, slug)
cm.show(cm.missing_note(ana.fprop(allrec), "the conv2d fprop plan"))

# %%
cm.show(ana.tflops_table(allrec))

# %%
fig = ana.roofline(allrec, spec, slug)

# %% [markdown]
# ### The measured timeline of persistent CTAs
#
# The INSTRUMENT build of the fprop kernel stamps `%globaltimer` four times per tile (tile start,
# first k-step's data ready, last MMA retired, TMA store issued) for every CTA of the grid
# (`experiments.capture_conv_timeline`, the heuristic config, the second of two launches). On the
# example shape a CTA runs 46–47 tiles and its k-loop is ~96% of its span (first-data wait and
# epilogue about 0.5 µs each per 37 µs tile: the ring running ahead across tiles hides the next
# tile's loads). On the 1 × 1 shortcut the k-loop is 87% of a tile (10 k-steps, 3.4 µs) and the grid
# is the problem: 192 tiles on 132 CTAs, so 60 CTAs run a second tile while the rest idle (the finish
# spread is a whole tile) — wave quantization, which neither smaller tiles (BM 64: 268 TFLOP/s) nor
# two CTAs per SM (232–265) fixed in the sweeps; a stream-K split of the last wave is the next step.

# %%
TL = ana.load_timeline(ctx)
cm.show(ana.timeline_stats(TL))
fig = ana.timeline_figure(TL)

# %% [markdown]
# ### Shapes without a TMA path
#
# The odd-size stride-2 shape and the RGB stem, which only gluon-gather takes among the Gluon kernels
# (in the table above, the Gluon ratio of those rows is gluon-gather's).

# %%
cm.show(ana.sweep_table(allrec, "gather-sweep"))

# %% [markdown]
# ### dgrad and wgrad
#
# The same shapes' input gradients (cuDNN's dgrad runs at about half its fprop here) and filter
# gradients, each table from its own run (cuDNN, Triton and the Gluon kernels side by side).

# Since the implicit-GEMM template (issue 32), gluon-ws dgrad reads the forward OHWI filter in place
# (`filter_box_issue`: the rotated tap by index, an N-contiguous B) instead of a rotated copy — at 1280 × 1280
# × 3 × 3 that copy had cost more than the dgrad's MMAs — and wgrad stores its gradient directly in its dtype
# when it runs one split (no fp32 workspace, zero fill, atomics or cast pass).
#
# wgrad has two Gluon kernels. gluon-pipelined (`conv.conv_wgrad_kernel`) runs one (co block, tap, ci block)
# tile per program over a split of the pixels, fp32 atomics under a split. gluon-ws (`kernels/conv_wgrad_ws.py`)
# is wgrad on the implicit-GEMM template: M = Co, N = taps × Ci, K = the pixel patches; a 1-warp producer issues
# the grad_output box and the tap-shifted x box (`wgrad_issue`) into the template's empty/full ring, the grid is
# persistent (a CTA's next tile loads while its last one stores), each whole tile leaves as one TMA store of a
# [BM, 1, BN] box of the [Co, R·R, Ci] gradient, and a split over the pixels sums its fp32 partials in a
# deterministic fixup (`wgrad_fixup_kernel`) instead of atomics. The two are complementary: on few-pixel shapes
# (hundreds of tiles of 1-16 k-steps) the persistent grid and the TMA-store epilogue are what matter; on long
# pixel loops the mainloop is. `auto` and the targets below take the faster per shape.

# %%
cm.show(ana.tflops_table(allrec, ana.DGRAD))
cm.show(ana.tflops_table(allrec, ana.WGRAD))

# %% [markdown]
# ### Schedules: which CTA runs which tile and which k-steps
#
# gluon-ws conv is an instance of the implicit-GEMM template (`kernels/igemm`: ring × producer × schedule ×
# epilogue), so it takes the GEMM's schedules. A conv tile is a TH × TW patch of output pixels × BN channels
# with taps × Ci / BK k-steps; a small image with many channels has few tiles and long K, and a data-parallel
# grid leaves most of the 132 SMs idle. Split-K cuts each tile's k-steps into balanced slices, each slice's
# fp32 partial goes from registers to a workspace (`store_partial`) and `patch_fixup_kernel` sums the slices
# in order (deterministic) into the NHWC output. The wave map: per shape, the tiles, how full a
# data-parallel grid's waves are, and the schedule `split_choice` picks (its largest launch); for wgrad the
# tiles are Co / BM × taps × Ci / BN and the k-steps are the pixel patches, so the split is over the pixels
# (`conv_wgrad_ws.split_choice`: waves × (k-steps per slice + 4), the cost model gluon-pipelined's split was
# measured with).

# %%
cm.show(ana.wave_map())
cm.show(ana.wave_map(op=ana.DGRAD))
cm.show(ana.wave_map(op=ana.WGRAD))

# %% [markdown]
# The schedule study (every schedule side by side, one run): split-K wins where the data-parallel grid fills
# under half the SMs, and loses everywhere else (the partials and the fixup are pure overhead); the last-wave
# split lost on every shape measured. `split_choice` and its thresholds cite these cells. Two columns change how
# a split tile is summed or what a tile is, not who runs it: **serial** split-K (CUTLASS's serial reduction: each
# slice stores its partial and arrives on its tile's counter, and the last to arrive sums the partials in slice
# order — the fixup's bits — and stores the tile itself, so no fixup launch runs); and on 1 × 1 shapes the **flat**
# view (the B·H·W pixels as the GEMM's rows, 128-pixel tiles across images instead of one image's patches). A
# point of the plan that no run has measured yet has no column (`python -m gluon_lab refresh --dry-run` lists it).

# %%
cm.show(ana.schedule_table(allrec))
cm.show(ana.schedule_table(allrec, ana.DGRAD))
cm.show(ana.schedule_table(allrec, ana.WGRAD))

# %% [markdown]
# The split-K schedule as it runs: the INSTRUMENT build of gluon-ws fprop (`igemm.trace.unit_stamps`, the same
# per-unit stamps and view as the GEMM's schedule timeline on page 04) on two SM-idle shapes, persistent
# data-parallel against the heuristic's split-K plan (`experiments.capture_conv_ws_timeline`, the second of two
# launches). Each CTA is one lane, its units' mainloops coloured by K-slice: data-parallel leaves a few CTAs with
# one long tile each; split-K gives many CTAs a short slice each, and the fixup kernel that sums the slices runs
# after this span (the gap between the span and the timed µs above).

# %%
WT = ana.load_ws_timeline(ctx)
cm.show(ana.ws_timeline_note(WT), ana.ws_timeline_stats(WT))
fig = ana.ws_timeline_figure(WT)

# %% [markdown]
# ## 6. Targets
#
# fprop ≥ 1.0× cuDNN on every shape (issue 32: ≥ 1.0× geomean, ≥ 0.90× on every shape); dgrad ≥ 1.5× cuDNN
# on every shape; wgrad ≥ 1.0× cuDNN (issue 32: geomean, ≥ 0.90× on every shape). Where they miss (run
# `20261204T145051Z`): the 1 × 1 fprop shapes are short GEMMs (K = Ci: 10-20 k-steps) — at 1280 channels on
# 8 × 8 images even split-K 4 leaves the fixup's fp32 round trip in a 10 µs kernel (0.58×), and SD's 1 × 1
# has a 73%-full last wave (0.78×); the SM-idle dgrad shapes reach 1.37-1.54× with split-K (0.35× before),
# three of them just under 1.5×; wgrad has no template schedule yet: on few-pixel shapes its K (the pixels)
# is short and its 128 × 128 tiles × 9 taps write the whole gradient once per tile (0.46-0.75×), and SD 3 × 3
# runs 128-wide tiles over 384 of 320 channels in both dims (0.69×).

# %% tags=["targets"]
cm.show(ana.targets(allrec))

# %% [markdown]
# Issue 32 asks it of the fastest Gluon kernel per shape (what `auto` can run: gluon-pipelined, gluon-ws or
# gluon-gather), same run as cuDNN: fprop and wgrad ≥ 1.0× geomean and ≥ 0.90× on every shape, dgrad ≥ 1.5×
# on every shape.

# %%
cm.show(cm.target_list(ana.issue_targets(allrec)), *(ana.best_gluon(allrec, op) for op in (ana.OP, ana.DGRAD, ana.WGRAD)))

# %% [markdown]
# The Gluon tile's knobs on every plan shape (patch TH × TW, BN, ring stages, warps), the heuristic's
# record beside them; the short-K shapes' tail sweep (two CTAs per SM: no gain), for fprop and dgrad;
# and the wgrad kernel's knobs (patch, tile, ring, warps, split). The heuristics were set from a first
# run of these sweeps (`20261201T172153Z`, now stale: the heuristics changed after it) and the sweeps
# re-run on the final code.

# %%
cm.show(ana.sweep_table(allrec))
cm.show(ana.sweep_table(allrec, "tail-sweep"))
cm.show(ana.sweep_table(allrec, "tail-sweep", ana.DGRAD))
cm.show(ana.sweep_table(allrec, "wgrad-sweep"))

# %% [markdown]
# ## 7. Takeaways (computed from the records above)

# %% tags=["takeaways"]
cm.show(cm.takeaways(ana.takeaways(allrec, spec, history=cm.archived(ctx))))  # cuDNN's run-to-run spread: archived runs too

# %% [markdown]
# ## Compare runs
#
# Per-case time ratios of two runs of this notebook (time B / time A; below 1.0 run B is faster).
# The same from a shell: `python -m gluon_lab compare 06-convolution RUN_A RUN_B`.

# %%
cm.show(cm.compare_runs(ctx, compare_to))
