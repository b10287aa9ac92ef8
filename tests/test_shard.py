"""gluon_lab.shard on the CPU: the split (balance, peers kept together, determinism of --shard), the worker
pool with a GPU-free worker (tests/shard_fakes.py: every case once, each unit on one "GPU", a dying worker
loses only its in-flight case), adopt's merge of a run's shards and its refusals, the records' new fields, the
pages' device note, and the CLI's rules."""
import json

import pandas as pd
import pytest

from gluon_lab import experiments, notebook, results, shard
from gluon_lab.report import adopt

CASES_04 = experiments.notebook_cases("04-warp-specialization")


def _loads(cases, split):
    return [shard.case_seconds([cases[i] for i in idx]) if idx else 0.0 for idx in split]


@pytest.mark.parametrize("n", [1, 2, 3, 8])
def test_split_keeps_units_whole_balanced_and_in_plan_order(n):
    cases = CASES_04
    sp = shard.split(cases, n)
    assert len(sp) == n
    flat = [i for idx in sp for i in idx]
    assert sorted(flat) == list(range(len(cases)))  # every case once
    assert all(idx == sorted(idx) for idx in sp)  # plan order within a shard
    where = {}
    for k, idx in enumerate(sp):
        for i in idx:
            where.setdefault(shard.unit_of(cases[i]), set()).add(k)
    assert all(len(v) == 1 for v in where.values())  # a unit (dtype, shape: every variant and study) on one shard
    units = shard.units(cases)
    biggest = max(shard.case_seconds([cases[i] for i in u]) for u in units)
    loads = _loads(cases, sp)
    # LPT: no shard is more than the largest unit above the lightest one
    assert max(loads) - min(loads) <= biggest + 1e-9, (loads, biggest)
    if n > 1:
        assert max(loads) < 0.75 * sum(loads)  # the plan really spreads


def test_split_is_deterministic_and_shards_partition_the_plan():
    cases = CASES_04
    a, b = shard.split(cases, 4), shard.split([dict(c) for c in cases], 4)
    assert a == b
    parts = [shard.shard_cases(cases, shard.Shard(i, 4)) for i in range(4)]
    assert sum(len(p) for p in parts) == len(cases)
    assert parts[1] == [cases[i] for i in a[1]]
    with pytest.raises(ValueError, match="n >= 1"):
        shard.split(cases, 0)


def test_split_by_estimate_longest_first():
    """Units of 5, 3, 3, 1 seconds on 2 shards: LPT gives {5, 1} and {3, 3}; ties go to the lower shard."""
    cases = [{"dtype": "bf16", "shape": {"M": m}, "t": t} for m, t in ((1, 1), (2, 3), (3, 5), (4, 3))]
    cost = lambda cs: sum(c["t"] for c in cs)  # noqa: E731
    assert shard.split(cases, 2, cost) == [[0, 2], [1, 3]]
    assert shard.split(cases, 1, cost) == [[0, 1, 2, 3]]
    assert shard.split(cases, 6, cost)[4:] == [[], []]


def test_parse_rules_name_the_argument():
    assert shard.parse_shard("2/5") == shard.Shard(2, 5) and str(shard.Shard(2, 5)) == "2/5"
    for bad in ("5/5", "1", "a/b", "-1/3", "0/0", 3):
        with pytest.raises(ValueError, match="--shard"):
            shard.parse_shard(bad)
    assert shard.parse_gpus("all", [0, 1, 2, 3]) == [0, 1, 2, 3]
    assert shard.parse_gpus("2", [4, 5, 6]) == [4, 5]
    assert shard.parse_gpus("0,3,5", list(range(8))) == [0, 3, 5] and shard.parse_gpus("3,", list(range(8))) == [3]
    for bad, rule in (("9", "N must be in 1..8"), ("0", "N must be in 1..8"), ("0,9", "GPU 9 is not visible"),
                      ("1,1", "GPU 1 is named twice"), ("x", "--gpus must be")):
        with pytest.raises(ValueError, match=rule):
            shard.parse_gpus(bad, list(range(8)))
    with pytest.raises(ValueError, match="no GPU is visible"):
        shard.parse_gpus("all", [])
    assert shard.parse_run_id("20261207T120000Z-a1b2c3d4") == "20261207T120000Z-a1b2c3d4"
    with pytest.raises(ValueError, match="--run-id must look like"):
        shard.parse_run_id("today")


