"""Pattern 6 on the implicit-GEMM template: the warp-specialized convolution ("gluon-ws" of conv2d and
conv2d_input_grad), with the template's schedules.

The same boxes as the pipelined fprop (conv.py: one shifted TMA box of x per tap, the parity-split view at
stride 2, the [BN, 1, BK] weight box) from the template's tap-box producer (igemm.producers.tap_box_issue),
on the template's empty/full ring (igemm.ring), split into a 1-warp producer (setmaxnreg) and consumer
warpgroups on wgmma. What the template adds is the schedule (igemm.schedule): a conv tile is a TH x TW
patch of output pixels x BN channels with K = taps x Ci / BK k-steps, so the GEMM's units apply unchanged —

* persistent data-parallel (split_k = 1): program p owns tiles p, p + nprog, ...;
* split-K (split_k = S): every tile as S balanced K-slices (over taps x channel blocks), each slice's fp32
  partial from registers to the workspace (igemm.epilogues.store_partial), then patch_fixup_kernel sums the
  slices in order (deterministic, no atomics) and stores them through the output's NHWC strides;
* last-wave split (split_last_wave): the whole waves stay whole, only the last, partial wave is split.

dgrad ("gluon-ws" of conv2d_input_grad) is the same instance on each parity sub-problem of conv.py's
dgrad_launches (run side by side), so its sub-problems take split-K too: where a small image with many
channels leaves most SMs idle, split-K is what fills them.
Stream-K is not wired for conv here: its fixup needs the pieces' CTA order (streamk_reduce_kernel's walk)
through the NHWC strides; split-K covers the SM-idle shapes the 06 plan measures.
"""
from __future__ import annotations

import dataclasses

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                              warpgroup_mma_wait)

from ..specs.conv import out_size
from . import conv
from .conv import ConvConfig, Launch, _codegen_args, _empty_out, _fprop_view, _shape_of, check, dgrad_check
from .hopper import H200_SMS, cdiv, desc_type, descriptor, dtype_name, kernel_spec, num_sms
from .igemm import schedule
from .igemm.epilogues import REDUCE_BLOCK, arrive_last, patch_fixup_kernel, store_partial, sum_partials, tile_counters
from .igemm.producers import filter_box_issue, tap_box_issue
from .igemm.ring import ws_ring_barriers, ws_ring_invalidate
from .igemm.schedule import unit, units_of
from .igemm.trace import unit_stamps
from .pipelined import globaltimer


@gluon.jit
def _patch(pid_m, pid_n, n_th, n_tw, TH: gl.constexpr, TW: gl.constexpr, BN: gl.constexpr):
    """Tile (pid_m, pid_n) of the schedule -> (image, oh0, ow0, co0): pid_m runs over the images' patches,
    row-major within an image."""
    per_img = n_th * n_tw
    rem = pid_m % per_img
    return pid_m // per_img, (rem // n_tw) * TH, (rem % n_tw) * TW, pid_n * BN


@gluon.jit
def _conv_units(Ci, Co, n_tiles_m, FULL_TILES, TAPS: gl.constexpr, BK: gl.constexpr, BN: gl.constexpr,
                SPLIT_K: gl.constexpr):
    """The schedule's view of this conv problem: (start, nprog, num_pid_n, k_tiles, my_units)."""
    start = gl.program_id(0)
    nprog = gl.num_programs(0)
    num_pid_n = gl.cdiv(Co, BN)
    k_tiles = TAPS * gl.cdiv(Ci, BK)
    my_tiles = (n_tiles_m * num_pid_n - start + nprog - 1) // nprog
    my_units = units_of(start, nprog, n_tiles_m, num_pid_n, k_tiles, my_tiles, FULL_TILES, SPLIT_K)
    return start, nprog, num_pid_n, k_tiles, my_units


