"""Pattern 2 — chunked non-power-of-2 reductions (variant "gluon-chunked").

Measured on the H200 (tests/test_chunked_gpu.py, test_group_norm_gpu.py; records in
results/h200/02-chunked-reductions.jsonl, notebook 02).

Gluon/Triton register tiles are powers of two; real hidden sizes are not (2880, 5120, 14336...).
Padding the whole row to the next power of two (what a one-row Triton kernel does: BLOCK =
next_power_of_2(N)) wastes up to half the lanes. Here the row is loaded as NUM_CHUNKS = cdiv(N, CHUNK)
power-of-2 TMA boxes of [1, CHUNK] into a shared row buffer, all on one mbarrier;
the last box runs past the row end and TMA zero-fills it (bounds are per dimension of the
descriptor, so it never reads the next row). Both passes walk the chunks from shared memory with
the op's norm_math hooks; MASK_TAIL keeps the zero-filled lanes out of LayerNorm's centred
variance ((0 - mean)^2 != 0) and out of the stores.

Rows whose cached copy would take more than CACHED_SMEM_LIMIT stream instead (streaming_norm_kernel):
a ring of STREAM_STAGES chunk slots on their own mbarriers carries the row through twice (pass 1:
statistics, LayerNorm by Chan-merged per-chunk moments; pass 2: normalize and store), the second read
coming from L2 or HBM.
"""
from __future__ import annotations

from dataclasses import dataclass

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma

from . import norm_math, rowio
from .hopper import (ITEMSIZE, SMEM_LIMIT, SMEM_RESERVE, cdiv, check_tma_operands, check_tma_rows, desc_type,
                     descriptor, dtype_name, kernel_spec, row_layout, row_outputs, short_dtype, vec)

# Cache the row while it takes <= 100 KB (two CTAs per SM, as gluon-tma's heuristic); longer rows
# stream. Where exactly streaming starts to pay is for the H200 sweep of issue #4 to say.
CACHED_SMEM_LIMIT = 100 * 1024
STREAM_STAGES = 4  # ring slots in flight: 3 chunks (12 KB) ahead of the one being reduced
STREAM_WARPS = 8  # streaming chunks: 8 warps = 2048 bf16 / 1024 fp32 elements (4 KB)
PLAN_KNOBS = ("num_warps", "streaming", "stages", "rows")  # what a sweep may override


@gluon.jit
def load_chunks(x_desc, r_desc, xbufs, rbufs, bar, slot0, row0, c0, NUM: gl.constexpr, pred,
                HAS_RESIDUAL: gl.constexpr):
    """Issue NUM [R, CHUNK] boxes of rows row0.., chunks c0.. of the row, into slots slot0.. of
    xbufs (and of rbufs for the residual), all completing on bar: one expect carrying every box's
    bytes (the zero-filled part past column N and rows past M included: TMA counts them as
    transferred). Every pattern that moves rows in chunks issues its copies here."""
    CHUNK: gl.constexpr = x_desc.block_type.shape[1]
    mbarrier.expect(bar, NUM * x_desc.block_type.nbytes * (2 if HAS_RESIDUAL else 1), pred=pred)
    for c in gl.static_range(NUM):
        tma.async_copy_global_to_shared(x_desc, [row0, (c0 + c) * CHUNK], bar, xbufs.index(slot0 + c), pred=pred)
    if HAS_RESIDUAL:
        for c in gl.static_range(NUM):
            tma.async_copy_global_to_shared(r_desc, [row0, (c0 + c) * CHUNK], bar, rbufs.index(slot0 + c), pred=pred)


