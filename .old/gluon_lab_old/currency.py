"""Is a record what the code launches today? Stale = what its case launches has changed.

A record names its case (op, variant, shape, dtype, config) and the source hash of the code it ran
(``kernel_source_hash``, ``gluon_lab_old.staleness``). The rule, cheapest test first:

1. the variant's source hash today equals the record's: current (nothing that decides what compiles
   or launches has changed; no compile needed);
2. else the record's *launch hash* (``gluon_lab_old.launches``: every kernel its case launches, as
   normalized TTGIR, plus grids, options and scalar arguments), known from when its source was
   current, is compared with the launch hash of the same case under today's code: equal -> current
   (a refactor, a moved helper, a folded duplicate, a rule for other shapes); different -> stale;
3. a record whose case launches no Triton kernel of ours (eager torch, torch.compile, CuTe-DSL, cuBLAS
   / cuDNN), or whose launch was never recorded, keeps the source rule: stale when the source changed.

The case a record asks for: a grid record (no ``study`` in its config) asked for the heuristic (plus
the knobs a plan sets there, ``tma_store``), as did a study's ``heuristic``-marked cases and
``call='api'`` cases; any other study record asked for the knobs its study's plan cases set (its
``num_stages`` in a stages study, every tile knob in a GEMM sweep) and the heuristic for the rest; a
study no plan measures any more, for its whole config. So a heuristic change stales exactly the
records whose launched config changes at their shape, and a sweep's explicit configs stay current
while they compile the same.

Launch hashes live in a committed cache, ``results/launch-hashes.json``: (op, variant, source hash,
request) -> launch hash and a one-line summary of the launches, refreshed by
``python -m gluon_lab_old launches`` (as ``select`` refreshes ``selection.json``) and checked by
``launches --check`` (CI). The refresh computes, on the CPU, the launch hash under today's code of
every record whose source is current or whose own launch hash is known; ``--commits`` recovers the
launch hashes of records measured at older code by evaluating them in a worktree of the record's
``git_commit`` (where that commit's source hash equals the record's).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

CACHE_NAME = "launch-hashes.json"
EXPLICIT_GRID_KNOBS = ("tma_store", )  # the knobs a grid plan sets itself (results.case_key)
MEASUREMENT_KEYS = ("sm_clock_mhz", )  # measured beside a case, not part of it


def default_results_dir() -> Path:
    return Path(__file__).resolve().parent.parent / "results"


# ----------------------------------------------------------------------------------------------
# the request a record's case makes

def request_of(op: str, variant: str, shape: dict, dtype: str, config: dict | None, sms=None,
               study_knobs: dict | None = None) -> dict:
    """What a record's case asks the variant for: shape, dtype, the overrides its configure gets
    (empty: the heuristic), how it is called (fn | api) and the SM count (grids follow it).
    study_knobs: study -> the knobs its plan cases set (refresh.study_knobs(), kept in the cache file)."""
    c = {k: v for k, v in (config or {}).items() if k not in MEASUREMENT_KEYS}
    call = "api" if c.get("call") == "api" else "fn"
    if "study" in c and not c.get("heuristic") and call != "api":
        knobs = (study_knobs or {}).get(c["study"])
        # a study of today's plans pins the knobs it sets; a study no plan measures any more pins its whole config
        overrides = c if knobs is None else {k: v for k, v in c.items() if k in knobs or k == "study"}
    else:
        overrides = {k: c[k] for k in EXPLICIT_GRID_KNOBS if k in c}
    shape = {k: v for k, v in (shape or {}).items()}
    return {"op": op, "variant": variant, "shape": shape, "dtype": dtype, "overrides": overrides, "call": call,
            "sms": int(sms) if sms and sms == sms else None}


def request_key(req: dict) -> str:
    return json.dumps({k: req[k] for k in ("shape", "dtype", "overrides", "call", "sms")}, sort_keys=True,
                      default=str)


def _group(op: str, variant: str, src: str) -> str:
    return f"{op}|{variant}|{src}"


# ----------------------------------------------------------------------------------------------
# the committed cache

class LaunchCache:
    """(op, variant, source hash) -> {request key: {"h": launch hash | None, "s": summary} | {"e": error}}."""

    def __init__(self, path: Path | None = None):
        self.path = Path(path) if path else default_results_dir() / CACHE_NAME
        self.groups: dict[str, dict[str, dict]] = {}
        self.study_knobs: dict = {}  # study -> knobs its plan sets (written by `launches` from the plans)
        if self.path.exists():
            data = json.loads(self.path.read_text())
            if data.get("format") != 1:
                raise ValueError(f"{self.path}: unknown launch-cache format {data.get('format')!r}")
            self.groups = data["groups"]
            self.study_knobs = {k: frozenset(v) for k, v in data.get("study_knobs", {}).items()}

    def get(self, op: str, variant: str, src: str, rkey: str) -> dict | None:
        return self.groups.get(_group(op, variant, src), {}).get(rkey)

    def put(self, op: str, variant: str, src: str, rkey: str, answer: dict) -> None:
        self.groups.setdefault(_group(op, variant, src), {})[rkey] = answer

    def __len__(self):
        return sum(len(g) for g in self.groups.values())

    def prune(self, keep: set) -> int:
        """Keep only the entries {(op, variant, source, request key)} some record refers to (its own launch,
        or its case under today's code); returns how many were dropped."""
        dropped = 0
        for g in list(self.groups):
            op, variant, src = g.split("|")
            entries = self.groups[g]
            for rk in [rk for rk in entries if (op, variant, src, rk) not in keep]:
                del entries[rk]
                dropped += 1
            if not entries:
                del self.groups[g]
        return dropped

    def save(self) -> None:
        from .results import atomic_write_text
        knobs = json.dumps({k: sorted(v) for k, v in sorted(self.study_knobs.items())}, sort_keys=True)
        lines = ['{"format": 1, "study_knobs": ' + knobs + ', "groups": {']
        items = sorted(self.groups.items())
        for i, (g, entries) in enumerate(items):
            body = json.dumps(dict(sorted(entries.items())), sort_keys=True, separators=(",", ":"))
            lines.append(f"{json.dumps(g)}: {body}" + ("," if i < len(items) - 1 else ""))
        lines.append("}}")
        atomic_write_text(self.path, "\n".join(lines) + "\n")


_CACHES: dict = {}


def cache(results_dir=None) -> LaunchCache:
    """The committed cache beside results_dir's GPU folders (read once per process; the repository's
    results/ when results_dir has none of its own)."""
    p = Path(results_dir) / CACHE_NAME if results_dir else default_results_dir() / CACHE_NAME
    if not p.exists():
        p = default_results_dir() / CACHE_NAME
    key = str(p)
    if key not in _CACHES:
        _CACHES[key] = LaunchCache(p)
    return _CACHES[key]


# ----------------------------------------------------------------------------------------------
# the rule

def _nan(v) -> bool:
    return v is None or (isinstance(v, float) and v != v)


def mark_stale(df, current_hash=None, launch_cache: LaunchCache | None = None):
    """df with a boolean 'stale' column and 'stale_why' (why a record is stale, or why it is current
    though its source changed: 'same launch'). current_hash(op, variant) raises KeyError for a
    variant that no longer exists (default: registry.current_hash)."""
    import pandas as pd
    if current_hash is None:
        from .registry import current_hash
    lc = launch_cache if launch_cache is not None else cache()
    now: dict = {}
    stale, why = [], []
    df = df.copy()
    if not len(df):
        df["stale"] = pd.Series([], dtype=bool)
        df["stale_why"] = pd.Series([], dtype=object)
        return df
    for r in df[["op", "variant", "shape", "dtype", "config", "kernel_source_hash", "sm_count"]].itertuples(index=False):
        src = r.kernel_source_hash
        if _nan(src):
            stale.append(False), why.append(None)
            continue
        key = (r.op, r.variant)
        if key not in now:
            try:
                now[key] = current_hash(*key)
            except KeyError:
                now[key] = None
        cur = now[key]
        if cur is None:
            stale.append(True), why.append("variant removed")
            continue
        if cur == src:
            stale.append(False), why.append(None)
            continue
        rk = request_key(request_of(r.op, r.variant, r.shape, r.dtype, r.config, r.sm_count, lc.study_knobs))
        a, b = lc.get(r.op, r.variant, src, rk), lc.get(r.op, r.variant, cur, rk)
        if a is None or a.get("h") is None:
            stale.append(True), why.append("source changed; what it launched was not recorded" if a is None or "e" in a
                                            else "source changed (launches no Triton kernel of ours)")
        elif b is None:
            stale.append(True), why.append("source changed; today's launch not computed (python -m gluon_lab_old launches)")
        elif b.get("h") == a["h"]:
            stale.append(False), why.append("same launch")
        else:
            stale.append(True), why.append(f"launch changed: {a.get('s')} -> {b.get('s') or b.get('e')}")
    df["stale"] = pd.Series(stale, index=df.index, dtype=bool)
    df["stale_why"] = pd.Series(why, index=df.index, dtype=object)
    return df


# ----------------------------------------------------------------------------------------------
# refresh: compute what the cache lacks

def _records(results_dir: Path, gpus=None):
    """Every record of every notebook store (and its history, where kept) under results_dir."""
    from . import results
    files = sorted(p for p in Path(results_dir).glob("*/*.jsonl")
                   if (gpus is None or p.parent.name in gpus) and p.name not in results.NON_RECORD_STORES)
    df = results.load(files, on_error="raise", history=True) if files else results.load([], on_error="raise")
    return df[df["kernel_source_hash"].notna()]


def _current_hashes(pairs) -> dict:
    from . import registry
    out = {}
    for p in pairs:
        try:
            out[p] = registry.current_hash(*p)
        except (KeyError, ValueError):
            out[p] = None
    return out


def needed(df, lc: LaunchCache, now: dict, retry_errors: bool = False) -> tuple[dict, list]:
    """(requests to compute under today's code {(op, variant, key): request}, records with an unknown
    own launch: [(git_commit, src, request)]). Today's launch is needed for every record whose source is
    current (so a later change can be judged) or whose own launch is known."""
    todo: dict = {}
    unknown: list = []
    for r in df[["op", "variant", "shape", "dtype", "config", "kernel_source_hash", "sm_count", "git_commit"]] \
            .itertuples(index=False):
        cur = now.get((r.op, r.variant))
        if cur is None:
            continue
        req = request_of(r.op, r.variant, r.shape, r.dtype, r.config, r.sm_count, lc.study_knobs)
        rk = request_key(req)
        src = r.kernel_source_hash
        if src != cur and lc.get(r.op, r.variant, src, rk) is None:
            unknown.append((r.git_commit, src, req))
            continue
        have = lc.get(r.op, r.variant, cur, rk)
        if have is None or (retry_errors and "e" in have and "ModuleNotFoundError" not in have["e"]):
            todo[(r.op, r.variant, rk)] = req
    return todo, unknown


def _evaluate_chunk(reqs: list) -> list:
    from .launches import evaluate
    return [evaluate(r) for r in reqs]


def compute(reqs: list, jobs: int = 1, progress=None) -> list:
    """evaluate() every request, in `jobs` forked worker processes (grouped by variant: kernels
    shared by a variant's cases compile once per process)."""
    order = sorted(range(len(reqs)), key=lambda i: (reqs[i]["op"], reqs[i]["variant"]))
    out: list = [None] * len(reqs)
    chunk = 24
    parts = [order[i:i + chunk] for i in range(0, len(order), chunk)]
    if jobs <= 1 or len(parts) <= 1:
        for n, part in enumerate(parts, 1):
            for i, a in zip(part, _evaluate_chunk([reqs[i] for i in part])):
                out[i] = a
            if progress:
                progress(n * chunk, len(reqs))
        return out
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("fork")) as ex:
        futs = {ex.submit(_evaluate_chunk, [reqs[i] for i in part]): part for part in parts}
        done = 0
        from concurrent.futures import as_completed
        for f in as_completed(futs):
            for i, a in zip(futs[f], f.result()):
                out[i] = a
            done += len(futs[f])
            if progress:
                progress(done, len(reqs))
    return out


