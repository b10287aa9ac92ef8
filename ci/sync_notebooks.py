"""Regenerates notebooks/NN-*.ipynb from their jupytext sources notebooks/NN-*.py (percent format).

    python ci/sync_notebooks.py            # write every .ipynb whose text differs (make notebooks)
    python ci/sync_notebooks.py --check    # exit 1 and name the notebooks that are out of date
    python ci/sync_notebooks.py notebooks/01-tma-caching.py   # just that one

The .ipynb is a pure function of the .py, so regenerating twice gives no diff: no outputs, execution
counts None, the notebook metadata of the .py header (kernelspec, language_info, gluon_lab) without
jupytext's own block, nbformat 4.5 and cell ids derived from each cell's type and source (an edited
cell gets a new id, the others keep theirs; `jupytext --to ipynb` would draw random ones).
"""
from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

import jupytext
import nbformat

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"


def ipynb_text(py: Path) -> str:
    nb = jupytext.read(py, fmt="py:percent")
    nb.metadata.pop("jupytext", None)
    nb.nbformat, nb.nbformat_minor = 4, 5
    seen = set()
    for i, c in enumerate(nb.cells):
        cid = hashlib.sha1(f"{c.cell_type}\n{c.source}".encode()).hexdigest()[:8]
        if cid in seen:
            cid = f"{cid}-{i}"
        seen.add(cid)
        c["id"] = cid
        if c.cell_type == "code":
            c.outputs, c.execution_count = [], None
    nbformat.validate(nb)
    text = nbformat.writes(nb)
    return text if text.endswith("\n") else text + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python ci/sync_notebooks.py")
    p.add_argument("sources", nargs="*", type=Path, help="notebooks/NN-*.py (default: all)")
    p.add_argument("--check", action="store_true", help="only report out-of-date .ipynb files")
    a = p.parse_args(argv)
    sources = a.sources or sorted(NOTEBOOKS.glob("[0-9][0-9]-*.py"))
    stale = []
    for py in sources:
        target = py.with_suffix(".ipynb")
        text = ipynb_text(py)
        if target.exists() and target.read_text(encoding="utf-8") == text:
            continue
        stale.append(target)
        if not a.check:
            target.write_text(text, encoding="utf-8")
            print(f"wrote {target.relative_to(ROOT) if target.is_relative_to(ROOT) else target}")
    if a.check and stale:
        print("out of date (run `make notebooks`): " + ", ".join(t.name for t in stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
