"""The measurement plan of notebook 07 (pattern 7: the row norms' backward), registered with the others in
gluon_lab.experiments (`python -m gluon_lab bench 07-backward`).

'grid': the 01-03 grid's M >= 1024 rows (4096, 16384) x the hidden sizes of 01 (4096, 8192, 16384) and the odd
ones of 02 (1536 ... 24576), bf16, for rms_norm_backward, layer_norm_backward and add_rms_norm_backward: per
cell a copy of the backward's compulsory bytes' worth of rows (its bandwidth reference, measured in the run),
then every variant that takes the shape (inductor at M = 16384 only: one compile per shape; torch = what eager autograd runs, inductor = torch.compile of the
closed-form backward, Liger, QuACK when installed, gluon-regs). 'dtypes': fp16 and fp32 on a subset.
'bwd-config': gluon-regs's knobs (warps x programs per SM x partials x prefetch) at M = 16384; 'bwd-stats': the
forward's statistics read vs recomputed from x (the training forward saves them; the plain op's autograd
recomputes). 'timeline': the INSTRUMENT build's per-tile %globaltimer stamps of every persistent program, with
the column reduce timed on its own beside the whole op (capture_timeline)."""
from __future__ import annotations

import itertools
from dataclasses import dataclass

NB = "07-backward"
OPS = ("rms_norm_backward", "layer_norm_backward", "add_rms_norm_backward")
PARTS = ("grid", "dtypes", "bwd-config", "bwd-stats")  # the plan's cases; "train-step" and "timeline" are their own
TIMELINE_SHAPES = (("rms_norm_backward", 8192, 4096), ("layer_norm_backward", 8192, 14336))  # <= 63 tiles a program
TRACE_FIELDS = ("start", "stats_ready", "folded")  # norm_bwd_kernel's stamps per tile; the last row: the program's end
TRAIN_SHAPES = ((1, 2048), (4, 2048))  # (batch, sequence) of the training-step study, Llama-2-7B-shaped block


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
    sweep_Ns: tuple = (1536, 2880, 4096, 8192, 12288, 16384)
    sweep_ops: tuple = ("rms_norm_backward", "layer_norm_backward")
    sweep_warps: tuple = (4, 8, 16)
    sweep_ctas: tuple = (1, 2, 4)
    sweep_partials: tuple = (0, 1)
    sweep_prefetch: tuple = (False, True)
    quack_M: int = 16384  # 'quack-peer': QuACK beside gluon-regs and torch in a run of its own (a study label)
    quack_Ns: tuple = (1536, 2560, 2880, 3584, 4096, 5120, 6144, 7168, 8192, 12288, 14336, 16384)
    quack_variants: tuple = ("torch", "quack", "gluon-regs")

    @classmethod
    def quick(cls):
        return cls(Ms=(4096, ), Ns=(4096, 5120), other_Ns=(4096, ), sweep_Ns=(4096, ), sweep_warps=(8, ),
                   sweep_ctas=(1, 2), sweep_partials=(0, ), sweep_prefetch=(False, True))


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
    if "quack-peer" in parts:
        grid((plan.quack_M, ), plan.quack_Ns, plan.dtype, plan.quack_variants, study="quack-peer")
    if "dtypes" in parts:
        for dt in plan.other_dtypes:
            grid((plan.other_M, ), plan.other_Ns, dt, plan.other_variants)
    for N in plan.sweep_Ns:
        s = {"M": plan.sweep_M, "N": N}
        for op in plan.sweep_ops:
            if "bwd-config" in parts:
                for nw, k, p, pf in itertools.product(plan.sweep_warps, plan.sweep_ctas, plan.sweep_partials,
                                                      plan.sweep_prefetch):
                    knobs = {"num_warps": nw, "ctas_per_sm": k, "partials": p, "prefetch": pf}
                    if resolves(op, "gluon-regs", s, plan.dtype, knobs):
                        cases.append({"op": op, "variant": "gluon-regs", "shape": s, "dtype": plan.dtype,
                                      "config": {**knobs, "study": "bwd-config"}})
            if "bwd-stats" in parts:
                for rc in (False, True):
                    cases.append({"op": op, "variant": "gluon-regs", "shape": s, "dtype": plan.dtype,
                                  "config": {"recompute": rc, "study": "bwd-stats"}})
    return cases