def _eval_at(repo: Path, commit: str, reqs: dict) -> tuple[list, str]:
    """Run this module's worker against a detached worktree of `commit`: [(key, answer)], a note."""
    worker = Path(__file__).resolve().parent / "launches.py"
    with tempfile.TemporaryDirectory(prefix="gl-wt-") as tmp:
        wt = Path(tmp) / "tree"
        subprocess.run(["git", "-C", str(repo), "worktree", "add", "--detach", "-q", str(wt), commit], check=True,
                       capture_output=True)
        try:
            script = Path(tmp) / "launches_worker.py"
            script.write_text(worker.read_text())
            items = list(reqs.items())
            inp = "".join(json.dumps({**req, "id": i}) + "\n" for i, (_, req) in enumerate(items))
            res = subprocess.run([sys.executable, str(script), "worker"], input=inp, capture_output=True, text=True,
                                 env={**os.environ, "PYTHONPATH": str(wt)}, cwd=str(wt), timeout=3600)
            answers = [json.loads(l) for l in res.stdout.splitlines() if l.startswith("{")]
            note = (f" (worker rc {res.returncode}: {res.stderr.strip().splitlines()[-1][:200]})"
                    if res.returncode and res.stderr.strip() else "")
            return [(items[a["id"]][0], a) for a in answers], note
        finally:
            subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", str(wt)], capture_output=True)


