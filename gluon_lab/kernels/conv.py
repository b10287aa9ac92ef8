"""Pattern 6: implicit-GEMM convolution on Hopper with what triton 3.6.0 has (tiled TMA only).

The forward pass ("fprop", op conv2d; gluon_lab/specs/conv.py) as a GEMM: M = B·OH·OW output pixels,
N = Co, K = R·R·Ci. triton 3.6.0's Hopper TMA has no im2col mode, so operand A is built from tiled
boxes:

* an output M-tile is a spatial patch of TH x TW pixels of one image (BM = TH·TW = 128 rows);
* K steps run over (r, s, channel block): for each, A is ONE tiled TMA box of x — the patch shifted by
  (r − pad, s − pad). TMA's zero fill outside the image is the padding, for free;
* stride 2 without im2col: x [B, H, W, Ci] is viewed as the 5-D [B, H/2, 2, W/2, 2·Ci] (strides
  [H·W·Ci, 2·W·Ci, W·Ci, 2·Ci, 1]). Input row 2·oh + r − pad = 2·(oh + dh) + ph with (dh, ph) =
  divmod(r − pad, 2): the stride-2 gather of a kernel row is a unit-stride box at (oh0 + dh, ph) of
  that view; the same for columns, whose parity folds into the channel dim (pw·Ci + c). Stride 1 is
  the same view with a unit parity dim. A box past Ci in channels reads the other parity's channels:
  they meet weight channels beyond Ci, which TMA zero-fills, so they add nothing;
* B (weights, OHWI [Co, R·R, Ci]) is a [BN, 1, BK] box, fed to wgmma as its K-major transpose;
* the persistent, GROUP_M-ordered, NUM_STAGES-ring pipeline of the GEMM (gemm.py): the load stream
  runs NUM_STAGES − 1 steps ahead across tile boundaries, one async wgmma group in flight;
* epilogue: fp32 accumulator -> dtype -> smem -> one 4-D TMA store box [1, TH, TW, BN] into y
  [B, OH, OW, Co] (clipped at the image edge: ragged patches and Co tails cost nothing extra).

Which A path a shape takes (`a_path`): "tma" when Ci and Co are multiples of 8 (16-byte TMA strides)
and, for stride 2, H and W are even; otherwise "cp.async" (variant gluon-gather: masked 16-byte cp.async
of each pixel's channels into the NVMMA-swizzled ring, any stride and size) and, for Ci or Co not a
multiple of 8, "pad + cp.async" (the channels padded to a multiple of 8 on the host first).

dgrad (conv2d_input_grad) is the same kernel on grad_output: one launch per output parity of dx
(stride**2 independent sub-problems with their sub-filters, dgrad_subproblems, run side by side on
forked streams). wgrad (conv2d_weight_grad) is a
split-K kernel over the output pixels (conv_wgrad_kernel).
"""
from __future__ import annotations

import dataclasses
import functools

import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (async_copy, fence_async_shared, mbarrier, tma,
                                                              warpgroup_mma, warpgroup_mma_wait)

from ..specs.conv import out_size, weight_ohwi
from .igemm.producers import gather_issue, tap_box_issue, tap_shift, wgrad_issue
from .igemm.schedule import tile_coords
from .hopper import (CTA_SMEM_OVERHEAD, GL_DTYPE, H200_SMS, ITEMSIZE, SM_SMEM, SMEM_LIMIT, cdiv, desc_type, descriptor, dtype_name, kernel_spec,
                     short_dtype)
from .pipelined import TRACE_CTAS, TRACE_ITERS, globaltimer


@gluon.jit
def _conv_tile(t, n_th, n_tw, num_pid_m, num_pid_n, TH: gl.constexpr, TW: gl.constexpr, BN: gl.constexpr,
               GROUP_M: gl.constexpr):
    """Tile t -> (image, oh0, ow0, co0): grouped order over (patch, Co band), patches row-major."""
    pid_m, pid_n = tile_coords(t, num_pid_m, num_pid_n, GROUP_M)
    per_img = n_th * n_tw
    b = pid_m // per_img
    rem = pid_m % per_img
    return b, (rem // n_tw) * TH, (rem % n_tw) * TW, pid_n * BN


@gluon.jit
def _conv_next(rs, c0, i, b, oh0, ow0, co0, Ci, start, nprog, n_th, n_tw, num_pid_m, num_pid_n, TAPS: gl.constexpr,
               BK: gl.constexpr, TH: gl.constexpr, TW: gl.constexpr, BN: gl.constexpr, GROUP_M: gl.constexpr):
    """The load stream one k-step on (incremental: tile divisions once per tile)."""
    c0 += BK
    if c0 >= Ci:
        c0 = 0
        rs += 1
        if rs == TAPS:
            rs = 0
            i += 1
            b, oh0, ow0, co0 = _conv_tile(start + i * nprog, n_th, n_tw, num_pid_m, num_pid_n, TH, TW, BN, GROUP_M)
    return rs, c0, i, b, oh0, ow0, co0


CONV_TRACE_FIELDS: gl.constexpr = gl.constexpr(4)  # INSTRUMENT stamps per tile: start, first data, MMAs done, stored


@gluon.jit
def conv_fprop_kernel(x_desc, w_desc, y_desc, Ci, Co, n_th, n_tw, n_tiles_m, OPH, t_ptr, RH: gl.constexpr,
                      RW: gl.constexpr, STRIDE: gl.constexpr, PAD_H: gl.constexpr, PAD_W: gl.constexpr,
                      NUM_STAGES: gl.constexpr, GROUP_M: gl.constexpr, INSTRUMENT: gl.constexpr,
                      num_warps: gl.constexpr):
    """The persistent implicit GEMM of an RH x RW filter (fprop: RH = RW = R; a stride-2 dgrad runs it once per
    output parity with that parity's sub-filter). y_desc is the 5-D output view [B, OH', P, OW', P·Co] and tile
    (b, oh0, ow0, co0) is stored at [b, oh0, OPH, ow0, co0] (P = 1, OPH = 0 for fprop; a dgrad parity's column
    parity is its descriptor's base, ParityLaunch).
    INSTRUMENT: program pid < TRACE_CTAS writes, per tile i < TRACE_ITERS, four %globaltimer stamps to
    t_ptr[pid, i, :] (tile start, first k-step's data ready, last MMA retired, TMA store issued)."""
    TH: gl.constexpr = x_desc.block_type.shape[1]
    TW: gl.constexpr = x_desc.block_type.shape[3]
    BK: gl.constexpr = x_desc.block_type.shape[4]
    BN: gl.constexpr = w_desc.block_type.shape[0]
    BM: gl.constexpr = TH * TW
    TAPS: gl.constexpr = RH * RW
    dtype: gl.constexpr = x_desc.dtype
    gl.static_assert(NUM_STAGES >= 2, "the ring needs >= 2 slots")
    a_mma: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BM, BK], dtype)
    b_mma: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BN, BK], dtype)
    c_lay: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BM, BN], dtype)

    start = gl.program_id(0)
    nprog = gl.num_programs(0)
    num_pid_m = n_tiles_m
    num_pid_n = gl.cdiv(Co, BN)
    my_tiles = (num_pid_m * num_pid_n - start + nprog - 1) // nprog
    k_steps = TAPS * gl.cdiv(Ci, BK)
    total = my_tiles * k_steps

    a_bufs = gl.allocate_shared_memory(dtype, [NUM_STAGES, 1, TH, 1, TW, BK], x_desc.layout)
    b_bufs = gl.allocate_shared_memory(dtype, [NUM_STAGES, BN, 1, BK], w_desc.layout)
    c_smem = gl.allocate_shared_memory(dtype, [BM, BN], c_lay)
    bars = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(NUM_STAGES):
        mbarrier.init(bars.index(i), count=1)
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                         instr_shape=[16, BN, 16])

    ld_rs = 0
    ld_c0 = 0
    ld_i = 0
    ld_b, ld_oh, ld_ow, ld_co = _conv_tile(start, n_th, n_tw, num_pid_m, num_pid_n, TH, TW, BN, GROUP_M)
    for p in gl.static_range(NUM_STAGES - 1):
        tap_box_issue(x_desc, w_desc, a_bufs, b_bufs, bars, p, ld_rs, ld_c0, ld_b, ld_oh, ld_ow, ld_co, Ci, p < total,
                    RW, STRIDE, PAD_H, PAD_W)
        ld_rs, ld_c0, ld_i, ld_b, ld_oh, ld_ow, ld_co = _conv_next(ld_rs, ld_c0, ld_i, ld_b, ld_oh, ld_ow, ld_co, Ci,
                                                                   start, nprog, n_th, n_tw, num_pid_m, num_pid_n,
                                                                   TAPS, BK, TH, TW, BN, GROUP_M)
    g = 0
    s = 0
    ph = 0
    for i in range(my_tiles):
        b, oh0, ow0, co0 = _conv_tile(start + i * nprog, n_th, n_tw, num_pid_m, num_pid_n, TH, TW, BN, GROUP_M)
        if INSTRUMENT:
            t0 = globaltimer()
            t1 = t0
        acc = gl.zeros([BM, BN], gl.float32, acc_layout)
        for kk in range(k_steps):
            mbarrier.wait(bars.index(s), ph)
            if INSTRUMENT:
                if kk == 0:
                    t1 = globaltimer()
            a = a_bufs.index(s)._reinterpret(dtype, [BM, BK], a_mma)
            bt = b_bufs.index(s)._reinterpret(dtype, [BN, BK], b_mma).permute((1, 0))
            acc = warpgroup_mma(a, bt, acc, is_async=True)
            acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc, ))
            ls = s - 1 if s > 0 else NUM_STAGES - 1  # the slot of step g - 1, whose MMA has retired
            tap_box_issue(x_desc, w_desc, a_bufs, b_bufs, bars, ls, ld_rs, ld_c0, ld_b, ld_oh, ld_ow, ld_co, Ci,
                        g + NUM_STAGES - 1 < total, RW, STRIDE, PAD_H, PAD_W)
            ld_rs, ld_c0, ld_i, ld_b, ld_oh, ld_ow, ld_co = _conv_next(ld_rs, ld_c0, ld_i, ld_b, ld_oh, ld_ow, ld_co,
                                                                       Ci, start, nprog, n_th, n_tw, num_pid_m,
                                                                       num_pid_n, TAPS, BK, TH, TW, BN, GROUP_M)
            g += 1
            s += 1
            if s == NUM_STAGES:
                s = 0
                ph ^= 1
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
        if INSTRUMENT:
            t2 = globaltimer()
        tma.store_wait(0)  # the previous tile's store has read c_smem
        c_smem.store(acc.to(dtype))
        fence_async_shared()
        tma.async_copy_shared_to_global(y_desc, [b, oh0, OPH, ow0, co0],
                                        c_smem._reinterpret(dtype, [1, TH, 1, TW, BN], y_desc.layout))
        if INSTRUMENT:
            if (start < TRACE_CTAS) & (i < TRACE_ITERS):
                t3 = globaltimer()
                base_t = (start * TRACE_ITERS + i) * CONV_TRACE_FIELDS
                gl.store(t_ptr + base_t, t0)
                gl.store(t_ptr + base_t + 1, t1)
                gl.store(t_ptr + base_t + 2, t2)
                gl.store(t_ptr + base_t + 3, t3)
    tma.store_wait(0)
    c_smem._keep_alive()
    for i in gl.static_range(NUM_STAGES):
        mbarrier.invalidate(bars.index(i))


