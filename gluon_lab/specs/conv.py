"""conv2d: 2-D convolution of NHWC-in-memory activations (the forward pass, "fprop").

    y = conv2d(x, weight, stride, padding)        x [B, Ci, H, W] channels-last in memory (NHWC)
                                                  weight [Co, Ci, R, R] (OIHW or channels-last OHWI)
                                                  y [B, Co, OH, OW] channels-last, x's dtype

bf16 / fp16 in, fp32 accumulation, one rounding. OH = (H + 2·padding − R) // stride + 1 (same for W).
Supported: R = S ∈ {1, 3}, stride ∈ {1, 2}, padding ∈ {0, 1}, groups = 1, dilation = 1 — anything
else is refused naming the rule. A plain NHWC tensor `x_nhwc` [B, H, W, Ci] is passed as
`x_nhwc.permute(0, 3, 1, 2)` (a free view that is channels-last NCHW, the layout torch users hold).

The implicit GEMM: M = B·OH·OW output pixels, N = Co, K = R·R·Ci, A[m, (r, s, c)] = x[b, oh·stride + r −
padding, ow·stride + s − padding, c] (zero outside the image), B[(r, s, c), co] = weight[co, c, r, s].
Byte model: x, weight and y once each (a strided 1x1 filter: the sampled pixels of x). FLOPs: 2·M·N·K. SOL against tensor-core throughput.
"""
from __future__ import annotations

from ._base import ITEMSIZE, IntOperand, Operand, OpSpec, define, log2f
from ._rules import check_same_dtype_device, check_tensor

KERNEL_SIZES = (1, 3)
STRIDES = (1, 2)
PADDINGS = (0, 1)


def out_size(n: int, r: int, stride: int, padding: int) -> int:
    return (n + 2 * padding - r) // stride + 1


def _int_rule(name: str, v, allowed: tuple):
    if not isinstance(v, int) or isinstance(v, bool):
        raise TypeError(f"{name} must be an int in {allowed} (one value for both spatial dims); got {v!r}")
    if v not in allowed:
        raise ValueError(f"{name} must be one of {allowed}; got {v}")
    return v


def _channels_last(name: str, t, hint: str = "Use .to(memory_format=torch.channels_last)"):
    import torch
    if not t.is_contiguous(memory_format=torch.channels_last):
        raise ValueError(f"{name} must be channels-last in memory (NHWC); got strides {tuple(t.stride())}. {hint}")


def _weight_layout(weight):
    import torch
    if not (weight.is_contiguous() or weight.is_contiguous(memory_format=torch.channels_last)):
        raise ValueError(f"weight must be contiguous (OIHW) or channels-last (OHWI); got strides {tuple(weight.stride())}")


def _square_kernel(R: int, S: int):
    if R != S or R not in KERNEL_SIZES:
        raise ValueError(f"weight's kernel must be square with R = S in {KERNEL_SIZES}; got {R}x{S}")


def validate(x, weight, stride=1, padding=0):
    check_tensor("x", x, ndim_min=4, dtypes=("bfloat16", "float16"))
    check_tensor("weight", weight, ndim_min=4, dtypes=("bfloat16", "float16"))
    if x.dim() != 4:
        raise ValueError(f"x must be 4-D [B, Ci, H, W] (channels-last in memory); got shape {tuple(x.shape)}")
    if weight.dim() != 4:
        raise ValueError(f"weight must be 4-D [Co, Ci, R, S]; got shape {tuple(weight.shape)}")
    _int_rule("stride", stride, STRIDES)
    _int_rule("padding", padding, PADDINGS)
    B, Ci, H, W = x.shape
    Co, wci, R, S = weight.shape
    if wci != Ci:
        rule = (f" (groups = {Ci // wci}: grouped convolutions are not supported, groups must be 1)"
                if wci and Ci % wci == 0 else "")
        raise ValueError(f"weight.shape[1] must equal x.shape[1] (Ci = {Ci}); got {wci}{rule}")
    _square_kernel(R, S)
    check_same_dtype_device("weight", weight, x)
    if min(B, Ci, H, W, Co) < 1:
        raise ValueError(f"x and weight must have no empty dimension; got x {tuple(x.shape)}, weight "
                         f"{tuple(weight.shape)}")
    if out_size(H, R, stride, padding) < 1 or out_size(W, R, stride, padding) < 1:
        raise ValueError(f"the output would be empty: H x W = {H} x {W} with a {R}x{R} kernel, stride {stride}, "
                         f"padding {padding}")
    _channels_last("x", x, "Use x.to(memory_format=torch.channels_last), or pass an NHWC tensor as "
                   "x_nhwc.permute(0, 3, 1, 2)")
    _weight_layout(weight)
    return {}


