// ONNX's quantisation operators (operators/quantize.hpp) and the sub-byte element types they
// produce, against values computed by hand: round half to even, saturation, zero points per
// tensor, axis and block, int32 accumulation; the file packing of int4/uint2 and the bits of
// float4e2m1 and float8e8m0; the refusals. The ONNX node tests (ctest onnx_node_tests_1_23)
// check the same ops against onnx's reference outputs.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <tuple>

#include <omp.h>

#include "api/verify.hpp"
#include "frontends/onnx/onnx_io.hpp"
#include "ir/elements.hpp"
#include "validate/per_node.hpp"
#include "test_util.hpp"

namespace mosaic::test {
namespace {

using A = Attribute;

std::vector<double> run_naive(const OpCase& c, size_t output = 0, DType* dtype = nullptr) {
  std::vector<Tensor> out;
  const Status st = run_on(c, "naive", &out);
  EXPECT_TRUE(st.is_ok()) << st.to_string();
  if (!st.is_ok() || out.size() <= output) return {};
  if (dtype) *dtype = out[output].dtype();
  return values_of(out[output]);
}

TEST(Quantize, QuantizeLinearRoundsHalfToEvenAndSaturates) {
  // Per tensor, uint8: x / 2 = 0, 1, 1.5, 2.5, 3.5, 500, -127 -> 0, 1, 2, 2, 4, 500, -127; + 128; clipped.
  const Tensor x = Tensor::from_f32({7}, {0, 2, 3, 5, 7, 1000, -254});
  DType t = DType::kCount;
  EXPECT_EQ(run_naive(op_case("QuantizeLinear", {x, Tensor::from_f32({}, {2}), typed(DType::kU8, {}, {128})}), 0, &t),
            (std::vector<double>{128, 129, 130, 130, 132, 255, 1}));
  EXPECT_EQ(t, DType::kU8);
  // Per axis, int8: column 0 scale 1 zero point 0, column 1 scale 10 zero point -10.
  const Tensor m = Tensor::from_f32({2, 2}, {1.5f, 25.f, -3.f, -2000.f});
  EXPECT_EQ(run_naive(op_case("QuantizeLinear", {m, Tensor::from_f32({2}, {1, 10}), typed(DType::kI8, {2}, {0, -10})},
                              {{"axis", A::of_int(1)}})),
            (std::vector<double>{2, -8, -3, -128}));
  // Blocked, int4 by output_dtype: blocks of 2 along axis 1 with scales 1, 2, 4.
  const Tensor b = Tensor::from_f32({1, 5}, {3, -20, 5, 6, 9});
  EXPECT_EQ(run_naive(op_case("QuantizeLinear", {b, Tensor::from_f32({1, 3}, {1, 2, 4})},
                              {{"axis", A::of_int(1)}, {"block_size", A::of_int(2)}, {"output_dtype", A::of_int(22)}}),
                      0, &t),
            (std::vector<double>{3, -8, 2, 3, 2}));
  EXPECT_EQ(t, DType::kI4);
  // float8e4m3fn: 1000 / 2 saturates to 448 unless saturate = 0 (NaN).
  const Tensor big = Tensor::from_f32({2}, {1000, 3});
  const Tensor f8zp = typed(DType::kF8E4M3FN, {}, {0});
  EXPECT_EQ(run_naive(op_case("QuantizeLinear", {big, Tensor::from_f32({}, {2}), f8zp})),
            (std::vector<double>{448, 1.5}));
  const std::vector<double> nosat =
      run_naive(op_case("QuantizeLinear", {big, Tensor::from_f32({}, {2}), f8zp}, {{"saturate", A::of_int(0)}}));
  ASSERT_EQ(nosat.size(), 2u);
  EXPECT_TRUE(std::isnan(nosat[0]));
}

TEST(Quantize, DequantizeLinearPerAxisAndDynamicQuantize) {
  // Row 0: scale 0.5, zero point 1; row 1: scale 2, zero point -1.
  const Tensor x = typed(DType::kI8, {2, 2}, {-128, 5, 0, 127});
  EXPECT_EQ(run_naive(op_case("DequantizeLinear", {x, Tensor::from_f32({2}, {0.5f, 2.f}), typed(DType::kI8, {2}, {1, -1})},
                              {{"axis", A::of_int(0)}})),
            (std::vector<double>{-64.5, 2, 2, 256}));
  // int4 from a file's packing, per tensor: (v - 1) * 3.
  EXPECT_EQ(run_naive(op_case("DequantizeLinear", {typed(DType::kI4, {3}, {-8, 0, 7}), Tensor::from_f32({}, {3}),
                                                   typed(DType::kI4, {}, {1})})),
            (std::vector<double>{-27, -3, 18}));
  // Range [-1, 2.5]: scale 3.5 / 255; zero point round(1 / scale) = round(72.86) = 73.
  const OpCase dq = op_case("DynamicQuantizeLinear", {Tensor::from_f32({4}, {-1, 0, 1, 2.5f})}, {}, 21,
                            {"y", "y_scale", "y_zero_point"});
  EXPECT_EQ(run_naive(dq, 0), (std::vector<double>{0, 73, 146, 255}));
  EXPECT_EQ(run_naive(dq, 1), (std::vector<double>{static_cast<double>(3.5f / 255.f)}));
  EXPECT_EQ(run_naive(dq, 2), (std::vector<double>{73}));
}

TEST(Quantize, IntegerProductsAccumulateExactlyAndRequantise) {
  // (A - 1) x (B - [2]) = [[0,1],[2,3]] x [[3],[-8]] = [[-8],[-18]].
  const Tensor a = typed(DType::kU8, {2, 2}, {1, 2, 3, 4});
  const Tensor b = typed(DType::kI8, {2, 1}, {5, -6});
  DType t = DType::kCount;
  EXPECT_EQ(run_naive(op_case("MatMulInteger", {a, b, typed(DType::kU8, {}, {1}), typed(DType::kI8, {1}, {2})}), 0, &t),
            (std::vector<double>{-8, -18}));
  EXPECT_EQ(t, DType::kI32);
  // (10-10, 20-10) . (30-30, 31-30) = 10; 10 * 0.5 * 0.25 / 0.5 = 2.5 -> 2 (half to even); + 100.
  const OpCase q = op_case("QLinearMatMul", {typed(DType::kU8, {1, 2}, {10, 20}), Tensor::from_f32({}, {0.5f}),
                                             typed(DType::kU8, {}, {10}), typed(DType::kU8, {2, 1}, {30, 31}),
                                             Tensor::from_f32({}, {0.25f}), typed(DType::kU8, {}, {30}),
                                             Tensor::from_f32({}, {0.5f}), typed(DType::kU8, {}, {100})});
  EXPECT_EQ(run_naive(q), (std::vector<double>{102}));
  // 1-D ConvInteger, pads 1: x - 1 = [0,1,2], w - 4 = [-1,1]; the padding holds the zero point.
  const Tensor cx = typed(DType::kU8, {1, 1, 3}, {1, 2, 3});
  const Tensor cw = typed(DType::kU8, {1, 1, 2}, {3, 5});
  EXPECT_EQ(run_naive(op_case("ConvInteger", {cx, cw, typed(DType::kU8, {}, {1}), typed(DType::kU8, {1}, {4})},
                              {{"pads", A::of_ints({1, 1})}})),
            (std::vector<double>{0, 1, 1, -2}));
  // QLinearConv of the same with bias 3 and w_scale 0.5: [3,4,4,1] * 0.5 = [1.5,2,2,0.5] -> [2,2,2,0].
  const OpCase qc = op_case("QLinearConv", {cx, Tensor::from_f32({}, {1}), typed(DType::kU8, {}, {1}), cw,
                                            Tensor::from_f32({1}, {0.5f}), typed(DType::kU8, {1}, {4}),
                                            Tensor::from_f32({}, {1}), typed(DType::kI8, {}, {0}),
                                            typed(DType::kI32, {1}, {3})},
                            {{"pads", A::of_ints({1, 1})}});
  EXPECT_EQ(run_naive(qc, 0, &t), (std::vector<double>{2, 2, 2, 0}));
  EXPECT_EQ(t, DType::kI8);
}

TEST(Quantize, RefusalsNameTheNodeAndTheReason) {
  std::vector<Tensor> out;
  const Tensor x = Tensor::from_f32({2, 3}, {1, 2, 3, 4, 5, 6});
  Status st = run_on(op_case("QuantizeLinear", {x, Tensor::from_f32({2}, {1, 1})}, {{"axis", A::of_int(1)}}), "naive", &out);
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("per-axis scale [2] must be [3]"), std::string::npos) << st.message();
  st = run_on(op_case("QuantizeLinear", {x, Tensor::from_f32({}, {1}), typed(DType::kI8, {}, {0})},
                      {{"output_dtype", A::of_int(2)}}), "naive", &out);
  EXPECT_NE(st.message().find("output_dtype uint8 and the zero point's int8 differ"), std::string::npos) << st.message();
  st = run_on(op_case("MatMulInteger", {x, x}), "naive", &out);
  EXPECT_NE(st.message().find("A must be int8 or uint8, got float32"), std::string::npos) << st.message();
  // A backend without the kernels declines them by name (the planner falls back to naive).
  st = run_on(op_case("MatMulInteger", {typed(DType::kU8, {1, 1}, {1}), typed(DType::kI8, {1, 1}, {1})}), "onednn", &out);
  EXPECT_EQ(st.code(), StatusCode::kUnsupported) << st.to_string();
}

/// A QLinearConv with uint8 x (zero point 131), int8 weights, per-channel scales and a bias;
/// constant but for x.
OpCase qlinear_conv_case(const Tensor& x, const Tensor& w, const Tensor& b, const std::vector<float>& w_scales,
                         std::map<std::string, Attribute> attrs) {
  const auto m = static_cast<int64_t>(w_scales.size());
  OpCase c = op_case("QLinearConv", {x, Tensor::from_f32({}, {0.02f}), typed(DType::kU8, {}, {131}), w,
                                     Tensor::from_f32({m}, w_scales), typed(DType::kI8, {m}, std::vector<double>(m, 0)),
                                     Tensor::from_f32({}, {0.4f}), typed(DType::kU8, {}, {9}), b},
                     attrs);
  c.is_const = {false, true, true, true, true, true, true, true, true};
  return c;
}

/// Outputs of onednn that differ from naive's, and by how much at most. oneDNN requantises in
/// float32 (as ONNX Runtime does), naive in double (as ONNX's reference): a product within a
/// float's rounding of a tie lands on the other code, about one output in 100,000.
std::pair<int, double> codes_apart(const Tensor& got, const Tensor& want) {
  int differ = 0;
  double worst = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    differ += want.get(i) != got.get(i);
    worst = std::max(worst, std::fabs(want.get(i) - got.get(i)));
  }
  return {differ, worst};
}

