"""Notebooks are committed without outputs, with kernelspec/language metadata (papermill refuses a
notebook without it) and a code cell tagged `parameters` declaring the common parameters."""
from pathlib import Path

import nbformat
import pytest

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
