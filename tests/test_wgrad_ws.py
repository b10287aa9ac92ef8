"""wgrad on the implicit-GEMM template (gluon-ws of conv2d_weight_grad) on the CPU: the kernel compiles for
sm_90 with the instructions its pattern promises (TMA loads of both operands, wgmma, a TMA-store epilogue, no
register loads of either operand, no spills), the split rule and its bounds, the config's refusals naming
the rule, and the registration."""
import dataclasses

import pytest

import gluon_lab as gll
from gluon_lab import codegen, registry
from gluon_lab.kernels import conv_wgrad_ws as W

pytestmark = pytest.mark.slow

SHAPES = [dict(B=2, Ci=1280, Co=1280, H=8, W=8, R=3, stride=1, pad=1),   # 900 tiles: persistent data-parallel
          dict(B=8, Ci=320, Co=320, H=64, W=64, R=3, stride=1, pad=1),   # 81 tiles, 512 k-steps: split-K
          dict(B=8, Ci=320, Co=320, H=64, W=64, R=3, stride=2, pad=1),   # the parity view
          dict(B=1, Ci=512, Co=512, H=7, W=7, R=3, stride=1, pad=1)]     # BM 64 on one warpgroup


def _census(spec):
    return codegen.census(codegen.compile_sm90(**{k: v for k, v in spec.items() if k != "options"}))


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s['Ci']}-{s['H']}-R{s['R']}-s{s['stride']}")
def test_wgrad_ws_census(shape):
    """A 1-warp producer issuing the two TMA boxes, wgmma on the consumer warpgroups, one TMA store per whole
    tile; a split launch's partials leave as plain fp32 stores (store_partial) and nothing else touches global
    memory from registers; no spills; shared memory within the config's own account."""
    cfg = W.WsWgradConfig.heuristic(shape, "bfloat16")
    split, _, _ = cfg.plan(*W._geometry(shape, cfg)[5:], 132)
    c = _census(W.wgrad_ws_codegen(shape, "bfloat16"))
    s = c["sass"]
    assert s["UTMALDG"] >= 2 and s.get("UTMASTG", 0) >= 1 and s["HGMMA"] >= cfg.TH * cfg.TW // 16, s
    assert c["ld_global"] == 0 and c["spill_bytes"] == 0, c
    assert (c["st_global"] > 0) == (split > 1), (split, c["st_global"])
    assert c["smem_bytes"] <= cfg.smem_bytes("bfloat16") + 1024, (c["smem_bytes"], cfg.smem_bytes("bfloat16"))


def test_wgrad_fixup_census():
    """The fixup reads SPLIT_K partials per element block (unrolled, all loads in flight) and stores once."""
    c = _census(W.fixup_codegen(split_k=4))
    assert c["sass"]["LDG"] >= 4 and c["sass"]["STG"] >= 1 and c["spill_bytes"] == 0, c["sass"]


def test_split_choice_rule():
    """Whole waves of tiles: no split. Fewer tiles than SMs: argmin of waves x (k-steps per slice + UNIT_COST),
    at most MAX_SPLIT slices and one per k-step."""
    assert W.split_choice(900, 2) == 1 and W.split_choice(132, 4096) == 1
    assert W.split_choice(81, 512) == 8          # 648 units in 5 waves of 68 k-steps (s = 3: 2 waves of 175)
    assert W.split_choice(15, 8192) == 8         # 120 units: one wave (16 would be two)
    assert W.split_choice(4, 8192) == W.MAX_SPLIT  # the cap binds
    assert W.split_choice(100, 1) == 1 and W.split_choice(4, 3) == 3
    for tiles, k in ((81, 512), (15, 8192), (40, 37), (7, 5)):
        s = W.split_choice(tiles, k)
        cost = lambda n: -(-tiles * n // 132) * (-(-k // n) + W.UNIT_COST)  # noqa: E731
        assert all(cost(s) <= cost(n) for n in range(1, min(W.MAX_SPLIT, k) + 1)), (tiles, k, s)


def test_plan_and_refusals():
    cfg = W.WsWgradConfig(split_k=8)
    assert cfg.plan(tiles=4, n_patches=3, sms=132) == (3, 0, 12)   # one slice per k-step at most
    assert W.WsWgradConfig(split_k=2, split_last_wave=True).plan(264, 64, 132) == (1, 0, 264)  # whole waves only
    assert W.WsWgradConfig(split_k=2, split_last_wave=True).plan(300, 64, 132) == (2, 264, 264 + 72)
    with pytest.raises(ValueError, match="split_k must be in 0..16"):
        W.WsWgradConfig(split_k=17).validate("bfloat16")
    with pytest.raises(ValueError, match="producer_regs must be a multiple of 8"):
        W.WsWgradConfig(producer_regs=30).validate("bfloat16")
    with pytest.raises(ValueError, match="shared memory"):
        W.WsWgradConfig(BN=256, num_stages=5).validate("bfloat16")
    with pytest.raises(ValueError, match="BM >= 16 x num_warps"):
        dataclasses.replace(W.WsWgradConfig(), BM=64, num_warps=8).validate("bfloat16")


def test_registered_and_refuses_by_rule():
    v = registry.get_variant("conv2d_weight_grad", "gluon-ws")
    assert v.pattern == "warp-specialized" and v.needs_hopper
    torch = pytest.importorskip("torch")
    x = torch.randn(1, 12, 8, 8, dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    dy = torch.randn(1, 16, 8, 8, dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    with pytest.raises(ValueError, match=r"variant 'gluon-ws' of conv2d_weight_grad: Ci = 12 .* multiples of 8"):
        W.ws_wgrad_check(x, dy, 3, 1, 1)
    assert "gluon-ws" in gll.variants("conv2d_weight_grad")


def test_slice_major_split_compiles_and_the_unsplit_launch_ignores_it():
    """slice_major walks a split launch's units slice by slice (same partials, same fixup): it compiles with the
    same instruction mix; on a launch with no split it is off (one compile for both settings)."""
    shape = SHAPES[1]  # 81 tiles, 512 k-steps: split-K 8
    cfg = dataclasses.replace(W.WsWgradConfig.heuristic(shape, "bfloat16"), slice_major=True)
    spec = W.wgrad_ws_codegen(shape, "bfloat16", cfg)
    assert spec["constexprs"]["SLICE_MAJOR"] is True and spec["constexprs"]["SPLIT_K"] == 8
    c = _census(spec)
    assert c["sass"]["UTMALDG"] >= 2 and c["sass"].get("UTMASTG", 0) >= 1 and c["st_global"] > 0
    assert c["ld_global"] == 0 and c["spill_bytes"] == 0, c
    flat = dataclasses.replace(W.WsWgradConfig.heuristic(SHAPES[0], "bfloat16"), slice_major=True)
    assert W.wgrad_ws_codegen(SHAPES[0], "bfloat16", flat)["constexprs"]["SLICE_MAJOR"] is False
