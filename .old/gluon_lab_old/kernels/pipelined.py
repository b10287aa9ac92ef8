"""Pattern 3 — multi-buffer pipelining for the norms (variant "gluon-pipelined").

Measured on the H200 (notebook 03; tests/test_pipelined_gpu.py). Correct everywhere, but 3-10%
below the one-row-per-CTA kernels at large M: the every-CTA timeline shows the static round-robin
grid finishing with a tail (slowest CTA ~7% after the median), which the hardware scheduler avoids
for one-row grids. schedule="dynamic" (grab_block: an atomic row-block counter) removes most of that tail
(03 schedule timeline) but costs this single-partition kernel an exposed atomic per block, so it stays
static here; gluon-ws's producer warp owns the counter and takes it (warp_specialized.py).

One-row-per-CTA kernels (gluon-tma, gluon-chunked) expose the TMA latency of every row before any
compute: the SM only overlaps it across CTAs. Here a persistent grid (about CTAS_PER_SM CTAs per SM)
walks row blocks p, p + grid, p + 2*grid, ... through a ring of NUM_STAGES shared-memory slots, one
mbarrier per slot with phase tracking (slot = i % NUM_STAGES, phase = (i // NUM_STAGES) & 1): the
copy of block i + NUM_STAGES - 1 is in flight while block i is reduced and normalized. Each slot
holds a block of R rows as NUM_CHUNKS power-of-2 [R, CHUNK] boxes (pattern 2's chunking: any N
with N * itemsize % 16 == 0, zero-filled tail). The weight (and bias) are TMA-loaded into shared
memory ONCE per CTA. Outputs leave by 128-bit stores. The per-block work (norm_block) is shared
with pattern 4's consumer partition.
"""
from __future__ import annotations

import dataclasses
import types
from dataclasses import dataclass

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma

from . import norm_math, rowio
from .chunked import ROWS_HEURISTIC, ChunkPlan, load_chunks
from .hopper import (CTA_SMEM_OVERHEAD, H200_SMS, ITEMSIZE, MAX_WARPS_PER_SM, SM_SMEM, SMEM_LIMIT, SMEM_RESERVE, cdiv,
                     check_row_operands, check_tma_rows, desc_type, descriptor, dtype_name, kernel_spec, num_sms,
                     row_layout, row_outputs, short_dtype, vec)

FEW_BLOCKS_PER_SM = 8
TRACE_CTAS: gl.constexpr = gl.constexpr(1024)  # programs an INSTRUMENT build records: every CTA of the grid
TRACE_ITERS: gl.constexpr = gl.constexpr(64)  # blocks per program recorded


@gluon.jit
def _load_block(x_desc, r_desc, xbufs, rbufs, bars, slot, row0, pred, NUM_CHUNKS: gl.constexpr,
                HAS_RESIDUAL: gl.constexpr):
    """Fill ring slot `slot` with rows row0 .. row0+R-1: NUM_CHUNKS boxes (x2 with a residual), one
    barrier, one expect carrying every box's bytes."""
    load_chunks(x_desc, r_desc, xbufs, rbufs, bars.index(slot), slot * NUM_CHUNKS, row0, 0, NUM_CHUNKS, pred,
                HAS_RESIDUAL)


@gluon.jit
def ring_buffers(x_desc, NUM_CHUNKS: gl.constexpr, NUM_STAGES: gl.constexpr, HAS_W: gl.constexpr,
                 HAS_B: gl.constexpr, HAS_RESIDUAL: gl.constexpr):
    """The ring's shared memory (xbufs, rbufs, wbufs, bbufs): slot s holds chunks s*NUM_CHUNKS ..
    s*NUM_CHUNKS + NUM_CHUNKS - 1 (rank 3 at most) of x (and of the residual); the weight and bias
    chunks once. Buffers the op has no operand for are 1-slot placeholders the compiler drops."""
    R: gl.constexpr = x_desc.block_type.shape[0]
    CHUNK: gl.constexpr = x_desc.block_type.shape[1]
    dtype: gl.constexpr = x_desc.dtype
    xbufs = gl.allocate_shared_memory(dtype, [NUM_STAGES * NUM_CHUNKS, R, CHUNK], x_desc.layout)
    rbufs = gl.allocate_shared_memory(dtype, [NUM_STAGES * NUM_CHUNKS if HAS_RESIDUAL else 1, R, CHUNK], x_desc.layout)
    wbufs = gl.allocate_shared_memory(dtype, [NUM_CHUNKS if HAS_W else 1, 1, CHUNK], x_desc.layout)
    bbufs = gl.allocate_shared_memory(dtype, [NUM_CHUNKS if HAS_B else 1, 1, CHUNK], x_desc.layout)
    return xbufs, rbufs, wbufs, bbufs


