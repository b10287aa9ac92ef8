"""Superseded runs archived beside the live store (results/<gpu>/<notebook>.history.jsonl.gz):
which runs stay live (archive.live_runs), the move and its round trip (archive_store, `python -m
gluon_lab archive [--check]`, adopt), what still reads the history (compare, a page's run= /
compare_to=, the provenance table), a bad history line named by file:line, and the lock."""
import fcntl
import gzip
import json
import os
import threading
from pathlib import Path

import pytest

from gluon_lab import archive, compare, notebook, results
from gluon_lab.__main__ import main
from gluon_lab.results import MalformedRecordError, Record

ROOT = Path(__file__).resolve().parent.parent
NB = "96-history"
GBPS = 3000.0


def rec(run, day, variant="triton", N=1024, timer="cudagraph", passed=True, config=None, op="rms_norm", M=4096):
    nbytes = 2 * M * N * 2 + N * 2
    ms = nbytes / (GBPS * 1e9) * 1e3
    return Record(op=op, variant=variant, pattern="baseline", shape={"M": M, "N": N}, dtype="bfloat16",
                  config=config or {}, ms_median=ms, ms_min=ms, ms_max=ms, n_reps=20, timer=timer, bytes=nbytes,
                  flops=4 * M * N, passed=passed, gpu_name="NVIDIA H200", kernel_source_hash="h",
                  run_id=run, timestamp=f"2026-11-{day:02d}T00:00:00+00:00", notes="synthetic history record")


def full(run, day, Ns=(1024, 2048), variants=("torch", "triton"), **kw):
    return [rec(run, day, variant=v, N=n, **kw) for v in variants for n in Ns]


def store(tmp_path, *runs):
    path = results.store_path(tmp_path / "results", "h200", NB)
    for recs in runs:
        results.append_records(path, recs)
    return path


def four_runs():
    """r0: the only layer_norm record; r1, r2, r3: the same four rms_norm cases, r3 the newest."""
    return [rec("r0", 1, N=8192, op="layer_norm")], full("r1", 2), full("r2", 3), full("r3", 4)


def frame(path):
    return results.load(path, history=True)


def lines(path) -> set:
    return {json.dumps(json.loads(x), sort_keys=True) for x in path.read_text().splitlines() if x.strip()}


def history_lines(path) -> list:
    return [x for x in gzip.decompress(results.history_path(path).read_bytes()).decode().splitlines() if x]


# ---- which runs are live -------------------------------------------------------------------------

def test_superseded_runs_are_the_ones_no_page_shows(tmp_path):
    # r0: newest of its case; r1: re-measured whole by r2 and r3, superseded; r2: the run
    # `previous` picks for the newest run r3 (a page's default "Compare runs" pair)
    p = store(tmp_path, *four_runs())
    assert archive.live_runs(frame(p)) == {"r0", "r2", "r3"}


def test_a_run_holding_the_newest_record_of_one_case_stays(tmp_path):
    p = store(tmp_path, full("r1", 1, Ns=(1024, 2048, 4096)), full("r2", 2), full("r3", 3))
    assert archive.live_runs(frame(p)) == {"r1", "r2", "r3"}  # r1 alone measured N=4096


def test_the_newest_passing_record_and_the_newest_of_each_timer_stay(tmp_path):
    r3 = full("r3", 3)
    r3[2].passed = False  # triton N=1024 failed in r3: r2 holds the newest record of it that passed
    assert (r3[2].variant, r3[2].shape["N"]) == ("triton", 1024)
    p = store(tmp_path, full("r1", 1), full("r2", 2), r3, full("r4", 4, variants=("torch",)))
    assert archive.live_runs(frame(p)) == {"r2", "r3", "r4"}
    p2 = store(tmp_path / "t", full("r1", 1), full("r2", 2, timer="do_bench-l2flush"),
               full("r3", 3, timer="do_bench-l2flush"))
    assert "r1" in archive.live_runs(frame(p2))  # the newest graph-timed records: another timer, another case


def test_a_run_a_section_can_still_pick_stays(tmp_path):
    # r2 and r4 re-measured triton, r3 torch: every case of r1 is newer elsewhere, but r1 is the
    # newest run holding both variants, the run newest_run(require=("torch", "triton")) shows
    p = store(tmp_path, full("r1", 1), full("r2", 2, variants=("triton",)), full("r3", 3, variants=("torch",)),
              full("r4", 4, variants=("triton",)))
    d = notebook.load(tmp_path / "results", "h200", NB, newest_only=False)
    assert set(notebook.newest_run(d, require=("torch", "triton"))["run_id"]) == {"r1"}
    assert "r1" in archive.live_runs(frame(p))


