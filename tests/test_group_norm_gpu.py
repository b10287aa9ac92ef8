"""gluon-chunked and gluon-split GroupNorm / InstanceNorm on the H200 (marked gpu): NCHW and
channels-last, cached and streamed groups, every slice count, odd shapes, 3-D and 5-D inputs, against
float64 with poisoned outputs; large means; NaN."""
import pytest

pytestmark = pytest.mark.gpu

# (B, C, H, W, G): SD-style, odd channel counts per group (Cg = 10, 20, 40, 6, 3), ragged spatial sizes
SHAPES = [(2, 320, 32, 32, 32), (2, 640, 16, 16, 32), (1, 1280, 16, 16, 32), (3, 48, 7, 8, 8), (3, 24, 6, 12, 8),
          (2, 64, 33, 8, 32), (1, 320, 64, 64, 32)]


def _inputs(op, B, C, H, W, G, layout, dtype, seed, mean=0.0):
    from gluon_lab import bench
    shape = {"B": B, "C": C, "H": H, "W": W, "layout": layout}
    if op == "group_norm":
        shape["G"] = G
    inputs = bench.make_inputs(op, shape, dtype, seed=seed)
    if mean:
        x = inputs[0] + mean
        inputs = (x, ) + tuple(inputs[1:])
    return inputs


