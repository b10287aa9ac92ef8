"""wgrad on the implicit-GEMM template: the warp-specialized, persistent weight gradient ("gluon-ws" of
conv2d_weight_grad).

wgrad is a GEMM with M = Co (output channels), N = R·R·Ci (taps x input channels, tap-major: the OHWI
gradient's layout) and K = the B·OH·OW output pixels, in patches of TH x TW pixels per k-step. In the
template's terms (igemm/__init__.py):

* producer: igemm.producers.wgrad_issue — the grad_output box [1, TH, TW, BM] (A, transposed: pixels are K)
  and the x box [1, TH, 1, TW, BN] shifted by the tap (the parity-split view at stride 2), on the template's
  empty/full ring (igemm.ring) from a 1-warp producer partition (setmaxnreg);
* schedule: igemm.schedule's units over num_pid_m = Co / BM row tiles and num_pid_n = R·R·Ci / BN column
  tiles (pid_n = tap x ci block), each of n_patches k-steps: persistent data-parallel, or split-K over the
  pixels (every tile, or only the last partial wave: split_last_wave);
* consumer: one warpgroup (BM 64) or two (BM 128, cooperative) on async wgmma;
* epilogue: a whole tile -> the gradient's dtype -> smem -> one TMA store of the [BM, 1, BN] box of the
  [Co, R·R, Ci] gradient (clipped at Co and at Ci: a ci block past Ci never writes the next tap); a K-slice's
  fp32 partial -> its workspace block (igemm.epilogues.store_partial), then wgrad_fixup_kernel sums the
  slices in order (deterministic, no atomics, no zero fill) and stores the gradient.

What it changes against gluon-pipelined's conv_wgrad_kernel (conv.py: one tile per program, a non-specialized
ring, fp32 atomics into a zeroed workspace under a split, 32-bit stores from the wgmma layout otherwise):
the grid is persistent, so a CTA's next tile loads while its last one stores, the epilogue is one TMA
store per tile, and a split is deterministic.
"""
from __future__ import annotations

import dataclasses
import functools

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                              warpgroup_mma_wait)

from ..specs.conv import out_size
from . import conv
from .conv import ITEMSIZE, WgradConfig, wgrad_check
from .hopper import H200_SMS, cdiv, desc_type, descriptor, dtype_name, kernel_spec, num_sms
from .igemm import schedule
from .igemm.epilogues import REDUCE_BLOCK, store_partial
from .igemm.producers import tap_shift, wgrad_issue
from .igemm.ring import ws_ring_barriers, ws_ring_invalidate
from .igemm.schedule import tile_coords, unit, units_of


@gluon.jit
def _wgrad_units(Co, n_ci, n_patches, FULL_TILES, R: gl.constexpr, BM: gl.constexpr, SPLIT_K: gl.constexpr):
    """The schedule's view of the wgrad problem: (start, nprog, num_pid_m, num_pid_n, my_units) over
    Co / BM x (R·R taps x n_ci ci blocks) tiles of n_patches k-steps."""
    start = gl.program_id(0)
    nprog = gl.num_programs(0)
    num_pid_m = gl.cdiv(Co, BM)
    num_pid_n = R * R * n_ci
    my_tiles = (num_pid_m * num_pid_n - start + nprog - 1) // nprog
    my_units = units_of(start, nprog, num_pid_m, num_pid_n, n_patches, my_tiles, FULL_TILES, SPLIT_K)
    return start, nprog, num_pid_m, num_pid_n, my_units


