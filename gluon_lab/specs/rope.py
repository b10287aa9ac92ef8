"""qk_norm_rope: Qwen3/Llama-style attention prep on packed QKV, in place (vLLM's fused_qk_norm_rope).

    qkv [T, (Hq + 2·Hk)·D]  contiguous bf16/fp16, updated in place and returned
    each Q and K head (D elements):  y = x / sqrt(mean(x²) + eps) * w   (fp32 math; q_weight / k_weight [D])
    then RoPE on y[:rotary_dim] from cos_sin_cache[positions[t]] (cos | sin halves of rotary_dim):
      NeoX (half split):  (y1, y2) = (y[:r/2], y[r/2:r])  ->  (y1·c − y2·s, y2·c + y1·s)
      GPT-J (interleaved): pairs (y[2i], y[2i+1]) rotated by (c_i, s_i)
    y[rotary_dim:] is normalized but not rotated; V heads are untouched; one rounding to qkv's dtype.

The math stays fp32 from the load to the store (as the fused CUDA kernels do; vLLM's native reference
rounds to the input dtype after the norm, a ±1-ulp difference). Byte model: Q and K read and written
once (2·itemsize·(Hq + Hk)·D per token), plus the cache rows gathered (rotary_dim per token), the
positions and the two weights. FLOPs: 4 per element for the norm (x·x, +, ·rstd, ·w) + 3 per rotated
element (two products and a sum).
"""
from __future__ import annotations

from ._base import ITEMSIZE, InPlaceOpSpec, Operand, define, log2f
from ._rules import check_eps, check_positive_int, dtype_name

HEAD_DIMS = (64, 128, 256)
MAX_POSITION = 8192  # rows of the cos/sin cache make_inputs builds (positions drawn at random below it)


def _validate(qkv, num_heads_q, num_heads_k, head_dim, q_weight, k_weight, cos_sin_cache, positions, *, eps,
              is_neox):
    import torch
    if not isinstance(qkv, torch.Tensor):
        raise TypeError(f"qkv must be a torch.Tensor, got {type(qkv).__name__}")
    if qkv.dtype not in (torch.bfloat16, torch.float16):
        raise TypeError(f"qkv.dtype must be torch.bfloat16 or torch.float16; got {qkv.dtype}")
    if qkv.dim() != 2:
        raise ValueError(f"qkv must be 2-D [num_tokens, (num_heads_q + 2*num_heads_k) * head_dim]; got shape "
                         f"{tuple(qkv.shape)}")
    Hq = check_positive_int("num_heads_q", num_heads_q, "a positive int")
    Hk = check_positive_int("num_heads_k", num_heads_k, "a positive int")
    if not isinstance(head_dim, int) or isinstance(head_dim, bool) or head_dim not in HEAD_DIMS:
        raise ValueError(f"head_dim must be one of {HEAD_DIMS}; got {head_dim!r}")
    D = head_dim
    T, C = qkv.shape
    if C != (Hq + 2 * Hk) * D:
        raise ValueError(f"qkv.shape[1] must be (num_heads_q + 2*num_heads_k) * head_dim = ({Hq} + 2*{Hk}) * {D} = "
                         f"{(Hq + 2 * Hk) * D}; got {C}")
    if T and qkv.stride() != (C, 1):
        raise ValueError(f"qkv must be contiguous (strides ({C}, 1)); got strides {tuple(qkv.stride())}. It is "
                         "updated in place: pass the packed projection output itself")
    for name, w in (("q_weight", q_weight), ("k_weight", k_weight)):
        if not isinstance(w, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(w).__name__}")
        if tuple(w.shape) != (D, ):
            raise ValueError(f"{name} must have shape ({D},) (head_dim); got {tuple(w.shape)}")
        if w.dtype != qkv.dtype:
            raise TypeError(f"{name}.dtype must equal qkv.dtype ({qkv.dtype}); got {w.dtype}")
        if w.device != qkv.device:
            raise ValueError(f"{name} must be on qkv's device ({qkv.device}); got {w.device}")
        if w.stride(0) != 1:
            raise ValueError(f"{name} must be contiguous (stride 1); got stride {w.stride(0)}. Call .contiguous()")
    cache = cos_sin_cache
    if not isinstance(cache, torch.Tensor):
        raise TypeError(f"cos_sin_cache must be a torch.Tensor, got {type(cache).__name__}")
    if cache.dim() != 2:
        raise ValueError(f"cos_sin_cache must be 2-D [max_position, rotary_dim] (cos | sin halves); got shape "
                         f"{tuple(cache.shape)}")
    r = cache.shape[1]
    if r % 2 or not 2 <= r <= D:
        raise ValueError(f"cos_sin_cache.shape[1] (rotary_dim) must be even and in [2, head_dim={D}]; got {r}")
    if cache.dtype not in (torch.float32, qkv.dtype):
        raise TypeError(f"cos_sin_cache.dtype must be torch.float32 or qkv.dtype ({qkv.dtype}); got {cache.dtype}")
    if cache.device != qkv.device:
        raise ValueError(f"cos_sin_cache must be on qkv's device ({qkv.device}); got {cache.device}")
    if not cache.is_contiguous():
        raise ValueError(f"cos_sin_cache must be contiguous; got strides {tuple(cache.stride())}")
    if not isinstance(positions, torch.Tensor):
        raise TypeError(f"positions must be a torch.Tensor, got {type(positions).__name__}")
    if positions.dtype != torch.int64:
        raise TypeError(f"positions.dtype must be torch.int64; got {positions.dtype}")
    if tuple(positions.shape) != (T, ):
        raise ValueError(f"positions must have shape ({T},) (one per token of qkv); got {tuple(positions.shape)}")
    if positions.device != qkv.device:
        raise ValueError(f"positions must be on qkv's device ({qkv.device}); got {positions.device}")
    if T > 1 and positions.stride(0) != 1:
        raise ValueError(f"positions must be contiguous (stride 1); got stride {positions.stride(0)}. Call "
                         ".contiguous()")
    if not isinstance(is_neox, bool):
        raise TypeError(f"is_neox must be a bool; got {is_neox!r}")
    return {"eps": check_eps(eps), "is_neox": is_neox}


