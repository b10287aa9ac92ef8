"""Pattern 7's forward half: the row norm that also saves its statistics for the backward (the
training forward of rms_norm, layer_norm and add_rms_norm).

Eager autograd of `F.rms_norm` / `F.layer_norm` runs aten's fused forward, which returns rstd (and mean)
beside y, and its backward reads them; Liger and QuACK save them the same way. gluon-lab's inference
forwards return y only, so without this kernel the backward recomputes the statistics from x: 20-26% slower
at N <= 8192 (07 'bwd-stats', H200, bf16, M = 16384, run 20261203T164940Z-6d982063).

The kernel is gluon-regs (kernels/regs_cache.py) with two more stores: the row (ROWS rows per program) is
loaded once into registers, the fp32 mean / rstd come from those registers, y is normalized from them, and
mean (LayerNorm) and rstd leave as one fp32 per row, the exact values y was computed with. Same config
(RegsConfig: warps, rows per program) and limits as the inference gluon-regs; it is its own kernel so the
inference forward's compiled code (and its records) are untouched.

The custom ops `gluon_lab::<op>_train` (gluon_lab.library) call `launch`, and fall back to aten's own
stats-returning forward where this kernel cannot take the input.
"""
from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from . import norm_math
from .hopper import cdiv, dtype_name, kernel_spec, short_dtype, vec
from .regs_cache import STATS_KIND, RegsConfig, check as regs_check


@gluon.jit(do_not_specialize=["M", "eps"])
def norm_train_fwd_kernel(x_ptr, r_ptr, y_ptr, s_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, M, x_stride, r_stride,
                          y_stride, s_stride, eps, N: gl.constexpr, BLOCK: gl.constexpr, ROWS: gl.constexpr,
                          KIND: gl.constexpr, HAS_W: gl.constexpr, HAS_B: gl.constexpr, HAS_RESIDUAL: gl.constexpr,
                          ALIGNED: gl.constexpr, num_warps: gl.constexpr):
    """ROWS rows per program as one [ROWS, BLOCK] register tile: y (and s = x + residual), plus the fp32
    statistics per row: rstd (KIND 0 RMSNorm, 2 LayerNorm) and mean (KIND 2; mean_ptr None otherwise)."""
    dtype: gl.constexpr = x_ptr.dtype.element_ty
    VEC: gl.constexpr = 128 // dtype.primitive_bitwidth
    L: gl.constexpr = gl.BlockedLayout([1, VEC], [1, 32], [1, num_warps], [1, 0])
    rows = gl.program_id(0) * ROWS + gl.arange(0, ROWS, layout=gl.SliceLayout(1, L))
    cols = gl.arange(0, BLOCK, layout=gl.SliceLayout(0, L))
    row_ok = rows < M
    col_ok = gl.expand_dims(cols < N, 0)
    mask = gl.expand_dims(row_ok, 1) & col_ok
    r64 = gl.expand_dims(rows.to(gl.int64), 1)
    c2 = gl.expand_dims(cols, 0)
    x_off = r64 * x_stride
    y_off = r64 * y_stride
    if ALIGNED:
        x_off = gl.multiple_of(x_off, [VEC, VEC])
        y_off = gl.multiple_of(y_off, [VEC, VEC])
    x = gl.load(x_ptr + x_off + c2, mask=mask, other=0.0)
    if HAS_RESIDUAL:  # s = x + residual in the input dtype (as eager): stored, normalized, and what the backward reads
        r_off = r64 * r_stride
        s_off = r64 * s_stride
        if ALIGNED:
            r_off = gl.multiple_of(r_off, [VEC, VEC])
            s_off = gl.multiple_of(s_off, [VEC, VEC])
        x = x + gl.load(r_ptr + r_off + c2, mask=mask, other=0.0)
        gl.store(s_ptr + s_off + c2, x, mask=mask)
    xf = x.to(gl.float32)
    if KIND == 2:
        mean = gl.sum(xf, axis=1) / N
        d = gl.where(col_ok, xf - gl.expand_dims(mean, 1), 0.0)
        rstd = gl.rsqrt(gl.sum(d * d, axis=1) / N + eps)
        gl.store(mean_ptr + rows, mean, mask=row_ok)
    else:
        mean = gl.zeros([ROWS], gl.float32, gl.SliceLayout(1, L))
        rstd = norm_math.rms_rstd(gl.sum(xf * xf, axis=1), N, eps)
    gl.store(rstd_ptr + rows, rstd, mask=row_ok)
    w = gl.zeros([1, BLOCK], gl.float32, L)
    b = gl.zeros([1, BLOCK], gl.float32, L)
    if HAS_W:
        w = norm_math.load_param(w_ptr, cols, N, BLOCK != N)
    if HAS_B:
        b = norm_math.load_param(b_ptr, cols, N, BLOCK != N)
    y = norm_math.normalize_chunk(xf, mean, rstd, w, b, HAS_W, HAS_B)
    gl.store(y_ptr + y_off + c2, y.to(dtype), mask=mask)


