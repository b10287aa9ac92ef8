"""The Inductor rewrite for training graphs: RMSNorm / LayerNorm / add + RMSNorm of a graph that needs the
backward become gluon-lab's training forwards (`torch.ops.gluon_lab.<op>_train`: the op's outputs and the fp32
statistics) *before* AOT autograd, which then differentiates them through their registered autograd formulas
(gluon_lab.library): the forward and the backward both run gluon-lab's ops, the backward on the saved statistics.

gluon_lab.inductor's post-grad rewrite sees a training graph after AOT autograd has split it: the norm's
intermediates are saved for a backward already written in ATen, so nothing matches. This pass runs on
Dynamo's torch-level graph (Inductor's `config.pre_grad_custom_pass`, installed with the post-grad pass by
`gluon_lab.inductor.install()` / `rewrite()` / `options()`), and only where the norm needs a gradient (grad
mode on and x or the weight requires grad); graphs that need no backward are left to the post-grad rewrite.

Matched spellings: `torch.rms_norm` / `F.rms_norm` (what `nn.RMSNorm` traces to; eps None is
fp32's machine epsilon, as torch's fused kernel uses for bf16 / fp16 / fp32), `F.layer_norm` / `torch.layer_norm` (`nn.LayerNorm`), and the Hugging
Face Llama formula (`h.to(float32)`, `pow(2).mean(-1, keepdim=True)`, `torch.rsqrt(v + eps)`, `h * rsqrt`,
`.to(dtype)`, `weight * …`). An RMSNorm whose input is `a + b` (same shape and dtype) becomes one
`add_rms_norm(a, b, w)` whose second output replaces every other use of the sum. The rules of the post-grad
rewrite hold: the last dim only, a 1-D weight (and bias) of the row's length in x's dtype, x bf16 / fp16 / fp32
on one of the rewrite's devices.
"""
from __future__ import annotations

import operator

import torch

_MUL = (operator.mul, torch.mul)
_ADD = (operator.add, torch.add)


def _ev(n):
    v = n.meta.get("example_value") if isinstance(n, torch.fx.Node) else None
    return v if isinstance(v, torch.Tensor) else None


def _arg(n, i, name, default=None):
    if len(n.args) > i:
        return n.args[i]
    return n.kwargs.get(name, default)


def _row_ok(x, params, devices) -> bool:
    xv = _ev(x)
    if xv is None or xv.dtype not in (torch.bfloat16, torch.float16, torch.float32) or xv.device.type not in devices:
        return False
    if xv.dim() < 1:
        return False
    for p in params:
        pv = _ev(p)
        if pv is None or pv.dim() != 1 or pv.shape[0] != xv.shape[-1] or pv.dtype != xv.dtype or pv.device != xv.device:
            return False
    return True


def _needs_grad(nodes) -> bool:
    return torch.is_grad_enabled() and any(_ev(n) is not None and _ev(n).requires_grad for n in nodes)


def _last_dim(shape, x) -> bool:
    xv = _ev(x)
    shape = tuple(shape) if isinstance(shape, (list, tuple)) else (shape, )
    return len(shape) == 1 and isinstance(shape[0], int) and shape[0] == xv.shape[-1]


def _emit(graph, anchor, op, args, like):
    """A training forward `op` (outputs y, then the statistics) before anchor: its y, standing in for `like`."""
    with graph.inserting_before(anchor):
        new = graph.call_function(op, args)
        y = graph.call_function(operator.getitem, (new, 0))
    y.meta["example_value"] = like.meta.get("example_value")
    return y


def _summand(x):
    """(a, b) when x is a plain a + b of two tensors of x's shape and dtype."""
    if not (x.op == "call_function" and x.target in _ADD and len(x.args) == 2 and not x.kwargs):
        return None
    s, ab = _ev(x), [_ev(a) for a in x.args]
    if s is None or any(v is None or v.shape != s.shape or v.dtype != s.dtype for v in ab):
        return None
    return x.args


def _rms(graph, out, x, w, eps, counts) -> None:
    """Replace `out` (an RMSNorm of x by w) with the custom op; fuse a preceding a + b into add_rms_norm."""
    gl = torch.ops.gluon_lab
    ab = _summand(x)
    order = {n: i for i, n in enumerate(graph.nodes)}
    if ab is not None and order[w] < order[x]:
        with graph.inserting_after(x):
            fused = graph.call_function(gl.add_rms_norm_train.default, (ab[0], ab[1], w, eps, "auto"))
        with graph.inserting_after(fused):
            y = graph.call_function(operator.getitem, (fused, 0))
            s = graph.call_function(operator.getitem, (fused, 1))
        y.meta["example_value"] = out.meta.get("example_value")
        s.meta["example_value"] = x.meta.get("example_value")
        out.replace_all_uses_with(y)
        x.replace_all_uses_with(s)
        counts["add_rms_norm"] = counts.get("add_rms_norm", 0) + 1
        return
    out.replace_all_uses_with(_emit(graph, out, gl.rms_norm_train.default, (x, w, eps, "auto"), out))
    counts["rms_norm"] = counts.get("rms_norm", 0) + 1


