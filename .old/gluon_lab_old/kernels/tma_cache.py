"""Pattern 1 — TMA caching of reused inputs (variant "gluon-tma").

A norm reads its input twice: once to reduce, once to normalize. The plain Triton kernel keeps the
row in registers (spills as N grows); Inductor's looped reductions read it from DRAM twice and
hope for L2. Here each CTA TMA-copies its R rows ([R, N], one logical copy that the compiler splits
into boxes, all completing on one mbarrier) into shared memory ONCE, in the input's
narrow dtype; every pass (sum, centred sum, normalize) reads the rows from shared memory and
converts to fp32 at the point of use (gluon_lab_old.kernels.norm_math). add_rms_norm caches both x
and residual. The output leaves either through plain vectorized stores or, from shared memory,
through a TMA store (TmaCacheConfig.tma_store) — both are measured.

Box shape (TmaCacheConfig.one_box): a TMA box is at most 256 elements per dimension, so a [R, N]
row block is split by the compiler into N/256 boxes of [R, 256] — 64 TMA instructions for a 16K
row. Viewing the row as [N/256, 256] (a rank-3 descriptor [M, N/256, 256] with the row stride as
its outer stride) makes the whole row ONE box, one TMA instruction. Both are measured.

Shared-memory limit (why N stops where it does): one CTA can have at most 227 KB (232448 B) of
shared memory on H100/H200. The cached rows take R * N * itemsize bytes (twice that for
add_rms_norm), plus a few hundred bytes of reduction scratch and the barrier, so with R = 1:
  bf16/fp16: N <= 65536 (128 KB; 131072 would need 256 KB)       add_rms_norm: N <= 32768
  fp32:      N <= 32768 (128 KB)                                  add_rms_norm: N <= 16384
Larger (and non-power-of-2) rows are pattern 2's job (gluon-chunked: chunks + streaming).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma

from . import norm_math, rowio
from .hopper import (ITEMSIZE, SMEM_LIMIT, SMEM_RESERVE, cdiv, check_row_operands, desc_type, descriptor, dtype_name,
                     kernel_spec, row_layout, row_outputs, short_dtype, vec)

SMEM_PER_CTA_TARGET = 100 * 1024  # heuristic: <= this so two CTAs fit on an SM (see heuristic())
SMALL_M = 4096  # heuristic: rows at or below which the small-M rule applies (see heuristic())


@gluon.jit(do_not_specialize=["M", "eps"])  # one compile serves every row count
def tma_cache_norm_kernel(x_desc, r_desc, y_desc, s_desc, w_desc, b_desc, y_ptr, s_ptr, w_ptr, b_ptr, M, y_stride,
                          s_stride, eps, N: gl.constexpr, STATS: gl.constexpr, HAS_W: gl.constexpr,
                          HAS_B: gl.constexpr, HAS_RESIDUAL: gl.constexpr, TMA_STORE: gl.constexpr,
                          PARAM_TMA: gl.constexpr, num_warps: gl.constexpr):
    """R rows per program. Descriptors are rank 3: global [M, N/W, W], block [R, S, W] with S*W = N
    (S = N/W: the row is one TMA box; S = 1, W = N: the compiler splits it into [R, 1, 256] boxes).
    Absent operands are None: r_desc / s_ptr without a residual, s_desc without one or without
    TMA_STORE, y_desc without TMA_STORE, w/b without the op's weight/bias. PARAM_TMA: weight (and
    bias) ride the same barrier into shared memory (w_desc/b_desc, block [1, S, W]) instead of
    being loaded from global inside the last pass. STATS: the op's statistics hooks (norm_math)."""
    R: gl.constexpr = x_desc.block_type.shape[0]
    S: gl.constexpr = x_desc.block_type.shape[1]
    W: gl.constexpr = x_desc.block_type.shape[2]
    gl.static_assert(S * W == N, "descriptor block must cover the row: S * W == N")
    dtype: gl.constexpr = x_desc.dtype
    VEC: gl.constexpr = 128 // dtype.primitive_bitwidth  # 16-byte vectors: 8 x bf16/fp16, 4 x fp32
    CHUNK: gl.constexpr = VEC * 32 * num_warps  # one register tile: every thread holds one vector per row
    NUM_CHUNKS: gl.constexpr = N // CHUNK
    gl.static_assert(N % CHUNK == 0, "N must be a multiple of VEC * 32 * num_warps")
    L: gl.constexpr = gl.BlockedLayout([1, VEC], [1, 32], [1, num_warps], [1, 0])

    row0 = gl.program_id(0) * R

    # 1. One TMA copy per reused input into shared memory, one barrier, one expect (total bytes).
    xbuf3 = gl.allocate_shared_memory(dtype, [R, S, W], x_desc.layout)
    xbuf = xbuf3.reshape([R, N])  # the same bytes as a [R, N] row block (swizzle 0: plain row-major)
    bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(bar, count=1)
    # ONE expect per barrier phase, carrying the bytes of every copy that completes on it: each
    # expect is also an arrive, so a second one would complete the phase early.
    NBYTES: gl.constexpr = x_desc.block_type.nbytes * (2 if HAS_RESIDUAL else 1) + \
        ((w_desc.block_type.nbytes * (2 if HAS_B else 1)) if PARAM_TMA else 0)
    mbarrier.expect(bar, NBYTES)
    tma.async_copy_global_to_shared(x_desc, [row0, 0, 0], bar, xbuf3)
    if HAS_RESIDUAL:
        rbuf3 = gl.allocate_shared_memory(dtype, [R, S, W], x_desc.layout)
        rbuf = rbuf3.reshape([R, N])
        tma.async_copy_global_to_shared(r_desc, [row0, 0, 0], bar, rbuf3)
    if PARAM_TMA:  # (the host sets it only for ops with a weight)
        wbuf3 = gl.allocate_shared_memory(dtype, [1, S, W], w_desc.layout)
        tma.async_copy_global_to_shared(w_desc, [0, 0, 0], bar, wbuf3)
        wbuf = wbuf3.reshape([1, N])
        if HAS_B:
            bbuf3 = gl.allocate_shared_memory(dtype, [1, S, W], w_desc.layout)
            tma.async_copy_global_to_shared(b_desc, [0, 0, 0], bar, bbuf3)
            bbuf = bbuf3.reshape([1, N])

    rows = row0 + gl.arange(0, R, layout=gl.SliceLayout(1, L))
    cols0 = gl.arange(0, CHUNK, layout=gl.SliceLayout(0, L))
    row_ok = gl.expand_dims(rows < M, 1)
    y_row = gl.expand_dims(rows.to(gl.int64) * y_stride, 1)

    mbarrier.wait(bar, 0)  # fresh barrier: the first completion is phase 0
    mbarrier.invalidate(bar)

    # 2. add_rms_norm: s = x + residual, written over the residual's buffer, leaves once for the
    #    caller (plain stores, or one TMA store from that buffer), and is what the norm reads.
    if HAS_RESIDUAL:
        norm_math.residual_add(xbuf, rbuf, 0, s_ptr + gl.expand_dims(rows.to(gl.int64) * s_stride, 1), row_ok,
                               cols0, N, norm_math.columns, CHUNK, NUM_CHUNKS, L, False, not TMA_STORE)
        if TMA_STORE:
            fence_async_shared()
            tma.async_copy_shared_to_global(s_desc, [row0, 0, 0], rbuf3)
        src = rbuf
    else:
        src = xbuf

    # 3. Statistics from shared memory (the op's hooks: one or two passes, fp32 at the point of use).
    shift, scale = STATS.row(src, 0, N, eps, norm_math.columns, CHUNK, NUM_CHUNKS, L, False)

    # 4. Normalize from shared memory; write out.
    for c in gl.static_range(NUM_CHUNKS):
        cols = c * CHUNK + cols0
        x = norm_math.load_chunk(src, 0, c, CHUNK, L, norm_math.columns)
        w = gl.zeros([1, CHUNK], gl.float32, L)
        b = gl.zeros([1, CHUNK], gl.float32, L)
        if PARAM_TMA:
            w = norm_math.load_chunk(wbuf, 0, c, CHUNK, L, norm_math.columns)
            if HAS_B:
                b = norm_math.load_chunk(bbuf, 0, c, CHUNK, L, norm_math.columns)
        else:
            if HAS_W:
                w = norm_math.load_param(w_ptr, cols, N, False)
            if HAS_B:
                b = norm_math.load_param(b_ptr, cols, N, False)
        y = norm_math.normalize_chunk(x, shift, scale, w, b, HAS_W, HAS_B).to(dtype)
        if TMA_STORE:
            xbuf.slice(c * CHUNK, CHUNK, dim=1).store(y)  # x (or x of add+norm) is no longer needed
        else:
            gl.store(y_ptr + y_row + gl.expand_dims(cols, 0), y, mask=row_ok)
    if TMA_STORE:
        fence_async_shared()  # generic-proxy smem writes -> visible to the TMA (async proxy) store
        tma.async_copy_shared_to_global(y_desc, [row0, 0, 0], xbuf3)
        tma.store_wait(0)  # shared memory must outlive the bulk copies reading it
        # ...and the allocator must know that: it ends a buffer's live range at its last generic
        # use, not at the store_wait covering an in-flight TMA store. Without this, the reduction
        # scratch was placed over the residual buffer while s was still being stored from it
        # (add_rms_norm produced garbage on the H200). _keep_alive() extends the live ranges.
        xbuf3._keep_alive()
        if HAS_RESIDUAL:
            rbuf3._keep_alive()


