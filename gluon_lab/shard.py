"""Sharded measurement: one notebook's plan over every GPU of a host, and over hosts as a job array.

The unit of work is a **unit**: every case of a plan at one dtype and shape (the grid's op variants and peers,
every study's configs there, the per-shape copy). A unit is never split, so whatever a page divides by — the
peer at that shape, the heuristic's record beside a study's configs — was measured on the same GPU in the same
run. Units go to shards by estimated time (``estimate_s``: cases x seconds per case + a compile per
variant), longest first onto the least-loaded shard (LPT), ties to the lower index, each shard's units back in
plan order: the same cases and the same ``n`` always give the same split, on any host.

Two ways to run it, one record schema (``results.Record``: ``gpu_index``, ``gpu_uuid``, ``shard``):

* ``bench NOTEBOOK --gpus all|N|0,3,5`` (and ``refresh --gpus``): one worker process per GPU (spawned, its
  ``CUDA_VISIBLE_DEVICES`` set to that GPU), each measuring its own ceilings first and appending its records to
  the run's store as it goes (the store's lock makes the appends safe). Every ``Session.sweep`` of the plan is
  split over the workers; captures that are not case sweeps (timelines, Inductor code, 00's dispatch study
  and decoder block) run in the parent on the first GPU. A worker that dies loses only the case it was
  measuring (reported, with its exit code); the cases it had not started go to the living workers.
* ``bench NOTEBOOK --shard I/N --run-id RUN`` on each host (any job array: Slurm, Kubernetes indexed jobs, a
  shell loop over ssh): this process measures shard I of the same deterministic split, under the run id every
  shard shares; captures run in shard 0 only. ``adopt`` takes every shard's folder at once and refuses a run
  with a shard missing or present twice (``check_shards``).

``--gpus 1`` (and no flag) is today's run: one process, every case, shard "0/1".
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import time
from typing import Callable, Sequence

RUN_ID = re.compile(r"\d{8}T\d{6}Z-[0-9A-Za-z]{1,32}")


# ---- what to run where: parsing and the split (CPU) ------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Shard:
    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text, what: str = "--shard") -> Shard:
    """'I/N' -> Shard(I, N): shard I of N, 0 <= I < N. ValueError naming `what` and the rule otherwise."""
    m = re.fullmatch(r"(\d+)/(\d+)", str(text).strip()) if isinstance(text, str) else None
    if not m:
        raise ValueError(f"{what} must be 'I/N' (shard I of N, 0 <= I < N, e.g. '0/4'); got {text!r}")
    i, n = int(m[1]), int(m[2])
    if n < 1 or i >= n:
        raise ValueError(f"{what} {text!r}: N must be >= 1 and I in 0..N-1")
    return Shard(i, n)


def parse_run_id(text, what: str = "--run-id") -> str:
    """A run id as the lab writes them (results.new_run_id: YYYYMMDDTHHMMSSZ-<letters or digits>)."""
    if not isinstance(text, str) or not RUN_ID.fullmatch(text):
        raise ValueError(f"{what} must look like 20261207T120000Z-a1b2c3d4 (UTC time, '-', 1-32 letters or "
                         f"digits; `python -m gluon_lab run-id` makes one); got {text!r}")
    return text


def host_gpus() -> list[int]:
    """The CUDA ordinals of this host's GPUs that this process may use (CUDA_VISIBLE_DEVICES when it lists
    ordinals, else every GPU nvidia-smi lists), without initializing CUDA in this process."""
    vis = os.environ.get("CUDA_VISIBLE_DEVICES")
    if vis is not None:
        items = [v.strip() for v in vis.split(",") if v.strip()]
        if not items:
            return []  # set and empty: CUDA sees no GPU
        if not all(v.isdigit() for v in items):
            raise ValueError(f"--gpus: CUDA_VISIBLE_DEVICES={vis!r} names devices by UUID or MIG instance; the workers "
                             "are placed by ordinal: list ordinals there (or unset it)")
        return [int(v) for v in items]
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [int(m[1]) for m in re.finditer(r"^GPU (\d+):", out.stdout, re.M)] if out.returncode == 0 else []


def parse_gpus(text, visible: Sequence[int]) -> list[int]:
    """--gpus: 'all' (every visible GPU), 'N' (the first N), or a list of ordinals '0,3,5' ('3,': GPU 3 alone).
    ValueError naming
    --gpus and the rule: none visible, more than visible, an ordinal not visible, one named twice."""
    visible = list(visible)
    t = str(text).strip()
    if not visible:
        raise ValueError(f"--gpus {t}: no GPU is visible on this host (nvidia-smi -L lists none)")
    if t == "all":
        return visible
    if re.fullmatch(r"\d+", t):
        n = int(t)
        if not 1 <= n <= len(visible):
            raise ValueError(f"--gpus {t}: N must be in 1..{len(visible)} (the GPUs visible here: {visible})")
        return visible[:n]
    if re.fullmatch(r"\d+(,\d+)+|\d+,", t):  # '3,' names GPU 3 alone ('3' is a count)
        ids = [int(v) for v in t.split(",") if v]
        dup = sorted({i for i in ids if ids.count(i) > 1})
        if dup:
            raise ValueError(f"--gpus {t}: GPU {dup[0]} is named twice")
        bad = [i for i in ids if i not in visible]
        if bad:
            raise ValueError(f"--gpus {t}: GPU {bad[0]} is not visible here (visible: {visible})")
        return ids
    raise ValueError(f"--gpus must be 'all', a count N or a list of GPU ordinals like '0,3,5'; got {text!r}")


def unit_of(case: dict) -> tuple:
    """(dtype, shape): the cases that stay on one GPU (a case without a shape is a unit of its own kind)."""
    shape = {k: v for k, v in (case.get("shape") or {}).items() if k != "bytes"}
    return case.get("dtype"), json.dumps(shape, sort_keys=True)


def units(cases: Sequence[dict]) -> list[list[int]]:
    """Indices of cases grouped by unit_of, units in order of first appearance, cases in plan order."""
    out: dict = {}
    for i, c in enumerate(cases):
        out.setdefault(unit_of(c), []).append(i)
    return list(out.values())


#: seconds one case takes on the H200 (check, capture, >= 100 ms of replays) and a first compile on top
SECONDS_PER_CASE = 0.6
SECONDS_PER_COMPILE = 2.0


def estimate_s(cells: Sequence[Sequence[dict]]) -> float:
    """Estimated seconds to measure these cells in one process: cases x SECONDS_PER_CASE + a compile per variant."""
    variants = {(c["op"], c.get("variant")) for cs in cells for c in cs}
    return sum(len(cs) for cs in cells) * SECONDS_PER_CASE + len(variants) * SECONDS_PER_COMPILE


def case_seconds(cases: Sequence[dict]) -> float:
    return estimate_s([list(cases)])


def split(cases: Sequence[dict], n: int, cost: Callable[[Sequence[dict]], float] = case_seconds) -> list[list[int]]:
    """The case indices of each of n shards: whole units, longest first onto the least-loaded shard (ties: the
    lower shard, then the unit first in the plan), each shard's cases in plan order. Deterministic."""
    if n < 1:
        raise ValueError(f"split needs n >= 1 shards; got {n}")
    us = units(cases)
    est = [cost([cases[i] for i in u]) for u in us]
    load = [0.0] * n
    got: list[list[int]] = [[] for _ in range(n)]
    for k in sorted(range(len(us)), key=lambda k: (-est[k], us[k][0])):
        j = min(range(n), key=lambda j: (load[j], j))
        got[j].extend(us[k])
        load[j] += est[k]
    return [sorted(g) for g in got]


