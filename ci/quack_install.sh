# source ci/quack_install.sh DIR  (on the H200): DIR holds the small wheels of ci/quack_wheels.sh and the
# three parts of the cu12 libs wheel. Installs them with --target /tmp/site and exports PYTHONPATH
# (a --target install skips .pth files: nvidia_cutlass_dsl/dsl_packages goes on the path by hand).
d=${1:?usage: source ci/quack_install.sh DIR}
w=$(ls "$d"/*.part-0 | sed 's/\.part-0$//')
cat "$w".part-0 "$w".part-1 "$w".part-2 > "$w" && rm -f "$w".part-*
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$d"/*.whl
export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages${PYTHONPATH:+:$PYTHONPATH}
python3 -c "import quack.rmsnorm, cutlass; print('quack', quack.__version__ if hasattr(quack, '__version__') else '?')"
