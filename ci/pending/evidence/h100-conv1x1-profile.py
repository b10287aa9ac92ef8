"""Where the time of a short conv goes: per-kernel GPU time (torch.profiler, CUPTI) of one call of each variant,
next to the same call replayed in a CUDA graph (events, median of 200 replays of 20 calls), on the 1x1 shapes."""
import os, statistics, torch
from torch.profiler import profile, ProfilerActivity
from gluon_lab import registry
torch.manual_seed(0)
SHAPES = [dict(B=4, Ci=1280, Co=1280, H=8, W=8, R=1, stride=1, pad=0), dict(B=8, Ci=640, Co=320, H=32, W=32, R=1, stride=1, pad=0),
          dict(B=2, Ci=1280, Co=1280, H=16, W=16, R=3, stride=1, pad=1)]
def inputs(sh):
    x = torch.randn(sh["B"], sh["H"], sh["W"], sh["Ci"], device="cuda", dtype=torch.bfloat16).permute(0, 3, 1, 2)
    w = (torch.randn(sh["Co"], sh["R"], sh["R"], sh["Ci"], device="cuda", dtype=torch.bfloat16) * 0.03).permute(0, 3, 1, 2)
    return x, w
torch.backends.cudnn.benchmark = True
for sh in SHAPES:
    x, w = inputs(sh)
    print("==", sh)
    if os.environ.get("PROF2"):
        if sh["R"] == 3: continue
        runs = (("torch", None), ("gluon-ws", {}), ("gluon-ws", {"BN": 64, "split_k": 1}), ("gluon-ws", {"BN": 64}),
                ("gluon-ws", {"BN": 128, "split_k": 1}), ("gluon-ws", {"BN": 64, "split_k": 1, "num_stages": 6}),
                ("gluon-pipelined", {"BN": 64}), ("gluon-pipelined", {"BN": 128}))
    else:
        runs = (("torch", None), ("gluon-ws", {}), ("gluon-ws", {"split_k": 1}), ("gluon-pipelined", {}))
    for name, knobs in runs:
        if name == "torch":
            f = lambda: torch.nn.functional.conv2d(x, w, stride=sh["stride"], padding=sh["pad"])
        else:
            v = registry.get_variant("conv2d", name)
            try:
                cfg = v.resolve(sh, "bfloat16", knobs)
            except ValueError as e:
                print("  refused", name, knobs, str(e)[:100]); continue
            f = lambda v=v, cfg=cfg: v.fn(x, w, sh["stride"], sh["pad"], config=cfg)
        for _ in range(5): f()
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph(); keep = []
        with torch.cuda.graph(g):
            for _ in range(20): keep.append(f())
        for _ in range(20): g.replay()
        ts = []
        for _ in range(100):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record(); g.replay(); b.record(); b.synchronize(); ts.append(a.elapsed_time(b) * 1000 / 20)
        with profile(activities=[ProfilerActivity.CUDA]) as p:
            for _ in range(10): g.replay()
            torch.cuda.synchronize()
        ev = [e for e in p.events() if e.device_type.name == "CUDA"]
        per = {}
        for e in ev:
            per.setdefault(e.name[:60], []).append(e.device_time if hasattr(e, "device_time") else e.cuda_time)
        starts = sorted((e.time_range.start, e.time_range.end) for e in ev)
        gaps = [b0 - a1 for (a0, a1), (b0, b1) in zip(starts, starts[1:])]
        print(f"  {name} {knobs}: graph {statistics.median(ts):.2f} us/call; kernels per call "
              f"{len(ev) / 200:.1f}; median gap between kernels {statistics.median(gaps) if gaps else 0:.2f} us")
        for k, d in per.items():
            print(f"     {k}: n={len(d)} median {statistics.median(d):.2f} us")