def _successors(repo: Path, commit: str, n: int = 3) -> list[str]:
    """The next n commits after `commit` on the current branch's first-parent line (a record's code was
    often committed just after its run: the device names the last landed commit)."""
    out = subprocess.run(["git", "-C", str(repo), "rev-list", "--first-parent", "--reverse", f"{commit}..HEAD"],
                         capture_output=True, text=True).stdout.split()
    return out[:n]


def from_commits(unknown: list, lc: LaunchCache, repo: Path, log=print, jobs: int = 2, successors: int = 3) -> int:
    """Recover the launch hashes of records measured at older code: for each record's git commit (then,
    for what did not match there, the few commits after it), a detached worktree and this module's worker
    run against that checkout, which answers only where the checkout's source hash of the variant equals
    the record's. Commits run `jobs` at a time; the cache is saved after each. Returns how many were recovered."""
    from concurrent.futures import ThreadPoolExecutor, as_completed
    todo: dict = {}
    for commit, src, req in unknown:
        if isinstance(commit, str) and len(commit) == 40:
            todo.setdefault(commit, {})[(req["op"], req["variant"], src, request_key(req))] = {**req, "src": src}
    got, tried = 0, set()
    for round_ in range(1 + successors):
        todo = {c: r for c, r in todo.items() if c not in tried}
        if not todo:
            break
        retry: dict = {}
        with ThreadPoolExecutor(max_workers=jobs) as ex:
            futs = {}
            for commit, reqs in sorted(todo.items(), key=lambda kv: -len(kv[1])):
                if subprocess.run(["git", "-C", str(repo), "cat-file", "-e", f"{commit}^{{commit}}"],
                                  capture_output=True).returncode != 0:
                    log(f"  {commit[:10]}: not in this clone's history ({len(reqs)} requests)")
                    continue
                tried.add(commit)
                futs[ex.submit(_eval_at, repo, commit, reqs)] = (commit, reqs)
            for f in as_completed(futs):
                commit, reqs = futs[f]
                answers, note = f.result()
                ok, missed = 0, {}
                for key, a in answers:
                    if "error" in a and a["error"].startswith("source hash here"):
                        missed[key] = reqs[key]  # this commit's code is not what the record ran
                        continue
                    lc.put(*key, {"e": a["error"]} if "error" in a else {"h": a["hash"], "s": a["summary"]})
                    ok += "error" not in a
                got += ok
                lc.save()  # per commit: a run cut short keeps what it recovered
                log(f"  {commit[:10]}: {ok} of {len(reqs)} launches recovered"
                    + (f", {len(missed)} at other code" if missed else "") + note)
                if missed and round_ < successors:
                    for c in _successors(repo, commit, 1):  # the next commit after the one just tried
                        retry.setdefault(c, {}).update(missed)
        todo = retry
    return got