@dataclasses.dataclass(frozen=True)
class ConvConfig:
    """Output patch TH x TW (BM = TH·TW), BN output channels, BK input channels per k-step, ring depth,
    warps (BM rows over num_warps / 4 warpgroups), grouped order, and the persistent grid: ctas_per_sm
    programs per SM (2: two co-resident CTAs, one's epilogue under the other's MMAs; shared memory allowing)."""
    TH: int = 8
    TW: int = 16
    BN: int = 128
    BK: int = 64
    num_stages: int = 4
    num_warps: int = 4
    group_m: int = 8
    ctas_per_sm: int = 1

    @property
    def BM(self) -> int:
        return self.TH * self.TW

    def smem_bytes(self, dtype: str) -> int:
        e = ITEMSIZE[dtype]
        return self.num_stages * (self.BM + self.BN) * self.BK * e + self.BM * self.BN * e + 1024

    def validate(self, dtype: str):
        for k in ("TH", "TW", "BN", "BK"):
            v = getattr(self, k)
            if v & (v - 1) or not 1 <= v <= 256:
                raise ValueError(f"ConvConfig.{k} must be a power of 2 in [1, 256] (a TMA box dim); got {v}")
        if self.BM < 64 or self.BM < 16 * self.num_warps or self.num_warps % 4:
            raise ValueError(f"ConvConfig: BM = TH*TW = {self.BM} must be >= 64 and >= 16 x num_warps, and num_warps a "
                             f"multiple of 4 (whole warpgroups); got num_warps {self.num_warps}")
        if self.BN < 16 or self.BK * ITEMSIZE[dtype] != 128:
            raise ValueError(f"ConvConfig: BN must be >= 16 and BK x itemsize 128 bytes (the 128-byte swizzle); got "
                             f"BN={self.BN}, BK={self.BK}")
        if self.smem_bytes(dtype) > SMEM_LIMIT:
            raise ValueError(f"{self} needs {self.smem_bytes(dtype)} B of shared memory > {SMEM_LIMIT}")
        if self.ctas_per_sm not in (1, 2) or self.ctas_per_sm * (self.smem_bytes(dtype) + CTA_SMEM_OVERHEAD) > SM_SMEM \
                or self.ctas_per_sm * self.num_warps > 16:
            raise ValueError(f"ConvConfig: ctas_per_sm = {self.ctas_per_sm} must be 1 or 2, with that many CTAs of "
                             f"{self.smem_bytes(dtype)} B shared memory and {self.num_warps} warps resident on one SM")
        return self

    @classmethod
    def heuristic(cls, shape: dict, dtype: str) -> "ConvConfig":
        # Measured on the H200 (06 knob sweeps over the six plan shapes, 2026-12-01; run 20261201T172153Z):
        # * BN 256 (8 warps, 3 stages) when Co is a multiple of 256 (ResNet 256 / 1024 channels: 543 vs 531
        #   TFLOP/s for the best BN 128 at 14 x 14, 439 vs 429 for the 1x1 stride-2 downsample);
        # * else a 3x3 filter on output rows >= 32 wide takes BM = 256 (an 8 x 32 patch on 2 consumer
        #   warpgroups, BN 128, 3 stages: B is reused over twice the pixels): 699 vs 677 TFLOP/s for the best
        #   BM = 128 on the example shape, 578 vs 518 on SD 3x3, 433 vs 397 on SD stride 2 (16 x 16: 693 / 578
        #   / 408);
        # * else (1x1, narrow rows) BM = 128, as wide as the row allows (stride 1 up to 32, stride 2 up to 16:
        #   8 x 16 beat 4 x 32 / 2 x 32 for the parity-split boxes at BM = 128), BN 128 where Co allows (BN 64
        #   ran SD 320 channels at 439 vs 495-502); a 1x1 takes 5 stages (its 10 k-steps per tile: 281 vs
        #   270 for 4 stages; BM = 256 ran 268: 96 tiles on 132 SMs);
        # * ctas_per_sm stays 1: two co-resident CTAs (2-3 stages, BN 64-128) lost on every short-K shape of
        #   the tail sweep (run 20261201T173102Z; SD 1x1 fprop 232-265 vs 282, ResNet 1x1 stride-2 352 vs
        #   442, the stride-2 dgrad's sub-problems 199-224 vs 224).
        OW = out_size(shape["W"], shape["R"], shape["stride"], shape["pad"])
        co = shape["Co"]
        if co % 256 == 0:
            tw = min(32 if shape["stride"] == 1 else 16, triton.next_power_of_2(OW))
            return cls(TH=128 // tw, TW=tw, BN=256, num_stages=3, num_warps=8)
        if shape["R"] == 3 and OW >= 32:
            return cls(TH=8, TW=32, BN=128, num_stages=3, num_warps=8)
        tw = min(32 if shape["stride"] == 1 else 16, triton.next_power_of_2(OW))
        return cls(TH=128 // tw, TW=tw, BN=128 if co >= 128 else 64, num_stages=5 if shape["R"] == 1 else 4)


def a_path(shape: dict) -> tuple[str, str]:
    """(path, why) for a conv2d shape: how the Gluon fprop family gathers A. "tma": gluon-pipelined / gluon-ws
    (tiled boxes); "cp.async": only gluon-gather can (a pixel-by-pixel gather); "pad + cp.async": gluon-gather
    after padding the channels to a multiple of 8 on the host."""
    if shape["Ci"] % 8 or shape["Co"] % 8:
        return "pad + cp.async", (f"Ci = {shape['Ci']} and Co = {shape['Co']} must be multiples of 8 for TMA (strides "
                                  "are multiples of 16 bytes) and 16-byte cp.async: gluon-gather pads the channels "
                                  "to the next multiple of 8 on the host")
    if shape["stride"] == 2 and (shape["H"] % 2 or shape["W"] % 2):
        return "cp.async", (f"stride 2 with an odd input size ({shape['H']} x {shape['W']}) has no parity-split view "
                            "[B, H/2, 2, W/2, 2*Ci] for tiled TMA boxes: gluon-gather gathers pixel by pixel")
    return "tma", ("tiled TMA boxes of x shifted per (r, s)" + (", parity-split view for stride 2"
                                                                if shape["stride"] == 2 else ""))


def _shape_of(x, weight, stride, padding) -> dict:
    from ..specs.conv import _shape
    return _shape(x, weight, stride, padding)


def check(x, weight, stride=1, padding=0):
    path, why = a_path(_shape_of(x, weight, stride, padding))
    if path != "tma":
        raise ValueError(f"variant 'gluon-pipelined' of conv2d needs the tiled-TMA path: {why}; use "
                         "variant='gluon-gather'")
    for name, t in (("x", x), ("weight", weight)):
        if t.data_ptr() % 16:
            raise ValueError(f"variant 'gluon-pipelined' needs {name}'s data pointer 16-byte aligned (TMA); got "
                             f"address % 16 = {t.data_ptr() % 16}")


def _layouts(cfg: ConvConfig, dtype: str):
    sw = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=ITEMSIZE[dtype] * 8, rank=5)
    sw_w = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=ITEMSIZE[dtype] * 8, rank=3)
    c = gl.NVMMASharedLayout.get_default_for([cfg.BM, cfg.BN], GL_DTYPE[dtype])
    y = gl.NVMMASharedLayout(swizzle_byte_width=c.swizzle_byte_width, element_bitwidth=ITEMSIZE[dtype] * 8, rank=5)
    return sw, sw_w, y


def configure(shape: dict, dtype: str, overrides: dict) -> ConvConfig:
    known = {f.name for f in dataclasses.fields(ConvConfig)}
    return dataclasses.replace(ConvConfig.heuristic(shape, dtype),
                               **{k: v for k, v in overrides.items() if k in known}).validate(dtype)


