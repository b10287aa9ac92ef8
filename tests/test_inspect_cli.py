"""`python -m gluon_lab inspect` on the CPU: every fault a user reported, through the CLI's main().

Exit 2 with one clear line on stderr (no traceback) for every refusal; the census with its header
(kernel, config, launch) otherwise. Compiles are few (each sm_90 compile takes seconds here); the
refusals that stop before compiling are cheap.
"""
import json

import pytest

from gluon_lab import codegen
from gluon_lab.__main__ import main
from gluon_lab.kernels.hopper import SMEM_LIMIT

MATMUL = '{"M": 4096, "N": 4096, "K": 4096}'
GROUP = '{"B": 8, "C": 320, "H": 32, "W": 32, "G": 32, "layout": "nchw"}'


def run(capsys, *argv):
    """(exit code, stdout, stderr) of main(["inspect", *argv]); argparse errors exit via SystemExit."""
    try:
        rc = main(["inspect", *argv])
    except SystemExit as e:
        rc = e.code
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return rc, out, err


def refusal(capsys, *argv) -> str:
    rc, out, err = run(capsys, *argv)
    lines = [l for l in err.splitlines() if l.startswith("python -m gluon_lab inspect")]
    assert rc == 2 and out == "" and len(lines) == 1, (rc, out, err)
    return lines[0]


# -- 1. our Gluon kernels compile and print the census (one compile each) ------------------------

@pytest.mark.parametrize("op,variant,shape,kernel", [
    ("matmul", "gluon-pipelined", MATMUL, "persistent_gemm_kernel"),
    ("matmul", "gluon-ws", MATMUL, "ws_gemm_kernel"),
    ("group_norm", "gluon-chunked", GROUP, "group_norm_kernel"),
])
def test_gluon_kernels_are_not_library_calls(capsys, op, variant, shape, kernel):
    rc, out, err = run(capsys, op, variant, "--shape", shape)
    assert rc == 0 and "library call" not in out + err
    head = out.splitlines()
    # 6. the header names the kernel and the config configure() returned
    assert head[0].startswith(f"{op} {variant}: ") and head[1].startswith(f"kernel: {kernel} ")
    assert head[2].startswith("config: " + ("GroupPlan(" if op == "group_norm" else "GemmConfig("))
    assert head[3].startswith("launch: num_warps=")
    assert "census (static" in out and "  TMA " in out and "  smem " in out and "  registers " in out
    if op == "matmul":
        assert any(l.split()[:2] == ["wgmma", "4"] and "m64n" in l for l in out.splitlines())


# -- 2. dtype aliases -------------------------------------------------------------------------

def test_dtype_alias_and_json_census(capsys):
    rc, out, _ = run(capsys, "rms_norm", "gluon-tma", "--N", "4096", "--dtype", "fp16", "--json")
    assert rc == 0
    c = json.loads(out)  # 5. --json: the census only
    assert c["tma_load"] == 2 and c["ld_global"] == 0 and c["smem_bytes"] == 24584 and "sass" in c


@pytest.mark.parametrize("alias,full", [("bf16", "bfloat16"), ("fp32", "float32"), ("float16", "float16")])
def test_dtype_aliases_normalize(alias, full):
    assert codegen.normalize_dtype(alias) == full
    with pytest.raises(codegen.InspectError, match="unknown dtype 'int8'"):
        codegen.normalize_dtype("int8")


def test_wrong_dtype_is_an_argparse_error(capsys):
    rc, out, err = run(capsys, "rms_norm", "gluon-tma", "--N", "4096", "--dtype", "int8")
    assert rc == 2 and "argument --dtype: invalid choice: 'int8'" in err and "bf16" in err


# -- 3. the variant's own rules, before Triton sees anything --------------------------------------