def test_artifact_runs_and_records_without_a_run_stay(tmp_path):
    p = store(tmp_path, full("r1", 1), full("r2", 2), full("r3", 3), full("r4", 4))
    (p.parent / f"{NB}.timeline.json").write_text(json.dumps({"run_id": "r1", "timelines": []}))
    assert archive.artifact_runs(p) == {"r1"}
    assert archive.live_runs(frame(p), pinned=archive.artifact_runs(p)) == {"r1", "r3", "r4"}
    results.append_records(p, [rec(None, 1, N=512)])
    archive.archive_store(p)
    assert {r.run_id for r in results.read_records(p)[0]} == {None, "r1", "r3", "r4"}


# ---- the move and its round trip -------------------------------------------------------------------

def test_archive_round_trip_is_idempotent_and_deterministic(tmp_path):
    p = store(tmp_path, *four_runs())
    before = lines(p)
    plan = archive.archive_store(p)
    assert plan.moved == {"r1": 4} and plan.restored == {} and (plan.live_runs, plan.history_runs) == (3, 1)
    h = results.history_path(p)
    assert h.name == f"{NB}.history.jsonl.gz" and h.read_bytes()[4:8] == b"\0\0\0\0"  # gzip mtime 0
    assert {json.loads(x)["run_id"] for x in history_lines(p)} == {"r1"}
    assert {r.run_id for r in results.read_records(p)[0]} == {"r0", "r2", "r3"}  # the live store
    assert set(results.load(p)["run_id"]) == {"r0", "r2", "r3"}  # the pages' load: live only
    df = results.load(p, history=True)
    assert len(df) == len(before) and set(df["run_id"]) == {"r0", "r1", "r2", "r3"}
    assert set(df.loc[df.run_id == "r1", "source"]) == {str(h)} and list(df.loc[df.run_id == "r1", "line"]) == [1, 2, 3, 4]
    got = {json.dumps(json.loads(r.to_json()), sort_keys=True) for r in results.read_records(p, history=True)[0]}
    assert got == before  # nothing lost, nothing added, every field as it was
    assert set(results.load(tmp_path / "results", history=True)["run_id"]) == {"r0", "r1", "r2", "r3"}  # a folder
    data, hist, ino = p.read_bytes(), h.read_bytes(), p.stat().st_ino
    again = archive.archive_store(p)
    assert not again.changes and p.read_bytes() == data and h.read_bytes() == hist and p.stat().st_ino == ino
    # the same records archived elsewhere give the same bytes
    q = store(tmp_path / "other", *four_runs())
    archive.archive_store(q)
    assert results.history_path(q).read_bytes() == hist and q.read_bytes() == data


def test_a_run_the_rule_keeps_again_moves_back(tmp_path):
    p = store(tmp_path, full("r1", 1), full("r2", 2), full("r3", 3))
    archive.archive_store(p)
    (p.parent / f"{NB}.timeline.json").write_text(json.dumps({"run_id": "r1"}))  # a timeline of r1 now
    assert archive.archive_store(p, check=True).restored == {"r1": 4}
    plan = archive.archive_store(p)
    assert plan.restored == {"r1": 4} and not results.history_path(p).exists()
    assert {r.run_id for r in results.read_records(p)[0]} == {"r1", "r2", "r3"}


def test_an_interrupted_archive_is_read_once_and_finished(tmp_path):
    p = store(tmp_path, full("r1", 1), full("r2", 2), full("r3", 3))
    r1 = [x for x in p.read_bytes().split(b"\n") if b'"r1"' in x]
    results.history_path(p).write_bytes(gzip.compress(b"".join(x + b"\n" for x in r1), mtime=0))  # died here
    with pytest.warns(UserWarning, match=r"4 line\(s\) are also in 96-history\.jsonl \(an archive was interrupted\)"):
        df = results.load(p, history=True)
    assert len(df) == 12 and set(df.loc[df.run_id == "r1", "source"]) == {str(p)}
    plan = archive.archive_store(p)
    assert plan.dropped == 4 and plan.moved == {"r1": 4}
    assert len(history_lines(p)) == 4 and len(results.load(p, history=True)) == 12


