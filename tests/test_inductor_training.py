"""The Inductor rewrite of training graphs (gluon_lab.inductor_training), on the CPU (where the custom ops run
eager torch): nn.RMSNorm, the Hugging Face formula, nn.LayerNorm and x + residual before an RMSNorm become
gluon-lab's custom ops before AOT autograd, the compiled step's gradients equal eager's, graphs that need no
gradient are left to the post-grad rewrite, and the pass pickles (Inductor's FX cache key)."""
import pickle

import pytest
import torch
import torch._inductor.config

import gluon_lab.inductor as gli


class HF(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.rand(n) + 0.5)
        self.eps = 1e-6

    def forward(self, h):
        dt = h.dtype
        h = h.to(torch.float32)
        v = h.pow(2).mean(-1, keepdim=True)
        h = h * torch.rsqrt(v + self.eps)
        return self.weight * h.to(dt)


class Block(torch.nn.Module):
    def __init__(self, n=64):
        super().__init__()
        self.a, self.b, self.c = torch.nn.RMSNorm(n), HF(n), torch.nn.LayerNorm(n)
        self.lin = torch.nn.Linear(n, n)

    def forward(self, x, r):
        h = self.a(x + r)
        return self.c(self.b(self.lin(h))).pow(2).sum() + h.sum()


@pytest.fixture
def block():
    torch.manual_seed(0)
    return Block(), torch.randn(4, 64, requires_grad=True), torch.randn(4, 64)


def test_a_training_step_runs_the_custom_ops_and_matches_eager(block):
    m, x, r = block
    gli.reset_stats()
    torch._dynamo.reset()
    with gli.rewrite(devices=("cpu", )), torch._inductor.config.patch(force_disable_caches=True):  # passes run
        torch.compile(m, fullgraph=True)(x, r).backward()
    assert gli.stats() == {"add_rms_norm": 1, "rms_norm": 1, "layer_norm": 1}
    grads = [p.grad.clone() for p in m.parameters()] + [x.grad.clone()]
    m.zero_grad()
    x.grad = None
    m(x, r).backward()
    for g, ref in zip(grads, [p.grad for p in m.parameters()] + [x.grad]):
        torch.testing.assert_close(g, ref, atol=1e-5, rtol=1e-5)


def test_a_graph_without_grad_is_left_to_the_post_grad_rewrite(block):
    m, x, r = block
    gli.reset_stats()
    torch._dynamo.reset()
    with torch.no_grad(), gli.rewrite(devices=("cpu", )), torch._inductor.config.patch(force_disable_caches=True):
        torch.compile(m, fullgraph=True)(x, r)
    assert gli.stats().get("layer_norm", 0) == 1 and gli.stats().get("add_rms_norm", 0) == 1  # post-grad's matches


def test_the_pass_is_installed_with_the_rewrite_and_pickles():
    from torch._inductor import config
    before = config.pre_grad_custom_pass
    with gli.rewrite(devices=("cpu", )):
        p = config.pre_grad_custom_pass
        assert p is not before and p.devices == ("cpu", )
        assert pickle.loads(pickle.dumps(p)).devices == ("cpu", )
    assert config.pre_grad_custom_pass is before


def test_the_llama_block_of_the_training_step_study_trains_through_the_custom_ops():
    """The block 07's 'train-step' study times (small here): both nn.RMSNorms become custom ops, the second
    fused with its residual add, and one compiled step's gradients equal the eager step's."""
    from gluon_lab.blocks import LlamaBlock
    blk = LlamaBlock(hidden=64, heads=4, mlp=96, dtype=torch.float32)
    x = torch.randn(2, 8, 64)

    def step(x):
        loss = blk(x).float().pow(2).mean()
        loss.backward()
        return loss

    step(x)
    ref = [p.grad.clone() for p in blk.parameters()]
    blk.zero_grad(set_to_none=True)
    gli.reset_stats()
    torch._dynamo.reset()
    with gli.rewrite(devices=("cpu", )), torch._inductor.config.patch(force_disable_caches=True):
        torch.compile(step)(x)
    assert gli.stats() == {"rms_norm": 1, "add_rms_norm": 1}, gli.stats()
    for p, r in zip(blk.parameters(), ref):
        torch.testing.assert_close(p.grad, r, atol=1e-5, rtol=1e-4)


def test_the_pass_keeps_the_user_s_in_place_updates_and_torch_s_default_eps():
    """Only the formula's own nodes are erased (an unused in-place update looks dead to FX but is not), and
    nn.RMSNorm's eps=None becomes fp32's machine epsilon, as torch's kernels use (small inputs: eps matters)."""
    norm = torch.nn.RMSNorm(64, dtype=torch.bfloat16)  # eps=None: fp32's 1.2e-7, not bf16's 7.8e-3
    x = (1e-3 * torch.randn(4, 64)).bfloat16().requires_grad_()
    buf = torch.zeros(3)

    def f(x, buf):
        buf.add_(1)
        return norm(x)

    gli.reset_stats()
    torch._dynamo.reset()
    with gli.rewrite(devices=("cpu", )), torch._inductor.config.patch(force_disable_caches=True):
        y = torch.compile(f, fullgraph=True)(x, buf)
    assert gli.stats() == {"rms_norm": 1}
    assert torch.equal(buf, torch.ones(3))
    torch.testing.assert_close(y.float(), norm(x).float(), atol=2e-2, rtol=2e-2)  # |y| ~ 1 (bf16's eps: ~0.01)
