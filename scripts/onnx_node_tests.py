#!/usr/bin/env python3
"""Writes the node tests of the installed onnx package, from its own case generators, as
ONNX backend-test directories (model.onnx + test_data_set_N/{input,output}_K.pb).

    python -m venv /tmp/venv && /tmp/venv/bin/pip install onnx==1.23.2 numpy
    /tmp/venv/bin/python scripts/onnx_node_tests.py build/onnx-node-tests
    build/mosaic verify build/onnx-node-tests/node --backend all --exact-quantised

Needs onnx from PyPI (Debian's libonnx-testdata is onnx 1.12, opsets up to 17). Cases whose
inputs or outputs are sequences, maps or optionals are written too (Mosaic reports them as
unsupported). The output directory is replaced.

ONNX leaves a Cast from a floating-point type to an integer type undefined where the value is
out of the integer's range (the Cast schema: "fixed point: undefined if OOR"), yet the Cast and
CastLike cases to 4- and 2-bit integers cast -9 ... 15 and write whatever the installed
ml_dtypes makes of the values outside the range (0.5 wrapped them, 0.7 writes 0). Those elements
are set to 0 in the input and the expected output (a cast of 0 is 0 in every type), so that a
case tests what the standard defines and not one library's choice; mask_undefined_casts.
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


# The range of each integer element type a Cast may write (TensorProto's data type numbers).
INT_RANGES = {
    onnx.TensorProto.INT2: (-2, 1), onnx.TensorProto.UINT2: (0, 3),
    onnx.TensorProto.INT4: (-8, 7), onnx.TensorProto.UINT4: (0, 15),
    onnx.TensorProto.INT8: (-(2**7), 2**7 - 1), onnx.TensorProto.UINT8: (0, 2**8 - 1),
    onnx.TensorProto.INT16: (-(2**15), 2**15 - 1), onnx.TensorProto.UINT16: (0, 2**16 - 1),
    onnx.TensorProto.INT32: (-(2**31), 2**31 - 1), onnx.TensorProto.UINT32: (0, 2**32 - 1),
    onnx.TensorProto.INT64: (-(2**63), 2**63 - 1), onnx.TensorProto.UINT64: (0, 2**64 - 1),
}
FLOAT_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16, onnx.TensorProto.DOUBLE}


def as_tensor(value, name):
    return value if isinstance(value, onnx.TensorProto) else numpy_helper.from_array(value, name)


def mask_undefined_casts(case_name, inputs, outputs):
    """A Cast or CastLike case from a float type to an integer type: its elements whose value,
    truncated toward zero, lies outside the integer type's range (or is not finite) become 0 in
    the input and in the expected output. Returns the (possibly new) inputs and outputs and the
    number of elements masked."""
    if not case_name.startswith(("test_cast_", "test_castlike_")) or not inputs or len(outputs) != 1:
        return inputs, outputs, 0
    x, y = as_tensor(inputs[0], "input"), as_tensor(outputs[0], "output")
    if x.data_type not in FLOAT_TYPES or y.data_type not in INT_RANGES:
        return inputs, outputs, 0
    import numpy as np
    xv, yv = numpy_helper.to_array(x), numpy_helper.to_array(y)
    lo, hi = INT_RANGES[y.data_type]
    with np.errstate(invalid="ignore"):
        t = np.trunc(xv.astype(np.float64))
        undefined = ~np.isfinite(t) | (t < lo) | (t > hi)
    if not undefined.any():
        return inputs, outputs, 0
    xv, yv = xv.copy(), yv.copy()
    xv[undefined] = 0
    yv[undefined] = 0
    new_inputs = list(inputs)
    new_inputs[0] = numpy_helper.from_array(xv, x.name)
    return new_inputs, [numpy_helper.from_array(yv, y.name)], int(undefined.sum())


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: onnx_node_tests.py OUTPUT_DIR")
    root = os.path.join(sys.argv[1], "node")
    if os.path.exists(root):
        shutil.rmtree(root)
    cases = node_cases.collect_testcases()
    written = masked = 0
    for case in cases:
        out = os.path.join(root, case.name)
        os.makedirs(out)
        with open(os.path.join(out, "model.onnx"), "wb") as f:
            f.write(case.model.SerializeToString())
        graph = case.model.graph
        for i, (inputs, outputs) in enumerate(case.data_sets):
            inputs, outputs, count = mask_undefined_casts(case.name, inputs, outputs)
            masked += count
            d = os.path.join(out, f"test_data_set_{i}")
            os.makedirs(d)
            for j, v in enumerate(inputs):
                with open(os.path.join(d, f"input_{j}.pb"), "wb") as f:
                    f.write(serialise(v, graph.input[j].type, graph.input[j].name))
            for j, v in enumerate(outputs):
                with open(os.path.join(d, f"output_{j}.pb"), "wb") as f:
                    f.write(serialise(v, graph.output[j].type, graph.output[j].name))
        written += 1
    print(f"onnx {onnx.__version__} (opset {onnx.defs.onnx_opset_version()}): {written} node tests in {root} "
          f"({masked} elements of float-to-integer casts out of range, undefined by the standard, set to 0)")


if __name__ == "__main__":
    main()
