"""Row norms over the last dimension: rms_norm, layer_norm, l2_norm, add_rms_norm.

x is (..., N), normalized over the last dim; weight / bias are (N,). Inputs bf16, fp16 or fp32;
math in fp32; output in x's dtype. Semantics match torch (F.rms_norm, F.layer_norm, F.normalize)
and vLLM's fused_add_rmsnorm (the new residual is materialized in x's dtype and normalized).

Byte model: every input read once, every output written once (x, residual: M·N each; weight,
bias: N each). FLOPs: the per-element fp32 arithmetic (rms: x·x, +, ·rstd, ·w = 4; layer: −mu,
square, +, ·rstd, ·w, +b, + mean = 7; l2: x·x, +, ·inv = 3; add+rms: + residual, then 4).
"""
from __future__ import annotations

from ._base import ITEMSIZE, Operand, OpSpec, RowNorm, define, log2_bucket
from ._rules import check_eps, check_like, check_tensor


def _validate(row: RowNorm):
    def validate(x, *rest, eps):
        check_tensor("x", x)
        N = x.shape[-1]
        it = iter(rest)
        if row.residual:
            r = next(it)
            if r is None:
                raise ValueError(f"residual is required (x's shape {tuple(x.shape)})")
            check_like("residual", r, x, tuple(x.shape), f"x's shape {tuple(x.shape)}")
        for name, present in (("weight", row.weight), ("bias", row.bias)):
            if not present:
                continue
            t = next(it)
            if t is None:
                raise ValueError(f"{name} is required (shape (N,) with N = x.shape[-1] = {N})"
                                 + ("; pass torch.zeros(N) for none" if name == "bias" else ""))
            check_like(name, t, x, (N, ), f"shape ({N},) to match x.shape[-1]")
        return {"eps": check_eps(eps)}
    return validate


