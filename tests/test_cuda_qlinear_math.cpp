// The cuda backend's com.microsoft QOperator element-wise ops (issue 52), run on the host:
// each case is planned by backends/cuda/qlinear_plan.hpp exactly as the cuda kernel plans it,
// and every output computed by device_qlinear.hpp's per-element functions (the ones the CUDA
// kernels call; the lookups by the table the kernel uploads). Every output must equal the
// naive oracle's, code for code. What this cannot reach is the launches:
// tests/test_cuda.cpp (CudaBackend.OnAGpuQOperatorOpsMatchNaive) runs those on a GPU.
// tests/cuda_math_plants.py counts the bugs planted in the headers that these tests catch.
#include <gtest/gtest.h>

#include <algorithm>

#include "backends/cuda/qlinear_plan.hpp"
#include "planned_context.hpp"
#include "test_util.hpp"

namespace mosaic::cuda_backend {
namespace {
using test::context_of;
using test::OpCase;
using test::random_codes;
using test::typed;
using test::values_of;

/// The oracle's output against the host run of the plan, code for code.
void expect_codes(const OpCase& c, const Tensor& want, const std::vector<int>& got) {
  const std::vector<double> w = values_of(want);
  ASSERT_EQ(w.size(), got.size()) << c.label;
  int differ = 0;
  size_t first = w.size();
  for (size_t i = 0; i < w.size(); ++i)
    if (got[i] != static_cast<int>(w[i])) {
      ++differ;
      first = std::min(first, i);
    }
  EXPECT_EQ(differ, 0) << c.label << ": of " << w.size() << " outputs; first at " << first << ": "
                       << (first < w.size() ? std::to_string(got[first]) + " for " + std::to_string(w[first]) : "");
}

/// Plans the case as the cuda backend does and runs the plan on the host.
void expect_oracles(const OpCase& c) {
  SCOPED_TRACE(c.label);
  auto p = context_of(c);
  ASSERT_FALSE(p->want.empty());
  const std::string& op = c.node.op_type;
  const Tensor& y = p->want[0];
  std::vector<int> got(static_cast<size_t>(y.numel()));
  auto bytes = [&](size_t i) { return static_cast<const uint8_t*>(c.inputs[i].data()); };
  if (op == "QLinearAdd" || op == "QLinearMul") {
    auto q = qlinear_binary_plan(p->ctx);
    ASSERT_TRUE(q.ok()) << q.status().to_string();
    for (int64_t i = 0; i < y.numel(); ++i) got[static_cast<size_t>(i)] = dev_qbinary_at(*q, bytes(0), bytes(3), i);
  } else if (op == "QLinearSigmoid" || op == "QLinearLeakyRelu") {
    auto table = qlinear_lookup_plan(p->ctx);
    ASSERT_TRUE(table.ok()) << table.status().to_string();
    const bool s8 = c.inputs[0].dtype() == DType::kI8;
    for (int64_t i = 0; i < y.numel(); ++i) {
      // The CodeLookup kernel's indexing (quant.cu): table[(uint8)(x + offset)].
      const uint8_t byte = (*table)[static_cast<uint8_t>(bytes(0)[i] + (s8 ? 128 : 0))];
      got[static_cast<size_t>(i)] = dev_code(byte, s8);
    }
  } else if (op == "QLinearGlobalAveragePool") {
    auto g = qlinear_global_pool_plan(p->ctx);
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    for (int64_t o = 0; o < y.numel(); ++o) got[static_cast<size_t>(o)] = dev_qglobal_pool_at(*g, bytes(0), o);
  } else if (op == "QLinearAveragePool") {
    auto a = qlinear_avg_pool_plan(p->ctx);
    ASSERT_TRUE(a.ok()) << a.status().to_string();
    for (int64_t o = 0; o < y.numel(); ++o) got[static_cast<size_t>(o)] = dev_qavg_pool_at(*a, bytes(0), o);
  } else if (op == "QLinearSoftmax") {
    auto m = qlinear_softmax_plan(p->ctx);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    std::vector<uint8_t> out(static_cast<size_t>(y.numel()), 0xA5);
    for (int64_t r = 0; r < y.numel() / m->len; ++r) dev_qsoftmax_row(*m, bytes(0), out.data(), r);
    for (size_t i = 0; i < out.size(); ++i) got[i] = dev_code(out[i], y.dtype() == DType::kI8);
  } else {
    ASSERT_EQ(op, "QLinearConcat");
    auto parts = qlinear_concat_plan(p->ctx);
    ASSERT_TRUE(parts.ok()) << parts.status().to_string();
    std::vector<uint8_t> out(static_cast<size_t>(y.numel()), 0xA5);
    for (size_t k = 0; k < parts->size(); ++k)
      for (int64_t i = 0; i < c.inputs[2 + 3 * k].numel(); ++i) dev_qconcat_at((*parts)[k], bytes(2 + 3 * k), out.data(), i);
    for (size_t i = 0; i < out.size(); ++i) got[i] = dev_code(out[i], y.dtype() == DType::kI8);
  }
  expect_codes(c, y, got);
}

TEST(CudaQLinearMath, QOperatorElementwiseOpsAreTheOracles) {
  const std::vector<OpCase> cases = test::qlinear_elementwise_cases();
  ASSERT_EQ(cases.size(), 18u);
  for (const OpCase& c : cases) expect_oracles(c);
}

TEST(CudaQLinearMath, WhatThePlanDeclinesItNames) {
  const std::vector<OpCase> cases = test::qlinear_elementwise_cases();
  auto message = [](const Status& st) { return st.is_ok() ? std::string("(planned)") : st.message(); };
  // A scale computed at run time: the ratios are fixed at plan time.
  OpCase add = cases[0];
  ASSERT_EQ(add.node.op_type, "QLinearAdd");
  add.is_const[6] = false;
  auto p = context_of(add);
  EXPECT_NE(message(qlinear_binary_plan(p->ctx).status()).find("C's scale must be a float32 constant"), std::string::npos)
      << message(qlinear_binary_plan(p->ctx).status());
  // Another fused activation than Relu is declined, not dropped.
  add = cases[0];
  add.node.attrs["mosaic.activation"] = Attribute::of_string("LeakyRelu");
  p = context_of(add);
  EXPECT_NE(message(qlinear_binary_plan(p->ctx).status()).find("a fused LeakyRelu"), std::string::npos);
  // A zero point given at run time, on a lookup and on a concatenation's operand.
  for (size_t which : {size_t{4}, size_t{10}}) {
    OpCase c = cases[which];
    const size_t zp = c.node.op_type == "QLinearConcat" ? 4 : 2;
    c.is_const[zp] = false;
    p = context_of(c);
    const Status st = c.node.op_type == "QLinearConcat" ? qlinear_concat_plan(p->ctx).status() : qlinear_lookup_plan(p->ctx).status();
    EXPECT_NE(message(st).find("zero point must be a constant"), std::string::npos) << c.label << ": " << message(st);
  }
  // Seven broadcast dimensions.
  OpCase wide = cases[0];
  wide.inputs[0] = random_codes(DType::kU8, {2, 1, 2, 1, 2, 1, 2}, 0, 255, 3);
  wide.inputs[3] = random_codes(DType::kU8, {2, 1, 2, 1, 2, 2}, 0, 255, 4);
  p = context_of(wide);
  EXPECT_NE(message(qlinear_binary_plan(p->ctx).status()).find("more than 6 dimensions"), std::string::npos);
}

}  // namespace
}  // namespace mosaic::cuda_backend

