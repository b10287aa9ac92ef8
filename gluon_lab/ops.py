"""Variant registry, input validation with clear errors, and dispatch (including "auto").

A variant is one registered callable (tritonbench-style): ``fn(*inputs, eps=..., out=None)``
returning the op's outputs. Registration carries what the rest of the lab needs for free:
the kernels whose source defines the variant (kernel_source_hash, staleness), the pattern it
demonstrates, whether it needs a CUDA / Hopper GPU, an eligibility check that raises a clear
ValueError/TypeError, and an optional codegen spec (compile for sm_90 on a CPU machine).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Callable

from . import device
from .results import kernel_source_hash

OPS = ("rms_norm", "layer_norm", "l2_norm", "add_rms_norm", "matmul", "group_norm", "instance_norm")
# Ops over (B, C, *spatial) tensors whose shape dicts are {"B", "C", "H", "W"[, "D"][, "G"], "layout"}
# rather than {"M", "N"}: inputs (x, num_groups, weight, bias) / (x, weight, bias).
GROUP_OPS = ("group_norm", "instance_norm")
DTYPES = ("bfloat16", "float16", "float32")


@dataclass(frozen=True)
class Variant:
    op: str
    name: str
    pattern: str  # "baseline" | "tma-caching" | "chunked" | "pipelined" | "warp-specialized"
    fn: Callable
    sources: tuple  # functions whose source defines the variant (hashed for staleness)
    needs_cuda: bool = True
    needs_hopper: bool = False
    supports_out: bool = False  # fn accepts out= (pre-allocated, poisonable outputs)
    check: Callable | None = None  # check(*inputs) -> raises ValueError/TypeError if ineligible
    codegen: Callable | None = None  # codegen(N=.., dtype=..) -> compile_sm90 kwargs
    configure: Callable | None = None  # configure(M, N, dtype, overrides: dict) -> config object (dataclass)
    available: Callable[[], bool] = field(default=lambda: True)
    description: str = ""

    @functools.cached_property
    def source_hash(self) -> str:
        return kernel_source_hash(*self.sources)


_REGISTRY: dict[str, dict[str, Variant]] = {op: {} for op in OPS}


def register(op: str, name: str, *, pattern: str, sources=(), **kw):
    """Decorator: register ``fn`` as variant ``name`` of ``op``."""
    if op not in _REGISTRY:
        raise ValueError(f"unknown op {op!r}; ops are {OPS}")

    def deco(fn):
        _REGISTRY[op][name] = Variant(op=op, name=name, pattern=pattern, fn=fn, sources=(fn, *sources), **kw)
        return fn

    return deco


def _ensure_loaded():
    # Importing the kernel modules registers their variants.
    import importlib
    importlib.import_module("gluon_lab.catalog")


def variants(op: str, *, available_only: bool = True) -> list[str]:
    """Variant names registered for op (those whose optional dependencies are installed)."""
    _ensure_loaded()
    if op not in _REGISTRY:
        raise ValueError(f"unknown op {op!r}; ops are {OPS}")
    return [n for n, v in _REGISTRY[op].items() if not available_only or v.available()]


def get_variant(op: str, name: str) -> Variant:
    _ensure_loaded()
    if op not in _REGISTRY:
        raise ValueError(f"unknown op {op!r}; ops are {OPS}")
    try:
        return _REGISTRY[op][name]
    except KeyError:
        raise ValueError(f"unknown variant {name!r} for {op}; choose one of {variants(op, available_only=False)} "
                         "or 'auto'") from None


def current_hash(op: str, name: str) -> str:
    """Hash of the current source of (op, variant); KeyError if it no longer exists."""
    _ensure_loaded()
    if name not in _REGISTRY.get(op, {}):
        raise KeyError((op, name))
    return _REGISTRY[op][name].source_hash


# ----------------------------------------------------------------------------------------------
# validation

def _torch():
    import torch
    return torch


_DT_NAMES = {"bfloat16", "float16", "float32"}


def dtype_name(t) -> str:
    return str(t.dtype).replace("torch.", "")


def check_tensor(name: str, t, *, ndim_min: int = 1):
    torch = _torch()
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if dtype_name(t) not in _DT_NAMES:
        raise TypeError(f"{name}.dtype must be one of torch.bfloat16, torch.float16, torch.float32; got {t.dtype}")
    if t.dim() < ndim_min:
        raise ValueError(f"{name} must have at least {ndim_min} dimension(s), got shape {tuple(t.shape)}")


def _check_like_x(name: str, t, x, shape: tuple, what: str):
    """t must be a supported tensor of `shape`, with x's dtype and device."""
    check_tensor(name, t)
    if tuple(t.shape) != shape:
        raise ValueError(f"{name} must have {what}; got {tuple(t.shape)}")
    if t.dtype != x.dtype:
        raise TypeError(f"{name}.dtype must equal x.dtype ({x.dtype}); got {t.dtype}")
    if t.device != x.device:
        raise ValueError(f"{name} must be on x's device ({x.device}); got {t.device}")


def check_norm_args(x, weight=None, bias=None, residual=None, *, need_weight=True):
    """Checks common to every norm variant (shape/dtype agreement). Device rules are per variant."""
    check_tensor("x", x)
    N = x.shape[-1]
    if need_weight:
        if weight is None:
            raise ValueError("weight is required (shape (N,) with N = x.shape[-1])")
        _check_like_x("weight", weight, x, (N, ), f"shape ({N},) to match x.shape[-1]")
    if bias is not None:
        _check_like_x("bias", bias, x, (N, ), f"shape ({N},) to match x.shape[-1]")
    if residual is not None:
        _check_like_x("residual", residual, x, tuple(x.shape), f"x's shape {tuple(x.shape)}")


