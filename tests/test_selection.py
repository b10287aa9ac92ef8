"""variant="auto": the committed selection table is built from current records only, and the call
path reads no file. CPU-only."""
import json
import math
from pathlib import Path

import pytest
import torch

from gluon_lab import registry, results, selection, specs

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def fake_variant(monkeypatch):
    """A gluon-lab-style variant of rms_norm (no kernel: only its records matter here)."""
    def fn(x, weight, eps=1e-6, out=None):
        return specs.get("rms_norm").eager(x, weight, eps)
    registry._ensure_loaded()  # load the real variants first: the copy must hold them
    reg = {op: dict(vs) for op, vs in registry._REGISTRY.items()}
    monkeypatch.setattr(registry, "_REGISTRY", reg)
    registry.register("rms_norm", "gluon-test", pattern="tma-caching", needs_cuda=False)(fn)
    return registry.get_variant("rms_norm", "gluon-test")


def _rec(variant, M, N, ms, h, **kw):
    return results.Record(op="rms_norm", variant=variant, pattern="baseline" if variant == "torch" else "tma-caching",
                          shape={"M": M, "N": N}, dtype="bfloat16", ms_median=ms, passed=kw.pop("passed", True),
                          gpu_name="NVIDIA H200",
                          kernel_source_hash=h, run_id=kw.pop("run_id", "r1"),
                          timestamp=kw.pop("timestamp", "2026-12-01T00:00:00+00:00"), **kw)


def test_build_uses_current_passing_heuristic_records(tmp_path, fake_variant):
    th = registry.get_variant("rms_norm", "torch").code_hash()
    gh = fake_variant.code_hash()
    p = tmp_path / "h200" / "nb.jsonl"
    results.append_records(p, [
        _rec("torch", 4096, 4096, 1.0, th), _rec("gluon-test", 4096, 4096, 0.5, gh),   # a cell: ours wins
        _rec("torch", 4096, 5000, 1.0, th), _rec("gluon-test", 4096, 5000, 0.4, gh),
        _rec("torch", 64, 1024, 1.0, th), _rec("gluon-test", 64, 1024, 1.5, gh),       # torch wins here
        _rec("torch", 16, 512, 1.0, th), _rec("gluon-test", 16, 512, 0.1, "old-hash"),  # stale: no vote
        _rec("gluon-test", 16, 512, 0.05, gh, config={"study": "sweep"}),              # a study: no vote
        _rec("gluon-test", 16, 512, 0.05, gh, passed=False),                           # failed: no vote
        _rec("triton", 16, 512, 0.01, registry.get_variant("rms_norm", "triton").code_hash()),  # a baseline
        # a study's heuristic-marked case votes beside the study's plain torch case of the same run ...
        _rec("torch", 1024, 16384, 1.0, th, config={"study": "s"}, run_id="r2"),
        _rec("gluon-test", 1024, 16384, 0.5, gh, config={"study": "s", "heuristic": True}, run_id="r2"),
        # ... a cell never pairs records of two runs (no torch in r3 at this shape: no cell) ...
        _rec("gluon-test", 1024, 30000, 0.1, gh, config={"study": "s", "heuristic": True}, run_id="r3"),
        _rec("torch", 1024, 30000, 1.0, th, run_id="r2"),
        # ... and the held-out check never votes
        _rec("torch", 512, 3000, 1.0, th, config={"study": "auto-check", "table_seed": 5}, run_id="r4"),
        _rec("gluon-test", 512, 3000, 0.1, gh, config={"study": "auto-check", "table_seed": 5}, run_id="r4"),
    ])
    t = selection.build(tmp_path)
    e = t["entries"]["h200"]["rms_norm"]
    cells = {(c["run"], c["shape"]["M"], c["shape"]["N"]): c["ms"] for c in e["cells"]}
    assert cells == {("r1", 4096, 4096): {"gluon-test": 0.5, "torch": 1.0}, ("r1", 4096, 5000): {"gluon-test": 0.4, "torch": 1.0},
                     ("r1", 64, 1024): {"gluon-test": 1.5, "torch": 1.0},
                     ("r2", 1024, 16384): {"gluon-test": 0.5, "torch": 1.0}}
    assert e["always"] == []  # it lost to torch in one cell
    assert t["runs"] == {"h200": ["r1", "r2"]}
    assert isinstance(t["seed"], int) and t["seed"] == selection.build(tmp_path)["seed"]  # a hash of the evidence


