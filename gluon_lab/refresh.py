"""`python -m gluon_lab refresh [NOTEBOOK...] [--budget-s S]`: re-measure what the pages show stale or
missing, and nothing else.

A notebook's plan (``experiments``) lists its cases; a case is *due* when no current record of it exists
(no record at all, or its newest record is stale by ``currency``: what its case launches changed). Due
cases are re-measured together with their **cell** — every plan case at the same dtype, shape and
study (every op and variant there, the per-shape copy too) (the peers a page divides by, so a ratio stays same-run) — in one measurement session per
notebook (ceilings first, as every run). Order: cells a page shows stale before cells never measured; within each, the
plan's grid cells (no study: the cells the headline numbers and targets are computed from) before its
studies, each in plan order. Records are appended per
case, so a call cut at its time limit keeps what it measured and the next call starts where it stopped:
the records already in the output folder count (``--results-dir``, read beside the repository's
``results/``). ``--budget-s`` starts no cell whose estimate would end past the budget.

Pages compose cells across runs (``notebook.newest_run``): a refreshed cell replaces the stale one, the
other cells keep their run. What the plan functions capture besides cases (timelines, Inductor code,
00's dispatch study and decoder block) is not a case: ``refresh`` says when such records are stale and
names the ``bench --parts`` that re-measures them.
"""
from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

# per-notebook: (plan cases of the full plan, parts measured by functions other than case sweeps)
SPECIAL_PARTS = {"00-ceilings": {"dispatch": '"study": "dispatch"', "block": '"study": "inductor-rewrite"',
                                 "auto-check": '"study": "auto-check"'}}
from .shard import estimate_s  # noqa: E402 - the estimate a split uses too


from .experiments import NOTEBOOKS  # noqa: E402,F401 - the plans live with the plans
from .experiments import notebook_cases as plan_cases  # noqa: E402


STUDY_META = ("study", "repeat", "bracket", "heuristic", "call", "cudnn_benchmark", "what")


def study_knobs() -> dict:
    """study -> the knobs its plan cases set, over every notebook's plan: a study record pins those and takes
    the heuristic for the rest, as its case does (currency.request_of; `launches` keeps the table in the
    launch-hash cache, so reading a record's staleness needs no plan)."""
    out: dict = {}
    for nb in NOTEBOOKS:
        for c in plan_cases(nb):
            cfg = c.get("config") or {}
            if "study" in cfg:
                out.setdefault(cfg["study"], set()).update(k for k in cfg if k not in STUDY_META)
    return {k: frozenset(v) for k, v in out.items()}


def _shape_key(shape: dict) -> str:
    return json.dumps(shape, sort_keys=True)


def predicted_config(case: dict) -> dict:
    """The config a record of this case will carry (bench.Session.measure: the case's config, the
    resolved config's fields on top)."""
    from . import registry
    cfg = dict(case.get("config") or {})
    if case.get("op") == "copy":
        return cfg
    v = registry.get_variant(case["op"], case["variant"])
    if v.configure is not None:
        try:
            obj = v.resolve(case["shape"], case["dtype"], cfg)
            if obj is not None:
                cfg = {**cfg, **dataclasses.asdict(obj)}
        except (ValueError, TypeError):
            pass  # the record will be a failed one; its case is still this
    if case.get("call") == "api":
        cfg["call"] = "api"
    return json.loads(json.dumps(cfg))  # as a record stores it: tuples are lists (group_norm's threads / warps)


def cell_of(case: dict) -> tuple:
    """(dtype, shape, study): every op and variant a page compares at one shape, the per-shape copy too."""
    study = (case.get("config") or {}).get("study")
    return (case["dtype"], _shape_key({k: v for k, v in case["shape"].items() if k != "bytes"}), study)


