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
statistics in per-lane accumulators reduced once, LayerNorm by sums shifted by chunk 0's mean; pass 2:
normalize and store), the second read
coming from L2 or HBM.
"""
from __future__ import annotations

from dataclasses import dataclass

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma

from . import norm_math, rowio
from .hopper import (CTA_SMEM_OVERHEAD, H200_SMS, ITEMSIZE, MAX_WARPS_PER_SM, SM_SMEM, SMEM_LIMIT, SMEM_RESERVE,
                     cdiv, check_row_operands, check_tma_rows, desc_type, descriptor, dtype_name, kernel_spec, num_sms,
                     out_like, row_layout, row_outputs, short_dtype, vec)

# Cache the row while it takes <= 100 KB (two CTAs per SM, as gluon-tma's heuristic); longer rows
# stream. The H200 stream study (M = 4096, run 20261201T194000Z) puts the crossover there in both
# dtypes: bf16 RMSNorm cached leads streaming by 4-12 SOL points up to N = 49152 (96 KB) and trails by
# 16-22 from 65536; fp32 cached leads at 24576 (96 KB), streaming at 32768 (128 KB). One byte limit
# serves both dtypes.
CACHED_SMEM_LIMIT = 100 * 1024
STREAM_STAGES = 4  # ring slots in flight: 3 chunks (12 KB) ahead of the one being reduced
STREAM_WARPS = 8  # streaming chunks: 8 warps = 2048 bf16 / 1024 fp32 elements (4 KB)
OCCUPANCY_MIN_WARPS = 48  # resident warps per SM below which a cached row gets 16 warps (occupancy_warps)
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
    acc = gl.zeros([1, CHUNK], gl.float32, L)  # the hooks' per-lane running statistics (norm_math)
    mean = acc
    m2 = acc
    K = gl.sum(acc, axis=1)
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

    @staticmethod
    def occupancy_warps(N: int, dtype: str, nw: int, row_copies: int) -> int:
        """16 warps instead of nw when the cached rows leave an SM under OCCUPANCY_MIN_WARPS resident
        warps (shared memory caps the CTAs per SM) and the 4096-byte x 16-warp chunk keeps the padding
        within 12.5%: the CHUNK sweep of run 20261201T094814Z, RMSNorm bf16 M = 16384, N = 24576
        (4 CTAs x 8 warps = 32 resident): 70.0% -> 85.3% of the datasheet with 16 warps; at N = 14336
        (7 x 8 = 56 resident) LayerNorm lost 82.5% -> 73.4% with 16, so the bar is below 56."""
        if nw >= 16:
            return nw

        def resident(w):
            chunk = vec(dtype) * 32 * w
            smem = cdiv(N, chunk) * chunk * ITEMSIZE[dtype] * row_copies + SMEM_RESERVE
            if smem > CACHED_SMEM_LIMIT:
                return 0
            return min(SM_SMEM // (smem + CTA_SMEM_OVERHEAD), MAX_WARPS_PER_SM // w) * w

        chunk16 = vec(dtype) * 32 * 16
        nc16 = cdiv(N, chunk16)
        if resident(nw) < OCCUPANCY_MIN_WARPS and nc16 * chunk16 - N <= 0.125 * nc16 * chunk16 and \
                resident(16) > resident(nw):
            return 16
        return nw

    @classmethod
    def for_row(cls, op, N: int, dtype: str, num_warps: int | None = None, streaming: bool | None = None,
                stages: int | None = None, rows: int | None = None) -> "ChunkPlan":
        """The plan the heuristic picks for op (an OpSpec, its RowNorm or an op name); num_warps
        (the CHUNK), rows, streaming and stages override it (the CHUNK sweep and the
        cached-vs-streaming study of notebook 02).
        Measured, not adopted: the 02 'mid-n' study (run 20261201T214328Z, M = 2048 / 4096, N = 5120 ...
        14336, RMSNorm and add + RMSNorm, 4 / 8 / 16 warps x 1 / 2 rows) found this rule within 1% of
        the best config in 17 of 20 cells; 16 warps led where 8 left 48-56 resident warps per SM
        (RMSNorm N = 14336 by 1.8-2.6%, add + RMSNorm 7168 by 0.6-0.9%) and R = 2 at 2048 x 6144 by
        6.6% (a tie at 4096 x 6144). An M-aware bar (64 resident warps at M <= 4096) would take them,
        but ChunkPlan is in GroupNorm's code hash and no grid cell changes side (notebook 02 shows it)."""
        row, _ = rowio.resolve(op)
        e = ITEMSIZE[dtype]
        n_in = 2 if row.residual else 1
        if rows is None:
            rows = ROWS_HEURISTIC(N * e * n_in)
        if num_warps is None:
            num_warps = cls.chunk_warps(N, dtype)
            num_warps = cls.occupancy_warps(N, dtype, num_warps, rows * n_in)
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
    check_row_operands(rowio.named_operands(row, (x, ) + rest), N)
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

