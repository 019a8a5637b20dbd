// The cuda backend's integer products and 8-bit codes (issue 52), run on the host: each case
// is planned by backends/cuda/int8_plan.hpp exactly as the cuda kernel plans it, its A packed
// and its outputs finished by device_quant.hpp's per-element functions (the ones the CUDA
// kernels call), with a plain integer product in cuBLAS's column-major "TN" semantics, over
// the parameters int8_gemm_call passes the library, standing in for cublasGemmEx. Every
// output must equal the naive oracle's, code for code. What this cannot reach is cuBLAS itself
// and the launches: tests/test_cuda.cpp (CudaBackend.OnAGpuIntegerOpsMatchNaive) runs those on
// a GPU. tests/cuda_math_plants.py counts the bugs planted in the two headers that these
// tests catch.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "backends/cuda/int8_plan.hpp"
#include "planned_context.hpp"
#include "test_util.hpp"

namespace mosaic::cuda_backend {
namespace {
using test::context_of;
using test::op_case;
using test::OpCase;
using test::random_codes;
using test::typed;
using test::values_of;
using A = Attribute;

const uint8_t* bytes_of(const OpCase& c, size_t slot) {
  return slot ? static_cast<const uint8_t*>(c.inputs[slot].data()) : nullptr;
}

/// The plan run on the host: A packed, the product as cuBLAS defines it for these
/// parameters (C = op(A) op(B), column-major, A transposed), the epilogue per output.
Tensor run_on_host(const Int8Plan& p, const OpCase& c, const TensorDesc& out) {
  std::vector<int8_t> packed(static_cast<size_t>(p.packed_bytes()));
  const auto* a = static_cast<const uint8_t*>(c.inputs[0].data());
  const uint8_t* zp = bytes_of(c, p.a_zp_slot);
  for (int64_t i = 0; i < p.packed_bytes(); ++i)
    packed[static_cast<size_t>(i)] = p.convolution ? dev_conv_pack_at(p.conv, a, zp, i) : dev_row_pack_at(p.row, a, i);
  const Int8GemmCall g = int8_gemm_call(p);
  EXPECT_EQ(static_cast<int64_t>(p.weights.codes.size()), g.batch * g.stride_a);
  std::vector<int32_t> sums(static_cast<size_t>(g.batch * g.stride_c), 0);
  for (int b = 0; b < g.batch; ++b)
    for (int j = 0; j < g.n; ++j)
      for (int i = 0; i < g.m; ++i) {
        int64_t s = 0;  // op(A)(i, l) = A(l, i) = A[l + i * lda]; B(l, j) = B[l + j * ldb]
        for (int l = 0; l < g.k; ++l)
          s += int64_t{p.weights.codes[static_cast<size_t>(b * g.stride_a + l + int64_t{i} * g.lda)]} *
               packed[static_cast<size_t>(b * g.stride_b + l + int64_t{j} * g.ldb)];
        EXPECT_EQ(s, static_cast<int32_t>(s)) << "cuBLAS's int32 sum would wrap";
        sums[static_cast<size_t>(b * g.stride_c + i + int64_t{j} * g.ldc)] = static_cast<int32_t>(s);
      }
  Tensor y = Tensor::empty(out);
  IntEpilogueArgs args;
  args.c = sums.data();
  args.weight_sums = p.weights.sums.data();
  args.multipliers = p.multipliers.empty() ? nullptr : p.multipliers.data();
  if (p.bias_i32_slot) args.bias_i32 = static_cast<const int32_t*>(c.inputs[p.bias_i32_slot].data());
  if (p.bias_f32_slot) args.bias_f32 = c.inputs[p.bias_f32_slot].f32();
  if (p.a_scale_slot) args.a_scale = c.inputs[p.a_scale_slot].f32();
  args.a_zero_point = zp;
  args.y = y.data();
  for (int64_t i = 0; i < y.numel(); ++i) dev_epilogue_at(p.e, args, i);
  return y;
}

/// Plans the case as the cuda backend does and checks the host run against the oracle.
void expect_oracles(const OpCase& c, bool convolution) {
  SCOPED_TRACE(c.label);
  auto planned = context_of(c);
  ASSERT_FALSE(planned->want.empty());
  auto plan = convolution ? int8_conv_plan(planned->ctx, true) : int8_matmul_plan(planned->ctx, true);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  const Tensor got = run_on_host(*plan, c, planned->ctx.outputs[0]);
  ASSERT_EQ(got.dtype(), planned->want[0].dtype());
  const std::vector<double> g = values_of(got), w = values_of(planned->want[0]);
  ASSERT_EQ(g.size(), w.size());
  int differ = 0;
  for (size_t i = 0; i < w.size(); ++i) differ += g[i] != w[i];
  EXPECT_EQ(differ, 0) << "of " << w.size() << " outputs; first: " << [&] {
    for (size_t i = 0; i < w.size(); ++i)
      if (g[i] != w[i]) return "at " + std::to_string(i) + ": " + std::to_string(g[i]) + " for " + std::to_string(w[i]);
    return std::string();
  }();
}

/// QLinearConv with x's codes (type xt, zero point xzp), per-channel or per-tensor weight
/// scales, an int32 bias, y of type yt; every input constant but x.
OpCase qlinear_conv(DType xt, int xzp, const Shape& xs, const Shape& ws, bool per_channel, DType yt, int yzp,
                    std::map<std::string, Attribute> attrs, uint32_t seed) {
  const int64_t m = ws[0];
  std::vector<float> scales;
  for (int64_t i = 0; i < (per_channel ? m : 1); ++i) scales.push_back(0.0011f * static_cast<float>(i + 3));
  const Tensor x = xt == DType::kU8 ? random_codes(xt, xs, 0, 255, seed) : random_codes(xt, xs, -128, 127, seed);
  OpCase c = op_case("QLinearConv",
                     {x, Tensor::from_f32({}, {0.037f}), typed(xt, {}, {static_cast<double>(xzp)}),
                      random_codes(DType::kI8, ws, -127, 127, seed + 1),
                      Tensor::from_f32({static_cast<int64_t>(scales.size())}, scales),
                      typed(DType::kI8, {static_cast<int64_t>(scales.size())}, std::vector<double>(scales.size(), 0)),
                      Tensor::from_f32({}, {0.05f}), typed(yt, {}, {static_cast<double>(yzp)}),
                      random_codes(DType::kI32, {m}, -5000, 5000, seed + 2)},
                     std::move(attrs));
  c.is_const = {false, true, true, true, true, true, true, true, true};
  return c;
}

/// QGemm or MatMulIntegerToFloat: com.microsoft's.
OpCase ms_case(const char* op, std::vector<Tensor> in, std::map<std::string, Attribute> attrs, std::vector<bool> is_const) {
  OpCase c = op_case(op, std::move(in), std::move(attrs));
  c.node.domain = kMicrosoftDomain;
  c.is_const = std::move(is_const);
  return c;
}

bool is_convolution(const OpCase& c) { return c.node.op_type == "QLinearConv" || c.node.op_type == "ConvInteger"; }

TEST(CudaInt8Math, ProductsThroughThePackedInt8ProductAreTheOracles) {
  const std::vector<OpCase> cases = test::int8_product_cases();
  ASSERT_EQ(cases.size(), 10u);
  for (const OpCase& c : cases) expect_oracles(c, is_convolution(c));
}

TEST(CudaInt8Math, QuantizeAndDequantizeOneElementAreTheOracles) {
  // Per axis over [2, 3, 4] along axis 1: every scale index and both code types, ties and
  // saturation included.
  const std::vector<float> xs = {0.f, 0.5f, 1.5f, 2.5f, -0.5f, -2.5f, 300.f, -300.f, 1e30f, -7.25f, 3.75f, 127.5f,
                                 12.5f, -128.5f, 255.5f, 0.25f, 6.f, -6.f, 9.5f, 10.5f, -1.f, 1.f, 64.f, 99.f};
  const Tensor x = Tensor::from_f32({2, 3, 4}, xs);
  for (DType t : {DType::kU8, DType::kI8}) {
    const bool is_signed = t == DType::kI8;
    const std::vector<float> scales = {0.5f, 1.f, 3.f};
    const std::vector<double> zps = is_signed ? std::vector<double>{-3, 0, 5} : std::vector<double>{0, 128, 7};
    const Tensor s = Tensor::from_f32({3}, scales), z = typed(t, {3}, zps);
    std::vector<Tensor> q;
    ASSERT_TRUE(test::run_on(op_case("QuantizeLinear", {x, s, z}, {{"axis", A::of_int(1)}}), "naive", &q).is_ok());
    std::vector<Tensor> dq;
    ASSERT_TRUE(test::run_on(op_case("DequantizeLinear", {q[0], s, z}, {{"axis", A::of_int(1)}}), "naive", &dq).is_ok());
    const auto* codes = static_cast<const uint8_t*>(q[0].data());
    const auto* zbytes = static_cast<const uint8_t*>(z.data());
    for (int64_t i = 0; i < x.numel(); ++i) {
      const int64_t si = dev_scale_index(i, 3, 4);
      const int zp = dev_code(zbytes[si], is_signed);
      EXPECT_EQ(dev_quantize(xs[static_cast<size_t>(i)], scales[static_cast<size_t>(si)], zp, is_signed ? -128 : 0,
                             is_signed ? 127 : 255),
                q[0].get(i))
          << "x " << xs[static_cast<size_t>(i)];
      EXPECT_EQ(dev_dequantize(dev_code(codes[i], is_signed), scales[static_cast<size_t>(si)], zp), dq[0].get(i));
    }
  }
  // DynamicQuantizeLinear's scale and zero point from the range with 0.
  for (const std::vector<float>& v : std::vector<std::vector<float>>{
           {-1.f, 0.f, 1.f, 2.5f}, {0.f, 0.f}, {3.f, 7.f}, {-9.f, -2.f}, {-0.001f, 1000.f}, {-17.3f, 0.4f, 5.1f}}) {
    const Tensor t = Tensor::from_f32({static_cast<int64_t>(v.size())}, v);
    std::vector<Tensor> out;
    const OpCase dq = op_case("DynamicQuantizeLinear", {t}, {}, 21, {"y", "y_scale", "y_zero_point"});
    ASSERT_TRUE(test::run_on(dq, "naive", &out).is_ok());
    float lo = 0.f, hi = 0.f;
    for (float x : v) lo = std::min(lo, x), hi = std::max(hi, x);
    float scale = 0.f;
    int zp = -1;
    dev_dynamic_params(lo, hi, &scale, &zp);
    EXPECT_EQ(scale, out[1].f32()[0]) << v[0];
    EXPECT_EQ(zp, out[2].get(0)) << v[0];
    for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(dev_quantize(v[i], scale, zp, 0, 255), out[0].get(static_cast<int64_t>(i)));
  }
  EXPECT_EQ(dev_quantize(NAN, 1.f, 17, 0, 255), 17);
  EXPECT_EQ(dev_scale_index(23, 1, 4), 0);  // per tensor
}

TEST(CudaInt8Math, WhatThePlanDeclinesItNames) {
  OpCase c = qlinear_conv(DType::kU8, 131, {1, 2, 4, 4}, {2, 2, 3, 3}, true, DType::kU8, 9, {}, 51);
  c.inputs[5] = typed(DType::kI8, {2}, {0, 1});  // a weight zero point that is not 0
  auto p = context_of(c);
  auto plan = int8_conv_plan(p->ctx, false);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("weights with a nonzero zero point"), std::string::npos) << plan.status().message();
  c = qlinear_conv(DType::kU8, 131, {1, 2, 4, 4}, {2, 2, 3, 3}, true, DType::kU8, 9, {}, 52);
  c.is_const[6] = false;  // y_scale given at run time
  p = context_of(c);
  plan = int8_conv_plan(p->ctx, false);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("x_scale and y_scale must be float32 constants"), std::string::npos)
      << plan.status().message();
  // A fused activation is declined, not dropped.
  OpCase fused = test::int8_product_cases()[5];
  ASSERT_EQ(fused.node.op_type, "QLinearMatMul");
  fused.node.attrs["mosaic.activation"] = A::of_string("Relu");
  p = context_of(fused);
  EXPECT_NE(int8_matmul_plan(p->ctx, false).status().message().find("a fused activation"), std::string::npos);
  // B computed at run time: the product takes constant weights only.
  OpCase m = op_case("MatMulInteger", {random_codes(DType::kU8, {2, 4}, 0, 255, 1), random_codes(DType::kI8, {4, 2}, -9, 9, 2)});
  p = context_of(m);
  EXPECT_NE(int8_matmul_plan(p->ctx, false).status().message().find("constant int8 B"), std::string::npos);
}

}  // namespace
}  // namespace mosaic::cuda_backend

