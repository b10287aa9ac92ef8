"""variant="auto" at named cells, before and after a change to auto (the H200; device tool).

Usage (repo root as cwd):  python3 ci/auto_probe.py OUT.json [--quick]
With .old/gluon_lab_old on the path (bash ci/old_package.sh COMMIT; carry .old; PYTHONPATH=.old), the old
package's auto ("old:auto") and variants ("old:<variant>") are measured in the same run beside today's.

Uses only stable public pieces (gll.<op>, selection.choose, bench's inputs and CUDA-graph timer,
experiments.host_loops), so the same script measures the code before a change and after it.

* "cells": auto beside eager torch and every gluon-lab variant that takes the inputs, each through
  the public API (gll.<op>(..., variant=name)), graph-timed side by side in one run (inputs rotated
  past 3x L2, outputs kept alive), with the variant auto chose. The cells: fp16 QK-norm + RoPE at
  T >= 4096 (full and partial rotary) and the 06 plan's dgrad shapes (bf16, cuDNN benchmark on).
* "host": host wall time per call of a Python loop through the public API (fast path on) for
  qk_norm_rope at T = 1 and 16 (bf16 and fp16), auto and each variant, interleaved rounds.
"""
from __future__ import annotations

import json
import sys
import time


def main(argv):
    import torch
    import gluon_lab as gll
    from gluon_lab import bench, experiments, registry, selection, specs
    from gluon_lab.results import provenance
    out_path = argv[0]
    quick = "--quick" in argv
    torch.backends.cudnn.benchmark = True
    qk = lambda T, R: {"T": T, "Hq": 32, "Hk": 8, "D": 128, "R": R}  # noqa: E731
    cells = [("qk_norm_rope", qk(T, R), "float16") for T in ((4096, ) if quick else (4096, 16384)) for R in (128, 64)]
    cells += [("conv2d_input_grad", experiments._conv_shape(t), "bfloat16")
              for t in (experiments.CONV_SHAPES[:1] if quick else experiments.CONV_SHAPES)]
    try:
        import gluon_lab_old as old
        import gluon_lab_old.selection  # noqa: F401 - old.selection (not imported by the package)
    except ImportError:
        old = None
    res = {"old_commit": open(".old/COMMIT").read().strip() if old else None, "provenance": provenance(), "selection_runs": selection.load_table().get("runs"), "cells": [], "host": []}
    experiments._spin(3.0)
    for op, shape, dtype in cells:
        spec = specs.get(op)
        fn = getattr(gll, op)
        inputs = bench.make_inputs(op, shape, dtype, seed=7)
        chosen = selection.choose(spec, inputs)
        names = ["auto", "torch"] + [v for v in registry.variants(op) if registry.get_variant(op, v).ours
                                     and registry.eligible(registry.get_variant(op, v), inputs)]
        k = bench.rotation_copies(spec.bytes(shape, dtype))
        copies = [inputs] + [bench.clone_inputs(inputs) for _ in range(k - 1)]
        row = {"op": op, "shape": shape, "dtype": dtype, "chosen": chosen, "ms": {}}
        if old:
            row["old_chosen"] = old.selection.choose(old.specs.get(op), inputs)
            names.append("old:auto")
        for name in names:
            f = getattr(old, op) if name.startswith("old:") else fn
            try:
                t = bench.time_cudagraph([lambda a=a, name=name.removeprefix("old:"), f=f: f(*a, variant=name)
                                          for a in copies])
                row["ms"][name] = t.ms_median
            except Exception as e:  # noqa: BLE001 - named in the output
                row["ms"][name] = f"{type(e).__name__}: {e}"[:200]
        ours = {n: m for n, m in row["ms"].items() if n not in ("auto", "torch", "old:auto") and isinstance(m, float)}
        if ours and isinstance(row["ms"]["auto"], float):
            best = min(ours, key=ours.get)
            row["best"] = best
            row["auto_vs_best"] = ours[best] / row["ms"]["auto"]
            if isinstance(row["ms"].get("old:auto"), float):
                row["old_auto_vs_best"] = ours[best] / row["ms"]["old:auto"]
        print(json.dumps(row), flush=True)
        res["cells"].append(row)
        del copies, inputs
        torch.cuda.synchronize()
    for dtype in ("bfloat16", "float16"):
        for T in (1, 16):
            inputs = bench.make_inputs("qk_norm_rope", qk(T, 128), dtype, seed=11)
            names = ["auto", "torch"] + [v for v in registry.variants("qk_norm_rope")
                                         if registry.get_variant("qk_norm_rope", v).ours]
            fns = {n: (lambda n=n: gll.qk_norm_rope(*inputs, variant=n)) for n in names}
            if old:
                fns.update({f"old:{n}": (lambda n=n: old.qk_norm_rope(*inputs, variant=n)) for n in names})
            per = experiments.host_loops(fns, calls=200, repeats=7)
            row = {"op": "qk_norm_rope", "T": T, "dtype": dtype, "chosen": selection.choose(specs.get("qk_norm_rope"), inputs),
                   "old_chosen": old.selection.choose(old.specs.get("qk_norm_rope"), inputs) if old else None,
                   "host_us": {n: (sorted(v)[len(v) // 2] * 1e3 if isinstance(v, list) else repr(v)) for n, v in per.items()}}
            print(json.dumps(row), flush=True)
            res["host"].append(row)
    res["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    with open(out_path, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