def weight_ohwi(weight):
    """weight as a contiguous [Co, R, S, Ci] tensor (a view for channels-last weights, else one copy)."""
    w = weight.permute(0, 2, 3, 1)
    return w if w.is_contiguous() else w.contiguous()


def reference(x, weight, stride=1, padding=0):
    import torch.nn.functional as F
    return F.conv2d(x.double(), weight.double(), stride=stride, padding=padding)


def eager(x, weight, stride=1, padding=0):
    """cuDNN (or the CPU kernel) through F.conv2d; a channels-last x gives a channels-last y."""
    import torch.nn.functional as F
    return F.conv2d(x, weight, stride=stride, padding=padding)


def _shape(x, weight, stride=1, padding=0):
    B, Ci, H, W = x.shape
    return {"B": B, "Ci": Ci, "Co": weight.shape[0], "H": H, "W": W, "R": weight.shape[2], "stride": stride,
            "pad": padding}


def gemm_shape(shape: dict) -> tuple:
    """(M, N, K) of the implicit GEMM."""
    OH = out_size(shape["H"], shape["R"], shape["stride"], shape["pad"])
    OW = out_size(shape["W"], shape["R"], shape["stride"], shape["pad"])
    return shape["B"] * OH * OW, shape["Co"], shape["R"] ** 2 * shape["Ci"]


def _bytes(shape, dtype):
    """x, weight and y once each; a 1x1 filter at stride > 1 reads only the pixels it samples (M of them: with
    channels-last rows of Ci elements, the skipped pixels are never fetched)."""
    M, N, K = gemm_shape(shape)
    x = M * shape["Ci"] if shape["R"] == 1 and shape["stride"] > 1 else shape["B"] * shape["H"] * shape["W"] * shape["Ci"]
    return (x + N * K + M * N) * ITEMSIZE[dtype]


def _flops(shape):
    M, N, K = gemm_shape(shape)
    return 2 * M * N * K


def _make(shape, dtype, rnd, scale=1.0):
    B, Ci, Co, H, W, R = (shape[k] for k in ("B", "Ci", "Co", "H", "W", "R"))
    x = rnd(B, H, W, Ci, std=scale).permute(0, 3, 1, 2)  # NHWC memory, NCHW logical: channels-last
    w = rnd(Co, R, R, Ci, std=(Ci * R * R) ** -0.5).permute(0, 3, 1, 2)  # OHWI memory (channels-last)
    return (x, w, shape.get("stride", 1), shape.get("pad", 0))


def _bucket(s, itemsize=2):
    """(filter, stride, octaves of the implicit GEMM's M, N, K, octaves of the output image / 2): R and the
    stride pick the producer (shifted boxes per tap, the parity split); M / N / K and the image size decide
    tiles, waves and how much of a tile the image edge wastes."""
    M, N, K = gemm_shape(s)
    return (f"R{s['R']}", f"stride{s['stride']}", log2f(M), log2f(N), log2f(K), 0.5 * log2f(M / s["B"]))


# what the three conv specs share: the shape keys, FLOPs, buckets, dtypes and tolerances (atol relative to
# the RMS of the output, bench.compare: K-long fp32 sums of bf16 products, as matmul's)
_CONV = dict(family="conv", formula=None, shape_keys=("B", "Ci", "Co", "H", "W", "R", "stride", "pad"), flops=_flops,
             dtypes=("bfloat16", "float16"), bucket=_bucket, tolerance={"bfloat16": (1e-2, 1e-2), "float16": (2e-3, 2e-3)},
             compute_bound=True)


CONV2D = define(OpSpec(
    name="conv2d",
    inputs=(Operand("x", doc="[B, Ci, H, W], channels-last in memory (NHWC)"),
            Operand("weight", doc="[Co, Ci, R, R], OIHW or channels-last (OHWI)"),
            IntOperand("stride", default=1, doc="1 or 2"), IntOperand("padding", default=0, doc="0 or 1")),
    outputs=("y", ),
    doc="2-D convolution (fprop) of channels-last bf16/fp16 x by weight, fp32 accumulation: R = S in {1, 3}, "
        "stride 1 or 2, padding 0 or 1, groups = dilation = 1. Returns y [B, Co, OH, OW] channels-last "
        "(= torch.nn.functional.conv2d).",
    validate=validate, reference=reference, eager=eager, shape_of=_shape, bytes=_bytes, make_inputs=_make, marker="s",
    **_CONV))

__all__ = ["CONV2D", "out_size", "gemm_shape", "weight_ohwi"]


# ----------------------------------------------------------------------------------------------
# conv2d_input_grad: dgrad, the input gradient

