"""Every public op is a torch.library custom op (gluon_lab.library): schema and fake kernel pass
torch.library.opcheck on CPU, torch.compile(fullgraph=True) traces the front door with zero graph
breaks into one custom-op node, bad input keeps its clear error through the op, and the autograd
registration refuses a backward by name. The H200 test runs opcheck on the Gluon kernels."""
import pytest
import torch
from torch.library import opcheck

import gluon_lab as gll
from gluon_lab import library, specs


def _g():
    return torch.Generator().manual_seed(11)


def _cases(device="cpu", dtype=torch.float32, variant="torch"):
    g = _g()
    r = lambda *s: torch.randn(*s, generator=g).to(device=device, dtype=dtype)  # noqa: E731
    M, N = 37, 5120 if device == "cuda" else 96  # odd M: a ragged tail of rows
    return {
        "rms_norm": (r(M, N), r(N), 1e-6, variant),
        "layer_norm": (r(M, N), r(N), r(N), 1e-5, variant),
        "l2_norm": (r(M, N), 1e-12, variant),
        "add_rms_norm": (r(M, N), r(M, N), r(N), 1e-6, variant),
        "group_norm": (r(3, 32, 5, 7) if device == "cpu" else r(3, 32, 8, 24), 8, r(32), r(32), 1e-5, variant),
        "instance_norm": (r(3, 32, 5, 7), None, None, 1e-5, variant),
        "matmul": (r(48, 64).to(torch.bfloat16), r(64, 40).to(torch.bfloat16), "torch" if device == "cpu" else variant),
    }


def test_every_spec_has_a_custom_op_with_its_schema():
    for s in specs.all_specs():
        op = library.op(s.name, None)
        assert str(op.default._schema).startswith(f"gluon_lab::{s.name}(")
    assert library.schema(specs.get("group_norm")) == \
        "group_norm(Tensor x, SymInt num_groups, Tensor? weight, Tensor? bias, float eps, str variant) -> Tensor"
    assert library.schema(specs.get("add_rms_norm")).endswith("-> (Tensor, Tensor)")


@pytest.mark.parametrize("name", sorted(_cases()))
def test_opcheck_on_cpu(name):
    opcheck(getattr(torch.ops.gluon_lab, name).default, _cases()[name])


@pytest.mark.parametrize("name", sorted(_cases()))
def test_custom_op_equals_the_front_door(name):
    args = _cases()[name]
    got = getattr(torch.ops.gluon_lab, name)(*args)
    n = len(specs.get(name).inputs)
    want = getattr(gll, name)(*args[:n], **dict(zip(specs.get(name).scalars, args[n:-1])), variant=args[-1])
    torch.testing.assert_close(got, want)


def test_fullgraph_compile_has_no_graph_break_and_one_op_node():
    x, w, r = torch.randn(9, 96), torch.rand(96), torch.randn(9, 96)

    def block(x, r, w):
        y, s = gll.add_rms_norm(x, r, w)
        return gll.rms_norm(s, w) * 2 + y

    ex = torch._dynamo.explain(block)(x, r, w)
    assert ex.graph_break_count == 0 and ex.graph_count == 1
    nodes = [n.target for g in ex.graphs for n in g.graph.nodes if n.op == "call_function"]
    assert nodes.count(torch.ops.gluon_lab.add_rms_norm.default) + nodes.count(torch.ops.gluon_lab.add_rms_norm) == 1
    assert nodes.count(torch.ops.gluon_lab.rms_norm.default) + nodes.count(torch.ops.gluon_lab.rms_norm) == 1
    got = torch.compile(block, fullgraph=True, backend="aot_eager")(x, r, w)
    torch.testing.assert_close(got, block(x, r, w))


def test_bad_input_keeps_its_clear_error_through_the_op():
    with pytest.raises(ValueError, match="weight"):
        torch.ops.gluon_lab.rms_norm(torch.randn(4, 64), torch.randn(32), 1e-6, "torch")
    with pytest.raises(ValueError, match="residual is required"):
        gll.add_rms_norm(torch.randn(4, 64), None, torch.randn(64))
    with pytest.raises(ValueError, match="b must be on a's device"):
        torch.ops.gluon_lab.matmul(torch.randn(4, 8, dtype=torch.bfloat16),
                                   torch.randn(8, 4, dtype=torch.bfloat16, device="meta"), "torch")
    with pytest.raises(Exception, match="weight"):  # while compiling: the fake kernel validates too
        torch.compile(lambda x, w: gll.rms_norm(x, w), fullgraph=True, backend="eager")(torch.randn(4, 64), torch.randn(32))


