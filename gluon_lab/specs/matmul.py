"""matmul: C = A @ B for 2-D bf16/fp16 A (M, K) and B (K, N), fp32 accumulation, C in A's dtype.

Byte model: A + B + C once each. FLOPs: 2·M·N·K. SOL is against tensor-core throughput."""
from __future__ import annotations

from ._base import ITEMSIZE, Operand, OpSpec, define, log2f
from ._rules import check_tensor


def validate(a, b):
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
    if a.device != b.device:
        raise ValueError(f"b must be on a's device ({a.device}); got {b.device}")
    return {}


def reference(a, b):
    return a.double() @ b.double()


def eager(a, b):
    import torch
    return torch.matmul(a, b)


def _make(shape, dtype, rnd, scale=1.0):
    M, N, K = shape["M"], shape["N"], shape["K"]
    return (rnd(M, K, std=scale), rnd(K, N))


def _bytes(shape, dtype):
    M, N, K = shape["M"], shape["N"], shape["K"]
    return (M * K + K * N + M * N) * ITEMSIZE[dtype]


MATMUL = define(OpSpec(
    name="matmul", family="matmul", inputs=(Operand("a", doc="(M, K)"), Operand("b", doc="(K, N)")), outputs=("c", ),
    doc="(M, K) @ (K, N) for bf16/fp16 inputs, fp32 accumulation, output in a.dtype.",
    validate=validate, reference=reference, eager=eager, formula=None,
    shape_of=lambda a, b: {"M": a.shape[0], "N": b.shape[1], "K": a.shape[1]}, shape_keys=("M", "N", "K"),
    bytes=_bytes, flops=lambda s: 2 * s["M"] * s["N"] * s["K"], make_inputs=_make, dtypes=("bfloat16", "float16"),
    # octaves of M, N, K, and 2 units for rows that are not 128-byte aligned (a TMA box row then straddles lines)
    bucket=lambda s, itemsize=2: (log2f(s["M"]), log2f(s["N"]), log2f(s["K"]),
                                  2.0 * bool((s["K"] * itemsize) % 128 or (s["N"] * itemsize) % 128)),
    # atol is relative to the RMS of C (bench.compare): K-long fp32 sums of bf16 products
    tolerance={"bfloat16": (1e-2, 1e-2), "float16": (2e-3, 2e-3)}, compute_bound=True, marker="*"))
