"""gluon-tma on the H200 (marked gpu): every op x dtype x N x M against float64, poisoned outputs,
both store paths, large-magnitude fp16 rows, NaN/Inf propagation, odd layouts."""
import pytest
import row_norm_gpu_checks as checks

pytestmark = pytest.mark.gpu

OPS = ("rms_norm", "layer_norm", "l2_norm", "add_rms_norm")
DTYPES = ("bfloat16", "float16", "float32")


def _largest(op, dtype):
    from gluon_lab.kernels.tma_cache import TmaCacheConfig
    return TmaCacheConfig.max_n(op, dtype)


def _Ns(op, dtype):
    return sorted({1024, 4096, 8192, 16384, _largest(op, dtype)} & set(range(0, _largest(op, dtype) + 1)))


CASES = [(op, dt, N, M) for op in OPS for dt in DTYPES for N in _Ns(op, dt) for M in (1, 3, 1000, 4096)]


@pytest.mark.parametrize("op,dtype,N,M", CASES, ids=lambda v: str(v))
def test_gluon_tma_matches_float64(op, dtype, N, M):
    from gluon_lab import bench
    inputs = bench.make_inputs(op, {"M": M, "N": N}, dtype, seed=N + M)
    res = bench.check_correctness(op, "gluon-tma", inputs)
    assert res["passed"], res


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("N", [1024, 8192])
@pytest.mark.parametrize("rows,warps,one_box", [(1, 4, True), (2, 4, False), (4, 4, True), (1, 8, False)])
def test_gluon_tma_store_paths_and_rows_per_cta(op, N, rows, warps, one_box):
    from gluon_lab import bench
    from gluon_lab.kernels.tma_cache import TmaCacheConfig
    for ts, pt in ((False, False), (True, True), (False, True)):
        cfg = TmaCacheConfig(num_warps=warps, rows_per_cta=rows, tma_store=ts, one_box=one_box, param_tma=pt)
        if N % (8 * 32 * warps):
            continue  # refused before launch (tests/test_tma_cache.py checks the message)
        inputs = bench.make_inputs(op, {"M": 1001, "N": N}, "bfloat16", seed=rows)
        res = bench.check_correctness(op, "gluon-tma", inputs, config=cfg)
        assert res["passed"], (cfg, res)


@pytest.mark.parametrize("op", OPS)
def test_large_magnitude_fp16_rows(op):
    checks.large_magnitude_fp16_rows(op, "gluon-tma", 8192)


@pytest.mark.parametrize("op", OPS)
def test_nan_inf_propagate_like_torch(op):
    checks.nan_inf_propagate_like_torch(op, "gluon-tma", 4096)


def test_leading_dims_and_strided_rows():
    checks.leading_dims_and_strided_rows("gluon-tma", 2048)


def test_bad_gpu_inputs_are_refused_before_launch():
    import torch
    import gluon_lab as gll
    w = torch.randn(2048, device="cuda", dtype=torch.bfloat16)
    big = torch.randn(64, 2052, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="row stride must be a multiple of 16 bytes"):
        gll.rms_norm(big[:, :2048], w, variant="gluon-tma")
    with pytest.raises(ValueError, match="16-byte aligned"):
        gll.rms_norm(big.view(-1)[1:1 + 2048 * 4].view(4, 2048), w, variant="gluon-tma")
    with pytest.raises(ValueError, match="power-of-2 N"):
        gll.rms_norm(torch.randn(4, 5120, device="cuda", dtype=torch.bfloat16),
                     torch.randn(5120, device="cuda", dtype=torch.bfloat16), variant="gluon-tma")
    with pytest.raises(ValueError, match="power-of-2 N"):
        gll.rms_norm(torch.randn(2, 131072, device="cuda", dtype=torch.bfloat16),
                     torch.randn(131072, device="cuda", dtype=torch.bfloat16), variant="gluon-tma")
    with pytest.raises(ValueError, match="on cpu"):
        gll.rms_norm(torch.randn(4, 2048, dtype=torch.bfloat16), w.cpu(), variant="gluon-tma")