@gluon.jit
def _load_params(w_desc, b_desc, wbufs, bbufs, wbar, NUM_CHUNKS: gl.constexpr, HAS_W: gl.constexpr,
                 HAS_B: gl.constexpr):
    """Weight (and bias): once per CTA, on their own barrier (zero-filled past N like x)."""
    if HAS_W:
        CHUNK: gl.constexpr = w_desc.block_type.shape[1]
        mbarrier.expect(wbar, NUM_CHUNKS * w_desc.block_type.nbytes * (2 if HAS_B else 1))
        for c in gl.static_range(NUM_CHUNKS):
            tma.async_copy_global_to_shared(w_desc, [0, c * CHUNK], wbar, wbufs.index(c))
            if HAS_B:
                tma.async_copy_global_to_shared(b_desc, [0, c * CHUNK], wbar, bbufs.index(c))


@gluon.jit
def norm_block(xbufs, rbufs, wbufs, bbufs, base, row0, M, N, y_ptr, y_stride, s_ptr, s_stride, eps, rows0, cols0,
               STATS: gl.constexpr, HAS_W: gl.constexpr, HAS_B: gl.constexpr, HAS_RESIDUAL: gl.constexpr,
               NUM_CHUNKS: gl.constexpr, L: gl.constexpr):
    """One row block that sits in chunks base .. base + NUM_CHUNKS - 1 of the ring (rows row0..):
    s = x + residual (stored, and written over the residual's chunks), the op's statistics (STATS),
    normalize with the weight/bias chunks in shared memory, 128-bit stores. The whole per-block
    work of the pipelined kernel and of the warp-specialized consumer."""
    CHUNK: gl.constexpr = xbufs.shape[2]
    dtype: gl.constexpr = xbufs.dtype
    rows = row0 + rows0
    row_ok = gl.expand_dims(rows < M, 1)
    if HAS_RESIDUAL:  # s = x + residual (input dtype): stored once, normalized from smem
        norm_math.residual_add(xbufs, rbufs, base, s_ptr + gl.expand_dims(rows.to(gl.int64) * s_stride, 1), row_ok,
                               cols0, N, norm_math.slots, CHUNK, NUM_CHUNKS, L, True, True)
        src = rbufs
    else:
        src = xbufs
    shift, scale = STATS.row(src, base, N, eps, norm_math.slots, CHUNK, NUM_CHUNKS, L, True)
    y_row = gl.expand_dims(rows.to(gl.int64) * y_stride, 1)
    for c in gl.static_range(NUM_CHUNKS):
        cols = c * CHUNK + cols0
        x = norm_math.load_chunk(src, base, c, CHUNK, L, norm_math.slots)
        w = gl.zeros([1, CHUNK], gl.float32, L)
        b = gl.zeros([1, CHUNK], gl.float32, L)
        if HAS_W:
            w = wbufs.index(c).load(L).to(gl.float32)
        if HAS_B:
            b = bbufs.index(c).load(L).to(gl.float32)
        y = norm_math.normalize_chunk(x, shift, scale, w, b, HAS_W, HAS_B).to(dtype)
        gl.store(y_ptr + y_row + gl.expand_dims(cols, 0), y, mask=row_ok & gl.expand_dims(cols < N, 0))