TEST(Quantize, QLinearConvRoundsBeforeItAddsTheZeroPointOnEveryBackend) {
  // x * 0.5 on ties: 0.5, 1.5, 2.5, 3.5 round half to even to 0, 2, 2, 4, then y's odd zero
  // point 11: 11, 13, 13, 15 (rounded after the sum they would be 12, 12, 14, 14).
  OpCase c = op_case("QLinearConv", {typed(DType::kU8, {1, 1, 1, 4}, {1, 3, 5, 7}), Tensor::from_f32({}, {0.5f}),
                                     typed(DType::kU8, {}, {0}), typed(DType::kI8, {1, 1, 1, 1}, {1}),
                                     Tensor::from_f32({1}, {1.f}), typed(DType::kI8, {1}, {0}), Tensor::from_f32({}, {1.f}),
                                     typed(DType::kU8, {}, {11})});
  c.is_const = {false, true, true, true, true, true, true, true};
  for (const char* backend : {"naive", "onednn"}) {
    std::vector<Tensor> out;
    const Status st = run_on(c, backend, &out);
    ASSERT_TRUE(st.is_ok()) << backend << ": " << st.to_string();
    EXPECT_EQ(values_of(out[0]), (std::vector<double>{11, 13, 13, 15})) << backend;
  }
}

