"""Compare two runs of one notebook case by case, to judge a kernel change against the previous run.

    python -m gluon_lab_old compare 01-tma-caching previous newest
    python -m gluon_lab_old compare 03-multibuffer-pipelining 20261129T1526 20261201T0943 --all
    python -m gluon_lab_old compare 01-tma-caching --list

A run is named by its id, a unique prefix of it, ``newest`` or ``previous`` (as run A: the earlier
run sharing the most cases with B, the newest of those on a tie; as run B: the run before the newest).
Runs that hold only ceilings are not runs of the notebook's cases and are not named. The command
reads the superseded runs archived in <notebook>.history.jsonl.gz too (archive.archive_store), so
--list, `previous` and explicit run ids see every run ever adopted.

A case is what `results.latest` calls a case (op, variant, dtype, shape, the knobs a plan sets)
plus the timer (a do_bench and a graph-timed record of a cell are not compared); each run
contributes its newest record of the case. The ratio is time B / time A: below 1.0
run B is faster. `code` says whether the variant's kernel-source hash differs between the two
records ("changed": the kernel or its launcher changed between the runs; "same": the difference is
the machine, the clock or noise). Only records that passed their float64 check are timed against
each other; a failed side is named, not compared.
"""
from __future__ import annotations

from dataclasses import dataclass

from . import results

CASE_COLS = results.CASE_COLUMNS  # op, variant, dtype, the shape columns, timer: another timer is another case


class RunNotFoundError(ValueError):
    pass


def runs_table(df):
    """One row per run of the records: id, first timestamp, records, variants, commit, passed, stale."""
    import pandas as pd
    if not len(df):
        return pd.DataFrame(columns=["run_id", "first", "records", "variants", "git_commit", "failed", "stale"])
    g = df.groupby("run_id", dropna=False)
    t = pd.DataFrame({"first": g["timestamp"].min(), "records": g.size(),
                      "variants": g["variant"].nunique(), "git_commit": g["git_commit"].first().astype(str).str[:10],
                      "failed": g["passed"].apply(lambda s: int((~s.eq(True)).sum()))})
    if "stale" in df:
        t["stale"] = g["stale"].sum().astype(int)
    return t.sort_values("first").reset_index()


def resolve_run(df, token: str) -> str:
    """A run id from an id, a unique prefix, 'newest' or 'previous' (runs holding more than ceilings)."""
    t = runs_table(df[df["pattern"] != "ceiling"] if len(df) else df)
    ids = list(t["run_id"])
    if not ids:
        raise RunNotFoundError("no runs: the records are empty")
    if token in ("newest", "latest"):
        return ids[-1]
    if token == "previous":
        if len(ids) < 2:
            raise RunNotFoundError(f"run 'previous': there is only one run ({ids[0]})")
        return ids[-2]
    hits = [r for r in ids if str(r) == token] or [r for r in ids if str(r).startswith(token)]
    if len(hits) == 1:
        return hits[0]
    listing = ", ".join(map(str, ids[-8:]))
    if not hits:
        raise RunNotFoundError(f"run {token!r} not found; runs (newest last): {listing}")
    raise RunNotFoundError(f"run {token!r} is ambiguous: {', '.join(map(str, hits))}")


def _cases(df, run: str):
    import pandas as pd
    d = df[df["run_id"] == run]
    d = d[d["pattern"] != "ceiling"] if len(d) else d
    if not len(d):
        return pd.DataFrame()
    d = results.latest(d)
    d = d.assign(case=[results.case_key(c, t) for c, t in zip(d["config_key"], d["timer"])])
    return d


def _shape(row) -> str:
    import pandas as pd
    parts = [f"{k}={row[k]}" for k in results.SHAPE_COLUMNS if k in row and not pd.isna(row[k])]
    return " ".join(parts)


def _knobs(case: str) -> str:
    import json
    d = json.loads(case) if case else {}
    return " ".join(f"{k.lstrip('_')}={v}" for k, v in sorted(d.items()) if v is not None) or "-"