@gluon.jit
def _wgrad_unit(i, start, nprog, n_patches, num_pid_m, num_pid_n, FULL_TILES, GROUP_M: gl.constexpr,
                SPLIT_K: gl.constexpr, SLICE_MAJOR: gl.constexpr):
    """This CTA's i-th work unit (igemm.schedule.unit's contract: pid_m, pid_n, k0, k1, sl, tile). SLICE_MAJOR
    (split-K only): unit u = start + i * nprog walks the split tiles slice by slice (slice u // split_tiles of
    tile u % split_tiles) instead of a tile's slices next to each other, so the CTAs running at once read one
    or two pixel ranges, each shared by every tile (gluon-pipelined's grid order), not SPLIT_K ranges each
    shared by 1 / SPLIT_K of the tiles. Same workspace blocks, same fixup."""
    if SLICE_MAJOR and SPLIT_K > 1:
        u = start + i * nprog
        tile = u
        sl = i * 0
        k0 = i * 0
        k1 = n_patches
        if u >= FULL_TILES:
            n_split = num_pid_m * num_pid_n - FULL_TILES
            v = u - FULL_TILES
            tile = FULL_TILES + v % n_split
            sl = v // n_split + 1
            k0 = (sl - 1) * n_patches // SPLIT_K
            k1 = sl * n_patches // SPLIT_K
        pid_m, pid_n = tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)
        return pid_m, pid_n, k0, k1, sl, tile
    return unit(i, start, nprog, n_patches, num_pid_m, num_pid_n, FULL_TILES, GROUP_M, SPLIT_K)


