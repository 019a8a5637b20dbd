#!/usr/bin/env bash
# Runs on the 16-core GPU machine (docs/performance.md, "On 16 cores"): the peer table of
# bench/compare_peers.py with the machine's own Python packages (it reaches no PyPI), and bf16
# against float32 for inference and training at batch 64, from a Mosaic packed by
# scripts/device_bundle.sh. Everything it measures goes to OUT_DIR.
#
# usage: scripts/device_peers.sh BUNDLE.tar.xz OUT_DIR [ROUNDS]
set -uo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 BUNDLE.tar.xz OUT_DIR [ROUNDS]" >&2
  exit 2
fi
bundle=$1 out=$2 rounds=${3:-1}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out" /tmp/mosaic-device
tar -xJf "$bundle" -C /tmp/mosaic-device || exit 1
m=/tmp/mosaic-device/bin/mosaic
threads=$(nproc)
export PYTHONUNBUFFERED=1
{
  echo "== machine"
  date -u +%Y-%m-%dT%H:%M:%SZ
  grep -m1 "model name" /proc/cpuinfo
  nproc
  grep -o -w -E "avx512_bf16|amx_bf16|amx_tile|avx512f" /proc/cpuinfo | sort | uniq -c
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | head -3
  cat /tmp/mosaic-device/BUILD.txt
  "$m" --version
} 2>&1 | tee "$out/machine.txt"
# 1. The peers, with the machine's Python (ONNX Runtime, PyTorch; OpenVINO if there).
echo "== peers, $threads threads, $rounds rounds"
timeout 280 python3 "$root/bench/compare_peers.py" --mosaic "$m" --python python3 --threads "$threads" \
  --rounds "$rounds" --json "$out/perf_peers_16.json" > "$out/peers.md" 2> "$out/peers.log"
echo "compare_peers exit $?"
cat "$out/peers.md"
tail -5 "$out/peers.log"
# 2. bf16 against float32, inference and training, batch 64 (onednn).
for model in alexnet-cifar vgg16-cifar; do
  echo "== $model inference, f32 and bf16, batch 64"
  timeout 60 "$m" bench "zoo:$model" --backends onednn --precision both --batch 64 --threads "$threads" \
    --warmup 10 --iterations 50 --no-db --no-peaks --json "$out/bf16_infer_$model.json" 2>&1 |
    grep -E "^(summary|check|note|cpu):|declined"
  echo "== $model training, f32 and bf16, batch 64"
  timeout 45 "$m" bench "zoo:$model" --backends onednn --precision both --mode training --batch 64 \
    --threads "$threads" --warmup 2 --iterations 10 --no-check --no-db --no-peaks --json "$out/bf16_train_$model.json" 2>&1 |
    grep -E "^(summary|check|note|cpu):|declined"
done 2>&1 | tee "$out/bf16.txt"
# 3. Jitter (median over minimum at full threads) under OpenMP settings, VGG16 batch 64.
echo "== jitter: vgg16-cifar batch 64, onednn, $threads threads, 100 iterations"
for env in "" "OMP_WAIT_POLICY=active" "OMP_PROC_BIND=close OMP_PLACES=cores" \
           "OMP_WAIT_POLICY=active OMP_PROC_BIND=close OMP_PLACES=cores"; do
  timeout 25 env $env "$m" bench zoo:vgg16-cifar --backends onednn --batch 64 --threads "$threads" --warmup 20 \
    --iterations 100 --no-check --no-db --no-peaks --json "$out/jitter.json" > /dev/null 2>&1
  python3 -c "import json,sys; r=json.load(open(sys.argv[1]))['runs'][0]['summary']; print('%-55s median %.2f ms  min %.2f ms  median/min %.3f' % (sys.argv[2] or '(defaults)', r['median_ms'], r['min_ms'], r['median_ms']/r['min_ms']))" "$out/jitter.json" "$env"
done 2>&1 | tee "$out/jitter.txt"
rm -f "$out/jitter.json"
