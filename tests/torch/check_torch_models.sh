#!/usr/bin/env bash
# Exports torchvision CNNs with PyTorch 1.13 (Debian python3-torch) and checks that every
# backend reproduces PyTorch's outputs (rtol 1e-3, atol 1e-4). Skips (77) without PyTorch.
set -euo pipefail
mosaic=$1 out=$2
here=$(cd "$(dirname "$0")" && pwd)
# Debian's interpreter: a python3 earlier on PATH (pyenv, venv) would not see python3-torch.
PY=${MOSAIC_PYTHON:-/usr/bin/python3}
if ! "$PY" -c 'import torch, torchvision, onnx' 2>/dev/null; then
  echo "python3-torch / python3-torchvision / python3-onnx not installed: skipping"; exit 77
fi
if [ ! -f "$out/.complete" ]; then
  rm -rf "$out"; mkdir -p "$out"
  "$PY" "$here/gen_torch_cases.py" "$out" 2>&1 | grep -v -i warn || true
  touch "$out/.complete"
fi
"$mosaic" verify "$out" --backend all --rtol 1e-3 --atol 1e-4