@gluon.jit
def _conv_ws_producer(x_desc, w_desc, a_bufs, b_bufs, empty_bars, full_bars, Ci, n_th, n_tw, n_tiles_m, Co,
                      FULL_TILES, r0, s0, RH: gl.constexpr, RW: gl.constexpr, STRIDE: gl.constexpr,
                      PAD_H: gl.constexpr, PAD_W: gl.constexpr, NUM_STAGES: gl.constexpr, GROUP_M: gl.constexpr,
                      SPLIT_K: gl.constexpr, R_FULL: gl.constexpr, TSTEP: gl.constexpr):
    """1 warp: for every k-step kk of every unit of this CTA (k-step kk = tap kk // n_cb, channel block
    kk % n_cb, tracked incrementally), wait for the slot to be EMPTY, then issue its A and B boxes (completing
    on FULL). The coordinate math lives here, off the MMA warps. R_FULL > 0: a dgrad sub-problem on the forward
    OHWI filter (filter_box_issue: weight box [BK, 1, BN], tap rotated by index from (r0, s0))."""
    TH: gl.constexpr = x_desc.block_type.shape[1]
    TW: gl.constexpr = x_desc.block_type.shape[3]
    BK: gl.constexpr = x_desc.block_type.shape[4]
    BN: gl.constexpr = w_desc.block_type.shape[2] if R_FULL > 0 else w_desc.block_type.shape[0]
    start, nprog, num_pid_n, k_tiles, my_units = _conv_units(Ci, Co, n_tiles_m, FULL_TILES, RH * RW, BK, BN,
                                                             SPLIT_K)
    n_cb = gl.cdiv(Ci, BK)
    g = 0
    for i in range(my_units):
        pid_m, pid_n, k0, k1, sl, tile = unit(i, start, nprog, k_tiles, n_tiles_m, num_pid_n, FULL_TILES, GROUP_M,
                                               SPLIT_K)
        b, oh0, ow0, co0 = _patch(pid_m, pid_n, n_th, n_tw, TH, TW, BN)
        rs = k0 // n_cb
        c0 = (k0 - rs * n_cb) * BK
        for kk in range(k0, k1):
            slot = g % NUM_STAGES
            mbarrier.wait(empty_bars.index(slot), ((g // NUM_STAGES) & 1) ^ 1)
            if R_FULL > 0:
                filter_box_issue(x_desc, w_desc, a_bufs, b_bufs, full_bars, slot, rs, c0, b, oh0, ow0, co0, Ci, True,
                                 r0, s0, RW, PAD_H, PAD_W, R_FULL, TSTEP)
            else:
                tap_box_issue(x_desc, w_desc, a_bufs, b_bufs, full_bars, slot, rs, c0, b, oh0, ow0, co0, Ci, True, RW,
                              STRIDE, PAD_H, PAD_W)
            g += 1
            c0 += BK
            if c0 >= Ci:
                c0 = 0
                rs += 1


@gluon.jit
def _store_patch(y_desc, c_smem, acc, b, oh0, OPH, ow0, co0):
    """A whole tile: accumulator -> dtype -> smem -> one [1, TH, 1, TW, BN] TMA store (clipped at the image edge),
    once the previous tile's store has finished reading the staging buffer."""
    TH: gl.constexpr = y_desc.block_type.shape[1]
    TW: gl.constexpr = y_desc.block_type.shape[3]
    BN: gl.constexpr = y_desc.block_type.shape[4]
    tma.store_wait(0)
    c_smem.store(acc.to(y_desc.dtype))
    fence_async_shared()
    tma.async_copy_shared_to_global(y_desc, [b, oh0, OPH, ow0, co0],
                                    c_smem._reinterpret(y_desc.dtype, [1, TH, 1, TW, BN], y_desc.layout))


@gluon.jit
def _conv_ws_consumer(y_desc, work, a_bufs, b_bufs, c_smem, empty_bars, full_bars, Ci, Co, n_th, n_tw, n_tiles_m,
                      OPH, FULL_TILES, t_ptr, cnt_ptr, TAPS: gl.constexpr, NUM_STAGES: gl.constexpr,
                      GROUP_M: gl.constexpr, SPLIT_K: gl.constexpr, num_warps: gl.constexpr, FILTER_KN: gl.constexpr,
                      INSTRUMENT: gl.constexpr, SERIAL: gl.constexpr):
    """num_warps warps (whole warpgroups on one BM-row tile): wait FULL, async wgmma, release the previous
    step's slot once its MMA retired. A whole tile (sl = 0) goes through smem and one TMA store; a K-slice
    (SPLIT_K > 1, sl >= 1) of split tile t stores its fp32 partial to workspace block (sl - 1) * split_tiles + t;
    SERIAL: then arrives on the tile's counter cnt_ptr[t], and the last slice to arrive stores the tile
    (igemm.epilogues.arrive_last / sum_partials) instead of the fixup kernel.
    INSTRUMENT: every unit's [K-slice + 1, start, last MMA issued, epilogue issued] stamps (igemm.trace)."""
    TH: gl.constexpr = a_bufs.shape[2]
    TW: gl.constexpr = a_bufs.shape[4]
    BK: gl.constexpr = a_bufs.shape[5]
    BN: gl.constexpr = y_desc.block_type.shape[4]
    BM: gl.constexpr = TH * TW
    dtype: gl.constexpr = y_desc.dtype
    a_mma: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BM, BK], dtype)
    if FILTER_KN:  # the forward filter's box [BK, 1, BN]: an N-contiguous B
        b_mma: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BK, BN], dtype)
    else:
        b_mma: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BN, BK], dtype)
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                         instr_shape=[16, BN, 16])
    start, nprog, num_pid_n, k_tiles, my_units = _conv_units(Ci, Co, n_tiles_m, FULL_TILES, TAPS, BK, BN, SPLIT_K)
    split_tiles = n_tiles_m * num_pid_n - FULL_TILES
    g = 0
    for i in range(my_units):
        pid_m, pid_n, k0, k1, sl, tile = unit(i, start, nprog, k_tiles, n_tiles_m, num_pid_n, FULL_TILES, GROUP_M,
                                               SPLIT_K)
        b, oh0, ow0, co0 = _patch(pid_m, pid_n, n_th, n_tw, TH, TW, BN)
        if INSTRUMENT:
            t0 = globaltimer()
        acc = gl.zeros([BM, BN], gl.float32, acc_layout)
        for kk in range(k0, k1):
            slot = g % NUM_STAGES
            mbarrier.wait(full_bars.index(slot), (g // NUM_STAGES) & 1)
            a = a_bufs.index(slot)._reinterpret(dtype, [BM, BK], a_mma)
            if FILTER_KN:
                bt = b_bufs.index(slot)._reinterpret(dtype, [BK, BN], b_mma)
            else:
                bt = b_bufs.index(slot)._reinterpret(dtype, [BN, BK], b_mma).permute((1, 0))
            acc = warpgroup_mma(a, bt, acc, is_async=True)
            acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc, ))
            if kk > k0:  # the MMA of step g - 1 has retired: its slot goes back to the producer
                mbarrier.arrive(empty_bars.index((g - 1) % NUM_STAGES))
            g += 1
        if INSTRUMENT:
            t1 = globaltimer()
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
        mbarrier.arrive(empty_bars.index((g - 1) % NUM_STAGES))
        if SPLIT_K > 1:
            if sl > 0:  # a K-slice: its fp32 partial straight from registers (store_partial)
                store_partial(work, acc, (sl - 1) * split_tiles + tile - FULL_TILES + 1, acc_layout, BM, BN, BM, BN,
                              False)
                if SERIAL:  # serial split-K: the tile's last slice to arrive sums the partials and stores the tile
                    if arrive_last(cnt_ptr + (tile - FULL_TILES), SPLIT_K):
                        _store_patch(y_desc, c_smem,
                                     sum_partials(work, tile - FULL_TILES, split_tiles, acc_layout, BM, BN, SPLIT_K),
                                     b, oh0, OPH, ow0, co0)
            else:
                _store_patch(y_desc, c_smem, acc, b, oh0, OPH, ow0, co0)
        else:
            _store_patch(y_desc, c_smem, acc, b, oh0, OPH, ow0, co0)
        if INSTRUMENT:
            unit_stamps(t_ptr, start, i, sl + 1, t0, t1)
    tma.store_wait(0)


