#!/usr/bin/env bash
# The cuda backend's check on the GPU machine (docs/gpu.md), in two halves:
#
#   scripts/gpu-check.sh prepare [BUNDLE]        here: build mosaic, the cuda plugin and the test
#                                                binary for any x86-64 with AVX2 (x86-64-v3: that
#                                                machine's CPU may be Intel's or AMD's) and pack them
#                                                (default .device/mosaic-gpu.tar.xz, an ignored folder)
#   scripts/gpu-check.sh run BUNDLE OUT_DIR      there, in one call of the device tool
#
# `run` unpacks the bundle and writes to OUT_DIR six files (the device tool brings back 8):
#   summary.txt   when each step began, then the outcome: the tables and the tests' verdicts
#   machine.txt   GPU, CPU, driver, versions, what `mosaic backends` says of cuda
#   tests.txt     the test binary's cuda tests: every op case of BackendOps on cuda against
#                 naive, every backward case (OptimisedBackward) and the training suites
#                 (WholeNetwork, GradcheckBackends) on cuda, the CudaBackend suite with whole
#                 models in inference and training and --precision tf32
#   check.txt     bench on resnet50 (cuda), alexnet-cifar and bert-tiny (cuda, onednn) at batch
#                 2 against naive, what runs on cuda; bench/compare_pytorch_cuda.py's table;
#                 ResNet-50's pointwise convolutions by cuDNN against cuBLAS (A/B, twice);
#                 compute-sanitizer's memcheck of two short training runs (fmnist-cnn, bert-tiny)
#   bench.json    that comparison with PyTorch eager on CUDA: alexnet-cifar, vgg16-cifar,
#                 resnet50, a training step at batch 64, inference at batch 64 and 1
#   profile.txt   bench/profile_cuda_nodes.py: device time per layer beside PyTorch's,
#                 ResNet-50 inference at batch 64, float32; bench/profile_cuda_training.py: its
#                 training step by stage and by layer kind, forward and backward
# MOSAIC_GPU_STEPS (default "tests check compare pointwise profile sanitizer") picks the steps,
# to rerun only some within a short call (run only: compare's mode is its own); "seed001" (seed
# 001's training table on cuda, into check.txt) runs only when named.
# It exits 1 if cuda is unavailable there, a test or check fails, or the sanitizer reports an
# error. 8 minutes at most: each step has its own time limit, cut to what is left of 470 s from
# the start (a step with nothing left is killed at once and counts as failed).
#
#   scripts/gpu-check.sh compare BUNDLE OUT_DIR  there: machine.txt, the comparison and the
#                 float32 profile alone, Mosaic loading the cuDNN of PyTorch's wheel (both sides
#                 then search the same library's algorithms)
# The same bundle serves scripts/device_peers.sh (the CPU beside the GPU: peers, bf16, jitter).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
case "${1:-}" in
  prepare)
    bundle=${2:-.device/mosaic-gpu.tar.xz}
    build=$root/build-gpu
    cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOSAIC_NATIVE=OFF \
          -DCMAKE_CXX_FLAGS=-march=x86-64-v3 -DMOSAIC_BUILD_TESTS=ON -DMOSAIC_WITH_TORCH=OFF >/dev/null || exit 1
    cmake --build "$build" --target mosaic mosaic_cuda mosaic_tests || exit 1
    exec "$root/scripts/device_bundle.sh" "$build" "$bundle"
    ;;
  run|compare) ;;
  *)
    echo "usage: $0 prepare [BUNDLE] | run|compare BUNDLE OUT_DIR" >&2
    exit 2
    ;;
esac
[ $# -eq 3 ] || { echo "usage: $0 $1 BUNDLE OUT_DIR" >&2; exit 2; }
mode=$1 bundle=$2 out=$3
b=/tmp/mosaic-gpu
mkdir -p "$out" "$b"
tar -xJf "$bundle" -C "$b" || exit 1
# The CUDA runtime, cuBLAS and cuDNN the plugin links are the machine's own; where the loader
# does not know them (cuDNN may live only in a Python wheel there), their folders are added for
# Mosaic alone, through a wrapper: Python and PyTorch keep their own.
cudalibs=""
for soname in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcudnn.so.9; do
  ldconfig -p | grep -q "$soname" && continue
  found=$(find /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets /usr/lib /opt \
            -name "$soname" 2>/dev/null | head -n1)
  [ -n "$found" ] || continue
  dir=$(dirname "$found")
  case ":$cudalibs:" in *":$dir:"*) ;; *) cudalibs=${cudalibs:+$cudalibs:}$dir ;; esac
done
# compare: the cuDNN PyTorch loads (its wheel's), so that both sides search the same library.
if [ "$mode" = compare ]; then
  torch_cudnn=$(python3 -c "import os, nvidia.cudnn as c; print(os.path.join(list(c.__path__)[0], 'lib'))" 2>/dev/null)
  [ -f "$torch_cudnn/libcudnn.so.9" ] && cudalibs=$torch_cudnn${cudalibs:+:$cudalibs}
