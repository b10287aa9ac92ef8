"""Every public op as a torch.library custom op, `torch.ops.gluon_lab_old.<op>`, generated from the specs.

    torch.ops.gluon_lab_old.rms_norm(x, weight, 1e-6, "auto")      # schema: rms_norm(Tensor x, Tensor weight, float eps, str variant) -> Tensor

Why: torch.compile (fullgraph) traces a call to a custom op as one node instead of tracing into
gluon-lab's Python (the dispatch tables, the registry); CUDA-graph capture and
`torch.library.opcheck` work on it. The friendly front door stays `gll.rms_norm(...)`: in eager
mode it calls `api.call` directly (no dispatcher hop on the host path), while being compiled
(`torch.compiler.is_compiling()`) it emits the custom op (api.make_public).

* The real kernel (CPU and CUDA keys) is `api.call` (handed in by api.make_public): the same validation, the same clear errors,
  the same `variant` choice (auto, or a named variant) as the front door.
* The fake (meta) kernel validates with the spec's rules that do not need data (shape, dtype,
  device, strides, ranks), then runs the spec's eager torch formulation on the fake inputs, which
  gives every op's output shapes and dtypes without a per-op table.
* Autograd: the registration has an autograd formula whose backward raises a clear error naming the
  op (no backward kernel yet): that is where a backward kernel plugs in. A compiled graph that needs
  the gradient therefore fails at compile time, naming the op, instead of returning a detached output.
"""
from __future__ import annotations

import torch

from . import specs

NAMESPACE = "gluon_lab_old"
_LIB = torch.library.Library(NAMESPACE, "DEF")


def schema(spec) -> str:
    """The op's torch schema from its spec: tensors (optional -> Tensor?), ints, float scalars, variant."""
    args = []
    for o in spec.inputs:
        t = "Tensor" if o.kind == "tensor" else "SymInt" if o.kind == "int" else None
        if t is None:
            raise ValueError(f"{spec.name}: operand {o.name!r} of kind {o.kind!r} has no schema type")
        mut = "(a!)" if o.name == getattr(spec, "inplace", None) else ""
        args.append(f"{t}{mut}{'?' if o.optional else ''} {o.name}")
    for k, v in spec.scalars.items():
        args.append(f"{'float' if isinstance(v, float) else 'bool' if isinstance(v, bool) else 'int'} {k}")
    args.append("str variant")
    if getattr(spec, "inplace", None):  # a mutating custom op returns nothing; the front door returns the updated input
        return f"{spec.name}({', '.join(args)}) -> ()"
    outs = "Tensor" if len(spec.outputs) == 1 else "(" + ", ".join("Tensor" for _ in spec.outputs) + ")"
    return f"{spec.name}({', '.join(args)}) -> {outs}"


def _split(spec, args):
    n = len(spec.inputs)
    inputs, rest = tuple(args[:n]), args[n:]
    scalars = dict(zip(spec.scalars, rest[:len(spec.scalars)]))
    return inputs, scalars, rest[len(spec.scalars)]


def _register(spec, call) -> None:
    _LIB.define(schema(spec))
    inplace = getattr(spec, "inplace", None)

    def real(*args):
        inputs, scalars, variant = _split(spec, args)
        out = call(spec, inputs, scalars, variant)
        return None if inplace else out

    def fake(*args):
        inputs, scalars, variant = _split(spec, args)
        scalars = spec.validate(*inputs, **scalars)
        if inplace:
            return None
        outs = spec.eager(*inputs, **scalars)
        if isinstance(outs, tuple):
            return tuple(torch.empty_like(o) for o in outs)
        return torch.empty_like(outs)

    def setup_context(ctx, inputs, output):
        pass

    def backward(ctx, *grads):
        raise NotImplementedError(
            f"{NAMESPACE}::{spec.name} has no backward kernel yet: compute its gradient with variant='torch' "
            "outside the compiled region, or run the forward under torch.no_grad()")

    qual = f"{NAMESPACE}::{spec.name}"
    _LIB.impl(spec.name, real, "CPU")
    _LIB.impl(spec.name, real, "CUDA")
    torch.library.register_fake(qual, fake, lib=_LIB)
    if not inplace:
        torch.library.register_autograd(qual, backward, setup_context=setup_context, lib=_LIB)
    else:
        # torch.library has no autograd formula for mutating ops; without a kernel at the Autograd key a
        # compiled graph would treat the op as identity in the backward (silently wrong gradients). This
        # kernel refuses inputs that require grad (eager and while torch.compile traces), else runs below
        # autograd. A backward kernel plugs in here.
        overload = lambda: getattr(getattr(torch.ops, NAMESPACE), spec.name).default  # noqa: E731

        def autograd(*args):
            if torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad for a in args):
                raise RuntimeError(
                    f"{NAMESPACE}::{spec.name} has no backward kernel yet, and an input requires grad: it updates "
                    "its input in place, so the gradient would silently skip it. Run it under torch.no_grad() / "
                    "on detached inputs")
            with torch._C._AutoDispatchBelowAutograd():
                return overload()(*args)

        _LIB.impl(spec.name, autograd, "Autograd")


_REGISTERED: set = set()


def op(name: str, call):
    """The custom op of a public op (torch.ops.gluon_lab_old.<name>), registered on first use with
    `call(spec, inputs, scalars, variant)` (api.call) as its kernel."""
    spec = specs.get(name)
    if name not in _REGISTERED:
        _register(spec, call)
        _REGISTERED.add(name)
    return getattr(getattr(torch.ops, NAMESPACE), name)
