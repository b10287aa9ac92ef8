# ---
# jupyter:
#   gluon_lab:
#     pattern: the row norms' backward (dx and a cross-CTA dw reduction)
#     summary: RMSNorm, LayerNorm and add+RMSNorm backward in one persistent Gluon kernel - rows of x and dy
#       read once into registers, dx from the same registers, fp32 dw/db partials per program and one
#       fixed-order reduce - measured against eager torch, torch.compile, Liger and QuACK, and wired into
#       autograd and torch.compile through torch.library.
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
# # 07 — The backward pass: norm gradients, a cross-CTA reduction, autograd
#
# With `xhat = (x − mean)·rstd` and `g = dy·w`, a row norm's backward is
#
#     dx = rstd · (g − mean(g) − xhat · mean(g·xhat))     (no mean(g) term for RMSNorm)
#     dw = Σ_rows dy·xhat,   db = Σ_rows dy
#
# `dx` needs **two passes over two inputs** (the row means first, then dx): pattern 1's reuse, twice. `dw` and
# `db` are sums over **every row** — a reduction across CTAs the forward never had. The kernel here
# (`gluon-regs`, `gluon_lab/kernels/norm_backward.py`) is the forward's rows-in-registers pattern turned around:
#
# 1. a **persistent** grid of a few programs per SM; program *p* takes row tiles *p*, *p + G*, …;
# 2. each row of x and of dy is loaded **once** (16-byte vectors) into registers; the statistics (the
#    forward's, or recomputed), both row means and dx come from those registers, dx is stored once; with
#    `prefetch` (pattern 3 in registers) the next tile's loads are issued while this tile computes;
# 3. `dy·xhat` (and `dy`) accumulate into fp32 **partials** the program keeps for its whole life — in
#    registers, or in shared memory for long rows — and are written once per program (`ws[p, :]`);
# 4. one **fixed-order column reduce** (`colsum_kernel`) sums the G partial rows into dw (db) in the weight's
#    dtype: no float atomics, the same bits on every run (a GPU test checks it).
#
# add+RMSNorm returns `(y, s = x + residual)`: the gradient reaching s is `ds + dx_norm`, and that one tensor is
# the gradient of both x and residual.
#
# The backward ops are public (`gll.rms_norm_backward(dy, x, weight, rstd=None)`, `layer_norm_backward`,
# `add_rms_norm_backward`), each with its variants (torch = aten's fused backward that eager autograd runs;
# inductor = `torch.compile` of the closed form; Liger's and QuACK's own backward functions called with the
# statistics their forwards save). The forward ops' custom ops carry `register_autograd`, which calls them;
# a grad-needing call runs the op's **training forward** (`gluon_lab::<op>_train`, `kernels/norm_train.py`:
# gluon-regs plus one fp32 store per statistic and row), so the backward reads the saved statistics.

# %% tags=["parameters"]
mode = "auto"              # "auto": measure on an sm_90+ GPU, else replay; "measure" | "replay" force it
quick = False              # measure mode only: a small grid (smoke run)
results_dir = None         # None: the repository's results/; else a path (relative to the cwd) to read/append
gpu = None                 # replay: results/<gpu>/ to show (None -> "h200")
run = None                 # replay: show only this run (id, unique prefix, "newest"); None: each section its newest run
compare_to = None          # the "Compare runs" section: run A (None: the newest earlier run sharing cases with the shown run)
parts = ["grid", "dtypes", "bwd-config", "bwd-stats", "train-step", "timeline"]  # measure mode: which parts run

# %%
from gluon_lab.analysis import common as cm, backward as ana

ctx = cm.setup(ana.NB, mode=mode, gpu=gpu, results_dir=results_dir, run=run, quick=quick)
print(ctx.describe())

# %% [markdown]
# ## 1. Measure (GPU) or replay (CPU)
#
# `gluon_lab.backward_plan.run_backward` is the plan (`python -m gluon_lab bench 07-backward` runs the same
# function on the H200). 'grid': M ∈ {4096, 16384} × the hidden sizes of 01 (4096, 8192, 16384) and the odd
# ones of 02 (1536 … 24576), bf16, the three backward ops, every variant that takes the shape (inductor at
# M = 16384 only: one compile per shape), each cell beside a copy of as many bytes as the backward's
# compulsory traffic. 'dtypes': fp16 and fp32 at M = 4096. 'bwd-config': gluon-regs's knobs at M = 16384.
# 'bwd-stats': the forward's statistics read vs recomputed. Every record is checked against float64.

