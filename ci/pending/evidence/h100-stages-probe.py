"""Probe: gluon-ws conv ring depth (num_stages) at the heuristic's schedule on the SM-idle / short-K shapes,
beside cuDNN, one Session (cudagraph timer, cold rotation). Evidence for a heuristic change, not page records."""
import os, sys, json
from gluon_lab import bench, registry
OUT = os.environ.get("OUT", "/tmp/out")
ops = sys.argv[1].split(",") if len(sys.argv) > 1 else ["conv2d"]
S = bench.Session("06-convolution", results_dir=f"{OUT}/stages", ceilings=False)
SHAPES = [(4, 1280, 1280, 8, 8, 1, 1, 0), (2, 1280, 1280, 8, 8, 3, 1, 1), (1, 512, 512, 7, 7, 3, 1, 1),
          (1, 512, 512, 32, 32, 3, 1, 1), (2, 1280, 1280, 16, 16, 3, 1, 1), (8, 640, 320, 32, 32, 1, 1, 0)]
KNOBS = [{}, {"num_stages": 4}, {"num_stages": 5}, {"num_stages": 6}, {"num_stages": 8},
         {"BN": 128, "num_stages": 6}, {"BN": 64, "split_k": 1, "num_stages": 6}, {"BN": 64, "split_k": 1, "num_stages": 8}]
for op in ops:
    for t in SHAPES:
        sh = dict(zip(("B", "Ci", "Co", "H", "W", "R", "stride", "pad"), t))
        r = S.measure(op, "torch", sh, "bfloat16", timer="cudagraph", config={"cudnn_benchmark": True})
        base = r.ms_median * 1000
        line = [f"{op[:12]:12s} {t}: cuDNN {base:.1f}"]
        v = registry.get_variant(op, "gluon-ws")
        for k in KNOBS:
            try:
                cfg = v.resolve(sh, "bfloat16", k)
            except ValueError as e:
                line.append(f"{k}: refused"); continue
            r = S.measure(op, "gluon-ws", sh, "bfloat16", timer="cudagraph", config={**k, "study": "stages-probe"})
            us = r.ms_median * 1000
            line.append(f"{json.dumps(k)} st{cfg.num_stages} BN{cfg.BN}: {us:.1f} ({base/us:.2f}x) {'ok' if r.passed else 'FAIL'}")
        print("\n   ".join(line), flush=True)
S.save() if hasattr(S, "save") else None
