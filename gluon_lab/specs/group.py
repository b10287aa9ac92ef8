"""GroupNorm / InstanceNorm over (B, C, *spatial) tensors, any memory format (NCHW or channels-last).

group_norm: C split into num_groups groups; statistics over each (C / num_groups) × spatial group
(biased variance), then per-channel weight and bias (both optional, (C,)). instance_norm is
group_norm with one group per channel, statistics always from the input (= F.instance_norm with
use_input_stats=True). Shapes: {"B", "C", ["D",] "H", "W", ["G",] "layout"}.

Byte model: read x, write y, read weight and bias (C each). FLOPs: as LayerNorm, 7 per element.
"""
from __future__ import annotations

from ._base import ITEMSIZE, Operand, OpSpec, define, log2f
from ._rules import check_eps, check_like, check_positive_int, check_tensor, spatial_size, tensor_layout

SPATIAL_KEYS = ("D", "H", "W")  # spatial dims of shape dicts, outermost first (those present)
LAYOUTS = ("nchw", "channels_last")


def group_shape(shape: dict) -> tuple:
    """(B, C, spatial dims) of a shape dict."""
    return shape["B"], shape["C"], tuple(shape[k] for k in SPATIAL_KEYS if k in shape)


def _elems(shape: dict) -> tuple[int, int]:
    B, C, spatial = group_shape(shape)
    S = 1
    for s in spatial:
        S *= s
    return B * C * S, C


def _check_x(x):
    check_tensor("x", x)
    if x.dim() < 3:
        raise ValueError(f"x must have at least 3 dimensions (B, C, *spatial) with at least one spatial "
                         f"dimension; got shape {tuple(x.shape)}")


def _check_affine(x, weight, bias):
    C = x.shape[1]
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None:
            check_like(name, t, x, (C, ), f"shape ({C},) to match C = x.shape[1]")


def validate_group_norm(x, num_groups, weight=None, bias=None, *, eps):
    _check_x(x)
    C = x.shape[1]
    check_positive_int("num_groups", num_groups, f"a positive int dividing C = x.shape[1] = {C}")
    if C % num_groups != 0:
        raise ValueError(f"num_groups must be a positive int dividing C = x.shape[1] = {C}; got {num_groups}")
    _check_affine(x, weight, bias)
    if x.shape[0] * spatial_size(x) == 1:  # F.group_norm's own rule (_verify_batch_size)
        raise ValueError(f"x must have more than one value per channel (B * prod(x.shape[2:]) > 1), as "
                         f"F.group_norm requires; got shape {tuple(x.shape)}")
    return {"eps": check_eps(eps)}


def validate_instance_norm(x, weight=None, bias=None, *, eps):
    _check_x(x)
    _check_affine(x, weight, bias)
    if spatial_size(x) == 1:  # F.instance_norm's own rule (_verify_spatial_size), empty x included
        raise ValueError(f"x must have more than one spatial element (prod(x.shape[2:]) > 1), as "
                         f"F.instance_norm requires; got shape {tuple(x.shape)}")
    return {"eps": check_eps(eps)}


