"""The convolution gradients in torch.nn.grad's argument orders, over the gluon-lab ops.

    gll.conv2d_input_grad_like_torch(input_size, weight, grad_output, stride, padding)   # conv2d_input
    gll.conv2d_weight_grad_like_torch(input, weight_size, grad_output, stride, padding)  # conv2d_weight

The ops themselves (gll.conv2d_input_grad / conv2d_weight_grad, their custom ops and records) take
tensors first and the sizes they need as ints (gluon_lab_old/specs/conv.py).
"""
from __future__ import annotations


def conv2d_input_grad_like_torch(input_size, weight, grad_output, stride=1, padding=0, *, variant="auto"):
    """gll.conv2d_input_grad in torch.nn.grad.conv2d_input's argument order (input_size = (B, Ci, H, W))."""
    import gluon_lab_old as gll
    if len(tuple(input_size)) != 4:
        raise ValueError(f"input_size must be (B, Ci, H, W); got {tuple(input_size)!r}")
    B, Ci, H, W = (int(v) for v in input_size)
    if hasattr(grad_output, "shape") and hasattr(weight, "shape") and (B, Ci) != (grad_output.shape[0], weight.shape[1]):
        raise ValueError(f"input_size (B, Ci) = ({B}, {Ci}) must match grad_output.shape[0] and weight.shape[1] "
                         f"({grad_output.shape[0]}, {weight.shape[1]})")
    return gll.conv2d_input_grad(grad_output, weight, H, W, stride, padding, variant=variant)


def conv2d_weight_grad_like_torch(input, weight_size, grad_output, stride=1, padding=0, *, variant="auto"):
    """gll.conv2d_weight_grad in torch.nn.grad.conv2d_weight's argument order (weight_size = (Co, Ci, R, R))."""
    import gluon_lab_old as gll
    ws = tuple(int(v) for v in weight_size)
    if len(ws) != 4 or ws[2] != ws[3]:
        raise ValueError(f"weight_size must be (Co, Ci, R, R); got {tuple(weight_size)!r}")
    if hasattr(input, "shape") and hasattr(grad_output, "shape") and (ws[0], ws[1]) != (grad_output.shape[1],
                                                                                        input.shape[1]):
        raise ValueError(f"weight_size (Co, Ci) = ({ws[0]}, {ws[1]}) must match grad_output.shape[1] and input.shape[1] "
                         f"({grad_output.shape[1]}, {input.shape[1]})")
    return gll.conv2d_weight_grad(input, grad_output, ws[2], stride, padding, variant=variant)