def check_group_norm_args(x, num_groups, weight=None, bias=None):
    """Checks of group_norm / instance_norm (instance_norm: num_groups = C). x is (B, C, *spatial)
    in any memory format; weight and bias are optional (C,) tensors of x's dtype and device."""
    check_tensor("x", x)
    if x.dim() < 3:
        raise ValueError(f"x must have at least 3 dimensions (B, C, *spatial) with at least one spatial "
                         f"dimension; got shape {tuple(x.shape)}")
    C = x.shape[1]
    if not isinstance(num_groups, int) or isinstance(num_groups, bool):
        raise TypeError(f"num_groups must be a positive int dividing C = x.shape[1] = {C}; "
                        f"got {num_groups!r} ({type(num_groups).__name__})")
    if num_groups <= 0 or C % num_groups != 0:
        raise ValueError(f"num_groups must be a positive int dividing C = x.shape[1] = {C}; got {num_groups}")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None:
            _check_like_x(name, t, x, (C, ), f"shape ({C},) to match C = x.shape[1]")
    if x.shape[0] * _spatial_size(x) == 1:  # F.group_norm's own rule (_verify_batch_size)
        raise ValueError(f"x must have more than one value per channel (B * prod(x.shape[2:]) > 1), as "
                         f"F.group_norm requires; got shape {tuple(x.shape)}")


def _spatial_size(x) -> int:
    S = 1
    for s in x.shape[2:]:
        S *= s
    return S


def check_instance_norm_args(x, weight=None, bias=None):
    """instance_norm = group_norm with num_groups = C."""
    check_tensor("x", x)
    C = x.shape[1] if x.dim() >= 2 else 1
    check_group_norm_args(x, max(int(C), 1), weight, bias)  # C = 0 (empty x): any group count divides it
    if _spatial_size(x) == 1:  # F.instance_norm's own rule (_verify_spatial_size)
        raise ValueError(f"x must have more than one spatial element (prod(x.shape[2:]) > 1), as "
                         f"F.instance_norm requires; got shape {tuple(x.shape)}")


def check_cuda(variant: str, *tensors, names=("x", )):
    for n, t in zip(names, tensors):
        if t is not None and hasattr(t, "is_cuda") and not t.is_cuda:  # skips ints (num_groups) and None
            raise ValueError(f"variant {variant!r} runs on a CUDA GPU: {n} is on {t.device}; move it with .cuda() "
                             "or use variant='torch'")
    if not device.cuda_available():
        raise device.GPUUnavailableError(f"variant {variant!r} needs a CUDA GPU; none is visible")


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


# ----------------------------------------------------------------------------------------------
# dispatch

# Heuristic used by variant="auto" when no recorded measurement covers the case (recorded
# measurements win when present, see _auto_from_records). On CUDA the plain Triton kernel:
# it compiles in about a second (inductor compiles per shape for tens of seconds) and is the
# strongest baseline the foundation has; patterns insert their variants ahead of it.
AUTO_PREFERENCE: dict[str, list[str]] = {op: ["triton", "torch"] for op in OPS}
AUTO_PREFERENCE["matmul"] = ["torch"]
AUTO_PREFERENCE["group_norm"] = ["torch"]
AUTO_PREFERENCE["instance_norm"] = ["torch"]


def _eligible(v: Variant, inputs) -> bool:
    if not v.available():
        return False
    x = inputs[0]
    if v.needs_cuda and not (getattr(x, "is_cuda", False) and device.cuda_available()):
        return False
    if v.needs_hopper and not device.is_hopper_or_newer():
        return False
    if v.check is not None:
        try:
            v.check(*inputs)
        except (ValueError, TypeError):
            return False
    return True


def _auto_from_records(op: str, inputs) -> str | None:
    """Fastest passing, non-stale recorded variant for this GPU, dtype and the nearest (M, N)."""
    from . import autoselect
    return autoselect.best_variant(op, inputs)


def choose(op: str, inputs) -> str:
    _ensure_loaded()
    rec = _auto_from_records(op, inputs)
    if rec is not None and _eligible(_REGISTRY[op][rec], inputs):
        return rec
    for name in AUTO_PREFERENCE[op]:
        v = _REGISTRY[op].get(name)
        if v is not None and _eligible(v, inputs):
            return name
    return "torch"


def dispatch(op: str, variant: str, inputs, **kw):
    if variant == "auto":
        variant = choose(op, inputs)
    v = get_variant(op, variant)
    if not v.available():
        raise ValueError(f"variant {variant!r} of {op} needs an optional package that is not installed")
    if v.needs_cuda:
        names = {"rms_norm": ("x", "weight"), "layer_norm": ("x", "weight", "bias"), "l2_norm": ("x", ),
                 "add_rms_norm": ("x", "residual", "weight"), "matmul": ("a", "b"),
                 "group_norm": ("x", "num_groups", "weight", "bias"), "instance_norm": ("x", "weight", "bias")}[op]
        check_cuda(variant, *inputs, names=names)
    if v.needs_hopper:
        device.require_hopper(f"variant {variant!r} of {op}")
    if v.check is not None:
        v.check(*inputs)
    return v.fn(*inputs, **kw)
