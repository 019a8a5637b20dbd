#!/bin/sh
# What Mosaic writes, read by ONNX's own checker with its shape inference (python3-onnx):
# the built-in models as `mosaic export` writes them, a model `mosaic train --save` writes,
# and `mosaic quantize`'s QDQ form. An output declared with the wrong rank, a node ONNX does
# not know at the opset written, or a QuantizeLinear/DequantizeLinear whose scale and zero
# point do not fit fails here, where Mosaic's own loader would read its file back happily.
# usage: tests/onnx_checker/check_exports.sh MOSAIC WORKDIR
set -eu
mosaic=$1
work=$2
python=${MOSAIC_PYTHON:-/usr/bin/python3}
if ! "$python" -c 'import onnx' 2>/dev/null; then
  echo "SKIP: $python cannot import onnx (apt-get install python3-onnx)"
  exit 77
fi
rm -rf "$work"
mkdir -p "$work"
for m in fmnist-cnn alexnet-cifar vgg16-cifar bert-tiny vit-tiny lstm-classifier llama-tiny gpt2-tiny-kv; do
  "$mosaic" export "$m" -o "$work/$m.onnx" > /dev/null
done
"$mosaic" train zoo:fmnist-cnn --data synthetic:128,1,28,28,10 --steps 2 --batch 16 --no-db --save "$work/trained.onnx" > /dev/null
"$mosaic" quantize zoo:fmnist-cnn --data synthetic:128,1,28,28,10 --backend naive -o "$work/quantized.onnx" > /dev/null
"$mosaic" quantize zoo:bert-tiny --samples 1 --per-tensor --activation-type int8 --backend naive --no-evaluate \
  -o "$work/bert-tiny-quantized.onnx" > /dev/null
"$python" - "$work"/*.onnx <<'PY'
import sys
import onnx
failed = 0
for path in sys.argv[1:]:
    try:
        onnx.checker.check_model(onnx.load(path), full_check=True)
        print(f"PASSED {path}")
    except Exception as e:  # the checker's ValidationError and shape inference's InferenceError
        failed += 1
        print(f"FAILED {path}: {e}")
print(f"{len(sys.argv) - 1 - failed} passed, {failed} failed (onnx {onnx.__version__})")
sys.exit(1 if failed else 0)
PY