def _table(cells, always=(), op="rms_norm"):
    return {"seed": 1, "entries": {"h200": {op: {"cells": cells, "always": list(always)}}}}


def _cell(M, N, ms, dtype="bfloat16", run="r1"):
    return {"shape": {"M": M, "N": N}, "dtype": dtype, "run": run, "ms": ms}


RMS = specs.get("rms_norm")
OURS = ["gluon-a", "gluon-b"]


def test_the_model_interpolates_between_cells(monkeypatch):
    """a wins at short rows, b at long ones: between them the nearer cells decide."""
    cells = [_cell(4096, 1024, {"torch": 1.0, "gluon-a": 0.5, "gluon-b": 0.8}),
             _cell(4096, 2048, {"torch": 1.0, "gluon-a": 0.55, "gluon-b": 0.75}),
             _cell(4096, 16384, {"torch": 1.0, "gluon-a": 0.9, "gluon-b": 0.6}),
             _cell(4096, 32768, {"torch": 1.0, "gluon-a": 0.95, "gluon-b": 0.55})]
    monkeypatch.setattr(selection, "_table", _table(cells))
    assert selection.rank(RMS, {"M": 4096, "N": 1536}, "bfloat16", "h200", OURS)[0] == "gluon-a"
    assert selection.rank(RMS, {"M": 4096, "N": 24000}, "bfloat16", "h200", OURS)[0] == "gluon-b"
    assert selection.rank(RMS, {"M": 3000, "N": 1300}, "bfloat16", "h200", OURS)[0] == "gluon-a"  # between rows
    e = selection.explain(RMS, {"M": 4096, "N": 1024}, "bfloat16", "h200", OURS)
    assert e["scores"]["gluon-a"] < e["scores"]["gluon-b"] < 0 and "lowest score" in e["why"]


def test_ratios_chain_through_variants_measured_together(monkeypatch):
    """b was never measured beside torch, only beside a (another run); the fit compares it through a."""
    cells = [_cell(4096, 4096, {"torch": 1.0, "gluon-a": 0.8}, run="r1"),
             _cell(4096, 4096, {"gluon-a": 2.0, "gluon-b": 1.0}, run="r2")]  # another run's clocks: only ratios count
    monkeypatch.setattr(selection, "_table", _table(cells))
    e = selection.explain(RMS, {"M": 4096, "N": 4096}, "bfloat16", "h200", OURS)
    assert e["order"][0] == "gluon-b"
    assert math.exp(e["scores"]["gluon-b"]) == pytest.approx(0.4, rel=1e-3)


def test_dtypes_of_one_itemsize_share_evidence_and_fp32_reads_bytes(monkeypatch):
    cells = [_cell(4096, 8192, {"torch": 1.0, "gluon-a": 0.9, "gluon-b": 0.6}),            # bf16 rows of 16 KB
             _cell(4096, 2048, {"torch": 1.0, "gluon-a": 0.6, "gluon-b": 0.9})]            # bf16 rows of 4 KB
    monkeypatch.setattr(selection, "_table", _table(cells))
    assert selection.rank(RMS, {"M": 4096, "N": 8192}, "float16", "h200", OURS)[0] == "gluon-b"  # fp16 reads bf16
    # fp32 rows of 4096 elements are 16 KB: bf16's 8192-element cell speaks for them, not its 4096-element one
    assert selection.rank(RMS, {"M": 4096, "N": 4096}, "float32", "h200", OURS)[0] == "gluon-b"
    own = cells + [_cell(4096, 4096, {"torch": 1.0, "gluon-a": 0.5, "gluon-b": 0.7}, dtype="float32")]
    monkeypatch.setattr(selection, "_table", _table(own))
    assert selection.rank(RMS, {"M": 4096, "N": 4096}, "float32", "h200", OURS)[0] == "gluon-a"  # its own first


def test_never_eager_torch_while_an_always_winner_takes_the_input(monkeypatch):
    cells = [_cell(4096, 4096, {"torch": 1.0, "gluon-a": 0.99, "gluon-b": 1.2})]  # a: within the margin
    monkeypatch.setattr(selection, "_table", _table(cells, always=["gluon-a"]))
    assert selection.rank(RMS, {"M": 4096, "N": 4096}, "bfloat16", "h200", OURS)[0] == "gluon-a"
    assert selection.rank(RMS, {"M": 4096, "N": 4096}, "bfloat16", "h200", ["gluon-b"])[0] == "torch"  # a refuses it
    monkeypatch.setattr(selection, "_table", _table(cells))
    assert selection.rank(RMS, {"M": 4096, "N": 4096}, "bfloat16", "h200", OURS)[0] == "torch"  # 0.99: within noise


