#!/usr/bin/env bash
# `mosaic report` end to end: real bench, training-bench, sweep and generate runs -> one HTML page,
# opened in headless Chromium. Every figure must decode and every expected figure must be
# there. Keeps a screenshot (docs/report-screenshot.png is one).
# Usage: check_report.sh MOSAIC WORKDIR [SCREENSHOT.png]
set -euo pipefail
mosaic=$(realpath "$1")
work=$(realpath -m "$2")
shot=$(realpath -m "${3:-$work/report.png}")
command -v chromium >/dev/null || { echo "FAIL: chromium is not installed (scripts/setup.sh installs it)"; exit 1; }
rm -rf "$work" && mkdir -p "$work" && cd "$work"
export MOSAIC_DB=off MOSAIC_PROGRESS=0
quiet() { "$@" > log.txt 2>&1 || { cat log.txt; echo "FAIL: $*"; exit 1; }; }
quiet "$mosaic" bench zoo:fmnist-cnn --backends im2col,onednn --batch 4 --iterations 10 --warmup 2 --json b4.json
quiet "$mosaic" bench zoo:fmnist-cnn --backends im2col,onednn --batch 16 --iterations 10 --warmup 2 --json b16.json
quiet "$mosaic" bench zoo:fmnist-cnn --mode training --backends im2col,onednn --batch 8 --iterations 5 --warmup 1 --json t8.json
cat > sweep.yaml <<'YAML'
name: report-check
output: sweep
data: synthetic:64,1,28,28,10
models: zoo:fmnist-cnn
backends: [onednn]
optimizers: [sgd, adam]
lr: 0.01
batch: 8
epochs: 3
steps_per_epoch: 4
YAML
quiet "$mosaic" sweep sweep.yaml
# Data-parallel axes (under mpirun): the speed-up figure.
cat > scaling.yaml <<'YAML'
name: scaling-check
output: scaling
data: synthetic:96,1,28,28,10
models: zoo:fmnist-cnn
batch: 8
epochs: 2
steps_per_epoch: 3
evaluate: false
threads: 1
ranks: [1, 2]
mode: [allreduce, ps]
YAML
OMPI_MCA_btl_vader_single_copy_mechanism=none quiet "$mosaic" sweep scaling.yaml
# A generation swept over context depths: tokens/s vs depth and the inter-token latency CDF.
quiet "$mosaic" generate zoo:gpt2-tiny-kv --backend onednn --context 4,8,16 --new-tokens 6 --runs 2 --json g.json
quiet "$mosaic" report b4.json b16.json t8.json sweep scaling g.json -o report.html --title "Mosaic report check"

# 1 throughput-vs-batch (batches 4 and 16) + 3 bench runs x (stacked bars + roofline) + 1 speed-up vs workers
# + 2 curves (one per sweep) + 2 of the generation.
expected=12
chrome() { chromium --headless --no-sandbox --disable-gpu --user-data-dir="$work/chrome" "$@" 2> chrome.log; }
chrome --dump-dom "file://$work/report.html" > dom.html || { cat chrome.log; echo "FAIL: chromium could not open the page"; exit 1; }
loaded=$(grep -o 'data-figures-loaded="[0-9]*/[0-9]*"' dom.html || true)
if [ "$loaded" != "data-figures-loaded=\"$expected/$expected\"" ]; then
  echo "FAIL: figures decoded in Chromium: '${loaded:-none (the load handler did not run)}', expected $expected/$expected"
  exit 1
fi
for title in "Throughput vs batch size: zoo:fmnist-cnn, inference" "Per-layer time per backend: zoo:fmnist-cnn, batch 8, training" \
             "Roofline: zoo:fmnist-cnn, batch 16, inference" "Accuracy and loss vs epoch: zoo:fmnist-cnn" \
             "Data-parallel speed-up vs workers: zoo:fmnist-cnn, onednn sgd lr 0.01, batch 8 per worker (sweep scaling-check)" \
             "Tokens/s vs context depth" "Inter-token latency CDF"; do
  grep -qF "$title" dom.html || { echo "FAIL: no figure '$title'"; exit 1; }
done
chrome --hide-scrollbars --window-size=1100,2600 --screenshot="$shot" "file://$work/report.html" || { cat chrome.log; exit 1; }
[ -s "$shot" ] || { echo "FAIL: no screenshot"; exit 1; }
echo "PASS: $expected/$expected figures decoded in Chromium; screenshot $shot"
