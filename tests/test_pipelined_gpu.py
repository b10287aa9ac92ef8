"""gluon-pipelined norms on the H200 (marked gpu): every op x dtype x N (odd and power-of-2) x ragged
M, every NUM_STAGES the sweep uses (1..4), rows per slot and grid sizes, against float64."""
import pytest

pytestmark = pytest.mark.gpu
OPS = ("rms_norm", "layer_norm", "l2_norm", "add_rms_norm")
CASES = [(op, dt, N, M) for op in OPS for dt in ("bfloat16", "float16", "float32")
         for N in (1000, 4096, 5120, 14336) for M in (1, 3, 1001, 5000)]


@pytest.mark.parametrize("op,dtype,N,M", CASES, ids=str)
def test_matches_float64(op, dtype, N, M):
    from gluon_lab import bench
    inputs = bench.make_inputs(op, {"M": M, "N": N}, dtype, seed=N + M)
    res = bench.check_correctness(op, "gluon-pipelined", inputs)
    assert res["passed"], res


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("stages", [1, 2, 3, 4])
@pytest.mark.parametrize("rows,ctas", [(1, 1), (2, 2), (4, 1)])
def test_knobs(op, stages, rows, ctas):
    from gluon_lab import bench
    from gluon_lab.kernels import pipelined as P
    N = 5120
    try:
        cfg = P.PipeConfig.heuristic(op, N, "bfloat16", num_stages=stages, rows=rows, ctas_per_sm=ctas)
    except ValueError:
        pytest.skip("does not fit in shared memory")
    inputs = bench.make_inputs(op, {"M": 3001, "N": N}, "bfloat16", seed=stages * 10 + rows)
    res = bench.check_correctness(op, "gluon-pipelined", inputs, config=cfg)
    assert res["passed"], (cfg, res)


