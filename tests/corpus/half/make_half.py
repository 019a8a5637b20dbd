#!/usr/bin/env python3
"""Writes float16 versions of a few corpus models (tests/corpus/cases) as ONNX backend-test
cases in tests/corpus/half/cases: every float32 tensor of the model made float16 by ONNX
Runtime's converter (onnxruntime.transformers.float16, as users convert exports for
deployment), the float32 inputs rounded to float16, and the expected outputs computed by
onnx's reference evaluator (numpy, float16 arithmetic per op): a reference independent of
Mosaic. Needs onnx and onnxruntime from PyPI:

    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install onnx onnxruntime numpy
    /tmp/venv/bin/python tests/corpus/half/make_half.py
"""
import os
import shutil
import sys

import numpy as np
import onnx
from onnx import numpy_helper
from onnx.reference import ReferenceEvaluator
from onnxruntime.transformers.float16 import convert_float_to_float16

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = os.path.join(HERE, "..", "cases")
MODELS = ["resnet_hf.torchscript", "bert.torchscript", "timm_vit.torchscript", "gpt2.dynamo"]


def main():
    out_root = os.path.join(HERE, "cases")
    if os.path.exists(out_root):
        shutil.rmtree(out_root)
    for name in MODELS:
        src = os.path.join(CASES, name)
        model = onnx.load(os.path.join(src, "model.onnx"))
        half = convert_float_to_float16(model, keep_io_types=False, disable_shape_infer=True)
        ref = ReferenceEvaluator(half)
        inputs = {}
        for i, vi in enumerate(half.graph.input):
            t = numpy_helper.to_array(onnx.load_tensor(os.path.join(src, "test_data_set_0", f"input_{i}.pb")))
            if t.dtype == np.float32:
                t = t.astype(np.float16)
            inputs[vi.name] = t
        try:
            outputs = ref.run(None, inputs)
        except Exception as e:  # an op the reference evaluator lacks in float16
            print(f"{name}: skipped ({type(e).__name__}: {str(e)[:100]})")
            continue
        dst = os.path.join(out_root, name + ".float16")
        os.makedirs(os.path.join(dst, "test_data_set_0"))
        onnx.save(half, os.path.join(dst, "model.onnx"))
        for i, vi in enumerate(half.graph.input):
            onnx.save_tensor(numpy_helper.from_array(inputs[vi.name], vi.name),
                             os.path.join(dst, "test_data_set_0", f"input_{i}.pb"))
        for i, (vo, value) in enumerate(zip(half.graph.output, outputs)):
            onnx.save_tensor(numpy_helper.from_array(np.asarray(value), vo.name),
                             os.path.join(dst, "test_data_set_0", f"output_{i}.pb"))
        print(f"{name}: {os.path.getsize(os.path.join(dst, 'model.onnx'))} bytes")


if __name__ == "__main__":
    sys.exit(main())
