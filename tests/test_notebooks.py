"""Notebooks are committed without outputs, with kernelspec/language metadata (papermill refuses a
notebook without it) and a code cell tagged `parameters` declaring the common parameters."""
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")  # the device image may lack it; CI has it

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb")) + sorted((ROOT / "tests" / "fixtures").rglob("*.ipynb"))


def test_there_are_notebooks():
    assert any(p.name == "00-ceilings.ipynb" for p in NOTEBOOKS)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_conventions(path):
    nb = nbformat.read(str(path), as_version=4)
    nbformat.validate(nb)
    assert nb.metadata["kernelspec"]["language"] == "python" and nb.metadata["language_info"]["name"] == "python"
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(not c.outputs and c.execution_count is None for c in code), "commit notebooks without outputs"
    params = [c for c in code if "parameters" in c.metadata.get("tags", [])]
    assert len(params) == 1 and params[0] is code[0], "first code cell must be the one tagged parameters"
    for name in ("mode", "quick", "results_dir"):
        assert f"{name} =" in params[0].source
    assert nb.cells[0].cell_type == "markdown" and nb.cells[0].source.startswith("# ")
    if path.parent.name == "notebooks":
        assert any("headline" in c.metadata.get("tags", []) for c in code), "index needs a headline figure"


def test_copy_reference_table_uses_the_session_copy_only_for_big_cells():
    import pandas as pd
    from gluon_lab import notebook as nbk
    rows = [  # one run: a session copy (no M/N) and two per-shape copies, one of them a >= 64 Mi-element cell
        {"op": "copy", "run_id": "r", "M": None, "N": None, "gbps": 4270.0, "timer": "do_bench-l2flush",
         "bytes": 2 * 2**30, "timestamp": 1, "pattern": "ceiling", "variant": "torch", "config": {}},
        {"op": "copy", "run_id": "r", "M": 1024, "N": 4096, "gbps": 2800.0, "timer": "cudagraph",
         "bytes": 1024 * 4096 * 2, "timestamp": 2, "pattern": "ceiling", "variant": "torch", "config": {}},
        {"op": "copy", "run_id": "r", "M": 16384, "N": 16384, "gbps": 2750.0, "timer": "cudagraph",
         "bytes": 16384 * 16384 * 2, "timestamp": 3, "pattern": "ceiling", "variant": "torch", "config": {}},
        {"op": "matmul", "run_id": "r", "M": 8192, "N": 8192, "K": 8192, "tflops": 680.0, "timer": "do_bench-l2flush",
         "bytes": 0, "timestamp": 4, "pattern": "ceiling", "variant": "torch", "config": {}},
    ]
    df = pd.DataFrame(rows)
    df["M"] = df["M"].astype("Int64")
    df["N"] = df["N"].astype("Int64")
    t, _ = nbk.copy_reference_table(df, "r")
    assert t.loc[(1024, 4096), "reference GB/s"] == 2800.0  # small cell: its own copy, even if lower
    assert t.loc[(16384, 16384), "reference GB/s"] == 4270.0  # big cell: the larger of the two
    assert t.loc[(16384, 16384), "reference"] == "session copy"


# --- jupytext pairs: notebooks/NN-name.py is the source, NN-name.ipynb is generated (make notebooks)
SOURCES = sorted((ROOT / "notebooks").glob("[0-9][0-9]-*.py"))
IPYNBS = sorted((ROOT / "notebooks").glob("[0-9][0-9]-*.ipynb"))
FIX = "edit notebooks/{stem}.py, then run `make notebooks` (python ci/sync_notebooks.py) and commit both"


def _cells(nb):
    return [(c.cell_type, c.source, list(c.metadata.get("tags", []))) for c in nb.cells]


def test_every_ipynb_has_a_py_source():
    orphans = [p.name for p in IPYNBS if not p.with_suffix(".py").exists()]
    assert not orphans, (f"notebooks without a jupytext source: {orphans}; create it with "
                         "`jupytext --to py:percent notebooks/<name>.ipynb` and make it the source")
    assert SOURCES, "no notebooks/NN-*.py sources"


