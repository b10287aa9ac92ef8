"""variant="auto" on the GPU: the table's first variant that takes the input, never one that
raises, and the eager fallback outside the table. Through the public API."""
import pytest
import torch

import gluon_lab as gll
from gluon_lab import selection, specs

pytestmark = pytest.mark.gpu


@pytest.fixture
def table(monkeypatch):
    slug = selection._slug(0)
    cells = [{"shape": {"M": 64, "N": N}, "dtype": "bfloat16", "run": "r1",
              "ms": {"torch": 1.0, "gluon-tma": 0.5, "gluon-chunked": 0.6}} for N in (4096, 131072)]
    t = {"seed": 1, "entries": {slug: {"rms_norm": {"cells": cells, "always": ["gluon-tma", "gluon-chunked"]}}}}
    monkeypatch.setattr(selection, "_table", t)
    monkeypatch.setattr(selection, "_decisions", {})
    return t


def _case(M, N, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(M, N, device="cuda", generator=g).to(torch.bfloat16)
    w = torch.randn(N, device="cuda", generator=g).to(torch.bfloat16)
    return x, w


@pytest.mark.parametrize("M,N,want", [(64, 4096, "gluon-tma"),      # the model's best takes it
                                      (64, 4104, "gluon-chunked"),  # gluon-tma refuses non-power-of-2 N
                                      (64, 131072, "gluon-chunked"),  # too long to cache: chunked streams it
                                      # far from every cell: the op's default, never eager torch while a
                                      # variant that beat it in every cell takes the input
                                      (64, 2 ** 20, "gluon-chunked")])
def test_auto_takes_the_best_eligible_variant(table, M, N, want):
    x, w = _case(M, N)
    spec = specs.get("rms_norm")
    assert selection.choose(spec, (x, w)) == want
    y = gll.rms_norm(x, w)  # never raises, and is right
    ref = spec.reference(x, w, eps=1e-6)
    torch.testing.assert_close(y.double(), ref, atol=2e-2, rtol=2e-2)


def test_auto_without_table_is_eager_torch(monkeypatch):
    monkeypatch.setattr(selection, "_table", {"entries": {}})
    monkeypatch.setattr(selection, "_decisions", {})
    x, w = _case(32, 4096)
    assert selection.choose(specs.get("rms_norm"), (x, w)) == "torch"
    assert torch.equal(gll.rms_norm(x, w), torch.nn.functional.rms_norm(x, (4096, ), w, 1e-6))