def validate_dgrad(grad_output, weight, input_h, input_w, stride=1, padding=0):
    check_tensor("grad_output", grad_output, ndim_min=4, dtypes=("bfloat16", "float16"))
    check_tensor("weight", weight, ndim_min=4, dtypes=("bfloat16", "float16"))
    if grad_output.dim() != 4 or weight.dim() != 4:
        raise ValueError(f"grad_output [B, Co, OH, OW] and weight [Co, Ci, R, S] must be 4-D; got "
                         f"{tuple(grad_output.shape)} and {tuple(weight.shape)}")
    _int_rule("stride", stride, STRIDES)
    _int_rule("padding", padding, PADDINGS)
    for name, v in (("input_h", input_h), ("input_w", input_w)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"{name} must be a positive int (the input's spatial size); got {v!r}")
    B, Co, OH, OW = grad_output.shape
    wco, Ci, R, S = weight.shape
    if wco != Co:
        raise ValueError(f"weight.shape[0] must equal grad_output.shape[1] (Co = {Co}); got {wco}")
    _square_kernel(R, S)
    check_same_dtype_device("weight", weight, grad_output, "grad_output")
    if min(B, Co, Ci) < 1:
        raise ValueError(f"grad_output and weight must have no empty dimension; got {tuple(grad_output.shape)}, "
                         f"{tuple(weight.shape)}")
    if (out_size(input_h, R, stride, padding), out_size(input_w, R, stride, padding)) != (OH, OW):
        raise ValueError(f"input size {input_h} x {input_w} with a {R}x{R} kernel, stride {stride}, padding {padding} "
                         f"gives a {out_size(input_h, R, stride, padding)} x {out_size(input_w, R, stride, padding)} output; "
                         f"grad_output is {OH} x {OW}")
    _channels_last("grad_output", grad_output)
    _weight_layout(weight)
    return {}


def _dgrad_size(grad_output, weight, input_h, input_w):
    return (grad_output.shape[0], weight.shape[1], input_h, input_w)


def reference_dgrad(grad_output, weight, input_h, input_w, stride=1, padding=0):
    import torch
    return torch.nn.grad.conv2d_input(_dgrad_size(grad_output, weight, input_h, input_w), weight.double(),
                                      grad_output.double(), stride=stride, padding=padding)


def eager_dgrad(grad_output, weight, input_h, input_w, stride=1, padding=0):
    """torch.nn.grad.conv2d_input (cuDNN's dgrad on the GPU), channels-last out."""
    import torch
    dx = torch.nn.grad.conv2d_input(_dgrad_size(grad_output, weight, input_h, input_w), weight, grad_output,
                                    stride=stride, padding=padding)
    return dx.contiguous(memory_format=torch.channels_last)


def _shape_dgrad(grad_output, weight, input_h, input_w, stride=1, padding=0):
    return {"B": grad_output.shape[0], "Ci": weight.shape[1], "Co": weight.shape[0], "H": input_h, "W": input_w,
            "R": weight.shape[2], "stride": stride, "pad": padding}


def _bytes_dgrad(shape, dtype):
    OH = out_size(shape["H"], shape["R"], shape["stride"], shape["pad"])
    OW = out_size(shape["W"], shape["R"], shape["stride"], shape["pad"])
    B, Ci, Co, R = shape["B"], shape["Ci"], shape["Co"], shape["R"]
    return (B * OH * OW * Co + Co * Ci * R * R + B * shape["H"] * shape["W"] * Ci) * ITEMSIZE[dtype]


def _make_dgrad(shape, dtype, rnd, scale=1.0):
    B, Ci, Co, H, W, R = (shape[k] for k in ("B", "Ci", "Co", "H", "W", "R"))
    st, p = shape.get("stride", 1), shape.get("pad", 0)
    OH, OW = out_size(H, R, st, p), out_size(W, R, st, p)
    dy = rnd(B, OH, OW, Co, std=scale).permute(0, 3, 1, 2)
    w = rnd(Co, R, R, Ci, std=(Co * R * R) ** -0.5).permute(0, 3, 1, 2)
    return (dy, w, H, W, st, p)


CONV2D_INPUT_GRAD = define(OpSpec(
    name="conv2d_input_grad",
    inputs=(Operand("grad_output", doc="[B, Co, OH, OW], channels-last in memory (NHWC)"),
            Operand("weight", doc="[Co, Ci, R, R], OIHW or channels-last (OHWI)"),
            Operand("input_h", kind="int", doc="H of the input"), Operand("input_w", kind="int", doc="W of the input"),
            IntOperand("stride", default=1, doc="1 or 2"), IntOperand("padding", default=0, doc="0 or 1")),
    outputs=("grad_input", ),
    doc="The input gradient (dgrad) of conv2d: grad_input [B, Ci, input_h, input_w] channels-last from grad_output "
        "and weight, fp32 accumulation (= torch.nn.grad.conv2d_input((B, Ci, input_h, input_w), weight, grad_output, "
        "stride, padding); gll.conv2d_input_grad_like_torch takes that argument order).",
    validate=validate_dgrad, reference=reference_dgrad, eager=eager_dgrad, shape_of=_shape_dgrad, bytes=_bytes_dgrad,
    make_inputs=_make_dgrad, marker="D", **_CONV))