TEST(Quantize, OnednnQLinearConvIsTheOracles) {
  // Random uint8 images and 7-bit weights (what reduce_range writes), per-channel scales, a
  // bias and both zero points: oneDNN's int8 convolution against naive's exact loops.
  std::mt19937 rng(3);
  auto bytes = [&](DType t, const Shape& shape, int lo, int hi) {
    std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
    for (auto& e : v) e = lo + static_cast<int>(rng() % static_cast<unsigned>(hi - lo + 1));
    return typed(t, shape, v);
  };
  const Tensor x = bytes(DType::kU8, {64, 16, 14, 14}, 0, 255), w = bytes(DType::kI8, {8, 16, 3, 3}, -64, 64);
  const Tensor b = bytes(DType::kI32, {8}, -20000, 20000);
  std::vector<float> ws(8);
  for (int m = 0; m < 8; ++m) ws[m] = 0.002f + 0.0007f * static_cast<float>(m);
  const std::map<std::string, Attribute> pads{{"pads", A::of_ints({1, 1, 1, 1})}};
  std::vector<Tensor> want, got;
  ASSERT_TRUE(run_on(qlinear_conv_case(x, w, b, ws, pads), "naive", &want).is_ok());
  const Status st = run_on(qlinear_conv_case(x, w, b, ws, pads), "onednn", &got);
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  const auto [differ, worst] = codes_apart(got[0], want[0]);
  EXPECT_LE(worst, 1.0);
  EXPECT_LE(differ, 3) << "of " << want[0].numel();  // 1 of 100,352 here
  // verify --per-node takes that one code as agreement (a rounded code may move one step),
  // not as a divergence: no false alarm on a correct kernel.
  Graph g = make_graph(qlinear_conv_case(x, w, b, ws, pads));
  ASSERT_TRUE(prepare_graph(g, builtin_registry(), PrepareOptions{}).ok());
  auto audit = compare_per_node(g, builtin_registry(), Placement::all_on("onednn", {}), {x}, 0, 0);
  ASSERT_TRUE(audit.ok()) << audit.status().to_string();
  ASSERT_EQ(audit->nodes.size(), 1u);
  EXPECT_TRUE(audit->nodes[0].ran);
  EXPECT_LT(audit->first_divergent, 0) << audit->nodes[0].note;
  EXPECT_EQ(audit->nodes[0].max_abs, worst);
  // Full 8-bit weights: exact sums with VNNI; without, oneDNN's int16 pair sums saturate, so the
  // kernel declines naming why (and the planner falls back to naive).
  const Tensor w8 = bytes(DType::kI8, {8, 16, 3, 3}, -127, 127);
  const Status st8 = run_on(qlinear_conv_case(x, w8, b, ws, pads), "onednn", &got);
  if (!st8.is_ok()) {
    EXPECT_EQ(st8.code(), StatusCode::kUnsupported);
    EXPECT_NE(st8.message().find("saturates"), std::string::npos) << st8.message();
  } else {
    ASSERT_TRUE(run_on(qlinear_conv_case(x, w8, b, ws, pads), "naive", &want).is_ok());
    // The sums are exact; the float32 requantisation may still take a near-tie's other code,
    // as above (1 of 100,352 here). Saturated int16 pair sums would be off by tens of codes.
    const auto [differ8, worst8] = codes_apart(got[0], want[0]);
    EXPECT_LE(worst8, 1.0);
    EXPECT_LE(differ8, 3) << "of " << want[0].numel();
  }
}

