"""The training forward (gluon_lab::<op>_train, kernels/norm_train.py) on the CPU: its sm_90 code is gluon-regs's
plus one fp32 store per statistic and row (the row read once, no spills), a grad-needing gll.<op> call goes
through it and hands its statistics to the backward op, its outputs match float64 (the torch path here), and
opcheck passes with the autograd checks."""
import pytest
import torch

import gluon_lab as gll
from gluon_lab import specs
from gluon_lab.codegen import census, compile_sm90
from gluon_lab.kernels import norm_train as T
from gluon_lab.kernels.hopper import ITEMSIZE
from gluon_lab.kernels.regs_cache import RegsConfig
from gluon_lab.specs import norm_grad

OPS = ("rms_norm", "layer_norm", "add_rms_norm")


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("N", [1000, 4096, 5120])
def test_census_is_the_regs_forward_plus_the_statistics_stores(op, dtype, N):
    spec = specs.get(op)
    cfg = RegsConfig.heuristic(spec, N, dtype)
    c = census(compile_sm90(**{k: v for k, v in T.codegen_spec(spec, N, dtype).items() if k != "options"}))
    v = cfg.elems_per_thread(N) * cfg.rows * ITEMSIZE[dtype] // 16  # 16-byte vectors per thread of one input tile
    params = 1 + spec.row.bias  # w (and b): one row, read by every program
    assert c["ld_global_by_bits"] == {128: (1 + spec.row.residual) * v + params * v // cfg.rows}  # each read once
    stats = 1 + (spec.row.stats == "layer")
    assert c["st_global_by_bits"] == {128: (1 + spec.row.residual) * v, 32: stats * cfg.rows}  # y (s), then the stats
    assert c["spill_bytes"] == 0 and c["tma_load"] == 0 and c["smem_bytes"] <= 256


def test_l2_norm_has_no_training_forward():
    with pytest.raises(ValueError, match="no training forward"):
        T.check(specs.get("l2_norm"), torch.randn(2, 256), None, None, None)


def _leaf(*shape, seed, offset=0.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) + offset).requires_grad_()


@pytest.mark.parametrize("op", OPS)
def test_the_torch_training_forward_matches_float64(op):
    spec = specs.get(op)
    M, N = 37, 300
    x, r, w, b = _leaf(M, N, seed=1).detach(), _leaf(M, N, seed=2).detach(), _leaf(N, seed=3, offset=1).detach(), \
        _leaf(N, seed=4).detach()
    ins = {"rms_norm": (x, w), "layer_norm": (x, w, b), "add_rms_norm": (x, r, w)}[op]
    outs = getattr(torch.ops.gluon_lab, f"{op}_train")(*ins, spec.scalars["eps"], "auto")
    ref = spec.reference(*(t.double() for t in ins), **spec.scalars)
    ref = ref if isinstance(ref, tuple) else (ref, )
    for o, rf in zip(outs, ref):
        torch.testing.assert_close(o.double(), rf, atol=1e-5, rtol=1e-5)
    s = x + r if op == "add_rms_norm" else x
    want = norm_grad._rows_stats(s, spec.row.stats, spec.scalars["eps"])
    for got, rf in zip(outs[len(ref):], want):
        assert got.dtype == torch.float32 and got.shape == (M, )
        torch.testing.assert_close(got, rf, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("op", OPS)
def test_a_grad_needing_call_saves_the_statistics_for_the_backward(op):
    """The saved tensors of loss.backward(): x (s), the weight and the fp32 statistics of shape (M,)."""
    M, N = 6, 256
    x, r, w, b = _leaf(M, N, seed=1), _leaf(M, N, seed=2), _leaf(N, seed=3, offset=1), _leaf(N, seed=4)
    args = {"rms_norm": (x, w), "layer_norm": (x, w, b), "add_rms_norm": (x, r, w)}[op]
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        out = getattr(gll, op)(*args)
    outs = out if isinstance(out, tuple) else (out, )
    assert "gluon_lab" in type(outs[0].grad_fn).__name__
    stats = [t for t in saved if t.dtype == torch.float32 and t.shape == (M, )]
    assert len(stats) == (2 if op == "layer_norm" else 1)
    torch.autograd.backward(outs, [torch.ones_like(o) for o in outs])
    spec = specs.get(op)
    refs = [a.detach().double().requires_grad_() for a in args]
    ref = spec.eager(*refs, **spec.scalars)
    torch.autograd.backward(ref if isinstance(ref, tuple) else (ref, ),
                            [torch.ones_like(o) for o in (ref if isinstance(ref, tuple) else (ref, ))])
    for a, rf in zip(args, refs):
        torch.testing.assert_close(a.grad.double(), rf.grad, atol=1e-4, rtol=1e-4)


def test_the_training_forward_refuses_an_unknown_variant_by_name():
    with pytest.raises(Exception, match="must be one of"):
        torch.ops.gluon_lab.rms_norm_train(torch.randn(2, 256), torch.ones(256), 1e-6, "gluon-tma")


@pytest.mark.parametrize("op", OPS)
def test_opcheck_with_the_autograd_checks(op):
    from torch.library import opcheck
    M, N = 8, 128
    x, r, w, b = _leaf(M, N, seed=1), _leaf(M, N, seed=2), _leaf(N, seed=3, offset=1), _leaf(N, seed=4)
    args = {"rms_norm": (x, w, 1e-6), "layer_norm": (x, w, b, 1e-5), "add_rms_norm": (x, r, w, 1e-6)}[op]
    opcheck(getattr(torch.ops.gluon_lab, f"{op}_train").default, (*args, "auto"),
            test_utils=("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic"))


@pytest.mark.parametrize("op", OPS)
def test_the_kernel_gets_rows_and_the_outputs_get_the_leading_dims_back(op, monkeypatch):
    """train_forward hands norm_train.launch (rows, N) views (its alignment check reads stride(0) as the row
    stride: (B, S, N) with N % 8 != 0 would pass it wrongly) and reshapes y (s) and the statistics to x's dims."""
    from gluon_lab import library, registry
    seen = []

    def fake_launch(spec, x, r, w, b, eps):
        seen.append((x.dim(), None if r is None else r.dim()))
        return library.torch_train_forward(spec, x, r, w, b, eps)

    monkeypatch.setattr(T, "launch", fake_launch)
    monkeypatch.setattr(registry, "check_runnable", lambda v, inputs: None)
    monkeypatch.setattr(registry, "eligible", lambda v, inputs: True)
    spec = specs.get(op)
    B, S, N = 2, 3, 1001
    x, r, w, b = torch.randn(B, S, N), torch.randn(B, S, N), torch.rand(N) + 0.5, torch.randn(N)
    ins = {"rms_norm": (x, w), "layer_norm": (x, w, b), "add_rms_norm": (x, r, w)}[op]
    outs = library.train_forward(spec, ins, spec.scalars["eps"], "gluon-regs")
    assert seen == [(2, 2 if op == "add_rms_norm" else None)]
    n_out = len(spec.outputs)
    assert all(o.shape == (B, S, N) for o in outs[:n_out]) and all(o.shape == (B, S) for o in outs[n_out:])
    ref = library.torch_train_forward(spec, x, r if op == "add_rms_norm" else None, w, b, spec.scalars["eps"])
    for o, rf in zip(outs, ref):
        torch.testing.assert_close(o, rf)
