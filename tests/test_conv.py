"""Pattern 6 on a CPU machine: conv2d's rules (clear errors naming the argument and the rule), the
float64 reference against the definition written out as an explicit im2col GEMM, the torch variant
(the CPU kernel here, cuDNN on the GPU), the custom op, which A path each shape takes, and the sm_90
structure of the Gluon fprop compiled here: every A and B operand arrives by TMA (UTMALDG, no ld.global
at all), wgmma (HGMMA) per k-step, one TMA store per tile, no spills, shared memory per stage."""
import pytest
import torch
import torch.nn.functional as F

import gluon_lab as gll
from gluon_lab import bench, codegen, library, specs
from gluon_lab.kernels import conv, conv_ws
from gluon_lab.specs.conv import gemm_shape, out_size

SPEC = specs.get("conv2d")


def _inputs(B=2, Ci=16, Co=24, H=9, W=7, R=3, stride=1, pad=1, dtype="bfloat16", seed=0):
    return bench.make_inputs("conv2d", dict(B=B, Ci=Ci, Co=Co, H=H, W=W, R=R, stride=stride, pad=pad), dtype, seed=seed,
                             device_="cpu")


def _im2col_gemm(x, w, stride, pad):
    """The definition: y[b, co, oh, ow] = sum_{r, s, c} x[b, c, oh*stride + r - pad, ow*stride + s - pad] w[co, c, r, s]."""
    B, Ci, H, W = x.shape
    Co, _, R, _ = w.shape
    OH, OW = out_size(H, R, stride, pad), out_size(W, R, stride, pad)
    xp = F.pad(x.double(), (pad, pad, pad, pad))
    cols = torch.zeros(B, OH, OW, R, R, Ci, dtype=torch.float64)
    for r in range(R):
        for s in range(R):
            cols[:, :, :, r, s, :] = xp[:, :, r:r + stride * (OH - 1) + 1:stride, s:s + stride * (OW - 1) + 1:stride] \
                .permute(0, 2, 3, 1)
    A = cols.reshape(B * OH * OW, R * R * Ci)
    Bm = w.double().permute(2, 3, 1, 0).reshape(R * R * Ci, Co)
    return (A @ Bm).reshape(B, OH, OW, Co).permute(0, 3, 1, 2)


@pytest.mark.parametrize("R,stride,pad", [(3, 1, 1), (3, 2, 1), (1, 1, 0), (1, 2, 0), (3, 1, 0), (3, 2, 0)])
def test_reference_is_the_im2col_gemm(R, stride, pad):
    inp = _inputs(R=R, stride=stride, pad=pad, H=9, W=8)
    ref = SPEC.reference(*inp)
    torch.testing.assert_close(ref, _im2col_gemm(inp[0], inp[1], stride, pad), atol=1e-10, rtol=1e-10)
    M, N, K = gemm_shape(SPEC.shape_of(*inp))
    assert (M, N, K) == (ref.shape[0] * ref.shape[2] * ref.shape[3], 24, R * R * 16)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_torch_variant_matches_float64_and_keeps_channels_last(dtype):
    inp = _inputs(stride=2, H=10, W=11, dtype=dtype, seed=3)
    y = gll.conv2d(*inp)
    assert y.is_contiguous(memory_format=torch.channels_last) and y.shape == (2, 24, 5, 6)
    ok = bench.compare(y, SPEC.reference(*inp), dtype, SPEC.tolerance[dtype])
    assert ok["passed"], ok


def test_defaults_and_a_plain_nhwc_tensor():
    x, w, _, _ = _inputs(pad=0)
    y = gll.conv2d(x, w)  # stride=1, padding=0
    assert y.shape == (2, 24, 7, 5)
    nhwc = x.permute(0, 2, 3, 1).contiguous()  # a plain NHWC tensor, passed as its NCHW view
    torch.testing.assert_close(gll.conv2d(nhwc.permute(0, 3, 1, 2), w), y)
    # an OIHW-contiguous weight is the same weight
    torch.testing.assert_close(gll.conv2d(x, w.contiguous()), y)


def test_clear_errors():
    x, w, _, _ = _inputs()
    cases = [
        ((x.float(), w), TypeError, "x.dtype must be one of torch.bfloat16, torch.float16"),
        ((x[0], w), ValueError, r"x must have at least 4 dimension"),
        ((x, w[:, :8]), ValueError, r"weight.shape\[1\] must equal x.shape\[1\] \(Ci = 16\); got 8 \(groups = 2"),
        ((x, w[..., :2]), ValueError, r"kernel must be square with R = S in \(1, 3\); got 3x2"),
        ((x, torch.randn(24, 16, 5, 5, dtype=torch.bfloat16)), ValueError, "got 5x5"),
        ((x, w.half()), TypeError, "weight.dtype must equal x.dtype"),
        ((x.contiguous(), w), ValueError, "x must be channels-last in memory"),
        ((x, w, 3), ValueError, r"stride must be one of \(1, 2\); got 3"),
        ((x, w, (1, 1)), TypeError, "stride must be an int"),
        ((x, w, 1, 2), ValueError, r"padding must be one of \(0, 1\); got 2"),
        ((x[:, :, :2, :2], w, 1, 0), ValueError, "the output would be empty"),
    ]
    for args, exc, msg in cases:
        for _ in range(2):  # the same error on a repeated call (the fast path never plans a bad call)
            with pytest.raises(exc, match=msg):
                gll.conv2d(*args)
    with pytest.raises(ValueError, match="runs on a CUDA GPU"):
        gll.conv2d(x, w, variant="gluon-pipelined")


