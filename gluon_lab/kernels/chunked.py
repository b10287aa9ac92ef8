"""Pattern 2 — chunked non-power-of-2 reductions (variant "gluon-chunked").

STATUS (2026-11-29): compiled and census-checked for sm_90 on the CPU only; not yet run on a GPU.
Not in variant="auto"'s preference list until tests/test_chunked_gpu.py has passed on the H200.

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

