"""float64 references for every op (the yardstick of every correctness check) and the
byte / FLOP models used for SOL.  Semantics match torch: F.rms_norm, F.layer_norm, F.normalize,
F.group_norm, F.instance_norm (use_input_stats=True)."""
from __future__ import annotations


def rms_norm(x, weight, eps=1e-6):
    xd = x.double()
    r = xd * (xd.pow(2).mean(-1, keepdim=True) + eps).rsqrt()
    return r if weight is None else r * weight.double()


def layer_norm(x, weight, bias, eps=1e-5):
    xd = x.double()
    mu = xd.mean(-1, keepdim=True)
    var = (xd - mu).pow(2).mean(-1, keepdim=True)
    y = (xd - mu) * (var + eps).rsqrt()
    if weight is not None:
        y = y * weight.double()
    if bias is not None:
        y = y + bias.double()
    return y


def l2_norm(x, eps=1e-12):
    xd = x.double()
    return xd / xd.norm(dim=-1, keepdim=True).clamp_min(eps)


def add_rms_norm(x, residual, weight, eps=1e-6):
    # The new residual is materialized in x's dtype (as in vLLM/FlashInfer fused_add_rmsnorm),
    # and the norm reads that rounded sum: the reference does the same.
    s = (x.double() + residual.double()).to(x.dtype)
    return rms_norm(s, weight, eps), s.double()


def matmul(a, b):
    return a.double() @ b.double()


def group_norm(x, num_groups, weight=None, bias=None, eps=1e-5):
    """(B, C, *spatial): statistics over each (C / num_groups) x spatial group, biased variance,
    then per-channel weight and bias. Works on values (reshape), so any memory format is fine;
    the result is a contiguous float64 tensor of x's shape."""
    xd = x.double()
    B, C = x.shape[0], x.shape[1]
    S = 1
    for s in x.shape[2:]:
        S *= s
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


def instance_norm(x, weight=None, bias=None, eps=1e-5):
    """group_norm with one group per channel (= F.instance_norm(use_input_stats=True))."""
    return group_norm(x, x.shape[1], weight, bias, eps)


REFERENCES = {"rms_norm": rms_norm, "layer_norm": layer_norm, "l2_norm": l2_norm,
              "add_rms_norm": add_rms_norm, "matmul": matmul, "group_norm": group_norm,
              "instance_norm": instance_norm}

_ITEMSIZE = {"bfloat16": 2, "float16": 2, "float32": 4}


def itemsize(dtype: str) -> int:
    return _ITEMSIZE[dtype]


SPATIAL_KEYS = ("D", "H", "W")  # spatial dims of group-op shape dicts, outermost first (those present)


def group_shape(shape: dict) -> tuple:
    """(B, C, spatial dims) of a group_norm / instance_norm shape dict."""
    return shape["B"], shape["C"], tuple(shape[k] for k in SPATIAL_KEYS if k in shape)


def _group_elems(shape: dict) -> tuple[int, int]:
    B, C, spatial = group_shape(shape)
    S = 1
    for s in spatial:
        S *= s
    return B * C * S, C


def bytes_moved(op: str, shape: dict, dtype: str) -> int:
    """Compulsory DRAM traffic: every input read once, every output written once."""
    e = itemsize(dtype)
    if op in ("group_norm", "instance_norm"):  # read x, write y, read weight and bias (C each)
        n, C = _group_elems(shape)
        return 2 * n * e + 2 * C * e
    M, N = shape.get("M"), shape.get("N")
    if op == "rms_norm":  # read x, read w, write y
        return 2 * M * N * e + N * e
    if op == "layer_norm":  # + bias
        return 2 * M * N * e + 2 * N * e
    if op == "l2_norm":  # read x, write y
        return 2 * M * N * e
    if op == "add_rms_norm":  # read x, residual, w; write y and new residual
        return 4 * M * N * e + N * e
    if op == "matmul":  # A + B + C
        K = shape["K"]
        return (M * K + K * N + M * N) * e
    if op == "copy":  # read + write
        return 2 * shape["bytes"]
    raise KeyError(op)


def flops(op: str, shape: dict) -> int:
    """Nominal FLOPs (for the roofline's x-axis). Norms count the per-element arithmetic of the
    fp32 math: rms x*x, +, *rstd, *w = 4; layer: -mu, sq, +, *rstd, *w, +b, + mean = 7;
    l2: x*x, +, *inv = 3; add+rms: + residual, then 4; group/instance norm: as layer = 7. GEMM: 2·M·N·K."""
    if op in ("group_norm", "instance_norm"):
        return 7 * _group_elems(shape)[0]
    M, N = shape.get("M"), shape.get("N")
    per = {"rms_norm": 4, "layer_norm": 7, "l2_norm": 3, "add_rms_norm": 5}
    if op in per:
        return per[op] * M * N
    if op == "matmul":
        return 2 * M * N * shape["K"]
    if op == "copy":
        return 0
    raise KeyError(op)

