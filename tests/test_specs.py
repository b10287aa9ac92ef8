"""Op specs: the one place per-op knowledge lives. CPU-only."""
import ast
import inspect
import re
from pathlib import Path

import pytest
import torch

import gluon_lab as gll
from gluon_lab import bench, specs

PKG = Path(gll.__file__).resolve().parent
SHAPES = {"row_norm": {"M": 7, "N": 40}, "row_norm_backward": {"M": 7, "N": 40}, "matmul": {"M": 5, "N": 24, "K": 9},
          "group_norm": {"B": 2, "C": 6, "H": 5, "W": 3, "G": 3, "layout": "nchw"},
          "qk_norm_rope": {"T": 5, "Hq": 4, "Hk": 2, "D": 64, "R": 64},
          "conv": {"B": 2, "Ci": 16, "Co": 24, "H": 9, "W": 8, "R": 3, "stride": 2, "pad": 1}}


def _clone(inputs):
    return tuple(t.clone() if isinstance(t, torch.Tensor) else t for t in inputs)


def _inputs(spec, dtype="float32", seed=0):
    g = torch.Generator().manual_seed(seed)
    dt = getattr(torch, dtype)

    def rnd(*s, mean=0.0, std=1.0):
        return (torch.randn(*s, generator=g) * std + mean).to(dt)

    shape = dict(SHAPES[spec.family])
    if spec.name == "instance_norm":
        shape.pop("G")
    return shape, spec.make_inputs(shape, dtype, rnd)


@pytest.mark.parametrize("spec", specs.all_specs(), ids=lambda s: s.name)
def test_spec_is_complete_and_consistent(spec):
    dtype = spec.dtypes[-1] if "float32" not in spec.dtypes else "float32"
    shape, inputs = _inputs(spec, dtype if spec.family != "matmul" else "float32")
    assert len(inputs) == len(spec.inputs)
    # the input maker's tensors are fresh normals, never zeros
    assert all((t != 0).float().mean() > 0.9 for t in inputs if isinstance(t, torch.Tensor))
    # shape_of gives back the shape the maker was asked for
    assert spec.shape_of(*inputs) == shape
    assert set(shape) <= set(spec.shape_keys)
    # the eager formulation agrees with the float64 reference (fp32 inputs where the op takes them;
    # every call on its own copy: an in-place op updates its input)
    if spec.family != "matmul":
        tol = dict(atol=1e-5, rtol=1e-5) if dtype == "float32" else dict(zip(("atol", "rtol"), spec.tolerance[dtype]))
        ref = spec.reference(*_clone(inputs), **spec.scalars)
        got = spec.eager(*_clone(inputs), **spec.scalars)
        for g, r in zip(got if isinstance(got, tuple) else (got, ), ref if isinstance(ref, tuple) else (ref, )):
            torch.testing.assert_close(g.double(), r, **tol)
        if spec.formula is not None:
            got = spec.formula(*_clone(inputs), *spec.scalars.values())
            for g, r in zip(got if isinstance(got, tuple) else (got, ), ref if isinstance(ref, tuple) else (ref, )):
                torch.testing.assert_close(g.double(), r, **tol)
    else:
        torch.testing.assert_close(spec.eager(*inputs).double(), spec.reference(*inputs), atol=1e-4, rtol=1e-4)
    # byte model: at least every tensor input read once (a table the op gathers rows from, like a
    # RoPE cos/sin cache, counts the rows it reads instead)
    gathered = getattr(spec, "gathered", ())
    read = [t for o, t in zip(spec.inputs, inputs) if isinstance(t, torch.Tensor) and o.name not in gathered]
    assert spec.bytes(shape, spec.dtypes[0]) >= sum(t.numel() for t in read) * 2
    assert spec.flops(shape) > 0
    assert spec.bucket is not None and isinstance(spec.bucket(shape), tuple)


