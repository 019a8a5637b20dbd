#!/usr/bin/python3
"""Writes a small CNN that uses the example plugin's custom operator com.example.mosaic.Swish,
as an ONNX backend-test case: DIR/model.onnx and DIR/test_data_set_0/{input_0,output_0}.pb,
the expected output computed here by numpy in double (independently of Mosaic).

    python3 make_model.py DIR [--batch N] [--seed S]

Model: x[N,1,8,8] -> Conv(4, 3x3, pad 1) -> Swish(beta 1.5) -> Flatten -> Gemm(10).
"""
import argparse
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

DOMAIN = "com.example.mosaic"


def conv3x3_pad1(x, w, b):
    n, c, h, wd = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((n, w.shape[0], h, wd))
    for i in range(3):
        for j in range(3):
            out += np.einsum("nchw,oc->nohw", xp[:, :, i:i + h, j:j + wd], w[:, :, i, j])
    return out + b[None, :, None, None]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    w1 = (rng.standard_normal((4, 1, 3, 3)) / 3).astype(np.float32)
    b1 = (rng.standard_normal(4) * 0.1).astype(np.float32)
    w2 = (rng.standard_normal((10, 256)) / 16).astype(np.float32)
    b2 = (rng.standard_normal(10) * 0.1).astype(np.float32)
    x = rng.standard_normal((a.batch, 1, 8, 8)).astype(np.float32)
    beta = 1.5

    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Swish", ["c1"], ["s1"], name="swish1", domain=DOMAIN, beta=beta),
        helper.make_node("Flatten", ["s1"], ["f1"], name="flatten1", axis=1),
        helper.make_node("Gemm", ["f1", "w2", "b2"], ["y"], name="fc1", transB=1),
    ]
    graph = helper.make_graph(
        nodes, "swish_cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])],
        [numpy_helper.from_array(v, n) for n, v in (("w1", w1), ("b1", b1), ("w2", w2), ("b2", b2))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid(DOMAIN, 1)],
                              producer_name="mosaic examples/plugin_custom_op")

    c1 = conv3x3_pad1(x.astype(np.float64), w1.astype(np.float64), b1.astype(np.float64))
    s1 = c1 / (1 + np.exp(-beta * c1))
    y = s1.reshape(a.batch, -1) @ w2.astype(np.float64).T + b2

    os.makedirs(os.path.join(a.out, "test_data_set_0"), exist_ok=True)
    onnx.save(model, os.path.join(a.out, "model.onnx"))
    for name, value in (("input_0", x), ("output_0", y.astype(np.float32))):
        with open(os.path.join(a.out, "test_data_set_0", name + ".pb"), "wb") as f:
            f.write(numpy_helper.from_array(value, "x" if name == "input_0" else "y").SerializeToString())
    print("wrote", os.path.join(a.out, "model.onnx"))


if __name__ == "__main__":
    main()
