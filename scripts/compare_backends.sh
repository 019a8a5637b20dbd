#!/usr/bin/env bash
# The main job: export a built-in model and compare every backend on it, node by node
# (the built-ins, and the torch backend where libtorch is installed).
# Usage: scripts/compare_backends.sh [MODEL] [BATCH]   (default alexnet-cifar, 64)
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-alexnet-cifar} batch=${2:-64}
mkdir -p results
build/mosaic export "$model" -o "results/$model.onnx"
build/mosaic info "results/$model.onnx" --batch "$batch" --no-nodes
build/mosaic bench "results/$model.onnx" --batch "$batch" --backends all \
  --json "results/$model-b$batch.json" --csv "results/$model-b$batch.csv"