def shard_cases(cases: Sequence[dict], shard: Shard) -> list[dict]:
    """The cases of one shard of `cases` (split(cases, shard.count)[shard.index])."""
    return [cases[i] for i in split(cases, shard.count)[shard.index]]


# ---- this process's part in a run (set by the CLI, read by bench.Session) ----------------------------

@dataclasses.dataclass
class Settings:
    gpus: list | None = None      # --gpus: one worker per GPU (None or one GPU: this process measures)
    shard: Shard | None = None    # --shard I/N: this process measures shard I of every sweep
    run_id: str | None = None     # --run-id: the run id every shard shares


ENV = {"gpus": "GLUON_LAB_GPUS", "shard": "GLUON_LAB_SHARD", "run_id": "GLUON_LAB_RUN_ID"}


def from_env(env=None) -> Settings:
    """The settings a parent process passed down (configure() exports them: papermill's kernels of
    `report --mode measure` inherit them)."""
    env = os.environ if env is None else env
    g = env.get(ENV["gpus"], "").strip()
    sh = env.get(ENV["shard"], "").strip()
    rid = env.get(ENV["run_id"], "").strip()
    return Settings(gpus=[int(v) for v in g.split(",")] if g else None,
                    shard=parse_shard(sh, what=ENV["shard"]) if sh else None,
                    run_id=parse_run_id(rid, what=ENV["run_id"]) if rid else None)


