"""Small helpers the notebooks share: mode resolution, loading records for one notebook, provenance
and ceilings tables, and markdown takeaways. Kept here so the notebooks read as prose + calls."""
from __future__ import annotations

from pathlib import Path

from . import currency, device, registry, results


def resolve_mode(mode: str) -> str:
    """'auto' -> 'measure' on an sm_90+ GPU, else 'replay'. 'measure' without one is an error."""
    if mode not in ("auto", "measure", "replay"):
        raise ValueError(f"mode must be 'auto', 'measure' or 'replay', got {mode!r}")
    if mode == "auto":
        return "measure" if device.is_hopper_or_newer() else "replay"
    if mode == "measure":
        device.require_hopper("mode='measure'")
    return mode


def gpu_slug(gpu: str | None, run_mode: str, default: str = "h200") -> str:
    """Which results/<slug>/ to show: the GPU present when measuring, else `gpu` or the default."""
    if run_mode == "measure":
        return device.gpu_info()["gpu_slug"]
    return device.gpu_slug(gpu) if gpu else default


def no_records():
    """An empty frame with the columns of a stale-marked load."""
    import pandas as pd
    df = results.load([], on_error="raise")
    df["stale"] = pd.Series([], dtype=bool)
    return df


def load(results_dir, slug: str, notebook: str, newest_only: bool = True, history: bool = False):
    """Records of one notebook on one GPU, stale-marked; newest record per case by default.
    history: also its superseded runs (<notebook>.history.jsonl.gz, results.load(history=True));
    the pages read the live store only, which holds every run they show (archive.live_runs)."""
    path = results.store_path(results_dir, slug, notebook)
    if not Path(path).exists() and not (history and results.history_path(path).exists()):
        return no_records()
    df = currency.mark_stale(results.load(path, on_error="raise", history=history), registry.current_hash,
                             currency.cache(results_dir))
    return results.latest(df) if newest_only else df


def provenance_table(df, archived=None):
    """One row per run: GPU, versions, commit, records, stale records, first and last timestamp.
    archived: records of the superseded runs (notebook.archived_records), listed too, with a column
    "archived" saying which runs are in the history file and which in the live store."""
    import pandas as pd
    if archived is not None and len(archived):
        df = pd.concat([df, archived], ignore_index=True) if len(df) else archived
    if not len(df):
        return pd.DataFrame()
    cols = ["run_id", "gpu_name", "driver", "cuda", "torch", "triton", "python", "git_commit"]
    g = df.groupby("run_id", dropna=False)
    t = g[cols[1:]].first()
    t["records"] = g.size()
    t["stale"] = g["stale"].sum()
    t["first"] = g["timestamp"].min()
    t["last"] = g["timestamp"].max()
    if archived is not None and len(archived):
        t["archived"] = t.index.isin(set(archived["run_id"]))
    return t.reset_index()


def archived_records(results_dir, slug: str, notebook: str):
    """The records of the notebook's superseded runs (<notebook>.history.jsonl.gz), checked like the
    store's and stale-marked; an empty frame when nothing is archived."""
    path = results.history_path(results.store_path(results_dir, slug, notebook))
    if not path.exists():
        return no_records()
    return currency.mark_stale(results.load(path, on_error="raise"), registry.current_hash, currency.cache(results_dir))


def ceilings(df) -> dict | None:
    """Ceilings of the newest run in df: {'copy_gbps', 'matmul_tflops', 'run_id'} (None if none)."""
    c = df[df["pattern"] == "ceiling"]
    copy = c[(c["op"] == "copy") & (c["M"].isna())]
    mm = c[c["op"] == "matmul"]
    if not len(copy) or not len(mm):
        return None
    copy = copy.sort_values("timestamp").iloc[-1]
    mm = mm.sort_values("timestamp").iloc[-1]
    return {"copy_gbps": float(copy["gbps"]), "matmul_tflops": float(mm["tflops"]), "run_id": copy["run_id"],
            "copy_bytes": int(copy["bytes"]), "matmul_shape": f'{mm["M"]}x{mm["N"]}x{mm["K"]}',
            "copy_timer": copy["timer"], "matmul_timer": mm["timer"]}


