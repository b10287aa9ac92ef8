"""The measurement plan of each notebook, as plain functions: the notebook (mode="measure") and
the CLI (`python -m gluon_lab bench NOTEBOOK`) call the same code, so a batch run on the GPU
machine and an interactive run in JupyterLab produce the same records."""
from __future__ import annotations

from dataclasses import dataclass, field


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
