"""Pattern 5 on a CPU machine: the op's rules (clear errors), the float64 reference against the
definition written out by hand, the eager formulation against it (NeoX, GPT-J, partial rotary),
the custom op's in-place schema, and the structural facts of the Gluon kernel compiled for sm_90
here: two qkv loads and two qkv stores of 128 bits per thread for NeoX (one word load and one word
store for GPT-J), no bar.sync at all, no spills — the seed's "2 loads, 2 stores, no barrier" as a
test that can fail. The Triton baseline's census is checked too (scalar accesses, a CTA barrier),
so the comparison the notebook draws is the compiled code's."""
import math

import pytest
import torch

import gluon_lab as gll
from gluon_lab import bench, codegen, library, specs
from gluon_lab.kernels import qk_norm_rope as q

SPEC = specs.get("qk_norm_rope")


def _inputs(T=5, Hq=4, Hk=2, D=64, R=None, dtype="bfloat16", seed=0):
    return bench.make_inputs("qk_norm_rope", {"T": T, "Hq": Hq, "Hk": Hk, "D": D, "R": R or D}, dtype, seed=seed,
                             device_="cpu")


def _by_hand(qkv, Hq, Hk, D, qw, kw, cache, pos, eps, neox):
    """The definition, one head at a time, in float64."""
    out = qkv.double().clone()
    r = cache.shape[1]
    for t in range(qkv.shape[0]):
        cs = cache[pos[t]].double()
        for h in range(Hq + Hk):
            x = out[t, h * D:(h + 1) * D].clone()
            w = (qw if h < Hq else kw).double()
            y = x / math.sqrt(float((x * x).mean()) + eps) * w
            z = y.clone()
            for i in range(r // 2):
                a, b = (i, i + r // 2) if neox else (2 * i, 2 * i + 1)
                c, s = cs[i], cs[r // 2 + i]
                z[a], z[b] = y[a] * c - y[b] * s, y[b] * c + y[a] * s
            out[t, h * D:(h + 1) * D] = z
    return out


@pytest.mark.parametrize("neox", [True, False])
@pytest.mark.parametrize("D,R", [(64, 64), (128, 64)])
def test_reference_is_the_definition(neox, D, R):
    inp = _inputs(T=3, Hq=2, Hk=1, D=D, R=R)
    ref = SPEC.reference(*inp, eps=1e-6, is_neox=neox)
    torch.testing.assert_close(ref, _by_hand(*inp, 1e-6, neox), atol=1e-12, rtol=1e-12)
    v0 = (2 + 1) * D  # V starts after the Hq + Hk = 3 Q/K heads
    assert torch.equal(ref[:, v0:], inp[0].double()[:, v0:])  # V untouched


@pytest.mark.parametrize("neox", [True, False])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("D,R", [(64, 64), (128, 128), (256, 128)])
def test_torch_variant_in_place_matches_float64(neox, dtype, D, R):
    inp = _inputs(T=17, Hq=4, Hk=2, D=D, R=R, dtype=dtype, seed=3)
    ref = SPEC.reference(*inp, is_neox=neox)
    qkv = inp[0]
    v_before = qkv[:, (4 + 2) * D:].clone()
    out = gll.qk_norm_rope(*inp, is_neox=neox)
    assert out is qkv  # in place, returned
    assert torch.equal(qkv[:, (4 + 2) * D:], v_before)
    ok = bench.compare(out, ref, dtype, SPEC.tolerance[dtype])
    assert ok["passed"], ok


def test_nan_propagates():
    inp = list(_inputs())
    inp[0][2, 3] = float("nan")
    out = gll.qk_norm_rope(*inp)
    assert torch.isnan(out[2, :64]).all() and not torch.isnan(out[1]).any()


def test_clear_errors():
    inp = _inputs()
    qkv, Hq, Hk, D, qw, kw, cache, pos = inp

    def call(*a, **k):
        return gll.qk_norm_rope(*a, **k)

    cases = [
        ((qkv.float(), Hq, Hk, D, qw, kw, cache, pos), TypeError, "qkv.dtype must be torch.bfloat16 or torch.float16"),
        ((qkv, Hq, Hk, 96, qw, kw, cache, pos), ValueError, r"head_dim must be one of \(64, 128, 256\)"),
        ((qkv, Hq + 1, Hk, D, qw, kw, cache, pos), ValueError, r"qkv.shape\[1\] must be \(num_heads_q \+ 2\*num_heads_k\)"),
        ((torch.randn(512, 5, dtype=torch.bfloat16).t(), Hq, Hk, D, qw, kw, cache, pos), ValueError,
         "qkv must be contiguous"),
        ((qkv, Hq, Hk, D, qw[:32], kw, cache, pos), ValueError, r"q_weight must have shape \(64,\)"),
        ((qkv, Hq, Hk, D, qw, kw.float(), cache, pos), TypeError, "k_weight.dtype must equal qkv.dtype"),
        ((qkv, Hq, Hk, D, qw, kw, cache[:, :63], pos), ValueError, "rotary_dim\\) must be even"),
        ((qkv, Hq, Hk, D, qw, kw, cache.half(), pos), TypeError, "cos_sin_cache.dtype must be torch.float32 or qkv.dtype"),
        ((qkv, Hq, Hk, D, qw, kw, cache, pos.int()), TypeError, "positions.dtype must be torch.int64"),
        ((qkv, Hq, Hk, D, qw, kw, cache, pos[:-1]), ValueError, r"positions must have shape \(5,\)"),
        ((qkv, Hq, Hk, D, qw, kw, cache, pos + 10 ** 6), ValueError, r"positions must be in \[0, cos_sin_cache.shape\[0\]"),
        ((qkv, Hq, Hk, D, qw, kw, cache, -pos - 1), ValueError, r"positions must be in \[0"),
    ]
    for args, exc, msg in cases:
        for _ in range(2):  # the same error on a repeated call (the fast path never plans a bad call)
            with pytest.raises(exc, match=msg):
                call(*args)
    with pytest.raises(TypeError, match="is_neox must be a bool"):
        call(*inp, is_neox=1)
    with pytest.raises(ValueError, match="runs on a CUDA GPU"):
        call(*inp, variant="gluon-fused")


def test_positions_are_checked_on_every_call_of_a_planned_signature():
    inp = list(_inputs())
    gll.qk_norm_rope(*inp)
    gll.qk_norm_rope(*inp)  # planned now
    inp[-1] = inp[-1].clone()
    inp[-1][0] = 10 ** 6
    with pytest.raises(ValueError, match="positions must be in"):
        gll.qk_norm_rope(*inp)


def test_custom_op_is_in_place():
    assert library.schema(SPEC).startswith("qk_norm_rope(Tensor(a!) qkv, SymInt num_heads_q")
    assert library.schema(SPEC).endswith("float eps, bool is_neox, str variant) -> ()")
    inp = _inputs()
    ref = SPEC.reference(*inp)
    assert torch.ops.gluon_lab.qk_norm_rope(*inp, 1e-6, True, "torch") is None
    assert bench.compare(inp[0], ref, "bfloat16", SPEC.tolerance["bfloat16"])["passed"]
    from torch.library import opcheck
    opcheck(torch.ops.gluon_lab.qk_norm_rope.default, (*_inputs(seed=4), 1e-6, True, "torch"))


def test_compiled_front_door_has_no_graph_break():
    inp = _inputs(seed=5)
    explain = torch._dynamo.explain(lambda *a: gll.qk_norm_rope(*a) * 1)(*inp)
    assert explain.graph_break_count == 0 and explain.graph_count == 1


def _census(fn, shape, dtype, **kw):
    spec = fn(shape, dtype, **kw)
    return codegen.census(codegen.compile_sm90(**{k: v for k, v in spec.items() if k != "options"}))


@pytest.mark.slow
@pytest.mark.parametrize("D", [64, 128, 256])
@pytest.mark.parametrize("neox", [True, False])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_gluon_census_one_read_one_write_no_barrier(D, neox, dtype):
    shape = {"T": 4096, "Hq": 32, "Hk": 8, "D": D}
    for nw in (1, 4):
        c = _census(q.fused_codegen, shape, dtype, config=q.FusedConfig(nw), is_neox=neox)
        assert c["bar_sync"] == 0, c["bar_sync"]  # no CTA barrier anywhere (so none between a store and a reload)
        assert c["spill_bytes"] == 0 and c["registers"] <= 64, (c["registers"], c["spill_bytes"])
        # qkv's stores: NeoX two 128-bit stores (one per rotary half), GPT-J one (word pairs); one 64-bit store:
        # the positions guard's error word (masked: only a token whose position is out of range writes it)
        assert c["st_global_by_bits"] == {128: 2 if neox else 1, 64: 1}, c["st_global_by_bits"]
        # loads: qkv (2 halves / 1 word row), the weights (4 half vectors / 2 word vectors), cos and sin,
        # the position (64 bits); cos/sin are 128-bit for NeoX (8 elements), 64-bit for GPT-J (4 per word)
        want = {128: 2 + 4 + 2, 64: 1} if neox else {128: 1 + 2, 64: 1 + 2}
        assert c["ld_global_by_bits"] == want, c["ld_global_by_bits"]


@pytest.mark.slow
@pytest.mark.parametrize("D", [64, 128, 256])
@pytest.mark.parametrize("neox", [True, False])
def test_persistent_census_prefetches_without_a_barrier(D, neox):
    c = _census(q.persistent_codegen, {"T": 4096, "Hq": 32, "Hk": 8, "D": D}, "bfloat16", is_neox=neox)
    assert c["bar_sync"] == 0 and c["spill_bytes"] == 0 and c["registers"] <= 96, c
    assert c["st_global_by_bits"] == {128: 2 if neox else 1, 64: 2}, c["st_global_by_bits"]  # + the guard per tile load
    # qkv and the position loaded twice in the code: the prologue's tile and the loop's prefetch of the next
    want = {128: 2 * 2 + 4 + 2, 64: 2} if neox else {128: 2 * 1 + 2, 64: 2 + 2}
    assert c["ld_global_by_bits"] == want, c["ld_global_by_bits"]


@pytest.mark.slow
@pytest.mark.parametrize("D,R", [(128, 64), (64, 32), (256, 128)])
@pytest.mark.parametrize("neox", [True, False])
def test_partial_rotary_census_reads_and_writes_every_piece_once(D, R, neox):
    """Partial rotary keeps the full-head normalization: the two rotary halves and the unrotated tail
    [R, D) are each loaded once and stored once, 128 bits per access, no barrier, for both kernels."""
    shape = {"T": 4096, "Hq": 32, "Hk": 8, "D": D, "R": R}
    vec, _, tpw_d = q.FusedConfig.lanes(R, "bfloat16", neox)
    # per thread and head: the rotary half (NeoX, twice) / the pair words (GPT-J) is one vector; the tail
    # [R, D) = D - R elements (NeoX) or (D - R) / 2 words (GPT-J) over the same tpw_d lanes
    tail = ((D - R) if neox else (D - R) // 2) // (tpw_d * vec)
    qkv = (2 if neox else 1) + tail
    for fn, kw, n_tiles_in_code in ((q.fused_codegen, {"config": q.FusedConfig(4)}, 1), (q.persistent_codegen, {}, 2)):
        c = _census(fn, shape, "bfloat16", is_neox=neox, **kw)
        assert c["bar_sync"] == 0 and c["spill_bytes"] == 0, c
        assert c["st_global_by_bits"] == {128: qkv, 64: n_tiles_in_code}, (fn.__name__, c["st_global_by_bits"])
        # weights: each piece of q_weight and k_weight once (same vectors as the head); cos and sin one each
        weights = 2 * qkv
        cs = {128: 2} if neox else {64: 2}
        want = {128: n_tiles_in_code * qkv + weights + cs.get(128, 0), 64: n_tiles_in_code + cs.get(64, 0)}
        assert c["ld_global_by_bits"] == want, (fn.__name__, c["ld_global_by_bits"], want)


@pytest.mark.slow
@pytest.mark.parametrize("D", [64, 128, 256])
@pytest.mark.parametrize("neox", [True, False])
@pytest.mark.parametrize("tma_store", [True, False])
def test_tma_census_boxes_in_boxes_out_no_register_reads_of_qkv(D, neox, tma_store):
    """gluon-tma: qkv arrives only through TMA boxes (NCOPY per tile: NeoX's two rotary halves, GPT-J's
    words), STAGES boxes in the code (the prologue's STAGES - 1 and the loop's); every ld.global is a
    weight, a cos/sin row or a position; the result leaves through NCOPY TMA stores or 128-bit stores."""
    shape = {"T": 4096, "Hq": 32, "Hk": 8, "D": D}
    cfg = q.TmaConfig(tma_store=tma_store).resolved(shape, "bfloat16")
    c = _census(q.tma_codegen, shape, "bfloat16", config=cfg, is_neox=neox)
    ncopy = 2 if neox else 1
    assert c["sass"]["UTMALDG"] == ncopy * cfg.stages, c["sass"]
    assert c["sass"]["UTMASTG"] == (ncopy if tma_store else 0), c["sass"]
    assert c["spill_bytes"] == 0 and c["registers"] <= 255, c
    assert c["tma_boxes"] == [{"block_size": [cfg.block_t, cfg.block_h, D // 2], "swizzle": 0}], c["tma_boxes"]
    vec, tpw_h, tpw_d = q.FusedConfig.lanes(D, "bfloat16", neox)
    per_thread = cfg.block_t * cfg.block_h * (D // 2) // (32 * cfg.num_warps * vec)  # vectors of a box per thread
    assert c["sass"]["LDS"] == ncopy * per_thread, c["sass"]  # each box read from smem once
    tokens = cfg.block_t // cfg.num_warps  # cache rows per thread (tokens along warps)
    guard = {64: 3 * tokens}  # the positions guard's error word: one masked store per position loaded
    assert c["st_global_by_bits"] == ({} if tma_store else {128: ncopy * per_thread}) | guard, c["st_global_by_bits"]
    cs_sites = 2  # the prologue's rows and the loop's next-tile rows, cos and sin each
    if neox:
        want = {128: 4 + 2 * cs_sites * tokens, 64: 3 * tokens}  # 4 weight halves; positions 3 sites (64-bit)
    else:
        want = {128: 2, 64: 2 * cs_sites * tokens + 3 * tokens}  # 2 weight word rows; cos/sin 4 bf16 = 64 bits
    assert c["ld_global_by_bits"] == want, c["ld_global_by_bits"]


def test_tma_config_rules():
    shape = {"T": 8192, "Hq": 32, "Hk": 8, "D": 128}
    assert q.TmaConfig.heuristic(shape, "bfloat16") == q.TmaConfig(block_t=8, block_h=8)
    assert q.TmaConfig.heuristic({**shape, "D": 64}, "bfloat16").block_t == 16
    assert q.TmaConfig.heuristic({**shape, "Hq": 2, "Hk": 1}, "bfloat16").block_h == 4
    with pytest.raises(ValueError, match="block_t must be a power of 2"):
        q.tma_configure(shape, "bfloat16", {"block_t": 6})
    with pytest.raises(ValueError, match="bytes of shared memory per CTA"):
        q.tma_configure(shape, "bfloat16", {"block_t": 32, "stages": 4, "ctas_per_sm": 2})


def test_gluon_rotary_rules_name_the_variant():
    qkv, Hq, Hk, D, qw, kw, cache, pos = _inputs(D=128, R=48)
    with pytest.raises(ValueError, match=r"'gluon-fused' needs rotary_dim / 2 a power of 2 and >= 8"):
        q.fused_check(qkv, Hq, Hk, D, qw, kw, cache, pos)
    qkv, Hq, Hk, D, qw, kw, cache, pos = _inputs(D=128, R=64)
    q.fused_check(qkv, Hq, Hk, D, qw, kw, cache, pos)  # partial rotary, R / 2 = 32: taken
    with pytest.raises(ValueError, match="'gluon-tma' rotates the whole head"):
        q.tma_check(qkv, Hq, Hk, D, qw, kw, cache, pos)


@pytest.mark.slow
def test_triton_baseline_census_is_what_the_notebook_says():
    c = _census(q.triton_codegen, {"T": 4096, "Hq": 32, "Hk": 8, "D": 128}, "bfloat16")
    assert c["bar_sync"] >= 1  # the cross-warp sum
    assert 128 not in c["ld_global_by_bits"] and 128 not in c["st_global_by_bits"]  # no 128-bit qkv access


def test_heuristic_reasons():
    small = q.FusedConfig.heuristic({"T": 4, "Hq": 32, "Hk": 8, "D": 128}, "bfloat16")
    big = q.FusedConfig.heuristic({"T": 8192, "Hq": 32, "Hk": 8, "D": 128}, "bfloat16")
    assert small.num_warps == 1 and big.num_warps == 4
    assert q.FusedConfig.lanes(128, "bfloat16") == (8, 4, 8) and q.FusedConfig.lanes(128, "bfloat16", False) == (4, 2, 16)
    with pytest.raises(ValueError, match="num_warps must be 1, 2, 4 or 8"):
        q.configure({"T": 1, "Hq": 1, "Hk": 1, "D": 64}, "bfloat16", {"num_warps": 3})


def test_strided_positions_and_weights_are_refused():
    qkv, Hq, Hk, D, qw, kw, cache, pos = _inputs()
    p2 = torch.stack((pos, pos), dim=1)
    with pytest.raises(ValueError, match=r"positions must be contiguous \(stride 1\)"):
        gll.qk_norm_rope(qkv, Hq, Hk, D, qw, kw, cache, p2[:, 0])
    w2 = torch.stack((qw, qw), dim=1)
    with pytest.raises(ValueError, match=r"q_weight must be contiguous \(stride 1\)"):
        gll.qk_norm_rope(qkv, Hq, Hk, D, w2[:, 0], kw, cache, pos)


def test_compiled_in_place_op_keeps_the_gradient_or_refuses_by_name():
    qkv, Hq, Hk, D, qw, kw, cache, pos = _inputs(seed=8)
    torch.manual_seed(0)
    lin = torch.nn.Linear(16, qkv.shape[1], dtype=torch.bfloat16)
    x = torch.randn(5, 16, dtype=torch.bfloat16)

    def f(x, variant="auto"):
        return gll.qk_norm_rope(lin(x), Hq, Hk, D, qw, kw, cache, pos, variant=variant)

    grads = []
    for fn in (f, torch.compile(f, backend="aot_eager", fullgraph=True)):
        lin.weight.grad = None
        (fn(x).float() ** 2).sum().backward()
        grads.append(lin.weight.grad.clone())
    torch.testing.assert_close(grads[0], grads[1], atol=0, rtol=0)  # auto needs grad: the eager formulation
    with pytest.raises(Exception, match="has no backward kernel yet"):  # an explicit kernel variant refuses
        torch.compile(lambda x: f(x, "triton"), backend="aot_eager")(x)
