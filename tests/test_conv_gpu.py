"""Pattern 6 on the H200 through the public API: every conv2d variant against float64 on fresh random
inputs — ragged B·OH·OW (patches cut by the image edge), Ci / Co not multiples of 64, stride 2,
padding at every border, 1x1 and 3x3, bf16 / fp16 — on outputs poisoned with NaN (each call's y lands
on a freed block of NaNs: an element a kernel never writes fails), NaN propagation, and the refusals
of the Gluon variant naming the rule (the Triton and torch variants take those shapes)."""
import pytest
import torch

import gluon_lab as gll
from gluon_lab import bench, registry, specs

pytestmark = pytest.mark.gpu
SPEC = specs.get("conv2d")
VARIANTS = ("torch", "triton", "gluon-pipelined", "gluon-ws", "gluon-gather")


def _inputs(shape, dtype="bfloat16", seed=0):
    return bench.make_inputs("conv2d", shape, dtype, seed=seed)


def _poison(nbytes: int):
    """Leave a freed block of NaNs in the caching allocator, so the next output allocation of about that
    size starts as NaN."""
    t = torch.full((nbytes // 2 + 4096, ), float("nan"), dtype=torch.bfloat16, device="cuda")
    del t


CASES = [
    dict(B=2, Ci=64, Co=64, H=16, W=16, R=3, stride=1, pad=1),
    dict(B=3, Ci=40, Co=72, H=13, W=11, R=3, stride=1, pad=1),  # ragged patches, Ci / Co not multiples of 64
    dict(B=2, Ci=96, Co=136, H=14, W=18, R=3, stride=2, pad=1),  # stride 2, top/left padding row and column
    dict(B=2, Ci=48, Co=80, H=12, W=10, R=3, stride=2, pad=0),
    dict(B=1, Ci=200, Co=264, H=9, W=17, R=3, stride=1, pad=0),
    dict(B=4, Ci=256, Co=320, H=8, W=8, R=1, stride=1, pad=0),  # 1x1
    dict(B=2, Ci=128, Co=64, H=16, W=12, R=1, stride=2, pad=0),  # 1x1 stride 2 (a ResNet downsample)
    dict(B=1, Ci=384, Co=384, H=64, W=64, R=3, stride=1, pad=1),  # the example's channels
]


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("shape", CASES, ids=lambda s: "-".join(f"{k}{v}" for k, v in s.items()))
def test_every_variant_matches_float64(shape, dtype):
    inp = _inputs(shape, dtype, seed=shape["Ci"] + shape["H"])
    ref = SPEC.reference(*inp)
    for v in VARIANTS:
        _poison(ref.numel() * 2)
        y = gll.conv2d(*inp, variant=v)
        torch.cuda.synchronize()
        assert y.shape == ref.shape and y.is_contiguous(memory_format=torch.channels_last), (v, y.shape, y.stride())
        ok = bench.compare(y, ref, dtype, SPEC.tolerance[dtype])
        assert ok["passed"], (v, ok)


@pytest.mark.parametrize("shape", [dict(B=1, Ci=3, Co=64, H=16, W=16, R=3, stride=1, pad=1),  # RGB input
                                   dict(B=2, Ci=3, Co=32, H=35, W=33, R=3, stride=2, pad=1),  # stem, odd size
                                   dict(B=1, Ci=64, Co=36, H=9, W=10, R=1, stride=1, pad=0),  # Co % 8
                                   dict(B=1, Ci=64, Co=64, H=15, W=16, R=3, stride=2, pad=1),  # odd H, stride 2
                                   dict(B=3, Ci=72, Co=136, H=17, W=13, R=3, stride=2, pad=0)])
def test_tma_kernels_refuse_by_rule_and_gluon_gather_takes_it(shape):
    """Shapes without a tiled-TMA path: gluon-pipelined / gluon-ws refuse naming the rule and gluon-gather;
    gluon-gather (cp.async, channels padded to 8 on the host where needed), torch, triton, auto take them."""
    inp = _inputs(shape, seed=5)
    for v in ("gluon-pipelined", "gluon-ws"):
        assert not registry.eligible(registry.get_variant("conv2d", v), inp)
        with pytest.raises(ValueError, match=f"variant '{v}' of conv2d needs the tiled-TMA path: .*gluon-gather"):
            gll.conv2d(*inp, variant=v)
    ref = SPEC.reference(*inp)
    for v in ("gluon-gather", "torch", "triton", "auto"):
        _poison(ref.numel() * 2)
        y = gll.conv2d(*inp, variant=v)
        torch.cuda.synchronize()
        assert y.shape == ref.shape and y.is_contiguous(memory_format=torch.channels_last), (v, y.stride())
        assert bench.compare(y, ref, "bfloat16", SPEC.tolerance["bfloat16"])["passed"], v


@pytest.mark.parametrize("v", VARIANTS)
def test_nan_spreads_only_to_the_pixels_it_touches(v):
    shape = dict(B=2, Ci=64, Co=64, H=12, W=12, R=3, stride=1, pad=1)
    x, w, s, p = _inputs(shape, seed=2)
    x[1, 5, 6, 6] = float("nan")  # image 1, channel 5, pixel (6, 6): reaches outputs (5..7, 5..7) of image 1
    y = gll.conv2d(x, w, s, p, variant=v)
    torch.cuda.synchronize()
    assert torch.isnan(y[1, :, 5:8, 5:8]).all()
    y[1, :, 5:8, 5:8] = 0
    assert not torch.isnan(y).any()


def test_weight_oihw_and_fast_path_replay():
    from gluon_lab import fastpath
    fastpath.clear()
    shape = dict(B=2, Ci=64, Co=128, H=20, W=20, R=3, stride=2, pad=1)
    x, w, s, p = _inputs(shape, seed=8)
    ref = SPEC.reference(x, w, s, p)
    for _ in range(3):  # record, then replay the plan
        y = gll.conv2d(x, w.contiguous(), s, p, variant="gluon-pipelined")
    assert bench.compare(y, ref, "bfloat16", SPEC.tolerance["bfloat16"])["passed"]
    assert fastpath.plan_of("conv2d", x, w.contiguous(), s, p, variant="gluon-pipelined") is not None


# ---- dgrad ----------------------------------------------------------------------------------------
DSPEC = specs.get("conv2d_input_grad")
DVARIANTS = ("torch", "triton", "gluon-pipelined", "gluon-ws")


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("shape", CASES, ids=lambda s: "-".join(f"{k}{v}" for k, v in s.items()))
def test_dgrad_every_variant_matches_float64(shape, dtype):
    inp = bench.make_inputs("conv2d_input_grad", shape, dtype, seed=shape["Co"] + shape["W"])
    ref = DSPEC.reference(*inp)
    for v in DVARIANTS:
        _poison(ref.numel() * 2)
        dx = gll.conv2d_input_grad(*inp, variant=v)
        torch.cuda.synchronize()
        assert dx.shape == ref.shape and dx.is_contiguous(memory_format=torch.channels_last), (v, dx.shape)
        ok = bench.compare(dx, ref, dtype, DSPEC.tolerance[dtype])
        assert ok["passed"], (v, ok)


@pytest.mark.parametrize("shape", [dict(B=2, Ci=96, Co=64, H=14, W=18, R=3, stride=2, pad=1),  # 96 % BN: a clipped channel tail
                                   dict(B=2, Ci=64, Co=128, H=16, W=12, R=1, stride=2, pad=0),  # odd parities zero
                                   dict(B=1, Ci=200, Co=48, H=10, W=22, R=3, stride=2, pad=0),  # uncovered last row
                                   dict(B=2, Ci=40, Co=24, H=12, W=8, R=1, stride=2, pad=1)])  # 1x1 with padding
def test_stride2_dgrad_sub_problems(shape):
    """The Gluon stride-2 dgrad (4 launches side by side on forked streams, one per output parity, each through
    its own view of dx) on NaN-poisoned memory, vs float64; repeated calls with fresh inputs (the fast path's
    replay) too; and inside a CUDA graph."""
    ref_of = DSPEC.reference
    for seed in (1, 2, 3):
        inp = bench.make_inputs("conv2d_input_grad", shape, "bfloat16", seed=seed)
        ref = ref_of(*inp)
        _poison(ref.numel() * 2)
        dx = gll.conv2d_input_grad(*inp, variant="gluon-pipelined")
        torch.cuda.synchronize()
        assert not torch.isnan(dx).any(), "an element of dx was never written"
        assert bench.compare(dx, ref, "bfloat16", DSPEC.tolerance["bfloat16"])["passed"], seed
    # the sub-problems run on forked streams: a CUDA graph captures the fork / join and replays it
    inp = bench.make_inputs("conv2d_input_grad", shape, "bfloat16", seed=7)
    gll.conv2d_input_grad(*inp, variant="gluon-pipelined")  # compiled and planned before the capture
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        dx = gll.conv2d_input_grad(*inp, variant="gluon-pipelined")
    dx.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    assert bench.compare(dx, ref_of(*inp), "bfloat16", DSPEC.tolerance["bfloat16"])["passed"]


def test_stride2_dgrad_refuses_an_odd_input_size():
    inp = bench.make_inputs("conv2d_input_grad", dict(B=1, Ci=64, Co=64, H=15, W=16, R=3, stride=2, pad=1), "bfloat16",
                            seed=0)
    with pytest.raises(ValueError, match=r"at stride 2 needs an even input size .* got 15 x 16"):
        gll.conv2d_input_grad(*inp, variant="gluon-pipelined")
    ref = DSPEC.reference(*inp)
    assert bench.compare(gll.conv2d_input_grad(*inp, variant="triton"), ref, "bfloat16",
                         DSPEC.tolerance["bfloat16"])["passed"]


def test_instrumented_fprop_writes_a_timeline():
    """The INSTRUMENT build of the fprop kernel computes the same y and leaves, for every tile a program ran,
    four ordered %globaltimer stamps (start <= first data <= MMAs done <= store issued)."""
    from gluon_lab.kernels import conv
    from gluon_lab.kernels.pipelined import TRACE_CTAS, TRACE_ITERS
    shape = dict(B=4, Ci=128, Co=256, H=32, W=32, R=3, stride=1, pad=1)
    x, w, s, p = _inputs(shape, seed=9)
    trace = torch.zeros(TRACE_CTAS * TRACE_ITERS * conv.CONV_TRACE_FIELDS, dtype=torch.int64, device="cuda")
    y = conv.fprop(x, w, s, p, trace=trace)
    torch.cuda.synchronize()
    torch.testing.assert_close(y, conv.fprop(x, w, s, p), atol=0, rtol=0)
    t = trace.view(TRACE_CTAS, TRACE_ITERS, 4).cpu()
    cfg = conv.ConvConfig.heuristic(shape, "bfloat16")
    n_tiles = 4 * (32 // cfg.TH) * (32 // cfg.TW) * (256 // cfg.BN)
    ran = t[(t > 0).all(-1)]
    assert len(ran) == n_tiles, (len(ran), n_tiles)
    assert (ran[:, 1:] >= ran[:, :-1]).all()


@pytest.mark.parametrize("split_k", [1, 3])
def test_instrumented_ws_fprop_stamps_every_unit(split_k):
    """The INSTRUMENT build of gluon-ws fprop (igemm.trace) computes the same y bits as the timed build and leaves
    one row per unit it ran: the unit's slice + 1 as the tag (1: a whole tile), then start <= last MMA issued <= epilogue issued;
    under split-K every tile appears once per slice (tags 1..split_k)."""
    from gluon_lab.kernels import conv_ws
    from gluon_lab.kernels.igemm.trace import UNIT_TRACE_FIELDS
    from gluon_lab.kernels.pipelined import TRACE_CTAS, TRACE_ITERS
    shape = dict(B=2, Ci=192, Co=160, H=9, W=7, R=3, stride=1, pad=1)  # ragged patch edge and channel tail
    x, w, s, p = _inputs(shape, seed=17)
    cfg = conv_ws.WsConvConfig(TH=8, TW=8, BN=128, BK=64, num_stages=3, num_warps=4, split_k=split_k)
    trace = torch.zeros(TRACE_CTAS * TRACE_ITERS * int(UNIT_TRACE_FIELDS), dtype=torch.int64, device="cuda")
    y = conv_ws.fprop_ws(x, w, s, p, config=cfg, trace=trace)
    torch.cuda.synchronize()
    torch.testing.assert_close(y, conv_ws.fprop_ws(x, w, s, p, config=cfg), atol=0, rtol=0)
    t = trace.view(TRACE_CTAS, TRACE_ITERS, 4).cpu()
    ran = t[(t > 0).all(-1)]
    tiles = 2 * 2 * 1 * 2  # B x ceil(9 / 8) x ceil(7 / 8) x ceil(160 / 128)
    assert len(ran) == tiles * split_k, (len(ran), tiles, split_k)
    # tag = unit's slice + 1: 1 for a whole tile (data-parallel), 2 .. split_k + 1 for slices 1 .. split_k of a split tile
    assert sorted(ran[:, 0].unique().tolist()) == ([1] if split_k == 1 else list(range(2, split_k + 2)))
    assert (ran[:, 2:] >= ran[:, 1:-1]).all()


def test_ws_timeline_capture_runs_both_schedules():
    """experiments.capture_conv_ws_timeline: data-parallel (one slice) and the heuristic's split-K plan on an
    SM-idle shape, every tile's slices stamped, the split the plan ran recorded with it."""
    from gluon_lab import experiments as ex
    WT = ex.capture_conv_ws_timeline(((2, 128, 128, 8, 8, 3, 1, 1), ))
    d = WT["timelines"]["2,128,128,8,8,3,1,1"]
    assert d["data-parallel"]["split_k"] == 1 and d["split-K (heuristic)"]["split_k"] > 1, d.keys()
    for sched, got in d.items():
        rows = [r for cta in got["ns"] for r in cta]  # [K-slice + 1, start, last MMA issued, store issued]
        tags = {int(r[0]) for r in rows}  # 1: a whole tile; s + 1: slice s (1-based) of a split tile
        assert tags == ({1} if got["split_k"] == 1 else set(range(2, got["split_k"] + 2))), (sched, tags)
        assert len(rows) == 2 * 1 * 1 * 1 * got["split_k"], (sched, len(rows))  # 2 images x 1 patch x 1 channel block


# ---- wgrad ----------------------------------------------------------------------------------------
WSPEC = specs.get("conv2d_weight_grad")


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("shape", CASES, ids=lambda s: "-".join(f"{k}{v}" for k, v in s.items()))
def test_wgrad_every_variant_matches_float64(shape, dtype):
    inp = bench.make_inputs("conv2d_weight_grad", shape, dtype, seed=shape["Co"] + shape["H"])
    ref = WSPEC.reference(*inp)
    for v in ("torch", "triton", "gluon-pipelined", "gluon-ws"):
        _poison(ref.numel() * 4)
        gw = gll.conv2d_weight_grad(*inp, variant=v)
        torch.cuda.synchronize()
        assert gw.shape == ref.shape and gw.is_contiguous(memory_format=torch.channels_last), (v, gw.shape)
        ok = bench.compare(gw, ref, dtype, WSPEC.tolerance[dtype])
        assert ok["passed"], (v, ok)


@pytest.mark.parametrize("splits", [1, 3, 64])
def test_wgrad_splits_sum_to_the_same_gradient(splits):
    from gluon_lab.kernels import conv
    shape = dict(B=3, Ci=64, Co=72, H=13, W=11, R=3, stride=1, pad=1)
    inp = bench.make_inputs("conv2d_weight_grad", shape, "bfloat16", seed=4)
    ref = WSPEC.reference(*inp)
    cfg = conv.wgrad_configure(shape, "bfloat16", {"splits": splits})
    gw = conv.wgrad(*inp, config=cfg)
    assert bench.compare(gw, ref, "bfloat16", WSPEC.tolerance["bfloat16"])["passed"]


# The short-pixel-loop tile rules of WgradConfig.heuristic (BM 64 under two waves of 128 x 128 tiles; 2 stages
# on <= 8 k-steps per program with >= two waves of tiles), each picked by the heuristic, with Ci / Co tails.
WGRAD_SHORT = [
    (dict(B=2, Ci=520, Co=600, H=7, W=9, R=3, stride=1, pad=1), (64, 2)),     # BM 64 and 2 stages
    (dict(B=2, Ci=776, Co=776, H=6, W=6, R=3, stride=1, pad=1), (128, 2)),    # 441 tiles of 128 x 128, 2 stages
    (dict(B=3, Ci=264, Co=520, H=9, W=7, R=1, stride=1, pad=0), (64, 4)),     # 1x1, few tiles: BM 64, 4 stages
]


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("shape,pick", WGRAD_SHORT, ids=lambda v: "-".join(f"{k}{x}" for k, x in v.items())
                         if isinstance(v, dict) else f"BM{v[0]}-st{v[1]}")
def test_wgrad_short_loop_tiles_match_float64(shape, pick, dtype):
    from gluon_lab.kernels import conv
    cfg = conv.WgradConfig.heuristic(shape, dtype)
    assert (cfg.BM, cfg.num_stages) == pick, cfg
    inp = bench.make_inputs("conv2d_weight_grad", shape, dtype, seed=shape["Ci"])
    ref = WSPEC.reference(*inp)
    _poison(ref.numel() * 4)
    gw = gll.conv2d_weight_grad(*inp, variant="gluon-pipelined")
    torch.cuda.synchronize()
    ok = bench.compare(gw, ref, dtype, WSPEC.tolerance[dtype])
    assert ok["passed"], ok


# ---- the template's schedules on conv (gluon-ws of conv2d and conv2d_input_grad) ------------------------
# Every producer x schedule pair a heuristic can pick: the tap-box producer (stride 1 and the stride-2 parity
# view) x data-parallel / split-K (2, 3, 8 slices: even and uneven K cuts) / last-wave split, on SM-idle
# shapes (few tiles: split_choice splits them), ragged patches and channel tails, against float64 on
# NaN-poisoned outputs (a split tile's pixel the fixup misses stays NaN).
SCHED_CASES = [
    dict(B=2, Ci=320, Co=256, H=8, W=8, R=3, stride=1, pad=1),    # SM-idle: 8x8 image, 8x8 patch (BN 128: _split_bn)
    dict(B=1, Ci=136, Co=200, H=7, W=9, R=3, stride=1, pad=1),    # ragged patch, Ci / Co tails
    dict(B=2, Ci=192, Co=128, H=12, W=10, R=3, stride=2, pad=1),  # stride 2 (parity view), 6x5 outputs
    dict(B=3, Ci=512, Co=136, H=8, W=8, R=1, stride=1, pad=0),    # 1x1, many channels
]
SCHEDULES = [dict(split_k=1), dict(split_k=2), dict(split_k=3), dict(split_k=8), dict(split_k=0),
             dict(split_k=2, split_last_wave=True),
             # serial split-K: the last slice of each tile sums the partials in the kernel (no fixup launch)
             dict(split_k=3, serial=True), dict(split_k=8, serial=True), dict(split_k=0, serial=True),
             dict(split_k=2, split_last_wave=True, serial=True)]


@pytest.mark.parametrize("sched", SCHEDULES, ids=lambda d: "-".join(f"{k}{v}" for k, v in d.items()))
@pytest.mark.parametrize("shape", SCHED_CASES, ids=lambda s: "-".join(f"{k}{v}" for k, v in s.items()))
def test_ws_schedules_match_float64(shape, sched):
    import dataclasses
    from gluon_lab.kernels import conv_ws
    for op, dtype in (("conv2d", "bfloat16"), ("conv2d_input_grad", "bfloat16"), ("conv2d", "float16")):
        inp = bench.make_inputs(op, shape, dtype, seed=shape["Ci"] + sched["split_k"])
        cfg = registry.get_variant(op, "gluon-ws").configure(shape, dtype, {})
        res = bench.check_correctness(op, "gluon-ws", inp, config=dataclasses.replace(cfg, **sched))
        assert res["passed"], (op, dtype, sched, res)
    assert conv_ws.split_choice(4, 180) == 8 and conv_ws.split_choice(100, 180) == 1


def test_ws_split_keeps_bn_256_on_long_slices():
    """The split regime's other BN: where BN 128 fills no more SMs and BN 256's K-slices are long (_split_bn), the
    heuristic keeps BN 256 with split-K 6 (2x1280ch 16x16's rule; here with a Ci tail) — fprop, and dgrad on the
    shape whose GEMM view is that fprop (Ci and Co swapped), against float64 on NaN-poisoned outputs."""
    from gluon_lab.kernels import conv_ws
    fwd = dict(B=2, Ci=720, Co=1280, H=16, W=16, R=3, stride=1, pad=1)
    assert conv_ws.WsConvConfig.heuristic(fwd, "bfloat16").plan(2 * 2 * 5, 9 * 12, 132)[0] == 6
    for op, shape in (("conv2d", fwd), ("conv2d_input_grad", {**fwd, "Ci": 1280, "Co": 720})):
        cfg = registry.get_variant(op, "gluon-ws").configure(shape, "bfloat16", {})
        assert cfg.BN == 256, (op, cfg)
        inp = bench.make_inputs(op, shape, "bfloat16", seed=7)
        res = bench.check_correctness(op, "gluon-ws", inp, call="api")  # the public call: the heuristic's config
        assert res["passed"], (op, res)


@pytest.mark.parametrize("shape", [SCHED_CASES[0], SCHED_CASES[2], SCHED_CASES[3]],
                         ids=lambda s: "-".join(f"{k}{v}" for k, v in s.items()))
def test_ws_serial_split_has_the_fixups_bits(shape):
    """Serial split-K sums every tile's partials in slice order from zero, as the fixup kernel does: the same
    bits, fprop and dgrad (stride 2: parity sub-problems side by side on forked streams, each on its own stream's
    counters), call after call on one stream (each launch leaves its counters zero for the next: a counter left
    non-zero would make no slice the last, and the tile would keep the NaN poison), and in a CUDA graph captured
    on a stream that had run it (its counters exist there) replayed three times."""
    import dataclasses
    from gluon_lab.kernels import conv_ws
    from gluon_lab.kernels.igemm import epilogues
    for op in ("conv2d", "conv2d_input_grad"):
        inp = bench.make_inputs(op, shape, "bfloat16", seed=11)
        base = registry.get_variant(op, "gluon-ws").configure(shape, "bfloat16", {})
        fix = dataclasses.replace(base, split_k=3)
        ser = dataclasses.replace(fix, serial=True)
        fn = registry.get_variant(op, "gluon-ws").fn
        ref = fn(*inp, config=fix)
        assert not ref.isnan().any()
        for _ in range(3):
            _poison(ref.numel() * 2)
            got = fn(*inp, config=ser)
            assert torch.equal(got.view(torch.int16), ref.view(torch.int16)), (op, (got.float() - ref.float()).abs().max())
        for c in epilogues._TILE_COUNTERS.by_key.values():
            assert int(c.count_nonzero()) == 0  # every launch left its counters zero
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            fn(*inp, config=ser)  # the capture stream's counters
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=s):
            out = fn(*inp, config=ser)
        for _ in range(3):
            out.fill_(float("nan"))
            g.replay()
            torch.cuda.synchronize()
            assert torch.equal(out.view(torch.int16), ref.view(torch.int16)), op
    assert conv_ws.WsConvConfig(serial=True).validate("bfloat16").serial


def test_ws_serial_split_capture_on_a_new_stream_takes_the_fixup():
    """A capture on a stream that has no counters yet cannot allocate them (they would live in the graph's pool,
    unzeroed until the first replay): the launch then runs the fixup kernel, whose sum has the same bits."""
    import dataclasses
    shape = SCHED_CASES[0]
    inp = bench.make_inputs("conv2d", shape, "bfloat16", seed=5)
    v = registry.get_variant("conv2d", "gluon-ws")
    ser = dataclasses.replace(v.configure(shape, "bfloat16", {}), split_k=4, serial=True)
    ref = v.fn(*inp, config=dataclasses.replace(ser, serial=False))
    s = torch.cuda.Stream()  # never ran the op: no counters
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        out = v.fn(*inp, config=ser)
    out.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(out.view(torch.int16), ref.view(torch.int16))


FLAT_CASES = [dict(B=3, Ci=512, Co=136, H=8, W=8, R=1, stride=1, pad=0),   # 192 pixels: one whole 128-row tile + a tail
              dict(B=3, Ci=136, Co=200, H=7, W=9, R=1, stride=1, pad=0),   # 189 pixels across ragged rows, Ci / Co tails
              dict(B=4, Ci=1280, Co=1280, H=8, W=8, R=1, stride=1, pad=0)]  # the SM-idle 1x1 the flat view is for


@pytest.mark.parametrize("sched", [dict(split_k=1), dict(split_k=3), dict(split_k=0), dict(split_k=0, serial=True),
                                   dict(BN=64, split_k=1)], ids=lambda d: "-".join(f"{k}{v}" for k, v in d.items()))
@pytest.mark.parametrize("shape", FLAT_CASES, ids=lambda s: "-".join(f"{k}{v}" for k, v in s.items()))
def test_ws_flat_1x1_matches_float64(shape, sched):
    """WsConvConfig(flat=True): a 1x1 stride-1 conv as one row of B·H·W pixels (tiles run across rows and images),
    every schedule, bf16 and fp16, against float64 on NaN-poisoned outputs (a pixel past an image's last row that
    the flat tile misses stays NaN)."""
    v = registry.get_variant("conv2d", "gluon-ws")
    for dtype in ("bfloat16", "float16"):
        cfg = v.resolve(shape, dtype, {"flat": True, **sched})
        assert cfg.flat and cfg.TH == 1, cfg
        inp = bench.make_inputs("conv2d", shape, dtype, seed=shape["B"] + shape["Ci"])
        res = bench.check_correctness("conv2d", "gluon-ws", inp, config=cfg)
        assert res["passed"], (dtype, sched, res)