def check_positions(qkv, num_heads_q, num_heads_k, head_dim, q_weight, k_weight, cos_sin_cache, positions):
    """Every position must index a row of cos_sin_cache. A data check (it reads positions: one device
    sync): run on every call except while a CUDA graph is being captured, where the kernels' own guard
    holds (an out-of-range position gives NaN rows, never an out-of-bounds read)."""
    import torch
    if not positions.numel():
        return
    if positions.is_cuda and torch.cuda.is_current_stream_capturing():
        return
    lo, hi = (int(v) for v in torch.aminmax(positions))
    n = cos_sin_cache.shape[0]
    if lo < 0 or hi >= n:
        raise ValueError(f"positions must be in [0, cos_sin_cache.shape[0]={n}); got values in [{lo}, {hi}]")


def _split(qkv, Hq, Hk, D):
    x = qkv.view(qkv.shape[0], Hq + 2 * Hk, D)
    return x[:, :Hq], x[:, Hq:Hq + Hk]


def _rope(y, c, s, is_neox: bool):
    """Rotate y[..., :r] (r = 2 * c.shape[-1]) by (c, s) [T, 1, r/2]; the tail stays."""
    import torch
    h = c.shape[-1]
    r = 2 * h
    if is_neox:
        y1, y2 = y[..., :h], y[..., h:r]
        rot = torch.cat((y1 * c - y2 * s, y2 * c + y1 * s), dim=-1)
    else:
        y1, y2 = y[..., 0:r:2], y[..., 1:r:2]
        rot = torch.stack((y1 * c - y2 * s, y2 * c + y1 * s), dim=-1).flatten(-2)
    return torch.cat((rot, y[..., r:]), dim=-1)


def reference(qkv, num_heads_q, num_heads_k, head_dim, q_weight, k_weight, cos_sin_cache, positions, eps=1e-6,
              is_neox=True):
    """float64: the whole qkv after the op (V as it was)."""
    out = qkv.double().clone()
    q, k = _split(out, num_heads_q, num_heads_k, head_dim)
    cs = cos_sin_cache.double()[positions]
    h = cs.shape[-1] // 2
    c, s = cs[:, None, :h], cs[:, None, h:]
    for part, w in ((q, q_weight), (k, k_weight)):
        y = part * (part.pow(2).mean(-1, keepdim=True) + eps).rsqrt() * w.double()
        part.copy_(_rope(y, c, s, is_neox))
    return out


def eager(qkv, num_heads_q, num_heads_k, head_dim, q_weight, k_weight, cos_sin_cache, positions, eps=1e-6,
          is_neox=True):
    """The eager native formulation (variant "torch"): per-head RMSNorm then the rotation, fp32 math,
    written back into qkv (returned)."""
    import torch
    q, k = _split(qkv, num_heads_q, num_heads_k, head_dim)
    cs = cos_sin_cache[positions].float()
    h = cs.shape[-1] // 2
    c, s = cs[:, None, :h], cs[:, None, h:]
    for part, w in ((q, q_weight), (k, k_weight)):
        x = part.float()
        y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w.float()
        part.copy_(_rope(y, c, s, is_neox).to(qkv.dtype))
    return qkv


