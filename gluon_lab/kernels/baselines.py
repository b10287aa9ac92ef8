"""Baselines every pattern is judged against.

* "torch":    the eager PyTorch op users call (F.rms_norm, F.layer_norm, F.normalize, eager add+norm).
* "inductor": torch.compile (default mode) of the eager fp32 formula below, one specialization per
              shape (dynamic=False, so automatic-dynamic kernels never stand in for static ones).
* "triton":   a plain one-row-per-program Triton kernel: BLOCK = next_power_of_2(N), masked loads,
              the row kept in registers between the two passes (Liger-style). This is what a
              pattern must beat to be worth writing in Gluon.
"""
from __future__ import annotations

import triton
import triton.language as tl


# ----------------------------------------------------------------------------------------------
# plain Triton kernels: one row per program, whole row in registers

def triton_num_warps(block: int) -> int:
    # Liger's calculate_settings: 4 warps up to 2K elements, 8 to 8K, 16 to 32K, 32 beyond
    # (keeps ~8-64 fp32 values per thread; more warps per row once a row outgrows 256 threads).
    if block >= 32768:
        return 32
    if block >= 8192:
        return 16
    if block >= 2048:
        return 8
    return 4


MAX_TRITON_BLOCK = 65536  # above this the register-resident row spills catastrophically (Liger's cap)


