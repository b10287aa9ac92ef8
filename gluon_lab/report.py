"""papermill -> executed notebooks -> nbconvert HTML -> reports/<notebook>.html + reports/index.html.

    build()                                    # every notebooks/NN-*.ipynb, mode="auto"
    build(["00-ceilings"], mode="replay", out_dir="reports")

Honest builds
    * The site is built in a temporary folder next to `out_dir` and swapped in only when every
      notebook executed: a failed build leaves the previous site untouched (the failed build stays
      in `<out_dir>.failed/` for inspection) and raises ReportBuildError naming the notebook, the
      cell and the error.
    * Building a subset re-renders those pages and keeps every other page of the existing site; the
      index lists all of them (each page's card is stored in `pages/<notebook>.json`).
    * A notebook must have records, a headline figure and computed headline numbers; a page missing
      one fails the build (named) unless the build is explicitly partial (`partial=True`, CLI
      `--partial`), and then the page and its card say PARTIAL and what is missing.
    * On an sm_90+ GPU, mode "auto" measures: into a NEW run folder (`runs/<run>/results`, never the
      committed `results/`), the quick plans unless `full=True`; the pages show that run, and
      `python -m gluon_lab adopt runs/<run>` appends its records to `results/` for review + commit.

Pages (templates/gluonlab/index.html.j2): a sticky bar (index, previous / next), a table of
contents from the page's headings, an "At a glance" block at the top (the pattern in two sentences,
the headline numbers, the headline figure, the targets and the takeaways, copied from the cells
tagged `headline-numbers`, `headline`, `targets`, `takeaways`), code folded, the outputs of cells
tagged `fold` (and any output longer than a screen) folded. No asset comes from the network.
Executed notebooks (reports/executed/) and HTML are build output, never committed.
"""
from __future__ import annotations

import base64
import copy
import datetime as _dt
import html
import json
import os
import re
import shutil
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
NOTEBOOKS = REPO / "notebooks"
TEMPLATES = Path(__file__).resolve().parent / "templates"
RUNS = REPO / "runs"
HEADLINE_MIME = "application/vnd.gluonlab.headline+json"
STALE_LEGEND = ("a case is stale when what its newest record launched has changed since (the kernels its case "
                "compiles for sm_90 today, their grids and launch parameters differ; a refactor that compiles to the "
                "same code is not stale): the page shows it flagged STALE, "
                "and a re-measure replaces it. The count is over what the pages show (each study's newest run, with the cells a "
                "refresh re-measured composed in); stale cases of older runs no section shows are history, counted "
                "as retired")
#: outputs longer than this many text lines / table rows are folded on the page
FOLD_LINES = 40


class ReportBuildError(RuntimeError):
    pass


def _say(msg: str) -> None:
    print(msg, flush=True)


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
            known = ", ".join(q.stem for q in sorted(notebooks_dir.glob("[0-9][0-9]-*.ipynb")))
            raise ReportBuildError(f"notebook {n!r} not found (looked at {p}); known: {known}")
        out.append(p)
    return out


_KERNEL_DIRS: list[str] = []


def _ipc_kernel_manager():
    """The notebook kernels talk over local IPC sockets (not TCP on localhost), in a private folder
    (removed at the end of the build)."""
    from jupyter_client.manager import AsyncKernelManager

    class IPCKernelManager(AsyncKernelManager):
        def __init__(self, **kw):
            super().__init__(**kw)
            self.transport = "ipc"
            d = tempfile.mkdtemp(prefix="gluon-lab-kernel-")
            _KERNEL_DIRS.append(d)
            self.ip = str(Path(d) / "kernel")
    return IPCKernelManager


def _cleanup_kernel_dirs() -> None:
    while _KERNEL_DIRS:
        shutil.rmtree(_KERNEL_DIRS.pop(), ignore_errors=True)


def execute(nb_path: Path, out_path: Path, parameters: dict, kernel_name: str = "python3", timeout: int = 3600):
    import papermill as pm
    from papermill.exceptions import PapermillExecutionError
    out_path.parent.mkdir(parents=True, exist_ok=True)
    # the kernel imports the gluon_lab this build runs (also where the package is not pip-installed)
    old_pp = os.environ.get("PYTHONPATH")
    pkg_root = str(Path(__file__).resolve().parent.parent)
    os.environ["PYTHONPATH"] = pkg_root + (os.pathsep + old_pp if old_pp else "")
    try:
        pm.execute_notebook(str(nb_path), str(out_path), parameters=parameters, kernel_name=kernel_name,
                            cwd=str(nb_path.parent), progress_bar=False, log_output=False,
                            execution_timeout=timeout, start_timeout=180,
                            kernel_manager_class=_ipc_kernel_manager())
    except PapermillExecutionError as e:
        first = (e.source or "").strip().splitlines()[:1]
        raise ReportBuildError(
            f"{nb_path.name}: cell {e.cell_index} (execution count {e.exec_count}"
            f"{', starts ' + repr(first[0][:80]) if first else ''}) raised {e.ename}: {e.evalue}\n"
            f"executed notebook kept at {out_path}") from None
    finally:
        if old_pp is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old_pp