@gluon.jit
def _wgrad_ws_producer(dy_desc, x_desc, a_bufs, b_bufs, empty_bars, full_bars, Ci, Co, n_th, n_tw, n_patches, n_ci,
                       FULL_TILES, R: gl.constexpr, STRIDE: gl.constexpr, PAD: gl.constexpr,
                       NUM_STAGES: gl.constexpr, GROUP_M: gl.constexpr, SPLIT_K: gl.constexpr,
                       SLICE_MAJOR: gl.constexpr):
    """1 warp: for every k-step (pixel patch) q of every unit of this CTA, wait for the slot to be EMPTY, then
    issue the grad_output box and the tap-shifted x box (wgrad_issue, completing on FULL)."""
    BM: gl.constexpr = dy_desc.block_type.shape[3]
    start, nprog, num_pid_m, num_pid_n, my_units = _wgrad_units(Co, n_ci, n_patches, FULL_TILES, R, BM, SPLIT_K)
    g = 0
    for i in range(my_units):
        pid_m, pid_n, k0, k1, sl, tile = _wgrad_unit(i, start, nprog, n_patches, num_pid_m, num_pid_n, FULL_TILES,
                                                      GROUP_M, SPLIT_K, SLICE_MAJOR)
        rs = pid_n // n_ci
        dh, ph, dw, pw = tap_shift(rs // R, rs % R, STRIDE, PAD, PAD)
        for q in range(k0, k1):
            slot = g % NUM_STAGES
            mbarrier.wait(empty_bars.index(slot), ((g // NUM_STAGES) & 1) ^ 1)
            wgrad_issue(dy_desc, x_desc, a_bufs, b_bufs, full_bars, slot, q, pid_m, pid_n % n_ci, dh, ph, dw, pw, Ci,
                        n_th, n_tw, True)
            g += 1


@gluon.jit
def _wgrad_ws_consumer(g_desc, work, a_bufs, b_bufs, c_smem, empty_bars, full_bars, Co, n_patches, n_ci, FULL_TILES,
                       R: gl.constexpr, NUM_STAGES: gl.constexpr, GROUP_M: gl.constexpr, SPLIT_K: gl.constexpr,
                       SLICE_MAJOR: gl.constexpr, num_warps: gl.constexpr):
    """num_warps warps (whole warpgroups on one BM-row tile): wait FULL, async wgmma of dy^T x x_shifted,
    release the previous step's slot once its MMA retired. A whole tile (sl = 0): smem and one TMA store of
    the [BM, 1, BN] gradient box; a K-slice (sl >= 1) of split tile t: its fp32 partial to workspace block
    (sl - 1) * split_tiles + t (store_partial)."""
    TH: gl.constexpr = a_bufs.shape[2]
    TW: gl.constexpr = a_bufs.shape[3]
    BM: gl.constexpr = a_bufs.shape[4]
    BN: gl.constexpr = b_bufs.shape[5]
    BK: gl.constexpr = TH * TW
    dtype: gl.constexpr = g_desc.dtype
    a_lay: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BK, BM], dtype)
    b_lay: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BK, BN], dtype)
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                         instr_shape=[16, BN, 16])
    start, nprog, num_pid_m, num_pid_n, my_units = _wgrad_units(Co, n_ci, n_patches, FULL_TILES, R, BM, SPLIT_K)
    split_tiles = num_pid_m * num_pid_n - FULL_TILES
    g = 0
    for i in range(my_units):
        pid_m, pid_n, k0, k1, sl, tile = _wgrad_unit(i, start, nprog, n_patches, num_pid_m, num_pid_n, FULL_TILES,
                                                      GROUP_M, SPLIT_K, SLICE_MAJOR)
        acc = gl.zeros([BM, BN], gl.float32, acc_layout)
        for q in range(k0, k1):
            slot = g % NUM_STAGES
            mbarrier.wait(full_bars.index(slot), (g // NUM_STAGES) & 1)
            a = a_bufs.index(slot)._reinterpret(dtype, [BK, BM], a_lay).permute((1, 0))
            b = b_bufs.index(slot)._reinterpret(dtype, [BK, BN], b_lay)
            acc = warpgroup_mma(a, b, acc, is_async=True)
            acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc, ))
            if q > k0:  # the MMA of step g - 1 has retired: its slot goes back to the producer
                mbarrier.arrive(empty_bars.index((g - 1) % NUM_STAGES))
            g += 1
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
        mbarrier.arrive(empty_bars.index((g - 1) % NUM_STAGES))
        if SPLIT_K > 1 and sl > 0:  # a K-slice: its fp32 partial straight from registers
            store_partial(work, acc, (sl - 1) * split_tiles + tile - FULL_TILES + 1, acc_layout, BM, BN, BM, BN, False)
        else:
            tma.store_wait(0)  # the previous tile's store has read the staging buffer
            c_smem.store(acc.to(dtype))
            fence_async_shared()
            tma.async_copy_shared_to_global(g_desc, [pid_m * BM, pid_n // n_ci, (pid_n % n_ci) * BN],
                                            c_smem._reinterpret(dtype, [BM, 1, BN], g_desc.layout))
    tma.store_wait(0)


@gluon.jit(do_not_specialize=["FULL_TILES"])  # one compile for every split point
def conv_wgrad_ws_kernel(dy_desc, x_desc, g_desc, work, Ci, Co, n_th, n_tw, n_patches, n_ci, FULL_TILES,
                         R: gl.constexpr, STRIDE: gl.constexpr, PAD: gl.constexpr, NUM_STAGES: gl.constexpr,
                         GROUP_M: gl.constexpr, PRODUCER_REGS: gl.constexpr, SPLIT_K: gl.constexpr,
                         num_warps: gl.constexpr, SLICE_MAJOR: gl.constexpr = False):
    """work: the fp32 workspace under SPLIT_K > 1 (None otherwise); tiles FULL_TILES and later are split over
    the pixels. g_desc: the [Co, R·R, Ci] gradient (OHWI memory) in [BM, 1, BN] boxes."""
    TH: gl.constexpr = dy_desc.block_type.shape[1]
    TW: gl.constexpr = dy_desc.block_type.shape[2]
    BM: gl.constexpr = dy_desc.block_type.shape[3]
    BN: gl.constexpr = x_desc.block_type.shape[4]
    dtype: gl.constexpr = x_desc.dtype
    c_lay: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BM, BN], dtype)
    a_bufs = gl.allocate_shared_memory(dtype, [NUM_STAGES, 1, TH, TW, BM], dy_desc.layout)
    b_bufs = gl.allocate_shared_memory(dtype, [NUM_STAGES, 1, TH, 1, TW, BN], x_desc.layout)
    c_smem = gl.allocate_shared_memory(dtype, [BM, BN], c_lay)
    empty_bars, full_bars = ws_ring_barriers(NUM_STAGES, 1)
    gl.warp_specialize([
        (_wgrad_ws_consumer, (g_desc, work, a_bufs, b_bufs, c_smem, empty_bars, full_bars, Co, n_patches, n_ci,
                              FULL_TILES, R, NUM_STAGES, GROUP_M, SPLIT_K, SLICE_MAJOR, num_warps)),
        (_wgrad_ws_producer, (dy_desc, x_desc, a_bufs, b_bufs, empty_bars, full_bars, Ci, Co, n_th, n_tw, n_patches,
                              n_ci, FULL_TILES, R, STRIDE, PAD, NUM_STAGES, GROUP_M, SPLIT_K, SLICE_MAJOR)),
    ], [1], [PRODUCER_REGS])
    ws_ring_invalidate(empty_bars, full_bars, NUM_STAGES)