@pytest.fixture
def clean_env(monkeypatch):
    """configure() exports settings into os.environ: give each test a copy of the environment, restored after, and
    fresh settings."""
    import os
    saved = dict(os.environ)
    for k in shard.ENV.values():
        os.environ.pop(k, None)
    monkeypatch.setattr(shard, "SETTINGS", shard.Settings())
    yield
    os.environ.clear()
    os.environ.update(saved)


def test_settings_travel_through_the_environment(clean_env):
    env = {"GLUON_LAB_GPUS": "0,3", "GLUON_LAB_SHARD": "1/4", "GLUON_LAB_RUN_ID": "20261207T120000Z-abc"}
    s = shard.from_env(env)
    assert (s.gpus, s.shard, s.run_id) == ([0, 3], shard.Shard(1, 4), "20261207T120000Z-abc")
    with pytest.raises(ValueError, match="GLUON_LAB_SHARD"):
        shard.from_env({"GLUON_LAB_SHARD": "4/4"})
    with pytest.raises(ValueError, match="needs --run-id"):
        shard.configure(shard=shard.Shard(0, 2))
    with pytest.raises(ValueError, match="separate modes"):
        shard.configure(gpus=[0, 1], shard=shard.Shard(0, 2), run_id="20261207T120000Z-abc")
    shard.configure(gpus=[2, 5], run_id="20261207T120000Z-abc")
    import os
    assert os.environ["GLUON_LAB_GPUS"] == "2,5" and os.environ["CUDA_VISIBLE_DEVICES"] == "2"
    assert "GLUON_LAB_SHARD" not in os.environ


# ---- the pool, with workers that need no GPU ---------------------------------------------------------

FAKE = "shard_fakes:factory"


def _cases(n_units=6, per_unit=3, die=None):
    out = []
    for u in range(n_units):
        for v in range(per_unit):
            c = {"op": "matmul", "variant": f"v{v}", "dtype": "bfloat16", "shape": {"M": 64 * (u + 1), "N": 64, "K": 64}}
            if die is not None and (u, v) == die:
                c["die"] = True
            out.append(c)
    return out


def test_pool_measures_every_case_once_with_units_on_one_gpu(tmp_path):
    pool = shard.Pool("04-warp-specialization", str(tmp_path), [3, 5, 7], "20261207T120000Z-abc", factory=FAKE,
                      log=lambda m: None, poll_s=0.1)
    try:
        cases = _cases()
        out = [json.loads(x) for x in pool.sweep(cases, desc="t")]
        assert [o["case"] for o in out] == cases  # in case order, each once
        gpus = {json.dumps(o["case"]["shape"]): set() for o in out}
        for o in out:
            gpus[json.dumps(o["case"]["shape"])].add(o["gpu"])
        assert all(len(g) == 1 for g in gpus.values())  # peers of a shape on one GPU
        assert {o["gpu"] for o in out} == {"3", "5", "7"} and {o["shard"] for o in out} == {"0/1"}  # one run's shard
        again = [json.loads(x) for x in pool.sweep(cases[:4], desc="t2")]  # the workers serve the next sweep too
        assert [o["case"] for o in again] == cases[:4] and not pool.lost
    finally:
        pool.close()
    assert all(p.exitcode == 0 for p in pool.procs.values())


