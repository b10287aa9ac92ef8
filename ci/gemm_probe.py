"""GEMM probe on the H200 (diagnosis, not a record store): why the lab's GEMMs lose on some shapes.

  python3 ci/gemm_probe.py [align] [decode]  > results/h200/gemm-probe.log

align:  the ragged shapes of the 04 'gemm-shapes' sweep, each three ways in one process: contiguous
        (row strides K*2, N*2 bytes: not multiples of 128 B), the same logical shape over row strides
        padded to 64 elements (128 B), and the next 128-multiple shape; gluon-ws tiles and cuBLAS.
        If the padded-stride views are as fast per FLOP as the aligned shape, the loss is alignment
        of TMA rows, not wave quantization.
decode: small-M shapes, swap-AB x split-K combinations beside cuBLAS.
split:  which operand's misaligned rows cost: the same shapes with only A, only B or only C padded.
kernels: the cuBLAS kernel torch.profiler sees for each ragged shape, contiguous and padded.
phases: per-kernel GPU time (torch.profiler, 20 calls) of split-K and stream-K configs: the GEMM kernel and
        its fixup / reduce kernel apart, beside the unsplit config and cuBLAS.
sktrace: the INSTRUMENT build's per-unit %globaltimer stamps of stream-K beside data-parallel: per k-step
        mainloop time of whole tiles and of stream-K pieces, the epilogue of whole tiles (bf16 to C) and of
        partial pieces (fp32 to the workspace), the kernel span.
skprobe: stream-K configs (128x256 and 128x128 tiles) beside the gluon-ws heuristic and cuBLAS on shapes with a
        partial last wave, interleaved rounds like 'order' (and per-kernel phases of the 128x256 ones).
order:  the tile order's GROUP_M (row-tiles per column band) at large square / projection shapes, the default
        gluon-ws tile, timed in interleaved rounds with cuBLAS (ratios per round, medians printed last):
        whether the grouped order is worth retuning, measured above the single-timing noise.
Same timer as the notebooks (bench.time_cudagraph, input copies rotated past 3x L2, outputs kept),
cuBLAS timed in the same process; prints one line per case, the SM clock after each timing.
"""
import sys

import torch

from gluon_lab import bench, device
from gluon_lab.kernels import gemm_ws as ws
from gluon_lab.kernels.gemm import GemmConfig


def operands(M, N, K, pad, seed: int):
    """pad: a bool (all three operands) or a string naming the padded ones ("a", "bc", ...)."""
    pads = "abc" if pad is True else (pad or "")
    up = lambda n, who: (n + 63) // 64 * 64 if who in pads else n  # noqa: E731
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(M, up(K, "a"), device="cuda", dtype=torch.bfloat16, generator=g)[:, :K]
    b = torch.randn(K, up(N, "b"), device="cuda", dtype=torch.bfloat16, generator=g)[:, :N]
    c = torch.empty(M, up(N, "c"), device="cuda", dtype=torch.bfloat16)[:, :N]
    return a, b, c


def timed(M, N, K, pad, fn_of):
    """Median us of fn_of(a, b, c) over rotated operand copies, checked once against fp64."""
    nbytes = 2 * (M * K + K * N + M * N)
    copies = bench.rotation_copies(nbytes)
    ops = [operands(M, N, K, pad, 100 + i) for i in range(copies)]
    a, b, c = ops[0]
    fn_of(a, b, c)
    torch.cuda.synchronize()
    ref = a.double() @ b.double()
    err = ((c.double() - ref).abs().max() / ref.abs().max()).item()
    if not err < 2e-2:
        raise AssertionError(f"{M}x{N}x{K} pad={pad}: rel err {err}")
    calls = [(lambda a=a, b=b, c=c: (fn_of(a, b, c), c)[1]) for a, b, c in ops]
    t = bench.time_cudagraph(calls)
    return 1000 * t.ms_median, device.sm_clock_mhz()


def cublas(a, b, c):
    torch.matmul(a, b, out=c)


def gluon(cfg):
    return lambda a, b, c: ws.launch(a, b, out=c, config=cfg)


def padname(pad):
    return "pad" if pad is True else ("contig" if not pad else f"pad-{pad}")