def measure_training_step(session, shapes=TRAIN_SHAPES, repeats: int = 2, hidden: int = 4096, heads: int = 32,
                          mlp: int = 11008, dtype: str = "bfloat16") -> list:
    """A training step of a Llama-style decoder block (gluon_lab.blocks.LlamaBlock: nn.RMSNorm x 2, bf16, random
    weights): loss = block(x).float().pow(2).mean(); loss.backward(), compiled twice (torch.compile, and
    torch.compile with gluon_lab.inductor.options(): the training rewrite puts the norms' custom ops and their
    backward ops in the graphs) and timed side by side in one run (do_bench, alternating `repeats` times per
    shape). Each record: op "llama_block", study "train-step", variant "compiled" / "compiled+gluon-lab", the
    gradients' max error against the eager step's (passed: within bf16 tolerance), the custom ops in the code."""
    import re
    import torch
    from torch._inductor.utils import run_and_get_code
    from . import bench, device, inductor
    from .blocks import LlamaBlock
    from .results import Record
    dt = bench.torch_dtype(dtype)
    blk = LlamaBlock(hidden, heads, mlp, dtype=dt, device="cuda")

    def step(x):
        loss = blk(x).float().pow(2).mean()
        loss.backward()
        return loss

    variants = {"compiled": torch.compile(step, dynamic=False),
                "compiled+gluon-lab": torch.compile(step, dynamic=False, options=inductor.options())}
    recs = []
    for B, S in shapes:
        shape = {"B": B, "S": S, "H": hidden}
        g = torch.Generator(device="cuda").manual_seed(session.next_seed())
        x = torch.randn(B, S, hidden, device="cuda", dtype=dt, generator=g)
        blk.zero_grad(set_to_none=True)
        step(x)
        ref = [p.grad.float().clone() for p in blk.parameters()]
        info = {}
        for name, fn in variants.items():
            blk.zero_grad(set_to_none=True)
            _, code = run_and_get_code(fn, x)  # compiles (first call per shape) and keeps the code
            ops = re.findall(r"torch\.ops\.gluon_lab\.(\w+)\.default\(", "\n".join(code))
            err = max((p.grad.float() - r).abs().max().item() for p, r in zip(blk.parameters(), ref))
            scale = max(r.abs().max().item() for r in ref)
            info[name] = {"custom_ops": {o: ops.count(o) for o in sorted(set(ops))}, "max_abs_err": err,
                          "passed": bool(err <= 5e-2 * max(scale, 1e-3))}
        for r in range(repeats):
            for name, fn in variants.items():
                t = bench.time_do_bench(lambda fn=fn, x=x: fn(x))
                clock = device.sm_clock_mhz()
                fl = 3 * blk.flops(B, S)  # forward + backward (~2x the forward)
                recs.append(Record(
                    op="llama_block", variant=name, pattern="compiled-model", shape=shape, dtype=dtype,
                    config={"study": "train-step", "repeat": r, "custom_ops": info[name]["custom_ops"],
                            "hidden": hidden, "heads": heads, "mlp": mlp, "sm_clock_mhz": clock},
                    ms_median=t.ms_median, ms_min=t.ms_min, ms_max=t.ms_max, n_reps=t.n_reps, timer=t.timer,
                    bytes=None, flops=fl, tflops=fl / (t.ms_median * 1e-3) / 1e12, passed=info[name]["passed"],
                    max_abs_err=info[name]["max_abs_err"], kernel_source_hash=None,
                    notes="whole-step time (forward + backward, gradients accumulated); hash None: it rests on "
                          "Inductor, cuBLAS and the variants auto chose, whose own records carry their hashes",
                    **session.prov))
        del x
        torch.cuda.synchronize()
    session.records.extend(recs)
    return recs


def capture_timeline(shapes=TIMELINE_SHAPES, dtype: str = "bfloat16") -> dict:
    """The INSTRUMENT build of the gluon-regs backward at its heuristic config, per (op, M, N): every program's
    per-tile stamps {key: {"op", "shape", "config", "ns": [[[start, stats_ready, folded], ... per tile, [end] * 3],
    ... per program], "G", "op_us", "reduce_us"}} (plan_common.record_stamps: the second of two launches), with the
    uninstrumented op (do_bench median, us) and its column reduce alone (colsum_kernel over the G partial rows)."""
    import torch
    from . import bench, registry
    from .plan_common import record_stamps
    from .kernels import norm_backward as B
    from .kernels.hopper import num_sms
    out = {}
    for op, M, N in shapes:
        v = registry.get_variant(op, "gluon-regs")
        shape = {"M": M, "N": N}
        inputs = bench.make_inputs(op, shape, dtype, seed=23)
        eps = v.spec.scalars["eps"]
        cfg = v.resolve(shape, dtype, {})
        got = record_stamps(lambda c, trace: v.fn(*inputs, eps=eps, config=c, trace=trace), {"heuristic": cfg},
                            len(TRACE_FIELDS))["heuristic"]
        G = B.grid_size(M, cfg, num_sms(torch.device("cuda")))
        params = len(v.spec.outputs) - 1
        ws = torch.randn(params * G, N, device="cuda")
        buf = torch.empty(params, N, device="cuda", dtype=bench.torch_dtype(dtype))
        reduce_t = bench.time_do_bench(lambda: B.colsum_kernel[(B.cdiv(N, B.COLSUM["BN"]), params)](
            ws, buf, G, N=N, **B.COLSUM))
        op_t = bench.time_do_bench(lambda: v.fn(*inputs, eps=eps, config=cfg))
        out[f"{op} {M}x{N}"] = {"op": op, "shape": shape, "G": G, "op_us": op_t.ms_median * 1e3,
                                "reduce_us": reduce_t.ms_median * 1e3, **got}
    return {"dtype": dtype, "fields": list(TRACE_FIELDS), "timelines": out}


def run_backward(results_dir: str = "results", quick: bool = False, plan: BackwardPlan | None = None,
                 parts=PARTS + ("train-step", "timeline")):
    from .plan_common import measure_plan, save_timeline
    plan = plan or (BackwardPlan.quick() if quick else BackwardPlan())
    recs, s = measure_plan(NB, results_dir, quick, backward_cases(plan, parts))
    if "train-step" in parts and s.primary:
        recs += measure_training_step(s, shapes=((1, 512), ) if quick else TRAIN_SHAPES)
    if "timeline" in parts:
        save_timeline(s, results_dir, NB, capture_timeline)
    return recs, s.save()
