# ---
# jupyter:
#   gluon_lab:
#     pattern: ceilings & baselines
#     summary: Measures what 100% means on this GPU, in the same run as the kernels it judges
#       (a large device copy and a cuBLAS bf16 matmul, next to the datasheet), and the RMSNorm
#       grid of eager PyTorch, torch.compile and a one-row Triton kernel. Every later notebook reads
#       its speed-of-light percentages against these ceilings and has to beat these baselines.
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
# # 00 — Ceilings: what "100%" means on this GPU
#
# Every later notebook says a kernel reached *x %* of speed of light (SOL). This notebook pins down
# what that is measured against, on the GPU the numbers come from:
#
# * the **datasheet** (H200: 4.8 TB/s HBM3e, 989 dense bf16 TFLOP/s) — a promise, never reached;
# * **ceilings measured in the same run** as the kernels they judge: a device-to-device copy over
#   2 GiB (what a streaming kernel can hope for) and a bf16 8192³ `torch.matmul` (cuBLAS);
# * the **baselines** a Gluon pattern has to beat: eager `F.rms_norm`, `torch.compile` of the eager
#   formula, and a plain one-row-per-program Triton kernel.
#
# How we time matters as much as what we time. Kernels under ~100 µs are timed with a **CUDA graph**
# replaying the op over rotated input copies (> 3× L2, so every launch reads cold data and no host
# launch gap is on the clock); larger ones with `triton.testing.do_bench` (L2 flushed before each
# call). Section 5 shows why, with both timers side by side on the same cells.
#
# Data flows one way: this notebook → `gluon_lab` → records in `results/<gpu>/00-ceilings.jsonl` →
# plots → this page. On a machine without an sm_90+ GPU the notebook **replays** the committed
# records; it never invents a number.

# %% tags=["parameters"]
mode = "auto"              # "auto": measure on an sm_90+ GPU, else replay; "measure" | "replay" force it
quick = False              # measure mode only: a small grid (smoke run)
results_dir = None         # None: the repository's results/; else a path (relative to the cwd) to read/append
gpu = None                 # replay: results/<gpu>/ to show (None -> "h200"); measure: the GPU present
run = None                 # replay: show only this run (id, unique prefix, "newest"); None: each section its newest run
compare_to = None          # the "Compare runs" section: run A (None: the newest earlier run sharing cases with the shown run)

# %%
from gluon_lab.analysis import auto, ceilings as ana, common as cm

ctx = cm.setup(ana.NB, mode=mode, gpu=gpu, results_dir=results_dir, run=run, quick=quick, width=200)
spec, slug = ctx.spec, ctx.slug
auto_seed = auto.table_seed()  # the committed selection table's seed: the held-out draw it is checked on
print(ctx.describe())

# %% [markdown]
# ## 1. Measure (GPU) or replay (CPU)
#
# In measure mode the plan in `gluon_lab.experiments.CeilingsPlan` runs here — the same function the
# batch CLI `python -m gluon_lab bench 00-ceilings` calls on the lent H200 — and appends its records.
# Either way the rest of the notebook reads only the records.

# %%
if ctx.run_mode == "measure":
    print("appended", ana.measure(ctx, quick=quick))
df = cm.load(ctx, newest_only=True)
cm.show(cm.overview(ctx, df))

# %% [markdown]
# ## 2. The ceilings
#
# The copy moves every byte twice (read + write), like a norm that reads its input once and writes
# its output once, so its GB/s is the honest upper bound for the memory-bound kernels in this lab.
# The matmul ceiling is what cuBLAS gets on random-normal bf16 8192³ operands (power and clocks
# depend on the data: random inputs are the realistic case, zeros would flatter it).

# %%
tab = ana.ceilings_table(df, spec)
cm.show(tab if tab is not None else ana.CEILINGS_MISSING)

# %% [markdown]
# ## 3. The baseline to beat, and its code
#
# The plain Triton kernel keeps one whole row in registers (`BLOCK = next_power_of_2(N)`): one read
# of x, one write of y, masked lanes when N is not a power of two. Compiled for sm_90 here on the
# CPU, its census shows what every Gluon pattern will be compared with: 128-bit global loads, no
# TMA, no mbarriers — and, at N = 5120, a 8192-wide block with 37.5% of its lanes masked off.

