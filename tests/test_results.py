import json
import multiprocessing as mp
import textwrap

import pytest

from gluon_lab import results
from gluon_lab.results import MalformedRecordError, Record


def rec(**kw):
    d = dict(op="rms_norm", variant="triton", pattern="baseline", shape={"M": 3, "N": 1000}, dtype="bfloat16",
             ms_median=0.01, ms_min=0.009, ms_max=0.02, n_reps=10, timer="cudagraph", gbps=1000.0, passed=True,
             kernel_source_hash="abc", run_id="r1", timestamp="2026-11-29T00:00:00+00:00", config={"num_warps": 8})
    d.update(kw)
    return Record(**d)


def test_round_trip(tmp_path):
    p = results.store_path(tmp_path, "h200", "00-ceilings")
    rs = [rec(), rec(shape={"M": 4096, "N": 5120}, timer="do_bench-l2flush", passed=False, ms_median=1.5)]
    assert results.append_records(p, rs) == 2
    got, bad = results.read_records(p)
    assert bad == [] and got == rs
    df = results.load(tmp_path)
    assert list(df["N"]) == [1000, 5120] and list(df["M"]) == [3, 4096]
    assert df["config_key"].iloc[0] == json.dumps({"num_warps": 8})
    assert str(df["M"].dtype) == "Int64"


def test_nan_is_refused_on_write(tmp_path):
    with pytest.raises(ValueError):
        results.append_records(tmp_path / "x.jsonl", [rec(ms_median=float("nan"))])


@pytest.mark.parametrize("line,why", [
    ("{not json", "not valid JSON: Expecting"),
    ('["a list"]', "must be a JSON object"),
    ('{"op": "rms_norm"}', "missing required"),
    ('{"op":"a","variant":"b","pattern":"c","shape":{"M":1},"dtype":"bfloat16","timer":"wallclock"}',
     "field 'timer' must be one of"),
])
def test_malformed_lines_name_file_and_line(tmp_path, line, why):
    p = tmp_path / "h200" / "nb.jsonl"
    results.append_records(p, [rec()])
    with open(p, "a") as f:
        f.write(line + "\n")
    results.append_records(p, [rec(run_id="r2")])
    with pytest.raises(MalformedRecordError, match=rf"nb\.jsonl:2: .*{why}"):
        results.read_records(p)
    with pytest.warns(UserWarning, match=r"nb\.jsonl:2"):
        df = results.load(p, on_error="warn")
    assert len(df) == 2 and len(df.attrs["malformed"]) == 1


def test_append_after_torn_line_quarantines_it(tmp_path):
    p = tmp_path / "nb.jsonl"
    p.write_text(rec().to_json()[:40])  # a writer died mid-line
    with pytest.warns(UserWarning, match=r"nb\.jsonl:1: torn trailing line"):
        results.append_records(p, [rec(run_id="ok")])
    lines = p.read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["run_id"] == "ok"
    assert rec().to_json()[:40] in results.rejected_path(p).read_text()


def test_append_after_unterminated_valid_line_starts_a_new_line(tmp_path):
    p = tmp_path / "nb.jsonl"
    p.write_text(rec(run_id="first").to_json())  # a whole record, only the newline missing: kept
    results.append_records(p, [rec(run_id="ok")])
    lines = p.read_text().splitlines()
    assert [json.loads(x)["run_id"] for x in lines] == ["first", "ok"]
    assert not results.rejected_path(p).exists()


def _writer(args):
    path, k = args
    for i in range(40):
        results.append_records(path, [rec(run_id=f"w{k}", n_reps=i, notes="x" * 3000)] * 3)
    return k


def test_concurrent_appends_do_not_interleave(tmp_path):
    p = tmp_path / "h200" / "nb.jsonl"
    with mp.get_context("fork").Pool(4) as pool:
        pool.map(_writer, [(str(p), k) for k in range(4)])
    got, bad = results.read_records(p)
    assert bad == [] and len(got) == 4 * 40 * 3
    assert sorted({r.run_id for r in got}) == ["w0", "w1", "w2", "w3"]


