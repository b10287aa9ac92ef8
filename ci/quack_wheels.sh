#!/usr/bin/env bash
# Stage QuACK (the norm peer of issue #16) for the H200, here where pip reaches an index:
#   bash ci/quack_wheels.sh            -> .whl/quack/ (small wheels) and .whl/cu12x-1, -2, -3 (the 92 MB
#                                         nvidia-cutlass-dsl-libs-cu12 wheel unpacked and re-compressed with
#                                         xz -9e: 63 MB, in three parts of 21 + 21 + 20 MB)
# A device call carries at most 64 MiB with the tree (~34 MB in 2026-12: the results grow), so the parts
# travel in three calls on the warm machine (it keeps /tmp between calls that follow within ~30 s); each
# call can do real work too:
#   call 1: carry [".whl/quack", ".whl/cu12x-1"], command starts: mkdir -p /tmp/q && cp .whl/quack/* .whl/cu12x-1/* /tmp/q/;
#   call 2: carry [".whl/cu12x-2"],               command starts: cp .whl/cu12x-2/* /tmp/q/;
#   call 3: carry [".whl/cu12x-3"],               command starts: cp .whl/cu12x-3/* /tmp/q/ && source ci/quack_install.sh /tmp/q > /tmp/qi.log 2>&1;
# (source it without a pipe: `source ... | tail` runs it in a subshell and its PYTHONPATH export is lost)
# later calls on the same warm machine: export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages
# then `gluon_lab.registry.variants("rms_norm")` lists "quack" and the 01-04 plans measure it.
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo /.whl/ >> .git/info/exclude
PLAT="--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 \
  --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64"
mkdir -p .whl/quack .whl/cu12
# the device image has torch, cuda-bindings, protobuf, typing-extensions and einops already
python3 -m pip download -q --no-deps $PLAT -d .whl/quack quack-kernels==0.6.5 nvidia-cutlass-dsl==4.8.1 \
  nvidia-cutlass-dsl-libs-base==4.8.1 nvidia-cutlass-dsl-libs-core==4.8.1 "apache-tvm-ffi>=0.1.6,<0.2" \
  torch-c-dlpack-ext==0.1.5
python3 -m pip download -q --no-deps $PLAT -d .whl/cu12 nvidia-cutlass-dsl-libs-cu12==4.8.1
w=$(ls .whl/cu12/nvidia_cutlass_dsl_libs_cu12-*.whl)
# the wheel is a zip (deflate); its files unpacked and re-packed with xz are a third smaller, which saves
# a device call; ci/quack_install.sh unpacks them into the --target site by hand (a wheel is its files)
rm -rf .whl/cu12/x && mkdir -p .whl/cu12/x && (cd .whl/cu12/x && python3 -m zipfile -e "../$(basename "$w")" .)
tar -C .whl/cu12/x -cf - . | xz -9e -T2 > .whl/cu12/cu12-libs.tar.xz
for i in 1 2 3; do rm -rf ".whl/cu12x-$i"; mkdir -p ".whl/cu12x-$i"; done
split -b 21M -d -a 1 .whl/cu12/cu12-libs.tar.xz .whl/cu12/part-
for i in 0 1 2; do mv ".whl/cu12/part-$i" ".whl/cu12x-$((i + 1))/cu12-libs.tar.xz.part-$i"; done
rm -rf .whl/cu12
du -sh .whl/quack .whl/cu12x-*