namespace mosaic::test {

namespace {
OpCase ms_op(const char* op, std::vector<Tensor> in, std::vector<bool> is_const, std::string label,
             std::map<std::string, Attribute> attrs = {}) {
  OpCase c = op_case(op, std::move(in), std::move(attrs));
  c.node.domain = kMicrosoftDomain;
  c.is_const = std::move(is_const);
  c.label = std::move(label);
  return c;
}
Tensor f32(float v) { return Tensor::from_f32({}, {v}); }
Tensor code(DType t, int v) { return typed(t, {}, {static_cast<double>(v)}); }
/// Every code of type t, as [256].
Tensor every_code(DType t) {
  std::vector<double> v(256);
  for (int i = 0; i < 256; ++i) v[static_cast<size_t>(i)] = t == DType::kI8 ? i - 128 : i;
  return typed(t, {256}, v);
}
}  // namespace

std::vector<OpCase> qlinear_elementwise_cases() {
  const DType u8 = DType::kU8, i8 = DType::kI8;
  const std::vector<bool> all_but_codes = {false, true, true, false, true, true, true, true};
  std::vector<OpCase> cases;
  // 0: QLinearAdd, uint8, B broadcast over A's first and third axes.
  cases.push_back(ms_op("QLinearAdd",
                        {random_codes(u8, {2, 3, 4, 5}, 0, 255, 1), f32(0.043f), code(u8, 125),
                         random_codes(u8, {3, 1, 5}, 0, 255, 2), f32(0.031f), code(u8, 131), f32(0.057f), code(u8, 101)},
                        all_but_codes, "QLinearAdd uint8 broadcast"));
  // 1, 2: every pair of int8 codes with scales whose (92, -80) and (-92, 80) from the zero
  // points sit on ties a fused multiply-add rounds the other way; then with the fused Relu and
  // an odd zero point for C (a tie rounded after the zero point is added goes the other way).
  Tensor rows = Tensor::empty({i8, {256, 256}}), cols = Tensor::empty({i8, {256, 256}});
  for (int i = 0; i < 65536; ++i) {
    rows.u8()[i] = static_cast<uint8_t>(i / 256);
    cols.u8()[i] = static_cast<uint8_t>(i % 256);
  }
  const std::vector<Tensor> ties = {rows, f32(0x1.bf9f9cp-5f), code(i8, 0), cols, f32(0x1.592e58p-5f), code(i8, 0),
                                    f32(0x1.aeb1dp-5f), code(i8, 0)};
  cases.push_back(ms_op("QLinearAdd", ties, all_but_codes, "QLinearAdd int8 every pair, ties"));
  std::vector<Tensor> odd = ties;
  odd[7] = code(i8, 1);
  cases.push_back(ms_op("QLinearAdd", odd, all_but_codes, "QLinearAdd int8 every pair, Relu, C's zero point 1",
                        {{"mosaic.activation", Attribute::of_string("Relu")}}));
  // 3: QLinearMul, int8, broadcast both ways, saturating; no A zero point.
  cases.push_back(ms_op("QLinearMul",
                        {random_codes(i8, {4, 1, 6}, -128, 127, 3), f32(0.05f), Tensor(), random_codes(i8, {5, 6}, -128, 127, 4),
                         f32(0.07f), code(i8, 9), f32(0.11f), code(i8, -11)},
                        all_but_codes, "QLinearMul int8 broadcast"));
  // 4-7: the lookups over every code of both types.
  cases.push_back(ms_op("QLinearSigmoid", {every_code(u8), f32(0.05f), code(u8, 128), f32(1.f / 256), code(u8, 0)},
                        {false, true, true, true, true}, "QLinearSigmoid uint8"));
  cases.push_back(ms_op("QLinearSigmoid", {every_code(i8), f32(0.07f), code(i8, -3), f32(1.f / 256), code(i8, -128)},
                        {false, true, true, true, true}, "QLinearSigmoid int8"));
  cases.push_back(ms_op("QLinearLeakyRelu", {every_code(i8), f32(0.25f), code(i8, 5), f32(0.2f), code(i8, -7)},
                        {false, true, true, true, true}, "QLinearLeakyRelu int8", {{"alpha", Attribute::of_float(0.1f)}}));
  cases.push_back(ms_op("QLinearLeakyRelu", {every_code(u8), f32(0.03f), code(u8, 100), f32(0.02f), code(u8, 60)},
                        {false, true, true, true, true}, "QLinearLeakyRelu uint8"));
  // 8, 9: the global pool, NCHW uint8 and channels-last int8.
  cases.push_back(ms_op("QLinearGlobalAveragePool",
                        {random_codes(u8, {2, 5, 7, 7}, 0, 255, 5), f32(0.02f), code(u8, 3), f32(0.013f), code(u8, 7)},
                        {false, true, true, true, true}, "QLinearGlobalAveragePool uint8 NCHW"));
  cases.push_back(ms_op("QLinearGlobalAveragePool",
                        {random_codes(i8, {2, 3, 3, 6}, -128, 127, 6), f32(0.1f), code(i8, -4), f32(0.03f), code(i8, 2)},
                        {false, true, true, true, true}, "QLinearGlobalAveragePool int8 channels_last",
                        {{"channels_last", Attribute::of_int(1)}}));
  // 10, 11: concatenations: int8 along axis 1, the middle operand in Y's own quantisation
  // (copied); uint8 along the last axis, every operand requantised (the first has Y's scale
  // but not its zero point).
  cases.push_back(ms_op("QLinearConcat",
                        {f32(0.05f), code(i8, -2), random_codes(i8, {2, 3, 4}, -128, 127, 7), f32(0.08f), code(i8, 6),
                         random_codes(i8, {2, 1, 4}, -128, 127, 8), f32(0.05f), code(i8, -2),
                         random_codes(i8, {2, 2, 4}, -128, 127, 9), f32(0.021f), code(i8, 0)},
                        {true, true, false, true, true, false, true, true, false, true, true}, "QLinearConcat int8 axis 1",
                        {{"axis", Attribute::of_int(1)}}));
  cases.push_back(ms_op("QLinearConcat",
                        {f32(0.04f), code(u8, 128), random_codes(u8, {3, 2, 5}, 0, 255, 10), f32(0.04f), code(u8, 120),
                         random_codes(u8, {3, 2, 2}, 0, 255, 11), f32(0.01f), code(u8, 200)},
                        {true, true, false, true, true, false, true, true}, "QLinearConcat uint8 axis -1",
                        {{"axis", Attribute::of_int(-1)}}));
  // 12-14: average pools: uint8 3x3 windows, strides 2, padded, over the cells inside; int8
  // 1-D windows of 4 (stride 3, dilation 2) counting the padding; the tie of
  // MsQuantize.PoolsAverageTheDequantisedValues (each cell rounded before the sum).
  const std::vector<bool> x_y = {false, true, true, true, true};
  cases.push_back(ms_op("QLinearAveragePool",
                        {random_codes(u8, {2, 3, 7, 6}, 0, 255, 12), f32(0.03f), code(u8, 17), f32(0.02f), code(u8, 9)},
                        x_y, "QLinearAveragePool uint8 3x3 stride 2 padded",
                        {{"kernel_shape", Attribute::of_ints({3, 3})}, {"strides", Attribute::of_ints({2, 2})},
                         {"pads", Attribute::of_ints({1, 1, 1, 1})}}));
  cases.push_back(ms_op("QLinearAveragePool",
                        {random_codes(i8, {1, 2, 13}, -128, 127, 13), f32(0.07f), code(i8, 3), f32(0.05f), code(i8, -6)},
                        x_y, "QLinearAveragePool int8 1-D count_include_pad",
                        {{"kernel_shape", Attribute::of_ints({4})}, {"strides", Attribute::of_ints({3})},
                         {"dilations", Attribute::of_ints({2})}, {"pads", Attribute::of_ints({2, 1})},
                         {"count_include_pad", Attribute::of_int(1)}}));
  cases.push_back(ms_op("QLinearAveragePool",
                        {typed(i8, {1, 1, 2, 2}, {34, 55, -51, -19}), f32(0x1.8a3652p-4f), Tensor(), f32(0x1.c5f0fep-6f),
                         code(i8, 5)},
                        x_y, "QLinearAveragePool int8 tie", {{"kernel_shape", Attribute::of_ints({2, 2})}}));
  // 15-17: softmaxes: uint8 over the last axis (opset 13), int8 over every axis from 1 (opset
  // 11's), and over a middle axis (inner > 1).
  cases.push_back(ms_op("QLinearSoftmax",
                        {random_codes(u8, {2, 3, 10}, 0, 255, 14), f32(0.05f), code(u8, 128), f32(1.f / 256), code(u8, 0)},
                        x_y, "QLinearSoftmax uint8 last axis", {{"opset", Attribute::of_int(13)}}));
  cases.push_back(ms_op("QLinearSoftmax",
                        {random_codes(i8, {2, 3, 4}, -128, 127, 15), f32(0.08f), code(i8, -3), f32(1.f / 256), code(i8, -128)},
                        x_y, "QLinearSoftmax int8 opset 11 from axis 1",
                        {{"opset", Attribute::of_int(11)}, {"axis", Attribute::of_int(1)}}));
  cases.push_back(ms_op("QLinearSoftmax",
                        {random_codes(u8, {2, 5, 3}, 0, 255, 16), f32(0.1f), code(u8, 100), f32(1.f / 256), code(u8, 0)},
                        x_y, "QLinearSoftmax uint8 middle axis", {{"opset", Attribute::of_int(13)}, {"axis", Attribute::of_int(1)}}));
  return cases;
}

}  // namespace mosaic::test
