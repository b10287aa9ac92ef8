"""Operand producers of the implicit-GEMM template: how the A and B tiles of one k-step reach shared memory.

Each producer fills ring slots (ring.py) for the work units a schedule hands it (schedule.py); the
consumer (mainloop + epilogue) does not know which producer ran:

* tma_k_step / tma_producer: the GEMM's tiled TMA boxes [BM, BK] of A and [BK, BN] of B (the 1-warp
  producer of the warp-specialized kernels walks the schedule's units; tma_k_step is the single-stream
  kernels' issue of one step);
* filter_box_issue: the dgrad sub-problem's boxes reading the forward OHWI filter in place (rotated by index);
* cp_producer: 16-byte cp.async copies by one warpgroup, for operand rows that are not 128-byte aligned
  (every 128-byte TMA box row would straddle two lines), masked at the M / N / K edges;
* tap_shift / tap_box_issue: conv at stride 1 — one TMA box of x per filter tap, the patch shifted by
  (r - pad, s - pad), TMA's zero fill is the padding; at stride 2 the same box on the parity-split view
  [B, H/2, 2, W/2, 2 Ci] (tap_shift's (dh, ph, dw, pw));
* wgrad_issue: wgrad's operands — a grad_output box (A, pixels are the GEMM's K) and the shifted x box;
* gather_issue: any stride and size — masked 16-byte cp.async of each output pixel's input channels.
"""
from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import async_copy, mbarrier, tma

from .schedule import unit, unit_space

@gluon.jit
def tma_k_step(a_desc, b_desc, a_bufs, b_bufs, bars, s, kk, pid_m, pid_n, pred):
    """Issue the A/B boxes of k-step kk of tile (pid_m, pid_n) into ring slot s."""
    BM: gl.constexpr = a_desc.block_type.shape[0]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    BN: gl.constexpr = b_desc.block_type.shape[1]
    bar = bars.index(s)
    mbarrier.expect(bar, a_desc.block_type.nbytes + b_desc.block_type.nbytes, pred=pred)
    tma.async_copy_global_to_shared(a_desc, [pid_m * BM, kk * BK], bar, a_bufs.index(s), pred=pred)
    tma.async_copy_global_to_shared(b_desc, [kk * BK, pid_n * BN], bar, b_bufs.index(s), pred=pred)


