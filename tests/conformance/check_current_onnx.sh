#!/usr/bin/env bash
# The node tests of the onnx release installed beside Mosaic (PyPI's, not Debian's 1.12),
# written by scripts/onnx_node_tests.py into the build tree and verified on every backend:
# no case may fail, and every committed case (tests/conformance/onnx123_naive_pass.txt)
# must pass on the naive oracle. Needs a Python with onnx >= 1.20: MOSAIC_ONNX_PYTHON, else
# python3; skipped (77) without one. scripts/test.sh --full runs it.
set -euo pipefail
mosaic=$1 out=$2 expected=$3
here=$(cd "$(dirname "$0")/../.." && pwd)
py=${MOSAIC_ONNX_PYTHON:-python3}
if ! "$py" -c 'import onnx, sys; v = tuple(int(x) for x in onnx.__version__.split(".")[:2]); sys.exit(v < (1, 20))' 2>/dev/null; then
  echo "no Python with onnx >= 1.20 (set MOSAIC_ONNX_PYTHON, e.g. a venv with pip install onnx==1.23.2): skipped"
  exit 77
fi
"$py" "$here/scripts/onnx_node_tests.py" "$out" 2>/dev/null | tail -n 1
exec "$here/tests/check_conformance.sh" "$mosaic" "$out/node" "$expected"
