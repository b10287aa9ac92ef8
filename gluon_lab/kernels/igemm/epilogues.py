"""Epilogues of the implicit-GEMM template: what a finished accumulator becomes.

* store_tile: a whole tile -> the output dtype -> shared memory -> one TMA store (the GEMM's C);
* store_partial: a split-K slice's / stream-K piece's fp32 partial, straight from registers to its
  block of the fp32 workspace (no shared-memory staging, no TMA store to wait on);
* splitk_reduce_kernel / streamk_reduce_kernel: the fixup that sums a split tile's slices (in slice
  order) or pieces (in CTA order) — deterministic, no atomics — and stores C, in REDUCE_BLOCK blocks;
* patch_fixup_kernel: the split-K fixup of conv's tiles (rows = a TH x TW patch of output pixels), stored
  through the output's NHWC strides and clipped at the image edge;
* arrive_last / sum_partials: serial split-K (CUTLASS's "serial" reduction, its semaphore): each slice stores
  its partial, then arrives on its tile's counter; the LAST slice to arrive sums every partial in slice order
  (the fixup's order: the same bits) and stores the tile itself, so no fixup launch runs. Nobody waits for
  anybody (no spin), so it needs no co-residency of the slices' CTAs.
"""
from __future__ import annotations

import types

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, tma

from .schedule import sk_owner, tile_coords


