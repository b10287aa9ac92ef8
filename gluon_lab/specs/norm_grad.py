"""The row norms' backward: float64 references in closed form, the saved statistics, and the byte model
(pattern 7, issue 31). The backward ops' specs and kernels read these; nothing here is an op yet.

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