# ----------------------------------------------------------------------------------------------
# what a page shows at a glance, read from the executed notebook

def _tagged(nb, tag):
    return [c for c in nb.cells if c.cell_type == "code" and tag in c.metadata.get("tags", [])]


def headline_png(nb) -> str | None:
    """base64 PNG of the first image output of the cell tagged 'headline' (else None)."""
    for cell in _tagged(nb, "headline"):
        for o in cell.get("outputs", []):
            png = o.get("data", {}).get("image/png")
            if png:
                return png.replace("\n", "")
    return None


def headline_numbers(nb) -> list[dict]:
    """[{'label', 'value'}] from the HEADLINE_MIME outputs of the cell tagged 'headline-numbers'."""
    out = []
    for cell in _tagged(nb, "headline-numbers"):
        for o in cell.get("outputs", []):
            d = o.get("data", {}).get(HEADLINE_MIME)
            if d:
                out.extend(d.get("numbers", []))
    return out


def missing_parts(nb, summ: dict) -> list[str]:
    """What a published page must have and this executed notebook lacks."""
    miss = []
    if not summ.get("n"):
        miss.append(f"no records ({summ.get('where', 'results')})")
    if headline_png(nb) is None:
        miss.append("no headline figure (the cell tagged 'headline' drew nothing)")
    if not _tagged(nb, "headline-numbers"):
        miss.append("no cell tagged 'headline-numbers'")
    elif not headline_numbers(nb):
        miss.append("no headline numbers (the cell tagged 'headline-numbers' computed none)")
    for d in headline_numbers(nb):
        v = str(d.get("value", ""))
        if v.lower().startswith("missing") or re.search(r"\b(nan|inf)\b", v, re.I):
            miss.append(f"headline number {d.get('label')!r}: {v}")
    return miss


def _output_lines(o) -> int:
    if o.get("output_type") == "stream":
        return str(o.get("text", "")).count("\n")
    data = o.get("data", {})
    if "text/html" in data:
        return str(data["text/html"]).count("<tr")
    if "text/plain" in data and "image/png" not in data:
        return str(data["text/plain"]).count("\n")
    return 0


def _coalesce_streams(nb) -> None:
    """One output per run of consecutive stdout (stderr) writes: a print split across kernel messages
    renders as one block, as in Jupyter."""
    for c in nb.cells:
        outs = []
        for o in c.get("outputs", []):
            if (outs and o.get("output_type") == "stream" and outs[-1].get("output_type") == "stream"
                    and outs[-1].get("name") == o.get("name")):
                outs[-1]["text"] = str(outs[-1]["text"]) + str(o["text"])
            else:
                outs.append(o)
        if c.cell_type == "code":
            c.outputs = outs


def _fold_long_outputs(nb) -> None:
    for c in nb.cells:
        if c.cell_type != "code" or "fold" in c.metadata.get("tags", []):
            continue
        n = sum(_output_lines(o) for o in c.get("outputs", []))
        if n > FOLD_LINES:
            c.metadata["gl_fold"] = True
            c.metadata["gl_fold_summary"] = f"long output ({n} lines / rows): click to show"


def _headline_cells(nb, meta: dict, missing: list[str]) -> list:
    """Cells of the "At a glance" block: copies of the outputs the notebook computed."""
    import nbformat
    v4 = nbformat.v4
    cells = []
    intro = ["## At a glance", "", meta.get("summary") or ""]
    if missing:
        intro += ["", "**PARTIAL page: " + "; ".join(html.escape(m) for m in missing) + ".**"]
    cells.append(v4.new_markdown_cell("\n".join(intro)))
    blocks = [("headline-numbers", None), ("headline", None), ("targets", "### Targets"),
              ("takeaways", "### Takeaways")]
    for tag, title in blocks:
        src = _tagged(nb, tag)
        outs = [copy.deepcopy(o) for c in src for o in c.get("outputs", []) if o.get("output_type") != "stream"]
        if tag == "headline":  # the one figure that matters: its first image only
            outs = [o for o in outs if "image/png" in o.get("data", {})][:1]
        if not outs:
            continue
        if title:
            cells.append(v4.new_markdown_cell(title))
        cell = v4.new_code_cell(source="", outputs=outs)
        cells.append(cell)
    for c in cells:
        c.metadata["tags"] = ["gl-headline"]
    cells[0].metadata["tags"].append("gl-headline-start")
    cells[-1].metadata["tags"].append("gl-headline-end")
    return cells


