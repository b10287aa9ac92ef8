"""gluon-chunked on the H200 (marked gpu): every op x dtype x the N set of issue #4 plus edge N and
streaming N, ragged M, against float64; LayerNorm with a large mean (the zero-filled tail must not
enter the variance, cached and streaming); NaN propagation."""
import pytest

pytestmark = pytest.mark.gpu

NS = (1536, 2560, 2880, 3584, 5120, 6144, 7168, 12288, 14336, 18432, 20480, 24576, 8, 24, 1000, 4104,
      53248, 131072, 131080)  # the last three stream (131080: a partial last chunk)
CASES = [(op, dt, N, M) for op in ("rms_norm", "layer_norm", "l2_norm", "add_rms_norm")
         for dt in ("bfloat16", "float16", "float32") for N in NS for M in (3, 1001)]


@pytest.mark.parametrize("op,dtype,N,M", CASES, ids=lambda v: str(v))
def test_gluon_chunked_matches_float64(op, dtype, N, M):
    from gluon_lab import bench
    inputs = bench.make_inputs(op, {"M": M, "N": N}, dtype, seed=N * 3 + M)
    res = bench.check_correctness(op, "gluon-chunked", inputs)
    assert res["passed"], res


@pytest.mark.parametrize("N", [2880, 5120, 4104, 1000, 131080])
def test_layer_norm_tail_lanes_do_not_enter_the_variance(N):
    """x = 100 + noise: a padded lane would add (0 - 100)^2 per lane to the variance."""
    import torch
    from gluon_lab import bench
    x, w, b = bench.make_inputs("layer_norm", {"M": 257, "N": N}, "float32", seed=N)
    x = x + 100.0
    res = bench.check_correctness("layer_norm", "gluon-chunked", (x, w, b))
    assert res["passed"], res


def test_nan_propagates():
    import torch
    import gluon_lab as gll
    from gluon_lab import bench
    x, w = bench.make_inputs("rms_norm", {"M": 8, "N": 5120}, "bfloat16", seed=1)
    x[3, 5000] = float("nan")  # in the last (partial) chunk
    y = gll.rms_norm(x, w, variant="gluon-chunked")
    assert torch.isnan(y[3]).all() and not torch.isnan(y[[0, 1, 2, 4, 5, 6, 7]]).any()
