"""papermill -> executed notebooks -> nbconvert HTML -> reports/<notebook>.html + reports/index.html.

    build()                      # every notebooks/NN-*.ipynb, mode="auto"
    build(["00-ceilings"], mode="replay", out_dir="reports")

A failing cell fails the build with ReportBuildError naming the notebook, the cell and the error.
Executed notebooks (reports/executed/) and HTML are build output, never committed.
The index has one row per notebook: pattern, headline figure (the first image output of the cell
tagged "headline"), GPU, date of the data and the count of stale records, read from results/.
"""
from __future__ import annotations

import datetime as _dt
import html
import json
import os
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
NOTEBOOKS = REPO / "notebooks"
TEMPLATES = Path(__file__).resolve().parent / "templates"


class ReportBuildError(RuntimeError):
    pass


def _notebook_paths(names, notebooks_dir: Path) -> list[Path]:
    if not names:
        return sorted(p for p in notebooks_dir.glob("[0-9][0-9]-*.ipynb"))
    out = []
    for n in names:
        p = Path(n)
        if not p.suffix:
            p = notebooks_dir / f"{n}.ipynb"
        elif not p.is_absolute() and not p.exists():
            p = notebooks_dir / p.name
        if not p.exists():
            raise ReportBuildError(f"notebook {n!r} not found (looked at {p})")
        out.append(p)
    return out


def execute(nb_path: Path, out_path: Path, parameters: dict, kernel_name: str = "python3", timeout: int = 3600):
    import papermill as pm
    from papermill.exceptions import PapermillExecutionError
    out_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        pm.execute_notebook(str(nb_path), str(out_path), parameters=parameters, kernel_name=kernel_name,
                            cwd=str(nb_path.parent), progress_bar=False, log_output=False,
                            execution_timeout=timeout, start_timeout=180)
    except PapermillExecutionError as e:
        first = (e.source or "").strip().splitlines()[:1]
        raise ReportBuildError(
            f"{nb_path.name}: cell {e.cell_index} (execution count {e.exec_count}"
            f"{', starts ' + repr(first[0][:80]) if first else ''}) raised {e.ename}: {e.evalue}\n"
            f"executed notebook kept at {out_path}") from None


def to_html(executed: Path, html_path: Path, banner: str = "") -> None:
    import nbformat
    from nbconvert import HTMLExporter
    nb = nbformat.read(str(executed), as_version=4)
    exp = HTMLExporter(template_name="gluonlab", extra_template_basedirs=[str(TEMPLATES)])
    body, _ = exp.from_notebook_node(nb, resources={"gl_banner": banner})
    html_path.write_text(body, encoding="utf-8")