# %% tags=["fold"] fold_summary="kernel source: gluon_lab/kernels/baselines.py (rms_norm_triton_kernel)"
print(ana.baseline_source())

# %%
cm.show(ana.census_view(ana.census_table(Ns=(4096, 5120, 16384))))

# %% [markdown]
# ## 4. Roofline and the RMSNorm baseline grid (bf16)
#
# A norm does ~4 FLOP per element and moves ~4 bytes per element (bf16 in + out): arithmetic
# intensity ≈ 1, deep in the bandwidth-bound corner of the roofline, where only the diagonal roof
# matters. The heatmaps give SOL % of the **datasheet** bandwidth over M ∈ {4096…32768} ×
# N ∈ {4096…16384}: first the fastest baseline of each cell next to a copy of the same-sized tensor
# (the practical roof), then every baseline on its own.

# %% tags=["headline-numbers"]
cm.show(cm.headline(ana.headline_numbers(df, spec)))

# %% tags=["headline"]
grid = ana.baseline_grid(df)
fig = ana.headline_figure(grid, spec, slug)
cm.show(cm.missing_note(grid, "the RMSNorm baseline grid"))

# %%
fig = ana.grid_heatmaps(grid, spec, slug)
cm.show(cm.graph_output_caveat(grid))

# %%
fig = ana.roofline(df, spec, slug)

# %% [markdown]
# The same grid against the **copy ceiling measured in this run** (`sol_measured_pct`): how much of
# what is achievable each baseline gets.

# %%
fig = ana.measured_heatmaps(grid)

# %% [markdown]
# Seed-format tables: each cell reads `baseline -> variant (delta)` — SOL % of the datasheet for
# both, and the speed change of the variant (ms_baseline / ms_variant − 1).

# %%
cm.show(ana.delta_tables(grid))

# %% [markdown]
# ## 5. Why the graph timer: do_bench vs CUDA graph on the same cells
#
# Each cell below was measured three times in a row with each timer. `do_bench` times every call
# with CUDA events but launches from Python: when the kernel is shorter than the host's launch path,
# the GPU waits for the host and the event pair measures that too. The graph timer launches K
# captured calls back to back on rotated inputs, so only GPU time is on the clock. The gap closes as
# the kernel grows past ~100 µs.

# %%
repeats, versus = ana.timer_study(df)
cm.show(cm.missing_note(ana.timer_records(df), "the timer study"), repeats, versus)

# %% [markdown]
# ## 6. Host cost of a call: the fast path
#
# At decode-sized inputs a norm's kernel runs for a few µs, so what a call costs is its **host
# path**: validating the inputs, resolving `variant="auto"`, computing the config, allocating the
# outputs, building TMA descriptors and going through Triton's JIT launcher. Done in full on every
# call that was 110–430 µs for the gluon-lab variants — 10–20× eager torch's.
#
# `gluon_lab.fastpath` does it once per **call signature** (op, variant, grad mode, each input's
# type, shape, strides, dtype, device, requires_grad, the scalars): the first call runs the full
# path under a recorder that keeps every Triton launch it makes (compiled kernel, grid, arguments)
# and checks that nothing else touched data (only allocations and views). Later calls with that
# signature allocate the outputs, read the operands' pointers, re-encode a TMA map only when a base
# pointer is new (Triton's own `make_tensordesc_arg`, kept per pointer), and call the compiled
# kernel's C launcher directly. A bad call is never planned, so it fails with its clear error every
# time; an operand that is not 16-byte aligned takes the full path (TMA needs the alignment, and
# Triton specializes pointers on it). Eager torch, torch.compile'd baselines and peer libraries
# that allocate workspaces (Liger) get a *direct* plan: their function, without re-validating.
#
# The table: host wall time per call of a plain Python loop of 200 calls through the public API
# (`gll.<op>(..., variant=...)`, median of 7 loops), bf16, N = K = 4096 (group/instance norm:
# C = 256, 16×16, batch B), for every available variant; QuACK's `rmsnorm` when it is installed.
# The second table times rms_norm's gluon-lab variants with the fast path off.
#
# These records were taken at git 4acbd78. The fast path changed after it in small host-side ways
# (in-place outputs, a per-call data check for ops that have one — none of the ops in this table —,
# no plan hit inside a recording, a plan that keeps no tensor alive): an extra argument, a
# thread-local lookup and two attribute lookups per call on this path, not re-timed yet.

