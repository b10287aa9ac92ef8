"""GPU detection, the sm_90+ gate, and datasheet ceilings by device name.

Nothing here touches CUDA at import time: `import gluon_lab` must work on a CPU-only machine.
torch is imported lazily inside the functions that need it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Spec:
    """Datasheet ceilings of one GPU model (dense, no sparsity)."""
    name: str
    hbm_gbps: float  # DRAM bandwidth, GB/s (1e9 B/s)
    bf16_tflops: float  # dense bf16 tensor-core TFLOP/s
    l2_bytes: int  # L2 size used to size rotated inputs when the driver cannot be asked
    smem_per_cta: int  # max dynamic shared memory per CTA, bytes (opt-in)
    sm_count: int


# Vendor datasheets (SXM parts, dense rates = half the "with sparsity" figures).
# H100 SXM5: 3.35 TB/s HBM3, 989.4 TF bf16 dense; 132 SMs; 50 MB L2; 227 KB smem per CTA.
# H200 SXM: same GH100 die and tensor rates as H100 SXM, 4.8 TB/s HBM3e.
# B200 (HGX): 8 TB/s HBM3e, 2.25 PF dense bf16 (4.5 PF sparse); 148 SMs; 126 MB L2 (driver reports it).
# GB200 (per GPU in NVL72): 8 TB/s, 2.5 PF dense bf16 (5 PF sparse).
DATASHEET: dict[str, Spec] = {
    "h100-sxm": Spec("NVIDIA H100 SXM", 3350.0, 989.4, 50 * 2**20, 232448, 132),
    "h100-pcie": Spec("NVIDIA H100 PCIe", 2000.0, 756.0, 50 * 2**20, 232448, 114),
    "h200": Spec("NVIDIA H200", 4800.0, 989.4, 50 * 2**20, 232448, 132),
    "b200": Spec("NVIDIA B200", 8000.0, 2250.0, 126 * 2**20, 232448, 148),
    "gb200": Spec("NVIDIA GB200", 8000.0, 2500.0, 126 * 2**20, 232448, 152),
}


def gpu_slug(name: str) -> str:
    """Map a device name as the driver reports it to a results/ folder name.

    >>> gpu_slug("NVIDIA H200")
    'h200'
    >>> gpu_slug("NVIDIA H100 80GB HBM3")
    'h100-sxm'
    """
    n = name.upper()
    if "GB200" in n:
        return "gb200"
    if "B200" in n:
        return "b200"
    if "H200" in n:
        return "h200"
    if "H100" in n:
        return "h100-pcie" if "PCIE" in n else "h100-sxm"
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "unknown"


def lookup_spec(name: str) -> Spec | None:
    """Datasheet Spec for a device name, or None for a GPU we have no datasheet for."""
    return DATASHEET.get(gpu_slug(name))


class GPUUnavailableError(RuntimeError):
    """Raised when a GPU-only path is asked for on a machine that cannot run it."""


def cuda_available() -> bool:
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a pinned dependency
        return False
    return bool(torch.cuda.is_available())


def capability(device_index: int = 0) -> tuple[int, int] | None:
    if not cuda_available():
        return None
    import torch
    return tuple(torch.cuda.get_device_capability(device_index))


def is_hopper_or_newer(device_index: int = 0) -> bool:
    cap = capability(device_index)
    return cap is not None and cap[0] >= 9


def require_hopper(what: str = "this Gluon variant", device=None) -> None:
    """Raise GPUUnavailableError with a clear message unless an sm_90+ GPU is present.

    Gluon kernels here use TMA and mbarriers (sm_90+ only) and Gluon has no interpreter, so there
    is no CPU fallback: ask for variant="torch" (or replay recorded results) on other machines.
    """
    if not cuda_available():
        raise GPUUnavailableError(
            f"{what} needs an NVIDIA Hopper-or-newer GPU (sm_90+), but no CUDA device is visible. "
            "Gluon has no interpreter; use variant='torch' or replay recorded results on CPU.")
    import torch
    idx = 0 if device is None else torch.device(device).index or 0
    cap = torch.cuda.get_device_capability(idx)
    if cap[0] < 9:
        raise GPUUnavailableError(
            f"{what} needs compute capability 9.0+ (Hopper: TMA, mbarrier, wgmma); "
            f"{torch.cuda.get_device_name(idx)} is sm_{cap[0]}{cap[1]}.")


def gpu_info(device_index: int = 0) -> dict | None:
    """Name, capability, SM count, L2 size, driver and CUDA versions; None without a GPU."""
    if not cuda_available():
        return None
    import torch
    p = torch.cuda.get_device_properties(device_index)
    driver = None
    try:
        import subprocess
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        driver = out.stdout.strip().splitlines()[host_index(device_index)] if out.returncode == 0 else None
    except Exception:  # nvidia-smi missing: keep the record, without the driver string
        driver = None
    return {
        "gpu_name": p.name,
        "gpu_slug": gpu_slug(p.name),
        "host_index": host_index(device_index),
        "uuid": str(p.uuid) if getattr(p, "uuid", None) is not None else None,
        "capability": f"{p.major}.{p.minor}",
        "sm_count": p.multi_processor_count,
        "l2_bytes": int(getattr(p, "L2_cache_size", 0)) or None,
        "total_mem_bytes": int(p.total_memory),
        "driver": driver,
        "cuda": torch.version.cuda,
    }


def host_index(device_index: int = 0) -> int:
    """The host's CUDA ordinal of this process's device `device_index`: through CUDA_VISIBLE_DEVICES when it lists
    ordinals (a sharded run's worker sees one GPU as device 0), else device_index itself."""
    import os
    vis = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if device_index < len(vis) and vis[device_index].isdigit():
        return int(vis[device_index])
    return device_index


def sm_clock_mhz(index: int = 0) -> int | None:
    """The GPU's current SM clock (MHz) as NVML reports it (nvidia-smi); None when unavailable. Read
    right after a compute-bound timing: the clock ramps under load and throttles with power. index: this
    process's device (nvidia-smi numbers the host's GPUs, so a sharded run's worker asks for its host ordinal)."""
    import subprocess
    try:
        out = subprocess.run(["nvidia-smi", "-i", str(host_index(index)), "--query-gpu=clocks.sm", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10)
        return int(out.stdout.strip().splitlines()[0])
    except Exception:  # noqa: BLE001 - no nvidia-smi / no GPU: the record says None
        return None
