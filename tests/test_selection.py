"""variant="auto": the committed selection table is built from current records only, and the call
path reads no file. CPU-only."""
import json
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
        _rec("torch", 4096, 4096, 1.0, th), _rec("gluon-test", 4096, 4096, 0.5, gh),   # bucket (12, 12): ours wins
        _rec("torch", 4096, 5000, 1.0, th), _rec("gluon-test", 4096, 5000, 0.4, gh),   # same bucket, another shape
        _rec("torch", 64, 1024, 1.0, th), _rec("gluon-test", 64, 1024, 1.5, gh),       # bucket (10, 6): torch wins
        _rec("torch", 16, 512, 1.0, th), _rec("gluon-test", 16, 512, 0.1, "old-hash"),  # stale: no vote
        _rec("gluon-test", 16, 512, 0.05, gh, config={"study": "sweep"}),              # a study: no vote
        _rec("gluon-test", 16, 512, 0.05, gh, passed=False),                           # failed: no vote
        _rec("triton", 16, 512, 0.01, registry.get_variant("rms_norm", "triton").code_hash()),  # a baseline
        # a study's heuristic-marked case votes beside the study's plain torch case of the same run ...
        _rec("torch", 1024, 16384, 1.0, th, config={"study": "s"}, run_id="r2"),
        _rec("gluon-test", 1024, 16384, 0.5, gh, config={"study": "s", "heuristic": True}, run_id="r2"),
        # ... and a ratio never pairs records of two runs (no torch in r3 at this shape: no vote)
        _rec("gluon-test", 1024, 30000, 0.1, gh, config={"study": "s", "heuristic": True}, run_id="r3"),
        _rec("torch", 1024, 30000, 1.0, th, run_id="r2"),
    ])
    t = selection.build(tmp_path)
    rows = {tuple(r["bucket"]): r for r in t["entries"]["h200"]["rms_norm"]["bfloat16"]}
    assert rows[(12, 12)]["order"] == ["gluon-test", "torch"]
    assert rows[(12, 12)]["shapes"] == 2 and rows[(12, 12)]["vs_torch"]["gluon-test"] == pytest.approx((0.5 * 0.4) ** 0.5, abs=1e-4)
    assert rows[(10, 6)]["order"] == ["torch"]
    assert rows[(9, 4)]["order"] == ["torch"] and "gluon-test" not in rows[(9, 4)]["vs_torch"]
    assert rows[(14, 10)]["order"] == ["gluon-test", "torch"] and rows[(14, 10)]["vs_torch"]["gluon-test"] == pytest.approx(0.5)
    assert rows[(15, 10)]["order"] == ["torch"] and rows[(15, 10)]["vs_torch"] == {}
    assert t["runs"] == {"h200": ["r1", "r2", "r3"]}


def test_candidates_take_the_nearest_bucket_and_fall_back_to_torch(monkeypatch):
    table = {"entries": {"h200": {"rms_norm": {"bfloat16": [
        {"bucket": [12, 12], "order": ["gluon-a", "torch"]}, {"bucket": [14, 12], "order": ["gluon-b", "torch"]}]}}}}
    monkeypatch.setattr(selection, "_table", table)
    spec = specs.get("rms_norm")
    assert selection.candidates(spec, {"M": 4096, "N": 4096}, "bfloat16", "h200") == ["gluon-a", "torch"]
    assert selection.candidates(spec, {"M": 4096, "N": 16384}, "bfloat16", "h200") == ["gluon-b", "torch"]
    assert selection.candidates(spec, {"M": 8192, "N": 2 ** 20}, "bfloat16", "h200") == ["torch"]  # too far
    assert selection.candidates(spec, {"M": 4096, "N": 4096}, "float32", "h200") == ["torch"]
    assert selection.candidates(spec, {"M": 4096, "N": 4096}, "bfloat16", "b200") == ["torch"]


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


def test_group_buckets_weight_the_group_length_not_the_layout(monkeypatch):
    spec = specs.get("group_norm")
    far = {"B": 8, "C": 32, "H": 16, "W": 16, "G": 32, "layout": "nchw"}  # group length 256: bucket 8
    near = {"B": 8, "C": 320, "H": 64, "W": 64, "G": 32, "layout": "nchw"}  # group length 40960: bucket 15
    table = {"entries": {"h200": {"group_norm": {"bfloat16": [
        {"bucket": list(spec.bucket(near)), "order": ["gluon-chunked", "torch"]}]}}}}
    monkeypatch.setattr(selection, "_table", table)
    assert selection.candidates(spec, near, "bfloat16", "h200") == ["gluon-chunked", "torch"]
    assert selection.candidates(spec, far, "bfloat16", "h200") == ["torch"]  # 7 octaves of group length x 4
    assert selection.candidates(spec, {**near, "layout": "channels_last"}, "bfloat16", "h200") == ["torch"]


def test_a_table_name_the_registry_lacks_is_skipped(monkeypatch):
    monkeypatch.setattr(selection, "_decisions", {})
    monkeypatch.setattr(selection, "candidates", lambda *a: ["gluon-renamed", "torch"])
    monkeypatch.setattr(selection, "_slug", lambda i: "h200")

    class FakeCuda:  # only what choose() reads before the candidates
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

    x = FakeCuda()
    assert selection.choose(specs.get("rms_norm"), (x, torch.randn(64))) == "torch"


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