def _load_module(tmp_path, name, src):
    import importlib.util
    tmp_path.mkdir(parents=True, exist_ok=True)
    f = tmp_path / f"{name}.py"
    f.write_text(textwrap.dedent(src))
    spec = importlib.util.spec_from_file_location(name, f)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


KERNELS = """
import triton
import triton.language as tl

@triton.jit
def helper(x):
    return x * {k}

@triton.jit
def kern(x_ptr, N, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < N)
    tl.store(x_ptr + offs, helper(x), mask=offs < N)
"""


def test_code_hash_follows_called_jit_functions(tmp_path):
    from gluon_lab.staleness import code_hash
    a = _load_module(tmp_path, "ka", KERNELS.format(k=2))
    b = _load_module(tmp_path, "kb", KERNELS.format(k=3))  # only the *helper* differs
    c = _load_module(tmp_path / "elsewhere", "ka", KERNELS.format(k=2))  # same module, other path
    ha, hb, hc = (code_hash(m.kern) for m in (a, b, c))
    assert ha != hb  # a change in a called @jit helper makes the kernel's records stale
    assert ha == hc  # the hash depends on the code, not on where the file lives
    assert len(ha) == 16


def test_staleness(tmp_path):
    import pandas as pd
    p = tmp_path / "h200" / "nb.jsonl"
    results.append_records(p, [rec(kernel_source_hash="cur"), rec(variant="torch", kernel_source_hash="old"),
                               rec(variant="gone", kernel_source_hash="x"),
                               rec(op="copy", variant="torch", pattern="ceiling", kernel_source_hash=None)])
    current = {("rms_norm", "triton"): "cur", ("rms_norm", "torch"): "new"}

    def h(op, v):
        return current[(op, v)]

    df = results.mark_stale(results.load(p), h)
    assert list(df["stale"]) == [False, True, True, False]
    assert df["stale"].dtype == bool
    empty = results.mark_stale(results.load([]), h)
    assert len(empty) == 0 and isinstance(empty, pd.DataFrame)


def test_registered_variants_hash_their_kernels():
    from gluon_lab import registry as ops
    h1 = ops.current_hash("rms_norm", "triton")
    assert h1 == ops.get_variant("rms_norm", "triton").code_hash()
    assert h1 != ops.current_hash("rms_norm", "torch")
    with pytest.raises(KeyError):
        ops.current_hash("rms_norm", "no-such-variant")


def test_latest_keeps_newest_per_case(tmp_path):
    p = tmp_path / "nb.jsonl"
    t1, t2 = "2026-01-01T00:00:00+00:00", "2026-02-01T00:00:00+00:00"
    results.append_records(p, [
        rec(ms_median=2.0, timestamp=t1, run_id="a"),
        # same case, newer run, another timer and another resolved config: replaces the old one
        rec(ms_median=1.0, timestamp=t2, run_id="b", timer="do_bench-l2flush", config={"num_warps": 16}),
        rec(ms_median=3.0, shape={"M": 5, "N": 1000}),
        # the TMA-store path is another case of the same variant
        rec(ms_median=4.0, timestamp=t1, config={"num_warps": 8, "tma_store": True}),
        # sweep points are cases of their own
        rec(ms_median=5.0, config={"num_warps": 4, "study": "sweep"}),
        rec(ms_median=6.0, config={"num_warps": 8, "study": "sweep"}),
        # equal timestamps: the later run_id wins, deterministically
        rec(ms_median=7.0, shape={"M": 9, "N": 1000}, timestamp=t1, run_id="r2"),
        rec(ms_median=8.0, shape={"M": 9, "N": 1000}, timestamp=t1, run_id="r1"),
    ])
    df = results.latest(results.load(p))
    assert sorted(df["ms_median"]) == [1.0, 3.0, 4.0, 5.0, 6.0, 7.0]


def test_provenance_without_gpu(monkeypatch):
    monkeypatch.setenv("GLUON_LAB_GIT_COMMIT", "deadbeef")
    prov = results.provenance()
    assert prov["git_commit"] == "deadbeef" and prov["triton"] == "3.6.0" and prov["run_id"]
    assert set(prov) <= {f for f in Record.__dataclass_fields__}
