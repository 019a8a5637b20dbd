#!/usr/bin/env python3
"""Writes the hostile-model corpus: small ONNX models whose sizes overflow, whose attributes
are extreme, or whose external data points outside the model's folder. Each case is a folder
NAME/model.onnx (with a test_data_set_0 where `mosaic verify` should be tried too); MANIFEST
lists every case and a fragment of the error Mosaic must print for it. The models are built
by hand (onnx.helper without the checker: most are invalid on purpose) and are committed, so
the tests do not need this script or the onnx package; rerun it after changing a case.

Usage: tests/hostile/make_corpus.py [OUT_DIR]   (default: the folder of this script)
"""
import os
import shutil
import struct
import sys

from onnx import TensorProto, helper, numpy_helper
import numpy as np

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
CASES = []  # (name, expected error fragment)


def model(nodes, inputs, outputs, initializers=(), opset=13, domains=()):
    g = helper.make_graph(nodes, "hostile", inputs, outputs, list(initializers))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)] + [helper.make_opsetid(d, 1) for d in domains],
                          producer_name="mosaic-hostile")
    m.ir_version = 8
    return m


def f32(name, dims):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, dims)


def raw_init(name, dims, nbytes, dtype=TensorProto.FLOAT):
    t = TensorProto()
    t.name = name
    t.data_type = dtype
    t.dims.extend(dims)
    t.raw_data = bytes(nbytes)
    return t


def external_init(name, dims, location, offset=None, length=None):
    t = TensorProto()
    t.name = name
    t.data_type = TensorProto.FLOAT
    t.dims.extend(dims)
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", offset), ("length", length)):
        if v is not None:
            e = t.external_data.add()
            e.key, e.value = k, str(v)
    return t


def case(name, m, fragment, data=None):
    d = os.path.join(OUT, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    with open(os.path.join(d, "model.onnx"), "wb") as f:
        f.write(m.SerializeToString())
    if data is not None:
        ds = os.path.join(d, "test_data_set_0")
        os.makedirs(ds)
        for kind, arrays in data.items():
            for i, a in enumerate(arrays):
                with open(os.path.join(ds, f"{kind}_{i}.pb"), "wb") as f:
                    f.write(numpy_helper.from_array(a).SerializeToString())
    CASES.append((name, fragment))


def gemm_with_weight(dims, nbytes):
    return model([helper.make_node("Gemm", ["x", "W"], ["y"], transB=1)], [f32("x", [1, 4])], [f32("y", None)],
                 [raw_init("W", dims, nbytes)])


x14 = np.ones((1, 4), np.float32)
y14 = np.ones((1, 4), np.float32)

# Sizes that wrap around: the critical finding (2^62+4 elements * 4 bytes = 64 mod 2^64).
case("gemm_weight_wraps", gemm_with_weight([4, 2**62 + 4], 64), "initializer 'W': shape [4,4611686018427387908]")
case("conv_weight_wraps", model([helper.make_node("Conv", ["x", "W"], ["y"])], [f32("x", [1, 1, 4, 4])],
                                [f32("y", None)], [raw_init("W", [2**62 + 1, 1, 1, 1], 4)]),
     "initializer 'W': shape [4611686018427387905,1,1,1]")
case("weight_product_wraps_to_zero", gemm_with_weight([2**32, 2**32], 0), "dimension 0 is 4294967296")
case("weight_negative_dim", gemm_with_weight([-4, 4], 0), "negative dimension")
case("weight_too_large", gemm_with_weight([2**31 - 1, 2**31 - 1], 0), "is too large")
case("raw_data_short", gemm_with_weight([4, 4], 60), "raw data has 60 bytes")
# An input whose declared size wraps: verify used to say "outputs match".
case("input_wraps", model([helper.make_node("Relu", ["x"], ["y"])], [f32("x", [1, 2**32, 2**32])], [f32("y", None)]),
     "declares dimension 1 as 4294967296", data={"input": [np.zeros((1, 1, 1), np.float32)],
                                                  "output": [np.zeros((1, 1, 1), np.float32)]})
case("input_too_large", model([helper.make_node("Relu", ["x"], ["y"])], [f32("x", [1, 2**30, 2**30])],
                              [f32("y", None)]), "input 'x': shape [1,1073741824,1073741824] is too large")
case("input_rank_100", model([helper.make_node("Relu", ["x"], ["y"])], [f32("x", [1] * 100)], [f32("y", None)]),
     "has rank 100")
# Outputs whose inferred size overflows though every input is small.
case("matmul_output_too_large", model([helper.make_node("MatMul", ["a", "b"], ["y"])],
                                      [f32("a", [2**20, 1]), f32("b", [1, 2**23])], [f32("y", None)]),
     "output 0 'y': shape [1048576,8388608] is too large")
case("constant_of_shape_huge", model(
    [helper.make_node("ConstantOfShape", ["s"], ["c"]), helper.make_node("Add", ["x", "c"], ["y"])],
    [f32("x", [1])], [f32("y", None)], [numpy_helper.from_array(np.array([2**31 - 1] * 3, np.int64), "s")]),
     "is too large")
case("reshape_product_overflows", model([helper.make_node("Reshape", ["x", "s"], ["y"])], [f32("x", [1, 4])],
                                        [f32("y", None)],
                                        [numpy_helper.from_array(np.array([2**40, 2**40, -1], np.int64), "s")]),
     "more elements than 2^63")
case("conv_stride_huge", model([helper.make_node("Conv", ["x", "W"], ["y"], strides=[2**62, 1])],
                               [f32("x", [1, 1, 4, 4])], [f32("y", None)],
                               [numpy_helper.from_array(np.ones((1, 1, 1, 1), np.float32), "W")]),
     "above 2^31 - 1")
case("pool_pads_huge", model([helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[1, 1],
                                               pads=[2**62, 2**62, 0, 0])],
                             [f32("x", [1, 1, 4, 4])], [f32("y", None)]), "above 2^31 - 1")
