"""GPU tests (marked gpu; skipped without an sm_90+ GPU). Run on the H200: pytest -m gpu."""
import math

import pytest

pytestmark = pytest.mark.gpu

OPS = ("rms_norm", "layer_norm", "l2_norm", "add_rms_norm")


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("M,N", [(1, 8), (3, 1000), (1000, 4104), (257, 5120)])
def test_baselines_match_float64(op, dtype, M, N):
    from gluon_lab import bench
    for v in ("torch", "triton"):
        inputs = bench.make_inputs(op, {"M": M, "N": N}, dtype, seed=M * 7 + N)
        res = bench.check_correctness(op, v, inputs)
        assert res["passed"], (op, v, dtype, M, N, res)


def test_large_magnitude_fp16_rows_do_not_overflow():
    from gluon_lab import bench
    inputs = bench.make_inputs("rms_norm", {"M": 64, "N": 4096}, "float16", seed=3, scale=1e4)
    res = bench.check_correctness("rms_norm", "triton", inputs)
    assert res["passed"], res


@pytest.mark.parametrize("op", OPS)
def test_nan_row_propagates_like_torch(op):
    import torch
    import gluon_lab as gll
    from gluon_lab import bench
    inputs = list(bench.make_inputs(op, {"M": 8, "N": 2048}, "bfloat16", seed=5))
    inputs[0][3, 17] = float("nan")
    for v in ("torch", "triton"):
        y = getattr(gll, op)(*inputs, variant=v)
        y = y[0] if isinstance(y, tuple) else y
        assert torch.isnan(y[3]).all() and not torch.isnan(y[[0, 1, 2, 4, 5, 6, 7]]).any(), (op, v)


def test_poisoned_output_is_caught():
    """A variant that leaves part of its output unwritten must fail the check."""
    import torch
    from gluon_lab import bench
    inputs = bench.make_inputs("rms_norm", {"M": 16, "N": 1024}, "bfloat16", seed=9)
    from gluon_lab import specs
    out = specs.get("rms_norm").alloc_outputs(inputs, fill=float("nan"))
    good = bench.reference_outputs("rms_norm", inputs).to(torch.bfloat16)
    out[:8] = good[:8]  # half the rows "forgotten"
    assert not bench.compare(out, bench.reference_outputs("rms_norm", inputs), "bfloat16")["passed"]
    assert bench.compare(good, bench.reference_outputs("rms_norm", inputs), "bfloat16")["passed"]


def test_timers_and_session(tmp_path):
    from gluon_lab import bench, results
    s = bench.Session("gpu-test", str(tmp_path), copy_gib=0.5, matmul_n=4096)
    c = s.ceilings
    spec = s.spec
    assert spec is not None
    assert 0.5 * spec.hbm_gbps < c.copy_gbps < spec.hbm_gbps, c.copy_gbps
    assert 0.2 * spec.bf16_tflops < c.matmul_tflops < spec.bf16_tflops, c.matmul_tflops
    r1 = s.measure("rms_norm", "triton", {"M": 4096, "N": 4096}, "bfloat16", timer="cudagraph")
    r2 = s.measure("rms_norm", "triton", {"M": 4096, "N": 4096}, "bfloat16", timer="do_bench-l2flush")
    for r in (r1, r2):
        assert r.passed and r.ms_min <= r.ms_median <= r.ms_max and r.n_reps >= 10
        assert 0 < r.sol_datasheet_pct < 100, r
    # the graph timer does not include host launch overhead: never slower than do_bench here
    assert r1.ms_median <= r2.ms_median * 1.10
    r3 = s.measure("rms_norm", "inductor", {"M": 1000, "N": 5120}, "bfloat16")
    assert r3.passed and r3.timer == "cudagraph"
    r4 = s.measure_copy({"M": 4096, "N": 4096}, "bfloat16")
    assert r4.gbps > 0
    where = s.save()
    df = results.load(tmp_path)
    assert len(df) == 6 and set(df["timer"].dropna()) == {"cudagraph", "do_bench-l2flush"}
    assert df["gpu_name"].str.contains("H").all() and (df["run_id"] == df["run_id"].iloc[0]).all()


def test_rotation_exceeds_l2():
    from gluon_lab import bench, device
    l2 = device.gpu_info()["l2_bytes"]
    nbytes = 4096 * 4096 * 2 * 2
    k = bench.rotation_copies(nbytes, l2)
    assert k * nbytes > 3 * l2

