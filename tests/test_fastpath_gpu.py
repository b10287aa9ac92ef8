"""The host fast path on the H200 (gluon_lab.fastpath), through the public API: every gluon-lab
variant (and the Triton baseline) is replayed as a launches plan, its replay equals the full path
bit for bit and float64 within tolerance on fresh random inputs, writes every output element
(outputs land on just-freed NaN blocks), follows new pointers (fresh tensors each call, TMA maps
rebuilt), refuses a misaligned operand with the full path's error, captures into a CUDA graph, and
keeps every bad input's clear error on a planned signature."""
import pytest
import torch

import gluon_lab as gll
from gluon_lab import api, bench, fastpath, registry, specs

pytestmark = pytest.mark.gpu

# odd sizes and ragged tails: M not a multiple of any block, N not a power of two where the variant allows
ROW_SHAPES = {"gluon-tma": [(37, 4096), (3, 1024)], "gluon-chunked": [(37, 5120), (5, 12288)],
              "gluon-pipelined": [(37, 5120), (130, 4096)], "gluon-ws": [(37, 5120), (130, 4096)],
              "triton": [(37, 5120)]}
MM_SHAPES = [(129, 264, 200), (1, 4096, 512)]


def _cases():
    out = []
    for spec in specs.family("row_norm"):
        for v, shapes in ROW_SHAPES.items():
            if v in registry.variants(spec.name):
                out += [(spec.name, v, {"M": M, "N": N}) for M, N in shapes]
    out += [("matmul", v, {"M": M, "N": N, "K": K}) for v in ("gluon-pipelined", "gluon-ws", "triton")
            for M, N, K in MM_SHAPES]
    out += [("group_norm", "gluon-chunked", {"B": 3, "C": 64, "H": 8, "W": 24, "G": 8}),
            ("instance_norm", "gluon-chunked", {"B": 2, "C": 48, "H": 8, "W": 32})]
    return out


def _call(op, inputs, variant):
    return getattr(gll, op)(*inputs, variant=variant)


def _tuple(o):
    return o if isinstance(o, tuple) else (o, )


@pytest.mark.parametrize("op,variant,shape", _cases(), ids=lambda v: str(v))
def test_replay_equals_full_path_and_float64(op, variant, shape):
    fastpath.clear()
    spec = specs.get(op)
    dt = "bfloat16"
    inputs = bench.make_inputs(op, shape, dt, seed=hash((op, variant, str(shape))) % 10_000)
    first = _call(op, inputs, variant)  # records the plan
    plan = fastpath.plan_of(op, *inputs, variant=variant)
    assert plan is not None and plan.kind == "launches", plan
    # fresh inputs (new pointers) with the same signature: a replay
    fresh = bench.make_inputs(op, shape, dt, seed=123)
    hits = fastpath.stats()["hits"]
    poison = [torch.full_like(o, float("nan")) for o in _tuple(first)]
    del poison  # the replay's outputs get these NaN blocks back from the caching allocator
    got = _call(op, fresh, variant)
    assert fastpath.stats()["hits"] == hits + 1
    want = api.slow_call(spec, fresh, dict(spec.scalars), variant)
    torch.cuda.synchronize()
    for g, w in zip(_tuple(got), _tuple(want)):
        assert g.shape == w.shape and g.stride() == w.stride() and g.dtype == w.dtype
        assert not torch.isnan(g).any(), "the replay left output elements unwritten"
        assert torch.equal(g, w), "the replay differs from the full path"
    ok = bench.compare(got, bench.reference_outputs(op, fresh), dt, spec.tolerance and spec.tolerance[dt])
    assert ok["passed"], ok


