import json
import os
import re
import shutil
import tempfile

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
    if _xdist_controller(config) and not os.environ.get(GROUPS_ENV):
        config._gluon_lab_groups = os.environ[GROUPS_ENV] = tempfile.mkdtemp(prefix="gluon-lab-xdist-groups-")


def pytest_unconfigure(config):
    d = getattr(config, "_gluon_lab_groups", None)
    if d:
        shutil.rmtree(d, ignore_errors=True)
        os.environ.pop(GROUPS_ENV, None)


# ------------------------------------------------------------------------------------ pytest-xdist groups
# `make test` runs `pytest -n auto --dist loadgroup`: the tests of one xdist_group run on one worker, one
# after the other, while the other workers take the rest test by test. Every test that uses the session's
# replay build (the replay_site fixture, directly or through another fixture) is put in REPLAY_GROUP: one
# worker builds the site once and runs them all. xdist 3.8's own loadgroup renames item._nodeid, which
# pytest 9 no longer reads (nodeid is a read-only property there): its groups are silently ignored. So the
# workers write each grouped test's id to a file in the folder GROUPS_ENV names (made by the controller),
# and the controller's scheduler (pytest_xdist_make_scheduler below, xdist's LoadGroupScheduling) reads
# them when it splits the collection into work units. Groups largest first (xdist's loadscope reorder):
# the replay group starts at once.

#: the pytest-xdist group of every test that uses the session's replay build
REPLAY_GROUP = "replay-site"
GROUPS_ENV = "GLUON_LAB_XDIST_GROUPS"


def _xdist_controller(config) -> bool:
    return (not hasattr(config, "workerinput") and config.pluginmanager.hasplugin("xdist")
            and bool(getattr(config.option, "numprocesses", None)) and getattr(config.option, "dist", "no") == "loadgroup")


@pytest.hookimpl(tryfirst=True, optionalhook=True)  # before xdist's own; optional: xdist may not be installed
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class GroupsFromWorkers(LoadGroupScheduling):
        groups: dict = {}

        def schedule(self):
            if self.collection is None:  # the first call, every worker's collection in: read their groups
                d = os.environ.get(GROUPS_ENV)
                groups = {}
                for f in sorted(os.listdir(d)) if d and os.path.isdir(d) else ():
                    if f.endswith(".json"):
                        with open(os.path.join(d, f)) as fh:
                            groups.update(json.load(fh))
                self.groups = groups
            super().schedule()

        def _split_scope(self, nodeid):
            g = self.groups.get(nodeid)
            return g if g is not None else super()._split_scope(nodeid)  # xdist's '@group' suffix, where it works

    return GroupsFromWorkers(config, log)


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the xdist_group marks
def pytest_collection_modifyitems(config, items):
    for item in items:
        if "replay_site" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group(REPLAY_GROUP))
    d = os.environ.get(GROUPS_ENV)
    if hasattr(config, "workerinput") and d and os.path.isdir(d):  # a worker: tell the controller's scheduler
        groups = {}
        for item in items:
            names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                            for m in item.iter_markers("xdist_group")})
            if names:
                groups[item.nodeid] = "_".join(names)
        path = os.path.join(d, f"{config.workerinput['workerid']}.json")
        with open(path + ".tmp", "w") as fh:
            json.dump(groups, fh)
        os.replace(path + ".tmp", path)
    if HAS_GPU:
        return
    skip = pytest.mark.skip(reason=f"needs an NVIDIA sm_90+ GPU ({WHY_NO_GPU}; run on the H200: pytest -m gpu)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


class _ReplaySite:
    """One replay build of every notebook (`report.build(mode="replay")`, ~1.5 min on 2 cores), made on
    first use and shared by the report, notebook and browser tests; a failed build fails each test that
    uses it. Under pytest-xdist the build is shared by the workers too: it lives in the session's common
    temp folder, and the first worker to need it builds it under a file lock while the others wait and
    reuse it (with `--dist loadgroup` those tests all run on one worker anyway: REPLAY_GROUP)."""

    def __init__(self, base):
        self.base = base
        self.out = None
        self.error = None
        self.seconds = None

    def get(self):
        if self.error is not None:
            raise self.error
        if self.out is None:
            import fcntl
            import json
            import time

            from gluon_lab.report import build
            site, done = self.base / "site", self.base / "replay-site.json"
            self.base.mkdir(parents=True, exist_ok=True)
            with open(self.base / "replay-site.lock", "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)  # held while one process builds; the others then read `done`
                if done.exists():  # another worker built it (or failed to): the same result here
                    state = json.loads(done.read_text())
                    if state.get("error"):
                        self.error = RuntimeError(f"the session's replay build failed (in another worker): {state['error']}")
                        raise self.error
                    self.seconds, self.out = state["seconds"], site
                    return self.out
                t0 = time.monotonic()
                try:
                    build(mode="replay", out_dir=site)
                except Exception as e:  # noqa: BLE001 - re-raised for every test that needs the site
                    self.error = e
                    done.write_text(json.dumps({"error": f"{type(e).__name__}: {e}"}))
                    raise
                self.seconds = time.monotonic() - t0
                done.write_text(json.dumps({"seconds": self.seconds}))
                self.out = site
        return self.out


@pytest.fixture(scope="session")
def replay_site(tmp_path_factory, request):
    if hasattr(request.config, "workerinput"):  # an xdist worker: the folder all workers of this run share
        return _ReplaySite(tmp_path_factory.getbasetemp().parent / "replay-site")
    return _ReplaySite(tmp_path_factory.mktemp("replay-site"))