@pytest.mark.parametrize("argv,rule", [
    (("rms_norm", "gluon-tma", "--N", "5000"), r"takes power-of-2 N in \[256, 65536\] for bfloat16 rms_norm"),
    (("rms_norm", "gluon-tma", "--N", "131072"), r"got N=131072. Use variant='gluon-chunked'"),
    (("add_rms_norm", "gluon-tma", "--N", "65536"), r"power-of-2 N in \[256, 32768\]"),
    (("rms_norm", "gluon-tma", "--N", "65536", "--dtype", "fp32"), r"power-of-2 N in \[128, 32768\] for float32"),
    # the launcher's TMA rule (N * itemsize % 16), which configure alone did not apply: these compiled
    (("rms_norm", "gluon-chunked", "--N", "5001"), r"N \* itemsize to be a multiple of 16 bytes.*N=5001"),
    (("add_rms_norm", "gluon-ws", "--N", "4100"), r"variant 'gluon-ws' needs N \* itemsize"),
    (("matmul", "gluon-ws", "--shape", '{"M": 4096, "N": 4100, "K": 4096}'), r"b's rows must start on 16-byte"),
    (("matmul", "gluon-pipelined", "--shape", MATMUL, "--dtype", "fp32"),  # the op's own rule
     r"matmul takes bf16 or fp16 inputs; got torch.float32"),
    # a knob override configure refuses
    (("rms_norm", "gluon-tma", "--N", "65536", "--set", "rows_per_cta=2"), r"needs 264192 bytes of shared memory"),
])
def test_refused_by_the_variant_rules(capsys, argv, rule):
    import re
    line = refusal(capsys, *argv)
    assert line.startswith("python -m gluon_lab inspect: refused: ") and re.search(rule, line), line


# -- 4. the CUDA runtime's limits, after the compile -----------------------------------------------

def test_shared_memory_past_the_opt_in_limit_is_refused(capsys, monkeypatch):
    """The old fault: gluon-tma's configure let N=131072 through and inspect printed a census of
    262,208 B. With the variant's rule removed again, the runtime check still refuses it."""
    from gluon_lab.kernels import tma_cache
    monkeypatch.setattr(tma_cache.TmaCacheConfig, "validate", lambda self, op, N, dtype: self)
    line = refusal(capsys, "rms_norm", "gluon-tma", "--N", "131072")
    assert "refused: needs 262,208 B of shared memory per CTA, sm_90 allows 232,448 B" in line
    assert "tma_cache_norm_kernel" in line


def test_runtime_limits():
    base = dict(smem_bytes=1024, num_warps=8, registers=128)
    assert codegen.runtime_refusal(base) is None
    assert codegen.runtime_refusal(dict(base, smem_bytes=SMEM_LIMIT)) is None
    assert "232,449 B of shared memory" in codegen.runtime_refusal(dict(base, smem_bytes=SMEM_LIMIT + 1))
    assert "1056 threads" in codegen.runtime_refusal(dict(base, num_warps=33))
    # 255 registers x 256 threads fit (65,280); 256 x 256 = 65,536 fit; 168 x 384 fit; 176 x 384 do not
    assert codegen.runtime_refusal(dict(base, registers=255)) is None
    assert codegen.runtime_refusal(dict(base, num_warps=12, registers=168)) is None
    assert "176 registers x 384 threads" in codegen.runtime_refusal(dict(base, num_warps=12, registers=176))
    # allocation is per warp in units of 256: 129 registers round up to 136
    assert codegen.runtime_refusal(dict(base, num_warps=16, registers=128)) is None
    assert codegen.runtime_refusal(dict(base, num_warps=16, registers=129)) is not None
    assert codegen.runtime_warnings(dict(base, spill_bytes=72, ld_local=3, st_local=2))


def test_long_ring_rows_show_the_kernel_launch_runs(capsys):
    """gluon-pipelined / gluon-ws refuse rows too long for a ring of rows in configure, and launch
    streams them through gluon-chunked's kernel: inspect shows that kernel, and says so."""
    rc, out, _ = run(capsys, "rms_norm", "gluon-pipelined", "--N", "131072")
    assert rc == 0
    head = out.splitlines()
    assert head[1].startswith("kernel: streaming_norm_kernel ")
    assert head[2].startswith("config: none (configure refused")
    assert any(l.startswith("note: configure refused this shape") and "launch streams them" in l for l in head)
    smem = int(next(l for l in head if l.strip().startswith("smem")).split()[1].replace(",", ""))
    assert smem <= SMEM_LIMIT