def test_a_dying_worker_loses_only_its_in_flight_case(tmp_path):
    logs = []
    pool = shard.Pool("04-warp-specialization", str(tmp_path), [0, 1], "20261207T120000Z-abc", factory=FAKE,
                      log=logs.append, poll_s=0.1)
    try:
        cases = _cases(die=(2, 1))  # unit 2 (M = 192): v0 measured, v1 kills its worker, v2 not measured elsewhere
        out = pool.sweep(cases, desc="t")
        lost = [i for i, x in enumerate(out) if x is None]
        assert lost == [cases.index(c) for c in cases if c["shape"]["M"] == 192 and c["variant"] != "v0"]
        assert len(pool.lost) == 2 and pool.lost[0]["case"].get("die") and pool.lost[0]["exitcode"] == 3
        done = [json.loads(x) for x in out if x is not None]
        assert len(done) == len(cases) - 2
        gpus = {}
        for o in done:
            gpus.setdefault(o["case"]["shape"]["M"], set()).add(o["gpu"])
        assert all(len(g) == 1 for g in gpus.values())  # no shape's peers on two GPUs, even after the death
        assert any("died (exit 3)" in m and "is lost" in m for m in logs), logs
        assert any("1 more cases of that shape are left unmeasured" in m for m in logs), logs
        assert pool.alive() == [g for g in (0, 1) if pool.procs[g].exitcode is None] and len(pool.alive()) == 1
        with pytest.raises(shard.WorkerDied, match="every worker has died"):
            pool.sweep(_cases(n_units=2, per_unit=2, die=(0, 0)), desc="t3")  # unit 1 has no worker left
    finally:
        pool.close()