def _record_index(df) -> dict:
    """(op, variant, dtype, shape, study) -> [(config, timer, stale, run_id)] of df's records, newest first."""
    if not len(df):
        return {}
    d = df.sort_values(["timestamp", "run_id"], kind="stable", ascending=False)
    out: dict = {}
    for r in d[["op", "variant", "dtype", "shape", "config", "timer", "stale", "run_id"]].itertuples(index=False):
        cfg = {k: v for k, v in (r.config or {}).items() if k != "sm_clock_mhz"}
        out.setdefault((r.op, r.variant, r.dtype, _shape_key(r.shape), cfg.get("study")), []).append(
            (cfg, r.timer, bool(r.stale), r.run_id))
    return out


def newest_state(case: dict, index: dict) -> bool | None:
    """The newest record of a case: True stale, False current, None no record (newest_record: its run too)."""
    return newest_record(case, index)[0]


def newest_record(case: dict, index: dict) -> tuple:
    """(stale, run_id) of the newest record of a case ((None, None): no record). A record is the case's
    when the knobs the case sets agree, its timer fits, and every config field both have agrees (a config
    field added since, e.g. a new knob at its default, does not make an older record another case)."""
    cfg = case.get("config") or {}
    key = (case["op"], case.get("variant", "torch"), case["dtype"], _shape_key(case["shape"]), cfg.get("study"))
    cands = index.get(key)
    if not cands:
        return None, None
    pred = predicted_config(case)
    timers = None if case.get("timer") in (None, "auto") else {case["timer"]}
    grid = "study" not in cfg
    for rc, timer, stale, run_id in cands:
        if timers is not None and timer not in timers:
            continue
        if any(rc.get(k) != v for k, v in cfg.items()):
            continue
        if not grid and any(pred[k] != v for k, v in rc.items() if k in pred):
            continue
        return stale, run_id
    return None, None


def due(notebook: str, df) -> tuple[list[list[dict]], dict]:
    """(cells to measure, in order, each a list of cases; counts). df: the notebook's records, stale-marked."""
    index = _record_index(df[df["pattern"] != "ceiling"] if len(df) else df)
    cases = plan_cases(notebook)
    cells: dict = {}
    for c in cases:
        cells.setdefault(cell_of(c), []).append(c)
    n_missing = n_stale = n_split = 0
    todo = []
    for key, cs in cells.items():
        hit = has_stale = False
        runs = set()
        for c in cs:
            if c.get("op") == "copy":
                continue
            state, run_id = newest_record(c, index)
            if state is None:
                n_missing += 1
                hit = True
            elif state:
                n_stale += 1
                hit = has_stale = True
            else:
                runs.add(run_id)
        split = not hit and len(runs) > 1  # current, but its newest records come from several runs: the
        # page's ratios and auto's evidence (gluon_lab.selection: same-run cells only) need the cell in one run
        n_split += split
        if hit or split:
            todo.append((split, not has_stale, key[2] is not None, len(todo), cs))
    # cells a page shows stale, then cells never measured, then split ones; the grid (no study) before the
    # studies; plan order
    todo.sort(key=lambda t: t[:4])
    cells_out = [cs for *_, cs in todo]
    return cells_out, {"cases": len(cases), "cells": len(cells), "missing": n_missing, "stale": n_stale,
                       "split": n_split, "cells_due": len(cells_out), "cases_due": sum(len(c) for c in cells_out)}


def special_stale(notebook: str, df) -> list[str]:
    """The non-case parts of a notebook whose newest records are stale (re-measured by bench --parts)."""
    out = []
    for part, marker in SPECIAL_PARTS.get(notebook, {}).items():
        d = df[df["config_key"].str.contains(marker, regex=False)] if len(df) else df
        if len(d):
            newest = d[d["run_id"] == d.sort_values("timestamp")["run_id"].iloc[-1]]
            if newest["stale"].any():
                out.append(part)
            elif part == "auto-check":  # it checks one table: stale once the table (its seed) changed
                from . import selection
                if {(c or {}).get("table_seed") for c in newest["config"]} != {selection.load_table().get("seed")}:
                    out.append(part)
    return out