@dataclasses.dataclass(frozen=True)
class Launch:
    """One launch of the fprop kernel (or its warp-specialized twin): x as the [B, H/st, st, W/st, st·Ci] view,
    the filter as [Co, RH·RW, Ci] (a view at tap `tap0` of a [Co, taps, Ci] tensor), the output as the 5-D
    [B, OH', P, OW', P·Co] view written at row parity oph (ParityLaunch: its column parity by the view's base)."""
    x: object
    w: object
    y: object
    B: int
    H: int
    W: int
    Ci: int
    Co: int
    OH: int  # the output grid this launch covers (OH' x OW' pixels per image)
    OW: int
    RH: int
    RW: int
    stride: int
    pad_h: int
    pad_w: int
    P: int = 1  # output parity split: 1 (fprop) or 2 (a stride-2 dgrad's sub-problem)
    oph: int = 0
    tap0: int = 0
    taps: int = 0  # taps of the filter tensor w (0: RH·RW)

    def descriptors(self, cfg: ConvConfig, dtype: str):
        lx, lw, ly = _layouts(cfg, dtype)
        st, Ci, Co, P = self.stride, self.Ci, self.Co, self.P
        H, W, B = self.H, self.W, self.B
        taps = self.taps or self.RH * self.RW
        x_desc = descriptor(self.x, [1, cfg.TH, 1, cfg.TW, cfg.BK], lx, shape=[B, H // st, st, W // st, st * Ci],
                            strides=[H * W * Ci, st * W * Ci, W * Ci, st * Ci, 1])
        w = self.w.view(-1)[self.tap0 * Ci:] if self.tap0 else self.w
        w_desc = descriptor(w, [cfg.BN, 1, cfg.BK], lw, shape=[Co, self.RH * self.RW, Ci], strides=[taps * Ci, Ci, 1])
        OH, OW = self.OH, self.OW
        y, y_co = self.y_view()
        y_desc = descriptor(y, [1, cfg.TH, 1, cfg.TW, cfg.BN], ly, shape=[B, OH, P, OW, y_co],
                            strides=[OH * P * OW * P * Co, P * OW * P * Co, OW * P * Co, P * Co, 1])
        return x_desc, w_desc, y_desc

    def y_view(self):
        """(base, channels) of the output view the y descriptor covers, [B, OH', P, OW', channels] with the
        strides of the parity-split y: y itself and all P·Co channels (the column parity in the channel dim)."""
        return self.y, self.P * self.Co

    def grid_args(self, cfg: ConvConfig, device):
        from .hopper import num_sms
        n_th, n_tw = cdiv(self.OH, cfg.TH), cdiv(self.OW, cfg.TW)
        n_m = self.B * n_th * n_tw
        grid = (max(1, min(n_m * cdiv(self.Co, cfg.BN), cfg.ctas_per_sm * num_sms(device))), )
        return n_th, n_tw, n_m, grid

    def run(self, cfg: ConvConfig, dtype: str, trace=None):
        """This launch under cfg: the pipelined kernel, or the kernel cfg names (conv_ws.WsConvConfig.run_launch:
        the warp-specialized instance with its schedules)."""
        if hasattr(cfg, "run_launch"):
            return cfg.run_launch(self, dtype, trace)
        descs = self.descriptors(cfg, dtype)
        n_th, n_tw, n_m, grid = self.grid_args(cfg, self.x.device)
        common = dict(RH=self.RH, RW=self.RW, STRIDE=self.stride, PAD_H=self.pad_h, PAD_W=self.pad_w,
                      NUM_STAGES=cfg.num_stages, GROUP_M=cfg.group_m, num_warps=cfg.num_warps)
        args = (*descs, self.Ci, self.Co, n_th, n_tw, n_m, self.oph)
        conv_fprop_kernel[grid](*args, trace, INSTRUMENT=trace is not None, **common)


def fprop_launch(x, weight, stride, padding, y) -> Launch:
    B, Ci, H, W = x.shape
    Co, R = weight.shape[0], weight.shape[2]
    return Launch(x, weight_ohwi(weight), y, B, H, W, Ci, Co, y.shape[2], y.shape[3], R, R, stride, padding, padding)


def _empty_out(x, Co, OH, OW):
    import torch
    return torch.empty((x.shape[0], Co, OH, OW), dtype=x.dtype, device=x.device, memory_format=torch.channels_last)


def fprop(x, weight, stride=1, padding=0, config: ConvConfig | None = None, trace=None):
    """conv2d through the persistent TMA kernel. trace (int64, TRACE_CTAS·TRACE_ITERS·4 elements): the
    INSTRUMENT build writes its per-tile %globaltimer stamps there (notebook 06's timeline)."""
    check(x, weight, stride, padding)
    dtype = dtype_name(x)
    cfg = (config or ConvConfig.heuristic(_shape_of(x, weight, stride, padding), dtype)).validate(dtype)
    R = weight.shape[2]
    y = _empty_out(x, weight.shape[0], out_size(x.shape[2], R, stride, padding), out_size(x.shape[3], R, stride, padding))
    fprop_launch(x, weight, stride, padding, y).run(cfg, dtype, trace)
    return y


def _codegen_args(shape: dict, dtype: str, cfg: ConvConfig, OH: int, OW: int) -> dict:
    lx, lw, ly = _layouts(cfg, dtype)
    n_th, n_tw = cdiv(OH, cfg.TH), cdiv(OW, cfg.TW)
    return {"x_desc": desc_type(dtype, [1, cfg.TH, 1, cfg.TW, cfg.BK], lx),
            "w_desc": desc_type(dtype, [cfg.BN, 1, cfg.BK], lw),
            "y_desc": desc_type(dtype, [1, cfg.TH, 1, cfg.TW, cfg.BN], ly),
            # the ints as the runtime specializes them (divisibility by 16, 1 -> constexpr)
            "Ci": shape["Ci"], "Co": shape["Co"], "n_th": n_th, "n_tw": n_tw, "n_tiles_m": shape["B"] * n_th * n_tw,
            "OPH": 0}


def fprop_codegen(shape: dict, dtype: str, config: ConvConfig | None = None, instrument: bool = False):
    cfg = (config or ConvConfig.heuristic(shape, dtype)).validate(dtype)
    OH = out_size(shape["H"], shape["R"], shape["stride"], shape["pad"])
    OW = out_size(shape["W"], shape["R"], shape["stride"], shape["pad"])
    args = {**_codegen_args(shape, dtype, cfg, OH, OW), "t_ptr": "*i64" if instrument else None}
    ce = dict(RH=shape["R"], RW=shape["R"], STRIDE=shape["stride"], PAD_H=shape["pad"], PAD_W=shape["pad"],
              NUM_STAGES=cfg.num_stages, GROUP_M=cfg.group_m, INSTRUMENT=instrument, num_warps=cfg.num_warps)
    return kernel_spec(conv_fprop_kernel, args, ce, num_warps=cfg.num_warps)


# ----------------------------------------------------------------------------------------------
# the cp.async gather path ("gluon-gather"): A gathered pixel by pixel where tiled TMA boxes cannot express it

@gluon.jit
def conv_gather_kernel(x_ptr, w_ptr, y_desc, B, H, W, Ci_v, OH, OW, Co, R: gl.constexpr, STRIDE: gl.constexpr,
                       PAD: gl.constexpr, BK: gl.constexpr, EVEN_C: gl.constexpr, NUM_STAGES: gl.constexpr,
                       GROUP_M: gl.constexpr, num_warps: gl.constexpr):
    """One [BM pixels x BN output channels] tile per program (GEMM rows = B·OH·OW pixels in order, any stride
    and size): per k-step the pixels' input addresses for tap (r, s) are gathered with masked cp.async into
    an NVMMA-swizzled ring of NUM_STAGES slots, NUM_STAGES − 2 steps ahead; each step waits for its group,
    fences the async proxy, syncs the CTA (every thread's copies landed; the slot refilled now was read by the
    MMA of step − 2, which all warps retired), then async wgmma. Epilogue: smem + a 2-D TMA store into y
    [B·OH·OW, Co]. Ci = 8·Ci_v (the host passes channels in 16-byte units so the compiler sees the alignment)."""
    BM: gl.constexpr = y_desc.block_type.shape[0]
    BN: gl.constexpr = y_desc.block_type.shape[1]
    dtype: gl.constexpr = y_desc.dtype
    gl.static_assert(NUM_STAGES >= 3, "the ring refills the slot of step - 2: it needs >= 3 slots")
    LA: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [num_warps, 1], [1, 0])
    smem: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=dtype.primitive_bitwidth,
                                              rank=2)
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                         instr_shape=[16, BN, 16])
    Ci = Ci_v * 8
    M = B * OH * OW
    pid_m, pid_n = tile_coords(gl.program_id(0), gl.cdiv(M, BM), gl.cdiv(Co, BN), GROUP_M)
    m = pid_m * BM + gl.arange(0, BM, layout=gl.SliceLayout(1, LA))
    m_ok = m < M
    b = m // (OH * OW)
    rem = m % (OH * OW)
    ih0 = (rem // OW) * STRIDE - PAD
    iw0 = (rem % OW) * STRIDE - PAD
    row_base = ((b * H + ih0).to(gl.int64) * W + iw0) * Ci  # tap (0, 0)'s address; tap (r, s) adds (r·W + s)·Ci
    co = pid_n * BN + gl.arange(0, BN, layout=gl.SliceLayout(1, LA))
    co_ok = co < Co
    n_cb = gl.cdiv(Ci, BK)
    k_steps = R * R * n_cb

    a_bufs = gl.allocate_shared_memory(dtype, [NUM_STAGES, BM, BK], smem)
    b_bufs = gl.allocate_shared_memory(dtype, [NUM_STAGES, BN, BK], smem)
    for p in gl.static_range(NUM_STAGES - 2):
        gather_issue(x_ptr, w_ptr, a_bufs, b_bufs, p, p, row_base, ih0, iw0, m_ok, co, co_ok, H, W, Ci, n_cb,
                      k_steps, R, BK, EVEN_C, LA)
    acc = gl.zeros([BM, BN], gl.float32, acc_layout)
    for kk in range(k_steps):
        slot = kk % NUM_STAGES
        async_copy.wait_group(NUM_STAGES - 3)  # this thread's copies of step kk have landed
        fence_async_shared()  # ... and are visible to the async proxy (wgmma)
        gl.thread_barrier()  # ... for every thread's copies; all warps retired the MMA of step kk - 2
        acc = warpgroup_mma(a_bufs.index(slot), b_bufs.index(slot).permute((1, 0)), acc, is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc, ))
        nxt = kk + NUM_STAGES - 2
        gather_issue(x_ptr, w_ptr, a_bufs, b_bufs, nxt % NUM_STAGES, nxt, row_base, ih0, iw0, m_ok, co, co_ok, H, W,
                      Ci, n_cb, k_steps, R, BK, EVEN_C, LA)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
    async_copy.wait_group(0)
    c_smem = gl.allocate_shared_memory(dtype, [BM, BN], y_desc.layout)
    c_smem.store(acc.to(dtype))
    fence_async_shared()
    tma.async_copy_shared_to_global(y_desc, [pid_m * BM, pid_n * BN], c_smem)
    tma.store_wait(0)


