"""The opt-in Inductor rewrite (gluon_lab.inductor) on the graph level, on CPU (devices=("cpu",):
there the custom ops run the eager torch formulation): every spelling of RMSNorm / LayerNorm /
add + RMSNorm becomes one gluon-lab custom op in the compiled code, the compiled result matches
the uncompiled one, what the ops cannot take is left alone, graphs that need a backward are not
touched, and install / uninstall / rewrite() / options() switch it as documented. The H200 timing
of the compiled decoder block is the dispatch study's (experiments.measure_decoder_block)."""
import re

import pytest
import torch
import torch.nn.functional as F
from torch._inductor.utils import run_and_get_code

import gluon_lab.inductor as gli
from gluon_lab.blocks import LlamaBlock
from gluon_lab.specs.norms import layer_formula, rms_formula

CPU = ("cpu", )
N = 64


def _ops(code) -> dict:
    found = re.findall(r"torch\.ops\.gluon_lab\.(\w+)\.default\(", "\n".join(code))
    return {o: found.count(o) for o in sorted(set(found))}


def _compile(fn, *args, grad=False):
    torch._dynamo.reset()
    gli.reset_stats()
    from torch._inductor import config
    with torch.set_grad_enabled(grad), config.patch(force_disable_caches=True):  # the pass must run (stats)
        out, code = run_and_get_code(torch.compile(fn, options=gli.options(CPU)), *args)
    return out, _ops(code)


def _hf_rms(x, w):  # Hugging Face LlamaRMSNorm.forward
    h = x.to(torch.float32)
    v = h.pow(2).mean(-1, keepdim=True)
    h = h * torch.rsqrt(v + 1e-6)
    return w * h.to(x.dtype)


def _g():
    return torch.Generator().manual_seed(5)


def _t(*s, dtype=torch.bfloat16, mean=0.0):
    return (mean + torch.randn(*s, generator=_G)).to(dtype)


_G = _g()
RMS_SPELLINGS = {
    "F.rms_norm": lambda x, w: F.rms_norm(x, (N, ), w, 1e-6),
    "rms fp32 formula": lambda x, w: rms_formula(x, w, 1e-6),
    "Hugging Face": _hf_rms,
    "x*x, rsqrt(eps + ms)": lambda x, w: (x.float() * torch.rsqrt((x.float() * x.float()).mean(-1, keepdim=True) + 1e-6)
                                           * w.float()).to(x.dtype),
}


@pytest.mark.parametrize("name", sorted(RMS_SPELLINGS))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("shape", [(7, N), (2, 5, N)])
def test_rms_spellings_become_one_custom_op(name, dtype, shape):
    fn = RMS_SPELLINGS[name]
    x, w = _t(*shape, dtype=dtype), _t(N, dtype=dtype, mean=1.0)
    out, ops = _compile(fn, x, w)
    assert ops == {"rms_norm": 1}, ops
    want = fn(x, w)
    # one rounding in the fused op vs the Hugging Face form's two: at most one ulp of x's dtype
    tol = dict(atol=0, rtol=0) if name != "Hugging Face" or dtype == torch.float32 else dict(atol=0, rtol=1e-2)
    torch.testing.assert_close(out, want, **tol)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_layer_norm_spellings(dtype):
    x, w, b = _t(3, 4, N, dtype=dtype), _t(N, dtype=dtype, mean=1.0), _t(N, dtype=dtype)
    for fn in (lambda x, w, b: F.layer_norm(x, (N, ), w, b, 1e-5), lambda x, w, b: layer_formula(x, w, b, 1e-5)):
        out, ops = _compile(fn, x, w, b)
        assert ops == {"layer_norm": 1}, ops
        torch.testing.assert_close(out, fn(x, w, b), atol=1e-2 if dtype == torch.bfloat16 else 1e-5, rtol=0)


def test_modules_are_rewritten_in_inference():
    x = _t(2, 3, N)
    for m, op in ((torch.nn.RMSNorm(N, eps=1e-6, dtype=torch.bfloat16), "rms_norm"),
                  (torch.nn.LayerNorm(N, dtype=torch.bfloat16), "layer_norm")):
        with torch.no_grad():
            m.weight.copy_(_t(N, mean=1.0))
        out, ops = _compile(m, x)
        assert ops == {op: 1}, ops
        with torch.no_grad():
            torch.testing.assert_close(out, m(x), atol=1e-2, rtol=0)


def test_add_then_rms_becomes_add_rms_norm_and_feeds_the_residual():
    def f(x, r, w):
        s = x + r
        return F.rms_norm(s, (N, ), w, 1e-6) * 2, s - 1  # the sum has another user

    x, r, w = _t(5, N), _t(5, N), _t(N, mean=1.0)
    (y, s), ops = _compile(f, x, r, w)
    assert ops == {"add_rms_norm": 1}, ops
    wy, ws = f(x, r, w)
    torch.testing.assert_close(y, wy, atol=0, rtol=0)
    torch.testing.assert_close(s, ws, atol=0, rtol=0)
    assert gli.stats() == {"add_rms_norm": 1}