@gluon.jit(do_not_specialize=["FULL_TILES"])
def wgrad_fixup_kernel(w_ptr, g_ptr, Co, Ci, n_ci, FULL_TILES, RR: gl.constexpr, BM: gl.constexpr, BN: gl.constexpr,
                       GROUP_M: gl.constexpr, SPLIT_K: gl.constexpr, BR: gl.constexpr, BC: gl.constexpr,
                       num_warps: gl.constexpr):
    """The split tiles' gradient = the sum over their SPLIT_K fp32 partials (store_partial's row-major [BM, BN]
    blocks: slice s of split tile t is block s * split_tiles + t), in slice order (deterministic), cast and
    stored into the [Co, RR, Ci] gradient, clipped at Co and at Ci. Program (t, b): split tile FULL_TILES + t
    (the kernel's grouped order), its b-th [BR, BC] block."""
    L: gl.constexpr = gl.BlockedLayout([1, 4], [1, 32], [num_warps, 1], [1, 0])
    num_pid_m = gl.cdiv(Co, BM)
    num_pid_n = RR * n_ci
    split_tiles = num_pid_m * num_pid_n - FULL_TILES
    t = gl.program_id(0)
    pid_m, pid_n = tile_coords(FULL_TILES + t, num_pid_m, num_pid_n, GROUP_M)
    NB_C: gl.constexpr = (BN + BC - 1) // BC
    b = gl.program_id(1)
    rl = (b // NB_C) * BR + gl.arange(0, BR, layout=gl.SliceLayout(1, L))
    cl = (b % NB_C) * BC + gl.arange(0, BC, layout=gl.SliceLayout(0, L))
    co = pid_m * BM + rl
    ci = (pid_n % n_ci) * BN + cl
    mask = gl.expand_dims(co < Co, 1) & gl.expand_dims((ci < Ci) & (cl < BN), 0)
    wrow = gl.expand_dims(t.to(gl.int64) * BM + rl, 1)
    wcol = gl.expand_dims(cl, 0)
    acc = gl.zeros([BR, BC], gl.float32, L)
    for s in gl.static_range(SPLIT_K):
        acc += gl.load(w_ptr + (wrow + s * split_tiles.to(gl.int64) * BM) * BN + wcol, mask=mask, other=0.0)
    off = gl.expand_dims(co.to(gl.int64) * (RR * Ci) + (pid_n // n_ci) * Ci, 1) + gl.expand_dims(ci, 0)
    gl.store(g_ptr + off, acc.to(g_ptr.dtype.element_ty), mask=mask)


# ---- the schedule choice -------------------------------------------------------------------------------
# The rule carries over gluon-pipelined wgrad's measured cost model (conv._wave_split: waves x (k-steps per unit
# + a fixed cost of about 4 k-steps), which picked the measured best split on ResNet's downsample, SD 1x1 and the
# example shape), with the units of a persistent grid: a tile of one split is a whole unit. Measured on an H100
# (06 'schedule' study, run 20261207T220056Z-18d13d24, µs; no H200 run yet): the rule's split was the fastest or
# within 1% of it on all 7 shapes, e.g. 2x1280ch 8x8 15.6 (data-parallel 15.7, split 2-8 103-104: the [Co, 9, Ci]
# fp32 fixup), 1x512ch 32x32 16.0 (split 2 24.1, split 4 36.0).
MAX_SPLIT = 16          # K-slices over the pixels (gluon-pipelined's sweep measured up to 16 on the long loops)
UNIT_COST = 4           # k-steps: the fixed cost of a unit in the wave model (conv._wave_split's, measured)


@functools.lru_cache(maxsize=256)
def split_choice(tiles: int, n_patches: int, sms: int = H200_SMS) -> int:
    """split_k over the pixels: argmin over s <= MAX_SPLIT of ceil(tiles·s / sms) x (ceil(n_patches / s) +
    UNIT_COST), the fewest slices on a tie (each slice >= 1 k-step); 1 when the tiles fill a wave or more."""
    if tiles >= sms:
        return 1
    best, pick = None, 1
    for s in range(1, min(MAX_SPLIT, n_patches) + 1):
        cost = cdiv(tiles * s, sms) * (cdiv(n_patches, s) + UNIT_COST)
        if best is None or cost < best:
            best, pick = cost, s
    return pick


@dataclasses.dataclass(frozen=True)
class WsWgradConfig(WgradConfig):
    """WgradConfig's patch (TH x TW pixels per k-step) and BM x BN tile, with the template's knobs: the 1-warp
    producer's setmaxnreg budget, GROUP_M (grouped tile order: GROUP_M co blocks share each tap / ci column),
    and the schedule — split_k slices of the pixels (0: split_choice; 1: persistent data-parallel), of the last
    partial wave only with split_last_wave, walked slice by slice with slice_major (_wgrad_unit; the heuristic
    turns it on, see there). WgradConfig.splits is gluon-pipelined's and is not used here."""
    producer_regs: int = 40
    group_m: int = 8
    split_k: int = 0
    split_last_wave: bool = False
    slice_major: bool = False

    def smem_bytes(self, dtype: str) -> int:  # the ring + the epilogue's [BM, BN] staging tile
        return super().smem_bytes(dtype) + self.BM * self.BN * ITEMSIZE[dtype]

    def validate(self, dtype: str):
        super().validate(dtype)  # WgradConfig's rules, its shared-memory check on smem_bytes above included
        if not 24 <= self.producer_regs <= 256 or self.producer_regs % 8:
            raise ValueError(f"producer_regs must be a multiple of 8 in 24..256 (setmaxnreg); got {self.producer_regs}")
        if not 0 <= self.split_k <= 16:
            raise ValueError(f"WsWgradConfig.split_k must be in 0..16 (0: chosen per shape); got {self.split_k}")
        return self

    @classmethod
    def heuristic(cls, shape: dict, dtype: str) -> "WsWgradConfig":
        # gluon-pipelined's measured patch and tile (WgradConfig.heuristic); 8 warps (two consumer warpgroups)
        # on BM 128, one on BM 64 (on BM 128, 4 warps: 2x1280ch 16x16 43.8 vs 43.7 µs, 64x256ch 14x14 47.5 vs
        # 47.8 tile-major: a tie). slice_major: a split launch walks its units slice by slice, so the CTAs of one
        # wave read different pixel ranges of the same few tiles' operands; tile-major had every CTA of a tile
        # on one x / dy range at once. Measured on an H100 (06 'schedule' study, run 20261207T220056Z-18d13d24,
        # the rule's split, slice- vs tile-major µs): 64x256ch 14x14 37.9 vs 47.8, SD 8x320ch 64x64 180.1 vs
        # 229.4; 8x320ch 64x64 split 4 188.4 vs 242.1, split 8 180.3 vs 228.9; launches the rule leaves
        # unsplit compile the same either way (SLICE_MAJOR is SPLIT_K > 1 only).
        base = WgradConfig.heuristic(shape, dtype)
        return cls(TH=base.TH, TW=base.TW, BM=base.BM, BN=base.BN, num_stages=base.num_stages,
                   num_warps=8 if base.BM == 128 else 4, slice_major=True)

    def plan(self, tiles: int, n_patches: int, sms: int) -> tuple[int, int, int]:
        """(split_k, FULL_TILES, units): split_k 0 -> split_choice; at most one slice per k-step; a split with no
        tile to split (whole waves under split_last_wave) -> data-parallel."""
        split = min(self.split_k or split_choice(tiles, n_patches, sms), n_patches)
        if split == 1:
            return 1, 0, tiles
        full, units = schedule.splitk_plan(tiles, split, self.split_last_wave, sms)
        return (1, 0, tiles) if full == tiles else (split, full, units)


def _layouts(cfg: WsWgradConfig, dtype: str):
    """(grad_output box, x box, gradient box) shared layouts: 128-byte swizzle for the operands (conv's), the
    epilogue tile's own swizzle for the [BM, 1, BN] store box."""
    bits = ITEMSIZE[dtype] * 8
    c = gl.NVMMASharedLayout.get_default_for([cfg.BM, cfg.BN], conv.GL_DTYPE[dtype])
    return (gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=bits, rank=4),
            gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=bits, rank=5),
            gl.NVMMASharedLayout(swizzle_byte_width=c.swizzle_byte_width, element_bitwidth=bits, rank=3))


def _geometry(shape: dict, cfg: WsWgradConfig):
    OH = out_size(shape["H"], shape["R"], shape["stride"], shape["pad"])
    OW = out_size(shape["W"], shape["R"], shape["stride"], shape["pad"])
    n_th, n_tw = cdiv(OH, cfg.TH), cdiv(OW, cfg.TW)
    n_ci = cdiv(shape["Ci"], cfg.BN)
    tiles = cdiv(shape["Co"], cfg.BM) * shape["R"] ** 2 * n_ci
    return OH, OW, n_th, n_tw, n_ci, tiles, shape["B"] * n_th * n_tw


def ws_wgrad_check(x, grad_output, kernel_size, stride=1, padding=0):
    return wgrad_check(x, grad_output, kernel_size, stride, padding, variant="gluon-ws")


def ws_wgrad_configure(shape: dict, dtype: str, overrides: dict) -> WsWgradConfig:
    known = {f.name for f in dataclasses.fields(WsWgradConfig)}
    return dataclasses.replace(WsWgradConfig.heuristic(shape, dtype),
                               **{k: v for k, v in overrides.items() if k in known}).validate(dtype)


def wgrad_ws(x, grad_output, kernel_size, stride=1, padding=0, config: WsWgradConfig | None = None):
    import torch
    shape = ws_wgrad_check(x, grad_output, kernel_size, stride, padding)
    dtype = dtype_name(x)
    cfg = (config or WsWgradConfig.heuristic(shape, dtype)).validate(dtype)
    B, Ci, H, W = x.shape
    Co, R, st = shape["Co"], kernel_size, stride
    OH, OW, n_th, n_tw, n_ci, tiles, n_patches = _geometry(shape, cfg)
    ld, lx, lg = _layouts(cfg, dtype)
    dy_desc = descriptor(grad_output, [1, cfg.TH, cfg.TW, cfg.BM], ld, shape=[B, OH, OW, Co],
                         strides=[OH * OW * Co, OW * Co, Co, 1])
    x_desc = descriptor(x, [1, cfg.TH, 1, cfg.TW, cfg.BN], lx, shape=[B, H // st, st, W // st, st * Ci],
                        strides=[H * W * Ci, st * W * Ci, W * Ci, st * Ci, 1])
    gw = torch.empty((Co, R, R, Ci), dtype=x.dtype, device=x.device)
    g_desc = descriptor(gw, [cfg.BM, 1, cfg.BN], lg, shape=[Co, R * R, Ci], strides=[R * R * Ci, Ci, 1])
    sms = num_sms(x.device)
    split, full, units = cfg.plan(tiles, n_patches, sms)
    work = None
    if split > 1:
        work = torch.empty(split * (tiles - full) * cfg.BM * cfg.BN, dtype=torch.float32, device=x.device)
    conv_wgrad_ws_kernel[(max(1, min(units, sms)), )](
        dy_desc, x_desc, g_desc, work, Ci, Co, n_th, n_tw, n_patches, n_ci, full, R=R, STRIDE=st, PAD=padding,
        NUM_STAGES=cfg.num_stages, GROUP_M=cfg.group_m, PRODUCER_REGS=cfg.producer_regs, SPLIT_K=split,
        num_warps=cfg.num_warps, SLICE_MAJOR=cfg.slice_major and split > 1)
    if split > 1:
        r = REDUCE_BLOCK
        wgrad_fixup_kernel[(tiles - full, cdiv(cfg.BM, r["BR"]) * cdiv(cfg.BN, r["BC"]))](
            work, gw, Co, Ci, n_ci, full, RR=R * R, BM=cfg.BM, BN=cfg.BN, GROUP_M=cfg.group_m, SPLIT_K=split, **r)
    return gw.permute(0, 3, 1, 2)  # OHWI memory: a channels-last [Co, Ci, R, R]


def wgrad_ws_codegen(shape: dict, dtype: str, config: WsWgradConfig | None = None):
    """The kernel wgrad_ws launches for shape on the H200 (its schedule included)."""
    cfg = (config or WsWgradConfig.heuristic(shape, dtype)).validate(dtype)
    ld, lx, lg = _layouts(cfg, dtype)
    OH, OW, n_th, n_tw, n_ci, tiles, n_patches = _geometry(shape, cfg)
    split, _, _ = cfg.plan(tiles, n_patches, H200_SMS)
    args = {"dy_desc": desc_type(dtype, [1, cfg.TH, cfg.TW, cfg.BM], ld),
            "x_desc": desc_type(dtype, [1, cfg.TH, 1, cfg.TW, cfg.BN], lx),
            "g_desc": desc_type(dtype, [cfg.BM, 1, cfg.BN], lg), "work": "*fp32" if split > 1 else None,
            "Ci": shape["Ci"], "Co": shape["Co"], "n_th": n_th, "n_tw": n_tw, "n_patches": n_patches, "n_ci": n_ci,
            "FULL_TILES": "i32"}
    ce = dict(R=shape["R"], STRIDE=shape["stride"], PAD=shape["pad"], NUM_STAGES=cfg.num_stages, GROUP_M=cfg.group_m,
              PRODUCER_REGS=cfg.producer_regs, SPLIT_K=split, num_warps=cfg.num_warps,
              SLICE_MAJOR=cfg.slice_major and split > 1)
    return kernel_spec(conv_wgrad_ws_kernel, args, ce, num_warps=cfg.num_warps)


def fixup_codegen(split_k: int = 4, dtype: str = "bfloat16", BM: int = 128, BN: int = 128, R: int = 3):
    """wgrad_fixup_kernel as a split wgrad launch runs it (the census's fixup row)."""
    return kernel_spec(wgrad_fixup_kernel,
                       {"w_ptr": "*fp32", "g_ptr": "*bf16" if dtype == "bfloat16" else "*fp16", "Co": "i32",
                        "Ci": "i32", "n_ci": "i32", "FULL_TILES": "i32"},
                       dict(RR=R * R, BM=BM, BN=BN, GROUP_M=8, SPLIT_K=split_k, **REDUCE_BLOCK),
                       num_warps=REDUCE_BLOCK["num_warps"])


KNOBS = {"TH": (1, 2, 4, 8), "TW": (8, 16, 32), "BM": (64, 128), "BN": (64, 128, 256), "num_stages": (2, 3, 4, 5),
         "num_warps": (4, 8), "producer_regs": (24, 40), "split_k": (0, 1, 2, 4, 8, 16),
         "split_last_wave": (False, True), "slice_major": (False, True)}


def _register():
    from ..registry import register

    def fn(x, grad_output, kernel_size, stride=1, padding=0, out=None, config=None):
        return wgrad_ws(x, grad_output, kernel_size, stride, padding, config=config)

    register("conv2d_weight_grad", "gluon-ws", pattern="warp-specialized", needs_hopper=True, check=ws_wgrad_check,
             configure=ws_wgrad_configure, codegen=wgrad_ws_codegen, knobs=KNOBS,
             roots=(conv_wgrad_ws_kernel, wgrad_fixup_kernel, REDUCE_BLOCK, WsWgradConfig, WgradConfig, wgrad_ws,
                    ws_wgrad_check, wgrad_check, _layouts, _geometry, split_choice, _wgrad_unit),
             description="warp-specialized persistent wgrad on the template: a 1-warp TMA producer of the grad_output "
                         "and tap-shifted x boxes, consumer warpgroups on wgmma, TMA-store epilogue; data-parallel or "
                         "split-K over the pixels with a deterministic fixup")(fn)


_register()
