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
# eager formulas (also what "inductor" compiles). fp32 math, output in x's dtype.

def rms_norm_formula(x, weight, eps: float):
    xf = x.float()
    y = xf * (xf * xf).mean(-1, keepdim=True).add(eps).rsqrt()
    return (y * weight.float()).to(x.dtype)


def layer_norm_formula(x, weight, bias, eps: float):
    xf = x.float()
    mu = xf.mean(-1, keepdim=True)
    xc = xf - mu
    y = xc * (xc * xc).mean(-1, keepdim=True).add(eps).rsqrt()
    return (y * weight.float() + bias.float()).to(x.dtype)


def l2_norm_formula(x, eps: float):
    xf = x.float()
    n = (xf * xf).sum(-1, keepdim=True).sqrt().clamp_min(eps)
    return (xf / n).to(x.dtype)


def add_rms_norm_formula(x, residual, weight, eps: float):
    s = x + residual
    return rms_norm_formula(s, weight, eps), s


def _float_or_none(t):
    return None if t is None else t.float()


def group_norm_formula(x, num_groups: int, weight, bias, eps: float):
    import torch.nn.functional as F
    return F.group_norm(x.float(), num_groups, _float_or_none(weight), _float_or_none(bias), eps).to(x.dtype)


def instance_norm_formula(x, weight, bias, eps: float):
    import torch.nn.functional as F
    return F.instance_norm(x.float(), weight=_float_or_none(weight), bias=_float_or_none(bias),
                           use_input_stats=True, eps=eps).to(x.dtype)


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


def rms_norm_triton(x2, w, eps, out):
    M, N = x2.shape
    block = _block(N)
    rms_norm_triton_kernel[(M, )](x2, w, out, x2.stride(0), out.stride(0), N, eps, BLOCK=block,
                                  num_warps=triton_num_warps(block))
    return out


def add_rms_norm_triton(x2, r2, w, eps, out, out_res):
    M, N = x2.shape
    block = _block(N)
    add_rms_norm_triton_kernel[(M, )](x2, r2, w, out, out_res, x2.stride(0), r2.stride(0), out.stride(0),
                                      out_res.stride(0), N, eps, BLOCK=block, num_warps=triton_num_warps(block))
    return out, out_res


def layer_norm_triton(x2, w, b, eps, out):
    M, N = x2.shape
    block = _block(N)
    layer_norm_triton_kernel[(M, )](x2, w, b, out, x2.stride(0), out.stride(0), N, eps, BLOCK=block,
                                    num_warps=triton_num_warps(block))
    return out


def l2_norm_triton(x2, eps, out):
    M, N = x2.shape
    block = _block(N)
    l2_norm_triton_kernel[(M, )](x2, out, x2.stride(0), out.stride(0), N, eps, BLOCK=block,
                                 num_warps=triton_num_warps(block))
    return out


TRITON_KERNELS = {"rms_norm": rms_norm_triton_kernel, "add_rms_norm": add_rms_norm_triton_kernel,
                  "layer_norm": layer_norm_triton_kernel, "l2_norm": l2_norm_triton_kernel}
FORMULAS = {"rms_norm": rms_norm_formula, "add_rms_norm": add_rms_norm_formula,
            "layer_norm": layer_norm_formula, "l2_norm": l2_norm_formula,
            "group_norm": group_norm_formula, "instance_norm": instance_norm_formula}


def triton_codegen_spec(op: str, N: int, dtype: str):
    """Arguments for gluon_lab.codegen.compile_sm90 reproducing what the launcher JITs."""
    block = _block(N)
    t = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}[dtype]
    sigs = {
        "rms_norm": {"x_ptr": f"*{t}", "w_ptr": f"*{t}", "y_ptr": f"*{t}", "x_stride": "i32", "y_stride": "i32",
                     "N": "i32", "eps": "fp32", "BLOCK": "constexpr"},
        "add_rms_norm": {"x_ptr": f"*{t}", "r_ptr": f"*{t}", "w_ptr": f"*{t}", "y_ptr": f"*{t}", "s_ptr": f"*{t}",
                         "x_stride": "i32", "r_stride": "i32", "y_stride": "i32", "s_stride": "i32", "N": "i32",
                         "eps": "fp32", "BLOCK": "constexpr"},
        "layer_norm": {"x_ptr": f"*{t}", "w_ptr": f"*{t}", "b_ptr": f"*{t}", "y_ptr": f"*{t}", "x_stride": "i32",
                       "y_stride": "i32", "N": "i32", "eps": "fp32", "BLOCK": "constexpr"},
        "l2_norm": {"x_ptr": f"*{t}", "y_ptr": f"*{t}", "x_stride": "i32", "y_stride": "i32", "N": "i32",
                    "eps": "fp32", "BLOCK": "constexpr"},
    }
    sig = sigs[op]
    # The runtime marks 16-byte-aligned pointers and ints divisible by 16 (tt.divisibility=16);
    # N is divisible by 16 only for some shapes, so it is marked only then.
    # Row strides equal N for contiguous rows, so they are marked exactly when N is.
    aligned = [k for k in sig if k.endswith("_ptr")]
    if N % 16 == 0:
        aligned += [k for k in sig if k.endswith("_stride")] + ["N"]
    return dict(fn=TRITON_KERNELS[op], signature=sig, constexprs={"BLOCK": block}, aligned=aligned,
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
