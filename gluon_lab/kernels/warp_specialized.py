"""Pattern 4 — warp specialization (variant "gluon-ws"): the persistent GEMM and the row norms.

STATUS (2026-11-29, session 3): GEMM and norms measured on the H200 (notebooks 03 and 04;
tests/test_gemm_gpu.py and tests/test_ws_norm_gpu.py pass). compute-sanitizer racecheck reports one
hazard at kernel entry in every warp_specialize kernel here (synccheck clean, outputs correct):
unresolved, see notebook 04. Only the cooperative consumer schedule exists (no ping-pong).

GEMM:
gl.warp_specialize splits the CTA into partitions with their own warps and register budgets:
* worker "producer": 1 warp, a small register budget (setmaxnreg). For every k-step of every tile
  this CTA owns it waits for its ring slot to be EMPTY, expects the bytes and issues the A/B TMA
  boxes, which complete on FULL. It never waits for the math, so it runs ahead by NUM_STAGES steps.
* default "consumer": num_warps warps (8 = two warpgroups, cooperative on one BM = 128 tile, 64 rows
  each). Waits FULL, issues an async wgmma, and after warpgroup_mma_wait(1) releases the slot of the
  previous step (its MMA has retired) by arriving on EMPTY. Epilogue: accumulator -> smem -> TMA
  store; the store of tile t is waited for only before tile t+1's epilogue reuses the buffer.
Barrier protocol (count = 1 each), slot = g % S, ph = (g // S) & 1 over the global k-step g:
    producer: wait(empty[slot], ph ^ 1)  (a fresh barrier passes phase "1" at once) ; expect ; TMA
    consumer: wait(full[slot], ph) ; wgmma ; ... arrive(empty[previous slot])
"""
from __future__ import annotations

from dataclasses import dataclass

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                              warpgroup_mma_wait)

from . import norm_math, rowio
from .chunked import ITEMSIZE, _dt, row_layout
from .gemm import GemmConfig, _tile_coords, _tile_space, prepare
from .norm_math import OP_CODES
from .pipelined import SMEM_LIMIT, TRACE_CTAS, TRACE_ITERS, PipeConfig, _load_block, globaltimer


