"""gluon-lab kernels inside Inductor: an opt-in rewrite of RMSNorm, LayerNorm and add + RMSNorm
subgraphs of a compiled model into gluon-lab's custom ops (`torch.ops.gluon_lab.*`, variant="auto").

    import gluon_lab.inductor as gli
    with gli.rewrite():                       # or gli.install() / gli.uninstall()
        y = torch.compile(model)(x)           # compiled while the rewrite is on
    gli.stats()                               # {"rms_norm": 2, "add_rms_norm": 1, ...} replaced so far

Built on torch 2.11's pattern matcher (`torch._inductor.pattern_matcher`): a `PatternMatcherPass`
installed as Inductor's post-grad custom pre-pass (`config.post_grad_custom_pre_pass`, a
`CustomGraphPass` with a uuid, so the FX graph cache keys on it). The patterns are written against
the post-grad ATen graph, where the spellings of one formula meet: `F.rms_norm`, `nn.RMSNorm`, the
fp32 formula `x.float() … .to(dtype)` (pow(2) or x·x, `+ eps` as a Scalar or Tensor add, the weight
before or after the cast back — the Hugging Face Llama form — either operand order), and for
LayerNorm `F.layer_norm` / `nn.LayerNorm` (var_mean) and the two-mean fp32 formula. A match is
rewritten only when the op can take it: the reduction is over the last dim only (dims [-1] or
[ndim-1]), the weight (and bias) are 1-D of the row's length in x's dtype, the output is in x's
dtype, x is bf16 / fp16 / fp32 on one of the `devices` (CUDA by default). An RMSNorm whose input is
`a + b` (same shape and dtype) becomes one `add_rms_norm(a, b, w)` whose second output replaces
every other use of the sum (the residual stream).

Graphs that need a backward: a norm whose intermediates are saved for the backward has extra users
and does not match here; gluon_lab.inductor_training rewrites those before AOT autograd (installed
with this pass: `install`, `rewrite` and `options` turn both on), so the custom ops' autograd formulas
differentiate them. Not touched: norms over several dims, mixed-dtype weights. The Hugging Face form rounds twice (to x's dtype, then
after the weight); the fused kernel rounds once, which moves a result by at most one bf16 ulp.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import itertools
import operator
from pathlib import Path

import torch

DEVICES = ("cuda", )
_counts: dict = {}
_state: dict = {"pass": None, "previous": None, "pre": None, "pre_previous": None}


# ----------------------------------------------------------------------------------------------
# patterns (built once, on first install)

@functools.lru_cache(maxsize=None)
def _patterns(devices: tuple):
    from torch._inductor.pattern_matcher import CallFunction, KeywordArg, PatternMatcherPass
    aten, prims = torch.ops.aten, torch.ops.prims
    conv = prims.convert_element_type.default
    adds = [aten.add.Tensor, aten.add.Scalar]
    mul = aten.mul.Tensor

    def f32(arg, users=1):
        return CallFunction(conv, arg, torch.float32, _users=users)

    def both(fn, a, b, **kw):  # commutative ops: either operand order
        return [CallFunction(fn, a, b, **kw), CallFunction(fn, b, a, **kw)]

    def params(name):  # a weight / bias as the graph has it: plain, or cast to fp32 first
        return [KeywordArg(name), f32(KeywordArg(name))]

    def casts(inner, cast_in):  # the result cast back to x's dtype (only when x was cast to fp32)
        return [CallFunction(conv, inner, KeywordArg("dtype"))] if cast_in else [inner]

    pm = PatternMatcherPass(pass_name="gluon_lab_rewrite")
    entries = []
    for cast_in in (True, False):
        # ---- RMSNorm: xf * rsqrt(mean(xf², dims) + eps) [* w] --------------------------------------
        for sq_pow in (True, False):
            xf = f32(KeywordArg("x"), users=2) if cast_in else KeywordArg("x")
            sq = CallFunction(aten.pow.Tensor_Scalar, xf, 2) if sq_pow else CallFunction(mul, xf, xf)
            ms = CallFunction(aten.mean.dim, sq, KeywordArg("dims"), True)
            r = CallFunction(aten.rsqrt.default, CallFunction(adds, ms, KeywordArg("eps")))
            for n in both(mul, xf, r):
                outs = []
                for w in params("w"):
                    for yw in both(mul, n, w):
                        outs += casts(yw, cast_in)  # weight in fp32, one rounding (F.rms_norm, the spec formula)
                if cast_in:  # the Hugging Face form: cast back first, then the weight in x's dtype
                    outs += both(mul, KeywordArg("w"), CallFunction(conv, n, KeywordArg("dtype")))
                entries += [("rms", o) for o in outs]
        # ---- LayerNorm: (xf - mean) * rsqrt(var + eps) * w + b ---------------------------------------
        stats = []
        xf = f32(KeywordArg("x"), users=2) if cast_in else KeywordArg("x")
        vm = CallFunction(aten.var_mean.correction, xf, KeywordArg("dims"), correction=0, keepdim=True, _users=2)
        sub = CallFunction(aten.sub.Tensor, xf, CallFunction(operator.getitem, vm, 1))
        stats.append((sub, CallFunction(operator.getitem, vm, 0)))
        for sq_pow in (True, False):
            mu = CallFunction(aten.mean.dim, xf, KeywordArg("dims"), True)
            sub2 = CallFunction(aten.sub.Tensor, xf, mu, _users=2)
            sq = CallFunction(aten.pow.Tensor_Scalar, sub2, 2) if sq_pow else CallFunction(mul, sub2, sub2)
            stats.append((sub2, CallFunction(aten.mean.dim, sq, KeywordArg("dims"), True)))
        for sub_, var in stats:
            r = CallFunction(aten.rsqrt.default, CallFunction(adds, var, KeywordArg("eps")))
            for n in both(mul, sub_, r):
                for w, b in itertools.product(params("w"), params("b")):
                    for yw in both(mul, n, w):
                        for yb in both(aten.add.Tensor, yw, b):
                            entries += [("layer", o) for o in casts(yb, cast_in)]
    for kind, pattern in entries:
        _register(pm, kind, pattern, tuple(devices))
    return pm, len(entries)


def _register(pm, kind, pattern, devices):
    from torch._inductor.pattern_matcher import register_graph_pattern

    @register_graph_pattern(pattern, extra_check=lambda m: _check(kind, m, devices), pass_dict=pm)
    def _rewrite(match, *args, **kw):
        _replace(kind, match)


# ----------------------------------------------------------------------------------------------
# the checks a match must pass, and the rewrite

def _val(node):
    v = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return v if isinstance(v, torch.Tensor) else None


def _check(kind, m, devices) -> bool:
    x, w = _val(m.kwargs["x"]), _val(m.kwargs["w"])
    b = _val(m.kwargs["b"]) if kind == "layer" else None
    eps, dims = m.kwargs["eps"], m.kwargs["dims"]
    y = _val(m.output_node())
    if x is None or w is None or y is None or (kind == "layer" and b is None):
        return False
    xn = m.kwargs["x"]
    if "dtype" not in m.kwargs and xn.op == "call_function" and xn.target is torch.ops.prims.convert_element_type.default:
        return False  # the uncast pattern on a cast input: the formula starts in another dtype (its cast pattern decides)
    if x.dtype not in (torch.bfloat16, torch.float16, torch.float32) or x.device.type not in devices:
        return False
    if not isinstance(dims, (list, tuple)):  # mean over every dim (dim=None): not a row norm
        return False
    if x.dim() < 1 or list(dims) not in ([-1], [x.dim() - 1]) or isinstance(eps, torch.fx.Node):
        return False
    if not isinstance(eps, (int, float)) or isinstance(eps, bool) or eps < 0:
        return False
    N = x.shape[-1]
    for p in (w, b):
        if p is not None and (p.dim() != 1 or p.shape[0] != N or p.dtype != x.dtype or p.device != x.device):
            return False
    if y.dtype != x.dtype or tuple(y.shape) != tuple(x.shape):
        return False
    d = m.kwargs.get("dtype")
    return d is None or d == x.dtype


def _fake_call(op, args):
    from torch._guards import detect_fake_mode
    vals = [(_val(a) if isinstance(a, torch.fx.Node) else a) for a in args]
    mode = detect_fake_mode([v for v in vals if isinstance(v, torch.Tensor)])
    with mode if mode is not None else contextlib.nullcontext():
        return op(*vals)


def _summand(node):
    """(a, b) when node is a plain a + b of two tensors of node's shape and dtype; else None."""
    if not (isinstance(node, torch.fx.Node) and node.op == "call_function" and node.target == torch.ops.aten.add.Tensor
            and len(node.args) == 2 and not node.kwargs):
        return None
    s = _val(node)
    ab = [_val(a) for a in node.args]
    if s is None or any(v is None or v.shape != s.shape or v.dtype != s.dtype for v in ab):
        return None
    return node.args


