"""wgrad on the implicit-GEMM template (gluon-ws of conv2d_weight_grad, kernels/conv_wgrad_ws.py) on the GPU:
every schedule the heuristic or a knob can pick — persistent data-parallel, split-K over the pixels (even and
uneven cuts, more slices than k-steps, the cap), the last-wave split — x the tiles (BM 128 on two consumer
warpgroups, BM 64 on one, BN 64 / 128 / 256) x stride 1 / 2, with Ci / Co tails (a ci block past Ci must not
write the next tap) and ragged patches, against float64 on NaN-poisoned outputs (an element no store or
fixup writes stays NaN), bf16 and fp16."""
import dataclasses

import pytest
import torch

import gluon_lab as gll
from gluon_lab import bench, registry, specs
from gluon_lab.kernels import conv_wgrad_ws

pytestmark = pytest.mark.gpu
WSPEC = specs.get("conv2d_weight_grad")


def _poison(nbytes: int):
    t = torch.full((nbytes // 2 + 4096, ), float("nan"), dtype=torch.bfloat16, device="cuda")
    del t


SHAPES = [
    dict(B=2, Ci=320, Co=256, H=8, W=8, R=3, stride=1, pad=1),     # few pixels, many tiles: 8x8 patch
    dict(B=1, Ci=136, Co=200, H=7, W=9, R=3, stride=1, pad=1),     # ragged patch, Ci / Co tails (BN 128 past Ci)
    dict(B=2, Ci=192, Co=128, H=12, W=10, R=3, stride=2, pad=1),   # stride 2 (parity view), 6x5 outputs
    dict(B=3, Ci=512, Co=136, H=8, W=8, R=1, stride=1, pad=0),     # 1x1
    dict(B=2, Ci=64, Co=72, H=40, W=36, R=3, stride=1, pad=1),     # a longer pixel loop (the split regime)
]
SCHEDULES = [dict(), dict(split_k=1), dict(split_k=2), dict(split_k=3), dict(split_k=16),
             dict(split_k=2, split_last_wave=True), dict(BM=64, num_warps=4), dict(BN=64), dict(BN=256, num_stages=2),
             dict(BM=64, num_warps=4, split_k=3), dict(split_k=3, slice_major=False),
             dict(split_k=2, split_last_wave=True, slice_major=False)]  # the heuristic is slice-major: tile-major too


@pytest.mark.parametrize("sched", SCHEDULES, ids=lambda d: "-".join(f"{k}{v}" for k, v in d.items()) or "heuristic")
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "-".join(f"{k}{v}" for k, v in s.items()))
def test_wgrad_ws_schedules_match_float64(shape, sched):
    for dtype in ("bfloat16", "float16"):
        inp = bench.make_inputs("conv2d_weight_grad", shape, dtype, seed=shape["Ci"] + sched.get("split_k", 0))
        cfg = registry.get_variant("conv2d_weight_grad", "gluon-ws").configure(shape, dtype, {})
        cfg = dataclasses.replace(cfg, **sched).validate(dtype)
        ref = WSPEC.reference(*inp)
        _poison(ref.numel() * 4)
        gw = conv_wgrad_ws.wgrad_ws(*inp, config=cfg)
        torch.cuda.synchronize()
        assert gw.shape == ref.shape and gw.is_contiguous(memory_format=torch.channels_last), gw.stride()
        ok = bench.compare(gw, ref, dtype, WSPEC.tolerance[dtype])
        assert ok["passed"], (dtype, cfg, ok)


def test_wgrad_ws_public_call_and_nan():
    """The public call (the heuristic's config) on a split shape, and a NaN in grad_output reaching the gradient
    (never a silent finite answer)."""
    shape = dict(B=2, Ci=64, Co=72, H=40, W=36, R=3, stride=1, pad=1)
    inp = bench.make_inputs("conv2d_weight_grad", shape, "bfloat16", seed=11)
    res = bench.check_correctness("conv2d_weight_grad", "gluon-ws", inp, call="api")
    assert res["passed"], res
    x, dy, R, st, pad = inp
    dy = dy.clone()
    dy[1, 5, 3, 7] = float("nan")
    gw = gll.conv2d_weight_grad(x, dy, R, st, pad, variant="gluon-ws")
    assert torch.isnan(gw[5]).any() and not torch.isnan(gw[4]).any()
