"""Pattern 5 on the H200 through the public API: every variant against float64 on fresh random
inputs — D in {64, 128, 256}, full and partial rotary (partial: the variants that take it), NeoX and
GPT-J, bf16 / fp16, T in {1, 3, 17, 1000, 8192}, positions random — V bytes unchanged, the error in
bf16 ulps reported, NaN propagated per head, an out-of-range position caught on the host (and by the
kernels' own guard inside a CUDA graph, where the host check cannot read the data)."""
import pytest
import torch

import gluon_lab as gll
from gluon_lab import bench, registry, specs

pytestmark = pytest.mark.gpu
SPEC = specs.get("qk_norm_rope")
VARIANTS = ("torch", "inductor", "triton", "gluon-fused", "gluon-persistent", "gluon-tma")


def _inputs(T, Hq, Hk, D, R, dtype, seed):
    return bench.make_inputs("qk_norm_rope", {"T": T, "Hq": Hq, "Hk": Hk, "D": D, "R": R}, dtype, seed=seed)


def _ulps(got, ref, dtype):
    """Max error in units of the dtype's spacing at the reference's magnitude."""
    eps = 2.0 ** -7 if dtype == "bfloat16" else 2.0 ** -10
    spacing = torch.exp2(torch.floor(torch.log2(ref.abs().clamp_min(1e-30)))) * eps
    return float(((got.double() - ref).abs() / spacing).max())


