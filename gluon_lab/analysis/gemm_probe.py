"""Notebook 04's evidence from outside the lab's records: ci/gemm_probe.py's logs and the installed triton.

    the probe             ci/gemm_probe.py's logs results/<gpu>/gemm-probe*.log (probe_path): probe_records,
                          order_table, alignment_table, operand_split_table, decode_probe_table, cublas_kernels,
                          phase_records, sktrace_records; parsed strictly (a line that does not parse names file:line)
    clusters              cluster_evidence: the installed triton's TMA API and a 2-CTA compile on this CPU

Kernel-facing: cluster_evidence() reads triton's hopper.tma and CUDAOptions and compiles a probe kernel with
codegen.compile_sm90. gemm.py (the GEMM studies of the lab's own records) does not import this module.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd


# ---- the GEMM probe (ci/gemm_probe.py's log): misaligned rows and decode swap-AB x split-K ----
PROBE_LINE = re.compile(r"^(align|decode|split|order|skprobe)\s+(\d+)x(\d+)\s*x(\d+)\s+(contig|pad|pad-[abc]+)\s+(.+?)\s+([\d.]+) us\s+"
                        r"(\d+) TF/s (\d+|None) MHz")
PROMOTION = re.compile(r"^== promotion (\w+)$")
PHASE_LINE = re.compile(r"^phases\s+(\d+)x(\d+)\s*x(\d+)\s+(.+?)\s+total\s+([\d.]+) us : (.+)$")
SKTRACE_LINE = re.compile(r"^sktrace\s+(\d+)x(\d+)\s*x(\d+)\s+(data-parallel|stream-K \d)\s+(\d+)x(\d+) (\d+)w CTAs\s+(\d+) \| "
                          r"ns per k-step: whole tiles\s+([\d-]+) pieces\s+([\d-]+) \| epilogue ns: whole\s+([\d-]+) "
                          r"partial\s+([\d-]+) \| unit gap\s+([\d-]+) \| span\s+([\d.]+) us$")
KERNEL_LINE = re.compile(r"^kernel\s+(\d+)x(\d+)\s*x(\d+)\s+(contig|pad)\s+cuBLAS: (.+)$")


def probe_path(path, name):
    """The probe log `path`, or results/h200/<name> of the repository."""
    from pathlib import Path
    return Path(path) if path else Path(__file__).resolve().parents[2] / "results" / "h200" / name


def probe_records(path=None) -> pd.DataFrame:
    """results/<gpu>/gemm-probe.log (ci/gemm_probe.py on the GPU; gemm-probe-split.log for its 'split' part) as
    rows: part, M, N, K, layout ('contig' = row strides K*2 / N*2 bytes; 'pad' = the same shape over row
    strides padded to 64 elements; 'pad-a' / 'pad-b' / 'pad-c' / 'pad-ab': only those operands padded),
    config, us, TFLOP/s (recomputed from the shape and us), SM MHz, and the TMA descriptors' L2 promotion
    the timing ran under ('L2_128B', triton's, unless a '== promotion X' line said otherwise: the probe
    re-ran with triton's driver.c patched). A line that does not parse is an error naming the file and
    line (the log is data, not prose); 'kernel' / 'phases' lines are other tables' (cublas_kernels, phase_records)."""
    p = probe_path(path, "gemm-probe.log")
    if not p.exists():
        return pd.DataFrame()
    rows, promotion = [], "L2_128B"
    for i, line in enumerate(p.read_text().splitlines(), 1):
        pm = PROMOTION.match(line)
        if pm:
            promotion = pm.group(1)
            continue
        if not line.startswith(("align ", "decode ", "split ", "order ", "skprobe ")):
            continue
        if " FAILED " in line:  # gemm_probe.py prints a config that raised as a line of its own: not a timing
            continue
        m = PROBE_LINE.match(line)
        if not m:
            raise ValueError(f"{p}:{i}: not a gemm_probe.py timing line: {line[:120]!r}")
        part, M, N, K, layout, cfg, us, tf, mhz = m.groups()
        M, N, K, us = int(M), int(N), int(K), float(us)
        tflops = 2 * M * N * K / us / 1e6
        if abs(tflops - int(tf)) > 1.0 + tflops * 0.05 / us:  # us is printed to 0.1, TF/s to 1
            raise ValueError(f"{p}:{i}: {tf} TF/s does not match {M}x{N}x{K} in {us} us ({tflops:.1f})")
        rows.append({"part": part, "M": M, "N": N, "K": K, "layout": layout, "config": cfg.strip(), "us": us,
                     "TFLOP/s": round(tflops), "SM MHz": None if mhz == "None" else int(mhz), "promotion": promotion})
    return pd.DataFrame(rows)


def order_table(pr, part: str = "order") -> pd.DataFrame:
    """The probe's interleaved-round parts ('order': gemm-probe-order.log, 'skprobe': gemm-probe-skprobe.log): per
    shape and config, cuBLAS time / config time in each round (cuBLAS timed in the same round), their median /
    min / max, and the median us. The ratios are recomputed from the timing lines (the log's own '...sum'
    lines are not read)."""
    d = pr[pr.part == part] if len(pr) else pr
    if not len(d):
        return pd.DataFrame()
    parts = d.config.str.extract(r"^(.+) round (\d+)$")
    if parts.isna().any().any():
        raise ValueError(f"order lines must name their round: {d.config[parts[0].isna()].iloc[0]!r}")
    d = d.assign(base=parts[0], round=parts[1].astype(int))
    rows = []
    for (M, N, K), g in d.groupby(["M", "N", "K"]):
        cb = g[g.base == "cuBLAS"].set_index("round").us
        for base, h in g[g.base != "cuBLAS"].groupby("base", sort=False):
            r = (cb / h.set_index("round").us).dropna()
            rows.append({"M": int(M), "N": int(N), "K": int(K), "config": base, "rounds": len(r),
                         "median us": float(h.us.median()), "cuBLAS / it: median": round(float(r.median()), 3),
                         "min": round(float(r.min()), 3), "max": round(float(r.max()), 3)})
    return pd.DataFrame(rows)


def operand_split_table(pr) -> pd.DataFrame:
    """The probe's 'split' part: per ragged shape and config (Gluon / cuBLAS) and L2 promotion, us with every
    operand's rows misaligned ('contig') and contig / us with only A, B, C or A and B padded (> 1: padding
    that operand recovers that much; 'pad' = all three)."""
    d = pr[pr.part == "split"] if len(pr) else pr
    if not len(d):
        return pd.DataFrame()
    piv = d.pivot_table(index=["M", "N", "K", "config", "promotion"], columns="layout", values="us", aggfunc="min")
    t = pd.DataFrame(index=piv.index)
    t["contig us"] = piv["contig"]
    for lay in ("pad-a", "pad-b", "pad-c", "pad-ab", "pad"):
        if lay in piv:
            t[f"contig / {lay}"] = (piv["contig"] / piv[lay]).round(2)
    return t.reset_index()


def _log_lines(p, prefix: str, pattern, what: str):
    """(line number, match groups) of every line of the probe log p that starts with prefix; such a line that
    does not match pattern is an error naming the file and line."""
    for i, line in enumerate(p.read_text().splitlines(), 1):
        if line.startswith(prefix):
            m = pattern.match(line)
            if not m:
                raise ValueError(f"{p}:{i}: not a gemm_probe.py {what} line: {line[:120]!r}")
            yield i, m.groups()


def cublas_kernels(path=None) -> pd.DataFrame:
    """The probe's 'kernels' part (gemm-probe-split.log): the kernel torch.matmul launched per ragged shape."""
    p = probe_path(path, "gemm-probe-split.log")
    if not p.exists():
        return pd.DataFrame()
    return pd.DataFrame([{"M": int(M), "N": int(N), "K": int(K), "layout": layout, "cuBLAS kernel": names.strip()}
                         for _, (M, N, K, layout, names) in _log_lines(p, "kernel", KERNEL_LINE, "kernel")])


def phase_records(path=None) -> pd.DataFrame:
    """results/<gpu>/gemm-probe-phases.log (ci/gemm_probe.py phases): per shape and config, the GPU time of
    each kernel a call launched (torch.profiler, mean of 20 calls): the GEMM and its fixup / reduce apart.
    The printed total must equal the sum of its kernels (to the printed 0.1 us each), else file:line."""
    p = probe_path(path, "gemm-probe-phases.log")
    if not p.exists():
        return pd.DataFrame()
    rows = []
    for i, (M, N, K, cfg, total, parts) in _log_lines(p, "phases", PHASE_LINE, "phases"):
        kern = {}
        for part in parts.split(" | "):
            km = re.match(r"^(.+) ([\d.]+) us$", part.strip())
            if not km:
                raise ValueError(f"{p}:{i}: not a 'kernel T us' part: {part[:80]!r}")
            kern[km.group(1)] = float(km.group(2))
        if abs(sum(kern.values()) - float(total)) > 0.05 * len(kern) + 0.05:
            raise ValueError(f"{p}:{i}: total {total} us is not the sum of its kernels {kern}")
        gemm_us = next((v for k, v in kern.items() if "reduce" not in k.lower()), np.nan)
        fix = sum(v for k, v in kern.items() if "reduce" in k.lower())
        rows.append({"M": int(M), "N": int(N), "K": int(K), "config": cfg.strip(), "total us": float(total),
                     "GEMM kernel us": gemm_us, "reduce / fixup us": fix if fix else np.nan,
                     "kernels": " + ".join(k.split("(")[0][:32] for k in kern)})
    return pd.DataFrame(rows)


def sktrace_records(path=None) -> pd.DataFrame:
    """results/<gpu>/gemm-probe-sktrace.log (ci/gemm_probe.py sktrace: the INSTRUMENT build's per-unit stamps,
    medians over every CTA): per shape and schedule, ns per k-step of whole tiles and of stream-K pieces,
    the epilogue of whole tiles and of partial pieces, the gap between units and the kernel span ('-' in
    the log = none of that kind: NaN). A line that does not parse is an error naming file:line."""
    p = probe_path(path, "gemm-probe-sktrace.log")
    if not p.exists():
        return pd.DataFrame()
    num = lambda v: np.nan if v == "-" else float(v)  # noqa: E731
    rows = []
    for _, (M, N, K, sched, bm, bn, nw, ctas, kw, kp, ew, ep, gap, span) in _log_lines(p, "sktrace", SKTRACE_LINE,
                                                                                      "sktrace"):
        rows.append({"M": int(M), "N": int(N), "K": int(K), "schedule": sched, "tile": f"{bm}x{bn} {nw}w",
                     "CTAs": int(ctas), "ns / k-step, whole tiles": num(kw), "ns / k-step, pieces": num(kp),
                     "epilogue ns, whole": num(ew), "epilogue ns, partial": num(ep), "unit gap ns": num(gap),
                     "kernel span us": float(span)})
    return pd.DataFrame(rows)


def alignment_table(pr) -> pd.DataFrame:
    """Per ragged shape and config of the probe: us with the contiguous (misaligned) rows, with rows padded
    to 128 bytes, and contig / pad (> 1: the misaligned rows cost that much), cuBLAS beside."""
    a = pr[pr.part == "align"] if len(pr) else pr
    if not len(a):
        return pd.DataFrame()
    piv = a.pivot_table(index=["M", "N", "K", "config"], columns="layout", values="us", aggfunc="min")
    piv = piv.dropna(subset=["pad"]) if "pad" in piv else piv.iloc[0:0]
    if not len(piv):
        return pd.DataFrame()
    t = piv.reset_index().rename(columns={"contig": "contig us", "pad": "padded-rows us"})
    t["contig / padded"] = (t["contig us"] / t["padded-rows us"]).round(2)
    return t


def decode_probe_table(pr) -> pd.DataFrame:
    """Per decode shape of the probe: cuBLAS, the best unsplit and the best split-K Gluon config, their ratios."""
    d = pr[pr.part == "decode"] if len(pr) else pr
    rows = []
    for (M, N, K), g in (d.groupby(["M", "N", "K"]) if len(d) else []):
        cb = g[g.config == "cuBLAS"].us.min()
        gl_ = g[g.config != "cuBLAS"]
        split = gl_[gl_.config.str.contains("split-K") & ~gl_.config.str.endswith("split-K 1")]
        whole = gl_[~gl_.index.isin(split.index)]
        bs = split.loc[split.us.idxmin()] if len(split) else None
        bw = whole.loc[whole.us.idxmin()] if len(whole) else None
        rows.append({"M": M, "N": N, "K": K, "cuBLAS us": cb,
                     "best unsplit": bw.config if bw is not None else np.nan,
                     "unsplit / cuBLAS": round(cb / bw.us, 3) if bw is not None else np.nan,
                     "best split-K": bs.config if bs is not None else np.nan,
                     "split / cuBLAS": round(cb / bs.us, 3) if bs is not None else np.nan})
    return pd.DataFrame(rows)


# ---- clusters / TMA multicast on the installed triton: evidence, checked on this CPU ----
def _cluster_probe():
    """A 128 x 64 TMA load into a tile that both CTAs of a 2-CTA cluster share (NVMMASharedLayout
    cga_layout [[0, 0]]: the layout a multicast load would fill) and back out with a TMA store."""
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma

    @gluon.jit
    def cluster_probe(in_desc, out_desc, BM: gl.constexpr, BN: gl.constexpr, BAR_LAYOUT: gl.constexpr):
        pid = gl.program_id(0)
        smem = gl.allocate_shared_memory(in_desc.dtype, [BM, BN], in_desc.layout)
        bar = gl.allocate_shared_memory(gl.int64, [1], BAR_LAYOUT)
        mbarrier.init(bar, count=1)
        mbarrier.expect(bar, in_desc.block_type.nbytes)
        tma.async_copy_global_to_shared(in_desc, [pid * BM, 0], bar, smem)
        mbarrier.wait(bar, 0)
        mbarrier.invalidate(bar)
        fence_async_shared()
        tma.async_copy_shared_to_global(out_desc, [pid * BM, 0], smem)
        tma.store_wait(0)

    return cluster_probe, gl, mbarrier


def cluster_evidence():
    """What the installed triton offers for a 2-CTA cluster schedule, checked rather than asserted:
    the Hopper TMA copy's parameters, 'multicast' in the Gluon Python API, the cluster launch option,
    and a 2-CTA compile of a shared-tile TMA load (its PTX). A table of (check, result)."""
    import inspect
    from pathlib import Path

    import triton
    from triton.backends.nvidia.compiler import CUDAOptions
    from triton.experimental.gluon.language.nvidia.hopper import tma

    from .. import codegen
    rows = [("hopper.tma.async_copy_global_to_shared parameters",
             ", ".join(p for p in inspect.signature(tma.async_copy_global_to_shared).parameters if p != "_semantic"))]
    gl_dir = Path(triton.__file__).parent / "experimental" / "gluon"
    hits = [str(f.relative_to(gl_dir)) for f in gl_dir.rglob("*.py") if "multicast" in f.read_text()]
    rows.append(("Gluon Python files mentioning 'multicast'", ", ".join(hits) or "none"))
    rows.append(("cluster launch option", "num_ctas (CUDAOptions)" if "num_ctas" in CUDAOptions.__dataclass_fields__
                 else "none"))
    probe, gl, mbarrier = _cluster_probe()
    lay = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2, cga_layout=[[0, 0]])
    sig = {"in_desc": f"tensordesc<bf16[128, 64],{lay!r}>", "out_desc": f"tensordesc<bf16[128, 64],{lay!r}>",
           "BM": "constexpr", "BN": "constexpr", "BAR_LAYOUT": "constexpr"}
    try:
        k = codegen.compile_sm90(probe, sig, {"BM": 128, "BN": 64, "BAR_LAYOUT": mbarrier.MBarrierLayout(cga_layout=[[0]])},
                                 num_warps=4, num_ctas=2)
        ptx = k.asm["ptx"]
        loads = [ln.strip().split(" [")[0].lstrip("@%p0123456789 ") for ln in ptx.splitlines()
                 if "cp.async.bulk.tensor" in ln and "global.mbarrier" in ln]
        rows += [("num_ctas = 2 compile, tile shared by both CTAs", "compiles: " + ", ".join(
                     f"{key} x{ptx.count(key)}" for key in (".reqnctapercluster 2", "%cluster_ctarank", "multicast",
                                                            "mapa", "barrier.cluster"))),
                 ("its TMA load instruction", "; ".join(sorted(set(loads))) or "none")]
    except Exception as e:  # noqa: BLE001 - the evidence is what happened
        rows.append(("num_ctas = 2 compile, tile shared by both CTAs", f"{type(e).__name__}: {str(e).splitlines()[-1:]}"))
    return pd.DataFrame(rows, columns=["check", "result"])
