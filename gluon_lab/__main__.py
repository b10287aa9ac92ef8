"""CLI: python -m gluon_lab {bench,report,compare,adopt,archive,inspect,ceilings,select,launches,refresh}"""
from __future__ import annotations

import argparse
import json
import os
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


def _shard_args(parser, shards: bool = False) -> None:
    parser.add_argument("--gpus", default=None, help="measure on several GPUs of this host, one worker process each: "
                        "'all', a count N or ordinals '0,3,5' (default: one GPU, this process)")
    if shards:
        parser.add_argument("--shard", default=None, help="I/N: measure shard I of N of the plan (one host of a job "
                            "array; with --run-id); `adopt` merges the shards")
        parser.add_argument("--run-id", default=None, help="the run id every shard shares (`python -m gluon_lab "
                            "run-id` makes one)")


DTYPE_ALIASES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m gluon_lab")
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("bench", help="run a notebook's measurement plan on the GPU and append records")
    b.add_argument("notebook", help="e.g. 00-ceilings")
    b.add_argument("--results-dir", default="results")
    b.add_argument("--quick", action="store_true")
    b.add_argument("--parts", default=None, help="comma-separated parts of the plan (notebook-specific)")
    b.add_argument("--where", default=None, help="measure only the plan's cases matching KEY=VALUE,... (shape keys, "
                   "op, variant, dtype, study); clauses joined by ';' are alternatives, e.g. "
                   "'M=5000,N=5000,K=5000;M=256,study=gemm-shapes'")
    _shard_args(b, shards=True)
    c = sub.add_parser("ceilings", help="measure copy bandwidth and bf16 matmul throughput")
    r = sub.add_parser("report", help="execute the notebooks (papermill) and render reports/ (nbconvert)")
    r.add_argument("--mode", default="auto", choices=["auto", "measure", "replay"])
    r.add_argument("--quick", action="store_true")
    r.add_argument("--results-dir", default=None)
    r.add_argument("--out", default="reports")
    r.add_argument("--partial", action="store_true",
                   help="publish pages that lack records / headline data (marked PARTIAL) instead of failing")
    r.add_argument("--full", action="store_true", help="measure mode: the full plans (default: the quick ones)")
    _shard_args(r)
    r.add_argument("notebooks", nargs="*")
    cp = sub.add_parser("compare", help="per-case time ratios of two runs of a notebook (--list: the runs)")
    cp.add_argument("notebook", help="e.g. 01-tma-caching")
    cp.add_argument("run_a", nargs="?", default=None, help="run id, unique prefix, 'previous' or 'newest'")
    cp.add_argument("run_b", nargs="?", default=None, help="default: newest")
    cp.add_argument("--gpu", default="h200")
    cp.add_argument("--results-dir", default=None)
    cp.add_argument("--all", action="store_true", help="every case (default: the 20 that moved most)")
    cp.add_argument("--list", action="store_true", help="list the runs and exit")
    ad = sub.add_parser("adopt", help="append a measure build's records (runs/<run>) to results/ for commit")
    ad.add_argument("run_folder", nargs="+", help="a run's folder; several: the shards of one run (bench --shard), "
                    "merged (every shard once)")
    ad.add_argument("--results-dir", default=None)
    ad.add_argument("--replace-artifacts", action="store_true",
                    help="also replace existing timeline / Inductor-code JSON files (default: keep them)")
    ar = sub.add_parser("archive", help="move the superseded runs of results/ to <notebook>.history.jsonl.gz",
                        description="Move every superseded run of each record store to the compressed history "
                                    "beside it (results/<gpu>/<notebook>.history.jsonl.gz); the runs the pages "
                                    "show stay live (gluon_lab.archive.live_runs says which). Idempotent.")
    ar.add_argument("--results-dir", default=None, help="default: the repository's results/")
    ar.add_argument("--check", action="store_true", help="exit 1 if a run should move (write nothing)")
    i = sub.add_parser("inspect", help="compile a variant for sm_90 (no GPU needed) and print its census",
                       description="Compile a registered variant for sm_90 on this CPU exactly as it would launch "
                                   "(its checks, configure and codegen hooks) and print the kernel, its config and "
                                   "its census. Exit 2 (no traceback) when launch or the CUDA runtime would refuse "
                                   "it, or the variant has no CPU codegen.")
    i.add_argument("op")
    i.add_argument("variant")
    i.add_argument("--N", type=int, help="row length (row ops)")
    i.add_argument("--M", type=int, default=None, help="rows (row ops; the heuristic may depend on it)")
    i.add_argument("--shape", default=None, help='JSON shape dict for other ops, e.g. \'{"M": 4096, "N": 4096, "K": 4096}\'')
    i.add_argument("--dtype", default="bfloat16", choices=sorted(DTYPE_ALIASES) + ["bfloat16", "float16", "float32"])
    i.add_argument("--set", dest="knobs", action="append", default=[], metavar="KNOB=VALUE",
                   help="override a knob of the variant's config (repeatable), e.g. --set num_warps=8")
    i.add_argument("--ttgir", action="store_true", help="print the TTGIR before the census")
    i.add_argument("--ptx", action="store_true", help="print the PTX before the census")
    i.add_argument("--sass", action="store_true", help="print the SASS (the wheel's cuobjdump) before the census")
    i.add_argument("--json", action="store_true", help="print the census only, as JSON")
    sel = sub.add_parser("select", help="write the variant='auto' selection table from the current records")
    sel.add_argument("--results-dir", default=None, help="default: the repository's results/")
    sel.add_argument("--check", action="store_true", help="exit 1 if the committed table differs (do not write)")
    ln = sub.add_parser("launches", help="bring results/launch-hashes.json up to date (what each record's case "
                        "launches, compiled on this CPU): staleness follows the compiled kernel")
    ln.add_argument("--results-dir", default=None, help="default: the repository's results/")
    ln.add_argument("--jobs", type=int, default=min(4, os.cpu_count() or 1), help="worker processes")
    ln.add_argument("--commits", action="store_true",
                    help="also recover the launches of records measured at older code (a worktree of each record's commit)")
    ln.add_argument("--check", action="store_true", help="exit 1 if an entry the records need is missing (do not write)")
    ln.add_argument("--stale-list", default=None, help="write every stale record (file:line reason) here, e.g. to diff "
                    "before and after a refactor")
    rf = sub.add_parser("refresh", help="re-measure (GPU) exactly the stale or missing cases of the notebooks' plans, "
                        "with their same-run cells; --dry-run (CPU) says what is due")
    rf.add_argument("notebooks", nargs="*", help="default: every notebook with a plan")
    rf.add_argument("--results-dir", default="runs/refresh/results", help="where the new records go (then `adopt`)")
    rf.add_argument("--budget-s", type=float, default=None, help="start no cell that would end past this many seconds")
    rf.add_argument("--dry-run", action="store_true", help="only say what is due (no GPU needed)")
    _shard_args(rf)
    sub.add_parser("run-id", help="print a new run id (for --run-id: the one id every shard of a job array shares)")
    a = p.parse_args(argv)
    if a.cmd == "run-id":
        from .results import new_run_id
        print(new_run_id())
        return 0
    if getattr(a, "gpus", None) or getattr(a, "shard", None) or getattr(a, "run_id", None):
        from . import shard
        try:
            gpus = shard.parse_gpus(a.gpus, shard.host_gpus()) if getattr(a, "gpus", None) else None
            part = shard.parse_shard(a.shard) if getattr(a, "shard", None) else None
            shard.configure(gpus=gpus, shard=part, run_id=getattr(a, "run_id", None))
        except ValueError as e:
            p.error(str(e))

    if a.cmd == "bench":
        from .experiments import EXPERIMENTS
        if a.notebook not in EXPERIMENTS:
            p.error(f"unknown notebook {a.notebook!r}; known: {sorted(EXPERIMENTS)}")
        kw = {"parts": tuple(a.parts.split(","))} if a.parts else {}
        if a.where:
            from .plan_common import parse_where
            try:
                parse_where(a.where)
            except ValueError as e:
                p.error(str(e))
            os.environ["GLUON_LAB_WHERE"] = a.where  # measure_plan reads it (and --gpus workers inherit it)
        from .shard import close_all
        recs, where = EXPERIMENTS[a.notebook](results_dir=a.results_dir, quick=a.quick, **kw)
        lost = close_all()
        print(_table(recs))
        print(f"wrote {where}")
        bad = [r for r in recs if r.passed is False]
        for x in lost:
            print(f"LOST (its worker on GPU {x['gpu']} died, exit {x['exitcode']}): {x['case']}")
        print(f"{len(recs) - len(bad)} passed, {len(bad)} failed" + (f", {len(lost)} lost" if lost else ""))
        return 1 if bad or lost else 0
    if a.cmd == "ceilings":
        from .bench import measure_ceilings
        c = measure_ceilings()
        print(_table(c.records))
        return 0
    if a.cmd == "report":
        from .report import ReportBuildError, build
        try:
            build(a.notebooks or None, out_dir=a.out, mode=a.mode, quick=a.quick, results_dir=a.results_dir,
                  partial=a.partial, full=a.full)
        except ReportBuildError as e:
            print(f"report: {e}", file=sys.stderr)
            return 1
        return 0
    if a.cmd == "compare":
        from .compare import main as compare_main
        return compare_main(a.notebook, a.run_a, a.run_b, results_dir=a.results_dir, gpu=a.gpu,
                            show_all=a.all, list_runs=a.list)
    if a.cmd == "adopt":
        from .report import adopt
        try:
            skipped, archived = [], []
            done = adopt(a.run_folder, a.results_dir, replace_artifacts=a.replace_artifacts, skipped=skipped,
                         archived=archived)
        except (FileNotFoundError, ValueError) as e:
            print(f"adopt: {e}", file=sys.stderr)
            return 2
        for path, n in done:
            print(f"{path}: " + (f"+{n} lines" if path.suffix == ".jsonl" else "artifact copied"))
        for path in skipped:
            print(f"{path}: kept (exists; --replace-artifacts to replace it)")
        for plan in archived:
            if plan.changes:
                print(plan.describe())
        print("now review `git diff --stat results/`, run `python -m gluon_lab select`, and commit")
        return 0
    if a.cmd == "archive":
        from pathlib import Path
        from . import archive, results
        res = Path(a.results_dir) if a.results_dir else Path(__file__).resolve().parent.parent / "results"
        try:
            plans = archive.archive(res, check=a.check)
        except (results.RecordError, FileNotFoundError) as e:
            print(f"archive: {e}", file=sys.stderr)
            return 2
        for plan in plans:
            print(plan.describe(check=a.check))
        pending = [plan for plan in plans if plan.changes]
        if a.check and pending:
            print(f"{len(pending)} store(s) hold superseded runs: run `python -m gluon_lab archive` and commit")
            return 1
        return 0
    if a.cmd == "inspect":
        from . import codegen
        try:
            shape = json.loads(a.shape) if a.shape else None
        except json.JSONDecodeError as e:
            p.error(f"--shape must be a JSON object, e.g. '{{\"M\": 4096, \"N\": 4096, \"K\": 4096}}': {e}")
        if shape is not None and not isinstance(shape, dict):
            p.error(f"--shape must be a JSON object (a dict of dimensions); got {a.shape}")
        if shape is None and a.N is None:
            p.error("inspect needs --N (row ops) or --shape")
        if shape is not None and (a.N is not None or a.M is not None):
            p.error("--N / --M are for row ops; with --shape put every dimension in the shape")
        def knob_value(text: str):  # a Python/JSON literal (8, True, true, 'x'), else the string
            import ast
            low = {"true": True, "false": False, "none": None, "null": None}
            if text.lower() in low:
                return low[text.lower()]
            try:
                return ast.literal_eval(text)
            except (ValueError, SyntaxError):
                return text

        knobs = {}
        for kv in a.knobs:
            key, eq, val = kv.partition("=")
            if not eq or not key:
                p.error(f"--set takes KNOB=VALUE, got {kv!r}")
            knobs[key.strip()] = knob_value(val.strip())

        def fail(e) -> int:
            kind = getattr(e, "kind", "error")
            print(f"python -m gluon_lab inspect: {kind}: {e}", file=sys.stderr)
            return 2

        try:
            ins = codegen.inspect_kernel(a.op, a.variant, N=a.N, shape=shape, dtype=a.dtype,
                                         **({"M": a.M} if shape is None else {}), **knobs)
        except (ValueError, TypeError) as e:  # unknown op/variant, no codegen, a refusal: say so, no traceback
            return fail(e)
        k = ins.kernel
        for flag, title, text in (("ttgir", "TTGIR", lambda: k.asm.get("ttgir", "")),
                                  ("ptx", "PTX", lambda: k.asm.get("ptx", "")),
                                  ("sass", "SASS", lambda: codegen.sass(k.asm["cubin"]))):
            if getattr(a, flag):
                body = text()
                if not body:
                    print(f"python -m gluon_lab inspect: no {title} came back"
                          + (" (the triton wheel's cuobjdump is missing)" if flag == "sass" else ""), file=sys.stderr)
                print(f"// ===== {title}: {ins.kernel_name} =====\n{body}")
        if a.json:  # the census only; warnings (spills) on stderr
            print(json.dumps(ins.census, indent=1, default=str))
            for w in ins.warnings:
                print(f"python -m gluon_lab inspect: warning: {w}", file=sys.stderr)
        else:
            print(codegen.format_inspection(ins))
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
        cells = sum(len(e["cells"]) for g in table["entries"].values() for e in g.values())
        print(f"wrote {selection.write(table)} ({cells} cells, seed {table['seed']})")
        return 0
    if a.cmd == "refresh":
        from . import refresh
        from .experiments import EXPERIMENTS
        nbs = a.notebooks or sorted(EXPERIMENTS)
        bad = [n for n in nbs if n not in EXPERIMENTS]
        if bad:
            p.error(f"unknown notebook {bad[0]!r}; known: {sorted(EXPERIMENTS)}")
        return refresh.run(nbs, a.results_dir, budget_s=a.budget_s, dry_run=a.dry_run)
    if a.cmd == "launches":
        from . import currency, refresh
        return currency.refresh(a.results_dir, jobs=a.jobs, commits=a.commits, check=a.check,
                                study_knobs=refresh.study_knobs(),
                                stale_list=a.stale_list)
    return 2


if __name__ == "__main__":
    sys.exit(main())
