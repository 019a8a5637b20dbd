#!/usr/bin/env bash
# The corpus of today's exports beside ONNX Runtime at batches 1 and 8 (issue 51's bar):
# tests/corpus/make_corpus.py writes every model again at each batch (MOSAIC_CORPUS_BATCH;
# the committed cases are at batch 2), outside the tree, then bench/compare_peers.py times
# mosaic-onednn and ONNX Runtime on them, interleaved round by round, each engine's output
# checked against the case's.
#
# usage: bench/corpus_batches.sh [PYTHON] [OUT]
#   PYTHON: an interpreter with torch, torchvision, transformers, timm, onnx, onnxscript and
#           onnxruntime (default /tmp/venv/bin/python; make_corpus.py's docstring installs one)
#   OUT:    where the cases go (default /tmp/mosaic-corpus-batches)
# Writes docs/perf_peers_corpus_b1.json and docs/perf_peers_corpus_b8.json and prints the tables.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
py=${1:-/tmp/venv/bin/python}
out=${2:-/tmp/mosaic-corpus-batches}
for b in 1 8; do
  if [ ! -f "$out/b$b/MANIFEST.tsv" ]; then
    MOSAIC_CORPUS_BATCH=$b "$py" "$here/tests/corpus/make_corpus.py" "$out/b$b" > "$out.b$b.log" 2>&1 ||
      { echo "corpus_batches: make_corpus.py at batch $b failed; see $out.b$b.log" >&2; exit 1; }
  fi
  python3 "$here/bench/compare_peers.py" --corpus "$out/b$b" --engines mosaic-onednn,onnxruntime --rounds 3 \
    --warmup 10 --iterations 50 --threads 2 --python "$py" --json "$here/docs/perf_peers_corpus_b$b.json"
done