def test_a_run_with_a_dead_worker_exits(tmp_path):
    """Many cases and a worker that dies on its first: the sweep ends, and so does the process (no queue feeder
    left writing to a dead worker's queue: cases are handed out as they are needed)."""
    import subprocess
    import sys
    code = (f"import sys; sys.path.insert(0, {str(tmp_path.parent)!r}); sys.path.insert(0, 'tests')\n"
            "from gluon_lab import shard\n"
            "cases = [{'op': 'matmul', 'variant': f'v{i % 3}', 'dtype': 'bf16', 'shape': {'M': i // 3 + 1}} "
            "for i in range(2000)]\n"
            "cases[0]['die'] = True\n"
            "p = shard.Pool('nb', '.', [0, 1], '20261207T120000Z-abc', factory='shard_fakes:factory', log=lambda m: None, "
            "poll_s=0.05)\n"
            "out = p.sweep(cases, 'x'); p.close()\n"
            "print(sum(x is not None for x in out), len(p.lost))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    measured, lost = map(int, r.stdout.split())
    assert lost == 3 and measured == 1997  # the dying case and the rest of its shape


def test_a_worker_dead_at_its_start_leaves_the_others_working(tmp_path):
    logs = []
    pool = shard.Pool("die-at-start-1", str(tmp_path), [0, 1, 2], "20261207T120000Z-abc", factory=FAKE,
                      log=logs.append, poll_s=0.05)
    try:
        assert pool.ceilings(1) is None  # the worker that died said nothing; another's (none in this fake) is used
        assert pool.procs[1].exitcode == 4 and any("died at its start" in m for m in logs)
        out = [json.loads(x) for x in pool.sweep(_cases(), desc="t")]
        assert len(out) == 18 and {o["gpu"] for o in out} == {"0", "2"} and not pool.lost
    finally:
        pool.close()
    pool = shard.Pool("with-ceilings", str(tmp_path), [0, 3], "20261207T120000Z-abc", factory=FAKE, log=logs.append,
                      poll_s=0.05)
    try:
        assert pool.ceilings(3)["copy_gbps"] == 4003.0
    finally:
        pool.close()


# ---- the records, adopt, the pages ----------------------------------------------------------------

def _record(run_id, shard_, gpu_index=0, uuid="GPU-a", op="matmul", pattern="ceiling", M=64):
    return results.Record(op=op, variant="torch", pattern=pattern, shape={"M": M, "N": 64, "K": 64} if op != "copy"
                          else {"bytes": 1 << 20}, dtype="bfloat16", config={}, ms_median=1.0, timer="cudagraph",
                          bytes=1 << 21, flops=2 * M * 64 * 64 if op != "copy" else 0, passed=True, gpu_name="NVIDIA H200",
                          run_id=run_id, timestamp="2026-12-07T12:00:00+00:00", gpu_index=gpu_index, gpu_uuid=uuid,
                          shard=shard_)


def test_record_fields_validate_and_old_lines_round_trip():
    old = {"op": "copy", "variant": "torch", "pattern": "ceiling", "shape": {"bytes": 4}, "dtype": "bfloat16",
           "config": {}, "schema": 2}
    r = results.Record.from_dict(old)
    assert (r.gpu_index, r.gpu_uuid, r.shard) == (None, None, None)
    assert "shard" not in json.loads(r.to_json()) and "gpu_index" not in json.loads(r.to_json())
    new = results.Record.from_dict({**old, "gpu_index": 3, "gpu_uuid": "GPU-x", "shard": "1/4"})
    assert json.loads(new.to_json())["shard"] == "1/4"
    with pytest.raises(ValueError, match="field 'shard' must be 'I/N'"):
        results.Record.from_dict({**old, "shard": "x"})
    with pytest.raises(ValueError, match="field 'shard' \"4/4\""):
        results.Record.from_dict({**old, "shard": "4/4"})
    with pytest.raises(ValueError, match="gpu_index' must be >= 0"):
        results.Record.from_dict({**old, "gpu_index": -1})


def test_check_shards_whole_missing_twice():
    run = "20261207T120000Z-abc"
    shard.check_shards({"a": [_record(run, "0/2")], "b": [_record(run, "1/2")]})
    shard.check_shards({"a": [_record(run, "0/1")]})
    shard.check_shards({"a": [results.Record(op="copy", variant="t", pattern="p", shape={}, dtype="bf16", run_id=run)]})
    with pytest.raises(ValueError, match=r"shard\(s\) 1/3, 2/3 missing"):
        shard.check_shards({"a": [_record(run, "0/3")]})
    with pytest.raises(ValueError, match="shard 1/2 is in 2 folders"):
        shard.check_shards({"a": [_record(run, "0/2"), _record(run, "1/2")], "b": [_record(run, "1/2")]})
    with pytest.raises(ValueError, match="different counts"):
        shard.check_shards({"a": [_record(run, "0/2")], "b": [_record(run, "1/3")]})
    other = _record(run, "1/2")
    other.git_commit = "f" * 40
    with pytest.raises(ValueError, match="different code or GPU models"):
        shard.check_shards({"a": [_record(run, "0/2")], "b": [other]})


def test_adopt_merges_the_shards_of_a_run_and_refuses_a_missing_one(tmp_path):
    run = "20261207T120000Z-abc"
    dirs = []
    for i in range(3):
        d = tmp_path / f"host{i}" / "results"
        results.append_records(d / "h200" / "04-warp-specialization.jsonl",
                               [_record(run, f"{i}/3", gpu_index=0, uuid=f"GPU-{i}", M=64 * (i + 1))])
        dirs.append(tmp_path / f"host{i}")
    dst = tmp_path / "repo"
    dst.mkdir()
    with pytest.raises(ValueError, match=r"shard\(s\) 2/3 missing"):
        adopt(dirs[:2], dst)
    assert not (dst / "h200").exists()  # nothing appended
    with pytest.raises(ValueError, match="named twice"):
        adopt([dirs[0], dirs[0], dirs[1], dirs[2]], dst)
    done = adopt(dirs, dst)
    assert sum(n for p, n in done if p.suffix == ".jsonl") == 3
    got, _ = results.read_records(dst / "h200" / "04-warp-specialization.jsonl", on_error="raise")
    assert sorted(r.shard for r in got) == ["0/3", "1/3", "2/3"] and {r.run_id for r in got} == {run}
    with pytest.raises(ValueError, match="already holds run"):
        adopt(dirs, dst)


def _frame(recs):
    return results._frame([("x", i + 1, None, r, {}) for i, r in enumerate(recs)], [])


def test_device_note_flags_a_gpu_whose_ceilings_disagree():
    run = "20261207T120000Z-abc"
    recs = []
    for g, (bw, mm) in enumerate(((4270.0, 700.0), (4250.0, 695.0), (4280.0, 560.0))):  # GPU 2's matmul: -20%
        u = f"GPU-{g}"
        recs += [_record(run, f"{g}/3", g, u, op="copy"), _record(run, f"{g}/3", g, u, op="matmul", M=8192)]
        recs[-2].gbps, recs[-1].tflops = bw, mm
        recs.append(_record(run, f"{g}/3", g, u, pattern="gemm", M=128 * (g + 1)))
    df = _frame(recs)
    bad = notebook.device_disagreement(df)
    assert list(bad["gpu_index"]) == [2] and list(bad["ceiling"]) == ["matmul TFLOP/s"], bad
    assert bad["cells measured there"].iloc[0] == 1
    note = notebook.device_note(df)
    assert "Flagged" in note and "run 20261207T120000Z-abc GPU 2" in note and "-19" in note
    df2 = df.copy()  # GPU 2's matmul back within the noise floor
    df2.loc[(df2["gpu_uuid"] == "GPU-2") & (df2["op"] == "matmul") & (df2["pattern"] == "ceiling"), "tflops"] = 690.0
    assert notebook.device_disagreement(df2).empty and "agree within the noise floor" in notebook.device_note(df2)
    one = df[df["gpu_uuid"] == "GPU-0"]
    assert notebook.device_note(one) is None and notebook.device_disagreement(pd.DataFrame()).empty


def test_captures_run_in_shard_zero_only(tmp_path):
    from gluon_lab.plan_common import save_timeline

    class S:
        info = {"gpu_slug": "h200", "gpu_name": "NVIDIA H200"}
        prov = {"run_id": "20261207T120000Z-abc"}
        primary = False

    save_timeline(S(), str(tmp_path), "04-warp-specialization", lambda: {"x": 1})
    assert not (tmp_path / "h200").exists()
    S.primary = True
    save_timeline(S(), str(tmp_path), "04-warp-specialization", lambda: {"x": 1})
    assert json.loads((tmp_path / "h200" / "04-warp-specialization.timeline.json").read_text())["x"] == 1


def test_cli_rules(capsys):
    from gluon_lab.__main__ import main
    with pytest.raises(SystemExit):
        main(["bench", "06-convolution", "--shard", "1/2"])
    assert "needs --run-id" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["bench", "06-convolution", "--shard", "2/2", "--run-id", "20261207T120000Z-abc"])
    assert "--shard '2/2'" in capsys.readouterr().err
    assert main(["run-id"]) == 0 and shard.RUN_ID.fullmatch(capsys.readouterr().out.strip())


