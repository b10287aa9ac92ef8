"""The results store as data people can trust: physics recomputed on load, every field's type
checked, encoding errors with file:line, non-record stores skipped by folder loads, reads under a
shared lock, torn trailing lines quarantined. CPU-only; every store lives under tmp_path except
the read-only check of the committed results/."""
import json
import multiprocessing as mp
import re
import time
from pathlib import Path

import pytest

from gluon_lab import device, plots, results
from gluon_lab.results import MalformedRecordError, NotARecordStoreError, PhysicsError, Record

ROOT = Path(__file__).resolve().parent.parent
H200 = device.DATASHEET["h200"]
M, N = 4096, 8192
NBYTES = 2 * M * N * 2 + N * 2  # rms_norm bf16: read x, write y, read the weight


def ms_for(gbps, nbytes=NBYTES):
    return nbytes / (gbps * 1e9) * 1e3


def line(**kw):
    """A record dict as bench writes it for an rms_norm cell on the H200 at 3000 GB/s."""
    ms = ms_for(3000.0)
    d = dict(op="rms_norm", variant="triton", pattern="baseline", shape={"M": M, "N": N}, dtype="bfloat16",
             config={"num_warps": 8}, ms_median=ms, ms_min=ms * 0.99, ms_max=ms * 1.01, n_reps=20,
             timer="cudagraph", bytes=NBYTES, flops=4 * M * N, passed=True, gpu_name="NVIDIA H200",
             sm_count=132, run_id="r1", timestamp="2026-12-01T00:00:00+00:00", schema=2)
    d["gbps"] = NBYTES / (ms * 1e-3) / 1e9
    d["tflops"] = d["flops"] / (ms * 1e-3) / 1e12
    d["sol_datasheet_pct"] = 100 * d["gbps"] / H200.hbm_gbps
    d.update(kw)
    return d


def write(path, *dicts, raw_tail=None):
    path.parent.mkdir(parents=True, exist_ok=True)
    data = b"".join(json.dumps(d).encode() + b"\n" if isinstance(d, dict) else d for d in dicts)
    path.write_bytes(data + (raw_tail or b""))
    return path


# ---- 1. physics is recomputed from bytes and ms_median, never trusted ------------------------

def test_173_percent_with_empty_sol_is_a_physics_error_naming_file_line(tmp_path):
    gbps = 8290.0
    p = write(tmp_path / "h200" / "nb.jsonl", line(),
              line(ms_median=ms_for(gbps), ms_min=ms_for(gbps), ms_max=ms_for(gbps), gbps=gbps,
                   tflops=None, sol_datasheet_pct=None))
    pct = f"{100 * gbps / H200.hbm_gbps:.1f}%"
    with pytest.raises(PhysicsError, match=rf"nb\.jsonl:2: .*gbps 8290 \(bytes / ms_median\) is {re.escape(pct)} "
                                           r"of the NVIDIA H200 datasheet .*cannot exceed 100% of the datasheet"):
        results.load(p)
    assert plots.PhysicsError is PhysicsError  # what report / notebook callers catch
    with pytest.warns(UserWarning, match=r"nb\.jsonl:2"):
        df = results.load(p, on_error="warn")
    assert len(df) == 1 and len(df.attrs["malformed"]) == 1


def test_check_physical_recomputes_instead_of_trusting_the_column(tmp_path):
    p = write(tmp_path / "h200" / "nb.jsonl", line(), line(run_id="r2"))
    df = results.load(p)
    plots.check_physical(df)
    df.loc[1, "ms_median"] = ms_for(8290.0)  # the stored SOL column still says ~62%
    with pytest.raises(PhysicsError, match=r"1 record\(s\) exceed 100% of the datasheet: .*nb\.jsonl:2"):
        plots.check_physical(df)


def test_matmul_above_peak_tflops_is_a_physics_error(tmp_path):
    K = 8192
    flops = 2 * M * N * K
    ms = flops / (1.2 * H200.bf16_tflops * 1e12) * 1e3
    d = line(op="matmul", variant="torch", pattern="ceiling", shape={"M": M, "N": N, "K": K}, flops=flops,
             bytes=(M * K + K * N + M * N) * 2, ms_median=ms, ms_min=ms, ms_max=ms, gbps=None, tflops=None,
             sol_datasheet_pct=None)
    with pytest.raises(PhysicsError, match=r"nb\.jsonl:1: matmul/torch .*tflops .* is 120\.0% of the NVIDIA H200"):
        results.load(write(tmp_path / "nb.jsonl", d))