@gluon.jit(do_not_specialize=["FULL_TILES"])  # one compile for every split point
def conv_fprop_ws_kernel(x_desc, w_desc, y_desc, work, Ci, Co, n_th, n_tw, n_tiles_m, OPH, FULL_TILES, r0, s0,
                         RH: gl.constexpr, RW: gl.constexpr, STRIDE: gl.constexpr, PAD_H: gl.constexpr,
                         PAD_W: gl.constexpr, NUM_STAGES: gl.constexpr, GROUP_M: gl.constexpr,
                         PRODUCER_REGS: gl.constexpr, SPLIT_K: gl.constexpr, num_warps: gl.constexpr,
                         R_FULL: gl.constexpr = 0, TSTEP: gl.constexpr = 1, t_ptr=None,
                         INSTRUMENT: gl.constexpr = False, cnt_ptr=None, SERIAL: gl.constexpr = False):
    """work: the fp32 workspace pointer under SPLIT_K > 1 (None otherwise); tiles FULL_TILES and later are split.
    t_ptr: the int64 trace of an INSTRUMENT build (None otherwise: the stamps compile away).
    SERIAL (with SPLIT_K > 1): serial split-K, cnt_ptr the int32 per-split-tile arrival counters (zero at launch,
    left zero: igemm.schedule.tile_counters); no fixup launch follows.
    R_FULL > 0: a dgrad sub-problem whose w_desc is the forward OHWI filter ([BK, 1, BN] boxes, filter_box_issue:
    forward tap (r0 - TSTEP·r, s0 - TSTEP·s) of its tap (r, s)); else the [BN, 1, BK] boxes of a [Co, taps, Ci] filter."""
    TH: gl.constexpr = x_desc.block_type.shape[1]
    TW: gl.constexpr = x_desc.block_type.shape[3]
    BK: gl.constexpr = x_desc.block_type.shape[4]
    BN: gl.constexpr = y_desc.block_type.shape[4]
    dtype: gl.constexpr = x_desc.dtype
    c_lay: gl.constexpr = gl.NVMMASharedLayout.get_default_for([TH * TW, BN], dtype)
    a_bufs = gl.allocate_shared_memory(dtype, [NUM_STAGES, 1, TH, 1, TW, BK], x_desc.layout)
    if R_FULL > 0:
        b_bufs = gl.allocate_shared_memory(dtype, [NUM_STAGES, BK, 1, BN], w_desc.layout)
    else:
        b_bufs = gl.allocate_shared_memory(dtype, [NUM_STAGES, BN, 1, BK], w_desc.layout)
    c_smem = gl.allocate_shared_memory(dtype, [TH * TW, BN], c_lay)
    empty_bars, full_bars = ws_ring_barriers(NUM_STAGES, 1)
    gl.warp_specialize([
        (_conv_ws_consumer, (y_desc, work, a_bufs, b_bufs, c_smem, empty_bars, full_bars, Ci, Co, n_th, n_tw,
                             n_tiles_m, OPH, FULL_TILES, t_ptr, cnt_ptr, RH * RW, NUM_STAGES, GROUP_M, SPLIT_K,
                             num_warps, R_FULL > 0, INSTRUMENT, SERIAL)),
        (_conv_ws_producer, (x_desc, w_desc, a_bufs, b_bufs, empty_bars, full_bars, Ci, n_th, n_tw, n_tiles_m, Co,
                             FULL_TILES, r0, s0, RH, RW, STRIDE, PAD_H, PAD_W, NUM_STAGES, GROUP_M, SPLIT_K, R_FULL,
                             TSTEP)),
    ], [1], [PRODUCER_REGS])
    ws_ring_invalidate(empty_bars, full_bars, NUM_STAGES)