@pytest.mark.parametrize("variant", ["gluon-chunked", "gluon-split"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("op", ["group_norm", "instance_norm"])
def test_matches_float64(op, shape, layout, dtype, variant):
    from gluon_lab import bench
    from gluon_lab.kernels import chunked as C
    B, Cc, H, W, G = shape
    if variant == "gluon-chunked" and layout == "channels_last" and not C.CHANNELS_LAST_ENABLED:
        inputs = _inputs(op, B, Cc, H, W, G, layout, dtype, seed=1)
        with pytest.raises(ValueError, match="channels-last"):
            getattr(__import__("gluon_lab"), op)(*inputs, variant=variant)
        return
    if (layout == "nchw" and (H * W * C.ITEMSIZE[dtype]) % 16) or (layout == "channels_last" and (Cc * C.ITEMSIZE[dtype]) % 16):
        pytest.skip("refused by the 16-byte rule (tests/test_group_norm_cpu.py checks the message)")
    inputs = _inputs(op, B, Cc, H, W, G, layout, dtype, seed=sum(shape))
    res = bench.check_correctness(op, variant, inputs)
    assert res["passed"], res


@pytest.mark.parametrize("cached", [True, False])
@pytest.mark.parametrize("layout", ["nchw"])
def test_cached_and_streamed_groups_agree_with_float64(cached, layout):
    from gluon_lab import bench
    from gluon_lab.kernels import chunked as C
    B, Cc, H, W, G = 2, 320, 32, 32, 32
    x, g, w, b = _inputs("group_norm", B, Cc, H, W, G, layout, "bfloat16", seed=5, mean=50.0)
    plan = C.GroupPlan.make(layout, Cc, H * W, G, "bfloat16", cached=cached, stages=None if cached else 3)
    assert plan.cached == cached
    res = bench.check_correctness("group_norm", "gluon-chunked", (x, g, w, b), config=plan)
    assert res["passed"], res


@pytest.mark.parametrize("slices", [1, 3, 7, None])
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
def test_split_every_slice_count_agrees_with_float64(layout, dtype, slices):
    """gluon-split with K forced (1, 3, 7 and the heuristic's) on x = 50 + N(0, 1): the slices' shifted
    sums must merge without cancellation, ragged last slices included (S = 33 x 40)."""
    from gluon_lab import bench
    from gluon_lab.kernels import chunked as C
    B, Cc, H, W, G = 2, 320, 33, 40, 32
    x, g, w, b = _inputs("group_norm", B, Cc, H, W, G, layout, dtype, seed=7, mean=50.0)
    plan = C.SplitPlan.make(layout, B, Cc, H * W, G, dtype, slices=slices)
    if slices is not None:
        assert plan.K == slices
    res = bench.check_correctness("group_norm", "gluon-split", (x, g, w, b), config=plan)
    assert res["passed"], res
    xi, wi, bi = _inputs("instance_norm", B, Cc, H, W, G, layout, dtype, seed=8, mean=-20.0)
    plan = C.SplitPlan.make(layout, B, Cc, H * W, Cc, dtype, slices=slices)
    res = bench.check_correctness("instance_norm", "gluon-split", (xi, wi, bi), config=plan)
    assert res["passed"], res


@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
@pytest.mark.parametrize("shape", [(3, 64, 40), (2, 32, 3, 8, 10)], ids=str)
def test_split_3d_and_5d_inputs(shape, layout):
    import torch
    from gluon_lab import bench
    from gluon_lab.specs.group import as_layout
    g = torch.Generator(device="cuda").manual_seed(11)
    x = as_layout(torch.randn(*shape, device="cuda", generator=g).to(torch.bfloat16) * 2 + 1, layout)
    w = torch.randn(shape[1], device="cuda", generator=g).to(torch.bfloat16)
    b = torch.randn(shape[1], device="cuda", generator=g).to(torch.bfloat16)
    res = bench.check_correctness("group_norm", "gluon-split", (x, 8, w, b))
    assert res["passed"], res


@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
def test_split_no_affine_and_nan(layout):
    import torch
    import gluon_lab as gll
    from gluon_lab.specs.group import as_layout
    x = torch.randn(2, 64, 16, 16, device="cuda", dtype=torch.bfloat16)
    x[1, 9, 3, 3] = float("nan")  # group 4 of sample 1 (Cg = 2)
    x = as_layout(x, layout)
    y = gll.group_norm(x, 32, variant="gluon-split")
    ref = gll.group_norm(x, 32, variant="torch")
    assert y.stride() == x.stride()
    assert torch.equal(torch.isnan(y), torch.isnan(ref)) and torch.isnan(y[1, 8:10]).all()
    fin = ~torch.isnan(ref)
    torch.testing.assert_close(y[fin].float(), ref[fin].float(), atol=3e-2, rtol=3e-2)


def test_no_affine_and_nan():
    import torch
    import gluon_lab as gll
    x = torch.randn(2, 64, 16, 16, device="cuda", dtype=torch.bfloat16)
    x[1, 9, 3, 3] = float("nan")  # group 4 of sample 1 (Cg = 2)
    y = gll.group_norm(x, 32, variant="gluon-chunked")
    ref = gll.group_norm(x, 32, variant="torch")
    assert torch.equal(torch.isnan(y), torch.isnan(ref)) and torch.isnan(y[1, 8:10]).all()
    fin = ~torch.isnan(ref)
    torch.testing.assert_close(y[fin].float(), ref[fin].float(), atol=3e-2, rtol=3e-2)


@pytest.mark.parametrize("variant", ["gluon-chunked", "gluon-split"])
def test_output_keeps_the_memory_format(variant):
    import torch
    import gluon_lab as gll
    x = torch.randn(2, 64, 8, 8, device="cuda", dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    y = gll.group_norm(x, 8, variant=variant)
    assert y.is_contiguous(memory_format=torch.channels_last)


@pytest.mark.parametrize("packed", [True, False])
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("shape", [(16, 96, 16, 16, 32), (3, 40, 5, 8, 8), (2, 64, 64, 64, 64)], ids=str)
def test_packed_groups_agree_with_float64(shape, dtype, packed):
    """gluon-chunked's packed path (several whole NCHW groups per CTA in registers) and the TMA path it
    replaces for groups <= PACK_MAX_ELEMS, on x = 50 + N(0, 1), ragged last CTA (B * G not a multiple
    of the rows per CTA), both ops."""
    from gluon_lab import bench
    from gluon_lab.kernels import chunked as C
    B, Cc, H, W, G = shape
    for op, groups in (("group_norm", G), ("instance_norm", Cc)):
        inputs = _inputs(op, B, Cc, H, W, G, "nchw", dtype, seed=B + H, mean=50.0)
        plan = C.GroupPlan.make("nchw", Cc, H * W, groups, dtype, packed=packed)
        assert plan.packed == packed
        res = bench.check_correctness(op, "gluon-chunked", inputs, config=plan)
        assert res["passed"], (op, res)
