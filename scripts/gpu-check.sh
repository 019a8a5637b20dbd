#!/usr/bin/env bash
# The cuda backend's check on the GPU machine (docs/gpu.md), in two halves:
#
#   scripts/gpu-check.sh prepare [BUNDLE]        here: build mosaic and the cuda plugin for that
#                                                machine's CPU and pack them (default
#                                                .device/mosaic-gpu.tar.xz, an ignored folder)
#   scripts/gpu-check.sh run BUNDLE OUT_DIR      there, in one call of the device tool
#
# `run` unpacks the bundle and writes to OUT_DIR (at most 6 files: what the device tool brings
# back): machine.txt (GPU, driver, versions, what `mosaic backends` says of cuda), check.txt
# (bench --backends cuda,onednn on fmnist-cnn, alexnet-cifar and bert-tiny at batch 4: the
# check against naive, nodes on cuda, the copies), sanitizer.txt (compute-sanitizer memcheck on
# one short run), bench.json (alexnet-cifar at batch 64: cuda beside onednn) and summary.txt. It
# exits 1 if cuda is unavailable there, a check fails, or the sanitizer reports an error.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
case "${1:-}" in
  prepare)
    bundle=${2:-.device/mosaic-gpu.tar.xz}
    build=$root/build-gpu
    cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOSAIC_NATIVE=OFF \
          -DCMAKE_CXX_FLAGS=-march=sapphirerapids -DMOSAIC_BUILD_TESTS=OFF -DMOSAIC_WITH_TORCH=OFF >/dev/null || exit 1
    cmake --build "$build" --target mosaic mosaic_cuda || exit 1
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

models="zoo:fmnist-cnn zoo:alexnet-cifar zoo:bert-tiny"
{
  for model in $models; do
    echo "== $model, batch 4"
    "$m" bench "$model" --backends cuda,onednn --batch 4 --iterations 5 --warmup 2 --repeats 1 --no-peaks --no-db \
      || { echo "FAILED: $model"; status=1; }
    "$m" plan "$model" --backend cuda | tail -n 1
  done
} > "$out/check.txt" 2>&1
grep -E "^==|check|FAILED|summary" "$out/check.txt"

sanitizer=/usr/local/cuda/bin/compute-sanitizer
if [ -x "$sanitizer" ]; then
  LD_LIBRARY_PATH=/tmp/mosaic-gpu/lib "$sanitizer" --tool memcheck --error-exitcode 9 /tmp/mosaic-gpu/bin/mosaic.bin bench zoo:fmnist-cnn --backends cuda \
    --batch 2 --iterations 2 --warmup 1 --repeats 1 --no-peaks --no-db --no-check > "$out/sanitizer.txt" 2>&1
  rc=$?
  [ $rc -eq 9 ] && status=1
  echo "compute-sanitizer: exit $rc ($(grep -c "========= ERROR\|Invalid" "$out/sanitizer.txt") error lines)" | tee -a "$out/check.txt"
else
  echo "compute-sanitizer: not found at $sanitizer" | tee -a "$out/check.txt"
fi

"$m" bench zoo:alexnet-cifar --backends cuda,onednn --batch 64 --no-peaks --no-db --json "$out/bench.json" \
  > /dev/null 2>&1 || status=1
{
  echo "gpu-check: exit $status"
  grep -h -E "FAILED|compute-sanitizer" "$out/check.txt"
} | tee "$out/summary.txt"
exit $status
