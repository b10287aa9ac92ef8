"""Launch hashes (gluon_lab.launches): what a case launches, compiled for sm_90 on this CPU.

A refactor that compiles to the same code (renamed locals, a jit helper moved to another module, a
folded duplicate, comments) keeps the hash; anything that reaches the compiled code or the launch (a
constant, a layout, a tile, num_warps, the grid, a scalar argument) changes it. Each case writes a
small module, imports it under a fresh name and runs its host launcher under the emulation."""
import importlib.util
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from gluon_lab import launches  # noqa: E402

HELPER = """
@triton.jit
def helper(v):
    return v * {const}
"""

KERNEL = """
import torch
import triton
import triton.language as tl
{helper_src}

@triton.jit
def scale_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    # a comment that must not count
    pid = tl.program_id(0)
    {offs} = pid * BLOCK + tl.arange(0, BLOCK)
    mask = {offs} < n
    v = tl.load(x_ptr + {offs}, mask=mask)
    tl.store(y_ptr + {offs}, helper(v), mask=mask)


def launch(x, block={block}, warps={warps}):
    \"\"\"{doc}\"\"\"
    y = torch.empty_like(x)
    scale_kernel[({grid}, )](x, y, x.numel(), BLOCK=block, num_warps=warps)
    return y
"""

GLUON = """
import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl


@gluon.jit
def copy_kernel(x_ptr, y_ptr, n, BLOCK: gl.constexpr):
    layout: gl.constexpr = gl.BlockedLayout([{spt}], [32], [4], [0])
    {offs} = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=layout)
    m = {offs} < n
    gl.store(y_ptr + {offs}, gl.load(x_ptr + {offs}, mask=m), mask=m)


def launch(x):
    y = torch.empty_like(x)
    copy_kernel[(x.numel() // 1024 + 1, )](x, y, x.numel(), BLOCK=1024, num_warps=4)
    return y
"""

_n = [0]


def _module(tmp_path, src: str, name: str | None = None):
    _n[0] += 1
    name = name or f"gl_launch_case_{_n[0]}"
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(src))
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _hash(mod, n=5000, dtype=torch.float32):
    x = torch.empty(n, dtype=dtype, device="meta")
    with launches.emulate() as seen:
        mod.launch(x)
    assert seen, "the launcher made no Triton launch under the emulation"
    return launches.launch_hash(seen), seen


def _triton(tmp_path, *, const="2.0", offs="offs", block=1024, warps=4, grid="triton.cdiv(x.numel(), block)",
            doc="launch", helper_elsewhere=False):
    if helper_elsewhere:  # the jit helper lives in another module, imported
        other = _module(tmp_path, "import triton\n" + HELPER.format(const=const))
        helper_src = f"from {other.__name__} import helper"
    else:
        helper_src = HELPER.format(const=const)
    return _module(tmp_path, KERNEL.format(helper_src=helper_src, offs=offs, block=block, warps=warps, grid=grid,
                                           doc=doc))


def test_same_code_same_hash_and_what_is_kept(tmp_path):
    h1, seen = _hash(_triton(tmp_path))
    h2, _ = _hash(_triton(tmp_path))
    assert h1 == h2 and len(h1) == 16
    (l, ) = seen
    assert l.name == "scale_kernel" and l.grid == (5, 1, 1)
    assert l.args["n"] == 5000 and l.args["x_ptr"] == {"ptr": "torch.float32", "offset": 0}
    assert "BLOCK" not in l.args  # constexprs reach the TTGIR
    assert l.options["num_warps"] == 4
    assert "loc(" not in l.ttgir and "@kernel" in l.ttgir and "scale_kernel" not in l.ttgir


@pytest.mark.parametrize("change", ["rename a local", "move the jit helper to another module", "comments and docstrings"])
def test_refactors_keep_the_hash(tmp_path, change):
    base, _ = _hash(_triton(tmp_path))
    kw = {"rename a local": {"offs": "idx"}, "move the jit helper to another module": {"helper_elsewhere": True},
          "comments and docstrings": {"doc": "a different docstring"}}[change]
    assert _hash(_triton(tmp_path, **kw))[0] == base


