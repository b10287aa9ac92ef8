# ---
# jupyter:
#   gluon_lab:
#     pattern: fused QK-norm + RoPE on packed QKV
#     summary: Normalizes every Q and K head of a packed QKV tensor and rotates it by RoPE in place,
#       with each head's two rotary halves loaded once into the same registers, reduced warp-locally,
#       rotated and stored once. Measured against eager PyTorch, torch.compile and a plain Triton
#       kernel over 1 to 8192 tokens, and checked structurally in the sm_90 code.
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
# # 05 — Fused QK-norm + RoPE on packed QKV: one read, one write
#
# Qwen3- and Llama-style attention prepares Q and K by normalizing every head (RMSNorm over the head
# dim D, a learned weight per dim) and rotating it by RoPE at the token's position. vLLM calls the
# fused form `fused_qk_norm_rope`: `qkv` is the packed projection output `[T, (Hq + 2·Hk)·D]`,
# updated **in place**; V is untouched. `gll.qk_norm_rope(qkv, Hq, Hk, D, q_weight, k_weight,
# cos_sin_cache, positions, eps, is_neox)` is that op here (fp32 math, one rounding at the store).
#
# Unfused, the op reads and writes Q and K several times (norm, then rotation, with the partner
# half of each head needed by the rotation). The pattern: load each head's two rotary halves **once**
# into the same register layout — element j of the first half and element j of the second half in
# the same thread — so the sum of squares is a warp-local reduction and the rotation
# `(y1·c − y2·s, y2·c + y1·s)` needs no data exchange at all; store each half once. No shared memory,
# no CTA barrier. GPT-J's interleaved pairs `(2i, 2i+1)` are one 32-bit word: one load of words,
# each split in registers, one store.
#
# The byte model counts Q and K read and written once (plus the gathered cos/sin rows): a perfect
# kernel moves 4·(Hq + Hk)·D bytes per token in bf16. The timer is the CUDA graph over rotated
# copies (each captured call updates its own copy in place); below ~16 tokens a call moves a few
# KB and 256 copies cannot exceed 3× L2: those records say "partial rotation".

# %% tags=["parameters"]
mode = "auto"              # "auto": measure on an sm_90+ GPU, else replay; "measure" | "replay" force it
quick = False              # measure mode only: a small grid (smoke run)
results_dir = None         # None: the repository's results/; else a path (relative to the cwd) to read/append
gpu = None                 # replay: results/<gpu>/ to show (None -> "h200")
run = None                 # replay: show only this run (id, unique prefix, "newest"); None: each section its newest run
compare_to = None          # the "Compare runs" section: run A (None: the newest earlier run sharing cases with the shown run)
parts = ["sweep", "dims", "tma-sweep", "inductor-code"]  # measure mode: which parts of the plan run

# %%
from gluon_lab.analysis import common as cm, qk_norm_rope as ana

ctx = cm.setup(ana.NB, mode=mode, gpu=gpu, results_dir=results_dir, run=run, quick=quick)
spec, slug = ctx.spec, ctx.slug
print(ctx.describe())

# %% [markdown]
# ## 1. Measure (GPU) or replay (CPU)
#
# `gluon_lab.experiments.run_qk_norm_rope` is the plan (`python -m gluon_lab bench
# 05-fused-qk-norm-rope` runs the same function on the H200): the 42-case sweep T ∈ {1, 2, 4, …, 8192}
# × (Hq, Hk) ∈ {(16, 8), (32, 8), (64, 8)} at D = 128 ('sweep') and the same at D = 64 and 256
# ('dims'), every variant, bf16, NeoX, full rotary, random positions, plus a `y.copy_(x)` of each
# cell's Q/K bytes at T ≥ 256 (the bandwidth a copy of that size reaches); the knob sweeps
# ('tma-sweep', 'persistent-sweep'); and the PTX of the Triton kernels Inductor generates for the
# formula ('inductor-code'). Correctness against float64 is checked in every record.

# %%
if ctx.run_mode == "measure":
    print("appended", ana.measure(ctx, quick=quick, parts=parts))