def test_what_the_ops_cannot_take_is_left_alone():
    x, w = _t(4, 8, N), _t(N, mean=1.0)
    cases = [
        (lambda x, w: F.rms_norm(x, (8, N), None, 1e-6), w),  # normalized over two dims
        (lambda x, w: F.rms_norm(x, (N, ), w, 1e-6), w.float()),  # an fp32 weight with bf16 x: the ops take one dtype
        (lambda x, w: (x.float() * torch.rsqrt(x.float().pow(2).mean(1, keepdim=True) + 1e-6)).to(x.dtype) * w, w),  # dim 1
    ]
    for i, (fn, wi) in enumerate(cases):
        out, ops = _compile(fn, x, wi)
        assert ops == {}, (i, ops)
        torch.testing.assert_close(out, fn(x, wi), atol=2e-2, rtol=2e-2)  # Inductor skips intermediate roundings
    # a bf16 weight cast to fp32 inside the formula is the ops' own math: rewritten
    out, ops = _compile(lambda x, w: F.rms_norm(x, (N, ), w.float(), 1e-6), x, w)
    assert ops == {"rms_norm": 1}, ops


def test_graphs_that_need_a_backward_run_the_custom_op_and_its_backward():
    """The post-grad patterns cannot match a training graph (the norm's intermediates are saved for the
    backward); the pre-grad training rewrite (gluon_lab.inductor_training) replaces the norm before AOT
    autograd, so the forward graph calls the custom op's training forward (y and the saved rstd) and the gradient
    is its backward op's."""
    m = torch.nn.RMSNorm(N, eps=1e-6)
    x = torch.randn(3, N, requires_grad=True)
    out, ops = _compile(m, x, grad=True)
    assert ops == {"rms_norm_train": 1}, ops
    out.sum().backward()
    x2 = x.detach().clone().requires_grad_()
    w2 = m.weight.detach().clone().requires_grad_()
    F.rms_norm(x2, (N, ), w2, 1e-6).sum().backward()
    torch.testing.assert_close(x.grad, x2.grad)
    torch.testing.assert_close(m.weight.grad, w2.grad)


def test_cuda_only_by_default():
    x, w = _t(7, N), _t(N, mean=1.0)
    torch._dynamo.reset()
    out, code = run_and_get_code(torch.compile(lambda x, w: F.rms_norm(x, (N, ), w, 1e-6), options=gli.options()), x, w)
    assert _ops(code) == {}  # CPU tensors, devices=("cuda",)


def test_llama_block_compiled_with_the_rewrite_matches_uncompiled():
    blk = LlamaBlock(hidden=N, heads=4, mlp=96).requires_grad_(False)
    x = _t(2, 8, N)
    out, ops = _compile(blk, x)
    assert ops == {"rms_norm": 1, "add_rms_norm": 1}, ops
    torch.testing.assert_close(out, blk(x), atol=2e-2, rtol=2e-2)


def test_install_uninstall_and_context_manager_restore_the_previous_pass():
    from torch._inductor import config

    def mine(g):
        return None

    old = config.post_grad_custom_pre_pass
    config.post_grad_custom_pre_pass = mine
    try:
        gli.install(CPU)
        assert gli.installed() and config.post_grad_custom_pre_pass.previous is mine
        gli.install(CPU)  # idempotent
        assert config.post_grad_custom_pre_pass.previous is mine
        gli.uninstall()
        assert config.post_grad_custom_pre_pass is mine and not gli.installed()
        with gli.rewrite(CPU):
            assert gli.installed()
            x, w = _t(3, N), _t(N, mean=1.0)
            torch._dynamo.reset()
            gli.reset_stats()
            with torch.no_grad():
                torch.compile(lambda x, w: F.rms_norm(x, (N, ), w, 1e-6))(x, w)
            assert gli.stats() == {"rms_norm": 1}
        assert config.post_grad_custom_pre_pass is mine
    finally:
        gli.uninstall()
        config.post_grad_custom_pre_pass = old


def test_pass_uuid_is_stable_and_names_the_devices():
    a, b = gli.options(CPU)["post_grad_custom_pre_pass"], gli.options(CPU)["post_grad_custom_pre_pass"]
    assert a.uuid() == b.uuid() and a.uuid() != gli.options()["post_grad_custom_pre_pass"].uuid()
    assert a.n_patterns > 100


def test_mean_over_every_dim_is_left_alone():
    x, w = _t(4, N), _t(N, mean=1.0)

    def f(x, w):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(dim=None, keepdim=True) + 1e-6) * w.float()).to(x.dtype)

    out, ops = _compile(f, x, w)
    assert ops == {}
    torch.testing.assert_close(out, f(x, w), atol=2e-2, rtol=2e-2)


def test_uuid_is_none_over_a_plain_callable_pass():
    from torch._inductor import config
    old = config.post_grad_custom_pre_pass
    config.post_grad_custom_pre_pass = lambda g: None
    try:
        assert gli.options(CPU)["post_grad_custom_pre_pass"].uuid() is None  # Inductor bypasses its cache
    finally:
        config.post_grad_custom_pre_pass = old