@gluon.jit
def store_tile(c_desc, c_smem, acc, pid_m, pid_n, SWAP_AB: gl.constexpr):
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
def store_partial(work, acc, sl, acc_layout: gl.constexpr, BM: gl.constexpr, BN: gl.constexpr,
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
def arrive_last(cnt_ptr, SPLIT_K: gl.constexpr):
    """Serial split-K's arrival, after this slice's store_partial: True in the CTA (its consumer partition) whose
    slice is the last of the tile to arrive. CUTLASS's semaphore order: a partition-scoped barrier (every thread's
    partial stores happen before it), then one acq_rel atomic (Triton issues a scalar atomic from one thread and
    broadcasts its result through shared memory behind another barrier): the release publishes this CTA's
    partial; the last arrival's acquire makes every other slice's partial visible to the loads that follow. The
    last arrival resets the counter to 0 for the next launch (stream order: it starts after this one ends)."""
    gl.thread_barrier()
    prev = gl.atomic_add(cnt_ptr, 1, sem="acq_rel", scope="gpu")
    last = prev == SPLIT_K - 1
    if last:
        gl.atomic_xchg(cnt_ptr, 0, sem="relaxed")
    return last


@gluon.jit
def sum_partials(work, t, split_tiles, acc_layout: gl.constexpr, BM: gl.constexpr, BN: gl.constexpr,
                 SPLIT_K: gl.constexpr):
    """Split tile t's SPLIT_K fp32 partials (store_partial's blocks s * split_tiles + t, row-major [BM, BN]) summed
    in slice order from zero, in the accumulator's own layout: the fixup kernels' exact order, so the sum has
    their bits. The loads bypass L1 (.cg): the partials were written by other SMs during this launch."""
    i = gl.expand_dims(gl.arange(0, BM, layout=gl.SliceLayout(1, acc_layout)), 1)
    j = gl.expand_dims(gl.arange(0, BN, layout=gl.SliceLayout(0, acc_layout)), 0)
    off = i * BN + j
    total = gl.zeros([BM, BN], gl.float32, acc_layout)
    for s in gl.static_range(SPLIT_K):
        total += gl.load(work + (s * split_tiles + t).to(gl.int64) * (BM * BN) + off, cache_modifier=".cg")
    return total


REDUCE_BLOCK = {"BR": 8, "BC": 128, "num_warps": 8}  # [8, 128] blocks of a split tile: 4 fp32 per thread per slice


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
    pid_m, pid_n = tile_coords(FULL_TILES + t, num_pid_m, num_pid_n, GROUP_M)
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
    sum of its pieces, in CTA order (deterministic), read from workspace blocks c + t (schedule.unit) of the fp32
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
    c0 = sk_owner(t * k_tiles, S, G)
    c1 = sk_owner(t * k_tiles + k_tiles - 1, S, G)
    if c1 > c0:
        pid_m, pid_n = tile_coords(FULL_TILES + t, num_pid_m, num_pid_n, GROUP_M)
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


@gluon.jit(do_not_specialize=["FULL_TILES"])
def patch_fixup_kernel(w_ptr, y_ptr, n_th, n_tw, n_tiles_m, Co, OH, OW, ys0, ys1, ys3, y_off, FULL_TILES,
                       TH: gl.constexpr, TW: gl.constexpr, BN: gl.constexpr, GROUP_M: gl.constexpr,
                       SPLIT_K: gl.constexpr, BR: gl.constexpr, BC: gl.constexpr, num_warps: gl.constexpr):
    """splitk_reduce_kernel for conv's tiles, whose BM = TH x TW rows are a patch of output pixels: the split
    tiles' outputs = the sum over their SPLIT_K fp32 partials (store_partial's blocks: slice s of split tile t
    is block s * split_tiles + t, row-major [BM, BN]), in slice order (deterministic), cast and stored
    through the output's NHWC element strides (image ys0, row ys1, column ys3; y_off: a parity view's row
    offset), clipped at the image edge and at Co. Program (t, b): split tile FULL_TILES + t (the grouped
    order of the conv kernels), its b-th [BR, BC] block."""
    L: gl.constexpr = gl.BlockedLayout([1, 4], [1, 32], [num_warps, 1], [1, 0])
    BM: gl.constexpr = TH * TW
    num_pid_n = gl.cdiv(Co, BN)
    split_tiles = n_tiles_m * num_pid_n - FULL_TILES
    t = gl.program_id(0)
    pid_m, pid_n = tile_coords(FULL_TILES + t, n_tiles_m, num_pid_n, GROUP_M)
    per_img = n_th * n_tw
    img = pid_m // per_img
    rem = pid_m % per_img
    NB_C: gl.constexpr = (BN + BC - 1) // BC
    b = gl.program_id(1)
    rl = (b // NB_C) * BR + gl.arange(0, BR, layout=gl.SliceLayout(1, L))  # rows (pixels) / columns of the tile
    cl = (b % NB_C) * BC + gl.arange(0, BC, layout=gl.SliceLayout(0, L))
    oh = (rem // n_tw) * TH + rl // TW
    ow = (rem % n_tw) * TW + rl % TW
    co = pid_n * BN + cl
    mask = gl.expand_dims((oh < OH) & (ow < OW), 1) & gl.expand_dims((co < Co) & (cl < BN), 0)
    wrow = gl.expand_dims(t.to(gl.int64) * BM + rl, 1)
    wcol = gl.expand_dims(cl, 0)
    acc = gl.zeros([BR, BC], gl.float32, L)
    for s in gl.static_range(SPLIT_K):
        acc += gl.load(w_ptr + (wrow + s * split_tiles.to(gl.int64) * BM) * BN + wcol, mask=mask, other=0.0)
    pix = img.to(gl.int64) * ys0 + oh.to(gl.int64) * ys1 + ow.to(gl.int64) * ys3 + y_off
    gl.store(y_ptr + gl.expand_dims(pix, 1) + gl.expand_dims(co, 0), acc.to(y_ptr.dtype.element_ty), mask=mask)


# ---- host side: serial split-K's arrival counters ---------------------------------------------------------

TILE_COUNTERS = 1024  # int32 counters per (device, stream) to start with (4 KB); a launch with more split tiles grows them


def tile_counters(device, n: int):
    """Serial split-K's per-split-tile arrival counters (arrive_last) for the current stream of device: at least n
    int32s, zero, left zero by every launch (each tile's last arrival resets its counter), so one buffer serves
    every launch on the stream (launches on one stream are ordered). Pinned for the fast path, which resolves them
    per replay (the counters of the stream then current), like pipelined.block_counter. None while a CUDA graph is
    being captured on a stream that has no counters (or too few) yet: an allocation there would live in the graph's
    pool, unzeroed until the graph first replays. The caller then runs the fixup kernel, whose sum has the same
    bits (sum_partials' order)."""
    import torch
    from ... import fastpath
    key = (torch.device(device).index, torch.cuda.current_stream(device).cuda_stream)
    c = _TILE_COUNTERS.by_key.get(key)
    if c is None or c.numel() < n:
        if torch.cuda.is_current_stream_capturing():
            return None
        c = torch.zeros(max(TILE_COUNTERS, n), dtype=torch.int32, device=torch.device("cuda", key[0]))
        _TILE_COUNTERS.by_key[key] = c
        fastpath.pin(c, resolve=lambda: _replay_counters(c.device, c.numel()))
    return c


def _replay_counters(device, n: int):
    """The fast path's per-replay counters: a recorded launch cannot fall back to the fixup kernel."""
    c = tile_counters(device, n)
    if c is None:
        raise RuntimeError("serial split-K needs its tile counters for this stream before a CUDA-graph capture (a "
                           "counter allocated inside the capture would live in the graph's pool, unzeroed until the "
                           "graph first replays): call the op once on the capture stream first")
    return c


# by (device index, raw stream), kept for the process: a stdlib namespace, which the code hash does not read
_TILE_COUNTERS = types.SimpleNamespace(by_key={})
