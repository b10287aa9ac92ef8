"""The measurement plan of notebook 07 (pattern 7: the row norms' backward), registered with the others in
gluon_lab.experiments (`python -m gluon_lab bench 07-backward`).

'grid': the 01-03 grid's M >= 1024 rows (4096, 16384) x the hidden sizes of 01 (4096, 8192, 16384) and the odd
ones of 02 (1536 ... 24576), bf16, for rms_norm_backward, layer_norm_backward and add_rms_norm_backward: per
cell a copy of the backward's compulsory bytes' worth of rows (its bandwidth reference, measured in the run),
then every variant that takes the shape (inductor at M = 16384 only: one compile per shape; torch = what eager autograd runs, inductor = torch.compile of the
closed-form backward, Liger, QuACK when installed, gluon-regs). 'dtypes': fp16 and fp32 on a subset.
'bwd-config': gluon-regs's knobs (warps x programs per SM x partials) at M = 16384; 'bwd-stats': the
forward's statistics read vs recomputed from x (the autograd path recomputes)."""
from __future__ import annotations

from dataclasses import dataclass

NB = "07-backward"
OPS = ("rms_norm_backward", "layer_norm_backward", "add_rms_norm_backward")
PARTS = ("grid", "dtypes", "bwd-config", "bwd-stats")


@dataclass(frozen=True)
class BackwardPlan:
    Ms: tuple = (4096, 16384)
    Ns: tuple = (1536, 2560, 2880, 3584, 4096, 5120, 6144, 7168, 8192, 12288, 14336, 16384, 18432, 20480, 24576)
    ops: tuple = OPS
    variants: tuple = ("torch", "inductor", "liger", "quack", "gluon-regs")
    inductor_Ms: tuple = (16384, )  # torch.compile is one compile per shape (~4 s each): the grid's larger M only
    dtype: str = "bfloat16"
    other_dtypes: tuple = ("float16", "float32")
    other_M: int = 4096
    other_Ns: tuple = (2880, 4096, 8192)
    other_variants: tuple = ("torch", "inductor", "gluon-regs")
    sweep_M: int = 16384
    sweep_Ns: tuple = (2880, 4096, 8192, 12288)
    sweep_ops: tuple = ("rms_norm_backward", "layer_norm_backward")
    sweep_warps: tuple = (4, 8, 16)
    sweep_ctas: tuple = (1, 2, 4)
    sweep_partials: tuple = (0, 1)

    @classmethod
    def quick(cls):
        return cls(Ms=(4096, ), Ns=(4096, 5120), other_Ns=(4096, ), sweep_Ns=(4096, ), sweep_warps=(8, ),
                   sweep_ctas=(1, 2), sweep_partials=(0, ))


def copy_shape(op: str, M: int, N: int, dtype: str) -> dict:
    """Rows of N whose copy (read + write) moves the backward's compulsory bytes: x, dy read and dx written (and
    ds read for add+RMSNorm) are 3 (4) rows of M, so a copy of 3M/2 (2M) rows reads and writes as many."""
    rows = {"add_rms_norm_backward": 2 * M}.get(op, 3 * M // 2)
    return {"M": rows, "N": N}


def backward_cases(plan: BackwardPlan, parts=PARTS) -> list[dict]:
    from . import registry
    from .plan_common import resolves
    cases = []

    def grid(Ms, Ns, dtype, variants, study=None):
        for M in Ms:
            vs = [v for v in variants if v != "inductor" or M in plan.inductor_Ms or dtype != plan.dtype]
            for N in Ns:
                s = {"M": M, "N": N}
                copies = set()
                for op in plan.ops:
                    c = copy_shape(op, M, N, dtype)
                    if (c["M"], c["N"]) not in copies:
                        copies.add((c["M"], c["N"]))
                        cases.append({"op": "copy", "shape": c, "dtype": dtype})
                    for v in vs:
                        if v in registry.variants(op) and resolves(op, v, s, dtype):
                            case = {"op": op, "variant": v, "shape": s, "dtype": dtype}
                            if study:
                                case["config"] = {"study": study}
                            cases.append(case)

    if "grid" in parts:
        grid(plan.Ms, plan.Ns, plan.dtype, plan.variants)
    if "dtypes" in parts:
        for dt in plan.other_dtypes:
            grid((plan.other_M, ), plan.other_Ns, dt, plan.other_variants)
    for N in plan.sweep_Ns:
        s = {"M": plan.sweep_M, "N": N}
        for op in plan.sweep_ops:
            if "bwd-config" in parts:
                for nw in plan.sweep_warps:
                    for k in plan.sweep_ctas:
                        for p in plan.sweep_partials:
                            knobs = {"num_warps": nw, "ctas_per_sm": k, "partials": p}
                            if resolves(op, "gluon-regs", s, plan.dtype, knobs):
                                cases.append({"op": op, "variant": "gluon-regs", "shape": s, "dtype": plan.dtype,
                                              "config": {**knobs, "study": "bwd-config"}})
            if "bwd-stats" in parts:
                for rc in (False, True):
                    cases.append({"op": op, "variant": "gluon-regs", "shape": s, "dtype": plan.dtype,
                                  "config": {"recompute": rc, "study": "bwd-stats"}})
    return cases


def run_backward(results_dir: str = "results", quick: bool = False, plan: BackwardPlan | None = None, parts=PARTS):
    from .plan_common import measure_plan
    plan = plan or (BackwardPlan.quick() if quick else BackwardPlan())
    recs, s = measure_plan(NB, results_dir, quick, backward_cases(plan, parts))
    return recs, s.save()
