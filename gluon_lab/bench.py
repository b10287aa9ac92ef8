"""One measured case -> one Record: correctness vs float64, timing, byte/FLOP model, SOL.

Correctness: fresh random inputs per case (never zeros), outputs poisoned with NaN before the run
(variants that take ``out=``), a float64 reference, per-dtype tolerances; NaN never passes unless
the reference is NaN at the same place.

Timers (every Record names its timer):
* "do_bench-l2flush": triton.testing.do_bench, which zeroes a 256 MB buffer before every call
  (L2 cold) and times each call with CUDA events; median / min / max over the calls.
* "cudagraph": QuACK-style. The op is captured K times into one CUDA graph, each capture on its
  own copy of the inputs, the copies together > 3x L2, so every launch finds its inputs cold in
  L2 and no host launch overhead is on the clock. Time per launch = replay time / K; median /
  min / max over replays. Default for every case that fits (Session.pick_timer): do_bench puts
  host launch time on the clock whenever the launcher's Python is slower than the GPU queue
  (issue #2 reports a 4096x4096 bf16 RMSNorm reading 22% and 62% SOL in consecutive do_bench
  calls on our H200; notebook 00's timer study and notebook 01 show what we measured).
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import statistics
from dataclasses import dataclass
from typing import Callable, Sequence

from . import device, registry, specs
from .results import Record, append_records, provenance, store_path

GRAPH_THRESHOLD_MS = 0.100  # below this do_bench's per-call timing includes host launch jitter
GRAPH_ALWAYS = True  # graph-time every case that fits (see Session.pick_timer); ceilings use do_bench
ROTATE_L2_FACTOR = 3  # rotated input copies together exceed 3x L2 (QuACK's bench_utils uses the same idea)
ROTATE_MAX_BYTES = 6 * 2**30  # cap on the memory the copies may take
ROTATE_MAX_COPIES = 256
MIN_TIMED_MS = 100.0  # the cudagraph timer replays back to back for at least this long (was capped at 200 reps: 10 ms at 50 us)
MAX_REPS = 20000

# (atol, rtol) against the float64 reference. bf16 keeps 8 mantissa bits: rounding the output
# alone costs up to 2^-9 relative; fp32 accumulation order adds a little on long rows.
TOLERANCES = {"bfloat16": (2e-2, 2e-2), "float16": (2e-3, 2e-3), "float32": (1e-4, 1e-4)}  # unless the spec says

_TORCH_DT = {"bfloat16": "bfloat16", "float16": "float16", "float32": "float32"}


def _torch():
    import torch
    return torch


def torch_dtype(name: str):
    return getattr(_torch(), _TORCH_DT[name])


# ----------------------------------------------------------------------------------------------
# inputs

def make_inputs(op: str, shape: dict, dtype: str, *, seed: int, device_: str = "cuda", scale: float = 1.0):
    """Fresh random inputs for op (the spec's input maker: normal values, never zeros). scale
    multiplies x (large-magnitude rows). op "copy": one (M, N) tensor (the copy ceiling)."""
    torch = _torch()
    g = torch.Generator(device=device_).manual_seed(seed)
    dt = torch_dtype(dtype)

    def rnd(*s, mean=0.0, std=1.0):
        return (torch.randn(*s, generator=g, device=device_, dtype=torch.float32) * std + mean).to(dt)

    if op == "copy":  # not an op: the measured bandwidth ceiling
        return (rnd(shape["M"], shape["N"], std=scale), )
    return specs.get(op).make_inputs(shape, dtype, rnd, scale)


def _as_tuple(o):
    return o if isinstance(o, tuple) else (o, )


# ----------------------------------------------------------------------------------------------
# correctness

def compare(got, ref, dtype: str, tol=None) -> dict:
    """max_abs_err, rel_err (||got-ref|| / ||ref||) and passed. NaN/Inf must match the reference.

    Element test: |got - ref| <= atol * scale + rtol * |ref|, with scale the RMS of the finite
    reference values, so outputs that are small by construction (l2_norm: ~1/sqrt(N)) are held to
    the same relative standard as O(1) outputs. Norm test: rel_err <= rtol as well."""
    torch = _torch()
    atol, rtol = tol or TOLERANCES[dtype]
    max_abs, num, den, ok = 0.0, 0.0, 0.0, True
    for g, r in zip(_as_tuple(got), _as_tuple(ref)):
        g = g.reshape(r.shape).double()
        r = r.double()
        if not torch.equal(torch.isnan(g), torch.isnan(r)) or not torch.equal(torch.isposinf(g), torch.isposinf(r)) \
                or not torch.equal(torch.isneginf(g), torch.isneginf(r)):
            ok = False
        fin = torch.isfinite(r) & torch.isfinite(g)
        d = (g - r).abs()[fin]
        if d.numel():
            rf = r[fin]
            scale = rf.pow(2).mean().sqrt().item() or 1.0
            max_abs = max(max_abs, d.max().item())
            num += d.pow(2).sum().item()
            den += rf.pow(2).sum().item()
            if not bool((d <= atol * scale + rtol * rf.abs()).all()):
                ok = False
    rel = math.sqrt(num / den) if den > 0 else 0.0
    return {"max_abs_err": max_abs, "rel_err": rel, "passed": bool(ok and rel <= rtol)}


def reference_outputs(op: str, inputs, scalars: dict | None = None, row_chunk: int = 4096):
    """float64 reference; ops whose spec allows it (row norms) in blocks of rows, so 32768x16384
    fits comfortably."""
    torch = _torch()
    spec = specs.get(op)
    scalars = spec.default_scalars(**(scalars or {}))
    x = inputs[0]
    if not spec.row_blocked_reference or x.dim() != 2 or x.shape[0] <= row_chunk:
        return spec.reference(*inputs, **scalars)
    M = x.shape[0]
    outs = []
    for s in range(0, M, row_chunk):
        sl = slice(s, min(M, s + row_chunk))
        block = tuple(t[sl] if hasattr(t, "shape") and t.shape == x.shape else t for t in inputs)
        outs.append(_as_tuple(spec.reference(*block, **scalars)))
    res = tuple(torch.cat([o[i] for o in outs]) for i in range(len(outs[0])))
    return res if len(res) > 1 else res[0]


def check_correctness(op: str, variant: str, inputs, scalars: dict | None = None, tol=None, config=None,
                      call: str = "fn") -> dict:
    """Run the variant once on poisoned outputs and compare with float64. Includes 'error' when
    the variant raised (recorded as a failed case, never skipped). call="api": through the public
    function (gll.<op>(..., variant=...)) twice, the second call replaying the fast path's plan,
    its outputs allocated where a NaN-filled block of their size was just freed."""
    spec = specs.get(op)
    kw = spec.default_scalars(**(scalars or {}))
    if call != "api":
        v = registry.get_variant(op, variant)
    if getattr(spec, "inplace", None):
        # in place: the reference from the untouched inputs, the variant on a copy of them (its
        # result is the whole updated tensor: untouched parts, e.g. V of a packed QKV, included)
        ref = reference_outputs(op, inputs, scalars)
        work = clone_inputs(inputs)
        if call == "api":
            import gluon_lab as gll
            got = getattr(gll, op)(*work, variant=variant, **kw)
        else:
            got = v.fn(*work, **kw, **({"config": config} if config is not None else {}))
        _torch().cuda.synchronize()
        dt = ops_dtype(inputs[0])
        return compare(got, ref, dt, tol if tol is not None else (spec.tolerance or {}).get(dt))
    if call == "api":
        import gluon_lab as gll
        fn = getattr(gll, op)
        fn(*inputs, variant=variant, **kw)
        poison = spec.alloc_outputs(inputs, fill=float("nan"))
        del poison  # the caching allocator hands these NaN blocks to the replay's outputs
        got = fn(*inputs, variant=variant, **kw)
    else:
        if v.supports_out:
            kw["out"] = spec.alloc_outputs(inputs, fill=float("nan"))
        if config is not None:
            kw["config"] = config
        got = v.fn(*inputs, **kw)
    _torch().cuda.synchronize()
    ref = reference_outputs(op, inputs, scalars)
    dt = ops_dtype(inputs[0])
    if tol is None and spec.tolerance:
        tol = spec.tolerance[dt]
    return compare(got, ref, dt, tol)


def ops_dtype(t) -> str:
    return str(t.dtype).replace("torch.", "")


# ----------------------------------------------------------------------------------------------
# timers

@dataclass
class Timing:
    ms_median: float
    ms_min: float
    ms_max: float
    n_reps: int
    timer: str


def time_do_bench(fn: Callable, warmup_ms: int = 25, rep_ms: int = 100) -> Timing:
    import triton.testing
    times = triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="all")
    return Timing(statistics.median(times), min(times), max(times), len(times), "do_bench-l2flush")


def _l2_bytes() -> int:
    info = device.gpu_info()
    if info and info.get("l2_bytes"):
        return info["l2_bytes"]
    return 50 * 2**20


def rotation_copies(bytes_per_call: int, l2_bytes: int | None = None) -> int:
    """How many input copies so that the copies together exceed ROTATE_L2_FACTOR x L2.
    Raises ValueError when the caps (ROTATE_MAX_COPIES, ROTATE_MAX_BYTES) would leave them smaller:
    such a case cannot be timed L2-cold by this timer."""
    l2 = l2_bytes or _l2_bytes()
    k = max(2, math.ceil(ROTATE_L2_FACTOR * l2 / max(1, bytes_per_call)) + 1)
    if k > ROTATE_MAX_COPIES:
        raise ValueError(f"a call moving {bytes_per_call} bytes would need {k} rotated copies to exceed "
                         f"{ROTATE_L2_FACTOR}x L2 ({l2} B); the timer allows {ROTATE_MAX_COPIES}")
    if k * bytes_per_call > ROTATE_MAX_BYTES and k > 2:
        raise ValueError(f"{k} rotated copies of {bytes_per_call} bytes exceed ROTATE_MAX_BYTES")
    return k


def check_distinct_outputs(outs) -> None:
    """Every captured call must write its own output buffer(s), or rotation is not cold."""
    ptrs = [t.data_ptr() for o in outs for t in (o if isinstance(o, tuple) else (o, )) if hasattr(t, "data_ptr")]
    if len(set(ptrs)) != len(ptrs):
        raise RuntimeError("cudagraph timer: captured calls share an output buffer; rotation would not be cold")


def time_cudagraph(calls: Sequence[Callable], reps: int | None = None, warmup_replays: int = 3,
                   target_ms: float = 150.0) -> Timing:
    """Capture calls[0..K-1] (each on its own input copy) into one graph and replay it.
    Time per call = replay time / K. Replays run back to back for >= MIN_TIMED_MS (the GPU's clock
    ramps under load: a few replays read 5-15% low at large shapes); reps are sized to ~target_ms,
    at most MAX_REPS (a replay under ~7 us then times MAX_REPS x its length)."""
    torch = _torch()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for c in calls:  # warm-up outside capture (compilation, autotune, allocator)
            c()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    # Keep every captured call's outputs alive until the graph is gone: otherwise a variant that
    # allocates its output (torch, inductor, liger) gets the block the previous call just freed
    # from the graph's private pool, and all K calls write ONE buffer that can stay in L2.
    outs = []
    # Capture on the warm-up stream: state a variant keeps per stream (the dynamic schedule's block
    # counter) exists there; torch.cuda.graph's default is a fresh side stream of its own.
    with torch.cuda.graph(g, stream=s):
        for c in calls:
            outs.append(c())
    check_distinct_outputs(outs)
    for _ in range(warmup_replays):
        g.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    g.replay()
    end.record()
    end.synchronize()
    one = max(start.elapsed_time(end), 1e-3)
    if reps is None:
        reps = int(min(MAX_REPS, max(10, math.ceil(max(target_ms, MIN_TIMED_MS) / one))))
    evs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for a, b in evs:
        a.record()
        g.replay()
        b.record()
    torch.cuda.synchronize()
    per = [a.elapsed_time(b) / len(calls) for a, b in evs]
    del g, outs
    return Timing(statistics.median(per), min(per), max(per), reps, "cudagraph")


def quick_estimate_ms(fn: Callable, n: int = 5) -> float:
    torch = _torch()
    fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(n):
        fn()
    b.record()
    b.synchronize()
    return a.elapsed_time(b) / n


# ----------------------------------------------------------------------------------------------
# metrics (functions of the measured latency)

def gbps(nbytes: int, ms: float) -> float:
    return nbytes / (ms * 1e-3) / 1e9


def tflops(nflops: int, ms: float) -> float:
    return nflops / (ms * 1e-3) / 1e12


@dataclass
class Ceilings:
    copy_gbps: float
    matmul_tflops: float
    copy_bytes: int
    records: list


def measure_ceilings(prov: dict | None = None, copy_gib: float = 2.0, matmul_n: int = 8192) -> Ceilings:
    """Device-to-device copy over copy_gib GiB (read + write counted) and bf16 matmul_n^3 torch.matmul.
    Both with do_bench (L2 flushed; each call is far above 100 us). Returns the ceilings and their Records."""
    if not device.cuda_available():
        raise device.GPUUnavailableError("measure_ceilings needs a CUDA GPU")
    torch = _torch()
    prov = prov or provenance()
    spec = device.lookup_spec(prov.get("gpu_name") or "")
    n = int(copy_gib * 2**30) // 2
    src = torch.randn(n, device="cuda", dtype=torch.float32).to(torch.bfloat16)
    dst = torch.empty_like(src)
    t = time_do_bench(lambda: dst.copy_(src), warmup_ms=50, rep_ms=300)
    ok = torch.equal(dst, src)
    nbytes = 2 * src.numel() * src.element_size()
    copy_gbps = gbps(nbytes, t.ms_median)
    del src, dst
    recs = [Record(op="copy", variant="torch", pattern="ceiling", shape={"bytes": n * 2}, dtype="bfloat16",
                   config={"what": "dst.copy_(src), read+write counted"}, **dataclasses.asdict(t), bytes=nbytes,
                   gbps=copy_gbps, sol_datasheet_pct=100 * copy_gbps / spec.hbm_gbps if spec else None,
                   sol_measured_pct=100.0, passed=ok, **prov)]
    a = torch.randn(matmul_n, matmul_n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(matmul_n, matmul_n, device="cuda", dtype=torch.bfloat16)
    t = time_do_bench(lambda: torch.matmul(a, b), warmup_ms=100, rep_ms=500)
    rows = slice(0, 64)  # spot-check the ceiling's arithmetic against float64 on 64 rows
    mm_ok = compare(torch.matmul(a[rows], b), a[rows].double() @ b.double(), "bfloat16",
                    specs.get("matmul").tolerance["bfloat16"])["passed"]
    nfl = 2 * matmul_n**3
    mm = tflops(nfl, t.ms_median)
    recs.append(Record(op="matmul", variant="torch", pattern="ceiling",
                       shape={"M": matmul_n, "N": matmul_n, "K": matmul_n}, dtype="bfloat16",
                       config={"what": "torch.matmul (cuBLAS), random normal inputs"}, **dataclasses.asdict(t),
                       bytes=3 * matmul_n**2 * 2, flops=nfl, tflops=mm,
                       sol_datasheet_pct=100 * mm / spec.bf16_tflops if spec else None, sol_measured_pct=100.0,
                       passed=mm_ok, **prov))
    del a, b
    torch.cuda.empty_cache()
    return Ceilings(copy_gbps=copy_gbps, matmul_tflops=mm, copy_bytes=nbytes, records=recs)


# ----------------------------------------------------------------------------------------------
# a sharded run's worker (gluon_lab.shard.Pool spawns one per GPU): a Session on its GPU, one case a call

def _pool_session(notebook: str, results_dir: str, run_id: str, shard: str, ceiling_kw: dict) -> "Session":
    s = Session(notebook, results_dir, run_id=run_id, shard=shard, pool=False, **ceiling_kw)
    s.save()  # its ceilings, first
    return s


def _pool_measure(s: "Session", case: dict) -> str:
    r = s.measure_copy(case["shape"], case["dtype"], case.get("timer", "auto")) if case.get("op") == "copy" \
        else s.measure(**case)
    s.save()
    return r.to_json()


def pool_factory():
    return _pool_session, _pool_measure


# ----------------------------------------------------------------------------------------------
# a measurement session: provenance + ceilings of this run + records

def clone_inputs(inputs) -> tuple:
    """Fresh copies of the tensors among inputs (clone keeps the memory format); other entries
    (group_norm's num_groups, None) are passed through."""
    torch = _torch()
    return tuple(t.clone() if isinstance(t, torch.Tensor) else t for t in inputs)


#: a graph-timed norm case on the H200 (check, capture, >= 100 ms of replays), for plan estimates
SECONDS_PER_CASE = 0.4
# config keys a call="api" case may carry: labels of the case (its study, how cuDNN picks, what auto chose and
# read), never a knob (the public function runs the heuristic config)
API_LABELS = frozenset({"study", "chosen", "table_seed", "heuristic", "cudnn_benchmark"})


class Session:
    """Everything measured in one run shares provenance, run_id and the ceilings measured at its
    start, so SOL vs measured ceilings compares numbers taken minutes apart on the same GPU."""

    def __init__(self, notebook: str, results_dir: str = "results", ceilings: bool = True, run_id: str | None = None,
                 shard: str | None = None, pool: bool | None = None, **ceiling_kw):
        """run_id / shard: this process's part in a sharded run (default: gluon_lab.shard.SETTINGS, which the CLI's
        --run-id / --shard / --gpus set). pool: one worker process per GPU of SETTINGS.gpus measures the sweeps
        (default: when it names several GPUs); this process keeps the captures, on the first GPU."""
        from . import shard as sh
        if not device.cuda_available():
            raise device.GPUUnavailableError("a measurement Session needs a CUDA GPU; use mode='replay' on CPU")
        st = sh.SETTINGS
        self.notebook = notebook
        self.results_dir = results_dir
        gpus = st.gpus or []
        self.pool = None
        if pool is None:
            pool = len(gpus) > 1
        self.shard = sh.parse_shard(shard, what="shard") if shard else (st.shard if not pool else None)
        part = str(self.shard or sh.Shard(0, 1))  # a host's pool is one shard of its run (which GPU: gpu_index)
        self.prov = provenance(run_id or st.run_id, shard=part)
        self.info = device.gpu_info()
        self.spec = device.lookup_spec(self.info["gpu_name"])
        self.records: list[Record] = []
        self.saved = 0
        self._seed = 1234
        self._hashes: dict = {}
        if pool:
            # the workers measure every sweep, each after its own ceilings; this process's own measurements (the
            # captures) use the first GPU's ceilings, which its worker measured
            self.pool = sh.Pool(notebook, results_dir, gpus, self.prov["run_id"], ceiling_kw)
            c = self.pool.ceilings(gpus[0]) if ceilings else None
            self.ceilings = Ceilings(records=[], **c) if c else None
            return
        self.ceilings = measure_ceilings(self.prov, **ceiling_kw) if ceilings else None
        if self.ceilings:
            self.records.extend(self.ceilings.records)

    _whole = False

    @contextlib.contextmanager
    def unsharded(self):
        """Sweeps inside measure every case they are given, not this shard's part (a study shard 0 takes whole,
        as 00's held-out check: its draw is one set of cases)."""
        self._whole, before = True, self._whole
        try:
            yield self
        finally:
            self._whole = before

    @property
    def primary(self) -> bool:
        """Does this process take the plan's captures (timelines, Inductor code, studies that are not case
        sweeps)? Every run but shards 1.. of a job array (shard 0 takes them)."""
        return self.shard is None or self.shard.index == 0

    def close(self) -> None:
        """End the worker processes of a pooled run (each finishes its case first)."""
        if self.pool is not None:
            self.pool.close()

    def next_seed(self) -> int:
        self._seed += 1
        return self._seed

    _partial_rotation = False
    _rotation_note = None

    def measure(self, op: str, variant: str, shape: dict, dtype: str, *, timer: str = "auto", config=None,
                eps=None, scale: float = 1.0, call: str = "fn", rotation: str = "cold") -> Record:
        """One case: correctness on poisoned outputs, then the timer. call="fn" times the variant's
        function on pre-allocated outputs (the kernel study's path); call="api" times the public
        function (fast-path plan replay, outputs allocated per call; heuristic config only).
        variant="auto" (call="api" only): the public function's default; the record names the variant the
        selection model chose (config.chosen) and the table it read (config.table_seed); its hash is None
        (a rule over the other variants' records, as the dispatch study's auto).
        config.cudnn_benchmark (a label of the case, not a knob): torch.backends.cudnn.benchmark is set to it
        for this case, so the record says how cuDNN picked its algorithm whoever runs the case (a notebook's
        plan, refresh, the held-out check)."""
        torch = _torch()
        want = (config or {}).get("cudnn_benchmark")
        before = torch.backends.cudnn.benchmark
        if want is not None:
            torch.backends.cudnn.benchmark = bool(want)
        try:
            return self._measure(op, variant, shape, dtype, timer=timer, config=config, eps=eps, scale=scale,
                                 call=call, rotation=rotation)
        finally:
            torch.backends.cudnn.benchmark = before

    def _measure(self, op, variant, shape, dtype, *, timer, config, eps, scale, call, rotation) -> Record:
        torch = _torch()
        spec = specs.get(op)
        inputs = make_inputs(op, shape, dtype, seed=self.next_seed(), scale=scale)
        auto = variant == "auto"
        if auto:
            from . import selection
            if call != "api":
                raise ValueError("variant='auto' is measured through the public function: call='api'")
            v = registry.get_variant(op, selection.choose(spec, inputs))
        else:
            v = registry.get_variant(op, variant)
        nbytes = spec.bytes(shape, dtype)
        nfl = spec.flops(shape)
        scalars = spec.default_scalars(eps=eps) if "eps" in spec.scalars else spec.default_scalars()
        rec_config = dict(config or {})
        base = dict(op=op, variant=variant, pattern="dispatch" if auto else v.pattern, shape=dict(shape), dtype=dtype,
                    config=rec_config, bytes=nbytes, flops=nfl, kernel_source_hash=None if auto else self._hash(v),
                    **self.prov)
        if auto:
            rec_config = {**rec_config, "chosen": v.name, "table_seed": selection.load_table().get("seed")}
            base["config"] = rec_config
        try:
            cfg_obj = None if auto else v.resolve(shape, dtype, rec_config) if v.configure is not None else None
            if cfg_obj is not None:  # the record carries the full config the kernel ran with
                base["config"] = {**rec_config, **dataclasses.asdict(cfg_obj)}  # resolved knobs win; extras stay
            if call == "api":
                if set(rec_config) - API_LABELS:
                    raise ValueError(f"call='api' runs the heuristic config: no knob overrides, got {sorted(rec_config)}")
                base["config"]["call"] = "api"
            corr = check_correctness(op, variant, inputs, scalars, config=cfg_obj, call=call)
        except Exception as e:  # a crashing variant is a failed record, not a silent skip
            torch.cuda.synchronize()
            rec = Record(**base, passed=False, notes=f"error: {type(e).__name__}: {e}"[:500])
            self.records.append(rec)
            return rec
        kw = dict(scalars)
        if cfg_obj is not None:
            kw["config"] = cfg_obj
        if call == "api":  # the public function with this variant name ("auto" included)
            def mk(a):
                return self._make_api_call(variant, spec, a, kw)
        else:
            def mk(a):
                return self._make_call(v, spec, a, kw)
        fn = mk(inputs)
        if rotation not in ("cold", "partial"):
            raise ValueError(f"rotation must be 'cold' or 'partial', got {rotation!r}")
        self._partial_rotation = rotation == "partial"
        try:
            t = self._time(fn, lambda: mk(clone_inputs(inputs)), nbytes, nfl, timer)
        finally:
            self._partial_rotation = False
        del inputs, fn
        if nfl and spec.compute_bound:  # the SM clock (NVML) right after the timing, with it
            base["config"] = {**base["config"], "sm_clock_mhz": device.sm_clock_mhz()}
        rec = Record(**base, **dataclasses.asdict(t), **corr, **self.metrics(nbytes, nfl, t.ms_median, spec))
        if self._rotation_note:
            rec.notes = self._rotation_note
        if rec.sol_datasheet_pct and rec.sol_datasheet_pct > 100:
            rec.notes = "over 100% of the datasheet: cache reuse leaked into the timing"
        self.records.append(rec)
        return rec

    def _hash(self, v) -> str:
        """The variant's code hash, once per session (the code does not change during a run)."""
        key = (v.op, v.name)
        if key not in self._hashes:
            self._hashes[key] = v.code_hash()
        return self._hashes[key]

    def measure_copy(self, shape: dict, dtype: str, timer: str = "auto") -> Record:
        """A plain y.copy_(x) of one (M, N) operand: the achievable bandwidth at that size."""
        torch = _torch()
        x = make_inputs("copy", shape, dtype, seed=self.next_seed())[0]
        nbytes = 2 * x.numel() * x.element_size()
        mk = lambda src: (lambda dst=torch.empty_like(src): dst.copy_(src))  # noqa: E731
        t = self._time(mk(x), lambda: mk(x.clone()), nbytes, 0, timer)
        y = torch.empty_like(x)
        y.copy_(x)
        rec = Record(op="copy", variant="torch", pattern="ceiling", shape={**shape, "bytes": x.numel() * x.element_size()},
                     dtype=dtype, config={"what": "y.copy_(x) at this shape"}, **dataclasses.asdict(t), bytes=nbytes,
                     flops=0, passed=bool(torch.equal(y, x)), **self.metrics(nbytes, 0, t.ms_median), **self.prov)
        self.records.append(rec)
        return rec

    def _time(self, call, make_copy, nbytes: int, nfl: int, timer: str) -> Timing:
        """Time call with the named timer ("auto": pick_timer). make_copy() returns the same call
        on fresh copies of its inputs, for the graph timer's rotation."""
        if timer == "auto":
            timer = self.pick_timer(nbytes, nfl, call)
        if timer == "cudagraph":
            self._rotation_note = None
            try:
                k = rotation_copies(nbytes, self.info.get("l2_bytes"))
            except ValueError:
                if not self._partial_rotation:
                    raise
                # a call too small to rotate past 3x L2 within the copy cap (decode-sized: 1-16 tokens of
                # a packed QKV are a few KB): the most copies the timer allows, and the record says so
                k = ROTATE_MAX_COPIES
                self._rotation_note = (f"partial rotation: {k} copies x {nbytes} B = {k * nbytes / 2**20:.1f} MiB, below "
                                       f"{ROTATE_L2_FACTOR}x L2: inputs partly L2-resident, as in a decode step")
            return time_cudagraph([call] + [make_copy() for _ in range(k - 1)])
        if timer == "do_bench-l2flush":
            return time_do_bench(call)
        raise ValueError(f"timer must be 'auto', 'cudagraph' or 'do_bench-l2flush', got {timer!r}")

    def pick_timer(self, nbytes: int, nfl: int, call) -> str:
        """"cudagraph" for every case whose rotated copies fit in ROTATE_MAX_BYTES (GRAPH_ALWAYS),
        else by duration: cudagraph under GRAPH_THRESHOLD_MS at the ceilings measured in this run,
        do_bench above.

        Why always the graph: do_bench records its start event after the L2 flush and then calls
        fn() from Python; whenever fn's host path (descriptor building, dispatch) outlasts the
        flush still queued on the GPU, the host's time is on the clock. Seen on the H200: gluon-tma
        (Python-built TMA descriptors) read 56-75% SOL by do_bench at 0.13-0.26 ms cells that read
        82-86% in neighbouring runs and in graph-timed sweeps, in different cells each run."""
        if GRAPH_ALWAYS and 2 * nbytes <= ROTATE_MAX_BYTES:
            return "cudagraph"
        if self.ceilings:
            est = max(nbytes / (self.ceilings.copy_gbps * 1e9),
                      nfl / (self.ceilings.matmul_tflops * 1e12) if nfl and nfl > 64 * nbytes else 0) * 1e3
        else:
            est = quick_estimate_ms(call)
        return "cudagraph" if est < GRAPH_THRESHOLD_MS else "do_bench-l2flush"

    @staticmethod
    def _make_api_call(name, spec, inputs, kw):
        import gluon_lab as gll
        fn = getattr(gll, spec.name)
        scalars = {k: val for k, val in kw.items() if k != "config"}
        return lambda: fn(*inputs, variant=name, **scalars)

    @staticmethod
    def _make_call(v, spec, inputs, kw):
        if v.supports_out:
            out = spec.alloc_outputs(inputs)
            return lambda: v.fn(*inputs, out=out, **kw)
        return lambda: v.fn(*inputs, **kw)

    def metrics(self, nbytes: int, nfl: int, ms: float, spec=None) -> dict:
        bw = gbps(nbytes, ms)
        tf = tflops(nfl, ms) if nfl else None
        m = {"gbps": bw, "tflops": tf}
        if spec is not None and spec.compute_bound:  # SOL against tensor-core throughput
            if self.spec:
                m["sol_datasheet_pct"] = 100 * tf / self.spec.bf16_tflops
            if self.ceilings:
                m["sol_measured_pct"] = 100 * tf / self.ceilings.matmul_tflops
            return m
        if self.spec:
            m["sol_datasheet_pct"] = 100 * bw / self.spec.hbm_gbps
        if self.ceilings:
            m["sol_measured_pct"] = 100 * bw / self.ceilings.copy_gbps
        return m

    def sweep(self, cases: Sequence[dict], desc: str = "sweep") -> list[Record]:
        """cases: dicts of measure() kwargs. Progress: a tqdm bar on a terminal, else a line at the start
        (cases, estimate) and about every 15 s (done / total, elapsed, estimated time left)."""
        import sys
        import time
        if self.pool is not None:  # every GPU's worker takes its share (gluon_lab.shard.split); records saved there
            lines = self.pool.sweep(list(cases), desc=desc)
            return [Record.from_dict(json.loads(x)) for x in lines if x is not None]
        if self.shard is not None and self.shard.count > 1 and not self._whole:
            from .shard import shard_cases
            cases = shard_cases(list(cases), self.shard)
        out = []
        tty = sys.stderr.isatty()
        t0 = last = time.time()
        n = len(cases)
        if not tty:
            print(f"{desc}: {n} cases (about {n * SECONDS_PER_CASE:.0f} s at ~{SECONDS_PER_CASE} s per case; "
                  "compiles and torch.compile baselines take longer)", flush=True)
        it = cases
        if tty:
            from tqdm.auto import tqdm
            it = tqdm(cases, desc=desc, mininterval=5)
        for i, c in enumerate(it, 1):
            if c.get("op") == "copy":
                out.append(self.measure_copy(c["shape"], c["dtype"], c.get("timer", "auto")))
            else:
                out.append(self.measure(**c))
            self.save()  # append as we go: a run cut short keeps what it measured
            now = time.time()
            if not tty and (now - last > 15 or i == n):
                last = now
                r = out[-1]
                left = (now - t0) / i * (n - i)
                print(f"{desc}: {i}/{n} cases, {now - t0:.0f} s, ~{left:.0f} s left (last: {r.op} {r.variant} "
                      f"{r.shape} {'ok' if r.passed else 'FAILED'})", flush=True)
        return out

    def save(self) -> str:
        path = store_path(self.results_dir, self.info["gpu_slug"], self.notebook)
        self.saved += append_records(path, self.records)
        self.records = []
        return f"{path} ({self.saved} records this run)"
