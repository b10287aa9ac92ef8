"""The row norms' backward references (gluon_lab.specs.norm_grad) against float64 autograd through the forward
references the lab checks every kernel with, on fresh random inputs of odd shapes. CPU-only."""
import pytest
import torch

from gluon_lab.specs import norm_grad as ng
from gluon_lab.specs import norms


def _t(*shape, seed, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g, dtype=torch.float64) * scale).requires_grad_()


SHAPES = [(1, 7), (5, 96), (3, 4, 1000), (13, 4097)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("weighted", [True, False])
def test_rms_norm_backward(shape, weighted):
    x, dy = _t(*shape, seed=1), _t(*shape, seed=2).detach()
    w = (_t(shape[-1], seed=3) * 0.5 + 1).detach().requires_grad_() if weighted else None
    norms.rms_reference(x, w, 1e-6).backward(dy)
    dx, dw = ng.rms_norm_backward_reference(x.detach(), None if w is None else w.detach(), dy, 1e-6)
    torch.testing.assert_close(dx, x.grad, rtol=1e-10, atol=1e-10)
    if weighted:
        torch.testing.assert_close(dw, w.grad, rtol=1e-10, atol=1e-10)
    else:
        assert dw is None


@pytest.mark.parametrize("shape", SHAPES)
def test_layer_norm_backward(shape):
    x, dy = _t(*shape, seed=4, scale=3.0), _t(*shape, seed=5).detach()
    x = (x.detach() + 2.0).requires_grad_()  # an offset mean: the centred terms matter
    w, b = (_t(shape[-1], seed=s) for s in (6, 7))
    norms.layer_reference(x, w, b, 1e-5).backward(dy)
    dx, dw, db = ng.layer_norm_backward_reference(x.detach(), w.detach(), b.detach(), dy, 1e-5)
    for got, want in ((dx, x.grad), (dw, w.grad), (db, b.grad)):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("scale", [1.0, 1e-14])  # 1e-14: ||x|| < eps, the clamp's branch
def test_l2_norm_backward(scale):
    x, dy = _t(6, 33, seed=8, scale=scale), _t(6, 33, seed=9).detach()
    norms.l2_reference(x, 1e-12).backward(dy)
    torch.testing.assert_close(ng.l2_norm_backward_reference(x.detach(), dy, 1e-12), x.grad, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("with_ds", [True, False])
def test_add_rms_norm_backward_passes_the_residual_gradient(with_ds):
    x, r = _t(9, 200, seed=10), _t(9, 200, seed=11)
    w = (_t(200, seed=12) * 0.5 + 1).detach().requires_grad_()
    dy, ds = _t(9, 200, seed=13).detach(), _t(9, 200, seed=14).detach()
    s = x + r  # float64: the forward's rounding to x's dtype is the identity here
    y = norms.rms_reference(s, w, 1e-6)
    torch.autograd.backward([y, s] if with_ds else [y], [dy, ds] if with_ds else [dy])
    dx, dres, dw = ng.add_rms_norm_backward_reference(x.detach(), r.detach(), w.detach(), dy,
                                                      ds if with_ds else None, 1e-6)
    for got, want in ((dx, x.grad), (dres, r.grad), (dw, w.grad)):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)


def test_nan_rows_stay_in_their_row():
    x, dy = _t(4, 50, seed=15).detach(), _t(4, 50, seed=16).detach()
    x[2, 7] = float("nan")
    dx, dw = ng.rms_norm_backward_reference(x, torch.ones(50, dtype=torch.float64), dy)
    assert torch.isnan(dx[2]).all() and torch.isfinite(dx[[0, 1, 3]]).all()
    assert torch.isnan(dw).all()  # a column sum over a NaN row


def test_the_byte_model_counts_each_term_once():
    b = ng.backward_bytes(4096, 5000, 2, weight=True, bias=True, partial_rows=132, stats_per_row=2)
    assert b["x"] == b["dy"] == b["dx"] == 4096 * 5000 * 2 and b["stats"] == 4096 * 8
    assert b["partials"] == 2 * 132 * 5000 * 4 * 2  # dw and db partials: written, then read by the reduce
    assert b["total"] == sum(v for k, v in b.items() if k != "total")
    assert "ds" in ng.backward_bytes(8, 64, 4, residual=True) and "db" not in ng.backward_bytes(8, 64, 4)
