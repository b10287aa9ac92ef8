"""Pattern 4 — warp specialization (variant "gluon-ws" of the row norms).

Measured on the H200 (notebook 04; tests/test_ws_norm_gpu.py). compute-sanitizer racecheck reports one
hazard at kernel entry in every warp_specialize kernel here (synccheck clean, outputs correct): see
notebook 04. The warp-specialized GEMM is the implicit-GEMM template's instance in gemm_ws.py; both
take their empty/full ring from igemm.ring.

gl.warp_specialize splits the CTA into partitions with their own warps and register budgets: a 1-warp
TMA producer (setmaxnreg) that runs up to NUM_STAGES row blocks ahead, and a consumer partition that
reduces, normalizes and stores.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier

from . import norm_math, rowio
from .hopper import REGS_PER_SM, SMEM_LIMIT, dtype_name, kernel_spec
from .igemm.ring import ws_ring_invalidate
from .pipelined import (TRACE_CTAS, TRACE_ITERS, PipeConfig, _load_block, _load_params, check_ring, globaltimer,
                        norm_block, ring_buffers, ring_codegen_args, ring_hooks, ring_launch, grab_block,
                        block_counter)

# ---------------------------------------------------------------------------------------------
# Norms: the pattern-3 ring (pipelined.py) split into a 1-warp TMA producer and a consumer
# partition that reduces, normalizes and stores. Same slots, same blocks, same math (the consumer
# runs pipelined.norm_block); what changes is who waits: the producer waits EMPTY (a slot the
# consumer released) instead of the consumer issuing the refill itself after its own block, so
# loads run up to NUM_STAGES blocks ahead.
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
def _wsn_produce(x_desc, r_desc, xbufs, rbufs, empty_bars, full_bars, idx_smem, i, blk, n_blocks, t_ptr, pid,
                 HAS_RESIDUAL: gl.constexpr, NUM_CHUNKS: gl.constexpr, NUM_STAGES: gl.constexpr,
                 INSTRUMENT: gl.constexpr, DYNAMIC: gl.constexpr):
    """The producer's i-th block (row block blk): wait for its slot to be EMPTY, (DYNAMIC) write blk to
    idx_smem[slot], issue the boxes (completing on FULL); blk == n_blocks (the dynamic schedule's end)
    arrives on FULL with no bytes instead."""
    R: gl.constexpr = x_desc.block_type.shape[0]
    slot = i % NUM_STAGES
    if INSTRUMENT:
        t0 = globaltimer()
    mbarrier.wait(empty_bars.index(slot), ((i // NUM_STAGES) & 1) ^ 1)  # fresh barrier: passes
    if DYNAMIC:
        # every lane writes its own copy (no two threads write one word), then a warp barrier orders all 32
        # writes before the elected lane's FULL arrival (release) that the consumer acquires
        PL: gl.constexpr = gl.BlockedLayout([1], [32], [1], [0])
        idx_smem.index(slot).store(gl.full([32], 0, gl.int32, PL) + blk)
        gl.thread_barrier()
    if blk < n_blocks:
        _load_block(x_desc, r_desc, xbufs, rbufs, full_bars, slot, blk * R, True, NUM_CHUNKS, HAS_RESIDUAL)
    else:
        mbarrier.arrive(full_bars.index(slot))
    if INSTRUMENT:
        if (pid < TRACE_CTAS) & (i < TRACE_ITERS):
            t1 = globaltimer()
            base_t = (pid * TRACE_ITERS + i) * TRACE_FIELDS
            gl.store(t_ptr + base_t, t0)
            gl.store(t_ptr + base_t + 1, t1)


@gluon.jit
def _wsn_producer(x_desc, r_desc, xbufs, rbufs, empty_bars, full_bars, idx_smem, M, t_ptr, c_ptr,
                  HAS_RESIDUAL: gl.constexpr, NUM_CHUNKS: gl.constexpr, NUM_STAGES: gl.constexpr,
                  INSTRUMENT: gl.constexpr, DYNAMIC: gl.constexpr):
    """1 warp. Static: this CTA's blocks pid, pid + grid, ... DYNAMIC: the producer owns the schedule — per
    block it grabs the next one from the atomic counter (grab_block) and writes its index to idx_smem[slot]
    (32 lane copies) before the FULL arrival (release / acquire through the mbarrier); the first miss writes
    n_blocks there (the consumer's stop) and arrives with no bytes."""
    R: gl.constexpr = x_desc.block_type.shape[0]
    pid, nprog, n_my = _block_range(M, R)
    n_blocks = gl.cdiv(M, R)
    if not DYNAMIC:
        for i in range(n_my):
            _wsn_produce(x_desc, r_desc, xbufs, rbufs, empty_bars, full_bars, idx_smem, i, pid + i * nprog, n_blocks,
                         t_ptr, pid, HAS_RESIDUAL, NUM_CHUNKS, NUM_STAGES, INSTRUMENT, DYNAMIC)
    else:
        done = pid < 0
        i = 0
        while not done:
            blk, done = grab_block(c_ptr, done, n_blocks, nprog)
            _wsn_produce(x_desc, r_desc, xbufs, rbufs, empty_bars, full_bars, idx_smem, i, blk, n_blocks, t_ptr, pid,
                         HAS_RESIDUAL, NUM_CHUNKS, NUM_STAGES, INSTRUMENT, DYNAMIC)
            i += 1


@gluon.jit
def _wsn_consumer(xbufs, rbufs, wbufs, bbufs, empty_bars, full_bars, idx_smem, y_ptr, s_ptr, M, y_stride_v,
                  s_stride_v, eps, N_v, t_ptr, STATS: gl.constexpr, HAS_W: gl.constexpr, HAS_B: gl.constexpr,
                  HAS_RESIDUAL: gl.constexpr, NUM_CHUNKS: gl.constexpr, NUM_STAGES: gl.constexpr,
                  INSTRUMENT: gl.constexpr, DYNAMIC: gl.constexpr, num_warps: gl.constexpr):
    """num_warps warps. Static: this CTA's blocks in order. DYNAMIC: each block's index comes with its FULL
    phase (idx_smem[slot]); n_blocks there ends the loop."""
    R: gl.constexpr = xbufs.shape[1]
    CHUNK: gl.constexpr = xbufs.shape[2]
    dtype: gl.constexpr = xbufs.dtype
    VEC: gl.constexpr = 128 // dtype.primitive_bitwidth
    gl.static_assert(CHUNK == VEC * 32 * num_warps, "CHUNK must be one register tile of the consumer")
    L: gl.constexpr = gl.BlockedLayout([1, VEC], [1, 32], [1, num_warps], [1, 0])
    N = N_v * VEC
    y_stride = y_stride_v * VEC
    s_stride = s_stride_v * VEC
    pid, nprog, n_my = _block_range(M, R)
    n_blocks = gl.cdiv(M, R)
    rows0 = gl.arange(0, R, layout=gl.SliceLayout(1, L))
    cols0 = gl.arange(0, CHUNK, layout=gl.SliceLayout(0, L))
    if not DYNAMIC:
        for i in range(n_my):
            _wsn_consume(xbufs, rbufs, wbufs, bbufs, empty_bars, full_bars, idx_smem, i, pid + i * nprog, n_blocks, M,
                         N, y_ptr, y_stride, s_ptr, s_stride, eps, rows0, cols0, t_ptr, pid, STATS, HAS_W, HAS_B,
                         HAS_RESIDUAL, NUM_CHUNKS, NUM_STAGES, INSTRUMENT, DYNAMIC, num_warps, L)
    else:
        i = 0
        go = pid >= 0
        while go:
            blk = _wsn_consume(xbufs, rbufs, wbufs, bbufs, empty_bars, full_bars, idx_smem, i, 0, n_blocks, M, N,
                               y_ptr, y_stride, s_ptr, s_stride, eps, rows0, cols0, t_ptr, pid, STATS, HAS_W, HAS_B,
                               HAS_RESIDUAL, NUM_CHUNKS, NUM_STAGES, INSTRUMENT, DYNAMIC, num_warps, L)
            go = blk < n_blocks
            i += 1


@gluon.jit
def _wsn_consume(xbufs, rbufs, wbufs, bbufs, empty_bars, full_bars, idx_smem, i, blk, n_blocks, M, N, y_ptr, y_stride,
                 s_ptr, s_stride, eps, rows0, cols0, t_ptr, pid, STATS: gl.constexpr, HAS_W: gl.constexpr,
                 HAS_B: gl.constexpr, HAS_RESIDUAL: gl.constexpr, NUM_CHUNKS: gl.constexpr, NUM_STAGES: gl.constexpr,
                 INSTRUMENT: gl.constexpr, DYNAMIC: gl.constexpr, num_warps: gl.constexpr, L: gl.constexpr):
    """The consumer's i-th block: wait FULL, (DYNAMIC) read its row block from idx_smem[slot], normalize it
    (none at the end marker n_blocks), release the slot. Returns the block."""
    R: gl.constexpr = xbufs.shape[1]
    slot = i % NUM_STAGES
    if INSTRUMENT:
        t2 = globaltimer()
    mbarrier.wait(full_bars.index(slot), (i // NUM_STAGES) & 1)
    if DYNAMIC:
        IL: gl.constexpr = gl.BlockedLayout([1], [32], [num_warps], [0])
        blk = gl.max(idx_smem.index(slot).load(IL), axis=0)
    if INSTRUMENT:
        t3 = globaltimer()
    if blk < n_blocks:
        norm_block(xbufs, rbufs, wbufs, bbufs, slot * NUM_CHUNKS, blk * R, M, N, y_ptr, y_stride, s_ptr, s_stride,
                   eps, rows0, cols0, STATS, HAS_W, HAS_B, HAS_RESIDUAL, NUM_CHUNKS, L)
    # every read of the slot is done (the values are in registers): release it to the producer.
    # A residual op wrote s into it (generic proxy) -> fence before the producer's TMA write.
    if HAS_RESIDUAL:
        fence_async_shared()
    mbarrier.arrive(empty_bars.index(slot))
    if INSTRUMENT:
        if (pid < TRACE_CTAS) & (i < TRACE_ITERS) & (blk < n_blocks):
            t4 = globaltimer()
            base_t = (pid * TRACE_ITERS + i) * TRACE_FIELDS
            gl.store(t_ptr + base_t + 2, t2)
            gl.store(t_ptr + base_t + 3, t3)
            gl.store(t_ptr + base_t + 4, t4)
    return blk


@gluon.jit(do_not_specialize=["M", "eps"])
def ws_norm_kernel(x_desc, r_desc, w_desc, b_desc, y_ptr, s_ptr, M, y_stride_v, s_stride_v, eps, N_v, t_ptr, c_ptr,
                   STATS: gl.constexpr, HAS_W: gl.constexpr, HAS_B: gl.constexpr, HAS_RESIDUAL: gl.constexpr,
                   NUM_CHUNKS: gl.constexpr, NUM_STAGES: gl.constexpr, INSTRUMENT: gl.constexpr,
                   DYNAMIC: gl.constexpr, PRODUCER_REGS: gl.constexpr, num_warps: gl.constexpr):
    """pipelined_norm_kernel's arguments (absent operands None), split into partitions."""
    # every buffer and barrier is allocated (and the weights loaded) before the fork
    xbufs, rbufs, wbufs, bbufs = ring_buffers(x_desc, NUM_CHUNKS, NUM_STAGES, HAS_W, HAS_B, HAS_RESIDUAL)
    empty_bars = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    full_bars = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    wbar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    # the dynamic schedule's block index per ring slot (producer -> consumer)
    idx_smem = gl.allocate_shared_memory(gl.int32, [NUM_STAGES if DYNAMIC else 1, 32],
                                         gl.SwizzledSharedLayout(1, 1, 1, order=[0]))
    for i in gl.static_range(NUM_STAGES):
        mbarrier.init(empty_bars.index(i), count=1)
        mbarrier.init(full_bars.index(i), count=1)
    mbarrier.init(wbar, count=1)
    _load_params(w_desc, b_desc, wbufs, bbufs, wbar, NUM_CHUNKS, HAS_W, HAS_B)
    if HAS_W:
        mbarrier.wait(wbar, 0)
    gl.warp_specialize([
        (_wsn_consumer, (xbufs, rbufs, wbufs, bbufs, empty_bars, full_bars, idx_smem, y_ptr, s_ptr, M, y_stride_v,
                         s_stride_v, eps, N_v, t_ptr, STATS, HAS_W, HAS_B, HAS_RESIDUAL, NUM_CHUNKS, NUM_STAGES,
                         INSTRUMENT, DYNAMIC, num_warps)),
        (_wsn_producer, (x_desc, r_desc, xbufs, rbufs, empty_bars, full_bars, idx_smem, M, t_ptr, c_ptr, HAS_RESIDUAL,
                         NUM_CHUNKS, NUM_STAGES, INSTRUMENT, DYNAMIC)),
    ], [1], [PRODUCER_REGS])
    ws_ring_invalidate(empty_bars, full_bars, NUM_STAGES)
    mbarrier.invalidate(wbar)


@dataclass(frozen=True)
class WsNormConfig:
    """Knobs of the warp-specialized norm: the pattern-3 ring (PipeConfig's) plus the partition
    split. The consumer is the default partition (num_warps warps, a multiple of 4); the producer is
    one warp, which still occupies a whole warpgroup of the register file (4 warps). Methods take
    op: an OpSpec, its RowNorm or an op name (rowio.resolve)."""
    num_warps: int  # consumer warps: CHUNK = VEC x 32 x num_warps
    rows: int
    num_stages: int
    ctas_per_sm: int
    producer_regs: int = 40  # 24 (the setmaxnreg minimum) spilled in the add_rms_norm producer (2 descriptors)
    schedule: str = "static"  # "dynamic": the producer takes row blocks from an atomic counter (grab_block)

    def threads(self) -> int:
        return 32 * (self.num_warps + 4)

    def maxnreg(self) -> int | None:
        """Launch register cap so that ctas_per_sm CTAs fit the register file (None: 1 CTA/SM)."""
        if self.ctas_per_sm <= 1:
            return None
        return min(255, REGS_PER_SM // (self.ctas_per_sm * self.threads()) // 8 * 8)

    def as_pipe(self) -> PipeConfig:
        return PipeConfig(self.num_warps, self.rows, self.num_stages, self.ctas_per_sm, schedule=self.schedule)

    def smem_bytes(self, op, N: int, dtype: str) -> int:
        idx = 128 * self.num_stages - 4 * self.num_stages if self.schedule == "dynamic" else 0  # 32 lane copies/slot
        return self.as_pipe().smem_bytes(op, N, dtype) + 8 * self.num_stages + idx  # + the EMPTY barriers

    def validate(self, op, N: int, dtype: str) -> "WsNormConfig":
        _, label = rowio.resolve(op)
        if self.num_warps % 4:
            raise ValueError(f"WsNormConfig.num_warps must be a multiple of 4 (the consumer is the default "
                             f"partition of a warp-specialized kernel); got {self.num_warps}")
        if not 24 <= self.producer_regs <= 256 or self.producer_regs % 8:
            raise ValueError(f"WsNormConfig.producer_regs must be a multiple of 8 in 24..256; got {self.producer_regs}")
        from .pipelined import _dynamic
        _dynamic(self)  # the schedule's rules
        if self.smem_bytes(op, N, dtype) > SMEM_LIMIT:
            raise ValueError(f"{self} needs {self.smem_bytes(op, N, dtype)} B of shared memory (limit {SMEM_LIMIT}) "
                             f"for N={N} {dtype} {label}")
        return self

    @classmethod
    def heuristic(cls, op, N: int, dtype: str, M: int | None = None, **overrides) -> "WsNormConfig":
        """Pattern 3's ring for this row (PipeConfig.heuristic), with >= 4 consumer warps."""
        row, _ = rowio.resolve(op)
        known = {f.name for f in dataclasses.fields(cls)}
        pipe_over = {k: v for k, v in overrides.items() if k in ("rows", "num_stages", "ctas_per_sm")}
        base = PipeConfig.heuristic(row, N, dtype, M, **pipe_over)
        nw = max(4, overrides.get("num_warps", base.num_warps))
        if nw != base.num_warps:
            base = PipeConfig.heuristic(row, N, dtype, M, **{**pipe_over, "num_warps": nw})
        # one stage deeper than pattern 3: the 04 norm-sweep (run 20261129T182538Z) found 3-4 stages
        # 10% faster than 2 on average, 4 best at the large shapes; the producer's register budget
        # (24 / 40 / 56) and 4 vs 8 consumer warps moved the mean by < 2%.
        # the schedule (03 'schedule' study, runs 20261201T180134Z and 182307Z, 6 shapes M >= 4096, bf16): the dynamic
        # (atomic-counter) schedule ran the RMS rows (rms_norm, add_rms_norm) 7-13% faster at every shape
        # (rms 32768 x 8192: 4141 vs 3720 GB/s; add_rms 16384 x 4096: 4038 vs 3577), reaching the one-row
        # kernels; LayerNorm lost at 5 of 6 shapes. It stays an opt-in knob (schedule="dynamic") for now: its
        # counter lives per (device, stream) and must exist before a CUDA-graph capture (block_counter), which
        # a default must not ask of every caller; the next step is a counter that graph capture allocates itself.
        sched = "static"
        cfg = cls(num_warps=nw, rows=base.rows, num_stages=base.num_stages + 1, ctas_per_sm=base.ctas_per_sm,
                  schedule=sched)
        cfg = dataclasses.replace(cfg, **{k: v for k, v in overrides.items() if k in known})
        if "ctas_per_sm" not in overrides:  # keep >= 96 registers per thread (add_rms_norm spilled at 80)
            while cfg.ctas_per_sm > 1 and (cfg.maxnreg() < 96 or not cfg.as_pipe().fits_sm(row, N, dtype)):
                cfg = dataclasses.replace(cfg, ctas_per_sm=cfg.ctas_per_sm - 1)
        if "num_stages" not in overrides:
            while cfg.num_stages > 2 and cfg.smem_bytes(row, N, dtype) > SMEM_LIMIT:
                cfg = dataclasses.replace(cfg, num_stages=cfg.num_stages - 1)
        return cfg.validate(op, N, dtype)


def check_norm(op, x, *rest) -> WsNormConfig | None:
    return check_ring("gluon-ws", WsNormConfig.heuristic, op, x, *rest)


def launch_norm(op, x, residual, weight, bias, eps: float, out=None, config: WsNormConfig | None = None,
                trace=None):
    """Run gluon-ws for op (an OpSpec, its RowNorm or an op name). trace: an int64 CUDA tensor of
    TRACE_CTAS * TRACE_ITERS * TRACE_FIELDS elements -> an INSTRUMENT build writes its
    per-partition %globaltimer stamps there."""
    row, _ = rowio.resolve(op)
    cfg = check_norm(row, *rowio.operands(row, x, residual, weight, bias))  # the rules, whatever the config
    cfg = config or cfg
    if cfg is None:
        from . import chunked
        return chunked.launch(row, x, residual, weight, bias, eps, out=out)
    cfg = cfg.validate(row, x.shape[-1], dtype_name(x))
    res, grid, args, ce = ring_launch(row, x, residual, weight, bias, eps, out, cfg, trace)
    extra = {"maxnreg": cfg.maxnreg()} if cfg.maxnreg() else {}
    ws_norm_kernel[grid](*args, **ce, PRODUCER_REGS=cfg.producer_regs, **extra)
    return res


def norm_codegen_spec(op, N: int, dtype: str, cfg: WsNormConfig | None = None, instrument: bool = False):
    """compile_sm90 arguments reproducing what launch_norm() JITs for contiguous rows of N (CPU codegen)."""
    row, _ = rowio.resolve(op)
    cfg = cfg or WsNormConfig.heuristic(row, N, dtype)
    args, ce = ring_codegen_args(row, N, dtype, cfg, instrument)
    extra = {"maxnreg": cfg.maxnreg()} if cfg.maxnreg() else {}
    return kernel_spec(ws_norm_kernel, args, dict(ce, PRODUCER_REGS=cfg.producer_regs), num_warps=cfg.num_warps,
                       **extra)


# registration: gluon-ws for every row norm

NORM_KNOBS = {"producer_regs": (24, 40, 56), "num_warps": (4, 8), "num_stages": (2, 3, 4), "rows": (1, 2, 4),
              "ctas_per_sm": (1, 2, 3, 4), "schedule": ("static", "dynamic")}  # the 04 norm-sweep's axes (experiments.WarpSpecializedPlan) + the ring's


configure_norm, codegen_norm = ring_hooks(WsNormConfig.heuristic, norm_codegen_spec)

rowio.register_row_variants(
    "gluon-ws", pattern="warp-specialized", launch=launch_norm, check=check_norm, configure=configure_norm,
    codegen=codegen_norm, knobs=NORM_KNOBS, roots=(ws_norm_kernel, WsNormConfig, block_counter, norm_math.STATS_HOOKS),
    description="persistent ring split into a 1-warp TMA producer (EMPTY waits) and a consumer partition "
                "(FULL waits, reduce, normalize, store)")