@gluon.jit(do_not_specialize=["M", "eps"])
def chunked_norm_kernel(x_desc, r_desc, y_ptr, s_ptr, w_ptr, b_ptr, M, y_stride_v, s_stride_v, eps, N_v,
                        STATS: gl.constexpr, HAS_W: gl.constexpr, HAS_B: gl.constexpr, HAS_RESIDUAL: gl.constexpr,
                        NUM_CHUNKS: gl.constexpr, num_warps: gl.constexpr):
    """R rows per program (R = the box's first dim). x_desc / r_desc: block [R, CHUNK] over the
    (M, N) rows (r_desc / s_ptr None without a residual, w_ptr / b_ptr None without the op's
    weight / bias). N is a runtime value (N_v = N / VEC): one compile serves every N with the
    same NUM_CHUNKS. STATS: the op's statistics hooks (norm_math)."""
    R: gl.constexpr = x_desc.block_type.shape[0]
    CHUNK: gl.constexpr = x_desc.block_type.shape[1]
    dtype: gl.constexpr = x_desc.dtype
    VEC: gl.constexpr = 128 // dtype.primitive_bitwidth
    gl.static_assert(CHUNK == VEC * 32 * num_warps, "CHUNK must be one register tile: 16-byte vectors x 32 lanes x warps")
    L: gl.constexpr = gl.BlockedLayout([1, VEC], [1, 32], [1, num_warps], [1, 0])
    row0 = gl.program_id(0) * R
    # N and the row strides arrive in 16-byte vectors (the host guarantees N * itemsize % 16 == 0):
    # multiplied back here, the compiler knows they are multiples of VEC and keeps the masked
    # stores and weight loads 128 bits wide for any N (passed in elements, it only knows
    # divisibility by 16, and N = 4104 or 1000 fell back to scalar accesses).
    N = N_v * VEC
    y_stride = y_stride_v * VEC
    s_stride = s_stride_v * VEC

    # NUM_CHUNKS slots of [R, CHUNK]: exactly the chunks the row needs (no power-of-2 rounding of
    # the allocation: 9 chunks take 9, not 16 — at N = 18432 that was 64 KB instead of 36 KB per
    # CTA, 3 instead of 6 CTAs per SM, and 65% instead of 82% SOL for LayerNorm on the H200).
    xbufs = gl.allocate_shared_memory(dtype, [NUM_CHUNKS, R, CHUNK], x_desc.layout)
    bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    mbarrier.init(bar, count=1)
    # the residual's chunks (a 1-slot placeholder the compiler drops when the op has none)
    rbufs = gl.allocate_shared_memory(dtype, [NUM_CHUNKS if HAS_RESIDUAL else 1, R, CHUNK], x_desc.layout)
    load_chunks(x_desc, r_desc, xbufs, rbufs, bar, 0, row0, 0, NUM_CHUNKS, True, HAS_RESIDUAL)

    rows = row0 + gl.arange(0, R, layout=gl.SliceLayout(1, L))
    row_ok = gl.expand_dims(rows < M, 1)
    cols0 = gl.arange(0, CHUNK, layout=gl.SliceLayout(0, L))
    y_row = gl.expand_dims(rows.to(gl.int64) * y_stride, 1)
    mbarrier.wait(bar, 0)
    mbarrier.invalidate(bar)

    if HAS_RESIDUAL:  # s = x + residual (input dtype), written once, then normalized from smem
        norm_math.residual_add(xbufs, rbufs, 0, s_ptr + gl.expand_dims(rows.to(gl.int64) * s_stride, 1), row_ok,
                               cols0, N, norm_math.slots, CHUNK, NUM_CHUNKS, L, True, True)
        src = rbufs
    else:
        src = xbufs

    shift, scale = STATS.row(src, 0, N, eps, norm_math.slots, CHUNK, NUM_CHUNKS, L, True)
    for c in gl.static_range(NUM_CHUNKS):
        cols = c * CHUNK + cols0
        x = norm_math.load_chunk(src, 0, c, CHUNK, L, norm_math.slots)
        y = norm_math.normalize_chunk_global_params(x, shift, scale, w_ptr, b_ptr, cols, N, HAS_W, HAS_B, True,
                                                    L).to(dtype)
        gl.store(y_ptr + y_row + gl.expand_dims(cols, 0), y, mask=row_ok & gl.expand_dims(cols < N, 0))


@gluon.jit
def _issue_chunk(x_desc, r_desc, bufs, rbufs, bars, k, row, NUM_CHUNKS, pred, S: gl.constexpr,
                 HAS_RESIDUAL: gl.constexpr):
    """Load the k-th chunk of the two-pass sequence (chunk k mod NUM_CHUNKS) into ring slot k mod S."""
    slot = k % S
    load_chunks(x_desc, r_desc, bufs, rbufs, bars.index(slot), slot, row, k % NUM_CHUNKS, 1, pred, HAS_RESIDUAL)