namespace mosaic::test {

std::vector<OpCase> int8_product_cases() {
  using cuda_backend::ms_case;
  using cuda_backend::qlinear_conv;
  std::vector<OpCase> cases;
  // Two groups of 3 output channels (padded to 4), K = 2 x 3 x 3 = 18 (padded to 32),
  // strides, pads and dilations; uint8 x with zero point 131 (the padding holds it).
  cases.push_back(qlinear_conv(DType::kU8, 131, {2, 4, 7, 6}, {6, 2, 3, 3}, true, DType::kU8, 9,
                               {{"group", Attribute::of_int(2)}, {"pads", Attribute::of_ints({1, 2, 1, 0})}, {"strides", Attribute::of_ints({2, 1})},
                                {"dilations", Attribute::of_ints({1, 2})}},
                               11));
  // int8 x and y, one weight scale, a 1-D convolution.
  cases.push_back(qlinear_conv(DType::kI8, -3, {1, 5, 9}, {7, 5, 4}, false, DType::kI8, -20, {{"pads", Attribute::of_ints({2, 1})}}, 21));
  // Depthwise (a group per channel, one output column padded to 4), 3-D.
  cases.push_back(qlinear_conv(DType::kU8, 0, {1, 3, 3, 4, 5}, {3, 1, 2, 2, 3}, true, DType::kU8, 128,
                               {{"group", Attribute::of_int(3)}, {"pads", Attribute::of_ints({0, 1, 1, 1, 0, 1})}}, 31));
  // Ties: a multiplier of 0.5 (x_scale 1, w_scale 0.5, y_scale 1) on sums 1..8, rounded half
  // to even before y's odd zero point 11 is added (after it: 12, 12, 14, 14, ...).
  OpCase ties = op_case("QLinearConv", {typed(DType::kU8, {1, 1, 1, 8}, {1, 2, 3, 4, 5, 6, 7, 8}), Tensor::from_f32({}, {1.f}),
                                        typed(DType::kU8, {}, {0}), typed(DType::kI8, {1, 1, 1, 1}, {1}),
                                        Tensor::from_f32({1}, {0.5f}), typed(DType::kI8, {1}, {0}), Tensor::from_f32({}, {1.f}),
                                        typed(DType::kU8, {}, {11})});
  ties.is_const = {false, true, true, true, true, true, true, true};
  cases.push_back(ties);
  // ConvInteger: int32 out, x's zero point given at run time (read on the device).
  OpCase ci = op_case("ConvInteger", {random_codes(DType::kU8, {2, 3, 5, 5}, 0, 255, 41),
                                      random_codes(DType::kI8, {4, 3, 3, 3}, -128, 127, 42), typed(DType::kU8, {}, {77})},
                      {{"pads", Attribute::of_ints({1, 1, 1, 1})}});
  ci.is_const = {false, true, false};
  cases.push_back(ci);
  // QLinearMatMul: uint8 A over a batch (rows 2 x 3), per-column B scales, 6 columns padded to 8.
  OpCase q = op_case("QLinearMatMul", {random_codes(DType::kU8, {2, 3, 37}, 0, 255, 1), Tensor::from_f32({}, {0.02f}),
                                       typed(DType::kU8, {}, {7}), random_codes(DType::kI8, {37, 6}, -127, 127, 2),
                                       Tensor::from_f32({6}, {0.01f, 0.02f, 0.005f, 0.03f, 0.011f, 0.004f}),
                                       typed(DType::kI8, {6}, {0, 0, 0, 0, 0, 0}), Tensor::from_f32({}, {0.3f}),
                                       typed(DType::kU8, {}, {100})});
  q.is_const = {false, true, true, true, true, true, true, true};
  cases.push_back(q);
  // MatMulInteger: int8 A whose zero point a run gives, int32 out.
  OpCase mi = op_case("MatMulInteger", {random_codes(DType::kI8, {4, 20}, -128, 127, 3),
                                        random_codes(DType::kI8, {20, 3}, -128, 127, 4), typed(DType::kI8, {}, {-5})});
  mi.is_const = {false, true, false};
  cases.push_back(mi);
  // QGemm: A and B transposed, alpha, an int32 C, int8 Y; then float32 Y (no y_scale).
  std::vector<Tensor> in = {random_codes(DType::kU8, {9, 5}, 0, 255, 5), Tensor::from_f32({}, {0.05f}),
                            typed(DType::kU8, {}, {130}), random_codes(DType::kI8, {3, 9}, -127, 127, 6),
                            Tensor::from_f32({3}, {0.02f, 0.07f, 0.01f}), typed(DType::kI8, {3}, {0, 0, 0}),
                            random_codes(DType::kI32, {3}, -900, 900, 7), Tensor::from_f32({}, {0.4f}),
                            typed(DType::kI8, {}, {3})};
  const std::map<std::string, Attribute> gemm = {{"transA", Attribute::of_int(1)}, {"transB", Attribute::of_int(1)}, {"alpha", Attribute::of_float(0.5f)}};
  cases.push_back(ms_case("QGemm", in, gemm, {false, true, true, true, true, true, true, true, true}));
  in.resize(7);
  cases.push_back(ms_case("QGemm", in, gemm, {false, true, true, true, true, true, true}));
  // MatMulIntegerToFloat: A's scale and zero point from the run, B's per column, a bias.
  cases.push_back(ms_case("MatMulIntegerToFloat",
                          {random_codes(DType::kU8, {3, 2, 11}, 0, 255, 8), random_codes(DType::kI8, {11, 5}, -127, 127, 9),
                           Tensor::from_f32({}, {0.013f}), Tensor::from_f32({5}, {0.1f, 0.2f, 0.3f, 0.05f, 0.07f}),
                           typed(DType::kU8, {}, {121}), Tensor(), Tensor::from_f32({5}, {0.5f, -1.f, 2.f, 0.25f, -0.125f})},
                          {}, {false, true, false, true, false, false, true}));
  return cases;
}

}  // namespace mosaic::test