@pytest.mark.parametrize("stages", [1, 3])
def test_timeline_stamps_are_ordered(stages):
    import torch
    from gluon_lab import bench
    from gluon_lab.kernels import pipelined as P
    x, w = bench.make_inputs("rms_norm", {"M": 8192, "N": 8192}, "bfloat16", seed=1)
    cfg = P.PipeConfig.heuristic("rms_norm", 8192, "bfloat16", num_stages=stages)
    trace = torch.zeros(P.TRACE_CTAS * P.TRACE_ITERS * 3, dtype=torch.int64, device="cuda")
    y = P.launch("rms_norm", x, None, w, None, 1e-6, config=cfg, trace=trace)
    torch.cuda.synchronize()
    t = trace.view(P.TRACE_CTAS, P.TRACE_ITERS, 3).cpu()
    # program p walks blocks p, p + grid, ...: it stamps min(its block count, TRACE_ITERS) rows, the rest stay 0
    n_blocks = -(-8192 // cfg.rows)
    grid = min(n_blocks, cfg.ctas_per_sm * torch.cuda.get_device_properties(0).multi_processor_count)
    for p in range(min(P.TRACE_CTAS, grid)):
        n = min(P.TRACE_ITERS, (n_blocks - p + grid - 1) // grid)
        assert n >= 2 and (t[p, :n] > 0).all() and (t[p, n:] == 0).all(), (p, n, t[p])
        assert (t[p, :n, 0] <= t[p, :n, 1]).all() and (t[p, :n, 1] <= t[p, :n, 2]).all()
        assert (t[p, 1:n, 0] >= t[p, :n - 1, 2]).all()  # blocks run in order
    assert bench.compare(y, bench.reference_outputs("rms_norm", (x, w)), "bfloat16")["passed"]


DYN_CASES = [(v, op, dt, N, M) for v in ("gluon-pipelined", "gluon-ws") for op in OPS for dt in ("bfloat16", "float32")
             for N in (1000, 5120) for M in (1, 3, 1001, 5000)]


@pytest.mark.parametrize("variant,op,dtype,N,M", DYN_CASES, ids=str)
def test_dynamic_schedule_matches_float64_and_resets_its_counter(variant, op, dtype, N, M):
    """schedule='dynamic' (row blocks from the atomic counter) on every row norm, ragged M (fewer blocks than
    CTAs too), outputs poisoned: every block is normalized once; the launch leaves its counter at 0."""
    import torch
    from gluon_lab import bench, registry
    from gluon_lab.kernels import pipelined as P
    v = registry.get_variant(op, variant)
    cfg = v.resolve({"M": M, "N": N}, dtype, {"schedule": "dynamic"})
    for seed in (1, 2):  # twice: the second launch starts from the counter the first one reset
        inputs = bench.make_inputs(op, {"M": M, "N": N}, dtype, seed=seed + N + M)
        res = bench.check_correctness(op, variant, inputs, config=cfg)
        assert res["passed"], (cfg, res)
        torch.cuda.synchronize()
        assert P.block_counter(inputs[0].device).item() == 0


@pytest.mark.parametrize("variant", ["gluon-pipelined", "gluon-ws"])
@pytest.mark.parametrize("stages", [2, 3, 4])
def test_dynamic_schedule_stages_graphs_and_fast_path(variant, stages):
    """Every ring depth; a CUDA graph replayed 5 times (the counter resets inside each replay); the fast path
    plans a dynamic launch (the pinned counter is a constant) and its replay equals the full path bit for bit."""
    import torch
    import gluon_lab as gll
    from gluon_lab import api, bench, fastpath, registry, specs
    M, N = 4099, 4096
    v = registry.get_variant("rms_norm", variant)
    cfg = v.resolve({"M": M, "N": N}, "bfloat16", {"schedule": "dynamic", "num_stages": stages})
    x, w = bench.make_inputs("rms_norm", {"M": M, "N": N}, "bfloat16", seed=stages)
    ref = bench.reference_outputs("rms_norm", (x, w))
    side = torch.cuda.Stream()  # the capture stream: its block counter exists before the capture (warm-up)
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = v.fn(x, w, eps=1e-6, config=cfg)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=side):
        y = v.fn(x, w, eps=1e-6, config=cfg)
    for _ in range(5):
        y.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        assert bench.compare(y, ref, "bfloat16")["passed"]
    if stages == 3:  # through the public API with the heuristic made dynamic: a launches plan, replayed
        import dataclasses
        from gluon_lab.kernels import pipelined as P, warp_specialized as W
        spec = specs.get("rms_norm")
        cls = P.PipeConfig if variant == "gluon-pipelined" else W.WsNormConfig
        orig = cls.heuristic
        fastpath.clear()
        # the recorded call is the first on its stream whatever ran before (test order, xdist): it zeroes the
        # stream's counter inside the recording, which must still give a launches plan (the pinned counter is
        # resolved per replay). It used to give a direct plan whenever no earlier test had made this
        # stream's counter: [3-gluon-pipelined] failed, [3-gluon-ws] (after it, same counter) passed.
        torch.cuda.synchronize()
        P._COUNTERS.by_key.pop((x.device.index, torch.cuda.current_stream(x.device).cuda_stream), None)
        try:
            cls.heuristic = classmethod(lambda c, *a, **k: dataclasses.replace(orig(*a, **k), schedule="dynamic"))
            first = gll.rms_norm(x, w, variant=variant)
            plan = fastpath.plan_of("rms_norm", x, w, variant=variant)
            assert plan is not None and plan.kind == "launches", (plan, fastpath.stats().get("last_unplannable"))
            x2, w2 = bench.make_inputs("rms_norm", {"M": M, "N": N}, "bfloat16", seed=99)
            got = gll.rms_norm(x2, w2, variant=variant)
            want = api.slow_call(spec, (x2, w2), dict(spec.scalars), variant)
            torch.cuda.synchronize()
            assert torch.equal(got, want) and not torch.isnan(got).any() and first.shape == got.shape
            assert P.block_counter(x.device).item() == 0
        finally:
            cls.heuristic = orig
            fastpath.clear()


def test_dynamic_counter_per_stream_in_plans_and_refused_inside_a_fresh_capture(monkeypatch):
    """The dynamic schedule's counter belongs to a stream: a fast-path plan recorded on one stream and replayed
    on two others at once takes each stream's own counter (both outputs right, every counter back at 0); a
    capture on a stream that has no counter yet is refused with the rule, not run on an unzeroed counter."""
    import dataclasses
    import torch
    import gluon_lab as gll
    from gluon_lab import bench, fastpath
    from gluon_lab.kernels import warp_specialized as W, pipelined as P
    orig = W.WsNormConfig.heuristic
    monkeypatch.setattr(W.WsNormConfig, "heuristic",
                        classmethod(lambda c, *a, **k: dataclasses.replace(orig(*a, **k), schedule="dynamic")))
    fastpath.clear()
    M, N = 8192, 4096
    x, w = bench.make_inputs("rms_norm", {"M": M, "N": N}, "bfloat16", seed=3)
    ref = bench.reference_outputs("rms_norm", (x, w))
    gll.rms_norm(x, w, variant="gluon-ws")  # records the plan on the default stream
    assert fastpath.plan_of("rms_norm", x, w, variant="gluon-ws").kind == "launches"
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    for s in (s1, s2):  # each stream's counter made eagerly
        with torch.cuda.stream(s):
            P.block_counter(x.device)
    torch.cuda.synchronize()
    outs = []
    for s in (s1, s2):
        with torch.cuda.stream(s):
            outs.append(gll.rms_norm(x, w, variant="gluon-ws"))  # replays, concurrently
    torch.cuda.synchronize()
    for y in outs:
        assert bench.compare(y, ref, "bfloat16")["passed"]
    for s in (s1, s2):
        with torch.cuda.stream(s):
            assert P.block_counter(x.device).item() == 0
    fresh = torch.cuda.Stream()
    g = torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="needs its block counter for this stream before a CUDA-graph capture"):
        with torch.cuda.graph(g, stream=fresh):
            W.launch_norm("rms_norm", x, None, w, None, 1e-6, config=dataclasses.replace(
                orig("rms_norm", N, "bfloat16", M), schedule="dynamic"))
    fastpath.clear()