@pytest.mark.parametrize("py", SOURCES, ids=lambda p: p.name)
def test_ipynb_is_in_sync_with_its_py_source(py):
    import jupytext
    ipynb = py.with_suffix(".ipynb")
    assert ipynb.exists(), f"{ipynb.name} missing: " + FIX.format(stem=py.stem)
    src = jupytext.read(py, fmt="py:percent")
    nb = nbformat.read(str(ipynb), as_version=4)
    a, b = _cells(src), _cells(nb)
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            what = "type" if x[0] != y[0] else "tags" if x[2] != y[2] else "source"
            first = (x[1].splitlines() or [""])[0][:70]
            raise AssertionError(f"{py.stem}: cell {i} ({x[0]}, starts {first!r}) differs in {what} between "
                                 f"{py.name} and {ipynb.name}: " + FIX.format(stem=py.stem))
    assert len(a) == len(b), (f"{py.stem}: {py.name} has {len(a)} cells, {ipynb.name} {len(b)}: "
                              + FIX.format(stem=py.stem))
    for key in ("kernelspec", "language_info", "gluon_lab"):
        assert src.metadata.get(key) == nb.metadata.get(key), (
            f"{py.stem}: notebook metadata {key!r} differs: " + FIX.format(stem=py.stem))


def test_sync_script_is_byte_stable(tmp_path):
    """What `make notebooks` writes is what is committed (ids, metadata, no outputs)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("sync_notebooks", ROOT / "ci" / "sync_notebooks.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for py in SOURCES:
        text = mod.ipynb_text(py)
        assert text == mod.ipynb_text(py)
        assert text == py.with_suffix(".ipynb").read_text(encoding="utf-8"), (
            f"{py.stem}.ipynb is not what `make notebooks` writes: " + FIX.format(stem=py.stem))


@pytest.mark.slow
def test_notebook_runs_with_papermill_from_the_repo_root(replay_site, monkeypatch, tmp_path):
    """results_dir=None is the repository's results/ whatever the cwd (it used to be '../results',
    which from the repo root found no records: 00 showed 'No records', 01 crashed in matplotlib).
    The notebook's setup cell resolves it (analysis.common.setup, called with the parameter as given):
    checked here from the repo root and two other cwds. The executed 00-ceilings is the session's
    replay build's (papermill, tests/conftest.py), not a papermill run of its own."""
    import pandas as pd
    from gluon_lab.analysis import ceilings as ana, common as cm
    src = (ROOT / "notebooks" / "00-ceilings.py").read_text()
    assert "results_dir = None" in src and "results_dir=results_dir" in src  # the default reaches setup as given
    with pd.option_context("display.width", pd.get_option("display.width"),  # setup sets them: put back after
                           "display.max_columns", pd.get_option("display.max_columns")):
        for cwd in (ROOT, ROOT / "notebooks", tmp_path):
            monkeypatch.chdir(cwd)
            ctx = cm.setup(ana.NB, mode="replay", results_dir=None)
            assert ctx.results_dir == ROOT / "results", (cwd, ctx.results_dir)
            assert f"results={ROOT / 'results'}" in ctx.describe()
    out = replay_site.get() / "executed" / "00-ceilings.ipynb"
    nb = nbformat.read(str(out), as_version=4)
    text = "\n".join(str(o.get("text", "")) + str(o.get("data", {}).get("text/plain", "")) +
                     str(o.get("data", {}).get("text/markdown", "")) for c in nb.cells if c.cell_type == "code"
                     for o in c.outputs)
    assert "No records for" not in text and "Ceilings: missing" not in text
    assert f"results={ROOT / 'results'}" in text
    assert "Copy ceiling" in text and "records shown" in text
    assert not [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]


# notebook -> texts its empty-results run must show (beyond "No records for <nb> on h200")
EMPTY_NOTES = {"00-ceilings": ("missing", ), "01-tma-caching": ("missing", ), "02-chunked-reductions": ("missing", ),
               "03-multibuffer-pipelining": ("**No records for the rms_norm bf16 grid**", "No compute-sanitizer records"),
               "04-warp-specialization": ("**No records for the rms_norm bf16 grid**", "No compute-sanitizer records")}


@pytest.mark.slow
@pytest.mark.parametrize("nb", sorted(EMPTY_NOTES))
def test_notebook_without_records_shows_missing_notes(tmp_path, nb):
    """An existing but empty results_dir: every section says what is missing instead of raising."""
    import papermill as pm
    (tmp_path / "results").mkdir()
    out = tmp_path / f"{nb}.ipynb"
    pm.execute_notebook(str(ROOT / "notebooks" / f"{nb}.ipynb"), str(out),
                        parameters={"mode": "replay", "results_dir": "results"}, cwd=str(tmp_path),
                        kernel_name="python3", progress_bar=False, log_output=False, start_timeout=180)
    nb_out = nbformat.read(str(out), as_version=4)
    md = "\n".join(str(o.get("data", {}).get("text/markdown", "")) for c in nb_out.cells if c.cell_type == "code"
                   for o in c.outputs)
    assert f"No records for {nb} on h200" in md and all(t in md for t in EMPTY_NOTES[nb])
