"""The row norms' backward on the H200, through the public API: every backward variant against float64 (ragged
M, odd N, strided rows, bf16 / fp16 / fp32, NaN rows, M = 1, poisoned outputs), determinism, and the autograd
path: loss.backward() through gll.rms_norm / layer_norm / add_rms_norm runs the Gluon backward, opcheck with
the autograd checks, and a torch.compile(fullgraph=True) training step that traces both directions as custom
ops."""
import pytest
import torch

import gluon_lab as gll
from gluon_lab import bench, registry

pytestmark = pytest.mark.gpu
OPS = ("rms_norm_backward", "layer_norm_backward", "add_rms_norm_backward")


def _variants(op):
    return [v for v in registry.variants(op) if v not in ("inductor", )]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("M,N", [(1, 4096), (7, 1000), (1027, 2880), (333, 5120), (64, 12288), (2, 16384)])
def test_backward_variants_match_float64(op, dtype, M, N):
    inputs = bench.make_inputs(op, {"M": M, "N": N}, dtype, seed=M + N)
    for v in _variants(op):
        if v == "liger" and dtype != "bfloat16":
            continue  # Liger is compared in bf16 (its casting modes); its fp32 path is not ours to test
        if v == "quack" and op == "layer_norm_backward" and dtype != "float32":
            continue
        if not registry.eligible(registry.get_variant(op, v), inputs):
            continue
        res = bench.check_correctness(op, v, inputs, call="api" if v == "gluon-regs" else "fn")
        assert res["passed"], (v, res)


@pytest.mark.parametrize("op", OPS)
def test_recomputed_statistics_match_the_saved_ones(op):
    inputs = list(bench.make_inputs(op, {"M": 515, "N": 3584}, "bfloat16", seed=3))
    with_stats = getattr(gll, op)(*inputs, variant="gluon-regs")
    n = 2 if op == "layer_norm_backward" else 1
    without = getattr(gll, op)(*inputs[:-n], *([None] * n), variant="gluon-regs")
    ref = bench.reference_outputs(op, inputs, None)
    for a, b, r in zip(with_stats, without, ref):
        torch.testing.assert_close(a.double(), r, atol=4e-2, rtol=2e-2)
        torch.testing.assert_close(b.double(), r, atol=4e-2, rtol=2e-2)


def test_strided_rows_and_leading_dims():
    big = torch.randn(300, 3072 + 64, device="cuda", dtype=torch.bfloat16)
    x = big[:, :3072]  # row stride 3136: not contiguous, 16-byte multiple
    dy = torch.randn(300, 3072 + 8, device="cuda", dtype=torch.bfloat16)[:, :3072]
    w = torch.rand(3072, device="cuda", dtype=torch.bfloat16) + 0.5
    got = gll.rms_norm_backward(dy, x, w, variant="gluon-regs")
    ref = gll.rms_norm_backward(dy.contiguous(), x.contiguous(), w, variant="torch")
    for g, r in zip(got, ref):
        torch.testing.assert_close(g.float(), r.float(), atol=4e-2, rtol=2e-2)
    x3 = torch.randn(4, 6, 2048, device="cuda", dtype=torch.bfloat16)
    dy3 = torch.randn_like(x3)
    w3 = torch.rand(2048, device="cuda", dtype=torch.bfloat16)
    dx, dw, db = gll.layer_norm_backward(dy3, x3, w3, variant="gluon-regs")
    rdx, rdw, rdb = bench.reference_outputs("layer_norm_backward", (dy3, x3, w3, None, None), None)
    assert dx.shape == x3.shape
    torch.testing.assert_close(dx.double(), rdx, atol=4e-2, rtol=2e-2)
    torch.testing.assert_close(db.double(), rdb, atol=4e-2, rtol=2e-2)


@pytest.mark.parametrize("op", OPS)
def test_a_nan_row_stays_in_its_row_of_dx(op):
    inputs = list(bench.make_inputs(op, {"M": 64, "N": 4096}, "bfloat16", seed=5))
    inputs[1][9, 17] = float("nan")  # x (or s): row 9
    dx = getattr(gll, op)(*inputs, variant="gluon-regs")[0]
    assert torch.isnan(dx[9]).all()
    assert torch.isfinite(torch.cat([dx[:9], dx[10:]])).all()
    ref = getattr(gll, op)(*inputs, variant="torch")
    for g, r in zip(getattr(gll, op)(*inputs, variant="gluon-regs")[1:], ref[1:]):
        assert torch.equal(torch.isnan(g), torch.isnan(r))  # dw / db: the NaN column(s) as torch's


