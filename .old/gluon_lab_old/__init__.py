"""gluon-lab: Hopper codegen patterns in Gluon, measured and published.

Public API (one function per op spec, gluon_lab_old/specs/):

    import gluon_lab_old as gll
    gll.rms_norm(x, weight, eps=1e-6, *, variant="auto")
    gll.layer_norm(x, weight, bias, eps=1e-5, *, variant="auto")
    gll.l2_norm(x, eps=1e-12, *, variant="auto")
    gll.add_rms_norm(x, residual, weight, eps=1e-6, *, variant="auto")   # -> (y, x + residual)
    gll.matmul(a, b, *, variant="auto")
    gll.group_norm(x, num_groups, weight=None, bias=None, eps=1e-5, *, variant="auto")  # x: (B, C, *spatial)
    gll.instance_norm(x, weight=None, bias=None, eps=1e-5, *, variant="auto")           # group_norm, G = C
    gll.qk_norm_rope(qkv, num_heads_q, num_heads_k, head_dim, q_weight, k_weight, cos_sin_cache, positions,
                     eps=1e-6, is_neox=True, *, variant="auto")   # in place on packed QKV; returns qkv
    gll.variants(op)

Importing this package never touches CUDA: GPU-only variants fail at call time with a clear error.
"""
from __future__ import annotations

from . import specs
from .api import PUBLIC as _PUBLIC
from .device import GPUUnavailableError
from .registry import variants

__version__ = "0.1.0"
OPS = specs.names()
globals().update(_PUBLIC)
# torch.nn.grad.conv2d_input / conv2d_weight's argument orders
from .torch_order import conv2d_input_grad_like_torch, conv2d_weight_grad_like_torch  # noqa: E402

__all__ = [*_PUBLIC, "conv2d_input_grad_like_torch", "conv2d_weight_grad_like_torch", "variants", "OPS",
           "GPUUnavailableError"]