@dataclasses.dataclass(frozen=True)
class GatherConfig:
    """BM pixels x BN output channels per tile, BK channels per k-step, ring depth (>= 3), warps, grouped order."""
    BM: int = 128
    BN: int = 128
    BK: int = 64
    num_stages: int = 4
    num_warps: int = 4
    group_m: int = 8

    def smem_bytes(self, dtype: str) -> int:
        e = ITEMSIZE[dtype]
        return self.num_stages * (self.BM + self.BN) * self.BK * e + self.BM * self.BN * e + 1024

    def validate(self, dtype: str):
        for k in ("BM", "BN", "BK"):
            v = getattr(self, k)
            if v & (v - 1) or not 16 <= v <= 256:
                raise ValueError(f"GatherConfig.{k} must be a power of 2 in [16, 256]; got {v}")
        if self.BK * ITEMSIZE[dtype] != 128 or self.BM < 16 * self.num_warps or self.num_warps % 4 or \
                self.BM < 32 or self.num_stages < 3:
            raise ValueError(f"GatherConfig: BK x itemsize 128 bytes (the 128-byte swizzle), BM >= 16 x num_warps "
                             f"(whole warpgroups), num_stages >= 3; got {self}")
        if self.smem_bytes(dtype) > SMEM_LIMIT:
            raise ValueError(f"{self} needs {self.smem_bytes(dtype)} B of shared memory > {SMEM_LIMIT}")
        return self

    @classmethod
    def heuristic(cls, shape: dict, dtype: str) -> "GatherConfig":
        # the TMA kernel's 128 x 128 tile (BN 64 under 128 output channels); first guess, the 06 plan measures it
        return cls(BN=128 if shape["Co"] >= 128 else 64)


def gather_configure(shape: dict, dtype: str, overrides: dict) -> GatherConfig:
    known = {f.name for f in dataclasses.fields(GatherConfig)}
    return dataclasses.replace(GatherConfig.heuristic(shape, dtype),
                               **{k: v for k, v in overrides.items() if k in known}).validate(dtype)


def gather_check(x, weight, stride=1, padding=0):
    """16-byte aligned bases for what the kernel reads directly: x unless its channels are padded (a copy),
    the weight unless padded or converted to OHWI (a copy)."""
    import torch
    Ci, Co = x.shape[1], weight.shape[0]
    direct = [("x", x)] if Ci % 8 == 0 else []
    if Ci % 8 == 0 and Co % 8 == 0 and weight.is_contiguous(memory_format=torch.channels_last):
        direct.append(("weight", weight))
    for name, t in direct:
        if t.data_ptr() % 16:
            raise ValueError(f"variant 'gluon-gather' needs {name}'s data pointer 16-byte aligned (16-byte cp.async); "
                             f"got address % 16 = {t.data_ptr() % 16}")


def _pad_channels(t, c8: int, dim: int):
    """t with its channel dim `dim` zero-padded to c8 (a multiple of 8), channels-last: the host copy that lets
    16-byte copies address every pixel (what upstream's conv does for RGB inputs)."""
    import torch.nn.functional as F
    pad = [0, 0] * (t.dim() - 1 - dim) + [0, c8 - t.shape[dim]]
    import torch
    return F.pad(t, pad).contiguous(memory_format=torch.channels_last)


def gather(x, weight, stride=1, padding=0, config: GatherConfig | None = None):
    """conv2d through the cp.async gather kernel. Ci or Co not a multiple of 8: x / weight / y are padded to
    the next multiple of 8 channels on the host (copies included in the variant's time)."""
    import torch
    gather_check(x, weight, stride, padding)
    dtype = dtype_name(x)
    cfg = (config or GatherConfig.heuristic(_shape_of(x, weight, stride, padding), dtype)).validate(dtype)
    B, Ci, H, W = x.shape
    Co, R = weight.shape[0], weight.shape[2]
    ci8, co8 = cdiv(Ci, 8) * 8, cdiv(Co, 8) * 8
    if ci8 != Ci:
        x, weight = _pad_channels(x, ci8, 1), _pad_channels(weight, ci8, 1)
    if co8 != Co:
        weight = _pad_channels(weight, co8, 0)
    OH, OW = out_size(H, R, stride, padding), out_size(W, R, stride, padding)
    y = _empty_out(x, co8, OH, OW)
    ly = gl.NVMMASharedLayout.get_default_for([cfg.BM, cfg.BN], GL_DTYPE[dtype])
    y_desc = descriptor(y, [cfg.BM, cfg.BN], ly, shape=[B * OH * OW, co8], strides=[co8, 1])
    grid = (cdiv(B * OH * OW, cfg.BM) * cdiv(co8, cfg.BN), )
    conv_gather_kernel[grid](x, weight_ohwi(weight), y_desc, B, H, W, ci8 // 8, OH, OW, co8, R=R, STRIDE=stride,
                             PAD=padding, BK=cfg.BK, EVEN_C=ci8 % cfg.BK == 0, NUM_STAGES=cfg.num_stages,
                             GROUP_M=cfg.group_m, num_warps=cfg.num_warps)
    if co8 != Co:
        y = y[:, :Co].contiguous(memory_format=torch.channels_last)
    return y


