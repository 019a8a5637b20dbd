#!/usr/bin/env bash
# The cuda backend's check on the GPU machine (docs/gpu.md), in two halves:
#
#   scripts/gpu-check.sh prepare [BUNDLE]        here: build mosaic and the cuda plugin for that
#                                                machine's CPU and pack them (default
#                                                .device/mosaic-gpu.tar.xz, an ignored folder)
#   scripts/gpu-check.sh run BUNDLE OUT_DIR      there, in one call of the device tool
#
# `run` unpacks the bundle and writes to OUT_DIR (6 files: what the device tool brings
# back): machine.txt (GPU, driver, versions, what `mosaic backends` says of cuda), tests.txt
# (the test binary's cuda tests: every op case of BackendOps on cuda against naive, the
# CudaBackend suite with whole models and --precision tf32), check.txt (bench --backends
# cuda,onednn on resnet50, alexnet-cifar and bert-tiny at batch 2 against naive, what runs on
# cuda; then bench/compare_pytorch_cuda.py's table), sanitizer.txt (compute-sanitizer memcheck on
# one short run), bench.json (the comparison with PyTorch eager on CUDA: alexnet-cifar,
# vgg16-cifar, resnet50 at batch 64 and 1) and summary.txt. It exits 1 if cuda is unavailable
# there, a test or check fails, or the sanitizer reports an error. About 8 minutes at most.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
case "${1:-}" in
  prepare)
    bundle=${2:-.device/mosaic-gpu.tar.xz}
    build=$root/build-gpu
    cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOSAIC_NATIVE=OFF \
          -DCMAKE_CXX_FLAGS=-march=sapphirerapids -DMOSAIC_BUILD_TESTS=ON -DMOSAIC_WITH_TORCH=OFF >/dev/null || exit 1
    cmake --build "$build" --target mosaic mosaic_cuda mosaic_tests || exit 1
    exec "$root/scripts/device_bundle.sh" "$build" "$bundle"
    ;;
  run) ;;
  *)
    echo "usage: $0 prepare [BUNDLE] | run BUNDLE OUT_DIR" >&2
    exit 2
    ;;
esac
[ $# -eq 3 ] || { echo "usage: $0 run BUNDLE OUT_DIR" >&2; exit 2; }
bundle=$2 out=$3
mkdir -p "$out" /tmp/mosaic-gpu
tar -xJf "$bundle" -C /tmp/mosaic-gpu || exit 1
m=/tmp/mosaic-gpu/bin/mosaic
status=0
{
  echo "== machine"
  date -u +%Y-%m-%dT%H:%M:%SZ
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 | head -3
  cat /tmp/mosaic-gpu/BUILD.txt
  "$m" --version
  "$m" backends | grep -A1 "^cuda"
} > "$out/machine.txt" 2>&1
cat "$out/machine.txt"
if ! "$m" backends --names --available | grep -qx cuda; then
  echo "cuda is unavailable on this machine (machine.txt says why)" | tee "$out/summary.txt"
  exit 1
fi

# The cuda tests of the test binary: the op cases against naive, whole models, tf32.
b=/tmp/mosaic-gpu
LD_LIBRARY_PATH=$b/lib MOSAIC_DB=off MOSAIC_TEST_BIN=$m MOSAIC_CUDA_PLUGIN=$b/lib/mosaic/plugins/libmosaic_cuda.so \
  timeout 200 "$b/bin/mosaic_tests.bin" --gtest_filter='*cuda*:*Cuda*' > "$out/tests.txt" 2>&1 || status=1
grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure|error:" "$out/tests.txt" | head -n 40

# Whole models on cuda beside onednn, checked against naive; what runs where.
{
  for model in zoo:resnet50 zoo:alexnet-cifar zoo:bert-tiny; do
    echo "== $model, batch 2"
    timeout 60 "$m" bench "$model" --backends cuda,onednn --batch 2 --iterations 5 --warmup 2 --repeats 1 --no-peaks \
      --no-db || { echo "FAILED: $model"; status=1; }
    "$m" plan "$model" --backend cuda | grep -E "^node|cuda|host" | head -n 12
  done
} > "$out/check.txt" 2>&1
grep -E "^==|check:|FAILED" "$out/check.txt"

sanitizer=/usr/local/cuda/bin/compute-sanitizer
if [ -x "$sanitizer" ]; then
  LD_LIBRARY_PATH=$b/lib timeout 90 "$sanitizer" --tool memcheck --error-exitcode 9 "$b/bin/mosaic.bin" bench \
    zoo:fmnist-cnn --backends cuda --batch 2 --iterations 2 --warmup 1 --repeats 1 --no-peaks --no-db --no-check \
    > "$out/sanitizer.txt" 2>&1
  rc=$?
  [ $rc -ne 0 ] && status=1
  echo "compute-sanitizer: exit $rc ($(grep -c "========= ERROR\|Invalid" "$out/sanitizer.txt") error lines)" | tee -a "$out/check.txt"
else
  echo "compute-sanitizer: not found at $sanitizer" | tee -a "$out/check.txt"
fi

# The targets: cuda beside PyTorch eager on CUDA, inference at batch 64 and 1.
timeout 180 python3 "$root/bench/compare_pytorch_cuda.py" --mosaic "$m" --warmup 5 --iterations 30 \
  --json "$out/bench.json" >> "$out/check.txt" 2>&1 || { echo "FAILED: compare_pytorch_cuda.py"; status=1; }
{
  echo "gpu-check: exit $status"
  grep -h -E "FAILED|compute-sanitizer|^\|" "$out/check.txt"
  grep -h -E "^\[  (PASSED|FAILED|SKIPPED) " "$out/tests.txt"
} | tee "$out/summary.txt"
exit $status