# ----------------------------------------------------------------------------------------------
# conv2d_weight_grad: wgrad, the filter gradient

def validate_wgrad(x, grad_output, kernel_size, stride=1, padding=0):
    check_tensor("x", x, ndim_min=4, dtypes=("bfloat16", "float16"))
    check_tensor("grad_output", grad_output, ndim_min=4, dtypes=("bfloat16", "float16"))
    if x.dim() != 4 or grad_output.dim() != 4:
        raise ValueError(f"x [B, Ci, H, W] and grad_output [B, Co, OH, OW] must be 4-D; got {tuple(x.shape)} and "
                         f"{tuple(grad_output.shape)}")
    _int_rule("kernel_size", kernel_size, KERNEL_SIZES)
    _int_rule("stride", stride, STRIDES)
    _int_rule("padding", padding, PADDINGS)
    B, Ci, H, W = x.shape
    if grad_output.shape[0] != B:
        raise ValueError(f"grad_output.shape[0] must equal x.shape[0] (B = {B}); got {grad_output.shape[0]}")
    want = (out_size(H, kernel_size, stride, padding), out_size(W, kernel_size, stride, padding))
    if tuple(grad_output.shape[2:]) != want:
        raise ValueError(f"grad_output's spatial size must be {want[0]} x {want[1]} (x {H} x {W}, a {kernel_size}x"
                         f"{kernel_size} kernel, stride {stride}, padding {padding}); got {tuple(grad_output.shape[2:])}")
    check_same_dtype_device("grad_output", grad_output, x)
    if min(B, Ci, grad_output.shape[1]) < 1 or min(want) < 1:
        raise ValueError(f"x and grad_output must have no empty dimension; got {tuple(x.shape)}, {tuple(grad_output.shape)}")
    for name, t in (("x", x), ("grad_output", grad_output)):
        _channels_last(name, t)
    return {}


def reference_wgrad(x, grad_output, kernel_size, stride=1, padding=0):
    import torch
    return torch.nn.grad.conv2d_weight(x.double(), (grad_output.shape[1], x.shape[1], kernel_size, kernel_size),
                                       grad_output.double(), stride=stride, padding=padding)


def eager_wgrad(x, grad_output, kernel_size, stride=1, padding=0):
    """torch.nn.grad.conv2d_weight (cuDNN's wgrad on the GPU); the gradient channels-last (OHWI)."""
    import torch
    gw = torch.nn.grad.conv2d_weight(x, (grad_output.shape[1], x.shape[1], kernel_size, kernel_size), grad_output,
                                     stride=stride, padding=padding)
    return gw.contiguous(memory_format=torch.channels_last)


def _shape_wgrad(x, grad_output, kernel_size, stride=1, padding=0):
    B, Ci, H, W = x.shape
    return {"B": B, "Ci": Ci, "Co": grad_output.shape[1], "H": H, "W": W, "R": kernel_size, "stride": stride,
            "pad": padding}


def _make_wgrad(shape, dtype, rnd, scale=1.0):
    B, Ci, Co, H, W, R = (shape[k] for k in ("B", "Ci", "Co", "H", "W", "R"))
    st, p = shape.get("stride", 1), shape.get("pad", 0)
    x = rnd(B, H, W, Ci, std=scale).permute(0, 3, 1, 2)
    OH, OW = out_size(H, R, st, p), out_size(W, R, st, p)
    dy = rnd(B, OH, OW, Co, std=(B * OH * OW) ** -0.5).permute(0, 3, 1, 2)
    return (x, dy, R, st, p)


CONV2D_WEIGHT_GRAD = define(OpSpec(
    name="conv2d_weight_grad",
    inputs=(Operand("x", doc="[B, Ci, H, W], channels-last in memory (NHWC)"),
            Operand("grad_output", doc="[B, Co, OH, OW], channels-last in memory"),
            Operand("kernel_size", kind="int", doc="R = S, 1 or 3"),
            IntOperand("stride", default=1, doc="1 or 2"), IntOperand("padding", default=0, doc="0 or 1")),
    outputs=("grad_weight", ),
    doc="The filter gradient (wgrad) of conv2d: grad_weight [Co, Ci, R, R] channels-last (OHWI) from x and "
        "grad_output, fp32 accumulation over every output pixel (= torch.nn.grad.conv2d_weight(x, (Co, Ci, R, R), "
        "grad_output, stride, padding); gll.conv2d_weight_grad_like_torch takes that argument order).",
    validate=validate_wgrad, reference=reference_wgrad, eager=eager_wgrad, shape_of=_shape_wgrad, bytes=_bytes_dgrad,
    make_inputs=_make_wgrad, marker="W", **_CONV))