@gluon.jit
def _ws_producer(a_desc, b_desc, a_bufs, b_bufs, empty_bars, full_bars, M, N, K, NUM_STAGES: gl.constexpr,
                 GROUP_M: gl.constexpr):
    BM: gl.constexpr = a_desc.block_type.shape[0]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    BN: gl.constexpr = b_desc.block_type.shape[1]
    start, nprog, num_pid_m, num_pid_n, k_tiles, my_tiles = _tile_space(M, N, K, BM, BN, BK)
    g = 0
    for i in range(my_tiles):
        pid_m, pid_n = _tile_coords(start + i * nprog, num_pid_m, num_pid_n, GROUP_M)
        for kk in range(k_tiles):
            slot = g % NUM_STAGES
            mbarrier.wait(empty_bars.index(slot), ((g // NUM_STAGES) & 1) ^ 1)
            full = full_bars.index(slot)
            mbarrier.expect(full, a_desc.block_type.nbytes + b_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(a_desc, [pid_m * BM, kk * BK], full, a_bufs.index(slot))
            tma.async_copy_global_to_shared(b_desc, [kk * BK, pid_n * BN], full, b_bufs.index(slot))
            g += 1


@gluon.jit
def _ws_consumer(c_desc, a_bufs, b_bufs, c_smem, empty_bars, full_bars, M, N, K, NUM_STAGES: gl.constexpr,
                 GROUP_M: gl.constexpr, num_warps: gl.constexpr):
    BM: gl.constexpr = c_desc.block_type.shape[0]
    BN: gl.constexpr = c_desc.block_type.shape[1]
    BK: gl.constexpr = a_bufs.shape[2]
    start, nprog, num_pid_m, num_pid_n, k_tiles, my_tiles = _tile_space(M, N, K, BM, BN, BK)
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                         instr_shape=[16, BN, 16])
    g = 0
    for i in range(my_tiles):
        pid_m, pid_n = _tile_coords(start + i * nprog, num_pid_m, num_pid_n, GROUP_M)
        acc = gl.zeros([BM, BN], gl.float32, acc_layout)
        for kk in range(k_tiles):
            slot = g % NUM_STAGES
            mbarrier.wait(full_bars.index(slot), (g // NUM_STAGES) & 1)
            acc = warpgroup_mma(a_bufs.index(slot), b_bufs.index(slot), acc, is_async=True)
            acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc, ))
            if kk > 0:  # the MMA of step g-1 has retired: its slot goes back to the producer
                mbarrier.arrive(empty_bars.index((g - 1) % NUM_STAGES))
            g += 1
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
        mbarrier.arrive(empty_bars.index((g - 1) % NUM_STAGES))
        tma.store_wait(0)  # the previous tile's store has finished reading c_smem
        c_smem.store(acc.to(c_desc.dtype))
        fence_async_shared()
        tma.async_copy_shared_to_global(c_desc, [pid_m * BM, pid_n * BN], c_smem)
    tma.store_wait(0)


@gluon.jit
def ws_gemm_kernel(a_desc, b_desc, c_desc, M, N, K, NUM_STAGES: gl.constexpr, GROUP_M: gl.constexpr,
                   PRODUCER_REGS: gl.constexpr, num_warps: gl.constexpr):
    BM: gl.constexpr = a_desc.block_type.shape[0]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    BN: gl.constexpr = b_desc.block_type.shape[1]
    dtype: gl.constexpr = a_desc.dtype
    # every buffer and barrier is allocated before the fork and handed to the partitions
    a_bufs = gl.allocate_shared_memory(dtype, [NUM_STAGES, BM, BK], a_desc.layout)
    b_bufs = gl.allocate_shared_memory(dtype, [NUM_STAGES, BK, BN], b_desc.layout)
    c_smem = gl.allocate_shared_memory(dtype, [BM, BN], c_desc.layout)
    empty_bars = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    full_bars = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(NUM_STAGES):
        mbarrier.init(empty_bars.index(i), count=1)
        mbarrier.init(full_bars.index(i), count=1)
    gl.warp_specialize([
        (_ws_consumer, (c_desc, a_bufs, b_bufs, c_smem, empty_bars, full_bars, M, N, K, NUM_STAGES, GROUP_M,
                        num_warps)),
        (_ws_producer, (a_desc, b_desc, a_bufs, b_bufs, empty_bars, full_bars, M, N, K, NUM_STAGES, GROUP_M)),
    ], [1], [PRODUCER_REGS])
    for i in gl.static_range(NUM_STAGES):
        mbarrier.invalidate(empty_bars.index(i))
        mbarrier.invalidate(full_bars.index(i))


def launch(a, b, out=None, config: GemmConfig | None = None):
    c, descs, M, N, K, cfg, grid = prepare(a, b, out, config)
    ws_gemm_kernel[grid](*descs, M, N, K, NUM_STAGES=cfg.num_stages, GROUP_M=cfg.group_m,
                         PRODUCER_REGS=cfg.producer_regs, num_warps=cfg.num_warps)
    return c


def codegen_spec(cfg: GemmConfig | None = None, dtype: str = "bfloat16", producer_regs: int | None = None):
    from .gemm import codegen_spec as base
    cfg = cfg or GemmConfig()
    producer_regs = producer_regs or cfg.producer_regs
    spec = base(cfg, dtype)
    spec["fn"] = ws_gemm_kernel
    spec["signature"] = {**spec["signature"], "PRODUCER_REGS": "constexpr"}
    spec["constexprs"] = {**spec["constexprs"], "PRODUCER_REGS": producer_regs}
    return spec


# ---------------------------------------------------------------------------------------------
# Norms: the pattern-3 ring (pipelined.py) split into a 1-warp TMA producer and a consumer
# partition that reduces, normalizes and stores. Same slots, same blocks, same math; what changes
# is who waits: the producer waits EMPTY (a slot the consumer released) instead of the consumer
# issuing the refill itself after its own block, so loads run up to NUM_STAGES blocks ahead.
# Barrier protocol as in the GEMM (count = 1), slot = i % S, ph = (i // S) & 1 over this CTA's blocks.
TRACE_FIELDS: gl.constexpr = gl.constexpr(5)  # INSTRUMENT stamps per block: producer (before EMPTY wait, copies issued),
#                   consumer (before FULL wait, data ready, stores issued)


@gluon.jit
def _block_range(M, R: gl.constexpr):
    pid = gl.program_id(0)
    nprog = gl.num_programs(0)
    n_blocks = gl.cdiv(M, R)
    return pid, nprog, (n_blocks - pid + nprog - 1) // nprog


@gluon.jit
def _wsn_producer(x_desc, r_desc, xbufs, rbufs, empty_bars, full_bars, M, t_ptr, OP: gl.constexpr,
                  NUM_CHUNKS: gl.constexpr, NUM_STAGES: gl.constexpr, INSTRUMENT: gl.constexpr):
    R: gl.constexpr = x_desc.block_type.shape[0]
    pid, nprog, n_my = _block_range(M, R)
    for i in range(n_my):
        slot = i % NUM_STAGES
        if INSTRUMENT:
            t0 = globaltimer()
        mbarrier.wait(empty_bars.index(slot), ((i // NUM_STAGES) & 1) ^ 1)  # fresh barrier: passes
        _load_block(x_desc, r_desc, xbufs, rbufs, full_bars, slot, (pid + i * nprog) * R, True, NUM_CHUNKS, OP)
        if INSTRUMENT:
            if (pid < TRACE_CTAS) & (i < TRACE_ITERS):
                t1 = globaltimer()
                base_t = (pid * TRACE_ITERS + i) * TRACE_FIELDS
                gl.store(t_ptr + base_t, t0)
                gl.store(t_ptr + base_t + 1, t1)


@gluon.jit
def _wsn_consumer(xbufs, rbufs, wbufs, bbufs, empty_bars, full_bars, y_ptr, s_ptr, M, y_stride_v, s_stride_v, eps,
                  N_v, t_ptr, OP: gl.constexpr, NUM_CHUNKS: gl.constexpr, NUM_STAGES: gl.constexpr,
                  INSTRUMENT: gl.constexpr, num_warps: gl.constexpr):
    R: gl.constexpr = xbufs.shape[1]
    CHUNK: gl.constexpr = xbufs.shape[2]
    dtype: gl.constexpr = xbufs.dtype
    VEC: gl.constexpr = 128 // dtype.primitive_bitwidth
    gl.static_assert(CHUNK == VEC * 32 * num_warps, "CHUNK must be one register tile of the consumer")
    HAS_W: gl.constexpr = OP != 2
    HAS_B: gl.constexpr = OP == 1
    L: gl.constexpr = gl.BlockedLayout([1, VEC], [1, 32], [1, num_warps], [1, 0])
    N = N_v * VEC
    y_stride = y_stride_v * VEC
    s_stride = s_stride_v * VEC
    pid, nprog, n_my = _block_range(M, R)
    rows0 = gl.arange(0, R, layout=gl.SliceLayout(1, L))
    cols0 = gl.arange(0, CHUNK, layout=gl.SliceLayout(0, L))
    for i in range(n_my):
        slot = i % NUM_STAGES
        if INSTRUMENT:
            t2 = globaltimer()
        mbarrier.wait(full_bars.index(slot), (i // NUM_STAGES) & 1)
        if INSTRUMENT:
            t3 = globaltimer()
        rows = (pid + i * nprog) * R + rows0
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
        # every read of the slot is done (the values are in registers): release it to the producer.
        # add_rms_norm wrote s into it (generic proxy) -> fence before the producer's TMA write.
        if OP == 3:
            fence_async_shared()
        mbarrier.arrive(empty_bars.index(slot))
        if INSTRUMENT:
            if (pid < TRACE_CTAS) & (i < TRACE_ITERS):
                t4 = globaltimer()
                base_t = (pid * TRACE_ITERS + i) * TRACE_FIELDS
                gl.store(t_ptr + base_t + 2, t2)
                gl.store(t_ptr + base_t + 3, t3)
                gl.store(t_ptr + base_t + 4, t4)


@gluon.jit(do_not_specialize=["M", "eps"])
def ws_norm_kernel(x_desc, r_desc, w_desc, b_desc, y_ptr, s_ptr, M, y_stride_v, s_stride_v, eps, N_v, t_ptr,
                   OP: gl.constexpr, NUM_CHUNKS: gl.constexpr, NUM_STAGES: gl.constexpr, INSTRUMENT: gl.constexpr,
                   PRODUCER_REGS: gl.constexpr, num_warps: gl.constexpr):
    R: gl.constexpr = x_desc.block_type.shape[0]
    CHUNK: gl.constexpr = x_desc.block_type.shape[1]
    dtype: gl.constexpr = x_desc.dtype
    HAS_W: gl.constexpr = OP != 2
    HAS_B: gl.constexpr = OP == 1
    # every buffer and barrier is allocated (and the weights loaded) before the fork
    xbufs = gl.allocate_shared_memory(dtype, [NUM_STAGES * NUM_CHUNKS, R, CHUNK], x_desc.layout)
    rbufs = gl.allocate_shared_memory(dtype, [NUM_STAGES * NUM_CHUNKS if OP == 3 else 1, R, CHUNK], x_desc.layout)
    wbufs = gl.allocate_shared_memory(dtype, [NUM_CHUNKS if HAS_W else 1, 1, CHUNK], w_desc.layout)
    bbufs = gl.allocate_shared_memory(dtype, [NUM_CHUNKS if HAS_B else 1, 1, CHUNK], w_desc.layout)
    empty_bars = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    full_bars = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    wbar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    for i in gl.static_range(NUM_STAGES):
        mbarrier.init(empty_bars.index(i), count=1)
        mbarrier.init(full_bars.index(i), count=1)
    mbarrier.init(wbar, count=1)
    if HAS_W:
        mbarrier.expect(wbar, NUM_CHUNKS * w_desc.block_type.nbytes * (2 if HAS_B else 1))
        for c in gl.static_range(NUM_CHUNKS):
            tma.async_copy_global_to_shared(w_desc, [0, c * CHUNK], wbar, wbufs.index(c))
            if HAS_B:
                tma.async_copy_global_to_shared(b_desc, [0, c * CHUNK], wbar, bbufs.index(c))
        mbarrier.wait(wbar, 0)
    gl.warp_specialize([
        (_wsn_consumer, (xbufs, rbufs, wbufs, bbufs, empty_bars, full_bars, y_ptr, s_ptr, M, y_stride_v, s_stride_v,
                         eps, N_v, t_ptr, OP, NUM_CHUNKS, NUM_STAGES, INSTRUMENT, num_warps)),
        (_wsn_producer, (x_desc, r_desc, xbufs, rbufs, empty_bars, full_bars, M, t_ptr, OP, NUM_CHUNKS, NUM_STAGES,
                         INSTRUMENT)),
    ], [1], [PRODUCER_REGS])
    for i in gl.static_range(NUM_STAGES):
        mbarrier.invalidate(empty_bars.index(i))
        mbarrier.invalidate(full_bars.index(i))
    mbarrier.invalidate(wbar)


@dataclass(frozen=True)
class WsNormConfig:
    """Knobs of the warp-specialized norm: the pattern-3 ring (PipeConfig's) plus the partition
    split. The consumer is the default partition (num_warps warps, a multiple of 4); the producer is
    one warp, which still occupies a whole warpgroup of the register file (4 warps)."""
    num_warps: int  # consumer warps: CHUNK = VEC x 32 x num_warps
    rows: int
    num_stages: int
    ctas_per_sm: int
    producer_regs: int = 40  # 24 (the setmaxnreg minimum) spilled in the add_rms_norm producer (2 descriptors)

    def threads(self) -> int:
        return 32 * (self.num_warps + 4)

    def maxnreg(self) -> int | None:
        """Launch register cap so that ctas_per_sm CTAs fit the 64K-register file (None: 1 CTA/SM)."""
        if self.ctas_per_sm <= 1:
            return None
        return min(255, 65536 // (self.ctas_per_sm * self.threads()) // 8 * 8)

    def as_pipe(self) -> PipeConfig:
        return PipeConfig(self.num_warps, self.rows, self.num_stages, self.ctas_per_sm)

    def smem_bytes(self, op: str, N: int, dtype: str) -> int:
        return self.as_pipe().smem_bytes(op, N, dtype) + 8 * self.num_stages  # + the EMPTY barriers

    def validate(self, op: str, N: int, dtype: str) -> "WsNormConfig":
        if self.num_warps % 4:
            raise ValueError(f"WsNormConfig.num_warps must be a multiple of 4 (the consumer is the default "
                             f"partition of a warp-specialized kernel); got {self.num_warps}")
        if not 24 <= self.producer_regs <= 256 or self.producer_regs % 8:
            raise ValueError(f"WsNormConfig.producer_regs must be a multiple of 8 in 24..256; got {self.producer_regs}")
        if self.smem_bytes(op, N, dtype) > SMEM_LIMIT:
            raise ValueError(f"{self} needs {self.smem_bytes(op, N, dtype)} B of shared memory (limit {SMEM_LIMIT}) "
                             f"for N={N} {dtype} {op}")
        return self

    @classmethod
    def heuristic(cls, op: str, N: int, dtype: str, M: int | None = None, **overrides) -> "WsNormConfig":
        """Pattern 3's ring for this row (PipeConfig.heuristic), with >= 4 consumer warps."""
        import dataclasses
        known = {f.name for f in dataclasses.fields(cls)}
        pipe_over = {k: v for k, v in overrides.items() if k in ("rows", "num_stages", "ctas_per_sm")}
        base = PipeConfig.heuristic(op, N, dtype, M, **pipe_over)
        nw = max(4, overrides.get("num_warps", base.num_warps))
        if nw != base.num_warps:
            base = PipeConfig.heuristic(op, N, dtype, M, **{**pipe_over, "num_warps": nw})
        # one stage deeper than pattern 3: the 04 norm-sweep (run 20261129T182538Z) found 3-4 stages
        # 10% faster than 2 on average, 4 best at the large shapes; the producer's register budget
        # (24 / 40 / 56) and 4 vs 8 consumer warps moved the mean by < 2%.
        cfg = cls(num_warps=nw, rows=base.rows, num_stages=base.num_stages + 1, ctas_per_sm=base.ctas_per_sm)
        cfg = dataclasses.replace(cfg, **{k: v for k, v in overrides.items() if k in known})
        if "ctas_per_sm" not in overrides:  # keep >= 96 registers per thread (add_rms_norm spilled at 80)
            while cfg.ctas_per_sm > 1 and (cfg.maxnreg() < 96 or not cfg.as_pipe().fits_sm(op, N, dtype)):
                cfg = dataclasses.replace(cfg, ctas_per_sm=cfg.ctas_per_sm - 1)
        if "num_stages" not in overrides:
            while cfg.num_stages > 2 and cfg.smem_bytes(op, N, dtype) > SMEM_LIMIT:
                cfg = dataclasses.replace(cfg, num_stages=cfg.num_stages - 1)
        return cfg.validate(op, N, dtype)


def check_norm(op: str, x, *rest) -> WsNormConfig | None:
    dt = _dt(x)
    N = x.shape[-1]
    if (N * ITEMSIZE[dt]) % 16:
        raise ValueError(f"variant 'gluon-ws' needs N * itemsize to be a multiple of 16 bytes (TMA): N={N} {dt} is "
                         f"{N * ITEMSIZE[dt]} bytes; use variant='torch' or 'triton'")
    rowio.check_tma_operands(op, (x, ) + rest, N)
    try:
        return WsNormConfig.heuristic(op, N, dt, x.numel() // N)
    except ValueError:
        return None  # too long for a ring of rows: launch streams it (pattern 2's ring of chunks)


def launch_norm(op: str, x, residual, weight, bias, eps: float, out=None, config: WsNormConfig | None = None,
                trace=None):
    """trace: an int64 CUDA tensor of TRACE_CTAS * TRACE_ITERS * TRACE_FIELDS elements -> an
    INSTRUMENT build writes its per-partition %globaltimer stamps there."""
    import torch
    import triton
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    cfg = check_norm(op, x, *((residual, weight) if op == "add_rms_norm" else (weight, bias)))
    cfg = config or cfg
    if cfg is None:
        from . import chunked
        return chunked.launch(op, x, residual, weight, bias, eps, out=out)
    N = x.shape[-1]
    dt = _dt(x)
    cfg = cfg.validate(op, N, dt)
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
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count
    grid = (max(1, min(triton.cdiv(M, cfg.rows), cfg.ctas_per_sm * sms)), )
    extra = {"maxnreg": cfg.maxnreg()} if cfg.maxnreg() else {}
    ws_norm_kernel[grid](x_desc, r_desc, w_desc, b_desc, y2, s2, M, y2.stride(0) // vec, s2.stride(0) // vec, eps,
                         N // vec, trace if trace is not None else y2, OP=OP_CODES[op], NUM_CHUNKS=-(-N // chunk),
                         NUM_STAGES=cfg.num_stages, INSTRUMENT=trace is not None, PRODUCER_REGS=cfg.producer_regs,
                         num_warps=cfg.num_warps, **extra)
    return (y, s) if op == "add_rms_norm" else y


def norm_codegen_spec(op: str, N: int, dtype: str, cfg: WsNormConfig | None = None, instrument: bool = False):
    from .pipelined import codegen_spec as pipe_spec
    cfg = cfg or WsNormConfig.heuristic(op, N, dtype)
    spec = pipe_spec(op, N, dtype, cfg.as_pipe(), instrument)
    sig = {k: v for k, v in spec["signature"].items() if k not in ("FENCE", "num_warps")}
    spec["fn"] = ws_norm_kernel
    spec["signature"] = {**sig, "PRODUCER_REGS": "constexpr", "num_warps": "constexpr"}
    ce = {k: v for k, v in spec["constexprs"].items() if k != "FENCE"}
    spec["constexprs"] = {**ce, "PRODUCER_REGS": cfg.producer_regs}
    if cfg.maxnreg():
        spec["maxnreg"] = cfg.maxnreg()
    return spec
