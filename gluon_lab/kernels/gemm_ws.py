"""Pattern 4's GEMM (variant "gluon-ws" of matmul): the implicit-GEMM template's warp-specialized instance.

Measured on the H200 (notebooks 03 and 04; tests/test_gemm_gpu.py). compute-sanitizer racecheck reports
one hazard at kernel entry in every warp_specialize kernel (synccheck clean, outputs correct): see
notebook 04. The pieces come from the template (gluon_lab/kernels/igemm): the ring (igemm.ring), the
producers (igemm.producers: the 1-warp TMA producer, or the cp.async warpgroup for rows that are not
128-byte aligned), the schedules (igemm.schedule: persistent, split-K, last-wave split, stream-K) and
the epilogues (igemm.epilogues: TMA store, fp32 partials, the deterministic fixups). This module holds
the two consumer schedules — cooperative (ws_gemm_kernel) and ping-pong (ws_pingpong_gemm_kernel,
GemmConfig(pingpong=True)) — and the launcher that picks producer x schedule from a GemmConfig.

gl.warp_specialize splits the CTA into partitions with their own warps and register budgets:
* worker "producer": 1 warp, a small register budget (setmaxnreg). For every k-step of every unit
  this CTA owns it waits for its ring slot to be EMPTY, expects the bytes and issues the A/B TMA
  boxes, which complete on FULL. It never waits for the math, so it runs ahead by NUM_STAGES steps.
* default "consumer": num_warps warps (8 = two warpgroups, cooperative on one BM = 128 tile, 64 rows
  each). Waits FULL, issues an async wgmma, and after warpgroup_mma_wait(1) releases the slot of the
  previous step (its MMA has retired) by arriving on EMPTY. Epilogue: accumulator -> smem -> TMA
  store; the store of tile t is waited for only before tile t+1's epilogue reuses the buffer.
Barrier protocol: igemm.ring.
"""
from __future__ import annotations

import dataclasses

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                              warpgroup_mma_wait)

from . import gemm
from .gemm import GemmConfig, prepare
from .hopper import cdiv, descriptor, desc_type, kernel_spec, num_sms, short_dtype
from .igemm import schedule
from .igemm.epilogues import REDUCE_BLOCK, splitk_reduce_kernel, store_partial, store_tile, streamk_reduce_kernel
from .igemm.producers import CP_WARPS, cp_layout, cp_producer, tma_producer
from .igemm.ring import ws_ring_barriers, ws_ring_invalidate
from .igemm.schedule import streamk_max_pieces, tile_coords, tile_space, unit, unit_space
from .igemm.trace import UNIT_TRACE_FIELDS, unit_stamps
from .pipelined import globaltimer


