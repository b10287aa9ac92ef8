"""gluon_lab.nn on the GPU: a swapped model runs the gluon-lab kernels (under no_grad) and matches float64;
with grad it trains through eager torch's backward (the kernels have none yet). Through the public API."""
import pytest
import torch
from torch import nn

import gluon_lab.nn as gln

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("variant", ["gluon-regs", "gluon-chunked", "auto"])
def test_swapped_rmsnorm_runs_the_kernel_and_matches_float64(variant):
    torch.manual_seed(0)
    m = nn.RMSNorm(3000, eps=1e-6, device="cuda", dtype=torch.bfloat16)  # N = 3000: not a power of 2
    with torch.no_grad():
        m.weight.copy_(torch.randn(3000, device="cuda") * 0.5 + 1)
    model = nn.Sequential(m)
    rep = gln.patch(model, variant=variant, log=None)
    assert [n for n, _ in rep.swapped] == ["0"] and type(model[0]) is gln.RMSNorm
    x = torch.randn(37, 3000, device="cuda", dtype=torch.bfloat16)
    x[5] = float("nan")  # NaN stays in its row
    with torch.no_grad():
        y = model(x)
    x64 = x.double()
    ref = x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + 1e-6) * m.weight.double()
    ok = torch.ones(37, dtype=torch.bool, device="cuda")
    ok[5] = False
    torch.testing.assert_close(y[ok].double(), ref[ok], rtol=2e-2, atol=2e-2)
    assert torch.isnan(y[5]).all()


def test_a_swapped_model_trains_with_torchs_gradients():
    torch.manual_seed(1)
    ref = nn.Sequential(nn.Linear(256, 256), nn.LayerNorm(256), nn.Linear(256, 8)).cuda()
    mine = nn.Sequential(nn.Linear(256, 256), nn.LayerNorm(256), nn.Linear(256, 8)).cuda()
    mine.load_state_dict(ref.state_dict())
    gln.patch(mine, log=None)
    x = torch.randn(64, 256, device="cuda")
    for m in (ref, mine):
        m(x).square().mean().backward()
    for (n, a), (_, b) in zip(ref.named_parameters(), mine.named_parameters()):
        torch.testing.assert_close(b.grad, a.grad, rtol=1e-4, atol=1e-5, msg=n)
