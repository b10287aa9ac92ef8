"""Pattern 4 — warp specialization (variant "gluon-ws"): the persistent GEMM and the row norms.

GEMM and norms measured on the H200 (notebooks 03 and 04; tests/test_gemm_gpu.py,
tests/test_ws_norm_gpu.py). compute-sanitizer racecheck reports one hazard at kernel entry in every
warp_specialize kernel here (synccheck clean, outputs correct): see notebook 04. Two consumer
schedules: cooperative (ws_gemm_kernel) and ping-pong (ws_pingpong_gemm_kernel, GemmConfig(pingpong=True)).

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

import dataclasses
from dataclasses import dataclass

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (async_copy, fence_async_shared, mbarrier, tma,
                                                              warpgroup_mma, warpgroup_mma_wait)

from . import gemm, norm_math, rowio
from .gemm import GemmConfig, _tile_coords, _tile_space, prepare
from .hopper import (REGS_PER_SM, SMEM_LIMIT, cdiv, descriptor, desc_type, dtype_name, kernel_spec, num_sms,
                     short_dtype)
from .pipelined import (TRACE_CTAS, TRACE_ITERS, PipeConfig, _load_block, _load_params, check_ring, globaltimer,
                        norm_block, ring_buffers, ring_codegen_args, ring_hooks, ring_launch, grab_block,
                        block_counter)


@gluon.jit
def ws_ring_barriers(NUM_STAGES: gl.constexpr, FULL_COUNT: gl.constexpr):
    """The EMPTY / FULL barrier pair of every slot of a producer / consumer ring, allocated before the fork
    and initialized (EMPTY: one consumer arrival; FULL: FULL_COUNT arrivals, 1 for a TMA producer's expect):
    (empty_bars, full_bars), each [NUM_STAGES, 1]."""
    empty_bars = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    full_bars = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(NUM_STAGES):
        mbarrier.init(empty_bars.index(i), count=1)
        mbarrier.init(full_bars.index(i), count=FULL_COUNT)
    return empty_bars, full_bars


@gluon.jit
def ws_ring_invalidate(empty_bars, full_bars, NUM_STAGES: gl.constexpr):
    """After the partitions joined: invalidate the ring's barriers (ws_ring_barriers)."""
    for i in gl.static_range(NUM_STAGES):
        mbarrier.invalidate(empty_bars.index(i))
        mbarrier.invalidate(full_bars.index(i))


GEMM_TRACE_FIELDS: gl.constexpr = gl.constexpr(4)  # INSTRUMENT stamps per tile: consumer warpgroup, mainloop
#                   start (before the first FULL wait), last MMA issued, epilogue's TMA store issued


@gluon.jit
def _gemm_stamps(t_ptr, pid, i, wg, t0, t1):
    """Tile i of program pid (< TRACE_CTAS, i < TRACE_ITERS): [consumer warpgroup + 1, t0, t1, now]."""
    if (pid < TRACE_CTAS) & (i < TRACE_ITERS):
        t2 = globaltimer()
        base = (pid * TRACE_ITERS + i) * GEMM_TRACE_FIELDS
        gl.store(t_ptr + base, (t0 - t0) + wg + 1)  # + 1: a zero row is "not run" to record_stamps
        gl.store(t_ptr + base + 1, t0)
        gl.store(t_ptr + base + 2, t1)
        gl.store(t_ptr + base + 3, t2)


@gluon.jit
def _sk_range(c, S, nprog):
    """Stream-K: CTA c's share [a, b) of the S stream-K k-steps, balanced (q or q + 1 each, the first S % nprog
    CTAs one more), written without the product c * S (no int32 overflow on long work lists)."""
    q = S // nprog
    r = S % nprog
    a = c * q + gl.minimum(c, r)
    b = a + q + (c < r).to(gl.int32)
    return a, b


@gluon.jit
def _sk_owner(x, S, nprog):
    """Stream-K: the CTA whose share [a, b) (_sk_range) holds k-step x. With fewer k-steps than CTAs (q = 0, a
    whole-wave grid over a short stream-K list) every x < r = S: the branch dividing by q is not taken."""
    q = S // nprog
    r = S % nprog
    head = r * (q + 1)
    c = x // (q + 1)
    if x >= head:
        c = r + (x - head) // q
    return c


@gluon.jit
def _unit_space(M, N, K, FULL_TILES, BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, SPLIT_K: gl.constexpr,
                STREAM_K: gl.constexpr = False):
    """_tile_space over work units: tiles 0 .. FULL_TILES - 1 whole (data-parallel), then every later
    tile as SPLIT_K K-slices (FULL_TILES = 0: split-K on every tile; a multiple of the grid: only the
    last, partial wave is split, so its slices fill the SMs the whole tiles would leave idle).
    STREAM_K: the tiles from FULL_TILES on (a multiple of the grid) are one list of k-steps cut into nprog
    balanced shares (_sk_range); a CTA's share, cut again at tile boundaries, is its list of pieces.
    (start, nprog, num_pid_m, num_pid_n, k_tiles, my_units)."""
    start, nprog, num_pid_m, num_pid_n, k_tiles, my_tiles = _tile_space(M, N, K, BM, BN, BK)
    if STREAM_K:
        a, b = _sk_range(start, (num_pid_m * num_pid_n - FULL_TILES) * k_tiles, nprog)
        pieces = gl.where(b > a, (b - 1) // k_tiles - a // k_tiles + 1, 0)
        return start, nprog, num_pid_m, num_pid_n, k_tiles, FULL_TILES // nprog + pieces
    if SPLIT_K == 1:
        return start, nprog, num_pid_m, num_pid_n, k_tiles, my_tiles
    units = FULL_TILES + (num_pid_m * num_pid_n - FULL_TILES) * SPLIT_K
    return start, nprog, num_pid_m, num_pid_n, k_tiles, (units - start + nprog - 1) // nprog


@gluon.jit
def _unit(i, start, nprog, k_tiles, num_pid_m, num_pid_n, FULL_TILES, GROUP_M: gl.constexpr, SPLIT_K: gl.constexpr,
          STREAM_K: gl.constexpr = False):
    """This CTA's i-th work unit -> (pid_m, pid_n, k0, k1, sl, tile): its tile and its k-steps [k0, k1); sl 0 =
    the whole tile (stored to C). Split-K (unit u = start + i * nprog): sl >= 1 = K-slice sl - 1 of the
    balanced split (sl - 1) * k_tiles // SPLIT_K (non-empty for every slice: the host checks SPLIT_K <=
    k_tiles). Stream-K: units i < FULL_TILES // nprog are whole tiles start + i * nprog; then piece j of the
    share [a, b): tile t = a // k_tiles + j of the stream-K list, k-steps [max(a, t k), min(b, (t + 1) k)) - t k;
    a piece that is not the whole tile has sl = its workspace block + 1, block start + t (unique per piece:
    CTA and tile both advance with the k-step, so (c, t) != (c', t') with c + t = c' + t')."""
    tile = start + i * nprog
    sl = i * 0
    k0 = i * 0
    k1 = k_tiles
    if STREAM_K:
        my_dp = FULL_TILES // nprog
        if i >= my_dp:
            a, b = _sk_range(start, (num_pid_m * num_pid_n - FULL_TILES) * k_tiles, nprog)
            t = a // k_tiles + (i - my_dp)
            k0 = gl.maximum(a, t * k_tiles) - t * k_tiles
            k1 = gl.minimum(b, (t + 1) * k_tiles) - t * k_tiles
            tile = FULL_TILES + t
            if (k0 > 0) | (k1 < k_tiles):
                sl = start + t + 1
    elif SPLIT_K > 1:
        u = start + i * nprog
        if u >= FULL_TILES:
            v = u - FULL_TILES
            tile = FULL_TILES + v // SPLIT_K
            sl = v % SPLIT_K + 1
            k0 = (sl - 1) * k_tiles // SPLIT_K
            k1 = sl * k_tiles // SPLIT_K
    pid_m, pid_n = _tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)
    return pid_m, pid_n, k0, k1, sl, tile


@gluon.jit
def _ws_producer(a_desc, b_desc, a_bufs, b_bufs, empty_bars, full_bars, M, N, K, NUM_STAGES: gl.constexpr,
                 GROUP_M: gl.constexpr, SPLIT_K: gl.constexpr = 1, FULL_TILES=0, STREAM_K: gl.constexpr = False):
    BM: gl.constexpr = a_desc.block_type.shape[0]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    BN: gl.constexpr = b_desc.block_type.shape[1]
    start, nprog, num_pid_m, num_pid_n, k_tiles, my_units = _unit_space(M, N, K, FULL_TILES, BM, BN, BK,
                                                                              SPLIT_K, STREAM_K)
    g = 0
    for i in range(my_units):
        pid_m, pid_n, k0, k1, sl, tile = _unit(i, start, nprog, k_tiles, num_pid_m, num_pid_n, FULL_TILES, GROUP_M,
                                               SPLIT_K, STREAM_K)
        for kk in range(k0, k1):
            slot = g % NUM_STAGES
            mbarrier.wait(empty_bars.index(slot), ((g // NUM_STAGES) & 1) ^ 1)
            full = full_bars.index(slot)
            mbarrier.expect(full, a_desc.block_type.nbytes + b_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(a_desc, [pid_m * BM, kk * BK], full, a_bufs.index(slot))
            tma.async_copy_global_to_shared(b_desc, [kk * BK, pid_n * BN], full, b_bufs.index(slot))
            g += 1


CP_WARPS: gl.constexpr = gl.constexpr(4)  # the cp.async producer's warps: one warpgroup issues 16-byte copies


@gluon.constexpr_function
def _cp_layout(cols, warps):
    """Registers of a [rows, cols] box copied with 16-byte cp.async: 8 consecutive bf16 / fp16 per thread
    along the contiguous dimension, a warp across up to 256 columns, the warps stacked along rows."""
    tpw = min(32, cols // 8)
    return gl.BlockedLayout([1, 8], [32 // tpw, tpw], [warps, 1], [1, 0])


@gluon.jit
def _cp_producer(a_ptr, b_ptr, stride_am, stride_bk, a_bufs, b_bufs, empty_bars, full_bars, M, N, K,
                 NUM_STAGES: gl.constexpr, GROUP_M: gl.constexpr, SPLIT_K: gl.constexpr = 1, FULL_TILES=0,
                 STREAM_K: gl.constexpr = False):
    """The producer for operands whose rows are not 128-byte aligned (row strides K * 2 / N * 2 bytes not
    multiples of 128: every 128-byte TMA box row straddles two lines, 10-54% slower in
    results/h200/gemm-probe.log). One warpgroup issues 16-byte cp.async copies (any 16-byte aligned
    start) into the same swizzled ring slots; masked lanes zero-fill the M / N / K edges as TMA's bounds
    do. Each thread's cp.async.mbarrier.arrive.noinc lands on FULL once its copies have (FULL counts
    CP_WARPS * 32 arrivals); the consumer fences the generic-proxy writes before its wgmma reads them."""
    BM: gl.constexpr = a_bufs.shape[1]
    BK: gl.constexpr = a_bufs.shape[2]
    BN: gl.constexpr = b_bufs.shape[2]
    LA: gl.constexpr = _cp_layout(BK, CP_WARPS)
    LB: gl.constexpr = _cp_layout(BN, CP_WARPS)
    start, nprog, num_pid_m, num_pid_n, k_tiles, my_units = _unit_space(M, N, K, FULL_TILES, BM, BN, BK,
                                                                              SPLIT_K, STREAM_K)
    # the host checks 16-byte rows (K (launch), N and both row strides (gemm.check) multiples of 8
    # elements): say so, so the copies and their masks vectorize to 16 bytes
    Kv = gl.multiple_of(K, 8)
    Nv = gl.multiple_of(N, 8)
    sa = gl.multiple_of(stride_am, 8).to(gl.int64)
    sb = gl.multiple_of(stride_bk, 8).to(gl.int64)
    rm = gl.arange(0, BM, layout=gl.SliceLayout(1, LA))
    rk = gl.arange(0, BK, layout=gl.SliceLayout(0, LA))
    rkb = gl.arange(0, BK, layout=gl.SliceLayout(1, LB))
    rn = gl.arange(0, BN, layout=gl.SliceLayout(0, LB))
    g = 0
    for i in range(my_units):
        pid_m, pid_n, k0, k1, sl, tile = _unit(i, start, nprog, k_tiles, num_pid_m, num_pid_n, FULL_TILES, GROUP_M,
                                               SPLIT_K, STREAM_K)
        om = pid_m * BM + rm
        on = pid_n * BN + rn
        a_rows = a_ptr + gl.expand_dims(gl.multiple_of(om.to(gl.int64) * sa, 8), 1)
        m_ok = gl.expand_dims(om < M, 1)
        n_ok = gl.expand_dims((on // 8) * 8 < Nv, 0)  # on < N (N a multiple of 8), constant per 16-byte vector
        for kk in range(k0, k1):
            slot = g % NUM_STAGES
            mbarrier.wait(empty_bars.index(slot), ((g // NUM_STAGES) & 1) ^ 1)
            ka = kk * BK + rk
            kb = kk * BK + rkb
            # (ka // 8) * 8 < K is ka < K for K a multiple of 8, and is constant over each 8-element vector,
            # which lets the mask ride on 16-byte copies
            async_copy.async_copy_global_to_shared(a_bufs.index(slot), a_rows + gl.expand_dims(ka, 0),
                                                   mask=m_ok & gl.expand_dims((ka // 8) * 8 < Kv, 0))
            async_copy.async_copy_global_to_shared(b_bufs.index(slot),
                                                   b_ptr + gl.expand_dims(gl.multiple_of(kb.to(gl.int64) * sb, 8), 1)
                                                   + gl.expand_dims(on, 0),
                                                   mask=gl.expand_dims(kb < Kv, 1) & n_ok)
            async_copy.mbarrier_arrive(full_bars.index(slot), increment_count=False)
            g += 1


@gluon.jit
def _store_c(c_desc, c_smem, acc, pid_m, pid_n, SWAP_AB: gl.constexpr):
    """A whole tile's epilogue: accumulator (transposed back under SWAP_AB) -> C's dtype -> smem -> TMA store."""
    BM: gl.constexpr = c_desc.block_type.shape[0]
    BN: gl.constexpr = c_desc.block_type.shape[1]
    if SWAP_AB:
        out = gl.permute(acc, (1, 0))
    else:
        out = acc
    c_smem.store(out.to(c_desc.dtype))
    fence_async_shared()
    tma.async_copy_shared_to_global(c_desc, [pid_m * BM, pid_n * BN], c_smem)


@gluon.jit
def _sk_store_partial(work, acc, sl, acc_layout: gl.constexpr, BM: gl.constexpr, BN: gl.constexpr,
                      ACC_M: gl.constexpr, ACC_N: gl.constexpr, SWAP_AB: gl.constexpr):
    """A stream-K piece's fp32 partial, straight from the accumulator's registers to workspace block sl - 1
    (row-major BM x BN fp32 at element (sl - 1) * BM * BN): no shared-memory staging, so the 128 x 256 tile
    fits stream-K (a 128 KB fp32 staging buffer does not), and no TMA store for the next epilogue to wait on.
    Each thread writes its accumulator pairs as 8-byte stores; SWAP_AB's accumulator is C^T, so its rows are
    C's columns. The fixup kernel runs after this one (stream order makes the stores visible to it)."""
    i = gl.expand_dims(gl.arange(0, ACC_M, layout=gl.SliceLayout(1, acc_layout)), 1)
    j = gl.expand_dims(gl.arange(0, ACC_N, layout=gl.SliceLayout(0, acc_layout)), 0)
    if SWAP_AB:
        off = j * BN + i
    else:
        off = i * BN + j
    gl.store(work + (sl - 1).to(gl.int64) * (BM * BN) + off, acc)


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
    is the pointer of the fp32 workspace [(nprog + stream-K tiles) * BM, BN], _sk_store_partial);
    streamk_reduce_kernel sums each split tile's pieces."""
    BM: gl.constexpr = c_desc.block_type.shape[0]
    BN: gl.constexpr = c_desc.block_type.shape[1]
    BK: gl.constexpr = a_bufs.shape[2]
    ACC_M: gl.constexpr = BN if SWAP_AB else BM
    ACC_N: gl.constexpr = BM if SWAP_AB else BN
    start, nprog, num_pid_m, num_pid_n, k_tiles, my_units = _unit_space(M, N, K, FULL_TILES, BM, BN, BK,
                                                                              SPLIT_K, STREAM_K)
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                         instr_shape=[16, ACC_N, 16])
    g = 0
    split_tiles = num_pid_m * num_pid_n - FULL_TILES
    for i in range(my_units):
        pid_m, pid_n, k0, k1, sl, tile = _unit(i, start, nprog, k_tiles, num_pid_m, num_pid_n, FULL_TILES, GROUP_M,
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
                _sk_store_partial(work, acc, sl, acc_layout, BM, BN, ACC_M, ACC_N, SWAP_AB)
            else:
                tma.store_wait(0)  # the previous tile's store has finished reading its staging buffer
                _store_c(c_desc, c_smem, acc, pid_m, pid_n, SWAP_AB)
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
                    _store_c(c_desc, c_smem, acc, pid_m, pid_n, SWAP_AB)
            else:
                _store_c(c_desc, c_smem, acc, pid_m, pid_n, SWAP_AB)
        if INSTRUMENT:
            _gemm_stamps(t_ptr, start, i, 0, t0, t1)
    tma.store_wait(0)


@gluon.jit(do_not_specialize=["FULL_TILES"])  # one compile for every split point
def ws_gemm_kernel(a_desc, b_desc, c_desc, work, M, N, K, FULL_TILES, t_ptr, a_ptr, b_ptr, stride_am, stride_bk,
                   NUM_STAGES: gl.constexpr, GROUP_M: gl.constexpr, PRODUCER_REGS: gl.constexpr, SPLIT_K: gl.constexpr,
                   INSTRUMENT: gl.constexpr, SWAP_AB: gl.constexpr, CP_ASYNC: gl.constexpr, num_warps: gl.constexpr,
                   STREAM_K: gl.constexpr = False):
    """SPLIT_K > 1: `work` is the TMA descriptor of the K-slices' fp32 workspace, STREAM_K its pointer (None
    otherwise); tiles FULL_TILES and
    later are split (_unit_space). CP_ASYNC: the operands are read by _cp_producer (a warpgroup of cp.async,
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
            (_cp_producer, (a_ptr, b_ptr, stride_am, stride_bk, a_bufs, b_bufs, empty_bars, full_bars, M, N, K,
                            NUM_STAGES, GROUP_M, SPLIT_K, FULL_TILES, STREAM_K)),
        ], [CP_WARPS], [PRODUCER_REGS])
    else:
        gl.warp_specialize([
            (_ws_consumer, (c_desc, work, a_bufs, b_bufs, c_smem, w_smem, empty_bars, full_bars, M, N, K,
                            FULL_TILES, t_ptr, NUM_STAGES, GROUP_M, SPLIT_K, INSTRUMENT, SWAP_AB, num_warps, CP_ASYNC,
                            STREAM_K)),
            (_ws_producer, (a_desc, b_desc, a_bufs, b_bufs, empty_bars, full_bars, M, N, K, NUM_STAGES, GROUP_M,
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
    start, nprog, num_pid_m, num_pid_n, k_tiles, my_tiles = _tile_space(M, N, K, BM, BN, BK)
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[gl.num_warps(), 1],
                                                         instr_shape=[16, BN, 16])
    my_c = c_smem.index(WG)
    for j in range(WG, my_tiles, 2):
        pid_m, pid_n = _tile_coords(start + j * nprog, num_pid_m, num_pid_n, GROUP_M)
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
            _gemm_stamps(t_ptr, start, j, WG, t0, t1)
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
        (_ws_producer, (a_desc, b_desc, a_bufs, b_bufs, empty_bars, full_bars, M, N, K, NUM_STAGES, GROUP_M)),
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


@gluon.jit(do_not_specialize=["M", "FULL_TILES"])
def splitk_reduce_kernel(w_ptr, c_ptr, M, N, c_stride, FULL_TILES, TM: gl.constexpr, TN: gl.constexpr,
                         GROUP_M: gl.constexpr, SPLIT_K: gl.constexpr, BR: gl.constexpr, BC: gl.constexpr,
                         num_warps: gl.constexpr):
    """The split tiles' C = the sum over their SPLIT_K slices in the fp32 workspace [SPLIT_K *
    split_tiles * TM, TN] (block (s, t) at rows (s * split_tiles + t) * TM), in slice order
    (deterministic), cast to C's dtype. Program (t, b): split tile FULL_TILES + t (the GEMM's grouped
    order), its b-th [BR, BC] block; 16-byte loads (the workspace's row is TN fp32)."""
    L: gl.constexpr = gl.BlockedLayout([1, 4], [1, 32], [num_warps, 1], [1, 0])
    num_pid_m = gl.cdiv(M, TM)
    num_pid_n = gl.cdiv(N, TN)
    split_tiles = num_pid_m * num_pid_n - FULL_TILES
    t = gl.program_id(0)
    pid_m, pid_n = _tile_coords(FULL_TILES + t, num_pid_m, num_pid_n, GROUP_M)
    NB_C: gl.constexpr = (TN + BC - 1) // BC
    b = gl.program_id(1)
    rl = (b // NB_C) * BR + gl.arange(0, BR, layout=gl.SliceLayout(1, L))  # rows / columns within the tile
    cl = (b % NB_C) * BC + gl.arange(0, BC, layout=gl.SliceLayout(0, L))
    r = pid_m * TM + rl
    n = pid_n * TN + cl
    mask = gl.expand_dims(r < M, 1) & gl.expand_dims((n < N) & (cl < TN), 0)
    wrow = gl.expand_dims(t.to(gl.int64) * TM + rl, 1)
    wcol = gl.expand_dims(cl, 0)
    acc = gl.zeros([BR, BC], gl.float32, L)
    for s in gl.static_range(SPLIT_K):
        acc += gl.load(w_ptr + (wrow + s * split_tiles.to(gl.int64) * TM) * TN + wcol, mask=mask, other=0.0)
    gl.store(c_ptr + gl.expand_dims(r.to(gl.int64), 1) * c_stride + gl.expand_dims(n, 0),
             acc.to(c_ptr.dtype.element_ty), mask=mask)


@gluon.jit(do_not_specialize=["M", "K", "FULL_TILES", "G"])
def streamk_reduce_kernel(w_ptr, c_ptr, M, N, K, c_stride, FULL_TILES, G, TM: gl.constexpr, TN: gl.constexpr,
                          BK: gl.constexpr, GROUP_M: gl.constexpr, MAX_PIECES: gl.constexpr, BR: gl.constexpr,
                          BC: gl.constexpr, num_warps: gl.constexpr):
    """Stream-K's fixup: C of every stream-K tile (FULL_TILES + t) that more than one CTA's share covers = the
    sum of its pieces, in CTA order (deterministic), read from workspace blocks c + t (_unit) of the fp32
    workspace [(G + stream-K tiles) * TM, TN]; a tile one CTA covered whole was stored to C by the GEMM.
    Program (t, b): stream-K tile t, its b-th [BR, BC] block. The pieces are read in an unrolled loop of
    MAX_PIECES (the most shares one tile can meet, streamk_max_pieces), masked past the tile's last owner, so
    the loads are all in flight (a loop over the dynamic piece count issued them one after another: 5-7 us
    for this kernel in results/h200/gemm-probe-phases.log, against 3-3.5 us for split-K's unrolled reduce)."""
    L: gl.constexpr = gl.BlockedLayout([1, 4], [1, 32], [num_warps, 1], [1, 0])
    num_pid_m = gl.cdiv(M, TM)
    num_pid_n = gl.cdiv(N, TN)
    k_tiles = gl.cdiv(K, BK)
    S = (num_pid_m * num_pid_n - FULL_TILES) * k_tiles
    t = gl.program_id(0)
    c0 = _sk_owner(t * k_tiles, S, G)
    c1 = _sk_owner(t * k_tiles + k_tiles - 1, S, G)
    if c1 > c0:
        pid_m, pid_n = _tile_coords(FULL_TILES + t, num_pid_m, num_pid_n, GROUP_M)
        NB_C: gl.constexpr = (TN + BC - 1) // BC
        b = gl.program_id(1)
        rl = (b // NB_C) * BR + gl.arange(0, BR, layout=gl.SliceLayout(1, L))
        cl = (b % NB_C) * BC + gl.arange(0, BC, layout=gl.SliceLayout(0, L))
        r = pid_m * TM + rl
        n = pid_n * TN + cl
        mask = gl.expand_dims(r < M, 1) & gl.expand_dims((n < N) & (cl < TN), 0)
        wcol = gl.expand_dims(cl, 0)
        acc = gl.zeros([BR, BC], gl.float32, L)
        for p in gl.static_range(MAX_PIECES):
            wrow = gl.expand_dims((c0 + p + t).to(gl.int64) * TM + rl, 1)
            acc += gl.load(w_ptr + wrow * TN + wcol, mask=mask & (c0 + p <= c1), other=0.0)
        gl.store(c_ptr + gl.expand_dims(r.to(gl.int64), 1) * c_stride + gl.expand_dims(n, 0),
                 acc.to(c_ptr.dtype.element_ty), mask=mask)


SPLITK_REDUCE = {"BR": 8, "BC": 128, "num_warps": 8}  # [8, 128] blocks of a split tile: 4 fp32 per thread per slice


def splitk_plan(cfg: GemmConfig, M: int, N: int, sms: int) -> tuple[int, int]:
    """(FULL_TILES, units): whole tiles first, then SPLIT_K slices of each later tile. split_last_wave:
    the whole waves stay whole (FULL_TILES = tiles // sms * sms) and only the last, partial wave is split;
    otherwise every tile is split (FULL_TILES = 0)."""
    tiles = cdiv(M, cfg.BM) * cdiv(N, cfg.BN)
    full = tiles // sms * sms if cfg.split_last_wave else 0
    return full, full + (tiles - full) * cfg.split_k


def streamk_plan(cfg: GemmConfig, M: int, N: int, K: int, sms: int) -> tuple[int, int, int]:
    """(FULL_TILES, grid, stream-K tiles) of GemmConfig(stream_k=w): the last w waves of tiles (the partial
    one counted) form the stream-K list, the waves before it stay data-parallel (FULL_TILES, a multiple of
    the grid); the grid is every SM, or the k-steps of the list where they are fewer (each share >= 1)."""
    tiles = cdiv(M, cfg.BM) * cdiv(N, cfg.BN)
    full = max(0, cdiv(tiles, sms) - cfg.stream_k) * sms
    grid = sms if full else min(sms, tiles * cdiv(K, cfg.BK))
    return full, grid, tiles - full


def streamk_max_pieces(k_tiles: int, S: int, grid: int) -> int:
    """The most shares (_sk_range) one tile's k_tiles consecutive k-steps can meet: each share holds >= q = S //
    grid of them, so at most 1 + ceil((k_tiles - 1) / q); one k-step per share or fewer (q <= 1): k_tiles."""
    q = S // grid
    return k_tiles if q <= 1 else min(k_tiles, 1 + cdiv(k_tiles - 1, q))


def launch(a, b, out=None, config: GemmConfig | None = None, trace=None):
    """trace: an int64 tensor of TRACE_CTAS * TRACE_ITERS * GEMM_TRACE_FIELDS elements -> the INSTRUMENT
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
        r = SPLITK_REDUCE
        blocks = (cfg.BM // r["BR"]) * cdiv(cfg.BN, r["BC"])
        splitk_reduce_kernel[(split_tiles, blocks)](work, c, M, N, c.stride(0), full, TM=cfg.BM, TN=cfg.BN,
                                                    GROUP_M=cfg.group_m, SPLIT_K=cfg.split_k, **r)
    if cfg.stream_k:
        r = SPLITK_REDUCE
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
    roots=(ws_gemm_kernel, ws_pingpong_gemm_kernel, _kernel_args, splitk_reduce_kernel, SPLITK_REDUCE, splitk_plan,
           _cp_producer, _cp_layout, streamk_reduce_kernel, streamk_plan, streamk_max_pieces, _store_c,
           _sk_store_partial),
    description="persistent GEMM: 1 producer warp (TMA, setmaxnreg) + consumer warpgroups (wgmma), empty/full ring",
    ws=True)


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