def row(tag, M, N, K, pad, name, fn):
    try:
        us, mhz = timed(M, N, K, pad, fn)
        tf = 2 * M * N * K / us / 1e6
        print(f"{tag:7s} {M:6d}x{N:<6d}x{K:<6d} {padname(pad):6s} {name:40s} {us:9.1f} us {tf:6.0f} TF/s {mhz} MHz",
              flush=True)
        return us
    except Exception as e:  # noqa: BLE001 - a config that fails is a line, not the end of the probe
        print(f"{tag:7s} {M:6d}x{N:<6d}x{K:<6d} {padname(pad):6s} {name:40s} FAILED {type(e).__name__}: {e}"[:300],
              flush=True)


ALIGN_SHAPES = ((2500, 1736, 4104), (2560, 1792, 4096), (1000, 3000, 2000), (1024, 3072, 2048),
                (777, 5000, 1000), (3000, 1000, 2000))
ALIGN_CFGS = {"ws 128x256 8w s3": GemmConfig(),
              "ws 128x128 8w s5": GemmConfig(BN=128, num_stages=5),
              "ws 128x128 4w s4 pp": GemmConfig(BN=128, num_warps=4, num_stages=4, pingpong=True)}
DECODE_SHAPES = ((16, 6144, 4096), (32, 4096, 14336), (128, 4096, 4096), (128, 6144, 4096), (128, 8192, 8192),
                 (64, 28672, 4096))


def align():
    for (M, N, K) in ALIGN_SHAPES:
        for pad in ((False, True) if (K % 64 or N % 64) else (False, )):
            row("align", M, N, K, pad, "cuBLAS", cublas)
            for name, cfg in ALIGN_CFGS.items():
                row("align", M, N, K, pad, name, gluon(cfg))


def decode():
    for (M, N, K) in DECODE_SHAPES:
        row("decode", M, N, K, False, "cuBLAS", cublas)
        bms = [bm for bm in (16, 32, 64) if bm >= min(M, 64)][:2] if M <= 64 else []
        for bm in bms:
            for bn in (64, 128):
                for sk in (1, 2, 4, 8):
                    cfg = GemmConfig(BM=bm, BN=bn, BK=64, num_warps=4, num_stages=6, swap_ab=True, split_k=sk)
                    row("decode", M, N, K, False, f"ws swap {bm}x{bn} s6 split-K {sk}", gluon(cfg))
        for (bm, bn) in ((64, 64), (64, 128), (128, 128)):
            for sk in (1, 2, 4, 8):
                try:
                    cfg = GemmConfig(BM=bm, BN=bn, BK=64, num_warps=4, num_stages=6 if bn < 128 else 4, split_k=sk).validate()
                except ValueError:
                    continue
                row("decode", M, N, K, False, f"ws {bm}x{bn} 4w split-K {sk}", gluon(cfg))


SPLIT_SHAPES = ((2500, 1736, 4104), (777, 5000, 1000))


def split():
    for (M, N, K) in SPLIT_SHAPES:
        for pad in (False, "a", "b", "c", "ab", True):
            row("split", M, N, K, pad, "cuBLAS", cublas)
            row("split", M, N, K, pad, "ws 128x128 8w s5", gluon(ALIGN_CFGS["ws 128x128 8w s5"]))


def kernels():
    from torch.profiler import ProfilerActivity, profile
    for (M, N, K) in ALIGN_SHAPES:
        for pad in (False, True):
            a, b, c = operands(M, N, K, pad, 1)
            cublas(a, b, c)
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                cublas(a, b, c)
                torch.cuda.synchronize()
            names = sorted({e.name for e in prof.events() if e.device_type.name == "CUDA"})
            print(f"kernel  {M:6d}x{N:<6d}x{K:<6d} {padname(pad):6s} cuBLAS: {' | '.join(names)}"[:400], flush=True)


