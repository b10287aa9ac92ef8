# ---
# jupyter:
#   gluon_lab:
#     pattern: implicit-GEMM convolution on Hopper
#     summary: A 2-D convolution as a GEMM whose A operand is gathered from the image by tiled TMA
#       boxes (no im2col mode in triton 3.6.0), shifted per kernel tap, with a parity-split view for
#       stride 2; a persistent wgmma pipeline as in the GEMM. Measured against cuDNN and a plain Triton
#       implicit GEMM on UNet and ResNet shapes, with the backward pair (dgrad as the same kernel on
#       rotated filters at stride 1, wgrad as a split-K GEMM over the output pixels).
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
#   Stride 2 (a transposed convolution: 4 stride-1 sub-problems by output parity) is not built in
#   Gluon; the Triton dgrad (masked gathers per tap) and cuDNN take it;
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
# is again a unit-stride box.

# %% tags=["parameters"]
mode = "auto"              # "auto": measure on an sm_90+ GPU, else replay; "measure" | "replay" force it
quick = False              # measure mode only: a small grid (smoke run)
results_dir = None         # None: the repository's results/; else a path (relative to the cwd) to read/append
gpu = None                 # replay: results/<gpu>/ to show (None -> "h200")
run = None                 # replay: show only this run (id, unique prefix, "newest"); None: each section its newest run
compare_to = None          # the "Compare runs" section: run A (None: the newest earlier run sharing cases with the shown run)
parts = ["fprop", "fprop-sweep", "dgrad", "wgrad"]  # measure mode: which parts of the plan run

# %%
from gluon_lab.analysis import common as cm, convolution as ana

ctx = cm.setup(ana.NB, mode=mode, gpu=gpu, results_dir=results_dir, run=run, quick=quick)
spec, slug = ctx.spec, ctx.slug
print(ctx.describe())

# %% [markdown]
# ## 1. Measure (GPU) or replay (CPU)
#
# `gluon_lab.experiments.run_conv` is the plan (`python -m gluon_lab bench 06-convolution` runs the
# same function on the H200): six shapes around the anchors (the Gluon example's 128 × 384 →
# 384 at 64 × 64, SD UNet 3 × 3 at stride 1 and 2, a 1 × 1 shortcut, ResNet-50 stage-3 and downsample
# shapes), each with cuDNN (`cudnn.benchmark = True`, channels-last), the plain Triton implicit GEMM
# and the Gluon fprop (pipelined and warp-specialized), bf16, CUDA-graph timing; a knob sweep of the
# Gluon tile on every shape; and the same shapes' dgrad and wgrad.
# Correctness against float64 is checked in every record.

# %%
if ctx.run_mode == "measure":
    print("appended", ana.measure(ctx, quick=quick, parts=parts))
allrec = cm.load(ctx)
cm.show(cm.overview(ctx, allrec))

# %% [markdown]
# ## 2. How A is gathered, per shape
#
# The A path of each shape (and why, where the Gluon kernel refuses it: TMA strides must be multiples
# of 16 bytes, so Ci and Co multiples of 8; the parity split needs even H and W), its GEMM view and
# the heuristic tile (`ConvConfig.heuristic`: the patch as wide as the output row allows up to 32, BN
# the power of 2 that wastes least of Co's last band).

# %%
cm.show(ana.a_paths())

# %% [markdown]
# ## 3. The kernel
#
# Persistent CTAs walk (patch, Co band) tiles in grouped order; a ring of NUM_STAGES slots holds, per
# k-step (tap, channel block), the A box `[1, TH, 1, TW, BK]` and the weight box `[BN, 1, BK]` (OHWI
# filters, fed to wgmma as the K-major transpose). The load stream runs NUM_STAGES − 1 steps ahead,
# across tile boundaries; one async wgmma group is in flight; the epilogue stores the patch with one
# 4-D TMA box `[1, TH, TW, BN]`, clipped at the image edge.

# %% tags=["fold"] fold_summary="kernel source: conv_fprop_kernel and its helpers (gluon_lab/kernels/conv.py)"
print(ana.kernel_source())

# %% [markdown]
# ## 4. What the sm_90 code does (compiled here, on the CPU)
#
# Per k-step two `UTMALDG` (the code holds NUM_STAGES of them: the prologue's and the loop's), no
# `ld.global` and no cp.async at all, BK/16 wgmma per 64-row block, one `UTMASTG` per tile, no spills.
# gluon-ws issues its boxes at one place (the producer warp: 2 `UTMALDG` in the code) under its
# `setmaxnreg` budget. The Triton baseline gathers A with cp.async (Triton pipelines its pointer
# loads) into wgmma. `tests/test_conv.py` asserts these counts, and the same for dgrad (the fprop
# kernel at padding R − 1 − pad) and wgrad (2 boxes per k-step, fp32 atomics, no plain stores).

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
# ### dgrad and wgrad
#
# The same shapes' input gradients (cuDNN's dgrad runs at about half its fprop here) and filter
# gradients, each table from its own run (cuDNN and the Gluon kernels side by side).

# %%
cm.show(ana.tflops_table(allrec, ana.DGRAD))
cm.show(ana.tflops_table(allrec, ana.WGRAD))

# %% [markdown]
# ## 6. Targets
#
# fprop ≥ 1.0× cuDNN on every shape (moonshot 1.1×); dgrad ≥ 1.5× cuDNN (the Gluon dgrad: stride
# 1); wgrad ≥ 1.0× cuDNN.

# %% tags=["targets"]
cm.show(ana.targets(allrec))

# %% [markdown]
# The Gluon tile's knobs on every plan shape (patch TH × TW, BN, ring stages, warps), the heuristic's
# record beside them. The heuristic was set from this sweep (run `20261201T161620Z`), so the sweep's records
# count as stale: the kernel they ran is the current one, only `ConvConfig.heuristic` (part of the
# variant's source hash) changed after them; the heuristic column is the newest run's.

# %%
cm.show(ana.sweep_table(allrec))

# %% [markdown]
# ## 7. Takeaways (computed from the records above)

# %% tags=["takeaways"]
cm.show(cm.takeaways(ana.takeaways(allrec, spec)))

# %% [markdown]
# ## Compare runs
#
# Per-case time ratios of two runs of this notebook (time B / time A; below 1.0 run B is faster).
# The same from a shell: `python -m gluon_lab compare 06-convolution RUN_A RUN_B`.

# %%
cm.show(cm.compare_runs(ctx, compare_to))
