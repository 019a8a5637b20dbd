#!/usr/bin/env python3
"""MatMulInteger where ONNX Runtime and ONNX's reference disagree: uint8 activations times int8
weights whose pairwise products overflow int16.

x86 CPUs without VNNI multiply uint8 by int8 with VPMADDUBSW, which adds each pair of
products into a saturating int16. Two products of 255 and -128 sum to -65,280, which
saturates to -32,768. ONNX specifies exact int32 accumulation. This script builds one
MatMulInteger node with such values and runs it three ways:
- ONNX Runtime;
- ONNX's reference evaluator (onnx.reference);
- Mosaic's naive oracle (`mosaic verify` against the reference's output).
It prints what each gives. Use it to see whether the ONNX Runtime build on this CPU
saturates. Needs onnx and onnxruntime (PyPI); no part of Mosaic's build or tests depends on it.

usage: bench/ort_int8_saturation.py [--mosaic build/mosaic] [--python /tmp/venv/bin/python]
"""
import argparse
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

WORKER = r'''
import sys, os, json
import numpy as np
import onnx
from onnx import helper, numpy_helper, TensorProto
from onnx.reference import ReferenceEvaluator
import onnxruntime as ort
out = sys.argv[1]
a = np.full((1, 4), 255, np.uint8)                    # activations at the top of uint8
b = np.full((4, 1), -128, np.int8)                    # weights at the bottom of int8
g = helper.make_graph([helper.make_node("MatMulInteger", ["a", "b"], ["y"])], "g",
                      [helper.make_tensor_value_info("a", TensorProto.UINT8, [1, 4]),
                       helper.make_tensor_value_info("b", TensorProto.INT8, [4, 1])],
                      [helper.make_tensor_value_info("y", TensorProto.INT32, [1, 1])])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
m.ir_version = 8
ref = ReferenceEvaluator(m).run(None, {"a": a, "b": b})[0]
got = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"a": a, "b": b})[0]
os.makedirs(os.path.join(out, "test_data_set_0"), exist_ok=True)
onnx.save(m, os.path.join(out, "model.onnx"))
for name, arr, f in (("a", a, "input_0"), ("b", b, "input_1"), ("y", ref, "output_0")):
    with open(os.path.join(out, "test_data_set_0", f + ".pb"), "wb") as fh:
        fh.write(numpy_helper.from_array(arr, name).SerializeToString())
print(json.dumps({"reference": int(ref.ravel()[0]), "onnxruntime": int(got.ravel()[0]),
                  "onnxruntime_version": ort.__version__, "onnx_version": onnx.__version__}))
'''


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mosaic", default=os.path.join(ROOT, "build", "mosaic"))
    ap.add_argument("--python", default=sys.executable, help="an interpreter with onnx and onnxruntime")
    args = ap.parse_args()
    import json
    with tempfile.TemporaryDirectory(prefix="mosaic-int8-") as d:
        r = subprocess.run([args.python, "-c", WORKER, d], capture_output=True, text=True)
        if r.returncode:
            sys.exit("ort_int8_saturation: the worker failed (onnx and onnxruntime installed?):\n" + r.stderr[-1500:])
        res = json.loads(r.stdout.strip().splitlines()[-1])
        v = subprocess.run([args.mosaic, "verify", d, "--backend", "naive"], capture_output=True, text=True)
        mosaic_ok = v.returncode == 0
    exact = 4 * 255 * -128
    print(f"MatMulInteger of uint8 255 x int8 -128 over k = 4 (exact: {exact}):")
    print(f"  onnx {res['onnx_version']} reference: {res['reference']}")
    print(f"  onnxruntime {res['onnxruntime_version']}: {res['onnxruntime']}"
          + ("" if res["onnxruntime"] == exact else "  (differs: int16 saturation of the pairwise products)"))
    print(f"  mosaic naive: {'equals the reference' if mosaic_ok else 'DIFFERS from the reference'}")
    return 0 if mosaic_ok and res["reference"] == exact else 1


if __name__ == "__main__":
    sys.exit(main())