@pytest.mark.parametrize("field,factor", [("gbps", 2.0), ("tflops", 0.5), ("sol_datasheet_pct", 1.05)])
def test_stored_value_that_disagrees_with_the_recomputation_names_both_numbers(tmp_path, field, factor):
    good = line()
    bad = line(**{field: good[field] * factor})
    p = write(tmp_path / "nb.jsonl", good, bad)
    with pytest.raises(MalformedRecordError) as e:
        results.read_records(p)
    msg = str(e.value)
    assert msg.startswith(f"{p}:2: field {field!r} is {bad[field]:.6g} but ")
    assert f"gives {good[field]:.6g}" in msg and "within 1%" in msg


def test_within_one_percent_is_accepted_and_missing_values_are_filled(tmp_path):
    good = line()
    p = write(tmp_path / "nb.jsonl", line(gbps=good["gbps"] * 1.005),
              line(gbps=None, tflops=None, sol_datasheet_pct=None))
    recs, _ = results.read_records(p)
    assert recs[1].gbps is None  # the Records stay as stored ...
    df = results.load(p)  # ... the DataFrame has the recomputed values
    assert df.loc[1, "gbps"] == pytest.approx(good["gbps"], rel=1e-12)
    assert df.loc[1, "tflops"] == pytest.approx(good["tflops"], rel=1e-12)
    assert df.loc[1, "sol_datasheet_pct"] == pytest.approx(good["sol_datasheet_pct"], rel=1e-12)
    assert df.loc[0, "gbps"] == good["gbps"] * 1.005  # a stored value that agrees is kept
    assert list(df["line"]) == [1, 2] and set(df["source"]) == {str(p)}


def test_values_that_cannot_be_recomputed_are_kept_and_still_bounded(tmp_path):
    # bytes unknown: gbps cannot be verified, it is kept, and the SOL follows from it
    p = write(tmp_path / "nb.jsonl", line(bytes=None, flops=None, gbps=1000.0, tflops=None,
                                          sol_datasheet_pct=None))
    df = results.load(p)
    assert df.loc[0, "gbps"] == 1000.0
    assert df.loc[0, "sol_datasheet_pct"] == pytest.approx(100 * 1000.0 / H200.hbm_gbps)
    p2 = write(tmp_path / "nb2.jsonl", line(bytes=None, flops=None, gbps=6000.0, tflops=None, sol_datasheet_pct=None))
    with pytest.raises(PhysicsError, match=r"nb2\.jsonl:1: .*gbps 6000 \(as stored\)"):
        results.load(p2)
    # a GPU without a datasheet: no SOL can be recomputed; a stored one above 100% still fails
    p3 = write(tmp_path / "nb3.jsonl", line(gpu_name="Some Future GPU", sol_datasheet_pct=150.0))
    with pytest.raises(PhysicsError, match=r"nb3\.jsonl:1: .*sol_datasheet_pct 150\.0% \(as stored\)"):
        results.load(p3)
    # no timing at all (a case that errored before it was timed): nothing to recompute
    df4 = results.load(write(tmp_path / "nb4.jsonl", line(ms_median=None, ms_min=None, ms_max=None, timer=None,
                                                          gbps=None, tflops=None, sol_datasheet_pct=None,
                                                          passed=False)))
    assert df4["gbps"].isna().all() and df4["sol_datasheet_pct"].isna().all()


def test_host_loop_records_have_no_bandwidth(tmp_path):
    host = line(timer="host-loop", ms_median=0.012, ms_min=0.011, ms_max=0.02, gbps=None, tflops=None,
                sol_datasheet_pct=None, sol_measured_pct=None)
    df = results.load(write(tmp_path / "nb.jsonl", host))
    assert df["gbps"].isna().all() and df["sol_datasheet_pct"].isna().all()  # not filled: host time
    p = write(tmp_path / "nb2.jsonl", {**host, "gbps": 123.0})
    with pytest.raises(MalformedRecordError, match=r"nb2\.jsonl:1: field 'gbps' must be null for timer 'host-loop'"):
        results.load(p)


