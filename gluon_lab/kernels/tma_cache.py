"""Pattern 1 — TMA caching of reused inputs (variant "gluon-tma").

A norm reads its input twice: once to reduce, once to normalize. The plain Triton kernel keeps the
row in registers (spills as N grows); Inductor's looped reductions read it from DRAM twice and
hope for L2. Here each CTA TMA-copies its R rows ([R, N], one logical copy that the compiler splits
into boxes, all completing on one mbarrier) into shared memory ONCE, in the input's
narrow dtype; every pass (sum, centred sum, normalize) reads the rows from shared memory and
converts to fp32 at the point of use (gluon_lab.kernels.norm_math). add_rms_norm caches both x
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

from . import norm_math
from .norm_math import OP_CODES

SMEM_LIMIT = 232448  # bytes of shared memory one CTA may use on sm_90
SMEM_PER_CTA_TARGET = 100 * 1024  # heuristic: <= this so two CTAs fit on an SM (see heuristic())
SMEM_RESERVE = 2048  # reduction scratch + barrier + alignment (measured: metadata.shared - rows <= 1 KB)
ITEMSIZE = {"bfloat16": 2, "float16": 2, "float32": 4}


@gluon.jit(do_not_specialize=["M", "eps"])  # one compile serves every row count
def tma_cache_norm_kernel(x_desc, r_desc, y_desc, s_desc, w_desc, b_desc, y_ptr, s_ptr, w_ptr, b_ptr, M, y_stride,
                          s_stride, eps, N: gl.constexpr, OP: gl.constexpr, TMA_STORE: gl.constexpr,
                          PARAM_TMA: gl.constexpr, num_warps: gl.constexpr):
    """R rows per program. Descriptors are rank 3: global [M, N/W, W], block [R, S, W] with S*W = N
    (S = N/W: the row is one TMA box; S = 1, W = N: the compiler splits it into [R, 1, 256] boxes).
    r_desc / s_desc are only used by add_rms_norm (OP 3), y_desc / s_desc only with TMA_STORE,
    y_ptr / s_ptr only without it. PARAM_TMA: weight (and bias) ride the same barrier into shared
    memory (w_desc/b_desc, block [1, S, W]) instead of being loaded from global inside the last pass."""
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
    HAS_W: gl.constexpr = OP != 2
    HAS_B: gl.constexpr = OP == 1
    # ONE expect per barrier phase, carrying the bytes of every copy that completes on it: each
    # expect is also an arrive, so a second one would complete the phase early.
    NBYTES: gl.constexpr = x_desc.block_type.nbytes * (2 if OP == 3 else 1) + \
        ((w_desc.block_type.nbytes * (1 + HAS_B)) if (PARAM_TMA and HAS_W) else 0)
    mbarrier.expect(bar, NBYTES)
    tma.async_copy_global_to_shared(x_desc, [row0, 0, 0], bar, xbuf3)
    if OP == 3:
        rbuf3 = gl.allocate_shared_memory(dtype, [R, S, W], r_desc.layout)
        rbuf = rbuf3.reshape([R, N])
        tma.async_copy_global_to_shared(r_desc, [row0, 0, 0], bar, rbuf3)
    if PARAM_TMA:
        if HAS_W:
            wbuf3 = gl.allocate_shared_memory(dtype, [1, S, W], w_desc.layout)
            tma.async_copy_global_to_shared(w_desc, [0, 0, 0], bar, wbuf3)
            wbuf = wbuf3.reshape([1, N])
        if HAS_B:
            bbuf3 = gl.allocate_shared_memory(dtype, [1, S, W], b_desc.layout)
            tma.async_copy_global_to_shared(b_desc, [0, 0, 0], bar, bbuf3)
            bbuf = bbuf3.reshape([1, N])

    rows = row0 + gl.arange(0, R, layout=gl.SliceLayout(1, L))
    cols0 = gl.arange(0, CHUNK, layout=gl.SliceLayout(0, L))
    row_ok = gl.expand_dims(rows < M, 1)
    y_row = gl.expand_dims(rows.to(gl.int64) * y_stride, 1)

    mbarrier.wait(bar, 0)  # fresh barrier: the first completion is phase 0
    mbarrier.invalidate(bar)

    # 2. add_rms_norm: s = x + residual in the input dtype (as eager). s overwrites the residual's
    #    buffer in place (same thread, same elements), leaves once for the caller, and is what the
    #    norm reads from now on.
    if OP == 3:
        s_row = gl.expand_dims(rows.to(gl.int64) * s_stride, 1)
        for c in gl.static_range(NUM_CHUNKS):
            xs = xbuf.slice(c * CHUNK, CHUNK, dim=1)
            rs = rbuf.slice(c * CHUNK, CHUNK, dim=1)
            s = xs.load(L) + rs.load(L)
            rs.store(s)
            if not TMA_STORE:
                gl.store(s_ptr + s_row + gl.expand_dims(c * CHUNK + cols0, 0), s, mask=row_ok)
        if TMA_STORE:
            fence_async_shared()
            tma.async_copy_shared_to_global(s_desc, [row0, 0, 0], rbuf3)
        src = rbuf
    else:
        src = xbuf

    # 3. Statistics from shared memory (norm_math: one or two passes, fp32 at the point of use).
    shift, scale = norm_math.row_stats(src, N, eps, OP, CHUNK, NUM_CHUNKS, L, False)

    # 4. Normalize from shared memory; write out.
    for c in gl.static_range(NUM_CHUNKS):
        cols = c * CHUNK + cols0
        x = norm_math.load_chunk(src, c, CHUNK, L)
        w = gl.zeros([1, CHUNK], gl.float32, L)
        b = gl.zeros([1, CHUNK], gl.float32, L)
        if PARAM_TMA:
            if HAS_W:
                w = norm_math.load_chunk(wbuf, c, CHUNK, L)
            if HAS_B:
                b = norm_math.load_chunk(bbuf, c, CHUNK, L)
        else:
            if HAS_W:
                w = norm_math.load_param(w_ptr, cols, N, False)
            if HAS_B:
                b = norm_math.load_param(b_ptr, cols, N, False)
        y = norm_math.normalize_chunk(x, shift, scale, w, b, OP).to(dtype)
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
        if OP == 3:
            rbuf3._keep_alive()


# ----------------------------------------------------------------------------------------------
# configuration (QuACK-style: a frozen dataclass whose thresholds carry their reasons)

# Errata to the figures quoted inside TmaCacheConfig.heuristic (kept there unchanged so the
# 2026-11-29 H200 records stay current; fix them together with the next re-measurement):
# * "4 warps: 30% slower at N=16384" came from an earlier do_bench sweep of an older revision. In
#   the final sweep (results/h200/01-tma-caching.jsonl, study "sweep") the best 4-, 8- and 16-warp
#   configs at N >= 4096 are within 1 point of SOL of each other; 16 warps is best by that margin.
# * LayerNorm "16 warps 15-25% slower than 8": 14% at N=4096 (graph-timed), 4% at N=16384
#   (do_bench-timed, so not resolved at that level).
# * The N >= 8192 sweep rows were do_bench-timed; see notebook 01, section 7.
@dataclass(frozen=True)
class TmaCacheConfig:
    num_warps: int
    rows_per_cta: int
    tma_store: bool
    one_box: bool = True  # the whole [R, N] block as one TMA box ([R, N/256, 256]) vs N/256 boxes
    param_tma: bool = False  # weight/bias TMA-loaded into smem on the row's barrier vs gl.load in the last pass

    def smem_bytes(self, op: str, N: int, dtype: str) -> int:
        """Shared memory the cached rows (and cached weight/bias) take, plus the reserve."""
        rows = self.rows_per_cta * (2 if op == "add_rms_norm" else 1)
        params = {"rms_norm": 1, "layer_norm": 2, "l2_norm": 0, "add_rms_norm": 1}[op] if self.param_tma else 0
        return (rows + params) * N * ITEMSIZE[dtype] + SMEM_RESERVE

    @staticmethod
    def max_n(op: str, dtype: str, rows_per_cta: int = 1) -> int:
        """Largest power-of-2 N whose cached rows fit in one CTA's shared memory."""
        cfg = TmaCacheConfig(num_warps=4, rows_per_cta=rows_per_cta, tma_store=False)
        n = 1
        while cfg.smem_bytes(op, 2 * n, dtype) <= SMEM_LIMIT:
            n *= 2
        return n

    @staticmethod
    def min_n(dtype: str) -> int:
        # one warp's worth of 16-byte vectors: below this the register tile would replicate lanes
        return 16 // ITEMSIZE[dtype] * 32

    @classmethod
    def heuristic(cls, op: str, N: int, dtype: str, M: int | None = None) -> "TmaCacheConfig":
        """Defaults from the rms_norm bf16 sweep on the H200 (M = 16384, N in 1K..16K, 240 configs,
        results/h200/01-tma-caching.jsonl, study "sweep"; the notebook shows it)."""
        e = ITEMSIZE[dtype]
        vec = 16 // e
        # Warps: as many as the row allows, up to 16. The best config at N >= 4096 used 16 warps
        # (4 warps: 30% slower at N=16384): the per-row passes over smem finish sooner, and
        # the CTA's next TMA copy starts sooner.
        # LayerNorm is the exception: its two cross-warp reductions per row made 16 warps 15-25%
        # slower than 8 (LayerNorm sweep, N = 4096 and 16384), so it stops at 8.
        nw = max(1, min(8 if op == "layer_norm" else 16, N // (vec * 32)))
        # Rows per CTA: 2 while the cached rows stay <= 64 KB. R = 2 was best at N = 1024, 4096
        # and 16384 (R = 1 at 8192, within 0.2%); larger blocks cost occupancy.
        r = 2 if 2 * N * e * (2 if op == "add_rms_norm" else 1) <= (16384 if op == "layer_norm" else 65536) else 1
        # Weight/bias through TMA on the row's barrier: faster at N = 1024, 4096 and 16384 (up to
        # 10% at the median config), a tie for the best configs at 8192; off if smem would not fit.
        param_tma = op != "l2_norm"
        # Stores: plain 128-bit stores; the TMA-store path was slower at the median config at every
        # N (2-7%). One box per row: no measurable difference; fewer TMA instructions.
        cfg = cls(num_warps=nw, rows_per_cta=r, tma_store=False, one_box=True, param_tma=param_tma)
        # Occupancy: keep a CTA's smem <= SMEM_PER_CTA_TARGET so >= 2 CTAs share an SM (their copies
        # and passes overlap). Seen on the H200: LayerNorm N = 16384 with R = 2 plus cached weight
        # AND bias took 128 KB -> 1 CTA/SM -> 65-68% SOL where the register-cached baselines
        # reached 80-86%. Drop the cached params first (they are L2-resident), then R.
        # LayerNorm caches two params: its best configs kept smem <= 64 KB (N = 16384: R = 1 with
        # w/b from L2, 83.1%, beat R = 1 with w/b cached, 81.1%, and every R = 2 config, <= 71%).
        target = 64 * 1024 if op == "layer_norm" else SMEM_PER_CTA_TARGET
        while cfg.smem_bytes(op, N, dtype) > target and (cfg.param_tma or cfg.rows_per_cta > 1):
            cfg = dataclasses.replace(cfg, **({"param_tma": False} if cfg.param_tma else {"rows_per_cta": 1}))
        return cfg

    @classmethod
    def make(cls, op: str, N: int, dtype: str, M: int | None = None, **overrides) -> "TmaCacheConfig":
        """The heuristic's config with some fields overridden (sweeps)."""
        import dataclasses
        base = cls.heuristic(op, N, dtype, M)
        known = {f.name for f in dataclasses.fields(cls)}
        return dataclasses.replace(base, **{k: v for k, v in overrides.items() if k in known})


def _gl_dtype(dtype: str):
    return {"bfloat16": gl.bfloat16, "float16": gl.float16, "float32": gl.float32}[dtype]


def row_layout(dtype: str):
    # Swizzle 0: the row is read as contiguous 16-byte vectors per thread (conflict-free), and
    # stays plain row-major so the rank-3 box can be viewed as [R, N].
    return gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=ITEMSIZE[dtype] * 8, rank=3)


def box_shape(N: int, cfg: "TmaCacheConfig") -> list:
    """Block [R, S, W] of the rank-3 descriptors (global shape [M, N / W, W])."""
    W = min(N, 256) if cfg.one_box else N
    return [cfg.rows_per_cta, N // W, W]


def descriptor(t2, N: int, cfg: "TmaCacheConfig", dtype: str):
    """Rank-3 TMA descriptor over a (M, N) view with any 16-byte-multiple row stride."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    R, S, W = box_shape(N, cfg)
    return TensorDescriptor(t2, shape=[t2.shape[0], N // W, W], strides=[t2.stride(0), W, 1], block_shape=[R, S, W],
                            layout=row_layout(dtype))


# ----------------------------------------------------------------------------------------------
# validation (before launch, clear errors) and launch

def _dt(t) -> str:
    return str(t.dtype).replace("torch.", "")


def check(op: str, x, *rest, config: TmaCacheConfig | None = None):
    """Raise ValueError/TypeError naming the argument and the rule if gluon-tma cannot take x."""
    dt = _dt(x)
    N = x.shape[-1]
    cfg = config or TmaCacheConfig.heuristic(op, N, dt)
    lo, hi = TmaCacheConfig.min_n(dt), TmaCacheConfig.max_n(op, dt, 1)
    if N & (N - 1) or not lo <= N <= hi:
        raise ValueError(f"variant 'gluon-tma' takes power-of-2 N in [{lo}, {hi}] for {dt} {op} (the cached row(s) "
                         f"must fit in {SMEM_LIMIT // 1024} KB of shared memory); got N={N}. "
                         "Use variant='gluon-chunked' (any N) or 'torch'")
    if cfg.smem_bytes(op, N, dt) > SMEM_LIMIT:
        raise ValueError(f"config {cfg} needs {cfg.smem_bytes(op, N, dt)} bytes of shared memory for N={N} {dt} "
                         f"{op}; one CTA may use {SMEM_LIMIT}")
    R = cfg.rows_per_cta
    if R & (R - 1) or not 1 <= R <= 256:
        raise ValueError(f"rows_per_cta must be a power of two in [1, 256] (a TMA box dimension); got {R}")
    tile = 16 // ITEMSIZE[dt] * 32 * cfg.num_warps
    if N % tile:
        raise ValueError(f"num_warps={cfg.num_warps} needs N to be a multiple of {tile} (16-byte vectors x 32 lanes "
                         f"x warps) for {dt}; got N={N}")
    names = {"rms_norm": ("x", "weight"), "layer_norm": ("x", "weight", "bias"), "l2_norm": ("x", ),
             "add_rms_norm": ("x", "residual", "weight")}[op]
    for name, t in zip(names, (x, ) + rest):
        if t is None:
            continue
        if t.stride(-1) != 1:
            raise ValueError(f"{name} must be contiguous in its last dimension (stride(-1) == 1) for TMA; got strides "
                             f"{tuple(t.stride())}")
        if t.data_ptr() % 16:
            raise ValueError(f"{name}'s data pointer must be 16-byte aligned for TMA (got address % 16 = "
                             f"{t.data_ptr() % 16})")
        if t.dim() > 1:
            try:
                v = t.view(-1, N)
            except RuntimeError:
                raise ValueError(f"{name}'s leading dimensions cannot be flattened without a copy (strides "
                                 f"{tuple(t.stride())}); call .contiguous() first") from None
            if v.shape[0] > 1 and (v.stride(0) * t.element_size()) % 16:
                raise ValueError(f"{name}'s row stride must be a multiple of 16 bytes for TMA; got "
                                 f"{v.stride(0)} elements = {v.stride(0) * t.element_size()} bytes")
    return cfg


def launch(op: str, x, residual, weight, bias, eps: float, out=None, config: TmaCacheConfig | None = None):
    """Run gluon-tma for op. Returns y (and s = x + residual for add_rms_norm), shaped like x."""
    import torch
    cfg = check(op, x, *((residual, weight) if op == "add_rms_norm" else (weight, bias)), config=config)
    N = x.shape[-1]
    dt = _dt(x)
    x2 = x.view(-1, N)
    M = x2.shape[0]
    if out is None:
        y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        s = torch.empty(x.shape, dtype=x.dtype, device=x.device) if op == "add_rms_norm" else None
    else:
        y, s = out if op == "add_rms_norm" else (out, None)
    y2 = y.view(-1, N)
    s2 = s.view(-1, N) if s is not None else y2
    R = cfg.rows_per_cta
    x_desc = descriptor(x2, N, cfg, dt)
    r_desc = descriptor(residual.view(-1, N), N, cfg, dt) if op == "add_rms_norm" else x_desc
    y_desc = descriptor(y2, N, cfg, dt) if cfg.tma_store else x_desc
    s_desc = descriptor(s2, N, cfg, dt) if (cfg.tma_store and s is not None) else y_desc
    w = weight if weight is not None else x2
    b = bias if bias is not None else w
    if cfg.param_tma and weight is not None:
        w_desc = descriptor(w.view(1, N), N, dataclasses.replace(cfg, rows_per_cta=1), dt)
        b_desc = descriptor(b.view(1, N), N, dataclasses.replace(cfg, rows_per_cta=1), dt) if bias is not None \
            else w_desc
    else:
        w_desc = b_desc = x_desc
    grid = (triton_cdiv(M, R), )
    tma_cache_norm_kernel[grid](x_desc, r_desc, y_desc, s_desc, w_desc, b_desc, y2, s2, w, b, M, y2.stride(0),
                                s2.stride(0), eps, N=N, OP=OP_CODES[op], TMA_STORE=cfg.tma_store,
                                PARAM_TMA=cfg.param_tma and weight is not None, num_warps=cfg.num_warps)
    return (y, s) if op == "add_rms_norm" else y


def triton_cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


def codegen_spec(op: str, N: int, dtype: str, config: TmaCacheConfig | None = None):
    """compile_sm90 arguments reproducing what launch() JITs (for CPU codegen inspection)."""
    cfg = config or TmaCacheConfig.heuristic(op, N, dtype)
    t = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}[dtype]
    desc = f"tensordesc<{t}{box_shape(N, cfg)},{row_layout(dtype)!r}>"
    pdesc = f"tensordesc<{t}{box_shape(N, dataclasses.replace(cfg, rows_per_cta=1))},{row_layout(dtype)!r}>"
    param_tma = cfg.param_tma and op != "l2_norm"
    sig = {"x_desc": desc, "r_desc": desc, "y_desc": desc, "s_desc": desc, "w_desc": pdesc if param_tma else desc,
           "b_desc": pdesc if param_tma else desc, "y_ptr": f"*{t}", "s_ptr": f"*{t}",
           "w_ptr": f"*{t}", "b_ptr": f"*{t}", "M": "i32", "y_stride": "i32", "s_stride": "i32", "eps": "fp32",
           "N": "constexpr", "OP": "constexpr", "TMA_STORE": "constexpr", "PARAM_TMA": "constexpr",
           "num_warps": "constexpr"}
    return dict(fn=tma_cache_norm_kernel, signature=sig,
                constexprs={"N": N, "OP": OP_CODES[op], "TMA_STORE": cfg.tma_store, "PARAM_TMA": param_tma,
                            "num_warps": cfg.num_warps},
                aligned=["y_ptr", "s_ptr", "w_ptr", "b_ptr", "y_stride", "s_stride"], num_warps=cfg.num_warps)