KINDS = ("rms", "layer")  # spec.row.stats this kernel saves (L2Norm has no backward op)


def check(spec, x, residual, weight, bias) -> RegsConfig:
    """The inference gluon-regs's rules (ValueError naming the argument and the rule), for an op whose
    statistics this kernel saves."""
    if spec.row.stats not in KINDS:
        raise ValueError(f"{spec.name} has no training forward (its statistics are {spec.row.stats!r})")
    ops = (x, residual, weight) if spec.row.residual else (x, weight, bias) if spec.row.bias else (x, weight)
    return regs_check(spec, *ops)


def _aligned(tensors, dtype: str) -> bool:
    v = vec(dtype)
    return all(t.data_ptr() % 16 == 0 and (t.dim() < 2 or t.shape[0] <= 1 or t.stride(0) % v == 0)
               for t in tensors if t is not None)


def _constexprs(row, N, cfg: RegsConfig, aligned: bool) -> dict:
    return {"N": N, "BLOCK": cfg.block(N), "ROWS": cfg.rows, "KIND": STATS_KIND[row.stats], "HAS_W": row.weight,
            "HAS_B": row.bias, "HAS_RESIDUAL": row.residual, "ALIGNED": aligned, "num_warps": cfg.num_warps}


def launch(spec, x, residual, weight, bias, eps: float, config: RegsConfig | None = None):
    """(y, [s,] [mean,] rstd): y (and s) shaped like x, the statistics fp32 of shape x.shape[:-1]."""
    import torch
    cfg = config or check(spec, x, residual, weight, bias)
    row = spec.row
    N = x.shape[-1]
    x2 = x.view(-1, N)
    M = x2.shape[0]
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    s = torch.empty(x.shape, dtype=x.dtype, device=x.device) if row.residual else None
    r2, s2 = (residual.view(-1, N), s.view(-1, N)) if row.residual else (None, None)
    rstd = torch.empty(x.shape[:-1], dtype=torch.float32, device=x.device)
    mean = torch.empty_like(rstd) if row.stats == "layer" else None
    w = weight if row.weight else None
    b = bias if row.bias else None
    aligned = _aligned((x2, r2, y, s2, w, b), dtype_name(x))
    norm_train_fwd_kernel[(cdiv(M, cfg.rows), )](
        x2, r2, y, s2, w, b, mean, rstd, M, x2.stride(0), r2.stride(0) if r2 is not None else 0, N,
        N if s2 is not None else 0, eps, **_constexprs(row, N, cfg, aligned))
    return tuple(t for t in (y, s, mean, rstd) if t is not None)


def codegen_spec(spec, N: int, dtype: str, config: RegsConfig | None = None) -> dict:
    """compile_sm90 arguments reproducing what launch() JITs for contiguous rows of N (CPU codegen)."""
    row = spec.row
    cfg = (config or RegsConfig.heuristic(spec, N, dtype)).validate(spec, N, dtype)
    ptr = f"*{short_dtype(dtype)}"
    args = {"x_ptr": ptr, "r_ptr": ptr if row.residual else None, "y_ptr": ptr, "s_ptr": ptr if row.residual else None,
            "w_ptr": ptr if row.weight else None, "b_ptr": ptr if row.bias else None,
            "mean_ptr": "*fp32" if row.stats == "layer" else None, "rstd_ptr": "*fp32", "M": "i32", "x_stride": N,
            "r_stride": N if row.residual else 0, "y_stride": N, "s_stride": N if row.residual else 0, "eps": "fp32"}
    return kernel_spec(norm_train_fwd_kernel, args, _constexprs(row, N, cfg, N % vec(dtype) == 0),
                       num_warps=cfg.num_warps)
