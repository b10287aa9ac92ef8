"""Pattern 4 — warp specialization (variant "gluon-ws"), GEMM first.

STATUS (2026-11-29): the persistent warp-specialized GEMM compiles for sm_90 on the CPU
(tests/test_warp_specialized.py); never run on a GPU, not registered as a variant yet.

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

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                              warpgroup_mma_wait)

from .gemm import GemmConfig, _tile_coords, _tile_space, prepare


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