#: How far one GPU's ceiling may sit from the median of its run's GPUs before its cells are flagged: the upper end
#: of what one H200 shows against itself (the same config timed twice in one run moves ±1% at the median, up to
#: ±6%: the 04 gemm-shapes sweep's same-config pairs, analysis.gemm.same_config_spread).
DEVICE_NOISE = 0.06


def _multi_gpu_runs(df):
    """run_id -> how many GPUs (gpu_uuid) measured it, for the runs measured on several."""
    import pandas as pd
    if not len(df) or "gpu_uuid" not in df or df["gpu_uuid"].isna().all():
        return pd.Series(dtype="int64")
    n = df[df["gpu_uuid"].notna()].groupby("run_id")["gpu_uuid"].nunique()
    return n[n > 1]


def device_disagreement(df, noise: float = DEVICE_NOISE):
    """Runs measured on several GPUs (their records' gpu_uuid; GPUs of one model are one device class): per GPU
    of such a run, its ceilings (copy GB/s, bf16 matmul TFLOP/s) against the median over the run's GPUs, and
    the cells (dtype x shape) it measured. One row per (run, GPU, ceiling) off by more than `noise`; an empty
    frame when every GPU agrees or no run used several."""
    import pandas as pd
    cols = ["run_id", "gpu_index", "gpu_uuid", "ceiling", "value", "run median", "off by", "cells measured there"]
    rows = []
    for run in _multi_gpu_runs(df).index:
        g = df[(df["run_id"] == run) & df["gpu_uuid"].notna()]
        c = g[g["pattern"] == "ceiling"]
        for name, sel, col in (("copy GB/s", (c["op"] == "copy") & c["M"].isna(), "gbps"),
                               ("matmul TFLOP/s", c["op"] == "matmul", "tflops")):
            per = c[sel].groupby("gpu_uuid")[col].median()
            if len(per) < 2:
                continue
            med = float(per.median())
            for uuid, v in per.items():
                off = float(v) / med - 1
                if abs(off) > noise:
                    mine = g[(g["gpu_uuid"] == uuid) & (g["pattern"] != "ceiling")]
                    rows.append({"run_id": run, "gpu_index": g.loc[g["gpu_uuid"] == uuid, "gpu_index"].iloc[0],
                                 "gpu_uuid": uuid, "ceiling": name, "value": round(float(v), 1),
                                 "run median": round(med, 1), "off by": f"{100 * off:+.1f}%",
                                 "cells measured there": mine.groupby(["dtype", "config_key"], dropna=False).ngroups})
    return pd.DataFrame(rows, columns=cols)


def device_note(df, noise: float = DEVICE_NOISE) -> str | None:
    """A page's line on runs measured over several GPUs: how many, and any GPU whose ceilings disagree with the
    others' by more than the noise floor (its cells are named by the table device_disagreement returns)."""
    multi = _multi_gpu_runs(df)
    if not len(multi):
        return None
    bad = device_disagreement(df, noise)
    head = (f"{len(multi)} run(s) here were measured on several GPUs of one model (up to {int(multi.max())}; "
            "each cell on one GPU, its peers beside it).")
    if not len(bad):
        return head + f" Their ceilings agree within the noise floor (±{100 * noise:.0f}%)."
    flagged = "; ".join(f"run {r.run_id} GPU {r.gpu_index}: {r.ceiling} {r.value} vs {r['run median']} ({r['off by']}), "
                        f"{r['cells measured there']} cells" for _, r in bad.iterrows())
    return (head + f" **Flagged: GPUs whose ceilings sit more than ±{100 * noise:.0f}% from their run's median** — "
            f"compare their cells with care: {flagged}.")


def missing_note(df, what: str) -> str | None:
    if len(df):
        return None
    return (f"**No records for {what}.** Nothing is drawn from imagination: run this notebook with "
            "`mode='measure'` on an sm_90+ GPU (or `python -m gluon_lab bench …` there) and commit the records.")