def nav_html(prev: dict | None, nxt: dict | None) -> str:
    """The previous / next links of a page's bar and footer (between <!--GL-NAV--> markers)."""
    e = html.escape
    out = []
    if prev:
        out.append(f'<a class="gl-prev" href="{e(prev["href"])}">&larr; {e(prev["label"])}</a>')
    if nxt:
        out.append(f'<a class="gl-next" href="{e(nxt["href"])}">{e(nxt["label"])} &rarr;</a>')
    return " ".join(out)


_NAV = re.compile(r"<!--GL-NAV-->.*?<!--/GL-NAV-->", re.S)


def relink(page: Path, prev: dict | None, nxt: dict | None) -> None:
    """Rewrite a kept page's previous / next links for the site's current page order."""
    text = page.read_text(encoding="utf-8")
    page.write_text(_NAV.sub(lambda m: f"<!--GL-NAV-->{nav_html(prev, nxt)}<!--/GL-NAV-->", text), encoding="utf-8")


_HEADING = re.compile(r'<h([23]) id="([^"]+)">(.*?)<a class="anchor-link"', re.S)


def _toc(body: str) -> str:
    items = []
    for level, ident, text in _HEADING.findall(body):
        label = re.sub(r"<[^>]+>", "", text).strip()
        items.append(f'<a class="gl-h{level}" href="#{ident}">{label}</a>')
    return "\n".join(items)


def to_html(executed: Path, html_path: Path, banner: str = "", meta: dict | None = None, missing=(),
            prev: dict | None = None, nxt: dict | None = None, footer: str = "") -> None:
    import nbformat
    from nbconvert import HTMLExporter
    nb = nbformat.read(str(executed), as_version=4)
    _coalesce_streams(nb)
    _fold_long_outputs(nb)
    if meta is not None:  # "At a glance" right under the page title
        at = 0
        if nb.cells and nb.cells[0].cell_type == "markdown":
            at = 1
            lines = nb.cells[0].source.splitlines()
            if lines and lines[0].startswith("# ") and any(ln.strip() for ln in lines[1:]):
                import nbformat
                rest = nbformat.v4.new_markdown_cell("\n".join(lines[1:]).strip("\n"))
                nb.cells[0].source = lines[0]
                nb.cells.insert(1, rest)
        nb.cells[at:at] = _headline_cells(nb, meta, list(missing))
    exp = HTMLExporter(template_name="gluonlab", extra_template_basedirs=[str(TEMPLATES)])
    body, _ = exp.from_notebook_node(nb, resources={"gl_banner": banner, "gl_nav": nav_html(prev, nxt),
                                                    "gl_footer": footer})
    body = body.replace("<!--GL-TOC-->", _toc(body), 1)
    html_path.write_text(body, encoding="utf-8")


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
    """GPU(s), newest timestamp, record count, stale count and runs of notebook's records."""
    from . import registry, results
    files = sorted(results_dir.glob(f"*/{notebook}.jsonl"))
    where = f"{results_dir}/<gpu>/{notebook}.jsonl"
    if not files:
        return {"gpus": "no records", "date": "", "n": 0, "stale": 0, "cases": 0, "retired": 0, "runs": 0,
                "where": where}
    # validates every record, physics recomputed (PhysicsError); the archived runs count as runs
    df = results.load(files, on_error="raise", history=True)
    from . import currency
    df = currency.mark_stale(df, registry.current_hash, currency.cache(results_dir))
    gpus = ", ".join(sorted(df["gpu_name"].dropna().unique())) or "?"
    date = str(df["timestamp"].dropna().max())[:10] if len(df) else ""
    live = df[~df["source"].astype(str).str.endswith(".gz")]  # what the pages read
    shown, stale, retired = shown_cases(live)
    return {"gpus": gpus, "date": date, "n": len(df), "cases": shown, "stale": stale,
            "retired": retired, "runs": int(df["run_id"].nunique()), "where": where}