def formula(qkv, num_heads_q: int, num_heads_k: int, head_dim: int, q_weight, k_weight, cos_sin_cache, positions,
            eps: float, is_neox: bool):
    """What torch.compile(fullgraph=True, dynamic=False) gets (variant "inductor"): the same
    formulation; Inductor turns the copy-back into in-place stores."""
    return eager(qkv, num_heads_q, num_heads_k, head_dim, q_weight, k_weight, cos_sin_cache, positions, eps, is_neox)


def _shape(qkv, num_heads_q, num_heads_k, head_dim, q_weight, k_weight, cos_sin_cache, positions):
    return {"T": qkv.shape[0], "Hq": num_heads_q, "Hk": num_heads_k, "D": head_dim, "R": cos_sin_cache.shape[1]}


def _bytes(shape, dtype):
    e = ITEMSIZE[dtype]
    T, H, D, R = shape["T"], shape["Hq"] + shape["Hk"], shape["D"], shape.get("R", shape["D"])
    return 2 * e * T * H * D + T * R * e + 8 * T + 2 * D * e


def _flops(shape):
    T, H, D, R = shape["T"], shape["Hq"] + shape["Hk"], shape["D"], shape.get("R", shape["D"])
    return T * H * (4 * D + 3 * R)


def cos_sin(max_position: int, rotary_dim: int, base: float = 10000.0):
    """The standard RoPE table: [max_position, rotary_dim] = cos(p·θ_i) | sin(p·θ_i), θ_i = base^(−2i/r)."""
    import torch
    inv = 1.0 / (base ** (torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim))
    ang = torch.arange(max_position, dtype=torch.float64)[:, None] * inv[None, :]
    return torch.cat((ang.cos(), ang.sin()), dim=-1)


def _make(shape, dtype, rnd, scale=1.0):
    T, Hq, Hk, D = shape["T"], shape["Hq"], shape["Hk"], shape["D"]
    R = shape.get("R", D)
    qkv = rnd(T, (Hq + 2 * Hk) * D, std=scale)
    w = rnd(2, D, mean=1.0, std=0.5)
    u = rnd(max(T, 1)).abs().double()
    cache = cos_sin(MAX_POSITION, R).to(device=qkv.device, dtype=qkv.dtype)
    positions = ((u * 1e6).long() % MAX_POSITION)[:T].to(qkv.device)  # random, not arange
    return (qkv, Hq, Hk, D, w[0].contiguous(), w[1].contiguous(), cache, positions)


QK_NORM_ROPE = define(InPlaceOpSpec(
    name="qk_norm_rope", family="qk_norm_rope",
    inputs=(Operand("qkv", doc="[T, (Hq + 2·Hk)·D] contiguous bf16/fp16, updated in place"),
            Operand("num_heads_q", kind="int"), Operand("num_heads_k", kind="int"), Operand("head_dim", kind="int"),
            Operand("q_weight", doc="[D]"), Operand("k_weight", doc="[D]"),
            Operand("cos_sin_cache", doc="[max_position, rotary_dim]: cos | sin halves, fp32 or qkv's dtype"),
            Operand("positions", doc="[T] int64")),
    outputs=("qkv", ), inplace="qkv", gathered=("cos_sin_cache", ),
    doc="In place: RMSNorm of every Q and K head over head_dim (fp32, q_weight / k_weight), then RoPE from "
        "cos_sin_cache at positions (NeoX half-split or GPT-J interleaved; rotary_dim = cos_sin_cache.shape[1] <= "
        "head_dim, the tail unrotated); V untouched. Returns qkv (= vLLM's fused_qk_norm_rope).",
    validate=_validate, data_check=check_positions, reference=reference, eager=eager, formula=formula,
    shape_of=_shape, shape_keys=("T", "Hq", "Hk", "D", "R"), bytes=_bytes, flops=_flops, make_inputs=_make,
    scalars={"eps": 1e-6, "is_neox": True}, dtypes=("bfloat16", "float16"),
    # octaves of tokens, of heads / 2, of head bytes, and the rotary fraction x 2 (partial rotary: a tail)
    bucket=lambda s, itemsize=2: (log2f(s["T"]), 0.5 * log2f(s["Hq"] + s["Hk"]), log2f(s["D"] * itemsize),
                                  2.0 * s.get("R", s["D"]) / s["D"]),
    tolerance={"bfloat16": (2e-2, 1e-2), "float16": (4e-3, 2e-3)}, marker="v"))

__all__ = ["QK_NORM_ROPE", "cos_sin", "check_positions", "dtype_name"]