def test_far_from_every_cell_the_default_decides(monkeypatch):
    cells = [_cell(4096, 4096, {"torch": 1.0, "gluon-a": 0.7, "gluon-b": 0.6})]
    monkeypatch.setattr(selection, "_table", _table(cells, always=["gluon-b", "gluon-a"]))
    e = selection.explain(RMS, {"M": 1, "N": 4096}, "bfloat16", "h200", OURS)  # 12 octaves of rows away
    assert e["order"][0] == "gluon-b" and "no cell near" in e["why"]
    assert selection.rank(RMS, {"M": 1, "N": 4096}, "bfloat16", "h200", ["gluon-a"])[0] == "gluon-a"
    monkeypatch.setattr(selection, "_table", _table(cells))
    assert selection.rank(RMS, {"M": 1, "N": 4096}, "bfloat16", "h200", OURS) == ["torch", "gluon-a", "gluon-b"]
    assert selection.rank(RMS, {"M": 4096, "N": 4096}, "bfloat16", "b200", OURS) == ["torch"]  # another GPU


def test_ineligible_variants_are_skipped(monkeypatch):
    cells = [_cell(4096, 4096, {"torch": 1.0, "gluon-a": 0.5, "gluon-b": 0.7})]
    monkeypatch.setattr(selection, "_table", _table(cells))
    assert selection.rank(RMS, {"M": 4096, "N": 4096}, "bfloat16", "h200", ["gluon-b"])[0] == "gluon-b"
    assert selection.rank(RMS, {"M": 4096, "N": 4096}, "bfloat16", "h200", []) == ["torch"]


def test_categories_must_match(monkeypatch):
    spec = specs.get("group_norm")
    near = {"B": 8, "C": 320, "H": 64, "W": 64, "G": 32, "layout": "nchw"}
    cells = [{"shape": near, "dtype": "bfloat16", "run": "r1", "ms": {"torch": 1.0, "gluon-split": 0.4}}]
    monkeypatch.setattr(selection, "_table", _table(cells, op="group_norm"))
    assert selection.rank(spec, near, "bfloat16", "h200", ["gluon-split"])[0] == "gluon-split"
    e = selection.explain(spec, {**near, "layout": "channels_last"}, "bfloat16", "h200", ["gluon-split"])
    assert e["cells"] == 0 and e["order"] == ["torch", "gluon-split"]  # another layout is never near


def test_committed_model_decisions_on_the_issue_cells():
    """The committed table (from the committed records) on the cells #30 measured going wrong: fp16 norms and
    QK-norm + RoPE took eager torch, odd-N add+RMSNorm fell to torch, every dgrad took cuDNN."""
    monkey = selection._table
    try:
        selection._table = None
        selection._prepared.clear()
        ours = lambda op: [v for v in registry.variants(op) if registry.get_variant(op, v).ours]  # noqa: E731
        for op in ("rms_norm", "layer_norm", "add_rms_norm"):
            for dt in ("bfloat16", "float16", "float32"):
                for M, N in ((2048, 4096), (24576, 5120), (2048, 2880)):
                    assert selection.rank(specs.get(op), {"M": M, "N": N}, dt, "h200", ours(op))[0] != "torch", (op, dt, M, N)
        odd = [v for v in ours("add_rms_norm") if v != "gluon-tma"]
        assert selection.rank(specs.get("add_rms_norm"), {"M": 2048, "N": 4100}, "bfloat16", "h200", odd)[0] != "torch"
        qk = {"T": 4096, "Hq": 32, "Hk": 8, "D": 128, "R": 128}
        assert selection.rank(specs.get("qk_norm_rope"), qk, "float16", "h200", ours("qk_norm_rope"))[0] != "torch", \
            "fp16 QK-norm + RoPE: no current record of a gluon-lab variant (re-measure 05: python -m gluon_lab refresh 05)"
        from gluon_lab import experiments
        for t in experiments.CONV_SHAPES:
            got = selection.rank(specs.get("conv2d_input_grad"), experiments._conv_shape(t), "bfloat16", "h200",
                                 ours("conv2d_input_grad"))
            assert got[0] in ("gluon-pipelined", "gluon-ws"), (t, got)  # a Gluon dgrad, never cuDNN
    finally:
        selection._table = monkey
        selection._prepared.clear()


