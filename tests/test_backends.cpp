// One list of op cases, run on every backend and compared with the naive oracle
// (in the spirit of ggml's test-backend-ops). The oracle itself is checked against
// hand-computed values in test_naive.cpp and against the official ONNX node tests.
#include <cstdlib>
#include <gtest/gtest.h>

#include <iostream>
#include <map>
#include <set>

#include "backends/naive/naive.hpp"
#include "backends/onednn/onednn.hpp"
#include "metrics/compare.hpp"
#include "operators/eltwise.hpp"
#include "operators/reduce.hpp"
#include "test_util.hpp"

namespace mosaic::test {
namespace {

using A = Attribute;

std::vector<OpCase> cases() {
  std::vector<OpCase> v;
  uint64_t seed = 1;
  auto add = [&](std::string label, Node n, std::vector<Shape> shapes, std::vector<bool> is_const = {},
                 int64_t opset = 13) {
    OpCase c;
    c.label = std::move(label);
    c.node = std::move(n);
    for (const auto& s : shapes) c.inputs.push_back(s.empty() && false ? Tensor() : random_tensor(s, seed++));
    c.is_const = std::move(is_const);
    c.opset = opset;
    v.push_back(std::move(c));
  };
  auto conv = [&](std::string label, Shape x, Shape w, std::map<std::string, A> attrs, bool bias = true) {
    std::vector<Shape> shapes{x, w};
    if (bias) shapes.push_back({w[0]});
    add(std::move(label), make_node("Conv", std::move(attrs)), shapes, {false, true, true});
  };
  conv("conv3x3", {2, 3, 9, 9}, {8, 3, 3, 3}, {});
  conv("conv3x3_pad_stride", {2, 4, 10, 11}, {6, 4, 3, 3}, {{"pads", A::of_ints({1, 1, 1, 1})}, {"strides", A::of_ints({2, 2})}});
  conv("conv_asym_pad", {1, 3, 8, 8}, {4, 3, 3, 2}, {{"pads", A::of_ints({0, 1, 2, 0})}});
  conv("conv_dilated", {2, 3, 12, 12}, {5, 3, 3, 3}, {{"dilations", A::of_ints({2, 2})}, {"pads", A::of_ints({2, 2, 2, 2})}});
  conv("conv_groups", {2, 8, 7, 7}, {12, 2, 3, 3}, {{"group", A::of_int(4)}, {"pads", A::of_ints({1, 1, 1, 1})}});
  conv("conv_depthwise", {2, 16, 9, 9}, {16, 1, 3, 3}, {{"group", A::of_int(16)}, {"strides", A::of_ints({2, 2})}, {"pads", A::of_ints({1, 1, 1, 1})}});
  conv("conv_pointwise", {3, 16, 5, 5}, {24, 16, 1, 1}, {}, false);
  conv("conv_same_upper", {1, 3, 7, 7}, {4, 3, 4, 4}, {{"auto_pad", A::of_string("SAME_UPPER")}, {"strides", A::of_ints({2, 2})}});
  conv("conv_same_lower", {1, 3, 7, 8}, {4, 3, 3, 3}, {{"auto_pad", A::of_string("SAME_LOWER")}});
  conv("conv_valid", {1, 3, 7, 8}, {4, 3, 3, 3}, {{"auto_pad", A::of_string("VALID")}, {"strides", A::of_ints({2, 3})}});
  conv("conv_1d", {2, 3, 17}, {5, 3, 4}, {{"strides", A::of_ints({2})}, {"pads", A::of_ints({1, 2})}});
  conv("conv_big_batch_small_out", {64, 32, 4, 4}, {16, 32, 3, 3}, {});
  // Maps no larger than the kernel at batch 8 and more (onednn and im2col: one dense matrix
  // product, backends/common/conv_dense.hpp):
  // padded, strided over a 3x3 map, dilated into the padding without a bias, and 1x1 maps.
  conv("conv_small_map", {8, 6, 2, 2}, {10, 6, 3, 3}, {{"pads", A::of_ints({1, 1, 1, 1})}});
  conv("conv_small_map_stride", {9, 4, 3, 3}, {5, 4, 3, 3}, {{"pads", A::of_ints({1, 1, 1, 1})}, {"strides", A::of_ints({2, 2})}});
  conv("conv_small_map_dilated", {8, 3, 2, 3}, {4, 3, 3, 3},
       {{"pads", A::of_ints({2, 1, 2, 1})}, {"dilations", A::of_ints({2, 1})}}, false);
  conv("conv_one_pixel_maps", {12, 5, 1, 1}, {7, 5, 3, 3}, {{"pads", A::of_ints({1, 1, 1, 1})}});
  // Grouped convolutions over maps no larger than the kernel at batch 2, where oneDNN has no
  // depthwise kernel and runs a GEMM per group: onednn takes the dense product, W' zero
  // between groups (a 5x5 depthwise over 1x1 and 2x2 maps; two channels per group).
  conv("conv_depthwise_one_pixel", {2, 12, 1, 1}, {12, 1, 5, 5}, {{"group", A::of_int(12)}, {"pads", A::of_ints({2, 2, 2, 2})}});
  conv("conv_depthwise_small_map_stride", {2, 12, 2, 2}, {12, 1, 5, 5},
       {{"group", A::of_int(12)}, {"pads", A::of_ints({2, 2, 2, 2})}, {"strides", A::of_ints({2, 2})}});
  conv("conv_groups_one_pixel", {2, 8, 1, 1}, {12, 2, 5, 5}, {{"group", A::of_int(4)}, {"pads", A::of_ints({2, 2, 2, 2})}});
  add("conv_small_map_runtime_bias", make_node("Conv", {{"pads", A::of_ints({1, 1, 1, 1})}}), {{8, 6, 2, 2}, {10, 6, 3, 3}, {10}},
      {false, true, false});
  // Stride-1 layers whose rows keep the input's width: im2col unfolds them by shifted copies
  // (several images per GEMM; one output row; bands of a large image with asymmetric pads).
  conv("conv_same_chunked", {4, 5, 9, 9}, {6, 5, 3, 3}, {{"pads", A::of_ints({1, 1, 1, 1})}});
  conv("conv_one_row", {2, 3, 1, 70}, {4, 3, 1, 5}, {{"pads", A::of_ints({0, 2, 0, 2})}});
  conv("conv_same_bands_asym", {2, 3, 20, 21}, {4, 3, 3, 4}, {{"pads", A::of_ints({2, 1, 0, 2})}});
  {  // runtime (non-constant) weights
    OpCase c;
    c.label = "conv_runtime_weights";
    c.node = make_node("Conv", {{"pads", A::of_ints({1, 1, 1, 1})}});
    c.inputs = {random_tensor({2, 3, 6, 6}, 91), random_tensor({4, 3, 3, 3}, 92), random_tensor({4}, 93)};
    v.push_back(c);
  }
  auto pool = [&](std::string label, std::string op, Shape x, std::map<std::string, A> attrs) {
    add(std::move(label), make_node(op, std::move(attrs)), {x});
  };
  pool("maxpool_k3s2", "MaxPool", {2, 4, 9, 9}, {{"kernel_shape", A::of_ints({3, 3})}, {"strides", A::of_ints({2, 2})}});
  pool("maxpool_pads", "MaxPool", {2, 3, 8, 8}, {{"kernel_shape", A::of_ints({3, 3})}, {"pads", A::of_ints({1, 1, 1, 1})}});
  pool("maxpool_ceil", "MaxPool", {1, 3, 10, 10}, {{"kernel_shape", A::of_ints({3, 3})}, {"strides", A::of_ints({2, 2})}, {"ceil_mode", A::of_int(1)}});
  pool("maxpool_dilated", "MaxPool", {1, 2, 10, 10}, {{"kernel_shape", A::of_ints({2, 2})}, {"dilations", A::of_ints({2, 2})}});
  pool("maxpool_k2s2_odd", "MaxPool", {2, 3, 9, 11}, {{"kernel_shape", A::of_ints({2, 2})}, {"strides", A::of_ints({2, 2})}});
  pool("maxpool_1d_k3s2", "MaxPool", {2, 3, 12}, {{"kernel_shape", A::of_ints({3})}, {"strides", A::of_ints({2})}});
  pool("avgpool_exclude_pad", "AveragePool", {2, 3, 7, 7}, {{"kernel_shape", A::of_ints({3, 3})}, {"pads", A::of_ints({1, 1, 1, 1})}, {"strides", A::of_ints({2, 2})}});
  pool("avgpool_include_pad", "AveragePool", {2, 3, 7, 7}, {{"kernel_shape", A::of_ints({3, 3})}, {"pads", A::of_ints({1, 1, 1, 1})}, {"count_include_pad", A::of_int(1)}});
  pool("avgpool_ceil", "AveragePool", {1, 2, 9, 9}, {{"kernel_shape", A::of_ints({2, 2})}, {"strides", A::of_ints({2, 2})}, {"ceil_mode", A::of_int(1)}});
  pool("globalavg", "GlobalAveragePool", {3, 5, 6, 7}, {});
  pool("globalmax", "GlobalMaxPool", {3, 5, 6, 7}, {});
  add("gemm_transB", make_node("Gemm", {{"transB", A::of_int(1)}}), {{5, 7}, {9, 7}, {9}}, {false, true, true});
  add("gemm_transA_alpha_beta", make_node("Gemm", {{"transA", A::of_int(1)}, {"alpha", A::of_float(0.5f)}, {"beta", A::of_float(2.f)}}),
      {{7, 5}, {7, 9}, {5, 9}}, {false, true, false});
  add("gemm_no_c", make_node("Gemm"), {{4, 6}, {6, 3}}, {false, false});
  add("gemm_one_row_transB", make_node("Gemm", {{"transB", A::of_int(1)}, {"alpha", A::of_float(1.5f)}}),
      {{1, 33}, {17, 33}, {17}}, {false, true, true});
  add("gemm_one_row_transA", make_node("Gemm", {{"transA", A::of_int(1)}, {"beta", A::of_float(0.5f)}}),
      {{33, 1}, {33, 17}, {1, 17}}, {false, true, true});
  // One row of 70 x 1300 (batch 1; the CPU backends' row GEMV, split over threads) with the
  // weights a run-time input read in place and a scalar C.
  add("gemm_one_row_wide", make_node("Gemm", {{"transB", A::of_int(1)}, {"beta", A::of_float(-1.f)}}),
      {{1, 1300}, {70, 1300}, {1}}, {false, false, true});
  add("gemm_c_column", make_node("Gemm"), {{4, 6}, {6, 3}, {4, 1}}, {false, true, true});
  add("matmul_2d", make_node("MatMul"), {{6, 5}, {5, 7}});
  add("matmul_batched", make_node("MatMul"), {{2, 3, 4, 5}, {2, 3, 5, 6}});
  add("matmul_broadcast_b", make_node("MatMul"), {{2, 3, 4, 5}, {5, 6}}, {false, true});
  add("matmul_broadcast_batch", make_node("MatMul"), {{2, 1, 4, 5}, {3, 5, 2}});
  // onednn: Mosaic's small_gemm up to 131K multiply-adds (4x16 blocks and their edges), oneDNN's
  // primitive above.
  add("matmul_small_edges", make_node("MatMul"), {{2, 7, 19}, {19, 37}}, {false, true});
  add("matmul_large", make_node("MatMul"), {{2, 40, 64}, {64, 48}}, {false, true});
  // One row by constant weights (a decoder's step at batch 1): the CPU backends' gemv over
  // packed panels (common/gemv.hpp); outputs not a multiple of the panel, a 1-d A, and enough
  // panels that the threads' streams end unevenly.
  add("matmul_one_row_constant_weights", make_node("MatMul"), {{1, 1, 517}, {517, 203}}, {false, true});
  add("matmul_vector_constant_weights", make_node("MatMul"), {{300}, {300, 1300}}, {false, true});
  add("matmul_one_row_batch_of_one_weights", make_node("MatMul"), {{1, 1, 64}, {1, 64, 1300}}, {false, true});
  // A few rows by constant weights (a decoder's step at batch 2-16): the same panels, four rows
  // at a time (gemm_panels): 16 rows of a rank-3 A, and a Gemm with transB, alpha, a bias
  // every row shares scaled by beta, and a fused activation.
  add("matmul_few_rows_constant_weights", make_node("MatMul"), {{4, 4, 517}, {517, 203}}, {false, true});
  add("gemm_few_rows_transB_bias_relu",
      make_node("Gemm", {{"transB", A::of_int(1)}, {"alpha", A::of_float(0.5f)}, {"beta", A::of_float(2.f)},
                         {"mosaic.activation", A::of_string("Relu")}}),
      {{5, 130}, {203, 130}, {203}}, {false, true, true});
  // Constant weights with rows of 4 KB: onednn packs them with padded rows.
  add("matmul_weights_4k_rows", make_node("MatMul"), {{2, 8, 16}, {16, 1024}}, {false, true});
  add("gemm_weights_4k_rows_transB", make_node("Gemm", {{"transB", A::of_int(1)}}), {{16, 24}, {1024, 24}, {1024}},
      {false, true, true});
  // At least 8192 columns of constant weights and more rows than the few-rows panels take
  // (kPanelRowsMax): onednn runs blocks of 512 columns (the weights packed as a panel each,
  // views of the output and the bias), the last one short; a bias per column, one per element
  // (C [M, N], scaled by beta), a fused activation, transposed weights, and a MatMul's rows.
  add("gemm_wide_constant_weights", make_node("Gemm"), {{19, 16}, {16, 8200}, {8200}}, {false, true, true});
  add("gemm_wide_transB_c_matrix",
      make_node("Gemm", {{"transB", A::of_int(1)}, {"beta", A::of_float(0.5f)}, {"mosaic.activation", A::of_string("Relu")}}),
      {{17, 12}, {9300, 12}, {17, 9300}}, {false, true, true});
  add("matmul_wide_constant_weights", make_node("MatMul"), {{2, 9, 16}, {16, 10240}}, {false, true});
  // Every row of the element-wise tables (operators/eltwise.hpp): a new op is tested on every
  // backend, forward and backward, without a line here. Pow's base is positive (its
  // exponent's gradient reads log(a)).
  for (const auto& b : kBinaryOps) {
    const std::string op = b.name;
    const float lo = b.op == BinaryOp::kPow ? 0.25f : -1.f, hi = b.op == BinaryOp::kPow ? 2.f : 1.f;
    auto binary = [&](const std::string& suffix, Shape a, Shape bs) {
      OpCase c;
      c.label = op + suffix;
      c.node = make_node(op);
      c.inputs = {random_tensor(a, seed++, lo, hi), random_tensor(bs, seed++, lo, hi)};
      v.push_back(std::move(c));
    };
    binary("_same", {2, 3, 4, 5}, {2, 3, 4, 5});
    binary("_odd", {3, 5, 7}, {3, 5, 7});  // not a multiple of 4: a vectorised kernel's tail
    binary("_channel", {2, 3, 4, 5}, {1, 3, 1, 1});
    binary("_row", {2, 3, 4, 5}, {5});
    binary("_scalar", {2, 3, 4}, {});
    binary("_mixed", {2, 1, 4, 1}, {3, 1, 6});
    binary("_first_broadcast", {1, 3, 1, 5}, {2, 3, 4, 5});
    // Above the shared loops' 64K elements: onednn's binary primitive, or the loops where it
    // cannot broadcast the first operand.
    binary("_large", {4, 8, 48, 48}, {4, 8, 48, 48});
    binary("_large_channel", {4, 8, 48, 48}, {1, 8, 1, 1});
    binary("_large_first_broadcast", {1, 8, 1, 48}, {4, 8, 48, 48});
  }
  {  // Pow by a constant 2 (RMSNorm's square): the loops square
    OpCase c;
    c.label = "Pow_square";
    c.node = make_node("Pow");
    c.inputs = {random_tensor({2, 8, 33}, seed++), Tensor::from_f32({}, {2.f})};
    c.is_const = {false, true};
    v.push_back(std::move(c));
  }
  for (const auto& u : kUnaryOps) {
    const auto [lo, hi] = test_domain(u.name);
    OpCase c;
    c.label = u.name;
    c.node = make_node(u.name);
    c.inputs = {random_tensor({2, 3, 17, 5}, seed++, lo, hi)};
    v.push_back(c);
    // Above the shared loops' limit: onednn's eltwise primitive.
    c.label = std::string(u.name) + "_large";
    c.inputs = {random_tensor({4, 8, 48, 48}, seed++, lo, hi)};
    v.push_back(std::move(c));
  }
  // Gelu's tanh form (opset 20's attribute; GPT-2's, the fusion pass's Gelu): im2col's Eigen
  // block, onednn's primitive, on a range where the cubic term matters.
  for (const Shape& s : {Shape{2, 3, 17, 5}, Shape{4, 8, 48, 48}}) {
    OpCase c;
    c.label = s.size() == 4 && s[0] == 4 ? "Gelu_tanh_large" : "Gelu_tanh";
    c.node = make_node("Gelu", {{"approximate", A::of_string("tanh")}});
    c.inputs = {random_tensor(s, seed++, -4.f, 4.f)};
    c.opset = 20;
    v.push_back(std::move(c));
  }
  // Every reduction of the table (operators/reduce.hpp): some axes kept, all axes dropped.
  for (const auto& r : kReduceOps) {
    const std::string op = r.name;
    const bool positive = r.op == ReduceOp::kLogSum;  // log of a sum
    auto reduce = [&](const std::string& suffix, std::vector<int64_t> axes, int64_t keepdims) {
      OpCase c;
      c.label = op + suffix;
      c.node = make_node(op, {{"keepdims", A::of_int(keepdims)}});
      c.inputs = {random_tensor({2, 3, 4, 5}, seed++, positive ? 0.25f : -1.f, positive ? 2.f : 1.f)};
      if (!axes.empty()) {
        c.inputs.push_back(Tensor::from_i64({static_cast<int64_t>(axes.size())}, axes));
        c.is_const = {false, true};
      }
      c.opset = 18;  // axes as an input for every reduction
      v.push_back(std::move(c));
    };
    reduce("_axes_1_3", {1, -1}, 1);
    reduce("_all", {}, 0);
    reduce("_last", {3}, 0);
  }
  {  // Global pooling over a 1x1 map, as timm's models export it: a reduction that changes no dimension.
    OpCase c;
    c.label = "ReduceMean_unit_axes";
    c.node = make_node("ReduceMean", {{"keepdims", A::of_int(0)}});
    c.inputs = {random_tensor({2, 3, 1, 1}, seed++), Tensor::from_i64({2}, {2, 3})};
    c.is_const = {false, true};
    c.opset = 18;
    v.push_back(std::move(c));
  }
  auto layer_norm = [&](const std::string& label, Shape x, int64_t axis, bool bias) {
    OpCase c;
    c.label = label;
    c.node = make_node("LayerNormalization", {{"axis", A::of_int(axis)}});
    Shape inner(x.begin() + (axis < 0 ? static_cast<int64_t>(x.size()) + axis : axis), x.end());
    c.inputs = {random_tensor(x, seed++), random_tensor(inner, seed++, 0.5f, 1.5f)};
    if (bias) c.inputs.push_back(random_tensor(inner, seed++));
    c.is_const = {false, true, true};
    c.opset = 17;
    v.push_back(std::move(c));
  };
  layer_norm("layernorm_last", {2, 5, 16}, -1, true);
  layer_norm("layernorm_axis1", {2, 3, 4, 5}, 1, true);
  layer_norm("layernorm_no_bias", {3, 24}, -1, false);
  add("LeakyRelu_alpha", make_node("LeakyRelu", {{"alpha", A::of_float(0.2f)}}), {{2, 3, 7}});
  add("Elu_alpha", make_node("Elu", {{"alpha", A::of_float(0.5f)}}), {{2, 3, 7}});
  add("Gelu_tanh", make_node("Gelu", {{"approximate", A::of_string("tanh")}}), {{2, 3, 7}});
  add("HardSigmoid_attrs", make_node("HardSigmoid", {{"alpha", A::of_float(0.5f)}, {"beta", A::of_float(0.25f)}}), {{2, 3, 7}});
  {
    OpCase c;
    c.label = "Clip_const_bounds";
    c.node = make_node("Clip");
    c.inputs = {random_tensor({2, 3, 7}, 71), Tensor::from_f32({}, {-0.3f}), Tensor::from_f32({}, {0.4f})};
    c.is_const = {false, true, true};
    v.push_back(c);
    c.label = "Clip_attr_opset6";
    c.node = make_node("Clip", {{"min", A::of_float(-0.5f)}, {"max", A::of_float(0.25f)}});
    c.inputs = {random_tensor({4, 9}, 72)};
    c.is_const = {};
    c.opset = 7;
    v.push_back(c);
  }
  add("softmax_last", make_node("Softmax"), {{4, 10}});
  add("softmax_axis1_4d", make_node("Softmax", {{"axis", A::of_int(1)}}), {{2, 5, 3, 4}});
  add("softmax_legacy_coerce", make_node("Softmax", {{"axis", A::of_int(1)}}), {{2, 3, 4}}, {}, 11);
  add("logsoftmax_last", make_node("LogSoftmax"), {{4, 10}});
  add("logsoftmax_axis0", make_node("LogSoftmax", {{"axis", A::of_int(0)}}), {{6, 3}});
  {
    OpCase c;
    c.label = "batchnorm";
    c.node = make_node("BatchNormalization", {{"epsilon", A::of_float(1e-3f)}});
    c.inputs = {random_tensor({2, 4, 5, 5}, 81), random_tensor({4}, 82), random_tensor({4}, 83), random_tensor({4}, 84),
                random_tensor({4}, 85, 0.5f, 2.f)};
    c.is_const = {false, true, true, true, true};
    v.push_back(c);
  }
  add("lrn5", make_node("LRN", {{"size", A::of_int(5)}, {"alpha", A::of_float(1e-2f)}, {"beta", A::of_float(0.75f)}, {"bias", A::of_float(2.f)}}),
      {{2, 7, 4, 4}});
  add("lrn4_even", make_node("LRN", {{"size", A::of_int(4)}}), {{1, 6, 3, 3}});
  add("concat_axis1", make_node("Concat", {{"axis", A::of_int(1)}}), {{2, 3, 4}, {2, 5, 4}, {2, 1, 4}});
  add("concat_axis_neg", make_node("Concat", {{"axis", A::of_int(-1)}}), {{2, 3}, {2, 4}});
  add("transpose_nchw_nhwc", make_node("Transpose", {{"perm", A::of_ints({0, 2, 3, 1})}}), {{2, 3, 4, 5}});
  add("transpose_default", make_node("Transpose"), {{3, 4, 5}});
  // A decoder's: heads out of [batch, sequence, heads, size] (rows stay contiguous), and the
  // keys' [.., T, size] -> [.., size, T]; large enough that the rows split over the threads.
  add("transpose_heads", make_node("Transpose", {{"perm", A::of_ints({0, 2, 1, 3})}}), {{1, 65, 12, 64}});
  add("transpose_keys", make_node("Transpose", {{"perm", A::of_ints({0, 1, 3, 2})}}), {{1, 12, 65, 64}});
  add("transpose_size_one_axes", make_node("Transpose", {{"perm", A::of_ints({3, 1, 0, 2})}}), {{1, 7, 1, 9}});
  add("flatten_axis2", make_node("Flatten", {{"axis", A::of_int(2)}}), {{2, 3, 4, 5}});
  add("identity", make_node("Identity"), {{3, 4}});
  add("dropout_inference", make_node("Dropout"), {{3, 4}});
  auto pad = [&](std::string label, std::string mode, std::vector<int64_t> pads) {
    OpCase c;
    c.label = std::move(label);
    c.node = make_node("Pad", {{"mode", A::of_string(mode)}});
    c.inputs = {random_tensor({2, 3, 4, 5}, seed++), Tensor::from_i64({8}, pads), Tensor::from_f32({}, {0.5f})};
    c.is_const = {false, true, true};
    v.push_back(c);
  };
  pad("pad_constant", "constant", {0, 0, 1, 2, 0, 0, 2, 1});
  pad("pad_reflect", "reflect", {0, 0, 2, 1, 0, 0, 1, 3});
  pad("pad_edge", "edge", {0, 1, 1, 0, 0, 0, 2, 2});
  pad("pad_crop", "constant", {0, 0, -1, 1, 0, 0, 1, -2});
  // Indexing, selection and comparison (a transformer's masks and embeddings): integer and
  // boolean tensors at run time.
  {
    OpCase c;
    c.label = "gather_runtime_ids";
    c.node = make_node("Gather");
    c.inputs = {random_tensor({11, 6}, seed++), Tensor::from_i64({2, 5}, {0, 10, 3, 3, -1, 7, 2, 9, 1, -11})};
    c.is_const = {true, false};
    v.push_back(c);
    c.label = "gather_axis1";
    c.node = make_node("Gather", {{"axis", A::of_int(1)}});
    c.inputs = {random_tensor({3, 7, 4}, seed++), Tensor::from_i64({2, 2}, {6, 0, -2, 3})};
    c.is_const = {false, false};
    v.push_back(c);
  }
  {
    OpCase c;
    c.label = "slice_steps";
    c.node = make_node("Slice");
    c.inputs = {random_tensor({4, 6, 5}, seed++), Tensor::from_i64({2}, {1, 4}), Tensor::from_i64({2}, {4, 0}),
                Tensor::from_i64({2}, {0, 2}), Tensor::from_i64({2}, {2, -2})};
    c.is_const = {false, true, true, true, true};
    v.push_back(c);
    c.label = "expand";
    c.node = make_node("Expand");
    c.inputs = {random_tensor({3, 1}, seed++), Tensor::from_i64({3}, {2, 3, 4})};
    c.is_const = {false, true};
    v.push_back(c);
  }
  auto boolean = [&](const Shape& shape, uint64_t s) {
    Tensor t = Tensor::empty({DType::kBool, shape});
    const Tensor r = random_tensor(shape, s);
    for (int64_t i = 0; i < t.numel(); ++i) t.u8()[i] = r.f32()[i] > 0;
    return t;
  };
  {
    OpCase c;
    c.label = "where_broadcast";
    c.node = make_node("Where");
    c.inputs = {boolean({2, 1, 4}, seed++), random_tensor({2, 3, 4}, seed++), random_tensor({4}, seed++)};
    v.push_back(c);
    c.label = "where_int64";
    c.inputs = {boolean({2, 3}, seed++), Tensor::from_i64({3}, {1, 2, 3}), Tensor::from_i64({2, 1}, {-5, 7})};
    v.push_back(c);
    for (const auto& cmp : kCompareOps) {
      c.label = std::string("compare_") + cmp.name;
      c.node = make_node(cmp.name);
      if (cmp.op >= CompareOp::kAnd) c.inputs = {boolean({2, 3, 4}, seed++), boolean({4}, seed++)};
      else if (cmp.op == CompareOp::kEqual) c.inputs = {Tensor::from_i64({2, 3}, {0, 1, 2, 0, 5, 2}), Tensor::from_i64({3}, {0, 5, 2})};
      else c.inputs = {random_tensor({2, 3, 4}, seed++), random_tensor({4}, seed++)};
      v.push_back(c);
    }
    c.label = "not";
    c.node = make_node("Not");
    c.inputs = {boolean({3, 5}, seed++)};
    v.push_back(c);
    c.label = "cast_float_to_int64";
    c.node = make_node("Cast", {{"to", A::of_int(7)}});
    c.inputs = {random_tensor({3, 5}, seed++, -4.f, 4.f)};
    v.push_back(c);
    c.label = "cast_bool_to_float";
    c.node = make_node("Cast", {{"to", A::of_int(1)}});
    c.inputs = {boolean({3, 5}, seed++)};
    v.push_back(c);
  }
  {  // Split: lengths as an input (opset 13), equal parts, uneven num_outputs (opset 18)
    OpCase c;
    c.label = "split_lengths";
    c.node = make_node("Split", {{"axis", A::of_int(2)}});
    c.node.outputs = {"y0", "y1", "y2"};
    c.inputs = {random_tensor({2, 3, 9}, seed++), Tensor::from_i64({3}, {2, 4, 3})};
    c.is_const = {false, true};
    v.push_back(c);
    c.label = "split_equal_axis0";
    c.node = make_node("Split");
    c.node.outputs = {"y0", "y1"};
    c.inputs = {random_tensor({4, 5}, seed++)};
    c.is_const = {};
    v.push_back(c);
    c.label = "split_num_outputs";
    c.node = make_node("Split", {{"axis", A::of_int(-1)}, {"num_outputs", A::of_int(3)}});
    c.node.outputs = {"y0", "y1", "y2"};
    c.inputs = {random_tensor({3, 7}, seed++)};
    c.opset = 18;
    v.push_back(c);
  }
  // Recurrent cells: the options PyTorch exports (bidirectional LSTM, GRU with
  // linear_before_reset, batch-first layout) and lengths.
  auto recurrent = [&](std::string label, const std::string& op, std::map<std::string, A> attrs, int gates, int dirs,
                       bool batch_first, bool lens) {
    const int64_t S = 5, B = 3, I = 6, H = 4, G = gates * H;
    OpCase c;
    c.label = std::move(label);
    if (batch_first) attrs["layout"] = A::of_int(1);
    c.node = make_node(op, attrs);
    c.inputs = {random_tensor(batch_first ? Shape{B, S, I} : Shape{S, B, I}, seed++),
                random_tensor({dirs, G, I}, seed++), random_tensor({dirs, G, H}, seed++),
                random_tensor({dirs, 2 * G}, seed++), lens ? Tensor::from_i64({B}, {5, 2, 4}) : Tensor(),
                random_tensor(batch_first ? Shape{B, dirs, H} : Shape{dirs, B, H}, seed++)};
    c.is_const = {false, true, true, true, true, false};
    c.opset = 14;
    v.push_back(std::move(c));
  };
  recurrent("rnn_relu", "RNN", {{"activations", A::of_strings({"Relu"})}}, 1, 1, false, false);
  recurrent("gru_lbr_batch_first", "GRU", {{"linear_before_reset", A::of_int(1)}}, 3, 1, true, false);
  recurrent("gru_bidirectional_lens", "GRU", {{"direction", A::of_string("bidirectional")}}, 3, 2, false, true);
  recurrent("lstm_bidirectional_lens", "LSTM", {{"direction", A::of_string("bidirectional")}}, 4, 2, false, true);
  recurrent("lstm_reverse_batch_first", "LSTM", {{"direction", A::of_string("reverse")}}, 4, 1, true, false);
  {
    OpCase c;
    c.label = "reshape";
    c.node = make_node("Reshape");
    c.inputs = {random_tensor({2, 3, 4}, 61), Tensor::from_i64({3}, {0, -1, 2})};
    c.is_const = {false, true};
    v.push_back(c);
  }
  {  // The pointwise rows (operators/pointwise.hpp) and the indexing ops (operators/indexing.hpp).
    OpCase c;
    for (const char* op : {"Floor", "Ceil", "Round", "Sign", "IsNaN", "IsInf"}) {
      c.label = op;
      c.node = make_node(op);
      c.inputs = {random_tensor({3, 5}, seed++, -3.f, 3.f)};
      v.push_back(c);
    }
    c.label = "sign_int64";
    c.node = make_node("Sign");
    c.inputs = {Tensor::from_i64({5}, {-3, 0, 4, INT64_MIN, INT64_MAX})};
    v.push_back(c);
    c.label = "mod_int64";
    c.node = make_node("Mod");
    c.inputs = {Tensor::from_i64({2, 3}, {-7, 8, 9, -10, 0, 5}), Tensor::from_i64({3}, {3, -4, 2})};
    v.push_back(c);
    c.label = "mod_float_fmod";
    c.node = make_node("Mod", {{"fmod", A::of_int(1)}});
    c.inputs = {random_tensor({3, 4}, seed++, -5.f, 5.f), random_tensor({4}, seed++, 1.f, 2.f)};
    v.push_back(c);
    c.label = "cumsum_reverse_exclusive";
    c.node = make_node("CumSum", {{"reverse", A::of_int(1)}, {"exclusive", A::of_int(1)}});
    c.inputs = {random_tensor({2, 3, 4}, seed++), Tensor::from_i64({}, {1})};
    c.is_const = {false, true};
    v.push_back(c);
    c.label = "cumsum_int64";
    c.node = make_node("CumSum");
    c.inputs = {Tensor::from_i64({2, 3}, {1, -2, 3, 4, 5, -6}), Tensor::from_i64({1}, {-1})};
    v.push_back(c);
    c.label = "tile";
    c.node = make_node("Tile");
    c.inputs = {random_tensor({2, 1, 3}, seed++), Tensor::from_i64({3}, {2, 3, 1})};
    v.push_back(c);
    c.label = "gather_elements";
    c.node = make_node("GatherElements", {{"axis", A::of_int(-1)}});
    c.inputs = {random_tensor({3, 4}, seed++), Tensor::from_i64({3, 2}, {0, 3, -1, 2, 1, 1})};
    c.is_const = {};
    v.push_back(c);
    c.label = "gather_nd_batch";
    c.node = make_node("GatherND", {{"batch_dims", A::of_int(1)}});
    c.inputs = {random_tensor({2, 3, 4}, seed++), Tensor::from_i64({2, 2, 1}, {0, 2, -1, 1})};
    v.push_back(c);
    c.label = "abs_int64";
    c.node = make_node("Abs");
    c.inputs = {Tensor::from_i64({4}, {-3, 0, INT64_MIN, 7})};
    v.push_back(c);
    c.label = "max_int64";
    c.node = make_node("Max");
    c.inputs = {Tensor::from_i64({2, 2}, {1, -5, 9, 2}), Tensor::from_i64({2}, {3, -7})};
    v.push_back(c);
    // Resize (operators/resize.hpp): scales and sizes, the three modes.
    c.label = "resize_linear_half_pixel";
    c.node = make_node("Resize", {{"mode", A::of_string("linear")}});
    c.inputs = {random_tensor({1, 2, 3, 4}, seed++), Tensor(), Tensor::from_f32({4}, {1, 1, 2.f, 1.5f})};
    c.is_const = {false, true, true};
    c.opset = 18;
    v.push_back(c);
    c.label = "resize_cubic_sizes_align_corners";
    c.node = make_node("Resize", {{"mode", A::of_string("cubic")},
                                  {"coordinate_transformation_mode", A::of_string("align_corners")}});
    c.inputs = {random_tensor({1, 1, 5, 4}, seed++), Tensor(), Tensor(), Tensor::from_i64({4}, {1, 1, 3, 7})};
    c.is_const = {false, true, true, true};
    v.push_back(c);
    c.label = "resize_nearest_asymmetric_floor";
    c.node = make_node("Resize", {{"coordinate_transformation_mode", A::of_string("asymmetric")},
                                  {"nearest_mode", A::of_string("floor")}});
    c.inputs = {random_tensor({2, 3, 4}, seed++), Tensor(), Tensor::from_f32({3}, {1, 2.5f, 0.5f})};
    c.is_const = {false, true, true};
    v.push_back(c);
    c.opset = 18;
    c.label = "topk_smallest";
    c.node = make_node("TopK", {{"largest", A::of_int(0)}, {"axis", A::of_int(1)}});
    c.node.outputs = {"values", "indices"};
    c.inputs = {random_tensor({2, 5, 3}, seed++), Tensor::from_i64({1}, {3})};
    c.is_const = {false, true};
    v.push_back(c);
    c.node.outputs = {};
    c.label = "scatter_elements_add";
    c.node = make_node("ScatterElements", {{"axis", A::of_int(1)}, {"reduction", A::of_string("add")}});
    c.inputs = {random_tensor({2, 4}, seed++), Tensor::from_i64({2, 3}, {0, 3, 0, -1, 2, 2}), random_tensor({2, 3}, seed++)};
    c.is_const = {};
    v.push_back(c);
    c.label = "scatter_nd_slices";
    c.node = make_node("ScatterND");
    c.inputs = {random_tensor({4, 3}, seed++), Tensor::from_i64({2, 1}, {3, 0}), random_tensor({2, 3}, seed++)};
    v.push_back(c);
    c.label = "rms_norm_last_two";
    c.node = make_node("RMSNormalization", {{"axis", A::of_int(-2)}});
    c.inputs = {random_tensor({2, 3, 4}, seed++), random_tensor({3, 4}, seed++)};
    c.is_const = {false, true};
    c.opset = 23;
    v.push_back(c);
    c.opset = 13;
  }
  return v;
}

// The pointwise, indexing and Resize cases and the int64 ones, which only the oracle and the
// host backends' shared loops run (the torch and cuda backends have no kernels for them, or
// compute float32 only: the planner places those nodes on the next backend).
#define SHARED_LOOP_CASES                                                                           \
  "Floor", "Ceil", "Round", "Sign", "IsNaN", "IsInf", "sign_int64", "mod_int64", "mod_float_fmod",             \
      "cumsum_reverse_exclusive", "cumsum_int64", "tile", "gather_elements", "gather_nd_batch", "abs_int64",     \
      "max_int64", "resize_linear_half_pixel", "resize_cubic_sizes_align_corners", "resize_nearest_asymmetric_floor", \
      "topk_smallest", "scatter_elements_add", "scatter_nd_slices", "rms_norm_last_two"

/// One case on one backend against naive (a backend may decline only where documented); a
/// declined case's label goes to `declined`.
void check_against_naive(const std::string& backend, const OpCase& c, std::vector<std::string>& declined) {
  SCOPED_TRACE(c.label + " on " + backend);
  std::vector<Tensor> ref;
  Status st = run_on(c, "naive", &ref);
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  std::vector<Tensor> got;
  st = run_on(c, backend, &got);
  if (st.code() == StatusCode::kUnsupported) {
    // Declining is allowed only where documented, and it must say why: even LRN sizes,
    // oneDNN reflect/edge/cropping pads and
    // element-wise ops without a oneDNN algorithm; the torch backend has no LRN and no
    // recurrent cells, and pads with a constant only.
    static const std::map<std::string, std::set<std::string>> may_decline = {
        // Integer Abs and Max: the oracle's alone.
        {"im2col", {"lrn4_even", "abs_int64", "max_int64"}},
        {"onednn", {"lrn4_even", "abs_int64", "max_int64", "pad_reflect", "pad_edge", "pad_crop"}},
        {"torch",
         {"lrn5", "lrn4_even", "pad_reflect", "pad_edge", "rnn_relu", "gru_lbr_batch_first", "gru_bidirectional_lens",
          "lstm_bidirectional_lens", "lstm_reverse_batch_first", SHARED_LOOP_CASES}},
        // cuda (recorded on an H200, docs/gpu.md): windows cuDNN sizes differently (ceil mode,
        // dilated max pooling), MatMul batches broadcast against each other, the unary rows
        // without a device function, and the ops it has no kernel for (Pow, Dropout, Expand,
        // Where, comparisons and logic, Cast, Split, the recurrent cells).
        {"cuda",
         {"maxpool_ceil", "maxpool_dilated", "avgpool_ceil", "matmul_broadcast_batch", "Pow_same", "Pow_odd",
          "Pow_channel", "Pow_row", "Pow_scalar", "Pow_mixed", "Pow_first_broadcast", "Pow_large", "Pow_large_channel",
          "Pow_large_first_broadcast", "Pow_square", "Tan", "Sinh", "Cosh", "Asin", "Acos", "Atan", "Asinh", "Acosh",
          "Atanh", "Mish", "Celu", "Swish", "Tan_large", "Sinh_large", "Cosh_large", "Asin_large", "Acos_large",
          "Atan_large", "Asinh_large", "Acosh_large", "Atanh_large", "Mish_large", "Celu_large", "Swish_large",
          "dropout_inference", "expand", "where_broadcast", "where_int64",
          "compare_Equal", "compare_Less", "compare_LessOrEqual", "compare_Greater", "compare_GreaterOrEqual",
          "compare_And", "compare_Or", "compare_Xor", "not", "cast_float_to_int64", "cast_bool_to_float",
          "split_lengths", "split_equal_axis0", "split_num_outputs", "rnn_relu", "gru_lbr_batch_first",
          "gru_bidirectional_lens", "lstm_bidirectional_lens", "lstm_reverse_batch_first", SHARED_LOOP_CASES}}};
    EXPECT_FALSE(st.message().empty());
    const auto it = may_decline.find(backend);
    // oneDNN has no algorithm for some element-wise ops and reductions (Erf, Sin, Pow,
    // ReduceLogSum, ...): declined with that reason (docs/conformance.md), the planner
    // places them elsewhere.
    const bool no_onednn_algorithm =
        backend == "onednn" && (st.message().find("oneDNN has no ") != std::string::npos ||
                                st.message().find("'onednn' has no kernel for " + c.node.op_type) != std::string::npos);
    if (it != may_decline.end() && !no_onednn_algorithm) {
      EXPECT_TRUE(it->second.count(c.label)) << backend << " declines " << c.label << ": " << st.message();
    }
    declined.push_back(c.label);
    return;
  }
  ASSERT_TRUE(st.is_ok()) << backend << ": " << st.to_string();
  ASSERT_EQ(got.size(), ref.size());
  for (size_t i = 0; i < ref.size(); ++i) {
    Agreement a = compare_tensors(got[i], ref[i], 1e-4, 1e-5);
    EXPECT_TRUE(a.ok) << c.label << " on " << backend << ": " << a.message;
  }
}

/// Every case on each registered backend but the oracle (the built-ins, and the bundled
/// torch backend where tests/test_torch.cpp loads it), against naive: one test per backend
/// (a failure names the case), since hundreds of one-case processes cost minutes of start-up.
class BackendOps : public ::testing::TestWithParam<std::string> {};

TEST_P(BackendOps, EveryCaseMatchesNaive) {
  const std::vector<OpCase> all = cases();
  ASSERT_GT(all.size(), 140u);
  std::vector<std::string> declined;
  for (const OpCase& c : all) check_against_naive(GetParam(), c, declined);
  // What ran is the test's reach: a backend without a may_decline list (a plugin's) says here
  // which cases it left to others, so that a run on its hardware records them.
  std::cout << "[ reach    ] " << GetParam() << " ran " << all.size() - declined.size() << " of " << all.size()
            << " cases" << (declined.empty() ? "" : "; declined: " + join(declined)) << "\n";
  EXPECT_GT(all.size() - declined.size(), all.size() / 2) << GetParam() << " declines most cases: " << join(declined);
}

INSTANTIATE_TEST_SUITE_P(AllOps, BackendOps, ::testing::ValuesIn(optimised_backends()), backend_param_name);

TEST(BackendOps, UnsupportedSaysWhy) {
  OpCase c;
  c.label = "lrn_even";
  c.node = make_node("LRN", {{"size", Attribute::of_int(4)}});
  c.inputs = {random_tensor({1, 6, 3, 3}, 5)};
  std::vector<Tensor> out;
  Status st = run_on(c, "onednn", &out);
  EXPECT_EQ(st.code(), StatusCode::kUnsupported);
  EXPECT_NE(st.message().find("even LRN size"), std::string::npos) << st.message();
}

}  // namespace

std::vector<OpCase> forward_op_cases() { return cases(); }

/// A kernel for registry tests: y = max(x, 0).
struct ToyRelu : Kernel {
  Status init(const KernelContext&) { return Status::ok(); }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    for (int64_t i = 0; i < src[0]->numel(); ++i) dst[0]->f32()[i] = std::max(src[0]->f32()[i], 0.f);
    return Status::ok();
  }
};