def load_marked(notebook: str, results_dirs: list, gpu: str = "h200"):
    """The notebook's records from every folder given (repository results/ and the refresh's output),
    stale-marked by today's code."""
    from . import currency, registry, results
    paths = [Path(d) / gpu / f"{notebook}.jsonl" for d in results_dirs]
    paths = [p for p in paths if p.exists()]
    df = results.load(paths, on_error="raise") if paths else results.load([], on_error="raise")
    return currency.mark_stale(df, registry.current_hash, currency.cache(results_dirs[0]))


def plan(notebooks: list, results_dirs: list, gpu: str = "h200", log=print) -> dict:
    """{notebook: (cells, counts, special parts)} without measuring (the CPU can say what a refresh would do)."""
    out = {}
    for nb in notebooks:
        df = load_marked(nb, results_dirs, gpu)
        cells, counts = due(nb, df)
        sp = special_stale(nb, df)
        out[nb] = (cells, counts, sp)
        log(f"{nb}: {counts['cases']} plan cases in {counts['cells']} cells; due: {counts['missing']} missing, "
            f"{counts['stale']} stale, {counts['split']} cells current but split over runs -> {counts['cases_due']} "
            f"cases in {counts['cells_due']} cells "
            f"(~{estimate_s(cells):.0f} s)" + (f"; stale non-case parts: {sp} (bench {nb} --parts {','.join(sp)})"
                                                if sp else ""))
    return out


def run(notebooks: list, results_dir: str, budget_s: float | None = None, dry_run: bool = False,
        repo_results: str | None = None, log=print) -> int:
    """Measure what is due (GPU). Returns 0 when everything due was measured and passed, 1 otherwise."""
    from . import device, shard
    from .bench import Session
    from .currency import default_results_dir
    if shard.SETTINGS.shard is not None and shard.SETTINGS.shard.count > 1:
        raise ValueError(f"refresh measures what is due on this host, not a shard of a job array "
                         f"({shard.ENV['shard']}={shard.SETTINGS.shard} is set: unset it, or use bench --shard)")
    dirs = [str(repo_results or default_results_dir()), results_dir]
    gpu = device.gpu_info()["gpu_slug"] if not dry_run and device.cuda_available() else "h200"
    plans = plan(notebooks, dirs, gpu, log=log)
    if dry_run:
        return 0
    t0 = time.time()
    rc = 0
    for nb, (cells, counts, _sp) in plans.items():
        if not cells:
            continue
        left = None if budget_s is None else budget_s - (time.time() - t0)
        if left is not None and left < 20:
            log(f"{nb}: budget spent; {counts['cells_due']} cells left for the next call")
            rc = 1
            continue
        s = Session(nb, results_dir)
        s.save()
        done = 0
        if s.pool is not None:  # --gpus: the cells that fit the budget (estimate / GPUs) in one sweep over the workers
            n, take, est = len(s.pool.gpus), [], 0.0
            for cs in cells:
                e = estimate_s([cs])
                if budget_s is not None and time.time() - t0 + (est + e) / n > budget_s:
                    break  # as the one-GPU loop: no cell starts that would end past the budget
                take.append(cs)
                est += e
            if len(take) < len(cells):
                log(f"{nb}: {len(take)} of {len(cells)} cells fit the budget on {n} GPUs; the next refresh resumes there")
                rc = 1
            recs = s.sweep([c for cs in take for c in cs], desc=f"{nb} ({len(take)} cells on {n} GPUs)")
            done += len(recs)
            if any(r.passed is False for r in recs) or s.pool.lost:
                rc = 1
            s.close()
            cells = []
        for i, cs in enumerate(cells, 1):
            est = estimate_s([cs])
            if budget_s is not None and time.time() - t0 + est > budget_s:
                log(f"{nb}: stopping before cell {i}/{len(cells)} (budget {budget_s:.0f} s; {len(cells) - i + 1} cells "
                    "left: the next refresh resumes there)")
                rc = 1
                break
            recs = s.sweep(cs, desc=f"{nb} cell {i}/{len(cells)}")
            done += len(recs)
            if any(r.passed is False for r in recs):
                rc = 1
        log(f"{nb}: {done} cases measured in {time.time() - t0:.0f} s -> {s.save()}")
    return rc