# ---- the schedule choice -------------------------------------------------------------------------------
# From the 06 'schedule' study on the H200, run 20261204T144314Z-87ad081d (gluon-ws fprop and dgrad, bf16,
# split 1 / 2 / 4 / 8 / last-wave / the heuristic's, µs):
# * SM-idle fprop: 2x1280ch 8x8 3x3 (10 tiles) 86.2 / 48.5 / 29.1 / 20.6; ResNet 7x7 b1 (2 tiles) 36.3 / 22.0 /
#   14.2 / 10.6; VAE 512ch 32x32 b1 (16 tiles) 46.2 / 29.8 / 20.6 / 18.7; 16x16 (20 tiles) 108 / 62 / 39 / 47
#   (split 6 of the rule below: 33.2); 1x1 1280ch 8x8 (20 tiles, 20 k-steps) 13.0 / 11.3 / 9.8 / 13.0;
# * shapes that fill the SMs lose with any split (SD 64x64 101.6 vs 154.9 at split 2; ResNet 14x14 28.1 vs
#   44.6): the fp32 partials and the fixup are pure overhead there; the last-wave split lost too (121.6, 44.8);
# * an 8x8 image on the 16x8 patch (half its rows past the image) ran 107.8 vs 86.2 for 8x8 (BM 64).
MAX_SPLIT = 8          # K-slices (split 8 was the best measured on every 8x8 / 7x7 shape; more was not measured)
SPLIT_FILL = 0.5       # split only when the tiles fill less than half of the SMs (one partial wave) ...
SPLIT_MIN_KSTEPS = 5   # ... each slice >= 5 k-steps (the 1x1's 20 k-steps: split 4 = 9.8 µs, 8 = 13.0, 2 = 11.3)
SHORT_SLICE = 16       # k-steps: a split launch whose BN 256 slices are shorter takes BN 128 (_split_bn)
SMALL_IMAGE = 8        # output rows <= 8 pixels wide and high: a TW x TH = 8 x 8 patch (BM 64), not 16 x 8 (half empty)


