"""Validation rules the specs compose. Every failure names the argument and the rule."""
from __future__ import annotations

from ._base import DTYPES


def dtype_name(t) -> str:
    return str(t.dtype).replace("torch.", "")


def check_tensor(name: str, t, *, ndim_min: int = 1, dtypes=DTYPES):
    import torch
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if dtype_name(t) not in dtypes:
        allowed = ", ".join(f"torch.{d}" for d in dtypes)
        raise TypeError(f"{name}.dtype must be one of {allowed}; got {t.dtype}")
    if t.dim() < ndim_min:
        raise ValueError(f"{name} must have at least {ndim_min} dimension(s), got shape {tuple(t.shape)}")


def check_like(name: str, t, x, shape: tuple, what: str, x_name: str = "x"):
    """t must be a supported tensor of `shape`, with x's dtype and device."""
    check_tensor(name, t)
    if tuple(t.shape) != tuple(shape):
        raise ValueError(f"{name} must have {what}; got {tuple(t.shape)}")
    check_same_dtype_device(name, t, x, x_name)


def check_same_dtype_device(name: str, t, x, x_name: str = "x"):
    if t.dtype != x.dtype:
        raise TypeError(f"{name}.dtype must equal {x_name}.dtype ({x.dtype}); got {t.dtype}")
    if t.device != x.device:
        raise ValueError(f"{name} must be on {x_name}'s device ({x.device}); got {t.device}")


def check_eps(eps) -> float:
    if not isinstance(eps, (int, float)) or isinstance(eps, bool) or not eps >= 0:
        raise ValueError(f"eps must be a non-negative number, got {eps!r}")
    return float(eps)


def check_positive_int(name: str, v, rule: str):
    if not isinstance(v, int) or isinstance(v, bool):
        raise TypeError(f"{name} must be {rule}; got {v!r} ({type(v).__name__})")
    if v <= 0:
        raise ValueError(f"{name} must be {rule}; got {v}")
    return v


def spatial_size(x) -> int:
    S = 1
    for s in x.shape[2:]:
        S *= s
    return S


def rows_2d(name: str, t):
    """(..., N) -> (M, N) view with unit last stride and a uniform row stride, without copying."""
    if t.stride(-1) != 1 and t.shape[-1] > 1:
        raise ValueError(f"{name} must be contiguous in its last dimension (stride(-1) == 1); got strides "
                         f"{tuple(t.stride())}. Call .contiguous() first")
    try:
        return t.view(-1, t.shape[-1])
    except RuntimeError:
        raise ValueError(f"{name}'s leading dimensions cannot be flattened without a copy (strides "
                         f"{tuple(t.stride())}); call .contiguous() first") from None


def tensor_layout(x) -> str:
    """ "channels_last" when C is x's innermost dimension (and x is not also plain contiguous)."""
    if x.dim() >= 3 and not x.is_contiguous() and x.movedim(1, -1).is_contiguous():
        return "channels_last"
    return "nchw"