allrec = cm.load(ctx)
cm.show(cm.overview(ctx, allrec))

# %% [markdown]
# ## 2. The kernel
#
# A CTA takes `HEADS` consecutive (token, head) units of the flattened Q/K head list (V heads are
# never visited): lanes cover `TPW_D = (D/2)/8` 16-byte vectors of a head and `TPW_H = 32/TPW_D`
# heads, warps stack more heads. The heuristic (`FusedConfig.heuristic`): 4 warps while the grid
# fills two waves of the SMs, one warp per CTA below that (decode: the few heads spread over as
# many SMs as possible).

# %% tags=["fold"] fold_summary="kernel source: gluon_lab/kernels/qk_norm_rope.py (qk_norm_rope_kernel and its helpers)"
print(ana.kernel_source())

# %% [markdown]
# **Partial rotary** (`rotary_dim` R < D, e.g. R = D/2) keeps the full-head normalization: the head
# is three pieces — the two rotary halves `[0, R/2)`, `[R/2, R)` in the same layout as above, and the
# unrotated tail `[R, D)` (padded to a power of 2, masked) — each loaded once, all three in the sum
# of squares, the halves rotated, each piece stored once where it came from. GPT-J's tail is words
# like its pairs. The Gluon kernels take R/2 a power of 2 of at least one 16-byte vector; other R go
# to the Triton kernel (any even R).
#
# A second schedule, **gluon-persistent**, keeps CTAs resident: each strides over tiles, loads the
# weights once, and loads the *next* tile's qkv and positions into registers before it reduces,
# rotates and stores the current one (one tile of prefetch). Section 6 sweeps its warps and CTAs per
# SM; it is measured everywhere next to gluon-fused.
#
# The third, **gluon-tma**, moves qkv with the copy engine: a 3-D descriptor over
# `[T, Hq + Hk, D]` (the row stride skips V, and the descriptor's head bound stops at Hq + Hk, so V
# is never read or written and ragged tails are TMA's bounds), boxes of `[BT tokens, 8 heads, D/2]`
# (NeoX: the two rotary halves as two boxes; GPT-J: the head's words as one), a ring of 3 stages per
# persistent CTA, 2 CTAs per SM. The smem tile is read into the same register layout as gluon-fused
# (both halves in the same thread), reduced and rotated there, and leaves through two staging
# buffers and TMA stores (or 128-bit register stores, a knob). The positions are loaded two tiles
# ahead and the cos/sin rows one tile ahead, so the position → cache-row chain never stalls a tile.

# %% tags=["fold"] fold_summary="kernel source: qk_norm_rope_tma_kernel and its helpers"
print(ana.tma_kernel_source())

# %% [markdown]
# ## 3. What the sm_90 code does (compiled here, on the CPU)
#
# The census counts the global accesses per thread in the PTX. gluon-fused, NeoX: two 128-bit qkv
# loads and two 128-bit qkv stores (the only stores), four 128-bit weight loads, two cos/sin loads,
# the 64-bit position, **no `bar.sync`**; GPT-J: one word load and one word store. Partial rotary
# (R = D/2): the tail adds its own loads and stores, still one of each per piece and no barrier.
# gluon-tma: no ld.global of qkv at all — `UTMALDG` brings each box (2 per tile for NeoX, 1 for
# GPT-J; the prologue's 2 tiles and the loop's in the code), `UTMASTG` (or 128-bit st.global) takes
# it back; its `bar.sync`s sit before the TMA issues and staging stores, never between a store and a
# reload of the same data (no qkv byte is read twice). The plain Triton kernel reads the head
# element-wise (16-bit accesses), re-loads the rotation partner, and pays a CTA barrier for its
# cross-warp sum. `tests/test_qk_norm_rope.py` asserts these counts.

# %%
cm.show(ana.census_view(ana.census_table()))

