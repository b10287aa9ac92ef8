"""Host-side glue of the row-norm family shared by its pattern modules: what an op's row math
(spec.row) means for operands, and the one generic variant wrapper every pattern registers.

Launchers, checks, configs and codegen hooks take `op`: an OpSpec of the "row_norm" family, its
RowNorm (spec.row), or an op name (looked up in gluon_lab_old.specs). They read the row's features
(residual, weight, bias, centered, stats), never the op's name.
"""
from __future__ import annotations

import functools


def resolve(op):
    """(row, label) of op (an OpSpec, a RowNorm or an op name): label names it in messages."""
    if isinstance(op, str):
        from .. import specs
        op = specs.get(op)
    row = getattr(op, "row", op)
    if row is None or not hasattr(row, "stats"):
        raise ValueError(f"{getattr(op, 'name', op)!r} is not a row norm (it has no spec.row)")
    return row, getattr(op, "name", None) or f"row norm {row}"


def operand_names(row) -> tuple:
    """The row op's positional inputs, in the specs' order."""
    return ("x", ) + ("residual", ) * row.residual + ("weight", ) * row.weight + ("bias", ) * row.bias


def named_operands(row, inputs) -> dict:
    """{name: tensor} of the op's positional inputs."""
    return dict(zip(operand_names(row), inputs))


def operands(row, x, residual, weight, bias) -> tuple:
    """The op's positional inputs (x, [residual], [weight], [bias]) from the launchers' arguments."""
    present = {"x": x, "residual": residual, "weight": weight, "bias": bias}
    return tuple(present[n] for n in operand_names(row))


def outputs(row, y, s):
    return (y, s) if row.residual else y


def _variant_fn(spec, launch, variant: str):
    def fn(*inputs, eps, out=None, config=None, **launch_kw):
        a = spec.named(inputs)
        return launch(spec, a["x"], a.get("residual"), a.get("weight"), a.get("bias"), eps, out=out, config=config,
                      **launch_kw)

    fn.__name__ = fn.__qualname__ = f"{spec.name}_{variant.replace('-', '_')}"
    return fn


def register_row_variants(variant: str, *, launch, check, configure, codegen, pattern: str, knobs: dict, roots=(),
                          description: str):
    """Register `variant` for every spec of the row-norm family. launch(spec, x, residual, weight,
    bias, eps, out=, config=, ...) runs it; check / configure / codegen take the spec first
    (check(spec, *inputs), configure(spec, shape, dtype, overrides), codegen(spec, shape, dtype,
    config)) and are bound to each spec here."""
    from .. import specs
    from ..registry import register
    for spec in specs.family("row_norm"):
        register(spec.name, variant, pattern=pattern, needs_hopper=True, supports_out=True,
                 check=functools.partial(check, spec), configure=functools.partial(configure, spec),
                 codegen=functools.partial(codegen, spec), knobs=dict(knobs), roots=(launch, *roots),
                 description=description)(_variant_fn(spec, launch, variant))