case("pad_huge", model([helper.make_node("Pad", ["x", "p"], ["y"])], [f32("x", [1, 4])], [f32("y", None)],
                       [numpy_helper.from_array(np.array([0, 2**62, 0, 2**62], np.int64), "p")]),
     "beyond +-(2^31 - 1)")
case("unsqueeze_many_axes", model([helper.make_node("Unsqueeze", ["x", "a"], ["y"])], [f32("x", [4])],
                                  [f32("y", None)],
                                  [numpy_helper.from_array(np.arange(1000, dtype=np.int64), "a")]),
     "1000 axes")
case("slice_step_extreme", model([helper.make_node("Slice", ["x", "s", "e", "a", "st"], ["y"])],
                                 [f32("x", [1, 4])], [f32("y", None)],
                                 [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
                                  (("s", [0]), ("e", [2**63 - 1]), ("a", [1]), ("st", [2**63 - 1]))]),
     "")  # valid: one column; no overflow on the way
# The ops of opsets 18 and later with sizes, counts or indices from the file.
i64 = lambda name, v: numpy_helper.from_array(np.array(v, np.int64), name)
case("tile_repeats_huge", model([helper.make_node("Tile", ["x", "r"], ["y"])], [f32("x", [4])], [f32("y", None)],
                                [i64("r", [2**40])], opset=18), "beyond 2^31 - 1")
case("tile_repeats_wrap", model([helper.make_node("Tile", ["x", "r"], ["y"])], [f32("x", [4, 4])], [f32("y", None)],
                                [i64("r", [2**62, 2**62])], opset=18), "beyond 2^31 - 1")
case("resize_sizes_huge", model([helper.make_node("Resize", ["x", "", "", "s"], ["y"])], [f32("x", [1, 1, 2, 2])],
                                [f32("y", None)], [i64("s", [1, 1, 2**40, 2])], opset=19), "outside [0, 2^31 - 1]")
case("resize_scales_huge", model([helper.make_node("Resize", ["x", "", "s"], ["y"])], [f32("x", [1, 1, 2, 2])],
                                 [f32("y", None)],
                                 [numpy_helper.from_array(np.array([1, 1, 1e30, 1], np.float32), "s")], opset=19),
     "larger than 2^31 - 1")