# %%
if ctx.run_mode == "measure":
    print("appended", ana.measure(ctx, quick=quick, parts=parts))
allrec = cm.load(ctx)
cm.show(cm.overview(ctx, allrec))

# %% [markdown]
# ## 2. The kernel

# %% tags=["fold"] fold_summary="kernel source: norm_bwd_kernel and colsum_kernel (gluon_lab/kernels/norm_backward.py)"
print(ana.kernel_source())

# %% [markdown]
# ## 3. What the sm_90 code does (compiled here, on the CPU)
#
# Per thread and row tile: `ld.128` is x, dy and w (and ds for add+RMSNorm) — each once, so there is **no
# second global read of x or dy**; `ld.32` are the saved statistics (one fp32 per row); `st.128` is dx once plus
# the partial rows (written once per program, outside the row loop); no TMA, no atomics.
# `tests/test_norm_backward.py` asserts these counts (with `prefetch` the loads of x, dy and the statistics
# appear twice in the code: the first tile's before the loop, the next tile's inside it). The 16384-lane tiles
# (8192 < N ≤ 16384) are where the register file runs out: up to N = 12288 the heuristic keeps 16 warps with
# the partials in registers though ptxas spills (40–280 B per thread); past it, 8 warps with the partials in
# shared memory and prefetch (section 6's sweep).

# %%
cm.show(ana.census_table())

# %% [markdown]
# ## 4. The grid: gluon-regs against the best peer
#
# Per cell, the best peer's time over gluon-regs's (≥ 1: Gluon leads), all variants in one run.

# %% tags=["headline-numbers"]
cm.show(cm.headline(ana.headline_numbers(allrec)))

# %% tags=["headline"]
fig = ana.headline_figure(allrec)
cm.show(cm.missing_note(allrec, "the 07 grid"))

# %% [markdown]
# Records of the runs before 2026-12-03 20:00 UTC are STALE (the kernel and its heuristic changed since). Some of
# them also carried a source hash no machine reproduces at their commit (the SM-count cache was a module dict the
# code hash read, filled by the first launch); the cache is now an `lru_cache`, which the hash does not read.

# %%
cm.show(*ana.about(allrec))
cm.show(*ana.scoreboard_grids(allrec))

# %% [markdown]
# Rows gluon-regs refuses (a row of x and of dy in registers needs `next_power_of_2(N) ≤ 16384`); auto runs
# eager torch there. A shared-memory-cached variant for long rows (pattern 1's TMA row) is the next kernel.

# %%
cm.show(ana.uncovered(allrec))

# %% [markdown]
# ## 5. Targets
#
# Best Gluon backward ≥ the best peer in every cell and ≥ 1.10× its geomean; ≥ 85% of the measured copy
# ceiling for the bytes moved at M·N ≥ 64 Mi.

# %% [markdown]
# ### QuACK
#
# QuACK's `rmsnorm_bwd` / `layernorm_bwd` (CuTe DSL, installed from wheels on the measuring machine) in a run of
# their own beside gluon-regs and torch ('quack-peer', M = 16384): not part of the grid's scoreboard, which is
# another run.

# %%
cm.show(ana.quack_table(allrec))

# %% tags=["targets"]
cm.show(*ana.scoreboard_view(allrec))
cm.show(cm.target_list(ana.ceiling_target(allrec)))

# %%
cm.show(ana.ceiling_table(allrec))

# %% [markdown]
# ### The dw reduction's cost
#
# From the byte model: the G programs write G fp32 partial rows per parameter and the reduce reads them back.
# With a few programs per SM that is 1–15% of the compulsory bytes (most at small M, LayerNorm's two
# parameters); one program per row tile would make it as large as x itself. The timeline below also times
# the column reduce on its own, beside the whole op.

# %%
cm.show(ana.partials_share(allrec))

