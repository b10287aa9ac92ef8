"""Autograd is explicit: a gluon-lab kernel has no backward yet, so an input that requires grad is
refused with a clear error naming the op and the input (never a silently detached output); auto
takes eager torch when grad is needed; torch.no_grad() lifts the rule."""
import pytest
import torch

import gluon_lab as gll
from gluon_lab import registry


def _x(*shape, grad=True, device="cpu"):
    g = torch.Generator().manual_seed(7)
    return torch.randn(*shape, generator=g).to(device).requires_grad_(grad)


@pytest.mark.parametrize("variant", ["gluon-tma", "gluon-chunked", "gluon-pipelined", "gluon-ws", "triton"])
def test_kernel_variant_refuses_an_input_that_requires_grad(variant):
    with pytest.raises(RuntimeError, match=rf"gluon_lab.rms_norm\(variant='{variant}'\) has no backward yet, "
                                           r"and x requires grad"):
        gll.rms_norm(_x(3, 96), torch.ones(96), variant=variant)


def test_a_weight_that_requires_grad_is_named():
    with pytest.raises(RuntimeError, match="layer_norm.*has no backward yet, and weight requires grad"):
        gll.layer_norm(_x(3, 96, grad=False), torch.ones(96, requires_grad=True), torch.zeros(96),
                       variant="gluon-chunked")


def test_auto_takes_torch_when_grad_is_needed_and_the_gradient_is_right():
    x, w = _x(5, 80), torch.rand(80).requires_grad_()
    gll.rms_norm(x, w).sum().backward()
    x2, w2 = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    torch.nn.functional.rms_norm(x2, (80,), w2, eps=1e-6).sum().backward()
    torch.testing.assert_close(x.grad, x2.grad)
    torch.testing.assert_close(w.grad, w2.grad)


def test_no_grad_lifts_the_rule():
    with torch.no_grad():  # past the grad rule: the next rule (a CPU tensor for a GPU kernel) speaks
        with pytest.raises(ValueError, match="runs on a CUDA GPU"):
            gll.rms_norm(_x(3, 96), torch.ones(96), variant="gluon-tma")


def test_only_torch_built_variants_are_differentiable():
    for v in registry.all_variants():
        assert v.differentiable == (v.name in ("torch", "inductor", "inductor-max-autotune")), (v.op, v.name)


@pytest.mark.gpu
def test_on_the_gpu_the_kernel_refuses_grad_and_runs_without_it():
    x = _x(64, 4096, device="cuda").to(torch.bfloat16).detach().requires_grad_()
    w = torch.ones(4096, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="has no backward yet"):
        gll.rms_norm(x, w, variant="gluon-tma")
    with torch.no_grad():
        y = gll.rms_norm(x, w, variant="gluon-tma")
    ref = torch.nn.functional.rms_norm(x.detach().double(), (4096,), w.double(), eps=1e-6)
    torch.testing.assert_close(y.double(), ref, atol=2e-2, rtol=2e-2)
    y = gll.rms_norm(x, w)  # auto: torch when grad is needed, and the output carries autograd
    assert y.requires_grad and y.grad_fn is not None
