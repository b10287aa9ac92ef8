"""Pattern 7: the row norms' backward (variant "gluon-regs" of rms_norm_backward, layer_norm_backward and
add_rms_norm_backward).

The math (gluon_lab.specs.norm_grad): with xhat = (x - mean) * rstd and g = dy * w,

    dx = rstd * (g - mean(g) - xhat * mean(g * xhat))      (no mean(g) term for RMSNorm)
    dw = sum over rows of dy * xhat,   db = sum over rows of dy

A row needs two passes over two inputs (x and dy: the row means first, then dx), and dw / db are sums
over *every* row: a reduction across CTAs the forward never had. The kernel below is the forward's
gluon-regs turned around:

1. **Rows in registers.** Each program holds ROWS rows of x and of dy as [ROWS, BLOCK] register tiles
   (16-byte vector loads, once): the statistics (when the forward's are not passed), the two row means
   and dx all come from the same registers. No second global read of x or dy.
2. **Persistent, with per-CTA partials.** The grid is G programs (a few per SM, by occupancy); program
   p takes row tiles p, p + G, p + 2G, ... and adds dy * xhat (and dy) of each into fp32 accumulators it
   keeps for its whole life, in registers (PARTIALS = 0) or, for long rows whose registers are taken by
   x and dy, in shared memory (PARTIALS = 1: each thread reads and writes only its own elements, so no
   barrier). At the end each program writes its partial row once: ws[p, :] (and ws[G + p, :] for db).
3. **One deterministic reduce.** colsum_kernel sums the G partial rows of each column in a fixed order
   (no float atomics: the same inputs give the same bits on every run) and writes dw (and db) in the
   weight's dtype. The partials cost 2 x G x N x 4 bytes per parameter (written, read back, mostly from
   L2), which is why G is a few programs per SM and not one per row tile.

The forward's statistics (rstd, and mean for LayerNorm, fp32 per row) may be passed (HAS_STATS); without
them the kernel recomputes them from the x already in registers: the same bytes minus the statistics'
read, a few FLOPs and one more row reduction. add+RMSNorm's backward adds ds (the gradient reaching
s = x + residual) to the norm's dx: that sum is the gradient of both x and residual (one tensor, as
autograd's own add returns).

Limits (BwdConfig.validate): BLOCK = next_power_of_2(N) <= MAX_BLOCK, register elements per thread
within the budget that keeps x and dy (and the partials, with PARTIALS = 0) unspilled; the last dim
contiguous.
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from .hopper import ITEMSIZE, SMEM_LIMIT, cdiv, dtype_name, kernel_spec, short_dtype, vec
from .pipelined import TRACE_CTAS, TRACE_ITERS, globaltimer

MAX_BLOCK = 16384  # row tile (next_power_of_2(N)) in registers: x and dy as fp32; 32768 spills at any warp count
MAX_THREADS = 1024
KIND = {"rms": 0, "layer": 2}  # spec.row.stats of the forward -> the kernel's KIND (norm_math's numbering)
SPILL_OK_N = 12288  # heuristic: the longest rows whose register partials' spills still beat smem partials


@gluon.jit(do_not_specialize=["M", "G", "eps"])
def norm_bwd_kernel(dy_ptr, x_ptr, w_ptr, mean_ptr, rstd_ptr, ds_ptr, dx_ptr, ws_ptr, t_ptr, M, G, dy_stride,
                    x_stride, ds_stride, dx_stride, eps, N: gl.constexpr, BLOCK: gl.constexpr, ROWS: gl.constexpr,
                    KIND: gl.constexpr, HAS_DB: gl.constexpr, HAS_STATS: gl.constexpr, HAS_DS: gl.constexpr,
                    PARTIALS: gl.constexpr, PREFETCH: gl.constexpr, ALIGNED: gl.constexpr, INSTRUMENT: gl.constexpr,
                    num_warps: gl.constexpr):
    """Program p of G: row tiles p, p + G, ... (ROWS rows each); dx of each row, and its fp32 share of
    dw (= sum dy * xhat) and db (= sum dy) kept until the end, then written to ws[p] / ws[G + p]. KIND: 0
    RMSNorm, 2 LayerNorm. mean_ptr / rstd_ptr: the forward's fp32 statistics (HAS_STATS), else None and
    recomputed. ds_ptr (HAS_DS): add+RMSNorm's gradient reaching s, added to dx. PARTIALS: 0 registers,
    1 shared memory. INSTRUMENT (the 07 timeline's build; t_ptr None otherwise): per row tile i < TRACE_ITERS
    of program p < TRACE_CTAS three %globaltimer stamps at t_ptr[(p * TRACE_ITERS + i) * 3 ...]: the tile's
    start, its statistics ready (x and dy arrived), its partials folded in (dx stored); the program's
    partial-row store is one more row, (tile = min(its tiles, TRACE_ITERS - 1)), stamped [end, end, end]."""
    dtype: gl.constexpr = x_ptr.dtype.element_ty
    VEC: gl.constexpr = 128 // dtype.primitive_bitwidth
    L: gl.constexpr = gl.BlockedLayout([1, VEC], [1, 32], [1, num_warps], [1, 0])
    ROW_L: gl.constexpr = gl.SliceLayout(1, L)
    COL_L: gl.constexpr = gl.SliceLayout(0, L)
    pid = gl.program_id(0)

    cols = gl.arange(0, BLOCK, layout=COL_L)
    col_ok = gl.expand_dims(cols < N, 0)
    c2 = gl.expand_dims(cols, 0)
    if PARTIALS == 0:  # w in registers for the program's life; with partials in smem (long rows) it is
        w = gl.expand_dims(gl.load(w_ptr + cols, mask=cols < N, other=0.0).to(gl.float32), 0)  # re-read per row (L1)
    if PARTIALS == 0:
        dw_acc = gl.zeros([ROWS, BLOCK], gl.float32, L)
        db_acc = gl.zeros([ROWS, BLOCK], gl.float32, L)
    else:
        SL: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [1, 0])
        dw_smem = gl.allocate_shared_memory(gl.float32, [ROWS, BLOCK], SL)
        dw_smem.store(gl.zeros([ROWS, BLOCK], gl.float32, L))
        if HAS_DB:
            db_smem = gl.allocate_shared_memory(gl.float32, [ROWS, BLOCK], SL)
            db_smem.store(gl.zeros([ROWS, BLOCK], gl.float32, L))

    tiles = gl.cdiv(M, ROWS)
    if PREFETCH:  # software pipelining in registers: tile t + G's loads are in flight while tile t computes
        xn = _tile(x_ptr, x_stride, pid, M, c2, col_ok, ROWS, VEC, ALIGNED, ROW_L)
        dyn = _tile(dy_ptr, dy_stride, pid, M, c2, col_ok, ROWS, VEC, ALIGNED, ROW_L)
        if HAS_STATS:
            rn = _row_stat(rstd_ptr, pid, M, ROWS, ROW_L)
            if KIND == 2:
                mn = _row_stat(mean_ptr, pid, M, ROWS, ROW_L)
    i = 0
    for t in range(pid, tiles, G):
        if INSTRUMENT:
            t0 = globaltimer()
        rows = t * ROWS + gl.arange(0, ROWS, layout=ROW_L)
        row_ok = rows < M
        mask = gl.expand_dims(row_ok, 1) & col_ok
        r64 = gl.expand_dims(rows.to(gl.int64), 1)
        dx_off = r64 * dx_stride
        if ALIGNED:
            dx_off = gl.multiple_of(dx_off, [VEC, VEC])
        # 1. x and dy into registers, once (masked lanes and rows read 0): this tile's (PREFETCH: loaded during the
        #    previous tile, and the next tile's loads issued now)
        if PREFETCH:
            xr = xn
            dyr = dyn
            xn = _tile(x_ptr, x_stride, t + G, M, c2, col_ok, ROWS, VEC, ALIGNED, ROW_L)
            dyn = _tile(dy_ptr, dy_stride, t + G, M, c2, col_ok, ROWS, VEC, ALIGNED, ROW_L)
        else:
            xr = _tile(x_ptr, x_stride, t, M, c2, col_ok, ROWS, VEC, ALIGNED, ROW_L)
            dyr = _tile(dy_ptr, dy_stride, t, M, c2, col_ok, ROWS, VEC, ALIGNED, ROW_L)
        if HAS_DS:  # issued before the row reductions, consumed after them
            dsr = _tile(ds_ptr, ds_stride, t, M, c2, col_ok, ROWS, VEC, ALIGNED, ROW_L)
        x = xr.to(gl.float32)
        dy = dyr.to(gl.float32)
        # 2. the statistics: the forward's, or recomputed from the registers
        if HAS_STATS:
            if PREFETCH:
                rstd = rn
                rn = _row_stat(rstd_ptr, t + G, M, ROWS, ROW_L)
                if KIND == 2:
                    mean = mn
                    mn = _row_stat(mean_ptr, t + G, M, ROWS, ROW_L)
            else:
                rstd = _row_stat(rstd_ptr, t, M, ROWS, ROW_L)
                if KIND == 2:
                    mean = _row_stat(mean_ptr, t, M, ROWS, ROW_L)
        else:
            if KIND == 2:
                mean = gl.sum(x, axis=1) / N
                d = gl.where(mask, x - gl.expand_dims(mean, 1), 0.0)
                rstd = gl.rsqrt(gl.sum(d * d, axis=1) / N + eps)
            else:
                rstd = gl.rsqrt(gl.sum(x * x, axis=1) / N + eps)
        if INSTRUMENT:
            t1 = globaltimer()
        if KIND == 2:
            xhat = gl.where(mask, (x - gl.expand_dims(mean, 1)) * gl.expand_dims(rstd, 1), 0.0)
        else:
            xhat = x * gl.expand_dims(rstd, 1)
        # 3. the two row means and dx, from the same registers
        if PARTIALS == 1:
            w = gl.expand_dims(gl.load(w_ptr + cols, mask=cols < N, other=0.0).to(gl.float32), 0)
        g = dy * w
        c1 = gl.sum(g * xhat, axis=1) / N
        dxf = g - xhat * gl.expand_dims(c1, 1)
        if KIND == 2:
            dxf = dxf - gl.expand_dims(gl.sum(g, axis=1) / N, 1)
        dxf = dxf * gl.expand_dims(rstd, 1)
        if HAS_DS:
            dxf = dxf + dsr.to(gl.float32)
        gl.store(dx_ptr + dx_off + c2, dxf.to(dtype), mask=mask)
        # 4. this program's share of dw (and db), kept on chip
        if PARTIALS == 0:
            dw_acc += dy * xhat
            if HAS_DB:
                db_acc += dy
        else:
            dw_smem.store(dw_smem.load(L) + dy * xhat)
            if HAS_DB:
                db_smem.store(db_smem.load(L) + dy)
        if INSTRUMENT:
            stamp(t_ptr, pid, i, t0, t1)
        i += 1

    # 5. the partial rows, once per program (fp32)
    if PARTIALS == 0:
        dw_part = gl.sum(dw_acc, axis=0)
    else:
        dw_part = gl.sum(dw_smem.load(L), axis=0)
    gl.store(ws_ptr + pid.to(gl.int64) * N + cols, dw_part, mask=cols < N)
    if HAS_DB:
        if PARTIALS == 0:
            db_part = gl.sum(db_acc, axis=0)
        else:
            db_part = gl.sum(db_smem.load(L), axis=0)
        gl.store(ws_ptr + (G + pid).to(gl.int64) * N + cols, db_part, mask=cols < N)
    if INSTRUMENT:
        end = globaltimer()
        stamp(t_ptr, pid, gl.minimum(i, TRACE_ITERS - 1), end, end)


@gluon.jit
def _tile(ptr, stride, t, M, c2, col_ok, ROWS: gl.constexpr, VEC: gl.constexpr, ALIGNED: gl.constexpr,
          ROW_L: gl.constexpr):
    """Row tile t ([ROWS, BLOCK], rows t * ROWS ...) of an (M, N) operand in its own dtype; rows at or past M and
    lanes at or past N read 0 (a tile past the last is fully masked: no memory traffic)."""
    rows = t * ROWS + gl.arange(0, ROWS, layout=ROW_L)
    off = gl.expand_dims(rows.to(gl.int64), 1) * stride
    if ALIGNED:
        off = gl.multiple_of(off, [VEC, VEC])
    return gl.load(ptr + off + c2, mask=gl.expand_dims(rows < M, 1) & col_ok, other=0.0)


@gluon.jit
def _row_stat(ptr, t, M, ROWS: gl.constexpr, ROW_L: gl.constexpr):
    """The fp32 statistic of row tile t's rows (0 past M)."""
    rows = t * ROWS + gl.arange(0, ROWS, layout=ROW_L)
    return gl.load(ptr + rows, mask=rows < M, other=0.0)


@gluon.jit
def stamp(t_ptr, pid, i, t0, t1):
    """Row i of program pid's trace: [t0, t1, now] (programs and tiles past the trace's size are not kept)."""
    if (pid < TRACE_CTAS) & (i < TRACE_ITERS):
        t2 = globaltimer()
        base = (pid * TRACE_ITERS + i) * 3
        gl.store(t_ptr + base, t0)
        gl.store(t_ptr + base + 1, t1)
        gl.store(t_ptr + base + 2, t2)


@gluon.jit(do_not_specialize=["G"])
def colsum_kernel(ws_ptr, out_ptr, G, N: gl.constexpr, BN: gl.constexpr, GR: gl.constexpr,
                  num_warps: gl.constexpr):
    """out[j, n] = sum over g < G of ws[j * G + g, n], in the fixed order g = 0, GR, 2 GR, ... (lanes
    summed per GR-row slab, slabs in order, then the slab's GR rows by one tree): the same bits every
    run. Grid (cdiv(N, BN), parameters): dw, and db in the second row of programs."""
    L: gl.constexpr = gl.BlockedLayout([1, 4], [1, 32], [num_warps, 1], [1, 0])
    j = gl.program_id(1)
    cols = gl.program_id(0) * BN + gl.arange(0, BN, layout=gl.SliceLayout(0, L))
    col_ok = gl.expand_dims(cols < N, 0)
    g = gl.arange(0, GR, layout=gl.SliceLayout(1, L))
    acc = gl.zeros([GR, BN], gl.float32, L)
    base = ws_ptr + j.to(gl.int64) * G * N
    for g0 in range(0, G, GR):
        rows = gl.expand_dims(g0 + g, 1)
        acc += gl.load(base + rows.to(gl.int64) * N + gl.expand_dims(cols, 0), mask=(rows < G) & col_ok, other=0.0)
    tot = gl.sum(acc, axis=0)
    gl.store(out_ptr + j * N + cols, tot.to(out_ptr.dtype.element_ty), mask=cols < N)


# ----------------------------------------------------------------------------------------------
# configuration (one frozen dataclass, thresholds with their reasons)

def next_pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


@dataclass(frozen=True)
class BwdConfig:
    """Knobs of the backward: warps and rows per program, programs per SM (the grid, hence the number of
    partial rows), where the partials live (0 registers, 1 shared memory) and whether the forward's
    statistics are read (True) or recomputed from x (False; the public op passes what it is given)."""
    num_warps: int
    rows: int = 1
    ctas_per_sm: int = 2
    partials: int = 0
    prefetch: bool = False  # True: the next row tile's x and dy (and statistics) loaded while this one computes
    recompute: bool = False  # True: ignore the forward's statistics, recompute them from x (07 'bwd-stats' study)

    @staticmethod
    def block(N: int) -> int:
        return next_pow2(N)

    def elems(self, N: int) -> int:
        """Register elements per thread of one [ROWS, BLOCK] fp32 tile."""
        return max(1, self.block(N) * self.rows // (32 * self.num_warps))

    def smem_bytes(self, N: int, layer: bool) -> int:
        return self.partials * self.block(N) * self.rows * 4 * (2 if layer else 1)

    @classmethod
    def heuristic(cls, N: int, dtype: str, layer: bool, M: int | None = None, ds: bool = False) -> "BwdConfig":
        """By the row tile B = next_power_of_2(N), from the sm_90 census (ptxas -v; tests/test_norm_backward.py
        checks every heuristic config's registers against the register file and its spills) and a probe of
        warps x programs per SM x partials x prefetch on the H200 (bf16, M = 16384, session of 2026-12-03,
        recorded since by the 07 'bwd-config' study, which sweeps the same axes; its table shows the heuristic
        against the best swept config per cell):
        - B <= 2048: 4 warps, 4 programs per SM (2 with ds: add+RMSNorm's third input), prefetch on. One 4-warp
          program per row tile keeps too few loads in flight: at N = 1536 the earlier 4 x 2 config took 116-165 us,
          4 x 4 with prefetch 65 us (RMSNorm, LayerNorm), add+RMSNorm 4 x 2 with prefetch 79 us;
        - B = 4096: 8 warps x 2, partials in registers; prefetch for LayerNorm and add+RMSNorm (LayerNorm 4096:
          124 vs 150 us; add+RMSNorm 2880: 110 vs 134), not RMSNorm (161-166 vs 160: no gain at 124-128 registers);
        - B = 8192: 16 warps x 1, partials in registers, prefetch (LayerNorm 8192: 222 vs 284 us; RMSNorm 8192: 211
          vs 222 for the earlier 4 warps x 2 with smem partials; add+RMSNorm 8192: 264 vs 287);
        - B = 16384 up to N = SPILL_OK_N: 16 warps x 1, partials in registers, no prefetch (RMSNorm 12288: 332 us,
          the best; the spills, 40-280 B, stay in L1);
        - past SPILL_OK_N: RMSNorm and LayerNorm 8 warps x 1 with smem partials and prefetch (RMSNorm 14336: 461 vs
          541 us for 16 warps; LayerNorm 14336: 593 vs 672, 16384: 689 vs 707), add+RMSNorm 16 warps x 1 with smem
          partials (its best at 14336 and 16384: a third input leaves no registers for a prefetch).
        Programs per SM x warps never pass the register file at the census's registers (<= 128 at 16 warps per
        SM, <= 255 at 8)."""
        B = cls.block(N)
        nmin = B // (vec(dtype) * 32)  # warps that still give every thread one 16-byte vector
        if B >= 16384:
            if N <= SPILL_OK_N:
                return cls(num_warps=16, ctas_per_sm=1, partials=0)
            return cls(num_warps=16, ctas_per_sm=1, partials=1) if ds else \
                cls(num_warps=8, ctas_per_sm=1, partials=1, prefetch=True)
        if B == 8192:
            return cls(num_warps=min(16, nmin), ctas_per_sm=1, prefetch=True)
        if B == 4096:
            return cls(num_warps=min(8, nmin), ctas_per_sm=2, prefetch=layer or ds)
        rows = 2 if B <= 1024 else 1
        return cls(num_warps=max(1, min(4, nmin)), rows=rows, ctas_per_sm=2 if ds else 4, prefetch=True)

    @classmethod
    def make(cls, N: int, dtype: str, layer: bool, M: int | None = None, ds: bool = False, **overrides) -> "BwdConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        return dataclasses.replace(cls.heuristic(N, dtype, layer, M, ds),
                                   **{k: v for k, v in overrides.items() if k in known})

    def validate(self, N: int, dtype: str, layer: bool) -> "BwdConfig":
        """ValueError naming the knob and the rule when this config cannot run rows of N."""
        if dtype not in ITEMSIZE:
            raise ValueError(f"gluon-regs takes bfloat16, float16 or float32 inputs; got {dtype}")
        B = self.block(N)
        if B > MAX_BLOCK:
            raise ValueError(f"the gluon-regs backward keeps a row of x and of dy in registers: next_power_of_2(N) "
                             f"must be <= {MAX_BLOCK} (got N={N} -> {B}); use variant='torch'")
        if B < vec(dtype) * 32:
            raise ValueError(f"the gluon-regs backward needs next_power_of_2(N) >= {vec(dtype) * 32} for {dtype} (one "
                             f"16-byte vector per lane of a warp); got N={N}: use variant='torch'")
        if self.num_warps not in (1, 2, 4, 8, 16, 32) or B < vec(dtype) * 32 * self.num_warps:
            raise ValueError(f"num_warps must be a power of 2 in 1..32 with a row tile of at least 16-byte vectors x 32 "
                             f"lanes x warps; got num_warps={self.num_warps} for N={N} (tile {B})")
        if self.rows not in (1, 2, 4):
            raise ValueError(f"rows must be 1, 2 or 4; got {self.rows}")
        if self.ctas_per_sm not in (1, 2, 3, 4, 8):
            raise ValueError(f"ctas_per_sm must be 1, 2, 3, 4 or 8; got {self.ctas_per_sm}")
        if self.partials not in (0, 1):
            raise ValueError(f"partials must be 0 (registers) or 1 (shared memory); got {self.partials}")
        if 32 * self.num_warps * self.ctas_per_sm > 2048:
            raise ValueError(f"num_warps={self.num_warps} x ctas_per_sm={self.ctas_per_sm} passes the SM's 64 warps")
        if self.smem_bytes(N, layer) * self.ctas_per_sm > SMEM_LIMIT:
            raise ValueError(f"partials=1 keeps {self.smem_bytes(N, layer)} B of fp32 partials in shared memory per "
                             f"program: ctas_per_sm={self.ctas_per_sm} passes the SM's {SMEM_LIMIT} B")
        return self


# ----------------------------------------------------------------------------------------------
# host side: checks (clear errors before launch), launch, codegen

def _rows2d(name, t, N):
    if t.stride(-1) != 1:
        raise ValueError(f"gluon-regs needs {name}'s last dim contiguous (stride 1); got strides {tuple(t.stride())}")
    try:
        return t.view(-1, N)
    except RuntimeError:
        raise ValueError(f"gluon-regs needs {name} viewable as (rows, N) rows of one stride; got shape "
                         f"{tuple(t.shape)} strides {tuple(t.stride())}: pass .contiguous()") from None


def check(kind: str, dy, x, weight, mean=None, rstd=None, ds=None, config: BwdConfig | None = None) -> BwdConfig:
    """Raise ValueError naming the argument and the rule if the kernel cannot take these inputs."""
    dt = dtype_name(x)
    N = x.shape[-1]
    for name, t in (("dy", dy), ("x", x), ("ds", ds)):
        if t is not None:
            _rows2d(name, t, N)
    cfg = (config or BwdConfig.heuristic(N, dt, kind == "layer", ds=ds is not None)).validate(N, dt, kind == "layer")
    for name, t in (("mean", mean), ("rstd", rstd)):
        if t is not None and not t.is_contiguous():
            raise ValueError(f"gluon-regs needs {name} contiguous (one fp32 per row); got strides {tuple(t.stride())}")
    return cfg


def _aligned(tensors, dtype: str) -> bool:
    v = vec(dtype)
    return all(t.data_ptr() % 16 == 0 and (t.shape[0] <= 1 or t.stride(0) % v == 0) for t in tensors if t is not None)


def grid_size(M: int, cfg: BwdConfig, sms: int) -> int:
    return max(1, min(cdiv(M, cfg.rows), sms * cfg.ctas_per_sm))


def _constexprs(kind, N, cfg, has_db, has_stats, has_ds, aligned, instrument=False) -> dict:
    return {"N": N, "BLOCK": cfg.block(N), "ROWS": cfg.rows, "KIND": KIND[kind], "HAS_DB": has_db,
            "HAS_STATS": has_stats, "HAS_DS": has_ds, "PARTIALS": cfg.partials, "PREFETCH": cfg.prefetch, "ALIGNED": aligned,
            "INSTRUMENT": instrument, "num_warps": cfg.num_warps}


COLSUM = {"BN": 128, "GR": 8, "num_warps": 4}  # 128 fp32 columns (512 B) x 8 partial rows per load: one 16-byte
# vector per thread; N / 128 programs per parameter (32 at N = 4096) each reading G x 512 bytes


def launch(kind: str, dy, x, weight, mean=None, rstd=None, ds=None, *, eps: float, has_db: bool = False,
           out=None, config: BwdConfig | None = None, trace=None):
    """Run the backward: returns (dx, dw) for RMSNorm / add+RMSNorm, (dx, dw, db) for LayerNorm (has_db).
    kind: "rms" or "layer". x: the forward's input (add+RMSNorm: s = x + residual). mean / rstd: the
    forward's fp32 statistics, or None (recomputed). ds: add+RMSNorm's gradient reaching s, or None. out:
    (dx, dw[, db]) to write (dx may alias ds: each element is read before it is written). trace: an int64
    buffer of TRACE_CTAS x TRACE_ITERS x 3 for the INSTRUMENT build's stamps (norm_bwd_kernel), or None."""
    import torch
    cfg = check(kind, dy, x, weight, mean, rstd, ds, config=config)
    N = x.shape[-1]
    x2, dy2 = x.view(-1, N), dy.view(-1, N)
    ds2 = ds.view(-1, N) if ds is not None else None
    M = x2.shape[0]
    dx, *params = out if out is not None else (torch.empty_like(x), )
    dx2 = dx.view(-1, N)
    G = grid_size(M, cfg, _sms(x.device))
    ws = torch.empty((1 + has_db) * G, N, device=x.device, dtype=torch.float32)
    aligned = _aligned((x2, dy2, ds2, dx2), dtype_name(x))
    has_stats = rstd is not None and not cfg.recompute
    norm_bwd_kernel[(G, )](
        dy2, x2, weight, mean if kind == "layer" and has_stats else None, rstd if has_stats else None, ds2, dx2, ws,
        trace, M, G, dy2.stride(0), x2.stride(0), ds2.stride(0) if ds2 is not None else 0, dx2.stride(0), eps,
        **_constexprs(kind, N, cfg, has_db, has_stats, ds is not None, aligned, trace is not None))
    if out is None:  # one reduce launch for dw (and db): a (1 + has_db, N) buffer in the weight's dtype
        buf = torch.empty(1 + has_db, N, device=x.device, dtype=weight.dtype)
        colsum_kernel[(cdiv(N, COLSUM["BN"]), 1 + has_db)](ws, buf, G, N=N, **COLSUM)
        return (dx, *buf.unbind(0))
    for j, p in enumerate(params):
        colsum_kernel[(cdiv(N, COLSUM["BN"]), 1)](ws[j * G:], p, G, N=N, **COLSUM)
    return (dx, *params)


def _sms(device) -> int:
    return _sms_of(device.type, device.index)


@functools.lru_cache(maxsize=None)
def _sms_of(kind: str, index) -> int:  # a cache, not a module dict: the staleness hash reads constants it reaches
    import torch
    from .hopper import num_sms
    return num_sms(torch.device(kind, index))


def codegen_spec(kind: str, N: int, dtype: str, *, has_db: bool, has_stats: bool, has_ds: bool,
                 config: BwdConfig | None = None, instrument: bool = False) -> dict:
    """compile_sm90 arguments reproducing what launch() JITs for contiguous rows of N (CPU codegen)."""
    cfg = (config or BwdConfig.heuristic(N, dtype, kind == "layer", ds=has_ds)).validate(N, dtype, kind == "layer")
    ptr = f"*{short_dtype(dtype)}"
    args = {"dy_ptr": ptr, "x_ptr": ptr, "w_ptr": ptr, "mean_ptr": "*fp32" if has_stats and kind == "layer" else None,
            "rstd_ptr": "*fp32" if has_stats else None, "ds_ptr": ptr if has_ds else None, "dx_ptr": ptr,
            "ws_ptr": "*fp32", "t_ptr": "*i64" if instrument else None, "M": "i32", "G": "i32", "dy_stride": N, "x_stride": N, "ds_stride": N if has_ds else 0,
            "dx_stride": N, "eps": "fp32"}
    return kernel_spec(norm_bwd_kernel, args, _constexprs(kind, N, cfg, has_db, has_stats, has_ds,
                                                          N % vec(dtype) == 0, instrument), num_warps=cfg.num_warps)


def colsum_codegen_spec(N: int, dtype: str) -> dict:
    args = {"ws_ptr": "*fp32", "out_ptr": f"*{short_dtype(dtype)}", "G": "i32"}
    return kernel_spec(colsum_kernel, args, {"N": N, **COLSUM}, num_warps=COLSUM["num_warps"])


# ----------------------------------------------------------------------------------------------
# registration: gluon-regs for every row-norm backward op

KNOBS = {"num_warps": (4, 8, 16), "rows": (1, 2), "ctas_per_sm": (1, 2, 4), "partials": (0, 1),
         "prefetch": (False, True), "recompute": (False, True)}  # the 07 'bwd-config' study's axes


def _args(spec, inputs) -> dict:
    a = spec.named(inputs)
    return {"dy": a["dy"], "x": a.get("x", a.get("s")), "weight": a["weight"], "mean": a.get("mean"),
            "rstd": a.get("rstd"), "ds": a.get("ds")}


def _variant(spec):
    def fn(*inputs, eps, out=None, config=None, trace=None):
        return launch(spec.kind, **_args(spec, inputs), eps=eps, has_db=spec.kind == "layer", out=out, config=config,
                      trace=trace)

    def check_fn(*inputs, config=None):
        return check(spec.kind, **_args(spec, inputs), config=config)

    def configure(shape, dtype, overrides):
        return BwdConfig.make(shape["N"], dtype, spec.kind == "layer", shape.get("M"), "ds" in spec.input_names,
                              **overrides).validate(
            shape["N"], dtype, spec.kind == "layer")

    def codegen(shape, dtype, config=None):
        cfg = config or configure(shape, dtype, {})
        return codegen_spec(spec.kind, shape["N"], dtype, has_db=spec.kind == "layer", has_stats=not cfg.recompute,
                            has_ds="ds" in spec.input_names, config=cfg)

    fn.__name__ = fn.__qualname__ = f"{spec.name}_gluon_regs"
    return fn, check_fn, configure, codegen


def _register():
    from .. import specs
    from ..registry import register
    for spec in specs.family("row_norm_backward"):
        fn, check_fn, configure, codegen = _variant(spec)
        register(spec.name, "gluon-regs", pattern="backward", needs_hopper=True, supports_out=True, check=check_fn,
                 configure=configure, codegen=codegen, knobs=dict(KNOBS),
                 roots=(launch, norm_bwd_kernel, colsum_kernel, BwdConfig),
                 description="persistent: rows of x and dy in registers, fp32 dw/db partials per program, "
                             "one fixed-order column reduce")(fn)


_register()