@triton.jit
def rms_norm_triton_kernel(x_ptr, w_ptr, y_ptr, x_stride, y_stride, N, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / N + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * y_stride + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def add_rms_norm_triton_kernel(x_ptr, r_ptr, w_ptr, y_ptr, s_ptr, x_stride, r_stride, y_stride, s_stride, N, eps,
                               BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=0.0)
    r = tl.load(r_ptr + row * r_stride + cols, mask=mask, other=0.0)
    s = x + r  # rounded to the input dtype, like eager x + residual
    tl.store(s_ptr + row * s_stride + cols, s, mask=mask)
    sf = s.to(tl.float32)
    rstd = tl.rsqrt(tl.sum(sf * sf, axis=0) / N + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * y_stride + cols, (sf * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def layer_norm_triton_kernel(x_ptr, w_ptr, b_ptr, y_ptr, x_stride, y_stride, N, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / N
    xc = tl.where(mask, x - mean, 0.0)  # padded lanes must not count: (0 - mean)^2 != 0
    rstd = tl.rsqrt(tl.sum(xc * xc, axis=0) / N + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * y_stride + cols, (xc * rstd * w + b).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def l2_norm_triton_kernel(x_ptr, y_ptr, x_stride, y_stride, N, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=0.0).to(tl.float32)
    n = tl.sqrt(tl.sum(x * x, axis=0))
    inv = 1.0 / tl.where(n < eps, eps, n)  # NaN-propagating max (tl.maximum would drop a NaN)
    tl.store(y_ptr + row * y_stride + cols, (x * inv).to(y_ptr.dtype.element_ty), mask=mask)


def _block(N: int) -> int:
    block = triton.next_power_of_2(N)
    if block > MAX_TRITON_BLOCK:
        raise ValueError(f"variant 'triton' keeps the whole row in registers: N={N} needs BLOCK={block} "
                         f"> {MAX_TRITON_BLOCK} (it would spill); use a chunked/streaming variant")
    return block


# The plain Triton kernel of a row norm, by its declarative math (spec.row): (stats, residual).
# Arguments follow one convention: input pointers in operand order (x, residual, weight, bias),
# then output pointers (y, s); row strides of x (, residual), y (, s); then N, eps.
TRITON_ROW_KERNELS = {("rms", False): rms_norm_triton_kernel, ("rms", True): add_rms_norm_triton_kernel,
                      ("layer", False): layer_norm_triton_kernel, ("l2", False): l2_norm_triton_kernel}


def triton_row_kernel(row):
    try:
        return TRITON_ROW_KERNELS[(row.stats, row.residual)]
    except KeyError:
        raise ValueError(f"variant 'triton' has no plain kernel for row math {row}") from None


def row_norm_triton(spec, inputs, eps, outs):
    """Launch the plain kernel: one program per row, BLOCK = next_pow2(N) in registers."""
    from ..specs._rules import rows_2d
    named = spec.named(inputs)
    rows = [rows_2d(n, named[n]) for n in ("x", "residual") if n in named]
    params = [named[n] for n in ("weight", "bias") if n in named]
    outs2 = [o.view(-1, o.shape[-1]) for o in outs]
    M, N = rows[0].shape
    block = _block(N)
    triton_row_kernel(spec.row)[(M, )](*rows, *params, *outs2, *(t.stride(0) for t in rows + outs2), N, eps,
                                       BLOCK=block, num_warps=triton_num_warps(block))


def triton_codegen_spec(spec, N: int, dtype: str):
    """Arguments for gluon_lab.codegen.compile_sm90 reproducing what row_norm_triton JITs."""
    from .hopper import short_dtype
    kernel = triton_row_kernel(spec.row)
    block = _block(N)
    t = short_dtype(dtype)
    sig = {a: (f"*{t}" if a.endswith("_ptr") else "constexpr" if a == "BLOCK" else "fp32" if a == "eps" else "i32")
           for a in kernel.arg_names}
    # The runtime marks 16-byte-aligned pointers and ints divisible by 16 (tt.divisibility=16);
    # N is divisible by 16 only for some shapes, so it is marked only then.
    # Row strides equal N for contiguous rows, so they are marked exactly when N is.
    aligned = [k for k in sig if k.endswith("_ptr")]
    if N % 16 == 0:
        aligned += [k for k in sig if k.endswith("_stride")] + ["N"]
    return dict(fn=kernel, signature=sig, constexprs={"BLOCK": block}, aligned=aligned,
                num_warps=triton_num_warps(block))

# ----------------------------------------------------------------------------------------------
# matmul: a persistent tl.dot kernel (the "triton" baseline of pattern 3's GEMM). On sm_90 Triton
# lowers tl.dot to wgmma and software-pipelines the K loop itself (num_stages); tiles are walked
# persistently in GROUP_M-grouped order, like the Triton matmul tutorial.

@triton.jit
def matmul_persistent_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_bk, stride_cm, BM: tl.constexpr,
                             BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr, NUM_SMS: tl.constexpr):
    start = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BM)
    num_pid_n = tl.cdiv(N, BN)
    n_tiles = num_pid_m * num_pid_n
    for t in range(start, n_tiles, NUM_SMS):
        group = GROUP_M * num_pid_n
        first_m = (t // group) * GROUP_M
        size_m = min(num_pid_m - first_m, GROUP_M)
        pid_m = first_m + (t % group) % size_m
        pid_n = (t % group) // size_m
        rm = pid_m * BM + tl.arange(0, BM)
        rn = pid_n * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k0 in range(0, K, BK):
            a = tl.load(a_ptr + rm[:, None].to(tl.int64) * stride_am + (k0 + rk)[None, :],
                        mask=(rm[:, None] < M) & ((k0 + rk)[None, :] < K), other=0.0)
            b = tl.load(b_ptr + (k0 + rk)[:, None].to(tl.int64) * stride_bk + rn[None, :],
                        mask=((k0 + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
            acc = tl.dot(a, b, acc)
        tl.store(c_ptr + rm[:, None].to(tl.int64) * stride_cm + rn[None, :], acc.to(c_ptr.dtype.element_ty),
                 mask=(rm[:, None] < M) & (rn[None, :] < N))


def matmul_triton(a, b, out=None, BM=128, BN=256, BK=64, GROUP_M=8, num_stages=3, num_warps=8):
    import torch
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), dtype=a.dtype, device=a.device) if out is None else out
    sms = torch.cuda.get_device_properties(a.device).multi_processor_count
    n_tiles = triton.cdiv(M, BM) * triton.cdiv(N, BN)
    grid = (max(1, min(sms, n_tiles)), )
    matmul_persistent_kernel[grid](a, b, c, M, N, K, a.stride(0), b.stride(0), c.stride(0), BM=BM, BN=BN, BK=BK,
                                   GROUP_M=GROUP_M, NUM_SMS=grid[0], num_stages=num_stages, num_warps=num_warps)
    return c


# ----------------------------------------------------------------------------------------------
# registration: every op gets "torch" (its spec's eager formulation) and, where the spec has an
# fp32 formula, "inductor" (torch.compile of it); row norms and matmul get the plain Triton
# kernels; peers (Liger) where installed.

import functools  # noqa: E402
import importlib  # noqa: E402
import types  # noqa: E402

from .. import specs  # noqa: E402
from ..registry import register  # noqa: E402


def _register_torch(spec):
    def fn(*inputs, out=None, **scalars):
        return spec.eager(*inputs, **scalars)
    fn.__name__ = fn.__qualname__ = f"{spec.name}_torch"
    register(spec.name, "torch", pattern="baseline", needs_cuda=False, roots=(spec.eager, ), differentiable=True,
             description=f"eager torch ({spec.eager.__name__})")(fn)


@functools.lru_cache(maxsize=None)
def compiled_formula(op: str, mode: str | None = None):
    import torch
    import torch._dynamo
    # One specialization per shape and dtype: the default recompile limit (8) would silently
    # send later shapes of a sweep back to eager.
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 4096)
    torch._dynamo.config.accumulated_recompile_limit = max(torch._dynamo.config.accumulated_recompile_limit, 65536)
    return torch.compile(specs.get(op).formula, dynamic=False, mode=mode)


def _register_inductor(spec, name="inductor", mode=None):
    def fn(*inputs, out=None, **scalars):
        return compiled_formula(spec.name, mode)(*inputs, *scalars.values())
    fn.__name__ = fn.__qualname__ = f"{spec.name}_{name.replace('-', '_')}"
    register(spec.name, name, pattern="baseline", roots=(spec.formula, ), differentiable=True,
             description=f"torch.compile({'default' if mode is None else repr(mode)}) of the eager fp32 formula")(fn)


def _register_triton_row(spec):
    def fn(*inputs, eps, out=None):
        outs = out if out is not None else spec.alloc_outputs(inputs)
        row_norm_triton(spec, inputs, eps, outs if isinstance(outs, tuple) else (outs, ))
        return outs

    def check(*inputs):
        from ..specs._rules import rows_2d
        named = spec.named(inputs)
        _block(named["x"].shape[-1])  # raises ValueError above the register cap
        for n in ("x", "residual"):
            if n in named:
                rows_2d(n, named[n])

    fn.__name__ = fn.__qualname__ = f"{spec.name}_triton"
    register(spec.name, "triton", pattern="baseline", supports_out=True, check=check,
             codegen=lambda shape, dtype, config=None: triton_codegen_spec(spec, shape["N"], dtype),
             description="plain Triton, one row per program, BLOCK=next_pow2(N) in registers")(fn)


for _s in specs.all_specs():
    _register_torch(_s)
    if _s.formula is not None:
        _register_inductor(_s)
for _s in specs.family("row_norm"):
    _register_triton_row(_s)
_register_inductor(specs.get("rms_norm"), "inductor-max-autotune", "max-autotune-no-cudagraphs")


def _check_matmul(a, b):
    from .gemm import check
    check(a, b)  # the same rules (2-D, bf16/fp16, row-major, 16-byte rows) as the Gluon GEMMs


@register("matmul", "triton", pattern="baseline", check=_check_matmul,
          description="persistent tl.dot kernel, 128x256x64, 3 stages, grouped tile order")
def matmul_triton_variant(a, b, out=None):
    return matmul_triton(a, b)


# ----------------------------------------------------------------------------------------------
# Liger-Kernel (optional peer; pure Python on top of Triton). casting_mode="gemma" = fp32 math
# throughout, the same numerics as every other variant here (Liger's default "llama" multiplies
# by the weight in the input dtype).

def _liger_available() -> bool:
    import importlib.util
    return importlib.util.find_spec("liger_kernel") is not None


def _liger(path: str):
    """liger_kernel's autograd Function `module:Name` (imported on first use)."""
    import importlib
    mod, name = path.split(":")
    return getattr(importlib.import_module(f"liger_kernel.ops.{mod}"), name)


def _liger_roots(mod: str, kernel: str):
    """Liger's forward kernel (hashed with our code: a Liger upgrade marks its records stale)."""
    if not _liger_available():
        return ()
    import importlib
    return tuple(k for k in (getattr(importlib.import_module(f"liger_kernel.ops.{mod}"), kernel, None), ) if k)


@register("rms_norm", "liger", pattern="baseline", available=_liger_available,
          roots=_liger_roots("rms_norm", "_rms_norm_forward_kernel"),
          description="Liger-Kernel LigerRMSNormFunction (casting_mode='gemma')")
def rms_norm_liger(x, weight, eps=1e-6, out=None):
    return _liger("rms_norm:LigerRMSNormFunction").apply(x, weight, eps, 0.0, "gemma", False)


@register("layer_norm", "liger", pattern="baseline", available=_liger_available,
          roots=_liger_roots("layer_norm", "_layer_norm_forward_kernel"),
          description="Liger-Kernel LigerLayerNormFunction")
def layer_norm_liger(x, weight, bias, eps=1e-5, out=None):
    return _liger("layer_norm:LigerLayerNormFunction").apply(x, weight, bias, eps)


@register("add_rms_norm", "liger", pattern="baseline", available=_liger_available,
          roots=_liger_roots("fused_add_rms_norm", "_fused_add_rms_norm_forward_kernel"),
          description="Liger-Kernel LigerFusedAddRMSNormFunction (casting_mode='gemma')")
def add_rms_norm_liger(x, residual, weight, eps=1e-6, out=None):
    return _liger("fused_add_rms_norm:LigerFusedAddRMSNormFunction").apply(x, residual, weight, eps, 0.0, "gemma",
                                                                           False)


# ----------------------------------------------------------------------------------------------
# QuACK (optional peer: quack-kernels on the CUTLASS CuTe DSL; its wheels travel to the H200 with
# ci/quack_wheels.sh). The front doors a user calls: quack.rmsnorm.rmsnorm (prenorm=True returns
# (y, x + residual)) and quack.rmsnorm.layernorm_fwd, which takes fp32 weight and bias only: cast
# once per parameter version (_fp32_param), as a model would keep them, not inside every timed call.

@functools.lru_cache(maxsize=None)
def _quack_available() -> bool:
    """Once per process: importing the CUTLASS DSL takes seconds, and a failed import would be retried."""
    import importlib.util
    if importlib.util.find_spec("quack") is None:
        return False
    try:  # its CUTLASS DSL must import too (a --target install needs dsl_packages on sys.path)
        import quack.rmsnorm  # noqa: F401
    except Exception:  # noqa: BLE001
        return False
    return True


def _quack():
    # the module, not the attribute: quack/__init__.py re-exports the function rmsnorm, which shadows the
    # submodule's name on the package (quack.rmsnorm is then a function; run 20261201T220541Z failed on it)
    import importlib
    return importlib.import_module("quack.rmsnorm")


@register("rms_norm", "quack", pattern="baseline", available=_quack_available,
          description="QuACK quack.rmsnorm.rmsnorm (CuTe DSL, compiled per shape on first call)")
def rms_norm_quack(x, weight, eps=1e-6, out=None):
    return _quack().rmsnorm(x, weight, eps=eps)


@register("add_rms_norm", "quack", pattern="baseline", available=_quack_available,
          description="QuACK quack.rmsnorm.rmsnorm(residual=, prenorm=True): (y, x + residual)")
def add_rms_norm_quack(x, residual, weight, eps=1e-6, out=None):
    return _quack().rmsnorm(x, weight, residual=residual, eps=eps, prenorm=True)


# the fp32 copies by (storage, version): a stdlib namespace, which the code hash does not read
_FP32_PARAMS = types.SimpleNamespace(cache={})


def _fp32_param(t):
    """t as float32, cast once per (storage, version): QuACK's LayerNorm takes fp32 weight / bias only, as a
    model would keep them; casting inside every call would time two extra kernels per call (a large share
    of a 4 us norm at small M) that a real caller never pays. An in-place update bumps t._version."""
    import torch
    if t is None or t.dtype == torch.float32:
        return t
    key = (t.data_ptr(), t._version, tuple(t.shape), t.dtype, str(t.device))
    c = _FP32_PARAMS.cache
    if key not in c:
        if len(c) >= 16:
            c.clear()
        c[key] = (t, t.float())  # t kept alive: its address cannot be reused while the entry exists
    return c[key][1]


@register("layer_norm", "quack", pattern="baseline", available=_quack_available,
          description="QuACK quack.rmsnorm.layernorm_fwd (fp32 weight/bias, cast once per parameter version)")
def layer_norm_quack(x, weight, bias, eps=1e-5, out=None):
    N = x.shape[-1]
    y = _quack().layernorm_fwd(x.reshape(-1, N), _fp32_param(weight), _fp32_param(bias), eps=eps)
    return y.reshape(x.shape)


# ----------------------------------------------------------------------------------------------
# the peers' backward (issue 31): each library's own backward function, called directly with the statistics
# its forward saves (the bench makes them; the libraries' autograd Functions call the same functions)

def _liger_settings(N: int):
    from liger_kernel.ops.utils import calculate_settings
    return calculate_settings(N)


@register("rms_norm_backward", "liger", pattern="baseline", available=_liger_available,
          roots=_liger_roots("rms_norm", "_rms_norm_backward_kernel"),
          description="Liger-Kernel rms_norm_backward (casting_mode='gemma': fp32 math; grid = #SMs, fp32 "
                      "partials, torch .sum(0))")
def rms_norm_backward_liger(dy, x, weight, rstd=None, eps=1e-6, out=None):
    m = importlib.import_module("liger_kernel.ops.rms_norm")
    N = x.shape[-1]
    x2 = x.reshape(-1, N)
    r = rstd.reshape(-1) if rstd is not None else m.rms_norm_forward(x, weight, eps, 0.0, "gemma", None)[2]
    bs, nw = _liger_settings(N)
    dx, dw = m.rms_norm_backward(dy.reshape(-1, N), x2, weight, r, 0.0, 1, bs, nw, False, None)
    return dx.view(x.shape), dw


@register("layer_norm_backward", "liger", pattern="baseline", available=_liger_available,
          roots=_liger_roots("layer_norm", "_layer_norm_backward_kernel"),
          description="Liger-Kernel layer_norm_backward (grid = #SMs, fp32 partials, torch .sum(0))")
def layer_norm_backward_liger(dy, x, weight, mean=None, rstd=None, eps=1e-5, out=None):
    m = importlib.import_module("liger_kernel.ops.layer_norm")
    N = x.shape[-1]
    x2 = x.reshape(-1, N)
    if rstd is None:
        _, _, mean, rstd, _, _ = m.layer_norm_forward(x, weight, weight, eps)
    dx, dw, db = m.layer_norm_backward(dy.reshape(-1, N), x2, weight, weight, mean.reshape(-1), rstd.reshape(-1))
    return dx.view(x.shape), dw, db


@register("add_rms_norm_backward", "liger", pattern="baseline", available=_liger_available,
          roots=_liger_roots("fused_add_rms_norm", "_fused_add_rms_norm_backward_kernel"),
          description="Liger-Kernel fused_add_rms_norm_backward (casting_mode='gemma')")
def add_rms_norm_backward_liger(dy, s, weight, ds=None, rstd=None, eps=1e-6, out=None):
    import torch
    m = importlib.import_module("liger_kernel.ops.fused_add_rms_norm")
    N = s.shape[-1]
    s2 = s.reshape(-1, N)
    if rstd is None:
        rstd = importlib.import_module("liger_kernel.ops.rms_norm").rms_norm_forward(s, weight, eps, 0.0, "gemma",
                                                                                      None)[2]
    bs, nw = _liger_settings(N)
    ds2 = ds.reshape(-1, N) if ds is not None else torch.zeros_like(s2)  # Liger needs a tensor
    dx, _, dw = m.fused_add_rms_norm_backward(dy.reshape(-1, N), ds2, s2, weight, rstd.reshape(-1), 0.0, 1, bs, nw,
                                              2, False)
    return dx.view(s.shape), dw


@register("rms_norm_backward", "quack", pattern="baseline", available=_quack_available,
          description="QuACK quack.rmsnorm.rmsnorm_bwd (CuTe DSL; persistent partials, torch .sum(0))")
def rms_norm_backward_quack(dy, x, weight, rstd=None, eps=1e-6, out=None):
    q = _quack()
    N = x.shape[-1]
    x2 = x.reshape(-1, N)
    if rstd is None:
        rstd = q.rmsnorm_fwd(x2, weight, eps=eps, store_rstd=True)[2]
    dx, dw, _, _ = q.rmsnorm_bwd(x2, weight, dy.reshape(-1, N), rstd.reshape(-1))
    return dx.view(x.shape), dw


@register("layer_norm_backward", "quack", pattern="baseline", available=_quack_available,
          description="QuACK quack.rmsnorm.layernorm_bwd (fp32 weight, cast once per parameter version)")
def layer_norm_backward_quack(dy, x, weight, mean=None, rstd=None, eps=1e-5, out=None):
    q = _quack()
    N = x.shape[-1]
    x2 = x.reshape(-1, N)
    w32 = _fp32_param(weight)
    if rstd is None:
        _, rstd, mean = q.layernorm_fwd(x2, w32, w32, eps=eps, return_rstd=True, return_mean=True)
    dx, dw, db = q.layernorm_bwd(x2, w32, dy.reshape(-1, N), rstd.reshape(-1), mean.reshape(-1), has_bias=True)
    return dx.view(x.shape), dw, db


@register("add_rms_norm_backward", "quack", pattern="baseline", available=_quack_available,
          description="QuACK quack.rmsnorm.rmsnorm_bwd(dresidual_out=ds, has_residual=True)")
def add_rms_norm_backward_quack(dy, s, weight, ds=None, rstd=None, eps=1e-6, out=None):
    q = _quack()
    N = s.shape[-1]
    s2 = s.reshape(-1, N)
    if rstd is None:
        rstd = q.rmsnorm_fwd(s2, weight, eps=eps, store_rstd=True)[2]
    dx, dw, _, dres = q.rmsnorm_bwd(s2, weight, dy.reshape(-1, N), rstd.reshape(-1),
                                    dresidual_out=None if ds is None else ds.reshape(-1, N), has_residual=ds is not None)
    return (dres if dres is not None else dx).view(s.shape), dw
