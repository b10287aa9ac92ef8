"""Host-side plumbing shared by the row-norm kernels: operand checks for TMA (with messages that
name the argument and the rule) and output allocation.

gluon-chunked uses these; gluon-tma still carries its own copy (tma_cache.check / launch), kept
byte-identical so the 2026-11-29 H200 records stay current (their kernel_source_hash covers that
code). Move it here together with the next re-measurement of pattern 1.
"""
from __future__ import annotations

OPERAND_NAMES = {"rms_norm": ("x", "weight"), "layer_norm": ("x", "weight", "bias"), "l2_norm": ("x", ),
                 "add_rms_norm": ("x", "residual", "weight")}


def check_tma_operands(op: str, tensors, N: int) -> None:
    """Every operand: unit last stride, 16-byte aligned base, rows flattenable with a 16-byte-multiple stride."""
    for name, t in zip(OPERAND_NAMES[op], tensors):
        if t is None:
            continue
        if t.stride(-1) != 1:
            raise ValueError(f"{name} must be contiguous in its last dimension (stride(-1) == 1) for TMA; got strides "
                             f"{tuple(t.stride())}")
        if t.data_ptr() % 16:
            raise ValueError(f"{name}'s data pointer must be 16-byte aligned for TMA (got address % 16 = "
                             f"{t.data_ptr() % 16})")
        if t.dim() > 1:
            try:
                v = t.view(-1, N)
            except RuntimeError:
                raise ValueError(f"{name}'s leading dimensions cannot be flattened without a copy (strides "
                                 f"{tuple(t.stride())}); call .contiguous() first") from None
            if v.shape[0] > 1 and (v.stride(0) * t.element_size()) % 16:
                raise ValueError(f"{name}'s row stride must be a multiple of 16 bytes for TMA; got "
                                 f"{v.stride(0)} elements = {v.stride(0) * t.element_size()} bytes")


def outputs(op: str, x, out):
    """(y, s, y2, s2): outputs shaped like x (s = x + residual only for add_rms_norm) and their
    (M, N) views; s2 falls back to y2 so kernels always get a valid pointer."""
    import torch
    N = x.shape[-1]
    if out is None:
        y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        s = torch.empty(x.shape, dtype=x.dtype, device=x.device) if op == "add_rms_norm" else None
    else:
        y, s = out if op == "add_rms_norm" else (out, None)
    y2 = y.view(-1, N)
    return y, s, y2, (s.view(-1, N) if s is not None else y2)
