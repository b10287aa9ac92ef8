"""The public functional API, one function per op spec, generated from the spec (signature, docstring,
validation) so an op is declared once.

    rms_norm(x, weight, eps=1e-6, *, variant="auto")
    group_norm(x, num_groups, weight=None, bias=None, eps=1e-5, *, variant="auto")
    matmul(a, b, *, variant="auto")

Every call validates its inputs with the spec's rules (a clear error naming the argument and the
rule), returns empty outputs for empty input, and dispatches to the variant (``"auto"``: the
selection table, ``gluon_lab.selection``). While torch.compile traces a call
(`torch.compiler.is_compiling()`), the function emits the op's custom op instead
(`torch.ops.gluon_lab.<op>`, gluon_lab.library): one graph node, no graph break; its kernel is
this same `call`.
"""
from __future__ import annotations

import torch

from . import fastpath, specs
from .specs.norm_grad import backward_of
from .registry import check_runnable, data_rule, get_variant


def call(spec, inputs: tuple, scalars: dict, variant: str = "auto"):
    """Run the op: through the call signature's plan when one is kept (gluon_lab.fastpath), else
    the full path below (validate, resolve, check, run), which also records the plan. An op with a
    backward op (a row norm whose `<op>_backward` exists) whose input requires grad goes through its
    custom op instead, whose autograd formula runs the backward op (gluon_lab.library); variant='torch'
    keeps torch's own autograd."""
    if variant != "torch" and backward_of(spec.name) is not None and _needs_grad(spec, inputs):
        return _differentiable(spec, inputs, scalars, variant)
    if fastpath.enabled:
        return fastpath.call(spec, inputs, scalars, variant, prepare)
    return slow_call(spec, inputs, scalars, variant)


def slow_call(spec, inputs: tuple, scalars: dict, variant: str = "auto"):
    """The full path, every check every time (what the fast path replays)."""
    v, scalars = prepare(spec, inputs, scalars, variant)
    return scalars if v is None else v.fn(*inputs, **scalars)


def prepare(spec, inputs: tuple, scalars: dict, variant: str = "auto"):
    """Validate a call and resolve its variant: (Variant, normalized scalars), or (None, the empty
    outputs) for an input with no elements. Raises the clear error of a bad call."""
    scalars = spec.validate(*inputs, **scalars)
    empty = spec.empty_outputs(inputs)
    if empty is not None:
        if variant != "auto":
            get_variant(spec.name, variant)  # an unknown variant is an error even for empty input
        return None, empty
    grad = _needs_grad(spec, inputs)
    if variant == "auto":
        from .selection import FALLBACK, choose
        variant = FALLBACK if grad else choose(spec, inputs)  # auto never detaches: torch when grad is needed
    v = get_variant(spec.name, variant)
    check = data_rule(spec, v)
    if check is not None:
        check(*inputs)  # a rule on the data: on the GPU where the variant guards it, else read here (a sync)
    if grad and not v.differentiable:
        raise RuntimeError(
            f"gluon_lab.{spec.name}(variant={variant!r}) has no backward yet, and {grad} requires grad: its output "
            "would be silently detached from the autograd graph. Call it under torch.no_grad() / on detached "
            "inputs, or use variant='torch' (or 'auto', which takes torch when grad is needed)")
    check_runnable(v, inputs)
    return v, scalars


def _differentiable(spec, inputs: tuple, scalars: dict, variant: str):
    """The op through its custom op, so the dispatcher's autograd records it (forward: the same variant
    choice as without grad; backward: the backward op, gluon_lab.library)."""
    scalars = spec.validate(*inputs, **scalars)
    if variant != "auto":
        get_variant(spec.name, variant)  # an unknown variant is an error before anything runs
    if spec.empty_outputs(inputs) is not None:
        return spec.eager(*inputs, **scalars)  # no elements: torch's op gives empty outputs with their grad_fn
    from .library import TRAIN_VARIANTS, op, train_op
    if variant in TRAIN_VARIANTS:  # the training forward: the op's outputs and the statistics its backward reads
        return train_outputs(spec, train_op(spec.name, call)(*inputs, *scalars.values(), variant))
    return op(spec.name, call)(*inputs, *scalars.values(), variant)


def train_outputs(spec, outs):
    """The op's own outputs of its training forward's (which appends the statistics)."""
    return outs[0] if len(spec.outputs) == 1 else tuple(outs[:len(spec.outputs)])


def _needs_grad(spec, inputs) -> str | None:
    """The first input that requires grad while grad mode is on (None when no backward is needed)."""
    if not torch.is_grad_enabled():
        return None
    for o, t in zip(spec.inputs, inputs):
        if getattr(t, "requires_grad", False):
            return o.name
    return None


def make_public(spec):
    """A real Python function with the op's signature (exec'd once, as dataclasses does)."""
    params = [f"{o.name}=None" if o.optional else f"{o.name}={o.default!r}" if hasattr(o, "default") else o.name
              for o in spec.inputs]
    params += [f"{k}={v!r}" for k, v in spec.scalars.items()]
    inputs = "".join(f"{o.name}, " for o in spec.inputs)
    scalars = ", ".join(f"{k!r}: {k}" for k in spec.scalars)
    args = ", ".join([o.name for o in spec.inputs] + list(spec.scalars) + ["variant"])
    scalars_kw = "".join(f"{k}={k}, " for k in spec.scalars)
    inplace = getattr(spec, "inplace", None)
    traced = f"        _op({args})\n        return {inplace}\n" if inplace else f"        return _op({args})\n"
    if backward_of(spec.name) is not None:  # a grad-needing call emits the training forward (saves the statistics)
        traced = (f"        if variant in ('auto', 'gluon-regs') and _needs_grad(_spec, ({inputs})):\n"
                  f"            return _train_outputs(_spec, _train({args}))\n") + traced
    # while compiling, a call that needs the gradient emits the custom op where the op has a backward op (AOT
    # autograd traces its autograd formula), else takes the eager formulation (traced as torch ops, as
    # api.call's auto / torch would run it); the custom op of an op without a backward refuses grad by name
    eager_grad = "('torch', )" if backward_of(spec.name) is not None else "('auto', 'torch')"
    src = (f"def {spec.name}({', '.join(params)}, *, variant='auto'):\n"
           f"    if _compiling():\n"
           f"        if variant in {eager_grad} and _needs_grad(_spec, ({inputs})):\n"
           f"            return _spec.eager({inputs}{scalars_kw})\n"
           f"{traced}"
           f"    return _call(_spec, ({inputs}), {{{scalars}}}, variant)\n")
    from .library import op
    ns = {"_call": call, "_spec": spec, "_op": op(spec.name, call), "_compiling": torch.compiler.is_compiling,
          "_needs_grad": _needs_grad, "_train_outputs": train_outputs}
    if backward_of(spec.name) is not None:
        from .library import train_op
        ns["_train"] = train_op(spec.name, call)
    exec(compile(src, f"<gluon_lab.api.{spec.name}>", "exec"), ns)
    fn = ns[spec.name]
    fn.__doc__ = spec.doc
    fn.__module__ = "gluon_lab"
    fn.__qualname__ = spec.name
    return fn


PUBLIC = {s.name: make_public(s) for s in specs.all_specs()}