TEST(Quantize, OnednnStridedPointwiseQLinearConvIsTheOraclesEveryRun) {
  // oneDNN 2.6's int8 1x1 kernel at stride 2 copies the strided pixels into a buffer per
  // thread, and at 2 threads that copy races: on oneDNN alone, this 24-to-48-channel 12x12
  // layer got 16 outputs wrong by tens of codes in 580 runs of 1,000, and ResNet's 8-to-16
  // shortcut (the second shape) in 46 of 5,000 beside a busy core. onednn's QLinearConv runs
  // such layers at stride 1 over every second pixel; every run must be naive's to a code.
  const int before = omp_get_max_threads();
  ASSERT_TRUE(set_num_threads(2).is_ok());
  std::mt19937 rng(11);
  auto bytes = [&](DType t, const Shape& shape, int lo, int hi) {
    std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
    for (auto& e : v) e = lo + static_cast<int>(rng() % static_cast<unsigned>(hi - lo + 1));
    return typed(t, shape, v);
  };
  for (const auto& [c, m, hw] : {std::tuple<int64_t, int64_t, int64_t>{24, 48, 12}, {8, 16, 8}, {16, 32, 7}}) {
    const Tensor x = bytes(DType::kU8, {2, c, hw, hw}, 0, 255), w = bytes(DType::kI8, {m, c, 1, 1}, -64, 64);
    const Tensor b = bytes(DType::kI32, {m}, -2000, 2000);
    std::vector<float> ws(static_cast<size_t>(m));
    for (int64_t k = 0; k < m; ++k) ws[k] = 0.003f + 0.0002f * static_cast<float>(k);
    const OpCase qc = qlinear_conv_case(x, w, b, ws, {{"strides", A::of_ints({2, 2})}});
    std::vector<Tensor> want, got;
    ASSERT_TRUE(run_on(qc, "naive", &want).is_ok());
    EXPECT_EQ(want[0].shape(), (Shape{2, m, (hw + 1) / 2, (hw + 1) / 2}));
    Graph g = make_graph(qc);
    ASSERT_TRUE(prepare_graph(g, builtin_registry(), PrepareOptions{}).ok());
    auto plan = Plan::build(g, Placement::all_on("onednn", {}), builtin_registry());
    ASSERT_TRUE(plan.ok()) << plan.status().to_string();
    int bad_runs = 0;
    for (int run = 0; run < 40; ++run) {
      ASSERT_TRUE(plan.value()->run({x}, &got).is_ok());
      const auto [differ, worst] = codes_apart(got[0], want[0]);
      bad_runs += worst > 1 || differ > 2;
    }
    EXPECT_EQ(bad_runs, 0) << c << " to " << m << " channels, " << hw << "x" << hw;
  }
  ASSERT_TRUE(set_num_threads(before).is_ok());
}