# ---- who reads the history -------------------------------------------------------------------------

def test_compare_and_pages_still_find_an_archived_run(tmp_path, capsys):
    from gluon_lab.analysis import common as cm
    p = store(tmp_path, full("20261101T000000Z-aaaaaaaa", 1), full("20261102T000000Z-bbbbbbbb", 2),
              full("20261103T000000Z-cccccccc", 3))
    res = tmp_path / "results"
    assert archive.archive_store(p).moved == {"20261101T000000Z-aaaaaaaa": 4}
    assert main(["compare", NB, "--list", "--results-dir", str(res)]) == 0
    assert "20261101T000000Z-aaaaaaaa" in capsys.readouterr().out
    assert main(["compare", NB, "20261101", "newest", "--results-dir", str(res)]) == 0
    assert "A = 20261101T000000Z-aaaaaaaa" in capsys.readouterr().out
    df = notebook.load(res, "h200", NB, newest_only=False, history=True)
    assert compare.compare(df, "previous", "20261102").run_a == "20261101T000000Z-aaaaaaaa"
    live = notebook.load(res, "h200", NB, newest_only=False)
    assert compare.default_pair(live) == compare.default_pair(df)  # what a page compares by default is live
    ctx = cm.setup(NB, mode="replay", results_dir=res, run="20261101")  # run=: an archived run
    assert set(cm.load(ctx)["run_id"]) == {"20261101T000000Z-aaaaaaaa"}
    ctx = cm.setup(NB, mode="replay", results_dir=res)
    assert "`20261101T000000Z-aaaaaaaa` vs **run B** `20261103T000000Z-cccccccc`" in cm.compare_runs(ctx, "20261101")[0]
    prov = cm.overview(ctx, cm.load(ctx))[0]  # the provenance table lists the archived run too
    assert list(prov["run_id"]) == ["20261101T000000Z-aaaaaaaa", "20261102T000000Z-bbbbbbbb", "20261103T000000Z-cccccccc"]
    assert list(prov["archived"]) == [True, False, False] and list(prov["records"]) == [4, 4, 4]


def test_adopt_archives_and_refuses_an_archived_run(tmp_path, capsys):
    p = store(tmp_path, full("r1", 1), full("r2", 2))
    run = tmp_path / "runs" / "x-quick"
    results.append_records(run / "results" / "h200" / f"{NB}.jsonl", full("r3", 3))
    assert main(["adopt", str(run), "--results-dir", str(tmp_path / "results")]) == 0
    assert "moved 1 superseded run(s), 4 records, to 96-history.history.jsonl.gz (r1)" in capsys.readouterr().out
    again = tmp_path / "runs" / "y-quick"
    results.append_records(again / "results" / "h200" / f"{NB}.jsonl", full("r1", 5))
    assert main(["adopt", str(again), "--results-dir", str(tmp_path / "results")]) == 2
    assert "already holds run(s) r1" in capsys.readouterr().err  # the archived run counts
    assert len(results.load(p, history=True)) == 12


def test_archive_check_cli(tmp_path, capsys):
    store(tmp_path, full("r1", 1), full("r2", 2), full("r3", 3))
    res = str(tmp_path / "results")
    assert main(["archive", "--check", "--results-dir", res]) == 1
    out = capsys.readouterr().out
    assert "would move 1 superseded run(s), 4 records, to 96-history.history.jsonl.gz (r1)" in out
    assert "run `python -m gluon_lab archive`" in out
    assert not results.history_path(results.store_path(res, "h200", NB)).exists()  # --check writes nothing
    assert main(["archive", "--results-dir", res]) == 0
    assert "moved 1 superseded run(s)" in capsys.readouterr().out
    assert main(["archive", "--check", "--results-dir", res]) == 0
    assert "nothing to move" in capsys.readouterr().out


# ---- a bad history line ------------------------------------------------------------------------------

def _archived(tmp_path):
    p = store(tmp_path, full("r1", 1), full("r2", 2), full("r3", 3))
    archive.archive_store(p)
    return p, results.history_path(p)