fi
libs="$b/lib${cudalibs:+:$cudalibs}"
printf '#!/bin/sh\nLD_LIBRARY_PATH="%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "%s/bin/mosaic.bin" "$@"\n' \
  "$libs" "$b" > "$b/bin/mosaic-gpu"
chmod +x "$b/bin/mosaic-gpu"
m=$b/bin/mosaic-gpu
export MOSAIC_DB=off

status=0
start=$(date +%s)
steps=" ${MOSAIC_GPU_STEPS:-tests check compare pointwise profile sanitizer} "
[ "$mode" = compare ] && steps=" compare profile "
want() { case "$steps" in *" $1 "*) return 0 ;; esac; return 1; }
# A step's time limit: its own, or what is left of the run's 470 s if that is less (at least 1).
limit() { local left=$(( start + 470 - $(date +%s) )); (( left < 1 )) && left=1; echo $(( $1 < left ? $1 : left )); }
step() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$out/summary.txt"; }  # summary.txt starts with the steps
rm -f "$out/summary.txt" "$out/check.txt" "$out/profile.txt"

step machine
{
  echo "== machine"
  date -u +%Y-%m-%dT%H:%M:%SZ
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 | head -3
  grep -m1 "model name" /proc/cpuinfo
  echo "cpus: $(nproc)"
  echo "cuda libraries added for mosaic: ${cudalibs:-none}"
  cat "$b/BUILD.txt"
  "$m" --version
  "$m" backends | grep -A1 "^cuda"
  LD_LIBRARY_PATH=$libs ldd "$b/lib/mosaic/plugins/libmosaic_cuda.so" | grep -E "cud|cublas|not found"
} > "$out/machine.txt" 2>&1
cat "$out/machine.txt"
if ! "$m" backends --names --available | grep -qx cuda; then
  echo "cuda is unavailable on this machine (machine.txt says why)" | tee -a "$out/summary.txt"
  exit 1
fi