TEST(Registry, EveryBackendAndKernelIsRegisteredOnce) {
  KernelRegistry r;
  ASSERT_TRUE(register_backend(r, register_naive).is_ok());
  const Status twice = register_backend(r, register_naive);
  EXPECT_FALSE(twice.is_ok());
  EXPECT_NE(twice.message().find("backend 'naive' is registered twice"), std::string::npos) << twice.to_string();
  const Status kernel_twice = r.add("naive", "Conv", make_factory<ToyRelu>());
  EXPECT_NE(kernel_twice.message().find("backend 'naive' registers a kernel for Conv twice"), std::string::npos)
      << kernel_twice.to_string();
  const Status unknown = r.add("nobody", "Conv", make_factory<ToyRelu>());
  EXPECT_NE(unknown.message().find("backend 'nobody' is not registered"), std::string::npos) << unknown.to_string();
  for (const char* bad : {"", "a,b", "two words", "x=y", "@n", "*"})
    EXPECT_FALSE(r.add_backend({bad, "", nullptr, nullptr}).is_ok()) << "'" << bad << "'";
  EXPECT_TRUE(r.replace("naive", "Relu", make_factory<ToyRelu>()).is_ok()) << "replacing is explicit";
  EXPECT_FALSE(r.replace("naive", "Frobnicate", make_factory<ToyRelu>()).is_ok()) << "nothing to replace";
  // A chain stops at its first error and keeps it.
  DirectRegistrar direct(r);
  BackendRegistration chain(direct, {"toy", "a toy", nullptr, nullptr});
  chain.kernel("Relu", make_factory<ToyRelu>()).kernel("Relu", make_factory<ToyRelu>()).kernel("Tanh", make_factory<ToyRelu>());
  EXPECT_NE(chain.status().message().find("kernel for Relu twice"), std::string::npos) << chain.status().to_string();
  EXPECT_FALSE(r.has_kernel("toy", "Tanh"));
}