def _hf_rms(r):
    """From a torch.rsqrt node: (x, w, eps, out) of the Hugging Face Llama RMSNorm formula, or None."""
    add = r.args[0] if r.args else None
    if not (isinstance(add, torch.fx.Node) and add.op == "call_function" and add.target in _ADD and len(add.args) == 2
            and not add.kwargs):  # torch.add(v, eps, alpha=...) is not v + eps
        return None
    v, eps = add.args
    if not isinstance(eps, (int, float)) or isinstance(eps, bool) or eps < 0 or not isinstance(v, torch.fx.Node):
        return None
    if not (v.op == "call_method" and v.target == "mean" and v.kwargs.get("keepdim", False) and
            tuple(v.args[1:2]) in ((-1, ), ) and isinstance(v.args[0], torch.fx.Node)):
        return None
    p = v.args[0]
    if p.op == "call_method" and p.target == "pow" and p.args[1:] == (2, ):
        h = p.args[0]
    elif p.op == "call_function" and p.target in _MUL and p.args[0] is p.args[1]:
        h = p.args[0]
    else:
        return None
    if not (isinstance(h, torch.fx.Node) and h.op == "call_method" and
            (h.target == "float" or (h.target == "to" and h.args[1:] == (torch.float32, )))):
        return None
    x = h.args[0]
    muls = [u for u in r.users if u.op == "call_function" and u.target in _MUL and set(u.args) == {h, r}]
    if len(r.users) != 1 or len(muls) != 1 or len(muls[0].users) != 1:
        return None
    back = next(iter(muls[0].users))
    xv = _ev(x)
    if xv is None or not (back.op == "call_method" and back.target == "to" and back.args[1:] == (xv.dtype, )):
        return None
    if len(back.users) != 1:
        return None
    out = next(iter(back.users))
    if not (out.op == "call_function" and out.target in _MUL and len(out.args) == 2 and back in out.args):
        return None
    w = out.args[0] if out.args[1] is back else out.args[1]
    chain = (back, muls[0], r, add, v, p, h)  # the formula's nodes, last first: erased once they have no users
    return (x, w, float(eps), out, chain) if isinstance(w, torch.fx.Node) else None


def rewrite_graph(graph: torch.fx.Graph, devices, counts: dict) -> None:
    gl = torch.ops.gluon_lab
    F = torch.nn.functional
    for n in list(graph.nodes):
        if n.op != "call_function":
            continue
        if n.target in (torch.rms_norm, F.rms_norm):
            x, shape, w, eps = _arg(n, 0, "input"), _arg(n, 1, "normalized_shape"), _arg(n, 2, "weight"), _arg(n, 3, "eps")
            if not (isinstance(x, torch.fx.Node) and isinstance(w, torch.fx.Node) and _row_ok(x, (w, ), devices)
                    and _last_dim(shape, x) and _needs_grad((x, w)) and not isinstance(eps, torch.fx.Node)):
                continue
            eps = torch.finfo(torch.float32).eps if eps is None else float(eps)  # torch's default: its fp32 math's
            _rms(graph, n, x, w, eps, counts)
            graph.erase_node(n)
        elif n.target in (torch.layer_norm, F.layer_norm):
            x, shape = _arg(n, 0, "input"), _arg(n, 1, "normalized_shape")
            w, b, eps = _arg(n, 2, "weight"), _arg(n, 3, "bias"), _arg(n, 4, "eps", 1e-5)
            if not (isinstance(x, torch.fx.Node) and isinstance(w, torch.fx.Node) and isinstance(b, torch.fx.Node)
                    and _row_ok(x, (w, b), devices) and _last_dim(shape, x) and _needs_grad((x, w, b))
                    and isinstance(eps, (int, float))):
                continue
            n.replace_all_uses_with(_emit(graph, n, gl.layer_norm_train.default, (x, w, b, float(eps), "auto"), n))
            graph.erase_node(n)
            counts["layer_norm"] = counts.get("layer_norm", 0) + 1
        elif n.target is torch.rsqrt:
            m = _hf_rms(n)
            if m is None:
                continue
            x, w, eps, out, chain = m
            if not (_row_ok(x, (w, ), devices) and _needs_grad((x, w))):
                continue
            _rms(graph, out, x, w, eps, counts)
            graph.erase_node(out)
            for c in chain:  # only the formula's own nodes: never a dead-looking in-place update of the user's
                if not c.users:
                    graph.erase_node(c)
    graph.lint()


class TrainingRewrite:
    """Inductor's pre-grad custom pass: this rewrite, then `previous`. Picklable by its devices and this
    module's source (Inductor's FX graph cache pickles the config into its key: a closure would make every
    compile a cache bypass)."""

    def __init__(self, devices, counts: dict, previous=None):
        self.devices, self.counts, self.previous = tuple(devices), counts, previous

    def __call__(self, graph) -> None:
        rewrite_graph(graph, self.devices, self.counts)
        if self.previous is not None:
            self.previous(graph)

    def __getstate__(self):
        import hashlib
        from pathlib import Path
        return {"devices": self.devices, "source": hashlib.sha256(Path(__file__).read_bytes()).hexdigest(),
                "previous": self.previous}

    def __setstate__(self, state):
        self.devices, self.previous, self.counts = state["devices"], state["previous"], {}


def make_pass(devices, counts: dict, previous=None) -> TrainingRewrite:
    return TrainingRewrite(devices, counts, previous)