# -- 5. TTGIR / PTX / SASS text ------------------------------------------------------------------

def test_ttgir_ptx_sass_before_the_census(capsys):
    rc, out, _ = run(capsys, "rms_norm", "gluon-tma", "--N", "4096", "--ttgir", "--ptx", "--sass")
    assert rc == 0
    i_ttgir = out.index("// ===== TTGIR: tma_cache_norm_kernel")
    i_ptx = out.index("// ===== PTX: tma_cache_norm_kernel")
    i_sass = out.index("// ===== SASS: tma_cache_norm_kernel")
    i_head = out.index("rms_norm gluon-tma: ")
    assert i_ttgir < i_ptx < i_sass < i_head < out.index("census (static")
    assert "ttg.async_tma_copy_global_to_local" in out[i_ttgir:i_ptx] or "#ttg." in out[i_ttgir:i_ptx]
    assert "cp.async.bulk.tensor" in out[i_ptx:i_sass]
    assert "UTMALDG" in out[i_sass:i_head]
    # 6. header: kernel, config, launch
    assert "config: TmaCacheConfig(num_warps=16, rows_per_cta=2" in out and "launch: num_warps=16 = 512 threads" in out


# -- 7. no CPU codegen; unknown op / variant / knob --------------------------------------------------

@pytest.mark.parametrize("argv,what", [
    (("rms_norm", "torch", "--N", "4096"), "is a library call: eager PyTorch"),
    (("rms_norm", "inductor", "--N", "4096"), "is torch.compile: Inductor"),
    (("rms_norm", "inductor-max-autotune", "--N", "4096"), "is torch.compile"),
    (("rms_norm", "liger", "--N", "4096"), "is a library call: Liger-Kernel"),
    (("matmul", "torch", "--shape", MATMUL), "cuBLAS for matmuls"),
    (("matmul", "triton", "--shape", MATMUL), "registered without a CPU compile spec"),
])
def test_no_cpu_codegen(capsys, argv, what):
    line = refusal(capsys, *argv)
    assert line.startswith("python -m gluon_lab inspect: no CPU codegen: ") and what in line, line
    assert "with a CPU codegen: [" in line


@pytest.mark.parametrize("argv,msg", [
    (("rms_norm", "nope", "--N", "4096"), "unknown variant 'nope' for rms_norm: with a CPU codegen: ['triton', "),
    (("rms_norm", "auto", "--N", "4096"), "'auto' picks a variant per call"),
    (("nope", "gluon-tma", "--N", "4096"), "unknown op 'nope'; ops are ('rms_norm'"),
    (("rms_norm", "gluon-tma", "--N", "4096", "--set", "warps=8"), "has no knob 'warps'; its knobs: ['num_warps'"),
    (("rms_norm", "triton", "--N", "4096", "--set", "x=1"), "'triton' of rms_norm has no knobs"),
    (("matmul", "gluon-ws", "--shape", '{"M": 64, "N": 64, "Q": 64}'), "unknown ['Q']"),
    (("matmul", "gluon-ws", "--N", "64"), "matmul shapes are ('M', 'N', 'K')"),
    (("matmul", "gluon-ws", "--shape", '{"M": 64, "N": 64}'), "lacks 'K'; matmul shapes take the keys"),
])
def test_unknown_names(capsys, argv, msg):
    line = refusal(capsys, *argv)
    assert line.startswith("python -m gluon_lab inspect: error: ") and msg in line, line


def test_argument_errors(capsys):
    rc, _, err = run(capsys, "rms_norm", "gluon-tma")
    assert rc == 2 and "inspect needs --N (row ops) or --shape" in err
    rc, _, err = run(capsys, "matmul", "gluon-ws", "--shape", "{M: 1}")
    assert rc == 2 and "--shape must be a JSON object" in err
    rc, _, err = run(capsys, "rms_norm", "gluon-tma", "--N", "4096", "--set", "num_warps")
    assert rc == 2 and "--set takes KNOB=VALUE" in err