@dataclass
class Comparison:
    run_a: str
    run_b: str
    cases: object  # DataFrame: one row per case in both runs
    summary: object  # DataFrame: one row per (op, variant)
    only_a: int
    only_b: int

    def headline(self) -> str:
        s = self.summary
        if not len(s):
            return f"runs {self.run_a} and {self.run_b} share no timed case"
        n = int(s["cases"].sum())
        import numpy as np
        r = self.cases["B/A time"].dropna()
        g = float(np.exp(np.log(r).mean())) if len(r) else float("nan")
        return (f"{n} cases in both runs ({self.only_a} only in A, {self.only_b} only in B); time B/A geomean "
                f"{g:.3f} over all variants (below 1: B faster)")


def compare(df, run_a: str, run_b: str) -> Comparison:
    """Per-case ratios of two runs of the same records (see the module docstring)."""
    import numpy as np
    import pandas as pd
    b_id = resolve_run(df, run_b)
    a_id = _previous_sharing(df, b_id) if run_a == "previous" else resolve_run(df, run_a)
    a, b = _cases(df, a_id), _cases(df, b_id)
    keys = [k for k in CASE_COLS if k in df.columns] + ["case"]
    empty_cols = ["op", "variant", "dtype", "shape", "knobs", "case", "ms A", "ms B", "B/A time", "code", "note"]
    if not len(a) or not len(b):
        return Comparison(a_id, b_id, pd.DataFrame(columns=empty_cols), pd.DataFrame(), len(a), len(b))
    cols = keys + ["ms_median", "passed", "kernel_source_hash"]
    m = a[cols].merge(b[cols], on=keys, how="outer", suffixes=(" A", " B"), indicator=True)
    both = m[m["_merge"] == "both"].copy()
    ok = both["passed A"].eq(True) & both["passed B"].eq(True)
    both["B/A time"] = np.where(ok, both["ms_median B"] / both["ms_median A"], np.nan)
    both["note"] = np.select(
        [~both["passed A"].eq(True), ~both["passed B"].eq(True)],
        ["failed in A", "failed in B"], default="")
    same = both["kernel_source_hash A"].fillna("-") == both["kernel_source_hash B"].fillna("-")
    both["code"] = np.where(same, "same", "changed")
    both["shape"] = [_shape(r) for _, r in both.iterrows()]
    both["knobs"] = [_knobs(c) for c in both["case"]]
    out = both.rename(columns={"ms_median A": "ms A", "ms_median B": "ms B"})
    out = out[["op", "variant", "dtype", "shape", "knobs", "case", "ms A", "ms B", "B/A time", "code", "note"]]
    out = out.sort_values(["op", "variant", "dtype", "shape"]).reset_index(drop=True)

    def summ(g):
        r = g["B/A time"].dropna()
        return pd.Series({"cases": len(g), "timed": len(r),
                          "geomean B/A": float(np.exp(np.log(r).mean())) if len(r) else np.nan,
                          "min B/A": r.min() if len(r) else np.nan, "max B/A": r.max() if len(r) else np.nan,
                          "code changed": int((g["code"] == "changed").sum()),
                          "failed": int((g["note"] != "").sum())})
    if not len(out):
        return Comparison(a_id, b_id, pd.DataFrame(columns=empty_cols), pd.DataFrame(),
                          int((m["_merge"] == "left_only").sum()), int((m["_merge"] == "right_only").sum()))
    summary = out.groupby(["op", "variant", "dtype"]).apply(summ, include_groups=False).reset_index()
    summary[["cases", "timed", "code changed", "failed"]] = summary[["cases", "timed", "code changed", "failed"]].astype(int)
    return Comparison(a_id, b_id, out, summary, int((m["_merge"] == "left_only").sum()),
                      int((m["_merge"] == "right_only").sum()))


def _previous_sharing(df, b: str) -> str:
    """The earlier run sharing the most (non-ceiling) cases with b; the newest of those on a tie."""
    ids = list(runs_table(df[df["pattern"] != "ceiling"])["run_id"])
    keys_b = set(_keyset(df, b))
    best, most = None, 0
    for a in reversed(ids[:ids.index(b)] if b in ids else ids):
        n = len(keys_b & set(_keyset(df, a)))
        if n > most:
            best, most = a, n
    if best is None:
        raise RunNotFoundError(f"run 'previous': no run before {b} shares a case with it")
    return best


