"""The held-out check of variant="auto" (notebook 00, plan part "auto-check"), and the evidence grid auto reads
where the pattern pages' grids are thin (part "auto-evidence").

The check: shapes no plan of the lab measures and no cell of the selection table holds (exclude_keys), drawn
at random from the table's seed (a hash of the evidence and the model: a new draw each time the table
changes, so its rules cannot be fitted to one draw), each dimension log-uniform over the range models use,
odd sizes included and half of the GEMM / instance-norm draws 16-byte aligned; bf16 / fp16 / fp32 where the
op takes them; every op. Per cell, in one run, through the public API (call="api": the path a model takes,
outputs allocated per call): variant="auto", eager torch and every gluon-lab variant whose check accepts the
inputs, graph-timed side by side. Records carry config {"study": "auto-check", "table_seed": seed}; the
newest check never votes in the table it checked; once a later run supersedes it, its cells are evidence
(selection.superseded_checks), and the next draw avoids them.

    ex = exclude_keys(experiments.plan_shapes())
    cells = draw(seed, ex)                # [(op, shape, dtype), ...] on any machine
    measure(session, ex)                  # the records (a GPU)
    analysis.auto.holdout_table(df)       # the page's table, summary and targets
    evidence_cases()                      # the evidence grid's cases (a plan part of 00: refresh measures it)
"""
from __future__ import annotations

import functools
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
# The share of GEMM and instance-norm draws whose rows are 16-byte multiples. Log-uniform sizes are almost
# never aligned, and there only eager torch takes the input (the 2026-12-03 check drew no aligned GEMM or
# instance norm: auto's choice among Gluon variants went untested there).
ALIGNED = 0.5


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
    if rng.random() < ALIGNED:  # the rows gluon-chunked / gluon-split read in 16-byte vectors
        s["C"], s["W"] = _up8(s["C"]), _up8(s["W"])
    return s if s["B"] * s["C"] * s["H"] * s["W"] * 4 <= MAX_BYTES else None