# The channels-last path stopped with "an illegal instruction was encountered" on its first H200 run
# (2026-11-29): its boxes started at channel g * Cg, not 16-byte aligned (see group_norm_kernel).
CHANNELS_LAST_ENABLED = True
# NCHW groups of at most PACK_MAX_ELEMS elements (InstanceNorm planes up to 64², small GroupNorm groups)
# are normalized several per CTA in registers: one CTA per plane left 20480 one-warp CTAs of 512 B each
# at InstanceNorm 16 x 1280 x 16² (0.51x torch.compile, which packs rows; run 20261201T194555Z).
PACK_MAX_ELEMS = 4096
PACK_TILE = 8192  # elements per packed CTA tile (32 fp32 registers per thread at 8 warps)
PACK_WARPS = 8
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
        # A tiled TMA box must start at a 16-byte aligned global address: the first box column is
        # the group's first channel rounded down to a 16-byte vector, and the group's channels are
        # box columns C_LO .. C_LO + Cg - 1. (Starting at channel g * Cg itself was the "illegal
        # instruction" of the first H200 run: compute-sanitizer put it on this copy, in the first
        # block whose g * Cg * itemsize % 16 != 0 — run of 2026-12-01, ci/repro_gn_channels_last.py.)
        r0 = b * S
        c0 = (g * Cg) // VEC * VEC
        C_LO = g * Cg - c0
        GR = S
        GC = C_LO + Cg
        row_stride = C
    else:  # rows = the group's channels, columns = spatial positions
        r0 = b * C + g * Cg
        c0 = g * 0
        C_LO = g * 0
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
                        gl.expand_dims(ri0 < GR, 1) & gl.expand_dims((ci0 >= C_LO) & (ci0 < GC), 0))[1]
    # per-lane shifted sums of x - K, reduced once after the loop (a CTA-wide reduction per box
    # serialized the first version: 9.5-48% of the datasheet on the H200, run 20261201T094011Z)
    a1 = gl.zeros([BR, BC], gl.float32, L)
    a2 = gl.zeros([BR, BC], gl.float32, L)
    for k in range(T):  # pass 1: statistics
        if not CACHED:
            fence_async_shared()
            _issue_region_chunk(x_desc, bufs, bars, k + SLOTS - 1, r0, c0, n_cb, T, k + SLOTS - 1 < 2 * T, SLOTS)
        slot = k % SLOTS
        mbarrier.wait(bars.index(slot), (k // SLOTS) & 1)
        ri = (k // n_cb) * BR + ri0
        ci = (k % n_cb) * BC + ci0
        valid = gl.expand_dims(ri < GR, 1) & gl.expand_dims((ci >= C_LO) & (ci < GC), 0)
        d = gl.where(valid, bufs.index(slot).load(L).to(gl.float32) - K, 0.0)
        a1 += d
        a2 += d * d
    n = (Cg * S) * 1.0
    md = gl.sum(gl.sum(a1, axis=1), axis=0) / n
    var = gl.sum(gl.sum(a2, axis=1), axis=0) / n - md * md
    shift = K + md
    rstd = gl.rsqrt(gl.where(var < 0.0, 0.0, var) + eps)  # a NaN stays NaN

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
        valid = gl.expand_dims(ri < GR, 1) & gl.expand_dims((ci >= C_LO) & (ci < GC), 0)
        x = bufs.index(slot).load(L).to(gl.float32)
        y = (x - shift) * rstd
        if CL:  # channel = column
            ch = c0 + ci
            cok = (ci >= C_LO) & (ci < GC)
            if HAS_W:
                y = y * gl.expand_dims(gl.load(w_ptr + ch, mask=cok, other=0.0).to(gl.float32), 0)
            if HAS_B:
                y = y + gl.expand_dims(gl.load(b_ptr + ch, mask=cok, other=0.0).to(gl.float32), 0)
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


@gluon.jit(do_not_specialize=["eps"])
def gn_rows_packed_kernel(x_ptr, y_ptr, w_ptr, b_ptr, n_rows, G, Lg_v, eps, S: gl.constexpr, Cg: gl.constexpr,
                          L: gl.constexpr, R: gl.constexpr, LP: gl.constexpr, HAS_W: gl.constexpr,
                          HAS_B: gl.constexpr):
    """NCHW, small groups: R whole groups (rows of the (B*G, Lg) view, Lg = Cg * S) per program in one
    [R, LP] register tile: one read, exact two-pass statistics in registers, one write. S and Cg are
    constexprs (the channel of a column is g * Cg + col // S: a division by a constant)."""
    dtype: gl.constexpr = x_ptr.dtype.element_ty
    VEC: gl.constexpr = 128 // dtype.primitive_bitwidth
    Lg = Lg_v * VEC
    rows = gl.program_id(0) * R + gl.arange(0, R, layout=gl.SliceLayout(1, L))
    cols = gl.arange(0, LP, layout=gl.SliceLayout(0, L))
    m = gl.expand_dims(rows < n_rows, 1) & gl.expand_dims(cols < Lg, 0)
    offs = gl.expand_dims(rows.to(gl.int64) * Lg, 1) + gl.expand_dims(cols, 0)
    x = gl.load(x_ptr + offs, mask=m, other=0.0).to(gl.float32)
    n = Lg * 1.0
    mean = gl.sum(x, axis=1) / n
    d = gl.where(m, x - gl.expand_dims(mean, 1), 0.0)
    y = d * gl.expand_dims(gl.rsqrt(gl.sum(d * d, axis=1) / n + eps), 1)
    if Cg == 1:  # InstanceNorm-like: one channel per row
        ch = rows % (G * Cg)
        rm = rows < n_rows
        if HAS_W:
            y = y * gl.expand_dims(gl.load(w_ptr + ch, mask=rm, other=0.0).to(gl.float32), 1)
        if HAS_B:
            y = y + gl.expand_dims(gl.load(b_ptr + ch, mask=rm, other=0.0).to(gl.float32), 1)
    else:
        ch = gl.expand_dims((rows % G) * Cg, 1) + gl.expand_dims(cols // S, 0)
        if HAS_W:
            y = y * gl.load(w_ptr + ch, mask=m, other=0.0).to(gl.float32)
        if HAS_B:
            y = y + gl.load(b_ptr + ch, mask=m, other=0.0).to(gl.float32)
    gl.store(y_ptr + offs, y.to(dtype), mask=m)


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
    packed: bool = False  # NCHW small groups: pack_rows whole groups per CTA in registers (no TMA, no smem)
    pack_rows: int = 0
    pack_cols: int = 0  # next_pow2(Cg * S)

    @classmethod
    def make(cls, layout: str, C: int, S: int, G: int, dtype: str, cached: bool | None = None,
             stages: int | None = None, packed: bool | None = None) -> "GroupPlan":
        e = ITEMSIZE[dtype]
        v = vec(dtype)
        Cg = C // G
        if layout == "nchw" and (packed or (packed is None and cached is None and Cg * S <= PACK_MAX_ELEMS)):
            return cls._packed(dtype, Cg * S)
        if packed:
            raise ValueError("packed groups are an NCHW path (a group's Cg * S elements contiguous)")
        if layout == "channels_last":
            # columns: the group's channels from the 16-byte vector holding its first one (a TMA box
            # starts 16-byte aligned): Cg + up to VEC - 1 columns, padded to a power of two
            bc = max(v, 1 << (Cg + v - 2).bit_length())
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

    @classmethod
    def _packed(cls, dtype: str, Lg: int) -> "GroupPlan":
        """[pack_rows, next_pow2(Lg)] register tiles of PACK_TILE elements: threads and warps along the
        group's elements first, the rest along groups (InstanceNorm at 16² bf16: 32 planes per CTA)."""
        v = vec(dtype)
        lp = max(v, 1 << (Lg - 1).bit_length())
        if lp > PACK_TILE:
            raise ValueError(f"a packed group holds at most {PACK_TILE} elements in registers; this one has {Lg}")
        nw = PACK_WARPS
        tc = min(32, lp // v)
        wc = max(1, min(nw, lp // (v * tc)))
        rows = max((32 // tc) * (nw // wc), PACK_TILE // lp)
        return cls(layout="nchw", dtype=dtype, num_warps=nw, box_rows=0, box_cols=0, chunks=0, cached=False, slots=0,
                   smem_bytes=0, threads=(32 // tc, tc), warps=(nw // wc, wc), overread=lp / Lg, packed=True,
                   pack_rows=rows, pack_cols=lp)

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
    plan = check_group(x, num_groups, weight, bias)
    plan = config or plan
    B, C = x.shape[0], x.shape[1]
    S = x.numel() // (B * C)
    y = out_like(x, out)
    if plan.packed:
        args, ce = _packed_args(plan, B, C, S, num_groups, weight is not None, bias is not None)
        tensors = {"x_ptr": x, "y_ptr": y, "w_ptr": weight, "b_ptr": bias, "eps": eps}
        gn_rows_packed_kernel[(cdiv(B * num_groups, plan.pack_rows), )](
            **{n: tensors.get(n, args[n]) for n in args}, **ce, num_warps=plan.num_warps)
        return y
    if plan.layout == "channels_last":
        x2 = x.permute(0, *range(2, x.dim()), 1).reshape(B * S, C)  # a view: channels innermost
    else:
        x2 = x.view(B * C, S)
    x_desc = descriptor(x2, [plan.box_rows, plan.box_cols], row_layout(plan.dtype))
    group_norm_kernel[(B * num_groups, )](x_desc, y, weight, bias, *_group_ints(plan, C, S, num_groups).values(), eps,
                                          **_group_constexprs(plan, weight is not None, bias is not None))
    return y


def _packed_args(plan: GroupPlan, B: int, C: int, S: int, G: int, has_w: bool, has_b: bool):
    """gn_rows_packed_kernel's arguments ({name: value or compile type}) and constexprs."""
    ptr = f"*{short_dtype(plan.dtype)}"
    Cg = C // G
    args = {"x_ptr": ptr, "y_ptr": ptr, "w_ptr": ptr if has_w else None, "b_ptr": ptr if has_b else None,
            "n_rows": B * G, "G": G, "Lg_v": Cg * S // vec(plan.dtype), "eps": "fp32"}
    return args, dict(S=S, Cg=Cg, L=plan.reg_layout(), R=plan.pack_rows, LP=plan.pack_cols, HAS_W=has_w, HAS_B=has_b)


def group_codegen_spec(plan: GroupPlan, C: int, S: int, G: int, has_w: bool = True, has_b: bool = True,
                       B: int = 8):
    """compile_sm90 arguments reproducing what launch_group JITs (CPU codegen)."""
    if plan.packed:
        args, ce = _packed_args(plan, B, C, S, G, has_w, has_b)
        return kernel_spec(gn_rows_packed_kernel, args, ce, num_warps=plan.num_warps)
    ptr = f"*{short_dtype(plan.dtype)}"
    args = {"x_desc": desc_type(plan.dtype, [plan.box_rows, plan.box_cols], row_layout(plan.dtype)), "y_ptr": ptr,
            "w_ptr": ptr if has_w else None, "b_ptr": ptr if has_b else None, **_group_ints(plan, C, S, G),
            "eps": "fp32"}
    return kernel_spec(group_norm_kernel, args, _group_constexprs(plan, has_w, has_b), num_warps=plan.num_warps)


# registration: gluon-chunked for group_norm and instance_norm (instance_norm: one channel per group)

GROUP_KNOBS = {"cached": (False, True), "stages": (3, GROUP_STREAM_STAGES), "packed": (False, True)}


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
    return GroupPlan.make(layout, C, S, G, dtype, cached=overrides.get("cached"), stages=overrides.get("stages"),
                          packed=overrides.get("packed"))


def codegen_group(shape: dict, dtype: str, config: GroupPlan | None = None):
    from ..specs.group import group_shape
    C, S, G, _ = _group_dims(shape)
    return group_codegen_spec(config or configure_group(shape, dtype, {}), C, S, G, B=group_shape(shape)[0])


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
            plan = check_group(a["x"], a.get("num_groups", a["x"].shape[1]), a["weight"], a["bias"])
            if plan.smem_bytes > SMEM_LIMIT:  # channels-last fp32 with >= 1022 channels per group (G = 1)
                raise ValueError(f"variant 'gluon-chunked' would need {plan.smem_bytes} B of shared memory per CTA "
                                 f"for a channels-last group of {a['x'].shape[1] // a.get('num_groups', 1)} "
                                 f"{plan.dtype} channels (sm_90 allows {SMEM_LIMIT} B); use variant='gluon-split'")

        fn.__name__ = fn.__qualname__ = f"{spec.name}_gluon_chunked"
        register(spec.name, "gluon-chunked", pattern="chunked", needs_hopper=True, supports_out=True, check=check,
                 configure=configure_group, codegen=codegen_group, knobs=GROUP_KNOBS,
                 roots=(launch_group, check_group, GroupPlan, group_norm_kernel, gn_rows_packed_kernel, _packed_args),
                 description="one CTA per (sample, group; instance_norm: a group per channel): the group's region "
                             "in power-of-2 TMA boxes, cached or ring-streamed")(fn)


_register_group()


# ----------------------------------------------------------------------------------------------
# GroupNorm / InstanceNorm split across CTAs (variant "gluon-split"): a two-phase reduction.
#
# One CTA per (sample, group) leaves most of the GPU idle when B * G is small (B = 1, G = 32: 32
# CTAs on 132 SMs) and makes one CTA stream a whole group (up to 40 channels x 128² = 1.3 MB bf16).
# Here every group is cut into K slices and three launches share the work:
#   1. stats:    one CTA per (slice, column block, sample) accumulates shifted sums s1 = sum(x - k),
#                s2 = sum((x - k)²) per lane in registers (no cross-warp reduction until the end)
#                and writes one partial per column of the reduction: NCHW's column is the group (its
#                Cg * S elements are one contiguous row of the (B*G, Cg*S) view), channels-last's is
#                the channel (the (B*S, C) view's column). k, the shift, is the mean of the first
#                tile the CTA's column sees (the same for every slice: the partials just add).
#   2. finalize: one CTA per GB groups merges the K slices (sums add) and then a group's columns
#                (Chan's parallel formula: mean = mean of column means, M2 = sum M2_c + n * sum
#                (mean_c - mean)²) into (mean, rstd) per (sample, group).
#   3. apply:    one CTA per slice again, in reverse order (the slices stats read last are the ones
#                still in L2), y = x * a + b' with a = rstd * w[c], b' = bias[c] - mean * a.
# DRAM traffic: x twice (once where it still sits in L2) + y once. Loads and stores are plain
# 128-bit ld/st.global over [rows, VEC] register tiles; the slices keep every SM busy.

SPLIT_WARPS = 4
MAX_GRID_Y = 65535  # CUDA's limit on grid dimensions y and z
SPLIT_TILE_BYTES = 4096  # one register tile per loop step: 2048 bf16 / 1024 fp32 elements per CTA
SPLIT_UNROLL = 2  # 16-byte vectors per thread per step (both issued before either is used)
SPLIT_CTAS_PER_SM = 4  # slices per group: enough CTAs for ~4 per SM (measured: see notebook 02)
SPLIT_MAX_COLS = 256  # channels-last column block
FIN_COLS = 256  # finalize: at most this many columns per CTA (whole groups) ...
FIN_TILE = 2048  # ... x slices summed per step: a [KB, NCB] tile of this many elements, 4 warps


@gluon.jit
def gn_rows_stats_kernel(x_ptr, shift_ptr, s1_ptr, s2_ptr, G, Lg_v, span_v, K, N0, L: gl.constexpr, NV: gl.constexpr):
    """NCHW: program (k, row) of the (B*G, Lg) view, Lg = Cg * S: elements [k*span, (k+1)*span) of
    the row. Lengths arrive in 16-byte vectors (Lg_v, span_v) so every access stays 128 bits."""
    dtype: gl.constexpr = x_ptr.dtype.element_ty
    VEC: gl.constexpr = 128 // dtype.primitive_bitwidth
    TILE: gl.constexpr = NV * VEC
    k = gl.program_id(0)
    row = gl.program_id(1)
    Lg = Lg_v * VEC
    span = span_v * VEC
    base = x_ptr + row.to(gl.int64) * Lg
    offs0 = gl.expand_dims(gl.arange(0, NV, layout=gl.SliceLayout(1, L)) * VEC, 1) + \
        gl.expand_dims(gl.arange(0, VEC, layout=gl.SliceLayout(0, L)), 0)
    m0 = offs0 < Lg
    x0 = gl.load(base + offs0, mask=m0, other=0.0).to(gl.float32)
    shift = gl.sum(gl.sum(x0, axis=1), axis=0) / (N0 * 1.0)  # N0 = min(Lg, TILE)
    lo = k * span
    hi = lo + span
    a1 = gl.zeros([NV, VEC], gl.float32, L)
    a2 = gl.zeros([NV, VEC], gl.float32, L)
    for start in range(lo, gl.minimum(hi, Lg), TILE):
        offs = start + offs0
        m = (offs < hi) & (offs < Lg)
        d = gl.where(m, gl.load(base + offs, mask=m, other=0.0).to(gl.float32) - shift, 0.0)
        a1 += d
        a2 += d * d
    part = ((row // G) * K + k) * G + row % G  # [B, K, G], as the finalize reads it
    gl.store(s1_ptr + part, gl.sum(gl.sum(a1, axis=1), axis=0))
    gl.store(s2_ptr + part, gl.sum(gl.sum(a2, axis=1), axis=0))
    gl.store(shift_ptr + row, shift, mask=k == 0)


@gluon.jit
def gn_cols_stats_kernel(x_ptr, shift_ptr, s1_ptr, s2_ptr, S, C_v, K, span, N0, L: gl.constexpr, BR: gl.constexpr,
                         BC: gl.constexpr):
    """channels-last: program (k, column block, sample b) of the (B*S, C) view: spatial rows
    [k*span, (k+1)*span) of sample b, channels [cb*BC, cb*BC + BC); one partial per channel."""
    dtype: gl.constexpr = x_ptr.dtype.element_ty
    VEC: gl.constexpr = 128 // dtype.primitive_bitwidth
    k = gl.program_id(0)
    cb = gl.program_id(1)
    b = gl.program_id(2)
    C = C_v * VEC
    rows = gl.arange(0, BR, layout=gl.SliceLayout(1, L))
    cols = cb * BC + gl.arange(0, BC, layout=gl.SliceLayout(0, L))
    cmask = gl.expand_dims(cols < C, 0)
    base = x_ptr + (b * S).to(gl.int64) * C
    m0 = gl.expand_dims(rows < S, 1) & cmask
    x0 = gl.load(base + gl.expand_dims(rows * C, 1) + gl.expand_dims(cols, 0), mask=m0, other=0.0).to(gl.float32)
    shift = gl.sum(x0, axis=0) / (N0 * 1.0)  # per channel: its mean over rows 0..N0-1, N0 = min(S, BR)
    sh = gl.expand_dims(shift, 0)
    lo = k * span
    hi = lo + span
    a1 = gl.zeros([BR, BC], gl.float32, L)
    a2 = gl.zeros([BR, BC], gl.float32, L)
    for r0 in range(lo, gl.minimum(hi, S), BR):
        r = r0 + rows
        m = gl.expand_dims((r < hi) & (r < S), 1) & cmask
        d = gl.where(m, gl.load(base + gl.expand_dims(r * C, 1) + gl.expand_dims(cols, 0), mask=m,
                                other=0.0).to(gl.float32) - sh, 0.0)
        a1 += d
        a2 += d * d
    idx = (b * K + k) * C + cols
    gl.store(s1_ptr + idx, gl.sum(a1, axis=0), mask=cols < C)
    gl.store(s2_ptr + idx, gl.sum(a2, axis=0), mask=cols < C)
    gl.store(shift_ptr + b * C + cols, shift, mask=(cols < C) & (k == 0))


@gluon.jit(do_not_specialize=["eps"])
def gn_split_finalize_kernel(shift_ptr, s1_ptr, s2_ptr, stats_ptr, G, K, NCOL, CPG, NPC, GB, eps, LF: gl.constexpr,
                             KB: gl.constexpr, NCB: gl.constexpr, GBP: gl.constexpr, ONE_COL: gl.constexpr):
    """Program (group block, sample b): (mean, rstd) of groups gb*GB .. + GB-1 of sample b from the K
    slices' partials ([B, K, NCOL] sums, [B, NCOL] shifts); group g owns columns g*CPG .. + CPG-1,
    NPC elements each. The K slices are summed KB at a time over the block's NCB columns (parallel
    loads, not a K-long chain), then a group's columns merge by Chan's formula through a [GBP, NCB]
    ownership mask (ONE_COL: a column is a group, InstanceNorm and NCHW)."""
    gb = gl.program_id(0)
    b = gl.program_id(1)
    g0 = gb * GB
    c = g0 * CPG + gl.arange(0, NCB, layout=gl.SliceLayout(0, LF))
    cm = (c < (g0 + GB) * CPG) & (c < NCOL)
    kk = gl.arange(0, KB, layout=gl.SliceLayout(1, LF))
    t1 = gl.zeros([KB, NCB], gl.float32, LF)
    t2 = gl.zeros([KB, NCB], gl.float32, LF)
    for k0 in range(0, K, KB):
        k = k0 + kk
        m = gl.expand_dims(k < K, 1) & gl.expand_dims(cm, 0)
        idx = gl.expand_dims((b * K + k) * NCOL, 1) + gl.expand_dims(c, 0)
        t1 += gl.load(s1_ptr + idx, mask=m, other=0.0)
        t2 += gl.load(s2_ptr + idx, mask=m, other=0.0)
    S1 = gl.sum(t1, axis=0)
    S2 = gl.sum(t2, axis=0)
    n = NPC * 1.0
    mean_c = gl.load(shift_ptr + b * NCOL + c, mask=cm, other=0.0) + S1 / n
    m2_c = S2 - S1 * (S1 / n)
    if ONE_COL:
        var = m2_c / n
        var = gl.where(var < 0.0, 0.0, var)  # rounding of s2 - s1²/n; a NaN stays NaN (NaN < 0 is false)
        out = (b * G + c) * 2
        gl.store(stats_ptr + out, mean_c, mask=cm)
        gl.store(stats_ptr + out + 1, gl.rsqrt(var + eps), mask=cm)
    else:
        gi = g0 + gl.arange(0, GBP, layout=gl.SliceLayout(1, LF))
        own = (gl.expand_dims(c // CPG, 0) == gl.expand_dims(gi, 1)) & gl.expand_dims(cm, 0)  # [GBP, NCB]
        cpg = CPG * 1.0
        mean = gl.sum(gl.where(own, gl.expand_dims(mean_c, 0), 0.0), axis=1) / cpg
        dev = gl.where(cm, mean_c - gl.sum(gl.where(own, gl.expand_dims(mean, 1), 0.0), axis=0), 0.0)
        m2 = gl.sum(gl.where(own, gl.expand_dims(m2_c + n * dev * dev, 0), 0.0), axis=1)
        var = m2 / (n * cpg)
        var = gl.where(var < 0.0, 0.0, var)
        gm = (gi < g0 + GB) & (gi < G)
        out = (b * G + gi) * 2
        gl.store(stats_ptr + out, mean, mask=gm)
        gl.store(stats_ptr + out + 1, gl.rsqrt(var + eps), mask=gm)


@gluon.jit
def gn_rows_apply_kernel(x_ptr, y_ptr, w_ptr, b_ptr, stats_ptr, G, Cg, S_v, Lg_v, span_v, L: gl.constexpr,
                         NV: gl.constexpr, HAS_W: gl.constexpr, HAS_B: gl.constexpr):
    """NCHW: y for slice k of row (b*G + g), launched in reverse slice order. The channel of a
    16-byte vector is g*Cg + (its offset in the group) // S (S * itemsize % 16 == 0: a vector never
    straddles two channels)."""
    dtype: gl.constexpr = x_ptr.dtype.element_ty
    VEC: gl.constexpr = 128 // dtype.primitive_bitwidth
    TILE: gl.constexpr = NV * VEC
    KP = gl.num_programs(0)
    k = KP - 1 - gl.program_id(0)
    row = gl.num_programs(1) - 1 - gl.program_id(1)
    g = row % G
    Lg = Lg_v * VEC
    S = S_v * VEC
    span = span_v * VEC
    mean = gl.load(stats_ptr + row * 2)
    rstd = gl.load(stats_ptr + row * 2 + 1)
    base = row.to(gl.int64) * Lg
    vi = gl.arange(0, NV, layout=gl.SliceLayout(1, L)) * VEC
    ci = gl.expand_dims(gl.arange(0, VEC, layout=gl.SliceLayout(0, L)), 0)
    lo = k * span
    hi = lo + span
    for start in range(lo, gl.minimum(hi, Lg), TILE):
        v0 = start + vi  # [NV]: the first element of each vector
        ch = g * Cg + v0 // S
        vm = (v0 < hi) & (v0 < Lg)
        a = gl.zeros_like(v0.to(gl.float32)) + rstd
        if HAS_W:
            a = a * gl.load(w_ptr + ch, mask=vm, other=0.0).to(gl.float32)
        bb = -mean * a
        if HAS_B:
            bb = bb + gl.load(b_ptr + ch, mask=vm, other=0.0).to(gl.float32)
        offs = gl.expand_dims(v0, 1) + ci
        m = gl.expand_dims(vm, 1)
        x = gl.load(x_ptr + base + offs, mask=m, other=0.0).to(gl.float32)
        y = x * gl.expand_dims(a, 1) + gl.expand_dims(bb, 1)
        gl.store(y_ptr + base + offs, y.to(dtype), mask=m)


@gluon.jit
def gn_cols_apply_kernel(x_ptr, y_ptr, w_ptr, b_ptr, stats_ptr, G, Cg, S, C_v, span, L: gl.constexpr,
                         BR: gl.constexpr, BC: gl.constexpr, HAS_W: gl.constexpr, HAS_B: gl.constexpr):
    """channels-last: y for (slice k, column block, sample b), launched in reverse slice order."""
    dtype: gl.constexpr = x_ptr.dtype.element_ty
    VEC: gl.constexpr = 128 // dtype.primitive_bitwidth
    k = gl.num_programs(0) - 1 - gl.program_id(0)
    cb = gl.program_id(1)
    b = gl.num_programs(2) - 1 - gl.program_id(2)
    C = C_v * VEC
    rows = gl.arange(0, BR, layout=gl.SliceLayout(1, L))
    cols = cb * BC + gl.arange(0, BC, layout=gl.SliceLayout(0, L))
    cm = cols < C
    gidx = (b * G + cols // Cg) * 2
    mean = gl.load(stats_ptr + gidx, mask=cm, other=0.0)
    a = gl.load(stats_ptr + gidx + 1, mask=cm, other=0.0)
    if HAS_W:
        a = a * gl.load(w_ptr + cols, mask=cm, other=0.0).to(gl.float32)
    bb = -mean * a
    if HAS_B:
        bb = bb + gl.load(b_ptr + cols, mask=cm, other=0.0).to(gl.float32)
    a2 = gl.expand_dims(a, 0)
    b2 = gl.expand_dims(bb, 0)
    cmask = gl.expand_dims(cm, 0)
    base = (b * S).to(gl.int64) * C
    lo = k * span
    hi = lo + span
    for r0 in range(lo, gl.minimum(hi, S), BR):
        r = r0 + rows
        offs = gl.expand_dims(r * C, 1) + gl.expand_dims(cols, 0)
        m = gl.expand_dims((r < hi) & (r < S), 1) & cmask
        x = gl.load(x_ptr + base + offs, mask=m, other=0.0).to(gl.float32)
        gl.store(y_ptr + base + offs, (x * a2 + b2).to(dtype), mask=m)


def _pow2_at_most(n: int) -> int:
    return 1 << (max(1, n).bit_length() - 1)


@dataclass(frozen=True)
class SplitPlan:
    """How gluon-split cuts a GroupNorm / InstanceNorm: K slices per group (NCHW: of the group's
    contiguous Cg*S row; channels-last: of the sample's S spatial rows, per column block of BC
    channels), each walked in [tile_rows, VEC] (NCHW) or [tile_rows, BC] (channels-last) register
    tiles; and the finalize kernel's [GB, CP] group tile."""
    layout: str
    dtype: str
    K: int
    span: int  # elements (NCHW) or spatial rows (channels-last) per slice
    tile_rows: int
    col_block: int  # channels-last: BC; NCHW: VEC
    col_blocks: int  # channels-last: cdiv(C, BC); NCHW: 1
    num_warps: int
    fin_groups: int  # GB: groups per finalize CTA
    fin_cols: int  # NCB: their columns, a power of 2 >= GB * columns per group
    fin_k: int  # KB: slices summed per step
    ctas: int  # stats / apply CTAs

    @classmethod
    def make(cls, layout: str, B: int, C: int, S: int, G: int, dtype: str, slices: int | None = None,
             sms: int = H200_SMS) -> "SplitPlan":
        v = vec(dtype)
        e = ITEMSIZE[dtype]
        nw = SPLIT_WARPS
        tile = SPLIT_TILE_BYTES // e  # elements per register tile
        Cg = C // G
        if layout == "channels_last":
            bc = min(SPLIT_MAX_COLS, _pow2_at_most(C)) if C >= v else v
            while bc > v and cdiv(C, bc) * bc - C > 0.125 * cdiv(C, bc) * bc:  # <= 12.5% masked columns
                bc //= 2
            bc = max(bc, v)
            tc = min(32, bc // v)  # threads along the columns
            br = max(tile // bc, 32 // tc * nw)
            length, unit, outer = S, br, B * cdiv(C, bc)
            col_blocks, cpg, ncol = cdiv(C, bc), Cg, C
        else:
            br = tile // v  # vectors per tile
            bc = v
            length, unit, outer = Cg * S, tile, B * G
            col_blocks, cpg, ncol = 1, 1, G
        max_k = cdiv(length, unit)
        k = slices if slices is not None else max(1, min(max_k, round(SPLIT_CTAS_PER_SM * sms / outer)))
        k = max(1, min(k, max_k))
        span = cdiv(cdiv(length, k), unit) * unit
        k = cdiv(length, span)
        # finalize: NCB columns of GB whole groups x KB slices per step (a FIN_TILE-element tile); fewer
        # columns per CTA until the grid has ~2 CTAs per SM, so many slices (K = 256 at B = 1, C = 512
        # channels-last) are summed by many CTAs at once instead of a long chain of dependent steps
        # in two (the first finalize took 2 CTAs x 32 steps: ~4x the stats kernel, run 20261201T2041Z)
        cpg2 = 1 << (cpg - 1).bit_length()
        ncb = max(cpg2, min(FIN_COLS, 1 << (cpg * G - 1).bit_length()))
        while ncb > cpg2 and ncb > 8 and B * cdiv(G, max(1, ncb // cpg)) < 2 * sms:
            ncb //= 2
        gb = max(1, min(ncb // cpg, G))
        ncb = max(8, min(ncb, 1 << (gb * cpg - 1).bit_length()))
        return cls(layout=layout, dtype=dtype, K=k, span=span, tile_rows=br, col_block=bc, col_blocks=col_blocks,
                   num_warps=nw, fin_groups=gb, fin_cols=ncb, fin_k=max(1, min(FIN_TILE // ncb, 1 << (k - 1).bit_length())),
                   ctas=k * outer)

    def tile_layout(self):
        v = vec(self.dtype)
        if self.layout == "channels_last":
            tc = min(32, self.col_block // v)
            return gl.BlockedLayout([1, v], [32 // tc, tc], [self.num_warps, 1], [1, 0])
        return gl.BlockedLayout([1, v], [32, 1], [self.num_warps, 1], [1, 0])

    def fin_layout(self):
        tc = min(32, self.fin_cols)
        wc = max(1, min(SPLIT_WARPS, self.fin_cols // tc))
        return gl.BlockedLayout([1, 1], [32 // tc, tc], [SPLIT_WARPS // wc, wc], [1, 0])


def check_split(x, num_groups, weight, bias) -> SplitPlan:
    B, C = x.shape[0], x.shape[1]
    S = x.numel() // max(1, B * C)
    dt = dtype_name(x)
    e = ITEMSIZE[dt]
    layout = group_layout_of(x)
    inner, what = (C, "C (channels-last rows are C wide)") if layout == "channels_last" else \
        (S, "prod(spatial) (a 16-byte vector must not straddle two channels)")
    if (inner * e) % 16:
        raise ValueError(f"variant 'gluon-split' needs {what} * itemsize to be a multiple of 16 bytes: "
                         f"{inner} x {e} B = {inner * e} B; use variant='torch'")
    for name, t in (("x", x), ("weight", weight), ("bias", bias)):
        if t is not None and t.data_ptr() % 16:
            raise ValueError(f"{name}'s data pointer must be 16-byte aligned for 128-bit accesses (got address % 16 "
                             f"= {t.data_ptr() % 16})")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and t.stride(0) != 1:
            raise ValueError(f"{name} must be contiguous (stride 1)")
    if x.numel() >= 2 ** 31:
        raise ValueError(f"variant 'gluon-split' indexes a sample with 32-bit offsets: x has {x.numel()} elements "
                         f"(limit 2**31 - 1)")
    return SplitPlan.make(layout, B, C, S, num_groups, dt, sms=_sms(x))


def _sms(x) -> int:
    return num_sms(x.device) if x.is_cuda else H200_SMS


def _split_launches(plan: SplitPlan, B: int, C: int, S: int, G: int, has_w: bool, has_b: bool):
    """[(kernel, grid, {arg: value or type}, constexprs)] for the three launches: what launch_split
    runs and what the CPU codegen compiles (tensors as their compile_sm90 type strings)."""
    v = vec(plan.dtype)
    ptr = f"*{short_dtype(plan.dtype)}"
    f32 = "*fp32"
    L = plan.tile_layout()
    cl = plan.layout == "channels_last"
    Cg = C // G
    if cl:
        ncol, cpg, npc = C, Cg, S
        stats = (gn_cols_stats_kernel, (plan.K, plan.col_blocks, B),
                 {"x_ptr": ptr, "shift_ptr": f32, "s1_ptr": f32, "s2_ptr": f32, "S": S, "C_v": C // v, "K": plan.K,
                  "span": plan.span, "N0": min(S, plan.tile_rows)}, dict(L=L, BR=plan.tile_rows, BC=plan.col_block))
        apply = (gn_cols_apply_kernel, (plan.K, plan.col_blocks, B),
                 {"x_ptr": ptr, "y_ptr": ptr, "w_ptr": ptr if has_w else None, "b_ptr": ptr if has_b else None,
                  "stats_ptr": f32, "G": G, "Cg": Cg, "S": S, "C_v": C // v, "span": plan.span},
                 dict(L=L, BR=plan.tile_rows, BC=plan.col_block, HAS_W=has_w, HAS_B=has_b))
    else:
        ncol, cpg, npc = G, 1, Cg * S
        stats = (gn_rows_stats_kernel, (plan.K, B * G),
                 {"x_ptr": ptr, "shift_ptr": f32, "s1_ptr": f32, "s2_ptr": f32, "G": G, "Lg_v": Cg * S // v,
                  "span_v": plan.span // v, "K": plan.K, "N0": min(Cg * S, plan.tile_rows * v)},
                 dict(L=L, NV=plan.tile_rows))
        apply = (gn_rows_apply_kernel, (plan.K, B * G),
                 {"x_ptr": ptr, "y_ptr": ptr, "w_ptr": ptr if has_w else None, "b_ptr": ptr if has_b else None,
                  "stats_ptr": f32, "G": G, "Cg": Cg, "S_v": S // v, "Lg_v": Cg * S // v,
                  "span_v": plan.span // v}, dict(L=L, NV=plan.tile_rows, HAS_W=has_w, HAS_B=has_b))
    fin = (gn_split_finalize_kernel, (cdiv(G, plan.fin_groups), B),
           {"shift_ptr": f32, "s1_ptr": f32, "s2_ptr": f32, "stats_ptr": f32, "G": G, "K": plan.K, "NCOL": ncol,
            "CPG": cpg, "NPC": npc, "GB": plan.fin_groups, "eps": "fp32"},
           dict(LF=plan.fin_layout(), KB=plan.fin_k, NCB=plan.fin_cols,
                GBP=1 << (plan.fin_groups - 1).bit_length(), ONE_COL=cpg == 1))
    return [stats, fin, apply], ncol


def launch_split(x, num_groups, weight, bias, eps: float, out=None, config: SplitPlan | None = None):
    import torch
    plan = check_split(x, num_groups, weight, bias)
    plan = config or plan
    B, C = x.shape[0], x.shape[1]
    S = x.numel() // (B * C)
    G = num_groups
    y = out_like(x, out)
    if x.numel() == 0:
        return y
    launches, ncol = _split_launches(plan, B, C, S, G, weight is not None, bias is not None)
    # one fp32 workspace: s1, s2 [B, K, NCOL], shifts [B, NCOL], (mean, rstd) [B, G]
    n_part = B * plan.K * ncol
    ws = torch.empty(2 * n_part + B * ncol + 2 * B * G, dtype=torch.float32, device=x.device)
    s1, s2 = ws[:n_part], ws[n_part:2 * n_part]
    shift = ws[2 * n_part:2 * n_part + B * ncol]
    stats = ws[2 * n_part + B * ncol:]
    tensors = {"x_ptr": x, "y_ptr": y, "w_ptr": weight, "b_ptr": bias, "shift_ptr": shift, "s1_ptr": s1,
               "s2_ptr": s2, "stats_ptr": stats, "eps": eps}
    for kernel, grid, args, ce in launches:
        kernel[grid](**{n: tensors.get(n, args[n]) for n in args}, **ce, num_warps=plan.num_warps)
    return y


def split_codegen_specs(plan: SplitPlan, B: int, C: int, S: int, G: int, has_w: bool = True,
                        has_b: bool = True) -> list[dict]:
    """compile_sm90 arguments of the three launches launch_split makes (stats, finalize, apply)."""
    launches, _ = _split_launches(plan, B, C, S, G, has_w, has_b)
    return [kernel_spec(k, args, ce, num_warps=plan.num_warps) for k, _, args, ce in launches]


SPLIT_KNOBS = {"slices": (1, 2, 4, 8, 16, 32)}


def configure_split(shape: dict, dtype: str, overrides: dict) -> SplitPlan:
    from ..specs.group import group_shape
    C, S, G, layout = _group_dims(shape)
    B = group_shape(shape)[0]
    return SplitPlan.make(layout, B, C, S, G, dtype, slices=overrides.get("slices"))


def codegen_split(shape: dict, dtype: str, config: SplitPlan | None = None):
    """The stats kernel (the reduction this variant is about); split_codegen_specs gives all three."""
    from ..specs.group import group_shape
    C, S, G, _ = _group_dims(shape)
    B = group_shape(shape)[0]
    return split_codegen_specs(config or configure_split(shape, dtype, {}), B, C, S, G)[0]


def _register_split():
    from .. import specs
    from ..registry import register
    for spec in specs.family("group_norm"):
        def fn(*inputs, eps, out=None, config=None, _spec=spec):
            a = _spec.named(inputs)
            return launch_split(a["x"], a.get("num_groups", a["x"].shape[1]), a["weight"], a["bias"], eps, out=out,
                                config=config)

        def check(*inputs, _spec=spec):
            _spec.validate(*inputs, **_spec.scalars)
            a = _spec.named(inputs)
            x, G = a["x"], a.get("num_groups", a["x"].shape[1])
            plan = check_split(x, G, a["weight"], a["bias"])
            if plan.layout == "nchw" and x.shape[0] * G > MAX_GRID_Y:
                raise ValueError(f"variant 'gluon-split' launches one CTA row per (sample, group) on grid axis y: "
                                 f"B * groups = {x.shape[0]} x {G} = {x.shape[0] * G} exceeds CUDA's {MAX_GRID_Y}; "
                                 "use variant='gluon-chunked' or 'torch'")

        fn.__name__ = fn.__qualname__ = f"{spec.name}_gluon_split"
        register(spec.name, "gluon-split", pattern="chunked", needs_hopper=True, supports_out=True, check=check,
                 configure=configure_split, codegen=codegen_split, knobs=SPLIT_KNOBS,
                 roots=(launch_split, check_split, SplitPlan, _split_launches, gn_rows_stats_kernel,
                        gn_cols_stats_kernel, gn_split_finalize_kernel, gn_rows_apply_kernel, gn_cols_apply_kernel),
                 description="a group split across CTAs: per-slice shifted sums, a finalize merge (Chan), then "
                             "y = x * a + b' per slice; NCHW and channels-last, 128-bit register tiles")(fn)


_register_split()