TEST(SubByteTypes, ConversionsByHand) {
  // float4e2m1: ties to the even code, saturation at 6, no NaN.
  EXPECT_EQ(f64_to_float4(5.0), 6);      // between 4 (code 6) and 6 (code 7): the even code
  EXPECT_EQ(f64_to_float4(0.25), 0);     // between 0 and 0.5: zero
  EXPECT_EQ(f64_to_float4(0.75), 2);     // between 0.5 (1) and 1 (2): the even code
  EXPECT_EQ(f64_to_float4(7.0), 7);      // saturates
  EXPECT_EQ(f64_to_float4(-INFINITY), 15);
  EXPECT_EQ(float4_to_f64(0xb), -1.5);
  // float8e8m0: powers of two; Cast's round_mode.
  EXPECT_EQ(f64_to_float8e8m0(3.0, true, E8M0Rounding::kUp), 129);       // 4
  EXPECT_EQ(f64_to_float8e8m0(3.0, true, E8M0Rounding::kDown), 128);     // 2
  EXPECT_EQ(f64_to_float8e8m0(3.0, true, E8M0Rounding::kNearest), 129);  // 3 = 1.5 * 2: a tie, up
  EXPECT_EQ(f64_to_float8e8m0(2.5, true, E8M0Rounding::kNearest), 128);
  EXPECT_EQ(f64_to_float8e8m0(NAN, true, E8M0Rounding::kUp), 255);
  EXPECT_EQ(float8e8m0_to_f64(127), 1.0);
  // int4 and uint2 wrap to their width.
  std::vector<Tensor> out;
  ASSERT_TRUE(run_on(op_case("Cast", {Tensor::from_f32({4}, {-9, 8, 7.9f, -1.5f})}, {{"to", A::of_int(22)}}), "naive", &out)
                  .is_ok());
  EXPECT_EQ(values_of(out[0]), (std::vector<double>{7, -8, 7, -1}));
  ASSERT_TRUE(run_on(op_case("Cast", {Tensor::from_i64({3}, {-1, 4, 6})}, {{"to", A::of_int(25)}}), "naive", &out).is_ok());
  EXPECT_EQ(values_of(out[0]), (std::vector<double>{3, 0, 2}));
}

class SubByteFiles : public ScratchDirTest {
 protected:
  SubByteFiles() : ScratchDirTest("mosaic_subbyte_") {}
  std::string write(const onnx::TensorProto& p, const std::string& name) {
    const std::string f = path(name);
    std::ofstream(f, std::ios::binary) << p.SerializeAsString();
    return f;
  }
};