def _shape(x, *rest):
    N = x.shape[-1]
    return {"M": x.numel() // max(N, 1), "N": N}


def _bucket(shape):
    return (log2_bucket(shape["N"]), log2_bucket(shape["M"]))


def _rows_bytes(row: RowNorm):
    def nbytes(shape, dtype):
        e = ITEMSIZE[dtype]
        MN, N = shape["M"] * shape["N"], shape["N"]
        rows = 2 + (2 if row.residual else 0)  # x, y (+ residual, new residual)
        return rows * MN * e + (row.weight + row.bias) * N * e
    return nbytes


def _inputs(row: RowNorm):
    def make(shape, dtype, rnd, scale=1.0):
        M, N = shape["M"], shape["N"]
        out = [rnd(M, N, std=scale)]
        if row.residual:
            out.append(rnd(M, N, std=scale))
        if row.weight:
            out.append(rnd(N, mean=1.0, std=0.5))
        if row.bias:
            out.append(rnd(N, std=0.5))
        return tuple(out)
    return make


def _operands(row: RowNorm) -> tuple:
    ops = [Operand("x", doc="(..., N), normalized over the last dim")]
    if row.residual:
        ops.append(Operand("residual", doc="x's shape; s = x + residual is returned as the second output"))
    if row.weight:
        ops.append(Operand("weight", doc="(N,)"))
    if row.bias:
        ops.append(Operand("bias", doc="(N,)"))
    return tuple(ops)


# ----------------------------------------------------------------------------------------------
# float64 references and the eager formulations

def rms_reference(x, weight, eps=1e-6):
    xd = x.double()
    r = xd * (xd.pow(2).mean(-1, keepdim=True) + eps).rsqrt()
    return r if weight is None else r * weight.double()


def layer_reference(x, weight, bias, eps=1e-5):
    xd = x.double()
    mu = xd.mean(-1, keepdim=True)
    var = (xd - mu).pow(2).mean(-1, keepdim=True)
    return (xd - mu) * (var + eps).rsqrt() * weight.double() + bias.double()


def l2_reference(x, eps=1e-12):
    xd = x.double()
    return xd / xd.norm(dim=-1, keepdim=True).clamp_min(eps)


def add_rms_reference(x, residual, weight, eps=1e-6):
    # The new residual is materialized in x's dtype (as vLLM/FlashInfer fused_add_rmsnorm), and the
    # norm reads that rounded sum: the reference does the same.
    s = (x.double() + residual.double()).to(x.dtype)
    return rms_reference(s, weight, eps), s.double()


def rms_eager(x, weight, eps=1e-6):
    import torch.nn.functional as F
    return F.rms_norm(x, (x.shape[-1], ), weight, eps)


def layer_eager(x, weight, bias, eps=1e-5):
    import torch.nn.functional as F
    return F.layer_norm(x, (x.shape[-1], ), weight, bias, eps)


def l2_eager(x, eps=1e-12):
    import torch.nn.functional as F
    return F.normalize(x, p=2.0, dim=-1, eps=eps)


def add_rms_eager(x, residual, weight, eps=1e-6):
    s = x + residual
    return rms_eager(s, weight, eps), s


# fp32 formulas torch.compile gets (the "inductor" baseline): fp32 math, output in x's dtype

def rms_formula(x, weight, eps: float):
    xf = x.float()
    y = xf * (xf * xf).mean(-1, keepdim=True).add(eps).rsqrt()
    return (y * weight.float()).to(x.dtype)


def layer_formula(x, weight, bias, eps: float):
    xf = x.float()
    mu = xf.mean(-1, keepdim=True)
    xc = xf - mu
    y = xc * (xc * xc).mean(-1, keepdim=True).add(eps).rsqrt()
    return (y * weight.float() + bias.float()).to(x.dtype)


def l2_formula(x, eps: float):
    xf = x.float()
    n = (xf * xf).sum(-1, keepdim=True).sqrt().clamp_min(eps)
    return (xf / n).to(x.dtype)


def add_rms_formula(x, residual, weight, eps: float):
    s = x + residual
    return rms_formula(s, weight, eps), s


def _row_spec(name, row, *, doc, eps, reference, eager, formula, flops_per_elem, marker):
    return define(OpSpec(
        name=name, family="row_norm", inputs=_operands(row), outputs=("y", "residual_out") if row.residual else ("y", ),
        doc=doc, validate=_validate(row), reference=reference, eager=eager, formula=formula, shape_of=_shape,
        shape_keys=("M", "N"), bytes=_rows_bytes(row), flops=lambda shape: flops_per_elem * shape["M"] * shape["N"],
        make_inputs=_inputs(row), scalars={"eps": eps}, row=row, bucket=_bucket, row_blocked_reference=True,
        marker=marker))


RMS_NORM = _row_spec("rms_norm", RowNorm("rms", centered=False, weight=True, bias=False, residual=False),
                     doc="y = x / sqrt(mean(x², -1) + eps) * weight, fp32 math, output in x.dtype (= F.rms_norm).",
                     eps=1e-6, reference=rms_reference, eager=rms_eager, formula=rms_formula, flops_per_elem=4,
                     marker="o")
LAYER_NORM = _row_spec("layer_norm", RowNorm("layer", centered=True, weight=True, bias=True, residual=False),
                       doc="(x - mean) / sqrt(var + eps) * weight + bias over the last dim (= F.layer_norm).",
                       eps=1e-5, reference=layer_reference, eager=layer_eager, formula=layer_formula,
                       flops_per_elem=7, marker="s")
L2_NORM = _row_spec("l2_norm", RowNorm("l2", centered=False, weight=False, bias=False, residual=False),
                    doc="x / max(||x||₂, eps) over the last dim (= F.normalize(x, p=2, dim=-1, eps=eps)).",
                    eps=1e-12, reference=l2_reference, eager=l2_eager, formula=l2_formula, flops_per_elem=3,
                    marker="^")
ADD_RMS_NORM = _row_spec("add_rms_norm", RowNorm("rms", centered=False, weight=True, bias=False, residual=True),
                         doc="s = x + residual (in x.dtype); returns (rms_norm(s, weight, eps), s) like vLLM's "
                             "fused_add_rmsnorm.",
                         eps=1e-6, reference=add_rms_reference, eager=add_rms_eager, formula=add_rms_formula,
                         flops_per_elem=5, marker="D")
