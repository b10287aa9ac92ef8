"""Autograd is explicit. The row norms with a backward op (rms_norm, layer_norm, add_rms_norm) differentiate
through their custom op: every variant's forward, and the backward op (the forward's variant where the
backward op has it, else auto). Every other op's kernel variants refuse an input that requires grad with a
clear error naming the op and the input (never a silently detached output); auto takes eager torch there;
torch.no_grad() lifts the rule."""
import pytest
import torch

import gluon_lab as gll
from gluon_lab import registry

BACKWARD_OPS = ("rms_norm", "layer_norm", "add_rms_norm")


def _x(*shape, grad=True, device="cpu"):
    g = torch.Generator().manual_seed(7)
    return torch.randn(*shape, generator=g).to(device).requires_grad_(grad)


@pytest.mark.parametrize("variant", ["gluon-tma", "gluon-chunked", "gluon-pipelined", "gluon-ws", "triton"])
def test_a_kernel_variant_without_a_backward_refuses_an_input_that_requires_grad(variant):
    with pytest.raises(RuntimeError, match=rf"gluon_lab.l2_norm\(variant='{variant}'\) has no backward yet, "
                                           r"and x requires grad"):
        gll.l2_norm(_x(3, 96), variant=variant)


def test_a_group_norm_weight_that_requires_grad_is_named():
    x = _x(2, 6, 5, 3, grad=False)
    with pytest.raises(RuntimeError, match="group_norm.*has no backward yet, and weight requires grad"):
        gll.group_norm(x, 3, torch.ones(6, requires_grad=True), torch.zeros(6), variant="gluon-chunked")


@pytest.mark.parametrize("op", BACKWARD_OPS)
def test_a_norm_with_a_backward_op_records_its_custom_op(op):
    x, w, b, r = _x(5, 80), torch.rand(80).requires_grad_(), torch.randn(80), _x(5, 80)
    args = {"rms_norm": (x, w), "layer_norm": (x, w, b), "add_rms_norm": (x, r, w)}[op]
    out = getattr(gll, op)(*args)
    y = out[0] if isinstance(out, tuple) else out
    assert "gluon_lab" in type(y.grad_fn).__name__, type(y.grad_fn).__name__


def test_auto_under_grad_gives_torch_s_gradient_on_the_cpu():
    x, w = _x(5, 80), torch.rand(80).requires_grad_()
    gll.rms_norm(x, w).pow(2).sum().backward()
    x2, w2 = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    torch.nn.functional.rms_norm(x2, (80,), w2, eps=1e-6).pow(2).sum().backward()
    torch.testing.assert_close(x.grad, x2.grad)
    torch.testing.assert_close(w.grad, w2.grad)


def test_add_rms_norm_gives_x_and_residual_the_same_gradient():
    x, r, w = _x(4, 64), torch.randn(4, 64).requires_grad_(), torch.rand(64).requires_grad_()
    y, s = gll.add_rms_norm(x, r, w)
    (y.sum() + s.pow(2).sum()).backward()
    torch.testing.assert_close(x.grad, r.grad, atol=0, rtol=0)
    x2, r2, w2 = (t.detach().clone().requires_grad_() for t in (x, r, w))
    s2 = x2 + r2
    (torch.nn.functional.rms_norm(s2, (64,), w2, 1e-6).sum() + s2.pow(2).sum()).backward()
    torch.testing.assert_close(x.grad, x2.grad)
    torch.testing.assert_close(w.grad, w2.grad)


def test_no_grad_lifts_the_rule():
    with torch.no_grad():  # past the grad rule: the next rule (a CPU tensor for a GPU kernel) speaks
        with pytest.raises(ValueError, match="runs on a CUDA GPU"):
            gll.l2_norm(_x(3, 96), variant="gluon-tma")


def test_an_unknown_variant_under_grad_is_named_before_anything_runs():
    with pytest.raises(ValueError, match="unknown variant 'gluon-nope'"):
        gll.rms_norm(_x(3, 96), torch.ones(96), variant="gluon-nope")


def test_only_torch_built_variants_are_differentiable():
    for v in registry.all_variants():
        assert v.differentiable == (v.name in ("torch", "inductor", "inductor-max-autotune")), (v.op, v.name)


@pytest.mark.gpu
def test_on_the_gpu_a_kernel_without_a_backward_refuses_grad_and_runs_without_it():
    x = _x(64, 4096, device="cuda").to(torch.bfloat16).detach().requires_grad_()
    with pytest.raises(RuntimeError, match="has no backward yet"):
        gll.l2_norm(x, variant="gluon-tma")
    with torch.no_grad():
        y = gll.l2_norm(x, variant="gluon-tma")
    ref = torch.nn.functional.normalize(x.detach().double(), dim=-1, eps=1e-12)
    torch.testing.assert_close(y.double(), ref, atol=2e-2, rtol=2e-2)
    y = gll.l2_norm(x)  # auto: torch when grad is needed, and the output carries autograd
    assert y.requires_grad and y.grad_fn is not None