@gluon.jit
def _ws_consumer(c_desc, work, a_bufs, b_bufs, c_smem, w_smem, empty_bars, full_bars, M, N, K, FULL_TILES,
                 t_ptr, NUM_STAGES: gl.constexpr, GROUP_M: gl.constexpr, SPLIT_K: gl.constexpr,
                 INSTRUMENT: gl.constexpr, SWAP_AB: gl.constexpr, num_warps: gl.constexpr, CP_ASYNC: gl.constexpr = False,
                 STREAM_K: gl.constexpr = False):
    """SPLIT_K > 1: a whole tile (slice 0) is stored to C; K-slice s >= 1 of split tile t (= tile -
    FULL_TILES) goes as fp32 partials, through w_smem, to rows ((s - 1) * split_tiles + t) * BM of the
    workspace descriptor `work` [SPLIT_K * split_tiles * BM, BN]: one BM x BN block per (slice, split tile), so the
    workspace holds the split tiles only (an edge tile's rows past M are written and never read).
    SWAP_AB: the MMA computes the tile's transpose, C^T = B^T A^T (B's [BK, BN] box and A's [BM, BK] box
    read transposed from the same ring), so BN fills the wgmma M side (64 rows per warpgroup) and a small
    BM (16, 32) is the wgmma N: decode-like M <= 64 does not pad to a 64-row tile. The epilogue
    transposes the accumulator back before its TMA store.
    STREAM_K: a piece that is not a whole tile (sl >= 1) stores its fp32 partial to workspace block sl - 1 (`work`
    is the pointer of the fp32 workspace [(nprog + stream-K tiles) * BM, BN], store_partial);
    streamk_reduce_kernel sums each split tile's pieces."""
    BM: gl.constexpr = c_desc.block_type.shape[0]
    BN: gl.constexpr = c_desc.block_type.shape[1]
    BK: gl.constexpr = a_bufs.shape[2]
    ACC_M: gl.constexpr = BN if SWAP_AB else BM
    ACC_N: gl.constexpr = BM if SWAP_AB else BN
    start, nprog, num_pid_m, num_pid_n, k_tiles, my_units = unit_space(M, N, K, FULL_TILES, BM, BN, BK,
                                                                              SPLIT_K, STREAM_K)
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                         instr_shape=[16, ACC_N, 16])
    g = 0
    split_tiles = num_pid_m * num_pid_n - FULL_TILES
    for i in range(my_units):
        pid_m, pid_n, k0, k1, sl, tile = unit(i, start, nprog, k_tiles, num_pid_m, num_pid_n, FULL_TILES, GROUP_M,
                                               SPLIT_K, STREAM_K)
        if INSTRUMENT:
            t0 = globaltimer()
        acc = gl.zeros([ACC_M, ACC_N], gl.float32, acc_layout)
        for kk in range(k0, k1):
            slot = g % NUM_STAGES
            mbarrier.wait(full_bars.index(slot), (g // NUM_STAGES) & 1)
            if CP_ASYNC:  # cp.async wrote the slot through the generic proxy; wgmma reads through the async one
                fence_async_shared()
            if SWAP_AB:
                acc = warpgroup_mma(b_bufs.index(slot).permute((1, 0)), a_bufs.index(slot).permute((1, 0)), acc,
                                    is_async=True)
            else:
                acc = warpgroup_mma(a_bufs.index(slot), b_bufs.index(slot), acc, is_async=True)
            acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc, ))
            if kk > k0:  # the MMA of step g-1 has retired: its slot goes back to the producer
                mbarrier.arrive(empty_bars.index((g - 1) % NUM_STAGES))
            g += 1
        if INSTRUMENT:
            t1 = globaltimer()
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
        mbarrier.arrive(empty_bars.index((g - 1) % NUM_STAGES))
        if STREAM_K:
            if sl > 0:  # a stream-K piece: its fp32 partial straight from registers to workspace block sl - 1
                store_partial(work, acc, sl, acc_layout, BM, BN, ACC_M, ACC_N, SWAP_AB)
            else:
                tma.store_wait(0)  # the previous tile's store has finished reading its staging buffer
                store_tile(c_desc, c_smem, acc, pid_m, pid_n, SWAP_AB)
        else:
            tma.store_wait(0)  # the previous tile's store has finished reading its staging buffer
            if SPLIT_K > 1:
                if sl > 0:  # a K-slice: fp32 partials into its slice of the workspace
                    if SWAP_AB:
                        out = gl.permute(acc, (1, 0))
                    else:
                        out = acc
                    w_smem.store(out)
                    fence_async_shared()
                    tma.async_copy_shared_to_global(work, [((sl - 1) * split_tiles + tile - FULL_TILES) * BM, 0],
                                                    w_smem)
                else:
                    store_tile(c_desc, c_smem, acc, pid_m, pid_n, SWAP_AB)
            else:
                store_tile(c_desc, c_smem, acc, pid_m, pid_n, SWAP_AB)
        if INSTRUMENT:
            unit_stamps(t_ptr, start, i, 1, t0, t1)  # tag: consumer warpgroup 0 + 1
    tma.store_wait(0)


