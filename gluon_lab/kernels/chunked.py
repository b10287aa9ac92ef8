"""Pattern 2 — chunked non-power-of-2 reductions (variant "gluon-chunked").

STATUS (2026-11-29): run on the H200 (tests/test_chunked_gpu.py, test_group_norm_gpu.py; records in
results/h200/02-chunked-reductions.jsonl, notebook 02). Not in variant="auto"'s fallback list: the
records make "auto" pick it where it measured fastest.

Gluon/Triton register tiles are powers of two; real hidden sizes are not (2880, 5120, 14336...).
Padding the whole row to the next power of two (what a one-row Triton kernel does: BLOCK =
next_power_of_2(N)) wastes up to half the lanes. Here the row is loaded as NUM_CHUNKS = cdiv(N, CHUNK)
power-of-2 TMA boxes of [1, CHUNK] into a shared row buffer, all on one mbarrier;
the last box runs past the row end and TMA zero-fills it (bounds are per dimension of the
descriptor, so it never reads the next row). Both passes walk the chunks from shared memory with
the shared norm_math helpers; MASK_TAIL keeps the zero-filled lanes out of LayerNorm's centred
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
from .norm_math import OP_CODES

SMEM_LIMIT = 232448
SMEM_RESERVE = 2048
# Cache the row while it takes <= 100 KB (two CTAs per SM, as gluon-tma's heuristic); longer rows
# stream. Where exactly streaming starts to pay is for the H200 sweep of issue #4 to say.
CACHED_SMEM_LIMIT = 100 * 1024
STREAM_STAGES = 4  # ring slots in flight: 3 chunks (12 KB) ahead of the one being reduced
ITEMSIZE = {"bfloat16": 2, "float16": 2, "float32": 4}
PLAN_KNOBS = ("num_warps", "streaming", "stages", "rows")  # what a sweep may override


@gluon.jit(do_not_specialize=["M", "eps"])
def chunked_norm_kernel(x_desc, r_desc, y_ptr, s_ptr, w_ptr, b_ptr, M, y_stride_v, s_stride_v, eps, N_v,
                        OP: gl.constexpr, NUM_CHUNKS: gl.constexpr, num_warps: gl.constexpr):
    """R rows per program (R = the box's first dim). x_desc / r_desc: block [R, CHUNK] over the
    (M, N) rows. N is a runtime value (N_v = N / VEC): one compile serves every N with the same
    NUM_CHUNKS."""
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
    # Full box bytes, the zero-filled part past column N (and rows past M) included: TMA counts
    # them as transferred.
    mbarrier.expect(bar, NUM_CHUNKS * x_desc.block_type.nbytes * (2 if OP == 3 else 1))
    for c in gl.static_range(NUM_CHUNKS):
        tma.async_copy_global_to_shared(x_desc, [row0, c * CHUNK], bar, xbufs.index(c))
    if OP == 3:
        rbufs = gl.allocate_shared_memory(dtype, [NUM_CHUNKS, R, CHUNK], r_desc.layout)
        for c in gl.static_range(NUM_CHUNKS):
            tma.async_copy_global_to_shared(r_desc, [row0, c * CHUNK], bar, rbufs.index(c))

    rows = row0 + gl.arange(0, R, layout=gl.SliceLayout(1, L))
    row_ok = gl.expand_dims(rows < M, 1)
    cols0 = gl.arange(0, CHUNK, layout=gl.SliceLayout(0, L))
    y_row = gl.expand_dims(rows.to(gl.int64) * y_stride, 1)
    mbarrier.wait(bar, 0)
    mbarrier.invalidate(bar)

    if OP == 3:  # s = x + residual (input dtype), written once, then normalized from smem
        s_row = gl.expand_dims(rows.to(gl.int64) * s_stride, 1)
        for c in gl.static_range(NUM_CHUNKS):
            cols = c * CHUNK + cols0
            rs = rbufs.index(c)
            s = xbufs.index(c).load(L) + rs.load(L)
            rs.store(s)
            gl.store(s_ptr + s_row + gl.expand_dims(cols, 0), s, mask=row_ok & gl.expand_dims(cols < N, 0))
        src = rbufs
    else:
        src = xbufs

    shift, scale = norm_math.chunks_row_stats(src, N, eps, OP, NUM_CHUNKS, L)
    for c in gl.static_range(NUM_CHUNKS):
        cols = c * CHUNK + cols0
        x = src.index(c).load(L).to(gl.float32)
        y = norm_math.normalize_chunk_global_params(x, shift, scale, w_ptr, b_ptr, cols, N, OP, True, L).to(dtype)
        gl.store(y_ptr + y_row + gl.expand_dims(cols, 0), y, mask=row_ok & gl.expand_dims(cols < N, 0))


@gluon.jit
def _issue_chunk(x_desc, r_desc, bufs, rbufs, bars, k, row, NUM_CHUNKS, pred, S: gl.constexpr, OP: gl.constexpr):
    """Load the k-th chunk of the two-pass sequence (chunk k mod NUM_CHUNKS) into ring slot k mod S."""
    CHUNK: gl.constexpr = x_desc.block_type.shape[1]
    slot = k % S
    c = k % NUM_CHUNKS
    bar = bars.index(slot)
    mbarrier.expect(bar, x_desc.block_type.nbytes * (2 if OP == 3 else 1), pred=pred)
    tma.async_copy_global_to_shared(x_desc, [row, c * CHUNK], bar, bufs.index(slot), pred=pred)
    if OP == 3:
        tma.async_copy_global_to_shared(r_desc, [row, c * CHUNK], bar, rbufs.index(slot), pred=pred)


@gluon.jit(do_not_specialize=["M", "eps"])
def streaming_norm_kernel(x_desc, r_desc, y_ptr, s_ptr, w_ptr, b_ptr, M, y_stride_v, s_stride_v, eps, N_v,
                          OP: gl.constexpr, S: gl.constexpr, num_warps: gl.constexpr):
    """Rows too long for shared memory: a ring of S [1, CHUNK] slots streams the row twice (pass 1:
    statistics, pass 2: normalize + store). The second read comes from L2/HBM: 2x the DRAM traffic
    of the cached path in the worst case. add_rms_norm reloads x and residual in pass 2 and
    recomputes s (no read-back of this CTA's own global writes through the async proxy)."""
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
    rbufs = gl.allocate_shared_memory(dtype, [S, 1, CHUNK], r_desc.layout)
    bars = gl.allocate_shared_memory(gl.int64, [S, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(S):
        mbarrier.init(bars.index(i), count=1)
    for p in gl.static_range(S - 1):  # prologue: S-1 chunks in flight
        _issue_chunk(x_desc, r_desc, bufs, rbufs, bars, p, row, NUM_CHUNKS, p < TOTAL, S, OP)

    cols0 = gl.arange(0, CHUNK, layout=gl.SliceLayout(0, L))
    zero = gl.sum(gl.zeros([1, CHUNK], gl.float32, L), axis=1)
    acc = zero  # sum of squares (rms, l2, add+rms) or running count (LayerNorm)
    mean = zero
    m2 = zero
    K = zero
    if OP == 1:
        # LayerNorm works on x - K, K = the mean of chunk 0 (slot 0's first fill, waited for here and
        # again, already complete, in the loop). Merging chunk means into a running mean of the raw
        # data rounds at |mean| once per chunk: on the H200, x = 100 + N(0, 1) in fp32 at
        # N = 131080 (128 chunks) drifted the mean by ~2e-4. Shifted, the running mean is O(std).
        mbarrier.wait(bars.index(0), 0)
        K = norm_math.chunk_moments(bufs.index(0).load(L).to(gl.float32), cols0, N)[1]
    # pass 1: statistics
    for k in range(NUM_CHUNKS):
        # refill the slot chunk k-1 used (its reads are done; the compiler's CTA barrier and this
        # fence order them before the TMA write)
        fence_async_shared()
        _issue_chunk(x_desc, r_desc, bufs, rbufs, bars, k + S - 1, row, NUM_CHUNKS, k + S - 1 < TOTAL, S, OP)
        slot = k % S
        mbarrier.wait(bars.index(slot), (k // S) & 1)
        xs = bufs.index(slot)
        if OP == 3:
            x = (xs.load(L) + rbufs.index(slot).load(L)).to(gl.float32)
        else:
            x = xs.load(L).to(gl.float32)
        if OP == 1:
            # moments of (x - K) - (running mean): O(std) values, no cancellation (see chan_merge)
            n_b, delta, m2_b = norm_math.chunk_moments((x - gl.expand_dims(K, 1)) - gl.expand_dims(mean, 1),
                                                         k * CHUNK + cols0, N)
            acc, mean, m2 = norm_math.chan_merge(acc, mean, m2, n_b, delta, m2_b)
        else:
            acc += gl.sum(x * x, axis=1)  # zero-filled tail adds nothing
    if OP == 1:
        shift = K + mean
        scale = gl.rsqrt(m2 / N + eps)
    elif OP == 2:
        shift = zero
        scale = norm_math.l2_inv_norm(acc, eps)
    else:
        shift = zero
        scale = norm_math.rms_rstd(acc, N, eps)

    # pass 2: normalize and store
    y_row = row.to(gl.int64) * y_stride
    s_row = row.to(gl.int64) * s_stride
    for k in range(NUM_CHUNKS, TOTAL):
        fence_async_shared()
        _issue_chunk(x_desc, r_desc, bufs, rbufs, bars, k + S - 1, row, NUM_CHUNKS, k + S - 1 < TOTAL, S, OP)
        slot = k % S
        mbarrier.wait(bars.index(slot), (k // S) & 1)
        cols = (k - NUM_CHUNKS) * CHUNK + cols0
        cmask = gl.expand_dims(cols < N, 0)
        if OP == 3:
            sv = bufs.index(slot).load(L) + rbufs.index(slot).load(L)
            gl.store(s_ptr + s_row + gl.expand_dims(cols, 0), sv, mask=cmask)
            x = sv.to(gl.float32)
        else:
            x = bufs.index(slot).load(L).to(gl.float32)
        y = norm_math.normalize_chunk_global_params(x, shift, scale, w_ptr, b_ptr, cols, N, OP, True, L).to(dtype)
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
    smem_bytes: int  # cached: num_chunks * rows chunks (x2 for add_rms_norm) + reserve; streaming: the ring
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

    @classmethod
    def for_row(cls, op: str, N: int, dtype: str, num_warps: int | None = None, streaming: bool | None = None,
                stages: int | None = None, rows: int | None = None) -> "ChunkPlan":
        """The plan the heuristic picks; num_warps (the CHUNK), rows, streaming and stages override
        it (the CHUNK sweep and the cached-vs-streaming study of notebook 02)."""
        e = ITEMSIZE[dtype]
        vec = 16 // e
        n_in = 2 if op == "add_rms_norm" else 1
        if num_warps is None:
            # CHUNK heuristic: the largest register tile (up to 8 warps: 8*32*8 = 2048 bf16 / 1024 fp32
            # elements) whose padding of the last chunk wastes at most 12.5% of the padded row, so
            # 5120 bf16 -> 4 warps x 1024 = 5 chunks, no waste (vs 8192 lanes, 37.5% idle, for
            # next_power_of_2); smaller tiles only when no larger one keeps waste that low.
            num_warps = 1
            for nw in (8, 4, 2, 1):
                chunk = vec * 32 * nw
                nc = -(-N // chunk)
                if chunk <= max(N, vec * 32) and (nc * chunk - N) <= 0.125 * nc * chunk:
                    num_warps = nw
                    break
        if rows is None:
            # Rows per CTA: ROWS_HEURISTIC (set from the H200 CHUNK x rows sweep, see below).
            rows = ROWS_HEURISTIC(op, N * e * n_in)
        chunk = vec * 32 * num_warps
        nc = max(1, -(-N // chunk))
        tail = N - (nc - 1) * chunk
        smem = nc * rows * chunk * e * n_in + SMEM_RESERVE
        if (streaming is None and smem <= CACHED_SMEM_LIMIT) or (streaming is False and smem <= SMEM_LIMIT):
            return cls(N=N, dtype=dtype, num_warps=num_warps, chunk=chunk, num_chunks=nc, tail=tail, smem_bytes=smem,
                       fits=True, rows=rows)
        if streaming is False:
            raise ValueError(f"a cached {dtype} row of N={N} needs {smem} bytes of shared memory (limit {SMEM_LIMIT}); "
                             "it can only stream")
        # Streaming: 8-warp chunks (2048 bf16 / 1024 fp32 = 4 KB) through STREAM_STAGES slots, one row
        # per CTA; the last chunk's padding is at most one chunk of a row this long (> 100 KB).
        nw = 8 if streaming is None else num_warps
        chunk = vec * 32 * nw
        nc = -(-N // chunk)
        st = stages or STREAM_STAGES
        return cls(N=N, dtype=dtype, num_warps=nw, chunk=chunk, num_chunks=nc, tail=N - (nc - 1) * chunk,
                   smem_bytes=st * chunk * e * n_in + SMEM_RESERVE, fits=True, streaming=True, stages=st)


def ROWS_HEURISTIC(op: str, row_bytes: int) -> int:
    """Two rows per CTA while the cached inputs of a row take <= 8 KB (N <= 4096 bf16): short rows
    leave a CTA little to overlap, and pattern 1's sweep found R = 2 best at N = 1024 / 4096."""
    return 2 if row_bytes <= 8192 else 1


def row_layout(dtype: str):
    return gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=ITEMSIZE[dtype] * 8, rank=2)


def _dt(t) -> str:
    return str(t.dtype).replace("torch.", "")


def check(op: str, x, *rest) -> ChunkPlan:
    dt = _dt(x)
    N = x.shape[-1]
    e = ITEMSIZE[dt]
    if (N * e) % 16:
        raise ValueError(f"variant 'gluon-chunked' needs N * itemsize to be a multiple of 16 bytes (TMA row stride "
                         f"and box rule): N={N} {dt} is {N * e} bytes; use variant='torch' or 'triton'")
    plan = ChunkPlan.for_row(op, N, dt)
    rowio.check_tma_operands(op, (x, ) + rest, N)
    return plan


def launch(op: str, x, residual, weight, bias, eps: float, out=None, config: ChunkPlan | None = None):
    import triton
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    plan = check(op, x, *((residual, weight) if op == "add_rms_norm" else (weight, bias)))
    if config is not None:
        if (config.N, config.dtype) != (x.shape[-1], _dt(x)):
            raise ValueError(f"config is a ChunkPlan for N={config.N} {config.dtype}; x has N={x.shape[-1]} {_dt(x)}")
        plan = config
    N = x.shape[-1]
    dt = _dt(x)
    x2 = x.view(-1, N)
    M = x2.shape[0]
    y, s, y2, s2 = rowio.outputs(op, x, out)
    lay = row_layout(dt)
    box = [1 if plan.streaming else plan.rows, plan.chunk]
    x_desc = TensorDescriptor.from_tensor(x2, box, lay)
    r_desc = TensorDescriptor.from_tensor(residual.view(-1, N), box, lay) if op == "add_rms_norm" else x_desc
    w = weight if weight is not None else x2
    b = bias if bias is not None else w
    vec = 16 // ITEMSIZE[dt]
    args = (x_desc, r_desc, y2, s2, w, b, M, y2.stride(0) // vec, s2.stride(0) // vec, eps, N // vec)
    if plan.streaming:
        streaming_norm_kernel[(M, )](*args, OP=OP_CODES[op], S=plan.stages, num_warps=plan.num_warps)
    else:
        chunked_norm_kernel[(triton.cdiv(M, plan.rows), )](*args, OP=OP_CODES[op], NUM_CHUNKS=plan.num_chunks, num_warps=plan.num_warps)
    return (y, s) if op == "add_rms_norm" else y


def codegen_spec(op: str, N: int, dtype: str, plan: ChunkPlan | None = None):
    plan = plan or ChunkPlan.for_row(op, N, dtype)
    t = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}[dtype]
    desc = f"tensordesc<{t}[{1 if plan.streaming else plan.rows}, {plan.chunk}],{row_layout(dtype)!r}>"
    third = "S" if plan.streaming else "NUM_CHUNKS"
    sig = {"x_desc": desc, "r_desc": desc, "y_ptr": f"*{t}", "s_ptr": f"*{t}", "w_ptr": f"*{t}", "b_ptr": f"*{t}",
           "M": "i32", "y_stride_v": "i32", "s_stride_v": "i32", "eps": "fp32", "N_v": "i32", "OP": "constexpr",
           third: "constexpr", "num_warps": "constexpr"}
    # what the runtime marks: 16-byte aligned pointers, ints divisible by 16 (lengths are in vectors)
    nv = N // (16 // ITEMSIZE[dtype])
    aligned = ["y_ptr", "s_ptr", "w_ptr", "b_ptr"] + (["y_stride_v", "s_stride_v", "N_v"] if nv % 16 == 0 else [])
    return dict(fn=streaming_norm_kernel if plan.streaming else chunked_norm_kernel, signature=sig,
                constexprs={"OP": OP_CODES[op], third: plan.stages if plan.streaming else plan.num_chunks,
                            "num_warps": plan.num_warps},
                aligned=aligned, num_warps=plan.num_warps)



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
        vec = 16 // e
        Cg = C // G
        if layout == "channels_last":
            # columns: the group's channels padded to a power of two, at least one 16-byte vector
            bc = max(vec, 1 << (Cg - 1).bit_length())
            tc = min(32, bc // vec)
            nw = 4
            # rows: boxes of ~4 KB (at most 256 rows, TMA's per-dimension limit), at least one row
            # per thread row of the layout so no lane is replicated
            br = max(32 // tc * nw, min(256, 4096 // (bc * e)))
            rows, cols = S, Cg
            threads, warps = (32 // tc, tc), (nw, 1)
        else:
            # one row (channel) per box; CHUNK along S by the row heuristic (<= 12.5% padding)
            p = ChunkPlan.for_row("layer_norm", S, dtype, streaming=False, rows=1) if S * e <= SMEM_LIMIT // 2 \
                else ChunkPlan.for_row("layer_norm", S, dtype, streaming=True)
            nw = p.num_warps
            br, bc = 1, p.chunk
            rows, cols = Cg, S
            threads, warps = (1, 32), (1, nw)
        T = -(-rows // br) * -(-cols // bc)
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
        vec = 16 // ITEMSIZE[self.dtype]
        return gl.BlockedLayout([1, vec], list(self.threads), list(self.warps), [1, 0])


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
    dt = _dt(x)
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


def launch_group(x, num_groups, weight, bias, eps: float, out=None, config: GroupPlan | None = None):
    import torch
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    plan = config or check_group(x, num_groups, weight, bias)
    B, C = x.shape[0], x.shape[1]
    S = x.numel() // (B * C)
    vec = 16 // ITEMSIZE[plan.dtype]
    y = torch.empty_like(x) if out is None else out
    if y.shape != x.shape or y.stride() != x.stride() or y.dtype != x.dtype:
        raise ValueError(f"out must have x's shape, dtype and strides {tuple(x.stride())}")
    if plan.layout == "channels_last":
        x2 = x.permute(0, *range(2, x.dim()), 1).reshape(B * S, C)  # a view: channels innermost
    else:
        x2 = x.view(B * C, S)
    x_desc = TensorDescriptor.from_tensor(x2, [plan.box_rows, plan.box_cols], row_layout(plan.dtype))
    w = weight if weight is not None else x2
    b = bias if bias is not None else x2
    group_norm_kernel[(B * num_groups, )](x_desc, y, w, b, num_groups, C // vec if plan.layout == "channels_last" else C,
                                          S // vec if plan.layout == "nchw" else S, C // num_groups, eps,
                                          L=plan.reg_layout(), CL=plan.layout == "channels_last",
                                          HAS_W=weight is not None, HAS_B=bias is not None, CACHED=plan.cached,
                                          SLOTS=plan.slots, num_warps=plan.num_warps)
    return y