# %%
d_on, d_off = ana.dispatch_table(df), ana.dispatch_saving(df)
cm.show(cm.missing_note(ana.dispatch_records(df), "the dispatch study"), d_on, d_off)

# %% [markdown]
# Targets: every gluon-lab variant ≤ 20 µs per call, ≤ 1.5× eager torch at M = 1, and `auto` at
# most 5 µs above the variant it chose.

# %%
cm.show(ana.dispatch_targets(df))

# %% [markdown]
# Does the replay launch the same kernel? The 01 grid (M × N) graph-timed twice in one run, through
# the variant's launcher on pre-allocated outputs (what the kernel studies time) and through the
# public function's plan replay (outputs allocated per call): the ratio should read 1.00.

# %%
cm.show(ana.fastpath_grid(df))

# %% [markdown]
# ## 7. Inside a compiled model: the Inductor rewrite
#
# `gluon_lab.inductor` is an opt-in graph rewrite on torch's pattern matcher: while it is on
# (`with gluon_lab.inductor.rewrite():`, `install()`, or one compile's
# `torch.compile(model, options=gluon_lab.inductor.options())`), Inductor's post-grad graph has
# every RMSNorm, LayerNorm and add + RMSNorm it can take — `F.rms_norm`, `nn.RMSNorm`, the fp32
# formula `x.float() … .to(dtype)` (the Hugging Face Llama form included), `F.layer_norm`,
# `nn.LayerNorm` — replaced by one `torch.ops.gluon_lab.*` custom op with `variant="auto"`. The block
# below is Llama-2-7B-shaped (hidden 4096, 32 heads, SwiGLU 11008, `F.scaled_dot_product_attention`,
# two RMSNorms and the residual adds), bf16 and fp16, random weights, inference; compiled twice and
# graph-timed side by side in one run, alternating, at four token counts. The counts are the custom
# ops in the generated code.

# %%
cm.show(cm.missing_note(ana.block_records(df), "the compiled-block study"), ana.block_table(df), ana.block_targets(df))

# %% [markdown]
# ## 8. `variant="auto"` on shapes no plan measures
#
# `auto` is what a model gets: the default of every public op and what the rewrite above calls. It is a
# model over the records (`gluon_lab.selection`): each call's eligible variants are ranked by a weighted
# fit over the measured cells *near* the call (row bytes and rows, tokens and heads, the implicit GEMM's
# M / N / K, ...; fp16 reads bf16's cells, fp32 bf16's at equal bytes where it has none of its own),
# never eager torch while an eligible variant beat it in every measured cell, the op's default where
# nothing is near. This section checks it where it was not fitted: shapes drawn at random from the table's
# seed (a hash of its evidence and of the model's rules, so each rebuilt table gets a new draw), log-uniform
# in each dimension, odd sizes included (half the GEMM and instance-norm draws 16-byte aligned, so a Gluon
# variant takes them), every op and dtype, none of them a plan's shape or a table cell; per cell, in one run,
# auto beside eager torch and every gluon-lab variant that takes the inputs, all through the public API and
# graph-timed. **auto / best** is the fastest gluon-lab variant's time over auto's (1.0: as fast); where auto
# ran that same variant it reads the noise of two timings of one kernel (±1–6% on the H200).
#
# What the table learns from: the plans' cells, the part `auto-evidence` (a fixed grid where the pattern
# pages' grids are thin: decode-sized rows, small group norms, small-image convolutions;
# `gluon_lab.holdout.EvidencePlan`), and every *earlier* check: once a later run exists, a check's cells
# (every variant side by side) vote like a plan's, and the newest check, the one shown here, never votes in
# the table it checked. `selection.cross_validate()` is the offline estimate (leave one cell out).

# %%
auto_t = auto.holdout_table(df)
cm.show(cm.missing_note(auto.holdout_records(df), "the held-out check of auto (`--parts auto-check`)"),
        auto.seed_note(df, auto_seed, auto.todays_draw(auto_seed)), cm.target_list(auto.holdout_targets(auto_t)), auto.holdout_summary(auto_t),
        auto.misses(auto_t))

# %% [markdown]
# ## 9. Takeaways (computed from the records above)

# %% tags=["takeaways"]
cm.show(cm.takeaways(ana.takeaways(df, spec) + auto.takeaways(auto_t)))

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