def _up8(n: int) -> int:
    return -(-n // 8) * 8


def _matmul(rng):
    M, N, K = (_logu(rng, 16, 16384) for _ in range(3))
    if rng.random() < ALIGNED:  # rows of 16 bytes (the Gluon GEMMs' TMA rule): the draw tests a choice
        N, K = _up8(N), _up8(K)
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


def exclude_keys(plan_shapes: set) -> set:
    """What the check never draws: every notebook plan's shapes (experiments.plan_shapes(), the evidence grid
    below included) and every cell of the committed table (superseded checks' cells vote there:
    selection.superseded_checks)."""
    from . import selection
    out = set(plan_shapes)
    for ops in selection.load_table().get("entries", {}).values():
        for op, e in ops.items():
            out |= {key(op, c["shape"], c["dtype"]) for c in e.get("cells", ())}
    return out


def eligible_here(op: str, shape: dict, dtype: str) -> list[str]:
    """The gluon-lab variants whose rule check accepts the shape, read on meta inputs (the op's own input maker:
    shapes, strides, views; no data, no GPU, no CPU compute, so a process that forks later, as `launches`
    does, holds no torch thread pool): what a plan lists for a cell. On the GPU,
    selection.eligible_variants() also asks for the device."""
    from . import registry, selection
    from .launches import meta_inputs
    inputs = meta_inputs(op, shape, dtype)
    out = []
    for n in selection.ours(op):
        v = registry.get_variant(op, n)
        try:
            if v.check is not None:
                v.check(*inputs)
        except (ValueError, TypeError):
            continue
        out.append(n)
    return out


def _case(op: str, name: str, shape: dict, dtype: str, config: dict) -> dict:
    cfg = dict(config)
    if name == "torch" and op.startswith("conv2d"):
        cfg["cudnn_benchmark"] = True  # eager torch's convolutions as 06 measures them (cuDNN's own pick)
    return {"op": op, "variant": name, "shape": shape, "dtype": dtype, "call": "api", "timer": "cudagraph",
            "rotation": "partial", "config": cfg}


# ----------------------------------------------------------------------------------------------
# the evidence grid: cells auto reads where the pattern pages' grids are thin

EVIDENCE_STUDY = "auto-evidence"


@dataclass(frozen=True)
class EvidencePlan:
    """Fixed cells (00-ceilings part auto-evidence) in the regions where the 2026-12-03 check's misses sat and
    no pattern page's grid reaches: decode-sized rows (M = 1-64) at three aligned row lengths and an odd one;
    small group norms (both layouts); small-image convolutions (the three conv ops). Per cell, through the
    public API in one run: eager torch and every gluon-lab variant that takes it, at the heuristic config
    (records marked "heuristic": they vote in the selection table as the plans' cells do). bf16: fp16
    reads these cells (same itemsize, selection.DTYPE_STEP)."""
    row_ops: tuple = ("rms_norm", "layer_norm", "add_rms_norm")
    row_cells: tuple = tuple((M, N) for M in (1, 12, 64) for N in (2000, 4096, 4999, 14336))
    group_cells: tuple = ((1, 64, 32, 8, 8, "channels_last"), (4, 256, 32, 8, 8, "nchw"),
                          (2, 512, 32, 16, 16, "channels_last"), (8, 128, 32, 12, 12, "channels_last"),
                          (2, 320, 32, 24, 24, "nchw"))
    conv_ops: tuple = ("conv2d", "conv2d_input_grad", "conv2d_weight_grad")
    conv_cells: tuple = ((1, 64, 128, 8, 3, 1), (2, 256, 256, 8, 3, 1), (4, 128, 64, 14, 1, 1),
                         (1, 512, 512, 7, 3, 1), (2, 96, 192, 16, 3, 2), (8, 64, 64, 12, 1, 2))  # B Ci Co H R stride
    dtype: str = "bfloat16"

    @classmethod
    def quick(cls):
        return cls(row_cells=((12, 2000), ), group_cells=cls.group_cells[:1], conv_cells=cls.conv_cells[:1])

    def cells(self) -> list[tuple]:
        out = [(op, {"M": M, "N": N}, self.dtype) for op in self.row_ops for M, N in self.row_cells]
        out += [("group_norm", {"B": B, "C": C, "G": G, "H": H, "W": W, "layout": lay}, self.dtype)
                for B, C, G, H, W, lay in self.group_cells]
        out += [(op, {"B": B, "Ci": Ci, "Co": Co, "H": H, "W": H, "R": R, "stride": st, "pad": R // 2}, self.dtype)
                for op in self.conv_ops for B, Ci, Co, H, R, st in self.conv_cells]
        return out


def evidence_cases(plan: EvidencePlan | None = None) -> list[dict]:
    """The grid's cases (CPU: the variants come from eligible_here; built once per plan and process)."""
    return json.loads(_evidence_cases(plan or EvidencePlan()))


@functools.lru_cache(maxsize=4)
def _evidence_cases(plan: EvidencePlan) -> str:
    out = []
    for op, shape, dtype in plan.cells():
        for n in ["torch"] + eligible_here(op, shape, dtype):
            out.append(_case(op, n, shape, dtype, {"study": EVIDENCE_STUDY, **({} if n == "torch" else {"heuristic": True})}))
    return json.dumps(out)


# ----------------------------------------------------------------------------------------------
# the check

def measure(session, exclude: set, seed: int | None = None, plan: HoldoutPlan | None = None) -> list:
    """Measure the held-out cells (seed: the committed table's; exclude: exclude_keys(...)). Per cell: auto,
    eager torch, every gluon-lab variant that takes the inputs (checked on the cell's own inputs), all
    through the public API. A cell that cannot be built (the spec refuses the shape) is a failed auto
    record, named."""
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
        cases += [_case(op, n, shape, dtype, {"study": STUDY, "table_seed": seed}) for n in names]
    return session.sweep(cases, desc=f"00-ceilings {STUDY} (seed {seed})")