def newest_run(df, mask=None, require=()):
    """Records of the newest run (by timestamp) among those selected by mask: one run's numbers
    are compared side by side, never numbers from different runs within a cell.

    require: variants the run must hold among the selected records (e.g. the kernel a section is
    about plus a baseline); a newer run that re-measured only part of a section is skipped in
    favour of the newest run that holds all of them. No run holds them all -> the newest run.

    Cells re-measured later (`python -m gluon_lab refresh` re-measures only the cells whose records
    went stale, each cell whole: every variant at that shape) replace that cell of the run: a cell
    (dtype and shape) is taken from the newest run that measured it with every variant the base run
    holds there, so a page never shows a stale cell where a newer current one exists, and every
    ratio within a cell stays same-run. Other cells keep the base run's records."""
    sub = df if mask is None else df[mask]
    if not len(sub):
        return sub
    newest_first = list(sub.groupby("run_id")["timestamp"].max().sort_values(ascending=False, kind="stable").index)
    need = set(require)
    ok = [r for r in newest_first if need <= set(sub.loc[sub["run_id"] == r, "variant"])]
    if not ok:
        return sub[sub["run_id"] == newest_first[0]]
    cells = {r: set(_cells(sub[sub["run_id"] == r])) for r in ok}
    # the base: the newest run that is not a patch (a run whose cells are a strict subset of an older run's:
    # what refresh measures) of an older one
    base = next((r for i, r in enumerate(ok) if not any(cells[r] < cells[o] for o in ok[i + 1:])), ok[0])
    return _with_newer_cells(sub, base, newest_first)


def _cells(d):
    """(dtype, shape...) of each record: the cell a page compares variants in."""
    import pandas as pd
    from .results import SHAPE_COLUMNS
    cols = [c for c in ("dtype", *SHAPE_COLUMNS) if c in d.columns]
    return pd.Series(list(zip(*[d[c].astype(object).where(d[c].notna(), None) for c in cols])), index=d.index)


def _with_newer_cells(sub, base, newest_first):
    """The base run's records, each cell replaced by a newer run's where that run measured the cell with
    every variant the base holds there (refresh runs)."""
    import pandas as pd
    newer = list(newest_first[:list(newest_first).index(base)])
    base_rows = sub[sub["run_id"] == base]
    if not newer:
        return base_rows
    cell = _cells

    base_cells = cell(base_rows)
    want = {c: set(base_rows.loc[base_cells == c, "variant"]) for c in set(base_cells)}
    take: dict = {}
    for run in reversed(newer):  # oldest first: a newer run overrides an older one
        rows = sub[sub["run_id"] == run]
        cells = cell(rows)
        for c in set(cells) & set(want):
            if want[c] <= set(rows.loc[cells == c, "variant"]):
                take[c] = run
    if not take:
        return base_rows
    keep = base_rows[~base_cells.isin(list(take))]
    parts = [keep]
    for run in set(take.values()):
        rows = sub[sub["run_id"] == run]
        cells = cell(rows)
        parts.append(rows[cells.isin([c for c, r in take.items() if r == run])])
    return pd.concat(parts).sort_index()


