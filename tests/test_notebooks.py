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
