"""The correctness comparator and the timer arithmetic, on CPU tensors."""
import math

import pytest
import torch

from gluon_lab import bench, specs


def _case(dtype=torch.bfloat16):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(16, 1000, generator=g).to(dtype)
    w = torch.randn(1000, generator=g).to(dtype)
    return x, w, specs.get("rms_norm").reference(x, w, 1e-6)


def test_correct_output_passes():
    x, w, ref = _case()
    r = bench.compare(torch.nn.functional.rms_norm(x, (1000, ), w, 1e-6), ref, "bfloat16")
    assert r["passed"] and 0 < r["max_abs_err"] < 0.1 and r["rel_err"] < 1e-2


def test_unwritten_poisoned_rows_fail():
    x, w, ref = _case()
    out = torch.full_like(x, float("nan"))
    out[:15] = ref[:15].to(x.dtype)
    assert not bench.compare(out, ref, "bfloat16")["passed"]


def test_nan_never_passes_and_nan_in_reference_must_be_matched():
    x, w, ref = _case(torch.float32)
    good = ref.float()
    bad = good.clone()
    bad[3, 3] = float("nan")
    assert bench.compare(good, ref, "float32")["passed"]
    assert not bench.compare(bad, ref, "float32")["passed"]
    ref2 = ref.clone()
    ref2[3] = float("nan")
    assert not bench.compare(good, ref2, "float32")["passed"]  # torch would propagate NaN; we must too
    good2 = good.clone()
    good2[3] = float("nan")
    assert bench.compare(good2, ref2, "float32")["passed"]


def test_inf_must_match():
    ref = torch.tensor([1.0, float("inf")], dtype=torch.float64)
    assert not bench.compare(torch.tensor([1.0, float("-inf")]), ref, "float32")["passed"]
    assert bench.compare(torch.tensor([1.0, float("inf")]), ref, "float32")["passed"]


def test_wrong_values_fail_and_tolerance_is_per_dtype():
    x, w, ref = _case(torch.float32)
    assert not bench.compare((ref * 1.001).float(), ref, "float32")["passed"]
    assert bench.compare((ref * 1.001).float(), ref, "bfloat16")["passed"]


def test_tuple_outputs_compare_each():
    x, w, ref = _case(torch.float32)
    assert not bench.compare((ref.float(), ref.float() + 1), (ref, ref), "float32")["passed"]


def test_reference_chunks_agree():
    x = torch.randn(37, 64, dtype=torch.float32)
    w = torch.randn(64)
    full = specs.get("rms_norm").reference(x, w, 1e-6)
    chunked = bench.reference_outputs("rms_norm", (x, w), row_chunk=5)
    assert torch.equal(full, chunked)


@pytest.mark.parametrize("nbytes", [2**20, 64 * 2**20, 2 * 2**30])
def test_rotation_copies_exceed_three_l2(nbytes):
    l2 = 50 * 2**20
    k = bench.rotation_copies(nbytes, l2)
    assert k >= 2 and k * nbytes > 3 * l2


def test_rotation_refuses_cases_it_cannot_time_cold():
    with pytest.raises(ValueError, match="rotated copies"):
        bench.rotation_copies(100 * 2**10, 50 * 2**20)  # 100 KB calls would need > 256 copies


def test_small_outputs_are_held_to_a_relative_standard():
    """l2_norm outputs are ~1/sqrt(N): a 20% scaling error must fail even though it is far below
    the absolute bf16 tolerance."""
    x = torch.randn(64, 16384, dtype=torch.float32)
    ref = specs.get("l2_norm").reference(x)
    assert ref.abs().max() < 0.05
    assert bench.compare(ref.to(torch.bfloat16), ref, "bfloat16")["passed"]
    assert not bench.compare((ref * 1.2).to(torch.bfloat16), ref, "bfloat16")["passed"]
    assert not bench.compare((ref * 1.02).float(), ref, "float32")["passed"]


def test_metrics():
    assert bench.gbps(4e9, 1.0) == pytest.approx(4000.0)
    assert bench.tflops(2e12, 1000.0) == pytest.approx(2.0)
    assert math.isclose(bench.gbps(specs.get("l2_norm").bytes({"M": 1, "N": 1}, "float32"), 1e-3), 8e-3)


def test_graph_timer_refuses_shared_output_buffers():
    a, b = torch.empty(4), torch.empty(4)
    bench.check_distinct_outputs([a, b, (torch.empty(2), torch.empty(2))])
    with pytest.raises(RuntimeError, match="share an output buffer"):
        bench.check_distinct_outputs([a, a[:]])


def test_cudnn_benchmark_in_a_case_config_sets_cudnn_for_that_case():
    """config.cudnn_benchmark labels how cuDNN picked its algorithm: bench sets it for the case whoever runs it
    (a plan, refresh, the held-out check) and restores it after."""
    import torch
    from gluon_lab import bench
    seen = []

    class Fake:
        def _measure(self, *a, **k):
            seen.append(torch.backends.cudnn.benchmark)
            return "rec"

    before = torch.backends.cudnn.benchmark
    for want in (True, False, None):
        assert bench.Session.measure(Fake(), "conv2d", "torch", {}, "bfloat16",
                                     config=None if want is None else {"cudnn_benchmark": want}) == "rec"
        assert torch.backends.cudnn.benchmark == before
    assert seen == [True, False, before]
