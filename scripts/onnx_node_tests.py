#!/usr/bin/env python3
"""Writes the node tests of the installed onnx package, from its own case generators, as
ONNX backend-test directories (model.onnx + test_data_set_N/{input,output}_K.pb).

    python -m venv /tmp/venv && /tmp/venv/bin/pip install onnx==1.23.2 numpy
    /tmp/venv/bin/python scripts/onnx_node_tests.py build/onnx-node-tests
    build/mosaic verify build/onnx-node-tests/node --backend all --exact-quantised

Needs onnx from PyPI (Debian's libonnx-testdata is onnx 1.12, opsets up to 17). Cases whose
inputs or outputs are sequences, maps or optionals are written too (Mosaic reports them as
unsupported). The output directory is replaced.
"""
import os
import shutil
import sys

import onnx
from onnx import numpy_helper
from onnx.backend.test.case import node as node_cases


def serialise(value, type_proto, name):
    if isinstance(value, onnx.TensorProto):
        return value.SerializeToString()
    if type_proto.HasField("sequence_type"):
        return numpy_helper.from_list(value, name).SerializeToString()
    if type_proto.HasField("optional_type"):
        return numpy_helper.from_optional(value, name).SerializeToString()
    if type_proto.HasField("map_type"):
        return numpy_helper.from_dict(value, name).SerializeToString()
    return numpy_helper.from_array(value, name).SerializeToString()


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: onnx_node_tests.py OUTPUT_DIR")
    root = os.path.join(sys.argv[1], "node")
    if os.path.exists(root):
        shutil.rmtree(root)
    cases = node_cases.collect_testcases()
    written = 0
    for case in cases:
        out = os.path.join(root, case.name)
        os.makedirs(out)
        with open(os.path.join(out, "model.onnx"), "wb") as f:
            f.write(case.model.SerializeToString())
        graph = case.model.graph
        for i, (inputs, outputs) in enumerate(case.data_sets):
            d = os.path.join(out, f"test_data_set_{i}")
            os.makedirs(d)
            for j, v in enumerate(inputs):
                with open(os.path.join(d, f"input_{j}.pb"), "wb") as f:
                    f.write(serialise(v, graph.input[j].type, graph.input[j].name))
            for j, v in enumerate(outputs):
                with open(os.path.join(d, f"output_{j}.pb"), "wb") as f:
                    f.write(serialise(v, graph.output[j].type, graph.output[j].name))
        written += 1
    print(f"onnx {onnx.__version__} (opset {onnx.defs.onnx_opset_version()}): {written} node tests in {root}")


if __name__ == "__main__":
    main()
