"""The measurement plan of each notebook, as plain functions: the notebook (mode="measure") and
the CLI (`python -m gluon_lab bench NOTEBOOK`) call the same code, so a batch run on the GPU
machine and an interactive run in JupyterLab produce the same records."""
from __future__ import annotations

import dataclasses
import itertools
import statistics
from dataclasses import dataclass


from .plan_common import measure_plan, record_stamps, resolves, save_timeline  # noqa: E402,F401 - the plans' shared steps (07 imports them too)


@dataclass(frozen=True)
class CeilingsPlan:
    """00-ceilings: ceilings + the RMSNorm baseline grid (bf16) + a do_bench-vs-graph timer study."""
    Ms: tuple = (4096, 8192, 16384, 32768)
    Ns: tuple = (4096, 5120, 8192, 12288, 16384)
    variants: tuple = ("torch", "inductor", "triton")
    dtype: str = "bfloat16"
    # Cells where both timers are recorded side by side: small (graph-timer territory) to large.
    timer_cells: tuple = ((4096, 4096), (8192, 4096), (4096, 16384), (32768, 16384))
    timer_variants: tuple = ("torch", "triton")
    timer_repeats: int = 3  # consecutive measurements per timer: do_bench's spread shows up here
    # Kernel time through the fast path vs the variant's own launcher, graph-timed side by side in
    # one run: the 01 grid (M x N), pattern 1's gluon-tma and pattern 2's two-output gluon-chunked.
    fastpath_cells: tuple = tuple((M, N) for M in (4096, 8192, 16384, 32768) for N in (4096, 8192, 16384))
    fastpath_variants: tuple = (("rms_norm", "gluon-tma"), ("add_rms_norm", "gluon-chunked"))

    @classmethod
    def quick(cls):
        return cls(Ms=(1024, 2048), Ns=(1024, 1536), timer_cells=((1024, 1024), ), timer_repeats=2,
                   fastpath_cells=((1024, 1024), (2048, 4096)))


def plan_cases(plan: CeilingsPlan) -> list[dict]:
    cases = []
    for M in plan.Ms:
        for N in plan.Ns:
            cases.append({"op": "copy", "shape": {"M": M, "N": N}, "dtype": plan.dtype})
            for v in plan.variants:
                cases.append({"op": "rms_norm", "variant": v, "shape": {"M": M, "N": N}, "dtype": plan.dtype})
    for (M, N) in plan.timer_cells:
        for v in plan.timer_variants:
            for timer in ("do_bench-l2flush", "cudagraph"):
                for r in range(plan.timer_repeats):
                    cases.append({"op": "rms_norm", "variant": v, "shape": {"M": M, "N": N}, "dtype": plan.dtype,
                                  "timer": timer, "config": {"study": "timers", "repeat": r}})
    return cases


DISPATCH_MS = (1, 32, 256, 4096)  # the M grid: decode (1), small batch, prefill tiles, a full prefill
# inductor-max-autotune: minutes of autotuning per shape, its host path is inductor's; quack: timed at
# its own front door (_quack_peers), not through this API
DISPATCH_SKIP = ("inductor-max-autotune", "quack")
DISPATCH_INDUCTOR_OPS = ("rms_norm", )  # a compile per shape: one op shows torch.compile's host path


def dispatch_shapes(op: str, Ms=DISPATCH_MS, N: int = 4096) -> list[dict]:
    """The shapes of the dispatch study, from the op's shape keys: (M, N) rows, (M, N, N) for an op
    with a K, batch B in place of M for (B, C, H, W[, G]) ops (C = 256, 16x16, 32 groups), tokens T
    in place of M for packed-QKV ops (32 Q and 8 K/V heads of 128)."""
    from . import specs
    keys = set(specs.get(op).shape_keys)
    if keys & {"Ci", "Co", "stride", "pad"}:
        return []  # convolutions: the study's shapes are rows, GEMMs, (B, C, H, W) norms and packed QKV
    if "K" in keys:
        return [{"M": M, "N": N, "K": N} for M in Ms]
    if "B" in keys:
        return [{"B": B, "C": 256, "H": 16, "W": 16, **({"G": 32} if "G" in keys else {})} for B in (1, 2, 8, 32)]
    if "T" in keys:
        return [{"T": M, "Hq": 32, "Hk": 8, "D": 128, "R": 128} for M in Ms]
    return [{"M": M, "N": N} for M in Ms]


def host_loops(fns: dict, calls: int = 200, repeats: int = 7, warmup: int = 20) -> dict:
    """{name: [ms per call of each loop]}: the callables timed in rounds — each round one loop of
    `calls` calls of every callable in turn — so all of them see the same host state. The host's
    speed drifts between loops (on the H200 host, eager torch read 14 or 22 us per call in
    consecutive loops of one run, with the same shapes): timing one variant's loops back to back and
    the next variant's later would turn that drift into a difference between variants. A callable
    that raises is reported as its exception."""
    import time
    import torch
    out: dict = {}
    for name, fn in fns.items():
        try:
            for _ in range(warmup):
                fn()
            out[name] = []
        except Exception as e:  # noqa: BLE001 - reported by the caller as a failed record
            out[name] = e
    torch.cuda.synchronize()
    for _ in range(repeats):
        for name, fn in fns.items():
            if isinstance(out[name], Exception):
                continue
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            out[name].append((time.perf_counter() - t0) / calls * 1e3)
            torch.cuda.synchronize()
    return out


def _summary(per):
    if isinstance(per, Exception):
        raise per
    return statistics.median(per), min(per), max(per)


def _quack_peers() -> dict:
    """{op: QuACK's front door} when quack-kernels is installed: the registered peer's own call
    (kernels/baselines.py), timed without this API in front of it."""
    from . import registry
    v = registry.get_variant("rms_norm", "quack")
    return {"rms_norm": lambda x, w: v.fn(x, w, eps=1e-6)} if v.available() else {}


def fastpath_grid_cases(plan: CeilingsPlan) -> list[dict]:
    """Each cell and variant twice in one run, graph-timed: call="fn" (the launcher the kernel
    studies time, pre-allocated outputs) and call="api" (the public function's plan replay)."""
    return [{"op": op, "variant": v, "shape": {"M": M, "N": N}, "dtype": plan.dtype, "call": call,
             "timer": "cudagraph", "config": {"study": "fastpath"}}
            for (M, N) in plan.fastpath_cells for op, v in plan.fastpath_variants for call in ("fn", "api")]


def _spin(seconds: float) -> None:
    import time
    t_end = time.perf_counter() + seconds
    x = 0
    while time.perf_counter() < t_end:
        x += 1


def _without_fastpath(fn, inputs, name):
    from . import fastpath
    fastpath.enabled = False
    try:
        return fn(*inputs, variant=name)
    finally:
        fastpath.enabled = True


def measure_dispatch(session, ops=None, Ms=DISPATCH_MS, N: int = 4096, dtype: str = "bfloat16", variants=None,
                     calls: int = 200, repeats: int = 7, slow_ops=("rms_norm", ), warmup_s: float = 5.0) -> list:
    """Host cost of a call through the public API: a plain Python loop of `calls` calls, wall time
    per call (median of `repeats` loops, after warm-up; timer "host-loop"), for variant="auto", every
    available variant of every op (torch, Triton, Liger, Inductor, the gluon-lab kernels) and
    QuACK's rmsnorm when installed. For the ops in `slow_ops` the gluon-lab variants are also timed
    with the fast path off (config.fastpath = False: every check, config and descriptor rebuilt per
    call), which is what the plan cache saves. Records carry config.study = "dispatch",
    config.fastpath and, for auto, config.chosen; auto's hash is None (a rule over the others).
    Per shape, every variant's loops run in interleaved rounds (host_loops), after `warmup_s` of busy
    host work."""
    from . import specs
    recs = []
    ops = ops or [s.name for s in specs.all_specs()]
    quack = _quack_peers()
    _spin(warmup_s)  # the host's clocks ramp under load as the GPU's do: the first op measured read ~1.7x slow
    _dispatch_ops(session, ops, Ms, N, dtype, variants, calls, repeats, slow_ops, quack, recs)
    session.records.extend(recs)
    return recs


def _dispatch_ops(session, ops, Ms, N, dtype, variants, calls, repeats, slow_ops, quack, recs):
    import torch
    import gluon_lab as gll
    from . import bench, fastpath, registry, selection, specs
    from .results import Record
    for op in ops:
        spec = specs.get(op)
        fn = getattr(gll, op)
        for shape in dispatch_shapes(op, Ms, N):
            inputs = bench.make_inputs(op, shape, dtype, seed=session.next_seed())
            shape = spec.shape_of(*inputs)
            chosen = selection.choose(spec, inputs)
            names = ["auto"] + [v for v in (variants or registry.variants(op)) if v not in DISPATCH_SKIP
                                and (v != "inductor" or op in DISPATCH_INDUCTOR_OPS)
                                and registry.eligible(registry.get_variant(op, v), inputs)]
            runs = [(n, True) for n in names]
            runs += [(n, False) for n in names if op in slow_ops and n != "auto" and registry.get_variant(op, n).ours]
            if op in quack:
                runs.append(("quack", None))
            calls_of = {}
            for name, fast in runs:
                if name == "quack":
                    calls_of[(name, fast)] = lambda q=quack[op], a=inputs: q(*a)
                elif fast is False:
                    calls_of[(name, fast)] = lambda name=name, a=inputs: _without_fastpath(fn, a, name)
                else:
                    calls_of[(name, fast)] = lambda name=name, a=inputs: fn(*a, variant=name)
            timed = host_loops(calls_of, calls, repeats)
            for name, fast in runs:
                try:
                    med, lo, hi = _summary(timed[(name, fast)])
                    err = None
                except Exception as e:  # noqa: BLE001 - a variant that fails is a failed record, named
                    med = lo = hi = None
                    err = f"error: {type(e).__name__}: {e}"[:300]
                v = None if name in ("auto", "quack") else registry.get_variant(op, name)
                cfg = {"study": "dispatch", "calls": calls, "fastpath": fast is not False, "rounds": "interleaved"}
                if name == "auto":
                    cfg["chosen"] = chosen
                plan = fastpath.plan_of(op, *inputs, variant=name) if name != "quack" and fast else None
                if plan is not None:
                    cfg["plan"] = plan.kind
                pattern = "dispatch" if name == "auto" else "peer" if name == "quack" else v.pattern
                recs.append(Record(op=op, variant=name, pattern=pattern, shape=shape, dtype=dtype, config=cfg,
                                   ms_median=med, ms_min=lo, ms_max=hi, n_reps=repeats, timer="host-loop",
                                   bytes=spec.bytes(shape, dtype), flops=spec.flops(shape), passed=err is None,
                                   kernel_source_hash=None if v is None else session._hash(v),
                                   notes=err or ("host wall time per call (ms) of a Python loop through the public "
                                                 "API" if name != "quack" else "host wall time per call (ms) of "
                                                 "quack.rmsnorm.rmsnorm in a Python loop"), **session.prov))
            del inputs
            torch.cuda.synchronize()


BLOCK_SHAPES = ((1, 4096), (8, 256), (64, 8))  # (batch, sequence): prefill down to decode-sized T


