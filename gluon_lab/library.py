"""Every public op as a torch.library custom op, `torch.ops.gluon_lab.<op>`, generated from the specs.

    torch.ops.gluon_lab.rms_norm(x, weight, 1e-6, "auto")      # schema: rms_norm(Tensor x, Tensor weight, float eps, str variant) -> Tensor

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
* Autograd: an op with a backward op (rms_norm, layer_norm, add_rms_norm: `<op>_backward`, pattern 7) also
  gets a training forward `<op>_train` (the op's outputs, then its fp32 statistics: rstd, and mean for
  LayerNorm; kernels/norm_train.py, or aten's fused forward where gluon-regs cannot take the input). Both get
  `register_autograd` with a formula that saves x (add+RMSNorm: s, its second output), the weight and (the
  training forward) the statistics, and calls the backward op's custom op (variant: the forward's where the
  backward op has it, else auto; the plain op's backward recomputes the statistics). A grad-needing call with
  variant auto or gluon-regs runs the training forward (eager, compiled, and the training rewrite); other named
  variants the plain op. Eager `loss.backward()` and a compiled graph (AOT autograd traces both custom ops)
  run it. Every other op's autograd formula raises a
  clear error naming the op (no backward kernel): a compiled graph that needs its gradient fails at
  compile time, naming the op, instead of returning a detached output.
* The real kernel runs under torch.no_grad(): it is below autograd, whatever its inputs' requires_grad.
"""
from __future__ import annotations

import torch

from . import specs

NAMESPACE = "gluon_lab"
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
        with torch.no_grad():  # below autograd: the formula (if any) is the custom op's, never the kernel's graph
            out = call(spec, inputs, scalars, variant)
        if isinstance(out, tuple):  # a custom op's outputs may not alias one another (a variant's dw / db may be
            seen, fixed = set(), []  # views of one buffer): each later alias becomes its own copy (N elements)
            for o in out:
                key = o.untyped_storage().data_ptr() if isinstance(o, torch.Tensor) and o.numel() else None
                fixed.append(o.clone() if key is not None and key in seen else o)
                seen.add(key)
            out = tuple(fixed)
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

    def refuse_setup_context(ctx, inputs, output):
        pass

    def refuse_backward(ctx, *grads):
        raise NotImplementedError(
            f"{NAMESPACE}::{spec.name} has no backward kernel yet: compute its gradient with variant='torch' "
            "outside the compiled region, or run the forward under torch.no_grad()")

    qual = f"{NAMESPACE}::{spec.name}"
    _LIB.impl(spec.name, real, "CPU")
    _LIB.impl(spec.name, real, "CUDA")
    torch.library.register_fake(qual, fake, lib=_LIB)
    bspec = specs.norm_grad.backward_of(spec.name)
    setup_context, backward = (_norm_autograd(spec, bspec, call) if bspec is not None
                               else (refuse_setup_context, refuse_backward))
    if bspec is not None:
        _register_train(spec, bspec, call)
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


