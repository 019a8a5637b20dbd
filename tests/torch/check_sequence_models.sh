#!/usr/bin/env bash
# Exports sequence models (BERT-, GPT- and ViT-style, nn.TransformerEncoder, LSTM and GRU
# classifiers, opsets 13, 14, 17) with PyTorch 1.13 and checks that every backend reproduces
# PyTorch's outputs with the token ids as run-time int64 inputs. Nodes a backend has no
# kernel for run on naive (--fallback naive); the verdicts count them. Fails on any FAILED
# verdict, on any UNSUPPORTED one, or when a case needed its ids bound as constants.
# Skips (77) without PyTorch.
# usage: check_sequence_models.sh MOSAIC OUT [GENERATOR]: GENERATOR (default
# gen_sequence_cases.py, beside this script) writes the cases; gen_slice_cases.py writes
# PyTorch's open-ended slices (INT64_MAX and INT64_MIN bounds), checked the same way.
set -euo pipefail
mosaic=$1 out=$2 generator=${3:-gen_sequence_cases.py}
here=$(cd "$(dirname "$0")" && pwd)
PY=${MOSAIC_PYTHON:-/usr/bin/python3}
if ! "$PY" -c 'import torch, onnx' 2>/dev/null; then
  echo "python3-torch / python3-onnx not installed: skipping"; exit 77
fi
if [ ! -f "$out/.complete" ] || [ "$here/$generator" -nt "$out/.complete" ]; then
  rm -rf "$out"; mkdir -p "$out"
  "$PY" "$here/$generator" "$out" 2>&1 | grep -v -i warn | grep -v "^ " || true
  touch "$out/.complete"
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
"$mosaic" verify "$out" --backend all --fallback naive --rtol 1e-3 --atol 1e-4 | tee "$log" || status=$?
if grep -q "^UNSUPPORTED" "$log"; then echo "FAIL: a case is UNSUPPORTED"; exit 1; fi
if grep -q "bound as constants" "$log"; then echo "FAIL: token ids were folded as constants"; exit 1; fi
exit $status
