"""float64 references for every op (the yardstick of every correctness check) and the
byte / FLOP models used for SOL.  Semantics match torch: F.rms_norm, F.layer_norm, F.normalize."""
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


REFERENCES = {"rms_norm": rms_norm, "layer_norm": layer_norm, "l2_norm": l2_norm,
              "add_rms_norm": add_rms_norm, "matmul": matmul}

_ITEMSIZE = {"bfloat16": 2, "float16": 2, "float32": 4}


def itemsize(dtype: str) -> int:
    return _ITEMSIZE[dtype]


def bytes_moved(op: str, shape: dict, dtype: str) -> int:
    """Compulsory DRAM traffic: every input read once, every output written once."""
    e = itemsize(dtype)
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
    l2: x*x, +, *inv = 3; add+rms: + residual, then 4. GEMM: 2·M·N·K."""
    M, N = shape.get("M"), shape.get("N")
    per = {"rms_norm": 4, "layer_norm": 7, "l2_norm": 3, "add_rms_norm": 5}
    if op in per:
        return per[op] * M * N
    if op == "matmul":
        return 2 * M * N * shape["K"]
    if op == "copy":
        return 0
    raise KeyError(op)

