"""Pattern 3 — multi-buffer pipelining for the norms (variant "gluon-pipelined").

STATUS (2026-11-29, session 3): measured on the H200 (notebook 03; tests/test_pipelined_gpu.py pass).
Correct everywhere, but 3-10% below the one-row-per-CTA kernels at large M: the every-CTA timeline
shows the static round-robin grid finishing with a tail (slowest CTA ~7% after the median), which
the hardware scheduler avoids for one-row grids. Next step: a dynamic (atomic-counter) block
scheduler. Not in variant="auto"'s fallback list.

One-row-per-CTA kernels (gluon-tma, gluon-chunked) expose the TMA latency of every row before any
compute: the SM only overlaps it across CTAs. Here a persistent grid (about CTAS_PER_SM CTAs per SM)
walks row blocks p, p + grid, p + 2*grid, ... through a ring of NUM_STAGES shared-memory slots, one
mbarrier per slot with phase tracking (slot = i % NUM_STAGES, phase = (i // NUM_STAGES) & 1): the
copy of block i + NUM_STAGES - 1 is in flight while block i is reduced and normalized. Each slot
holds a block of R rows as NUM_CHUNKS power-of-2 [R, CHUNK] boxes (pattern 2's chunking: any N
with N * itemsize % 16 == 0, zero-filled tail). The weight (and bias) are TMA-loaded into shared
memory ONCE per CTA. Outputs leave by 128-bit stores.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma

from . import norm_math, rowio
from .chunked import ITEMSIZE, ROWS_HEURISTIC, SMEM_LIMIT, SMEM_RESERVE, ChunkPlan, _dt, row_layout
from .norm_math import OP_CODES

H200_SMS = 132  # the heuristic's SM count (the grid itself uses the device's)
FEW_BLOCKS_PER_SM = 8
SM_SMEM = 233472  # bytes of shared memory per sm_90 SM (228 KB), shared by the resident CTAs
TRACE_CTAS: gl.constexpr = gl.constexpr(1024)  # programs an INSTRUMENT build records: every CTA of the grid
TRACE_ITERS: gl.constexpr = gl.constexpr(64)  # blocks per program recorded


@gluon.jit
def _load_block(x_desc, r_desc, xbufs, rbufs, bars, slot, row0, pred, NUM_CHUNKS: gl.constexpr, OP: gl.constexpr):
    """Fill ring slot `slot` with rows row0 .. row0+R-1: NUM_CHUNKS boxes (x2 for add_rms_norm), one
    barrier, one expect carrying every box's bytes."""
    CHUNK: gl.constexpr = x_desc.block_type.shape[1]
    bar = bars.index(slot)
    mbarrier.expect(bar, NUM_CHUNKS * x_desc.block_type.nbytes * (2 if OP == 3 else 1), pred=pred)
    base = slot * NUM_CHUNKS
    for c in gl.static_range(NUM_CHUNKS):
        tma.async_copy_global_to_shared(x_desc, [row0, c * CHUNK], bar, xbufs.index(base + c), pred=pred)
    if OP == 3:
        for c in gl.static_range(NUM_CHUNKS):
            tma.async_copy_global_to_shared(r_desc, [row0, c * CHUNK], bar, rbufs.index(base + c), pred=pred)


@gluon.jit
def globaltimer():
    """The SM's %globaltimer (ns), for the measured timeline of notebook 03 (INSTRUMENT builds only)."""
    return gl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=gl.int64, is_pure=False, pack=1)