def test_dw_is_bitwise_deterministic():
    inputs = bench.make_inputs("layer_norm_backward", {"M": 8191, "N": 5120}, "bfloat16", seed=1)
    a = gll.layer_norm_backward(*inputs, variant="gluon-regs")
    b = gll.layer_norm_backward(*inputs, variant="gluon-regs")
    for u, v in zip(a, b):
        assert torch.equal(u, v)


# ---- autograd -----------------------------------------------------------------------------------

def _leaf(*shape, dtype=torch.bfloat16, seed=0, offset=0.0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(*shape, device="cuda", generator=g) + offset).to(dtype).requires_grad_()


@pytest.mark.parametrize("variant", ["gluon-regs", "gluon-tma", "auto"])
@pytest.mark.parametrize("op", ["rms_norm", "layer_norm", "add_rms_norm"])
def test_loss_backward_through_the_public_op_matches_float64_autograd(op, variant):
    M, N = 515, 4096
    x, r = _leaf(M, N, seed=1), _leaf(M, N, seed=2)
    w, b = _leaf(N, seed=3, offset=1.0), _leaf(N, seed=4)
    args = {"rms_norm": (x, w), "layer_norm": (x, w, b), "add_rms_norm": (x, r, w)}[op]
    out = getattr(gll, op)(*args, variant=variant)
    outs = out if isinstance(out, tuple) else (out, )
    assert all("gluon_lab" in type(o.grad_fn).__name__ for o in outs)
    dys = [torch.randn_like(o) for o in outs]
    torch.autograd.backward(outs, dys)
    if op == "add_rms_norm":  # s = x + residual is rounded to bf16 by the forward: the closed form rounds it too
        from gluon_lab.specs import norm_grad
        refs = norm_grad.add_rms_norm_backward_reference(x.detach(), r.detach(), w.detach(), *dys)
    else:
        ref_args = [a.detach().double().requires_grad_() for a in args]
        spec = gll.specs.get(op)
        ref = spec.eager(*ref_args, **spec.scalars)
        torch.autograd.backward(ref if isinstance(ref, tuple) else (ref, ), [d.double() for d in dys])
        refs = [ra.grad for ra in ref_args]
    for a, rg in zip(args, refs):
        torch.testing.assert_close(a.grad.double(), rg, atol=6e-2, rtol=3e-2)


def test_the_gluon_backward_runs_under_loss_backward():
    from gluon_lab.kernels import norm_backward
    calls = []
    real = norm_backward.launch
    norm_backward.launch = lambda *a, **k: calls.append(a[0]) or real(*a, **k)
    try:
        x, w = _leaf(256, 4096, seed=5), _leaf(4096, seed=6, offset=1.0)
        gll.rms_norm(x, w, variant="gluon-regs").float().pow(2).mean().backward()
    finally:
        norm_backward.launch = real
    assert calls == ["rms"] and x.grad is not None and w.grad is not None


@pytest.mark.parametrize("op", ["rms_norm", "layer_norm", "add_rms_norm"])
def test_opcheck_with_the_autograd_checks(op):
    from torch.library import opcheck
    x, r = _leaf(64, 2048, seed=1), _leaf(64, 2048, seed=2)
    w, b = _leaf(2048, seed=3, offset=1.0), _leaf(2048, seed=4)
    args = {"rms_norm": (x, w, 1e-6), "layer_norm": (x, w, b, 1e-5), "add_rms_norm": (x, r, w, 1e-6)}[op]
    for name in (op, f"{op}_train"):
        opcheck(getattr(torch.ops.gluon_lab, name).default, (*args, "gluon-regs"),
                test_utils=("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic"))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("op", ["rms_norm", "layer_norm", "add_rms_norm"])