def measure_decoder_block(session, shapes=BLOCK_SHAPES, repeats: int = 2, hidden: int = 4096, heads: int = 32,
                          mlp: int = 11008, dtype: str = "bfloat16") -> list:
    """A Llama-style decoder block (gluon_lab.blocks.LlamaBlock, bf16 or fp16, random weights) compiled twice
    — plain torch.compile and torch.compile with the gluon-lab rewrite (gluon_lab.inductor.options())
    — and graph-timed side by side in one run, alternating `repeats` times per shape (inputs rotated,
    weights shared, as a model's are). Each record: op "llama_block", variant "compiled" or
    "compiled+gluon-lab", the outputs' max error vs the uncompiled block, the custom-op calls
    counted in the generated code (config.custom_ops)."""
    import re
    import torch
    from torch._inductor.utils import run_and_get_code
    from . import bench, device, inductor
    from .blocks import LlamaBlock
    from .results import Record
    dt = bench.torch_dtype(dtype)
    blk = LlamaBlock(hidden, heads, mlp, dtype=dt, device="cuda").requires_grad_(False)
    variants = {"compiled": torch.compile(blk, dynamic=False),
                "compiled+gluon-lab": torch.compile(blk, dynamic=False, options=inductor.options())}
    recs = []
    for B, S in shapes:
        shape = {"B": B, "S": S, "H": hidden}
        g = torch.Generator(device="cuda").manual_seed(session.next_seed())
        x = torch.randn(B, S, hidden, device="cuda", dtype=dt, generator=g)
        with torch.no_grad():
            ref = blk(x)
            info = {}
            for name, fn in variants.items():
                inductor.reset_stats()
                out, code = run_and_get_code(fn, x)  # compiles (first call per shape) and keeps the code
                ops = re.findall(r"torch\.ops\.gluon_lab\.(\w+)\.default\(", "\n".join(code))
                err = (out.float() - ref.float()).abs().max().item()
                scale = ref.float().abs().max().item()
                info[name] = {"custom_ops": {o: ops.count(o) for o in sorted(set(ops))}, "max_abs_err": err,
                              "passed": bool(err <= 2e-2 * max(scale, 1.0))}
            k = bench.rotation_copies(x.numel() * x.element_size() * 4)
            xs = [x] + [x.clone() for _ in range(k - 1)]
            for r in range(repeats):
                for name, fn in variants.items():
                    t = bench.time_cudagraph([lambda xi=xi, fn=fn: fn(xi) for xi in xs])
                    clock = device.sm_clock_mhz()
                    fl = blk.flops(B, S)
                    recs.append(Record(
                        op="llama_block", variant=name, pattern="compiled-model", shape=shape, dtype=dtype,
                        config={"study": "inductor-rewrite", "repeat": r, "custom_ops": info[name]["custom_ops"],
                                "hidden": hidden, "heads": heads, "mlp": mlp,
                                "sm_clock_mhz": clock},
                        ms_median=t.ms_median, ms_min=t.ms_min, ms_max=t.ms_max, n_reps=t.n_reps, timer=t.timer,
                        bytes=None, flops=fl, tflops=fl / (t.ms_median * 1e-3) / 1e12, passed=info[name]["passed"],
                        max_abs_err=info[name]["max_abs_err"], kernel_source_hash=None,
                        notes="whole-block time; hash None: it rests on Inductor, cuBLAS and the variants auto "
                              "chose, whose own records carry their hashes", **session.prov))
        del xs, x, ref
        torch.cuda.synchronize()
    session.records.extend(recs)
    return recs


def run_ceilings(results_dir: str = "results", quick: bool = False, plan: CeilingsPlan | None = None,
                 parts=("grid", "dispatch", "fastpath-grid", "block", "auto-evidence", "auto-check")):
    plan = plan or (CeilingsPlan.quick() if quick else CeilingsPlan())
    recs, s = measure_plan("00-ceilings", results_dir, quick, plan_cases(plan) if "grid" in parts else [])
    from . import holdout
    if "auto-check" in parts and s.primary:  # first: the held-out check reads the table the other parts do not change
        with s.unsharded():  # one draw, measured whole by shard 0 of a job array
            recs += holdout.measure(s, holdout.exclude_keys(plan_shapes()), plan=holdout.HoldoutPlan.quick() if quick else None)
    if "auto-evidence" in parts:  # votes in the next table (`select`), not in the one the check above read
        recs += s.sweep(holdout.evidence_cases(holdout.EvidencePlan.quick() if quick else None),
                        desc=f"00-ceilings {holdout.EVIDENCE_STUDY}")
    if "dispatch" in parts and s.primary:  # captures: shard 0 of a job array takes them (Session.primary)
        recs += measure_dispatch(s)
    if "fastpath-grid" in parts:
        recs += s.sweep(fastpath_grid_cases(plan), desc="00-ceilings fastpath-grid")
    if "block" in parts and s.primary:
        recs += measure_decoder_block(s, shapes=((1, 1024), ) if quick else BLOCK_SHAPES)
    if "block-fp16" in parts and s.primary:
        recs += measure_decoder_block(s, shapes=((1, 1024), ) if quick else BLOCK_SHAPES, dtype="float16")
    return recs, s.save()


EXPERIMENTS = {"00-ceilings": run_ceilings}


# ----------------------------------------------------------------------------------------------
# 01-tma-caching

@dataclass(frozen=True)
class TmaCachingPlan:
    """Pattern 1. Parts run in separate batches when a GPU call is time-limited:
    'rms' = RMSNorm bf16 grid (all baselines, both store paths, max-autotune);
    'others' = LayerNorm / add+RMSNorm / L2Norm bf16 grids; 'sweep' = num_warps x rows_per_cta x store;
    'inductor-code' = the Triton kernels Inductor generates, kept for the CPU codegen census;
    'small-m' = gluon-tma's knobs at M = 2048 / 4096 with the peers; 'regs' = gluon-regs (the row
    cached in registers) warps x rows with gluon-tma, gluon-chunked and the peers, M = 256 ... 16384."""
    Ms: tuple = (4096, 8192, 16384, 32768)
    Ns: tuple = (4096, 8192, 16384)
    dtype: str = "bfloat16"
    rms_variants: tuple = ("torch", "inductor", "inductor-max-autotune", "triton", "liger", "quack", "gluon-tma")
    other_variants: tuple = ("torch", "inductor", "triton", "liger", "quack", "gluon-tma")
    other_ops: tuple = ("layer_norm", "add_rms_norm", "l2_norm")
    sweep_M: int = 16384
    sweep_Ns: tuple = (1024, 4096, 8192, 16384)
    sweep_warps: tuple = (4, 8, 16)
    sweep_rows: tuple = (1, 2, 4)
    sweep_flags: tuple = ("tma_store", "one_box", "param_tma")  # full factorial over these booleans
    inductor_code_Ns: tuple = (4096, 16384)
    ln_sweep_Ns: tuple = (4096, 16384)
    # 'small-m' (issue 16, D3): the sweep above ran at M = 16384 only; at M = 2048-4096 the grid's
    # gluon-tma trailed torch.compile / Liger by 1-4%. Its knobs at small M, the peers side by side.
    small_m_Ms: tuple = (2048, 4096)
    small_m_Ns: tuple = (4096, 8192, 16384)
    small_m_ops: tuple = ("rms_norm", "add_rms_norm")
    small_m_warps: tuple = (4, 8, 16)
    small_m_rows: tuple = (1, 2, 4)
    small_m_peers: tuple = ("inductor", "triton", "liger", "quack")
    # 'regs': gluon-regs (the row cached in registers, Liger's / QuACK's design) warps x rows next to
    # gluon-tma's heuristic and the peers, small to large M
    regs_Ms: tuple = (256, 2048, 4096, 16384)
    regs_Ns: tuple = (4096, 5120, 8192, 16384)
    regs_ops: tuple = ("rms_norm", "add_rms_norm")
    regs_warps: tuple = (4, 8, 16, 32)
    regs_rows: tuple = (1, 2)

    @classmethod
    def quick(cls):
        return cls(Ms=(1024, ), Ns=(1024, 4096), sweep_M=1024, sweep_Ns=(1024, ), sweep_warps=(4, ), sweep_rows=(1, 2),
                   inductor_code_Ns=(1024, ), ln_sweep_Ns=(1024, ), small_m_Ms=(1024, ), small_m_Ns=(4096, ),
                   small_m_warps=(4, ), small_m_rows=(1, 2), regs_Ms=(1024, ), regs_Ns=(4096, ), regs_warps=(4, ),
                   regs_rows=(1, ))


def tma_caching_cases(plan: TmaCachingPlan, parts) -> list[dict]:
    from . import registry
    cases = []
    shapes = [{"M": M, "N": N} for M in plan.Ms for N in plan.Ns]
    if "rms" in parts:
        for s in shapes:
            cases.append({"op": "copy", "shape": s, "dtype": plan.dtype})
            for v in plan.rms_variants:
                if v in registry.variants("rms_norm"):
                    cases.append({"op": "rms_norm", "variant": v, "shape": s, "dtype": plan.dtype})
            cases.append({"op": "rms_norm", "variant": "gluon-tma", "shape": s, "dtype": plan.dtype,
                          "config": {"tma_store": True}})
    if "others" in parts:
        for op in plan.other_ops:
            for s in shapes:
                for v in plan.other_variants:
                    if v in registry.variants(op):
                        cases.append({"op": op, "variant": v, "shape": s, "dtype": plan.dtype})
    if "ln-sweep" in parts:  # LayerNorm: three smem buffers (x, w, b) make occupancy the question
        for N in plan.ln_sweep_Ns:
            for nw in plan.sweep_warps:
                for r in (1, 2):
                    for pt in (False, True):
                        cases.append({"op": "layer_norm", "variant": "gluon-tma", "shape": {"M": plan.sweep_M, "N": N},
                                      "dtype": plan.dtype, "config": {"num_warps": nw, "rows_per_cta": r,
                                                                      "param_tma": pt, "study": "ln-sweep"}})
    if "small-m" in parts:
        cases += knob_study_cases("small-m", plan.small_m_Ms, plan.small_m_Ns, plan.small_m_ops, plan.dtype,
                                  plan.small_m_peers, "gluon-tma",
                                  [{"num_warps": nw, "rows_per_cta": r, "param_tma": pt, "tma_store": False}
                                   for nw in plan.small_m_warps for r in plan.small_m_rows for pt in (False, True)])
    if "regs" in parts:
        cases += knob_study_cases("regs", plan.regs_Ms, plan.regs_Ns, plan.regs_ops, plan.dtype,
                                  plan.small_m_peers + ("gluon-tma", "gluon-chunked"), "gluon-regs",
                                  [{"num_warps": nw, "rows": r} for nw in plan.regs_warps for r in plan.regs_rows])
    if "sweep" in parts:
        for N in plan.sweep_Ns:
            for nw in plan.sweep_warps:
                if N < 8 * 32 * nw:  # the register tile (8 bf16 x 32 lanes x warps) must fit in the row
                    continue
                for r in plan.sweep_rows:
                    for bits in itertools.product((False, True), repeat=len(plan.sweep_flags)):
                        cfg = {"num_warps": nw, "rows_per_cta": r, **dict(zip(plan.sweep_flags, bits)),
                               "study": "sweep"}
                        cases.append({"op": "rms_norm", "variant": "gluon-tma", "shape": {"M": plan.sweep_M, "N": N},
                                      "dtype": plan.dtype, "config": cfg})
    return cases


def capture_inductor_kernels(op: str, shape: dict, dtype: str, mode: str | None = None) -> list[dict]:
    """Compile the eager formula with a fresh torch.compile, run it, and return the generated Triton
    kernels: source, chosen config, num_warps, shared bytes and PTX (for the CPU census)."""
    import torch
    from torch._inductor.utils import run_and_get_code
    from . import bench, specs
    inputs = bench.make_inputs(op, shape, dtype, seed=7)
    spec = specs.get(op)
    fn = torch.compile(spec.formula, dynamic=False, mode=mode)
    _, codes = run_and_get_code(fn, *inputs, *spec.scalars.values())
    out = []
    try:
        from torch._inductor.codecache import PyCodeCache
        from torch._inductor.runtime.triton_heuristics import CachingAutotuner
        mods = PyCodeCache.modules if isinstance(PyCodeCache.modules, list) else list(PyCodeCache.modules.values())
    except Exception as e:  # internal API moved: keep the source, say why the PTX is missing
        return [{"source_module": codes[-1] if codes else "", "error": f"{type(e).__name__}: {e}"}]
    seen = set()
    for m in mods:
        for name, obj in vars(m).items():
            src = getattr(getattr(obj, "fn", None), "src", "") if isinstance(obj, CachingAutotuner) else ""
            # Only kernels of THIS compile: every compile in the process shares PyCodeCache and
            # kernel names repeat across shapes, so match the kernel's source text itself.
            if not src or not any(src.strip() in c for c in codes) or src in seen:
                continue
            seen.add(src)
            entry = {"name": name, "source": src, "triton_meta": repr(obj.triton_meta)}
            try:  # torch 2.11 keeps plain launcher functions here (no .bin): then no PTX
                cr = obj.compile_results[0]
                entry.update(config=repr(getattr(cr, "config", None)))
                k = getattr(cr, "kernel", None)
                if k is not None and hasattr(k, "asm"):
                    entry.update(ptx=k.asm.get("ptx"), num_warps=k.metadata.num_warps, shared=k.metadata.shared)
            except Exception as e:
                entry["error"] = f"{type(e).__name__}: {e}"
            out.append(entry)
    return out


