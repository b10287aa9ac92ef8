"""gluon-ws norms on the H200 (marked gpu): every op x dtype x N (odd and power-of-2) x ragged M,
the knobs the 04 sweeps use, the per-partition timeline stamps, against float64."""
import pytest

pytestmark = pytest.mark.gpu
OPS = ("rms_norm", "layer_norm", "l2_norm", "add_rms_norm")
CASES = [(op, dt, N, M) for op in OPS for dt in ("bfloat16", "float16", "float32")
         for N in (1000, 4096, 5120, 14336) for M in (1, 3, 1001, 5000)]


@pytest.mark.parametrize("op,dtype,N,M", CASES, ids=str)
def test_matches_float64(op, dtype, N, M):
    from gluon_lab import bench
    inputs = bench.make_inputs(op, {"M": M, "N": N}, dtype, seed=N + M + 7)
    res = bench.check_correctness(op, "gluon-ws", inputs)
    assert res["passed"], res


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("stages,rows,ctas,regs,warps", [(2, 1, 1, 24, 4), (3, 2, 1, 40, 8), (4, 1, 2, 24, 8),
                                                          (2, 4, 1, 56, 4), (3, 1, 3, 24, 4)], ids=str)
def test_knobs(op, stages, rows, ctas, regs, warps):
    from gluon_lab import bench
    from gluon_lab.kernels import warp_specialized as W
    try:
        cfg = W.WsNormConfig.heuristic(op, 5120, "bfloat16", 3001, num_stages=stages, rows=rows, ctas_per_sm=ctas,
                                       producer_regs=regs, num_warps=warps)
    except ValueError:
        pytest.skip("does not fit in shared memory")
    inputs = bench.make_inputs(op, {"M": 3001, "N": 5120}, "bfloat16", seed=stages * 10 + rows)
    res = bench.check_correctness(op, "gluon-ws", inputs, config=cfg)
    assert res["passed"], (cfg, res)


@pytest.mark.parametrize("schedule", ["static", "dynamic"])
def test_partition_timeline_stamps(schedule):
    """Every CTA stamps the blocks it ran (a prefix of its rows; static: exactly its round-robin share; both:
    all blocks once in total), each block's partition stamps in order."""
    import torch
    from gluon_lab import bench
    from gluon_lab.kernels import warp_specialized as W
    from gluon_lab.kernels.pipelined import TRACE_CTAS, TRACE_ITERS
    M, N = 4096, 8192  # ~31 blocks per CTA: a dynamic CTA that takes more still stays under TRACE_ITERS
    x, w = bench.make_inputs("rms_norm", {"M": M, "N": N}, "bfloat16", seed=1)
    cfg = W.WsNormConfig.heuristic("rms_norm", N, "bfloat16", M, schedule=schedule)
    trace = torch.zeros(TRACE_CTAS * TRACE_ITERS * W.TRACE_FIELDS, dtype=torch.int64, device="cuda")
    y = W.launch_norm("rms_norm", x, None, w, None, 1e-6, config=cfg, trace=trace)
    torch.cuda.synchronize()
    t = trace.view(TRACE_CTAS, TRACE_ITERS, W.TRACE_FIELDS).cpu()
    n_blocks = -(-M // cfg.rows)
    grid = min(n_blocks, cfg.ctas_per_sm * torch.cuda.get_device_properties(0).multi_processor_count)
    total = 0
    for p in range(min(TRACE_CTAS, grid)):
        full = (t[p] > 0).all(-1)
        n = int(full.sum())
        assert full[:n].all() and (t[p, n:, 2:] == 0).all(), (p, n)  # a prefix (the end marker: producer stamps only)
        if schedule == "static":
            assert n == min(TRACE_ITERS, (n_blocks - p + grid - 1) // grid), (p, n)
        assert n < TRACE_ITERS
        total += n
        assert (t[p, :n, 0] <= t[p, :n, 1]).all() and (t[p, :n, 2] <= t[p, :n, 3]).all()
        assert (t[p, :n, 3] <= t[p, :n, 4]).all()
        assert (t[p, :n, 1] <= t[p, :n, 3] + 50_000).all()  # copies issued before the data is consumed (+ clock skew)
    assert total == n_blocks
    assert bench.compare(y, bench.reference_outputs("rms_norm", (x, w)), "bfloat16")["passed"]