@gluon.jit(do_not_specialize=["FULL_TILES"])  # one compile for every split point
def ws_gemm_kernel(a_desc, b_desc, c_desc, work, M, N, K, FULL_TILES, t_ptr, a_ptr, b_ptr, stride_am, stride_bk,
                   NUM_STAGES: gl.constexpr, GROUP_M: gl.constexpr, PRODUCER_REGS: gl.constexpr, SPLIT_K: gl.constexpr,
                   INSTRUMENT: gl.constexpr, SWAP_AB: gl.constexpr, CP_ASYNC: gl.constexpr, num_warps: gl.constexpr,
                   STREAM_K: gl.constexpr = False):
    """SPLIT_K > 1: `work` is the TMA descriptor of the K-slices' fp32 workspace, STREAM_K its pointer (None
    otherwise); tiles FULL_TILES and
    later are split (unit_space). CP_ASYNC: the operands are read by cp_producer (a warpgroup of cp.async,
    for rows that are not 128-byte aligned) from a_ptr / b_ptr and their row strides; otherwise by the
    1-warp TMA producer from a_desc / b_desc (the pointers are None)."""
    BM: gl.constexpr = a_desc.block_type.shape[0]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    BN: gl.constexpr = b_desc.block_type.shape[1]
    dtype: gl.constexpr = a_desc.dtype
    # every buffer and barrier is allocated before the fork and handed to the partitions
    a_bufs = gl.allocate_shared_memory(dtype, [NUM_STAGES, BM, BK], a_desc.layout)
    b_bufs = gl.allocate_shared_memory(dtype, [NUM_STAGES, BK, BN], b_desc.layout)
    c_smem = gl.allocate_shared_memory(c_desc.dtype, [BM, BN], c_desc.layout)
    if SPLIT_K > 1:
        w_smem = gl.allocate_shared_memory(work.dtype, [BM, BN], work.layout)
    else:
        w_smem = c_smem  # not used
    FULL_COUNT: gl.constexpr = CP_WARPS * 32 if CP_ASYNC else 1  # cp.async: every producer thread arrives
    empty_bars, full_bars = ws_ring_barriers(NUM_STAGES, FULL_COUNT)
    if CP_ASYNC:
        gl.warp_specialize([
            (_ws_consumer, (c_desc, work, a_bufs, b_bufs, c_smem, w_smem, empty_bars, full_bars, M, N, K,
                            FULL_TILES, t_ptr, NUM_STAGES, GROUP_M, SPLIT_K, INSTRUMENT, SWAP_AB, num_warps, CP_ASYNC,
                            STREAM_K)),
            (cp_producer, (a_ptr, b_ptr, stride_am, stride_bk, a_bufs, b_bufs, empty_bars, full_bars, M, N, K,
                            NUM_STAGES, GROUP_M, SPLIT_K, FULL_TILES, STREAM_K)),
        ], [CP_WARPS], [PRODUCER_REGS])
    else:
        gl.warp_specialize([
            (_ws_consumer, (c_desc, work, a_bufs, b_bufs, c_smem, w_smem, empty_bars, full_bars, M, N, K,
                            FULL_TILES, t_ptr, NUM_STAGES, GROUP_M, SPLIT_K, INSTRUMENT, SWAP_AB, num_warps, CP_ASYNC,
                            STREAM_K)),
            (tma_producer, (a_desc, b_desc, a_bufs, b_bufs, empty_bars, full_bars, M, N, K, NUM_STAGES, GROUP_M,
                            SPLIT_K, FULL_TILES, STREAM_K)),
        ], [1], [PRODUCER_REGS])
    ws_ring_invalidate(empty_bars, full_bars, NUM_STAGES)


# ---------------------------------------------------------------------------------------------
# Ping-pong consumers (CUTLASS's KernelTmaWarpSpecializedPingpong, QuACK's pingpong=True): two
# consumer warpgroups, each holding a whole BM x BN accumulator, take alternate tiles of the CTA's
# list (WG 0: local tiles 0, 2, 4, ...; WG 1: 1, 3, 5, ...). The producer is the cooperative one: it
# loads every tile's k-steps in list order into the one ring, so the ring is consumed in the same
# order, tile after tile. The ORDER barrier pair makes the two mainloops take turns: WG w waits
# order[w] before its mainloop of tile j > 0 and, once it has waited on every FULL slot of its tile
# and issued the last MMA, arrives on order[1 - w]. So one warpgroup's epilogue (wait for its MMAs,
# registers -> smem -> TMA store) runs while the other's mainloop keeps the tensor cores busy.
# Phases: order[w] completes once per mainloop of the other WG, and before tile j the other WG has
# finished (j + 1) // 2 (w = 1) or j // 2 (w = 0) of them, i.e. the wait is on phase ((j - 1) // 2) & 1.
# The turn-taking is also what keeps the FULL waits exact: a warpgroup starts waiting on tile j's
# slots only after every k-step of tile j - 1 has been waited on, so no slot can be two phases ahead
# of the parity a waiter asks for. Each warpgroup stages its own C tile (two epilogue buffers).