def gather_codegen(shape: dict, dtype: str, config: GatherConfig | None = None):
    cfg = (config or GatherConfig.heuristic(shape, dtype)).validate(dtype)
    ci8, co8 = cdiv(shape["Ci"], 8) * 8, cdiv(shape["Co"], 8) * 8
    OH = out_size(shape["H"], shape["R"], shape["stride"], shape["pad"])
    OW = out_size(shape["W"], shape["R"], shape["stride"], shape["pad"])
    ly = gl.NVMMASharedLayout.get_default_for([cfg.BM, cfg.BN], GL_DTYPE[dtype])
    p = f"*{short_dtype(dtype)}"
    args = {"x_ptr": p, "w_ptr": p, "y_desc": desc_type(dtype, [cfg.BM, cfg.BN], ly), "B": shape["B"],
            "H": shape["H"], "W": shape["W"], "Ci_v": ci8 // 8, "OH": OH, "OW": OW, "Co": co8}
    ce = dict(R=shape["R"], STRIDE=shape["stride"], PAD=shape["pad"], BK=cfg.BK, EVEN_C=ci8 % cfg.BK == 0,
              NUM_STAGES=cfg.num_stages, GROUP_M=cfg.group_m, num_warps=cfg.num_warps)
    return kernel_spec(conv_gather_kernel, args, ce, num_warps=cfg.num_warps)


# ----------------------------------------------------------------------------------------------
# the plain Triton baseline: implicit GEMM with masked pointer gathers (any Ci, Co, stride)

@triton.jit
def conv_triton_kernel(x_ptr, w_ptr, y_ptr, B, H, W, Ci, Co, OH, OW, R: tl.constexpr, STRIDE: tl.constexpr,
                       PAD: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """One [BM pixels x BN channels] tile per program: per (r, s) and channel block, A gathered by masked
    pointer loads (zero outside the image) and the weight block loaded K-major, tl.dot into fp32."""
    m = tl.program_id(0) * BM + tl.arange(0, BM)
    n = tl.program_id(1) * BN + tl.arange(0, BN)
    M = B * OH * OW
    b = m // (OH * OW)
    rem = m % (OH * OW)
    oh = rem // OW
    ow = rem % OW
    acc = tl.zeros([BM, BN], dtype=tl.float32)
    for rs in range(R * R):
        ih = oh * STRIDE + rs // R - PAD
        iw = ow * STRIDE + rs % R - PAD
        ok = (m < M) & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
        base = ((b * H + ih).to(tl.int64) * W + iw) * Ci
        for c0 in range(0, Ci, BK):
            c = c0 + tl.arange(0, BK)
            a = tl.load(x_ptr + base[:, None] + c[None, :], mask=ok[:, None] & (c[None, :] < Ci), other=0.0)
            wv = tl.load(w_ptr + (n[None, :].to(tl.int64) * (R * R) + rs) * Ci + c[:, None],
                         mask=(n[None, :] < Co) & (c[:, None] < Ci), other=0.0)
            acc = tl.dot(a, wv, acc)
    tl.store(y_ptr + m[:, None].to(tl.int64) * Co + n[None, :], acc.to(y_ptr.dtype.element_ty),
             mask=(m < M)[:, None] & (n < Co)[None, :])


TRITON_TILE = dict(BM=128, BN=128, BK=64, num_warps=8, num_stages=3)


def triton_variant(x, weight, stride=1, padding=0):
    import torch
    B, Ci, H, W = x.shape
    Co, R = weight.shape[0], weight.shape[2]
    OH, OW = out_size(H, R, stride, padding), out_size(W, R, stride, padding)
    y = torch.empty((B, Co, OH, OW), dtype=x.dtype, device=x.device, memory_format=torch.channels_last)
    t = TRITON_TILE
    conv_triton_kernel[(cdiv(B * OH * OW, t["BM"]), cdiv(Co, t["BN"]))](
        x, weight_ohwi(weight), y, B, H, W, Ci, Co, OH, OW, R=R, STRIDE=stride, PAD=padding, BM=t["BM"], BN=t["BN"],
        BK=t["BK"], num_warps=t["num_warps"], num_stages=t["num_stages"])
    return y


def triton_codegen(shape: dict, dtype: str, config=None):
    p = f"*{short_dtype(dtype)}"
    OH = out_size(shape["H"], shape["R"], shape["stride"], shape["pad"])
    OW = out_size(shape["W"], shape["R"], shape["stride"], shape["pad"])
    args = {"x_ptr": p, "w_ptr": p, "y_ptr": p, "B": shape["B"], "H": shape["H"], "W": shape["W"], "Ci": shape["Ci"],
            "Co": shape["Co"], "OH": OH, "OW": OW}
    t = TRITON_TILE
    ce = dict(R=shape["R"], STRIDE=shape["stride"], PAD=shape["pad"], BM=t["BM"], BN=t["BN"], BK=t["BK"])
    return kernel_spec(conv_triton_kernel, args, ce, num_warps=t["num_warps"], num_stages=t["num_stages"])


# ----------------------------------------------------------------------------------------------
# dgrad (op conv2d_input_grad)

def dgrad_subproblems(R: int, pad: int, stride: int) -> list[tuple]:
    """dgrad as stride-1 convolutions of grad_output, one per output parity (ph, pw) of dx (stride**2 of
    them): dx[b, s·i + ph, s·j + pw] = Σ over the taps r with (ph + pad − r) % s == 0 of
    dy[b, i + dh, j + dw] · W[·, ·, r, ·], dh = (ph + pad − r) / s. Returns [(ph, pw, rows, cols, pad_h,
    pad_w)]: the filter rows / columns of the sub-filter in tap order (dh ascending: tap t shifts the box by
    t − pad_h), or None for a parity no tap reaches (that part of dx is zero). Stride 1 is one sub-problem,
    the rotated filter at padding R − 1 − pad."""
    def axis(p):
        taps = [r for r in range(R) if (p + pad - r) % stride == 0]
        if not taps:
            return None
        dh0 = min((p + pad - r) // stride for r in taps)
        return [p + pad - stride * (dh0 + t) for t in range(len(taps))], -dh0
    out = []
    for ph in range(stride):
        for pw in range(stride):
            a, b = axis(ph), axis(pw)
            out.append((ph, pw, a and a[0], b and b[0], a and a[1], b and b[1]))
    return out


@functools.lru_cache(maxsize=64)
def _taps(R: int, pad: int, stride: int) -> tuple:
    """The (row, column) of every sub-problem's taps, in launch order (plain ints)."""
    out = []
    for _, _, rt, st, _, _ in dgrad_subproblems(R, pad, stride):
        if rt and st:
            out += [(r, c) for r in rt for c in st]
    return tuple(out)


def _dgrad_filters(weight, R: int, pad: int, stride: int):
    """Every sub-problem's sub-filter in one copy: [Ci, T, Co] (T taps in all), W'[ci, t, co] =
    W[co, ci, r_t, s_t] — one torch.stack of views (device work only: capturable in a CUDA graph)."""
    import torch
    return torch.stack([weight[:, :, r, c].t() for r, c in _taps(R, pad, stride)], dim=1)


def dgrad_weight(weight):
    """W'[ci, co, r, s] = W[co, ci, R-1-r, R-1-s] as a channels-last [Ci, Co, R, R] tensor (OHWI memory
    [Ci, R, R, Co]): the filters of the stride-1 convolution that is dgrad (the reference for the census)."""
    w = weight.flip(2, 3).permute(1, 2, 3, 0).contiguous()  # [Ci, R, R, Co]
    return w.permute(0, 3, 1, 2)


def _fprop_view(shape: dict) -> dict:
    """The fprop problem a dgrad sub-problem is, as ConvConfig.heuristic sees it: grad_output's Co channels in,
    dx's Ci out, an output grid of (H / stride) x (W / stride) pixels, the filter size."""
    st, R = shape["stride"], shape["R"]
    return {"B": shape["B"], "Ci": shape["Co"], "Co": shape["Ci"], "H": shape["H"] // st, "W": shape["W"] // st,
            "R": R, "stride": 1, "pad": (R - 1) // 2}  # an R x R filter keeping the grid: the 3x3 / 1x1 choices


def dgrad_check(grad_output, weight, input_h, input_w, stride=1, padding=0, variant="gluon-pipelined"):
    B, Co, OH, OW = grad_output.shape
    Ci, R = weight.shape[1], weight.shape[2]
    if stride == 2 and (input_h % 2 or input_w % 2):
        raise ValueError(f"variant {variant!r} of conv2d_input_grad at stride 2 needs an even input size (dx is "
                         f"written through the parity-split view [B, H/2, 2, W/2, 2*Ci]); got {input_h} x {input_w}: "
                         "use variant='triton' or 'torch'")
    if Ci % 8 or Co % 8:
        raise ValueError(f"variant {variant!r} of conv2d_input_grad: Ci = {Ci} and Co = {Co} must be multiples of 8: "
                         "TMA strides are multiples of 16 bytes")
    for name, t in (("grad_output", grad_output), ("weight", weight)):
        if t.data_ptr() % 16:
            raise ValueError(f"variant {variant!r} needs {name}'s data pointer 16-byte aligned (TMA); got address % 16 "
                             f"= {t.data_ptr() % 16}")
    return {"B": B, "Ci": Ci, "Co": Co, "H": input_h, "W": input_w, "R": R, "stride": stride, "pad": padding}


def dgrad_configure(shape: dict, dtype: str, overrides: dict) -> ConvConfig:
    """Each sub-problem (Ci <-> Co swapped) takes fprop's heuristic."""
    return configure(_fprop_view(shape), dtype, overrides)


@dataclasses.dataclass(frozen=True)
class ParityLaunch(Launch):
    """A stride-2 dgrad sub-problem's launch: dx's output parity (oph, col) written through the view
    [B, H/2, 2, W/2, Ci] whose base is dx + col·Ci elements (strides of the parity-split dx, the column parity
    fixed by the base): TMA clips every box at Ci, so no launch writes another parity's pixels and the
    launches are independent (oph is the row-parity coordinate the kernel stores at, OPH)."""
    col: int = 0

    def y_view(self):
        """dx + col·Ci elements (NHWC memory, a view) and Ci channels: the boxes clip at this parity's channels."""
        Co = self.Co
        return (self.y.permute(0, 2, 3, 1).view(-1)[self.col * Co:] if self.col else self.y), Co


def dgrad_launches(grad_output, weight, dx, stride: int, padding: int) -> list[Launch]:
    """The fprop-kernel launches of a dgrad (independent of each other), the most taps first."""
    B, Co, OH, OW = grad_output.shape
    Ci, R = weight.shape[1], weight.shape[2]
    w_all = _dgrad_filters(weight, R, padding, stride)
    T = w_all.shape[1]
    out, tap0 = [], 0
    for ph, pw, rt, st, pad_h, pad_w in dgrad_subproblems(R, padding, stride):
        if not (rt and st):
            continue
        grid = (dx.shape[2] // stride, dx.shape[3] // stride)
        if stride == 1:
            out.append(Launch(grad_output, w_all, dx, B, OH, OW, Co, Ci, *grid, len(rt), len(st), 1, pad_h, pad_w,
                              tap0=tap0, taps=T))
        else:
            out.append(ParityLaunch(grad_output, w_all, dx, B, OH, OW, Co, Ci, *grid, len(rt), len(st), 1, pad_h,
                                    pad_w, P=stride, oph=ph, tap0=tap0, taps=T, col=pw))
        tap0 += len(rt) * len(st)
    return sorted(out, key=lambda L: -L.RH * L.RW)


@functools.lru_cache(maxsize=16)
def _side_streams(device: str, n: int) -> tuple:
    import torch
    return tuple(torch.cuda.Stream(device=device) for _ in range(n))


def run_concurrently(launches: list, cfg: ConvConfig, dtype: str, device) -> None:
    """Independent launches side by side: the first on the current stream, each other on a side stream
    (cached per device) forked from it and joined back before returning — so a later use or free of any
    tensor on the current stream is ordered after all of them. CUDA-graph capture records the fork/join."""
    import torch
    if len(launches) == 1:
        launches[0].run(cfg, dtype)
        return
    side = _side_streams(str(device), len(launches) - 1)
    main = torch.cuda.current_stream(device)
    for st in side:
        st.wait_stream(main)
    try:
        launches[0].run(cfg, dtype)
        for L, st in zip(launches[1:], side):
            with torch.cuda.stream(st):
                L.run(cfg, dtype)
    finally:  # joined even when a launch raised: the tensors are freed on the current stream after this
        for st in side:
            main.wait_stream(st)


def dgrad(grad_output, weight, input_h, input_w, stride=1, padding=0, config: ConvConfig | None = None):
    """dx as stride**2 launches of the fprop kernel on grad_output, one per output parity with its
    sub-filter (dgrad_subproblems), run side by side (run_concurrently): at stride 2 each sub-problem is a
    quarter of the pixels, under one wave on its own. Parities no tap reaches (1x1, stride 2) stay zero."""
    import torch
    shape = dgrad_check(grad_output, weight, input_h, input_w, stride, padding)
    dtype = dtype_name(grad_output)
    cfg = (config or ConvConfig.heuristic(_fprop_view(shape), dtype)).validate(dtype)
    Ci, R = weight.shape[1], weight.shape[2]
    subs = dgrad_subproblems(R, padding, stride)
    dx = torch.empty((grad_output.shape[0], Ci, input_h, input_w), dtype=grad_output.dtype,
                     device=grad_output.device, memory_format=torch.channels_last)
    if any(not (rt and st) for _, _, rt, st, _, _ in subs):
        dx.zero_()
    run_concurrently(dgrad_launches(grad_output, weight, dx, stride, padding), cfg, dtype, grad_output.device)
    return dx


def dgrad_codegen(shape: dict, dtype: str, config: ConvConfig | None = None):
    """The kernel of the dgrad's largest sub-problem (stride 1: the one launch)."""
    cfg = (config or dgrad_configure(shape, dtype, {})).validate(dtype)
    subs = [s for s in dgrad_subproblems(shape["R"], shape["pad"], shape["stride"]) if s[2] and s[3]]
    ph, pw, rt, st, pad_h, pad_w = max(subs, key=lambda s: len(s[2]) * len(s[3]))
    f = _fprop_view(shape)
    OH, OW = f["H"], f["W"]
    args = {**_codegen_args(f, dtype, cfg, OH, OW), "OPH": ph, "t_ptr": None}
    ce = dict(RH=len(rt), RW=len(st), STRIDE=1, PAD_H=pad_h, PAD_W=pad_w, NUM_STAGES=cfg.num_stages,
              GROUP_M=cfg.group_m, INSTRUMENT=False, num_warps=cfg.num_warps)
    return kernel_spec(conv_fprop_kernel, args, ce, num_warps=cfg.num_warps)


@triton.jit
def conv_dgrad_triton_kernel(dy_ptr, w_ptr, dx_ptr, B, H, W, Ci, Co, OH, OW, R: tl.constexpr, STRIDE: tl.constexpr,
                             PAD: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """dx[b, ih, iw, ci] = sum over (r, s, co) of dy[b, oh, ow, co] w[co, r, s, ci] where ih + pad - r = oh * stride
    (masked where that has no integer oh in range): one [BM input pixels x BN input channels] tile per program."""
    m = tl.program_id(0) * BM + tl.arange(0, BM)
    n = tl.program_id(1) * BN + tl.arange(0, BN)
    M = B * H * W
    b = m // (H * W)
    rem = m % (H * W)
    ih = rem // W
    iw = rem % W
    acc = tl.zeros([BM, BN], dtype=tl.float32)
    for rs in range(R * R):
        th = ih + PAD - rs // R
        tw = iw + PAD - rs % R
        oh = th // STRIDE
        ow = tw // STRIDE
        ok = (m < M) & (th >= 0) & (tw >= 0) & (th % STRIDE == 0) & (tw % STRIDE == 0) & (oh < OH) & (ow < OW)
        base = ((b * OH + oh).to(tl.int64) * OW + ow) * Co
        for c0 in range(0, Co, BK):
            c = c0 + tl.arange(0, BK)
            a = tl.load(dy_ptr + base[:, None] + c[None, :], mask=ok[:, None] & (c[None, :] < Co), other=0.0)
            wv = tl.load(w_ptr + (c[:, None].to(tl.int64) * (R * R) + rs) * Ci + n[None, :],
                         mask=(c[:, None] < Co) & (n[None, :] < Ci), other=0.0)
            acc = tl.dot(a, wv, acc)
    tl.store(dx_ptr + m[:, None].to(tl.int64) * Ci + n[None, :], acc.to(dx_ptr.dtype.element_ty),
             mask=(m < M)[:, None] & (n < Ci)[None, :])


def dgrad_triton(grad_output, weight, input_h, input_w, stride=1, padding=0):
    import torch
    B, Co, OH, OW = grad_output.shape
    Ci, R = weight.shape[1], weight.shape[2]
    dx = torch.empty((B, Ci, input_h, input_w), dtype=grad_output.dtype, device=grad_output.device,
                     memory_format=torch.channels_last)
    t = TRITON_TILE
    conv_dgrad_triton_kernel[(cdiv(B * input_h * input_w, t["BM"]), cdiv(Ci, t["BN"]))](
        grad_output, weight_ohwi(weight), dx, B, input_h, input_w, Ci, Co, OH, OW, R=R, STRIDE=stride, PAD=padding,
        BM=t["BM"], BN=t["BN"], BK=t["BK"], num_warps=t["num_warps"], num_stages=t["num_stages"])
    return dx


# ----------------------------------------------------------------------------------------------
# wgrad (op conv2d_weight_grad): grad_W[co, (r, s, ci)] = sum over output pixels m of dy[m, co] x_im2col[m, (r, s, ci)]

@gluon.jit
def conv_wgrad_kernel(dy_desc, x_desc, ws_ptr, Ci, Co, n_th, n_tw, n_patches, k_per_split, n_ci_blocks,
                      n_co_blocks, R: gl.constexpr, STRIDE: gl.constexpr, PAD: gl.constexpr, NUM_STAGES: gl.constexpr,
                      num_warps: gl.constexpr, DIRECT: gl.constexpr = False):
    """One (co block, tap, ci block) tile and one split of the output pixels per program: a NUM_STAGES TMA
    ring over patches, async wgmma (A = grad_output box, transposed: pixels are the GEMM's K), and the fp32
    partial sum atomically added into the [Co, R*R, Ci] workspace (split-K over B*OH*OW). DIRECT (one split):
    ws_ptr is the [Co, R*R, Ci] gradient itself, in the input dtype, stored once (no fp32 workspace, no
    zero fill, no atomics, no cast pass: on few-pixel shapes those were most of the traffic)."""
    TH: gl.constexpr = dy_desc.block_type.shape[1]
    TW: gl.constexpr = dy_desc.block_type.shape[2]
    BM: gl.constexpr = dy_desc.block_type.shape[3]
    BN: gl.constexpr = x_desc.block_type.shape[4]
    BK: gl.constexpr = TH * TW
    dtype: gl.constexpr = x_desc.dtype
    a_lay: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BK, BM], dtype)
    b_lay: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BK, BN], dtype)
    pid = gl.program_id(0)
    cb = pid % n_co_blocks
    rest = pid // n_co_blocks
    ib = rest % n_ci_blocks
    rs = rest // n_ci_blocks
    r = rs // R
    s = rs % R
    dh, ph, dw, pw = tap_shift(r, s, STRIDE, PAD, PAD)
    k0 = gl.program_id(1) * k_per_split
    nk = gl.minimum(n_patches - k0, k_per_split)

    a_bufs = gl.allocate_shared_memory(dtype, [NUM_STAGES, 1, TH, TW, BM], dy_desc.layout)
    b_bufs = gl.allocate_shared_memory(dtype, [NUM_STAGES, 1, TH, 1, TW, BN], x_desc.layout)
    bars = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(NUM_STAGES):
        mbarrier.init(bars.index(i), count=1)
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                         instr_shape=[16, BN, 16])
    for p in gl.static_range(NUM_STAGES - 1):
        wgrad_issue(dy_desc, x_desc, a_bufs, b_bufs, bars, p, k0 + p, cb, ib, dh, ph, dw, pw, Ci, n_th, n_tw, p < nk)
    acc = gl.zeros([BM, BN], gl.float32, acc_layout)
    sl = 0
    phase = 0
    for kk in range(nk):
        mbarrier.wait(bars.index(sl), phase)
        a = a_bufs.index(sl)._reinterpret(dtype, [BK, BM], a_lay).permute((1, 0))
        b = b_bufs.index(sl)._reinterpret(dtype, [BK, BN], b_lay)
        acc = warpgroup_mma(a, b, acc, is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc, ))
        ls = sl - 1 if sl > 0 else NUM_STAGES - 1
        nxt = kk + NUM_STAGES - 1
        wgrad_issue(dy_desc, x_desc, a_bufs, b_bufs, bars, ls, k0 + nxt, cb, ib, dh, ph, dw, pw, Ci, n_th, n_tw,
                     nxt < nk)
        sl += 1
        if sl == NUM_STAGES:
            sl = 0
            phase ^= 1
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
    for i in gl.static_range(NUM_STAGES):
        mbarrier.invalidate(bars.index(i))
    co = cb * BM + gl.arange(0, BM, layout=gl.SliceLayout(1, acc_layout))
    ci = ib * BN + gl.arange(0, BN, layout=gl.SliceLayout(0, acc_layout))
    off = gl.expand_dims(co.to(gl.int64) * (R * R * Ci) + rs * Ci, 1) + gl.expand_dims(ci, 0)
    m = gl.expand_dims(co < Co, 1) & gl.expand_dims(ci < Ci, 0)
    if DIRECT:
        gl.store(ws_ptr + off, acc.to(ws_ptr.dtype.element_ty), mask=m)
    else:
        gl.atomic_add(ws_ptr + off, acc, mask=m, sem="relaxed")


