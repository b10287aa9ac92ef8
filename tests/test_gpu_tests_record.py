"""The GPU suite is a record: results/h200/gpu-tests.json, written by ci/h200_batch.sh on the H200 (the
whole `pytest -m gpu -n 8`, through ci/gpu_tests_record.py from pytest's JUnit XML) and committed.

When no H200 is lent, an H100 (same sm_90 kernels, 80 GB: GPU_WORKERS=4) runs the same whole suite and its
record goes to results/h100-sxm/gpu-tests.json; the newest Hopper record is the one checked (newest_record).

On this CPU machine: the committed record must be at least as new as the last commit that changed the
kernels (gluon_lab/kernels/, gluon_lab/fastpath.py) and must record no failure and no error; and the
record's helper turns a JUnit XML (tests/fixtures/gpu-tests/junit.xml: pytest's own output, run with
-n 2 over a small sample module with a pass, a parametrized failure, skips, an xfail, setup and
teardown errors and a module that does not import) into the counts and ids the record holds.
"""
import importlib.util
import json
import re
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RECORD = ROOT / "results" / "h200" / "gpu-tests.json"
HOPPER = ("H200", "H100")  # sm_90 cards the device tool lends: the same compiled kernels, so either's suite counts
KERNEL_PATHS = ("gluon_lab/kernels", "gluon_lab/fastpath.py")
JUNIT = ROOT / "tests" / "fixtures" / "gpu-tests" / "junit.xml"
SHA = "0123456789abcdef0123456789abcdef01234567"
HOW = ("run the whole GPU suite on the H200 and commit its record: on the device (repo root),\n"
       "    GLUON_LAB_GIT_COMMIT=<full sha of this checkout's HEAD, `git rev-parse HEAD` here> bash ci/h200_batch.sh\n"
       "(with the device tool: GLUON_LAB_GIT_COMMIT=$(git rev-parse HEAD) taken on this side, since the device's .git "
       "names the last landed commit), then copy $OUT/results/h200/gpu-tests.json to results/h200/gpu-tests.json "
       "and commit it")


