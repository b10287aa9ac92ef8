"""Pattern 1's other cache: the row kept in registers (variant "gluon-regs").

gluon-tma caches a reused row in shared memory (one TMA copy, every pass reads smem). The peers
that lead pattern 1's grid where gluon-tma trails (Liger's one-row-per-program RMSNorm, QuACK's
sm_90 rmsnorm below N = 8K) cache it in *registers* instead: each thread loads its 16-byte vectors
of the row once with plain vectorized loads, the reduction runs on registers (warp shuffles, one
cross-warp step through a few bytes of smem), and the normalize pass reuses the same registers. No
TMA descriptor, no mbarrier, no shared-memory row: the cost is registers (ELEMS_PER_THREAD fp32
values per thread and row), which caps N, and the padding of a non-power-of-2 row to BLOCK lanes.

One program handles ROWS rows as a [ROWS, BLOCK] register tile (BLOCK = next_power_of_2(N), lanes
at or past N masked; LayerNorm's centred sum masks them out too). add_rms_norm adds the residual in
the input dtype (as eager), stores s = x + residual, and normalizes s. The op's statistics come from
the shared norm_math scalars (rms_rstd, l2_inv_norm), so the math matches the other Gluon variants.

Limits (RegsConfig.validate): BLOCK <= MAX_BLOCK elements and <= MAX_ELEMS_PER_THREAD register
elements per thread and row; the last dimension contiguous.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from . import norm_math, rowio
from .hopper import (ITEMSIZE, REGS_PER_SM, cdiv, check_row_operands, dtype_name, kernel_spec, row_outputs,
                     short_dtype, vec)

MAX_BLOCK = 32768  # elements of one row tile (next_power_of_2(N)); longer rows are gluon-chunked's (streaming)
TARGET_ELEMS_PER_THREAD = 16  # heuristic: ~16 of the row's *real* N values per thread (01 'regs' study, below)
SMALL_M = 1024  # heuristic: at most this many rows -> twice the warps (01 'regs' study, below)
MAX_ELEMS_PER_THREAD = 64  # register elements per thread and row: QuACK's 64 at N = 8192 / 4 warps; more spills
STATS_KIND = {"rms": 0, "l2": 1, "layer": 2}  # spec.row.stats -> the kernel's KIND constexpr


@gluon.jit(do_not_specialize=["M", "eps"])  # one compile serves every row count
def regs_norm_kernel(x_ptr, r_ptr, y_ptr, s_ptr, w_ptr, b_ptr, M, x_stride, r_stride, y_stride, s_stride, eps,
                     N: gl.constexpr, BLOCK: gl.constexpr, ROWS: gl.constexpr, KIND: gl.constexpr,
                     HAS_W: gl.constexpr, HAS_B: gl.constexpr, HAS_RESIDUAL: gl.constexpr, ALIGNED: gl.constexpr,
                     num_warps: gl.constexpr):
    """ROWS rows per program, each row one [1, BLOCK] slice of a register tile. KIND: 0 RMSNorm,
    1 L2Norm, 2 LayerNorm (STATS_KIND). Absent operands are None (r_ptr / s_ptr without a residual,
    w_ptr / b_ptr without the op's weight / bias). ALIGNED (the host checked every base pointer is
    16-byte aligned and every row stride a multiple of VEC): each row starts on a 16-byte boundary,
    which the compiler cannot see from a stride like 1000 (the runtime marks only multiples of 16),
    so it is asserted per row offset; without it, rows of N not a multiple of 16 move element by
    element."""
    dtype: gl.constexpr = x_ptr.dtype.element_ty
    VEC: gl.constexpr = 128 // dtype.primitive_bitwidth  # 16-byte vectors: 8 x bf16/fp16, 4 x fp32
    L: gl.constexpr = gl.BlockedLayout([1, VEC], [1, 32], [1, num_warps], [1, 0])

    rows = gl.program_id(0) * ROWS + gl.arange(0, ROWS, layout=gl.SliceLayout(1, L))
    cols = gl.arange(0, BLOCK, layout=gl.SliceLayout(0, L))
    col_ok = gl.expand_dims(cols < N, 0)
    mask = gl.expand_dims(rows < M, 1) & col_ok
    r64 = gl.expand_dims(rows.to(gl.int64), 1)
    c2 = gl.expand_dims(cols, 0)
    x_off = r64 * x_stride
    y_off = r64 * y_stride
    if ALIGNED:
        x_off = gl.multiple_of(x_off, [VEC, VEC])
        y_off = gl.multiple_of(y_off, [VEC, VEC])

    # 1. The row into registers, once (16-byte vector loads; masked lanes read 0).
    x = gl.load(x_ptr + x_off + c2, mask=mask, other=0.0)
    if HAS_RESIDUAL:  # s = x + residual in the input dtype, as eager; it leaves once and is what is normalized
        r_off = r64 * r_stride
        s_off = r64 * s_stride
        if ALIGNED:
            r_off = gl.multiple_of(r_off, [VEC, VEC])
            s_off = gl.multiple_of(s_off, [VEC, VEC])
        x = x + gl.load(r_ptr + r_off + c2, mask=mask, other=0.0)
        gl.store(s_ptr + s_off + c2, x, mask=mask)
    xf = x.to(gl.float32)

    # 2. Statistics from the registers (masked lanes are 0: harmless for sums of x and x^2; the
    #    centred sum masks them, they would add mean^2 each).
    if KIND == 2:
        mean = gl.sum(xf, axis=1) / N
        d = gl.where(col_ok, xf - gl.expand_dims(mean, 1), 0.0)
        shift = mean
        scale = gl.rsqrt(gl.sum(d * d, axis=1) / N + eps)
    else:
        ss = gl.sum(xf * xf, axis=1)
        shift = gl.zeros_like(ss)
        if KIND == 0:
            scale = norm_math.rms_rstd(ss, N, eps)
        else:
            scale = norm_math.l2_inv_norm(ss, N, eps)

    # 3. Normalize the same registers; weight / bias from global (L2-resident: every row reads them).
    w = gl.zeros([1, BLOCK], gl.float32, L)
    b = gl.zeros([1, BLOCK], gl.float32, L)
    if HAS_W:
        w = norm_math.load_param(w_ptr, cols, N, BLOCK != N)
    if HAS_B:
        b = norm_math.load_param(b_ptr, cols, N, BLOCK != N)
    y = norm_math.normalize_chunk(xf, shift, scale, w, b, HAS_W, HAS_B)
    gl.store(y_ptr + y_off + c2, y.to(dtype), mask=mask)


# ----------------------------------------------------------------------------------------------
# configuration (QuACK-style: one frozen dataclass, thresholds with their reasons)

def next_pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


@dataclass(frozen=True)
class RegsConfig:
    """Knobs of gluon-regs: warps per program and rows per program (BLOCK follows from N)."""
    num_warps: int
    rows: int = 1

    @staticmethod
    def block(N: int) -> int:
        return next_pow2(N)

    def max_elems(self) -> int:
        """Row elements a thread may hold: MAX_ELEMS_PER_THREAD, and at most half of the registers a
        thread gets when every warp of the SM is this kernel's (65536 / (32 x warps), at most 255):
        compiled for sm_90, 32 warps x 2 rows at N = 32768 (64 values in 64 registers) spilled
        328-740 bytes for every op and dtype; 16 warps x 1 row (64 values in 128) did not."""
        return min(MAX_ELEMS_PER_THREAD, min(255, REGS_PER_SM // (32 * self.num_warps)) // 2)

    def elems_per_thread(self, N: int) -> int:
        """fp32 register elements per thread for one row of the tile (x; s shares them)."""
        return max(1, self.block(N) // (32 * self.num_warps))

    @classmethod
    def heuristic(cls, op, N: int, dtype: str, M: int | None = None) -> "RegsConfig":
        """Measured (01 'regs' study, H200, run 20261202T001042Z: rms_norm / add_rms_norm bf16,
        M = 256 / 2048 / 4096 / 16384 x N = 4096 / 5120 / 8192 / 16384, warps 4..32 x rows 1 / 2):
        - warps follow the row's real length N, not its padded BLOCK: ~TARGET_ELEMS_PER_THREAD values
          per thread, a power of 2 in 4..16 (8 warps at N = 4096 / 5120, 16 at 8192 / 16384). At
          N = 5120 (BLOCK 8192) 8 warps beat 16 by 4-8% for rms_norm at M >= 2048: the padded third
          of the tile is masked-off lanes, so 16 warps leave each thread ~10 real values;
        - few rows (M <= SMALL_M): twice the warps, up to 16. 256 rows are ~2 programs per SM, each
          program's latency is the time, and more warps split the row: 16 warps beat 8 by 3-36% at
          M = 256 (rms_norm N = 5120 ... 16384), while at M = 2048 rms_norm N = 4096 / 5120 16 warps
          lose 4-6% (SMALL_M sits between the measured 256 and 2048);
        - one row per program: rows = 2 was never the fastest by more than 0.4% and lost up to 24%
          (it stays for rows of <= 1024 lanes, where one row is one vector per thread; not in the study);
        - 32 warps never won by more than 0.3%; they lose up to 61% at N = 5120.
        The heuristic is within 1.7% of the study's best config in all 32 cells (worst: rms_norm
        256 x 16384, 16 warps 1.7% behind 32; the 01 page's regs table shows every cell)."""
        B = cls.block(N)
        nw = max(4, min(16, N // (32 * TARGET_ELEMS_PER_THREAD)))
        if M is not None and M <= SMALL_M:
            nw = min(16, 2 * nw)
        nw = max(1, min(nw, B // (vec(dtype) * 32)))  # every thread at least one 16-byte vector of the row
        nw = 1 << (nw.bit_length() - 1)  # a power of 2
        while B // (32 * nw) > cls(num_warps=nw).max_elems() and nw < 32:
            nw *= 2
        return cls(num_warps=nw, rows=2 if B <= 1024 else 1)

    @classmethod
    def make(cls, op, N: int, dtype: str, M: int | None = None, **overrides) -> "RegsConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        return dataclasses.replace(cls.heuristic(op, N, dtype, M), **{k: v for k, v in overrides.items() if k in known})

    def validate(self, op, N: int, dtype: str) -> "RegsConfig":
        """ValueError naming the knob and the rule when this config cannot run rows of N."""
        if dtype not in ITEMSIZE:
            raise ValueError(f"gluon-regs takes bfloat16, float16 or float32 inputs; got {dtype}")
        if N < 1:
            raise ValueError(f"gluon-regs needs N >= 1; got N={N}")
        B = self.block(N)
        if B > MAX_BLOCK:
            raise ValueError(f"gluon-regs keeps a row in registers: next_power_of_2(N) must be <= {MAX_BLOCK} "
                             f"(got N={N} -> {B}); use gluon-chunked (it streams long rows)")
        if B < vec(dtype) * 32:
            raise ValueError(f"gluon-regs needs next_power_of_2(N) >= {vec(dtype) * 32} for {dtype} (one 16-byte vector "
                             f"per lane of a warp); got N={N}: use variant='torch' or 'triton'")
        if self.num_warps not in (1, 2, 4, 8, 16, 32):
            raise ValueError(f"num_warps must be a power of 2 in 1..32; got {self.num_warps}")
        if self.rows not in (1, 2, 4, 8):
            raise ValueError(f"rows must be 1, 2, 4 or 8; got {self.rows}")
        if B < vec(dtype) * 32 * self.num_warps:
            raise ValueError(f"num_warps={self.num_warps} needs a row tile of at least {vec(dtype) * 32 * self.num_warps} "
                             f"lanes (16-byte vectors x 32 lanes x warps); N={N} pads to {B}")
        if self.elems_per_thread(N) * self.rows > self.max_elems():
            raise ValueError(f"num_warps={self.num_warps} x rows={self.rows} leaves "
                             f"{self.elems_per_thread(N) * self.rows} register elements per thread for N={N} "
                             f"(limit {self.max_elems()} at {self.num_warps} warps: more spills); use fewer rows "
                             "or other warps")
        return self


# ----------------------------------------------------------------------------------------------
# validation (before launch, clear errors), launch, codegen

def check(op, x, *rest, config: RegsConfig | None = None) -> RegsConfig:
    """Raise ValueError naming the argument and the rule if gluon-regs cannot take the op's inputs."""
    row, _ = rowio.resolve(op)
    dt = dtype_name(x)
    N = x.shape[-1]
    if dt not in ITEMSIZE:
        raise ValueError(f"gluon-regs takes bfloat16, float16 or float32 inputs; x is {dt}")
    if N < 1:
        raise ValueError(f"gluon-regs needs N >= 1; x has shape {tuple(x.shape)}")
    cfg = (config or RegsConfig.heuristic(op, N, dt, x.numel() // N)).validate(op, N, dt)
    check_row_operands(rowio.named_operands(row, (x, ) + rest), N, "gluon-regs")
    return cfg


def _constexprs(row, N: int, cfg: RegsConfig, aligned: bool) -> dict:
    return {"N": N, "BLOCK": cfg.block(N), "ROWS": cfg.rows, "KIND": STATS_KIND[row.stats], "HAS_W": row.weight,
            "HAS_B": row.bias, "HAS_RESIDUAL": row.residual, "ALIGNED": aligned, "num_warps": cfg.num_warps}


def _aligned(tensors, dtype: str) -> bool:
    """Every (M, N) view 16-byte aligned with a row stride that is a multiple of one 16-byte vector."""
    v = vec(dtype)
    return all(t.data_ptr() % 16 == 0 and (t.shape[0] <= 1 or t.stride(0) % v == 0) for t in tensors if t is not None)


def launch(op, x, residual, weight, bias, eps: float, out=None, config: RegsConfig | None = None):
    """Run gluon-regs for op (an OpSpec, its RowNorm or an op name). Returns y (and s = x + residual
    for residual ops), shaped like x."""
    row, _ = rowio.resolve(op)
    cfg = check(row, *rowio.operands(row, x, residual, weight, bias), config=config)
    N = x.shape[-1]
    x2 = x.view(-1, N)
    M = x2.shape[0]
    y, s, y2, s2 = row_outputs(x, out, row.residual, "gluon-regs")  # the caller's buffers: the inputs' rules
    r2 = residual.view(-1, N) if row.residual else None
    w = weight if row.weight else None
    b = bias if row.bias else None
    aligned = _aligned((x2, r2, y2, s2), dtype_name(x)) and all(p is None or p.data_ptr() % 16 == 0 for p in (w, b))
    regs_norm_kernel[(cdiv(M, cfg.rows), )](
        x2, r2, y2, s2, w, b, M, x2.stride(0), r2.stride(0) if r2 is not None else 0, y2.stride(0),
        s2.stride(0) if s2 is not None else 0, eps, **_constexprs(row, N, cfg, aligned))
    return rowio.outputs(row, y, s)


def codegen_spec(op, N: int, dtype: str, config: RegsConfig | None = None):
    """compile_sm90 arguments reproducing what launch() JITs for contiguous rows of N (CPU codegen)."""
    row, _ = rowio.resolve(op)
    cfg = (config or RegsConfig.heuristic(op, N, dtype)).validate(op, N, dtype)
    ptr = f"*{short_dtype(dtype)}"
    args = {"x_ptr": ptr, "r_ptr": ptr if row.residual else None, "y_ptr": ptr, "s_ptr": ptr if row.residual else None,
            "w_ptr": ptr if row.weight else None, "b_ptr": ptr if row.bias else None, "M": "i32", "x_stride": N,
            "r_stride": N if row.residual else 0, "y_stride": N, "s_stride": N if row.residual else 0, "eps": "fp32"}
    # contiguous rows from torch allocations: aligned whenever N is a multiple of one vector
    return kernel_spec(regs_norm_kernel, args, _constexprs(row, N, cfg, N % vec(dtype) == 0), num_warps=cfg.num_warps)


# ----------------------------------------------------------------------------------------------
# registration: gluon-regs for every row norm

KNOBS = {"num_warps": (4, 8, 16, 32), "rows": (1, 2, 4)}  # the 01 'regs' study's axes (experiments.TmaCachingPlan)


def configure(op, shape: dict, dtype: str, overrides: dict) -> RegsConfig:
    return RegsConfig.make(op, shape["N"], dtype, shape.get("M"), **overrides).validate(op, shape["N"], dtype)


def codegen(op, shape: dict, dtype: str, config: RegsConfig | None = None):
    return codegen_spec(op, shape["N"], dtype, config or configure(op, shape, dtype, {}))


rowio.register_row_variants(
    "gluon-regs", pattern="tma-caching", launch=launch, check=check, configure=configure, codegen=codegen, knobs=KNOBS,
    roots=(regs_norm_kernel, RegsConfig, norm_math.rms_rstd, norm_math.l2_inv_norm),
    description="row(s) loaded once into registers (16-byte vectors), both passes on registers; no TMA, no smem row")
