# source ci/quack_install.sh DIR  (on the H200): DIR holds the small wheels of ci/quack_wheels.sh and the
# parts of the xz-packed nvidia-cutlass-dsl-libs-cu12 files (cu12-libs.tar.xz.part-0, -1, ...). Installs the wheels with --target
# /tmp/site, unpacks the libs on top (after pip: pip --upgrade --target replaces whole package folders)
# and exports PYTHONPATH (a --target install skips .pth files: nvidia_cutlass_dsl/dsl_packages goes on
# the path by hand).
d=${1:?usage: source ci/quack_install.sh DIR}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$d"/*.whl
cat "$d"/cu12-libs.tar.xz.part-* | python3 -c "import sys, tarfile; tarfile.open(fileobj=sys.stdin.buffer, mode='r|xz').extractall('/tmp/site', filter='tar')" && rm -f "$d"/cu12-libs.tar.xz.part-*
export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages${PYTHONPATH:+:$PYTHONPATH}
python3 -c "import quack.rmsnorm, cutlass; print('quack', getattr(quack, '__version__', '?'), 'cutlass-dsl ok')"