@gluon.jit
def tma_producer(a_desc, b_desc, a_bufs, b_bufs, empty_bars, full_bars, M, N, K, NUM_STAGES: gl.constexpr,
                 GROUP_M: gl.constexpr, SPLIT_K: gl.constexpr = 1, FULL_TILES=0, STREAM_K: gl.constexpr = False):
    BM: gl.constexpr = a_desc.block_type.shape[0]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    BN: gl.constexpr = b_desc.block_type.shape[1]
    start, nprog, num_pid_m, num_pid_n, k_tiles, my_units = unit_space(M, N, K, FULL_TILES, BM, BN, BK,
                                                                              SPLIT_K, STREAM_K)
    g = 0
    for i in range(my_units):
        pid_m, pid_n, k0, k1, sl, tile = unit(i, start, nprog, k_tiles, num_pid_m, num_pid_n, FULL_TILES, GROUP_M,
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
def cp_layout(cols, warps):
    """Registers of a [rows, cols] box copied with 16-byte cp.async: 8 consecutive bf16 / fp16 per thread
    along the contiguous dimension, a warp across up to 256 columns, the warps stacked along rows."""
    tpw = min(32, cols // 8)
    return gl.BlockedLayout([1, 8], [32 // tpw, tpw], [warps, 1], [1, 0])


@gluon.jit
def cp_producer(a_ptr, b_ptr, stride_am, stride_bk, a_bufs, b_bufs, empty_bars, full_bars, M, N, K,
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
    LA: gl.constexpr = cp_layout(BK, CP_WARPS)
    LB: gl.constexpr = cp_layout(BN, CP_WARPS)
    start, nprog, num_pid_m, num_pid_n, k_tiles, my_units = unit_space(M, N, K, FULL_TILES, BM, BN, BK,
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
        pid_m, pid_n, k0, k1, sl, tile = unit(i, start, nprog, k_tiles, num_pid_m, num_pid_n, FULL_TILES, GROUP_M,
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
def tap_shift(r, s, STRIDE: gl.constexpr, PAD_H: gl.constexpr, PAD_W: gl.constexpr):
    """Filter tap (r, s) as a box shift of the parity-split x view [B, H/st, st, W/st, st·Ci]: (dh, ph, dw, pw)
    with r − PAD_H = STRIDE·dh + ph and s − PAD_W = STRIDE·dw + pw (stride 1: ph = pw = 0)."""
    if STRIDE == 1:
        dh = r - PAD_H
        ph = 0
        dw = s - PAD_W
        pw = 0
    else:  # (r - pad) = 2 * dh + ph, floor division (dh = -1 for the top padding row)
        dh = (r - PAD_H) >> 1
        ph = (r - PAD_H) & 1
        dw = (s - PAD_W) >> 1
        pw = (s - PAD_W) & 1
    return dh, ph, dw, pw


@gluon.jit
def tap_box_issue(x_desc, w_desc, a_bufs, b_bufs, bars, slot, rs, c0, b, oh0, ow0, co0, Ci, pred, RW: gl.constexpr,
                STRIDE: gl.constexpr, PAD_H: gl.constexpr, PAD_W: gl.constexpr):
    """Issue k-step (tap rs = r·RW + s, channels c0..) of the tile at (image b, patch origin oh0, ow0; output
    channels co0): the x box shifted by (r − PAD_H, s − PAD_W) and the weight box [BN, 1, BK] of that tap."""
    r = rs // RW
    s = rs % RW
    dh, ph, dw, pw = tap_shift(r, s, STRIDE, PAD_H, PAD_W)
    bar = bars.index(slot)
    mbarrier.expect(bar, x_desc.block_type.nbytes + w_desc.block_type.nbytes, pred=pred)
    tma.async_copy_global_to_shared(x_desc, [b, oh0 + dh, ph, ow0 + dw, pw * Ci + c0], bar, a_bufs.index(slot),
                                    pred=pred)
    tma.async_copy_global_to_shared(w_desc, [co0, rs, c0], bar, b_bufs.index(slot), pred=pred)


@gluon.jit
def filter_box_issue(x_desc, w_desc, a_bufs, b_bufs, bars, slot, rs, c0, b, oh0, ow0, co0, Ci, pred, r0, s0,
                     RW: gl.constexpr, PAD_H: gl.constexpr, PAD_W: gl.constexpr, R_FULL: gl.constexpr,
                     TSTEP: gl.constexpr):
    """tap_box_issue for a dgrad sub-problem reading the forward filter in place (OHWI [Co, R, R, Ci] memory,
    no rotated copy): the A box as tap_box_issue's at stride 1, and the weight box [BK, 1, BN] (K = grad_output
    channels, N = dx channels: an N-contiguous B, as the GEMM's) of the forward tap the sub-problem's tap (r, s)
    is — (r0 − TSTEP·r, s0 − TSTEP·s), rotated and strided by index, not by a copy."""
    r = rs // RW
    s = rs % RW
    dh, ph, dw, pw = tap_shift(r, s, 1, PAD_H, PAD_W)
    bar = bars.index(slot)
    mbarrier.expect(bar, x_desc.block_type.nbytes + w_desc.block_type.nbytes, pred=pred)
    tma.async_copy_global_to_shared(x_desc, [b, oh0 + dh, ph, ow0 + dw, pw * Ci + c0], bar, a_bufs.index(slot),
                                    pred=pred)
    tap = (r0 - TSTEP * r) * R_FULL + (s0 - TSTEP * s)
    tma.async_copy_global_to_shared(w_desc, [c0, tap, co0], bar, b_bufs.index(slot), pred=pred)


@gluon.jit
def wgrad_issue(dy_desc, x_desc, a_bufs, b_bufs, bars, slot, q, cb, ib, dh, ph, dw, pw, Ci, n_th, n_tw, pred):
    """Issue k-step q (a patch of output pixels) of the tile (co block cb, ci block ib) at tap (dh, ph, dw, pw):
    the grad_output box [1, TH, TW, BM] and the x box [1, TH, 1, TW, BN] shifted as in fprop."""
    TH: gl.constexpr = dy_desc.block_type.shape[1]
    TW: gl.constexpr = dy_desc.block_type.shape[2]
    BM: gl.constexpr = dy_desc.block_type.shape[3]
    BN: gl.constexpr = x_desc.block_type.shape[4]
    per_img = n_th * n_tw
    b = q // per_img
    rem = q % per_img
    oh0 = (rem // n_tw) * TH
    ow0 = (rem % n_tw) * TW
    bar = bars.index(slot)
    mbarrier.expect(bar, dy_desc.block_type.nbytes + x_desc.block_type.nbytes, pred=pred)
    tma.async_copy_global_to_shared(dy_desc, [b, oh0, ow0, cb * BM], bar, a_bufs.index(slot), pred=pred)
    tma.async_copy_global_to_shared(x_desc, [b, oh0 + dh, ph, ow0 + dw, pw * Ci + ib * BN], bar, b_bufs.index(slot),
                                    pred=pred)


@gluon.jit
def gather_issue(x_ptr, w_ptr, a_bufs, b_bufs, slot, step, row_base, ih0, iw0, m_ok, co, co_ok, H, W, Ci,
                  n_cb, k_steps, R: gl.constexpr, BK: gl.constexpr, EVEN_C: gl.constexpr, LA: gl.constexpr):
    """k-step `step` (tap rs, channel block cb) of this tile: 16-byte cp.async per (pixel, 8 channels) of x
    (masked: outside the image, past Ci, past the last pixel -> zero fill) and of the weight rows; one
    commit group per step (empty past the last step, so the group count stays uniform)."""
    rs = step // n_cb
    c0 = (step % n_cb) * BK
    r = rs // R
    s = rs % R
    ih = ih0 + r
    iw = iw0 + s
    ok = m_ok & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W) & (step < k_steps)
    c = c0 + gl.arange(0, BK, layout=gl.SliceLayout(0, LA))
    off = gl.multiple_of(row_base + (r * W + s) * Ci, 8)
    a_ptrs = x_ptr + gl.expand_dims(off, 1) + gl.expand_dims(c, 0)
    w_off = gl.multiple_of(co.to(gl.int64) * (R * R * Ci) + rs * Ci, 8)
    w_ptrs = w_ptr + gl.expand_dims(w_off, 1) + gl.expand_dims(c, 0)
    wk = co_ok & (step < k_steps)
    if EVEN_C:
        a_mask = gl.expand_dims(ok, 1)
        w_mask = gl.expand_dims(wk, 1)
    else:
        a_mask = gl.expand_dims(ok, 1) & gl.expand_dims(c < Ci, 0)
        w_mask = gl.expand_dims(wk, 1) & gl.expand_dims(c < Ci, 0)
    async_copy.async_copy_global_to_shared(a_bufs.index(slot), a_ptrs, mask=a_mask)
    async_copy.async_copy_global_to_shared(b_bufs.index(slot), w_ptrs, mask=w_mask)
    async_copy.commit_group()