WGRAD_SHORT_LOOP = 16  # k-steps (TH x TW pixel patches) of the whole pixel loop: at most this, the tile rules below


@dataclasses.dataclass(frozen=True)
class WgradConfig:
    """Patch TH x TW output pixels per k-step (BK = TH·TW), BM output channels x BN input channels per
    tile, ring depth, warps, and the split of the B·OH·OW pixels (0: the heuristic's)."""
    TH: int = 2
    TW: int = 32
    BM: int = 128
    BN: int = 128
    num_stages: int = 4
    num_warps: int = 4
    splits: int = 0

    def smem_bytes(self, dtype: str) -> int:
        return self.num_stages * self.TH * self.TW * (self.BM + self.BN) * ITEMSIZE[dtype] + 1024

    def validate(self, dtype: str):
        for k in ("TH", "TW", "BM", "BN"):
            v = getattr(self, k)
            if v & (v - 1) or not 1 <= v <= 256:
                raise ValueError(f"WgradConfig.{k} must be a power of 2 in [1, 256]; got {v}")
        if self.TH * self.TW < 16 or self.BM < 16 * self.num_warps or self.num_warps % 4:
            raise ValueError(f"WgradConfig: TH*TW >= 16 (one k16 step), BM >= 16 x num_warps, whole warpgroups; got {self}")
        if self.smem_bytes(dtype) > SMEM_LIMIT:
            raise ValueError(f"{self} needs {self.smem_bytes(dtype)} B of shared memory > {SMEM_LIMIT}")
        return self

    @classmethod
    def heuristic(cls, shape: dict, dtype: str) -> "WgradConfig":
        # Measured on the H200 (06 wgrad sweep, 2026-12-01; run 20261201T172153Z): k-steps of 64 output
        # pixels along a row (TW up to 32; stride 2 up to 16), 128 x 128 tiles; 128-pixel k-steps (4 x 32,
        # 3 stages) only on long pixel loops (>= 4096 k-steps of 64: the example shape, 627 vs 578 TFLOP/s;
        # SD 3x3 ran 4 x 32 below 2 x 32's 324). BN 256 / 8 warps and BM 64 lost everywhere but SD 1x1.
        OH = out_size(shape["H"], shape["R"], shape["stride"], shape["pad"])
        OW = out_size(shape["W"], shape["R"], shape["stride"], shape["pad"])
        tw = min(32 if shape["stride"] == 1 else 16, triton.next_power_of_2(OW))
        long_loop = tw == 32 and shape["B"] * OH * OW // 64 >= 4096
        if long_loop:
            return cls(TH=4, TW=32, num_stages=3)
        cfg = cls(TH=max(1, 64 // tw), TW=tw)
        # Short pixel loops (small images, small batches: no split of the pixels pays), from the 06 wgrad sweep
        # on the SM-idle shapes (run 20261204T153112Z-9c34a026, TFLOP/s, this rule's pick vs the former 128 x 128
        # / 4 stages):
        # * fewer than two waves of 128 x 128 tiles -> BM 64 (twice the tiles, so the last wave is half as long):
        #   VAE 512ch 32x32 b1 (144 tiles, 16 k-steps) 274 vs 171; 1x1 1280ch 8x8 b4 (100 tiles) 119 vs 112;
        #   ResNet 7x7 b1 (144 tiles) 27-29 vs 25;
        # * <= SHORT_LOOP / 2 k-steps per program and >= two waves of tiles -> 2 stages (a 64 KB ring: three CTAs
        #   share an SM, one's epilogue under the others' loads): 2x1280ch 8x8 (900 tiles, 2 k-steps) 115 vs 100,
        #   16x16 (8 k-steps) 325 vs 294, 7x7 at BM 64 29 vs 27; with fewer tiles than that (one CTA per SM)
        #   2 stages lost (1x1 1280ch 8x8: 101 vs 119 at BM 64, 93 vs 111 at BM 128).
        n_patches = shape["B"] * cdiv(OH, cfg.TH) * cdiv(OW, cfg.TW)
        if n_patches > WGRAD_SHORT_LOOP:
            return cfg
        def tiles(c):
            return cdiv(shape["Co"], c.BM) * shape["R"] ** 2 * cdiv(shape["Ci"], c.BN)

        if tiles(cfg) < 2 * H200_SMS:
            cfg = dataclasses.replace(cfg, BM=64)
        if n_patches <= WGRAD_SHORT_LOOP // 2 and tiles(cfg) >= 2 * H200_SMS:
            cfg = dataclasses.replace(cfg, num_stages=2)
        return cfg

    def split_count(self, n_tiles: int, n_patches: int) -> int:
        # The split of the B·OH·OW pixels minimizing waves x (k-steps per split + 4): each program pays a
        # fixed cost (ring fill, 64 KB of fp32 atomics) of about 4 k-steps, and a wave runs as long as its
        # longest program. Measured: ResNet's 1x1 stride-2 downsample (32 tiles, 256 k-steps) ran 386 TFLOP/s
        # at 4 splits against 278 at the former "4 programs per SM" rule's 16; the example shape (81 tiles,
        # 8192 k-steps) ran 607 at 16 splits vs 578 at 7; SD 1x1 (15 tiles) keeps 8.
        if self.splits:
            return max(1, min(self.splits, n_patches))
        return _wave_split(n_tiles, n_patches)


@functools.lru_cache(maxsize=256)
def _wave_split(n_tiles: int, n_patches: int) -> int:
    """argmin over splits s of ceil(n_tiles·s / SMs) x (ceil(n_patches / s) + 4) (see WgradConfig.split_count)."""
    best, pick = None, 1
    for s in range(1, max(1, n_patches // 4) + 1):
        per = cdiv(n_patches, s)
        s2 = cdiv(n_patches, per)
        cost = cdiv(n_tiles * s2, H200_SMS) * (per + 4)
        if best is None or cost < best:
            best, pick = cost, s2
    return pick


def wgrad_check(x, grad_output, kernel_size, stride=1, padding=0, variant="gluon-pipelined"):
    B, Ci, H, W = x.shape
    shape = {"B": B, "Ci": Ci, "Co": grad_output.shape[1], "H": H, "W": W, "R": kernel_size, "stride": stride,
             "pad": padding}
    if Ci % 8 or shape["Co"] % 8:
        raise ValueError(f"variant {variant!r} of conv2d_weight_grad: Ci = {Ci} and Co = {shape['Co']} must be multiples "
                         "of 8: TMA strides are multiples of 16 bytes; use variant='triton' or 'torch'")
    if stride == 2 and (H % 2 or W % 2):
        raise ValueError(f"variant {variant!r} of conv2d_weight_grad at stride 2 needs even H and W (the parity-split "
                         f"view [B, H/2, 2, W/2, 2*Ci]); got {H} x {W}: use variant='triton' or 'torch'")
    for name, t in (("x", x), ("grad_output", grad_output)):
        if t.data_ptr() % 16:
            raise ValueError(f"variant {variant!r} needs {name}'s data pointer 16-byte aligned (TMA); got address % 16 "
                             f"= {t.data_ptr() % 16}")
    return shape


def wgrad_configure(shape: dict, dtype: str, overrides: dict) -> WgradConfig:
    known = {f.name for f in dataclasses.fields(WgradConfig)}
    return dataclasses.replace(WgradConfig.heuristic(shape, dtype),
                               **{k: v for k, v in overrides.items() if k in known}).validate(dtype)


def _wgrad_layouts(cfg: WgradConfig, dtype: str):
    bits = ITEMSIZE[dtype] * 8
    return (gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=bits, rank=4),
            gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=bits, rank=5))


def wgrad(x, grad_output, kernel_size, stride=1, padding=0, config: WgradConfig | None = None):
    import torch
    shape = wgrad_check(x, grad_output, kernel_size, stride, padding)
    dtype = dtype_name(x)
    cfg = (config or WgradConfig.heuristic(shape, dtype)).validate(dtype)
    B, Ci, H, W = x.shape
    Co, OH, OW = grad_output.shape[1], grad_output.shape[2], grad_output.shape[3]
    R, st = kernel_size, stride
    ld, lx = _wgrad_layouts(cfg, dtype)
    dy_desc = descriptor(grad_output, [1, cfg.TH, cfg.TW, cfg.BM], ld, shape=[B, OH, OW, Co],
                         strides=[OH * OW * Co, OW * Co, Co, 1])
    x_desc = descriptor(x, [1, cfg.TH, 1, cfg.TW, cfg.BN], lx, shape=[B, H // st, st, W // st, st * Ci],
                        strides=[H * W * Ci, st * W * Ci, W * Ci, st * Ci, 1])
    n_th, n_tw = cdiv(OH, cfg.TH), cdiv(OW, cfg.TW)
    n_patches = B * n_th * n_tw
    n_co, n_ci = cdiv(Co, cfg.BM), cdiv(Ci, cfg.BN)
    n_tiles = n_co * R * R * n_ci
    splits = cfg.split_count(n_tiles, n_patches)
    per = cdiv(n_patches, splits)
    splits = cdiv(n_patches, per)
    direct = splits == 1  # one split: the gradient is stored once in its dtype (DIRECT)
    ws = (torch.empty if direct else torch.zeros)((Co, R, R, Ci), dtype=x.dtype if direct else torch.float32,
                                                  device=x.device)
    conv_wgrad_kernel[(n_tiles, splits)](dy_desc, x_desc, ws, Ci, Co, n_th, n_tw, n_patches, per, n_ci, n_co, R=R,
                                         STRIDE=stride, PAD=padding, NUM_STAGES=cfg.num_stages, num_warps=cfg.num_warps,
                                         DIRECT=direct)
    return (ws if direct else ws.to(x.dtype)).permute(0, 3, 1, 2)  # OHWI memory: a channels-last [Co, Ci, R, R]


def wgrad_codegen(shape: dict, dtype: str, config: WgradConfig | None = None):
    cfg = (config or WgradConfig.heuristic(shape, dtype)).validate(dtype)
    ld, lx = _wgrad_layouts(cfg, dtype)
    OH = out_size(shape["H"], shape["R"], shape["stride"], shape["pad"])
    OW = out_size(shape["W"], shape["R"], shape["stride"], shape["pad"])
    n_th, n_tw = cdiv(OH, cfg.TH), cdiv(OW, cfg.TW)
    n_tiles = cdiv(shape["Co"], cfg.BM) * shape["R"] ** 2 * cdiv(shape["Ci"], cfg.BN)
    n_patches = shape["B"] * n_th * n_tw
    per = cdiv(n_patches, cfg.split_count(n_tiles, n_patches))
    direct = cdiv(n_patches, per) == 1  # as wgrad launches it: one split stores the gradient directly
    args = {"dy_desc": desc_type(dtype, [1, cfg.TH, cfg.TW, cfg.BM], ld),
            "x_desc": desc_type(dtype, [1, cfg.TH, 1, cfg.TW, cfg.BN], lx),
            "ws_ptr": ("*bf16" if dtype == "bfloat16" else "*fp16") if direct else "*fp32", "Ci": shape["Ci"],
            "Co": shape["Co"], "n_th": n_th, "n_tw": n_tw, "n_patches": shape["B"] * n_th * n_tw, "k_per_split": "i32",
            "n_ci_blocks": cdiv(shape["Ci"], cfg.BN), "n_co_blocks": cdiv(shape["Co"], cfg.BM)}
    ce = dict(R=shape["R"], STRIDE=shape["stride"], PAD=shape["pad"], NUM_STAGES=cfg.num_stages, num_warps=cfg.num_warps,
              DIRECT=direct)
    return kernel_spec(conv_wgrad_kernel, args, ce, num_warps=cfg.num_warps)


@triton.jit
def conv_wgrad_triton_kernel(x_ptr, dy_ptr, ws_ptr, B, H, W, Ci, Co, OH, OW, m_per_split, R: tl.constexpr,
                             STRIDE: tl.constexpr, PAD: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                             BK: tl.constexpr):
    """grad_W[co, r, s, ci] = sum over output pixels m of dy[m, co] x[b, oh·stride + r − pad, ow·stride + s − pad, ci]:
    one (co block, tap, ci block) tile and one split of the pixels per program, masked pointer gathers,
    tl.dot, the fp32 partial sum atomically added into the [Co, R, R, Ci] workspace."""
    pid = tl.program_id(0)
    n_co = tl.cdiv(Co, BM)
    n_ci = tl.cdiv(Ci, BN)
    cb = pid % n_co
    ib = (pid // n_co) % n_ci
    rs = pid // (n_co * n_ci)
    co = cb * BM + tl.arange(0, BM)
    ci = ib * BN + tl.arange(0, BN)
    M = B * OH * OW
    m_lo = tl.program_id(1) * m_per_split
    m_hi = tl.minimum(m_lo + m_per_split, M)
    acc = tl.zeros([BM, BN], dtype=tl.float32)
    for m0 in range(m_lo, m_hi, BK):
        m = m0 + tl.arange(0, BK)
        b = m // (OH * OW)
        rem = m % (OH * OW)
        ih = (rem // OW) * STRIDE + rs // R - PAD
        iw = (rem % OW) * STRIDE + rs % R - PAD
        ok = (m < m_hi) & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
        a = tl.load(dy_ptr + m[None, :].to(tl.int64) * Co + co[:, None], mask=(co < Co)[:, None] & (m < m_hi)[None, :],
                    other=0.0)
        xb = tl.load(x_ptr + (((b * H + ih).to(tl.int64) * W + iw) * Ci)[:, None] + ci[None, :],
                     mask=ok[:, None] & (ci < Ci)[None, :], other=0.0)
        acc = tl.dot(a, xb, acc)
    tl.atomic_add(ws_ptr + co[:, None].to(tl.int64) * (R * R * Ci) + rs * Ci + ci[None, :], acc,
                  mask=(co < Co)[:, None] & (ci < Ci)[None, :], sem="relaxed")


WGRAD_TRITON_TILE = dict(BM=128, BN=128, BK=64, num_warps=8, num_stages=3)


def wgrad_triton(x, grad_output, kernel_size, stride=1, padding=0):
    """The plain Triton wgrad: ~4 programs per SM over (tile, split) as the Gluon kernel, splits a multiple of
    BK pixels long; then the workspace cast to x's dtype (channels-last [Co, Ci, R, R])."""
    import torch
    B, Ci, H, W = x.shape
    Co, OH, OW = grad_output.shape[1], grad_output.shape[2], grad_output.shape[3]
    R, t = kernel_size, WGRAD_TRITON_TILE
    n_tiles = cdiv(Co, t["BM"]) * R * R * cdiv(Ci, t["BN"])
    M = B * OH * OW
    splits = max(1, min(cdiv(4 * H200_SMS, n_tiles), M // (16 * t["BK"])))
    per = cdiv(cdiv(M, splits), t["BK"]) * t["BK"]
    ws = torch.zeros((Co, R, R, Ci), dtype=torch.float32, device=x.device)
    conv_wgrad_triton_kernel[(n_tiles, cdiv(M, per))](x, grad_output, ws, B, H, W, Ci, Co, OH, OW, per, R=R,
                                                      STRIDE=stride, PAD=padding, BM=t["BM"], BN=t["BN"], BK=t["BK"],
                                                      num_warps=t["num_warps"], num_stages=t["num_stages"])
    return ws.to(x.dtype).permute(0, 3, 1, 2)


def wgrad_triton_codegen(shape: dict, dtype: str, config=None):
    p = f"*{short_dtype(dtype)}"
    OH = out_size(shape["H"], shape["R"], shape["stride"], shape["pad"])
    OW = out_size(shape["W"], shape["R"], shape["stride"], shape["pad"])
    args = {"x_ptr": p, "dy_ptr": p, "ws_ptr": "*fp32", "B": shape["B"], "H": shape["H"], "W": shape["W"],
            "Ci": shape["Ci"], "Co": shape["Co"], "OH": OH, "OW": OW, "m_per_split": "i32"}
    t = WGRAD_TRITON_TILE
    ce = dict(R=shape["R"], STRIDE=shape["stride"], PAD=shape["pad"], BM=t["BM"], BN=t["BN"], BK=t["BK"])
    return kernel_spec(conv_wgrad_triton_kernel, args, ce, num_warps=t["num_warps"], num_stages=t["num_stages"])


# ----------------------------------------------------------------------------------------------
# registration

KNOBS = {"TH": (2, 4, 8, 16), "TW": (16, 32, 64), "BN": (64, 128, 256), "num_stages": (2, 3, 4, 5),
         "num_warps": (4, 8), "ctas_per_sm": (1, 2)}


def _register():
    from ..registry import register

    def gluon_fn(x, weight, stride=1, padding=0, out=None, config=None):
        return fprop(x, weight, stride, padding, config=config)

    register("conv2d", "gluon-pipelined", pattern="implicit-gemm", needs_hopper=True, check=check,
             configure=configure, codegen=fprop_codegen, knobs=KNOBS,
             roots=(conv_fprop_kernel, ConvConfig, Launch, fprop, fprop_launch, check, a_path, _layouts, weight_ohwi),
             description="persistent implicit GEMM: tiled TMA boxes of x shifted per (r, s) (parity-split view for "
                         "stride 2), NUM_STAGES ring across tiles, async wgmma, TMA-store epilogue")(gluon_fn)

    def triton_fn(x, weight, stride=1, padding=0, out=None):
        return triton_variant(x, weight, stride, padding)

    def dgrad_fn(grad_output, weight, input_h, input_w, stride=1, padding=0, out=None, config=None):
        return dgrad(grad_output, weight, input_h, input_w, stride, padding, config=config)

    register("conv2d_input_grad", "gluon-pipelined", pattern="implicit-gemm", needs_hopper=True, check=dgrad_check,
             configure=dgrad_configure, codegen=dgrad_codegen, knobs=KNOBS,
             roots=(conv_fprop_kernel, ConvConfig, Launch, ParityLaunch, dgrad, dgrad_check, dgrad_configure,
                    dgrad_launches, run_concurrently, dgrad_subproblems, _dgrad_filters, _taps, _fprop_view, _layouts),
             description="dgrad as stride**2 fprop-kernel launches on grad_output, one per output parity with its "
                         "sub-filter (stride 1: the rotated filter at padding R-1-pad), side by side on forked streams; "
                         "dx through a parity-split view")(
        dgrad_fn)

    def dgrad_triton_fn(grad_output, weight, input_h, input_w, stride=1, padding=0, out=None):
        return dgrad_triton(grad_output, weight, input_h, input_w, stride, padding)

    register("conv2d_input_grad", "triton", pattern="baseline",
             roots=(conv_dgrad_triton_kernel, dgrad_triton, weight_ohwi),
             description="plain Triton dgrad: masked gathers of grad_output per tap (any stride), tl.dot")(dgrad_triton_fn)

    def wgrad_fn(x, grad_output, kernel_size, stride=1, padding=0, out=None, config=None):
        return wgrad(x, grad_output, kernel_size, stride, padding, config=config)

    register("conv2d_weight_grad", "gluon-pipelined", pattern="implicit-gemm", needs_hopper=True, check=wgrad_check,
             configure=wgrad_configure, codegen=wgrad_codegen,
             knobs={"TH": (1, 2, 4), "TW": (16, 32, 64), "BM": (64, 128), "BN": (64, 128, 256), "num_stages": (3, 4, 5),
                    "num_warps": (4, 8), "splits": (0, 2, 4, 8, 16)},
             roots=(conv_wgrad_kernel, WgradConfig, _wave_split, wgrad, wgrad_check, wgrad_configure, _wgrad_layouts),
             description="split-K implicit GEMM over the output pixels: TMA boxes of grad_output (A, transposed) and of "
                         "x shifted per tap (B), async wgmma, fp32 atomics into a workspace")(wgrad_fn)

    def wgrad_triton_fn(x, grad_output, kernel_size, stride=1, padding=0, out=None):
        return wgrad_triton(x, grad_output, kernel_size, stride, padding)

    register("conv2d_weight_grad", "triton", pattern="baseline", codegen=wgrad_triton_codegen,
             roots=(conv_wgrad_triton_kernel, wgrad_triton),
             description="plain Triton wgrad: split-K over the output pixels, masked gathers of grad_output and x per "
                         "tap, tl.dot, fp32 atomics into a workspace")(wgrad_triton_fn)

    def gather_fn(x, weight, stride=1, padding=0, out=None, config=None):
        return gather(x, weight, stride, padding, config=config)

    register("conv2d", "gluon-gather", pattern="implicit-gemm", needs_hopper=True, check=gather_check,
             configure=gather_configure, codegen=gather_codegen,
             knobs={"BM": (64, 128), "BN": (64, 128, 256), "num_stages": (3, 4, 5), "num_warps": (4, 8)},
             roots=(conv_gather_kernel, gather_issue, GatherConfig, gather, gather_check, _pad_channels, weight_ohwi),
             description="implicit GEMM with A gathered pixel by pixel: masked 16-byte cp.async of x and the weights "
                         "into an NVMMA ring (any stride / size; channels padded to 8 on the host when needed), async "
                         "wgmma, TMA-store epilogue")(gather_fn)

    register("conv2d", "triton", pattern="baseline", codegen=triton_codegen,
             roots=(conv_triton_kernel, triton_variant, weight_ohwi),
             description="plain Triton implicit GEMM: masked pointer gathers of A, tl.dot")(triton_fn)


_register()