case("gathernd_tuple_too_long", model([helper.make_node("GatherND", ["x", "i"], ["y"])], [f32("x", [2, 2])],
                                      [f32("y", None)], [i64("i", [[0, 0, 0, 0, 0]])], opset=18),
     "index tuples of length 5")
case("topk_k_huge", model([helper.make_node("TopK", ["x", "k"], ["v", "i"])], [f32("x", [4])],
                          [f32("v", None), helper.make_tensor_value_info("i", TensorProto.INT64, None)],
                          [i64("k", [2**62])], opset=18), "is outside [0, 4]")
# Detection ops: sizes and counts from the file.
roi_inputs = [f32("x", [1, 1, 4, 4]), f32("rois", [1, 4]), helper.make_tensor_value_info("b", TensorProto.INT64, [1])]
case("roialign_output_huge", model([helper.make_node("RoiAlign", ["x", "rois", "b"], ["y"], output_height=2**40)],
                                   roi_inputs, [f32("y", None)], opset=16), "must be in [1, 2^31 - 1]")
case("roialign_sampling_huge", model([helper.make_node("RoiAlign", ["x", "rois", "b"], ["y"], sampling_ratio=2**40)],
                                     roi_inputs, [f32("y", None)], opset=16), "sampling_ratio 1099511627776")
case("nms_shapes_disagree", model([helper.make_node("NonMaxSuppression", ["boxes", "scores"], ["y"])],
                                  [f32("boxes", [1, 3, 4]), f32("scores", [1, 1, 5])],
                                  [helper.make_tensor_value_info("y", TensorProto.INT64, None)], opset=11),
     "must be [batches, boxes, 4] and [batches, classes, boxes]")
# A count of 2^62 boxes per class, on constant boxes: at most the 3 boxes there are (a valid model).
case("nms_max_output_huge", model([helper.make_node("NonMaxSuppression", ["boxes", "scores", "m"], ["sel"]),
                                   helper.make_node("Cast", ["sel"], ["c"], to=TensorProto.FLOAT),
                                   helper.make_node("ReduceSum", ["c"], ["s"], keepdims=0),
                                   helper.make_node("Add", ["x", "s"], ["y"])],
                                  [f32("x", [1])], [f32("y", None)],
                                  [numpy_helper.from_array(np.array([[[0, 0, 1, 1], [0, 0, 1, 1], [5, 5, 6, 6]]],
                                                                    np.float32), "boxes"),
                                   numpy_helper.from_array(np.array([[[0.9, 0.8, 0.7]]], np.float32), "scores"),
                                   i64("m", [2**62])], opset=11), "")
# ONNX Runtime's quantised ops (com.microsoft): a zero scale, a per-column scale of the wrong
# length, an axis out of range.
u8 = lambda name, dims: helper.make_tensor_value_info(name, TensorProto.UINT8, dims)
scalar = lambda name, v: numpy_helper.from_array(np.array(v, np.float32), name)
zp = lambda name: numpy_helper.from_array(np.array(128, np.uint8), name)
case("qlinearadd_zero_scale",
     model([helper.make_node("QLinearAdd", ["a", "s", "z", "a", "s", "z", "s0", "z"], ["y"], domain="com.microsoft")],
           [u8("a", [4])], [u8("y", None)], [scalar("s", 0.5), scalar("s0", 0.0), zp("z")], domains=["com.microsoft"]),
     "C_scale is 0")
case("qgemm_scale_length",
     model([helper.make_node("QGemm", ["a", "s", "z", "b", "bs", "bz"], ["y"], domain="com.microsoft")],
           [u8("a", [2, 3])], [f32("y", None)],
           [scalar("s", 0.5), zp("z"), numpy_helper.from_array(np.ones([3, 4], np.int8), "b"),
            numpy_helper.from_array(np.ones([3], np.float32), "bs"), numpy_helper.from_array(np.zeros([3], np.int8), "bz")],
           domains=["com.microsoft"]),
     "must be one value or one per column of B ([4])")