def run_tma_caching(results_dir: str = "results", quick: bool = False, plan: TmaCachingPlan | None = None,
                    parts=("rms", "others", "sweep", "inductor-code")):
    import json
    from pathlib import Path
    from .results import atomic_write_text
    plan = plan or (TmaCachingPlan.quick() if quick else TmaCachingPlan())
    recs, s = measure_plan("01-tma-caching", results_dir, quick, tma_caching_cases(plan, parts))
    if "inductor-code" in parts and s.primary:
        art = {}
        for N in plan.inductor_code_Ns:
            for op, mode in (("rms_norm", None), ("rms_norm", "max-autotune-no-cudagraphs"), ("layer_norm", None)):
                key = f"{op}/{plan.dtype}/M=4096/N={N}/{mode or 'default'}"
                try:
                    art[key] = capture_inductor_kernels(op, {"M": 4096, "N": N}, plan.dtype, mode)
                except Exception as e:  # keep going: the records matter more than the evidence file
                    art[key] = [{"error": f"{type(e).__name__}: {e}"}]
        path = Path(results_dir) / s.info["gpu_slug"] / "01-tma-caching.inductor-kernels.json"
        atomic_write_text(path, json.dumps({"gpu": s.info["gpu_name"], "torch": s.prov["torch"],
                                            "triton": s.prov["triton"], "kernels": art}, indent=1))
    return recs, s.save()


EXPERIMENTS["01-tma-caching"] = run_tma_caching


# ----------------------------------------------------------------------------------------------
# 02-chunked-reductions

@dataclass(frozen=True)
class ChunkedPlan:
    """Pattern 2. Parts (separate GPU batches when a call is time-limited):
    'bf16' = RMSNorm and LayerNorm bf16 over the issue's N set x Ms, every baseline + gluon-chunked,
    plus a copy of each shape; 'fp32' = the same in fp32 (every variant that takes fp32 rows);
    'others' = L2Norm and add+RMSNorm bf16; 'chunk' = the CHUNK (num_warps) sweep; 'stream' = cached
    vs streaming over long rows (where the streaming path takes over); 'groupnorm' = GroupNorm /
    InstanceNorm on SD-style shapes, NCHW and channels-last, bf16."""
    Ns: tuple = (1536, 2560, 2880, 3584, 5120, 6144, 7168, 12288, 14336, 18432, 20480, 24576)
    Ms: tuple = (4096, 16384)
    ops: tuple = ("rms_norm", "layer_norm")
    # every gluon variant that takes the shape (issue 16's "best gluon"): gluon-tma is power-of-2 N only
    bf16_variants: tuple = ("torch", "inductor", "triton", "liger", "quack", "gluon-regs", "gluon-chunked",
                            "gluon-pipelined", "gluon-ws")
    fp32_variants: tuple = ("torch", "inductor", "triton", "quack", "gluon-regs", "gluon-chunked", "gluon-pipelined",
                            "gluon-ws")
    other_ops: tuple = ("l2_norm", "add_rms_norm")
    other_M: int = 16384
    chunk_M: int = 16384
    chunk_Ns: tuple = (1536, 2880, 5120, 14336, 24576)
    chunk_warps: tuple = (2, 4, 8, 16)  # 16: a 4096-element bf16 chunk, swept for N >= 8192 only
    chunk_rows: tuple = (1, 2, 4)
    stream_M: int = 4096
    stream_Ns: tuple = (16384, 24576, 32768, 40960, 49152, 65536, 98304, 131072)
    stream_stages: tuple = (2, 4, 8)
    stream_dtypes: tuple = ("bfloat16", "float32")
    # GroupNorm / InstanceNorm: SD-UNet (320 x 64², 640 x 32², 1280 x 16², 1280 x 32²) and SD-VAE (512 x 64²,
    # 256 x 128²) activations at B = 1, 2, 8, 16 (issue #16's grid), G = 32
    gn_shapes: tuple = tuple((B, C, H, H) for B in (1, 2, 8, 16)
                             for C, H in ((320, 64), (640, 32), (1280, 16), (1280, 32), (512, 64), (256, 128)))
    gn_groups: int = 32
    gn_layouts: tuple = ("nchw", "channels_last")
    gn_variants: tuple = ("torch", "inductor", "gluon-chunked", "gluon-split")
    gn_dtype: str = "bfloat16"
    # 'mid-n' (issue 16, D3): gluon-chunked's CHUNK x rows at M = 2048 / 4096 and mid N, where QuACK led
    # by up to 4% and Liger's add+RMSNorm by up to 10%; the peers side by side
    mid_n_Ms: tuple = (2048, 4096)
    mid_n_Ns: tuple = (5120, 6144, 7168, 12288, 14336)
    mid_n_ops: tuple = ("rms_norm", "add_rms_norm")
    mid_n_warps: tuple = (4, 8, 16)
    mid_n_rows: tuple = (1, 2)
    mid_n_peers: tuple = ("inductor", "triton", "liger", "quack")

    @classmethod
    def quick(cls):
        return cls(Ns=(2880, 5120), Ms=(1024, ), other_M=1024, chunk_M=1024, chunk_Ns=(2880, ), chunk_warps=(2, 4), chunk_rows=(1, 2),
                   stream_M=256, stream_Ns=(16384, 65536), stream_stages=(4, ), stream_dtypes=("bfloat16", ),
                   gn_shapes=((2, 320, 32, 32), ), mid_n_Ms=(1024, ), mid_n_Ns=(5120, ), mid_n_warps=(4, ), mid_n_rows=(1, ))


def chunked_cases(plan: ChunkedPlan, parts) -> list[dict]:
    from . import registry, specs
    cases = []
    for part, dtype, variants in (("bf16", "bfloat16", plan.bf16_variants), ("fp32", "float32", plan.fp32_variants)):
        if part not in parts:
            continue
        for M in plan.Ms:
            for N in plan.Ns:
                s = {"M": M, "N": N}
                cases.append({"op": "copy", "shape": s, "dtype": dtype})
                for op in plan.ops:
                    cases += [{"op": op, "variant": v, "shape": s, "dtype": dtype} for v in variants
                              if v in registry.variants(op) and resolves(op, v, s, dtype)]
    if "others" in parts:
        for op in plan.other_ops:
            for N in plan.Ns:
                s = {"M": plan.other_M, "N": N}
                cases += [{"op": op, "variant": v, "shape": s, "dtype": "bfloat16"} for v in plan.bf16_variants
                          if v in registry.variants(op) and resolves(op, v, s, "bfloat16")]
    if "mid-n" in parts:
        cases += knob_study_cases("mid-n", plan.mid_n_Ms, plan.mid_n_Ns, plan.mid_n_ops, "bfloat16", plan.mid_n_peers,
                                  "gluon-chunked", [{"num_warps": nw, "rows": r, "streaming": False}
                                                    for nw in plan.mid_n_warps for r in plan.mid_n_rows])
    if "chunk" in parts:
        for op in plan.ops:
            for N in plan.chunk_Ns:
                for nw in plan.chunk_warps:
                    if nw == 16 and N < 8192:
                        continue
                    for r in plan.chunk_rows:
                        knobs = {"num_warps": nw, "rows": r, "streaming": False}
                        if not resolves(op, "gluon-chunked", {"M": plan.chunk_M, "N": N}, "bfloat16", knobs):
                            continue  # these rows do not fit in one CTA's shared memory
                        cases.append({"op": op, "variant": "gluon-chunked", "shape": {"M": plan.chunk_M, "N": N},
                                      "dtype": "bfloat16", "config": {**knobs, "study": "chunk"}})
    if "stream" in parts:
        for dt in plan.stream_dtypes:
            for op in plan.ops:
                for N in plan.stream_Ns:
                    s = {"M": plan.stream_M, "N": N}
                    cases.append({"op": "copy", "shape": s, "dtype": dt})
                    for v in ("inductor", "triton", "liger"):
                        if v in registry.variants(op) and (dt == "bfloat16" or v != "liger"):
                            cases.append({"op": op, "variant": v, "shape": s, "dtype": dt,
                                          "config": {"study": "stream"}})
                    if resolves(op, "gluon-chunked", s, dt, {"streaming": False}):  # the cached row, while it fits
                        cases.append({"op": op, "variant": "gluon-chunked", "shape": s, "dtype": dt,
                                      "config": {"streaming": False, "study": "stream"}})
                    for st in plan.stream_stages:
                        cases.append({"op": op, "variant": "gluon-chunked", "shape": s, "dtype": dt,
                                      "config": {"streaming": True, "stages": st, "study": "stream"}})
    if "groupnorm" in parts:
        for op in ("group_norm", "instance_norm"):
            for (B, C, H, W) in plan.gn_shapes:
                for lay in plan.gn_layouts:
                    s = {"B": B, "C": C, "H": H, "W": W, "layout": lay}
                    if "num_groups" in specs.get(op).input_names:
                        s["G"] = plan.gn_groups
                    cases += [{"op": op, "variant": v, "shape": s, "dtype": plan.gn_dtype} for v in plan.gn_variants
                              if resolves(op, v, s, plan.gn_dtype)]
    return cases


def run_chunked(results_dir: str = "results", quick: bool = False, plan: ChunkedPlan | None = None,
                parts=("bf16", "fp32", "others", "chunk", "stream", "groupnorm")):
    plan = plan or (ChunkedPlan.quick() if quick else ChunkedPlan())
    recs, s = measure_plan("02-chunked-reductions", results_dir, quick, chunked_cases(plan, parts))
    return recs, s.save()


EXPERIMENTS["02-chunked-reductions"] = run_chunked


# ----------------------------------------------------------------------------------------------
# 03-multibuffer-pipelining (first measured on the H200 2026-11-29, session 3)

@dataclass(frozen=True)
class PipelinedPlan:
    """Pattern 3. Parts: 'norms' = RMSNorm and LayerNorm bf16 over Ms x Ns, every baseline, gluon-tma
    (power-of-2 N), gluon-chunked and gluon-pipelined, plus a copy per shape; 'stages' = RMSNorm
    gluon-pipelined NUM_STAGES 1..4 over the same grid; 'others' = L2Norm / add+RMSNorm at M=16384;
    'gemm' = torch (cuBLAS), triton and gluon-pipelined matmul on the square and LLM shapes;
    'gemm-sweep' = gluon-pipelined NUM_STAGES x tile shape on 8192^3 and one LLM shape."""
    Ms: tuple = (256, 1024, 4096, 8192, 16384, 32768)
    Ns: tuple = (4096, 5120, 8192, 16384)
    norm_ops: tuple = ("rms_norm", "layer_norm")
    norm_variants: tuple = ("torch", "inductor", "triton", "liger", "quack", "gluon-regs", "gluon-tma", "gluon-chunked",
                            "gluon-pipelined", "gluon-ws")  # every gluon variant: the grid is issue 16's scoreboard
    stages: tuple = (1, 2, 3, 4)
    other_ops: tuple = ("l2_norm", "add_rms_norm")
    other_M: int = 16384
    gemm_shapes: tuple = ((2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192), (8192, 4096, 4096),
                          (8192, 6144, 4096), (8192, 14336, 4096), (8192, 4096, 14336))  # (M, N, K)
    gemm_variants: tuple = ("torch", "triton", "gluon-pipelined", "gluon-ws")  # gluon-ws: pattern 4, side by side
    gemm_dtype: str = "bfloat16"
    gemm_sweep_shapes: tuple = ((8192, 8192, 8192), (8192, 14336, 4096))
    gemm_sweep_stages: tuple = (2, 3, 4, 5)
    gemm_sweep_tiles: tuple = ((128, 256, 64, 8), (128, 128, 64, 4), (128, 256, 32, 8))  # (BM, BN, BK, warps)
    # 'pipe-sweep': the persistent norm's occupancy knobs (CTAs per SM x ring depth x rows per slot)
    pipe_sweep_shapes: tuple = ((1024, 4096), (4096, 8192), (16384, 4096), (16384, 5120), (8192, 8192),
                                (4096, 16384), (32768, 8192))
    pipe_sweep_ops: tuple = ("rms_norm", "layer_norm")
    pipe_sweep_ctas: tuple = (1, 2, 3, 4, 6)
    pipe_sweep_stages: tuple = (2, 3, 4)
    pipe_sweep_rows: tuple = (1, 2, 4)
    # 'fence': the proxy fence before each refill of a read-only slot, on / off (heuristic config)
    # 'schedule' (issue 16): static round-robin vs dynamic (atomic counter) row blocks, gluon-pipelined and
    # gluon-ws side by side with the one-row kernels and Inductor, at the large-M shapes where the static
    # grid's tail showed; 'schedule-timeline': every CTA's stamps, static vs dynamic, both variants
    schedule_shapes: tuple = ((4096, 8192), (8192, 5120), (16384, 4096), (16384, 8192), (32768, 4096), (32768, 8192))
    schedule_ops: tuple = ("rms_norm", "add_rms_norm", "layer_norm")  # a time-limited re-run may take fewer
    schedule_others: tuple = ("inductor", "gluon-tma", "gluon-chunked")
    # 'ws-sweep' (pattern 4): gluon-ws GEMM register split (producer setmaxnreg) x ring depth
    ws_sweep_shapes: tuple = ((8192, 8192, 8192), (8192, 14336, 4096))
    ws_sweep_regs: tuple = (24, 40, 56, 88)
    ws_sweep_stages: tuple = (3, 4)

    @classmethod
    def quick(cls):
        return cls(Ms=(256, 1024), Ns=(4096, 5120), gemm_shapes=((1024, 1024, 1024), ), other_M=1024,
                   gemm_sweep_shapes=((1024, 1024, 1024), ), gemm_sweep_stages=(2, 3), gemm_sweep_tiles=((128, 128, 64, 4), ),
                   pipe_sweep_shapes=((1024, 4096), ), pipe_sweep_ctas=(1, 4), pipe_sweep_stages=(2, ),
                   pipe_sweep_rows=(1, ), ws_sweep_shapes=((1024, 1024, 1024), ), ws_sweep_regs=(24, ),
                   ws_sweep_stages=(3, ), schedule_shapes=((1024, 4096), ))


