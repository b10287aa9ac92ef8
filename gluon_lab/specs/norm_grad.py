"""The row norms' backward: float64 references in closed form, the saved statistics, and the byte model
(pattern 7, issue 31), and the backward ops' specs: rms_norm_backward, layer_norm_backward and
add_rms_norm_backward (public ops with variants like every forward; the forward ops' autograd calls them).

With xhat = (x - mean) * rstd (mean = 0 for RMSNorm), g = dy * w (dy where there is no weight) and row
means over the N columns:

    RMSNorm    dx = rstd * (g - xhat * mean(g * xhat))
    LayerNorm  dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
    L2Norm     dx = inv * (dy - y * sum(dy * y))        (inv = 1 / max(||x||, eps); y = x * inv; the
                                                           clamp's branch: dx = dy * inv, no second term)
    dw = sum over rows of dy * xhat,  db = sum over rows of dy

so a row needs two passes over x and dy (the row means first, then dx): pattern 1's reuse of two inputs.
dw and db are sums over *all rows*: a reduction across CTAs that the forward never had (per-CTA partials in
a persistent grid, then one deterministic reduce). add + RMSNorm returns (y, s = x + residual), so the
gradient reaching s is ds + the norm's dx, and it is both dx and dresidual (one tensor written twice, or
once when the caller shares it).

The statistics the forward saves (fp32, one per row): rstd = 1 / sqrt(mean(x^2) + eps) for RMSNorm,
mean and rstd = 1 / sqrt(var + eps) for LayerNorm, inv for L2Norm.

Nothing here imports torch at import time.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from ._base import ITEMSIZE, Operand, OpSpec, define
from ._rules import check_eps, check_like, check_tensor


def rms_stats(x, eps: float):
    """float64 rstd per row, shape x.shape[:-1] + (1,)."""
    xd = x.double()
    return (xd.pow(2).mean(-1, keepdim=True) + eps).rsqrt()


def layer_stats(x, eps: float):
    """float64 (mean, rstd) per row."""
    xd = x.double()
    mu = xd.mean(-1, keepdim=True)
    return mu, ((xd - mu).pow(2).mean(-1, keepdim=True) + eps).rsqrt()


def _rows(t):
    return t.double().reshape(-1, t.shape[-1])


def rms_norm_backward_reference(x, weight, dy, eps: float = 1e-6):
    """(dx, dw) in float64 for y = x * rstd * weight (weight None: dw is None)."""
    xd, dyd = x.double(), dy.double()
    rstd = rms_stats(x, eps)
    xhat = xd * rstd
    g = dyd if weight is None else dyd * weight.double()
    dx = rstd * (g - xhat * (g * xhat).mean(-1, keepdim=True))
    dw = None if weight is None else (_rows(dyd) * _rows(xhat)).sum(0)
    return dx, dw


def layer_norm_backward_reference(x, weight, bias, dy, eps: float = 1e-5):
    """(dx, dw, db) in float64 for y = (x - mean) * rstd * weight + bias (None operands: None gradients)."""
    xd, dyd = x.double(), dy.double()
    mu, rstd = layer_stats(x, eps)
    xhat = (xd - mu) * rstd
    g = dyd if weight is None else dyd * weight.double()
    dx = rstd * (g - g.mean(-1, keepdim=True) - xhat * (g * xhat).mean(-1, keepdim=True))
    dw = None if weight is None else (_rows(dyd) * _rows(xhat)).sum(0)
    db = None if bias is None else _rows(dyd).sum(0)
    return dx, dw, db


def l2_norm_backward_reference(x, dy, eps: float = 1e-12):
    """dx in float64 for y = x / max(||x||, eps)."""
    xd, dyd = x.double(), dy.double()
    norm = xd.norm(dim=-1, keepdim=True)
    inv = 1.0 / norm.clamp_min(eps)
    y = xd * inv
    return (dyd - y * (dyd * y).sum(-1, keepdim=True) * (norm > eps)) * inv


def add_rms_norm_backward_reference(x, residual, weight, dy, ds, eps: float = 1e-6):
    """(dx, dresidual, dw) in float64 for (y, s) = (rms_norm(s, weight), s), s = x + residual rounded to x's
    dtype as the forward stores it; ds: the gradient reaching s (None: only y is used)."""
    s = (x.double() + residual.double()).to(x.dtype)
    dsn, dw = rms_norm_backward_reference(s, weight, dy, eps)
    d = dsn if ds is None else dsn + ds.double()
    return d, d, dw


def backward_bytes(M: int, N: int, itemsize: int, *, weight: bool = True, bias: bool = False,
                   residual: bool = False, partial_rows: int = 0, stats_per_row: int = 1) -> dict:
    """Compulsory DRAM bytes of a row norm's backward, by term: x and dy read once (and ds with a residual),
    the saved fp32 statistics read, the weight read, dx written (a second copy as dresidual where the
    caller does not share it is the caller's choice, not counted), dw / db written once in x's dtype, and
    the partials' traffic: `partial_rows` fp32 rows of dw (and db) written by the CTAs and read by the
    reduce (0: a one-pass reduce, e.g. atomics). {"total": ..., term: bytes}."""
    t = {"x": M * N * itemsize, "dy": M * N * itemsize, "stats": M * 4 * stats_per_row,
         "dx": M * N * itemsize}
    if residual:
        t["ds"] = M * N * itemsize
    if weight:
        t["w"] = N * itemsize
        t["dw"] = N * itemsize
    if bias:
        t["db"] = N * itemsize
    per = (1 if weight else 0) + (1 if bias else 0)
    t["partials"] = 2 * partial_rows * N * 4 * per
    t["total"] = sum(t.values())
    return t


# ----------------------------------------------------------------------------------------------
# the backward ops: dy and the forward's saved tensors in, the gradients out

@dataclass(frozen=True, eq=False)
class RowNormBackwardSpec(OpSpec):
    """A row norm's backward: outputs dx (x's shape and dtype) and the parameter gradients ((N,), in the
    weight's dtype). forward: the forward op's name; kind: its statistics ("rms" | "layer"). A subclass, so
    the plain OpSpec every other variant's staleness hash covers stays as it was."""
    forward: str = ""
    kind: str = "rms"

    def _params(self, inputs):
        return [self.named(inputs)["weight"]] * (len(self.outputs) - 1)

    def empty_outputs(self, inputs):
        import torch
        x = self.named(inputs)["x" if "x" in self.input_names else "s"]
        if x.numel():
            return None
        return (torch.empty_like(x), *(torch.zeros_like(w) for w in self._params(inputs)))  # a sum over no rows

    def alloc_outputs(self, inputs, fill: float | None = None):
        import torch
        x = self.named(inputs)["x" if "x" in self.input_names else "s"]
        outs = (torch.empty_like(x), *(torch.empty_like(w) for w in self._params(inputs)))
        if fill is not None:
            for o in outs:
                o.fill_(fill)
        return outs


@functools.lru_cache(maxsize=None)
def backward_of(name: str):
    """The backward op's spec of forward op `name` (the specs of family row_norm_backward name their forward), or
    None. Cached: api.call asks on every call."""
    from ._base import family
    return next((s for s in family("row_norm_backward") if s.forward == name), None)


def _stats_view(name, t, x):
    """A saved statistic: fp32, one per row of x (shape x.shape[:-1], (..., 1) or (M,)), on x's device."""
    import torch
    check_tensor(name, t, ndim_min=0, dtypes=("float32", ))
    M = x.numel() // max(x.shape[-1], 1)
    if t.dtype != torch.float32 or t.numel() != M:
        raise ValueError(f"{name} must be the forward's fp32 statistic, one per row of x ({M} values, shape "
                         f"{tuple(x.shape[:-1])}); got {tuple(t.shape)} {t.dtype}")
    if t.device != x.device:
        raise ValueError(f"{name} must be on x's device ({x.device}); got {t.device}")


def _validate_bwd(kind: str, residual: bool):
    xn = "s" if residual else "x"

    def validate(dy, *rest, eps):
        it = dict(zip(("s", "weight", "ds", "rstd") if residual else
                      (("x", "weight", "mean", "rstd") if kind == "layer" else ("x", "weight", "rstd")), rest))
        x = it[xn]
        check_tensor(xn, x)
        N = x.shape[-1]
        check_like("dy", dy, x, tuple(x.shape), f"{xn}'s shape {tuple(x.shape)}", xn)
        w = it["weight"]
        if w is None:
            raise ValueError(f"weight is required (shape (N,) with N = {xn}.shape[-1] = {N})")
        check_like("weight", w, x, (N, ), f"shape ({N},) to match {xn}.shape[-1]", xn)
        if N > 1 and w.stride(0) != 1:
            raise ValueError(f"weight must be contiguous (stride 1; got stride {w.stride(0)}): pass weight.contiguous()")
        if residual and it.get("ds") is not None:
            check_like("ds", it["ds"], x, tuple(x.shape), f"{xn}'s shape {tuple(x.shape)}", xn)
        if kind == "layer" and (it.get("mean") is None) != (it.get("rstd") is None):
            raise ValueError("mean and rstd are the forward's statistics together: pass both or neither")
        for n in ("mean", "rstd"):
            if it.get(n) is not None:
                _stats_view(n, it[n], x)
        return {"eps": check_eps(eps)}
    return validate


def _shape_bwd(dy, *rest):
    N = dy.shape[-1]
    return {"M": dy.numel() // max(N, 1), "N": N}


def _bucket_bwd(shape, itemsize=2):
    from .norms import _bucket
    return _bucket(shape, itemsize)


def _bytes_bwd(kind: str, residual: bool):
    def nbytes(shape, dtype):
        return backward_bytes(shape["M"], shape["N"], ITEMSIZE[dtype], weight=True, bias=kind == "layer",
                              residual=residual, stats_per_row=2 if kind == "layer" else 1)["total"]
    return nbytes


def _rows_stats(x, kind, eps):
    if kind == "layer":
        mu, rstd = layer_stats(x, eps)
        return mu.float().reshape(x.shape[:-1]), rstd.float().reshape(x.shape[:-1])
    return (rms_stats(x, eps).float().reshape(x.shape[:-1]), )


def _inputs_bwd(kind: str, residual: bool, eps: float):
    def make(shape, dtype, rnd, scale=1.0):
        M, N = shape["M"], shape["N"]
        x = rnd(M, N, std=scale)
        dy = rnd(M, N)
        w = rnd(N, mean=1.0, std=0.5)
        stats = _rows_stats(x, kind, eps)
        if residual:
            return (dy, x, w, rnd(M, N), *stats)
        return (dy, x, w, *stats)
    return make


# float64 references, the eager backward torch's autograd runs, and the fp32 formula for torch.compile

def rms_bwd_reference(dy, x, weight, rstd=None, eps=1e-6):
    dx, dw = rms_norm_backward_reference(x, weight, dy, eps)
    return dx, dw


def layer_bwd_reference(dy, x, weight, mean=None, rstd=None, eps=1e-5):
    dx, dw, db = layer_norm_backward_reference(x, weight, None, dy, eps)
    return dx, dw, dy.double().reshape(-1, dy.shape[-1]).sum(0)


def add_rms_bwd_reference(dy, s, weight, ds=None, rstd=None, eps=1e-6):
    dx, dw = rms_norm_backward_reference(s, weight, dy, eps)
    return (dx if ds is None else dx + ds.double()), dw


def _stat(t, x):
    return None if t is None else t.reshape(*x.shape[:-1], 1)


def rms_bwd_eager(dy, x, weight, rstd=None, eps=1e-6):
    """What eager autograd of F.rms_norm runs: on CUDA aten._fused_rms_norm_backward on the saved rstd
    (computed by aten._fused_rms_norm when none is given); on the CPU the closed form (fp32)."""
    import torch
    N = x.shape[-1]
    if not x.is_cuda:  # the fused kernels are CUDA-only (on the CPU eager autograd differentiates the composite
        return rms_bwd_formula(dy, x, weight, rstd, eps)  # formula; below autograd: the same math in closed form)
    r = _stat(rstd, x)
    if r is None:
        r = torch.ops.aten._fused_rms_norm(x, [N], weight, eps)[1]
    return torch.ops.aten._fused_rms_norm_backward(dy, x, [N], r, weight, [True, True])


def layer_bwd_eager(dy, x, weight, mean=None, rstd=None, eps=1e-5):
    """What eager autograd of F.layer_norm runs: aten.native_layer_norm_backward on the saved mean and rstd."""
    import torch
    N = x.shape[-1]
    m, r = _stat(mean, x), _stat(rstd, x)
    if r is None:
        _, m, r = torch.ops.aten.native_layer_norm(x, [N], weight, None, eps)
    return torch.ops.aten.native_layer_norm_backward(dy, x, [N], m, r, weight, weight, [True, True, True])


def add_rms_bwd_eager(dy, s, weight, ds=None, rstd=None, eps=1e-6):
    dx, dw = rms_bwd_eager(dy, s, weight, rstd, eps)
    return (dx if ds is None else dx + ds), dw


def rms_bwd_formula(dy, x, weight, rstd, eps: float):
    xf, dyf = x.float(), dy.float()
    r = (xf * xf).mean(-1, keepdim=True).add(eps).rsqrt() if rstd is None else _stat(rstd, x)
    xhat = xf * r
    g = dyf * weight.float()
    dx = r * (g - xhat * (g * xhat).mean(-1, keepdim=True))
    return dx.to(x.dtype), (dyf * xhat).reshape(-1, x.shape[-1]).sum(0).to(weight.dtype)


def layer_bwd_formula(dy, x, weight, mean, rstd, eps: float):
    xf, dyf = x.float(), dy.float()
    if rstd is None:
        m = xf.mean(-1, keepdim=True)
        r = (xf - m).pow(2).mean(-1, keepdim=True).add(eps).rsqrt()
    else:
        m, r = _stat(mean, x), _stat(rstd, x)
    xhat = (xf - m) * r
    g = dyf * weight.float()
    dx = r * (g - g.mean(-1, keepdim=True) - xhat * (g * xhat).mean(-1, keepdim=True))
    N = x.shape[-1]
    return (dx.to(x.dtype), (dyf * xhat).reshape(-1, N).sum(0).to(weight.dtype),
            dyf.reshape(-1, N).sum(0).to(weight.dtype))


def add_rms_bwd_formula(dy, s, weight, ds, rstd, eps: float):
    dx, dw = rms_bwd_formula(dy, s, weight, rstd, eps)
    return (dx if ds is None else (dx.float() + ds.float()).to(s.dtype)), dw


def _bwd_spec(name, forward, kind, residual, *, doc, eps, reference, eager, formula, flops_per_elem, marker):
    xn = "s" if residual else "x"
    ops = [Operand("dy", doc="the gradient reaching y, x's shape"),
           Operand(xn, doc="the forward's input" + (" s = x + residual (its second output)" if residual else ""))]
    ops.append(Operand("weight", doc="(N,)"))
    if residual:
        ops.append(Operand("ds", optional=True, doc="the gradient reaching s (None: s was not used)"))
    if kind == "layer":
        ops.append(Operand("mean", optional=True, doc="the forward's fp32 mean per row (None: recomputed)"))
    ops.append(Operand("rstd", optional=True, doc="the forward's fp32 rstd per row (None: recomputed)"))
    outs = ("dx", "dw", "db") if kind == "layer" else ("dx", "dw")
    return define(RowNormBackwardSpec(
        name=name, family="row_norm_backward", inputs=tuple(ops), outputs=outs, doc=doc,
        validate=_validate_bwd(kind, residual), reference=reference, eager=eager, formula=formula,
        shape_of=_shape_bwd, shape_keys=("M", "N"), bytes=_bytes_bwd(kind, residual),
        flops=lambda shape: flops_per_elem * shape["M"] * shape["N"], make_inputs=_inputs_bwd(kind, residual, eps),
        scalars={"eps": eps}, bucket=_bucket_bwd, tolerance={"bfloat16": (4e-2, 2e-2), "float16": (1e-2, 1e-2),
                                                             "float32": (1e-4, 1e-4)},
        marker=marker, forward=forward, kind=kind))


RMS_NORM_BACKWARD = _bwd_spec(
    "rms_norm_backward", "rms_norm", "rms", False, eps=1e-6, reference=rms_bwd_reference, eager=rms_bwd_eager,
    formula=rms_bwd_formula, flops_per_elem=8, marker="o",
    doc="(dx, dw) of y = rms_norm(x, weight, eps) given dy; rstd: the forward's fp32 statistic (None: recomputed).")
LAYER_NORM_BACKWARD = _bwd_spec(
    "layer_norm_backward", "layer_norm", "layer", False, eps=1e-5, reference=layer_bwd_reference,
    eager=layer_bwd_eager, formula=layer_bwd_formula, flops_per_elem=11, marker="s",
    doc="(dx, dw, db) of y = layer_norm(x, weight, bias, eps) given dy; mean / rstd: the forward's fp32 "
        "statistics (None: recomputed).")
ADD_RMS_NORM_BACKWARD = _bwd_spec(
    "add_rms_norm_backward", "add_rms_norm", "rms", True, eps=1e-6, reference=add_rms_bwd_reference,
    eager=add_rms_bwd_eager, formula=add_rms_bwd_formula, flops_per_elem=9, marker="D",
    doc="(dx, dw) of (y, s) = add_rms_norm(x, residual, weight, eps) given dy and ds: dx is the gradient of "
        "both x and residual (s = x + residual).")