def _committed_stores():
    return sorted(p for base in (ROOT / "results", ROOT / "tests" / "fixtures" / "records")
                  for p in base.rglob("*.jsonl") if p.name not in results.NON_RECORD_STORES)


@pytest.mark.parametrize("store", _committed_stores(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_committed_record_loads(store):
    n_lines = sum(1 for ln in store.read_bytes().split(b"\n") if ln.strip())
    df = results.load(store, on_error="raise")
    assert len(df) == n_lines and df.attrs["malformed"] == []
    plots.check_physical(df)


def test_committed_results_folder_loads():
    loaded = []
    for gpu in (ROOT / "results").iterdir():
        if gpu.is_dir() and any(gpu.glob("*.jsonl*")):  # results/h100-sxm holds only the GPU suite's record
            df = results.load(gpu, on_error="raise")  # sanitizer.jsonl and friends skipped
            assert len(df) and df["source"].map(lambda s: Path(s).name not in results.NON_RECORD_STORES).all()
            loaded.append(gpu.name)
    assert "h200" in loaded, loaded


# ---- 2. every field's type --------------------------------------------------------------------

@pytest.mark.parametrize("patch,msg", [
    ({"passed": "false"}, "field 'passed' must be true/false or null, got \"false\""),
    ({"passed": 0}, "field 'passed' must be true/false or null, got 0"),
    ({"ms_median": "0.5"}, "field 'ms_median' must be a number or null, got \"0.5\""),
    ({"ms_median": True}, "field 'ms_median' must be a number or null, got true"),
    ({"ms_median": 0}, "field 'ms_median' must be > 0, got 0"),
    ({"gbps": float("nan")}, "field 'gbps' must be a finite number, got NaN"),
    ({"bytes": 1.5}, "field 'bytes' must be an integer or null, got 1.5"),
    ({"bytes": -1}, "field 'bytes' must be >= 0, got -1"),
    ({"n_reps": True}, "field 'n_reps' must be an integer or null, got true"),
    ({"gpu_name": 5}, "field 'gpu_name' must be a string or null, got 5"),
    ({"op": None}, "field 'op' must be a string, got null"),
    ({"config": None}, "field 'config' must be an object, got null"),
    ({"config": [1]}, "field 'config' must be an object, got [1]"),
    ({"schema": "2"}, "field 'schema' must be an integer, got \"2\""),
    ({"shape": {"M": 4096.5, "N": N}}, "field 'shape' entry 'M' must be an integer, got 4096.5"),
    ({"shape": {"M": "4096", "N": N}}, "field 'shape' entry 'M' must be an integer, got \"4096\""),
    ({"shape": {"B": 2, "C": 64, "H": 8, "W": 8, "layout": 1}}, "field 'shape' entry 'layout' must be a string, got 1"),
])
def test_field_types_are_checked(tmp_path, patch, msg):
    p = write(tmp_path / "nb.jsonl", line(), line(**patch))
    with pytest.raises(MalformedRecordError) as e:
        results.read_records(p)
    assert str(e.value) == f"{p}:2: {msg}"


def test_valid_types_load(tmp_path):
    gn = line(op="group_norm", shape={"B": 2, "C": 64, "H": 8, "W": 8, "G": 8, "layout": "channels_last"},
              bytes=None, flops=None, gbps=None, tflops=None, sol_datasheet_pct=None)
    p = write(tmp_path / "nb.jsonl", gn, line(ms_median=1, ms_min=1, ms_max=1, gbps=None, tflops=None,
                                              sol_datasheet_pct=None))  # an int is a valid float
    df = results.load(p)
    assert df.loc[0, "layout"] == "channels_last" and df.loc[0, "G"] == 8
    assert df.loc[1, "ms_median"] == 1


def test_wrong_types_are_refused_on_write(tmp_path):
    p = tmp_path / "nb.jsonl"
    with pytest.raises(ValueError, match="field 'passed' must be true/false"):
        results.append_records(p, [Record(**{**line(), "passed": "false"})])
    with pytest.raises(ValueError, match="field 'shape' entry 'M' must be an integer"):
        results.append_records(p, [{**line(), "shape": {"M": 4096.5}}])
    assert not p.exists()


def test_unknown_fields_are_kept_and_round_trip(tmp_path):
    d = line(probe={"ncu": "dram__bytes.sum", "value": 3}, added_by="a newer writer")
    p = write(tmp_path / "nb.jsonl", d)
    (r,), _ = results.read_records(p)
    assert r.extra == {"probe": d["probe"], "added_by": "a newer writer"}
    out = json.loads(r.to_json())  # written back as top-level fields, as they were
    assert {k: out[k] for k in d} == d and "extra" not in out
    q = tmp_path / "copy.jsonl"
    results.append_records(q, [r])
    assert json.loads(q.read_text()) == out
    df = results.load(p)
    assert df.loc[0, "extra"] == r.extra
    with pytest.raises(ValueError, match="extra field"):
        Record(**{**line(), "extra": {"op": "shadow"}}).to_json()


# ---- 3. invalid UTF-8 -------------------------------------------------------------------------

def test_invalid_utf8_names_file_and_line(tmp_path):
    bad = json.dumps(line(notes="caf\u00e9")).encode().replace("caf\\u00e9".encode(), b"caf\xe9")
    p = write(tmp_path / "nb.jsonl", line(), bad + b"\n", line(run_id="r3"))
    with pytest.raises(MalformedRecordError, match=r"nb\.jsonl:2: not valid UTF-8 \(byte 0xe9"):
        results.load(p)
    with pytest.warns(UserWarning, match=r"nb\.jsonl:2: not valid UTF-8"):
        df = results.load(p, on_error="warn")
    assert list(df["run_id"]) == ["r1", "r3"]


# ---- 4. non-record stores ---------------------------------------------------------------------

SAN = {"kernel": "pipelined-norm", "case": ["rms_norm", "gluon-pipelined", {"M": 37, "N": 1000}],
       "tool": "racecheck", "exit_code": 0, "summary": ["RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)"],
       "count": 0, "check": {"passed": True, "max_abs_err": 0.01}, "seconds": 21.1, "tail": []}


def test_folder_load_skips_the_sanitizer_store(tmp_path):
    from gluon_lab import notebook
    write(tmp_path / "h200" / "nb.jsonl", line())
    san = write(tmp_path / "h200" / "sanitizer.jsonl", SAN)
    df = results.load(tmp_path)
    assert len(df) == 1 and df["source"].iloc[0].endswith("nb.jsonl")
    with pytest.raises(NotARecordStoreError, match=r"sanitizer\.jsonl: not a measurement store .*load_sanitizer"):
        results.load(san)
    with pytest.raises(NotARecordStoreError):
        results.read_records(san)
    table, n_old = notebook.load_sanitizer(san)  # its own loader still reads it
    assert len(table) == 1 and bool(table["clean"].iloc[0]) and n_old == 0


# ---- 5. reads under a shared lock, while writers append ----------------------------------------

@pytest.mark.parametrize("cut", ["mid-line", "between the lines of one append"])
def test_a_read_waits_for_the_writer_holding_the_lock(tmp_path, cut):
    import fcntl
    import os
    import threading
    p = write(tmp_path / "nb.jsonl", line(run_id="a"))
    append = b"".join(json.dumps(line(run_id=r)).encode() + b"\n" for r in "bc")
    at = 60 if cut == "mid-line" else append.index(b"\n") + 1
    fd = os.open(p, os.O_WRONLY | os.O_APPEND)
    fcntl.flock(fd, fcntl.LOCK_EX)  # a writer in the middle of its append (append_records holds LOCK_EX)
    got = {}

    def reader():
        try:
            got["run_ids"] = [r.run_id for r in results.read_records(p)[0]]
        except Exception as e:  # noqa: BLE001 - the test reports what a reader would have raised
            got["error"] = e

    try:
        os.write(fd, append[:at])
        t = threading.Thread(target=reader)
        t.start()
        t.join(0.5)
        waited = t.is_alive()
        os.write(fd, append[at:])
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
    t.join(30)
    assert waited, f"the read did not wait for the writer's lock: {got}"
    assert got == {"run_ids": ["a", "b", "c"]}
    assert not results.rejected_path(p).exists()


BATCH = 4


def _hammer(path, n, started):
    started.set()
    for i in range(n):
        results.append_records(path, [Record(**line(run_id=f"w{i}", n_reps=k, notes="x" * 300_000))
                                      for k in range(BATCH)])


def test_reads_during_concurrent_appends_see_whole_appends(tmp_path):
    p = tmp_path / "h200" / "nb.jsonl"
    results.append_records(p, [Record(**line(run_id="seed"))] * BATCH)
    ctx = mp.get_context("fork")
    started = ctx.Event()
    n = 25
    w = ctx.Process(target=_hammer, args=(str(p), n, started))
    w.start()
    started.wait(30)
    errors, counts = [], []
    deadline = time.monotonic() + 120
    try:
        while w.is_alive() and time.monotonic() < deadline:
            try:
                recs, bad = results.read_records(p)
                counts.append(len(recs))
                errors.extend(bad)
            except Exception as e:  # noqa: BLE001 - any failure of a read is what this test counts
                errors.append(repr(e)[:200])
    finally:
        w.join(120)
    assert w.exitcode == 0
    assert errors == []
    assert len(counts) >= 3  # the reads really overlapped the appends
    assert all(c % BATCH == 0 for c in counts)  # never half an append
    assert counts == sorted(counts)
    assert not results.rejected_path(p).exists()
    assert len(results.read_records(p)[0]) == BATCH * (n + 1)


# ---- 6. torn trailing line --------------------------------------------------------------------

@pytest.mark.parametrize("tail", [json.dumps(line(run_id="torn")).encode()[:57],
                                  "{\"notes\": \"caf\u00e9".encode()[:-1]])  # ... or cut inside a UTF-8 character
def test_torn_trailing_line_is_quarantined_and_the_load_goes_on(tmp_path, tail):
    p = write(tmp_path / "h200" / "nb.jsonl", line(run_id="a"), line(run_id="b"), raw_tail=tail)
    with pytest.warns(UserWarning, match=rf"{re.escape(str(p))}:3: torn trailing line .* moved to .*nb\.jsonl\.rejected"):
        df = results.load(tmp_path, on_error="raise")
    assert list(df["run_id"]) == ["a", "b"]
    assert p.read_bytes() == b"".join(json.dumps(line(run_id=r)).encode() + b"\n" for r in "ab")
    rej = results.rejected_path(p).read_bytes()
    assert tail in rej and f"quarantined from {p}:3".encode() in rej
    import warnings
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert len(results.load(p)) == 2
    assert not [w for w in seen if "torn" in str(w.message)]  # the next load is clean
    results.append_records(p, [Record(**line(run_id="c"))])
    assert list(results.load(p)["run_id"]) == ["a", "b", "c"]


def test_broken_line_in_the_middle_still_raises(tmp_path):
    torn = json.dumps(line(run_id="torn")).encode()[:57]
    p = write(tmp_path / "nb.jsonl", line(run_id="a"), torn + b"\n", line(run_id="b"))
    before = p.read_bytes()
    with pytest.raises(MalformedRecordError, match=r"nb\.jsonl:2: not valid JSON"):
        results.load(p)
    assert p.read_bytes() == before and not results.rejected_path(p).exists()


def test_fault_matrix_setups_are_listed():
    """ci/fault_matrix.py: one entry per record-level fault, each with a setup and a command."""
    import importlib.util
    import sys
    spec = importlib.util.spec_from_file_location("fault_matrix", ROOT / "ci" / "fault_matrix.py")
    fm = importlib.util.module_from_spec(spec)
    sys.modules["fault_matrix"] = fm  # dataclasses look their module up there
    try:
        spec.loader.exec_module(fm)
    finally:
        del sys.modules["fault_matrix"]
    rows = [(f.name, str(f.command)) for f in fm.FAULTS]
    assert len(rows) == len(set(rows)) and len({f.name for f in fm.FAULTS}) >= 9
    assert all(callable(f.setup) and f.command and f.expect in ("error", "refuse", "ok", "warn") for f in fm.FAULTS)