def test_the_first_call_is_cheap():
    import time
    selection._prepared.clear()
    spec = specs.get("rms_norm")
    ours = [v for v in registry.variants("rms_norm") if registry.get_variant("rms_norm", v).ours]
    selection.rank(spec, {"M": 100, "N": 100}, "bfloat16", "h200", ours)  # prepares the op's cells once
    t0 = time.perf_counter()
    for M in range(1000, 1020):
        selection.rank(spec, {"M": M, "N": 3000}, "bfloat16", "h200", ours)
    assert (time.perf_counter() - t0) / 20 < 0.05  # a first call per signature; later calls are a dict lookup


def test_choose_reads_no_file_and_caches_per_signature(monkeypatch):
    monkeypatch.setattr(selection, "_table", {"entries": {}})
    monkeypatch.setattr(selection, "_decisions", {})
    monkeypatch.setattr(selection, "TABLE_PATH", Path("/nonexistent/selection.json"))
    x, w = torch.randn(3, 64), torch.randn(64)
    assert selection.choose(specs.get("rms_norm"), (x, w)) == "torch"  # CPU tensors: the eager fallback
    assert len(selection._decisions) == 1
    selection.choose(specs.get("rms_norm"), (torch.randn(3, 64), w))  # same signature: no new entry
    assert len(selection._decisions) == 1
    selection.choose(specs.get("rms_norm"), (torch.randn(5, 64), w))
    assert len(selection._decisions) == 2


def test_committed_table_matches_the_committed_records():
    table = json.loads(selection.TABLE_PATH.read_text())
    assert table == selection.build(ROOT / "results"), \
        "gluon_lab/selection.json is out of date with results/: run `python -m gluon_lab select` and commit it"


def test_a_table_name_the_registry_lacks_is_skipped(monkeypatch):
    """A variant renamed or removed since the records were taken is never run: only the registry's eligible
    variants are candidates, whatever the cells and `always` name."""
    cells = [_cell(4, 64, {"torch": 1.0, "gluon-renamed": 0.1, "gluon-tma": 0.8})]
    monkeypatch.setattr(selection, "_table", _table(cells, always=["gluon-renamed", "gluon-tma"]))
    monkeypatch.setattr(selection, "_decisions", {})
    monkeypatch.setattr(selection, "_slug", lambda i: "h200")
    monkeypatch.setattr(selection, "eligible_variants", lambda spec, inputs: ["gluon-tma"])

    class FakeCuda:  # only what choose() reads
        is_cuda = True
        dtype = torch.bfloat16
        shape = (4, 64)
        device = torch.device("cpu")

        def stride(self):
            return (64, 1)

        def data_ptr(self):
            return 0

        def numel(self):
            return 256

        def dim(self):
            return 2

    x = FakeCuda()
    assert selection.choose(specs.get("rms_norm"), (x, torch.randn(64))) == "gluon-tma"


def test_a_failed_kernel_import_is_raised_again(monkeypatch):
    import importlib
    real = importlib.import_module
    monkeypatch.setattr(registry, "_loaded", False)
    monkeypatch.setattr(registry, "_REGISTRY", {})

    def failing(name, *a, **k):
        if name.endswith(".gemm"):
            raise ImportError("boom")
        return real(name, *a, **k)

    monkeypatch.setattr(importlib, "import_module", failing)
    for _ in range(2):
        with pytest.raises(ImportError, match="boom"):
            registry.variants("matmul")
    assert registry._loaded is False


# ----------------------------------------------------------------------------------------------
# the model on committed fixture records: tests/fixtures/selection/h200/selection-cells.jsonl holds unmodified
# lines of results/h200 (RMSNorm bf16 / fp32 and add + RMSNorm bf16 cells of the lab's own runs)

FIXTURE = ROOT / "tests" / "fixtures" / "selection"


@pytest.fixture
def fixture_table(monkeypatch):
    # currency is not what these tests are about: every fixture record counts as current
    monkeypatch.setattr(registry, "current_hash", lambda op, name: _hashes[(op, name)])
    df = results.load(sorted(FIXTURE.glob("*/*.jsonl")), on_error="raise")
    _hashes.update({(r.op, r.variant): r.kernel_source_hash for r in df.itertuples()})
    t = selection.build(FIXTURE)
    monkeypatch.setattr(selection, "_table", t)
    return t


_hashes: dict = {}


def _fixture_ms(t, op, dtype, M, N):
    return [c["ms"] for c in t["entries"]["h200"][op]["cells"] if c["dtype"] == dtype and c["shape"] == {"M": M, "N": N}]


