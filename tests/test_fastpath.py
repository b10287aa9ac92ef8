"""The host fast path's rules on a CPU machine (gluon_lab.fastpath): what the call signature holds,
that a plan is kept only for a call that passed every check, that a bad call fails the same way
every time, that a planned call returns what the full path returns, that unaligned operands and
empty inputs never replay, and what the recorder counts as "only allocations and views". The
launch replay itself needs the GPU: tests/test_fastpath_gpu.py."""
import pytest
import torch

import gluon_lab as gll
from gluon_lab import api, fastpath, specs

RMS = specs.get("rms_norm")


@pytest.fixture(autouse=True)
def _fresh():
    fastpath.clear()
    fastpath.enabled = True
    yield
    fastpath.enabled = True


def _key(*inputs, variant="auto", **scalars):
    return fastpath.signature(RMS, inputs, {"eps": 1e-6, **scalars}, variant)


def test_signature_holds_what_decisions_depend_on():
    x, w = torch.randn(8, 64), torch.randn(64)
    base = _key(x, w)
    assert base == _key(torch.randn(8, 64), torch.randn(64))  # new data, same signature
    different = [
        _key(torch.randn(8, 128)[:, :64], w),  # strides
        _key(x.double(), w),  # dtype
        _key(torch.randn(9, 64), w),  # shape
        _key(x.clone().requires_grad_(), w),  # requires_grad
        _key(x, w, variant="torch"),  # variant
        _key(x, w, eps=1e-5),  # scalar value
        _key(x, w, eps=1),  # scalar type (1 vs 1.0 validate the same, but are kept apart)
        _key(torch.nn.Parameter(x), w),  # tensor type
    ]
    assert all(k != base for k in different) and len(set(different)) == len(different)
    with torch.no_grad():
        assert _key(x, w) != base  # grad mode
    assert fastpath.signature(RMS, ([1], w), {"eps": 1e-6}, "auto") is None  # unhashable: the full path


def test_planned_call_returns_the_full_paths_result_in_fresh_memory():
    x, w = torch.randn(8, 64), torch.randn(64)
    y1 = gll.rms_norm(x, w)
    plan = fastpath.plan_of("rms_norm", x, w)
    assert plan is not None and plan.kind == "direct" and plan.variant == "torch"  # CPU: auto -> torch
    hits = fastpath.stats()["hits"]
    x2 = torch.randn(8, 64)
    y2 = gll.rms_norm(x2, w)
    assert fastpath.stats()["hits"] == hits + 1
    torch.testing.assert_close(y2, api.slow_call(RMS, (x2, w), {"eps": 1e-6}, "auto"), atol=0, rtol=0)
    assert y2.data_ptr() != y1.data_ptr() or y1 is not y2


def test_a_bad_call_is_never_planned_and_fails_the_same_way_every_time():
    x, w = torch.randn(8, 64), torch.randn(32)
    msgs = []
    for _ in range(3):
        with pytest.raises(ValueError) as e:
            gll.rms_norm(x, w)
        msgs.append(str(e.value))
    assert len(set(msgs)) == 1 and "weight must have shape (64,)" in msgs[0]
    assert fastpath.plan_of("rms_norm", x, w) is None
    for _ in range(2):
        with pytest.raises(ValueError, match="eps must be a non-negative number"):
            gll.rms_norm(x, torch.randn(64), eps=-1.0)
        with pytest.raises(ValueError, match="unknown variant 'nope'"):
            gll.rms_norm(x, torch.randn(64), variant="nope")
        with pytest.raises(ValueError, match="runs on a CUDA GPU: x is on cpu"):
            gll.rms_norm(x, torch.randn(64), variant="gluon-tma")
    assert fastpath.stats()["plans"] == 0


def test_grad_rules_survive_planning():
    x, w = torch.randn(8, 64, requires_grad=True), torch.randn(64)
    for _ in range(2):
        y = gll.rms_norm(x, w)  # auto takes torch when grad is needed: a graph, through the plan
        y.sum().backward()
        assert x.grad is not None and torch.isfinite(x.grad).all()
        x.grad = None
    with torch.no_grad():
        assert not gll.rms_norm(x, w).requires_grad


def test_unaligned_operands_never_replay():
    buf = torch.randn(8 * 64 + 1)
    x = buf[1:].view(8, 64)  # 4 bytes off: same signature as an aligned (8, 64)
    w = torch.randn(64)
    gll.rms_norm(torch.randn(8, 64), w)  # plans the signature
    hits = fastpath.stats()["hits"]
    y = gll.rms_norm(x, w)
    assert fastpath.stats()["hits"] == hits
    torch.testing.assert_close(y, torch.nn.functional.rms_norm(x, (64, ), w, 1e-6))


def test_empty_input_is_not_planned():
    x, w = torch.randn(0, 64), torch.randn(64)
    for _ in range(2):
        assert gll.rms_norm(x, w).shape == (0, 64)
    assert fastpath.plan_of("rms_norm", x, w) is None