def copy_reference_table(df, run: str, big_elems: int = 64 * 2**20):
    """The bandwidth reference of each (M, N) cell of one run, and that run's ceilings: the per-shape
    copy (y.copy_(x) timed like the kernels), or where M*N >= big_elems the larger of it and the
    run's session copy (at >= 512 MiB tensors the graph-timed per-shape copy_ fell to ~65% of the
    session copy on the H200 while norms moved their bytes faster). Returns (table, ceilings)."""
    import numpy as np
    import pandas as pd
    c = df[(df.op == "copy") & (df.run_id == run) & df.M.notna().astype(bool)]
    c = c.sort_values("timestamp").groupby(["M", "N"]).tail(1).set_index(["M", "N"])
    ce = ceilings(df[df.run_id == run])
    t = pd.DataFrame({"per-shape copy GB/s": c.gbps, "timer": c.timer, "tensor MiB": c.bytes / 2 / 2**20})
    t["session copy GB/s"] = ce["copy_gbps"] if ce else np.nan
    big = np.array([m * n >= big_elems for m, n in t.index], dtype=bool)
    t["reference GB/s"] = np.where(big, t[["per-shape copy GB/s", "session copy GB/s"]].max(axis=1), t["per-shape copy GB/s"])
    t["reference"] = np.where(~big, "per-shape copy",
                              np.where(t["per-shape copy GB/s"] >= t["session copy GB/s"].fillna(0), "per-shape copy",
                                       "session copy"))
    return t, ce


def load_sanitizer(path):
    """ci/sanitize.py's lines (append-only: the newest per (kernel, tool) wins), with the summary
    lines joined, the error/hazard count as the summary states it ("1 hazard", "0 errors"), the
    float64 check of the sanitized run, and `clean` (exit code 0 and a count of 0).
    Returns (table, number of superseded lines); an empty table when the file is absent."""
    import json
    import re
    from pathlib import Path
    import pandas as pd
    path = Path(path)
    if not path.exists():
        return pd.DataFrame(), 0
    san = pd.DataFrame([json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()])
    if not len(san):
        return san, 0
    n_all = len(san)
    san = san.groupby(["kernel", "tool"], sort=False).tail(1).reset_index(drop=True)
    san["summary"] = san["summary"].map(lambda s: " | ".join(s) if isinstance(s, list) else s)
    san["errors/hazards (summary)"] = san["summary"].map(
        lambda s: sum(int(n) for n, _ in re.findall(r"(\d+) (error|hazard)s?\b(?! displayed)", s or "")) if s else None)
    san["check passed"] = san["check"].map(
        lambda c: ("passed" if c.get("passed") else "FAILED") if isinstance(c, dict) else "no check line")
    san["clean"] = (san.exit_code == 0) & (san["errors/hazards (summary)"].fillna(1) == 0)
    return san, n_all - len(san)


def section_line(g, what: str, with_files: bool = False) -> str:
    """Markdown: which run a section's records come from, how many passed, which timers."""
    from pathlib import Path
    timers = ", ".join(sorted(g["timer"].dropna().unique())) or "none"
    files = f" (from `{', '.join(sorted({Path(s).name for s in g['source'].dropna()}))}`)" if with_files else ""
    return (f"**{what}**: run `{g.run_id.iloc[0]}`{files}, {len(g)} records, {int(g.passed.astype(bool).sum())} passed, "
            f"timer(s): {timers}")


def stale_table(df):
    """One row per (run, op, variant) with stale records: how many, why (what changed in what their case
    launches, gluon_lab.currency), the source hash they were measured with and today's (empty when
    nothing is stale)."""
    import pandas as pd
    if not len(df) or "stale" not in df or not df["stale"].any():
        return pd.DataFrame()
    s = df[df["stale"].astype(bool)]
    if "stale_why" not in s:
        s = s.assign(stale_why="source changed")
    t = s.groupby(["run_id", "op", "variant", "kernel_source_hash"]).agg(
        **{"stale records": ("stale", "size"),
           "why": ("stale_why", lambda w: "; ".join(sorted({str(x) for x in w.dropna()})[:3]))}).reset_index()

    def now(op, variant):
        try:
            return registry.current_hash(op, variant)
        except KeyError:
            return "<removed>"

    t["current source hash"] = [now(o, v) for o, v in zip(t["op"], t["variant"])]
    git = s.groupby("run_id")["git_commit"].first()
    t["measured at commit"] = t["run_id"].map(git)
    return t