# ---- bench.Session's part in a run (device calls faked: the wiring, not the GPU) -------------------------

@pytest.fixture
def fake_gpu(monkeypatch):
    from gluon_lab import bench, device
    monkeypatch.setattr(device, "cuda_available", lambda: True)
    monkeypatch.setattr(device, "gpu_info", lambda device_index=0: {
        "gpu_name": "NVIDIA H200", "gpu_slug": "h200", "sm_count": 132, "driver": "580", "cuda": "13.0",
        "host_index": device.host_index(device_index), "uuid": "GPU-fake"})
    made = []
    monkeypatch.setattr(bench, "measure_ceilings", lambda prov, **kw: made.append(prov) or bench.Ceilings(
        copy_gbps=4000.0, matmul_tflops=700.0, copy_bytes=1 << 31, records=[]))
    import os
    saved = dict(os.environ)
    for k in shard.ENV.values():
        os.environ.pop(k, None)
    os.environ["CUDA_VISIBLE_DEVICES"] = "6"
    monkeypatch.setattr(shard, "SETTINGS", shard.Settings())
    yield made
    os.environ.clear()
    os.environ.update(saved)


def test_session_default_shard_and_pool_modes(fake_gpu, tmp_path, monkeypatch):
    from gluon_lab import bench
    s = bench.Session("04-warp-specialization", str(tmp_path))
    assert s.prov["shard"] == "0/1" and s.prov["gpu_index"] == 6 and s.prov["gpu_uuid"] == "GPU-fake"
    assert s.primary and s.pool is None and len(fake_gpu) == 1  # its own ceilings

    run = "20261207T120000Z-abc"
    shard.configure(shard=shard.Shard(1, 3), run_id=run)
    s = bench.Session("04-warp-specialization", str(tmp_path))
    assert s.prov["run_id"] == run and s.prov["shard"] == "1/3" and not s.primary
    seen = []
    monkeypatch.setattr(s, "measure", lambda **c: seen.append(c) or results.Record(
        op=c["op"], variant=c["variant"], pattern="x", shape=c["shape"], dtype=c["dtype"], passed=True, **s.prov))
    cases = [c for c in CASES_04 if c.get("op") != "copy"][:60]
    s.sweep(cases, desc="t")
    assert seen == shard.shard_cases(cases, shard.Shard(1, 3)) and 0 < len(seen) < len(cases)
    seen.clear()
    with s.unsharded():  # a study shard 0 takes whole (00's held-out draw)
        s.sweep(cases, desc="t")
    assert seen == cases
    from gluon_lab import refresh
    with pytest.raises(ValueError, match="not a shard of a job array"):
        refresh.run(["06-convolution"], str(tmp_path))

    class FakePool:
        def __init__(self, notebook, results_dir, gpus, run_id, ceiling_kw):
            self.gpus, self.run_id = gpus, run_id

        def ceilings(self, gpu):
            return {"copy_gbps": 4100.0, "matmul_tflops": 690.0, "copy_bytes": 1 << 31}

        def sweep(self, cases, desc):
            return [results.Record(op=c["op"], variant=c["variant"], pattern="x", shape=c["shape"], dtype=c["dtype"],
                                   run_id=self.run_id).to_json() for c in cases] + [None]

        def close(self):
            self.closed = True

    monkeypatch.setattr(shard, "Pool", FakePool)
    shard.configure(gpus=[2, 5], run_id=run)
    n = len(fake_gpu)
    s = bench.Session("04-warp-specialization", str(tmp_path))
    assert isinstance(s.pool, FakePool) and s.pool.gpus == [2, 5] and s.primary and len(fake_gpu) == n
    assert s.ceilings.matmul_tflops == 690.0 and s.prov["shard"] == "0/1"  # the workers measure the ceilings
    got = s.sweep(cases[:5], desc="t")
    assert [r.variant for r in got] == [c["variant"] for c in cases[:5]]  # a lost case (None) is left out
    s.close()
    assert s.pool.closed