def test_off_switch_takes_the_full_path():
    x, w = torch.randn(8, 64), torch.randn(64)
    fastpath.enabled = False
    gll.rms_norm(x, w)
    gll.rms_norm(x, w)
    assert fastpath.stats()["plans"] == 0


def test_two_output_op_and_group_norm_plans():
    x, r, w = torch.randn(5, 96), torch.randn(5, 96), torch.randn(96)
    for _ in range(2):
        y, s = gll.add_rms_norm(x, r, w)
    torch.testing.assert_close(s, x + r)
    xg = torch.randn(2, 8, 3, 5)
    for _ in range(2):
        yg = gll.group_norm(xg, 4)
    torch.testing.assert_close(yg, torch.nn.functional.group_norm(xg, 4, eps=1e-5))
    assert fastpath.plan_of("group_norm", xg, 4) is not None
    assert fastpath.plan_of("group_norm", xg, 2) is None  # num_groups is part of the signature


def test_recorder_sees_only_allocations_and_views_as_pure():
    x = torch.randn(4, 6)
    rec = fastpath._Recorder()
    with rec:
        y = torch.empty_like(x)
        torch.empty_strided((4, 6), (6, 1))
        x.view(-1, 3)
        x.t()
        y.view(24)
    assert rec.impure == [] and rec.launches == []
    rec = fastpath._Recorder()
    with rec:
        x + 1
        torch.empty(3).fill_(1.0)
    assert rec.impure == ["add", "fill_"]
    assert fastpath._tls.recorder is None


def test_making_a_pinned_workspace_does_not_make_the_call_impure():
    """The dynamic schedule's block counter is zeroed by the first call on a stream, inside that call's
    recording: a torch op, but of a pinned workspace a replay resolves (fastpath.pin), so the call still
    gets a launches plan (it used to get a direct plan, kept for the signature's lifetime). A zeroed tensor
    that is not pinned stays impure."""
    rec = fastpath._Recorder()
    with rec:
        counter = torch.zeros(1, dtype=torch.int32)
        other = torch.zeros(2)
        torch.empty(3)
    assert rec.impure == ["zeros", "zeros"]
    try:
        fastpath.pin(counter, resolve=lambda: counter)
        assert rec.unpinned_impure() == ["zeros"]  # `other` is not pinned
        fastpath.pin(other, resolve=lambda: other)
        assert rec.unpinned_impure() == []
    finally:
        for t in (counter, other):
            fastpath._pinned.by_ptr.pop(t.data_ptr(), None)
    assert rec.unpinned_impure() == ["zeros", "zeros"]


def test_operand_location_and_aliasing():
    a, b = torch.randn(4, 8), torch.randn(16)
    ops = fastpath._Operands([a, None, b])
    assert ops.locate(a) == (0, 0)
    assert ops.locate(a[1:]) == (0, 8 * 4)
    assert ops.locate(b.view(4, 4)) == (2, 0)
    with pytest.raises(fastpath._Unplannable, match="lies in 0 operands"):
        ops.locate(torch.randn(3))
    with pytest.raises(fastpath._Unplannable, match="lies in 2 operands"):
        fastpath._Operands([a, a.view(-1)]).locate(a)


def test_plan_cache_is_bounded(monkeypatch):
    monkeypatch.setattr(fastpath, "MAX_PLANS", 3)
    w = torch.randn(16)
    for m in range(1, 6):
        gll.rms_norm(torch.randn(m, 16), w)
    assert fastpath.stats()["plans"] <= 3


def test_a_new_selection_table_drops_the_plans(tmp_path):
    from gluon_lab import selection
    x, w = torch.randn(8, 64), torch.randn(64)
    gll.rms_norm(x, w)
    assert fastpath.stats()["plans"] == 1
    selection.write(selection.load_table(), tmp_path / "selection.json")
    assert fastpath.stats()["plans"] == 0


def test_a_workspace_the_call_allocates_becomes_scratch():
    """A tensor the call allocates and does not return is a scratch operand when a kernel uses it (a
    workspace; the GPU test records split-K's): the plan keeps its geometry only and allocates it again at
    every replay, after the outputs. One no kernel uses is dropped."""
    x = torch.randn(4, 8)
    rec = fastpath._Recorder()
    with rec:
        out = torch.empty_like(x)
        work = torch.empty(3, 16)
        work.view(48)
    assert [t.shape for t in rec.allocated] == [x.shape, work.shape]
    plan = fastpath._build_launches(rec, (x, ), (out, ), False)
    assert plan.scratch == () and "0 scratch" in repr(plan)  # no kernel uses it: nothing to allocate
    plan = fastpath._Launches((), (fastpath._Alloc(out, (x, )), ), False, (fastpath._Alloc(work, (x, )), ))
    assert len(plan.scratch) == 1 and plan.scratch[0].shape == (3, 16) and "1 scratch" in repr(plan)
    w1, w2 = plan.scratch[0].new((x, )), plan.scratch[0].new((x, ))
    assert w1.shape == (3, 16) and w1.stride() == (16, 1) and w1.data_ptr() != w2.data_ptr()
    y = plan.run((x, ), fastpath._ptrs((x, )))  # no launches recorded: allocations only
    assert y.shape == x.shape and y is not out