def test_the_autograd_registration_refuses_a_backward_by_name():
    x = torch.randn(4, 64, requires_grad=True)
    y = torch.ops.gluon_lab.l2_norm(x, 1e-12, "torch")  # l2_norm has no backward op
    with pytest.raises(NotImplementedError, match="gluon_lab::l2_norm has no backward kernel yet"):
        y.sum().backward()


@pytest.mark.parametrize("name", ["rms_norm", "layer_norm", "add_rms_norm"])
def test_the_norms_custom_ops_differentiate_through_their_backward_ops(name):
    """register_autograd: the custom op's gradient (its backward op's torch variant on the CPU) equals torch's
    autograd of the eager formula (fp32), for x, the weight (and bias; add+RMSNorm: residual too)."""
    g = _g()
    x = torch.randn(5, 72, generator=g)
    r = torch.randn(5, 72, generator=g)
    w = torch.rand(72, generator=g) + 0.5
    b = torch.randn(72, generator=g)
    ins = {"rms_norm": (x, w), "layer_norm": (x, w, b), "add_rms_norm": (x, r, w)}[name]
    spec = specs.get(name)
    mine = [t.clone().requires_grad_() for t in ins]
    theirs = [t.clone().requires_grad_() for t in ins]
    out = getattr(torch.ops.gluon_lab, name)(*mine, *spec.scalars.values(), "torch")
    ref = spec.eager(*theirs, **spec.scalars)
    outs, refs = (out, ref) if isinstance(out, tuple) else ((out, ), (ref, ))
    dys = [torch.randn_like(o) for o in outs]
    torch.autograd.backward(outs, dys)
    torch.autograd.backward(refs, dys)
    for a, b_ in zip(mine, theirs):
        torch.testing.assert_close(a.grad, b_.grad, atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("name", ["rms_norm", "layer_norm"])
def test_a_double_backward_matches_torch(name):
    """create_graph=True: the backward is torch's formula on the saved tensors, so second derivatives (a
    gradient penalty) equal torch's."""
    import torch.nn.functional as F
    g = _g()
    x = torch.randn(4, 32, generator=g)
    w = torch.rand(32, generator=g) + 0.5
    b = torch.randn(32, generator=g)
    res = []
    for ours in (True, False):
        a = [t.clone().requires_grad_() for t in ((x, w, b) if name == "layer_norm" else (x, w))]
        if ours:
            y = getattr(gll, name)(*a)
        else:
            y = F.layer_norm(a[0], (32, ), a[1], a[2], 1e-5) if name == "layer_norm" else F.rms_norm(a[0], (32, ), a[1], 1e-6)
        gr = torch.autograd.grad(y.pow(2).sum(), a, create_graph=True)
        res.append(torch.autograd.grad(sum(t.pow(2).sum() for t in gr), a))
    for u, v in zip(*res):
        torch.testing.assert_close(u, v, atol=1e-4, rtol=1e-4)


def test_add_rms_norm_refuses_a_double_backward_by_name():
    x, r, w = (torch.randn(4, 64, requires_grad=True), torch.randn(4, 64, requires_grad=True),
               torch.rand(64, requires_grad=True))
    y, s = gll.add_rms_norm(x, r, w)
    with pytest.raises(NotImplementedError, match="gluon_lab::add_rms_norm has no double backward"):
        torch.autograd.grad(y.pow(2).sum(), (x, ), create_graph=True)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["rms_norm", "layer_norm", "add_rms_norm", "l2_norm", "group_norm", "matmul"])
def test_opcheck_on_the_gpu_with_gluon_kernels(name):
    args = _cases("cuda", torch.bfloat16, "gluon-chunked" if name != "matmul" else "gluon-pipelined")[name]
    if name == "matmul":
        g = _g()
        args = (torch.randn(256, 512, generator=g).cuda().bfloat16(), torch.randn(512, 384, generator=g).cuda().bfloat16(),
                "gluon-pipelined")
    opcheck(getattr(torch.ops.gluon_lab, name).default, args)


@pytest.mark.gpu
def test_cuda_graph_capture_of_the_custom_op():
    x = torch.randn(64, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.rand(4096, device="cuda", dtype=torch.bfloat16)
    want = torch.ops.gluon_lab.rms_norm(x, w, 1e-6, "gluon-tma")
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = torch.ops.gluon_lab.rms_norm(x, w, 1e-6, "gluon-tma")
    x.copy_(torch.randn_like(x))
    g.replay()
    torch.testing.assert_close(y, torch.ops.gluon_lab.rms_norm(x, w, 1e-6, "torch"), atol=2e-2, rtol=2e-2)
    assert not torch.equal(y, want)