TEST(Registry, CapabilityIsAskedBeforeAnyKernelIsBuilt) {
  KernelRegistry r;
  ASSERT_TRUE(register_backend(r, register_naive).is_ok());
  // A backend whose Relu reads its layouts in training too, whose Tanh only in inference,
  // and whose Relu declines nodes named "big" without being built.
  static int built = 0;
  built = 0;
  KernelFactory counting = [](const KernelContext& ctx) -> Expected<std::unique_ptr<Kernel>> {
    ++built;
    return make_factory<ToyRelu>()(ctx);
  };
  SupportCheck small_only = [](const KernelContext& ctx) {
    return ctx.node->name == "big" ? Status::unsupported(ctx.node->label() + ": too big for toy") : Status::ok();
  };
  DirectRegistrar direct(r);
  BackendRegistration toy(direct, {"toy", "a toy", nullptr, nullptr});
  toy.kernel("Relu", counting, {LayoutUse::kTraining, small_only}).kernel("Tanh", counting, {LayoutUse::kInference, {}});
  ASSERT_TRUE(toy.status().is_ok()) << toy.status().to_string();

  Node big = make_node("Relu"), small = make_node("Relu"), tanh = make_node("Tanh"), conv = make_node("Conv");
  big.name = "big";
  KernelContext ctx;
  ctx.node = &big;
  Capability cap = r.query("toy", ctx);
  EXPECT_EQ(cap.status.code(), StatusCode::kUnsupported);
  EXPECT_NE(cap.status.message().find("too big for toy"), std::string::npos) << cap.status.to_string();
  EXPECT_FALSE(r.create("toy", ctx).ok()) << "create asks the same question first";
  ctx.node = &small;
  ctx.training = true;
  cap = r.query("toy", ctx);
  EXPECT_TRUE(cap.accepted());
  EXPECT_TRUE(cap.layouts) << "kTraining: layouts in training plans";
  ctx.node = &tanh;
  EXPECT_FALSE(r.query("toy", ctx).layouts) << "kInference: no layouts in training plans";
  ctx.training = false;
  EXPECT_TRUE(r.query("toy", ctx).layouts);
  ctx.node = &conv;
  cap = r.query("toy", ctx);
  EXPECT_EQ(cap.status.code(), StatusCode::kUnsupported);
  EXPECT_NE(cap.status.message().find("backend 'toy' has no kernel for Conv"), std::string::npos);
  EXPECT_EQ(r.query("nobody", ctx).status.code(), StatusCode::kNotFound);
  EXPECT_EQ(built, 0) << "no query builds a kernel";
  ASSERT_NE(r.traits("toy", "Tanh"), nullptr);
  EXPECT_EQ(r.traits("toy", "Tanh")->layouts, LayoutUse::kInference);
  EXPECT_EQ(r.traits("toy", "Conv"), nullptr);

  // The planner asks first: the declined node falls back to naive with the check's reason,
  // and toy's kernel is built for the node it takes, once.
  Graph g;
  g.source = "toy.onnx";
  g.inputs.push_back(ValueInfo{"x", DType::kF32, {2, 3}, {}, true});
  add_node(g, make_node("Relu"), {"x"}, {"h"}, "big");
  add_node(g, make_node("Relu"), {"h"}, {"y"}, "small");
  g.outputs.push_back(ValueInfo{"y", DType::kF32, {}, {}, false});
  ASSERT_TRUE(prepare_graph(g, r, PrepareOptions{}).ok());
  auto plan = Plan::build(g, Placement::all_on("toy"), r);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  const auto& steps = plan.value()->steps();
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(steps[0].backend, "naive");
  EXPECT_NE(steps[0].fallback_reason.find("too big for toy"), std::string::npos) << steps[0].fallback_reason;
  EXPECT_EQ(steps[1].backend, "toy");
  EXPECT_EQ(built, 1);
}

