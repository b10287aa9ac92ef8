import pytest

from gluon_lab import device


@pytest.mark.parametrize("name,slug,bw", [("NVIDIA H200", "h200", 4800), ("NVIDIA H100 80GB HBM3", "h100-sxm", 3350),
                                          ("NVIDIA H100 PCIe", "h100-pcie", 2000), ("NVIDIA B200", "b200", 8000),
                                          ("NVIDIA GB200", "gb200", 8000)])
def test_datasheet_by_name(name, slug, bw):
    assert device.gpu_slug(name) == slug
    assert device.lookup_spec(name).hbm_gbps == bw


def test_unknown_gpu_has_no_datasheet():
    assert device.lookup_spec("NVIDIA GeForce RTX 4090") is None
    assert device.gpu_slug("NVIDIA GeForce RTX 4090") == "nvidia-geforce-rtx-4090"


@pytest.mark.skipif(device.cuda_available(), reason="checks the no-GPU message")
def test_require_hopper_without_gpu():
    assert device.gpu_info() is None and not device.is_hopper_or_newer()
    with pytest.raises(device.GPUUnavailableError, match="needs an NVIDIA Hopper-or-newer GPU"):
        device.require_hopper("variant 'gluon-tma'")


@pytest.mark.skipif(device.cuda_available(), reason="checks the no-GPU message")
def test_measure_paths_fail_clearly_without_gpu():
    from gluon_lab import bench, notebook
    with pytest.raises(device.GPUUnavailableError, match="needs a CUDA GPU"):
        bench.Session("x", "/tmp/never")
    with pytest.raises(device.GPUUnavailableError):
        notebook.resolve_mode("measure")
    assert notebook.resolve_mode("auto") == "replay"


def test_gpu_run_without_a_usable_gpu_fails_loudly(tmp_path):
    """`pytest -m gpu` on a machine whose GPU check finds no sm_90+ GPU must not pass by skipping
    every GPU test: it is a usage error naming why (the batch script also demands passed tests)."""
    import subprocess
    import sys
    from pathlib import Path

    from gluon_lab import device
    if device.is_hopper_or_newer():
        pytest.skip("this machine has a usable GPU")
    root = Path(__file__).resolve().parent.parent
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "gpu", "tests/test_specs.py", "-p", "no:cacheprovider"],
                       cwd=root, capture_output=True, text=True, timeout=300)
    assert p.returncode != 0
    assert "no usable NVIDIA sm_90+ GPU" in p.stdout + p.stderr and "Refusing to report them as skipped" in p.stdout + p.stderr
