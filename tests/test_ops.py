"""Public API on a CPU machine: import without a GPU, torch variant works, bad input gets a
clear error naming the argument and the rule, GPU-only variants fail with a clear message."""
import os
import subprocess
import sys

import pytest
import torch

import gluon_lab as gll
from gluon_lab import specs

REF = {s.name: s.reference for s in specs.all_specs()}

ON_GPU = torch.cuda.is_available()


def test_import_does_not_touch_cuda():
    code = ("import sys, gluon_lab; gluon_lab.variants('rms_norm'); "
            "assert 'torch' not in sys.modules or not __import__('torch').cuda.is_initialized(); print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_variants_listed():
    for op in ("rms_norm", "layer_norm", "l2_norm", "add_rms_norm"):
        assert {"torch", "inductor", "triton"} <= set(gll.variants(op))
    assert "torch" in gll.variants("matmul")
    with pytest.raises(ValueError, match="unknown op"):
        gll.variants("softmax")


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
@pytest.mark.parametrize("shape", [(3, 1000), (2, 5, 24), (1, 8)])
def test_torch_variant_matches_float64_on_cpu(dtype, tol, shape):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(*shape, generator=g).to(dtype)
    N = shape[-1]
    w, b, r = (torch.randn(N, generator=g).to(dtype), torch.randn(N, generator=g).to(dtype),
               torch.randn(*shape, generator=g).to(dtype))
    checks = [(gll.rms_norm(x, w, variant="torch"), REF['rms_norm'](x, w, 1e-6)),
              (gll.layer_norm(x, w, b, variant="torch"), REF['layer_norm'](x, w, b, 1e-5)),
              (gll.l2_norm(x, variant="torch"), REF['l2_norm'](x, 1e-12))]
    y, s = gll.add_rms_norm(x, r, w, variant="torch")
    ry, rs = REF['add_rms_norm'](x, r, w, 1e-6)
    checks += [(y, ry), (s, rs)]
    for got, ref in checks:
        assert got.dtype == dtype and got.shape == x.shape
        torch.testing.assert_close(got.double(), ref, atol=tol, rtol=tol)


def test_auto_on_cpu_picks_torch():
    x, w = torch.randn(4, 64), torch.randn(64)
    torch.testing.assert_close(gll.rms_norm(x, w), torch.nn.functional.rms_norm(x, (64, ), w, 1e-6))


def test_empty_input_returns_empty_like_torch():
    x, w = torch.randn(0, 4096, dtype=torch.bfloat16), torch.randn(4096, dtype=torch.bfloat16)
    for v in ("auto", "torch", "triton"):
        y = gll.rms_norm(x, w, variant=v)
        assert y.shape == (0, 4096) and y.dtype == torch.bfloat16
    y, s = gll.add_rms_norm(x, x, w)
    assert y.shape == s.shape == (0, 4096)
    with pytest.raises(ValueError, match="unknown variant"):
        gll.rms_norm(x, w, variant="nope")


x32 = torch.randn(4, 128)
w32 = torch.randn(128)


@pytest.mark.parametrize("call,exc,msg", [
    (lambda: gll.rms_norm(x32.int(), w32), TypeError, r"x\.dtype must be one of"),
    (lambda: gll.rms_norm([1.0], w32), TypeError, "x must be a torch.Tensor"),
    (lambda: gll.rms_norm(x32, torch.randn(64)), ValueError, r"weight must have shape \(128,\)"),
    (lambda: gll.rms_norm(x32, w32.double()), TypeError, r"weight\.dtype must be one of"),
    (lambda: gll.rms_norm(x32, w32.half()), TypeError, r"weight\.dtype must equal x\.dtype"),
    (lambda: gll.rms_norm(x32, None), ValueError, "weight is required"),
    (lambda: gll.rms_norm(x32, w32, eps=-1), ValueError, "eps must be a non-negative"),
    (lambda: gll.layer_norm(x32, w32, torch.randn(3)), ValueError, r"bias must have shape \(128,\)"),
    (lambda: gll.add_rms_norm(x32, torch.randn(4, 64), w32), ValueError, "residual must have x's shape"),
    (lambda: gll.add_rms_norm(x32, x32.half(), w32), TypeError, r"residual\.dtype must equal"),
    (lambda: gll.rms_norm(x32, w32, variant="nope"), ValueError, "unknown variant 'nope'"),
    (lambda: gll.matmul(torch.randn(4, 8), torch.randn(8, 4)), TypeError, "bf16 or fp16"),
    (lambda: gll.matmul(torch.randn(4, 8).half(), torch.randn(7, 4).half()), ValueError, r"a\.shape\[1\]"),
])
def test_bad_input_errors_name_argument_and_rule(call, exc, msg):
    with pytest.raises(exc, match=msg):
        call()


@pytest.mark.skipif(ON_GPU, reason="checks the CPU-only message")
def test_gpu_variant_on_cpu_tensor_is_a_clear_error():
    with pytest.raises(ValueError, match="runs on a CUDA GPU: x is on cpu"):
        gll.rms_norm(x32, w32, variant="triton")
    with pytest.raises(ValueError, match="runs on a CUDA GPU"):
        gll.layer_norm(x32, w32, w32, variant="inductor")


def test_triton_variant_checks_row_layout_and_size():
    from gluon_lab.registry import get_variant
    v = get_variant("rms_norm", "triton")
    with pytest.raises(ValueError, match=r"contiguous in its last dimension"):
        v.check(torch.randn(128, 4).t(), torch.randn(4))
    with pytest.raises(ValueError, match="keeps the whole row in registers"):
        v.check(torch.empty(1, 70000), torch.empty(70000))


def test_byte_models():
    s = {"M": 4096, "N": 5120}
    assert specs.get("rms_norm").bytes(s, "bfloat16") == 2 * 4096 * 5120 * 2 + 5120 * 2
    assert specs.get("layer_norm").bytes(s, "bfloat16") == 2 * 4096 * 5120 * 2 + 2 * 5120 * 2
    assert specs.get("l2_norm").bytes(s, "bfloat16") == 2 * 4096 * 5120 * 2
    assert specs.get("add_rms_norm").bytes(s, "float32") == 4 * 4096 * 5120 * 4 + 5120 * 4
    assert specs.get("matmul").bytes({"M": 8, "N": 16, "K": 32}, "bfloat16") == (8 * 32 + 32 * 16 + 8 * 16) * 2
    assert specs.get("matmul").flops({"M": 8, "N": 16, "K": 32}) == 2 * 8 * 16 * 32
    g = {"B": 2, "C": 8, "H": 3, "W": 5, "G": 4, "layout": "nchw"}
    assert specs.get("group_norm").bytes(g, "bfloat16") == 2 * 2 * 8 * 15 * 2 + 2 * 8 * 2
    assert specs.get("group_norm").flops(g) == 7 * 2 * 8 * 15