// Issue 54's op tables: a backend's element-wise kernels are derived from the rows it has a
// mapping for, so a row it registers is one it computes. Each row a backend claims is planned
// alone on it, at its defaults, and must run there: a kernel registered for a row it then
// declines in init (the torch backend registered every row before) fails here. Rows it has
// no mapping for have no kernel: the registry declines them by name, with no edit.
class ElementwiseRows : public ::testing::TestWithParam<std::string> {};

TEST_P(ElementwiseRows, EveryRowTheBackendRegistersItComputes) {
  const KernelRegistry& r = builtin_registry();
  const std::string& backend = GetParam();
  int checked = 0;
  auto plan_alone = [&](const char* op, int inputs) {
    Graph g;
    g.source = std::string(op) + ".onnx";
    std::vector<std::string> names;
    for (int i = 0; i < inputs; ++i) {
      names.push_back("x" + std::to_string(i));
      g.inputs.push_back(ValueInfo{names.back(), DType::kF32, {2, 3}, {}, true});
    }
    add_node(g, make_node(op), names, {"y"}, "n");
    g.outputs.push_back(ValueInfo{"y", DType::kF32, {}, {}, false});
    ASSERT_TRUE(prepare_graph(g, r, PrepareOptions{}).ok()) << op;
    auto plan = Plan::build(g, Placement::all_on(backend), r);
    ASSERT_TRUE(plan.ok()) << backend << " " << op << ": " << plan.status().to_string();
    for (const PlanStep& step : plan.value()->steps())
      if (!step.conversion) {
        EXPECT_EQ(step.backend, backend) << backend << " registers " << op << " but declines it: " << step.fallback_reason;
        ++checked;
      }
  };
  for (const UnaryOpInfo& u : kUnaryOps)
    if (r.has_kernel(backend, u.name)) plan_alone(u.name, 1);
  for (const BinaryOpInfo& op : kBinaryOps)
    if (r.has_kernel(backend, op.name)) plan_alone(op.name, 2);
  EXPECT_GT(checked, 0) << backend << " registers no element-wise row";
}