def test_a_corrupted_history_line_is_named_by_file_and_line(tmp_path):
    p, h = _archived(tmp_path)
    hl = history_lines(p)
    hl[1] = hl[1][:50]  # line 2 cut
    h.write_bytes(gzip.compress(("\n".join(hl) + "\n").encode(), mtime=0))
    assert len(results.load(p)) == 8  # the pages' load does not read the history
    with pytest.raises(MalformedRecordError, match=r"96-history\.history\.jsonl\.gz:2: not valid JSON"):
        results.load(p, history=True)
    with pytest.warns(UserWarning, match=r"96-history\.history\.jsonl\.gz:2: not valid JSON"):
        df = results.load(p, history=True, on_error="warn")
    assert len(df) == 11 and len(df.attrs["malformed"]) == 1
    with pytest.raises(MalformedRecordError, match=r"history\.jsonl\.gz:2"):
        archive.archive_store(p)  # nothing moves out of (or into) a store with a bad line
    hl[1] = json.dumps({**json.loads(hl[0]), "passed": "yes"})
    h.write_bytes(gzip.compress(("\n".join(hl) + "\n").encode(), mtime=0))
    with pytest.raises(MalformedRecordError, match=r"history\.jsonl\.gz:2: field 'passed' must be true/false"):
        results.read_records(h)  # a history file named explicitly


def test_a_cut_gzip_stream_is_named_by_file_and_line(tmp_path):
    p, h = _archived(tmp_path)
    raw = gzip.compress(b"".join(x.encode() + b"\n" for x in history_lines(p)), compresslevel=0, mtime=0)
    h.write_bytes(raw[: len(raw) // 2])  # cut mid-way: some lines decode, then the stream ends
    with pytest.raises(MalformedRecordError, match=r"history\.jsonl\.gz:\d+: the gzip stream is cut short"):
        results.load(p, history=True)
    with pytest.warns(UserWarning, match="cut short"):
        df = results.load(p, history=True, on_error="warn")
    assert 8 <= len(df) < 12
    h.write_bytes(b"not gzip at all\n")
    with pytest.raises(MalformedRecordError, match=r"history\.jsonl\.gz:1: not a valid gzip stream"):
        results.load(p, history=True)


# ---- the lock covers the history -----------------------------------------------------------------------

def test_readers_and_writers_waiting_for_the_lock_follow_the_archive(tmp_path):
    p = store(tmp_path, full("r1", 1), full("r2", 2), full("r3", 3))
    fd = os.open(p, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)  # archive_store holds this while it replaces both files
    got = {}

    def reader():
        got["read"] = sorted(r.run_id for r in results.read_records(p, history=True)[0])

    def writer():
        results.append_records(p, [rec("r9", 9, N=64)])

    threads = [threading.Thread(target=reader), threading.Thread(target=writer)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(0.5)
        waited = all(t.is_alive() for t in threads)
        r1 = [x for x in p.read_bytes().split(b"\n") if b'"r1"' in x]
        rest = [x for x in p.read_bytes().split(b"\n") if x and b'"r1"' not in x]
        archive._replace_file(results.history_path(p), archive._gzip_lines(r1))  # what archive_store does
        archive._replace_file(p, b"".join(x + b"\n" for x in rest))
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
    for t in threads:
        t.join(30)
    assert waited, "the reader and the writer did not wait for the lock"
    assert got["read"] in (["r1"] * 4 + ["r2"] * 4 + ["r3"] * 4, ["r1"] * 4 + ["r2"] * 4 + ["r3"] * 4 + ["r9"])
    live = [r.run_id for r in results.read_records(p)[0]]
    assert live.count("r9") == 1 and "r1" not in live  # the append went to the new store, not the replaced one


# ---- the committed records -------------------------------------------------------------------------------

def _committed_histories():
    return sorted((ROOT / "results").rglob("*" + results.HISTORY_SUFFIX))


@pytest.mark.parametrize("hist", _committed_histories(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_committed_history_record_loads(hist):
    n_lines = sum(1 for ln in gzip.decompress(hist.read_bytes()).split(b"\n") if ln.strip())
    df = results.load(hist, on_error="raise")
    assert len(df) == n_lines and df.attrs["malformed"] == []
    live = results.load(results.live_path(hist))
    assert not set(df["run_id"]) & set(live["run_id"])  # a run is live or history, never both


@pytest.mark.slow
def test_committed_results_are_archived():
    """CI: `python -m gluon_lab archive --check` - no superseded run left in a live store of results/."""
    pending = [p.describe(check=True) for p in archive.archive(ROOT / "results", check=True) if p.changes]
    assert not pending, "\n".join(pending)