def test_refresh_on_a_pool_sweeps_the_cells_that_fit_the_budget_at_once(fake_gpu, tmp_path, monkeypatch):
    """refresh --gpus: the due cells whose estimate over the GPUs fits the budget, in order, in ONE sweep (the pool
    splits it); the rest is left for the next refresh (exit 1, said in the log)."""
    from gluon_lab import bench, refresh
    swept, logs = [], []

    class FakeSession:
        def __init__(self, nb, results_dir):
            self.pool = type("P", (), {"gpus": [0, 1, 2, 3], "lost": []})()

        def save(self):
            return "store"

        def sweep(self, cases, desc):
            swept.append(list(cases))
            return [results.Record(op=c["op"], variant=c["variant"], pattern="x", shape=c["shape"], dtype=c["dtype"],
                                   passed=True) for c in cases]

        def close(self):
            pass

    cells = [[{"op": "matmul", "variant": f"v{v}", "dtype": "bfloat16", "shape": {"M": 64 * (k + 1), "N": 64, "K": 64}}
              for v in range(10)] for k in range(5)]
    per = refresh.estimate_s([cells[0]])  # 10 cases, 10 variants: 26 s each
    counts = {"cases": 50, "cells": 5, "missing": 50, "stale": 0, "split": 0, "cells_due": 5, "cases_due": 50}
    monkeypatch.setattr(refresh, "plan", lambda nbs, dirs, gpu="h200", log=print: {"06-convolution": (cells, counts, [])})
    monkeypatch.setattr(bench, "Session", FakeSession)
    rc = refresh.run(["06-convolution"], str(tmp_path), budget_s=3 * per / 4 + 1, log=logs.append)
    assert rc == 1 and len(swept) == 1 and swept[0] == [c for cs in cells[:3] for c in cs]
    assert any("3 of 5 cells fit the budget on 4 GPUs" in m for m in logs), logs
    swept.clear()
    assert refresh.run(["06-convolution"], str(tmp_path), log=logs.append) == 0 and len(swept) == 1
    assert len(swept[0]) == 50


def test_host_gpus_reads_cuda_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,6")
    assert shard.host_gpus() == [4, 6]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert shard.host_gpus() == []
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-8f2a,GPU-11aa")
    with pytest.raises(ValueError, match="names devices by UUID"):
        shard.host_gpus()