SETTINGS = from_env()


def configure(gpus: list | None = None, shard: Shard | None = None, run_id: str | None = None) -> Settings:
    """Set this process's part in the next runs (the CLI's --gpus / --shard / --run-id), and export it to the
    processes it starts."""
    if gpus and shard and len(gpus) > 1:
        raise ValueError("--gpus with several GPUs (one host's workers) and --shard I/N (this host's part of a job "
                         "array) are separate modes: give each array task one GPU, or more shards")
    if shard and shard.count > 1 and not run_id:
        raise ValueError("--shard I/N needs --run-id RUN, the same on every shard (`python -m gluon_lab run-id`), "
                         "so that adopt can merge the shards into one run")
    if run_id:
        parse_run_id(run_id)
    SETTINGS.gpus, SETTINGS.shard, SETTINGS.run_id = (list(gpus) if gpus else None), shard, run_id
    for k, v in (("gpus", ",".join(map(str, gpus)) if gpus else ""), ("shard", str(shard) if shard else ""),
                 ("run_id", run_id or "")):
        if v:
            os.environ[ENV[k]] = v
        else:
            os.environ.pop(ENV[k], None)
    if gpus:
        # this process's own work (captures) runs on the first GPU; each worker sets its own device
        os.environ["CUDA_VISIBLE_DEVICES"] = str(gpus[0])
    return SETTINGS


# ---- one worker process per GPU ------------------------------------------------------------------

def _worker_main(gpu: int, notebook: str, results_dir: str, run_id: str, shard: str, ceiling_kw: dict,
                 tasks, results, factory: str) -> None:
    """Spawned per GPU: CUDA_VISIBLE_DEVICES before anything touches CUDA, then cases from `tasks` until None;
    ('start', gpu, key) before a case and ('done', gpu, key, record JSON) after it, sent on `results` (a pipe:
    each message is written before the next step, so a worker that crashes has said what it was doing)."""
    os.environ["CUDA_VISIBLE_DEVICES"] = str(gpu)
    mod, _, name = factory.partition(":")
    import importlib
    make, measure = getattr(importlib.import_module(mod), name)()
    s = make(notebook, results_dir, run_id, shard, ceiling_kw)
    c = getattr(s, "ceilings", None)
    results.send(("ready", gpu, None, None if c is None else json.dumps(
        {"copy_gbps": c.copy_gbps, "matmul_tflops": c.matmul_tflops, "copy_bytes": c.copy_bytes})))
    import queue
    parent = os.getppid()
    while True:
        try:
            item = tasks.get(timeout=5)
        except queue.Empty:
            if os.getppid() != parent:  # the parent is gone: nobody collects what this worker would measure
                break
            continue
        if item is None:
            break
        key, case = item
        results.send(("start", gpu, key, None))
        results.send(("done", gpu, key, measure(s, case)))