@gluon.jit(do_not_specialize=["M", "eps"])
def pipelined_norm_kernel(x_desc, r_desc, w_desc, b_desc, y_ptr, s_ptr, M, y_stride_v, s_stride_v, eps, N_v, t_ptr,
                          OP: gl.constexpr, NUM_CHUNKS: gl.constexpr, NUM_STAGES: gl.constexpr,
                          INSTRUMENT: gl.constexpr, FENCE: gl.constexpr, num_warps: gl.constexpr):
    """INSTRUMENT: the first TRACE_CTAS programs write, per block i < TRACE_ITERS, three %globaltimer
    stamps to t_ptr[pid, i, :] — before the slot wait, when the data is there, after the stores
    were issued — so the notebook can draw a measured timeline (stall = ready - before)."""
    R: gl.constexpr = x_desc.block_type.shape[0]
    CHUNK: gl.constexpr = x_desc.block_type.shape[1]
    dtype: gl.constexpr = x_desc.dtype
    VEC: gl.constexpr = 128 // dtype.primitive_bitwidth
    gl.static_assert(CHUNK == VEC * 32 * num_warps, "CHUNK must be one register tile")
    # NUM_STAGES = 1 is the no-overlap reference: block i is issued, waited for and computed in turn
    gl.static_assert(NUM_STAGES >= 1, "the ring needs a slot")
    HAS_W: gl.constexpr = OP != 2
    HAS_B: gl.constexpr = OP == 1
    L: gl.constexpr = gl.BlockedLayout([1, VEC], [1, 32], [1, num_warps], [1, 0])
    N = N_v * VEC  # lengths in 16-byte vectors: masked accesses stay 128-bit (see chunked.py)
    y_stride = y_stride_v * VEC
    s_stride = s_stride_v * VEC
    pid = gl.program_id(0)
    nprog = gl.num_programs(0)
    n_blocks = gl.cdiv(M, R)
    n_my = (n_blocks - pid + nprog - 1) // nprog

    # the ring: slot s holds chunks s*NUM_CHUNKS .. s*NUM_CHUNKS + NUM_CHUNKS - 1 (rank 3 at most)
    xbufs = gl.allocate_shared_memory(dtype, [NUM_STAGES * NUM_CHUNKS, R, CHUNK], x_desc.layout)
    rbufs = gl.allocate_shared_memory(dtype, [NUM_STAGES * NUM_CHUNKS if OP == 3 else 1, R, CHUNK], x_desc.layout)
    wbufs = gl.allocate_shared_memory(dtype, [NUM_CHUNKS if HAS_W else 1, 1, CHUNK], w_desc.layout)
    bbufs = gl.allocate_shared_memory(dtype, [NUM_CHUNKS if HAS_B else 1, 1, CHUNK], w_desc.layout)
    bars = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    wbar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    for i in gl.static_range(NUM_STAGES):
        mbarrier.init(bars.index(i), count=1)
    mbarrier.init(wbar, count=1)

    # weight (and bias): once per CTA, on their own barrier (zero-filled past N like x)
    if HAS_W:
        mbarrier.expect(wbar, NUM_CHUNKS * w_desc.block_type.nbytes * (2 if HAS_B else 1))
        for c in gl.static_range(NUM_CHUNKS):
            tma.async_copy_global_to_shared(w_desc, [0, c * CHUNK], wbar, wbufs.index(c))
            if HAS_B:
                tma.async_copy_global_to_shared(b_desc, [0, c * CHUNK], wbar, bbufs.index(c))
    # prologue: NUM_STAGES - 1 blocks in flight (predicated off past this CTA's last block)
    for p in gl.static_range(NUM_STAGES - 1):
        _load_block(x_desc, r_desc, xbufs, rbufs, bars, p, (pid + p * nprog) * R, p < n_my, NUM_CHUNKS, OP)

    rows0 = gl.arange(0, R, layout=gl.SliceLayout(1, L))
    cols0 = gl.arange(0, CHUNK, layout=gl.SliceLayout(0, L))
    if HAS_W:
        mbarrier.wait(wbar, 0)

    for i in range(n_my):
        # refill the slot block i-1 used: its smem reads are done (same warps, program order; the
        # compiler puts a CTA barrier before the TMA issue). add_rms_norm also WROTE s into that
        # slot (generic proxy): a proxy fence must order that before the TMA (async proxy) write.
        # For read-only slots the fence is the FENCE knob: the 03 timeline showed a ~0.8 us gap
        # between a block's last store and the next wait, which a fence.proxy.async behind
        # outstanding global stores would explain.
        j = i + NUM_STAGES - 1
        if FENCE or OP == 3:
            fence_async_shared()
        _load_block(x_desc, r_desc, xbufs, rbufs, bars, j % NUM_STAGES, (pid + j * nprog) * R, j < n_my, NUM_CHUNKS,
                    OP)
        slot = i % NUM_STAGES
        if INSTRUMENT:
            t0 = globaltimer()
        mbarrier.wait(bars.index(slot), (i // NUM_STAGES) & 1)
        if INSTRUMENT:
            t1 = globaltimer()
        row0 = (pid + i * nprog) * R
        rows = row0 + rows0
        row_ok = gl.expand_dims(rows < M, 1)
        base = slot * NUM_CHUNKS
        if OP == 3:  # s = x + residual (input dtype): stored once, normalized from smem
            s_row = gl.expand_dims(rows.to(gl.int64) * s_stride, 1)
            for c in gl.static_range(NUM_CHUNKS):
                cols = c * CHUNK + cols0
                sv = xbufs.index(base + c).load(L) + rbufs.index(base + c).load(L)
                rbufs.index(base + c).store(sv)
                gl.store(s_ptr + s_row + gl.expand_dims(cols, 0), sv, mask=row_ok & gl.expand_dims(cols < N, 0))
            src = rbufs
        else:
            src = xbufs
        shift, scale = norm_math.ring_row_stats(src, base, N, eps, OP, NUM_CHUNKS, L)
        y_row = gl.expand_dims(rows.to(gl.int64) * y_stride, 1)
        for c in gl.static_range(NUM_CHUNKS):
            cols = c * CHUNK + cols0
            x = src.index(base + c).load(L).to(gl.float32)
            w = gl.zeros([1, CHUNK], gl.float32, L)
            b = gl.zeros([1, CHUNK], gl.float32, L)
            if HAS_W:
                w = wbufs.index(c).load(L).to(gl.float32)
            if HAS_B:
                b = bbufs.index(c).load(L).to(gl.float32)
            y = norm_math.normalize_chunk(x, shift, scale, w, b, OP).to(dtype)
            gl.store(y_ptr + y_row + gl.expand_dims(cols, 0), y, mask=row_ok & gl.expand_dims(cols < N, 0))
        if INSTRUMENT:
            if (pid < TRACE_CTAS) & (i < TRACE_ITERS):
                t2 = globaltimer()
                base_t = (pid * TRACE_ITERS + i) * 3
                gl.store(t_ptr + base_t, t0)
                gl.store(t_ptr + base_t + 1, t1)
                gl.store(t_ptr + base_t + 2, t2)
    for i in gl.static_range(NUM_STAGES):
        mbarrier.invalidate(bars.index(i))
    mbarrier.invalidate(wbar)


@dataclass(frozen=True)
class PipeConfig:
    """Knobs of gluon-pipelined (QuACK-style: thresholds carry their reasons)."""
    num_warps: int  # CHUNK = VEC x 32 x num_warps (pattern 2's chunk heuristic)
    rows: int  # rows per ring slot
    num_stages: int  # ring depth
    ctas_per_sm: int  # persistent grid = min(row blocks, ctas_per_sm x SMs)
    fence: bool = True  # proxy fence before each refill also for read-only slots (add_rms_norm: always)

    def smem_bytes(self, op: str, N: int, dtype: str) -> int:
        e = ITEMSIZE[dtype]
        chunk = 16 // e * 32 * self.num_warps
        nc = -(-N // chunk)
        slot = nc * self.rows * chunk * e * (2 if op == "add_rms_norm" else 1)
        params = nc * chunk * e * {"rms_norm": 1, "layer_norm": 2, "l2_norm": 0, "add_rms_norm": 1}[op]
        return self.num_stages * slot + params + SMEM_RESERVE

    def fits_sm(self, op: str, N: int, dtype: str) -> bool:
        """Are ctas_per_sm CTAs resident at once? Shared memory (SM_SMEM per SM, 1 KB of it reserved
        per CTA) and warps (64 per SM)."""
        return self.ctas_per_sm * (self.smem_bytes(op, N, dtype) + 1024) <= SM_SMEM and \
            self.ctas_per_sm * self.num_warps <= 64

    @classmethod
    def heuristic(cls, op: str, N: int, dtype: str, M: int | None = None, **overrides) -> "PipeConfig":
        n_in = 2 if op == "add_rms_norm" else 1
        # A ring needs >= 2 slots of one row (x and residual for add_rms_norm) next to the weights;
        # rows longer than that (bf16 rms_norm N > ~37K, fp32 add_rms_norm N >= ~9.5K) are refused
        # here and `launch` runs them on pattern 2's streaming kernel, whose ring runs over the
        # chunks of one row instead of over rows.
        try:
            p = ChunkPlan.for_row(op, N, dtype, rows=1, streaming=False)
        except ValueError:
            p = None
        if p is None or cls(p.num_warps, 1, 2, 1).smem_bytes(op, N, dtype) > SMEM_LIMIT:
            raise ValueError(f"variant 'gluon-pipelined' needs >= 2 ring slots of a row in shared memory; N={N} "
                             f"{dtype} {op} rows are too long (launch streams them through gluon-chunked)")
        rows = ROWS_HEURISTIC(op, N * ITEMSIZE[dtype] * n_in)  # pattern 2's rows per block
        # H200 pipe-sweep (03, run 20261129T181340Z, CTAs/SM 1..6 x stages 2..4 x rows 1..4): with many
        # row blocks per SM, 1 CTA/SM and 3 stages was best or within 2% at every shape (more CTAs
        # did not help); with few blocks (M = 1024: <= 8 per SM) 4 CTAs/SM x 2 stages was best
        # (more blocks in flight across CTAs when each CTA only sees a handful). A 4-warp CTA (N =
        # 5120 bf16: 5 chunks of 1024) alone left the SM underfed (run 20261129T182504Z: rms 16384 x
        # 5120 3423 GB/s at 1 CTA vs 3738 at 2): keep >= 8 warps per SM.
        few = M is not None and -(-M // rows) <= FEW_BLOCKS_PER_SM * H200_SMS
        cfg = cls(num_warps=p.num_warps, rows=rows, num_stages=2 if few else 3,
                  ctas_per_sm=4 if few else max(1, 8 // p.num_warps))
        known = {f.name for f in dataclasses.fields(cls)}
        cfg = dataclasses.replace(cfg, **{k: v for k, v in overrides.items() if k in known})
        if "ctas_per_sm" not in overrides:
            while cfg.ctas_per_sm > 1 and not cfg.fits_sm(op, N, dtype):
                cfg = dataclasses.replace(cfg, ctas_per_sm=cfg.ctas_per_sm - 1)
        if "rows" not in overrides:
            while cfg.rows > 1 and cfg.smem_bytes(op, N, dtype) > SMEM_LIMIT:
                cfg = dataclasses.replace(cfg, rows=cfg.rows // 2)
        if "num_stages" not in overrides:
            while cfg.num_stages > 2 and cfg.smem_bytes(op, N, dtype) > SMEM_LIMIT:
                cfg = dataclasses.replace(cfg, num_stages=cfg.num_stages - 1)
        if cfg.smem_bytes(op, N, dtype) > SMEM_LIMIT:
            raise ValueError(f"gluon-pipelined config {cfg} needs {cfg.smem_bytes(op, N, dtype)} B of shared memory "
                             f"(limit {SMEM_LIMIT}) for N={N} {dtype}")
        return cfg


def check(op: str, x, *rest) -> PipeConfig:
    dt = _dt(x)
    N = x.shape[-1]
    e = ITEMSIZE[dt]
    if (N * e) % 16:
        raise ValueError(f"variant 'gluon-pipelined' needs N * itemsize to be a multiple of 16 bytes (TMA): N={N} {dt} "
                         f"is {N * e} bytes; use variant='torch' or 'triton'")
    rowio.check_tma_operands(op, (x, ) + rest, N)
    try:
        return PipeConfig.heuristic(op, N, dt, x.numel() // N)
    except ValueError:
        return None  # too long for a ring of rows: launch streams it (pattern 2's ring of chunks)


def launch(op: str, x, residual, weight, bias, eps: float, out=None, config: PipeConfig | None = None, trace=None):
    """trace: an int64 CUDA tensor of TRACE_CTAS * TRACE_ITERS * 3 elements -> an INSTRUMENT build
    writes its %globaltimer stamps there (see pipelined_norm_kernel)."""
    import torch
    import triton
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    cfg = check(op, x, *((residual, weight) if op == "add_rms_norm" else (weight, bias)))
    cfg = config or cfg
    if cfg is None:
        from . import chunked
        return chunked.launch(op, x, residual, weight, bias, eps, out=out)
    N = x.shape[-1]
    dt = _dt(x)
    vec = 16 // ITEMSIZE[dt]
    chunk = vec * 32 * cfg.num_warps
    x2 = x.view(-1, N)
    M = x2.shape[0]
    y, s, y2, s2 = rowio.outputs(op, x, out)
    lay = row_layout(dt)
    x_desc = TensorDescriptor.from_tensor(x2, [cfg.rows, chunk], lay)
    r_desc = TensorDescriptor.from_tensor(residual.view(-1, N), [cfg.rows, chunk], lay) if op == "add_rms_norm" \
        else x_desc
    w_desc = TensorDescriptor.from_tensor(weight.view(1, N), [1, chunk], lay) if weight is not None else \
        TensorDescriptor.from_tensor(x2[:1], [1, chunk], lay)
    b_desc = TensorDescriptor.from_tensor(bias.view(1, N), [1, chunk], lay) if bias is not None else w_desc
    n_blocks = triton.cdiv(M, cfg.rows)
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count
    grid = (max(1, min(n_blocks, cfg.ctas_per_sm * sms)), )
    pipelined_norm_kernel[grid](x_desc, r_desc, w_desc, b_desc, y2, s2, M, y2.stride(0) // vec, s2.stride(0) // vec,
                                eps, N // vec, trace if trace is not None else y2, OP=OP_CODES[op],
                                NUM_CHUNKS=-(-N // chunk), NUM_STAGES=cfg.num_stages, INSTRUMENT=trace is not None, FENCE=cfg.fence,
                                num_warps=cfg.num_warps)
    return (y, s) if op == "add_rms_norm" else y


def codegen_spec(op: str, N: int, dtype: str, cfg: PipeConfig | None = None, instrument: bool = False):
    cfg = cfg or PipeConfig.heuristic(op, N, dtype)
    t = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}[dtype]
    chunk = 16 // ITEMSIZE[dtype] * 32 * cfg.num_warps
    lay = row_layout(dtype)
    xd = f"tensordesc<{t}[{cfg.rows}, {chunk}],{lay!r}>"
    wd = f"tensordesc<{t}[1, {chunk}],{lay!r}>"
    sig = {"x_desc": xd, "r_desc": xd, "w_desc": wd, "b_desc": wd, "y_ptr": f"*{t}", "s_ptr": f"*{t}", "M": "i32",
           "y_stride_v": "i32", "s_stride_v": "i32", "eps": "fp32", "N_v": "i32", "t_ptr": "*i64", "OP": "constexpr",
           "NUM_CHUNKS": "constexpr", "NUM_STAGES": "constexpr", "INSTRUMENT": "constexpr", "FENCE": "constexpr",
           "num_warps": "constexpr"}
    nv = N // (16 // ITEMSIZE[dtype])
    aligned = ["y_ptr", "s_ptr"] + (["y_stride_v", "s_stride_v", "N_v"] if nv % 16 == 0 else [])
    return dict(fn=pipelined_norm_kernel, signature=sig,
                constexprs={"OP": OP_CODES[op], "NUM_CHUNKS": -(-N // chunk), "NUM_STAGES": cfg.num_stages,
                            "INSTRUMENT": instrument, "FENCE": cfg.fence, "num_warps": cfg.num_warps},
                aligned=aligned, num_warps=cfg.num_warps)