def _norm_autograd(spec, bspec, call, stats: int = 0):
    """(setup_context, backward) of a row norm: save x (add+RMSNorm: s = x + residual, the forward's second
    output), the weight and, for the training forward `<op>_train` (stats = its number of statistics outputs,
    the last ones), the forward's fp32 statistics; the backward calls the backward op's custom op with those
    statistics (None for the plain op: recomputed from x) and returns dx (twice for add+RMSNorm: the gradient of
    x and of residual), dw (and db)."""
    residual = spec.row.residual

    def setup_context(ctx, inputs, output):
        ins, scalars, variant = _split(spec, inputs)
        named = spec.named(ins)
        saved = tuple(output[len(output) - stats:]) if stats else ()
        if saved:
            ctx.mark_non_differentiable(*saved)
        ctx.save_for_backward(output[1] if residual else named["x"], named["weight"], named.get("bias"), *saved)
        ctx.eps, ctx.variant = scalars["eps"], variant

    def backward(ctx, *grads):
        from .registry import eligible, get_variant, variants
        x, w, b, *saved = ctx.saved_tensors
        if torch.is_grad_enabled():  # create_graph=True: a differentiable backward (torch's formula on the saved
            return _differentiable_backward(spec, x, w, b, grads, ctx.eps)  # tensors), not the kernels'
        bop = op(bspec.name, call)
        dy = grads[0].contiguous() if grads[0] is not None else torch.zeros_like(x)  # e.g. sum().backward(): stride 0
        ds = grads[1].contiguous() if residual and grads[1] is not None else None
        st = tuple(saved) if saved else (None, ) * (2 if bspec.kind == "layer" else 1)
        bins = (dy, x, w, ds, *st) if residual else (dy, x, w, *st)
        bv = ctx.variant if ctx.variant in variants(bspec.name) else "auto"
        if bv != "auto" and not eligible(get_variant(bspec.name, bv), bins):
            bv = "auto"  # the forward's variant takes shapes its backward does not (e.g. longer rows): auto decides
        if residual:
            dx, dw = bop(*bins, ctx.eps, bv)
            return dx, dx, dw, None, None
        if bspec.kind == "layer":
            dx, dw, db = bop(*bins, ctx.eps, bv)
            return dx, dw, db, None, None
        dx, dw = bop(*bins, ctx.eps, bv)
        return dx, dw, None, None

    return setup_context, backward


TRAIN_VARIANTS = ("auto", "gluon-regs", "torch")  # what a training forward `<op>_train` runs (train_forward)


def train_name(name: str) -> str:
    return f"{name}_train"


def _register_train(spec, bspec, call) -> None:
    """`gluon_lab::<op>_train`: the forward that also returns its fp32 statistics (rstd; mean and rstd for
    LayerNorm, shape x.shape[:-1]) after the op's own outputs, with the autograd formula that hands them to
    the backward op. What a grad-needing gll.<op> call (variant auto or gluon-regs), its compiled form and the
    training rewrite run."""
    nstats = 2 if bspec.kind == "layer" else 1
    head = schema(spec)
    args = head[head.index("("):head.index(") ->") + 1]
    name = train_name(spec.name)
    _LIB.define(f"{name}{args} -> ({', '.join(['Tensor'] * (len(spec.outputs) + nstats))})")

    def real(*args):
        inputs, scalars, variant = _split(spec, args)
        with torch.no_grad():
            return train_forward(spec, inputs, scalars["eps"], variant)

    def fake(*args):
        inputs, scalars, variant = _split(spec, args)
        spec.validate(*inputs, **scalars)
        x = spec.named(inputs)["x"]
        outs = tuple(torch.empty_like(x) for _ in spec.outputs)
        return outs + tuple(torch.empty(x.shape[:-1], dtype=torch.float32, device=x.device) for _ in range(nstats))

    _LIB.impl(name, real, "CPU")
    _LIB.impl(name, real, "CUDA")
    torch.library.register_fake(f"{NAMESPACE}::{name}", fake, lib=_LIB)
    setup_context, backward = _norm_autograd(spec, bspec, call, stats=nstats)
    torch.library.register_autograd(f"{NAMESPACE}::{name}", backward, setup_context=setup_context, lib=_LIB)


def train_forward(spec, inputs, eps: float, variant: str):
    """(outputs..., [mean,] rstd) of a row norm's training forward. variant gluon-regs: the Gluon kernel that
    saves the statistics in the same pass (kernels/norm_train.py; its errors are gluon-regs's); auto: that
    kernel where gluon-regs takes the input, else torch; torch: aten's fused forward, which returns the
    statistics itself (on the CPU the closed form, the statistics computed beside it)."""
    from .registry import eligible, get_variant
    if variant not in TRAIN_VARIANTS:
        raise ValueError(f"variant of {train_name(spec.name)} must be one of {TRAIN_VARIANTS}; got {variant!r}")
    a = spec.named(inputs)
    x, r, w, b = a["x"], a.get("residual"), a.get("weight"), a.get("bias")
    if variant != "torch" and x.numel():
        v = get_variant(spec.name, "gluon-regs")
        if variant == "gluon-regs" or eligible(v, inputs):
            from .kernels import norm_train
            from .registry import check_runnable
            check_runnable(v, inputs)  # named gluon-regs: its clear error where it cannot run
            N, lead = x.shape[-1], x.shape[:-1]
            # the kernel's 16-byte-row check reads each output's stride(0) as the row stride: hand it (rows, N)
            # views (x is flattenable: check_runnable), and give the outputs x's leading dims back
            outs = norm_train.launch(spec, x.view(-1, N), None if r is None else r.view(-1, N), w, b, eps)
            return tuple(o.view(*lead, N) if o.dim() == 2 else o.view(lead) for o in outs)
    return torch_train_forward(spec, x, r, w, b, eps)


