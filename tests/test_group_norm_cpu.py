"""group_norm / instance_norm on CPU: float64 references vs torch, the torch variant through the
public API, validation messages, byte/FLOP models, inputs in both layouts, and records of the two
layouts kept apart by results.load / latest."""
import pytest
import torch
import torch.nn.functional as F

import gluon_lab as gll
from gluon_lab import bench, registry, results, selection, specs
from gluon_lab.specs.group import as_layout
from gluon_lab.results import Record

CL = {4: torch.channels_last, 5: torch.channels_last_3d}


def _rand(shape, layout="nchw", dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(*shape, generator=g, dtype=torch.float64) * 3 + 0.5).to(dtype)
    C = shape[1]
    w = torch.randn(C, generator=g, dtype=torch.float64).to(dtype)
    b = torch.randn(C, generator=g, dtype=torch.float64).to(dtype)
    return as_layout(x, layout), w, b


def _is_channels_last(x):
    return x.movedim(1, -1).is_contiguous() and not x.is_contiguous()


SHAPES = [((2, 6, 5, 7), 3), ((3, 8, 4, 4), 2), ((2, 6, 9), 3), ((2, 4, 3, 5, 2), 2), ((1, 5, 1, 2), 5), ((3, 4, 1, 1), 2)]


@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
@pytest.mark.parametrize("shape,G", SHAPES)
def test_references_match_torch_in_float64(shape, G, layout):
    x, w, b = _rand(shape, layout)
    if layout == "channels_last" and x.shape[1] > 1 and x.numel() // (x.shape[0] * x.shape[1]) > 1:
        assert _is_channels_last(x)
    if x.dim() in CL and layout == "channels_last":
        assert x.is_contiguous(memory_format=CL[x.dim()])
    spatial_one = x.numel() == x.shape[0] * x.shape[1]  # F.instance_norm refuses one spatial element
    for ww, bb in ((w, b), (None, None), (w, None), (None, b)):
        torch.testing.assert_close(specs.get("group_norm").reference(x, G, ww, bb, 1e-5), F.group_norm(x, G, ww, bb, 1e-5),
                                   atol=1e-12, rtol=1e-12)
        if not spatial_one:
            torch.testing.assert_close(specs.get("instance_norm").reference(x, ww, bb, 1e-5),
                                       F.instance_norm(x, weight=ww, bias=bb, use_input_stats=True, eps=1e-5),
                                       atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
def test_torch_variant_equals_torch(dtype, layout):
    x, w, b = _rand((2, 6, 5, 7), layout, dtype)
    for v in ("torch", "auto"):
        y = gll.group_norm(x, 3, w, b, eps=1e-5, variant=v)
        assert y.dtype == dtype and y.shape == x.shape
        assert torch.equal(y, F.group_norm(x, 3, w, b, 1e-5))
        assert torch.equal(gll.group_norm(x, 2, variant=v), F.group_norm(x, 2))
        yi = gll.instance_norm(x, w, b, eps=1e-3, variant=v)
        assert torch.equal(yi, F.instance_norm(x, weight=w, bias=b, use_input_stats=True, eps=1e-3))
    ref = specs.get("group_norm").reference(x, 3, w, b, 1e-5)
    assert bench.compare(gll.group_norm(x, 3, w, b), ref, str(dtype).replace("torch.", ""))["passed"]


@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
def test_fp32_formulas_match_torch(layout):
    x, w, b = _rand((2, 6, 5, 7), layout, torch.bfloat16)
    torch.testing.assert_close(specs.get("group_norm").formula(x, 3, w, b, 1e-5),
                               F.group_norm(x.float(), 3, w.float(), b.float(), 1e-5).to(x.dtype))
    torch.testing.assert_close(specs.get("instance_norm").formula(x, None, b, 1e-5),
                               F.instance_norm(x.float(), bias=b.float(), eps=1e-5).to(x.dtype))


def test_variants_and_auto_fallback():
    for op in ("group_norm", "instance_norm"):
        assert op in gll.OPS and {"torch", "inductor", "gluon-chunked"} <= set(gll.variants(op))
        assert not registry.get_variant(op, "torch").needs_cuda and registry.get_variant(op, "inductor").needs_cuda
    assert selection.FALLBACK == "torch"
    assert {"group_norm", "instance_norm"} <= set(gll.__all__)


def test_empty_input_returns_empty():
    for x in (torch.randn(0, 6, 4, 4), torch.randn(2, 6, 0, 4).to(memory_format=torch.channels_last)):
        y = gll.group_norm(x, 3)
        assert y.shape == x.shape and y.stride() == x.stride()
        assert gll.instance_norm(x, variant="torch").shape == x.shape
    with pytest.raises(ValueError, match="unknown variant"):
        gll.group_norm(torch.randn(0, 6, 4), 3, variant="nope")


x4 = torch.randn(2, 6, 5, 7)
w6 = torch.randn(6)


@pytest.mark.parametrize("call,exc,msg", [
    (lambda: gll.group_norm(x4, 4), ValueError, r"num_groups must be a positive int dividing C = x\.shape\[1\] = 6; got 4"),
    (lambda: gll.group_norm(x4, 0), ValueError, "num_groups must be a positive int dividing C"),
    (lambda: gll.group_norm(x4, -3), ValueError, "num_groups must be a positive int dividing C"),
    (lambda: gll.group_norm(x4, 3.0), TypeError, r"num_groups must be a positive int .*got 3\.0 \(float\)"),
    (lambda: gll.group_norm(x4, True), TypeError, "num_groups must be a positive int"),
    (lambda: gll.group_norm(torch.randn(2, 6), 3), ValueError, "x must have at least 3 dimensions"),
    (lambda: gll.instance_norm(torch.randn(6)), ValueError, "x must have at least 3 dimensions"),
    (lambda: gll.group_norm(x4.int(), 3), TypeError, r"x\.dtype must be one of"),
    (lambda: gll.group_norm(x4, 3, torch.randn(5)), ValueError, r"weight must have shape \(6,\) to match C"),
    (lambda: gll.group_norm(x4, 3, torch.randn(6, 1)), ValueError, r"weight must have shape \(6,\)"),
    (lambda: gll.group_norm(x4, 3, w6.half()), TypeError, r"weight\.dtype must equal x\.dtype"),
    (lambda: gll.group_norm(x4, 3, w6, torch.randn(7)), ValueError, r"bias must have shape \(6,\)"),
    (lambda: gll.instance_norm(x4, bias=w6.bfloat16()), TypeError, r"bias\.dtype must equal x\.dtype"),
    (lambda: gll.instance_norm(x4, torch.randn(3)), ValueError, r"weight must have shape \(6,\)"),
    (lambda: gll.group_norm(x4, 3, eps=-1e-5), ValueError, "eps must be a non-negative"),
    (lambda: gll.group_norm(torch.randn(1, 6, 1, 1), 3), ValueError, r"more than one value per channel"),
    (lambda: gll.instance_norm(torch.randn(2, 6, 1, 1)), ValueError, r"more than one spatial element"),
    (lambda: gll.group_norm(x4, 3, variant="nope"), ValueError, "unknown variant 'nope' for group_norm"),
    (lambda: gll.instance_norm(x4, variant="nope"), ValueError, "unknown variant 'nope' for instance_norm"),
])
def test_bad_input_errors_name_argument_and_rule(call, exc, msg):
    with pytest.raises(exc, match=msg):
        call()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only message")
def test_inductor_on_cpu_tensor_is_a_clear_error():
    with pytest.raises(ValueError, match="runs on a CUDA GPU: x is on cpu"):
        gll.group_norm(x4, 3, w6, w6, variant="inductor")

    class OnCuda:  # stands in for a CUDA x: the device rule skips num_groups (an int) and None
        is_cuda = True

    with pytest.raises(ValueError, match="runs on a CUDA GPU: weight is on cpu"):
        registry.check_runnable(registry.get_variant("group_norm", "inductor"), (OnCuda(), 3, w6, None))


def test_byte_and_flop_models():
    s = {"B": 8, "C": 64, "H": 32, "W": 48, "G": 16, "layout": "channels_last"}
    n = 8 * 64 * 32 * 48
    assert specs.get("group_norm").bytes(s, "bfloat16") == 2 * n * 2 + 2 * 64 * 2
    assert specs.get("instance_norm").bytes({k: v for k, v in s.items() if k != "G"}, "float32") \
        == 2 * n * 4 + 2 * 64 * 4
    assert specs.get("group_norm").flops(s) == specs.get("instance_norm").flops(s) == 7 * n
    assert specs.get("group_norm").bytes({"B": 2, "C": 4, "D": 3, "H": 5, "W": 7, "G": 2}, "float16") \
        == 2 * (2 * 4 * 3 * 5 * 7) * 2 + 2 * 4 * 2


@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
def test_make_inputs_layout_and_groups(layout):
    s = {"B": 2, "C": 6, "H": 5, "W": 7, "G": 3, "layout": layout}
    x, G, w, b = bench.make_inputs("group_norm", s, "bfloat16", seed=3, device_="cpu")
    assert G == 3 and x.shape == (2, 6, 5, 7) and w.shape == b.shape == (6, ) and x.dtype == torch.bfloat16
    assert x.is_contiguous(memory_format=torch.channels_last) == (layout == "channels_last")
    assert x.is_contiguous() == (layout == "nchw")
    xi, wi, bi = bench.make_inputs("instance_norm", {k: v for k, v in s.items() if k != "G"}, "float32", seed=3,
                                   device_="cpu")
    assert xi.shape == (2, 6, 5, 7) and wi.shape == (6, ) and xi.dtype == torch.float32
    out = specs.get("group_norm").alloc_outputs((x, G, w, b), fill=float("nan"))
    assert out.stride() == x.stride() and out.isnan().all()
    copies = bench.clone_inputs((x, G, w, b))
    assert copies[1] == 3 and copies[0].stride() == x.stride() and copies[0].data_ptr() != x.data_ptr()
    ref = bench.reference_outputs("group_norm", (x, G, w, b))
    assert ref.dtype == torch.float64 and ref.shape == x.shape
    assert bench.compare(F.group_norm(x, G, w, b, 1e-5), ref, "bfloat16")["passed"]
    assert bench.compare(F.instance_norm(xi, weight=wi, bias=bi, eps=1e-5),
                         bench.reference_outputs("instance_norm", (xi, wi, bi)), "float32")["passed"]
    assert specs.get("group_norm").scalars["eps"] == specs.get("instance_norm").scalars["eps"] == 1e-5
    with pytest.raises(ValueError, match="layout"):
        bench.make_inputs("group_norm", {**s, "layout": "nhwc"}, "bfloat16", seed=3, device_="cpu")


def _rec(layout, ms, ts="2026-01-01T00:00:00+00:00", run_id="a", op="group_norm", G=16, variant="torch"):
    shape = {"B": 8, "C": 64, "H": 32, "W": 32, "layout": layout}
    if G is not None:
        shape["G"] = G
    return Record(op=op, variant=variant, pattern="baseline", shape=shape, dtype="bfloat16", ms_median=ms,
                  timer="cudagraph", passed=True, run_id=run_id, timestamp=ts)


def test_results_keep_layouts_apart(tmp_path):
    p = tmp_path / "h200" / "nb.jsonl"
    t2 = "2026-02-01T00:00:00+00:00"
    results.append_records(p, [_rec("nchw", 1.0), _rec("channels_last", 2.0),
                               _rec("nchw", 3.0, ts=t2, run_id="b"),  # newer nchw replaces the first
                               _rec("nchw", 4.0, G=32),  # another G is another case
                               _rec("nchw", 5.0, op="instance_norm", G=None)])
    df = results.load(tmp_path)
    assert len(df) == 5 and list(df["layout"])[:2] == ["nchw", "channels_last"]
    assert list(df["B"]) == [8] * 5 and list(df["C"]) == [64] * 5 and list(df["H"]) == [32] * 5
    assert str(df["G"].dtype) == "Int64" and df["G"].isna().sum() == 1 and df["M"].isna().all()
    lat = results.latest(df)
    assert sorted(lat["ms_median"]) == [2.0, 3.0, 4.0, 5.0]


def test_auto_features_keep_layouts_apart_and_measure_group_sizes():
    """The selection model's features: another layout is never near; another G is one octave of group bytes
    (and half an octave of groups) away."""
    spec = specs.get("group_norm")
    x = torch.empty(8, 64, 32, 32)
    f = lambda *a: selection.features(spec, spec.shape_of(*a), "bfloat16")  # noqa: E731
    nchw = f(x, 16)
    assert selection.distance(nchw, "bfloat16", f(x.to(memory_format=torch.channels_last), 16), "bfloat16") == float("inf")
    assert selection.distance(nchw, "bfloat16", f(x, 32), "bfloat16") == pytest.approx((1 + 0.25) ** 0.5)