def default_pair(df) -> tuple[str, str] | None:
    """(previous, newest): the newest run and the newest earlier run that shares a case with it."""
    ids = list(runs_table(df[df["pattern"] != "ceiling"] if len(df) else df)["run_id"])
    if len(ids) < 2:
        return None
    try:
        return _previous_sharing(df, ids[-1]), ids[-1]
    except RunNotFoundError:
        return None


def _keyset(df, run):
    d = _cases(df, run)
    if not len(d):
        return []
    keys = [k for k in CASE_COLS if k in d.columns] + ["case"]
    return [tuple(map(str, row)) for row in d[keys].itertuples(index=False)]


def _moved_most(cases, top: int):
    """The `top` cases with the largest |log(B/A)| (untimed cases last)."""
    import numpy as np
    d = np.abs(np.log(cases["B/A time"].astype(float)))
    return cases.assign(_d=d).sort_values("_d", ascending=False).drop(columns="_d").head(top)


def section(df, run_a: str | None = None, run_b: str | None = None, top: int = 12, notebook: str = "NOTEBOOK") -> list:
    """The outputs of a notebook's "Compare runs" section: a Markdown line, the per-variant summary
    and the cases that moved most (|log B/A| largest). run_a/run_b None -> default_pair."""
    if run_a is None or run_b is None:
        pair = default_pair(df)
        if pair is None:
            return ["**Compare runs:** only one run holds these records; nothing to compare."]
        run_a, run_b = run_a or pair[0], run_b or pair[1]
    try:
        c = compare(df, run_a, run_b)
    except RunNotFoundError as e:
        return [f"**Compare runs:** {e}"]
    line = (f"**Run A** `{c.run_a}` vs **run B** `{c.run_b}`: {c.headline()}. Per case: "
            f"`python -m gluon_lab_old compare {notebook} {c.run_a} {c.run_b} --all`.")
    if not len(c.cases):
        return [line]
    moved = _moved_most(c.cases, top).drop(columns="case")
    fmt = {"ms A": "{:.4f}", "ms B": "{:.4f}", "B/A time": "{:.3f}", "geomean B/A": "{:.3f}", "min B/A": "{:.3f}",
           "max B/A": "{:.3f}"}
    return [line, c.summary.style.format({k: v for k, v in fmt.items() if k in c.summary}, na_rep="not timed").hide(axis="index"),
            f"The {len(moved)} cases that moved most:",
            moved.style.format({k: v for k, v in fmt.items() if k in moved}, na_rep="not timed").hide(axis="index")]


def main(notebook: str, run_a: str | None, run_b: str | None, results_dir=None, gpu: str = "h200",
         show_all: bool = False, list_runs: bool = False) -> int:
    from pathlib import Path

    import pandas as pd

    from .notebook import load
    root = Path(results_dir).resolve() if results_dir else Path(__file__).resolve().parent.parent / "results"
    df = load(root, gpu, notebook, newest_only=False, history=True)  # archived runs are runs too
    if not len(df):
        print(f"no records for {notebook} on {gpu} in {root}")
        return 2
    with pd.option_context("display.width", 220, "display.max_rows", 10000, "display.max_columns", 30,
                           "display.float_format", "{:.4g}".format):
        if list_runs or run_a is None:
            print(runs_table(df).to_string(index=False))
            return 0
        try:
            c = compare(df, run_a, run_b or "newest")
        except RunNotFoundError as e:
            print(f"error: {e}")
            return 2
        print(f"A = {c.run_a}\nB = {c.run_b}\n{c.headline()}\n")
        print(c.summary.to_string(index=False))
        if len(c.cases):
            cases = c.cases.drop(columns="case")
            if not show_all:
                cases = _moved_most(cases, 20)
                print("\nthe 20 cases that moved most (--all for every case):")
            print(cases.to_string(index=False))
    return 0