def test_fixture_model_reads_the_nearest_cells(fixture_table):
    ours = [v for v in registry.variants("rms_norm") if registry.get_variant("rms_norm", v).ours]
    for M, N in ((1024, 4096), (16384, 8192)):  # at a measured cell: the variant fastest there (one run each)
        (ms, ) = _fixture_ms(fixture_table, "rms_norm", "bfloat16", M, N)
        best = min((v for v in ms if v != "torch"), key=ms.get)
        assert selection.rank(RMS, {"M": M, "N": N}, "bfloat16", "h200", ours)[0] == best
    # between cells (rows 4x and 1.7x from the measured ones): a gluon-lab variant, one that wins near there
    got = selection.rank(RMS, {"M": 4000, "N": 6000}, "bfloat16", "h200", ours)[0]
    near = _fixture_ms(fixture_table, "rms_norm", "bfloat16", 1024, 4096) + _fixture_ms(fixture_table, "rms_norm",
                                                                                       "bfloat16", 16384, 8192)
    assert got in {min((v for v in ms if v != "torch"), key=ms.get) for ms in near}


def test_fixture_model_shares_dtypes(fixture_table):
    ours = [v for v in registry.variants("rms_norm") if registry.get_variant("rms_norm", v).ours]
    bf = selection.explain(RMS, {"M": 16384, "N": 8192}, "bfloat16", "h200", ours)
    fp16 = selection.explain(RMS, {"M": 16384, "N": 8192}, "float16", "h200", ours)
    assert fp16["order"][0] == bf["order"][0] and fp16["cells"] > 0  # fp16 has no cell of its own
    # fp32 rows of 2048 elements are bf16's rows of 4096 in bytes: at M = 1024 the bf16 cell of equal bytes is the
    # nearest (the dtype step only); fp32's own cells are all at M = 16384, two units of rows away
    e = selection.explain(RMS, {"M": 1024, "N": 2048}, "float32", "h200", ours)
    assert e["order"][0] != "torch" and e["nearest"]["torch"] == pytest.approx(selection.DTYPE_STEP["other"], abs=1e-3)
    assert e["nearest"]["gluon-tma"] == pytest.approx(selection.DTYPE_STEP["other"], abs=1e-3)  # only bf16 measured it


def test_fixture_model_skips_ineligible_and_never_takes_eager_torch_for_an_always_winner(fixture_table):
    spec = specs.get("add_rms_norm")
    always = fixture_table["entries"]["h200"]["add_rms_norm"]["always"]
    assert always, "the fixture's add+RMSNorm cells have a variant that beat torch in each"
    odd = [v for v in registry.variants("add_rms_norm") if registry.get_variant("add_rms_norm", v).ours and v != "gluon-tma"]
    got = selection.rank(spec, {"M": 2048, "N": 4100}, "bfloat16", "h200", odd)
    assert got[0] in odd and "gluon-tma" not in got  # gluon-tma refuses N % 8 != 0: never a candidate
    far = selection.explain(spec, {"M": 1, "N": 4100}, "bfloat16", "h200", odd)  # 14 octaves of rows away
    assert far["cells"] == 0 and far["order"][0] == next(v for v in always if v in odd)


def test_a_superseded_check_votes_and_the_newest_never_does(tmp_path, fake_variant):
    """A held-out check is the test of the table it read; once a later run exists (the evidence changed, so
    the table it checked is gone), its cells are evidence like any plan's."""
    th = registry.get_variant("rms_norm", "torch").code_hash()
    gh = fake_variant.code_hash()
    chk = {"study": "auto-check", "table_seed": 5, "call": "api"}
    p = tmp_path / "h200" / "nb.jsonl"
    results.append_records(p, [
        _rec("torch", 512, 3000, 1.0, th, config=chk, run_id="20261201T000000Z-aaaaaaaa"),
        _rec("gluon-test", 512, 3000, 0.1, gh, config=chk, run_id="20261201T000000Z-aaaaaaaa"),
        _rec("auto", 512, 3000, 0.1, None, config={**chk, "chosen": "gluon-test"}, run_id="20261201T000000Z-aaaaaaaa"),
    ])
    assert selection.build(tmp_path)["entries"] == {}  # the newest run: the test, no vote
    results.append_records(p, [  # a later run (a refresh, the evidence grid) supersedes the check
        _rec("torch", 4096, 4096, 1.0, th, run_id="20261202T000000Z-bbbbbbbb"),
        _rec("gluon-test", 4096, 4096, 0.5, gh, run_id="20261202T000000Z-bbbbbbbb"),
        _rec("torch", 700, 300, 1.0, th, config={**chk, "table_seed": 6}, run_id="20261202T000000Z-cccccccc"),
        _rec("gluon-test", 700, 300, 0.2, gh, config={**chk, "table_seed": 6}, run_id="20261202T000000Z-cccccccc"),
    ])
    cells = {(c["run"][:9], c["shape"]["M"]): c["ms"] for c in selection.build(tmp_path)["entries"]["h200"]["rms_norm"]["cells"]}
    assert cells == {("20261201T", 512): {"gluon-test": 0.1, "torch": 1.0},  # auto's record is no variant's: no column
                     ("20261202T", 4096): {"gluon-test": 0.5, "torch": 1.0}}  # the second check (newest) does not vote