def group_norm_reference(x, num_groups, weight=None, bias=None, eps=1e-5):
    """Works on values (reshape), so any memory format is fine; a contiguous float64 result."""
    xd = x.double()
    B, C = x.shape[0], x.shape[1]
    S = spatial_size(x)
    xg = xd.reshape(B, num_groups, (C // num_groups) * S)  # explicit: -1 is ambiguous for empty x
    mu = xg.mean(-1, keepdim=True)
    xc = xg - mu
    var = xc.pow(2).mean(-1, keepdim=True)  # biased, as torch
    y = (xc * (var + eps).rsqrt()).reshape(x.shape)
    per_channel = (1, C) + (1, ) * (x.dim() - 2)
    if weight is not None:
        y = y * weight.double().reshape(per_channel)
    if bias is not None:
        y = y + bias.double().reshape(per_channel)
    return y


def instance_norm_reference(x, weight=None, bias=None, eps=1e-5):
    return group_norm_reference(x, x.shape[1], weight, bias, eps)


def group_norm_eager(x, num_groups, weight=None, bias=None, eps=1e-5):
    import torch.nn.functional as F
    return F.group_norm(x, num_groups, weight, bias, eps)


def instance_norm_eager(x, weight=None, bias=None, eps=1e-5):
    import torch.nn.functional as F
    return F.instance_norm(x, weight=weight, bias=bias, use_input_stats=True, eps=eps)


def _float_or_none(t):
    return None if t is None else t.float()


def group_norm_formula(x, num_groups: int, weight, bias, eps: float):
    import torch.nn.functional as F
    return F.group_norm(x.float(), num_groups, _float_or_none(weight), _float_or_none(bias), eps).to(x.dtype)


def instance_norm_formula(x, weight, bias, eps: float):
    import torch.nn.functional as F
    return F.instance_norm(x.float(), weight=_float_or_none(weight), bias=_float_or_none(bias),
                           use_input_stats=True, eps=eps).to(x.dtype)


def as_layout(x, layout: str):
    """x (B, C, *spatial) in the named memory format: "nchw" (contiguous) or "channels_last"
    (C innermost: torch.channels_last for 4-D, torch.channels_last_3d for 5-D, same strides for 3-D)."""
    if layout == "nchw":
        return x.contiguous()
    if layout == "channels_last":
        return x.movedim(1, -1).contiguous().movedim(-1, 1)
    raise ValueError(f"shape['layout'] must be one of {LAYOUTS}, got {layout!r}")


def _shape_of(with_groups: bool):
    def shape_of(x, *rest):
        d = {"B": x.shape[0], "C": x.shape[1]}
        d.update(zip(SPATIAL_KEYS[3 - (x.dim() - 2):], x.shape[2:]))
        if with_groups:
            d["G"] = rest[0]
        d["layout"] = tensor_layout(x)
        return d
    return shape_of


def _make(with_groups: bool):
    def make(shape, dtype, rnd, scale=1.0):
        B, C, spatial = group_shape(shape)
        x = as_layout(rnd(B, C, *spatial, std=scale), shape.get("layout", "nchw"))
        w, b = rnd(C, mean=1.0, std=0.5), rnd(C, std=0.5)
        return (x, shape.get("G", C), w, b) if with_groups else (x, w, b)
    return make


def _bytes(shape, dtype):
    n, C = _elems(shape)
    e = ITEMSIZE[dtype]
    return 2 * n * e + 2 * C * e


def _bucket(shape, itemsize=2):
    """(layout, octaves of group bytes, octaves of groups / 2): the group length decides between one CTA per
    group and a split group; the group count fills the SMs; the layout is another kernel path."""
    n, C = _elems(shape)
    G = shape.get("G", C)
    return (shape.get("layout", "nchw"), log2f(n // (shape["B"] * G) * itemsize), 0.5 * log2f(shape["B"] * G))


_KEYS = ("B", "C", "D", "H", "W", "G", "layout")
_AFFINE = (Operand("weight", optional=True, doc="(C,) or None"), Operand("bias", optional=True, doc="(C,) or None"))

GROUP_NORM = define(OpSpec(
    name="group_norm", family="group_norm",
    inputs=(Operand("x", doc="(B, C, *spatial), NCHW or channels-last"),
            Operand("num_groups", kind="int", doc="positive int dividing C")) + _AFFINE,
    outputs=("y", ), doc="(x - mean) / sqrt(var + eps) over each (C / num_groups) x spatial group, then "
                         "* weight[c] + bias[c] (both optional, shape (C,)). Contiguous or channels-last x "
                         "(= F.group_norm).",
    validate=validate_group_norm, reference=group_norm_reference, eager=group_norm_eager, formula=group_norm_formula,
    shape_of=_shape_of(True), shape_keys=_KEYS, bytes=_bytes, flops=lambda shape: 7 * _elems(shape)[0],
    make_inputs=_make(True), scalars={"eps": 1e-5}, bucket=_bucket, marker="P"))

INSTANCE_NORM = define(OpSpec(
    name="instance_norm", family="group_norm", inputs=(Operand("x", doc="(B, C, *spatial)"), ) + _AFFINE,
    outputs=("y", ), doc="group_norm with one group per channel: statistics over the spatial dims of each (b, c), "
                         "always from the input (= F.instance_norm(x, weight=weight, bias=bias, "
                         "use_input_stats=True, eps=eps)).",
    validate=validate_instance_norm, reference=instance_norm_reference, eager=instance_norm_eager,
    formula=instance_norm_formula, shape_of=_shape_of(False), shape_keys=_KEYS, bytes=_bytes,
    flops=lambda shape: 7 * _elems(shape)[0], make_inputs=_make(False), scalars={"eps": 1e-5}, bucket=_bucket,
    marker="X"))
