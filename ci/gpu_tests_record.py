"""The GPU suite's record: results/<gpu-slug>/gpu-tests.json from pytest's own JUnit XML.

    python3 ci/gpu_tests_record.py JUNIT_XML OUT_JSON --commit SHA [--exit-code N] [--command "..."]
                                    [--gpu-name NAME] [--torch VER] [--triton VER]

ci/h200_batch.sh runs the whole `pytest -m gpu -n 8 --junitxml ...` and then this. The GPU name and
the torch / triton versions default to what this Python sees (torch.cuda.get_device_name(); the
options are for the unit test, tests/test_gpu_tests_record.py, which runs on a CPU). The record holds
the commit the batch was given (GLUON_LAB_GIT_COMMIT), when, on which GPU, with which torch /
triton, the counts (passed, failed, skipped, errors, xfailed), the ids of the failed and errored
tests with the first line of their message, the skipped ids with their reasons, and the suite's
duration. tests/test_gpu_tests_record.py (CPU) fails when the committed record is older than the
kernels or records a failure.

Exit status: 0 when the record was written (whatever the tests did: the record says), 2 when the XML
is missing or unreadable (pytest did not finish, e.g. the batch's timeout killed it): no record is
written then, and an old one is left as it was.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import sys
import xml.etree.ElementTree as ET

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)  # run as a script from anywhere: gluon_lab is the repo's package

SCHEMA = 1
MESSAGE_CHARS = 300


def _first_line(text: str | None) -> str:
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    return line[:MESSAGE_CHARS]


def test_id(case: ET.Element) -> str:
    """pytest's node id of a <testcase>: from its `file` attribute (junit_family=xunit1, what the
    batch asks for) and classname (module dotted, then the classes); without `file`, the module is
    the classname up to its first component that starts with 'Test' (a class)."""
    cls, name, path = case.get("classname", ""), case.get("name", ""), case.get("file")
    parts = [p for p in cls.split(".") if p]
    if not parts:  # a collection error: classname "", the name is the module (dotted)
        return path.replace("\\", "/") if path else name.replace(".", "/") + ".py"
    if path:
        mod = path[:-3].replace("/", ".").replace("\\", ".") if path.endswith(".py") else path
        mod_parts = mod.split(".")
        classes = parts[len(mod_parts):] if parts[:len(mod_parts)] == mod_parts else []
        return "::".join([path.replace("\\", "/"), *classes, name])
    i = next((k for k, p in enumerate(parts) if p.startswith("Test")), len(parts))
    return "::".join(["/".join(parts[:i]) + ".py", *parts[i:], name])


def parse(junit_path: str) -> dict:
    """Counts, ids and duration of one JUnit XML (pytest's --junitxml; xdist's controller writes one).
    A test that passed and then failed its teardown counts as an error only (pytest's summary line
    counts it in both); a module that failed to import is an error under the module's path."""
    root = ET.parse(junit_path).getroot()
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    if not suites:
        raise ValueError(f"{junit_path}: no <testsuite> element")
    counts = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0, "xfailed": 0}
    failed, errors, skipped = [], [], []
    duration, started = 0.0, None
    for suite in suites:
        duration += float(suite.get("time") or 0)
        started = started or suite.get("timestamp")
        for case in suite.iter("testcase"):
            tid = test_id(case)
            fail, err, skip = case.find("failure"), case.find("error"), case.find("skipped")
            if err is not None:  # a setup / teardown / collection error (a test may also have passed)
                counts["errors"] += 1
                errors.append({"id": tid, "message": _first_line(err.get("message") or err.text)})
            if fail is not None:
                counts["failed"] += 1
                failed.append({"id": tid, "message": _first_line(fail.get("message") or fail.text)})
            elif skip is not None:
                if skip.get("type") == "pytest.xfail":
                    counts["xfailed"] += 1
                else:
                    counts["skipped"] += 1
                    skipped.append({"id": tid, "reason": _first_line(skip.get("message") or skip.text)})
            elif err is None:
                counts["passed"] += 1
    return {"counts": counts, "failed_tests": failed, "error_tests": errors, "skipped_tests": skipped,
            "duration_s": round(duration, 1), "started": started}


def _versions() -> dict:
    out = {}
    try:
        import torch
        out["torch"] = torch.__version__
        out["gpu_name"] = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    except Exception as e:  # noqa: BLE001 - named in the record, never a crash after the suite ran
        out["torch"], out["gpu_name"] = f"unknown ({type(e).__name__})", None
    try:
        import triton
        out["triton"] = triton.__version__
    except Exception as e:  # noqa: BLE001
        out["triton"] = f"unknown ({type(e).__name__})"
    return out


def record(junit_path: str, *, commit: str, gpu_name: str, torch_version: str, triton_version: str,
           exit_code: int | None = None, command: str | None = None, timestamp: str | None = None) -> dict:
    from gluon_lab.device import gpu_slug
    parsed = parse(junit_path)
    return {
        "schema": SCHEMA,
        "git_commit": commit,
        "timestamp": timestamp or _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "started": parsed.pop("started"),
        "gpu_name": gpu_name,
        "gpu_slug": gpu_slug(gpu_name) if gpu_name else None,
        "torch": torch_version,
        "triton": triton_version,
        "command": command,
        "pytest_exit_code": exit_code,
        **parsed,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("junit_xml")
    ap.add_argument("out_json")
    ap.add_argument("--commit", required=True, help="full sha of the tree the suite ran (GLUON_LAB_GIT_COMMIT)")
    ap.add_argument("--exit-code", type=int, default=None, help="pytest's exit status")
    ap.add_argument("--command", default=None, help="the pytest command line, as run")
    ap.add_argument("--gpu-name", default=None)
    ap.add_argument("--torch", default=None)
    ap.add_argument("--triton", default=None)
    a = ap.parse_args(argv)
    if len(a.commit) != 40 or any(c not in "0123456789abcdef" for c in a.commit.lower()):
        print(f"gpu_tests_record: --commit must be a full 40-hex sha, got {a.commit!r}", file=sys.stderr)
        return 2
    if not os.path.isfile(a.junit_xml):
        print(f"gpu_tests_record: {a.junit_xml}: no JUnit XML (pytest did not finish?): no record written",
              file=sys.stderr)
        return 2
    seen = {} if (a.gpu_name and a.torch and a.triton) else _versions()
    try:
        rec = record(a.junit_xml, commit=a.commit.lower(), gpu_name=a.gpu_name or seen.get("gpu_name"),
                     torch_version=a.torch or seen.get("torch"), triton_version=a.triton or seen.get("triton"),
                     exit_code=a.exit_code, command=a.command)
    except (ET.ParseError, ValueError) as e:
        print(f"gpu_tests_record: {a.junit_xml}: {e}: no record written", file=sys.stderr)
        return 2
    os.makedirs(os.path.dirname(os.path.abspath(a.out_json)), exist_ok=True)
    tmp = a.out_json + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(rec, fh, indent=1)
        fh.write("\n")
    os.replace(tmp, a.out_json)
    c = rec["counts"]
    print(f"gpu-tests record {a.out_json}: {c['passed']} passed, {c['failed']} failed, {c['skipped']} skipped, "
          f"{c['errors']} errors in {rec['duration_s']:.0f} s at {rec['git_commit'][:12]} on {rec['gpu_name']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
