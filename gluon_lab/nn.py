"""Drop-in norm modules for eager models, and an in-place swap (Liger's `apply_liger_kernel_to_*` habit).

    import gluon_lab.nn as gln
    norm = gln.RMSNorm(4096, eps=1e-6)          # torch.nn.RMSNorm's constructor, parameters and state dict
    report = gln.patch(model)                   # swaps nn.RMSNorm / nn.LayerNorm / Hugging Face-style RMSNorm
    print(report)                               # what it swapped, what it left and why

`RMSNorm` and `LayerNorm` subclass torch's modules, so a checkpoint of either loads into the other,
`isinstance(m, torch.nn.RMSNorm)` holds, and an optimizer built before the swap keeps its parameters
(`patch` swaps the class of a torch module in place: the same Parameter objects). Their forward calls
`gluon_lab.rms_norm` / `gluon_lab.layer_norm` with `variant` (default "auto", the selection model) over
the flattened normalized dims. Where the public op cannot take the call the forward is torch's own, and
`why_torch(x)` names the rule: no weight (`elementwise_affine=False`) or no bias (`bias=False`), a
weight of another dtype than x (mixed precision with fp32 parameters), a dtype the op does not take
(float64), x's trailing dims not `normalized_shape`.

Autograd: the public ops rms_norm / layer_norm have backward ops (pattern 7), so under grad these modules'
forward runs the op's custom op and `loss.backward()` its backward op (gluon_lab.library: the forward's
variant where the backward op has it, else auto); where the public op cannot take the call, torch's own
forward and gradient.

Hugging Face-style RMSNorm (`LlamaRMSNorm`, `Qwen2RMSNorm`, `MistralRMSNorm`, ...: a class named
*RMSNorm with one 1-D `weight` and a float `variance_epsilon` or `eps`) is replaced by a `RMSNorm` that
shares its weight, after a probe: both forwards on one random input must agree within the dtype's
rounding (the Hugging Face form rounds to x's dtype before the weight; the fused op once, <= 1 ulp), so a
variant with another formula (Gemma's `1 + weight`) is left alone and named in the report.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import nn

__all__ = ["RMSNorm", "LayerNorm", "patch", "PatchReport"]


def _trailing_rule(x, normalized_shape) -> str | None:
    k = len(normalized_shape)
    if x.dim() < k or tuple(x.shape[x.dim() - k:]) != tuple(normalized_shape):
        return (f"x's trailing dims must be normalized_shape = {tuple(normalized_shape)}; got x.shape = "
                f"{tuple(x.shape)}")
    return None


def _dtype_rule(op: str, x) -> str | None:
    from . import specs
    dts = specs.get(op).dtypes
    if str(x.dtype).replace("torch.", "") not in dts:
        return f"x's dtype {x.dtype} is not one gluon_lab.{op} takes ({', '.join(dts)})"
    return None


def _rows(x, normalized_shape):
    """x as (..., N): the normalized dims flattened into one row (a view where x's layout allows)."""
    k = len(normalized_shape)
    return x.reshape(*x.shape[:x.dim() - k], math.prod(normalized_shape))


class RMSNorm(nn.RMSNorm):
    """torch.nn.RMSNorm whose forward is gluon_lab.rms_norm (module docstring). `variant`: "auto" or a
    variant name of rms_norm (gluon_lab.variants("rms_norm"))."""

    def __init__(self, normalized_shape, eps=None, elementwise_affine=True, device=None, dtype=None, *,
                 variant: str = "auto"):
        super().__init__(normalized_shape, eps=eps, elementwise_affine=elementwise_affine, device=device,
                         dtype=dtype)
        self.variant = variant

    def why_torch(self, x) -> str | None:
        """Why this call runs torch's own forward (None: it calls gluon_lab.rms_norm)."""
        if self.weight is None:
            return "no weight (elementwise_affine=False): gluon_lab.rms_norm takes a weight"
        if self.weight.dtype != x.dtype:
            return f"the weight's dtype {self.weight.dtype} is not x's {x.dtype} (gluon_lab.rms_norm takes one dtype)"
        return _dtype_rule("rms_norm", x) or _trailing_rule(x, self.normalized_shape)

    def forward(self, x):
        if self.why_torch(x) is not None:
            return super().forward(x)
        from . import api
        eps = torch.finfo(x.dtype).eps if self.eps is None else self.eps  # torch's rule for eps=None
        y = api.PUBLIC["rms_norm"](_rows(x, self.normalized_shape), self.weight.reshape(-1), eps=eps,
                                   variant=self.variant)
        return y.reshape(x.shape)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", variant={self.variant!r}"


class LayerNorm(nn.LayerNorm):
    """torch.nn.LayerNorm whose forward is gluon_lab.layer_norm (module docstring)."""

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True, device=None, dtype=None, *,
                 variant: str = "auto"):
        super().__init__(normalized_shape, eps=eps, elementwise_affine=elementwise_affine, bias=bias, device=device,
                         dtype=dtype)
        self.variant = variant

    def why_torch(self, x) -> str | None:
        if self.weight is None:
            return "no weight (elementwise_affine=False): gluon_lab.layer_norm takes a weight and a bias"
        if self.bias is None:
            return "no bias (bias=False): gluon_lab.layer_norm takes a bias"
        if self.weight.dtype != x.dtype or self.bias.dtype != x.dtype:
            return (f"the parameters' dtype {self.weight.dtype} is not x's {x.dtype} (gluon_lab.layer_norm takes one "
                    "dtype)")
        return _dtype_rule("layer_norm", x) or _trailing_rule(x, self.normalized_shape)

    def forward(self, x):
        if self.why_torch(x) is not None:
            return super().forward(x)
        from . import api
        y = api.PUBLIC["layer_norm"](_rows(x, self.normalized_shape), self.weight.reshape(-1), self.bias.reshape(-1),
                                     eps=self.eps, variant=self.variant)
        return y.reshape(x.shape)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", variant={self.variant!r}"