def _rec_module():
    spec = importlib.util.spec_from_file_location("gpu_tests_record", ROOT / "ci" / "gpu_tests_record.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _git(*args) -> str:
    try:
        p = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        pytest.fail(f"git is needed to check results/h200/gpu-tests.json against the kernels' history and "
                    f"`git {' '.join(args)}` could not run ({type(e).__name__}: {e}); the record is not trusted "
                    "without it", pytrace=False)
    if p.returncode not in (0, 1):
        pytest.fail(f"`git {' '.join(args)}` failed in {ROOT} ({p.stderr.strip() or p.returncode}): this check needs "
                    "the repository's git history (a git checkout, not an export); the record is not trusted "
                    "without it", pytrace=False)
    return p.stdout.strip() if p.returncode == 0 else None


# ------------------------------------------------------------------------------------ the record itself

def newest_record(results: Path) -> Path:
    """The record of the newest whole-suite run on a Hopper card: results/<slug>/gpu-tests.json by its timestamp.
    The lab targets the H200; an H100 (same sm_90 code, 80 GB, fewer xdist workers) stands in when no H200 is lent,
    and its record is kept beside the H200's under its own slug, naming its card."""
    found = []
    for f in sorted(results.glob("*/gpu-tests.json")):
        try:
            rec = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(rec, dict) and any(h in str(rec.get("gpu_name", "")) for h in HOPPER):
            found.append((str(rec.get("timestamp", "")), f))
    return max(found)[1] if found else results / "h200" / "gpu-tests.json"


def test_newest_hopper_record_is_the_one_checked(tmp_path):
    for slug, name, ts in (("h200", "NVIDIA H200", "2026-12-04T15:26:01Z"), ("h100", "NVIDIA H100 80GB HBM3",
                           "2026-12-08T10:00:00Z"), ("a100", "NVIDIA A100-SXM4-80GB", "2026-12-09T10:00:00Z")):
        (tmp_path / slug).mkdir()
        (tmp_path / slug / "gpu-tests.json").write_text(json.dumps({"gpu_name": name, "timestamp": ts}))
    assert newest_record(tmp_path) == tmp_path / "h100" / "gpu-tests.json"  # the A100 is not sm_90: not counted
    (tmp_path / "h200" / "gpu-tests.json").write_text(json.dumps({"gpu_name": "NVIDIA H200",
                                                                  "timestamp": "2026-12-10T00:00:00Z"}))
    assert newest_record(tmp_path) == tmp_path / "h200" / "gpu-tests.json"
    assert newest_record(tmp_path / "none") == tmp_path / "none" / "h200" / "gpu-tests.json"


def test_gpu_tests_record_is_newer_than_the_kernels_and_all_green():
    RECORD = newest_record(ROOT / "results")
    if not RECORD.is_file():
        pytest.fail(f"no GPU test record {RECORD.relative_to(ROOT)}: the GPU tests are not known to pass on the "
                    f"H200 for this tree; {HOW}", pytrace=False)
    rec = json.loads(RECORD.read_text())
    for key in ("git_commit", "timestamp", "gpu_name", "torch", "triton", "counts", "failed_tests",
                "skipped_tests", "duration_s"):
        assert key in rec, f"{RECORD.relative_to(ROOT)} has no {key!r}: not written by ci/gpu_tests_record.py? {HOW}"
    commit = rec["git_commit"]
    assert isinstance(commit, str) and re.fullmatch(r"[0-9a-f]{40}", commit), \
        f"{RECORD.relative_to(ROOT)}: git_commit {commit!r} is not a full sha; {HOW}"
    if _git("rev-parse", "--is-inside-work-tree") != "true":
        pytest.fail(f"{ROOT} is not a git checkout: results/h200/gpu-tests.json cannot be checked against the "
                    f"kernels' history (it names commit {commit[:12]}); run the tests from a git clone", pytrace=False)
    last = _git("log", "-1", "--format=%H", "--", *KERNEL_PATHS)
    if not last:
        pytest.fail(f"`git log -- {' '.join(KERNEL_PATHS)}` found no commit (a shallow clone?): the record cannot "
                    "be checked against the kernels' history; fetch the full history", pytrace=False)
    known = subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{commit}^{{commit}}"], capture_output=True,
                           timeout=60).returncode == 0
    if not known:
        pytest.fail(f"{RECORD.relative_to(ROOT)} names commit {commit[:12]}, which this checkout does not have "
                    f"(never committed or pushed, or a shallow clone); {HOW}", pytrace=False)
    p = subprocess.run(["git", "-C", str(ROOT), "merge-base", "--is-ancestor", last, commit], capture_output=True,
                       text=True, timeout=60)
    if p.returncode not in (0, 1):
        pytest.fail(f"`git merge-base --is-ancestor {last[:12]} {commit[:12]}` failed: {p.stderr.strip()}",
                    pytrace=False)
    if p.returncode == 1:
        subject = _git("log", "-1", "--format=%h %s", last) or last[:12]
        pytest.fail(f"{RECORD.relative_to(ROOT)} is stale: its GPU run was at {commit[:12]} ({rec['timestamp']}), "
                    f"before the last change to {' / '.join(KERNEL_PATHS)}: {subject[:160]}; {HOW}", pytrace=False)
    c = rec["counts"]
    if c.get("failed", 0) or c.get("errors", 0):
        bad = [t["id"] + (f": {t['message']}" if t.get("message") else "")
               for t in rec.get("failed_tests", []) + rec.get("error_tests", [])]
        pytest.fail(f"{RECORD.relative_to(ROOT)} (GPU run at {commit[:12]}, {rec['timestamp']}) records "
                    f"{c.get('failed', 0)} failed and {c.get('errors', 0)} errors:\n  " + "\n  ".join(bad[:30])
                    + f"\nfix them, then {HOW}", pytrace=False)
    assert c.get("passed", 0) > 0, f"{RECORD.relative_to(ROOT)} records no passed test; {HOW}"


# ------------------------------------------------------------------------------------ the record's helper

EXPECTED_IDS = {
    "failed": ["tests/test_sample_gpu.py::test_param[2]"],
    "errors": ["tests/test_broken_import_gpu.py", "tests/test_sample_gpu.py::test_setup_error",
               "tests/test_sample_gpu.py::test_teardown_error"],
    "skipped": {"tests/test_sample_gpu.py::test_skipped": "config does not fit in shared memory",
                "tests/test_sample_gpu.py::TestGroup::test_skip_in_class": "needs two GPUs"},
}