def test_tma_maps_follow_new_pointers_and_are_reused():
    fastpath.clear()
    x0 = torch.randn(64, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
    gll.rms_norm(x0, w, variant="gluon-tma")
    plan = fastpath.plan_of("rms_norm", x0, w, variant="gluon-tma")
    slots = [d for s in plan.steps for d in s.desc_slots]
    assert slots, "gluon-tma passes at least one TMA descriptor"
    xs = [torch.randn(64, 4096, device="cuda", dtype=torch.bfloat16) for _ in range(4)]
    for _ in range(3):
        for x in xs:
            y = gll.rms_norm(x, w, variant="gluon-tma")
            torch.testing.assert_close(y.float(), torch.nn.functional.rms_norm(x.float(), (4096, ), w.float(), 1e-6),
                                       atol=3e-2, rtol=2e-2)
    maps = [len(d.maps) for d in slots if d.meta is not None]
    assert maps and all(1 <= m <= fastpath.MAX_MAPS for m in maps)


def test_misaligned_operand_takes_the_full_path_and_its_error():
    fastpath.clear()
    w = torch.randn(1024, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(8, 1024, device="cuda", dtype=torch.bfloat16)
    gll.rms_norm(x, w, variant="gluon-tma")
    buf = torch.randn(8 * 1024 + 1, device="cuda", dtype=torch.bfloat16)
    bad = buf[1:].view(8, 1024)  # same signature, pointer 2 bytes off
    with pytest.raises(ValueError, match="16-byte aligned"):
        gll.rms_norm(bad, w, variant="gluon-tma")
    y = gll.rms_norm(bad, w, variant="triton")  # a variant that takes it: correct, via the full path
    torch.testing.assert_close(y.float(), torch.nn.functional.rms_norm(bad.float(), (1024, ), w.float(), 1e-6),
                               atol=3e-2, rtol=2e-2)


def test_bad_input_on_a_planned_signature_keeps_its_error():
    fastpath.clear()
    x = torch.randn(16, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
    for _ in range(2):
        gll.rms_norm(x, w, variant="gluon-tma")
    for _ in range(2):
        with pytest.raises(TypeError, match=r"weight.dtype must equal x.dtype"):
            gll.rms_norm(x, w.float(), variant="gluon-tma")
        with pytest.raises(ValueError, match="weight must have shape"):
            gll.rms_norm(x, w[:100], variant="gluon-tma")
        with pytest.raises(ValueError, match="contiguous in its last dimension"):
            gll.rms_norm(torch.randn(4096, 16, device="cuda", dtype=torch.bfloat16).t(), w, variant="gluon-tma")
    x.requires_grad_(True)  # rms_norm has a backward op: under grad it leaves the fast path for its custom op
    y = gll.rms_norm(x, w, variant="gluon-tma")
    assert "gluon_lab" in type(y.grad_fn).__name__
    with pytest.raises(RuntimeError, match="has no backward yet"):  # an op without one still refuses grad
        gll.l2_norm(x, variant="gluon-tma")


def test_cuda_graph_capture_of_replays():
    fastpath.clear()
    x = torch.randn(37, 5120, device="cuda", dtype=torch.bfloat16)
    r = torch.randn(37, 5120, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(5120, device="cuda", dtype=torch.bfloat16)
    want = gll.add_rms_norm(x, r, w, variant="gluon-chunked")  # plans it
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        gll.add_rms_norm(x, r, w, variant="gluon-chunked")
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        got = gll.add_rms_norm(x, r, w, variant="gluon-chunked")
    g.replay()
    torch.cuda.synchronize()
    for a, b in zip(got, want):
        assert torch.equal(a, b)


def test_auto_replays_the_variant_it_chose():
    fastpath.clear()
    x = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
    from gluon_lab.selection import choose
    chosen = choose(specs.get("rms_norm"), (x, w))
    gll.rms_norm(x, w)
    plan = fastpath.plan_of("rms_norm", x, w)
    assert plan is not None
    assert plan.kind == ("direct" if registry.get_variant("rms_norm", chosen).differentiable else "launches")
    torch.testing.assert_close(gll.rms_norm(x, w), gll.rms_norm(x, w, variant=chosen), atol=0, rtol=0)


def test_a_plan_keeps_no_tensor_of_the_recorded_call_alive():
    import gc
    import weakref
    fastpath.clear()
    x = torch.randn(64, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
    y = gll.rms_norm(x, w, variant="gluon-tma")  # records the plan (TMA descriptors over x and y)
    assert fastpath.plan_of("rms_norm", x, w, variant="gluon-tma").kind == "launches"
    refs = [weakref.ref(x), weakref.ref(y)]
    del x, y
    gc.collect()
    assert all(r() is None for r in refs), "the plan holds the first call's tensors"


def test_split_k_workspace_replays_as_scratch():
    """gluon-ws split-K allocates an fp32 workspace per call and launches two kernels: recorded, it is a
    launches plan with one scratch operand, and its replay equals the full path on new inputs."""
    from gluon_lab.kernels import gemm as G
    from gluon_lab.kernels import gemm_ws as W
    cfg = G.GemmConfig(BN=128, num_warps=4, num_stages=4, split_k=4)
    a, b = bench.make_inputs("matmul", {"M": 100, "N": 1000, "K": 2056}, "bfloat16", seed=21)
    rec = fastpath._Recorder()
    with rec:
        c = W.launch(a, b, config=cfg)
    assert not rec.impure and len(rec.launches) == 2
    plan = fastpath._build_launches(rec, (a, b), (c, ), False)
    assert len(plan.scratch) == 1
    a2, b2 = bench.make_inputs("matmul", {"M": 100, "N": 1000, "K": 2056}, "bfloat16", seed=22)
    got = plan.run((a2, b2), fastpath._ptrs((a2, b2)))
    torch.testing.assert_close(got, W.launch(a2, b2, config=cfg), rtol=0, atol=0)
    res = bench.compare(got, bench.reference_outputs("matmul", (a2, b2)), "bfloat16")
    assert res["passed"], res