def shown_cases(df) -> tuple[int, int, int]:
    """(cases a reader sees, of them stale, stale cases only in history). A page's sections each show the
    newest run of their study (the grid: records without a study), with cells re-measured later composed
    in (notebook.newest_run); the count is over exactly those records, newest per case. A stale case of an
    older run that no section shows any more is history ("retired"), not counted as shown."""
    from . import notebook, results
    if not len(df):
        return 0, 0, 0
    d = df[df["pattern"] != "ceiling"]
    study = d["config_key"].map(lambda c: json.loads(c).get("study", "") if c else "")
    shown = []
    for _, g in d.groupby(study, sort=True):
        shown.append(results.latest(notebook.newest_run(g)))
    import pandas as pd
    seen = pd.concat(shown) if shown else d.iloc[:0]
    everything = results.latest(d)
    hist = int(everything["stale"].sum()) - int(everything.merge(seen[["source", "line"]], on=["source", "line"])["stale"].sum())
    return len(seen), int(seen["stale"].sum()), max(0, hist)


# ----------------------------------------------------------------------------------------------
# the index

INDEX_TEMPLATE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1.0">
<title>gluon-lab reports</title>
<style>
body {{ font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 0; color: #222; background: #f4f6f9; }}
header {{ background: #fff; border-bottom: 1px solid #ddd; padding: 18px 32px; }}
header h1 {{ margin: 0 0 6px 0; font-size: 24px; }} header p {{ margin: 4px 0; color: #444; max-width: 1100px; }}
.grid {{ display: grid; grid-template-columns: repeat(auto-fill, minmax(520px, 1fr)); gap: 20px; padding: 24px 32px; }}
a.gl-card {{ display: flex; flex-direction: column; background: #fff; border: 1px solid #dde3ea; border-radius: 8px;
  padding: 16px 18px; color: inherit; text-decoration: none; box-shadow: 0 1px 2px rgba(0,0,0,.04); }}
a.gl-card:hover {{ border-color: #7aa7d9; box-shadow: 0 2px 8px rgba(0,0,0,.08); }}
.gl-card h2 {{ margin: 0 0 4px 0; font-size: 18px; color: #0b5cad; }}
.gl-card .summary {{ color: #444; font-size: 14px; margin: 0 0 10px 0; }}
.gl-card ul {{ margin: 0 0 10px 0; padding-left: 18px; font-size: 14px; }} .gl-card li {{ margin: 2px 0; }}
.gl-card img {{ width: 100%; height: auto; border: 1px solid #eee; border-radius: 4px; margin-top: auto; }}
.gl-card .foot {{ font-size: 12px; color: #666; margin-top: 10px; }}
.stale {{ color: #b00; font-weight: 600; }} .partial {{ color: #fff; background: #b00; padding: 1px 6px; border-radius: 3px; }}
.legend {{ font-size: 12px; color: #555; }}
</style></head><body>
<header><h1>gluon-lab reports</h1>
<p>Hopper codegen patterns written in Gluon, measured on real GPUs; each page is an executed notebook and every
number on it comes from a record in <code>results/</code>. Built {built}, mode <code>{mode}</code>.</p>
<p class="legend"><span class="stale">stale</span>: {legend}.</p></header>
<div class="grid">
{cards}
</div></body></html>
"""


def _card(c: dict) -> str:
    e = html.escape
    nums = "".join(f"<li><b>{e(str(d.get('label', '')))}</b>: {e(str(d.get('value', '')))}</li>"
                   for d in c.get("numbers", []))
    img = (f'<img src="{e(c["image"])}" alt="headline figure of {e(c["notebook"])}">' if c.get("image")
           else '<p class="summary">no headline figure</p>')
    stale = (f'<span class="stale">{c["stale"]} of {c.get("cases", "?")} cases stale</span>' if c.get("stale")
             else f'{c.get("cases", "?")} cases, none stale') + (f' ({c["retired"]} retired)' if c.get("retired") else "")
    partial = (f' · <span class="partial">PARTIAL</span> {e("; ".join(c["missing"]))}' if c.get("missing") else "")
    return (f'<a class="gl-card" href="{e(c["notebook"])}.html"><h2>{e(c["title"])}</h2>'
            f'<p class="summary">{e(c.get("summary", ""))}</p><ul>{nums}</ul>{img}'
            f'<div class="foot">{e(c.get("gpus", ""))} · data of {e(c.get("date", "") or "?")} · '
            f'{c.get("n", 0)} records in {c.get("runs", 0)} run(s) · {stale} · built {e(c.get("built", ""))} '
            f'({e(c.get("mode", ""))}){partial}</div></a>')


def write_index(site: Path, built: str, mode: str) -> Path:
    cards = [json.loads(p.read_text()) for p in sorted((site / "pages").glob("*.json"))]
    path = site / "index.html"
    path.write_text(INDEX_TEMPLATE.format(built=html.escape(built), mode=html.escape(mode), legend=html.escape(STALE_LEGEND),
                                          cards="\n".join(_card(c) for c in cards)), encoding="utf-8")
    return path


# ----------------------------------------------------------------------------------------------
# the build

def _kept_pages(out: Path, building: set[str], nbdir: Path, subset: bool) -> list[str]:
    """Pages of the existing site a build keeps: on a subset build, those of other notebooks that
    still exist; a full build keeps none (a removed or renamed notebook's page goes)."""
    if not subset or not (out / "pages").is_dir():
        return []
    return sorted(p.stem for p in (out / "pages").glob("*.json")
                  if p.stem not in building and (out / f"{p.stem}.html").exists()
                  and (nbdir / f"{p.stem}.ipynb").exists())


def _measure_folder(full: bool) -> Path:
    from . import results
    return RUNS / (results.new_run_id() + ("" if full else "-quick")) / "results"


#: what a site folder holds (build output); anything else in out_dir stops the build
SITE_ENTRIES = {"index.html", "build.json", "pages", "img", "executed", "screenshots"}


def _check_out_dir(out: Path, res: Path) -> None:
    """out_dir is replaced whole: it must be a site an earlier build made (or absent / empty), and
    must not hold the repository, the records or the measure runs."""
    for what, p in (("the repository", REPO), ("the records folder", res), ("the measure runs", RUNS)):
        if out == p or out in p.parents:
            raise ReportBuildError(f"out_dir {out} holds {what} ({p}): the site folder is replaced whole; "
                                   "pick a folder of its own, e.g. reports/")
    if out.exists() and not out.is_dir():
        raise ReportBuildError(f"out_dir {out} is a file, not a folder")
    if out.is_dir() and any(out.iterdir()) and not (out / "build.json").exists():
        raise ReportBuildError(f"out_dir {out} is not empty and is not a site built by gluon-lab (no build.json): "
                               "refusing to replace it; empty it or pick another folder")
    if out.is_dir() and (out / "build.json").exists():
        foreign = sorted(p.name for p in out.iterdir()
                         if p.name not in SITE_ENTRIES and not re.fullmatch(r"\d\d-[\w.-]+\.html", p.name))
        if foreign:
            raise ReportBuildError(f"out_dir {out} holds files a build does not own ({', '.join(foreign[:5])}): "
                                   "move them out first (the site folder is replaced whole)")


def _swap_in(stage: Path, out: Path) -> None:
    """Replace out by stage; on failure the previous site is put back."""
    old = out.with_name(f".{out.name}.old-{os.getpid()}")
    had = out.exists()
    if had:
        os.replace(out, old)
    try:
        os.replace(stage, out)
    except BaseException:
        if had and not out.exists():
            os.replace(old, out)
        raise
    if had:
        shutil.rmtree(old, ignore_errors=True)


def _lock(out: Path):
    """An exclusive lock per site folder: two builds of one site run one after the other."""
    import fcntl
    fh = open(out.with_name(f".{out.name}.lock"), "w")
    fcntl.flock(fh, fcntl.LOCK_EX)
    return fh


def build(notebooks=None, out_dir: str | os.PathLike = "reports", mode: str = "auto", quick: bool = False,
          results_dir: str | os.PathLike | None = None, notebooks_dir: str | os.PathLike | None = None,
          kernel_name: str = "python3", partial: bool = False, full: bool = False) -> Path:
    """Execute and render notebooks into out_dir (see the module docstring). Returns index.html."""
    from .notebook import resolve_mode
    if mode not in ("auto", "measure", "replay"):
        raise ValueError(f"mode must be 'auto', 'measure' or 'replay', got {mode!r}")
    if quick and full:
        raise ValueError("quick and full: pick one (full = the full plans in measure mode)")
    run_mode = resolve_mode(mode)
    if run_mode == "replay" and (quick or full):
        _say("note: --quick / --full only shape what a measure run measures; replay shows the records as they are")
    if not str(out_dir).strip():
        raise ReportBuildError("out_dir is empty: name the site folder, e.g. reports/")
    out = Path(out_dir).resolve()
    nbdir = Path(notebooks_dir).resolve() if notebooks_dir else NOTEBOOKS
    paths = _notebook_paths(notebooks, nbdir)
    if not paths:
        raise ReportBuildError(f"no notebooks found in {nbdir}")
    if run_mode == "measure":
        quick = not full
    if results_dir:
        res = Path(results_dir).resolve()
        if run_mode == "measure" and res == (REPO / "results").resolve():
            _say(f"note: measuring straight into the committed {res} (asked for with results_dir)")
    elif run_mode == "measure":  # never silently into the committed results/
        res = _measure_folder(full)
        _say(f"GPU found: measuring the {'full' if full else 'quick'} plans into {res} (the committed results/ are "
             f"not touched). Review the pages, then `python -m gluon_lab adopt {res.parent}` and commit results/.")
    else:
        res = REPO / "results"
    _check_out_dir(out, res)
    out.parent.mkdir(parents=True, exist_ok=True)
    with _lock(out):
        return _build_locked(paths, out, nbdir, res, run_mode, quick, partial, kernel_name, subset=notebooks is not None)


def _build_locked(paths, out: Path, nbdir: Path, res: Path, run_mode: str, quick: bool, partial: bool,
                  kernel_name: str, subset: bool) -> Path:
    building = {p.stem for p in paths}
    kept = _kept_pages(out, building, nbdir, subset)
    order = sorted(building | set(kept))
    titles = {p.stem: notebook_meta(p)["title"] for p in paths}
    for k in kept:
        titles[k] = json.loads((out / "pages" / f"{k}.json").read_text()).get("title", k)
    last = _previous_timings(out)
    est = sum(last.get(p.stem, 60.0) for p in paths)
    _say(f"building {len(paths)} page(s) into {out} ({run_mode}, records from {res}); "
         f"{'last build took' if last else 'estimate'} ~{est:.0f} s" + (f"; keeping {len(kept)} other page(s)" if kept else ""))
    stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.build-", dir=out.parent))
    os.chmod(stage, 0o755)  # mkdtemp makes it 0700: the published site is world-readable like a mkdir
    built = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    timings = {}
    link = lambda k: {"href": f"{k}.html", "label": titles.get(k, k)}  # noqa: E731
    try:
        (stage / "pages").mkdir()
        (stage / "img").mkdir()
        page_mode, extra = run_mode, {}
        if run_mode == "measure":  # measure here (progress on this terminal), then the pages replay that run
            page_mode, extra = "replay", {"gpu": _measure_plans(paths, res, quick)}
        for i, nb in enumerate(paths, 1):
            t0 = time.time()
            _say(f"[{i}/{len(paths)}] {nb.stem}: executing ({page_mode})...")
            executed = stage / "executed" / nb.name
            params = {"mode": page_mode, "quick": False, "results_dir": str(res), **extra}
            execute(nb, executed, params, kernel_name=kernel_name)
            try:
                _render_page(nb, executed, stage, res, order, titles, built, run_mode, partial)
            except ReportBuildError:
                raise
            except Exception as e:  # a page that cannot be rendered names its notebook, no bare traceback
                raise ReportBuildError(f"{nb.name}: rendering the page failed: {type(e).__name__}: {e}") from e
            timings[nb.stem] = round(time.time() - t0, 1)
            _say(f"[{i}/{len(paths)}] {nb.stem}: done in {timings[nb.stem]:.1f} s")
        for k in kept:  # a subset build keeps the other pages of the site, linked into the new order
            for rel in (f"{k}.html", f"pages/{k}.json", f"img/{k}-headline.png", f"executed/{k}.ipynb"):
                if (out / rel).exists():
                    (stage / rel).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(out / rel, stage / rel)
            j = order.index(k)
            relink(stage / f"{k}.html", link(order[j - 1]) if j > 0 else None,
                   link(order[j + 1]) if j + 1 < len(order) else None)
        if (out / "screenshots").is_dir():  # the browser check's shots of pages this build did not touch
            for png in (out / "screenshots").glob("*.png"):
                if png.stem in kept:
                    (stage / "screenshots").mkdir(exist_ok=True)
                    shutil.copy2(png, stage / "screenshots" / png.name)
        write_index(stage, built, run_mode)
        (stage / "build.json").write_text(json.dumps(
            {"built": built, "mode": run_mode, "results_dir": str(res), "notebooks": [p.stem for p in paths],
             "kept": kept, "partial": partial, "seconds": {**last, **timings}}, indent=1))
        _swap_in(stage, out)
    except BaseException as e:
        failed = out.with_name(out.name + ".failed")
        where = _keep_failed(stage, failed)
        if isinstance(e, ReportBuildError):
            msg = str(e).replace(str(stage), str(where)) if where else str(e)
            raise ReportBuildError(f"{msg}\nbuild failed: {out} was left as it was"
                                   + (f"; the failed build is in {where}" if where else "")) from None
        raise
    finally:
        _cleanup_kernel_dirs()
    _say(f"wrote {out / 'index.html'}: {len(paths)} page(s) built, {len(kept)} kept")
    return out / "index.html"


def _keep_failed(stage: Path, failed: Path) -> Path | None:
    """Move a failed build's staging folder to `failed` (a previous failed build of this site is
    replaced only if it is one: a staging copy with pages/); never raises."""
    try:
        if not stage.exists():
            return None
        if failed.exists():
            if failed.is_dir() and (failed / "pages").is_dir():
                shutil.rmtree(failed)
            else:  # not ours: keep the failed build under its staging name
                return stage
        os.replace(stage, failed)
        return failed
    except OSError:
        return stage if stage.exists() else None


def _measure_plans(paths, res: Path, quick: bool) -> str:
    """Run each notebook's measurement plan (the function its measure mode calls) into res; returns
    the GPU slug the pages then replay."""
    from . import device
    from .experiments import EXPERIMENTS
    slug = device.gpu_info()["gpu_slug"]
    for nb in paths:
        if nb.stem not in EXPERIMENTS:
            continue
        t0 = time.time()
        _say(f"measuring {nb.stem}: the {'quick' if quick else 'full'} plan into {res}")
        recs, where = EXPERIMENTS[nb.stem](results_dir=str(res), quick=quick)
        bad = sum(r.passed is False for r in recs)
        _say(f"measured {nb.stem}: {len(recs)} records ({bad} failed) in {time.time() - t0:.0f} s -> {where}")
    return slug


def _previous_timings(out: Path) -> dict:
    try:
        return {k: float(v) for k, v in json.loads((out / "build.json").read_text()).get("seconds", {}).items()}
    except (OSError, ValueError, AttributeError):
        return {}


def _render_page(nb: Path, executed: Path, stage: Path, res: Path, order: list[str], titles: dict, built: str,
                 run_mode: str, partial: bool) -> None:
    import nbformat
    meta = notebook_meta(nb)
    summ = data_summary(res, nb.stem)
    enb = nbformat.read(str(executed), as_version=4)
    missing = missing_parts(enb, summ)
    if missing and not partial:
        raise ReportBuildError(f"{nb.name}: the page lacks what it must show: {'; '.join(missing)}. "
                               "Measure those parts (or pass partial=True / --partial to publish a page marked PARTIAL)")
    i = order.index(nb.stem)
    link = lambda k: {"href": f"{k}.html", "label": titles.get(k, k)}  # noqa: E731
    prev = link(order[i - 1]) if i > 0 else None
    nxt = link(order[i + 1]) if i + 1 < len(order) else None
    stale = (f'<span class="gl-stale" title="{html.escape(STALE_LEGEND)}">{summ["stale"]} of {summ["cases"]} cases '
             f'stale</span>' if summ["stale"] else f"{summ['cases']} cases, none stale") + \
        (f" ({summ['retired']} retired)" if summ.get("retired") else "")
    part = ' <span class="gl-partial">PARTIAL</span>' if missing else ""
    banner = (f"data: {html.escape(summ['gpus'])} · {summ['date'] or 'no date'} · {summ['n']} records in "
              f"{summ.get('runs', 0)} run(s) · {stale}{part}")
    footer = html.escape(f"built {built} in mode {run_mode} from {summ['where']}; {STALE_LEGEND}")
    to_html(executed, stage / f"{nb.stem}.html", banner, meta=meta, missing=missing, prev=prev, nxt=nxt,
            footer=footer)
    png = headline_png(enb)
    image = None
    if png:
        (stage / "img" / f"{nb.stem}-headline.png").write_bytes(base64.b64decode(png))
        image = f"img/{nb.stem}-headline.png"
    card = {"notebook": nb.stem, "title": meta["title"], "pattern": meta["pattern"], "summary": meta["summary"],
            "numbers": headline_numbers(enb), "image": image, "missing": missing, "built": built, "mode": run_mode,
            **{k: summ[k] for k in ("gpus", "date", "n", "cases", "stale", "retired", "runs")}}
    (stage / "pages" / f"{nb.stem}.json").write_text(json.dumps(card, indent=1))


def adopt(run_folder, results_dir: str | os.PathLike | None = None,
          replace_artifacts: bool = False, skipped: list | None = None,
          archived: list | None = None) -> list[tuple[Path, int]]:
    """Append the records of a measure build (`runs/<run>/results`, or the run folder itself) to the
    committed results/; returns [(store, records appended)]. run_folder may be a list of folders: the shards
    of one sharded run (`bench --shard I/N` on each host), merged into one run.

    Every store is read and validated first (nothing is appended if one is bad); the shards of every run among
    the folders must be whole (shard.check_shards: none missing, none twice); a run already in its target
    store is refused (adopting twice would duplicate it), and so is a source that is the target. Non-record
    stores (`results.NON_RECORD_STORES`, e.g. sanitizer.jsonl) are appended line by line under the store's
    lock. Artifacts (`*.json`: timelines, Inductor code) are copied only where results/ has none, unless
    replace_artifacts; the ones left alone go to `skipped`. The run ids already there include the archived
    ones (<notebook>.history.jsonl.gz). Last, each store appended to is archived (archive.archive_store: the
    runs the new records supersede move to its history file); the plans go to `archived`."""
    from . import archive
    import fcntl

    from . import results
    from .shard import check_shards
    skipped = [] if skipped is None else skipped
    folders = [run_folder] if isinstance(run_folder, (str, os.PathLike)) else list(run_folder)
    if not folders:
        raise ValueError("run_folder: name at least one folder to adopt")
    dst = Path(results_dir) if results_dir else REPO / "results"
    srcs = []
    for rf in folders:
        src = Path(rf)
        src = src / "results" if (src / "results").is_dir() else src
        if not src.is_dir():
            raise FileNotFoundError(f"run_folder {str(rf)!r}: no such folder (expected runs/<run>/results)")
        if src.resolve() == dst.resolve():
            raise ValueError(f"run_folder {src} is the results folder itself: nothing to adopt")
        if src.resolve() in [s.resolve() for s in srcs]:
            raise ValueError(f"run_folder {src} is named twice")
        srcs.append(src)
    plan = []  # (source, target, records or None for a non-record store)
    by_folder: dict = {}
    for src in srcs:
        for f in sorted(src.rglob("*.jsonl")):
            target = dst / f.relative_to(src)
            if f.name in results.NON_RECORD_STORES:
                plan.append((f, target, None))
                continue
            recs, _ = results.read_records(f, on_error="raise")
            by_folder.setdefault(src, []).extend(recs)
            plan.append((f, target, recs))
    check_shards(by_folder)
    for target in {t for _, t, recs in plan if recs is not None}:
        if target.exists() or results.history_path(target).exists():
            have = {r.run_id for r in results.read_records(target, on_error="raise", history=True)[0]}
            again = sorted({r.run_id for _, t, recs in plan if t == target and recs is not None for r in recs} & have)
            if again:
                raise ValueError(f"{target} already holds run(s) {', '.join(again)}: adopting "
                                 f"{', '.join(str(f) for f, t, _ in plan if t == target)} again would duplicate its records")
    done = []
    for f, target, recs in plan:
        if recs is not None:
            done.append((target, results.append_records(target, recs)))
            continue
        lines = [ln if ln.endswith("\n") else ln + "\n" for ln in f.read_text(encoding="utf-8").splitlines(True) if ln.strip()]
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "a+", encoding="utf-8") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            fh.seek(0, os.SEEK_END)
            if fh.tell():
                fh.seek(fh.tell() - 1)
                if fh.read(1) != "\n":
                    fh.write("\n")
            fh.writelines(lines)
        done.append((target, len(lines)))
    for src in srcs:
        _adopt_artifacts(src, dst, replace_artifacts, skipped, done)
    if not done and not skipped:
        raise FileNotFoundError(f"{', '.join(map(str, srcs))}: no records (*.jsonl) to adopt")
    for target in dict.fromkeys(t for _, t, recs in plan if recs is not None):  # last: the artifacts pin their runs
        plan_ = archive.archive_store(target)
        if archived is not None:
            archived.append(plan_)
    return done


def _adopt_artifacts(src: Path, dst: Path, replace_artifacts: bool, skipped: list, done: list) -> None:
    for f in sorted(src.rglob("*.json")):  # artifacts (timelines, Inductor code): whole files, not appended
        target = dst / f.relative_to(src)
        if target.exists() and not replace_artifacts:
            skipped.append(target)  # a quick run's artifact must not replace a full run's
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(f, target)
        done.append((target, 0))
