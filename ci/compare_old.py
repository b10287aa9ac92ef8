"""Old vs new kernels side by side in ONE process (the redesign's no-regression check).

    bash ci/old_package.sh 5938527          # here: .old/gluon_lab_old = the package before the redesign
    PYTHONPATH=.old python3 ci/compare_old.py OUT_DIR [--quick]   # on the GPU machine (carry .old)

For every case, both codes run on the same rotated input copies (CUDA-graph timer of
gluon_lab.bench, L2 cold), interleaved old, new, old, new, each checked against float64 on poisoned
outputs first. Writes Records (config.study = "redesign", config.code = "old@<commit>" | "new") to
OUT_DIR/<gpu>/redesign-compare.jsonl and prints the new/old ratio per case and the geomean per
variant. The old records carry the old code's hash under the old scheme: they are stale by design.
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / ".old"))

NORM_SHAPES = ((4096, 4096), (16384, 5120), (32768, 8192))
NORM_SHAPES_QUICK = ((1024, 4096), )
ROW_VARIANTS = ("triton", "gluon-tma", "gluon-chunked", "gluon-pipelined", "gluon-ws")
GEMM_SHAPES = ((4096, 4096, 4096), (8192, 8192, 8192))
GROUP_SHAPES = ({"B": 8, "C": 320, "H": 64, "W": 64, "G": 32, "layout": "nchw"},
                {"B": 8, "C": 1280, "H": 16, "W": 16, "G": 32, "layout": "nchw"})


def cases(quick: bool):
    out = []
    for op in ("rms_norm", "layer_norm", "add_rms_norm", "l2_norm"):
        for (M, N) in (NORM_SHAPES_QUICK if quick else NORM_SHAPES):
            for v in ROW_VARIANTS:
                if v == "gluon-tma" and N & (N - 1):
                    continue
                out.append((op, v, {"M": M, "N": N}, "bfloat16"))
    for (M, N, K) in (((1024, 1024, 1024), ) if quick else GEMM_SHAPES):
        for v in ("gluon-pipelined", "gluon-ws"):
            out.append(("matmul", v, {"M": M, "N": N, "K": K}, "bfloat16"))
    for s in (GROUP_SHAPES[:1] if quick else GROUP_SHAPES):
        out.append(("group_norm", "gluon-chunked", s, "bfloat16"))
    return out


def main(argv=None) -> int:
    import torch
    import gluon_lab_old
    from gluon_lab import bench, registry, specs
    from gluon_lab.results import Record, store_path

    p = argparse.ArgumentParser()
    p.add_argument("out_dir")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--rounds", type=int, default=2)
    a = p.parse_args(argv)
    old_commit = (ROOT / ".old" / "COMMIT").read_text().strip()
    s = bench.Session("redesign-compare", a.out_dir, **({"copy_gib": 0.5, "matmul_n": 4096} if a.quick else {}))
    s.save()
    rows = []
    for op, variant, shape, dtype in cases(a.quick):
        spec = specs.get(op)
        new = registry.get_variant(op, variant)
        old = gluon_lab_old.ops.get_variant(op, variant)
        scalars = spec.default_scalars()
        inputs = bench.make_inputs(op, shape, dtype, seed=s.next_seed())
        ref = bench.reference_outputs(op, inputs)
        nbytes, nfl = spec.bytes(shape, dtype), spec.flops(shape)
        base = dict(op=op, variant=variant, pattern=new.pattern, shape=dict(shape), dtype=dtype, bytes=nbytes,
                    flops=nfl, **s.prov)

        def call(v, ins, poison=False):
            kw = dict(scalars)
            if v.supports_out:
                kw["out"] = spec.alloc_outputs(ins, fill=float("nan") if poison else None)
            return lambda: v.fn(*ins, **kw)

        corr = {}
        try:
            for code, v in (("old", old), ("new", new)):
                got = call(v, inputs, poison=True)()
                torch.cuda.synchronize()
                tol = spec.tolerance[dtype] if spec.tolerance else None
                corr[code] = bench.compare(got, ref, dtype, tol)
            k = bench.rotation_copies(nbytes, s.info.get("l2_bytes"))
            copies = [inputs] + [bench.clone_inputs(inputs) for _ in range(k - 1)]
            times = {"old": [], "new": []}
            for _ in range(a.rounds):
                for code, v in (("old", old), ("new", new)):
                    times[code].append(bench.time_cudagraph([call(v, c) for c in copies]))
            del copies
        except Exception as e:  # a case that fails is a failed record, never skipped
            torch.cuda.synchronize()
            s.records.append(Record(**base, config={"study": "redesign", "code": "new"}, passed=False,
                                    kernel_source_hash=new.code_hash(), notes=f"error: {type(e).__name__}: {e}"[:500]))
            s.save()
            print(f"{op:13s} {variant:16s} {shape}: ERROR {type(e).__name__}: {e}"[:300], flush=True)
            continue
        ms = {}
        for code, v in (("old", old), ("new", new)):
            t = min(times[code], key=lambda t: t.ms_median)  # the better round of each: clock ramp noise
            ms[code] = t.ms_median
            s.records.append(Record(
                **base, config={"study": "redesign", "code": f"old@{old_commit}" if code == "old" else "new",
                                "rounds_ms": [round(x.ms_median, 6) for x in times[code]]},
                **dataclasses.asdict(t), **corr[code], **s.metrics(nbytes, nfl, t.ms_median, spec),
                kernel_source_hash=v.source_hash if code == "old" else new.code_hash()))
        s.save()
        rows.append((op, variant, shape, ms["old"], ms["new"], corr["old"]["passed"], corr["new"]["passed"]))
        print(f"{op:13s} {variant:16s} {'x'.join(map(str, shape.values())):24s} old {ms['old']*1e3:9.2f} us  "
              f"new {ms['new']*1e3:9.2f} us  new/old time {ms['new'] / ms['old']:.3f}  "
              f"ok {corr['old']['passed']}/{corr['new']['passed']}", flush=True)
        del inputs, ref
    print("\ngeomean new/old time by variant (< 1: new faster):")
    for v in sorted({r[1] for r in rows}):
        rs = [r[4] / r[3] for r in rows if r[1] == v]
        print(f"  {v:16s} {math.exp(statistics.fmean(map(math.log, rs))):.3f} over {len(rs)} cases "
              f"(min {min(rs):.3f}, max {max(rs):.3f})")
    print(f"wrote {store_path(a.out_dir, s.info['gpu_slug'], 'redesign-compare')}")
    return 0 if all(r[5] and r[6] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