def test_the_seed_follows_the_model_rules(tmp_path, fake_variant, monkeypatch):
    th = registry.get_variant("rms_norm", "torch").code_hash()
    results.append_records(tmp_path / "h200" / "nb.jsonl", [
        _rec("torch", 4096, 4096, 1.0, th), _rec("gluon-test", 4096, 4096, 0.5, fake_variant.code_hash())])
    a = selection.build(tmp_path)["seed"]
    monkeypatch.setattr(selection, "NEAR", selection.NEAR + 0.5)  # a rule changes, the evidence does not
    assert selection.build(tmp_path)["seed"] != a


def test_cross_validation_leaves_each_cell_out(monkeypatch):
    cells = [_cell(4096, 4096, {"torch": 1.0, "gluon-a": 0.5, "gluon-b": 0.6}),
             _cell(4096, 5120, {"torch": 1.0, "gluon-a": 0.5, "gluon-b": 0.7}),
             _cell(8192, 4096, {"torch": 1.0, "gluon-a": 0.8, "gluon-b": 0.4})]  # b wins here only
    monkeypatch.setattr(selection, "_table", _table(cells))
    d = selection.cross_validate(ops=["rms_norm"])
    assert len(d) == 3 and set(d["best"]) == {"gluon-a", "gluon-b"}
    r = d[d["shape"].map(lambda s: s["M"]) == 8192].iloc[0]
    assert r["chosen"] == "gluon-a" and r["chosen / best"] == pytest.approx(0.4 / 0.8)  # the others say a
    assert (d["chosen / torch"] > 1).all()


def test_a_config_field_added_after_the_record_counts_as_its_default(tmp_path, monkeypatch):
    """A record measured before its config gained a field lacks that field: it ran the field's default, so it votes
    while today's resolved config holds the default there (it is current), and not once the heuristic resolves the
    field to something else; a record of another value of a field it names never votes."""
    import dataclasses

    @dataclasses.dataclass(frozen=True)
    class Cfg:
        tile: int = 64
        added: bool = False  # a field the records below predate

    pick = {"added": False}

    def fn(x, weight, eps=1e-6, out=None, config=None):
        return specs.get("rms_norm").eager(x, weight, eps)
    registry._ensure_loaded()
    reg = {op: dict(vs) for op, vs in registry._REGISTRY.items()}
    monkeypatch.setattr(registry, "_REGISTRY", reg)
    registry.register("rms_norm", "gluon-cfg", pattern="tma-caching", needs_cuda=False,
                      configure=lambda shape, dtype, over: Cfg(**{**pick, **over}))(fn)
    th = registry.get_variant("rms_norm", "torch").code_hash()
    gh = registry.get_variant("rms_norm", "gluon-cfg").code_hash()
    p = tmp_path / "h200" / "nb.jsonl"
    results.append_records(p, [
        _rec("torch", 4096, 4096, 1.0, th), _rec("gluon-cfg", 4096, 4096, 0.5, gh, config={"tile": 64}),
        _rec("torch", 2048, 4096, 1.0, th), _rec("gluon-cfg", 2048, 4096, 0.5, gh, config={"tile": 128}),
        _rec("torch", 1024, 4096, 1.0, th), _rec("gluon-cfg", 1024, 4096, 0.5, gh, config={"tile": 64, "added": True}),
    ])

    def voted():
        cells = selection.build(tmp_path)["entries"].get("h200", {}).get("rms_norm", {"cells": []})["cells"]
        return sorted(c["shape"]["M"] for c in cells if "gluon-cfg" in c["ms"])
    assert voted() == [4096]
    pick["added"] = True  # today's heuristic turns the new field on: the old record no longer speaks for it
    assert voted() == [1024]
