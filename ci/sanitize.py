"""compute-sanitizer racecheck + synccheck on one small case of each Gluon kernel (H200 only).

    python3 ci/sanitize.py OUT_JSON [KERNEL ...]     # driver: runs every (tool, kernel) in a subprocess
    python3 ci/sanitize.py --run KERNEL              # one launch + float64 check (what the sanitizer runs)

The driver appends one JSON line per (tool, kernel) to OUT_JSON: the kernel, the tool, the sanitizer's
summary line, its error/hazard count, whether the checked output matched float64, and the wall time.
The notebooks state these lines; nothing here is hand-written.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time

# small odd shapes: every kernel's ring wraps several times and its tails are partial
CASES = {
    "pipelined-norm": ("rms_norm", "gluon-pipelined", {"M": 37, "N": 1000}, {"num_stages": 3}),
    "pipelined-layernorm": ("layer_norm", "gluon-pipelined", {"M": 37, "N": 1000}, {"num_stages": 2}),
    "pipelined-gemm": ("matmul", "gluon-pipelined", {"M": 300, "N": 264, "K": 520}, {}),
    "ws-gemm": ("matmul", "gluon-ws", {"M": 300, "N": 264, "K": 520}, {}),
    "ws-gemm-pingpong": ("matmul", "gluon-ws", {"M": 300, "N": 520, "K": 520},
                         {"BN": 128, "num_warps": 4, "num_stages": 4, "pingpong": True}),
    "ws-gemm-splitk": ("matmul", "gluon-ws", {"M": 300, "N": 264, "K": 1032}, {"BN": 128, "num_warps": 4, "split_k": 3}),
    "ws-gemm-lastwave": ("matmul", "gluon-ws", {"M": 1000, "N": 3000, "K": 1032},
                         {"BN": 128, "num_warps": 4, "num_stages": 4, "split_k": 2, "split_last_wave": True}),
    "ws-gemm-swapab": ("matmul", "gluon-ws", {"M": 33, "N": 1000, "K": 520},
                       {"BM": 16, "BN": 128, "num_warps": 4, "num_stages": 6, "swap_ab": True}),
    "ws-gemm-cpasync": ("matmul", "gluon-ws", {"M": 300, "N": 1000, "K": 1032},
                        {"BN": 128, "num_warps": 8, "num_stages": 5, "cp_async": True, "producer_regs": 152}),
    "ws-norm": ("rms_norm", "gluon-ws", {"M": 37, "N": 1000}, {}),
    "ws-add-rms-norm": ("add_rms_norm", "gluon-ws", {"M": 37, "N": 1000}, {}),
    "pipelined-norm-dyn": ("rms_norm", "gluon-pipelined", {"M": 37, "N": 1000}, {"num_stages": 3, "schedule": "dynamic"}),
    "ws-norm-dyn": ("add_rms_norm", "gluon-ws", {"M": 37, "N": 1000}, {"schedule": "dynamic"}),
    "conv-fprop": ("conv2d", "gluon-pipelined", {"B": 2, "Ci": 40, "Co": 72, "H": 13, "W": 11, "R": 3, "stride": 1,
                                                 "pad": 1}, {}),
    "conv-ws": ("conv2d", "gluon-ws", {"B": 2, "Ci": 40, "Co": 72, "H": 13, "W": 11, "R": 3, "stride": 1, "pad": 1}, {}),
    "conv-gather": ("conv2d", "gluon-gather", {"B": 2, "Ci": 24, "Co": 36, "H": 13, "W": 11, "R": 3, "stride": 2,
                                               "pad": 1}, {}),
    "conv-dgrad-s2": ("conv2d_input_grad", "gluon-pipelined", {"B": 2, "Ci": 96, "Co": 64, "H": 14, "W": 18, "R": 3,
                                                               "stride": 2, "pad": 1}, {}),
    # diagnostic, not a lab variant: ws_gemm_kernel with the trailing mbarrier.invalidate loop cut
    # (racecheck reported a hazard between a read at kernel entry and those invalidates)
    "ws-gemm-noinval": ("matmul", "diag:ws-gemm-noinval", {"M": 300, "N": 264, "K": 520}, {}),
}
TOOLS = ("racecheck", "synccheck")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)  # run as a script from anywhere: gluon_lab is the repo's package


def ws_gemm_without_invalidate():
    """ws_gemm_kernel's source minus its trailing invalidate (ws_ring_invalidate), as a new @gluon.jit
    kernel (the JIT needs a real file to read the source from)."""
    import importlib.util
    import inspect
    import tempfile
    from gluon_lab.kernels import gemm_ws as W
    src = inspect.getsource(W.ws_gemm_kernel.fn)
    cut = src.index("    ws_ring_invalidate(empty_bars, full_bars, NUM_STAGES)")
    head = ("from triton.experimental import gluon\nfrom triton.experimental.gluon import language as gl\n"
            "from gluon_lab.kernels.gemm_ws import _ws_consumer\n"
            "from gluon_lab.kernels.igemm.producers import CP_WARPS, cp_producer, tma_producer\n"
            "from gluon_lab.kernels.igemm.ring import ws_ring_barriers\n\n\n")
    path = os.path.join(tempfile.mkdtemp(), "ws_gemm_noinval.py")
    with open(path, "w") as f:
        f.write(head + src[:cut])
    spec = importlib.util.spec_from_file_location("ws_gemm_noinval", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.ws_gemm_kernel


def run_one(name: str) -> int:
    from gluon_lab import bench, registry
    op, variant, shape, knobs = CASES[name]
    inputs = bench.make_inputs(op, shape, "bfloat16", seed=5)
    if variant == "diag:ws-gemm-noinval":
        import torch
        from gluon_lab.kernels.gemm import prepare
        kern = ws_gemm_without_invalidate()
        c, descs, M, N, K, cfg, grid = prepare(*inputs)
        c.fill_(float("nan"))
        kern[grid](*descs, None, M, N, K, 0, None, NUM_STAGES=cfg.num_stages, GROUP_M=cfg.group_m,
                   PRODUCER_REGS=cfg.producer_regs, SPLIT_K=1, INSTRUMENT=False, SWAP_AB=False,
                   num_warps=cfg.num_warps)
        torch.cuda.synchronize()
        res = bench.compare(c, bench.reference_outputs(op, inputs), "bfloat16")
        print("CHECK", json.dumps({"passed": bool(res["passed"]), "max_abs_err": res.get("max_abs_err")}))
        return 0 if res["passed"] else 1
    v = registry.get_variant(op, variant)
    cfg = v.resolve(shape, "bfloat16", knobs) if knobs else None
    res = bench.check_correctness(op, variant, inputs, **({"config": cfg} if cfg is not None else {}))
    print("CHECK", json.dumps({"passed": bool(res["passed"]), "max_abs_err": res.get("max_abs_err")}))
    return 0 if res["passed"] else 1


def drive(out_json: str, names) -> int:
    exe = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
    rc = 0
    for name in names:
        for tool in TOOLS:
            t0 = time.time()
            cmd = [exe, "--tool", tool, "--error-exitcode", "3", sys.executable, __file__, "--run", name]
            try:
                p = subprocess.run(cmd, capture_output=True, text=True, timeout=240,
                                   env={**os.environ, "PYTHONUNBUFFERED": "1"})
                text, code = p.stdout + p.stderr, p.returncode
            except subprocess.TimeoutExpired as e:
                text, code = f"TIMEOUT after 240 s\n{e.stdout or ''}", -1
            summary = [ln.strip("= ").strip() for ln in text.splitlines() if "SUMMARY" in ln]
            m = re.search(r"(\d+) (errors?|hazards?)", " ".join(summary))
            chk = re.search(r"CHECK (\{.*\})", text)
            rec = {"kernel": name, "case": list(CASES[name][:3]), "tool": tool, "exit_code": code,
                   "summary": summary, "count": int(m.group(1)) if m else None,
                   "check": json.loads(chk.group(1)) if chk else None, "seconds": round(time.time() - t0, 1),
                   "tail": text.splitlines()[-14:] if code else []}
            print(json.dumps(rec))
            with open(out_json, "a") as f:
                f.write(json.dumps(rec) + "\n")
            rc |= code != 0
    return rc


if __name__ == "__main__":
    if sys.argv[1] == "--run":
        sys.exit(run_one(sys.argv[2]))
    sys.exit(drive(sys.argv[1], sys.argv[2:] or list(CASES)))
