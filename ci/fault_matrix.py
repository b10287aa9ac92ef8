"""Fault matrix: inject one fault at a time into a TEMPORARY COPY of a results folder and show what
the tools say about it. The committed results/ is only read (copied), never written.

    python ci/fault_matrix.py                        # every fault, both commands, results/ as the source
    python ci/fault_matrix.py --only torn utf --commands load
    python ci/fault_matrix.py --results-dir tests/fixtures/records --keep

Each row: the fault, the command, its exit code, whether that is what the store's rules promise,
and the first line of what it said (the exception line of a traceback, else the first warning,
else the first line of output). Exit status 0 when every row is as expected.

To add a fault, append a Fault(name, setup, command, expect) to FAULTS:
  setup(case: Case) edits the copy (case.results is the copied results folder, case.tmp a scratch
  folder of this fault); command is an argv list whose "{results}" / "{tmp}" / "{python}" / "{repo}"
  are filled in, or the name of one of COMMANDS; expect is "error" (a non-zero exit with an
  exception), "refuse" (a non-zero exit with a clear message and no traceback: a CLI refusal), "ok" (the exit code of the same command on the untouched copy, no exception) or
  "warn" (as "ok", plus a warning); match, when given, is a regex the message must contain.
  Build-level faults (report builds) fit the same shape: a setup that breaks a notebook copy under
  case.tmp and a command that builds from it (a "custom" row; its baseline exit code is 0).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parent.parent

COMMANDS = {
    # a folder load, as notebooks and the report do it (on_error="raise")
    "load": ["{python}", "-c", "import sys; from gluon_lab import results; df = results.load(sys.argv[1]); "
             "print(f'loaded {len(df)} records')", "{results}"],
    # the selection table from the records (exit 1 also when the committed table differs)
    "select": ["{python}", "-m", "gluon_lab", "select", "--check", "--results-dir", "{results}"],
}


@dataclass
class Case:
    results: Path  # the copied results folder (inject here)
    tmp: Path  # a scratch folder of this fault


@dataclass
class Fault:
    name: str
    setup: Callable[[Case], None]
    command: str | list  # a COMMANDS key, or an argv list with {results} / {tmp} / {python} / {repo}
    expect: str = "error"  # "error" | "refuse" | "ok" | "warn"
    match: str | None = None  # a regex the message must match (search) for the row to be as expected
    label: str | None = None  # the command column of the table (default: the COMMANDS key, or "custom")


# ---- helpers the setups share -------------------------------------------------------------------

def _store(case: Case) -> Path:
    """The store faults go into: the smallest measurement store of the copy."""
    stores = [p for p in case.results.rglob("*.jsonl") if p.name != "sanitizer.jsonl"]
    if not stores:
        raise SystemExit(f"no *.jsonl measurement store under {case.results}")
    return min(stores, key=lambda p: p.stat().st_size)


def _template(case: Case) -> dict:
    """A real bandwidth record (a norm timed on the GPU, with bytes and a datasheet SOL)."""
    for ln in _store(case).read_text(encoding="utf-8").splitlines():
        d = json.loads(ln)
        if d.get("timer") in ("cudagraph", "do_bench-l2flush") and d.get("bytes") and d.get("sol_datasheet_pct") \
                and d.get("op") != "copy" and d["op"] != "matmul":
            return d
    raise SystemExit(f"{_store(case)}: no bandwidth record to copy as a template")


def _append_line(case: Case, data: bytes, newline: bool = True) -> None:
    p = _store(case)
    with open(p, "ab") as f:
        f.write(data + (b"\n" if newline else b""))


def _insert_mid(case: Case, data: bytes) -> None:
    p = _store(case)
    lines = p.read_bytes().splitlines(keepends=True)
    lines.insert(len(lines) // 2, data + b"\n")
    p.write_bytes(b"".join(lines))


def _with(case: Case, **kw) -> bytes:
    return json.dumps({**_template(case), **kw}).encode()


# ---- the record-level faults ---------------------------------------------------------------------

def f_none(case):
    pass


def f_physics_173(case):
    d = _template(case)
    gbps = 8290.0
    ms = d["bytes"] / (gbps * 1e9) * 1e3
    _append_line(case, _with(case, ms_median=ms, ms_min=ms, ms_max=ms, gbps=gbps, tflops=None,
                             sol_datasheet_pct=None, sol_measured_pct=None, run_id="fault-173"))


def f_gbps_disagrees(case):
    d = _template(case)
    _append_line(case, _with(case, gbps=2 * d["gbps"], run_id="fault-gbps"))


def f_passed_string(case):
    _append_line(case, _with(case, passed="false", run_id="fault-passed"))


def f_shape_float(case):
    d = _template(case)
    _append_line(case, _with(case, shape={**d["shape"], "M": 4096.5}, run_id="fault-shape"))


def f_invalid_utf8(case):
    _insert_mid(case, _with(case, notes="caf\u00e9", run_id="fault-utf8").replace(b"caf\\u00e9", b"caf\xe9"))


def _sanitizer_line() -> bytes:
    return json.dumps({"kernel": "pipelined-norm", "case": ["rms_norm", "gluon-pipelined", {"M": 37, "N": 1000}],
                       "tool": "racecheck", "exit_code": 0, "summary": ["RACECHECK SUMMARY: 0 hazards displayed"],
                       "count": 0, "check": {"passed": True}, "seconds": 1.0, "tail": []}).encode()


def f_sanitizer_in_folder(case):
    san = _store(case).with_name("sanitizer.jsonl")
    with open(san, "ab") as f:  # the copy may have one already: one more line either way
        f.write(_sanitizer_line() + b"\n")


def f_torn_tail(case):
    _append_line(case, _with(case, run_id="fault-torn")[:57], newline=False)  # a writer killed mid-line


def f_broken_mid(case):
    _insert_mid(case, _with(case, run_id="fault-mid")[:57])


def f_extra_field(case):
    _append_line(case, _with(case, probe={"ncu": "dram__bytes.sum"}, run_id="fault-extra"))


SAN_EXPLICIT = ["{python}", "-c", "import sys, glob; from gluon_lab import results; "
                "results.load(glob.glob(sys.argv[1] + '/*/sanitizer.jsonl')[0])", "{results}"]

FAULTS: list[Fault] = [
    *(Fault("none (untouched copy)", f_none, c, "ok") for c in COMMANDS),
    *(Fault("gbps 8290 (173% of datasheet), empty SOL", f_physics_173, c, match=r"PhysicsError: .*jsonl:\d+: .*gbps 8290")
      for c in COMMANDS),
    Fault("stored gbps 2x bytes/ms_median", f_gbps_disagrees, "load", match=r"jsonl:\d+: field 'gbps' is .* but"),
    *(Fault('passed: "false"', f_passed_string, c, match=r"jsonl:\d+: field 'passed' must be true/false")
      for c in COMMANDS),
    Fault("shape M 4096.5", f_shape_float, "load", match=r"jsonl:\d+: field 'shape' entry 'M' must be an integer"),
    Fault("invalid UTF-8 mid-file", f_invalid_utf8, "load", match=r"jsonl:\d+: not valid UTF-8"),
    *(Fault("sanitizer.jsonl in the folder", f_sanitizer_in_folder, c, "ok") for c in COMMANDS),
    Fault("sanitizer.jsonl by explicit path", f_sanitizer_in_folder, SAN_EXPLICIT, match="not a measurement store",
          label="load file"),
    *(Fault("torn trailing line", f_torn_tail, c, "warn", match=r"jsonl:\d+: torn trailing line") for c in COMMANDS),
    Fault("broken line mid-file", f_broken_mid, "load", match=r"jsonl:\d+: not valid JSON"),
    Fault("unknown extra field", f_extra_field, "load", "ok"),
]


# ---- build-level faults: report builds, notebooks, GPU tests, inspect -----------------------------------

def _build(case: Case, *notebooks: str) -> None:
    """A good site of these notebooks at case.tmp/site (replay, from the copied results)."""
    subprocess.run([sys.executable, "-m", "gluon_lab", "report", "--mode", "replay", "--out", str(case.tmp / "site"),
                    "--results-dir", str(case.results), *notebooks], check=True, capture_output=True, cwd=REPO)


def f_site_00(case):
    _build(case, "00-ceilings")


def f_site_00_01(case):
    _build(case, "00-ceilings", "01-tma-caching")


def f_delete_results(case):
    (case.results / "h200" / "00-ceilings.jsonl").unlink()


REPORT = ["{python}", "-m", "gluon_lab", "report", "--mode", "replay", "--out", "{tmp}/site", "--results-dir", "{results}"]
SITE_KEPT = ("; rc=$?; grep -q 'href=\"00-ceilings.html\"' {tmp}/site/index.html && test -f {tmp}/site/00-ceilings.html "
             '&& echo "site kept as it was: index and 00-ceilings page still there" >&2; exit $rc')
GPU_VARIANT_ON_CPU = ["{python}", "-c", "import torch, gluon_lab as gll; x = torch.randn(4, 64); "
                      "gll.rms_norm(x, torch.ones(64), variant='gluon-tma')"]
INSPECT = ["{python}", "-m", "gluon_lab", "inspect"]

FAULTS += [
    Fault("report: results file deleted", f_delete_results, REPORT + ["00-ceilings"], "refuse",
          match=r"00-ceilings.ipynb: the page lacks what it must show: no records", label="report"),
    Fault("report: a cell fails, site exists", f_site_00,
          ["sh", "-c", " ".join(REPORT) + " {repo}/tests/fixtures/broken/99-broken.ipynb" + SITE_KEPT], "refuse",
          match=r"99-broken.ipynb: cell 4 .*RuntimeError: boom.*site kept as it was", label="report"),
    Fault("report: a subset into an existing site", f_site_00_01,
          ["sh", "-c", " ".join(REPORT) +  " 00-ceilings && grep -q 'href=\"01-tma-caching.html\"' {tmp}/site/index.html "
           "&& echo '01-tma-caching card kept' >&2"], "ok", label="report"),
    Fault("papermill: quick=True in replay", f_none,
          ["{python}", "-m", "papermill", "--log-output", "notebooks/00-ceilings.ipynb", "{tmp}/out.ipynb", "-p", "mode",
           "replay", "-p", "quick", "True", "-p", "results_dir", "{results}"], "warn",
          match=r"quick=True has no effect in replay", label="papermill"),
    Fault("pytest -m gpu, no usable GPU", f_none,
          ["{python}", "-m", "pytest", "-q", "-m", "gpu", "tests/test_specs.py", "-p", "no:cacheprovider"], "refuse",
          match=r"no usable NVIDIA sm_90\+ GPU", label="pytest"),
    Fault("GPU variant given CPU tensors", f_none, GPU_VARIANT_ON_CPU, match=r"ValueError: variant 'gluon-tma' runs on a CUDA GPU",
          label="api"),
    Fault("inspect gluon-tma --N 5000", f_none, INSPECT + ["rms_norm", "gluon-tma", "--N", "5000"], "refuse",
          match=r"refused: .*power-of-2 N", label="inspect"),
    Fault("inspect gluon-tma --N 131072", f_none, INSPECT + ["rms_norm", "gluon-tma", "--N", "131072"], "refuse",
          match=r"refused: ", label="inspect"),
    Fault("inspect --dtype fp16", f_none, INSPECT + ["rms_norm", "gluon-chunked", "--N", "5120", "--dtype", "fp16"], "ok",
          label="inspect"),
    Fault("inspect matmul gluon-ws (ours)", f_none,
          INSPECT + ["matmul", "gluon-ws", "--shape", '{"M": 4096, "N": 4096, "K": 4096}'], "ok", label="inspect"),
    Fault("inspect group_norm gluon-chunked (ours)", f_none,
          INSPECT + ["group_norm", "gluon-chunked", "--shape", '{"B": 2, "C": 64, "H": 16, "W": 16, "G": 8}'], "ok",
          label="inspect"),
]


# ---- running ---------------------------------------------------------------------------------------

def _argv(fault: Fault, case: Case) -> list[str]:
    argv = COMMANDS[fault.command] if isinstance(fault.command, str) else fault.command
    subst = {"{results}": str(case.results), "{tmp}": str(case.tmp), "{python}": sys.executable, "{repo}": str(REPO)}
    out = []
    for a in argv:
        for k, v in subst.items():
            a = a.replace(k, v)
        out.append(a)
    return out


def _first_line(proc, tmp: Path) -> tuple[str, bool, bool]:
    """(what it said, it raised, it warned), with the temporary folder shown as TMP."""
    err = proc.stderr.splitlines()
    raised = any(ln.startswith("Traceback") for ln in err)
    warned = any("Warning:" in ln for ln in err)
    if raised:
        msg = next((ln for ln in reversed(err) if ln.strip()), "")
    elif warned:  # "path.py:12: UserWarning: the message" -> "UserWarning: the message"
        ln = next(ln for ln in err if "Warning:" in ln)
        m = re.search(r"\w*Warning: ", ln)
        msg = ln[m.start():] if m else ln
    elif proc.returncode != 0:  # a refusal: what it said on stderr first (stdout holds progress lines)
        msg = " / ".join(ln.strip() for ln in err if ln.strip())[:900] or \
            next((ln for ln in proc.stdout.splitlines() if ln.strip()), "")
    else:
        msg = next((ln for ln in proc.stdout.splitlines() + err if ln.strip()), "")
    return msg.replace(str(tmp), "TMP").strip(), raised, warned


def run(faults, source: Path, keep: bool, timeout: int) -> list[dict]:
    top = Path(tempfile.mkdtemp(prefix="fault-matrix-"))
    rows, baseline = [], {}
    try:
        for i, f in enumerate(faults):
            case = Case(results=top / f"{i:02d}" / "results", tmp=top / f"{i:02d}")
            shutil.copytree(source, case.results)
            f.setup(case)
            env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
            try:
                p = subprocess.run(_argv(f, case), capture_output=True, text=True, cwd=REPO, env=env, timeout=timeout)
                rc, (msg, raised, warned) = p.returncode, _first_line(p, top)
            except subprocess.TimeoutExpired:
                rc, msg, raised, warned = "timeout", f"ran past {timeout} s", False, False
            cmd = f.label or (f.command if isinstance(f.command, str) else "custom")
            if f.name.startswith("none"):
                baseline[cmd] = rc
            base = baseline.get(cmd, 0)
            ok = {"error": rc not in (0, "timeout") and raised,
                  "refuse": rc not in (0, "timeout") and not raised,
                  "ok": rc == base and not raised,
                  "warn": rc == base and not raised and warned}[f.expect]
            ok = ok and (f.match is None or re.search(f.match, msg) is not None)
            rows.append({"fault": f.name, "command": cmd, "exit": rc, "expected": f.expect,
                         "as expected": "yes" if ok else "NO", "message": msg})
            print(f"  [{i + 1}/{len(faults)}] {f.name} / {cmd}: exit {rc}", file=sys.stderr, flush=True)
    finally:
        if keep:
            print(f"kept the copies in {top}", file=sys.stderr)
        else:
            shutil.rmtree(top, ignore_errors=True)
    return rows


def table(rows: list[dict], width: int = 150) -> str:
    cols = ["fault", "command", "exit", "expected", "as expected", "message"]
    cells = [[str(r[c]) for c in cols] for r in rows]
    w = [max(len(c), *(len(x[i]) for x in cells)) for i, c in enumerate(cols[:-1])]
    fmt = lambda xs: " | ".join(x.ljust(n) for x, n in zip(xs[:-1], w)) + " | " + xs[-1][:width]  # noqa: E731
    return "\n".join([fmt(cols), "-+-".join("-" * n for n in w) + "-+-" + "-" * 7] + [fmt(x) for x in cells])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results-dir", default=str(REPO / "results"), help="the folder to copy (never written)")
    ap.add_argument("--only", nargs="*", default=None, help="faults whose name contains one of these words")
    ap.add_argument("--commands", default=",".join(COMMANDS), help="comma-separated COMMANDS to run (custom ones always run)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary copies")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per command")
    a = ap.parse_args(argv)
    src = Path(a.results_dir)
    if not src.is_dir():
        ap.error(f"--results-dir {src}: no such folder")
    want = set(a.commands.split(","))
    faults = [f for f in FAULTS if (not isinstance(f.command, str) or f.command in want)
              and (a.only is None or f.name.startswith("none") or any(re.search(w, f.name, re.I) for w in a.only))]
    rows = run(faults, src, a.keep, a.timeout)
    print(table(rows))
    return 0 if all(r["as expected"] == "yes" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