# %% [markdown]
# ### Inductor's kernels for the same formula
#
# `torch.compile(fullgraph=True, dynamic=False)` of the native formula, compiled on the H200 with
# Inductor's caches off; the PTX Triton wrote for each generated kernel was kept
# (`results/h200/05-fused-qk-norm-rope.inductor-kernels.json`) and is counted here with the same code
# as the census above: how many kernels Inductor launches for the op and how they touch global memory.

# %%
ic = ana.inductor_census(ctx)
cm.show(ana.inductor_summary(ic) if ic is not None else ana.INDUCTOR_MISSING)
cm.show(ana.inductor_takeaway(ic))

# %% [markdown]
# Inductor compiles several configs of each generated kernel and launches the one its autotuner picks.
# The capture marks that compile by Triton's cache key where it can see the autotuners; the
# 2026-12-01 capture could not (torch 2.11 keeps them outside `PyCodeCache.modules`), so the table
# gives each count as the range over the configs compiled. The number of kernels does not depend
# on the config.

# %% tags=["fold"] fold_summary="every Inductor kernel: loads / stores by width, bar.sync, registers"
cm.show(ic)

# %% [markdown]
# ## 4. Speed of light vs tokens

# %% tags=["headline-numbers"]
cm.show(cm.headline(ana.headline_numbers(allrec, spec)))

# %% tags=["headline"]
fig = ana.headline_figure(allrec, spec, slug)
cm.show(cm.missing_note(ana.sweep(allrec), "the qk_norm_rope sweep"))

# %%
fig = ana.roofline(allrec, spec, slug)

# %% [markdown]
# ## 5. Targets
#
# The best Gluon variant of each cell (what `variant="auto"` runs once `python -m gluon_lab select`
# has read these records) against `torch.compile(dynamic=False)` of the native formula (the baseline
# vLLM's reviewers ask for): ≥ 1.0× in every cell of the D = 128 sweep and ≥ 3× geomean over it; ≥ 80%
# of the datasheet bandwidth at T ≥ 4096 (every D). Each Gluon variant's own ratios are in section 6.

# %% tags=["targets"]
cm.show(ana.targets(allrec))

# %% [markdown]
# The large-T cells against three references: the datasheet (4.8 TB/s), the run's 2 GiB session copy,
# and a `y.copy_(x)` of exactly the cell's Q/K bytes timed the same way in the same run (what a
# kernel that only moves the bytes reaches at that size, launch and tail included).

# %%
cm.show(ana.large_t(allrec))

# %% [markdown]
# ## 6. The sweep, per variant

# %%
cm.show(ana.variant_ratios(allrec))

# %% tags=["fold"] fold_summary="µs per call at D = 128 for every variant, and the best Gluon's speed vs torch.compile"
cm.show(ana.speed_table(allrec))

# %% [markdown]
# The same sweep at head_dim 64 and 256.

# %%
for D in (64, 256):
    fig = ana.dims_figure(allrec, spec, slug, D)
    cm.show(ana.speed_table(allrec, D))

# %% tags=["fold"] fold_summary="SOL % of the datasheet, every variant, every D"
cm.show(ana.sol_table(allrec))

# %% [markdown]
# gluon-tma's knobs at the large-T cells (tokens per box, warps, ring stages, CTAs per SM, TMA vs
# register stores), next to its heuristic in the same cells; then gluon-persistent's (num_warps ×
# CTAs per SM) next to gluon-fused's heuristic.

# %%
cm.show(ana.tma_sweep(allrec))

# %%
cm.show(ana.persistent_sweep(allrec))

# %% [markdown]
# ## 7. Takeaways (computed from the records above)

# %% tags=["takeaways"]
cm.show(cm.takeaways(ana.takeaways(allrec, spec)))

# %% [markdown]
# ## Compare runs
#
# Per-case time ratios of two runs of this notebook (time B / time A; below 1.0 run B is faster).
# Run B is the run shown (parameter `run`, default the newest), run A the parameter `compare_to`
# (default: the newest earlier run sharing cases with B). The same from a shell:
# `python -m gluon_lab compare 05-fused-qk-norm-rope RUN_A RUN_B`.

# %%
cm.show(cm.compare_runs(ctx, compare_to))