def knob_study_cases(study: str, Ms, Ns, ops, dtype: str, others, variant: str, knob_grid) -> list[dict]:
    """A knob study with what it is compared to, side by side in one run: per (M, N) a copy of the
    operand, then per op every variant of `others` that takes the shape (at its own heuristic), then
    `variant` at every knob dict of knob_grid it accepts; every case but the copy labelled
    config.study (so the grids never pick these records up)."""
    from . import registry
    cases = []
    for M in Ms:
        for N in Ns:
            s = {"M": M, "N": N}
            cases.append({"op": "copy", "shape": s, "dtype": dtype})
            for op in ops:
                cases += [{"op": op, "variant": v, "shape": s, "dtype": dtype, "config": {"study": study}}
                          for v in others if v in registry.variants(op) and resolves(op, v, s, dtype)]
                cases += [{"op": op, "variant": variant, "shape": s, "dtype": dtype, "config": {**k, "study": study}}
                          for k in knob_grid if resolves(op, variant, s, dtype, k)]
    return cases


def norm_grid_cases(Ms, Ns, ops_at, variants, dtype: str = "bfloat16") -> list[dict]:
    """A bf16 norm grid measured side by side: per (M, N) a copy of the operand (the cell's
    bandwidth reference), then every registered variant of every op in ops_at(M) that takes the
    shape (gluon-tma, for one, only power-of-2 N: it caches a row as one power-of-2 box)."""
    from . import registry
    cases = []
    for M in Ms:
        for N in Ns:
            s = {"M": M, "N": N}
            cases.append({"op": "copy", "shape": s, "dtype": dtype})
            for op in ops_at(M):
                cases += [{"op": op, "variant": v, "shape": s, "dtype": dtype} for v in variants
                          if v in registry.variants(op) and resolves(op, v, s, dtype)]
    return cases


def pipelined_cases(plan: PipelinedPlan, parts) -> list[dict]:
    from . import registry
    cases = []
    if "norms" in parts:
        cases += norm_grid_cases(plan.Ms, plan.Ns, lambda M: plan.norm_ops, plan.norm_variants)
    if "stages" in parts:
        for M in plan.Ms:
            for N in plan.Ns:
                cases += [{"op": "rms_norm", "variant": "gluon-pipelined", "shape": {"M": M, "N": N}, "dtype": "bfloat16",
                           "config": {"num_stages": st, "study": "stages"}} for st in plan.stages]
    if "others" in parts:
        for op in plan.other_ops:
            for N in plan.Ns:
                s = {"M": plan.other_M, "N": N}
                cases += [{"op": op, "variant": v, "shape": s, "dtype": "bfloat16"} for v in plan.norm_variants
                          if v in registry.variants(op) and resolves(op, v, s, "bfloat16")]
    if "gemm" in parts:
        for (M, N, K) in plan.gemm_shapes:
            cases += [{"op": "matmul", "variant": v, "shape": {"M": M, "N": N, "K": K}, "dtype": plan.gemm_dtype}
                      for v in plan.gemm_variants]
    if "gemm-sweep" in parts:
        for (M, N, K) in plan.gemm_sweep_shapes:
            for (bm, bn, bk, nw) in plan.gemm_sweep_tiles:
                for st in plan.gemm_sweep_stages:
                    knobs = {"BM": bm, "BN": bn, "BK": bk, "num_warps": nw, "num_stages": st}
                    if not resolves("matmul", "gluon-pipelined", {"M": M, "N": N, "K": K}, plan.gemm_dtype, knobs):
                        continue  # does not fit in shared memory
                    cases.append({"op": "matmul", "variant": "gluon-pipelined", "shape": {"M": M, "N": N, "K": K},
                                  "dtype": plan.gemm_dtype, "config": {**knobs, "study": "gemm-sweep"}})
    if "pipe-sweep" in parts:
        from . import specs
        for op in plan.pipe_sweep_ops:
            for (M, N) in plan.pipe_sweep_shapes:
                for ctas in plan.pipe_sweep_ctas:
                    for st in plan.pipe_sweep_stages:
                        for rows in plan.pipe_sweep_rows:
                            knobs = {"num_stages": st, "rows": rows, "ctas_per_sm": ctas}
                            try:
                                cfg = registry.get_variant(op, "gluon-pipelined").resolve({"M": M, "N": N}, "bfloat16",
                                                                                          knobs)
                            except ValueError:
                                continue
                            if not cfg.fits_sm(specs.get(op), N, "bfloat16"):
                                continue  # fewer CTAs would be resident than asked: a duplicate of a smaller value
                            cases.append({"op": op, "variant": "gluon-pipelined", "shape": {"M": M, "N": N},
                                          "dtype": "bfloat16", "config": {"num_stages": st, "rows": rows,
                                                                          "ctas_per_sm": ctas, "study": "pipe-sweep"}})
    if "schedule" in parts:
        for (M, N) in plan.schedule_shapes:
            s = {"M": M, "N": N}
            cases.append({"op": "copy", "shape": s, "dtype": "bfloat16"})
            for op in plan.schedule_ops:
                cases += [{"op": op, "variant": v, "shape": s, "dtype": "bfloat16"} for v in plan.schedule_others
                          if v in registry.variants(op) and resolves(op, v, s, "bfloat16")]
                for v in ("gluon-pipelined", "gluon-ws"):
                    for sched in ("static", "dynamic"):
                        if resolves(op, v, s, "bfloat16", {"schedule": sched}):
                            cases.append({"op": op, "variant": v, "shape": s, "dtype": "bfloat16",
                                          "config": {"schedule": sched, "study": "schedule"}})
    if "fence" in parts:
        for op in plan.pipe_sweep_ops:
            for (M, N) in plan.pipe_sweep_shapes:
                cases += [{"op": op, "variant": "gluon-pipelined", "shape": {"M": M, "N": N}, "dtype": "bfloat16",
                           "config": {"fence": f, "study": "fence"}} for f in (True, False)]
    if "ws-sweep" in parts:
        for (M, N, K) in plan.ws_sweep_shapes:
            for regs in plan.ws_sweep_regs:
                for st in plan.ws_sweep_stages:
                    if not resolves("matmul", "gluon-ws", {"M": M, "N": N, "K": K}, plan.gemm_dtype,
                                    {"producer_regs": regs, "num_stages": st}):
                        continue  # does not fit in shared memory
                    cases.append({"op": "matmul", "variant": "gluon-ws", "shape": {"M": M, "N": N, "K": K},
                                  "dtype": plan.gemm_dtype, "config": {"producer_regs": regs, "num_stages": st,
                                                                       "study": "ws-sweep"}})
    return cases


def capture_timeline(M: int = 8192, N: int = 8192, stages=(1, 3), dtype: str = "bfloat16") -> dict:
    """The INSTRUMENT build of gluon-pipelined rms_norm, once per NUM_STAGES: every program's
    stamps {stages: [[ [before_wait, ready, stored], ... per block ], ... per CTA]} (record_stamps)."""
    return _capture("gluon-pipelined", M, N, dtype, {st: {"num_stages": st} for st in stages}, 3)


def _capture(variant: str, M: int, N: int, dtype: str, knobs: dict, fields: int) -> dict:
    """record_stamps of the variant's INSTRUMENT build (its fn takes trace=) on rms_norm, once per entry of
    knobs ({key: overrides of the heuristic config})."""
    from . import bench, registry
    v = registry.get_variant("rms_norm", variant)
    shape = {"M": M, "N": N}
    x, w = bench.make_inputs("rms_norm", shape, dtype, seed=11)
    cfgs = {key: v.resolve(shape, dtype, over) for key, over in knobs.items()}
    out = record_stamps(lambda cfg, trace: v.fn(x, w, eps=1e-6, config=cfg, trace=trace), cfgs, fields)
    return {"M": M, "N": N, "dtype": dtype, "timelines": out}


def capture_schedule_timeline(M: int = 4096, N: int = 8192, dtype: str = "bfloat16") -> dict:
    """Every CTA's stamps of the INSTRUMENT builds of gluon-pipelined (3 per block) and gluon-ws (5 per block)
    rms_norm at their heuristic config, static vs dynamic schedule: {variant: {schedule: {"config", "ns"}}}.
    M = 4096: ~31 row blocks per CTA, so a dynamic CTA that takes more stays under TRACE_ITERS (64 blocks
    traced per CTA; at 8192 x 8192 some dynamic CTAs ran past it and their last blocks went unrecorded)."""
    from .kernels.warp_specialized import TRACE_FIELDS
    knobs = {sch: {"schedule": sch} for sch in ("static", "dynamic")}
    out = {variant: _capture(variant, M, N, dtype, knobs, fields)["timelines"]
           for variant, fields in (("gluon-pipelined", 3), ("gluon-ws", TRACE_FIELDS))}
    return {"M": M, "N": N, "dtype": dtype, "timelines": out}


def run_pipelined(results_dir: str = "results", quick: bool = False, plan: PipelinedPlan | None = None,
                  parts=("norms", "stages", "others", "gemm", "gemm-sweep", "timeline")):
    plan = plan or (PipelinedPlan.quick() if quick else PipelinedPlan())
    recs, s = measure_plan("03-multibuffer-pipelining", results_dir, quick, pipelined_cases(plan, parts))
    if "timeline" in parts:
        save_timeline(s, results_dir, "03-multibuffer-pipelining", capture_timeline)
    if "schedule-timeline" in parts:
        save_timeline(s, results_dir, "03-multibuffer-pipelining", capture_schedule_timeline,
                      suffix=".schedule-timeline.json")
    return recs, s.save()


EXPERIMENTS["03-multibuffer-pipelining"] = run_pipelined


# ----------------------------------------------------------------------------------------------
# 04-warp-specialization

# (M, N, K): square; LLM projections, M in {128, 1024, 4096, 16384} x Llama-3-8B's (N, K) of q/k/v
# fused (6144, 4096), o (4096, 4096), gate+up fused (28672, 4096), down (4096, 14336); ragged (no
# dimension a multiple of 128; N and K multiples of 8, TMA's 16-byte rows); long K; the skinny
# decode-like and long-N shapes the GEMM issue measured (M = 128, N = K = 8192; 2048 x 28672 x 8192), and
# decode batches M = 16 / 32 / 64 on Llama projections (where swap-AB applies)
LAST_WAVE_FILL = 0.75  # 'gemm-shapes' tries last-wave split-K where the last wave of 128x128 tiles is under 3/4 full
STREAM_K_WAVES = 8  # ... and stream-K where 128x128 tiles leave a partial wave within the first 8 (past that the
                    # partial wave costs < 1/8 of the run)
GEMM_SHAPE_SWEEP = (
    (2048, 2048, 2048), (6144, 6144, 6144), (8192, 8192, 8192),  # 4096^3 is the o projection at M = 4096
    *((M, N, K) for M in (128, 1024, 4096, 16384) for (N, K) in ((6144, 4096), (4096, 4096), (28672, 4096),
                                                                 (4096, 14336))),
    (1000, 3000, 2000), (2500, 1736, 4104), (777, 5000, 1000), (3000, 1000, 2000),
    (1024, 1024, 32768), (128, 8192, 8192), (2048, 28672, 8192),
    (16, 6144, 4096), (64, 28672, 4096), (32, 4096, 14336))  # decode-like M (swap-AB's shapes)