if want tests; then
  # The cuda tests of the test binary: the op cases against naive, whole models, tf32.
  step tests
  LD_LIBRARY_PATH=$libs MOSAIC_TEST_BIN=$m MOSAIC_CUDA_PLUGIN=$b/lib/mosaic/plugins/libmosaic_cuda.so \
    timeout "$(limit 150)" "$b/bin/mosaic_tests.bin" --gtest_filter='*cuda*:*Cuda*' > "$out/tests.txt" 2>&1 || status=1
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[ reach|Failure|error:" "$out/tests.txt" | head -n 40
fi

if want check; then
  # Whole models on cuda beside onednn, checked against naive; what runs where.
  step check
  {
    # resnet50 on cuda alone: its naive reference takes most of the minute.
    for run in "zoo:resnet50 cuda 60" "zoo:alexnet-cifar cuda,onednn 25" "zoo:bert-tiny cuda,onednn 25"; do
      read -r model backends secs <<< "$run"
      echo "== $model, batch 2"
      timeout "$(limit "$secs")" "$m" bench "$model" --backends "$backends" --batch 2 --iterations 5 --warmup 2 --repeats 1 \
        --no-peaks --no-db || { echo "FAILED: $model"; status=1; }
      "$m" plan "$model" --backend cuda | grep -E "^node|cuda|host" | head -n 12
    done
  } >> "$out/check.txt" 2>&1
  grep -E "^==|check:|FAILED" "$out/check.txt"
fi

# The targets: cuda beside PyTorch eager on CUDA, inference at batch 64 and 1 (bench.json is
# rewritten after each row, so a run cut off still brings back what it measured).
if want compare; then
  step compare
  timeout "$(limit 135)" python3 "$root/bench/compare_pytorch_cuda.py" --mosaic "$m" --warmup 5 --iterations 20 \
    --json "$out/bench.json" >> "$out/check.txt" 2>&1 || { echo "FAILED: compare_pytorch_cuda.py"; status=1; }
fi

# The pointwise convolutions' A/B (cuBLAS product where it times faster, against cuDNN alone):
# ResNet-50 inference at batch 64 on cuda, the two forced ways in turn, twice (these machines
# are noisy), into check.txt.
if want pointwise; then
  step pointwise
  {
    echo "== pointwise A/B: resnet50 inference, batch 64, images/s"
    for round in 1 2; do
      for way in cudnn gemm; do
        ips=$(MOSAIC_CUDA_POINTWISE=$way timeout "$(limit 20)" "$m" bench zoo:resnet50 --backends cuda --batch 64 --iterations 20 \
                --warmup 5 --repeats 1 --no-check --no-peaks --no-db --json /tmp/mosaic-pw.json >/dev/null 2>&1 &&
              python3 -c "import json; print(round(json.load(open('/tmp/mosaic-pw.json'))['runs'][0]['summary']['images_per_s']))")
        echo "pointwise $way round $round: ${ips:-FAILED} images/s"
      done
    done
  } >> "$out/check.txt" 2>&1
  grep "^pointwise" "$out/check.txt"
fi

# Where the time goes: device time per layer beside PyTorch's, ResNet-50 at batch 64, float32
# (TF32 gave the same picture: docs/gpu.md).
if want profile; then
  step profile
  timeout "$(limit 40)" python3 "$root/bench/profile_cuda_nodes.py" --mosaic "$m" --model resnet50 --batch 64 \
    >> "$out/profile.txt" 2>&1 || echo "FAILED: profile_cuda_nodes.py" | tee -a "$out/profile.txt"
  [ "$mode" = run ] && { timeout "$(limit 45)" python3 "$root/bench/profile_cuda_training.py" --mosaic "$m" \
    --model resnet50 --batch 64 >> "$out/profile.txt" 2>&1 || echo "FAILED: profile_cuda_training.py" | tee -a "$out/profile.txt"; }
fi

# Seed 001's method on the GPU (not a default step: MOSAIC_GPU_STEPS=seed001 alone, about 7
# minutes): ResNet-50 (SGD, lr 0.128) and BERT-Base (Adam, lr 1e-4) training on cuda at batch 1,
# 64 (BERT: 128) and the largest batch the device holds (bench --find-max-batch), each 20
# warm-up and 100 measured batches in three processes, pooled (--processes 3); --max-seconds
# cuts a process's batches short within the call (the line says how many were measured).
if want seed001; then
  step seed001
  {
    echo "== seed 001 on cuda: training, 20 warm-up + 100 batches, three processes"
    for run in "resnet50 sgd 0.128 64" "bert-base adam 0.0001 128"; do
      read -r model opt lr mid <<< "$run"
      train="--backends cuda --mode training --optimizer $opt --lr $lr --no-db"
      rm -f /tmp/mosaic-s1max.json
      timeout "$(limit 60)" "$m" bench zoo:$model $train --find-max-batch --json /tmp/mosaic-s1max.json
      max=$(python3 -c "import json; print(json.load(open('/tmp/mosaic-s1max.json'))['configs'][0]['max_batch'] or '')" \
              2>/dev/null)
      echo "seed001 $model: largest batch on cuda ${max:-not found}"
      for batch in 1 $mid $max; do
        rm -f /tmp/mosaic-s1.json
        timeout "$(limit 90)" "$m" bench zoo:$model $train --batch "$batch" --warmup 20 --iterations 100 --processes 3 \
          --max-seconds 20 --no-check --no-peaks --json /tmp/mosaic-s1.json > /dev/null
        python3 -c "
import json; r = json.load(open('/tmp/mosaic-s1.json'))['runs'][0]
print('seed001 $model batch $batch: %.1f samples/s, %d batches measured' % (r['summary']['images_per_s'], r['iterations']['measured']))" \
          2>/dev/null || { echo "seed001 $model batch $batch: FAILED"; status=1; }
      done
    done
  } >> "$out/check.txt" 2>&1
  grep "^seed001" "$out/check.txt"
fi

sanitizer=/usr/local/cuda/bin/compute-sanitizer
if ! want sanitizer; then
  :
elif [ -x "$sanitizer" ]; then
  # fmnist-cnn (cuDNN convolutions, pooling, Gemm) and bert-tiny (LayerNorm, MatMul, Gather,
  # Softmax), both training: every kernel's backward, the loss and the optimizer on the device.
  for model in fmnist-cnn bert-tiny; do
    step "sanitizer $model"
    LD_LIBRARY_PATH=$libs timeout "$(limit 45)" "$sanitizer" --tool memcheck --error-exitcode 9 \
      "$b/bin/mosaic.bin" bench zoo:$model --backends cuda --mode training --batch 2 --iterations 2 --warmup 1 --repeats 1 \
      --no-peaks --no-db --no-check > /tmp/mosaic-sanitizer.txt 2>&1
    rc=$?
    [ $rc -ne 0 ] && status=1
    { echo "== compute-sanitizer memcheck, $model training"; grep -E "^=========" /tmp/mosaic-sanitizer.txt | head -n 40; } >> "$out/check.txt"
    echo "compute-sanitizer $model: exit $rc, $(grep -o "ERROR SUMMARY: .*" /tmp/mosaic-sanitizer.txt || echo "no summary")" \
      | tee -a "$out/check.txt"
  done
else
  echo "compute-sanitizer: not found at $sanitizer" | tee -a "$out/check.txt"
fi
step done
{
  echo "gpu-check: exit $status"
  grep -h -E "FAILED|compute-sanitizer|^\|" "$out/check.txt" "$out/profile.txt" 2>/dev/null
  grep -h -E "^\[  (PASSED|FAILED|SKIPPED) |^\[ reach" "$out/tests.txt" 2>/dev/null
} | tee -a "$out/summary.txt"
exit $status