def _replace(kind, m):
    g = m.graph
    x, w, eps = m.kwargs["x"], m.kwargs["w"], float(m.kwargs["eps"])
    y = m.output_node()
    gl = torch.ops.gluon_lab
    if kind == "layer":
        args = (x, w, m.kwargs["b"], eps, "auto")
        op, name = gl.layer_norm.default, "layer_norm"
    else:
        args = (x, w, eps, "auto")
        op, name = gl.rms_norm.default, "rms_norm"
    ab = _summand(x) if kind == "rms" else None
    order = {n: i for i, n in enumerate(g.nodes)}
    if ab is not None and isinstance(w, torch.fx.Node) and order[w] < order[x]:
        # add + RMSNorm: one fused op right after the sum; its second output is the sum for every other user
        with g.inserting_after(x):
            fused = g.call_function(gl.add_rms_norm.default, (ab[0], ab[1], w, eps, "auto"))
            fused.meta["val"] = _fake_call(gl.add_rms_norm.default, fused.args)
        with g.inserting_after(fused):
            y_new = g.call_function(operator.getitem, (fused, 0))
            s_new = g.call_function(operator.getitem, (fused, 1))
        y_new.meta["val"], s_new.meta["val"] = fused.meta["val"]
        y.replace_all_uses_with(y_new)
        m.erase_nodes()
        x.replace_all_uses_with(s_new)
        g.erase_node(x)
        name = "add_rms_norm"
    else:
        with g.inserting_before(y):
            new = g.call_function(op, args)
        new.meta["val"] = _fake_call(op, args)
        y.replace_all_uses_with(new)
        m.erase_nodes()
    _counts[name] = _counts.get(name, 0) + 1