case("qlinearsoftmax_axis_huge",
     model([helper.make_node("QLinearSoftmax", ["a", "s", "z", "s", "z"], ["y"], domain="com.microsoft", axis=2**40,
                             opset=13)],
           [u8("a", [2, 4])], [u8("y", None)], [scalar("s", 0.5), zp("z")], domains=["com.microsoft"]),
     "1099511627776")
# Einsum over four 1-D inputs of 2^11: 2^44 points of label space from 32 KB of input.
case("einsum_label_space_huge",
     model([helper.make_node("Einsum", ["a", "b", "c", "d"], ["y"], equation="i,j,k,l->")],
           [f32(n, [2048]) for n in "abcd"], [f32("y", None)], opset=18), "more than 2^32")
# ConvTranspose whose output would pass 2^31 along an axis.
case("convtranspose_extent_huge",
     model([helper.make_node("ConvTranspose", ["x", "W"], ["y"], strides=[2**30])], [f32("x", [1, 1, 4])],
           [f32("y", None)], [numpy_helper.from_array(np.ones([1, 1, 1], np.float32), "W")], opset=18),
     "beyond 2^31 - 1")
case("cumsum_axis_huge", model([helper.make_node("CumSum", ["x", "a"], ["y"])], [f32("x", [4])], [f32("y", None)],
                               [i64("a", 2**62)], opset=18), "out of range")
case("scatternd_updates_shape", model([helper.make_node("ScatterND", ["x", "i", "u"], ["y"])], [f32("x", [4, 4])],
                                      [f32("y", None)],
                                      [i64("i", [[2**62]]), numpy_helper.from_array(np.zeros([2**3], np.float32), "u")],
                                      opset=18), "updates [8] should be [1,4]")
case("cast_to_string", model([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.STRING)], [f32("x", [4])],
                             [f32("y", None)], opset=18), "element type STRING")
# A float16 initializer whose raw bytes are one element short (helper.make_tensor checks sizes).
def short_float16(name, dims, raw):
    t = TensorProto()
    t.name, t.data_type, t.raw_data = name, TensorProto.FLOAT16, raw
    t.dims.extend(dims)
    return t



case("float16_raw_short", model([helper.make_node("Add", ["x", "W"], ["y"])],
                                [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [4])], [f32("y", None)],
                                [short_float16("W", [4], b"\x00\x3c" * 3)],
                                opset=18), "raw data has 6 bytes, the tensor [4] needs 8")
# The packed 4-bit types: raw bytes one short of ceil(5 / 2), and int32_data (one packed
# byte per value) one short. Data type 22 is INT4 (onnx 1.16; the names may be missing).
def packed_int4(name, dims, raw=None, int32=None):
    t = TensorProto()
    t.name, t.data_type = name, 22
    t.dims.extend(dims)
    if raw is not None:
        t.raw_data = raw
    if int32 is not None:
        t.int32_data.extend(int32)
    return t


def dequantize_int4(init):
    return model([helper.make_node("DequantizeLinear", ["W", "s"], ["y"])], [], [f32("y", None)],
                 [init, numpy_helper.from_array(np.float32(1.0), "s")], opset=21)


case("int4_raw_short", dequantize_int4(packed_int4("W", [5], raw=b"\x10\xc7")), "raw data has 2 bytes, the tensor [5] needs 3")
case("int4_int32_data_short", dequantize_int4(packed_int4("W", [5], int32=[16, 199])),
     "has 2 values, shape [5] needs 3 (int4, packed)")
# Sizes from constants: a window of 2^40 points, a crop/pad to 2^31 - 1 along two axes.
case("hann_window_huge", model([helper.make_node("HannWindow", ["n"], ["y"])], [], [f32("y", None)],
                               [i64("n", 2**40)], opset=17), "outside [0, 2^31 - 1]")
case("center_crop_pad_huge", model([helper.make_node("CenterCropPad", ["x", "s"], ["y"])], [f32("x", [4, 4])],
                                   [f32("y", None)], [i64("s", [2**31 - 1, 2**31 - 1])], opset=18), "output [2147483647,2147483647] too large")
# A Loop whose trip count would stack 2^40 scan rows.
loop_body = helper.make_graph([helper.make_node("Identity", ["c"], ["c_out"]), helper.make_node("Identity", ["i"], ["row"])],
                              "body", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                                       helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
                              [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
                               helper.make_tensor_value_info("row", TensorProto.INT64, [])])