INSTANTIATE_TEST_SUITE_P(Registry, ElementwiseRows, ::testing::ValuesIn(optimised_backends()), backend_param_name);

TEST(Registry, BuiltinsDescribeThemselves) {
  const KernelRegistry& r = builtin_registry();
  ASSERT_FALSE(r.backends().empty());
  EXPECT_EQ(r.backends().front(), "naive") << "the oracle is registered first";
  for (const auto& b : r.backends()) {
    const BackendInfo* info = r.info(b);
    ASSERT_NE(info, nullptr) << b;
    EXPECT_EQ(info->name, b);
    EXPECT_FALSE(info->summary.empty()) << b;
  }
  EXPECT_EQ(r.info("nobody"), nullptr);
  // Provenance's libraries and kernels are what the backends say of themselves.
  std::map<std::string, BackendProperties> said;
  for (auto& [backend, p] : backend_properties()) said[backend] = std::move(p);
  for (const auto& [backend, p] : said)
    for (const auto& [library, version] : p.libraries) EXPECT_FALSE(version.empty()) << backend << " " << library;
  if (r.has_backend("im2col")) {
    // blas_core, and blas_core_detected where OpenBLAS's own pick was a fallback it replaced.
    const auto& k = said["im2col"].kernels;
    ASSERT_TRUE(k.size() == 1u || k.size() == 2u) << k.size();
    EXPECT_EQ(k[0].first, "blas_core");
    EXPECT_FALSE(k[0].second.empty());
    if (k.size() == 2) {
      EXPECT_EQ(k[1].first, "blas_core_detected");
    }
  }
  if (r.has_backend("onednn")) {
    ASSERT_EQ(said["onednn"].kernels.size(), 2u);
    EXPECT_EQ(said["onednn"].kernels[0].first, "isa");
    EXPECT_EQ(said["onednn"].kernels[0].second, onednn_effective_isa());
    // Where it runs small tensors with Mosaic's loops instead of primitives (MOSAIC_ONEDNN_LOOPS).
    EXPECT_EQ(said["onednn"].kernels[1].first, "loops");
    if (!std::getenv("MOSAIC_ONEDNN_LOOPS")) {
      EXPECT_EQ(said["onednn"].kernels[1].second, "auto");
    }
    EXPECT_EQ(said["onednn"].libraries.at(0).first, "oneDNN");
  }
  EXPECT_EQ(said.count("naive"), 0u) << "the oracle has no library to name";
}

TEST(OneDnnErrors, OnlyUnimplementedIsADecline) {
  Node n = make_node("Conv");
  n.name = "conv7";
  // dnnl_status_t: out_of_memory 1, invalid_arguments 2, unimplemented 3, runtime_error 5.
  Status st = onednn_error_status(3, "could not create a primitive descriptor", n);
  EXPECT_EQ(st.code(), StatusCode::kUnsupported);
  EXPECT_NE(st.message().find("no implementation for this configuration"), std::string::npos) << st.message();
  for (int code : {1, 2, 5}) {
    st = onednn_error_status(code, "boom", n);
    EXPECT_EQ(st.code(), StatusCode::kInternal) << code << ": a real failure is not a fallback";
    EXPECT_NE(st.message().find("node 'conv7' (Conv): oneDNN: boom"), std::string::npos) << st.message();
  }
  EXPECT_NE(onednn_error_status(2, "x", n).message().find("invalid arguments"), std::string::npos);
}

}  // namespace mosaic::test