@gluon.jit(do_not_specialize=["M", "eps"])
def streaming_norm_kernel(x_desc, r_desc, y_ptr, s_ptr, w_ptr, b_ptr, M, y_stride_v, s_stride_v, eps, N_v,
                          STATS: gl.constexpr, HAS_W: gl.constexpr, HAS_B: gl.constexpr, HAS_RESIDUAL: gl.constexpr,
                          CENTERED: gl.constexpr, S: gl.constexpr, num_warps: gl.constexpr):
    """Rows too long for shared memory: a ring of S [1, CHUNK] slots streams the row twice (pass 1:
    statistics, STATS.accumulate per chunk; pass 2: normalize + store). The second read comes from
    L2/HBM: 2x the DRAM traffic of the cached path in the worst case. Residual ops reload x and
    residual in pass 2 and recompute s (no read-back of this CTA's own global writes through the
    async proxy). CENTERED: the statistics run on x - K, K = the mean of chunk 0."""
    CHUNK: gl.constexpr = x_desc.block_type.shape[1]
    dtype: gl.constexpr = x_desc.dtype
    VEC: gl.constexpr = 128 // dtype.primitive_bitwidth
    gl.static_assert(CHUNK == VEC * 32 * num_warps, "CHUNK must be one register tile")
    gl.static_assert(S >= 2, "need >= 2 ring slots to overlap copies with compute")
    L: gl.constexpr = gl.BlockedLayout([1, VEC], [1, 32], [1, num_warps], [1, 0])
    row = gl.program_id(0)
    N = N_v * VEC  # see chunked_norm_kernel: lengths in 16-byte vectors keep accesses 128-bit
    y_stride = y_stride_v * VEC
    s_stride = s_stride_v * VEC
    NUM_CHUNKS = gl.cdiv(N, CHUNK)
    TOTAL = 2 * NUM_CHUNKS

    bufs = gl.allocate_shared_memory(dtype, [S, 1, CHUNK], x_desc.layout)
    rbufs = gl.allocate_shared_memory(dtype, [S if HAS_RESIDUAL else 1, 1, CHUNK], x_desc.layout)
    bars = gl.allocate_shared_memory(gl.int64, [S, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(S):
        mbarrier.init(bars.index(i), count=1)
    for p in gl.static_range(S - 1):  # prologue: S-1 chunks in flight
        _issue_chunk(x_desc, r_desc, bufs, rbufs, bars, p, row, NUM_CHUNKS, p < TOTAL, S, HAS_RESIDUAL)

    cols0 = gl.arange(0, CHUNK, layout=gl.SliceLayout(0, L))
    zero = gl.sum(gl.zeros([1, CHUNK], gl.float32, L), axis=1)
    acc = zero  # the hooks' running statistics: sum of squares, or (count, mean, M2) of x - K
    mean = zero
    m2 = zero
    K = zero
    if CENTERED:
        # Centered statistics work on x - K, K = the mean of chunk 0 (slot 0's first fill, waited
        # for here and again, already complete, in the loop). Merging chunk means into a running
        # mean of the raw data rounds at |mean| once per chunk: on the H200, x = 100 + N(0, 1) in
        # fp32 at N = 131080 (128 chunks) drifted the mean by ~2e-4. Shifted, it is O(std).
        mbarrier.wait(bars.index(0), 0)
        K = norm_math.chunk_moments(bufs.index(0).load(L).to(gl.float32), cols0, N)[1]
    # pass 1: statistics
    for k in range(NUM_CHUNKS):
        # refill the slot chunk k-1 used (its reads are done; the compiler's CTA barrier and this
        # fence order them before the TMA write)
        fence_async_shared()
        _issue_chunk(x_desc, r_desc, bufs, rbufs, bars, k + S - 1, row, NUM_CHUNKS, k + S - 1 < TOTAL, S,
                     HAS_RESIDUAL)
        slot = k % S
        mbarrier.wait(bars.index(slot), (k // S) & 1)
        xs = bufs.index(slot)
        if HAS_RESIDUAL:
            x = (xs.load(L) + rbufs.index(slot).load(L)).to(gl.float32)
        else:
            x = xs.load(L).to(gl.float32)
        acc, mean, m2 = STATS.accumulate(acc, mean, m2, x, K, k * CHUNK + cols0, N)
    shift, scale = STATS.finalize(acc, mean, m2, K, N, eps)

    # pass 2: normalize and store
    y_row = row.to(gl.int64) * y_stride
    s_row = row.to(gl.int64) * s_stride
    for k in range(NUM_CHUNKS, TOTAL):
        fence_async_shared()
        _issue_chunk(x_desc, r_desc, bufs, rbufs, bars, k + S - 1, row, NUM_CHUNKS, k + S - 1 < TOTAL, S,
                     HAS_RESIDUAL)
        slot = k % S
        mbarrier.wait(bars.index(slot), (k // S) & 1)
        cols = (k - NUM_CHUNKS) * CHUNK + cols0
        cmask = gl.expand_dims(cols < N, 0)
        if HAS_RESIDUAL:
            sv = bufs.index(slot).load(L) + rbufs.index(slot).load(L)
            gl.store(s_ptr + s_row + gl.expand_dims(cols, 0), sv, mask=cmask)
            x = sv.to(gl.float32)
        else:
            x = bufs.index(slot).load(L).to(gl.float32)
        y = norm_math.normalize_chunk_global_params(x, shift, scale, w_ptr, b_ptr, cols, N, HAS_W, HAS_B, True,
                                                    L).to(dtype)
        gl.store(y_ptr + y_row + gl.expand_dims(cols, 0), y, mask=cmask)
    for i in gl.static_range(S):
        mbarrier.invalidate(bars.index(i))


@dataclass(frozen=True)
class ChunkPlan:
    """How rows of N elements are cut into power-of-2 chunks (QuACK-style: the heuristic's
    thresholds carry their reasons)."""
    N: int
    dtype: str
    num_warps: int
    chunk: int  # elements per chunk = one register tile = VEC * 32 * num_warps
    num_chunks: int
    tail: int  # valid elements in the last chunk (chunk when N divides evenly)
    smem_bytes: int  # cached: num_chunks * rows chunks (x2 with a residual) + reserve; streaming: the ring
    fits: bool  # the plan fits in one CTA's shared memory
    streaming: bool = False  # the row does not fit: stream it twice through a ring of `stages` slots
    stages: int = 0
    rows: int = 1  # rows per CTA (cached path): one [rows, CHUNK] TMA box per chunk

    @property
    def padded(self) -> int:
        return self.chunk * self.num_chunks

    @property
    def waste_pct(self) -> float:
        return 100.0 * (self.padded - self.N) / self.padded

    @staticmethod
    def chunk_warps(N: int, dtype: str) -> int:
        """CHUNK heuristic: the largest register tile (up to 8 warps: 8*32*8 = 2048 bf16 / 1024 fp32
        elements) whose padding of the last chunk wastes at most 12.5% of the padded row, so
        5120 bf16 -> 4 warps x 1024 = 5 chunks, no waste (vs 8192 lanes, 37.5% idle, for
        next_power_of_2); smaller tiles only when no larger one keeps waste that low."""
        for nw in (8, 4, 2, 1):
            chunk = vec(dtype) * 32 * nw
            nc = cdiv(N, chunk)
            if chunk <= max(N, vec(dtype) * 32) and (nc * chunk - N) <= 0.125 * nc * chunk:
                return nw
        return 1

    @classmethod
    def for_row(cls, op, N: int, dtype: str, num_warps: int | None = None, streaming: bool | None = None,
                stages: int | None = None, rows: int | None = None) -> "ChunkPlan":
        """The plan the heuristic picks for op (an OpSpec, its RowNorm or an op name); num_warps
        (the CHUNK), rows, streaming and stages override it (the CHUNK sweep and the
        cached-vs-streaming study of notebook 02)."""
        row, _ = rowio.resolve(op)
        e = ITEMSIZE[dtype]
        n_in = 2 if row.residual else 1
        if num_warps is None:
            num_warps = cls.chunk_warps(N, dtype)
        if rows is None:
            rows = ROWS_HEURISTIC(N * e * n_in)
        chunk = vec(dtype) * 32 * num_warps
        nc = max(1, cdiv(N, chunk))
        tail = N - (nc - 1) * chunk
        smem = nc * rows * chunk * e * n_in + SMEM_RESERVE
        if (streaming is None and smem <= CACHED_SMEM_LIMIT) or (streaming is False and smem <= SMEM_LIMIT):
            return cls(N=N, dtype=dtype, num_warps=num_warps, chunk=chunk, num_chunks=nc, tail=tail, smem_bytes=smem,
                       fits=True, rows=rows)
        if streaming is False:
            raise ValueError(f"a cached {dtype} row of N={N} needs {smem} bytes of shared memory (limit {SMEM_LIMIT}); "
                             "it can only stream")
        # Streaming: STREAM_WARPS-warp chunks (4 KB) through STREAM_STAGES slots, one row per CTA;
        # the last chunk's padding is at most one chunk of a row this long (> 100 KB).
        nw = STREAM_WARPS if streaming is None else num_warps
        chunk = vec(dtype) * 32 * nw
        nc = cdiv(N, chunk)
        st = stages or STREAM_STAGES
        return cls(N=N, dtype=dtype, num_warps=nw, chunk=chunk, num_chunks=nc, tail=N - (nc - 1) * chunk,
                   smem_bytes=st * chunk * e * n_in + SMEM_RESERVE, fits=True, streaming=True, stages=st)


def ROWS_HEURISTIC(row_bytes: int) -> int:
    """Rows per CTA from the bytes a row's cached inputs take: two while <= 8 KB (N <= 4096 bf16):
    short rows leave a CTA little to overlap, and pattern 1's sweep found R = 2 best at N = 1024 /
    4096."""
    return 2 if row_bytes <= 8192 else 1


def check(op, x, *rest) -> ChunkPlan:
    """The plan for the op's inputs (x, then the rest of the spec's positional inputs); ValueError
    naming the argument and the rule if gluon-chunked cannot take them."""
    row, _ = rowio.resolve(op)
    dt = dtype_name(x)
    N = x.shape[-1]
    check_tma_rows("gluon-chunked", N, dt)
    plan = ChunkPlan.for_row(row, N, dt)
    check_tma_operands(rowio.named_operands(row, (x, ) + rest), N)
    return plan


def launch(op, x, residual, weight, bias, eps: float, out=None, config: ChunkPlan | None = None):
    """Run gluon-chunked for op (an OpSpec, its RowNorm or an op name): the cached kernel, or the
    streaming one for rows the plan streams."""
    row, _ = rowio.resolve(op)
    plan = check(row, *rowio.operands(row, x, residual, weight, bias))
    if config is not None:
        if (config.N, config.dtype) != (x.shape[-1], dtype_name(x)):
            raise ValueError(f"config is a ChunkPlan for N={config.N} {config.dtype}; x has N={x.shape[-1]} "
                             f"{dtype_name(x)}")
        plan = config
    N = x.shape[-1]
    dt = dtype_name(x)
    x2 = x.view(-1, N)
    M = x2.shape[0]
    y, s, y2, s2 = row_outputs(x, out, row.residual)
    box = [1 if plan.streaming else plan.rows, plan.chunk]
    x_desc = descriptor(x2, box, row_layout(dt))
    r_desc = descriptor(residual.view(-1, N), box, row_layout(dt)) if row.residual else None
    v = vec(dt)
    args = (x_desc, r_desc, y2, s2, weight, bias, M, y2.stride(0) // v, s2.stride(0) // v if row.residual else 0, eps,
            N // v)
    kernel, grid = (streaming_norm_kernel, M) if plan.streaming else (chunked_norm_kernel, cdiv(M, plan.rows))
    kernel[(grid, )](*args, **_constexprs(row, plan))
    return rowio.outputs(row, y, s)


def _constexprs(row, plan: ChunkPlan) -> dict:
    ce = dict(STATS=norm_math.stats_hooks(row), HAS_W=row.weight, HAS_B=row.bias, HAS_RESIDUAL=row.residual)
    if plan.streaming:
        return dict(ce, CENTERED=row.centered, S=plan.stages, num_warps=plan.num_warps)
    return dict(ce, NUM_CHUNKS=plan.num_chunks, num_warps=plan.num_warps)


def codegen_spec(op, N: int, dtype: str, plan: ChunkPlan | None = None):
    """compile_sm90 arguments reproducing what launch() JITs for contiguous rows of N (CPU codegen)."""
    row, _ = rowio.resolve(op)
    plan = plan or ChunkPlan.for_row(row, N, dtype)
    desc = desc_type(dtype, [1 if plan.streaming else plan.rows, plan.chunk], row_layout(dtype))
    ptr = f"*{short_dtype(dtype)}"
    nv = N // vec(dtype)  # lengths and strides in 16-byte vectors (contiguous rows: stride N)
    args = {"x_desc": desc, "r_desc": desc if row.residual else None, "y_ptr": ptr,
            "s_ptr": ptr if row.residual else None, "w_ptr": ptr if row.weight else None,
            "b_ptr": ptr if row.bias else None, "M": "i32", "y_stride_v": nv, "s_stride_v": nv if row.residual else 0,
            "eps": "fp32", "N_v": nv}
    return kernel_spec(streaming_norm_kernel if plan.streaming else chunked_norm_kernel, args, _constexprs(row, plan),
                       num_warps=plan.num_warps)


# registration: gluon-chunked for every row norm

KNOBS = {"num_warps": (2, 4, 8, 16), "rows": (1, 2, 4), "streaming": (False, True), "stages": (2, 4, 8)}
# the 02 plan's CHUNK x rows sweep and the cached-vs-streaming study (experiments.ChunkedPlan)


def configure(op, shape: dict, dtype: str, overrides: dict) -> ChunkPlan:
    return ChunkPlan.for_row(op, shape["N"], dtype, **{k: v for k, v in overrides.items() if k in PLAN_KNOBS})


def codegen(op, shape: dict, dtype: str, config: ChunkPlan | None = None):
    return codegen_spec(op, shape["N"], dtype, config or configure(op, shape, dtype, {}))


rowio.register_row_variants(
    "gluon-chunked", pattern="chunked", launch=launch, check=check, configure=configure, codegen=codegen, knobs=KNOBS,
    roots=(chunked_norm_kernel, streaming_norm_kernel, ChunkPlan, norm_math.STATS_HOOKS),
    description="any N: power-of-2 TMA chunks into smem, zero-filled tail, masked variance/stores")


# ----------------------------------------------------------------------------------------------
# GroupNorm / InstanceNorm on (B, C, *spatial): the same machinery over a 2-D region per group.
#
# One program normalizes one (sample b, group g). Its elements form a rectangle of a 2-D view of x:
#   NCHW (contiguous):   view (B*C, S), S = prod(spatial); rows b*C + g*Cg ... + Cg-1, all S columns.
#                        The channel is the ROW: one weight/bias scalar per row.
#   channels-last:       view (B*S, C); rows b*S ... + S-1, columns g*Cg ... + Cg-1.
#                        The channel is the COLUMN: a weight/bias vector per chunk.
# The rectangle is walked in [BR, BC] power-of-2 TMA boxes ("chunks"): NCHW uses [1, CHUNK] boxes
# along S (the tail past S is TMA zero fill: S is the view's last dim); channels-last uses
# [BR, BC] boxes with BC = next_pow2(Cg) >= one 16-byte vector, whose columns past Cg belong to
# the NEXT group (not out of bounds, so not zero-filled) and rows past S to the next sample: a 2-D
# validity mask keeps them out of the statistics and the stores. The over-read (BC / Cg: 1.6x at
# Cg = 10, 8x for InstanceNorm's Cg = 1) comes from L2, because neighbouring groups run on
# neighbouring programs at the same time; DRAM still sees each byte about once.
# Statistics: Chan-merged (count, mean, M2) per chunk on x - K, K = chunk 0's mean (exact
# LayerNorm-style variance; no cancellation when |mean| >> std).
# CACHED: all T chunks stay in shared memory (one slot each), pass 2 reads them there. Otherwise a
# ring of S slots streams the group twice; the second read mostly hits L2 (the groups in flight
# on the GPU take ~ 132 SMs x a few chunks, far below the 50+ MB L2).

# The channels-last path compiles for sm_90 (CPU census) but stopped with "an illegal instruction
# was encountered" on its first H200 run (2026-11-29, box [128, 16] bf16); refused until debugged.
CHANNELS_LAST_ENABLED = False
GROUP_CACHED_LIMIT = 100 * 1024  # as CACHED_SMEM_LIMIT: two CTAs per SM keep loading while one computes
GROUP_STREAM_STAGES = 8  # 8 x 4 KB ring: ~28 KB in flight per CTA; with B*G ~ 256 CTAs on 132 SMs a
# 4-slot ring (12 KB in flight) is below Little's law for ~19 GB/s per CTA at ~1.5 us latency.


@gluon.jit
def _region_moments(x, valid):
    """(count, mean, M2) of the valid lanes of a [BR, BC] fp32 tile (0-d tensors)."""
    n = gl.sum(gl.sum(gl.where(valid, 1.0, 0.0), axis=1), axis=0)
    mean = gl.sum(gl.sum(gl.where(valid, x, 0.0), axis=1), axis=0) / gl.maximum(n, 1.0)
    d = gl.where(valid, x - mean, 0.0)
    return n, mean, gl.sum(gl.sum(d * d, axis=1), axis=0)


@gluon.jit
def _issue_region_chunk(x_desc, bufs, bars, k, r0, c0, n_cb, T, pred, S: gl.constexpr):
    """Load the k-th chunk of the two-pass sequence (box k mod T of the group) into slot k mod S.
    (The first H200 run used k itself past the first pass: streamed groups read the wrong boxes.)"""
    BR: gl.constexpr = x_desc.block_type.shape[0]
    BC: gl.constexpr = x_desc.block_type.shape[1]
    slot = k % S
    kk = k % T
    bar = bars.index(slot)
    mbarrier.expect(bar, x_desc.block_type.nbytes, pred=pred)
    tma.async_copy_global_to_shared(x_desc, [r0 + (kk // n_cb) * BR, c0 + (kk % n_cb) * BC], bar, bufs.index(slot),
                                    pred=pred)


@gluon.jit(do_not_specialize=["eps"])
def group_norm_kernel(x_desc, y_ptr, w_ptr, b_ptr, G, C_v, S_v, Cg, eps, L: gl.constexpr, CL: gl.constexpr,
                      HAS_W: gl.constexpr, HAS_B: gl.constexpr, CACHED: gl.constexpr, SLOTS: gl.constexpr,
                      num_warps: gl.constexpr):
    """One (b, g) group per program. x_desc: block [BR, BC] over the 2-D view (see above). The view's
    row length arrives in 16-byte vectors (C_v for channels-last, S_v for NCHW; the other one in
    elements) so the compiler knows the row stride is a multiple of the vector."""
    BR: gl.constexpr = x_desc.block_type.shape[0]
    BC: gl.constexpr = x_desc.block_type.shape[1]
    dtype: gl.constexpr = x_desc.dtype
    VEC: gl.constexpr = 128 // dtype.primitive_bitwidth
    if CL:
        C = C_v * VEC
        S = S_v
    else:
        C = C_v
        S = S_v * VEC
    pid = gl.program_id(0)
    b = pid // G
    g = pid % G
    if CL:  # rows = spatial positions of sample b, columns = the group's channels
        r0 = b * S
        c0 = g * Cg
        GR = S
        GC = Cg
        row_stride = C
    else:  # rows = the group's channels, columns = spatial positions
        r0 = b * C + g * Cg
        c0 = g * 0
        GR = Cg
        GC = S
        row_stride = S
    n_rb = gl.cdiv(GR, BR)
    n_cb = gl.cdiv(GC, BC)
    T = n_rb * n_cb

    bufs = gl.allocate_shared_memory(dtype, [SLOTS, BR, BC], x_desc.layout)
    bars = gl.allocate_shared_memory(gl.int64, [SLOTS, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(SLOTS):
        mbarrier.init(bars.index(i), count=1)
    if CACHED:  # every chunk has its own slot: issue them all now
        for k in gl.static_range(SLOTS):
            _issue_region_chunk(x_desc, bufs, bars, k, r0, c0, n_cb, T, k < T, SLOTS)
    else:
        for k in gl.static_range(SLOTS - 1):
            _issue_region_chunk(x_desc, bufs, bars, k, r0, c0, n_cb, T, k < 2 * T, SLOTS)

    ri0 = gl.arange(0, BR, layout=gl.SliceLayout(1, L))
    ci0 = gl.arange(0, BC, layout=gl.SliceLayout(0, L))
    mbarrier.wait(bars.index(0), 0)
    K = _region_moments(bufs.index(0).load(L).to(gl.float32),
                        gl.expand_dims(ri0 < GR, 1) & gl.expand_dims(ci0 < GC, 0))[1]
    cnt = K * 0.0
    mean = K * 0.0  # running mean of x - K
    m2 = K * 0.0
    for k in range(T):  # pass 1: statistics
        if not CACHED:
            fence_async_shared()
            _issue_region_chunk(x_desc, bufs, bars, k + SLOTS - 1, r0, c0, n_cb, T, k + SLOTS - 1 < 2 * T, SLOTS)
        slot = k % SLOTS
        mbarrier.wait(bars.index(slot), (k // SLOTS) & 1)
        ri = (k // n_cb) * BR + ri0
        ci = (k % n_cb) * BC + ci0
        valid = gl.expand_dims(ri < GR, 1) & gl.expand_dims(ci < GC, 0)
        x = bufs.index(slot).load(L).to(gl.float32)
        n_b, delta, m2_b = _region_moments((x - K) - mean, valid)
        cnt, mean, m2 = norm_math.chan_merge(cnt, mean, m2, n_b, delta, m2_b)
    shift = K + mean
    rstd = gl.rsqrt(m2 / cnt + eps)

    for j in range(T):  # pass 2: normalize, per-channel affine, store
        if CACHED:
            slot = j
        else:
            k = T + j
            fence_async_shared()
            _issue_region_chunk(x_desc, bufs, bars, k + SLOTS - 1, r0, c0, n_cb, T, k + SLOTS - 1 < 2 * T, SLOTS)
            slot = k % SLOTS
            mbarrier.wait(bars.index(slot), (k // SLOTS) & 1)
        ri = (j // n_cb) * BR + ri0
        ci = (j % n_cb) * BC + ci0
        valid = gl.expand_dims(ri < GR, 1) & gl.expand_dims(ci < GC, 0)
        x = bufs.index(slot).load(L).to(gl.float32)
        y = (x - shift) * rstd
        if CL:  # channel = column
            ch = g * Cg + ci
            if HAS_W:
                y = y * gl.expand_dims(gl.load(w_ptr + ch, mask=ci < GC, other=0.0).to(gl.float32), 0)
            if HAS_B:
                y = y + gl.expand_dims(gl.load(b_ptr + ch, mask=ci < GC, other=0.0).to(gl.float32), 0)
        else:  # channel = row
            ch = g * Cg + ri
            if HAS_W:
                y = y * gl.expand_dims(gl.load(w_ptr + ch, mask=ri < GR, other=0.0).to(gl.float32), 1)
            if HAS_B:
                y = y + gl.expand_dims(gl.load(b_ptr + ch, mask=ri < GR, other=0.0).to(gl.float32), 1)
        offs = gl.expand_dims((r0 + ri).to(gl.int64) * row_stride, 1) + gl.expand_dims(c0 + ci, 0)
        gl.store(y_ptr + offs, y.to(dtype), mask=valid)
    for i in gl.static_range(SLOTS):
        mbarrier.invalidate(bars.index(i))


@dataclass(frozen=True)
class GroupPlan:
    """How one (b, g) group is cut into [box_rows, box_cols] TMA boxes."""
    layout: str  # "nchw" | "channels_last"
    dtype: str
    num_warps: int
    box_rows: int
    box_cols: int
    chunks: int  # boxes per group (T)
    cached: bool
    slots: int  # shared-memory slots: chunks (cached) or the ring depth (streaming)
    smem_bytes: int
    threads: tuple  # (threads per warp along rows, along cols)
    warps: tuple  # (warps along rows, along cols)
    overread: float  # box elements read per valid element (1.0 = none)

    @classmethod
    def make(cls, layout: str, C: int, S: int, G: int, dtype: str, cached: bool | None = None,
             stages: int | None = None) -> "GroupPlan":
        e = ITEMSIZE[dtype]
        v = vec(dtype)
        Cg = C // G
        if layout == "channels_last":
            # columns: the group's channels padded to a power of two, at least one 16-byte vector
            bc = max(v, 1 << (Cg - 1).bit_length())
            tc = min(32, bc // v)
            nw = 4
            # rows: boxes of ~4 KB (at most 256 rows, TMA's per-dimension limit), at least one row
            # per thread row of the layout so no lane is replicated
            br = max(32 // tc * nw, min(256, 4096 // (bc * e)))
            rows, cols = S, Cg
            threads, warps = (32 // tc, tc), (nw, 1)
        else:
            # one row (channel) per box; CHUNK along S by the row heuristic (<= 12.5% padding)
            nw = ChunkPlan.chunk_warps(S, dtype)
            br, bc = 1, v * 32 * nw
            rows, cols = Cg, S
            threads, warps = (1, 32), (1, nw)
        T = cdiv(rows, br) * cdiv(cols, bc)
        box = br * bc * e
        fits = T * box + SMEM_RESERVE <= (GROUP_CACHED_LIMIT if cached is None else SMEM_LIMIT)
        use_cache = fits if cached is None else cached
        if use_cache and not fits:
            raise ValueError(f"a cached group of {T} boxes x {box} B does not fit in shared memory")
        slots = T if use_cache else (stages or GROUP_STREAM_STAGES)
        return cls(layout=layout, dtype=dtype, num_warps=nw, box_rows=br, box_cols=bc, chunks=T, cached=use_cache,
                   slots=slots, smem_bytes=slots * box + SMEM_RESERVE, threads=threads, warps=warps,
                   overread=T * br * bc / (rows * cols))

    def reg_layout(self):
        return gl.BlockedLayout([1, vec(self.dtype)], list(self.threads), list(self.warps), [1, 0])


def group_layout_of(x) -> str:
    """'nchw' (contiguous) or 'channels_last' (channels innermost, spatial dims row-major)."""
    import torch
    if x.is_contiguous():
        return "nchw"
    fmt = torch.channels_last if x.dim() == 4 else torch.channels_last_3d if x.dim() == 5 else None
    if fmt is not None and x.is_contiguous(memory_format=fmt):
        return "channels_last"
    if x.dim() == 3 and x.transpose(1, 2).is_contiguous():
        return "channels_last"
    raise ValueError(f"variant 'gluon-chunked' takes x contiguous (NCHW) or channels-last; got strides "
                     f"{tuple(x.stride())} for shape {tuple(x.shape)}: call .contiguous() first")


def check_group(x, num_groups, weight, bias) -> GroupPlan:
    B, C = x.shape[0], x.shape[1]
    S = x.numel() // max(1, B * C)
    dt = dtype_name(x)
    e = ITEMSIZE[dt]
    layout = group_layout_of(x)
    if layout == "channels_last" and not CHANNELS_LAST_ENABLED:
        raise ValueError("variant 'gluon-chunked' does not take channels-last x yet: its [rows, next_pow2(C/G)] box "
                         "path stopped with 'illegal instruction' on the H200 (2026-11-29) and is not debugged; "
                         "use variant='torch' or 'inductor', or pass x.contiguous()")
    inner, what = (C, "C (channels-last rows are C wide)") if layout == "channels_last" else \
        (S, "prod(spatial) (NCHW rows are one channel's spatial plane)")
    if (inner * e) % 16:
        raise ValueError(f"variant 'gluon-chunked' needs {what} * itemsize to be a multiple of 16 bytes for TMA: "
                         f"{inner} x {e} B = {inner * e} B; use variant='torch'")
    if x.data_ptr() % 16:
        raise ValueError(f"x's data pointer must be 16-byte aligned for TMA (got address % 16 = {x.data_ptr() % 16})")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and t.stride(0) != 1:
            raise ValueError(f"{name} must be contiguous (stride 1)")
    return GroupPlan.make(layout, C, S, num_groups, dt)


def _group_ints(plan: GroupPlan, C: int, S: int, G: int) -> dict:
    """group_norm_kernel's int arguments: the view's row length in 16-byte vectors (C_v for
    channels-last, S_v for NCHW; the other one in elements)."""
    v = vec(plan.dtype)
    cl = plan.layout == "channels_last"
    return {"G": G, "C_v": C // v if cl else C, "S_v": S // v if not cl else S, "Cg": C // G}


def _group_constexprs(plan: GroupPlan, has_w: bool, has_b: bool) -> dict:
    return dict(L=plan.reg_layout(), CL=plan.layout == "channels_last", HAS_W=has_w, HAS_B=has_b, CACHED=plan.cached,
                SLOTS=plan.slots, num_warps=plan.num_warps)


def launch_group(x, num_groups, weight, bias, eps: float, out=None, config: GroupPlan | None = None):
    import torch
    plan = check_group(x, num_groups, weight, bias)
    plan = config or plan
    B, C = x.shape[0], x.shape[1]
    S = x.numel() // (B * C)
    y = torch.empty_like(x) if out is None else out
    if y.shape != x.shape or y.stride() != x.stride() or y.dtype != x.dtype:
        raise ValueError(f"out must have x's shape, dtype and strides {tuple(x.stride())}")
    if plan.layout == "channels_last":
        x2 = x.permute(0, *range(2, x.dim()), 1).reshape(B * S, C)  # a view: channels innermost
    else:
        x2 = x.view(B * C, S)
    x_desc = descriptor(x2, [plan.box_rows, plan.box_cols], row_layout(plan.dtype))
    group_norm_kernel[(B * num_groups, )](x_desc, y, weight, bias, *_group_ints(plan, C, S, num_groups).values(), eps,
                                          **_group_constexprs(plan, weight is not None, bias is not None))
    return y


def group_codegen_spec(plan: GroupPlan, C: int, S: int, G: int, has_w: bool = True, has_b: bool = True):
    """compile_sm90 arguments reproducing what launch_group JITs (CPU codegen)."""
    ptr = f"*{short_dtype(plan.dtype)}"
    args = {"x_desc": desc_type(plan.dtype, [plan.box_rows, plan.box_cols], row_layout(plan.dtype)), "y_ptr": ptr,
            "w_ptr": ptr if has_w else None, "b_ptr": ptr if has_b else None, **_group_ints(plan, C, S, G),
            "eps": "fp32"}
    return kernel_spec(group_norm_kernel, args, _group_constexprs(plan, has_w, has_b), num_warps=plan.num_warps)


# registration: gluon-chunked for group_norm and instance_norm (instance_norm: one channel per group)

GROUP_KNOBS = {"cached": (False, True), "stages": (3, GROUP_STREAM_STAGES)}


def _group_dims(shape: dict) -> tuple:
    """(C, S, G, layout) of a group op's shape dict (instance_norm: G = C)."""
    from ..specs.group import group_shape
    _, C, spatial = group_shape(shape)
    S = 1
    for s in spatial:
        S *= s
    return C, S, shape.get("G", C), shape.get("layout", "nchw")


def configure_group(shape: dict, dtype: str, overrides: dict) -> GroupPlan:
    C, S, G, layout = _group_dims(shape)
    if layout == "channels_last" and not CHANNELS_LAST_ENABLED:
        raise ValueError("variant 'gluon-chunked' does not take channels-last x yet (see CHANNELS_LAST_ENABLED)")
    return GroupPlan.make(layout, C, S, G, dtype, cached=overrides.get("cached"), stages=overrides.get("stages"))


def codegen_group(shape: dict, dtype: str, config: GroupPlan | None = None):
    C, S, G, _ = _group_dims(shape)
    return group_codegen_spec(config or configure_group(shape, dtype, {}), C, S, G)


def _register_group():
    from .. import specs
    from ..registry import register
    for spec in specs.family("group_norm"):
        def fn(*inputs, eps, out=None, config=None, _spec=spec):
            a = _spec.named(inputs)
            return launch_group(a["x"], a.get("num_groups", a["x"].shape[1]), a["weight"], a["bias"], eps, out=out,
                                config=config)

        def check(*inputs, _spec=spec):
            _spec.validate(*inputs, **_spec.scalars)
            a = _spec.named(inputs)
            check_group(a["x"], a.get("num_groups", a["x"].shape[1]), a["weight"], a["bias"])

        fn.__name__ = fn.__qualname__ = f"{spec.name}_gluon_chunked"
        register(spec.name, "gluon-chunked", pattern="chunked", needs_hopper=True, supports_out=True, check=check,
                 configure=configure_group, codegen=codegen_group, knobs=GROUP_KNOBS,
                 roots=(launch_group, check_group, GroupPlan, group_norm_kernel),
                 description="one CTA per (sample, group; instance_norm: a group per channel): the group's region "
                             "in power-of-2 TMA boxes, cached or ring-streamed")(fn)


_register_group()