@pytest.mark.parametrize("spec", specs.all_specs(), ids=lambda s: s.name)
def test_public_function_is_generated_from_the_spec(spec):
    fn = getattr(gll, spec.name)
    sig = inspect.signature(fn)
    names = list(sig.parameters)
    assert names[:len(spec.inputs)] == list(spec.input_names)
    for o in spec.inputs:
        assert (sig.parameters[o.name].default is None) == o.optional
    for k, v in spec.scalars.items():
        assert sig.parameters[k].default == v
    assert sig.parameters["variant"].kind is inspect.Parameter.KEYWORD_ONLY
    assert fn.__doc__ == spec.doc
    # through the public API, variant="torch" is the spec's eager formulation
    dt = "bfloat16" if spec.family == "matmul" else "float32" if "float32" in spec.dtypes else spec.dtypes[-1]
    shape, inputs = _inputs(spec, dt, seed=3)
    if spec.family == "matmul":
        inputs = tuple(t.to(torch.bfloat16) for t in inputs)
    got, want = fn(*_clone(inputs), variant="torch"), spec.eager(*_clone(inputs), **spec.scalars)
    for g, w in zip(got if isinstance(got, tuple) else (got, ), want if isinstance(want, tuple) else (want, )):
        assert torch.equal(g, w)


def test_bench_reference_blocks_rows_like_the_whole():
    spec = specs.get("add_rms_norm")
    g = torch.Generator().manual_seed(5)
    x, r, w = (torch.randn(10, 16, generator=g), torch.randn(10, 16, generator=g), torch.randn(16, generator=g))
    whole = spec.reference(x, r, w, eps=1e-6)
    blocked = bench.reference_outputs("add_rms_norm", (x, r, w), row_chunk=3)
    for a, b in zip(whole, blocked):
        assert torch.equal(a, b)


def test_group_norm_rules_name_the_argument():
    x = torch.randn(2, 6, 4, 4)
    with pytest.raises(ValueError, match="num_groups must be a positive int dividing C = x.shape\\[1\\] = 6"):
        gll.group_norm(x, 4)
    with pytest.raises(TypeError, match="num_groups must be"):
        gll.group_norm(x, 2.0)
    with pytest.raises(ValueError, match="weight must have shape \\(6,\\)"):
        gll.group_norm(x, 2, torch.randn(5))
    with pytest.raises(ValueError, match="at least 3 dimensions"):
        gll.instance_norm(torch.randn(2, 6))
    with pytest.raises(ValueError, match="more than one spatial element"):
        gll.instance_norm(torch.randn(2, 6, 1))


def _code_outside_specs():
    """(path, source) of every module of the package outside specs/ and the presentation layer
    (analysis/, notebook.py: they select records of an op to show them, which is data, not logic)."""
    for p in sorted(PKG.rglob("*.py")):
        rel = p.relative_to(PKG)
        if rel.parts[0] in ("specs", "analysis") or rel.name == "notebook.py":
            continue
        yield rel, p.read_text()


def test_no_op_name_tests_outside_the_specs():
    """Per-op knowledge lives in the spec: no `op == "rms_norm"` (or `in ("group_norm", ...)`)
    comparisons anywhere else in the package, and no integer op codes in the kernels."""
    op_names = set(specs.names())
    bad = []
    for rel, src in _code_outside_specs():
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, ast.Compare):
                sides = [node.left, *node.comparators]
                sides += [e for s in sides if isinstance(s, (ast.Tuple, ast.List, ast.Set)) for e in s.elts]
                consts = [c for c in sides if isinstance(c, ast.Constant) and c.value in op_names]
                if consts:
                    bad.append(f"gluon_lab/{rel}:{node.lineno}: compares with op name {consts[0].value!r}")
    assert not bad, "\n".join(bad)
    kern = "\n".join(src for rel, src in _code_outside_specs() if rel.parts[0] == "kernels")
    assert not re.findall(r"OP ==|OP !=|OP_CODES", kern)
