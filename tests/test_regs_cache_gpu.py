"""gluon-regs on the H200 (marked gpu): every op x dtype x N (powers of 2 and odd hidden sizes, padded
lanes masked) x M (ragged) against float64 with poisoned outputs (bench.check_correctness), every
warps x rows config of the 01 'regs' study, large-magnitude fp16 rows, NaN/Inf propagation, leading
dims and strided rows through the public API."""
import pytest
import row_norm_gpu_checks as checks

pytestmark = pytest.mark.gpu

OPS = ("rms_norm", "layer_norm", "l2_norm", "add_rms_norm")
DTYPES = ("bfloat16", "float16", "float32")
NS = (256, 1000, 2880, 4096, 5120, 7168, 8192, 14336, 16384, 32768)


def _takes(op, N, dtype, **knobs):
    from gluon_lab.kernels.regs_cache import RegsConfig
    try:
        RegsConfig.make(op, N, dtype, **knobs).validate(op, N, dtype)
    except ValueError:
        return False
    return True


CASES = [(op, dt, N, M) for op in OPS for dt in DTYPES for N in NS for M in (1, 3, 1001)
         if _takes(op, N, dt)]
# the list comes from the code under test: it must not shrink when the heuristic or validate changes
assert len(CASES) == len(OPS) * len(DTYPES) * len(NS) * 3, "gluon-regs refused a case of NS x DTYPES"


@pytest.mark.parametrize("op,dtype,N,M", CASES, ids=lambda v: str(v))
def test_gluon_regs_matches_float64(op, dtype, N, M):
    from gluon_lab import bench
    inputs = bench.make_inputs(op, {"M": M, "N": N}, dtype, seed=N + M)
    res = bench.check_correctness(op, "gluon-regs", inputs)
    assert res["passed"], res


# every config the 01 'regs' study can time (refused ones are tests/test_regs_cache.py's: their messages)
CONFIGS = [(op, N, w, r) for op in OPS for N in (1024, 5120, 8192, 16384) for w in (4, 8, 16, 32) for r in (1, 2)
           if _takes(op, N, "bfloat16", num_warps=w, rows=r)]


@pytest.mark.parametrize("op,N,warps,rows", CONFIGS, ids=lambda v: str(v))
def test_gluon_regs_configs(op, N, warps, rows):
    from gluon_lab import bench
    from gluon_lab.kernels.regs_cache import RegsConfig
    cfg = RegsConfig(num_warps=warps, rows=rows)
    inputs = bench.make_inputs(op, {"M": 999, "N": N}, "bfloat16", seed=warps * rows)
    res = bench.check_correctness(op, "gluon-regs", inputs, config=cfg)
    assert res["passed"], (cfg, res)


@pytest.mark.parametrize("op", OPS)
def test_large_magnitude_fp16_rows(op):
    checks.large_magnitude_fp16_rows(op, "gluon-regs", 6144)


@pytest.mark.parametrize("op", OPS)
def test_nan_inf_propagate_like_torch(op):
    checks.nan_inf_propagate_like_torch(op, "gluon-regs", 5120)


def test_leading_dims_and_strided_rows():
    checks.leading_dims_and_strided_rows("gluon-regs", 2880)


def test_add_rms_norm_with_its_own_strides_and_out():
    """x, residual and the caller's (y, s) with four different row strides: each is read or written
    through its own stride (a mix-up between them would put rows in the wrong place). The public
    add_rms_norm takes no out= (it allocates its outputs): the strided inputs go through it, and the
    caller's strided (y, s) through the registered variant's own function, which takes out=
    (supports_out; what bench.check_correctness and the timers call)."""
    import torch
    import gluon_lab as gll
    from gluon_lab import registry
    N = 2880
    mk = lambda pitch: torch.randn(257, pitch, device="cuda", dtype=torch.bfloat16)[:, :N]  # noqa: E731
    x, r = mk(3072), mk(4096)
    w = torch.randn(N, device="cuda", dtype=torch.bfloat16)
    ry, rs = gll.add_rms_norm(x.contiguous(), r.contiguous(), w, variant="torch")
    # the public API: x and residual read through their own strides
    ay, as_ = gll.add_rms_norm(x, r, w, variant="gluon-regs")
    torch.testing.assert_close(as_, rs, atol=0, rtol=0)
    torch.testing.assert_close(ay, ry, atol=2e-2, rtol=2e-2)
    # the variant with the caller's outputs: y and s written through their own strides, nothing past N
    v = registry.get_variant("add_rms_norm", "gluon-regs")
    assert v.supports_out
    registry.check_runnable(v, (x, r, w))  # the rules the public call checks before it runs the variant
    y_buf = torch.full((257, 3200), float("nan"), device="cuda", dtype=torch.bfloat16)
    s_buf = torch.full((257, 3456), float("nan"), device="cuda", dtype=torch.bfloat16)
    y, s = y_buf[:, :N], s_buf[:, :N]
    gy, gs = v.fn(x, r, w, **v.spec.default_scalars(), out=(y, s))  # eps as the public call defaults it
    torch.cuda.synchronize()
    assert gy.data_ptr() == y.data_ptr() and gs.data_ptr() == s.data_ptr()
    assert gy.stride() == (3200, 1) and gs.stride() == (3456, 1)
    torch.testing.assert_close(gs, rs, atol=0, rtol=0)
    torch.testing.assert_close(gy, ry, atol=2e-2, rtol=2e-2)
    assert torch.isnan(y_buf[:, N:]).all() and torch.isnan(s_buf[:, N:]).all()  # the pitch padding untouched