@pytest.mark.parametrize("M,N", [(1, 4096), (7, 1000), (1027, 2880), (333, 5120), (3, 24576)])
def test_the_training_forward_saves_float64_statistics_and_the_inference_output(op, dtype, M, N):
    """gluon_lab::<op>_train (gluon-regs): y (and s) equal to the inference gluon-regs's and to float64, the fp32 mean /
    rstd per row equal to float64's; its outputs are poisoned first (fresh buffers each call: NaN never passes)."""
    from gluon_lab import specs
    from gluon_lab.specs import norm_grad
    spec = specs.get(op)
    dt = bench.torch_dtype(dtype)
    x, r = _leaf(M, N, seed=7).detach().to(dt), _leaf(M, N, seed=8).detach().to(dt)
    w, b = _leaf(N, seed=9, offset=1.0).detach().to(dt), _leaf(N, seed=10).detach().to(dt)
    ins = {"rms_norm": (x, w), "layer_norm": (x, w, b), "add_rms_norm": (x, r, w)}[op]
    eps = spec.scalars["eps"]
    poison = torch.full((64 << 20, ), float("nan"), device="cuda")  # NaN in the memory the outputs will reuse
    del poison
    outs = getattr(torch.ops.gluon_lab, f"{op}_train")(*ins, eps, "gluon-regs")
    plain = getattr(gll, op)(*ins, variant="gluon-regs")
    plain = plain if isinstance(plain, tuple) else (plain, )
    ref = spec.reference(*(t.double() for t in ins), **spec.scalars)
    ref = ref if isinstance(ref, tuple) else (ref, )
    for o, p, rf in zip(outs, plain, ref):
        torch.testing.assert_close(o, p)  # the inference gluon-regs's output (LayerNorm may differ in the last bit)
        res = bench.compare(o, rf, dtype)  # float64, the lab's element and norm tests (NaN fails)
        assert res["passed"], res
    stats = outs[len(plain):]
    s = (x + r) if op == "add_rms_norm" else x
    want = norm_grad._rows_stats(s, "layer" if op == "layer_norm" else "rms", eps)
    assert len(stats) == len(want)
    for got, ref in zip(stats, want):
        assert got.dtype == torch.float32 and got.shape == x.shape[:-1] and not got.isnan().any()
        torch.testing.assert_close(got.double(), ref.double(), atol=1e-5, rtol=2e-5)


def test_loss_backward_hands_the_saved_statistics_to_the_gluon_backward():
    from gluon_lab.kernels import norm_backward
    seen = []
    real = norm_backward.launch
    norm_backward.launch = lambda *a, **k: seen.append((a[0], k.get("mean") is not None,
                                                        k.get("rstd") is not None)) or real(*a, **k)
    try:
        x, w, b = _leaf(300, 2880, seed=5), _leaf(2880, seed=6, offset=1.0), _leaf(2880, seed=7)
        # gluon-regs forwards: their training forwards, whose backward runs the same variant on the saved statistics
        gll.layer_norm(gll.rms_norm(x, w, variant="gluon-regs"), w, b, variant="gluon-regs").float().pow(2).mean().backward()
    finally:
        norm_backward.launch = real
    assert seen == [("layer", True, True), ("rms", False, True)]