PHASE_CASES = (((2500, 1736, 4104), ("128x256 8w s3", GemmConfig()),
                 ("128x256 8w s3 stream-K 2", GemmConfig(stream_k=2)),
                 ("128x128 4w s4 stream-K 2", GemmConfig(BN=128, num_warps=4, num_stages=4, stream_k=2))),
               ((777, 5000, 1000), ("128x256 8w s3", GemmConfig()), ("128x256 8w s3 stream-K 2", GemmConfig(stream_k=2))),
               ((128, 6144, 4096), ("128x64 s6", GemmConfig(BN=64, num_warps=4, num_stages=6)),
                 ("128x64 s6 stream-K 1", GemmConfig(BN=64, num_warps=4, num_stages=6, stream_k=1)),
                 ("128x128 4w s4 split-K 4", GemmConfig(BN=128, num_warps=4, num_stages=4, split_k=4))),
               ((1024, 1024, 32768), ("128x128 4w s4", GemmConfig(BN=128, num_warps=4, num_stages=4)),
                ("128x128 4w s4 split-K 2", GemmConfig(BN=128, num_warps=4, num_stages=4, split_k=2)),
                ("128x128 4w s4 stream-K 1", GemmConfig(BN=128, num_warps=4, num_stages=4, stream_k=1))),
               ((2048, 2048, 2048), ("128x128 4w s4", GemmConfig(BN=128, num_warps=4, num_stages=4)),
                ("128x128 4w s4 stream-K 1", GemmConfig(BN=128, num_warps=4, num_stages=4, stream_k=1))))


def phases():
    from torch.profiler import ProfilerActivity, profile
    for (M, N, K), *cfgs in PHASE_CASES:
        a, b, c = operands(M, N, K, False, 3)
        for name, fn in [("cuBLAS", cublas)] + [(n, gluon(cfg)) for n, cfg in cfgs]:
            for _ in range(3):
                fn(a, b, c)
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(20):
                    fn(a, b, c)
                torch.cuda.synchronize()
            per = {}
            for e in prof.events():
                if e.device_type.name == "CUDA":
                    per[e.name] = per.get(e.name, 0.0) + e.device_time_total / 20
            parts = " | ".join(f"{k[:40]} {v:.1f} us" for k, v in per.items())
            print(f"phases  {M:6d}x{N:<6d}x{K:<6d} {name:28s} total {sum(per.values()):7.1f} us : {parts}"[:400],
                  flush=True)


SKTRACE_CASES = (((2048, 2048, 2048), GemmConfig(BN=128, num_warps=4, num_stages=4)),
                 ((2048, 2048, 2048), GemmConfig(BN=128, num_warps=4, num_stages=4, stream_k=1)),
                 ((128, 6144, 4096), GemmConfig(BN=64, num_warps=4, num_stages=6)),
                 ((128, 6144, 4096), GemmConfig(BN=64, num_warps=4, num_stages=6, stream_k=1)),
                 ((2500, 1736, 4104), GemmConfig(BN=128, num_warps=4, num_stages=4)),
                 ((2500, 1736, 4104), GemmConfig(BN=128, num_warps=4, num_stages=4, stream_k=2)),
                 ((2500, 1736, 4104), GemmConfig()), ((2500, 1736, 4104), GemmConfig(stream_k=1)))