# ----------------------------------------------------------------------------------------------
# patch(model)

@dataclass
class PatchReport:
    """What patch() did: swapped [(module name, its class before)], skipped [(name, class, why)]."""
    swapped: list = field(default_factory=list)
    skipped: list = field(default_factory=list)

    def __str__(self) -> str:
        kinds: dict = {}
        for _, cls in self.swapped:
            kinds[cls] = kinds.get(cls, 0) + 1
        head = (f"gluon_lab.nn.patch: swapped {len(self.swapped)} module(s)"
                + (f" ({', '.join(f'{n} x {c}' for c, n in sorted(kinds.items()))})" if kinds else ""))
        lines = [head] + [f"  left {name} ({cls}): {why}" for name, cls, why in self.skipped]
        return "\n".join(lines)


def _hf_eps(m) -> float | None:
    for attr in ("variance_epsilon", "eps"):
        v = getattr(m, attr, None)
        if isinstance(v, float):
            return v
    return None


def _hf_rmsnorm_like(m) -> str | None:
    """None when m looks like a Hugging Face RMSNorm (before the probe), else why not."""
    params = dict(m.named_parameters(recurse=False))
    if set(params) != {"weight"} or params["weight"].dim() != 1:
        return "not one 1-D weight"
    if list(m.children()) or list(m.buffers(recurse=False)):
        return "has submodules or buffers"
    if _hf_eps(m) is None:
        return "no float variance_epsilon / eps"
    return None


def _probe(old, new) -> str | None:
    """None when old and new agree on a random input (within the dtype's rounding), else the mismatch."""
    w = new.weight
    x = torch.randn(4, w.shape[0], device=w.device, dtype=torch.float32).to(w.dtype)
    with torch.no_grad():
        a, b = old(x), new(x)
    if a.shape != b.shape or a.dtype != b.dtype:
        return f"its forward returns {tuple(a.shape)} {a.dtype}, RMSNorm's {tuple(b.shape)} {b.dtype}"
    err = (a.double() - b.double()).abs().max().item()
    tol = 4 * torch.finfo(w.dtype).eps * max(1.0, b.double().abs().max().item())
    if not err <= tol:  # NaN fails too
        return f"its forward differs from RMSNorm's formula on a probe input (max |diff| {err:.3g} > {tol:.3g})"
    return None


def patch(model: nn.Module, *, variant: str = "auto", rms_norm: bool = True, layer_norm: bool = True,
          hf_rms_norm: bool = True, log=print) -> PatchReport:
    """Swap the norms of `model` in place for gluon_lab.nn's (module docstring) and return what was done
    (also given to `log`, one summary line plus a line per module left alone; log=None: silent). torch
    modules change class in place (their parameters stay the same objects); a Hugging Face-style RMSNorm
    is replaced in its parent by a RMSNorm sharing its weight, where the probe agrees."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module; got {type(model).__name__}")
    rep = PatchReport()
    swap_class = {k: v for k, v, on in ((nn.RMSNorm, RMSNorm, rms_norm), (nn.LayerNorm, LayerNorm, layer_norm)) if on}
    for name, m in list(model.named_modules()):
        cls = type(m).__name__
        if isinstance(m, (RMSNorm, LayerNorm)):
            continue
        ours = swap_class.get(type(m))
        if ours is not None or type(m) in (nn.RMSNorm, nn.LayerNorm):
            if ours is not None:
                m.__class__ = ours  # a subclass that adds only `variant`: the module's state stays as it is
                m.variant = variant
                rep.swapped.append((name, cls))
            continue
        if not (hf_rms_norm and cls.endswith("RMSNorm") and not isinstance(m, nn.RMSNorm)):
            continue
        why = _hf_rmsnorm_like(m)
        new = None
        if why is None:
            new = RMSNorm(m.weight.shape[0], eps=_hf_eps(m), device=m.weight.device, dtype=m.weight.dtype,
                          variant=variant)
            new.weight = m.weight  # shared: the optimizer's parameter and the checkpoint key stay
            why = _probe(m, new)
        if why is not None:
            rep.skipped.append((name or "<root>", cls, why))
            continue
        if not name:
            rep.skipped.append(("<root>", cls, "the model itself: use gluon_lab.nn.RMSNorm in its place"))
            continue
        parent_name, _, attr = name.rpartition(".")
        setattr(model.get_submodule(parent_name) if parent_name else model, attr, new)
        rep.swapped.append((name, cls))
    if log is not None:
        log(str(rep))
    return rep