# ----------------------------------------------------------------------------------------------
# configuration (QuACK-style: a frozen dataclass whose thresholds carry their reasons)

@dataclass(frozen=True)
class TmaCacheConfig:
    """Knobs of gluon-tma. Methods take op: an OpSpec, its RowNorm or an op name (rowio.resolve)."""
    num_warps: int
    rows_per_cta: int
    tma_store: bool
    one_box: bool = True  # the whole [R, N] block as one TMA box ([R, N/256, 256]) vs N/256 boxes
    param_tma: bool = False  # weight/bias TMA-loaded into smem on the row's barrier vs gl.load in the last pass

    def smem_bytes(self, op, N: int, dtype: str) -> int:
        """Shared memory the cached rows (and cached weight/bias) take, plus the reserve."""
        row, _ = rowio.resolve(op)
        rows = self.rows_per_cta * (2 if row.residual else 1)
        params = row.weight + row.bias if self.param_tma else 0
        return (rows + params) * N * ITEMSIZE[dtype] + SMEM_RESERVE

    @staticmethod
    def max_n(op, dtype: str, rows_per_cta: int = 1) -> int:
        """Largest power-of-2 N whose cached rows fit in one CTA's shared memory."""
        cfg = TmaCacheConfig(num_warps=4, rows_per_cta=rows_per_cta, tma_store=False)
        n = 1
        while cfg.smem_bytes(op, 2 * n, dtype) <= SMEM_LIMIT:
            n *= 2
        return n

    @staticmethod
    def min_n(dtype: str) -> int:
        # one warp's worth of 16-byte vectors: below this the register tile would replicate lanes
        return vec(dtype) * 32

    @classmethod
    def heuristic(cls, op, N: int, dtype: str, M: int | None = None) -> "TmaCacheConfig":
        """Defaults from the rms_norm bf16 sweep on the H200 (M = 16384, N in 1K..16K, 240 configs,
        results/h200/01-tma-caching.jsonl, study "sweep"; notebook 01 shows it, and section 7 says
        which rows were timed how: the N >= 8192 rows by do_bench, the others graph-timed)."""
        row, _ = rowio.resolve(op)
        e = ITEMSIZE[dtype]
        # Warps: as many as the row allows, up to 16. At N >= 4096 the best 4-, 8- and 16-warp
        # configs of the sweep are within 1 point of SOL of each other; 16 warps is best by that
        # margin (the per-row passes over smem finish sooner, the CTA's next copy starts sooner).
        # Centered stats (LayerNorm) stop at 8: two cross-warp reductions per row made 16 warps
        # slower than 8 in the LayerNorm sweep: 14% at N = 4096 (graph-timed), 4% at N = 16384
        # (do_bench-timed, so not resolved at that level).
        nw = max(1, min(8 if row.centered else 16, N // (vec(dtype) * 32)))
        # Rows per CTA: 2 while the cached rows stay <= 64 KB (16 KB when centered). R = 2 was best
        # at N = 1024, 4096 and 16384 (R = 1 at 8192, within 0.2%); larger blocks cost occupancy.
        r = 2 if 2 * N * e * (2 if row.residual else 1) <= (16384 if row.centered else 65536) else 1
        # Weight/bias through TMA on the row's barrier: faster at N = 1024, 4096 and 16384 (up to
        # 10% at the median config), a tie for the best configs at 8192; off if smem would not fit.
        param_tma = row.weight
        # Stores: plain 128-bit stores; the TMA-store path was slower at the median config at every
        # N (2-7%). One box per row: no measurable difference; fewer TMA instructions.
        cfg = cls(num_warps=nw, rows_per_cta=r, tma_store=False, one_box=True, param_tma=param_tma)
        # Occupancy: keep a CTA's smem <= SMEM_PER_CTA_TARGET so >= 2 CTAs share an SM (their copies
        # and passes overlap). Seen on the H200: LayerNorm N = 16384 with R = 2 plus cached weight
        # AND bias took 128 KB -> 1 CTA/SM -> 65-68% SOL where the register-cached baselines
        # reached 80-86%. Drop the cached params first (they are L2-resident), then R.
        # LayerNorm caches two params: its best configs kept smem <= 64 KB (N = 16384: R = 1 with
        # w/b from L2, 83.1%, beat R = 1 with w/b cached, 81.1%, and every R = 2 config, <= 71%).
        target = 64 * 1024 if row.centered else SMEM_PER_CTA_TARGET
        while cfg.smem_bytes(row, N, dtype) > target and (cfg.param_tma or cfg.rows_per_cta > 1):
            cfg = dataclasses.replace(cfg, **({"param_tma": False} if cfg.param_tma else {"rows_per_cta": 1}))
        # Small M (<= SMALL_M rows: a few waves of CTAs on 132 SMs): the 01 'small-m' study (run
        # 20261201T214136Z, M = 2048 / 4096, N = 4096 / 8192 / 16384, 18 configs per cell) found the
        # M = 16384 rule 0.7-5.7% off the best config in 10 of 12 cells. Plain rows: 4 warps x R = 2
        # at N <= 4096 (within 1.0% of the best; 16 warps x R = 2 was 2.5-5.7% slower) and 8 warps x
        # R = 1 above (within 0.9%). With a residual: R = 1 at the same warps (within 0.8%; R = 2 was
        # 0.7-2.7% slower). LayerNorm was not in the study and keeps the rule above.
        if M is not None and M <= SMALL_M and not row.centered:
            if row.residual:
                cfg = dataclasses.replace(cfg, rows_per_cta=1)
            else:
                nw, r = (4, 2) if N <= 4096 else (8, 1)
                cfg = dataclasses.replace(cfg, num_warps=max(1, min(nw, N // (vec(dtype) * 32))), rows_per_cta=r)
                while cfg.smem_bytes(row, N, dtype) > target and (cfg.param_tma or cfg.rows_per_cta > 1):
                    cfg = dataclasses.replace(cfg, **({"param_tma": False} if cfg.param_tma else {"rows_per_cta": 1}))
        return cfg

    @classmethod
    def make(cls, op, N: int, dtype: str, M: int | None = None, **overrides) -> "TmaCacheConfig":
        """The heuristic's config with some fields overridden (sweeps; unknown keys are ignored)."""
        known = {f.name for f in dataclasses.fields(cls)}
        return dataclasses.replace(cls.heuristic(op, N, dtype, M), **{k: v for k, v in overrides.items() if k in known})

    def validate(self, op, N: int, dtype: str) -> "TmaCacheConfig":
        """Raise ValueError naming the rule if gluon-tma cannot run rows of N with this config."""
        _, label = rowio.resolve(op)
        lo, hi = TmaCacheConfig.min_n(dtype), TmaCacheConfig.max_n(op, dtype, 1)
        if N & (N - 1) or not lo <= N <= hi:
            raise ValueError(f"variant 'gluon-tma' takes power-of-2 N in [{lo}, {hi}] for {dtype} {label} (the cached "
                             f"row(s) must fit in {SMEM_LIMIT // 1024} KB of shared memory); got N={N}. "
                             "Use variant='gluon-chunked' (any N) or 'torch'")
        if self.smem_bytes(op, N, dtype) > SMEM_LIMIT:
            raise ValueError(f"config {self} needs {self.smem_bytes(op, N, dtype)} bytes of shared memory for N={N} "
                             f"{dtype} {label}; one CTA may use {SMEM_LIMIT}")
        R = self.rows_per_cta
        if R & (R - 1) or not 1 <= R <= 256:
            raise ValueError(f"rows_per_cta must be a power of two in [1, 256] (a TMA box dimension); got {R}")
        tile = vec(dtype) * 32 * self.num_warps
        if N % tile:
            raise ValueError(f"num_warps={self.num_warps} needs N to be a multiple of {tile} (16-byte vectors x 32 "
                             f"lanes x warps) for {dtype}; got N={N}")
        return self


def box_shape(N: int, cfg: TmaCacheConfig) -> list:
    """Block [R, S, W] of the rank-3 descriptors (global shape [M, N / W, W])."""
    W = min(N, 256) if cfg.one_box else N
    return [cfg.rows_per_cta, N // W, W]


def descriptor3(t2, N: int, cfg: TmaCacheConfig, dtype: str):
    """Rank-3 TMA descriptor over a (M, N) view with any 16-byte-multiple row stride."""
    R, S, W = box_shape(N, cfg)
    return descriptor(t2, [R, S, W], row_layout(dtype, 3), shape=[t2.shape[0], N // W, W], strides=[t2.stride(0), W, 1])


# ----------------------------------------------------------------------------------------------
# validation (before launch, clear errors), launch, codegen

def check(op, x, *rest, config: TmaCacheConfig | None = None) -> TmaCacheConfig:
    """Raise ValueError/TypeError naming the argument and the rule if gluon-tma cannot take the op's
    inputs (x, then the rest of the spec's positional inputs)."""
    row, _ = rowio.resolve(op)
    dt = dtype_name(x)
    N = x.shape[-1]
    M = x.numel() // N if N else 0
    cfg = (config or TmaCacheConfig.heuristic(op, N, dt, M)).validate(op, N, dt)
    check_row_operands(rowio.named_operands(row, (x, ) + rest), N)
    return cfg


def launch(op, x, residual, weight, bias, eps: float, out=None, config: TmaCacheConfig | None = None):
    """Run gluon-tma for op (an OpSpec, its RowNorm or an op name). Returns y (and s = x + residual
    for residual ops), shaped like x."""
    row, _ = rowio.resolve(op)
    cfg = check(row, *rowio.operands(row, x, residual, weight, bias), config=config)
    N = x.shape[-1]
    dt = dtype_name(x)
    x2 = x.view(-1, N)
    M = x2.shape[0]
    y, s, y2, s2 = row_outputs(x, out, row.residual)
    pcfg = dataclasses.replace(cfg, rows_per_cta=1)
    param_tma = cfg.param_tma and row.weight
    tma_cache_norm_kernel[(cdiv(M, cfg.rows_per_cta), )](
        descriptor3(x2, N, cfg, dt), descriptor3(residual.view(-1, N), N, cfg, dt) if row.residual else None,
        descriptor3(y2, N, cfg, dt) if cfg.tma_store else None,
        descriptor3(s2, N, cfg, dt) if cfg.tma_store and row.residual else None,
        descriptor3(weight.view(1, N), N, pcfg, dt) if param_tma else None,
        descriptor3(bias.view(1, N), N, pcfg, dt) if param_tma and row.bias else None,
        y2, s2, weight, bias, M, y2.stride(0), s2.stride(0) if row.residual else 0, eps,
        **_constexprs(row, N, cfg))
    return rowio.outputs(row, y, s)


def _constexprs(row, N: int, cfg: TmaCacheConfig) -> dict:
    return dict(N=N, STATS=norm_math.stats_hooks(row), HAS_W=row.weight, HAS_B=row.bias, HAS_RESIDUAL=row.residual,
                TMA_STORE=cfg.tma_store, PARAM_TMA=cfg.param_tma and row.weight, num_warps=cfg.num_warps)


def codegen_spec(op, N: int, dtype: str, config: TmaCacheConfig | None = None):
    """compile_sm90 arguments reproducing what launch() JITs for contiguous rows of N (CPU codegen)."""
    row, _ = rowio.resolve(op)
    cfg = config or TmaCacheConfig.heuristic(op, N, dtype)
    desc = desc_type(dtype, box_shape(N, cfg), row_layout(dtype, 3))
    pdesc = desc_type(dtype, box_shape(N, dataclasses.replace(cfg, rows_per_cta=1)), row_layout(dtype, 3))
    param_tma = cfg.param_tma and row.weight
    ptr = f"*{short_dtype(dtype)}"
    args = {"x_desc": desc, "r_desc": desc if row.residual else None, "y_desc": desc if cfg.tma_store else None,
            "s_desc": desc if cfg.tma_store and row.residual else None, "w_desc": pdesc if param_tma else None,
            "b_desc": pdesc if param_tma and row.bias else None, "y_ptr": ptr, "s_ptr": ptr if row.residual else None,
            "w_ptr": ptr if row.weight else None, "b_ptr": ptr if row.bias else None, "M": "i32", "y_stride": N,
            "s_stride": N if row.residual else 0, "eps": "fp32"}
    return kernel_spec(tma_cache_norm_kernel, args, _constexprs(row, N, cfg), num_warps=cfg.num_warps)


# ----------------------------------------------------------------------------------------------
# registration: gluon-tma for every row norm

KNOBS = {"num_warps": (4, 8, 16), "rows_per_cta": (1, 2, 4), "tma_store": (False, True), "one_box": (False, True),
         "param_tma": (False, True)}  # the 01 sweep's axes (experiments.TmaCachingPlan)


def configure(op, shape: dict, dtype: str, overrides: dict) -> TmaCacheConfig:
    return TmaCacheConfig.make(op, shape["N"], dtype, shape.get("M"), **overrides).validate(op, shape["N"], dtype)


def codegen(op, shape: dict, dtype: str, config: TmaCacheConfig | None = None):
    return codegen_spec(op, shape["N"], dtype, config or configure(op, shape, dtype, {}))


rowio.register_row_variants(
    "gluon-tma", pattern="tma-caching", launch=launch, check=check, configure=configure, codegen=codegen, knobs=KNOBS,
    roots=(tma_cache_norm_kernel, TmaCacheConfig, norm_math.STATS_HOOKS),
    description="row(s) TMA-copied once into smem, both passes read smem; plain or TMA stores")
