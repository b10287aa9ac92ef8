"""The measurement plan of each notebook, as plain functions: the notebook (mode="measure") and
the CLI (`python -m gluon_lab bench NOTEBOOK`) call the same code, so a batch run on the GPU
machine and an interactive run in JupyterLab produce the same records."""
from __future__ import annotations

import itertools
from dataclasses import dataclass


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

    @classmethod
    def quick(cls):
        return cls(Ms=(1024, 2048), Ns=(1024, 1536), timer_cells=((1024, 1024), ), timer_repeats=2)


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


def run_ceilings(results_dir: str = "results", quick: bool = False, plan: CeilingsPlan | None = None):
    from .bench import Session
    plan = plan or (CeilingsPlan.quick() if quick else CeilingsPlan())
    s = Session("00-ceilings", results_dir, **({"copy_gib": 0.5, "matmul_n": 4096} if quick else {}))
    recs = list(s.records)
    s.save()
    recs += s.sweep(plan_cases(plan), desc="00-ceilings")
    return recs, s.save()


EXPERIMENTS = {"00-ceilings": run_ceilings}


# ----------------------------------------------------------------------------------------------
# 01-tma-caching

@dataclass(frozen=True)
class TmaCachingPlan:
    """Pattern 1. Parts run in separate batches when a GPU call is time-limited:
    'rms' = RMSNorm bf16 grid (all baselines, both store paths, max-autotune);
    'others' = LayerNorm / add+RMSNorm / L2Norm bf16 grids; 'sweep' = num_warps x rows_per_cta x store;
    'inductor-code' = the Triton kernels Inductor generates, kept for the CPU codegen census."""
    Ms: tuple = (4096, 8192, 16384, 32768)
    Ns: tuple = (4096, 8192, 16384)
    dtype: str = "bfloat16"
    rms_variants: tuple = ("torch", "inductor", "inductor-max-autotune", "triton", "liger", "gluon-tma")
    other_variants: tuple = ("torch", "inductor", "triton", "liger", "gluon-tma")
    other_ops: tuple = ("layer_norm", "add_rms_norm", "l2_norm")
    sweep_M: int = 16384
    sweep_Ns: tuple = (1024, 4096, 8192, 16384)
    sweep_warps: tuple = (4, 8, 16)
    sweep_rows: tuple = (1, 2, 4)
    sweep_flags: tuple = ("tma_store", "one_box", "param_tma")  # full factorial over these booleans
    inductor_code_Ns: tuple = (4096, 16384)
    ln_sweep_Ns: tuple = (4096, 16384)

    @classmethod
    def quick(cls):
        return cls(Ms=(1024, ), Ns=(1024, 4096), sweep_M=1024, sweep_Ns=(1024, ), sweep_warps=(4, ), sweep_rows=(1, 2),
                   inductor_code_Ns=(1024, ), ln_sweep_Ns=(1024, ))


def tma_caching_cases(plan: TmaCachingPlan, parts) -> list[dict]:
    from . import ops
    cases = []
    shapes = [{"M": M, "N": N} for M in plan.Ms for N in plan.Ns]
    if "rms" in parts:
        for s in shapes:
            cases.append({"op": "copy", "shape": s, "dtype": plan.dtype})
            for v in plan.rms_variants:
                if v in ops.variants("rms_norm"):
                    cases.append({"op": "rms_norm", "variant": v, "shape": s, "dtype": plan.dtype})
            cases.append({"op": "rms_norm", "variant": "gluon-tma", "shape": s, "dtype": plan.dtype,
                          "config": {"tma_store": True}})
    if "others" in parts:
        for op in plan.other_ops:
            for s in shapes:
                for v in plan.other_variants:
                    if v in ops.variants(op):
                        cases.append({"op": op, "variant": v, "shape": s, "dtype": plan.dtype})
    if "ln-sweep" in parts:  # LayerNorm: three smem buffers (x, w, b) make occupancy the question
        for N in plan.ln_sweep_Ns:
            for nw in plan.sweep_warps:
                for r in (1, 2):
                    for pt in (False, True):
                        cases.append({"op": "layer_norm", "variant": "gluon-tma", "shape": {"M": plan.sweep_M, "N": N},
                                      "dtype": plan.dtype, "config": {"num_warps": nw, "rows_per_cta": r,
                                                                      "param_tma": pt, "study": "ln-sweep"}})
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
    from . import bench
    from .kernels import baselines as B
    inputs = bench.make_inputs(op, shape, dtype, seed=7)
    fn = torch.compile(B.FORMULAS[op], dynamic=False, mode=mode)
    _, codes = run_and_get_code(fn, *inputs, bench.DEFAULT_EPS[op])
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
    from .bench import Session
    from .results import atomic_write_text
    plan = plan or (TmaCachingPlan.quick() if quick else TmaCachingPlan())
    s = Session("01-tma-caching", results_dir, **({"copy_gib": 0.5, "matmul_n": 4096} if quick else {}))
    recs = list(s.records)
    s.save()
    recs += s.sweep(tma_caching_cases(plan, parts), desc="01-tma-caching")
    if "inductor-code" in parts:
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
