"""The held-out check of variant="auto" (notebook 00, plan part "auto-check").

Shapes no plan of the lab measures, drawn at random from the selection table's seed (a hash of the
evidence: a new draw each time the table changes, so its rules cannot be fitted to one draw), each
dimension log-uniform over the range models use, odd sizes included; bf16 / fp16 / fp32 where the op
takes them; every op. Per cell, in one run, through the public API (call="api": the path a model
takes, outputs allocated per call): variant="auto", eager torch and every gluon-lab variant whose
check accepts the inputs, graph-timed side by side. Records carry config {"study": "auto-check",
"table_seed": seed}; they never vote in the table (a study's records do not).

    cells = draw(seed, experiments.plan_shapes())   # [(op, shape, dtype), ...] on any machine
    measure(session, experiments.plan_shapes())     # the records (a GPU)
    analysis.auto.holdout_table(df)     # the page's table, summary and targets
"""
from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass

STUDY = "auto-check"


def _logu(rng: random.Random, lo: int, hi: int) -> int:
    """An integer log-uniform in [lo, hi]."""
    return int(round(math.exp(rng.uniform(math.log(lo), math.log(hi)))))


# per op family: a shape from rng (None: redraw), within the memory / time a cell may take
MAX_BYTES = 2 ** 28  # one call's operands: rotated copies stay within the graph timer's cap
MAX_FLOPS = 2 ** 40  # ~2 ms of tensor-core time


def _row(rng):
    M, N = _logu(rng, 1, 32768), _logu(rng, 128, 32768)
    return {"M": M, "N": N} if M * N * 4 <= MAX_BYTES else None


def _group(rng):
    G = rng.choice((8, 16, 32))
    H = _logu(rng, 4, 128)
    s = {"B": _logu(rng, 1, 32), "C": G * _logu(rng, 1, 64), "H": H, "W": rng.choice((H, _logu(rng, 4, 128))), "G": G,
         "layout": rng.choice(("nchw", "channels_last"))}
    return s if s["B"] * s["C"] * s["H"] * s["W"] * 4 <= MAX_BYTES else None


def _instance(rng):
    s = _group(rng)
    if s is None:
        return None
    s.pop("G")
    s["C"] = _logu(rng, 4, 1024)
    return s if s["B"] * s["C"] * s["H"] * s["W"] * 4 <= MAX_BYTES else None


def _matmul(rng):
    M, N, K = (_logu(rng, 16, 16384) for _ in range(3))
    return {"M": M, "N": N, "K": K} if 2 * M * N * K <= MAX_FLOPS and (M * K + K * N + M * N) * 2 <= MAX_BYTES else None


def _conv(rng):
    from .specs.conv import gemm_shape
    R = rng.choice((1, 3))
    H = _logu(rng, 7, 128)
    s = {"B": _logu(rng, 1, 64), "Ci": 8 * _logu(rng, 2, 128), "Co": 8 * _logu(rng, 2, 128), "H": H, "W": H, "R": R,
         "stride": rng.choice((1, 2)), "pad": R // 2}
    M, N, K = gemm_shape(s)
    ok = 2 * M * N * K <= MAX_FLOPS and (s["B"] * H * H * s["Ci"] + N * K + M * N) * 2 <= MAX_BYTES
    return s if ok else None


def _qk(rng):
    Hk = rng.choice((1, 2, 4, 8, 16))
    D = rng.choice((64, 128, 256))
    s = {"T": _logu(rng, 1, 32768), "Hq": Hk * rng.choice((1, 2, 4, 8)), "Hk": Hk, "D": D, "R": rng.choice((D, D // 2))}
    return s if s["T"] * (s["Hq"] + 2 * Hk) * D * 2 <= MAX_BYTES else None


SAMPLERS = {"rms_norm": _row, "layer_norm": _row, "l2_norm": _row, "add_rms_norm": _row, "group_norm": _group,
            "instance_norm": _instance, "matmul": _matmul, "conv2d": _conv, "conv2d_input_grad": _conv,
            "conv2d_weight_grad": _conv, "qk_norm_rope": _qk}


@dataclass(frozen=True)
class HoldoutPlan:
    """Cells per (op, dtype): the row norms, group / instance norm, conv (each of the three ops) 3, the GEMM
    and QK-norm + RoPE 4 (their dtypes are two)."""
    per_cell: tuple = (("rms_norm", 3), ("layer_norm", 3), ("l2_norm", 3), ("add_rms_norm", 3), ("group_norm", 3),
                       ("instance_norm", 3), ("matmul", 4), ("conv2d", 3), ("conv2d_input_grad", 3),
                       ("conv2d_weight_grad", 3), ("qk_norm_rope", 4))

    @classmethod
    def quick(cls):
        return cls(per_cell=tuple((op, 1) for op in SAMPLERS))


def key(op: str, shape: dict, dtype: str) -> tuple:
    return (op, json.dumps(shape, sort_keys=True), dtype)


def draw(seed: int, exclude: set, plan: HoldoutPlan | None = None) -> list[tuple]:
    """[(op, shape, dtype), ...]: the plan's cells for this seed (the same on every machine), none of them in
    `exclude` (key()s: what the notebooks' plans measure, experiments.plan_shapes())."""
    from . import specs
    plan = plan or HoldoutPlan()
    rng = random.Random(seed)
    out = []
    for op, n in plan.per_cell:
        for dtype in specs.get(op).dtypes:
            got = 0
            for _ in range(1000 * n):
                if got == n:
                    break
                s = SAMPLERS[op](rng)
                if s is None or key(op, s, dtype) in exclude:
                    continue
                out.append((op, s, dtype))
                got += 1
    return out


def measure(session, exclude: set, seed: int | None = None, plan: HoldoutPlan | None = None) -> list:
    """Measure the held-out cells (seed: the committed table's). Per cell: auto, eager torch, every
    gluon-lab variant that takes the inputs (checked on the cell's own inputs), all through the public
    API. A cell that cannot be built (the spec refuses the shape) is a failed auto record, named."""
    import torch
    from . import bench, selection, specs
    from .results import Record
    seed = selection.load_table().get("seed", 0) if seed is None else seed
    cases = []
    for op, shape, dtype in draw(seed, exclude, plan):
        spec = specs.get(op)
        try:
            inputs = bench.make_inputs(op, shape, dtype, seed=session.next_seed())
            spec.validate(*inputs, **spec.default_scalars())
            names = ["auto", "torch"] + selection.eligible_variants(spec, inputs)
        except (ValueError, TypeError, RuntimeError) as e:
            session.records.append(Record(op=op, variant="auto", pattern="dispatch", shape=shape, dtype=dtype,
                                          config={"study": STUDY, "table_seed": seed}, passed=False,
                                          notes=f"error: the draw is not a valid call: {type(e).__name__}: {e}"[:500],
                                          **session.prov))
            continue
        finally:
            inputs = None
            torch.cuda.synchronize()
        cases += [{"op": op, "variant": n, "shape": shape, "dtype": dtype, "call": "api", "timer": "cudagraph",
                   "rotation": "partial", "config": {"study": STUDY, "table_seed": seed}} for n in names]
    bench_before = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = True  # eager torch's convolutions as 06 measures them (cuDNN's own pick)
    try:
        return session.sweep(cases, desc=f"00-ceilings {STUDY} (seed {seed})")
    finally:
        torch.backends.cudnn.benchmark = bench_before
