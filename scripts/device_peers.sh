#!/usr/bin/env bash
# Runs on the 16-core GPU machine (docs/performance.md, "On 16 cores"), from a Mosaic packed by
# scripts/device_bundle.sh; everything it measures goes to OUT_DIR (at most 8 files, what the
# device tool brings back). PARTS, comma-separated (default peers,bf16,jitter):
#   peers    (run last) the peer table of bench/compare_peers.py with the machine's own Python packages
#            (it reaches no PyPI; a package it lacks, OpenVINO there, is reported missing)
#   bf16     bf16 against float32 at batch 64, inference (checked) and training, onednn
#            ($BF16_MODES: "inference training" by default), into bf16.txt and bf16.json
#   jitter   median over minimum of VGG16 at batch 64 under OpenMP wait and binding settings
#   profile  where bf16 and float32 training spend their time, by oneDNN implementation
#            (ONEDNN_VERBOSE summed by bench/onednn_profile.py)
#
# usage: scripts/device_peers.sh BUNDLE.tar.xz OUT_DIR [ROUNDS] [PARTS]
set -uo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 BUNDLE.tar.xz OUT_DIR [ROUNDS] [PARTS]" >&2
  exit 2
fi
bundle=$1 out=$2 rounds=${3:-1} parts=",${4:-peers,bf16,jitter},"
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
} > "$out/machine.txt" 2>&1
cat "$out/machine.txt"
if [[ $parts == *,bf16,* ]]; then
  for model in alexnet-cifar vgg16-cifar; do
    for mode in ${BF16_MODES:-inference training}; do
      echo "== $model $mode, f32 and bf16, batch 64"
      if [ "$mode" = inference ]; then  # checked against the oracle
        timeout 60 "$m" bench "zoo:$model" --backends onednn --precision both --batch 64 --threads "$threads" \
          --warmup 10 --iterations 50 --no-db --no-peaks --json "/tmp/mosaic-device/bf16_${mode}_$model.json"
      else
        timeout 45 "$m" bench "zoo:$model" --backends onednn --precision both --mode training --batch 64 \
          --threads "$threads" --warmup 2 --iterations 10 --no-check --no-db --no-peaks \
          --json "/tmp/mosaic-device/bf16_${mode}_$model.json"
      fi 2>&1 | grep -E "^(summary|check|note|cpu):|declined"
    done
  done 2>&1 | tee "$out/bf16.txt"
  # One file for all of them: {"MODE MODEL": bench JSON}.
  python3 - "$out/bf16.json" /tmp/mosaic-device/bf16_*.json <<'PY'
import json, os, sys
docs = {}
for p in sys.argv[2:]:
    mode, model = os.path.basename(p)[5:-5].split("_", 1)
    docs[mode + " " + model] = json.load(open(p))
json.dump(docs, open(sys.argv[1], "w"), indent=1)
PY
fi
if [[ $parts == *,profile,* ]]; then
  for precision in bf16 f32; do
    for model in vgg16-cifar alexnet-cifar; do
      echo "== $model training step, batch 64, $precision: oneDNN time by implementation"
      ONEDNN_VERBOSE=1 timeout 40 "$m" bench "zoo:$model" --backends onednn --precision "$precision" --mode training \
        --batch 64 --threads "$threads" --warmup 1 --iterations 1 --no-check --no-db --no-peaks 2>&1 |
        python3 "$root/bench/onednn_profile.py" --top 12
    done
  done 2>&1 | tee "$out/profile.txt"
fi
if [[ $parts == *,jitter,* ]]; then
  echo "== jitter: vgg16-cifar batch 64, onednn, $threads threads, 100 iterations"
  for env in "" "OMP_WAIT_POLICY=active" "OMP_PROC_BIND=close OMP_PLACES=cores" \
             "OMP_WAIT_POLICY=active OMP_PROC_BIND=close OMP_PLACES=cores"; do
    timeout 25 env $env "$m" bench zoo:vgg16-cifar --backends onednn --batch 64 --threads "$threads" --warmup 20 \
      --iterations 100 --no-check --no-db --no-peaks --json /tmp/mosaic-device/jitter.json > /dev/null 2>&1
    python3 -c "import json,sys; r=json.load(open(sys.argv[1]))['runs'][0]['summary']; print('%-58s median %.2f ms  min %.2f ms  median/min %.3f' % (sys.argv[2] or '(defaults)', r['median_ms'], r['min_ms'], r['median_ms']/r['min_ms']))" /tmp/mosaic-device/jitter.json "$env"
  done 2>&1 | tee "$out/jitter.txt"
fi
if [[ $parts == *,peers,* ]]; then
  echo "== peers (last: what it measured survives its timeout in the JSON), $threads threads, $rounds round(s)"
  # OpenBLAS 0.3.21 does not know that CPU by name and takes Prescott, its slowest kernels:
  # im2col gets the AVX-512 ones where the CPU has AVX-512. $PEERS_ENGINES narrows the engines
  # (torch.compile compiles for about a minute in each of its processes there).
  grep -qw avx512f /proc/cpuinfo && export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-SkylakeX}
  timeout "${PEERS_TIMEOUT:-300}" python3 "$root/bench/compare_peers.py" --mosaic "$m" --python python3 \
    ${PEERS_ENGINES:+--engines "$PEERS_ENGINES"} \
    --threads "$threads" --rounds "$rounds" --json "$out/perf_peers_16.json" > "$out/peers.md" 2> "$out/peers.log"
  echo "compare_peers exit $?"
  cat "$out/peers.md"
  grep "^{" "$out/peers.log"
fi