# %% [markdown]
# ### A measured timeline of the persistent programs
#
# The INSTRUMENT build of `norm_bwd_kernel` (`INSTRUMENT=True`, `backward_plan.capture_timeline`) stamps
# `%globaltimer` three times per row tile of every program: the tile's start, its statistics ready, and its
# partials folded in (dx stored); and once when the program's partial row is stored. With the forward's
# statistics the second stamp comes right after the loads are *issued* (nothing consumes x or dy before it), so
# the data's arrival shows in the second phase. RMSNorm 8192 × 4096 (8 warps, two programs per SM, partials in
# registers) and LayerNorm 8192 × 14336 (8 warps, one program per SM, partials in shared memory, prefetch).
# The column reduce is timed alone beside the op: at RMSNorm 8192 × 4096 it is a large share (its grid is
# N / 128 = 32 programs), the next thing to fix there.

# %%
TL = ana.load_timeline(ctx)
cm.show(ana.timeline_note(ctx, TL, allrec))
cm.show(ana.timeline_stats(TL))
fig = ana.timeline_figure(TL)

# %% [markdown]
# ## 6. Studies
#
# **bwd-config**: warps × programs per SM × partials (registers / shared memory) at M = 16384; the heuristic
# (`BwdConfig.heuristic`) against the best swept config. **bwd-stats**: the forward's statistics read vs
# recomputed from the x already in registers.

# %%
cm.show(ana.config_study(allrec))

# %%
cm.show(ana.stats_study(allrec))

# %% [markdown]
# ## 7. fp16 and fp32 (a subset)

# %%
cm.show(ana.dtype_table(allrec))

# %% [markdown]
# ## 8. Autograd
#
# `gll.rms_norm(x, w)` with an input that requires grad (variant `auto` or `gluon-regs`) goes through its
# training forward `torch.ops.gluon_lab.rms_norm_train` (`kernels/norm_train.py`: gluon-regs plus one fp32 store
# of rstd per row; mean too for LayerNorm; aten's fused forward where gluon-regs cannot take the input), whose
# `register_autograd` formula saves x (s for add+RMSNorm), the weight and the statistics and calls
# `torch.ops.gluon_lab.rms_norm_backward` on them — the forward's variant where the backward op has it, else
# `auto`. Other named variants go through the plain custom op, whose backward recomputes the statistics. Under `torch.compile(fullgraph=True)` AOT autograd traces both custom ops. The GPU tests
# (`tests/test_norm_backward_gpu.py`) check the gradients against float64 autograd, `torch.library.opcheck`
# with the autograd checks, and a compiled training step. Here on the CPU, the same path with the torch
# variants:

# %%
import torch
import gluon_lab as gll
x = torch.randn(4, 64, requires_grad=True)
w = torch.rand(64, requires_grad=True)
y = gll.rms_norm(x, w)
y.pow(2).sum().backward()
print(type(y.grad_fn).__name__, tuple(x.grad.shape), tuple(w.grad.shape))

# %% [markdown]
# ## 9. A training step, compiled with and without the rewrite
#
# A Llama-style decoder block (hidden 4096, 32 heads, MLP 11008, two `nn.RMSNorm`s, bf16): `loss =
# block(x).float().pow(2).mean(); loss.backward()` under `torch.compile`, and under `torch.compile` with
# `gluon_lab.inductor.options()`, whose training rewrite (`gluon_lab.inductor_training`) turns the norms into
# gluon-lab's custom ops before AOT autograd (x + residual before the second norm becomes one `add_rms_norm`).
# The rewrite emits the training forwards (`gluon_lab::rms_norm_train`, `add_rms_norm_train`: y and the fp32
# rstd), so the backward ops read the saved statistics. Target: with ≥ 1.0× without, gradients equal to the
# eager step's within bf16 tolerance.

# %%
cm.show(*ana.training_step(allrec))

# %% [markdown]
# ## Takeaways

# %% tags=["takeaways"]
cm.show(cm.takeaways(ana.takeaways(allrec)))

# %% [markdown]
# ## Compare runs

# %%
cm.show(*cm.compare_runs(ctx, compare_to))
