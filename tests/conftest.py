import os
import re

import pytest


def _has_hopper():
    """(sm_90+ GPU visible?, why not). The reason keeps the exception of a GPU check that failed, so
    a GPU run that cannot see its GPU says why instead of skipping everything."""
    try:
        from gluon_lab import device
        if not device.cuda_available():
            return False, "no CUDA device is visible to torch"
        cap = device.capability(0)
        if cap is None or cap[0] < 9:
            return False, f"the GPU is sm_{cap[0]}{cap[1]}, the Gluon kernels need sm_90+" if cap else "no capability"
        return True, ""
    except Exception as e:  # noqa: BLE001 - reported, not swallowed: see pytest_configure
        return False, f"the GPU check raised {type(e).__name__}: {e}"


HAS_GPU, WHY_NO_GPU = _has_hopper()


def pytest_configure(config):
    """A GPU run must fail loudly when it cannot see the GPU: `-m gpu` (the device batch) or
    GLUON_LAB_REQUIRE_GPU=1 without an sm_90+ GPU is an error, not a run of skipped tests."""
    expr = " ".join((config.option.markexpr or "").split())  # "not  gpu" is "not gpu"
    wants_gpu = bool(re.search(r"\bgpu\b", re.sub(r"\bnot gpu\b", "", expr))) or \
        os.environ.get("GLUON_LAB_REQUIRE_GPU") == "1"
    if wants_gpu and not HAS_GPU:
        raise pytest.UsageError("GPU tests were asked for (-m gpu / GLUON_LAB_REQUIRE_GPU=1) but no usable NVIDIA "
                                f"sm_90+ GPU: {WHY_NO_GPU}. Refusing to report them as skipped")


def pytest_collection_modifyitems(config, items):
    if HAS_GPU:
        return
    skip = pytest.mark.skip(reason=f"needs an NVIDIA sm_90+ GPU ({WHY_NO_GPU}; run on the H200: pytest -m gpu)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


class _ReplaySite:
    """One replay build of every notebook (`report.build(mode="replay")`, ~1.5 min on 2 cores), made on
    first use and shared by the report and browser tests; a failed build fails each test that uses it."""

    def __init__(self, base):
        self.base = base
        self.out = None
        self.error = None
        self.seconds = None

    def get(self):
        if self.error is not None:
            raise self.error
        if self.out is None:
            import time

            from gluon_lab.report import build
            t0 = time.monotonic()
            try:
                build(mode="replay", out_dir=self.base / "site")
            except Exception as e:  # noqa: BLE001 - re-raised for every test that needs the site
                self.error = e
                raise
            self.seconds = time.monotonic() - t0
            self.out = self.base / "site"
        return self.out


@pytest.fixture(scope="session")
def replay_site(tmp_path_factory):
    return _ReplaySite(tmp_path_factory.mktemp("replay-site"))