@dataclass(frozen=True)
class WarpSpecializedPlan:
    """Pattern 4. Parts: 'norms' = RMSNorm, LayerNorm (and add+RMSNorm at the LLM sizes) bf16 over
    pattern 3's grid: gluon-ws next to gluon-pipelined, gluon-tma (power-of-2 N) and the baselines
    that can win (torch.compile, Triton one-row, Liger), with a copy per shape; 'gemm' = torch
    (cuBLAS), triton, gluon-pipelined and gluon-ws on pattern 3's shape set; 'norm-sweep' = the WS
    norm's partition knobs (producer setmaxnreg x consumer warps x ring depth); 'ws-sweep' = the WS
    GEMM's producer setmaxnreg x ring depth x tile; 'gemm-shapes' = every GEMM schedule x tile on the
    GEMM shape sweep (GEMM_SHAPE_SWEEP) beside cuBLAS; 'timeline' = per-partition %globaltimer stamps;
    'gemm-timeline' = per-tile stamps of the WS GEMM, cooperative vs ping-pong (capture_gemm_timeline)."""
    Ms: tuple = (256, 1024, 4096, 8192, 16384, 32768)
    Ns: tuple = (4096, 5120, 8192, 16384)
    norm_ops: tuple = ("rms_norm", "layer_norm")
    norm_variants: tuple = ("inductor", "triton", "liger", "quack", "gluon-tma", "gluon-pipelined", "gluon-ws")
    add_M: int = 16384
    gemm_shapes: tuple = PipelinedPlan.gemm_shapes
    gemm_variants: tuple = ("torch", "triton", "gluon-pipelined", "gluon-ws")
    gemm_dtype: str = "bfloat16"
    norm_sweep_shapes: tuple = ((1024, 4096), (16384, 4096), (16384, 5120), (8192, 8192), (32768, 8192))
    norm_sweep_regs: tuple = (24, 40, 56)
    norm_sweep_warps: tuple = (4, 8)
    norm_sweep_stages: tuple = (2, 3, 4)
    ws_sweep_shapes: tuple = ((8192, 8192, 8192), (8192, 14336, 4096), (4096, 4096, 4096))
    ws_sweep_regs: tuple = (24, 40, 56, 88)
    ws_sweep_tiles: tuple = ((128, 256, 64, 8, 3), (128, 256, 32, 8, 5), (128, 128, 64, 4, 4), (128, 128, 64, 8, 5))
    # 'gemm-shapes': every GEMM schedule x tile on a shape set that covers square, LLM projection
    # (M = 128 ... 16384 x Llama-3-8B's q/k/v, o, gate+up and down (N, K)), ragged (not multiples of
    # 128) and long-K / long-N shapes, cuBLAS (torch) beside them in the same run. Its best config per
    # shape is what the shape-bucketed GEMM heuristic is read from.
    shape_sweep: tuple = GEMM_SHAPE_SWEEP
    # (variant, BM, BN, BK, num_warps, num_stages, pingpong): cooperative 128x256 (the default), one
    # warpgroup on 128x128, two on 128x128, ping-pong 128x128 / 64x256 (CUTLASS's fitting ping-pong
    # tiles), and the small tiles that give skinny / ragged outputs more tiles than SMs
    shape_configs: tuple = (("gluon-ws", 128, 256, 64, 8, 3, False), ("gluon-ws", 128, 128, 64, 4, 4, False),
                            ("gluon-ws", 128, 128, 64, 8, 5, False), ("gluon-ws", 128, 128, 64, 4, 4, True),
                            ("gluon-ws", 128, 128, 64, 4, 5, True), ("gluon-ws", 64, 256, 64, 4, 4, True),
                            ("gluon-ws", 64, 128, 64, 4, 6, False), ("gluon-ws", 128, 64, 64, 4, 6, False),
                            ("gluon-ws", 64, 64, 64, 4, 8, False), ("gluon-pipelined", 128, 256, 64, 8, 3, False),
                            ("gluon-pipelined", 64, 128, 64, 4, 5, False), ("gluon-pipelined", 128, 64, 64, 4, 6, False))
    # split-K (gluon-ws cooperative, 128x128x64 4 warps 4 stages) on the shapes whose 128x128 tiles
    # are fewer than the SMs: the K slices per tile tried
    shape_split_k: tuple = (2, 4, 8)
    # split the last wave only (data-parallel whole waves + split-K on the remainder) where 128x128 tiles
    # fill >= 1 wave but leave the last one under LAST_WAVE_FILL full: the K slices per tile tried
    shape_last_wave_split: tuple = (2, 4)
    # swap-AB (gluon-ws cooperative, C^T = B^T A^T) on the decode-like shapes (M <= 64): (BM, BN, stages)
    shape_swap_configs: tuple = ((16, 128, 6), (32, 128, 6), (64, 128, 5))
    # ... and swap-AB with split-K (the B stream of a decode GEMM needs every SM; ci/gemm_probe.py): split_k tried
    shape_swap_split: tuple = (2, 4)
    # the cp.async producer (the cp_async knob) beside TMA on shapes whose rows are not 128-byte aligned
    # (K or N not a multiple of 64 bf16): (BM, BN, num_warps, num_stages, producer_regs), and the last-wave split
    shape_cp_configs: tuple = ((128, 256, 8, 3, 96), (128, 128, 8, 5, 152), (128, 128, 4, 4, 96))
    # ... and the padded-copy producer (pad_rows: aligned copies of A and B, then TMA) there: the heuristic's
    # config of both variants with it, and the tiles the gemm probe ran fastest on padded rows (BM, BN,
    # num_warps, num_stages, pingpong): 128x128 8w s5 and ping-pong 128x128 4w s4 (results/h200/gemm-probe.log).
    # No heuristic picks it: on an H100 (run 20261207T220359Z-976a50f2, ci/pending/evidence) its best config ÷
    # the best TMA-in-place config was 0.993 (777x5000x1000), 0.812, 0.984 (2500x1736x4104), 0.866: the copies
    # cost more than the aligned rows save. Not measured on the H200 yet.
    shape_pad_configs: tuple = ((128, 128, 8, 5, False), (128, 128, 4, 4, True), (128, 256, 8, 3, False))
    # stream-K (gluon-ws cooperative) where 128x128 tiles leave a partial wave within the first
    # STREAM_K_WAVES waves: (BM, BN, num_warps, num_stages, stream_k waves); waves 2 only past one whole wave;
    # the skinny tiles at M <= 256 and swap-AB at M <= 64 as well
    # (trimmed after runs 20261202T133953Z / 135219Z, where every stream-K config lost but at 2500x1736x4104:
    # 128x128 8w stream-K 1, 64x128 and swap 32x128 stream-K are not timed again)
    shape_stream_k: tuple = ((128, 256, 8, 3, 1), (128, 256, 8, 3, 2), (128, 128, 4, 4, 1), (128, 128, 8, 4, 2))
    shape_stream_k_skinny: tuple = ((128, 64, 4, 6, 1), )
    shape_stream_k_swap: tuple = ((16, 128, 6), )

    @classmethod
    def quick(cls):
        return cls(Ms=(1024, ), Ns=(4096, 5120), add_M=1024, gemm_shapes=((1024, 1024, 1024), ),
                   shape_sweep=((1000, 1000, 1000), (128, 1024, 1024)),
                   norm_sweep_shapes=((1024, 4096), ), norm_sweep_regs=(24, ), norm_sweep_warps=(4, ),
                   norm_sweep_stages=(2, ), ws_sweep_shapes=((1024, 1024, 1024), ), ws_sweep_regs=(24, ),
                   ws_sweep_tiles=((128, 128, 64, 4, 4), ))