def _units(cfg, M, N, K, grid, full):
    """Per CTA, its units' (k-steps, partial?) in launch order: igemm.schedule.unit, mirrored."""
    k_tiles = -(-K // cfg.BK)
    tiles = -(-M // cfg.BM) * -(-N // cfg.BN)
    S = (tiles - full) * k_tiles
    out = []
    for c in range(grid):
        if not cfg.stream_k:
            out.append([(k_tiles, False)] * len(range(c, tiles, grid)))
            continue
        q, r = divmod(S, grid)
        a = c * q + min(c, r)
        b = a + q + (c < r)
        us = [(k_tiles, False)] * (full // grid)
        for j in range(((b - 1) // k_tiles - a // k_tiles + 1) if b > a else 0):
            t = a // k_tiles + j
            k0, k1 = max(a, t * k_tiles) - t * k_tiles, min(b, (t + 1) * k_tiles) - t * k_tiles
            us.append((k1 - k0, k0 > 0 or k1 < k_tiles))
        out.append(us)
    return out


def sktrace():
    import statistics
    from gluon_lab.experiments import record_stamps
    from gluon_lab.kernels import warp_specialized as W
    from gluon_lab.kernels.hopper import num_sms
    for (M, N, K), cfg in SKTRACE_CASES:
        a, b, _ = operands(M, N, K, False, 7)
        st = record_stamps(lambda cfg, trace: ws.launch(a, b, config=cfg, trace=trace), {"x": cfg},
                           int(W.GEMM_TRACE_FIELDS), tags=1)["x"]["ns"]
        sms = num_sms(a.device)
        tiles = -(-M // cfg.BM) * -(-N // cfg.BN)
        if cfg.stream_k:
            full, grid, _ = W.streamk_plan(cfg, M, N, K, sms)
        else:
            full, grid = 0, min(tiles, sms)
        units = _units(cfg, M, N, K, grid, full)
        whole, piece, ep_whole, ep_piece, gaps = [], [], [], [], []
        for cta, rows in enumerate(st):
            for i, (_, t0, t1, t2) in enumerate(rows):
                ks, partial = units[cta][i]
                (piece if cfg.stream_k and i >= full // grid else whole).append((t1 - t0) / ks)
                (ep_piece if partial else ep_whole).append(t2 - t1)
                if i:
                    gaps.append(t0 - rows[i - 1][3])
        med = lambda v: f"{statistics.median(v):8.0f}" if v else "       -"  # noqa: E731
        span = max(r[3] for rows in st for r in rows)
        print(f"sktrace {M:6d}x{N:<6d}x{K:<6d} {'stream-K %d' % cfg.stream_k if cfg.stream_k else 'data-parallel':14s} "
              f"{cfg.BM}x{cfg.BN} {cfg.num_warps}w CTAs {len(st):4d} | ns per k-step: whole tiles {med(whole)} pieces "
              f"{med(piece)} | epilogue ns: whole {med(ep_whole)} partial {med(ep_piece)} | unit gap {med(gaps)} | "
              f"span {span / 1000:7.1f} us", flush=True)


ORDER_SHAPES = ((8192, 8192, 8192), (16384, 4096, 4096), (4096, 4096, 4096))
ORDER_GROUPS = (4, 8, 16, 32)
ORDER_ROUNDS = 5


def _rounds(tag, M, N, K, fns, rounds):
    """Every config of fns timed once per round, cuBLAS first in each round; per config the median us and the
    per-round cuBLAS / config ratios (a failed timing drops out of its round)."""
    import statistics
    per = {k: [] for k in fns}
    for r in range(rounds):
        for name, fn in fns.items():
            per[name].append(row(tag, M, N, K, False, f"{name} round {r}", fn))
    for name in fns:
        ratios = [c / u for c, u in zip(per["cuBLAS"], per[name]) if c and u]
        if ratios:
            print(f"{tag}sum {M:6d}x{N:<6d}x{K:<6d} {name:32s} median {statistics.median([u for u in per[name] if u]):9.1f} us"
                  f"  cuBLAS / it per round: median {statistics.median(ratios):.3f} min {min(ratios):.3f} max {max(ratios):.3f}",
                  flush=True)


def order():
    for (M, N, K) in ORDER_SHAPES:
        _rounds("order", M, N, K, {"cuBLAS": cublas, **{f"ws 128x256 8w s3 group_m {g}": gluon(GemmConfig(group_m=g))
                                                          for g in ORDER_GROUPS}}, ORDER_ROUNDS)


SKPROBE_SHAPES = ((777, 5000, 1000), (1000, 3000, 2000), (3000, 1000, 2000), (2500, 1736, 4104), (2048, 2048, 2048),
                  (1024, 4096, 4096), (1024, 6144, 4096), (4096, 4096, 4096))
SKPROBE_CFGS = {"ws stream-K 1 128x256 8w s3": GemmConfig(stream_k=1), "ws stream-K 2 128x256 8w s3": GemmConfig(stream_k=2),
                "ws stream-K 1 128x128 4w s4": GemmConfig(BN=128, num_warps=4, num_stages=4, stream_k=1),
                "ws stream-K 2 128x128 8w s4": GemmConfig(BN=128, num_warps=8, num_stages=4, stream_k=2)}


def skprobe():
    for (M, N, K) in SKPROBE_SHAPES:
        _rounds("skprobe", M, N, K, {"cuBLAS": cublas, "ws heuristic": gluon(GemmConfig.heuristic(M, N, K=K, ws=True)),
                                     **{k: gluon(c) for k, c in SKPROBE_CFGS.items()}}, 3)


if __name__ == "__main__":
    if not torch.cuda.is_available():
        raise SystemExit("gemm_probe.py needs the GPU")
    parts = sys.argv[1:] or ["align", "decode"]
    print(torch.cuda.get_device_name(), "torch", torch.__version__)
    for p in parts:
        {"align": align, "decode": decode, "split": split, "kernels": kernels, "phases": phases, "order": order, "sktrace": sktrace,
         "skprobe": skprobe}[p]()