class WorkerDied(RuntimeError):
    pass


_POOLS: list = []


def close_all() -> list[dict]:
    """Close every pool this process started (the CLI, after a run; atexit otherwise); the cases their dead
    workers lost."""
    lost = []
    while _POOLS:
        p = _POOLS.pop()
        p.close()
        lost += p.lost
    return lost


class Pool:
    """One spawned worker per GPU for a run: each measures its ceilings at start; sweep() splits cases over the
    living workers and collects their records. factory: 'module:function' returning (make_session, measure),
    resolved in the worker (tests run a fake one on the CPU)."""

    def __init__(self, notebook: str, results_dir: str, gpus: Sequence[int], run_id: str, ceiling_kw: dict | None = None,
                 factory: str = "gluon_lab.bench:pool_factory", log: Callable[[str], None] = print,
                 poll_s: float = 0.5):
        import multiprocessing as mp
        self.ctx = mp.get_context("spawn")
        self.gpus = list(gpus)
        self.log = log
        self.poll_s = poll_s
        self.tasks = {g: self.ctx.Queue() for g in self.gpus}
        self.pipes = {}  # gpu -> the reading end of its worker's messages
        self.procs = {}
        self.lost: list[dict] = []  # {"gpu", "exitcode", "case"}: what dead workers took with them
        self.inflight: dict = {}  # gpu -> key of the case it reported starting and has not finished
        self.sent: dict = {}  # gpu -> keys sent to it and not done (at most PREFETCH)
        self.ready: dict = {}  # gpu -> its ceilings (JSON) once it is ready
        self._seq = 0
        for g in self.gpus:
            self.pipes[g], w = self.ctx.Pipe(duplex=False)
            # not daemonic: a worker may start processes of its own (Inductor's compile workers); it ends on close(),
            # at exit (atexit), or by itself when its parent is gone
            # its records say shard "0/1": a host's pool is one shard of a run (which GPU: gpu_index / gpu_uuid)
            p = self.ctx.Process(target=_worker_main, name=f"gluon-lab-gpu{g}", daemon=False,
                                 args=(g, notebook, results_dir, run_id, "0/1", ceiling_kw or {},
                                       self.tasks[g], w, factory))
            p.start()
            w.close()  # the worker holds the writing end: EOF here once it is gone
            self.procs[g] = p
        if not _POOLS:
            import atexit
            atexit.register(close_all)
        _POOLS.append(self)

    def alive(self) -> list[int]:
        return [g for g in self.gpus if self.procs[g].exitcode is None]

    PREFETCH = 2  # cases handed to a worker ahead of its 'done' (one measuring, one waiting): the rest stay here

    def _assign(self, cases: Sequence[dict], keys: Sequence, gpus: Sequence[int]) -> dict:
        """Each of `gpus`'s share (split) of the cases: {gpu: [keys in order]}, queued here (_feed sends them)."""
        share = split(cases, len(gpus))
        return {g: [keys[i] for i in idx] for g, idx in zip(gpus, share)}

    def _feed(self, todo: dict, by_key: dict) -> None:
        """Top up every living worker to PREFETCH cases sent and not done (in its share's order)."""
        for g, ks in todo.items():
            if self.procs[g].exitcode is not None:
                continue
            sent = self.sent.setdefault(g, [])
            for k in ks:
                if len(sent) >= self.PREFETCH:
                    break
                if k not in sent:
                    self.tasks[g].put((k, by_key[k]))
                    sent.append(k)

    def _bury(self, g) -> None:
        """A dead worker's task queue: nobody reads it any more; never wait for its feeder at exit."""
        q = self.tasks[g]
        q.cancel_join_thread()
        q.close()

    def _handle(self, msg, out: dict, todo: dict) -> None:
        kind, g, key, payload = msg
        if kind == "ready":
            self.ready[g] = payload
        elif kind == "start":
            self.inflight[g] = key
        elif kind == "done":
            self.inflight.pop(g, None)
            out[key] = payload
            if key in self.sent.get(g, []):
                self.sent[g].remove(key)
            if key in todo.get(g, []):
                todo[g].remove(key)

    def _pump(self, out: dict, todo: dict, timeout: float) -> None:
        """Handle every message waiting (waiting up to timeout seconds for the first)."""
        from multiprocessing.connection import wait
        live = [c for c in self.pipes.values() if not c.closed]
        for conn in wait(live, timeout) if live else []:
            try:
                while conn.poll():
                    self._handle(conn.recv(), out, todo)
            except (EOFError, OSError):  # its worker is gone and everything it sent has been read
                conn.close()

    def ceilings(self, gpu: int, timeout_s: float = 600) -> dict | None:
        """The ceilings worker `gpu` measured at its start ({copy_gbps, matmul_tflops, copy_bytes}; None if none);
        if that worker died at its start, the first other worker's."""
        t0 = time.time()
        while gpu not in self.ready:
            if self.procs[gpu].exitcode is not None:
                others = [g for g in self.gpus if g != gpu and self.procs[g].exitcode is None]
                if not others:
                    raise WorkerDied(f"every worker died at its start ({self._deaths()})")
                self.log(f"the worker on GPU {gpu} died at its start (exit {self.procs[gpu].exitcode}); "
                         f"this process's own measurements take GPU {others[0]}'s ceilings")
                gpu = others[0]
                continue
            if time.time() - t0 > timeout_s:
                raise WorkerDied(f"the worker on GPU {gpu} did not start within {timeout_s:.0f} s")
            self._pump({}, {}, self.poll_s)
        c = self.ready[gpu]
        return None if c is None else json.loads(c)

    def sweep(self, cases: Sequence[dict], desc: str = "sweep") -> list[str]:
        """Measure every case on the pool; the records' JSON lines in case order (a lost case: None). Raises
        WorkerDied when no worker is left while cases remain (the ones measured are in the store)."""
        self._seq += 1
        keys = [(self._seq, i) for i in range(len(cases))]
        by_key = dict(zip(keys, cases))
        gpus = self.alive()
        if not gpus:
            raise WorkerDied(f"{desc}: every worker has died ({self._deaths()}); nothing measured")
        todo = {g: list(ks) for g, ks in self._assign(cases, keys, gpus).items()}
        out: dict = {}
        t0 = last = time.time()
        while any(todo.values()):
            self._feed(todo, by_key)
            self._pump(out, todo, self.poll_s)
            dead = [g for g in todo if todo[g] and self.procs[g].exitcode is not None]
            until = time.time() + 10  # (a process the worker started may hold its pipe open: do not wait for EOF forever)
            while dead and not all(self.pipes[g].closed for g in dead) and time.time() < until:
                self._pump(out, todo, 0.2)  # everything a dead worker sent before it went, up to its EOF
                dead = [g for g in dead if todo[g]]
            for g in dead:
                self._bury(g)
                rest = todo.pop(g)
                self.sent.pop(g, None)
                key = self.inflight.pop(g, None)  # its 'start' always arrives first: the pipe is written in order
                if key is not None and key in rest:
                    rest.remove(key)
                    self.lost.append({"gpu": g, "exitcode": self.procs[g].exitcode, "case": by_key[key]})
                    self.log(f"{desc}: the worker on GPU {g} died (exit {self.procs[g].exitcode}) measuring "
                             f"{_label(by_key[key])}: that case is lost (not in the store; refresh re-measures it)")
                    # the rest of its unit is not measured elsewhere: a unit's peers stay on one GPU, and refresh
                    # measures the incomplete cell whole
                    unit = unit_of(by_key[key])
                    skip = [k for k in rest if unit_of(by_key[k]) == unit]
                    for k in skip:
                        rest.remove(k)
                        self.lost.append({"gpu": g, "exitcode": self.procs[g].exitcode, "case": by_key[k]})
                    if skip:
                        self.log(f"{desc}: {len(skip)} more cases of that shape are left unmeasured with it (its "
                                 "peers stay on one GPU: refresh measures the cell whole)")
                alive = self.alive()
                if rest and not alive:
                    raise WorkerDied(f"{desc}: every worker has died ({self._deaths()}); {len(rest)} cases of GPU {g} "
                                     "not measured (the ones measured are in the store)")
                if rest:
                    self.log(f"{desc}: the {len(rest)} cases GPU {g} had not started go to GPU(s) {alive}")
                    for a, ks in self._assign([by_key[k] for k in rest], rest, alive).items():
                        todo.setdefault(a, []).extend(ks)
            now = time.time()
            if now - last > 15:
                last = now
                left = sum(len(v) for v in todo.values())
                self.log(f"{desc}: {len(cases) - left}/{len(cases)} cases on {len(self.alive())} GPUs, {now - t0:.0f} s")
        return [out.get(k) for k in keys]

    def _deaths(self) -> str:
        return ", ".join(f"GPU {g} exit {p.exitcode}" for g, p in self.procs.items() if p.exitcode is not None)

    def close(self, timeout_s: float = 60) -> None:
        if self in _POOLS:
            _POOLS.remove(self)
        for g in self.alive():
            self.tasks[g].put(None)
        for g, p in self.procs.items():
            p.join(timeout_s)
            if p.exitcode is None:
                p.terminate()
                p.join(5)
            self._bury(g)