@pytest.mark.parametrize("change", ["a constant", "the tile", "num_warps", "the grid"])
def test_what_reaches_the_launch_changes_the_hash(tmp_path, change):
    base, _ = _hash(_triton(tmp_path))
    kw = {"a constant": {"const": "3.0"}, "the tile": {"block": 512}, "num_warps": {"warps": 8},
          "the grid": {"grid": "triton.cdiv(x.numel(), block) + 1"}}[change]
    assert _hash(_triton(tmp_path, **kw))[0] != base


def test_scalar_arguments_and_pointer_offsets_count(tmp_path):
    mod = _triton(tmp_path)
    a, _ = _hash(mod, n=5000)
    b, _ = _hash(mod, n=4999)  # same grid, another scalar n
    assert a != b
    x = torch.empty(6000, device="meta")
    with launches.emulate() as seen:
        mod.launch(x[16:5016])  # a view 64 bytes into its storage
    assert seen[0].args["x_ptr"]["offset"] == 64
    assert launches.launch_hash(seen) != a


def test_gluon_layout_changes_the_hash_a_renamed_local_does_not(tmp_path):
    base, seen = _hash(_module(tmp_path, GLUON.format(spt=4, offs="offs")))
    assert seen[0].name == "copy_kernel"
    assert _hash(_module(tmp_path, GLUON.format(spt=4, offs="o")))[0] == base
    assert _hash(_module(tmp_path, GLUON.format(spt=8, offs="offs")))[0] != base


def test_normalize_ttgir_drops_locations_names_and_entry():
    a = '''#loc = loc("/a/b.py":3:0)
module {
  tt.func public @k(%x_ptr: !tt.ptr<f32> loc("x_ptr"(#loc)), %n: i32 loc(callsite(#loc1 at #loc2))) {
    %offs = tt.make_range {end = 16 : i32} : tensor<16xi32> loc(#loc3)
    %alloc = ttg.local_alloc : () -> !ttg.memdesc<16xf32> loc("x"("/a/b.py":4:2))
    tt.return loc(#loc4)
  } loc(#loc)
} loc(#loc)
#loc3 = loc("/a/b.py":5:0)
'''
    b = a.replace("%offs", "%idx").replace("/a/b.py", "/elsewhere/c.py").replace("@k(", "@other(")
    na, nb = launches.normalize_ttgir(a, "k"), launches.normalize_ttgir(b, "other")
    assert na == nb
    assert "loc" not in na.replace("local_alloc", "") and "@kernel" in na and "%v0" in na
    assert "ttg.local_alloc" in na  # 'alloc(' inside an op name is not a location


def test_a_real_variant_multi_kernel_launch():
    """gluon-ws split-K at a decode shape: the GEMM and its reduce, each with its grid."""
    seen = launches.capture("matmul", "gluon-ws", {"M": 32, "N": 4096, "K": 14336}, "bfloat16")
    assert [l.name for l in seen] == ["ws_gemm_kernel", "splitk_reduce_kernel"]
    assert launches.summary(seen).startswith("ws_gemm_kernel[")
    again = launches.capture("matmul", "gluon-ws", {"M": 32, "N": 4096, "K": 14336}, "bfloat16")
    assert launches.launch_hash(seen) == launches.launch_hash(again)
    other = launches.capture("matmul", "gluon-ws", {"M": 32, "N": 4096, "K": 14336}, "bfloat16",
                             overrides={"study": "x", "split_k": 1, "swap_ab": True})
    assert launches.launch_hash(other) != launches.launch_hash(seen)


def test_evaluate_says_why_and_skips_torch_formulas():
    assert launches.evaluate({"op": "rms_norm", "variant": "torch", "shape": {"M": 8, "N": 64},
                              "dtype": "bfloat16"}) == {"hash": None, "summary": "-"}
    bad = launches.evaluate({"op": "rms_norm", "variant": "gluon-tma", "shape": {"M": 8, "N": 64},
                             "dtype": "bfloat16", "overrides": {"num_warps": 3}})
    assert "error" in bad