def refresh(results_dir=None, jobs: int = 2, commits: bool = False, check: bool = False, log=print,
            stale_list: str | None = None, study_knobs: dict | None = None) -> int:
    """`python -m gluon_lab_old launches`: bring the cache up to date with the records and today's code.
    check=True computes nothing and returns 1 when an entry is missing (what CI runs)."""
    import time
    results_dir = Path(results_dir) if results_dir else default_results_dir()
    lc = LaunchCache(results_dir / CACHE_NAME)
    if study_knobs is not None and not check and study_knobs != lc.study_knobs:
        lc.study_knobs = dict(study_knobs)  # the plans' knobs decide study records' requests: keep them with the hashes
    elif study_knobs is not None and check and study_knobs != lc.study_knobs:
        log(f"launches --check: the plans' study knobs differ from those in {lc.path}: run python -m gluon_lab_old launches")
        return 1
    df = _records(results_dir)
    now = _current_hashes(set(zip(df["op"], df["variant"])))
    t0 = time.time()
    if commits and not check:
        import pandas as pd
        from . import results
        shown = pd.concat([results.latest(g) for _, g in df.groupby("source")]) if len(df) else df
        _, unknown = needed(shown, lc, now)  # the newest record of each case: what pages show and count
        log(f"launches: {len(unknown)} newest-per-case records measured at older code without a recorded launch; "
            "trying their commits")
        from_commits(unknown, lc, results_dir.parent, log=log)
    todo, unknown = needed(df, lc, now, retry_errors=not check)
    if check:
        if todo:
            ex = next(iter(todo.values()))
            log(f"launches --check: {len(todo)} launch hashes under today's code are missing from "
                f"{lc.path} (e.g. {ex['op']} {ex['variant']} {ex['shape']}): run python -m gluon_lab_old launches")
            return 1
        log(f"launches --check: {lc.path} has every launch hash the records need ({len(lc)} entries; "
            f"{len(unknown)} records measured at older code have no recorded launch and keep the source rule)")
        return 0
    reqs = list(todo.values())
    log(f"launches: computing {len(reqs)} launch hashes under today's code ({jobs} processes)")
    last = [time.time()]

    def progress(done, total):
        if time.time() - last[0] > 15 or done >= total:
            last[0] = time.time()
            log(f"  {min(done, total)}/{total} ({time.time() - t0:.0f} s)")

    for (op, variant, rk), ans in zip(todo, compute(reqs, jobs, progress)):
        lc.put(op, variant, now[(op, variant)], rk,
               {"e": ans["error"]} if "error" in ans else {"h": ans["hash"], "s": ans["summary"]})
    keep = set()
    for r in df[["op", "variant", "shape", "dtype", "config", "kernel_source_hash", "sm_count"]].itertuples(index=False):
        rk = request_key(request_of(r.op, r.variant, r.shape, r.dtype, r.config, r.sm_count, lc.study_knobs))
        keep.add((r.op, r.variant, r.kernel_source_hash, rk))
        if now.get((r.op, r.variant)):
            keep.add((r.op, r.variant, now[(r.op, r.variant)], rk))
    dropped = lc.prune(keep)
    lc.save()
    errors = sum(1 for g in lc.groups.values() for a in g.values() if "e" in a)
    log(f"launches: {lc.path}: {len(lc)} entries ({errors} cases the emulation could not run), {dropped} entries "
        f"no record needs pruned, {len(unknown)} records at older code without a recorded launch, {time.time() - t0:.0f} s")
    _CACHES.pop(str(lc.path), None)
    stale_summary(df, lc, log=log, write=stale_list)
    return 0


def stale_summary(df, lc: LaunchCache | None = None, log=print, write: str | None = None) -> dict:
    """Stale records per store (all records, and the newest record of each case), by the rule above;
    write: a file listing every stale record as `file:line reason` (to diff before / after a refactor:
    a fold that compiles to the same code leaves it unchanged)."""
    from . import registry, results
    d = mark_stale(df, registry.current_hash, lc)
    out = {}
    for src, g in d.groupby("source"):
        newest = results.latest(g)
        out[Path(src).name] = (int(g["stale"].sum()), len(g), int(newest["stale"].sum()), len(newest))
    for name, (s, n, sn, nn) in sorted(out.items()):
        log(f"  {name}: {s} of {n} records stale; newest per case: {sn} of {nn}")
    if write:
        rows = d[d["stale"]].sort_values(["source", "line"])
        Path(write).write_text("".join(f"{Path(s).name}:{l} {w}\n" for s, l, w in
                                       zip(rows["source"], rows["line"], rows["stale_why"])))
    return out