def torch_train_forward(spec, x, r, w, b, eps: float):
    """The training forward in torch: aten._fused_rms_norm / aten.native_layer_norm on CUDA (what eager
    autograd of F.rms_norm / F.layer_norm saves), the closed form on the CPU; statistics fp32 of x.shape[:-1]."""
    s = x + r if spec.row.residual else x
    N, lead = x.shape[-1], x.shape[:-1]
    if spec.row.stats == "layer":
        if s.is_cuda:
            y, mean, rstd = torch.ops.aten.native_layer_norm(s, [N], w, b, eps)
        else:
            sf = s.float()
            mean = sf.mean(-1, keepdim=True)
            rstd = (sf - mean).pow(2).mean(-1, keepdim=True).add(eps).rsqrt()
            y = spec.eager(s, w, b, eps)
        stats = (mean.float().reshape(lead).contiguous(), rstd.float().reshape(lead).contiguous())
    else:
        if s.is_cuda:
            y, rstd = torch.ops.aten._fused_rms_norm(s, [N], w, eps)
        else:
            sf = s.float()
            rstd = sf.pow(2).mean(-1, keepdim=True).add(eps).rsqrt()
            y = torch.nn.functional.rms_norm(s, (N, ), w, eps)
        stats = (rstd.float().reshape(lead).contiguous(), )
    outs = (y, s) if spec.row.residual else (y, )
    return outs + stats


def _differentiable_backward(spec, x, w, b, grads, eps):
    """The gradients as torch ops autograd records (a double backward: create_graph=True): torch's eager norm
    re-run on the saved tensors and differentiated with create_graph (rms_norm, layer_norm; add+RMSNorm refuses
    by name)."""
    import torch.nn.functional as F
    if spec.row.residual:  # the saved s is this op's own output: differentiating through it from inside its own
        raise NotImplementedError(  # backward re-enters the node (it hung); refused by name instead
            f"{NAMESPACE}::{spec.name} has no double backward (create_graph=True): call it with variant='torch' "
            "(torch's own autograd) where second derivatives are needed")
    N = x.shape[-1]
    ins = [x, w, b] if spec.row.bias else [x, w]
    y = F.layer_norm(x, (N, ), w, b, eps) if spec.row.bias else F.rms_norm(x, (N, ), w, eps)
    dy = grads[0] if grads[0] is not None else torch.zeros_like(y)
    need = [t for t in ins if t.requires_grad]
    got = dict(zip(map(id, need), torch.autograd.grad(y, need, dy, create_graph=True, allow_unused=True)))
    gi = [got.get(id(t)) for t in ins]
    return (*gi, None, None)


_REGISTERED: set = set()


def op(name: str, call):
    """The custom op of a public op (torch.ops.gluon_lab.<name>), registered on first use with
    `call(spec, inputs, scalars, variant)` (api.call) as its kernel."""
    spec = specs.get(name)
    if name not in _REGISTERED:
        _register(spec, call)
        _REGISTERED.add(name)
    return getattr(getattr(torch.ops, NAMESPACE), name)


def train_op(name: str, call):
    """The training forward of a row norm with a backward op (torch.ops.gluon_lab.<name>_train), registered
    with the op itself."""
    op(name, call)
    return getattr(getattr(torch.ops, NAMESPACE), train_name(name))