def test_custom_op_schema_and_opcheck():
    assert library.schema(SPEC) == "conv2d(Tensor x, Tensor weight, SymInt stride, SymInt padding, str variant) -> Tensor"
    from torch.library import opcheck
    x, w, s, p = _inputs(seed=4)
    opcheck(torch.ops.gluon_lab.conv2d.default, (x, w, s, p, "torch"))


@pytest.mark.parametrize("shape,path", [
    (dict(B=1, Ci=64, Co=64, H=8, W=8, R=3, stride=1, pad=1), "tma"),
    (dict(B=1, Ci=64, Co=64, H=8, W=8, R=3, stride=2, pad=1), "tma"),
    (dict(B=1, Ci=64, Co=64, H=7, W=8, R=3, stride=2, pad=1), "cp.async"),  # odd H: no parity split
    (dict(B=1, Ci=3, Co=64, H=8, W=8, R=3, stride=1, pad=1), "pad + cp.async"),  # RGB: 6-byte channel stride
    (dict(B=1, Ci=64, Co=36, H=8, W=8, R=1, stride=1, pad=0), "pad + cp.async"),  # Co % 8
])
def test_a_path_names_the_rule(shape, path):
    got, why = conv.a_path(shape)
    assert got == path and why
    if path != "tma":  # the TMA kernels refuse it, naming the rule and the variant that runs it
        x = torch.empty(shape["B"], shape["Ci"], shape["H"], shape["W"], dtype=torch.bfloat16).to(
            memory_format=torch.channels_last)
        w = torch.empty(shape["Co"], shape["Ci"], shape["R"], shape["R"], dtype=torch.bfloat16)
        with pytest.raises(ValueError, match=r"needs the tiled-TMA path: .*use variant='gluon-gather'"):
            conv.check(x, w, shape["stride"], shape["pad"])


@pytest.mark.slow
@pytest.mark.parametrize("shape", [dict(B=8, Ci=320, Co=320, H=63, W=63, R=3, stride=2, pad=1),
                                   dict(B=8, Ci=3, Co=32, H=224, W=224, R=3, stride=2, pad=1)],
                         ids=["odd-HW-stride2", "rgb-stem"])