@gluon.jit
def globaltimer():
    """The SM's %globaltimer (ns), for the measured timeline of notebook 03 (INSTRUMENT builds only)."""
    return gl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=gl.int64, is_pure=False, pack=1)


@gluon.jit
def grab_block(c_ptr, done, n_blocks, nprog):
    """The dynamic scheduler: this CTA's next row block from the atomic counter at c_ptr (one relaxed
    atomic per call; Triton issues a scalar atomic from one thread and broadcasts it), or n_blocks once
    the blocks are gone. A CTA stops grabbing after its first miss (done), so a launch makes exactly
    n_blocks + nprog grabs: the one that reads n_blocks + nprog - 1 is the last and resets the counter to 0
    for the next launch (stream order: the next launch starts after this one ended)."""
    blk = n_blocks
    if not done:
        g = gl.atomic_add(c_ptr, 1, sem="relaxed")
        if g < n_blocks:
            blk = g
        else:
            done = g >= n_blocks
            if g == n_blocks + nprog - 1:
                gl.atomic_xchg(c_ptr, 0, sem="relaxed")
    return blk, done


@gluon.jit
def _ring_step(xbufs, rbufs, wbufs, bbufs, bars, i, row0, M, N, y_ptr, y_stride, s_ptr, s_stride, eps, rows0, cols0,
               t_ptr, pid, STATS: gl.constexpr, HAS_W: gl.constexpr, HAS_B: gl.constexpr, HAS_RESIDUAL: gl.constexpr,
               NUM_CHUNKS: gl.constexpr, NUM_STAGES: gl.constexpr, INSTRUMENT: gl.constexpr, L: gl.constexpr):
    """This CTA's i-th block (rows row0 ..): wait for its slot, reduce / normalize / store (norm_block),
    the INSTRUMENT stamps."""
    slot = i % NUM_STAGES
    if INSTRUMENT:
        t0 = globaltimer()
    mbarrier.wait(bars.index(slot), (i // NUM_STAGES) & 1)
    if INSTRUMENT:
        t1 = globaltimer()
    norm_block(xbufs, rbufs, wbufs, bbufs, slot * NUM_CHUNKS, row0, M, N, y_ptr, y_stride, s_ptr, s_stride, eps, rows0,
               cols0, STATS, HAS_W, HAS_B, HAS_RESIDUAL, NUM_CHUNKS, L)
    if INSTRUMENT:
        if (pid < TRACE_CTAS) & (i < TRACE_ITERS):
            t2 = globaltimer()
            base_t = (pid * TRACE_ITERS + i) * 3
            gl.store(t_ptr + base_t, t0)
            gl.store(t_ptr + base_t + 1, t1)
            gl.store(t_ptr + base_t + 2, t2)


@gluon.jit(do_not_specialize=["M", "eps"])
def pipelined_norm_kernel(x_desc, r_desc, w_desc, b_desc, y_ptr, s_ptr, M, y_stride_v, s_stride_v, eps, N_v, t_ptr,
                          c_ptr, STATS: gl.constexpr, HAS_W: gl.constexpr, HAS_B: gl.constexpr,
                          HAS_RESIDUAL: gl.constexpr, NUM_CHUNKS: gl.constexpr, NUM_STAGES: gl.constexpr,
                          INSTRUMENT: gl.constexpr, FENCE: gl.constexpr, DYNAMIC: gl.constexpr,
                          num_warps: gl.constexpr):
    """Absent operands are None (r_desc / s_ptr without a residual, w_desc / b_desc without the
    op's weight / bias, t_ptr without INSTRUMENT, c_ptr without DYNAMIC). INSTRUMENT: the first
    TRACE_CTAS programs write, per block i < TRACE_ITERS, three %globaltimer stamps to
    t_ptr[pid, i, :] — before the slot wait, when the data is there, after the stores were issued —
    so the notebook can draw a measured timeline (stall = ready - before). DYNAMIC: the row blocks
    come from an atomic counter (grab_block) instead of the static round-robin pid, pid + grid, ...:
    a CTA that finishes early takes more blocks, so the grid ends together (the static grid's tail)."""
    R: gl.constexpr = x_desc.block_type.shape[0]
    CHUNK: gl.constexpr = x_desc.block_type.shape[1]
    dtype: gl.constexpr = x_desc.dtype
    VEC: gl.constexpr = 128 // dtype.primitive_bitwidth
    gl.static_assert(CHUNK == VEC * 32 * num_warps, "CHUNK must be one register tile")
    # NUM_STAGES = 1 is the no-overlap reference: block i is issued, waited for and computed in turn
    gl.static_assert(NUM_STAGES >= 1, "the ring needs a slot")
    L: gl.constexpr = gl.BlockedLayout([1, VEC], [1, 32], [1, num_warps], [1, 0])
    N = N_v * VEC  # lengths in 16-byte vectors: masked accesses stay 128-bit (see chunked.py)
    y_stride = y_stride_v * VEC
    s_stride = s_stride_v * VEC
    pid = gl.program_id(0)
    nprog = gl.num_programs(0)
    n_blocks = gl.cdiv(M, R)
    n_my = (n_blocks - pid + nprog - 1) // nprog

    xbufs, rbufs, wbufs, bbufs = ring_buffers(x_desc, NUM_CHUNKS, NUM_STAGES, HAS_W, HAS_B, HAS_RESIDUAL)
    bars = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    wbar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    for i in gl.static_range(NUM_STAGES):
        mbarrier.init(bars.index(i), count=1)
    mbarrier.init(wbar, count=1)

    _load_params(w_desc, b_desc, wbufs, bbufs, wbar, NUM_CHUNKS, HAS_W, HAS_B)
    rows0 = gl.arange(0, R, layout=gl.SliceLayout(1, L))
    cols0 = gl.arange(0, CHUNK, layout=gl.SliceLayout(0, L))
    if not DYNAMIC:
        # prologue: NUM_STAGES - 1 blocks in flight (predicated off past this CTA's last block)
        for p in gl.static_range(NUM_STAGES - 1):
            _load_block(x_desc, r_desc, xbufs, rbufs, bars, p, (pid + p * nprog) * R, p < n_my, NUM_CHUNKS,
                        HAS_RESIDUAL)
        if HAS_W:
            mbarrier.wait(wbar, 0)
        for i in range(n_my):
            # refill the slot block i-1 used: its smem reads are done (same warps, program order; the
            # compiler puts a CTA barrier before the TMA issue). A residual op also WROTE s into that
            # slot (generic proxy): a proxy fence must order that before the TMA (async proxy) write.
            # For read-only slots the fence is the FENCE knob: the 03 timeline showed a ~0.8 us gap
            # between a block's last store and the next wait, which a fence.proxy.async behind
            # outstanding global stores would explain.
            j = i + NUM_STAGES - 1
            if FENCE or HAS_RESIDUAL:
                fence_async_shared()
            _load_block(x_desc, r_desc, xbufs, rbufs, bars, j % NUM_STAGES, (pid + j * nprog) * R, j < n_my,
                        NUM_CHUNKS, HAS_RESIDUAL)
            _ring_step(xbufs, rbufs, wbufs, bbufs, bars, i, (pid + i * nprog) * R, M, N, y_ptr, y_stride, s_ptr,
                       s_stride, eps, rows0, cols0, t_ptr, pid, STATS, HAS_W, HAS_B, HAS_RESIDUAL, NUM_CHUNKS,
                       NUM_STAGES, INSTRUMENT, L)
    else:
        # the block of each ring slot in shared memory (every thread writes the broadcast value; a slot is
        # rewritten one block after it was read, with norm_block's CTA barriers in between)
        IL: gl.constexpr = gl.BlockedLayout([1], [32], [num_warps], [0])
        idx = gl.allocate_shared_memory(gl.int32, [NUM_STAGES, 1], gl.SwizzledSharedLayout(1, 1, 1, order=[0]))
        done = pid < 0
        for p in gl.static_range(NUM_STAGES - 1):
            blk, done = grab_block(c_ptr, done, n_blocks, nprog)
            idx.index(p).store(gl.full([1], 0, gl.int32, IL) + blk)
            _load_block(x_desc, r_desc, xbufs, rbufs, bars, p, blk * R, blk < n_blocks, NUM_CHUNKS, HAS_RESIDUAL)
        if HAS_W:
            mbarrier.wait(wbar, 0)
        i = 0
        cur = gl.max(idx.index(0).load(IL), axis=0)
        while cur < n_blocks:
            j = i + NUM_STAGES - 1
            if FENCE or HAS_RESIDUAL:
                fence_async_shared()
            blk, done = grab_block(c_ptr, done, n_blocks, nprog)
            idx.index(j % NUM_STAGES).store(gl.full([1], 0, gl.int32, IL) + blk)
            _load_block(x_desc, r_desc, xbufs, rbufs, bars, j % NUM_STAGES, blk * R, blk < n_blocks, NUM_CHUNKS,
                        HAS_RESIDUAL)
            _ring_step(xbufs, rbufs, wbufs, bbufs, bars, i, cur * R, M, N, y_ptr, y_stride, s_ptr, s_stride, eps,
                       rows0, cols0, t_ptr, pid, STATS, HAS_W, HAS_B, HAS_RESIDUAL, NUM_CHUNKS, NUM_STAGES,
                       INSTRUMENT, L)
            i += 1
            cur = gl.max(idx.index(i % NUM_STAGES).load(IL), axis=0)
    for i in gl.static_range(NUM_STAGES):
        mbarrier.invalidate(bars.index(i))
    mbarrier.invalidate(wbar)


@dataclass(frozen=True)
class PipeConfig:
    """Knobs of gluon-pipelined (QuACK-style: thresholds carry their reasons). Methods take op: an
    OpSpec, its RowNorm or an op name (rowio.resolve)."""
    num_warps: int  # CHUNK = VEC x 32 x num_warps (pattern 2's chunk heuristic)
    rows: int  # rows per ring slot
    num_stages: int  # ring depth
    ctas_per_sm: int  # persistent grid = min(row blocks, ctas_per_sm x SMs)
    fence: bool = True  # proxy fence before each refill also for read-only slots (residual ops: always)
    # row blocks: "static" round-robin (pid, pid + grid, ...) or "dynamic" (atomic counter). Static here: the 03
    # 'schedule' study (runs 20261201T180134Z, 182307Z) ran dynamic 5-26% slower for rms_norm / layer_norm (layer 32768 x
    # 8192: 2651 vs 3559 GB/s) and mixed for add_rms_norm: in one partition the scalar atomic's broadcast
    # (thread 0, then a CTA barrier) puts its L2 round trip on every block's critical path; gluon-ws's
    # producer warp takes it off the consumers (WsNormConfig.heuristic picks dynamic there).
    schedule: str = "static"

    def smem_bytes(self, op, N: int, dtype: str) -> int:
        row, _ = rowio.resolve(op)
        e = ITEMSIZE[dtype]
        chunk = vec(dtype) * 32 * self.num_warps
        nc = cdiv(N, chunk)
        slot = nc * self.rows * chunk * e * (2 if row.residual else 1)
        params = nc * chunk * e * (row.weight + row.bias)
        idx = 4 * self.num_stages if self.schedule == "dynamic" else 0  # the dynamic schedule's block per slot
        return self.num_stages * slot + params + idx + SMEM_RESERVE

    def fits_sm(self, op, N: int, dtype: str) -> bool:
        """Are ctas_per_sm CTAs resident at once? Shared memory (SM_SMEM per SM, CTA_SMEM_OVERHEAD of
        it reserved per CTA) and warps (MAX_WARPS_PER_SM)."""
        return self.ctas_per_sm * (self.smem_bytes(op, N, dtype) + CTA_SMEM_OVERHEAD) <= SM_SMEM and \
            self.ctas_per_sm * self.num_warps <= MAX_WARPS_PER_SM

    @classmethod
    def heuristic(cls, op, N: int, dtype: str, M: int | None = None, **overrides) -> "PipeConfig":
        row, label = rowio.resolve(op)
        n_in = 2 if row.residual else 1
        # A ring needs >= 2 slots of one row (x and residual for residual ops) next to the weights;
        # rows longer than that (bf16 rms_norm N > ~37K, fp32 add_rms_norm N >= ~9.5K) are refused
        # here and `launch` runs them on pattern 2's streaming kernel, whose ring runs over the
        # chunks of one row instead of over rows.
        try:
            p = ChunkPlan.for_row(row, N, dtype, rows=1, streaming=False)
        except ValueError:
            p = None
        if p is None or cls(p.num_warps, 1, 2, 1).smem_bytes(row, N, dtype) > SMEM_LIMIT:
            raise ValueError(f"variant 'gluon-pipelined' needs >= 2 ring slots of a row in shared memory; N={N} "
                             f"{dtype} {label} rows are too long (launch streams them through gluon-chunked)")
        rows = ROWS_HEURISTIC(N * ITEMSIZE[dtype] * n_in)  # pattern 2's rows per block
        # H200 pipe-sweep (03, run 20261129T181340Z, CTAs/SM 1..6 x stages 2..4 x rows 1..4): with many
        # row blocks per SM, 1 CTA/SM and 3 stages was best or within 2% at every shape (more CTAs
        # did not help); with few blocks (M = 1024: <= 8 per SM) 4 CTAs/SM x 2 stages was best
        # (more blocks in flight across CTAs when each CTA only sees a handful). A 4-warp CTA (N =
        # 5120 bf16: 5 chunks of 1024) alone left the SM underfed (run 20261129T182504Z: rms 16384 x
        # 5120 3423 GB/s at 1 CTA vs 3738 at 2): keep >= 8 warps per SM.
        few = M is not None and cdiv(M, rows) <= FEW_BLOCKS_PER_SM * H200_SMS
        cfg = cls(num_warps=p.num_warps, rows=rows, num_stages=2 if few else 3,
                  ctas_per_sm=4 if few else max(1, 8 // p.num_warps))
        known = {f.name for f in dataclasses.fields(cls)}
        cfg = dataclasses.replace(cfg, **{k: v for k, v in overrides.items() if k in known})
        if "ctas_per_sm" not in overrides:
            while cfg.ctas_per_sm > 1 and not cfg.fits_sm(row, N, dtype):
                cfg = dataclasses.replace(cfg, ctas_per_sm=cfg.ctas_per_sm - 1)
        if "rows" not in overrides:
            while cfg.rows > 1 and cfg.smem_bytes(row, N, dtype) > SMEM_LIMIT:
                cfg = dataclasses.replace(cfg, rows=cfg.rows // 2)
        if "num_stages" not in overrides:
            while cfg.num_stages > 2 and cfg.smem_bytes(row, N, dtype) > SMEM_LIMIT:
                cfg = dataclasses.replace(cfg, num_stages=cfg.num_stages - 1)
        if cfg.smem_bytes(row, N, dtype) > SMEM_LIMIT:
            raise ValueError(f"gluon-pipelined config {cfg} needs {cfg.smem_bytes(row, N, dtype)} B of shared memory "
                             f"(limit {SMEM_LIMIT}) for N={N} {dtype}")
        _dynamic(cfg)  # the schedule's rules
        return cfg


def check_ring(variant: str, config_of, op, x, *rest):
    """Shared by the ring variants (gluon-pipelined, gluon-ws): the TMA rules (ValueError naming
    the argument and the rule), then config_of(op, N, dtype, M): the heuristic config, or None when
    the rows are too long for a ring of rows (launch streams them: pattern 2's ring of chunks)."""
    row, _ = rowio.resolve(op)
    dt = dtype_name(x)
    N = x.shape[-1]
    check_tma_rows(variant, N, dt)
    check_row_operands(rowio.named_operands(row, (x, ) + rest), N)
    try:
        return config_of(row, N, dt, x.numel() // N)
    except ValueError:
        return None


def check(op, x, *rest) -> PipeConfig | None:
    return check_ring("gluon-pipelined", PipeConfig.heuristic, op, x, *rest)


def ring_launch(row, x, residual, weight, bias, eps: float, out, cfg, trace):
    """Outputs, grid and arguments of a ring kernel (pipelined_norm_kernel, ws_norm_kernel share
    their signature up to the constexprs): (result, grid, args, constexprs)."""
    N = x.shape[-1]
    dt = dtype_name(x)
    v = vec(dt)
    chunk = v * 32 * cfg.num_warps
    x2 = x.view(-1, N)
    M = x2.shape[0]
    y, s, y2, s2 = row_outputs(x, out, row.residual)
    lay = row_layout(dt)
    x_desc = descriptor(x2, [cfg.rows, chunk], lay)
    r_desc = descriptor(residual.view(-1, N), [cfg.rows, chunk], lay) if row.residual else None
    w_desc = descriptor(weight.view(1, N), [1, chunk], lay) if row.weight else None
    b_desc = descriptor(bias.view(1, N), [1, chunk], lay) if row.bias else None
    grid = (max(1, min(cdiv(M, cfg.rows), cfg.ctas_per_sm * num_sms(x.device))), )
    counter = block_counter(x.device) if _dynamic(cfg) else None
    args = (x_desc, r_desc, w_desc, b_desc, y2, s2, M, y2.stride(0) // v, s2.stride(0) // v if row.residual else 0,
            eps, N // v, trace, counter)
    return rowio.outputs(row, y, s), grid, args, _ring_constexprs(row, N, dt, cfg, trace is not None)


def _dynamic(cfg) -> bool:
    if cfg.schedule not in ("static", "dynamic"):
        raise ValueError(f"{type(cfg).__name__}.schedule must be 'static' or 'dynamic'; got {cfg.schedule!r}")
    if cfg.schedule == "dynamic" and cfg.num_stages < 2:
        raise ValueError(f"{type(cfg).__name__}: schedule 'dynamic' needs num_stages >= 2 (a block is grabbed one "
                         f"slot ahead of its use); got {cfg.num_stages}")
    return cfg.schedule == "dynamic"


def block_counter(device):
    """The dynamic schedule's int32 block counter for the current stream of device: allocated zero once,
    reset to zero by the last CTA of every launch (grab_block), pinned for the fast path, which resolves it
    per replay (the counter of the stream then current). One per (device, stream): launches on one stream
    are ordered; two streams running dynamic kernels at once never share a counter."""
    import torch
    from .. import fastpath
    key = (torch.device(device).index, torch.cuda.current_stream(device).cuda_stream)
    c = _COUNTERS.by_key.get(key)
    if c is None:
        if torch.cuda.is_current_stream_capturing():
            raise RuntimeError("schedule='dynamic' needs its block counter for this stream before a CUDA-graph "
                               "capture (a counter allocated inside the capture would live in the graph's memory "
                               "pool, unzeroed until the graph first replays): call the op once on the capture "
                               "stream first, or use schedule='static'")
        c = _COUNTERS.by_key[key] = torch.zeros(1, dtype=torch.int32, device=torch.device("cuda", key[0]))
        fastpath.pin(c, resolve=lambda: block_counter(c.device))
    return c


# the counters by (device index, raw stream), kept for the process: a stdlib namespace, which the code hash
# does not read (a module-level dict would make every ring variant's hash depend on what ran)
_COUNTERS = types.SimpleNamespace(by_key={})


def _ring_constexprs(row, N: int, dtype: str, cfg, instrument: bool) -> dict:
    return dict(STATS=norm_math.stats_hooks(row), HAS_W=row.weight, HAS_B=row.bias, HAS_RESIDUAL=row.residual,
                NUM_CHUNKS=cdiv(N, vec(dtype) * 32 * cfg.num_warps), NUM_STAGES=cfg.num_stages, INSTRUMENT=instrument,
                DYNAMIC=_dynamic(cfg), num_warps=cfg.num_warps)


def launch(op, x, residual, weight, bias, eps: float, out=None, config: PipeConfig | None = None, trace=None):
    """Run gluon-pipelined for op (an OpSpec, its RowNorm or an op name). trace: an int64 CUDA
    tensor of TRACE_CTAS * TRACE_ITERS * 3 elements -> an INSTRUMENT build writes its
    %globaltimer stamps there (see pipelined_norm_kernel)."""
    row, _ = rowio.resolve(op)
    cfg = check(row, *rowio.operands(row, x, residual, weight, bias))  # the rules, whatever the config
    cfg = config or cfg
    if cfg is None:
        from . import chunked
        return chunked.launch(row, x, residual, weight, bias, eps, out=out)
    res, grid, args, ce = ring_launch(row, x, residual, weight, bias, eps, out, cfg, trace)
    pipelined_norm_kernel[grid](*args, **ce, FENCE=cfg.fence)
    return res


def ring_codegen_args(row, N: int, dtype: str, cfg, instrument: bool) -> tuple:
    """(args, constexprs) of kernel_spec for a ring kernel over contiguous rows of N."""
    chunk = vec(dtype) * 32 * cfg.num_warps
    lay = row_layout(dtype)
    xd = desc_type(dtype, [cfg.rows, chunk], lay)
    wd = desc_type(dtype, [1, chunk], lay)
    ptr = f"*{short_dtype(dtype)}"
    nv = N // vec(dtype)
    args = {"x_desc": xd, "r_desc": xd if row.residual else None, "w_desc": wd if row.weight else None,
            "b_desc": wd if row.bias else None, "y_ptr": ptr, "s_ptr": ptr if row.residual else None, "M": "i32",
            "y_stride_v": nv, "s_stride_v": nv if row.residual else 0, "eps": "fp32", "N_v": nv,
            "t_ptr": "*i64" if instrument else None, "c_ptr": "*i32" if _dynamic(cfg) else None}
    return args, _ring_constexprs(row, N, dtype, cfg, instrument)


def codegen_spec(op, N: int, dtype: str, cfg: PipeConfig | None = None, instrument: bool = False):
    """compile_sm90 arguments reproducing what launch() JITs for contiguous rows of N (CPU codegen)."""
    row, _ = rowio.resolve(op)
    cfg = cfg or PipeConfig.heuristic(row, N, dtype)
    args, ce = ring_codegen_args(row, N, dtype, cfg, instrument)
    return kernel_spec(pipelined_norm_kernel, args, dict(ce, FENCE=cfg.fence), num_warps=cfg.num_warps)


def ring_hooks(heuristic, codegen_spec):
    """(configure, codegen) hooks of a ring variant (gluon-pipelined, gluon-ws): its heuristic with
    a sweep's overrides; the codegen of what launch runs (pattern 2's streaming kernel for rows too
    long for a ring of rows)."""
    def configure(op, shape: dict, dtype: str, overrides: dict):
        return heuristic(op, shape["N"], dtype, shape.get("M"), **overrides)

    def codegen(op, shape: dict, dtype: str, config=None):
        if config is None:
            try:
                config = configure(op, shape, dtype, {})
            except ValueError:
                from . import chunked
                return chunked.codegen(op, shape, dtype)
        return codegen_spec(op, shape["N"], dtype, config)

    return configure, codegen


# ----------------------------------------------------------------------------------------------
# registration: gluon-pipelined for every row norm (the matmul one is in gemm.py)

KNOBS = {"num_stages": (1, 2, 3, 4), "rows": (1, 2, 4), "ctas_per_sm": (1, 2, 3, 4, 6), "fence": (True, False),
         "schedule": ("static", "dynamic")}
# the 03 plan's stages study, pipe-sweep and fence study (experiments.PipelinedPlan)


configure, codegen = ring_hooks(PipeConfig.heuristic, codegen_spec)

rowio.register_row_variants(
    "gluon-pipelined", pattern="pipelined", launch=launch, check=check, configure=configure, codegen=codegen,
    knobs=KNOBS, roots=(pipelined_norm_kernel, PipeConfig, block_counter, norm_math.STATS_HOOKS),
    description="persistent CTAs walk row blocks through a NUM_STAGES TMA ring; weights loaded once per CTA")
