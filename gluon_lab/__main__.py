"""CLI: python -m gluon_lab {bench,report,inspect,ceilings,select}"""
from __future__ import annotations

import argparse
import json
import sys


def _table(recs) -> str:
    import pandas as pd
    rows = []
    for r in recs:
        rows.append({"op": r.op, "variant": r.variant, "shape": "x".join(str(v) for v in r.shape.values()),
                     "timer": (r.timer or "-")[:8], "ms": r.ms_median, "GB/s": r.gbps, "TF/s": r.tflops,
                     "SOL%": r.sol_datasheet_pct, "vsCopy%": r.sol_measured_pct, "ok": r.passed,
                     "study": (r.config or {}).get("study", "")})
    with pd.option_context("display.width", 200, "display.max_rows", 500, "display.float_format", "{:.4g}".format):
        return pd.DataFrame(rows).to_string(index=False)


DTYPE_ALIASES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m gluon_lab")
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("bench", help="run a notebook's measurement plan on the GPU and append records")
    b.add_argument("notebook", help="e.g. 00-ceilings")
    b.add_argument("--results-dir", default="results")
    b.add_argument("--quick", action="store_true")
    b.add_argument("--parts", default=None, help="comma-separated parts of the plan (notebook-specific)")
    c = sub.add_parser("ceilings", help="measure copy bandwidth and bf16 matmul throughput")
    r = sub.add_parser("report", help="execute the notebooks (papermill) and render reports/ (nbconvert)")
    r.add_argument("--mode", default="auto", choices=["auto", "measure", "replay"])
    r.add_argument("--quick", action="store_true")
    r.add_argument("--results-dir", default=None)
    r.add_argument("--out", default="reports")
    r.add_argument("notebooks", nargs="*")
    i = sub.add_parser("inspect", help="compile a variant for sm_90 (no GPU needed) and print its census")
    i.add_argument("op")
    i.add_argument("variant")
    i.add_argument("--N", type=int, help="row length (row ops)")
    i.add_argument("--M", type=int, default=None, help="rows (row ops; the heuristic may depend on it)")
    i.add_argument("--shape", default=None, help='JSON shape dict for other ops, e.g. \'{"M": 4096, "N": 4096, "K": 4096}\'')
    i.add_argument("--dtype", default="bfloat16", choices=sorted(DTYPE_ALIASES) + ["bfloat16", "float16", "float32"])
    sel = sub.add_parser("select", help="write the variant='auto' selection table from the current records")
    sel.add_argument("--results-dir", default=None, help="default: the repository's results/")
    sel.add_argument("--check", action="store_true", help="exit 1 if the committed table differs (do not write)")
    i.add_argument("--ptx", action="store_true", help="print the PTX too")
    a = p.parse_args(argv)

    if a.cmd == "bench":
        from .experiments import EXPERIMENTS
        if a.notebook not in EXPERIMENTS:
            p.error(f"unknown notebook {a.notebook!r}; known: {sorted(EXPERIMENTS)}")
        kw = {"parts": tuple(a.parts.split(","))} if a.parts else {}
        recs, where = EXPERIMENTS[a.notebook](results_dir=a.results_dir, quick=a.quick, **kw)
        print(_table(recs))
        print(f"wrote {where}")
        bad = [r for r in recs if r.passed is False]
        print(f"{len(recs) - len(bad)} passed, {len(bad)} failed")
        return 1 if bad else 0
    if a.cmd == "ceilings":
        from .bench import measure_ceilings
        c = measure_ceilings()
        print(_table(c.records))
        return 0
    if a.cmd == "report":
        from .report import build
        build(a.notebooks or None, out_dir=a.out, mode=a.mode, quick=a.quick, results_dir=a.results_dir)
        return 0
    if a.cmd == "inspect":
        from .codegen import inspect_variant
        shape = json.loads(a.shape) if a.shape else None
        if shape is None and a.N is None:
            p.error("inspect needs --N (row ops) or --shape")
        if shape is not None and (a.N is not None or a.M is not None):
            p.error("--N / --M are for row ops; with --shape put every dimension in the shape")
        a.dtype = DTYPE_ALIASES.get(a.dtype, a.dtype)
        try:
            k, cen = inspect_variant(a.op, a.variant, N=a.N, shape=shape, dtype=a.dtype,
                                     **({"M": a.M} if shape is None else {}))
        except (ValueError, TypeError) as e:  # unknown op/variant, a shape it refuses: say so, no traceback
            p.error(str(e))
        if a.ptx:
            print(k.asm["ptx"])
        print(json.dumps(cen, indent=1, default=str))
        return 0
    if a.cmd == "select":
        from pathlib import Path
        from . import selection
        res = Path(a.results_dir) if a.results_dir else Path(__file__).resolve().parent.parent / "results"
        table = selection.build(res)
        if a.check:
            same = selection.TABLE_PATH.exists() and json.loads(selection.TABLE_PATH.read_text()) == table
            print("selection table is current" if same else
                  f"{selection.TABLE_PATH} differs from the current records: run `python -m gluon_lab select`")
            return 0 if same else 1
        print(f"wrote {selection.write(table)} ({sum(len(d) for g in table['entries'].values() for o in g.values() for d in o.values())} buckets)")
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
