"""OpSpec and the spec registry (see the package docstring)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

DTYPES = ("bfloat16", "float16", "float32")
ITEMSIZE = {"bfloat16": 2, "float16": 2, "float32": 4}


@dataclass(frozen=True)
class Operand:
    """A positional input of an op. kind: "tensor" or "int" (group_norm's num_groups). An optional
    operand defaults to None in the public signature."""
    name: str
    kind: str = "tensor"
    optional: bool = False
    doc: str = ""


@dataclass(frozen=True)
class IntOperand(Operand):
    """An int operand with a default in the public signature (conv2d's stride, padding). A subclass,
    so Operand stays as every existing spec (and its staleness hash) has it."""
    kind: str = "int"
    default: int = 0


@dataclass(frozen=True)
class RowNorm:
    """Declarative math of a row norm (y over the last dim), read by the kernel templates:
    stats: which statistics hook family the templates call ("rms": rstd from mean(x²); "l2":
    1 / max(||x||, eps); "layer": mean and centred variance); centered: y = (x - mean) * rstd;
    weight / bias: the affine operands exist; residual: s = x + residual is formed first, written as
    a second output, and normalized."""
    stats: str
    centered: bool
    weight: bool
    bias: bool
    residual: bool


@dataclass(frozen=True, eq=False)
class OpSpec:
    name: str
    family: str  # "row_norm" | "group_norm" | "matmul" | ...: which templates and bucket rules apply
    inputs: tuple  # Operand, in call order
    outputs: tuple  # output names; one output -> the op returns a tensor, several -> a tuple
    doc: str
    validate: Callable  # validate(*inputs, **scalars) -> normalized scalars dict; raises naming arg + rule
    reference: Callable  # float64 reference(*inputs, **scalars) -> tensor | tuple (as the outputs)
    eager: Callable  # the eager torch formulation users call (variant "torch")
    shape_of: Callable  # shape_of(*inputs) -> the record's shape dict
    shape_keys: tuple  # keys shape dicts carry (record columns)
    bytes: Callable  # bytes(shape, dtype) -> compulsory DRAM bytes (every input read once, outputs written once)
    flops: Callable  # flops(shape) -> nominal FLOPs (the roofline's x-axis)
    make_inputs: Callable  # make_inputs(shape, dtype, rnd, scale) -> inputs; rnd(*size, mean=0, std=1) normals
    scalars: dict = field(default_factory=dict)  # name -> default (eps)
    dtypes: tuple = DTYPES
    formula: Callable | None = None  # fp32 formula torch.compile gets (variant "inductor")
    row: RowNorm | None = None
    bucket: Callable | None = None  # bucket(shape) -> tuple: the auto-selection table's key
    tolerance: dict | None = None  # dtype -> (atol, rtol) vs float64; None: the bench default
    compute_bound: bool = False  # SOL against tensor-core throughput instead of HBM bandwidth
    row_blocked_reference: bool = False  # the reference may be computed per block of rows (huge M)
    marker: str = "o"  # plot marker of the op

    # -- helpers every caller shares ---------------------------------------------------------
    @property
    def input_names(self) -> tuple:
        return tuple(o.name for o in self.inputs)

    @property
    def tensor_names(self) -> tuple:
        return tuple(o.name for o in self.inputs if o.kind == "tensor")

    def named(self, inputs) -> dict:
        """{input name: value} for a positional inputs tuple."""
        return dict(zip(self.input_names, inputs))

    def default_scalars(self, **given) -> dict:
        return {**self.scalars, **{k: v for k, v in given.items() if v is not None}}

    def empty_outputs(self, inputs):
        """Outputs for an input with no elements (None: the op has no empty-input rule)."""
        x = inputs[0]
        if self.family == "matmul" or x.numel():
            return None
        import torch
        outs = tuple(torch.empty_like(x) for _ in self.outputs)
        return outs if len(outs) > 1 else outs[0]

    def alloc_outputs(self, inputs, fill: float | None = None):
        """Output tensors shaped like x (memory format kept): what variants with out= write. fill
        (e.g. NaN) poisons them, so an element a kernel never writes fails the check."""
        import torch
        x = inputs[0]
        outs = tuple(torch.empty_like(x) for _ in self.outputs)
        if fill is not None:
            for o in outs:
                o.fill_(fill)
        return outs if len(outs) > 1 else outs[0]


@dataclass(frozen=True, eq=False)
class InPlaceOpSpec(OpSpec):
    """An op that updates one input in place and returns it (its only output).
    inplace: that input's name (the custom op's schema marks it mutated, Tensor(a!), and returns
    nothing; the front door returns the input). data_check(*inputs): a rule that reads the data
    (e.g. an index range), run on every call, the fast path's replays included — validate only sees
    shapes, dtypes, devices and strides. A subclass, so the plain OpSpec (whose code every other
    variant's staleness hash covers) stays as it was."""
    inplace: str = ""
    data_check: Callable | None = None
    gathered: tuple = ()  # inputs the op gathers rows from (a lookup table): the byte model counts the rows read

    def empty_outputs(self, inputs):
        x = inputs[self.input_names.index(self.inplace)]
        return None if x.numel() else x


_SPECS: dict[str, OpSpec] = {}


def define(spec: OpSpec) -> OpSpec:
    if spec.name in _SPECS:
        raise ValueError(f"op {spec.name!r} is defined twice")
    _SPECS[spec.name] = spec
    return spec


def get(op: str) -> OpSpec:
    try:
        return _SPECS[op]
    except KeyError:
        raise ValueError(f"unknown op {op!r}; ops are {names()}") from None


def names() -> tuple:
    return tuple(_SPECS)


def all_specs() -> tuple:
    return tuple(_SPECS.values())


def family(name: str) -> tuple:
    return tuple(s for s in _SPECS.values() if s.family == name)


def shape_columns() -> tuple:
    """Every shape key of every op, in first-seen order (record columns)."""
    out: list[str] = []
    for s in _SPECS.values():
        out += [k for k in s.shape_keys if k not in out]
    return tuple(out)


def log2_bucket(v: int) -> int:
    """Nearest power of two's exponent (shapes 2^k·0.71 .. 2^k·1.41 share bucket k)."""
    return int(round(math.log2(max(int(v), 1))))
