"""The registry knows no pattern, every variant sits beside its kernels, and the package has no
import cycle. CPU-only."""
import ast
from pathlib import Path

import pytest

import gluon_lab as gll
from gluon_lab import registry, specs

PKG = Path(gll.__file__).resolve().parent


def _module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def import_graph() -> dict:
    """gluon_lab module -> gluon_lab modules it imports (module level AND inside functions)."""
    mods = {_module_name(p): p for p in PKG.rglob("*.py")}
    graph = {}
    for name, path in mods.items():
        pkg = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = pkg.split(".")
                    up = up[:len(up) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                targets = [base] + [f"{base}.{a.name}" for a in node.names]
            for t in targets:
                if t in mods and t != name:
                    deps.add(t)
        graph[name] = deps
    return graph


def _cycles(graph):
    """Strongly connected components with more than one module (Tarjan), packages excluded
    (a package's __init__ importing its own submodules is not a cycle of code)."""
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w.startswith(v + "."):
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle():
    cycles = _cycles(import_graph())
    assert not cycles, f"import cycles: {cycles}"


def test_registry_knows_no_pattern_and_specs_import_nothing_heavy():
    g = import_graph()
    assert not any(d.startswith("gluon_lab.kernels") for d in g["gluon_lab.registry"]), g["gluon_lab.registry"]
    for name, deps in g.items():
        if name.startswith("gluon_lab.specs"):
            assert all(d.startswith("gluon_lab.specs") for d in deps), (name, deps)
    src = (PKG / "experiments.py").read_text()
    for cls in ("TmaCacheConfig", "ChunkPlan", "PipeConfig", "WsNormConfig", "GemmConfig", "GroupPlan"):
        assert cls not in src, f"experiments.py names {cls}: plans ask the variant (resolve/knobs) instead"


def test_every_variant_has_a_spec_and_sits_beside_its_kernels():
    for v in registry.all_variants():
        assert v.op in specs.names()
        mod = v.fn.__module__
        assert mod.startswith("gluon_lab.kernels."), f"{v.op}/{v.name} registered in {mod}"
        if v.ours:
            assert v.needs_hopper and v.codegen is not None and v.configure is not None, (v.op, v.name)


def test_registration_errors():
    with pytest.raises(ValueError, match="unknown op 'softmax'"):
        registry.register("softmax", "x", pattern="baseline")
    with pytest.raises(ValueError, match="pattern must be one of"):
        registry.register("rms_norm", "x", pattern="nope")
    with pytest.raises(ValueError, match="registered twice"):
        registry.register("rms_norm", "torch", pattern="baseline")(lambda *a, **k: None)


def test_plans_ask_variants_for_knobs():
    from gluon_lab.experiments import resolves
    assert resolves("rms_norm", "torch", {"M": 4, "N": 64}, "bfloat16")
    with pytest.raises(ValueError, match="has no knobs"):
        registry.get_variant("rms_norm", "torch").resolve({"M": 4, "N": 64}, "bfloat16", {"num_warps": 4})


def test_quack_peer_registered_and_absent_without_its_wheels():
    """QuACK is a baseline for the row norms it has (rms_norm, add_rms_norm, layer_norm): registered,
    listed only where quack-kernels and its CUTLASS DSL import, never chosen by auto, and timed at its own
    front door (not through this API) by the dispatch study."""
    import importlib.util
    from gluon_lab import experiments, registry
    for op in ("rms_norm", "add_rms_norm", "layer_norm"):
        v = registry.get_variant(op, "quack")
        assert v.pattern == "baseline" and not v.ours and "QuACK" in v.description
        assert ("quack" in registry.variants(op)) == v.available()
        if importlib.util.find_spec("quack") is None:
            assert not v.available()
    assert "quack" in experiments.DISPATCH_SKIP
    assert "quack" in experiments.ChunkedPlan().bf16_variants and "quack" in experiments.ChunkedPlan().fp32_variants


def test_quack_layer_norm_params_are_cast_once_per_version():
    """QuACK's LayerNorm takes fp32 weight / bias: the peer casts a bf16 parameter once, not in every
    timed call, and again after an in-place update (the tensor's version changes)."""
    import torch
    from gluon_lab.kernels import baselines as B
    w = torch.randn(64, dtype=torch.bfloat16)
    a = B._fp32_param(w)
    assert a.dtype == torch.float32 and torch.equal(a, w.float()) and B._fp32_param(w) is a
    w.mul_(2)
    b = B._fp32_param(w)
    assert b is not a and torch.equal(b, w.float())
    f = torch.randn(8)
    assert B._fp32_param(f) is f and B._fp32_param(None) is None