def ws_cases(plan: WarpSpecializedPlan, parts) -> list[dict]:
    cases = []
    if "norms" in parts:
        cases += norm_grid_cases(plan.Ms, plan.Ns, lambda M: plan.norm_ops + (("add_rms_norm", ) if M == plan.add_M else ()),
                                 plan.norm_variants)
    if "gemm" in parts:
        for (M, N, K) in plan.gemm_shapes:
            cases += [{"op": "matmul", "variant": v, "shape": {"M": M, "N": N, "K": K}, "dtype": plan.gemm_dtype}
                      for v in plan.gemm_variants]
    if "norm-sweep" in parts:
        for op in plan.norm_ops:
            for (M, N) in plan.norm_sweep_shapes:
                for regs in plan.norm_sweep_regs:
                    for nw in plan.norm_sweep_warps:
                        for st in plan.norm_sweep_stages:
                            knobs = {"producer_regs": regs, "num_warps": nw, "num_stages": st}
                            if not resolves(op, "gluon-ws", {"M": M, "N": N}, "bfloat16", knobs):
                                continue
                            cases.append({"op": op, "variant": "gluon-ws", "shape": {"M": M, "N": N},
                                          "dtype": "bfloat16", "config": {**knobs, "study": "norm-sweep"}})
    if "gemm-shapes" in parts:
        from .kernels.hopper import H200_SMS

        def study(v, shape, knobs):  # one explicit config of the study, where the variant takes it
            if resolves("matmul", v, shape, plan.gemm_dtype, knobs):
                cases.append({"op": "matmul", "variant": v, "shape": shape, "dtype": plan.gemm_dtype,
                              "config": {**knobs, "study": "gemm-shapes"}})
        split128 = {"BM": 128, "BN": 128, "BK": 64, "num_warps": 4, "num_stages": 4}  # the split-K tile
        for (M, N, K) in plan.shape_sweep:
            shape = {"M": M, "N": N, "K": K}
            cases += [{"op": "matmul", "variant": v, "shape": shape, "dtype": plan.gemm_dtype,
                       "config": {"study": "gemm-shapes", **({} if v == "torch" else {"heuristic": True})}}
                      for v in ("torch", "gluon-pipelined", "gluon-ws")]  # 'heuristic': the record of what auto runs
            for (v, bm, bn, bk, nw, st, pp) in plan.shape_configs:
                study(v, shape, {"BM": bm, "BN": bn, "BK": bk, "num_warps": nw, "num_stages": st,
                                 **({"pingpong": True} if pp else {})})
            if M <= 64:
                for (bm, bn, st) in plan.shape_swap_configs:
                    study("gluon-ws", shape, {"BM": bm, "BN": bn, "BK": 64, "num_warps": 4, "num_stages": st,
                                              "swap_ab": True})
                for (bm, bn, st) in plan.shape_swap_configs[:2]:
                    for sk in (sk for sk in plan.shape_swap_split if sk <= -(-K // 64)):
                        study("gluon-ws", shape, {"BM": bm, "BN": bn, "BK": 64, "num_warps": 4, "num_stages": st,
                                                  "swap_ab": True, "split_k": sk})
            tiles, k_steps = -(-M // 128) * -(-N // 128), -(-K // 64)
            ragged_wave = tiles >= H200_SMS and 0 < tiles % H200_SMS < LAST_WAVE_FILL * H200_SMS
            if ragged_wave:
                for sk in (sk for sk in plan.shape_last_wave_split if sk <= k_steps):
                    study("gluon-ws", shape, {**split128, "split_k": sk, "split_last_wave": True})
            if tiles < H200_SMS:
                for sk in (sk for sk in plan.shape_split_k if sk <= k_steps):
                    study("gluon-ws", shape, {**split128, "split_k": sk})
            if tiles % H200_SMS and tiles < STREAM_K_WAVES * H200_SMS:
                for (bm, bn, nw, st, w) in plan.shape_stream_k:
                    if w == 1 or tiles > H200_SMS:
                        study("gluon-ws", shape, {"BM": bm, "BN": bn, "BK": 64, "num_warps": nw, "num_stages": st,
                                                  "stream_k": w})
                for (bm, bn, nw, st, w) in (plan.shape_stream_k_skinny if M <= 256 else ()):
                    study("gluon-ws", shape, {"BM": bm, "BN": bn, "BK": 64, "num_warps": nw, "num_stages": st,
                                              "stream_k": w})
                for (bm, bn, st) in (plan.shape_stream_k_swap if M <= 64 else ()):
                    study("gluon-ws", shape, {"BM": bm, "BN": bn, "BK": 64, "num_warps": 4, "num_stages": st,
                                              "swap_ab": True, "stream_k": 1})
            if K % 64 or N % 64:
                for (bm, bn, nw, st, pr) in plan.shape_cp_configs:
                    study("gluon-ws", shape, {"BM": bm, "BN": bn, "BK": 64, "num_warps": nw, "num_stages": st,
                                              "producer_regs": pr, "cp_async": True})
                if ragged_wave and k_steps >= 4:
                    study("gluon-ws", shape, {**split128, "split_k": 4, "split_last_wave": True, "producer_regs": 96,
                                              "cp_async": True})
                for v in ("gluon-pipelined", "gluon-ws"):
                    study(v, shape, {"pad_rows": True})  # the heuristic's pick, its operands staged
                for (bm, bn, nw, st, pp) in plan.shape_pad_configs:
                    study("gluon-ws", shape, {"BM": bm, "BN": bn, "BK": 64, "num_warps": nw, "num_stages": st,
                                              "pad_rows": True, **({"pingpong": True} if pp else {})})
            # cuBLAS again after the shape's Gluon cases: the clock drifts over a shape's ~20 timings (1455-1980
            # MHz in run 20261202T061301Z), so the page takes the peer as the geomean of the two and shows the drift
            cases.append({"op": "matmul", "variant": "torch", "shape": shape, "dtype": plan.gemm_dtype,
                          "config": {"study": "gemm-shapes", "bracket": "after"}})
    if "ws-sweep" in parts:
        for (M, N, K) in plan.ws_sweep_shapes:
            for (bm, bn, bk, nw, st) in plan.ws_sweep_tiles:
                for regs in plan.ws_sweep_regs:
                    knobs = {"BM": bm, "BN": bn, "BK": bk, "num_warps": nw, "num_stages": st, "producer_regs": regs}
                    if not resolves("matmul", "gluon-ws", {"M": M, "N": N, "K": K}, plan.gemm_dtype, knobs):
                        continue
                    cases.append({"op": "matmul", "variant": "gluon-ws", "shape": {"M": M, "N": N, "K": K},
                                  "dtype": plan.gemm_dtype, "config": {**knobs, "study": "ws-sweep"}})
    return cases


def capture_ws_timeline(M: int = 8192, N: int = 8192, dtype: str = "bfloat16", stages=(1, 3)) -> dict:
    """Per-partition stamps of the INSTRUMENT build of gluon-ws rms_norm, once per NUM_STAGES:
    {stages: {"config", "ns": [[ [producer_before_empty_wait, producer_issued, consumer_before_full_wait,
    consumer_ready, consumer_stored], ... per block ], ... per CTA]}} (record_stamps)."""
    from .kernels.warp_specialized import TRACE_FIELDS
    out = _capture("gluon-ws", M, N, dtype, {st: {"num_stages": st} for st in stages}, TRACE_FIELDS)["timelines"]
    return {"M": M, "N": N, "dtype": dtype, "fields": ["producer_before_empty_wait", "producer_issued",
                                                       "consumer_before_full_wait", "consumer_ready",
                                                       "consumer_stored"], "timelines": out}


# the consumer-schedule timeline: the same 128 x 128 x 64 tile under both schedules (cooperative: two
# warpgroups split each tile's rows; ping-pong: one warpgroup per tile, alternating)
GEMM_TIMELINE_CONFIGS = {"cooperative": {"BM": 128, "BN": 128, "BK": 64, "num_warps": 8, "num_stages": 5},
                         "ping-pong": {"BM": 128, "BN": 128, "BK": 64, "num_warps": 4, "num_stages": 4, "pingpong": True}}
GEMM_TIMELINE_SHAPES = ((4096, 4096, 4096), (8192, 8192, 1024))  # (M, N, K): a mid K, and a short K (epilogue-heavy)


def capture_gemm_timeline(shapes=GEMM_TIMELINE_SHAPES, dtype: str = "bfloat16") -> dict:
    """Every CTA's per-tile stamps of the INSTRUMENT build of gluon-ws matmul, cooperative vs ping-pong
    (GEMM_TIMELINE_CONFIGS): {"M x N x K": {schedule: {"config", "ns": [[[wg + 1, start, mma_issued,
    stored] per tile] per CTA]}}} (record_stamps; wg + 1 is a tag, not a time)."""
    from . import bench, registry
    from .kernels import gemm_ws as W
    from .kernels.igemm.trace import UNIT_TRACE_FIELDS
    out = {}
    v = registry.get_variant("matmul", "gluon-ws")
    for (M, N, K) in shapes:
        shape = {"M": M, "N": N, "K": K}
        a, b = bench.make_inputs("matmul", shape, dtype, seed=13)
        cfgs = {k: v.resolve(shape, dtype, knobs) for k, knobs in GEMM_TIMELINE_CONFIGS.items()}
        out[f"{M}x{N}x{K}"] = record_stamps(lambda cfg, trace: W.launch(a, b, config=cfg, trace=trace), cfgs,
                                            int(UNIT_TRACE_FIELDS), tags=1)
    return {"dtype": dtype, "fields": ["consumer_wg_plus_1", "mainloop_start", "last_mma_issued", "store_issued"],
            "timelines": out}


def run_ws(results_dir: str = "results", quick: bool = False, plan: WarpSpecializedPlan | None = None,
           parts=("norms", "gemm", "gemm-shapes", "norm-sweep", "ws-sweep", "timeline", "gemm-timeline")):
    plan = plan or (WarpSpecializedPlan.quick() if quick else WarpSpecializedPlan())
    recs, s = measure_plan("04-warp-specialization", results_dir, quick, ws_cases(plan, parts))
    if "gemm-timeline" in parts:
        save_timeline(s, results_dir, "04-warp-specialization", capture_gemm_timeline, suffix=".gemm-timeline.json")
    if "timeline" in parts:
        save_timeline(s, results_dir, "04-warp-specialization", capture_ws_timeline)
    return recs, s.save()


EXPERIMENTS["04-warp-specialization"] = run_ws


# ----------------------------------------------------------------------------------------------
# 05-fused-qk-norm-rope

@dataclass(frozen=True)
class QkNormRopePlan:
    """Pattern 5. 'sweep': T in {1, 2, 4, ..., 8192} x (Hq, Hk) in {(16, 8), (32, 8), (64, 8)} at D = 128
    (the 42-case sweep vLLM's Helion kernel was judged on), every variant, plus a y.copy_(x) of each
    cell's Q/K bytes at T >= copy_from_T (the bandwidth reachable at that size); 'dims': the same sweep
    at D = 64 and 256; 'tma-sweep' / 'fused-sweep': gluon-tma's / gluon-fused's knobs at the large-T
    cells; 'persistent-sweep':
    gluon-persistent's; 'inductor-code': the Triton kernels Inductor generates for the formula (PTX,
    for the CPU census). bf16, NeoX, full rotary, random positions; CUDA-graph timing over rotated
    copies (each captured call updates its own copy in place)."""
    Ts: tuple = tuple(2 ** i for i in range(14))
    heads: tuple = ((16, 8), (32, 8), (64, 8))
    D: int = 128
    variants: tuple = ("torch", "inductor", "triton", "gluon-fused", "gluon-persistent", "gluon-tma")
    dtype: str = "bfloat16"
    other_Ds: tuple = (64, 256)
    copy_from_T: int = 256
    sweep_Ts: tuple = (4096, 8192)  # the knob sweeps: the large-T cells where the 80% target lives
    sweep_warps: tuple = (4, 8)
    sweep_ctas: tuple = (2, 4, 8)
    tma_knobs: tuple = (  # (block_t, num_warps, stages, ctas_per_sm, tma_store); block_t 0 = the heuristic's
        (0, 4, 3, 2, True), (0, 4, 3, 2, False), (0, 4, 2, 3, True), (0, 4, 4, 4, False), (0, 8, 3, 2, True),
        (0, 8, 3, 4, False), (16, 8, 2, 2, True), (4, 4, 4, 4, True), (4, 4, 4, 6, False))
    inductor_code_Ds: tuple = (64, 128, 256)
    fused_warps: tuple = (1, 2, 4, 8)  # 'fused-sweep': gluon-fused's one knob at the large-T cells

    @classmethod
    def quick(cls):
        return cls(Ts=(1, 64, 1024), heads=((32, 8), ), other_Ds=(64, ), sweep_Ts=(1024, ), sweep_warps=(4, ),
                   sweep_ctas=(2, 4), tma_knobs=((0, 4, 3, 2, True), (0, 4, 3, 2, False)), inductor_code_Ds=(128, ))


def qk_norm_rope_cases(plan: QkNormRopePlan, parts=("sweep", "dims", "tma-sweep", "persistent-sweep")) -> list[dict]:
    cases = []
    Ds = ([plan.D] if "sweep" in parts else []) + (list(plan.other_Ds) if "dims" in parts else [])
    for D in Ds:
        for (hq, hk) in plan.heads:
            for T in plan.Ts:
                shape = {"T": T, "Hq": hq, "Hk": hk, "D": D, "R": D}
                if T >= plan.copy_from_T:  # the same bytes as the op's Q/K read + write, one y.copy_(x)
                    cases.append({"op": "copy", "shape": {"M": T, "N": (hq + hk) * D}, "dtype": plan.dtype})
                for v in plan.variants:
                    cases.append({"op": "qk_norm_rope", "variant": v, "shape": shape, "dtype": plan.dtype,
                                  "timer": "cudagraph", "rotation": "partial"})
    for T in plan.sweep_Ts:
        for (hq, hk) in plan.heads:
            shape = {"T": T, "Hq": hq, "Hk": hk, "D": plan.D, "R": plan.D}
            if "tma-sweep" in parts:
                for bt, nw, st, k, ts in plan.tma_knobs:
                    cfg = {"num_warps": nw, "stages": st, "ctas_per_sm": k, "tma_store": ts, "study": "tma-sweep"}
                    if bt:
                        cfg["block_t"] = bt
                    if not resolves("qk_norm_rope", "gluon-tma", shape, plan.dtype,
                                    {k: v for k, v in cfg.items() if k != "study"}):
                        continue  # e.g. more shared memory than an SM has: not a case
                    cases.append({"op": "qk_norm_rope", "variant": "gluon-tma", "dtype": plan.dtype, "shape": shape,
                                  "timer": "cudagraph", "rotation": "partial", "config": cfg})
            if "fused-sweep" in parts:
                for nw in plan.fused_warps:
                    cases.append({"op": "qk_norm_rope", "variant": "gluon-fused", "dtype": plan.dtype, "shape": shape,
                                  "timer": "cudagraph", "rotation": "partial",
                                  "config": {"num_warps": nw, "study": "fused-sweep"}})
            if "persistent-sweep" in parts:
                for nw in plan.sweep_warps:
                    for k in plan.sweep_ctas:
                        cases.append({"op": "qk_norm_rope", "variant": "gluon-persistent", "dtype": plan.dtype,
                                      "shape": shape, "timer": "cudagraph", "rotation": "partial",
                                      "config": {"num_warps": nw, "ctas_per_sm": k, "study": "persistent-sweep"}})
    return cases


def _autotuned_launchers() -> dict:
    """{triton cache path key: config repr} of every Inductor kernel loaded in this process whose
    autotuner has settled on one launcher (its cache_hash is triton's cache path key of that compile).
    Keys, not names: kernel names repeat across compiles of different shapes."""
    out = {}
    try:
        from torch._inductor.codecache import PyCodeCache
        from torch._inductor.runtime.triton_heuristics import CachingAutotuner
        mods = PyCodeCache.modules if isinstance(PyCodeCache.modules, list) else list(PyCodeCache.modules.values())
    except Exception:  # internal API moved: no launch marks (the analysis says so)
        return out
    for m in mods:
        for obj in vars(m).values():
            if isinstance(obj, CachingAutotuner) and len(getattr(obj, "launchers", ()) or ()) == 1:
                la = obj.launchers[0]
                if getattr(la, "cache_hash", None):
                    out[la.cache_hash] = repr(getattr(la, "config", None))
    return out


def capture_inductor_ptx(op: str, shape: dict, dtype: str, scalars: dict | None = None) -> list[dict]:
    """torch.compile(fullgraph=True, dynamic=False) of the op's formula in a fresh Triton cache with
    Inductor's caches off: every Triton kernel Inductor generates for it, with its source and the PTX
    Triton wrote (name, source, ptx, num_warps, shared) — the CPU census reads the PTX."""
    import glob
    import json
    import os
    import tempfile
    import torch
    import triton
    from torch._inductor import config as iconfig
    from torch._inductor.utils import run_and_get_code
    from . import bench, specs
    spec = specs.get(op)
    inputs = bench.make_inputs(op, shape, dtype, seed=7)
    kw = {**spec.default_scalars(), **(scalars or {})}
    old_env = os.environ.get("TRITON_CACHE_DIR")
    with tempfile.TemporaryDirectory() as d:
        os.environ["TRITON_CACHE_DIR"] = d
        old_knob = getattr(triton.knobs.cache, "dir", None)
        try:
            triton.knobs.cache.dir = d
            torch._dynamo.reset()
            with iconfig.patch(force_disable_caches=True, compile_threads=1):
                fn = torch.compile(spec.formula, dynamic=False, fullgraph=True)
                _, codes = run_and_get_code(fn, *inputs, *kw.values())
            torch.cuda.synchronize()
            chosen = _autotuned_launchers()
            out = []
            for ptx_path in sorted(glob.glob(os.path.join(d, "**", "*.ptx"), recursive=True)):
                name = os.path.basename(ptx_path)[:-4]
                meta_path = ptx_path[:-4] + ".json"
                meta = json.loads(open(meta_path).read()) if os.path.exists(meta_path) else {}
                src = ""
                for c in codes:
                    i = c.find(f"def {name}(")
                    if i >= 0:
                        j = c.find("\n\n\n", i)
                        src = c[i:j if j > 0 else None]
                        break
                key = os.path.basename(os.path.dirname(ptx_path))  # triton's cache path key of this compile
                out.append({"name": name, "source": src, "ptx": open(ptx_path).read(),
                            "num_warps": meta.get("num_warps"), "shared": meta.get("shared"), "cache_key": key,
                            # Inductor compiles several configs of a pointwise kernel and launches the one its
                            # autotuner picked: only that compile is what runs
                            "launched": (key in chosen) if chosen else None, "config": chosen.get(key),
                            "autotuners_seen": len(chosen)})
        finally:
            triton.knobs.cache.dir = old_knob
            if old_env is None:
                os.environ.pop("TRITON_CACHE_DIR", None)
            else:
                os.environ["TRITON_CACHE_DIR"] = old_env
            torch._dynamo.reset()
    if not out:
        raise RuntimeError(f"no Triton kernel was compiled for {op} {shape} (Inductor's caches answered?)")
    return out


def run_qk_norm_rope(results_dir: str = "results", quick: bool = False, plan: QkNormRopePlan | None = None,
                     parts=("sweep", "dims", "tma-sweep", "persistent-sweep", "inductor-code")):
    import json
    from pathlib import Path
    from .results import atomic_write_text
    plan = plan or (QkNormRopePlan.quick() if quick else QkNormRopePlan())
    recs, s = measure_plan("05-fused-qk-norm-rope", results_dir, quick, qk_norm_rope_cases(plan, parts))
    if "inductor-code" in parts and s.primary:
        art = {}
        for D in plan.inductor_code_Ds:
            for neox in (True, False):
                key = f"qk_norm_rope/{plan.dtype}/T=4096/Hq=32/Hk=8/D={D}/{'neox' if neox else 'gptj'}"
                try:
                    art[key] = capture_inductor_ptx("qk_norm_rope", {"T": 4096, "Hq": 32, "Hk": 8, "D": D, "R": D},
                                                    plan.dtype, {"is_neox": neox})
                except Exception as e:  # keep going: the records matter more than the evidence file
                    art[key] = [{"error": f"{type(e).__name__}: {e}"}]
        path = Path(results_dir) / s.info["gpu_slug"] / "05-fused-qk-norm-rope.inductor-kernels.json"
        atomic_write_text(path, json.dumps({"gpu": s.info["gpu_name"], "torch": s.prov["torch"],
                                            "triton": s.prov["triton"], "git_commit": s.prov.get("git_commit"),
                                            "kernels": art}, indent=1))
    return recs, s.save()


EXPERIMENTS["05-fused-qk-norm-rope"] = run_qk_norm_rope


# ----------------------------------------------------------------------------------------------
# 06-convolution

CONV_SHAPES = (  # (B, Ci, Co, H, W, R, stride, pad): around the two anchors, with stride 2 and 1x1
    (128, 384, 384, 64, 64, 3, 1, 1),  # the Gluon example's shape
    (8, 320, 320, 64, 64, 3, 1, 1),  # SD UNet, 64x64 latent
    (8, 320, 320, 64, 64, 3, 2, 1),  # SD downsample (3x3, stride 2)
    (8, 640, 320, 32, 32, 1, 1, 0),  # SD resnet shortcut (1x1)
    (64, 256, 256, 14, 14, 3, 1, 1),  # ResNet-50 stage 3 (small patches: 14-wide rows)
    (64, 512, 1024, 28, 28, 1, 2, 0),  # ResNet-50 downsample (1x1, stride 2)
)


IDLE_SHAPES = (  # few output tiles, long K: every data-parallel conv kernel leaves most of the 132 SMs idle
    (1, 512, 512, 7, 7, 3, 1, 1),  # ResNet stage 5 at batch 1 (7x7): 4 tiles of 128 x 128
    (2, 1280, 1280, 8, 8, 3, 1, 1),  # SD UNet lowest resolution (8x8 latent / 8), batch 2
    (2, 1280, 1280, 16, 16, 3, 1, 1),  # SD UNet 16x16 level
    (1, 512, 512, 32, 32, 3, 1, 1),  # SD VAE decoder 32x32 level, batch 1
    (4, 1280, 1280, 8, 8, 1, 1, 0),  # SD resnet 1x1 at the lowest resolution
)


GATHER_SHAPES = (  # shapes without a tiled-TMA path (gluon-gather's cp.async gather)
    (8, 320, 320, 65, 65, 3, 2, 1),  # the SD stride-2 shape at an odd size: no parity-split view
    (32, 3, 32, 224, 224, 3, 2, 1),  # an RGB stem (3x3, stride 2): 3 channels padded to 8 on the host
)


@dataclass(frozen=True)
class ConvPlan:
    """Pattern 6. 'fprop': every shape x (torch = cuDNN with cudnn.benchmark, channels-last; triton;
    gluon-pipelined; gluon-ws; gluon-gather), bf16, CUDA-graph timing; 'gather': the shapes only the cp.async
    gather takes (torch, triton, gluon-gather); 'fprop-sweep': gluon-pipelined's tile / ring knobs on every
    shape; 'dgrad': the same shapes' input gradients (cuDNN, Triton, Gluon: stride**2 sub-problems);
    'wgrad': their filter gradients (cuDNN, Triton, the Gluon split-K kernel and the warp-specialized template
    instance); 'wgrad-sweep': the split-K kernel's knobs; 'schedule': the template's schedules on gluon-ws fprop
    and dgrad (data-parallel, split-K 2 / 4 / 8, last-wave split, the 16 x 8 patch on 8 x 8 images) and wgrad
    (split-K 1 / 2 / 4 / 8 over the pixels, tile- or slice-major, BN 64, one consumer warpgroup) on the SM-idle shapes (IDLE_SHAPES)
    and two that fill the SMs; 'timeline': per-tile %globaltimer stamps of the INSTRUMENT fprop build."""
    shapes: tuple = CONV_SHAPES + IDLE_SHAPES
    dtype: str = "bfloat16"
    variants: tuple = ("torch", "triton", "gluon-pipelined", "gluon-ws", "gluon-gather")
    gather_shapes: tuple = GATHER_SHAPES
    gather_variants: tuple = ("torch", "triton", "gluon-gather")
    dgrad_variants: tuple = ("torch", "triton", "gluon-pipelined", "gluon-ws")
    wgrad_variants: tuple = ("torch", "triton", "gluon-pipelined", "gluon-ws")
    sweep_shapes: tuple = CONV_SHAPES
    sweep_knobs: tuple = (  # (TH, TW, BN, num_stages, num_warps); TH 0: the heuristic's patch
        (0, 0, 128, 4, 4), (0, 0, 128, 5, 4), (0, 0, 64, 4, 4), (0, 0, 256, 3, 8), (2, 32, 128, 4, 4),
        (8, 16, 128, 4, 4), (4, 16, 128, 4, 4), (2, 64, 128, 4, 4),
        # BM = 256 patches on 2 consumer warpgroups (the 128 x 256 GEMM tile, transposed): B reused twice as often
        (8, 32, 128, 3, 8), (16, 16, 128, 3, 8), (4, 64, 128, 3, 8), (8, 32, 64, 4, 8), (16, 16, 64, 4, 8))
    wgrad_sweep_knobs: tuple = (  # (TH, TW, BM, BN, num_stages, num_warps, splits); TH 0: the heuristic's patch
        (0, 0, 128, 128, 4, 4, 0), (0, 0, 128, 128, 6, 4, 0), (0, 0, 64, 128, 4, 4, 0), (0, 0, 128, 64, 4, 4, 0),
        (0, 0, 128, 256, 3, 8, 0), (0, 0, 128, 128, 4, 8, 0), (4, 32, 128, 128, 3, 4, 0), (2, 64, 128, 128, 3, 4, 0),
        (0, 0, 128, 128, 4, 4, 2), (0, 0, 128, 128, 4, 4, 4), (0, 0, 128, 128, 4, 4, 16),
        # few-pixel shapes (IDLE_SHAPES: K = B·OH·OW of 49-1024 pixels): wider tiles, shallower rings
        (0, 0, 128, 256, 2, 8, 0), (0, 0, 64, 256, 2, 4, 0), (0, 0, 128, 128, 2, 4, 0), (0, 0, 64, 128, 2, 4, 0))
    gather_knobs: tuple = ((128, 128, 5, 4), (256, 128, 3, 8), (128, 64, 4, 4))  # (BM, BN, num_stages, num_warps)
    schedule_shapes: tuple = IDLE_SHAPES + ((8, 320, 320, 64, 64, 3, 1, 1), (64, 256, 256, 14, 14, 3, 1, 1),
                                            (8, 640, 320, 32, 32, 1, 1, 0))  # SD's 1x1: fprop's other miss
    schedule_knobs: tuple = ({"split_k": 1}, {"split_k": 2}, {"split_k": 4}, {"split_k": 8},
                             {"split_k": 2, "split_last_wave": True}, {"TH": 16, "TW": 8, "num_warps": 8},
                             {"TH": 16, "TW": 8, "num_warps": 8, "split_k": 1}, {"BN": 128}, {"BN": 128, "split_k": 2},
                             {"BN": 128, "split_k": 4},
                             # BN 64 data-parallel (twice BN 128's CTAs, no fixup launch) and its deeper ring: on the
                             # 1x1 shapes an L2-warm profile (H100, 2026-12-07) had them ahead of the split rule
                             {"BN": 64, "split_k": 1}, {"BN": 64, "split_k": 1, "num_stages": 6},
                             # serial split-K (the last slice sums the tile in the kernel: no fixup launch) at the
                             # rule's split, and on 1x1 shapes the flat view (B·H·W pixels as the GEMM's rows). Both
                             # lost or tied on the H100 (run 20261207T233628Z-aafa7b00: serial 18-80% slower at the
                             # rule's split, 4.5x at split 8; flat at best tied the patch tiles: 4x1280ch 8x8 1x1 9.5
                             # vs 9.5 at 64-pixel rows, 10.6 at 128; SD's 1x1 12.8 vs 13.0), so the heuristic picks
                             # neither: these points stay in the study
                             {"serial": True}, {"flat": True}, {"flat": True, "split_k": 1})
    # the warp-specialized wgrad's schedules (split_k slices of the pixels; 1 = persistent data-parallel) and tiles
    # (the heuristic walks split launches slice-major: the tile-major points say so)
    wgrad_schedule_knobs: tuple = ({"split_k": 1}, {"split_k": 2}, {"split_k": 4}, {"split_k": 8}, {"BN": 64},
                                   {"num_warps": 4}, {"slice_major": False}, {"split_k": 4, "slice_major": False},
                                   {"split_k": 8, "slice_major": False})
    timeline_shapes: tuple = ((128, 384, 384, 64, 64, 3, 1, 1), (8, 640, 320, 32, 32, 1, 1, 0))
    # 'ws-timeline': gluon-ws fprop's INSTRUMENT build on two SM-idle shapes, data-parallel vs its split-K plan
    ws_timeline_shapes: tuple = ((2, 1280, 1280, 8, 8, 3, 1, 1), (4, 1280, 1280, 8, 8, 1, 1, 0))
    # short-K shapes (1x1 fprop / dgrad, stride-2 dgrad sub-problems): smaller tiles and two CTAs per SM
    tail_shapes: tuple = ((8, 640, 320, 32, 32, 1, 1, 0), (64, 512, 1024, 28, 28, 1, 2, 0), (8, 320, 320, 64, 64, 3, 2, 1))
    tail_knobs: tuple = (  # (TH, TW, BN, num_stages, num_warps, ctas_per_sm)
        (4, 32, 128, 5, 4, 1), (2, 32, 128, 5, 4, 1), (2, 32, 128, 3, 4, 2), (4, 32, 64, 3, 4, 2),
        (4, 32, 128, 2, 4, 2), (8, 16, 64, 3, 4, 2), (2, 32, 64, 4, 4, 2), (8, 16, 128, 2, 4, 2))

    @classmethod
    def quick(cls):
        return cls(shapes=((2, 64, 64, 16, 16, 3, 1, 1), (2, 64, 128, 16, 16, 3, 2, 1)),
                   gather_shapes=((2, 3, 32, 17, 17, 3, 2, 1), ), sweep_shapes=((2, 64, 64, 16, 16, 3, 1, 1), ),
                   sweep_knobs=((0, 0, 64, 4, 4), ), wgrad_sweep_knobs=((0, 0, 64, 64, 4, 4, 0), ),
                   gather_knobs=((128, 64, 4, 4), ), schedule_shapes=((2, 128, 128, 8, 8, 3, 1, 1), ),
                   schedule_knobs=({"split_k": 1}, {"split_k": 2}), wgrad_schedule_knobs=({"split_k": 2}, ),
                   timeline_shapes=((2, 64, 64, 16, 16, 3, 1, 1), ), ws_timeline_shapes=((2, 128, 128, 8, 8, 3, 1, 1), ))


def _conv_shape(t) -> dict:
    return dict(zip(("B", "Ci", "Co", "H", "W", "R", "stride", "pad"), t))


def _conv_case(op: str, v: str, shape: dict, dtype: str) -> dict:
    c = {"op": op, "variant": v, "shape": shape, "dtype": dtype, "timer": "cudagraph"}
    if v == "torch":  # recorded with the case: cuDNN picks its algorithm by timing (set by run_conv)
        c["config"] = {"cudnn_benchmark": True}
    return c


CONV_PARTS = ("fprop", "gather", "fprop-sweep", "tail-sweep", "dgrad", "wgrad", "wgrad-sweep", "schedule", "timeline",
              "ws-timeline")
CONV_CAPTURES = ("timeline", "ws-timeline")  # parts that capture stamps rather than time cases


def conv_cases(plan: ConvPlan, parts=CONV_PARTS) -> list[dict]:
    from . import registry
    cases = []

    def add(op, variants, shapes):
        for t in shapes:
            for v in variants:
                if v == "torch" or v in registry.variants(op):
                    cases.append(_conv_case(op, v, _conv_shape(t), plan.dtype))

    if "dgrad" in parts:  # the same shapes' input gradients: cuDNN, the Triton dgrad, the Gluon sub-problems
        add("conv2d_input_grad", plan.dgrad_variants, plan.shapes)
    if "wgrad" in parts:  # the filter gradients: cuDNN, the Triton and the Gluon split-K kernels
        add("conv2d_weight_grad", plan.wgrad_variants, plan.shapes)
    if "fprop" in parts:
        add("conv2d", plan.variants, plan.shapes)
    if "gather" in parts:
        add("conv2d", plan.gather_variants, plan.gather_shapes)
        for t in plan.gather_shapes:
            for bm, bn, st, nw in plan.gather_knobs:
                knobs = {"BM": bm, "BN": bn, "num_stages": st, "num_warps": nw}
                if resolves("conv2d", "gluon-gather", _conv_shape(t), plan.dtype, knobs):
                    cases.append({"op": "conv2d", "variant": "gluon-gather", "shape": _conv_shape(t),
                                  "dtype": plan.dtype, "timer": "cudagraph", "config": {**knobs, "study": "gather-sweep"}})
    if "fprop-sweep" in parts:
        for t in plan.sweep_shapes:
            for th, tw, bn, st, nw in plan.sweep_knobs:
                knobs = {"BN": bn, "num_stages": st, "num_warps": nw, **({"TH": th, "TW": tw} if th else {})}
                if resolves("conv2d", "gluon-pipelined", _conv_shape(t), plan.dtype, knobs):
                    cases.append({"op": "conv2d", "variant": "gluon-pipelined", "shape": _conv_shape(t),
                                  "dtype": plan.dtype, "timer": "cudagraph", "config": {**knobs, "study": "fprop-sweep"}})
    if "tail-sweep" in parts:  # fprop and dgrad of the short-K shapes
        for op in ("conv2d", "conv2d_input_grad"):
            for t in plan.tail_shapes:
                for th, tw, bn, st, nw, cps in plan.tail_knobs:
                    knobs = {"TH": th, "TW": tw, "BN": bn, "num_stages": st, "num_warps": nw, "ctas_per_sm": cps}
                    if resolves(op, "gluon-pipelined", _conv_shape(t), plan.dtype, knobs):
                        cases.append({"op": op, "variant": "gluon-pipelined", "shape": _conv_shape(t), "dtype": plan.dtype,
                                      "timer": "cudagraph", "config": {**knobs, "study": "tail-sweep"}})
    if "schedule" in parts:  # the template's schedules on the warp-specialized fprop and dgrad
        for op in ("conv2d", "conv2d_input_grad"):
            for t in plan.schedule_shapes:
                for knobs in plan.schedule_knobs:
                    if resolves(op, "gluon-ws", _conv_shape(t), plan.dtype, knobs):
                        cases.append({"op": op, "variant": "gluon-ws", "shape": _conv_shape(t), "dtype": plan.dtype,
                                      "timer": "cudagraph", "config": {**knobs, "study": "schedule"}})
        for t in plan.schedule_shapes:
            for knobs in plan.wgrad_schedule_knobs:
                if resolves("conv2d_weight_grad", "gluon-ws", _conv_shape(t), plan.dtype, knobs):
                    cases.append({"op": "conv2d_weight_grad", "variant": "gluon-ws", "shape": _conv_shape(t),
                                  "dtype": plan.dtype, "timer": "cudagraph", "config": {**knobs, "study": "schedule"}})
    if "wgrad-sweep" in parts:
        for t in plan.shapes:
            for th, tw, bm, bn, st, nw, sp in plan.wgrad_sweep_knobs:
                knobs = {"BM": bm, "BN": bn, "num_stages": st, "num_warps": nw, "splits": sp,
                         **({"TH": th, "TW": tw} if th else {})}
                if resolves("conv2d_weight_grad", "gluon-pipelined", _conv_shape(t), plan.dtype, knobs):
                    cases.append({"op": "conv2d_weight_grad", "variant": "gluon-pipelined", "shape": _conv_shape(t),
                                  "dtype": plan.dtype, "timer": "cudagraph", "config": {**knobs, "study": "wgrad-sweep"}})
    return cases


def capture_conv_timeline(shapes=ConvPlan.timeline_shapes, dtype: str = "bfloat16") -> dict:
    """The INSTRUMENT build of gluon-pipelined conv2d at its heuristic config, per shape: every program's
    per-tile stamps {shape: {"config", "ns": [[[start, first_data, mma_done, stored], ... per tile], ... per CTA]}}
    (record_stamps; run twice, the second run kept: warm caches and clocks)."""
    from . import bench, registry
    from .kernels import conv
    v = registry.get_variant("conv2d", "gluon-pipelined")
    out = {}
    for t in shapes:
        shape = _conv_shape(t)
        x, w, st, pad = bench.make_inputs("conv2d", shape, dtype, seed=21)
        cfg = v.resolve(shape, dtype, {})
        got = record_stamps(lambda c, trace: conv.fprop(x, w, st, pad, config=c, trace=trace), {"heuristic": cfg},
                            conv.CONV_TRACE_FIELDS)
        out[",".join(map(str, t))] = {"shape": shape, **got["heuristic"]}
    return {"dtype": dtype, "fields": ["start", "first_data", "mma_done", "stored"], "timelines": out}


# the split-K timeline: the same shape and tile, persistent data-parallel against the heuristic's split-K plan
CONV_WS_TIMELINE_CONFIGS = {"data-parallel": {"split_k": 1}, "split-K (heuristic)": {}}


def capture_conv_ws_timeline(shapes=ConvPlan.ws_timeline_shapes, dtype: str = "bfloat16") -> dict:
    """Every CTA's per-unit stamps of the INSTRUMENT build of gluon-ws conv2d (igemm.trace), data-parallel vs the
    heuristic's split-K (CONV_WS_TIMELINE_CONFIGS): {"timelines": {shape: {schedule: {"config", "split_k", "ns":
    [[[K-slice + 1, start, last MMA issued, store issued] per unit] per CTA]}}}} (record_stamps; the fixup
    kernel after a split launch is not stamped: its time is the gap between this span and the timed µs)."""
    from . import bench, registry
    from .kernels import conv_ws
    from .kernels.igemm.trace import UNIT_TRACE_FIELDS
    v = registry.get_variant("conv2d", "gluon-ws")
    out = {}
    for t in shapes:
        shape = _conv_shape(t)
        x, w, st, pad = bench.make_inputs("conv2d", shape, dtype, seed=23)
        cfgs = {k: v.resolve(shape, dtype, knobs) for k, knobs in CONV_WS_TIMELINE_CONFIGS.items()}
        got = record_stamps(lambda c, trace: conv_ws.fprop_ws(x, w, st, pad, config=c, trace=trace), cfgs,
                            int(UNIT_TRACE_FIELDS), tags=1)
        for k, cfg in cfgs.items():  # the split the launch ran: the one its codegen spec compiles
            got[k]["split_k"] = conv_ws.fprop_ws_codegen(shape, dtype, cfg)["constexprs"]["SPLIT_K"]
        out[",".join(map(str, t))] = got
    return {"dtype": dtype, "fields": ["k_slice_plus_1", "mainloop_start", "last_mma_issued", "store_issued"],
            "timelines": out}


def run_conv(results_dir: str = "results", quick: bool = False, plan: ConvPlan | None = None, parts=CONV_PARTS):
    import torch
    torch.backends.cudnn.benchmark = True  # the torch variant's cuDNN baseline, as the issue measures it
    plan = plan or (ConvPlan.quick() if quick else ConvPlan())
    recs, s = measure_plan("06-convolution", results_dir, quick, conv_cases(plan, parts))
    if "timeline" in parts:
        save_timeline(s, results_dir, "06-convolution", lambda: capture_conv_timeline(plan.timeline_shapes, plan.dtype))
    if "ws-timeline" in parts:
        save_timeline(s, results_dir, "06-convolution",
                      lambda: capture_conv_ws_timeline(plan.ws_timeline_shapes, plan.dtype), suffix=".ws-timeline.json")
    return recs, s.save()


EXPERIMENTS["06-convolution"] = run_conv


# ----------------------------------------------------------------------------------------------
# every notebook's cases (refresh, and currency's study knobs, read them)

def _run_backward(*a, **k):
    from .backward_plan import run_backward
    return run_backward(*a, **k)


EXPERIMENTS["07-backward"] = _run_backward

NOTEBOOKS = ("00-ceilings", "01-tma-caching", "02-chunked-reductions", "03-multibuffer-pipelining",
             "04-warp-specialization", "05-fused-qk-norm-rope", "06-convolution", "07-backward")


def plan_shapes() -> set:
    """holdout.key()s of every case of every notebook's plan: what the held-out check never draws."""
    from .holdout import key
    return {key(c["op"], c["shape"], c["dtype"]) for nb in NOTEBOOKS for c in notebook_cases(nb)
            if "shape" in c and c.get("op") != "copy"}


def notebook_cases(notebook: str) -> list[dict]:
    """Every case of the notebook's plan, every part the pages show included (`bench NOTEBOOK --parts ...`
    measures the optional ones); timelines and Inductor code are captures, not cases."""
    import sys
    ex = sys.modules[__name__]
    if notebook == "00-ceilings":
        from . import holdout
        p = ex.CeilingsPlan()
        return ex.plan_cases(p) + ex.fastpath_grid_cases(p) + holdout.evidence_cases()
    if notebook == "01-tma-caching":
        return ex.tma_caching_cases(ex.TmaCachingPlan(), ("rms", "others", "ln-sweep", "small-m", "regs", "sweep"))
    if notebook == "02-chunked-reductions":
        return ex.chunked_cases(ex.ChunkedPlan(), ("bf16", "fp32", "others", "mid-n", "chunk", "stream", "groupnorm"))
    if notebook == "03-multibuffer-pipelining":
        return ex.pipelined_cases(ex.PipelinedPlan(), ("norms", "stages", "others", "gemm", "gemm-sweep", "pipe-sweep",
                                                    "schedule", "fence", "ws-sweep"))
    if notebook == "04-warp-specialization":
        return ex.ws_cases(ex.WarpSpecializedPlan(), ("norms", "gemm", "gemm-shapes", "norm-sweep", "ws-sweep"))
    if notebook == "05-fused-qk-norm-rope":
        return ex.qk_norm_rope_cases(ex.QkNormRopePlan(), ("sweep", "dims", "tma-sweep", "fused-sweep", "persistent-sweep"))
    if notebook == "06-convolution":
        return ex.conv_cases(ex.ConvPlan(), tuple(p for p in ex.CONV_PARTS if p not in ex.CONV_CAPTURES))
    if notebook == "07-backward":
        from .backward_plan import PARTS, BackwardPlan, backward_cases
        return backward_cases(BackwardPlan(), PARTS)
    raise ValueError(f"unknown notebook {notebook!r}; known: {sorted(ex.EXPERIMENTS)}")