def _check_parsed(r):
    assert r["counts"] == {"passed": 3, "failed": 1, "skipped": 2, "errors": 3, "xfailed": 1}
    assert [t["id"] for t in r["failed_tests"]] == EXPECTED_IDS["failed"]
    assert r["failed_tests"][0]["message"] == "AssertionError: n is 2, not 1"
    assert sorted(t["id"] for t in r["error_tests"]) == EXPECTED_IDS["errors"]
    assert any("CUDA error: out of memory" in t["message"] for t in r["error_tests"])
    assert {t["id"]: t["reason"] for t in r["skipped_tests"]} == EXPECTED_IDS["skipped"]
    assert r["duration_s"] == 5.0


def test_record_helper_reads_pytests_junit_xml():
    _check_parsed(_rec_module().parse(str(JUNIT)))


def test_record_helper_reads_xunit2_too(tmp_path):
    """pytest's default junit family (xunit2) has no file attribute: the ids come from the classname."""
    tree = ET.parse(JUNIT)
    for case in tree.getroot().iter("testcase"):
        case.attrib.pop("file", None)
        case.attrib.pop("line", None)
    x2 = tmp_path / "x2.xml"
    tree.write(x2)
    _check_parsed(_rec_module().parse(str(x2)))


def test_record_helper_writes_the_record(tmp_path, capsys):
    mod = _rec_module()
    out = tmp_path / "results" / "h200" / "gpu-tests.json"
    rc = mod.main([str(JUNIT), str(out), "--commit", SHA.upper(), "--exit-code", "1", "--gpu-name", "NVIDIA H200",
                   "--torch", "2.11.0+cu130", "--triton", "3.6.0", "--command", "python3 -m pytest -q -m gpu tests -n 8"])
    assert rc == 0
    rec = json.loads(out.read_text())
    assert rec["git_commit"] == SHA and rec["gpu_name"] == "NVIDIA H200" and rec["gpu_slug"] == "h200"
    assert rec["torch"] == "2.11.0+cu130" and rec["triton"] == "3.6.0" and rec["pytest_exit_code"] == 1
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", rec["timestamp"]) and rec["started"].startswith("2026-")
    assert rec["command"] == "python3 -m pytest -q -m gpu tests -n 8"
    _check_parsed(rec)
    assert "3 passed, 1 failed, 2 skipped, 3 errors" in capsys.readouterr().out


def test_record_helper_writes_nothing_without_xml_or_with_a_bad_commit(tmp_path):
    mod = _rec_module()
    out = tmp_path / "gpu-tests.json"
    out.write_text("{}")  # an older record stays as it was
    args = ["--gpu-name", "NVIDIA H200", "--torch", "2.11.0", "--triton", "3.6.0"]
    assert mod.main([str(tmp_path / "none.xml"), str(out), "--commit", SHA, *args]) == 2
    assert mod.main([str(JUNIT), str(out), "--commit", "HEAD", *args]) == 2
    (tmp_path / "torn.xml").write_text("<testsuites><testsuite")
    assert mod.main([str(tmp_path / "torn.xml"), str(out), "--commit", SHA, *args]) == 2
    assert out.read_text() == "{}"


def test_batch_runs_the_whole_gpu_suite_and_records_it():
    """ci/h200_batch.sh: the whole `pytest -m gpu -n 8` (no subset, no -x), its JUnit XML made into
    results/<slug>/gpu-tests.json, and the guard that some GPU test passed."""
    sh = (ROOT / "ci" / "h200_batch.sh").read_text()
    run = next(l for l in sh.splitlines() if l.strip().startswith("GPU_PYTEST=("))
    assert '-m gpu tests -n "$GPU_WORKERS"' in run and "-x" not in run.split() and "GPU_TESTS" not in run
    assert "GPU_WORKERS=${GPU_WORKERS:-8}" in sh  # 8 workers unless told (an 80 GB card needs fewer)
    assert "--junitxml" in sh and "junit_family=xunit1" in sh
    assert 'ci/gpu_tests_record.py "$JUNIT" "$OUT/results/$SLUG/gpu-tests.json" --commit "$GLUON_LAB_GIT_COMMIT"' in sh
    assert 'grep -Eq "[1-9][0-9]* passed"' in sh  # the "no test passed" guard
    assert 'SKIP_GPU_TESTS:-0}" != 1' in sh
