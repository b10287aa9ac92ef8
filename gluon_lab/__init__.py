"""gluon-lab: Hopper codegen patterns in Gluon, measured and published.

Public API (design.md):

    import gluon_lab as gll
    gll.rms_norm(x, weight, eps=1e-6, variant="auto")
    gll.layer_norm(x, weight, bias, eps=1e-5, variant="auto")
    gll.l2_norm(x, eps=1e-12, variant="auto")
    gll.add_rms_norm(x, residual, weight, eps=1e-6, variant="auto")   # -> (y, x + residual)
    gll.matmul(a, b, variant="auto")
    gll.group_norm(x, num_groups, weight=None, bias=None, eps=1e-5, variant="auto")  # x: (B, C, *spatial)
    gll.instance_norm(x, weight=None, bias=None, eps=1e-5, variant="auto")           # group_norm, G = C
    gll.variants(op)

Importing this package never touches CUDA: GPU-only variants fail at call time with a clear error.
"""
from __future__ import annotations

from .ops import (OPS, check_group_norm_args, check_instance_norm_args, check_norm_args, check_tensor, dispatch,
                  get_variant, variants)
from .device import GPUUnavailableError

__version__ = "0.1.0"
__all__ = ["rms_norm", "layer_norm", "l2_norm", "add_rms_norm", "matmul", "group_norm", "instance_norm", "variants",
           "OPS", "GPUUnavailableError"]


def _empty_result(x, n_out=1, op=None, variant="auto"):
    import torch
    if variant != "auto":
        get_variant(op, variant)  # an unknown variant is an error even for empty input
    outs = tuple(torch.empty_like(x) for _ in range(n_out))
    return outs if n_out > 1 else outs[0]


def _check_eps(eps):
    if not isinstance(eps, (int, float)) or isinstance(eps, bool) or not eps >= 0:
        raise ValueError(f"eps must be a non-negative number, got {eps!r}")
    return float(eps)


def rms_norm(x, weight, eps=1e-6, *, variant="auto"):
    """y = x / sqrt(mean(x², -1) + eps) * weight, fp32 math, output in x.dtype (= F.rms_norm)."""
    check_norm_args(x, weight)
    eps = _check_eps(eps)
    if x.numel() == 0:
        return _empty_result(x, 1, "rms_norm", variant)
    return dispatch("rms_norm", variant, (x, weight), eps=eps)


def layer_norm(x, weight, bias, eps=1e-5, *, variant="auto"):
    """(x - mean) / sqrt(var + eps) * weight + bias over the last dim (= F.layer_norm)."""
    check_norm_args(x, weight, bias)
    if bias is None:
        raise ValueError("bias is required (shape (N,)); pass torch.zeros(N) for none")
    eps = _check_eps(eps)
    if x.numel() == 0:
        return _empty_result(x, 1, "layer_norm", variant)
    return dispatch("layer_norm", variant, (x, weight, bias), eps=eps)


def l2_norm(x, eps=1e-12, *, variant="auto"):
    """x / max(||x||₂, eps) over the last dim (= F.normalize(x, p=2, dim=-1, eps=eps))."""
    check_norm_args(x, need_weight=False)
    eps = _check_eps(eps)
    if x.numel() == 0:
        return _empty_result(x, 1, "l2_norm", variant)
    return dispatch("l2_norm", variant, (x, ), eps=eps)


def add_rms_norm(x, residual, weight, eps=1e-6, *, variant="auto"):
    """s = x + residual (in x.dtype); returns (rms_norm(s, weight, eps), s) like vLLM's fused_add_rmsnorm."""
    check_norm_args(x, weight, residual=residual)
    eps = _check_eps(eps)
    if x.numel() == 0:
        return _empty_result(x, 2, "add_rms_norm", variant)
    return dispatch("add_rms_norm", variant, (x, residual, weight), eps=eps)


def matmul(a, b, *, variant="auto"):
    """(M, K) @ (K, N) for bf16/fp16 inputs, fp32 accumulation, output in a.dtype."""
    check_tensor("a", a, ndim_min=2)
    check_tensor("b", b, ndim_min=2)
    if a.dim() != 2 or b.dim() != 2:
        raise ValueError(f"matmul takes 2-D a (M, K) and b (K, N); got {tuple(a.shape)} and {tuple(b.shape)}")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"a.shape[1] (K={a.shape[1]}) must equal b.shape[0] ({b.shape[0]})")
    if a.dtype != b.dtype:
        raise TypeError(f"a and b must share a dtype; got {a.dtype} and {b.dtype}")
    if str(a.dtype) not in ("torch.bfloat16", "torch.float16"):
        raise TypeError(f"matmul takes bf16 or fp16 inputs; got {a.dtype}")
    return dispatch("matmul", variant, (a, b))


def group_norm(x, num_groups, weight=None, bias=None, eps=1e-5, *, variant="auto"):
    """x (B, C, *spatial), C split into num_groups groups: (x - mean) / sqrt(var + eps) over each
    (C / num_groups) x spatial group, then * weight[c] + bias[c] (both optional, shape (C,)).
    Contiguous or channels-last x (= F.group_norm)."""
    check_group_norm_args(x, num_groups, weight, bias)
    eps = _check_eps(eps)
    if x.numel() == 0:
        return _empty_result(x, 1, "group_norm", variant)
    return dispatch("group_norm", variant, (x, num_groups, weight, bias), eps=eps)


def instance_norm(x, weight=None, bias=None, eps=1e-5, *, variant="auto"):
    """group_norm with one group per channel: statistics over the spatial dims of each (b, c),
    always from the input (= F.instance_norm(x, weight=weight, bias=bias, use_input_stats=True, eps=eps))."""
    check_instance_norm_args(x, weight, bias)
    eps = _check_eps(eps)
    if x.numel() == 0:
        return _empty_result(x, 1, "instance_norm", variant)
    return dispatch("instance_norm", variant, (x, weight, bias), eps=eps)