def stale_note(df, what: str) -> str | None:
    """Markdown warning when records shown for `what` are stale (None when none is)."""
    if not len(df) or "stale" not in df or not df["stale"].any():
        return None
    s = df[df["stale"].astype(bool)]
    vs = ", ".join(sorted({f"{o}/{v}" for o, v in zip(s["op"], s["variant"])}))
    return (f"**STALE:** {len(s)} of the {len(df)} records of {what} ({vs}) were measured with code whose launch has "
            "changed since (what their case compiles and launches today differs, or the source changed and "
            "no launch was recorded). They show the code as it was "
            f"at commit {', '.join(sorted(s['git_commit'].dropna().unique())) or '?'}, not as it is now; re-measure "
            "before drawing conclusions about the current kernel.")


def config_value(df, key, default=None):
    import json
    return df["config_key"].map(lambda c: json.loads(c).get(key, default))


def inductor_kernels(path):
    """Unique Inductor-generated Triton kernels recorded on the GPU (results/<gpu>/*.inductor-kernels.json).

    The 2026-11-29 capture listed every Inductor kernel loaded in the benchmark process (all grid
    shapes, rms / add+rms / layer), so kernels are classified here by their code: three reduction
    loops = LayerNorm; a third input pointer = add+RMSNorm; else RMSNorm. 'global reads of the
    reused row' counts the loops that load the row (x, or the x + residual sum written back)."""
    import json
    import re
    import pandas as pd
    p = Path(path)
    if not p.exists():
        return pd.DataFrame()
    d = json.loads(p.read_text())
    rows, seen = [], set()
    for entries in d["kernels"].values():
        for e in entries:
            src = e.get("source") or ""
            n = re.search(r"r0_numel = (\d+)", src)
            m = re.search(r"xnumel = (\d+)", src)
            if not n or src in seen:
                continue
            seen.add(src)
            loops = src.count("for r0_offset in")
            header = src.split("\n", 1)[0]
            op = "layer_norm" if loops == 3 else "add_rms_norm" if "in_ptr2" in header else "rms_norm"
            reads = len(re.findall(r"tl\.load\(in_ptr0", src)) + len(re.findall(r"tl\.load\(out_ptr0", src))
            rows.append({"op": op, "kernel": e.get("name"), "M": int(m.group(1)) if m else None, "N": int(n.group(1)),
                         "reduction loops": loops, "global reads of the reused row": reads,
                         "eviction hints": ", ".join(re.findall(r"tl\.load\((?:in|out)_ptr0[^\n]*eviction_policy='(\w+)'",
                                                                src)),
                         "source": src})
    return pd.DataFrame(rows)


def graph_output_caveat(df, l2_bytes: int = 50 * 2**20):
    """Markdown caveat for schema-1 graph-timed records of variants that allocate their outputs
    (torch, inductor, liger...): their K captured calls may have shared one output buffer, which can
    stay in L2 when the output is small. None when no record is affected."""
    from .registry import get_variant
    if not len(df) or "schema" not in df:
        return None

    def allocates(row):
        try:
            return not get_variant(row["op"], row["variant"]).supports_out
        except (ValueError, KeyError):
            return False

    sub = df[(df["schema"] == 1) & (df["timer"] == "cudagraph") & (df["pattern"] != "ceiling")]
    if not len(sub):
        return None
    sub = sub[sub.apply(allocates, axis=1)]
    if not len(sub):
        return None
    small = sub[(sub["M"] * sub["N"] * 2) <= l2_bytes]
    cells = sorted({(int(r.M), int(r.N)) for r in small.itertuples()})
    return ("**Timer caveat (found after these runs, fixed in the code since):** "
            f"{len(sub)} graph-timed records of variants that allocate their output "
            f"({', '.join(sorted(sub['variant'].unique()))}) were captured without keeping the outputs alive, so "
            "the K rotated calls may have written one output buffer. Inputs were rotated (cold), outputs maybe not: "
            "where the output fits in L2 this can favour those baselines"
            + (f" — cells with an output of at most {l2_bytes >> 20} MB: " + ", ".join(f"{m}x{n}" for m, n in cells)
               if cells else "; no cell here has an output that small")
            + ". The next H200 run re-measures them with distinct output buffers (schema 2).")