def test_a_compiled_training_step_with_the_rewrite_runs_gluon_lab_both_ways():
    """nn.RMSNorm / nn.LayerNorm of a model compiled with gluon_lab.inductor.options(): the training rewrite
    puts the training forwards and the backward ops in the code, and the gradients equal eager's (bf16)."""
    import torch._inductor.utils as iu
    import gluon_lab.inductor as gli
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.RMSNorm(2880), torch.nn.Linear(2880, 2880), torch.nn.LayerNorm(2880)).cuda().to(
        torch.bfloat16)
    x = torch.randn(1000, 2880, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    torch._dynamo.reset()
    fn = torch.compile(lambda x: m(x).float().pow(2).mean(), fullgraph=True, options=gli.options())
    _, codes = iu.run_and_get_code(lambda: fn(x).backward())  # the backward graph compiles at the first backward
    codes = "\n".join(codes)
    for name in ("rms_norm_train", "layer_norm_train", "rms_norm_backward", "layer_norm_backward"):
        assert f"gluon_lab.{name}.default" in codes, name
    grads = [t.grad.float().clone() for t in (x, *m.parameters())]
    for t in (x, *m.parameters()):
        t.grad = None
    m(x).float().pow(2).mean().backward()
    for g, t in zip(grads, (x, *m.parameters())):
        torch.testing.assert_close(g, t.grad.float(), atol=3e-2, rtol=3e-2)


def test_compiled_training_step_traces_both_directions_as_custom_ops():
    from torch._dynamo.testing import CompileCounterWithBackend
    import torch._inductor.utils as iu

    def step(x, w, b):
        h = gll.rms_norm(x, w, variant="gluon-regs")
        return gll.layer_norm(h, w, b, variant="gluon-regs").float().pow(2).mean()

    x, w, b = _leaf(512, 4096, seed=1), _leaf(4096, seed=2, offset=1.0), _leaf(4096, seed=3)
    cnt = CompileCounterWithBackend("inductor")
    fn = torch.compile(step, fullgraph=True, backend=cnt)
    def fwd_bwd():  # AOT autograd compiles the backward graph at the first backward: both inside the capture
        loss = fn(x, w, b)
        loss.backward()
        return loss

    loss, codes = iu.run_and_get_code(fwd_bwd)
    codes = "\n".join(codes)
    assert cnt.frame_count == 1
    for name in ("rms_norm_train", "layer_norm_train", "rms_norm_backward", "layer_norm_backward"):
        assert f"gluon_lab.{name}.default" in codes, name  # the training forwards, their statistics to the backward
    grads = [t.grad.clone() for t in (x, w, b)]
    for t in (x, w, b):
        t.grad = None
    step(x, w, b).backward()  # eager, the same ops
    for g, t in zip(grads, (x, w, b)):
        torch.testing.assert_close(g.float(), t.grad.float(), atol=2e-2, rtol=2e-2)



@pytest.mark.parametrize("op,M,N", [("rms_norm_backward", 1027, 4096), ("layer_norm_backward", 2000, 14336)])
def test_the_instrumented_backward_computes_the_same_bits_and_stamps_every_tile(op, M, N):
    """INSTRUMENT=True: the same dx / dw (/ db) bits as the plain build, one row of three ordered %globaltimer stamps
    per row tile a program ran, and one end row per program after its last tile (backward_plan.capture_timeline)."""
    from gluon_lab.kernels import norm_backward as B
    from gluon_lab.kernels.pipelined import TRACE_CTAS, TRACE_ITERS
    v = registry.get_variant(op, "gluon-regs")
    inputs = bench.make_inputs(op, {"M": M, "N": N}, "bfloat16", seed=3)
    eps = v.spec.scalars["eps"]
    trace = torch.zeros(TRACE_CTAS * TRACE_ITERS * 3, dtype=torch.int64, device="cuda")
    got = v.fn(*inputs, eps=eps, trace=trace)
    want = v.fn(*inputs, eps=eps)
    for g, w in zip(got, want):
        assert torch.equal(g, w)
    cfg = v.resolve({"M": M, "N": N}, "bfloat16", {})
    G = B.grid_size(M, cfg, B._sms(torch.device("cuda")))
    t = trace.view(TRACE_CTAS, TRACE_ITERS, 3).cpu()
    tiles = -(-M // cfg.rows)
    assert int((t > 0).all(-1).sum()) == tiles + G  # every tile once, and every program's end
    for p in range(G):
        rows = t[p][(t[p] > 0).all(-1)]
        assert (rows[:, 1:] >= rows[:, :-1]).all() and (rows[1:, 0] >= rows[:-1, 2]).all()


def test_capture_timeline_times_the_reduce_beside_the_op():
    from gluon_lab.backward_plan import capture_timeline
    tl = capture_timeline(shapes=(("layer_norm_backward", 2048, 4096), ))
    t = tl["timelines"]["layer_norm_backward 2048x4096"]
    assert 0 < t["reduce_us"] < t["op_us"] and len(t["ns"]) == t["G"]
    assert all(len(p) >= 2 and all(len(r) == 3 for r in p) for p in t["ns"])


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("M,N,knobs", [(1027, 2880, {}), (333, 5120, {"partials": 1}), (4099, 1536, {"ctas_per_sm": 4}),
                                       (70, 12288, {"num_warps": 16, "ctas_per_sm": 1})])
def test_prefetch_changes_when_a_tile_arrives_not_the_bits(op, M, N, knobs):
    """prefetch=True (the next tile's loads in flight while this one computes) and False: the same dx / dw (/ db)
    bits, both against float64."""
    v = registry.get_variant(op, "gluon-regs")
    inputs = bench.make_inputs(op, {"M": M, "N": N}, "bfloat16", seed=M)
    eps = v.spec.scalars["eps"]
    cfgs = [v.resolve({"M": M, "N": N}, "bfloat16", {**knobs, "prefetch": p}) for p in (False, True)]
    outs = [v.fn(*inputs, eps=eps, config=c) for c in cfgs]
    for a, b in zip(*outs):
        assert torch.equal(a, b)
    res = bench.check_correctness(op, "gluon-regs", inputs, config=cfgs[1])  # poisoned outputs, float64
    assert res["passed"], res
