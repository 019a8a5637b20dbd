#!/usr/bin/env python3
"""Writes ONNX models with local functions (ModelProto.functions), as PyTorch's
torch.export-based exporter and onnxscript write them, with onnx's reference evaluator's
outputs (ONNX Runtime's; onnx's reference evaluator mishandles attribute references in nested
calls): backend-test directories that `mosaic verify` checks, and models that Mosaic must
refuse, naming the function.

    /tmp/venv/bin/pip install onnx==1.23.2 onnxruntime numpy
    /tmp/venv/bin/python tests/conformance/functions/make_cases.py tests/conformance/functions

Needs onnx 1.16 or later (attribute defaults, overloads); the test suite only reads what
this script wrote.
"""
import os
import shutil
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
import onnxruntime as ort

F = TensorProto.FLOAT
OPSET = 20


def fn(name, inputs, outputs, nodes, attributes=(), defaults=(), opset=OPSET, domain="local", overload=""):
    f = helper.make_function(domain, name, list(inputs), list(outputs), nodes,
                             [helper.make_opsetid("", opset), helper.make_opsetid("local", 1)],
                             attributes=list(attributes), attribute_protos=list(defaults))
    if overload:
        f.overload = overload
    return f


def call(op, inputs, outputs, name, overload="", **attrs):
    n = helper.make_node(op, inputs, outputs, name=name, domain="local", **attrs)
    if overload:
        n.overload = overload
    return n


def ref_attr(name, ref, kind):
    a = helper.make_attribute_ref(name, kind)
    a.ref_attr_name = ref
    return a


def node_with_ref(op, inputs, outputs, refs):
    n = helper.make_node(op, inputs, outputs)
    n.attribute.extend(refs)
    return n


def model(nodes, functions, inputs, outputs, opset=OPSET, initializers=()):
    g = helper.make_graph(nodes, "functions", inputs, outputs, initializer=list(initializers))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid("local", 1)],
                          functions=functions)
    m.ir_version = 10
    return m


def write_case(root, name, m, feeds):
    d = os.path.join(root, name)
    os.makedirs(os.path.join(d, "test_data_set_0"))
    onnx.save(m, os.path.join(d, "model.onnx"))
    session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    outs = session.run(None, feeds)
    for i, v in enumerate(m.graph.input):
        with open(os.path.join(d, "test_data_set_0", f"input_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(feeds[v.name], v.name).SerializeToString())
    for i, (v, o) in enumerate(zip(m.graph.output, outs)):
        with open(os.path.join(d, "test_data_set_0", f"output_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(np.asarray(o), v.name).SerializeToString())


def main():
    root = sys.argv[1]
    for sub in ("pass", "refuse"):
        shutil.rmtree(os.path.join(root, sub), ignore_errors=True)
        os.makedirs(os.path.join(root, sub))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    w = rng.standard_normal((4, 4)).astype(np.float32)
    vx = helper.make_tensor_value_info("x", F, [2, 3, 4])
    vy = helper.make_tensor_value_info("y", F, None)

    # A block: LeakyRelu(x W) with alpha from the call (or its default 0.3), then a nested
    # function (ReduceMean over an axes input, opset 18's form) and Softplus.
    leaky = node_with_ref("LeakyRelu", ["h"], ["a"], [ref_attr("alpha", "alpha", onnx.AttributeProto.FLOAT)])
    block = fn("Block", ["x", "w"], ["y", "unused"],
               [helper.make_node("MatMul", ["x", "w"], ["h"]), leaky,
                call("Centre", ["a"], ["c"], "centre"),
                helper.make_node("Softplus", ["c"], ["y"]),
                helper.make_node("Identity", ["h"], ["unused"])],
               defaults=[helper.make_attribute("alpha", 0.3)])
    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [-1])
    centre = fn("Centre", ["t"], ["u"],
                [helper.make_node("Constant", [], ["axes"], value=axes),
                 helper.make_node("ReduceMean", ["t", "axes"], ["m"], keepdims=1),
                 helper.make_node("Sub", ["t", "m"], ["u"])])
    nodes = [call("Block", ["x", "w"], ["b1", "h1"], "block1", alpha=0.05),
             call("Block", ["b1", "w"], ["y", ""], "block2")]  # default alpha, second output omitted
    m = model(nodes, [centre, block], [vx], [vy], initializers=[numpy_helper.from_array(w, "w")])
    write_case(os.path.join(root, "pass"), "nested_with_attribute_defaults", m, {"x": x})

    # Two overloads of one function (IR 10), told apart by the calls' overload field.
    double = fn("Scale", ["x"], ["y"], [helper.make_node("Add", ["x", "x"], ["y"])], overload="double")
    square = fn("Scale", ["x"], ["y"], [helper.make_node("Mul", ["x", "x"], ["y"])], overload="square")
    nodes = [call("Scale", ["x"], ["d"], "s1", overload="double"), call("Scale", ["d"], ["y"], "s2", overload="square")]
    write_case(os.path.join(root, "pass"), "overloads", model(nodes, [double, square], [vx], [vy]), {"x": x})

    # A function imported at opset 13 whose ops have the same versions at 20 (Relu 14, Tanh 13).
    old = fn("Old", ["x"], ["y"], [helper.make_node("Tanh", ["x"], ["t"]), helper.make_node("Relu", ["t"], ["y"])],
             opset=14)
    write_case(os.path.join(root, "pass"), "function_at_an_older_opset",
               model([call("Old", ["x"], ["y"], "old")], [old], [vx], [vy]), {"x": x})

    refuse = os.path.join(root, "refuse")
    # Calls itself: depth without end.
    loop = fn("Loop", ["x"], ["y"], [call("Loop", ["x"], ["y"], "again")])
    onnx.save(model([call("Loop", ["x"], ["y"], "loop")], [loop], [vx], [vy]), os.path.join(refuse, "recursive.onnx"))
    # ReduceMean is version 13 at opset 13 and 18 at opset 20: not one graph's opset.
    mean = fn("Mean", ["x"], ["y"], [helper.make_node("ReduceMean", ["x"], ["y"], axes=[1])], opset=13)
    onnx.save(model([call("Mean", ["x"], ["y"], "mean")], [mean], [vx], [vy]),
              os.path.join(refuse, "other_opset_version.onnx"))
    # An attribute the function does not declare.
    plain = fn("Plain", ["x"], ["y"], [helper.make_node("Relu", ["x"], ["y"])])
    onnx.save(model([call("Plain", ["x"], ["y"], "plain", beta=1.0)], [plain], [vx], [vy]),
              os.path.join(refuse, "undeclared_attribute.onnx"))
    # 2^40 nodes once inlined: each level calls the next twice.
    levels = [fn("L0", ["x"], ["y"], [helper.make_node("Relu", ["x"], ["y"])])]
    for i in range(1, 41):
        levels.append(fn(f"L{i}", ["x"], ["y"], [call(f"L{i-1}", ["x"], ["t"], "a"), call(f"L{i-1}", ["t"], ["y"], "b")]))
    onnx.save(model([call("L40", ["x"], ["y"], "top")], levels, [vx], [vy]), os.path.join(refuse, "exponential.onnx"))
    print(f"onnx {onnx.__version__}, onnxruntime {ort.__version__}: cases written to {root}")


if __name__ == "__main__":
    main()
