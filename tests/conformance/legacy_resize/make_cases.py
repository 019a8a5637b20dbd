#!/usr/bin/env python3
"""Upsample (opsets 7 and 9) and Resize at opset 10 against ONNX Runtime: onnx's node tests
have one Upsample case (nearest, integer scales) and none for Resize 10, so these cases give
the legacy rules an outside reference: nearest and linear, integer and fractional scales,
up and down (linear only down: ONNX Runtime's nearest rounds up when downsampling, where
Mosaic, ONNX's version converter and PyTorch round down; docs/conformance.md).

Needs onnx and onnxruntime (PyPI). Writes node-test directories (model.onnx,
test_data_set_0/) under node/ beside this script; tests/test_opset_gaps.cpp verifies them.
    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install onnx onnxruntime numpy
    /tmp/venv/bin/python tests/conformance/legacy_resize/make_cases.py
"""
import os

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
rng = np.random.default_rng(0)


def case(name, opset, op, attrs, scales, shape):
    x = rng.standard_normal(shape).astype(np.float32)
    inits, inputs = [], ["x"]
    if scales is not None:  # Upsample 9 and Resize 10 take scales as an input
        inits = [numpy_helper.from_array(np.array(scales, np.float32), "s")]
        inputs.append("s")
    node = helper.make_node(op, inputs, ["y"], **attrs)
    graph = helper.make_graph([node], name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 7
    y = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    d = os.path.join(HERE, "node", name)
    os.makedirs(os.path.join(d, "test_data_set_0"), exist_ok=True)
    onnx.save(model, os.path.join(d, "model.onnx"))
    onnx.save_tensor(numpy_helper.from_array(x, "x"), os.path.join(d, "test_data_set_0", "input_0.pb"))
    onnx.save_tensor(numpy_helper.from_array(y, "y"), os.path.join(d, "test_data_set_0", "output_0.pb"))


case("up9_nearest_2x3", 9, "Upsample", {"mode": "nearest"}, [1, 1, 2, 3], [1, 2, 3, 4])
case("up9_linear_2x2", 9, "Upsample", {"mode": "linear"}, [1, 1, 2, 2], [1, 2, 3, 4])
case("up9_nearest_frac", 9, "Upsample", {"mode": "nearest"}, [1, 1, 1.5, 2.5], [1, 2, 4, 4])
case("up7_nearest_attr", 7, "Upsample", {"mode": "nearest", "scales": [1.0, 1.0, 2.0, 2.0]}, None, [1, 2, 3, 3])
case("up7_linear_attr", 7, "Upsample", {"mode": "linear", "scales": [1.0, 1.0, 3.0, 2.0]}, None, [1, 1, 3, 3])
case("resize10_linear", 10, "Resize", {"mode": "linear"}, [1, 1, 2, 1.5], [2, 2, 3, 4])
case("resize10_nearest", 10, "Resize", {"mode": "nearest"}, [1, 1, 3, 2], [1, 2, 2, 3])
case("resize10_linear_down", 10, "Resize", {"mode": "linear"}, [1, 1, 0.5, 0.75], [1, 2, 6, 8])
print("wrote", len(os.listdir(os.path.join(HERE, "node"))), "cases (onnxruntime", ort.__version__ + ")")
