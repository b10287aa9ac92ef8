"""gluon_lab.nn: drop-in RMSNorm / LayerNorm modules and patch(model). CPU-only: on a CPU tensor the public
ops run eager torch, so these tests check the modules' contract (constructor, state dict, the flattening
of normalized dims, the fallbacks, gradients against float64 autograd, what patch swaps and leaves); the
kernels behind them are the GPU suite's."""
import pytest
import torch
from torch import nn

import gluon_lab.nn as gln


class LlamaRMSNorm(nn.Module):  # the Hugging Face formula (transformers' LlamaRMSNorm)
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class GemmaRMSNorm(LlamaRMSNorm):  # another formula under the same name pattern: (1 + weight)
    def forward(self, x):
        out = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return (out * (1.0 + self.weight.float())).type_as(x)


class Block(nn.Module):
    def __init__(self, n=96):
        super().__init__()
        self.norm1 = nn.RMSNorm(n, eps=1e-6)
        self.proj = nn.Linear(n, n)
        self.layers = nn.ModuleList([LlamaRMSNorm(n), GemmaRMSNorm(n)])
        self.ln = nn.LayerNorm(n)
        self.ln_nobias = nn.LayerNorm(n, bias=False)

    def forward(self, x):
        x = self.proj(self.norm1(x))
        return self.ln_nobias(self.ln(self.layers[1](self.layers[0](x))))


def _randomize(m):
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn_like(p) * 0.5 + 1.0)


def test_state_dicts_load_both_ways_and_the_module_is_torchs():
    a, b = nn.RMSNorm((3, 40), eps=1e-5), gln.RMSNorm((3, 40), eps=1e-5)
    _randomize(a)
    b.load_state_dict(a.state_dict())
    a2 = nn.RMSNorm((3, 40), eps=1e-5)
    a2.load_state_dict(b.state_dict())
    assert torch.equal(a2.weight, a.weight) and isinstance(b, nn.RMSNorm)
    ln = gln.LayerNorm(50, variant="torch")
    ln.load_state_dict(nn.LayerNorm(50).state_dict())
    assert "variant='torch'" in repr(ln) and isinstance(ln, nn.LayerNorm)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_forward_matches_torchs_module_over_flattened_dims(dtype):
    torch.manual_seed(0)
    ref, mine = nn.RMSNorm((3, 37)), gln.RMSNorm((3, 37))
    _randomize(ref)
    mine.load_state_dict(ref.state_dict())
    ref, mine = ref.to(dtype), mine.to(dtype)
    x = torch.randn(5, 2, 3, 37).to(dtype)
    assert mine.why_torch(x) is None  # it calls gluon_lab.rms_norm (eps=None: torch's finfo rule)
    torch.testing.assert_close(mine(x), ref(x))
    lref, lmine = nn.LayerNorm(37).to(dtype), gln.LayerNorm(37).to(dtype)
    _randomize(lref)
    lmine.load_state_dict(lref.state_dict())
    torch.testing.assert_close(lmine(x), lref(x))


def test_the_fallbacks_name_their_rule():
    x = torch.randn(4, 64)
    assert "elementwise_affine" in gln.RMSNorm(64, elementwise_affine=False).why_torch(x)
    assert "bias=False" in gln.LayerNorm(64, bias=False).why_torch(x)
    assert "dtype" in gln.RMSNorm(64).why_torch(x.bfloat16())  # fp32 weight, bf16 x: torch's mixed-dtype rule
    assert "float64" in gln.RMSNorm(64, dtype=torch.float64).why_torch(x.double())
    bad = gln.RMSNorm(64)
    assert "normalized_shape" in bad.why_torch(torch.randn(4, 65))
    with pytest.raises(RuntimeError):  # torch's own forward raises its own error for a wrong shape
        bad(torch.randn(4, 65))
    y = gln.RMSNorm(64, elementwise_affine=False)(x)  # the fallback is torch's forward
    torch.testing.assert_close(y, nn.RMSNorm(64, elementwise_affine=False)(x))


def test_gradients_match_float64_autograd():
    torch.manual_seed(1)
    m = gln.LayerNorm(53)
    _randomize(m)
    x = torch.randn(7, 53, requires_grad=True)
    dy = torch.randn(7, 53)
    (m(x) * dy).sum().backward()
    x64 = x.detach().double().requires_grad_()
    w64, b64 = (p.detach().double().requires_grad_() for p in (m.weight, m.bias))
    (torch.nn.functional.layer_norm(x64, (53, ), w64, b64, m.eps) * dy.double()).sum().backward()
    for got, want in ((x.grad, x64.grad), (m.weight.grad, w64.grad), (m.bias.grad, b64.grad)):
        torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-4)
        assert torch.isfinite(got).all()


def test_patch_swaps_torch_and_hf_norms_keeps_parameters_and_names_what_it_left():
    torch.manual_seed(2)
    model = Block()
    _randomize(model)
    opt_params = {id(p) for p in model.parameters()}
    x = torch.randn(3, 96)
    with torch.no_grad():
        before = model(x)
    lines = []
    rep = gln.patch(model, log=lines.append)
    assert {n for n, _ in rep.swapped} == {"norm1", "layers.0", "ln", "ln_nobias"}
    assert type(model.norm1) is gln.RMSNorm and type(model.ln) is gln.LayerNorm
    assert type(model.layers[0]) is gln.RMSNorm and model.layers[0].eps == 1e-6
    assert type(model.layers[1]) is GemmaRMSNorm  # another formula: left, and said why
    assert [n for n, _, _ in rep.skipped] == ["layers.1"] and "differs" in rep.skipped[0][2]
    assert {id(p) for p in model.parameters()} == opt_params  # an optimizer built before still steps these
    with torch.no_grad():
        torch.testing.assert_close(model(x), before)
    assert lines and "swapped 4 module(s)" in lines[0] and "layers.1" in lines[0]
    assert gln.patch(model, log=None).swapped == []  # idempotent
    with pytest.raises(TypeError, match="model must be a torch.nn.Module"):
        gln.patch(lambda x: x)


def test_patch_can_leave_a_kind_alone():
    model = Block()
    rep = gln.patch(model, layer_norm=False, hf_rms_norm=False, log=None)
    assert [n for n, _ in rep.swapped] == ["norm1"] and type(model.ln) is nn.LayerNorm