def _label(case: dict) -> str:
    return f"{case.get('op')} {case.get('variant')} {case.get('dtype')} {case.get('shape')}"


# ---- adopting the shards of a run ----------------------------------------------------------------

def check_shards(sources: dict) -> None:
    """sources: {folder: [records]}. Every run id among them must be whole: one shard count N, shards 0..N-1
    each present, each shard in one folder only (a shard adopted twice would duplicate its records), one commit
    and one GPU model (the split is the same only for the same plan).
    ValueError naming the run, the shard and the folders. Records without a shard (older runs) are not checked;
    a run whose records all say '0/1' is whole."""
    seen: dict = {}  # run_id -> {shard: set(folders)}
    same: dict = {}  # run_id -> {(git_commit, gpu_name)}
    for folder, recs in sources.items():
        for r in recs:
            get = r.get if isinstance(r, dict) else (lambda k, r=r: getattr(r, k, None))
            sh = get("shard")
            if sh is None:
                continue
            seen.setdefault(get("run_id"), {}).setdefault(sh, set()).add(str(folder))
            same.setdefault(get("run_id"), set()).add((get("git_commit"), get("gpu_name")))
    for run, shards in sorted(seen.items()):
        if len(same[run]) > 1:
            raise ValueError(f"run {run}: its shards ran different code or GPU models ({sorted(map(str, same[run]))}): "
                             "the split is the same only for the same plan at the same commit; re-run the odd shard")
        parsed = {s: parse_shard(s, what=f"run {run}'s shard") for s in shards}
        counts = sorted({p.count for p in parsed.values()})
        if len(counts) > 1:
            raise ValueError(f"run {run}: its records name shards of different counts ({', '.join(sorted(shards))}): "
                             "not one split")
        n = counts[0]
        have = {p.index for p in parsed.values()}
        missing = [i for i in range(n) if i not in have]
        if missing:
            raise ValueError(f"run {run}: shard(s) {', '.join(f'{i}/{n}' for i in missing)} missing (have "
                             f"{', '.join(sorted(shards))}): adopt every shard's folder in one call")
        for s, folders in sorted(shards.items()):
            if len(folders) > 1:
                raise ValueError(f"run {run}: shard {s} is in {len(folders)} folders ({', '.join(sorted(folders))}): "
                                 "a shard measured twice; adopt one of them")