@gluon.jit
def _pp_consumer(c_desc, a_bufs, b_bufs, c_smem, empty_bars, full_bars, order_bars, M, N, K, t_ptr,
                 NUM_STAGES: gl.constexpr, GROUP_M: gl.constexpr, WG: gl.constexpr, INSTRUMENT: gl.constexpr):
    BM: gl.constexpr = c_desc.block_type.shape[0]
    BN: gl.constexpr = c_desc.block_type.shape[1]
    BK: gl.constexpr = a_bufs.shape[2]
    start, nprog, num_pid_m, num_pid_n, k_tiles, my_tiles = tile_space(M, N, K, BM, BN, BK)
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[gl.num_warps(), 1],
                                                         instr_shape=[16, BN, 16])
    my_c = c_smem.index(WG)
    for j in range(WG, my_tiles, 2):
        pid_m, pid_n = tile_coords(start + j * nprog, num_pid_m, num_pid_n, GROUP_M)
        if j > 0:  # the other warpgroup's mainloop of tile j - 1 has issued all its MMAs
            mbarrier.wait(order_bars.index(WG), ((j - 1) // 2) & 1)
        if INSTRUMENT:
            t0 = globaltimer()
        g = j * k_tiles  # the ring position of this tile's first k-step
        acc = gl.zeros([BM, BN], gl.float32, acc_layout)
        for kk in range(k_tiles):
            slot = g % NUM_STAGES
            mbarrier.wait(full_bars.index(slot), (g // NUM_STAGES) & 1)
            acc = warpgroup_mma(a_bufs.index(slot), b_bufs.index(slot), acc, is_async=True)
            acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc, ))
            if kk > 0:  # the MMA of step g-1 has retired: its slot goes back to the producer
                mbarrier.arrive(empty_bars.index((g - 1) % NUM_STAGES))
            g += 1
        mbarrier.arrive(order_bars.index(1 - WG))  # the other warpgroup's mainloop may start
        if INSTRUMENT:
            t1 = globaltimer()
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
        mbarrier.arrive(empty_bars.index((g - 1) % NUM_STAGES))
        tma.store_wait(0)  # this warpgroup's previous store has finished reading its C buffer
        my_c.store(acc.to(c_desc.dtype))
        fence_async_shared()
        tma.async_copy_shared_to_global(c_desc, [pid_m * BM, pid_n * BN], my_c)
        if INSTRUMENT:
            unit_stamps(t_ptr, start, j, WG + 1, t0, t1)
    tma.store_wait(0)


@gluon.jit
def ws_pingpong_gemm_kernel(a_desc, b_desc, c_desc, M, N, K, t_ptr, NUM_STAGES: gl.constexpr, GROUP_M: gl.constexpr,
                            PRODUCER_REGS: gl.constexpr, CONSUMER_REGS: gl.constexpr, INSTRUMENT: gl.constexpr,
                            num_warps: gl.constexpr):
    """num_warps = 4: the default partition is consumer warpgroup 0; workers: consumer warpgroup 1
    (4 warps, CONSUMER_REGS) and the 1-warp TMA producer (PRODUCER_REGS)."""
    BM: gl.constexpr = a_desc.block_type.shape[0]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    BN: gl.constexpr = b_desc.block_type.shape[1]
    dtype: gl.constexpr = a_desc.dtype
    gl.static_assert(num_warps == 4, "ping-pong: one warpgroup per consumer")
    a_bufs = gl.allocate_shared_memory(dtype, [NUM_STAGES, BM, BK], a_desc.layout)
    b_bufs = gl.allocate_shared_memory(dtype, [NUM_STAGES, BK, BN], b_desc.layout)
    c_smem = gl.allocate_shared_memory(c_desc.dtype, [2, BM, BN], c_desc.layout)
    empty_bars = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    full_bars = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    order_bars = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(NUM_STAGES):
        mbarrier.init(empty_bars.index(i), count=1)
        mbarrier.init(full_bars.index(i), count=1)
    for i in gl.static_range(2):
        mbarrier.init(order_bars.index(i), count=1)
    gl.warp_specialize([
        (_pp_consumer, (c_desc, a_bufs, b_bufs, c_smem, empty_bars, full_bars, order_bars, M, N, K, t_ptr,
                        NUM_STAGES, GROUP_M, 0, INSTRUMENT)),
        (_pp_consumer, (c_desc, a_bufs, b_bufs, c_smem, empty_bars, full_bars, order_bars, M, N, K, t_ptr,
                        NUM_STAGES, GROUP_M, 1, INSTRUMENT)),
        (tma_producer, (a_desc, b_desc, a_bufs, b_bufs, empty_bars, full_bars, M, N, K, NUM_STAGES, GROUP_M)),
    ], [4, 1], [CONSUMER_REGS, PRODUCER_REGS])
    ws_ring_invalidate(empty_bars, full_bars, NUM_STAGES)
    for i in gl.static_range(2):
        mbarrier.invalidate(order_bars.index(i))


def _kernel_args(cfg: GemmConfig):
    if cfg.pingpong:
        # consumer warpgroup 1's budget: what warpgroup 0 gets from the 12-warp launch (GemmConfig.consumer_regs)
        return ws_pingpong_gemm_kernel, {"PRODUCER_REGS": cfg.producer_regs, "CONSUMER_REGS": cfg.consumer_regs()}
    return ws_gemm_kernel, {"PRODUCER_REGS": cfg.producer_regs, "SPLIT_K": cfg.split_k, "SWAP_AB": cfg.swap_ab,
                            "CP_ASYNC": cfg.cp_async, "STREAM_K": cfg.stream_k > 0}


def splitk_plan(cfg: GemmConfig, M: int, N: int, sms: int) -> tuple[int, int]:
    """schedule.splitk_plan of the GEMM's tiles: (FULL_TILES, units)."""
    return schedule.splitk_plan(cdiv(M, cfg.BM) * cdiv(N, cfg.BN), cfg.split_k, cfg.split_last_wave, sms)


def streamk_plan(cfg: GemmConfig, M: int, N: int, K: int, sms: int) -> tuple[int, int, int]:
    """schedule.streamk_plan of the GEMM's tiles over GemmConfig(stream_k=w)'s last w waves:
    (FULL_TILES, grid, stream-K tiles)."""
    return schedule.streamk_plan(cdiv(M, cfg.BM) * cdiv(N, cfg.BN), cdiv(K, cfg.BK), cfg.stream_k, sms)


def launch(a, b, out=None, config: GemmConfig | None = None, trace=None):
    """trace: an int64 tensor of TRACE_CTAS * TRACE_ITERS * UNIT_TRACE_FIELDS elements -> the INSTRUMENT
    build writes its per-tile stamps there (notebook 04's consumer-schedule timeline)."""
    if config is not None and config.cp_async and a.shape[-1] % 8:  # (the heuristic never picks cp_async)
        # its K mask is per 16-byte vector: a K tail inside a vector would read past K (a view's padding)
        raise ValueError(f"GemmConfig(cp_async=True) needs K to be a multiple of 8 (16-byte copies along K); "
                         f"got K={a.shape[-1]}")
    c, descs, M, N, K, cfg, grid = prepare(a, b, out, config, ws=True)
    full, work, wdesc = 0, None, None
    if cfg.split_k > 1:
        import torch
        if cfg.split_k > cdiv(K, cfg.BK):
            raise ValueError(f"GemmConfig.split_k={cfg.split_k} needs at least one BK={cfg.BK} k-step per slice: "
                             f"K={K} has {cdiv(K, cfg.BK)}")
        sms = num_sms(a.device)
        full, units = splitk_plan(cfg, M, N, sms)
        split_tiles = cdiv(M, cfg.BM) * cdiv(N, cfg.BN) - full
        if split_tiles == 0:  # the tiles fill whole waves: nothing to split
            cfg, full = dataclasses.replace(cfg, split_k=1, split_last_wave=False), 0
        else:
            work = torch.empty((cfg.split_k * split_tiles * cfg.BM, cfg.BN), dtype=torch.float32, device=a.device)
            wdesc = descriptor(work, [cfg.BM, cfg.BN],
                               gl.NVMMASharedLayout.get_default_for([cfg.BM, cfg.BN], gl.float32))
            grid = (max(1, min(units, sms)), )
    if cfg.stream_k:
        import torch
        full, g, sk_tiles = streamk_plan(cfg, M, N, K, num_sms(a.device))
        work = torch.empty(((g + sk_tiles) * cfg.BM, cfg.BN), dtype=torch.float32, device=a.device)
        wdesc = work  # the consumer stores the partials from registers: a pointer, not a TMA descriptor
        grid = (g, )
    kernel, extra = _kernel_args(cfg)
    if kernel is ws_gemm_kernel:
        ptrs = (a, b, a.stride(0), b.stride(0)) if cfg.cp_async else (None, None, None, None)
        kernel[grid](*descs, wdesc, M, N, K, full, trace, *ptrs, NUM_STAGES=cfg.num_stages, GROUP_M=cfg.group_m,
                     INSTRUMENT=trace is not None, num_warps=cfg.num_warps, **extra)
    else:
        kernel[grid](*descs, M, N, K, trace, NUM_STAGES=cfg.num_stages, GROUP_M=cfg.group_m,
                     INSTRUMENT=trace is not None, num_warps=cfg.num_warps, **extra)
    if cfg.split_k > 1:
        r = REDUCE_BLOCK
        blocks = (cfg.BM // r["BR"]) * cdiv(cfg.BN, r["BC"])
        splitk_reduce_kernel[(split_tiles, blocks)](work, c, M, N, c.stride(0), full, TM=cfg.BM, TN=cfg.BN,
                                                    GROUP_M=cfg.group_m, SPLIT_K=cfg.split_k, **r)
    if cfg.stream_k:
        r = REDUCE_BLOCK
        blocks = (cfg.BM // r["BR"]) * cdiv(cfg.BN, r["BC"])
        maxp = streamk_max_pieces(cdiv(K, cfg.BK), sk_tiles * cdiv(K, cfg.BK), g)
        streamk_reduce_kernel[(sk_tiles, blocks)](work, c, M, N, K, c.stride(0), full, g, TM=cfg.BM, TN=cfg.BN,
                                                  BK=cfg.BK, GROUP_M=cfg.group_m, MAX_PIECES=maxp, **r)
    return c


def codegen_spec(cfg: GemmConfig | None = None, dtype: str = "bfloat16", shape: dict | None = None,
                 producer_regs: int | None = None, instrument: bool = False):
    """compile_sm90 arguments reproducing what launch() JITs (shape: {"M", "N", "K"}, optional)."""
    cfg = (cfg or GemmConfig()).validate(dtype)
    if producer_regs:
        cfg = dataclasses.replace(cfg, producer_regs=producer_regs)
    args, ce = gemm.codegen_args(cfg, dtype, shape)
    kernel, extra = _kernel_args(cfg)
    args["t_ptr"] = "*i64" if instrument else None
    extra = dict(extra, INSTRUMENT=instrument)
    if kernel is ws_gemm_kernel:  # the split-K workspace (None without), FULL_TILES, the cp.async operands
        ptr, stride = (f"*{short_dtype(dtype)}", "i32") if cfg.cp_async else (None, None)
        args = dict(args, FULL_TILES="i32", work=None, a_ptr=ptr, b_ptr=ptr, stride_am=stride, stride_bk=stride)
        if cfg.stream_k:
            args["work"] = "*fp32"
        elif cfg.split_k > 1:
            args["work"] = desc_type("float32", [cfg.BM, cfg.BN],
                                       gl.NVMMASharedLayout.get_default_for([cfg.BM, cfg.BN], gl.float32))
    return kernel_spec(kernel, args, dict(ce, **extra), num_warps=cfg.num_warps)


gemm.register_matmul(
    "gluon-ws", pattern="warp-specialized", launch=launch, codegen_spec=codegen_spec,
    knobs={"BM": (128, ), "BN": (128, 256), "BK": (32, 64), "num_warps": (4, 8), "num_stages": (3, 4, 5),
           "producer_regs": (24, 40, 56, 88), "pingpong": (False, True), "split_k": (1, 2, 3, 4, 8),
           "stream_k": (0, 1, 2)},
    roots=(ws_gemm_kernel, ws_pingpong_gemm_kernel, _kernel_args, splitk_reduce_kernel, REDUCE_BLOCK, splitk_plan,
           cp_producer, cp_layout, streamk_reduce_kernel, streamk_plan, streamk_max_pieces, store_tile,
           store_partial, gemm.pad_copy_kernel, gemm.pad_rows),
    description="persistent GEMM: 1 producer warp (TMA, setmaxnreg) + consumer warpgroups (wgmma), empty/full ring",
    ws=True)

