"""The CPU emulation of a case's launches (gluon_lab.launches) against what the GPU really launches.

Staleness follows the launch hash computed on the CPU; this checks, on the H200, that the emulation sees
the launches the real call makes: the same kernels in the same order, the same grids and scalar
arguments, the same compile options, and the same normalized TTGIR (the real launch compiles with the
real driver's target and options)."""
import pytest

torch = pytest.importorskip("torch")

from gluon_lab import bench, fastpath, launches, registry, specs  # noqa: E402

pytestmark = pytest.mark.gpu

CASES = [
    ("rms_norm", "gluon-tma", {"M": 1000, "N": 4096}, {}),
    ("add_rms_norm", "gluon-chunked", {"M": 777, "N": 5120}, {}),
    ("layer_norm", "gluon-pipelined", {"M": 3000, "N": 2304}, {}),
    ("rms_norm", "gluon-ws", {"M": 2048, "N": 8192}, {}),
    ("rms_norm", "triton", {"M": 513, "N": 3000}, {}),
    ("matmul", "gluon-ws", {"M": 32, "N": 4096, "K": 14336}, {}),
    ("matmul", "gluon-ws", {"M": 2500, "N": 1736, "K": 4104}, {"study": "t", "BM": 128, "BN": 256, "stream_k": 1}),
    ("matmul", "gluon-pipelined", {"M": 1000, "N": 1000, "K": 1000}, {}),
    ("group_norm", "gluon-split", {"B": 2, "C": 320, "G": 32, "H": 24, "W": 24}, {}),
    ("qk_norm_rope", "gluon-fused", {"T": 300, "Hq": 16, "Hk": 4, "D": 128, "R": 128}, {}),
    ("conv2d", "gluon-pipelined", {"B": 4, "Ci": 64, "Co": 128, "H": 20, "W": 20, "R": 3, "stride": 1, "pad": 1}, {}),
    ("conv2d_input_grad", "gluon-pipelined",
     {"B": 4, "Ci": 64, "Co": 128, "H": 20, "W": 20, "R": 3, "stride": 2, "pad": 1}, {}),
    ("conv2d_weight_grad", "gluon-pipelined",
     {"B": 4, "Ci": 64, "Co": 128, "H": 20, "W": 20, "R": 3, "stride": 1, "pad": 1}, {}),
]


def _real_launches(op, variant, shape, overrides):
    v = registry.get_variant(op, variant)
    spec = specs.get(op)
    inputs = bench.make_inputs(op, shape, "bfloat16", seed=7)
    kw = spec.default_scalars()
    cfg = v.resolve(shape, "bfloat16", overrides) if v.configure is not None else None
    if cfg is not None:
        kw["config"] = cfg
    if v.supports_out and not getattr(spec, "inplace", None):
        kw["out"] = spec.alloc_outputs(inputs)
    v.fn(*inputs, **kw)  # compile and warm up outside the recording (first-call workspaces)
    torch.cuda.synchronize()
    rec = fastpath._Recorder()
    with rec:
        v.fn(*inputs, **kw)
    torch.cuda.synchronize()
    return rec.launches


@pytest.mark.parametrize("op,variant,shape,overrides", CASES, ids=[f"{c[0]}-{c[1]}-{i}" for i, c in enumerate(CASES)])
def test_emulated_launches_are_the_real_ones(op, variant, shape, overrides):
    real = _real_launches(op, variant, shape, overrides)
    emu = launches.capture(op, variant, shape, "bfloat16", overrides)
    assert [l.compiled.metadata.name for l in real] == [l.name for l in emu]
    for r, e in zip(real, emu):
        g = tuple(int(x) for x in r.grid) + (1, ) * (3 - len(r.grid))
        assert g == e.grid, (e.name, g, e.grid)
        md = r.compiled.metadata._asdict()
        for k, v in e.options.items():
            if k in md:
                assert launches._plain(md[k]) == v, (e.name, k)
        tt = launches.normalize_ttgir(r.compiled.asm["ttgir"], md["name"])
        assert tt == e.ttgir, f"{e.name}: the real launch compiled other TTGIR than the emulation"
        names = r.jit.arg_names
        bound = r.jit.signature.bind(*r.args, **{n: x for n, x in r.kwargs.items() if n in names})
        for p in r.jit.params:
            if p.is_constexpr:
                continue
            val = bound.arguments.get(p.name)
            if isinstance(val, (bool, int, float)):
                assert e.args[p.name] == val, (e.name, p.name)