def headline_image(executed: Path) -> str | None:
    """data: URI of the first PNG output of the cell tagged 'headline' (else None)."""
    import nbformat
    nb = nbformat.read(str(executed), as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code" and "headline" in cell.metadata.get("tags", []):
            for o in cell.get("outputs", []):
                png = o.get("data", {}).get("image/png")
                if png:
                    return "data:image/png;base64," + png.replace("\n", "")
    return None


def notebook_meta(nb_path: Path) -> dict:
    import nbformat
    nb = nbformat.read(str(nb_path), as_version=4)
    meta = nb.metadata.get("gluon_lab", {})
    title = nb_path.stem
    for c in nb.cells:
        if c.cell_type == "markdown":
            for line in c.source.splitlines():
                if line.startswith("# "):
                    title = line[2:].strip()
                    break
            break
    return {"title": title, "pattern": meta.get("pattern", ""), "summary": meta.get("summary", "")}


def data_summary(results_dir: Path, notebook: str) -> dict:
    """GPU(s), newest timestamp, record count and stale count for notebook's records."""
    from . import plots, registry, results
    files = sorted(results_dir.glob(f"*/{notebook}.jsonl"))
    if not files:
        return {"gpus": "no records", "date": "", "n": 0, "stale": 0}
    df = results.load(files, on_error="raise")
    plots.check_physical(df)
    df = results.mark_stale(df, registry.current_hash)
    gpus = ", ".join(sorted(df["gpu_name"].dropna().unique())) or "?"
    date = str(df["timestamp"].dropna().max())[:10] if len(df) else ""
    return {"gpus": gpus, "date": date, "n": len(df), "stale": int(df["stale"].sum())}


INDEX_TEMPLATE = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>gluon-lab reports</title>
<style>
body {{ font-family: -apple-system, Segoe UI, Helvetica, Arial, sans-serif; margin: 2em; color: #222; }}
table {{ border-collapse: collapse; }} td, th {{ border-bottom: 1px solid #ddd; padding: 8px 12px; vertical-align: top; text-align: left; }}
th {{ background: #f5f5f5; }} img {{ max-width: 380px; border: 1px solid #eee; }}
.stale {{ color: #b00; font-weight: bold; }} .muted {{ color: #888; }}
</style></head><body>
<h1>gluon-lab reports</h1>
<p>Hopper codegen patterns in Gluon, measured on real GPUs. Built {built} in mode <code>{mode}</code>.
Each page is an executed notebook; numbers come only from records in <code>results/</code>.</p>
<table><tr><th>notebook</th><th>pattern</th><th>headline figure</th><th>GPU</th><th>date of data</th><th>records</th><th>stale</th></tr>
{rows}
</table></body></html>
"""


def build(notebooks=None, out_dir: str | os.PathLike = "reports", mode: str = "auto", quick: bool = False,
          results_dir: str | os.PathLike | None = None, notebooks_dir: str | os.PathLike | None = None,
          kernel_name: str = "python3") -> Path:
    if mode not in ("auto", "measure", "replay"):
        raise ValueError(f"mode must be 'auto', 'measure' or 'replay', got {mode!r}")
    out = Path(out_dir).resolve()
    res = Path(results_dir).resolve() if results_dir else REPO / "results"
    nbdir = Path(notebooks_dir).resolve() if notebooks_dir else NOTEBOOKS
    paths = _notebook_paths(notebooks, nbdir)
    if not paths:
        raise ReportBuildError(f"no notebooks found in {nbdir}")
    rows = []
    from tqdm.auto import tqdm
    for nb in tqdm(paths, desc="notebooks", disable=None):
        executed = out / "executed" / nb.name
        execute(nb, executed, {"mode": mode, "quick": quick, "results_dir": str(res)}, kernel_name=kernel_name)
        meta = notebook_meta(nb)
        summ = data_summary(res, nb.stem)
        banner = (f"{html.escape(meta['title'])} · data: {html.escape(summ['gpus'])} {summ['date']} · "
                  f"{summ['n']} records, {summ['stale']} stale")
        to_html(executed, out / f"{nb.stem}.html", banner)
        img = headline_image(executed)
        stale = f'<span class="stale">{summ["stale"]}</span>' if summ["stale"] else "0"
        rows.append(
            f'<tr><td><a href="{nb.stem}.html">{html.escape(nb.stem)}</a><br>'
            f'<span class="muted">{html.escape(meta["title"])}</span></td>'
            f'<td>{html.escape(meta["pattern"])}</td>'
            f'<td>{f"<img src={chr(34)}{img}{chr(34)}>" if img else "<span class=muted>no headline figure</span>"}</td>'
            f'<td>{html.escape(summ["gpus"])}</td><td>{summ["date"]}</td><td>{summ["n"]}</td><td>{stale}</td></tr>')
    built = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    out.mkdir(parents=True, exist_ok=True)
    (out / "index.html").write_text(INDEX_TEMPLATE.format(built=built, mode=html.escape(mode), rows="\n".join(rows)),
                                    encoding="utf-8")
    (out / "build.json").write_text(json.dumps({"built": built, "mode": mode, "notebooks": [p.stem for p in paths]}))
    print(f"wrote {out / 'index.html'} and {len(paths)} page(s)")
    return out / "index.html"