def test_gluon_gather_census(shape):
    """gluon-gather: every k-step's A and B by 16-byte cp.async (BM·BK/8 + BN·BK/8 copies over the threads,
    at the NUM_STAGES − 2 prologue steps and the loop's one), no TMA loads and no register gathers; per step a
    wait_group, an async-proxy fence and a CTA barrier before the wgmma; a TMA-store epilogue; no spills."""
    import re
    cfg = conv.GatherConfig.heuristic(shape, "bfloat16")
    spec = conv.gather_codegen(shape, "bfloat16")
    k = codegen.compile_sm90(**{k: v for k, v in spec.items() if k != "options"})
    c = codegen.census(k)
    per_step = (cfg.BM + cfg.BN) * cfg.BK // 8 // (32 * cfg.num_warps)
    assert c["cp_async"] == per_step * (cfg.num_stages - 2 + 1), c
    assert set(re.findall(r"cp\.async\.cg\.shared\.global \[[^\]]+\], \[[^\]]+\], (0x\w+)", k.asm["ptx"])) == {"0x10"}
    assert c["tma_load"] == 0 and c["ld_global"] == 0 and c["sass"]["UTMASTG"] == 1, c
    assert c["fence_proxy_async"] >= 1 and c["bar_sync"] >= 1 and "cp.async.wait_group" in k.asm["ptx"]
    assert c["sass"]["HGMMA"] == (cfg.BK // 16) * (cfg.BM // 64) // (cfg.num_warps // 4), c["sass"]
    assert c["spill_bytes"] == 0 and c["smem_bytes"] >= cfg.num_stages * (cfg.BM + cfg.BN) * cfg.BK * 2


def _census(shape, cfg=None, dtype="bfloat16"):
    spec = conv.fprop_codegen(shape, dtype, config=cfg)
    return codegen.census(codegen.compile_sm90(**{k: v for k, v in spec.items() if k != "options"}))


SHAPES = [dict(B=128, Ci=384, Co=384, H=64, W=64, R=3, stride=1, pad=1),
          dict(B=8, Ci=320, Co=320, H=64, W=64, R=3, stride=2, pad=1),
          dict(B=8, Ci=256, Co=512, H=32, W=32, R=1, stride=1, pad=0)]


@pytest.mark.slow
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s['Ci']}-{s['Co']}-R{s['R']}-s{s['stride']}")
def test_gluon_fprop_census(shape):
    cfg = conv.ConvConfig.heuristic(shape, "bfloat16")
    c = _census(shape)
    # A and B of every k-step by TMA: 2 boxes per step, NUM_STAGES steps in the code (prologue + loop)
    assert c["sass"]["UTMALDG"] == 2 * cfg.num_stages, c["sass"]
    assert c["ld_global"] == 0 and c["st_global"] == 0 and c["cp_async"] == 0, c  # no register gathers at all
    assert c["sass"]["UTMASTG"] == 1, c["sass"]  # the epilogue: one TMA store per tile
    # wgmma per k-step: BK / 16 instructions per m64 block, BM / 64 blocks over num_warps / 4 warpgroups
    assert c["sass"]["HGMMA"] == (cfg.BK // 16) * (cfg.BM // 64) // (cfg.num_warps // 4), c["sass"]
    assert c["spill_bytes"] == 0, c["spill_bytes"]
    per_stage = (cfg.BM + cfg.BN) * cfg.BK * 2
    assert c["smem_bytes"] >= cfg.num_stages * per_stage + cfg.BM * cfg.BN * 2  # ring + epilogue staging
    assert c["smem_bytes"] <= cfg.smem_bytes("bfloat16") + 1024, (c["smem_bytes"], cfg.smem_bytes("bfloat16"))
    boxes = [b["block_size"] for b in c["tma_boxes"]]
    assert [1, cfg.TH, 1, cfg.TW, cfg.BK] in boxes and [cfg.BN, 1, cfg.BK] in boxes


@pytest.mark.slow
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s['Ci']}-{s['Co']}-R{s['R']}-s{s['stride']}")
def test_gluon_ws_fprop_census(shape):
    """gluon-ws: the boxes are issued at ONE place (the 1-warp producer's loop: 2 UTMALDG in the code),
    the producer runs at its setmaxnreg budget, the consumers' wgmma as in gluon-pipelined."""
    cfg = conv_ws.WsConvConfig.heuristic(shape, "bfloat16")
    spec = conv_ws.fprop_ws_codegen(shape, "bfloat16")
    c = codegen.census(codegen.compile_sm90(**{k: v for k, v in spec.items() if k != "options"}))
    assert c["sass"]["UTMALDG"] == 2 and c["sass"]["UTMASTG"] == 1, c["sass"]
    assert cfg.producer_regs in c["setmaxnreg_values"] and c["sass"]["USETMAXREG"] > 0, c["setmaxnreg_values"]
    assert c["sass"]["HGMMA"] == (cfg.BK // 16) * (cfg.BM // 64) // (cfg.num_warps // 4), c["sass"]
    assert c["ld_global"] == 0 and c["st_global"] == 0 and c["spill_bytes"] == 0, c


@pytest.mark.slow
def test_gluon_ws_fprop_timeline_build_stamps_only_when_asked():
    """The INSTRUMENT build of gluon-ws fprop (a split-K launch: the SM-idle 8x8 image) reads %globaltimer three
    times per unit (start, last MMA issued, epilogue issued) and stores the 4 stamps (igemm.trace.unit_stamps);
    the timed build reads it nowhere and is the same kernel with or without the hook (same PTX)."""
    shape = dict(B=2, Ci=1280, Co=1280, H=8, W=8, R=3, stride=1, pad=1)
    cfg = conv_ws.WsConvConfig.heuristic(shape, "bfloat16")
    spec = conv_ws.fprop_ws_codegen(shape, "bfloat16", cfg)
    assert spec["constexprs"]["SPLIT_K"] > 1, spec["constexprs"]  # the schedule the timeline is about
    compile_ = lambda sp: codegen.compile_sm90(**{k: v for k, v in sp.items() if k != "options"})
    plain, inst = compile_(spec), compile_(conv_ws.fprop_ws_codegen(shape, "bfloat16", cfg, instrument=True))
    assert "globaltimer" not in plain.asm["ptx"]
    assert inst.asm["ptx"].count("%globaltimer") == 3
    ci = codegen.census(inst)
    assert ci["st_global"] >= 4 and ci["spill_bytes"] == 0, ci


def test_heuristic_reasons():
    h = conv.ConvConfig.heuristic
    ex, sd2, rn = dict(B=128, Ci=384, Co=384, H=64, W=64, R=3, stride=1, pad=1), SHAPES[1], SHAPES[2]
    big = h(ex, "bfloat16")  # 3x3 on rows >= 32 wide: BM = 256 (8 x 32) on 2 warpgroups, BN 128, 3 stages
    assert (big.TH, big.TW, big.BM, big.BN, big.num_warps, big.num_stages) == (8, 32, 256, 128, 8, 3)
    assert (h(sd2, "bfloat16").TH, h(sd2, "bfloat16").TW) == (8, 32)  # stride 2, 32-wide output rows too
    one = h(dict(B=8, Ci=640, Co=320, H=32, W=32, R=1, stride=1, pad=0), "bfloat16")  # 1x1: BM 128, 5 stages
    assert (one.TH, one.TW, one.BN, one.num_stages, one.num_warps) == (4, 32, 128, 5, 4)
    r256 = h(rn, "bfloat16")  # Co % 256: BN 256 on 8 warps
    assert r256.BN == 256 and r256.num_warps == 8 and r256.num_stages == 3 and r256.BM == 128
    assert h(dict(B=1, Ci=64, Co=64, H=7, W=7, R=3, stride=1, pad=1), "bfloat16").TW == 8  # 7-wide output rows
    assert h(dict(B=1, Ci=64, Co=64, H=7, W=7, R=3, stride=1, pad=1), "bfloat16").BN == 64  # Co < 128
    with pytest.raises(ValueError, match="must be a power of 2"):
        conv.configure(SHAPES[0], "bfloat16", {"TW": 24})
    with pytest.raises(ValueError, match="shared memory"):
        conv.configure(SHAPES[0], "bfloat16", {"BN": 256, "num_stages": 5, "num_warps": 8})
    # dgrad's sub-problems take fprop's choice for the same filter size and grid
    d = conv.dgrad_configure(dict(B=8, Ci=320, Co=320, H=64, W=64, R=3, stride=2, pad=1), "bfloat16", {})
    assert (d.TH, d.TW, d.BN) == (8, 32, 128)


def test_wgrad_split_minimizes_waves_times_steps():
    """The wgrad split: waves x (k-steps per split + 4) at its minimum — few long splits for a short pixel
    loop on many tiles (ResNet's 1x1 downsample: 4), many for a long one (the example shape)."""
    cfg = conv.WgradConfig()
    assert cfg.split_count(32, 256) == 4 and cfg.split_count(15, 128) == 8 and cfg.split_count(81, 8192) >= 8
    for t, p in ((32, 256), (81, 8192), (15, 128), (200, 40)):
        s = cfg.split_count(t, p)
        cost = lambda k: conv.cdiv(t * conv.cdiv(p, conv.cdiv(p, k)), conv.H200_SMS) * (conv.cdiv(p, k) + 4)
        assert all(cost(s) <= cost(k) for k in range(1, max(1, p // 4) + 1)), (t, p, s)
    assert conv.WgradConfig(splits=3).split_count(32, 256) == 3
    ex = conv.WgradConfig.heuristic(dict(B=128, Ci=384, Co=384, H=64, W=64, R=3, stride=1, pad=1), "bfloat16")
    assert (ex.TH, ex.TW, ex.num_stages) == (4, 32, 3)  # 128-pixel k-steps on the long pixel loop


@pytest.mark.slow
def test_triton_baseline_census():
    spec = conv.triton_codegen(SHAPES[1], "bfloat16")
    c = codegen.census(codegen.compile_sm90(**{k: v for k, v in spec.items() if k != "options"}))
    assert c["cp_async"] > 0 and c["wgmma"] > 0 and c["tma_load"] == 0  # pointer gathers, pipelined by Triton


# ---- dgrad (conv2d_input_grad) -------------------------------------------------------------------
DSPEC = specs.get("conv2d_input_grad")


def _dinputs(B=2, Ci=16, Co=24, H=10, W=9, R=3, stride=1, pad=1, dtype="bfloat16", seed=0):
    return bench.make_inputs("conv2d_input_grad", dict(B=B, Ci=Ci, Co=Co, H=H, W=W, R=R, stride=stride, pad=pad), dtype,
                             seed=seed, device_="cpu")


@pytest.mark.parametrize("R,stride,pad", [(3, 1, 1), (3, 2, 1), (1, 1, 0), (1, 2, 0), (3, 1, 0), (3, 2, 0)])
def test_dgrad_reference_is_autograd_of_conv2d(R, stride, pad):
    dy, w, H, W, s, p = _dinputs(R=R, stride=stride, pad=pad)
    x = torch.zeros(2, 16, H, W, dtype=torch.float64, requires_grad=True)
    F.conv2d(x, w.double(), stride=stride, padding=pad).backward(dy.double())
    torch.testing.assert_close(DSPEC.reference(dy, w, H, W, s, p), x.grad, atol=1e-10, rtol=1e-10)
    got = gll.conv2d_input_grad(dy, w, H, W, s, p)
    assert got.is_contiguous(memory_format=torch.channels_last)
    # on a CPU the public call runs eager torch (variant="auto" -> "torch"): exactly torch's own bf16 dgrad, whose
    # CPU kernel accumulates in bf16 (rel. error ~4e-3 here, one element past the GPU kernels' 1e-2 element test
    # on some CPUs), so the float64 check is on the norm of the error
    same = torch.nn.grad.conv2d_input(x.shape, w, dy, stride=s, padding=p)
    torch.testing.assert_close(got, same.contiguous(memory_format=torch.channels_last), atol=0, rtol=0)
    assert bench.compare(got, x.grad, "bfloat16")["rel_err"] < 1e-2
    torch.testing.assert_close(gll.conv2d_input_grad_like_torch((2, 16, H, W), w, dy, s, p), got)


def test_dgrad_clear_errors():
    dy, w, H, W, s, p = _dinputs()
    cases = [
        ((dy, w, H + 3, W, s, p), ValueError, r"input size 13 x 9 .* gives a 13 x 9 output; grad_output is 10 x 9"),
        ((dy, w[:20], H, W, s, p), ValueError, r"weight.shape\[0\] must equal grad_output.shape\[1\] \(Co = 24\)"),
        ((dy.contiguous(), w, H, W, s, p), ValueError, "grad_output must be channels-last"),
        ((dy, w, 0, W, s, p), ValueError, "input_h must be a positive int"),
        ((dy, w, H, W, 3, p), ValueError, r"stride must be one of \(1, 2\)"),
    ]
    for args, exc, msg in cases:
        with pytest.raises(exc, match=msg):
            gll.conv2d_input_grad(*args)
    with pytest.raises(ValueError, match=r"input_size \(B, Ci\) = \(2, 8\) must match"):
        gll.conv2d_input_grad_like_torch((2, 8, H, W), w, dy, s, p)
    assert library.schema(DSPEC).startswith("conv2d_input_grad(Tensor grad_output, Tensor weight, SymInt input_h")


@pytest.mark.slow
def test_gluon_dgrad_is_the_fprop_kernel_on_rotated_filters():
    """Stride-1 dgrad compiles to the fprop kernel (same census) at padding R - 1 - pad; the rotated
    filters equal W flipped with Ci and Co swapped."""
    shape = dict(B=8, Ci=320, Co=384, H=64, W=64, R=3, stride=1, pad=0)
    spec = conv.dgrad_codegen(shape, "bfloat16")
    assert spec["fn"] is conv.conv_fprop_kernel and spec["constexprs"]["PAD_H"] == 2
    c = codegen.census(codegen.compile_sm90(**{k: v for k, v in spec.items() if k != "options"}))
    cfg = conv.dgrad_configure(shape, "bfloat16", {})
    assert c["sass"]["UTMALDG"] == 2 * cfg.num_stages and c["ld_global"] == 0 and c["spill_bytes"] == 0
    # stride 2: the largest sub-problem (R = 3, pad 1: the 2 x 2 taps of the odd parities) on the same kernel
    s2 = conv.dgrad_codegen({**shape, "stride": 2, "pad": 1}, "bfloat16")
    assert s2["fn"] is conv.conv_fprop_kernel and (s2["constexprs"]["RH"], s2["constexprs"]["RW"]) == (2, 2)
    assert s2["signature"]["OPH"] == "constexpr" and s2["constexprs"]["OPH"] == 1  # written at parity 1
    w = torch.randn(5, 3, 3, 3)
    wr = conv.dgrad_weight(w)
    assert wr.shape == (3, 5, 3, 3) and torch.equal(wr[1, 2, 0, 2], w[2, 1, 2, 0])
    assert wr.is_contiguous(memory_format=torch.channels_last)


def _emulate_launch(L, dy, w_all, dx):
    """What one fprop-kernel launch computes, in float64 on the CPU: out[i, j] = sum over taps (th, tw) and
    channels of dy[i + th - pad_h, j + tw - pad_w] * w_all[:, tap0 + th * RW + tw, :] (zero outside),
    written to dx[:, :, P*i + oph, P*j + col] (col: a ParityLaunch's column parity, its view's base)."""
    B, C, OH, OW = dy.shape
    ph, pw = max(0, L.pad_h), max(0, L.pad_w)
    pad = F.pad(dy, (pw, pw + L.RW, ph, ph + L.RH))
    out = torch.zeros(B, w_all.shape[0], L.OH, L.OW, dtype=torch.float64)
    for th in range(L.RH):
        for tw in range(L.RW):
            h0, w0 = th - L.pad_h + ph, tw - L.pad_w + pw
            a = pad[:, :, h0:h0 + L.OH, w0:w0 + L.OW]
            out += torch.einsum("bchw,oc->bohw", a, w_all[:, L.tap0 + th * L.RW + tw, :])
    dx[:, :, L.oph::L.P, getattr(L, "col", 0)::L.P] = out  # ParityLaunch: the column parity is its base


@pytest.mark.parametrize("R,stride,pad", [(3, 1, 1), (3, 1, 0), (1, 1, 0), (3, 2, 1), (3, 2, 0), (1, 2, 0),
                                          (1, 2, 1)])
def test_dgrad_subproblems_reproduce_the_reference(R, stride, pad):
    """The stride**2 launches dgrad makes (sub-filters, tap shifts, output parities), emulated in float64
    on the CPU, equal torch.nn.grad.conv2d_input; parities no tap reaches are exactly the zero ones."""
    H, W = 12, 10
    OH, OW = (H + 2 * pad - R) // stride + 1, (W + 2 * pad - R) // stride + 1
    g = torch.Generator().manual_seed(R * 10 + stride * 3 + pad)
    dy = torch.randn(2, 16, OH, OW, generator=g, dtype=torch.float64).to(memory_format=torch.channels_last)
    w = torch.randn(16, 8, R, R, generator=g, dtype=torch.float64)
    dx = torch.full((2, 8, H, W), float("nan"), dtype=torch.float64)
    subs = conv.dgrad_subproblems(R, pad, stride)
    assert len(subs) == stride * stride
    for ph, pw, rt, st, _, _ in subs:
        if not (rt and st):
            dx[:, :, ph::stride, pw::stride] = 0
    launches = conv.dgrad_launches(dy, w, dx, stride, pad)
    assert [L.RH * L.RW for L in launches] == sorted((L.RH * L.RW for L in launches), reverse=True)
    if stride == 2:  # each parity its own view of dx (base + col·Ci, last dim Ci): no launch writes another's pixels
        assert all(isinstance(L, conv.ParityLaunch) for L in launches)
        assert len({(L.oph, L.col) for L in launches}) == len(launches)
    assert sum(L.RH * L.RW for L in launches) == conv._dgrad_filters(w, R, pad, stride).shape[1] <= R * R
    for L in launches:
        _emulate_launch(L, dy, conv._dgrad_filters(w, R, pad, stride), dx)
    ref = torch.nn.grad.conv2d_input((2, 8, H, W), w, dy, stride=stride, padding=pad)
    torch.testing.assert_close(dx, ref, atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize("stride", [1, 2])
def test_dgrad_launch_descriptors(stride):
    """The host side of every dgrad launch builds its TMA descriptors (CPU tensors suffice): x = grad_output's
    view, the sub-filter at its tap offset, and dx's view — at stride 2 based at dx + pw·Ci with last dim Ci."""
    dy = torch.randn(2, 64, 8, 6, dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    w = torch.randn(64, 40, 3, 3, dtype=torch.bfloat16)
    H, W = 8 * stride, 6 * stride
    dx = torch.empty(2, 40, H, W, dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    cfg = conv.dgrad_configure(dict(B=2, Ci=40, Co=64, H=H, W=W, R=3, stride=stride, pad=1), "bfloat16", {})
    for L in conv.dgrad_launches(dy, w, dx, stride, 1):
        x_d, w_d, y_d = L.descriptors(cfg, "bfloat16")
        assert y_d.shape[-1] == 40 and y_d.shape[2] == stride
        assert y_d.base.data_ptr() == dx.data_ptr() + 2 * 40 * getattr(L, "col", 0)
        assert w_d.base.data_ptr() == w_d.base.untyped_storage().data_ptr() + 2 * L.tap0 * 64


# ---- wgrad (conv2d_weight_grad) ------------------------------------------------------------------
WSPEC = specs.get("conv2d_weight_grad")


@pytest.mark.parametrize("R,stride,pad", [(3, 1, 1), (3, 2, 1), (1, 1, 0), (1, 2, 0), (3, 1, 0)])
def test_wgrad_reference_is_autograd_of_conv2d(R, stride, pad):
    inp = bench.make_inputs("conv2d_weight_grad", dict(B=2, Ci=16, Co=24, H=10, W=9, R=R, stride=stride, pad=pad),
                            "bfloat16", seed=1, device_="cpu")
    x, dy = inp[0], inp[1]
    w = torch.zeros(24, 16, R, R, dtype=torch.float64, requires_grad=True)
    F.conv2d(x.double(), w, stride=stride, padding=pad).backward(dy.double())
    torch.testing.assert_close(WSPEC.reference(*inp), w.grad, atol=1e-10, rtol=1e-10)
    got = gll.conv2d_weight_grad(*inp)
    assert got.is_contiguous(memory_format=torch.channels_last)
    assert bench.compare(got, w.grad, "bfloat16", WSPEC.tolerance["bfloat16"])["passed"]
    torch.testing.assert_close(gll.conv2d_weight_grad_like_torch(x, (24, 16, R, R), dy, stride, pad), got)


def test_wgrad_clear_errors():
    x, dy, R, s, p = bench.make_inputs("conv2d_weight_grad", dict(B=2, Ci=16, Co=24, H=10, W=9, R=3, stride=1, pad=1),
                                       "bfloat16", seed=1, device_="cpu")
    with pytest.raises(ValueError, match=r"grad_output's spatial size must be 10 x 9"):
        gll.conv2d_weight_grad(x, dy[:, :, :8], R, s, p)
    with pytest.raises(ValueError, match=r"kernel_size must be one of \(1, 3\)"):
        gll.conv2d_weight_grad(x, dy, 5, s, p)
    with pytest.raises(ValueError, match="grad_output must be channels-last"):
        gll.conv2d_weight_grad(x, dy.contiguous(), R, s, p)
    with pytest.raises(ValueError, match=r"weight_size \(Co, Ci\) = \(24, 8\) must match"):
        gll.conv2d_weight_grad_like_torch(x, (24, 8, 3, 3), dy, s, p)


@pytest.mark.slow
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s['Ci']}-{s['Co']}-R{s['R']}-s{s['stride']}")
def test_gluon_wgrad_census(shape):
    """wgrad: both operands by TMA (2 boxes per k-step, NUM_STAGES in the code), wgmma with the grad_output
    box as a transposed A, no register loads of either operand, the partial sums leave as fp32 atomics
    (no plain stores), no spills."""
    cfg = conv.WgradConfig.heuristic(shape, "bfloat16")
    spec = conv.wgrad_codegen(shape, "bfloat16")
    c = codegen.census(codegen.compile_sm90(**{k: v for k, v in spec.items() if k != "options"}))
    assert c["sass"]["UTMALDG"] == 2 * cfg.num_stages and c["sass"]["HGMMA"] == (cfg.TH * cfg.TW // 16) * (cfg.BM // 64)
    assert c["ld_global"] == 0 and c["st_global"] == 0 and c["spill_bytes"] == 0, c
    assert c["smem_bytes"] <= cfg.smem_bytes("bfloat16") + 1024


def test_ws_split_config_rules():
    """More slices than a launch's k-steps run one slice per k-step (checked against float64 in the schedule
    test above: split_k 8 on 3-k-step sub-problems); out-of-range split_k is refused naming the rule."""
    from gluon_lab.kernels import conv_ws
    cfg = conv_ws.WsConvConfig(split_k=8)
    assert cfg.plan(tiles=4, k_tiles=3, sms=132) == (3, 0, 12)
    assert cfg.plan(tiles=264, k_tiles=64, sms=132)[0] == 8  # explicit: split even where the auto rule would not
    assert conv_ws.WsConvConfig(split_k=0).plan(264, 64, 132) == (1, 0, 264)
    with pytest.raises(ValueError, match="split_k must be in 0..16"):
        conv_ws.WsConvConfig(split_k=17).validate("bfloat16")


def test_wgrad_short_loop_rules():
    """WgradConfig.heuristic on short pixel loops (<= WGRAD_SHORT_LOOP k-steps), at the 06 plan's shapes (the
    measured reasons are in the code): BM 64 under two waves of 128 x 128 tiles, 2 stages on <= 8 k-steps with
    >= two waves of tiles; long loops keep 128 x 128 and 4 stages."""
    def pick(B, Ci, Co, H, R, stride=1):
        c = conv.WgradConfig.heuristic(dict(B=B, Ci=Ci, Co=Co, H=H, W=H, R=R, stride=stride, pad=R // 2), "bfloat16")
        return c.TH, c.TW, c.BM, c.BN, c.num_stages

    assert pick(1, 512, 512, 32, 3) == (2, 32, 64, 128, 4)     # 144 tiles, 16 k-steps: BM 64
    assert pick(1, 512, 512, 7, 3) == (8, 8, 64, 128, 2)       # 1 k-step, 288 tiles at BM 64: 2 stages too
    assert pick(2, 1280, 1280, 8, 3) == (8, 8, 128, 128, 2)    # 900 tiles, 2 k-steps: 2 stages
    assert pick(2, 1280, 1280, 16, 3) == (4, 16, 128, 128, 2)  # 900 tiles, 8 k-steps: 2 stages
    assert pick(4, 1280, 1280, 8, 1) == (8, 8, 64, 128, 4)     # 100 tiles: BM 64; 200 < 2 waves: 4 stages
    for long_loop in ((64, 256, 256, 14, 3), (8, 640, 320, 32, 1), (8, 320, 320, 64, 3, 2), (64, 512, 1024, 28, 1, 2)):
        assert pick(*long_loop)[2:] == (128, 128, 4), long_loop


def test_ws_split_bn_rule():
    """gluon-ws's BN in the split-K regime (conv_ws._split_bn): 128 where it fills more SMs or BN 256's slices
    are short; 256 where the fill ties and the slices are long, and wherever no split is needed."""
    def bn(B, Ci, Co, H, R, stride=1):
        return conv_ws.WsConvConfig.heuristic(dict(B=B, Ci=Ci, Co=Co, H=H, W=H, R=R, stride=stride, pad=R // 2),
                                              "bfloat16").BN

    assert bn(1, 512, 512, 7, 3) == 128     # 32 vs 16 units
    assert bn(2, 1280, 1280, 8, 3) == 128   # 120 vs 80 units
    assert bn(4, 1280, 1280, 8, 1) == 128   # 120 vs 80 units
    assert bn(1, 512, 512, 32, 3) == 128    # 128 units each; BN 256's slices 9 k-steps < SHORT_SLICE
    assert bn(2, 1280, 1280, 16, 3) == 256  # 120 units each; slices of 30 k-steps
    assert bn(64, 256, 256, 14, 3) == 256 and bn(64, 512, 1024, 28, 1, 2) == 256  # tiles fill the SMs: no split


@pytest.mark.slow
def test_short_loop_picks_compile_and_census():
    """The new picks compile for sm_90: wgrad at BM 64 / 2 stages (one split: the gradient stored directly, no
    atomics; the 32-bit stores of the wgmma layout are counted, not hidden) and gluon-ws at BN 128 under split-K
    (the producer's 2 boxes, the consumers' m64n128 wgmma, the TMA store of the patch)."""
    s = dict(B=1, Ci=512, Co=512, H=7, W=7, R=3, stride=1, pad=1)
    c = codegen.census(codegen.compile_sm90(**{k: v for k, v in conv.wgrad_codegen(s, "bfloat16").items()
                                               if k != "options"}))
    assert c["sass"]["UTMALDG"] == 4 and c["sass"]["HGMMA"] == 4 and c["wgmma_shapes"] == ["m64n128k16"], c["sass"]
    assert c["ld_global"] == 0 and c["st_global_by_bits"] == {32: 32} and c["spill_bytes"] == 0, c
    assert c["smem_bytes"] <= conv.WgradConfig.heuristic(s, "bfloat16").smem_bytes("bfloat16") + 1024
    spec = conv_ws.fprop_ws_codegen(s, "bfloat16")
    assert spec["constexprs"]["SPLIT_K"] == 8, spec["constexprs"]  # 4 tiles of BN 128 (2 of BN 256) x 8 slices
    c = codegen.census(codegen.compile_sm90(**{k: v for k, v in spec.items() if k != "options"}))
    assert c["sass"]["UTMALDG"] == 2 and c["sass"]["UTMASTG"] == 1 and c["spill_bytes"] == 0, c["sass"]
    assert "m64n128k16" in c["wgmma_shapes"], c["wgmma_shapes"]


@pytest.mark.slow
def test_gluon_ws_serial_split_census():
    """Serial split-K (WsConvConfig(serial=True)) on a split launch: CUTLASS's semaphore order in the PTX — the
    consumer partition's named barrier (bar.sync 0, 128: 4 warps, not the whole CTA with its producer warp), one
    acq_rel atomic from one thread, the reset exchange — then the last slice's L1-bypassing loads of the partials
    and a second TMA store (the tile's own); no spill. An unsplit launch compiles the same with or without it."""
    import dataclasses
    import re
    shape = dict(B=4, Ci=1280, Co=1280, H=8, W=8, R=1, stride=1, pad=0)
    base = conv_ws.WsConvConfig.heuristic(shape, "bfloat16")
    compile_ = lambda cfg: codegen.compile_sm90(**{k: v for k, v in conv_ws.fprop_ws_codegen(  # noqa: E731
        shape, "bfloat16", cfg).items() if k != "options"})
    ser = compile_(dataclasses.replace(base, split_k=4, serial=True))
    ptx = ser.asm["ptx"]
    atom = ptx.index("atom.global.gpu.acq_rel.add.u32")
    before = ptx[:atom]
    assert before[before.rindex("bar.sync"):].startswith("bar.sync \t0, 128;")  # the partition's barrier, then
    assert re.search(r"@%p\d+ $", before)  # the atomic from one thread (predicated)
    assert ptx.count("atom.global.gpu.acq_rel.add") == 1 and ptx.count("atom.global.gpu.relaxed.exch") == 1
    c = codegen.census(ser)
    assert c["sass"]["UTMASTG"] == 2 and c["spill_bytes"] == 0, c  # the whole tiles' store and the last slice's
    assert "ld.global.cg" in ptx and c["ld_global"] > 0, c
    fix = codegen.census(compile_(dataclasses.replace(base, split_k=4)))
    assert fix["ld_global"] == 0 and fix["sass"]["UTMASTG"] == 1, fix
    one = dataclasses.replace(base, split_k=1)
    assert compile_(one).asm["ptx"] == compile_(dataclasses.replace(one, serial=True)).asm["ptx"]


def test_gluon_ws_flat_view_is_fprops_and_1x1_stride1_only():
    """WsConvConfig(flat=True) asks for a 1x1 stride-1 unpadded conv (then its pixels are the GEMM's rows): anything
    else, and dgrad (whose sub-problems take patches), is refused naming the rule; flat takes a 1 x 128 row tile
    unless TH / TW are given, and a flat config with TH > 1 is refused."""
    from gluon_lab import registry
    v = registry.get_variant("conv2d", "gluon-ws")
    one = dict(B=4, Ci=1280, Co=1280, H=8, W=8, R=1, stride=1, pad=0)
    cfg = v.resolve(one, "bfloat16", {"flat": True})
    assert (cfg.TH, cfg.TW, cfg.flat) == (1, conv_ws.FLAT_BM, True)
    assert conv_ws.flat_view(one) == {**one, "B": 1, "H": 1, "W": 256}
    for bad in (dict(one, R=3, pad=1), dict(one, stride=2), dict(one, pad=1)):
        with pytest.raises(ValueError, match="1x1, stride-1, unpadded"):
            v.resolve(bad, "bfloat16", {"flat": True})
    with pytest.raises(ValueError, match="TH must be 1"):
        v.resolve(one, "bfloat16", {"flat": True, "TH": 2, "TW": 64})
    with pytest.raises(ValueError, match="fprop's"):
        registry.get_variant("conv2d_input_grad", "gluon-ws").resolve(one, "bfloat16", {"flat": True})


@pytest.mark.slow
def test_gluon_ws_flat_census():
    """The flat view compiles the same kernel with a [1, 1, 1, 128, BK] x box and store box: 2 row tiles on
    4x1280ch 8x8 (256 pixels) where the patch heuristic runs 4 8x8 patches."""
    one = dict(B=4, Ci=1280, Co=1280, H=8, W=8, R=1, stride=1, pad=0)
    from gluon_lab import registry
    cfg = registry.get_variant("conv2d", "gluon-ws").resolve(one, "bfloat16", {"flat": True, "split_k": 1})
    spec = conv_ws.fprop_ws_codegen(one, "bfloat16", cfg)
    c = codegen.census(codegen.compile_sm90(**{k: v for k, v in spec.items() if k != "options"}))
    assert [1, 1, 1, 128, 64] in [b["block_size"] for b in c["tma_boxes"]], c["tma_boxes"]
    assert c["sass"]["UTMALDG"] == 2 and c["sass"]["UTMASTG"] == 1 and c["spill_bytes"] == 0, c
