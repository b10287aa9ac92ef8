"""Checks every register/TMA row-norm variant's GPU tests share (called with the variant and its sizes),
through the public API or bench.check_correctness."""


def large_magnitude_fp16_rows(op: str, variant: str, N: int) -> None:
    """|x| ~ 1e4 in fp16: the sum of squares overflows fp16 but not the fp32 accumulation."""
    from gluon_lab import bench
    inputs = bench.make_inputs(op, {"M": 257, "N": N}, "float16", seed=11, scale=1e4)
    res = bench.check_correctness(op, variant, inputs)
    assert res["passed"], res


def nan_inf_propagate_like_torch(op: str, variant: str, N: int) -> None:
    import torch
    import gluon_lab as gll
    from gluon_lab import bench
    inputs = list(bench.make_inputs(op, {"M": 8, "N": N}, "bfloat16", seed=2))
    inputs[0][2, 5] = float("nan")
    inputs[0][5, 7] = float("inf")
    fn = getattr(gll, op)
    got = fn(*inputs, variant=variant)
    ref = fn(*inputs, variant="torch")
    got, ref = (got if isinstance(got, tuple) else (got, )), (ref if isinstance(ref, tuple) else (ref, ))
    for g, r in zip(got, ref):
        assert torch.equal(torch.isnan(g), torch.isnan(r)), op
        assert torch.equal(torch.isinf(g), torch.isinf(r)), op


def leading_dims_and_strided_rows(variant: str, N: int) -> None:
    """[4, 6, N] input rows, then rows of 2048 with a row stride of 3072 elements (16-byte multiple, not
    contiguous: the kernel takes the stride)."""
    import torch
    import gluon_lab as gll
    x = torch.randn(4, 6, N, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(N, device="cuda", dtype=torch.bfloat16)
    torch.testing.assert_close(gll.rms_norm(x, w, variant=variant), gll.rms_norm(x, w, variant="torch"),
                               atol=2e-2, rtol=2e-2)
    big = torch.randn(300, 3072, device="cuda", dtype=torch.bfloat16)
    xs = big[:, :2048]
    ws = w if N == 2048 else torch.randn(2048, device="cuda", dtype=torch.bfloat16)
    torch.testing.assert_close(gll.rms_norm(xs, ws, variant=variant), gll.rms_norm(xs, ws, variant="torch"),
                               atol=2e-2, rtol=2e-2)