CASES = [(T, D, R, neox, dt) for T in (1, 3, 17, 1000, 8192) for D in (64, 128, 256) for R in (D, D // 2)
         for neox in (True, False) for dt in ("bfloat16", "float16") if T in (17, 1000) or (dt == "bfloat16" and R == D)]


@pytest.mark.parametrize("T,D,R,neox,dtype", CASES)
def test_every_variant_matches_float64(T, D, R, neox, dtype):
    Hq, Hk = 8, 2
    for v in VARIANTS:
        inp = _inputs(T, Hq, Hk, D, R, dtype, seed=T * 7 + D + R)
        ref = SPEC.reference(*inp, is_neox=neox)
        qkv = inp[0]
        v_before = qkv[:, (Hq + Hk) * D:].clone()
        if not registry.eligible(registry.get_variant("qk_norm_rope", v), inp):
            with pytest.raises(ValueError, match="rotary_dim"):
                gll.qk_norm_rope(*inp, is_neox=neox, variant=v)
            continue
        out = gll.qk_norm_rope(*inp, is_neox=neox, variant=v)
        torch.cuda.synchronize()
        assert out is qkv
        assert torch.equal(qkv[:, (Hq + Hk) * D:], v_before), f"{v}: V changed"
        ok = bench.compare(out, ref, dtype, SPEC.tolerance[dtype])
        # the error in ulps of the dtype at each element's magnitude (reported; rotation cancels, so a
        # small result can be several of its own ulps off while the absolute error is tiny)
        assert ok["passed"], (v, ok, f"{_ulps(out, ref, dtype):.1f} ulps")


def test_persistent_strides_over_many_tiles_and_a_ragged_last_one():
    # 4099 tokens x 24 heads = 98,376 units: 6,149 tiles over a grid of 4 x 132 CTAs (each CTA ~12 tiles)
    inp = _inputs(4099, 16, 8, 128, 128, "bfloat16", seed=9)
    ref = SPEC.reference(*inp)
    out = gll.qk_norm_rope(*inp, variant="gluon-persistent")
    torch.cuda.synchronize()
    assert bench.compare(out, ref, "bfloat16", SPEC.tolerance["bfloat16"])["passed"]


@pytest.mark.parametrize("neox", [True, False])
@pytest.mark.parametrize("knobs", [{}, {"tma_store": False}, {"stages": 2, "ctas_per_sm": 1}, {"block_t": 4, "stages": 4},
                                   {"block_h": 4, "num_warps": 8, "block_t": 8}])
def test_tma_ragged_tiles_and_knobs(knobs, neox):
    """gluon-tma's tiles cut through the token tail and the head tail (Hq + Hk = 11 heads: the last head
    block holds 3 Q/K heads, the descriptor's bound stops it before V); every knob path."""
    from gluon_lab.kernels import qk_norm_rope as q
    shape = {"T": 1003, "Hq": 8, "Hk": 3, "D": 128, "R": 128}
    inp = _inputs(*shape.values(), "bfloat16", seed=11)
    ref = SPEC.reference(*inp, is_neox=neox)
    qkv = inp[0]
    v_before = qkv[:, 11 * 128:].clone()
    cfg = q.tma_configure(shape, "bfloat16", knobs)
    q.tma_variant(*inp, eps=1e-6, is_neox=neox, config=cfg)
    torch.cuda.synchronize()
    assert torch.equal(qkv[:, 11 * 128:], v_before)
    ok = bench.compare(qkv, ref, "bfloat16", SPEC.tolerance["bfloat16"])
    assert ok["passed"], (cfg, ok)


@pytest.mark.parametrize("v", VARIANTS)
def test_nan_stays_in_its_head(v):
    inp = _inputs(9, 4, 2, 128, 128, "bfloat16", seed=1)
    inp[0][3, 128 + 5] = float("nan")  # token 3, Q head 1
    out = gll.qk_norm_rope(*inp, variant=v)
    torch.cuda.synchronize()
    assert torch.isnan(out[3, 128:256]).all()
    clean = out.clone()
    clean[3, 128:256] = 0
    assert not torch.isnan(clean).any()


@pytest.mark.parametrize("v", ["gluon-fused", "gluon-persistent", "gluon-tma", "triton"])
def test_out_of_range_position_is_guarded_on_the_gpu_and_raised_after(v):
    """No host sync per call: the kernel turns the token's rows into NaN and writes the bad index into
    pinned host memory; the next call (or check_device_errors) raises naming the rule and the index."""
    inp = list(_inputs(16, 4, 2, 128, 128, "bfloat16", seed=2))
    n = inp[-2].shape[0]
    for where, value in ((5, n + 3), (11, -7)):
        bad = inp[-1].clone()
        bad[where] = value
        qkv = inp[0].clone()
        gll.qk_norm_rope(qkv, *inp[1:-1], bad, variant=v)  # returns: the GPU checks
        torch.cuda.synchronize()
        assert torch.isnan(qkv[where, :6 * 128]).all()
        assert not torch.isnan(qkv[where, 6 * 128:]).any()  # V untouched
        clean = qkv[:, :6 * 128].clone()
        clean[where] = 0
        assert not torch.isnan(clean).any()
        with pytest.raises(ValueError, match=rf"positions must be in \[0, cos_sin_cache.shape\[0\]\).*"
                                             rf"positions\[{where}\] = {value}\b"):
            gll.qk_norm_rope(inp[0].clone(), *inp[1:], variant=v)  # the next call raises
        gll.qk_norm_rope(inp[0].clone(), *inp[1:], variant=v)  # raised once: cleared
    bad = inp[-1].clone()
    bad[2] = n
    gll.qk_norm_rope(inp[0].clone(), *inp[1:-1], bad, variant=v)
    with pytest.raises(ValueError, match=r"positions\[2\] = " + str(n)):
        gll.check_device_errors()  # syncs, then raises
    gll.check_device_errors()
    # inside a capture: the same guard on every replay
    qkv = inp[0]
    pos = inp[-1].clone()
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        gll.qk_norm_rope(qkv.clone(), *inp[1:-1], pos, variant=v)
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        gll.qk_norm_rope(qkv, *inp[1:-1], pos, variant=v)
    bad = inp[-1].clone()
    bad[5] = n + 3
    pos.copy_(bad)
    g.replay()
    torch.cuda.synchronize()
    assert torch.isnan(qkv[5, :6 * 128]).all() and not torch.isnan(qkv[4]).any()
    with pytest.raises(ValueError, match=r"positions\[5\]"):
        gll.check_device_errors()


def test_eager_torch_still_checks_positions_before_it_indexes():
    """torch's variants index the cache with positions (a device assert out of range): the host check stays."""
    inp = list(_inputs(16, 4, 2, 128, 128, "bfloat16", seed=2))
    bad = inp[-1].clone()
    bad[3] = inp[-2].shape[0]
    with pytest.raises(ValueError, match="positions must be in"):
        gll.qk_norm_rope(inp[0].clone(), *inp[1:-1], bad, variant="torch")


@pytest.mark.parametrize("v", ["gluon-fused", "gluon-tma"])
def test_fast_path_replays_the_in_place_launch(v):
    from gluon_lab import fastpath
    fastpath.clear()
    inp = _inputs(64, 16, 8, 128, 128, "bfloat16", seed=6)
    gll.qk_norm_rope(inp[0].clone(), *inp[1:], variant=v)
    plan = fastpath.plan_of("qk_norm_rope", *inp, variant=v)
    assert plan is not None and plan.kind == "launches", plan
    ref = SPEC.reference(*inp)
    out = gll.qk_norm_rope(*inp, variant=v)
    assert out is inp[0]
    assert bench.compare(out, ref, "bfloat16", SPEC.tolerance["bfloat16"])["passed"]