case("loop_trip_count_huge", model([helper.make_node("Loop", ["M", "go"], ["rows"], body=loop_body)], [],
                                   [helper.make_tensor_value_info("rows", TensorProto.INT64, None)],
                                   [i64("M", 2**40), numpy_helper.from_array(np.array(True), "go")], opset=16),
     "beyond 2^31 - 1 scan rows")
# Control flow with attributes and arities out of line.
scan_body = helper.make_graph([helper.make_node("Identity", ["s"], ["s_out"])], "body",
                              [helper.make_tensor_value_info("s", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("s_out", TensorProto.FLOAT, [4])])
case("scan_num_inputs_huge", model([helper.make_node("Scan", ["x"], ["y"], body=scan_body, num_scan_inputs=2**40)],
                                   [f32("x", [3, 4])], [f32("y", None)], opset=16), "num_scan_inputs 1099511627776")
branch = helper.make_graph([helper.make_node("Identity", ["x"], ["b"])], "then", [], [f32("b", [4])])
case("if_without_else", model([helper.make_node("If", ["c"], ["y"], then_branch=branch)],
                              [helper.make_tensor_value_info("c", TensorProto.BOOL, []), f32("x", [4])],
                              [f32("y", None)], opset=16), "needs then_branch and else_branch")
case("loop_body_arity", model([helper.make_node("Loop", ["M", "", "x"], ["y"], body=scan_body)], [f32("x", [4])],
                              [f32("y", None)], [i64("M", 2)], opset=16), "body takes 1 inputs; Loop gives it 3")
# External data: outside the folder, not a file, or sizes that do not fit the file.
ext = lambda init: model([helper.make_node("Add", ["x", "W"], ["y"])], [f32("x", [1, 4])], [f32("y", None)], [init])
case("external_absolute", ext(external_init("W", [1, 4], "/etc/passwd")), "is an absolute path")
case("external_dotdot", ext(external_init("W", [1, 4], "../../../../etc/passwd")), "leaves the model's folder")
case("external_symlink_out", ext(external_init("W", [1, 4], "link.bin")), "outside the model's folder")
case("external_fifo", ext(external_init("W", [1, 4], "fifo.bin")), "is not a regular file")
case("external_directory", ext(external_init("W", [1, 4], "sub")), "is not a regular file")
case("external_length_huge", ext(external_init("W", [1, 4], "weights.bin", 0, 2**34)),
     "external data length is 17179869184 bytes")
case("external_past_end", ext(external_init("W", [1, 4], "weights.bin", 60, 16)), "shorter than offset 60")
case("external_offset_overflow", ext(external_init("W", [1, 4], "weights.bin", 2**63 - 1, 16)), "shorter than offset")
case("external_offset_garbage", ext(external_init("W", [1, 4], "weights.bin", "12abc")),
     "expected a non-negative integer")
case("external_offset_negative", ext(external_init("W", [1, 4], "weights.bin", -4)), "expected a non-negative integer")
case("external_missing", ext(external_init("W", [1, 4], "nothere.bin")), "not found")

# Companion files the external-data cases need that git can hold (the FIFO and the symlink
# out of the folder are made by the test, tests/test_hostile_models.cpp).
for name in ("external_past_end", "external_offset_overflow", "external_offset_garbage", "external_length_huge",
             "external_offset_negative"):
    with open(os.path.join(OUT, name, "weights.bin"), "wb") as f:
        f.write(struct.pack("<16f", *range(16)))
os.makedirs(os.path.join(OUT, "external_directory", "sub"), exist_ok=True)
with open(os.path.join(OUT, "external_directory", "sub", ".keep"), "w") as f:
    f.write("a folder where a file is expected\n")

with open(os.path.join(OUT, "MANIFEST"), "w") as f:
    f.write("# case<TAB>fragment of the error Mosaic must print (empty: the model is valid and must run)\n")
    for name, fragment in CASES:
        f.write(f"{name}\t{fragment}\n")
print(f"{len(CASES)} cases in {OUT}")