TEST_F(SubByteFiles, PackedInFilesOneElementPerByteInMemory) {
  // ONNX's own example: int4 [0, 1, 7, -4, -8] as int32_data {0x10, 0xC7, 0x08}.
  onnx::TensorProto p;
  p.set_data_type(22);  // INT4 (Debian's onnx 1.12 headers predate the name)
  p.add_dims(5);
  for (int v : {0x10, 0xC7, 0x08}) p.add_int32_data(v);
  auto t = load_tensor_pb(write(p, "int4.pb"));
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(values_of(*t), (std::vector<double>{0, 1, 7, -4, -8}));
  // uint2 [1,2,3,0,1,2,3] as raw bytes, four to a byte, lowest bits first.
  onnx::TensorProto u;
  u.set_data_type(25);  // UINT2
  u.add_dims(7);
  u.set_raw_data(std::string{char(57), char(57)});
  auto ut = load_tensor_pb(write(u, "uint2.pb"));
  ASSERT_TRUE(ut.ok()) << ut.status().to_string();
  EXPECT_EQ(values_of(*ut), (std::vector<double>{1, 2, 3, 0, 1, 2, 3}));
  // Saved packed again: the same two bytes.
  ASSERT_TRUE(save_tensor_pb(*ut, "u", path("again.pb")).is_ok());
  onnx::TensorProto back;
  std::ifstream in(path("again.pb"), std::ios::binary);
  ASSERT_TRUE(back.ParseFromIstream(&in));
  EXPECT_EQ(back.raw_data(), u.raw_data());
  // One byte short is refused with the counts.
  u.set_raw_data(std::string{char(57)});
  auto bad = load_tensor_pb(write(u, "short.pb"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("raw data has 1 bytes, the tensor [7] needs 2"), std::string::npos)
      << bad.status().message();
  // float8 values in int32_data are bits, not numbers: 126 is 448 in E4M3FN.
  onnx::TensorProto f8;
  f8.set_data_type(17);  // FLOAT8E4M3FN
  f8.add_dims(2);
  f8.add_int32_data(126);
  f8.add_int32_data(0xb8);  // -1
  auto ft = load_tensor_pb(write(f8, "f8.pb"));
  ASSERT_TRUE(ft.ok()) << ft.status().to_string();
  EXPECT_EQ(values_of(*ft), (std::vector<double>{448, -1}));
}

class QuantisedVerify : public ScratchDirTest {
 protected:
  QuantisedVerify() : ScratchDirTest("mosaic_qverify_") {}
};

TEST_F(QuantisedVerify, OutputsAreComparedWithinOneQuantisationStepAndTheVerdictSaysSo) {
  // resnet's QDQ case ends in a DequantizeLinear of scale 0.00728 (docs/conformance.md).
  namespace fs = std::filesystem;
  const fs::path src = fs::path(MOSAIC_SOURCE_DIR) / "tests/corpus/quantised/cases/resnet_hf.torchscript.qdq";
  const fs::path dst = dir_ / "case";
  fs::copy(src, dst, fs::copy_options::recursive);
  const std::string out = (dst / "test_data_set_0" / "output_0.pb").string();
  std::string name;
  auto t = load_tensor_pb(out, &name);
  ASSERT_TRUE(t.ok()) << t.status().message();
  const Tensor exact = t.value().clone();
  api::VerifyOptions o;
  o.paths = {dst.string()};
  o.rtol = 0;
  o.atol = 0;
  // The expected outputs moved by `steps` of the output's scale at one element.
  auto judged = [&](double steps, bool step_allowed) {
    Tensor moved = exact.clone();
    moved.f32()[3] += static_cast<float>(steps * 0.00727798f);
    EXPECT_TRUE(save_tensor_pb(moved, name, out).is_ok());
    o.quantisation_step = step_allowed;
    auto r = api::verify(o);
    EXPECT_TRUE(r.ok()) << r.status().message();
    return r.ok() && !r->cases.empty() ? r->cases[0] : api::VerifyCase{};
  };
  // Half a step away (a tie rounded the other way is one step at most): passed, and said so.
  api::VerifyCase c = judged(0.5, true);
  EXPECT_EQ(c.verdict, api::CaseVerdict::kPassed) << c.detail;
  EXPECT_NE(c.detail.find("within one quantisation step (0.00728)"), std::string::npos) << c.detail;
  // Compared exactly (--exact-quantised), the same output fails; two steps away fail either way.
  EXPECT_EQ(judged(0.5, false).verdict, api::CaseVerdict::kFailed);
  c = judged(2.0, true);
  EXPECT_EQ(c.verdict, api::CaseVerdict::kFailed) << c.detail;
  // The unmoved outputs pass exactly.
  c = judged(0.0, false);
  EXPECT_EQ(c.verdict, api::CaseVerdict::kPassed) << c.detail;
  EXPECT_EQ(c.detail.find("quantisation step"), std::string::npos) << c.detail;
}

}  // namespace
}  // namespace mosaic::test