def split_choice(tiles: int, k_tiles: int, sms: int = H200_SMS) -> int:
    """split_k for a grid of `tiles` tiles of `k_tiles` k-steps: as many slices as bring the units to a wave
    (sms // tiles), each slice >= SPLIT_MIN_KSTEPS k-steps, at most MAX_SPLIT; 1 where the tiles already fill
    half the SMs (the measured reasons above)."""
    if tiles >= SPLIT_FILL * sms:
        return 1
    return max(1, min(MAX_SPLIT, sms // tiles, k_tiles // SPLIT_MIN_KSTEPS))


def _split_bn(shape: dict, base: ConvConfig, OH: int, OW: int) -> int:
    """BN of a launch that split_choice splits: 128 where its units fill more SMs than BN 256's, or where BN 256's
    K-slices are shorter than SHORT_SLICE k-steps (the fp32 partials and their fixup then weigh as much as the
    MMAs; BN 128 needs half the slices for the same fill); else 256 (its B reuse). From the 06 'schedule' study
    with BN 128 (run 20261204T153112Z-9c34a026, fprop µs, BN 128 vs 256 each at its split_choice): ResNet 7x7 b1
    (16 vs 32 units) 9.1 vs 10.6; 1x1 1280ch 8x8 b4 (80 vs 120 units) 8.9 vs 9.6; 2x1280ch 8x8 (80 vs 120)
    20.7 vs 21.0; VAE 512ch 32x32 b1 (128 units each, BN 256 slices of 9 k-steps) 17.4 vs 18.7; but 2x1280ch
    16x16 (120 units each, slices of 30 k-steps) 37.8 vs 33.4: BN 256 kept. dgrad's sub-problems ran the same."""
    k_tiles = shape["R"] ** 2 * cdiv(shape["Ci"], base.BK)
    m_tiles = shape["B"] * cdiv(OH, base.TH) * cdiv(OW, base.TW)

    def units(bn):
        split = split_choice(m_tiles * cdiv(shape["Co"], bn), k_tiles)
        return split, m_tiles * cdiv(shape["Co"], bn) * split

    s256, u256 = units(256)
    if s256 == 1:
        return 256
    _, u128 = units(128)
    fill = lambda u: u / (cdiv(u, H200_SMS) * H200_SMS)  # noqa: E731
    return 128 if fill(u128) > fill(u256) or k_tiles / s256 < SHORT_SLICE else 256


@dataclasses.dataclass(frozen=True)
class WsConvConfig(ConvConfig):
    """ConvConfig plus the 1-warp producer's setmaxnreg budget (24..256, a multiple of 8; it only computes
    coordinates, pattern 4's default) and the schedule: split_k K-slices (1: persistent data-parallel), of the
    last wave only with split_last_wave. split_k = 0: split_choice per launch (its tiles and k-steps). serial: a
    split launch's tiles are summed by their last slice inside the kernel (serial split-K, no fixup launch); the
    same bits as the fixup. It changes nothing where a launch runs unsplit. flat: a 1x1, stride-1, unpadded fprop
    as the GEMM it is — x and y viewed as one row of B·H·W pixels (flat_view), so a tile is TW = BM consecutive
    pixels across rows and images (the GEMM's tiled [BM, BK] box; TH must be 1), not a patch of one image."""
    producer_regs: int = 40
    split_k: int = 0
    split_last_wave: bool = False
    serial: bool = False
    flat: bool = False

    @classmethod
    def heuristic(cls, shape: dict, dtype: str) -> "WsConvConfig":
        base = ConvConfig.heuristic(shape, dtype)  # the pipelined kernel's tile: the same boxes and ring
        OH = out_size(shape["H"], shape["R"], shape["stride"], shape["pad"])
        OW = out_size(shape["W"], shape["R"], shape["stride"], shape["pad"])
        if OH <= SMALL_IMAGE and OW <= SMALL_IMAGE:
            base = dataclasses.replace(base, TH=8, TW=8, num_warps=4)
        if base.BN == 256 and _split_bn(shape, base, OH, OW) == 128:
            base = dataclasses.replace(base, BN=128)
        return cls(**dataclasses.asdict(base))

    def validate(self, dtype: str):
        super().validate(dtype)
        if not 24 <= self.producer_regs <= 256 or self.producer_regs % 8:
            raise ValueError(f"producer_regs must be a multiple of 8 in 24..256 (setmaxnreg); got {self.producer_regs}")
        if not 0 <= self.split_k <= 16:
            raise ValueError(f"WsConvConfig.split_k must be in 0..16 (0: chosen per launch); got {self.split_k}")
        if self.flat and self.TH != 1:
            raise ValueError(f"WsConvConfig(flat=True) tiles one row of pixels: TH must be 1 (TW = BM); got TH={self.TH}")
        return self

    def plan(self, tiles: int, k_tiles: int, sms: int) -> tuple[int, int, int]:
        """(split_k, FULL_TILES, units) of one launch: split_k = 0 -> split_choice; more slices than the launch has
        k-steps -> one slice per k-step (a dgrad's sub-problems have different tap counts under one config); a
        split with no tile to split (whole waves under split_last_wave) -> data-parallel."""
        split = min(self.split_k or split_choice(tiles, k_tiles, sms), k_tiles)
        if split == 1:
            return 1, 0, tiles
        full, units = schedule.splitk_plan(tiles, split, self.split_last_wave, sms)
        return (1, 0, tiles) if full == tiles else (split, full, units)

    def run_launch(self, L: Launch, dtype: str, trace=None):
        """One conv.Launch (fprop, or a dgrad sub-problem) through conv_fprop_ws_kernel under this schedule, then
        the split tiles' fixup. trace: an int64 tensor of TRACE_CTAS · TRACE_ITERS · UNIT_TRACE_FIELDS elements ->
        the INSTRUMENT build's per-unit stamps (igemm.trace)."""
        import torch
        descs = L.descriptors(self, dtype)
        n_th, n_tw, n_m, _ = L.grid_args(self, L.x.device)
        sms = num_sms(L.x.device)
        tiles = n_m * cdiv(L.Co, self.BN)
        k_tiles = L.RH * L.RW * cdiv(L.Ci, self.BK)
        split, full, units = self.plan(tiles, k_tiles, sms)
        work = cnt = None
        if split > 1:
            work = torch.empty(split * (tiles - full) * self.BM * self.BN, dtype=torch.float32, device=L.x.device)
            if self.serial:  # None under a capture on a stream with no counters yet: the fixup then (same bits)
                cnt = tile_counters(L.x.device, tiles - full)
        grid = (max(1, min(units, self.ctas_per_sm * sms)), )
        fl = isinstance(L, FilterLaunch)
        conv_fprop_ws_kernel[grid](*descs, work, L.Ci, L.Co, n_th, n_tw, n_m, L.oph, full, L.r0 if fl else 0,
                                   L.s0 if fl else 0, RH=L.RH, RW=L.RW, STRIDE=L.stride, PAD_H=L.pad_h, PAD_W=L.pad_w,
                                   NUM_STAGES=self.num_stages, GROUP_M=self.group_m, PRODUCER_REGS=self.producer_regs,
                                   SPLIT_K=split, num_warps=self.num_warps, R_FULL=L.R_full if fl else 0,
                                   TSTEP=L.tstep if fl else 1, t_ptr=trace, INSTRUMENT=trace is not None,
                                   cnt_ptr=cnt, SERIAL=cnt is not None)
        if split > 1 and cnt is None:
            y, _ = L.y_view()
            s3 = L.P * L.Co  # the element strides of the y descriptor's [B, OH', P, OW', P·Co] view (Launch.descriptors)
            s2 = L.OW * s3
            s1 = L.P * s2
            r = REDUCE_BLOCK
            blocks = (self.BM // r["BR"]) * cdiv(self.BN, r["BC"])
            patch_fixup_kernel[(tiles - full, blocks)](
                work, y, n_th, n_tw, n_m, L.Co, L.OH, L.OW, L.OH * s1, s1, s3, L.oph * s2, full, TH=self.TH,
                TW=self.TW, BN=self.BN, GROUP_M=self.group_m, SPLIT_K=split, **r)


@dataclasses.dataclass(frozen=True)
class FilterLaunch(conv.ParityLaunch):
    """A dgrad sub-problem (conv.dgrad_launches' geometry) reading the forward filter in place: w is the OHWI
    [Co_fwd, R, R, Ci_fwd] weight (a view of a channels-last weight: no rotated copy, which at 1280 x 1280 x 3 x 3
    cost more than the dgrad's MMAs), its boxes [BK, 1, BN] at forward tap (r0 − tstep·r, s0 − tstep·s)."""
    R_full: int = 0
    r0: int = 0
    s0: int = 0
    tstep: int = 1

    def descriptors(self, cfg: ConvConfig, dtype: str):
        lx, lw, ly = conv._layouts(cfg, dtype)
        P, B, H, W, Ci, Co = self.P, self.B, self.H, self.W, self.Ci, self.Co
        x_desc = descriptor(self.x, [1, cfg.TH, 1, cfg.TW, cfg.BK], lx, shape=[B, H, 1, W, Ci],
                            strides=[H * W * Ci, W * Ci, W * Ci, Ci, 1])
        RR = self.R_full * self.R_full
        w_desc = descriptor(self.w, [cfg.BK, 1, cfg.BN], lw, shape=[Ci, RR, Co], strides=[RR * Co, Co, 1])
        y, y_co = self.y_view()
        OH, OW = self.OH, self.OW
        y_desc = descriptor(y, [1, cfg.TH, 1, cfg.TW, cfg.BN], ly, shape=[B, OH, P, OW, y_co],
                            strides=[OH * P * OW * P * Co, P * OW * P * Co, OW * P * Co, P * Co, 1])
        return x_desc, w_desc, y_desc


def filter_launches(grad_output, weight, dx, stride: int, padding: int) -> list[FilterLaunch]:
    """conv.dgrad_launches' sub-problems (most taps first) on the forward filter in place: sub-problem tap (i, j)
    is forward tap (rt[0] − stride·i, st[0] − stride·j) (dgrad_subproblems' tap lists step by −stride)."""
    B, Co, OH, OW = grad_output.shape
    Ci, R = weight.shape[1], weight.shape[2]
    w = conv.weight_ohwi(weight)
    out = []
    for ph, pw, rt, st, pad_h, pad_w in conv.dgrad_subproblems(R, padding, stride):
        if rt and st:
            out.append(FilterLaunch(grad_output, w, dx, B, OH, OW, Co, Ci, dx.shape[2] // stride, dx.shape[3] // stride,
                                    len(rt), len(st), 1, pad_h, pad_w, P=stride, oph=ph if stride > 1 else 0,
                                    col=pw if stride > 1 else 0, R_full=R, r0=rt[0], s0=st[0], tstep=stride))
    return sorted(out, key=lambda L: -L.RH * L.RW)


FLAT_BM = 128  # flat=True without a TH / TW of its own: a 128-pixel row tile (the GEMM's BM)


def flat_check(shape: dict) -> None:
    if (shape["R"], shape["stride"], shape["pad"]) != (1, 1, 0):
        raise ValueError(f"WsConvConfig(flat=True) needs a 1x1, stride-1, unpadded conv (its pixels are then the GEMM's "
                         f"rows); got R={shape['R']}, stride={shape['stride']}, padding={shape['pad']}")


def flat_view(shape: dict) -> dict:
    """The flat geometry of a 1x1 stride-1 unpadded conv: one image, one row of B·H·W pixels."""
    return {**shape, "B": 1, "H": 1, "W": shape["B"] * shape["H"] * shape["W"]}


def ws_configure(shape: dict, dtype: str, overrides: dict) -> WsConvConfig:
    known = {f.name for f in dataclasses.fields(WsConvConfig)}
    over = {k: v for k, v in overrides.items() if k in known}
    if over.get("flat"):
        flat_check(shape)
        if "TH" not in over and "TW" not in over:
            over = {"TH": 1, "TW": FLAT_BM, **over}
    return dataclasses.replace(WsConvConfig.heuristic(shape, dtype), **over).validate(dtype)


def ws_check(x, weight, stride=1, padding=0):
    try:
        check(x, weight, stride, padding)
    except ValueError as e:
        raise ValueError(str(e).replace("'gluon-pipelined'", "'gluon-ws'")) from None


def fprop_ws(x, weight, stride=1, padding=0, config: WsConvConfig | None = None, trace=None):
    """conv2d through the warp-specialized instance; trace: see WsConvConfig.run_launch (the timeline build)."""
    ws_check(x, weight, stride, padding)
    dtype = dtype_name(x)
    cfg = (config or WsConvConfig.heuristic(_shape_of(x, weight, stride, padding), dtype)).validate(dtype)
    R = weight.shape[2]
    y = _empty_out(x, weight.shape[0], out_size(x.shape[2], R, stride, padding), out_size(x.shape[3], R, stride, padding))
    L = conv.fprop_launch(x, weight, stride, padding, y)
    if cfg.flat:  # one row of B·H·W pixels: the same NHWC memory (dense channels-last, ws_check), a flat view
        flat_check(_shape_of(x, weight, stride, padding))
        n = L.B * L.H * L.W
        L = dataclasses.replace(L, B=1, H=1, W=n, OH=1, OW=n)
    L.run(cfg, dtype, trace)
    return y


def _ws_spec(shape: dict, dtype: str, cfg: WsConvConfig, RH: int, RW: int, OH: int, OW: int, pad_h: int,
             pad_w: int, stride: int, view: dict, R_full: int = 0, tstep: int = 1, instrument: bool = False):
    tiles = shape["B"] * cdiv(OH, cfg.TH) * cdiv(OW, cfg.TW) * cdiv(view["Co"], cfg.BN)
    split, _, _ = cfg.plan(tiles, RH * RW * cdiv(view["Ci"], cfg.BK), H200_SMS)
    serial = cfg.serial and split > 1
    args = {**_codegen_args(view, dtype, cfg, OH, OW), "work": "*fp32" if split > 1 else None, "FULL_TILES": "i32",
            "r0": "i32", "s0": "i32", "t_ptr": "*i64" if instrument else None, "cnt_ptr": "*i32" if serial else None}
    if R_full:
        args["w_desc"] = desc_type(dtype, [cfg.BK, 1, cfg.BN], conv._layouts(cfg, dtype)[1])
    ce = dict(RH=RH, RW=RW, STRIDE=stride, PAD_H=pad_h, PAD_W=pad_w, NUM_STAGES=cfg.num_stages,
              GROUP_M=cfg.group_m, PRODUCER_REGS=cfg.producer_regs, SPLIT_K=split, num_warps=cfg.num_warps,
              R_FULL=R_full, TSTEP=tstep, INSTRUMENT=instrument, SERIAL=serial)
    return kernel_spec(conv_fprop_ws_kernel, args, ce, num_warps=cfg.num_warps)


def fprop_ws_codegen(shape: dict, dtype: str, config: WsConvConfig | None = None, instrument: bool = False):
    """The kernel fprop_ws launches for shape on the H200 (its schedule included); instrument: its timeline build."""
    cfg = (config or WsConvConfig.heuristic(shape, dtype)).validate(dtype)
    if cfg.flat:
        flat_check(shape)
        shape = flat_view(shape)
    OH = out_size(shape["H"], shape["R"], shape["stride"], shape["pad"])
    OW = out_size(shape["W"], shape["R"], shape["stride"], shape["pad"])
    return _ws_spec(shape, dtype, cfg, shape["R"], shape["R"], OH, OW, shape["pad"], shape["pad"], shape["stride"],
                    shape, instrument=instrument)


def fixup_codegen(split_k: int = 4, dtype: str = "bfloat16", TH: int = 8, TW: int = 8, BN: int = 128):
    """patch_fixup_kernel as a split conv launch runs it (the census's fixup row)."""
    return kernel_spec(patch_fixup_kernel,
                       {"w_ptr": "*fp32", "y_ptr": "*bf16" if dtype == "bfloat16" else "*fp16", "n_th": "i32",
                        "n_tw": "i32", "n_tiles_m": "i32", "Co": "i32", "OH": "i32", "OW": "i32", "ys0": "i32",
                        "ys1": "i32", "ys3": "i32", "y_off": "i32", "FULL_TILES": "i32"},
                       dict(TH=TH, TW=TW, BN=BN, GROUP_M=8, SPLIT_K=split_k, **REDUCE_BLOCK),
                       num_warps=REDUCE_BLOCK["num_warps"])


# ---- dgrad on the instance ----------------------------------------------------------------------------

def dgrad_ws_check(grad_output, weight, input_h, input_w, stride=1, padding=0):
    return dgrad_check(grad_output, weight, input_h, input_w, stride, padding, variant="gluon-ws")


def dgrad_ws_configure(shape: dict, dtype: str, overrides: dict) -> WsConvConfig:
    """Each sub-problem (Ci <-> Co swapped) takes gluon-ws fprop's heuristic; split_k 0 picks per sub-problem."""
    if overrides.get("flat"):
        raise ValueError("WsConvConfig(flat=True) is fprop's (conv2d) geometry; conv2d_input_grad's sub-problems "
                         "read the forward filter in place and take patches")
    return ws_configure(_fprop_view(shape), dtype, overrides)


def dgrad_ws(grad_output, weight, input_h, input_w, stride=1, padding=0, config: WsConvConfig | None = None):
    """conv.dgrad's sub-problems through the warp-specialized instance (each with its own split-K plan)."""
    import torch
    shape = dgrad_ws_check(grad_output, weight, input_h, input_w, stride, padding)
    dtype = dtype_name(grad_output)
    cfg = (config or WsConvConfig.heuristic(_fprop_view(shape), dtype)).validate(dtype)
    if cfg.flat:
        raise ValueError("WsConvConfig(flat=True) is fprop's (conv2d) geometry; conv2d_input_grad's sub-problems read "
                         "the forward filter in place and take patches")
    Ci, R = weight.shape[1], weight.shape[2]
    dx = torch.empty((grad_output.shape[0], Ci, input_h, input_w), dtype=grad_output.dtype,
                     device=grad_output.device, memory_format=torch.channels_last)
    if any(not (rt and st) for _, _, rt, st, _, _ in conv.dgrad_subproblems(R, padding, stride)):
        dx.zero_()  # parities no tap reaches (1x1, stride 2)
    if cfg.BN >= 64:  # the [BK, 1, BN] filter box needs 128-byte rows for the 128-byte swizzle
        launches = filter_launches(grad_output, weight, dx, stride, padding)
    else:
        launches = conv.dgrad_launches(grad_output, weight, dx, stride, padding)
    conv.run_concurrently(launches, cfg, dtype, grad_output.device)
    return dx


def dgrad_ws_codegen(shape: dict, dtype: str, config: WsConvConfig | None = None):
    """The kernel of the dgrad's largest sub-problem (stride 1: the one launch), with its schedule."""
    view = _fprop_view(shape)
    cfg = (config or WsConvConfig.heuristic(view, dtype)).validate(dtype)
    st, R, pad = shape["stride"], shape["R"], shape["pad"]
    ph, pw, rt, stp, pad_h, pad_w = max((s for s in conv.dgrad_subproblems(R, pad, st) if s[2] and s[3]),
                                        key=lambda s: len(s[2]) * len(s[3]))
    OH, OW = shape["H"] // st, shape["W"] // st
    return _ws_spec(shape, dtype, cfg, len(rt), len(stp), OH, OW, pad_h, pad_w, 1, view,
                    R_full=R if cfg.BN >= 64 else 0, tstep=st)


KNOBS = {**conv.KNOBS, "producer_regs": (24, 40, 56), "split_k": (0, 1, 2, 3, 4, 6, 8), "split_last_wave": (False, True),
         "serial": (False, True), "flat": (False, True)}


def _register():
    from ..registry import register

    def ws_fn(x, weight, stride=1, padding=0, out=None, config=None):
        return fprop_ws(x, weight, stride, padding, config=config)

    register("conv2d", "gluon-ws", pattern="warp-specialized", needs_hopper=True, check=ws_check,
             configure=ws_configure, codegen=fprop_ws_codegen, knobs=KNOBS,
             roots=(conv_fprop_ws_kernel, patch_fixup_kernel, REDUCE_BLOCK, tile_counters, WsConvConfig, ConvConfig, Launch, fprop_ws,
                    flat_check, flat_view, FLAT_BM, ws_configure, conv.fprop_launch, ws_check, check, conv.a_path, conv._layouts, conv.weight_ohwi, split_choice),
             description="warp-specialized implicit GEMM on the template: a 1-warp TMA producer (setmaxnreg) for the "
                         "shifted x boxes and weight boxes, consumer warpgroups on wgmma, empty/full ring; data-parallel "
                         "or split-K schedule with a deterministic NHWC fixup")(ws_fn)

    def dgrad_fn(grad_output, weight, input_h, input_w, stride=1, padding=0, out=None, config=None):
        return dgrad_ws(grad_output, weight, input_h, input_w, stride, padding, config=config)

    register("conv2d_input_grad", "gluon-ws", pattern="warp-specialized", needs_hopper=True, check=dgrad_ws_check,
             configure=dgrad_ws_configure, codegen=dgrad_ws_codegen, knobs=KNOBS,
             roots=(conv_fprop_ws_kernel, patch_fixup_kernel, REDUCE_BLOCK, tile_counters, WsConvConfig, ConvConfig, Launch,
                    conv.ParityLaunch, FilterLaunch, filter_launches, dgrad_ws, dgrad_ws_check, dgrad_check, conv.dgrad_launches,
                    conv.run_concurrently, conv.dgrad_subproblems, conv._dgrad_filters, conv._taps, _fprop_view,
                    conv._layouts, split_choice),
             description="dgrad as stride**2 parity sub-problems (conv.dgrad_launches) through the warp-specialized "
                         "template instance, each with its own split-K plan, side by side on forked streams")(dgrad_fn)


_register()