# ----------------------------------------------------------------------------------------------
# the custom pass and its switches

def _dedupe_casts(graph) -> int:
    """Merge repeated casts of one value to one dtype (`x.float()` written three times in a formula
    leaves three convert nodes; the patterns need one). A cast is pure and its first occurrence
    comes before the others, so every later one can use it."""
    conv = torch.ops.prims.convert_element_type.default
    seen, merged = {}, 0
    for n in list(graph.nodes):
        if n.op == "call_function" and n.target is conv and not n.kwargs and len(n.args) == 2:
            key = (n.args[0], n.args[1])
            first = seen.setdefault(key, n)
            if first is not n:
                n.replace_all_uses_with(first)
                graph.erase_node(n)
                merged += 1
    return merged


def _uuid(devices) -> str:
    src = Path(__file__).read_bytes() + repr(sorted(devices)).encode()
    return hashlib.sha256(src).hexdigest()


def _make_pass(previous, devices):
    from torch._inductor.custom_graph_pass import CustomGraphPass

    class GluonLabRewrite(CustomGraphPass):
        """Inductor post-grad pre-pass: gluon-lab's pattern rewrite, then any pass installed before it."""

        def __init__(self):
            self.devices = tuple(devices)
            self.patterns, self.n_patterns = _patterns(self.devices)
            self.previous = previous

        def __call__(self, graph: torch.fx.Graph) -> None:
            _dedupe_casts(graph)
            self.patterns.apply(graph)
            graph.lint()
            if self.previous is not None:
                self.previous(graph)

        def uuid(self):
            if self.previous is None:
                return _uuid(self.devices)
            if not isinstance(self.previous, CustomGraphPass):
                return None  # a plain callable has no stable identity: Inductor then bypasses its FX cache
            prev = self.previous.uuid()
            return None if prev is None else _uuid(self.devices) + str(prev)

    return GluonLabRewrite()


def options(devices=DEVICES) -> dict:
    """torch.compile options that turn the rewrite on for one compile only:
    `torch.compile(model, options=gluon_lab.inductor.options())` (a separate dynamo cache entry from
    a plain torch.compile of the same model: the backends differ)."""
    import gluon_lab  # noqa: F401
    from torch._inductor import config
    from .inductor_training import make_pass
    return {"post_grad_custom_pre_pass": _make_pass(config.post_grad_custom_pre_pass, devices),
            "pre_grad_custom_pass": make_pass(devices, _counts, config.pre_grad_custom_pass)}


def install(devices=DEVICES) -> None:
    """Turn the rewrite on for every torch.compile from now on (idempotent). devices: the device
    types whose norms are rewritten ("cuda"; tests add "cpu", where the custom ops run eager torch)."""
    import gluon_lab  # noqa: F401 - importing the package registers torch.ops.gluon_lab.*
    from torch._inductor import config
    if installed():
        if _state["pass"].devices == tuple(devices):
            return
        uninstall()
    from .inductor_training import make_pass
    _state["previous"] = config.post_grad_custom_pre_pass
    _state["pass"] = _make_pass(_state["previous"], devices)
    config.post_grad_custom_pre_pass = _state["pass"]
    _state["pre_previous"] = config.pre_grad_custom_pass
    _state["pre"] = make_pass(devices, _counts, _state["pre_previous"])
    config.pre_grad_custom_pass = _state["pre"]


def uninstall() -> None:
    """Restore the post-grad pre-pass that was there before install()."""
    from torch._inductor import config
    if _state["pass"] is not None and config.post_grad_custom_pre_pass is _state["pass"]:
        config.post_grad_custom_pre_pass = _state["previous"]
    if _state["pre"] is not None and config.pre_grad_custom_pass is _state["pre"]:
        config.pre_grad_custom_pass = _state["pre_previous"]
    _state["pass"] = _state["previous"] = _state["pre"] = _state["pre_previous"] = None


def installed() -> bool:
    from torch._inductor import config
    return _state["pass"] is not None and config.post_grad_custom_pre_pass is _state["pass"]


@contextlib.contextmanager
def rewrite(devices=DEVICES):
    """The rewrite on inside the block (torch.compile compiles on the first call: make it there)."""
    was = installed()
    install(devices)
    try:
        yield
    finally:
        if not was:
            uninstall()


def stats() -> dict:
    """Subgraphs replaced since import, per custom op (graphs served from Inductor's FX graph cache
    ran no pass and are not counted: count the custom ops in the generated code for a model)."""
    return dict(_counts)


def reset_stats() -> None:
    _counts.clear()
