// The com.microsoft quantised operators (operators/ms_quantize.hpp) and MaxPool on 8-bit
// integers, against values computed by hand (ties rounded half to even, saturation, zero
// points, QGemm's per-column B), and their refusals. The QOperator corpus cases
// (ctest onnx_corpus_qoperator) check them end to end against ONNX Runtime.
#include <gtest/gtest.h>

#include "ir/elements.hpp"
#include "test_util.hpp"

namespace mosaic::test {
namespace {

using A = Attribute;

OpCase ms_case(const std::string& op, std::vector<Tensor> inputs, std::map<std::string, Attribute> attrs = {}) {
  OpCase c = op_case(op, std::move(inputs), std::move(attrs));
  c.node.domain = "com.microsoft";
  return c;
}

std::vector<double> run_naive(const OpCase& c, Shape* shape = nullptr, DType* dtype = nullptr) {
  std::vector<Tensor> out;
  const Status st = run_on(c, "naive", &out);
  EXPECT_TRUE(st.is_ok()) << st.to_string();
  if (!st.is_ok() || out.empty()) return {};
  if (shape) *shape = out[0].shape();
  if (dtype) *dtype = out[0].dtype();
  return values_of(out[0]);
}

/// The message of the run's failure ("" when it ran).
std::string failure(const OpCase& c) {
  std::vector<Tensor> out;
  const Status st = run_on(c, "naive", &out);
  return st.is_ok() ? "" : st.to_string();
}

Tensor f32(float v) { return Tensor::from_f32({}, {v}); }
Tensor u8(const Shape& s, const std::vector<double>& v) { return typed(DType::kU8, s, v); }
Tensor i8(const Shape& s, const std::vector<double>& v) { return typed(DType::kI8, s, v); }

TEST(MsQuantize, QLinearAddAndMulBroadcastRoundHalfToEvenAndSaturate) {
  // A: (10 - 10) * 0.5 = 0 and (200 - 10) * 0.5 = 95; B: (3 - 1) * 0.25 = 0.5, broadcast.
  // Over C's scale 1: 0.5 -> 0 and 95.5 -> 96 (ties to even), + 5.
  Shape s;
  DType t = DType::kCount;
  EXPECT_EQ(run_naive(ms_case("QLinearAdd", {u8({2}, {10, 200}), f32(0.5f), u8({}, {10}), u8({1}, {3}), f32(0.25f),
                                             u8({}, {1}), f32(1.f), u8({}, {5})}),
                      &s, &t),
            (std::vector<double>{5, 101}));
  EXPECT_EQ(s, (Shape{2}));
  EXPECT_EQ(t, DType::kU8);
  // int8 Mul: (A - 0)(B - 1) * 0.25 * 0.5 / 0.125 - 2: -3 * 2 - 2 = -8, 5 * 2 - 2 = 8, 100 * 2 saturates.
  EXPECT_EQ(run_naive(ms_case("QLinearMul", {i8({3}, {-3, 5, 100}), f32(0.25f), Tensor(), i8({}, {3}), f32(0.5f),
                                             i8({}, {1}), f32(0.125f), i8({}, {-2})})),
            (std::vector<double>{-8, 8, 127}));
}

/// QLinearAdd rounds each scaled difference to float32 before their sum, on every machine: with
/// these scales, 92 * (A / C) + -80 * (B / C) is 95.616158 - 64.116158 = 31.5 exactly in
/// float32 (-> 32, ties to even) while its exact value is 31.4999976 (-> 31). One fused
/// multiply-add (what -march=native makes of the plain expression on a machine with FMA)
/// rounds once and gives 31: the code would depend on the build.
TEST(MsQuantize, QLinearAddRoundsEachScaledDifferenceBeforeTheSum) {
  const Tensor sa = f32(0x1.bf9f9cp-5f), sb = f32(0x1.592e58p-5f), sc = f32(0x1.aeb1dp-5f);
  EXPECT_EQ(run_naive(ms_case("QLinearAdd", {i8({2}, {92, -92}), sa, i8({}, {0}), i8({2}, {-80, 80}), sb, i8({}, {0}),
                                             sc, i8({}, {0})})),
            (std::vector<double>{32, -32}));
  EXPECT_EQ(run_naive(ms_case("QLinearAdd", {u8({2}, {220, 36}), sa, u8({}, {128}), u8({2}, {48, 208}), sb,
                                             u8({}, {128}), sc, u8({}, {128})})),
            (std::vector<double>{160, 96}));
}

TEST(MsQuantize, LookupOpsQuantiseTheFunctionOfTheDequantisedValue) {
  // x = (q - 128) * 0.05 = -6.4, 0, 6.35; sigmoid * 256 = 0.42, 128, 255.6 -> 0, 128, 255 (saturated).
  EXPECT_EQ(run_naive(ms_case("QLinearSigmoid", {u8({3}, {0, 128, 255}), f32(0.05f), u8({}, {128}), f32(1.f / 256),
                                                 u8({}, {0})})),
            (std::vector<double>{0, 128, 255}));
  // x = -25, 12.5; alpha 0.5: -12.5, 12.5; over 0.5: -25, 25.
  EXPECT_EQ(run_naive(ms_case("QLinearLeakyRelu", {i8({2}, {-100, 50}), f32(0.25f), Tensor(), f32(0.5f)},
                              {{"alpha", A::of_float(0.5f)}})),
            (std::vector<double>{-25, 25}));
}

TEST(MsQuantize, QLinearSoftmaxFollowsTheSoftmaxOfItsOpset) {
  const Tensor x = u8({2, 2}, {0, 0, 1, 0});
  const std::vector<Tensor> in = {x, f32(1.f), u8({}, {0}), f32(1.f / 256), u8({}, {0})};
  // Opset 13, along the last axis: [0.5, 0.5] and [0.731, 0.269] * 256 = 187.2, 68.8.
  EXPECT_EQ(run_naive(ms_case("QLinearSoftmax", in, {{"opset", A::of_int(13)}})), (std::vector<double>{128, 128, 187, 69}));
  // Opset 11 from axis 0: all four as one row, e / (3 + e) * 256 = 121.7, 1 / (3 + e) * 256 = 44.8.
  EXPECT_EQ(run_naive(ms_case("QLinearSoftmax", in, {{"opset", A::of_int(11)}, {"axis", A::of_int(0)}})),
            (std::vector<double>{45, 45, 122, 45}));
  EXPECT_NE(failure(ms_case("QLinearSoftmax", in)).find("opset"), std::string::npos);
}

TEST(MsQuantize, PoolsAverageTheDequantisedValues) {
  // Channel 0: 1, 2, 3, 4; channel 1: 10, 10, 10, 11. Less the zero point 2 and times
  // 0.5 / (0.25 * 4): 1 and 16.5 -> 16 (ties to even); + 1.
  const std::vector<Tensor> q = {f32(0.5f), u8({}, {2}), f32(0.25f), u8({}, {1})};
  auto with = [&](Tensor x) {
    std::vector<Tensor> in = {std::move(x)};
    in.insert(in.end(), q.begin(), q.end());
    return in;
  };
  Shape s;
  EXPECT_EQ(run_naive(ms_case("QLinearGlobalAveragePool", with(u8({1, 2, 2, 2}, {1, 2, 3, 4, 10, 10, 10, 11}))), &s),
            (std::vector<double>{2, 17}));
  EXPECT_EQ(s, (Shape{1, 2, 1, 1}));
  EXPECT_EQ(run_naive(ms_case("QLinearGlobalAveragePool", with(u8({1, 2, 2, 2}, {1, 10, 2, 10, 3, 10, 4, 11})),
                              {{"channels_last", A::of_int(1)}}),
                      &s),
            (std::vector<double>{2, 17}));
  EXPECT_EQ(s, (Shape{1, 1, 1, 2}));
  // A 2x2 window: (0 + 5 + 10 + 15.5) / 4 = 7.625, over 0.5 = 15.25 -> 15, + 3.
  EXPECT_EQ(run_naive(ms_case("QLinearAveragePool",
                              {u8({1, 1, 2, 2}, {0, 10, 20, 31}), f32(0.5f), Tensor(), f32(0.5f), u8({}, {3})},
                              {{"kernel_shape", A::of_ints({2, 2})}})),
            (std::vector<double>{18}));
  // Each dequantised cell rounded before the sum, on every machine: 34, 55, -51 and -19 times
  // this scale sum to 1.8286203 in float32, over 4 and Y's scale 16.4999924 -> 16 (+ 5). Fused
  // multiply-adds (-march=native's contraction of the plain loop) make it 16.5000019 -> 17.
  EXPECT_EQ(run_naive(ms_case("QLinearAveragePool",
                              {i8({1, 1, 2, 2}, {34, 55, -51, -19}), f32(0x1.8a3652p-4f), Tensor(),
                               f32(0x1.c5f0fep-6f), i8({}, {5})},
                              {{"kernel_shape", A::of_ints({2, 2})}})),
            (std::vector<double>{21}));
  EXPECT_NE(failure(ms_case("QLinearAveragePool", {u8({1, 1, 2, 2}, {0, 1, 2, 3}), f32(1), Tensor(), f32(1)},
                            {{"kernel_shape", A::of_ints({2, 2})}, {"channels_last", A::of_int(1)}}))
                .find("channels_last"),
            std::string::npos);
}

TEST(MsQuantize, QLinearConcatRequantisesEachOperandToY) {
  // Operand 0 shares Y's scale and zero point (copied); operand 1: (10 - 2) * 0.25 / 0.5 = 4.
  Shape s;
  EXPECT_EQ(run_naive(ms_case("QLinearConcat", {f32(0.5f), u8({}, {0}), u8({1, 2}, {4, 6}), f32(0.5f), u8({}, {0}),
                                                u8({1, 1}, {10}), f32(0.25f), u8({}, {2})},
                              {{"axis", A::of_int(1)}}),
                      &s),
            (std::vector<double>{4, 6, 4}));
  EXPECT_EQ(s, (Shape{1, 3}));
  EXPECT_NE(failure(ms_case("QLinearConcat", {f32(0.5f), u8({}, {0}), u8({1, 2}, {4, 6}), f32(0.5f), u8({}, {0}),
                                              u8({2, 1}, {10, 11}), f32(0.25f), u8({}, {2})},
                            {{"axis", A::of_int(1)}}))
                .find("differ off axis 1"),
            std::string::npos);
}

TEST(MsQuantize, QGemmScalesPerColumnAndQuantisesOrNot) {
  // A - 1 = [[0, 1], [2, 3]]; B - [0, 2] per column = [[1, 0], [3, 2]]; product [[3, 2], [11, 6]];
  // + C [1, -2] = [[4, 0], [12, 4]]; times 0.5 * [1, 0.5] = [[2, 0], [6, 1]].
  const Tensor a = u8({2, 2}, {1, 2, 3, 4});
  const Tensor b = i8({2, 2}, {1, 2, 3, 4}), bt = i8({2, 2}, {1, 3, 2, 4});
  const Tensor b_scale = Tensor::from_f32({2}, {1.f, 0.5f});
  const Tensor b_zp = i8({2}, {0, 2});
  const Tensor c = typed(DType::kI32, {2}, {1, -2});
  Shape s;
  DType t = DType::kCount;
  EXPECT_EQ(run_naive(ms_case("QGemm", {a, f32(0.5f), u8({}, {1}), b, b_scale, b_zp, c}), &s, &t),
            (std::vector<double>{2, 0, 6, 1}));
  EXPECT_EQ(t, DType::kF32);
  EXPECT_EQ(s, (Shape{2, 2}));
  // B stored transposed, alpha 2, quantised by 0.5 with zero point 10: [[8, 0], [24, 4]] + 10.
  EXPECT_EQ(run_naive(ms_case("QGemm", {a, f32(0.5f), u8({}, {1}), bt, b_scale, b_zp, c, f32(0.5f), u8({}, {10})},
                              {{"transB", A::of_int(1)}, {"alpha", A::of_float(2.f)}}),
                      nullptr, &t),
            (std::vector<double>{18, 10, 34, 14}));
  EXPECT_EQ(t, DType::kU8);
  // ONNX Runtime's quantiser can write a uint8 bias into C (bert's QOperator form); refused.
  EXPECT_NE(failure(ms_case("QGemm", {a, f32(0.5f), u8({}, {1}), b, b_scale, b_zp, u8({2}, {1, 2})}))
                .find("C must be int32, got uint8"),
            std::string::npos);
  EXPECT_NE(failure(ms_case("QGemm", {a, f32(0.5f), u8({}, {1}), b, b_scale, b_zp, c, f32(0.5f)})).find("y_zero_point"),
            std::string::npos);
  EXPECT_NE(failure(ms_case("QGemm", {a, f32(0.5f), u8({}, {1}), b, Tensor::from_f32({3}, {1, 1, 1}), b_zp}))
                .find("one per column of B"),
            std::string::npos);
}

TEST(MsQuantize, BadScalesAndZeroPointsAreRefusedByName) {
  const Tensor a = u8({2}, {1, 2});
  // A zero scale would divide by zero: refused when the values are seen.
  EXPECT_NE(failure(ms_case("QLinearAdd", {a, f32(0.f), u8({}, {0}), a, f32(1.f), u8({}, {0}), f32(1.f), u8({}, {0})}))
                .find("A_scale is 0"),
            std::string::npos);
  EXPECT_NE(failure(ms_case("QLinearSigmoid", {a, f32(1.f), Tensor(), f32(-1.f)})).find("Y_scale"), std::string::npos);
  // A zero point of another type than its tensor, and a per-channel scale on a per-tensor op.
  EXPECT_NE(failure(ms_case("QLinearAdd", {a, f32(1.f), i8({}, {0}), a, f32(1.f), u8({}, {0}), f32(1.f)}))
                .find("A_zero_point is int8, its tensor uint8"),
            std::string::npos);
  EXPECT_NE(failure(ms_case("QLinearMul", {a, Tensor::from_f32({2}, {1, 2}), Tensor(), a, f32(1.f), Tensor(), f32(1.f)}))
                .find("must be one value"),
            std::string::npos);
  // An ONNX-domain node of the same name never reaches com.microsoft's op.
  OpCase onnx = ms_case("QLinearAdd", {a, f32(1.f), Tensor(), a, f32(1.f), Tensor(), f32(1.f)});
  onnx.node.domain = "";
  EXPECT_NE(failure(onnx).find("not supported"), std::string::npos);
}

TEST(MsQuantize, MicrosoftQuantizeLinearIsOnnxsAtAnyOpset) {
  // uint16 in a model of ONNX opset 13 (the domain has its own version): 1000 / 2 + 7, 3 / 2 = 1.5 -> 2, + 7.
  OpCase q = ms_case("QuantizeLinear", {Tensor::from_f32({2}, {1000, 3}), f32(2.f), typed(DType::kU16, {}, {7})});
  q.opset = 13;
  DType t = DType::kCount;
  EXPECT_EQ(run_naive(q, nullptr, &t), (std::vector<double>{507, 9}));
  EXPECT_EQ(t, DType::kU16);
  OpCase dq = ms_case("DequantizeLinear", {typed(DType::kU16, {2}, {507, 9}), f32(2.f), typed(DType::kU16, {}, {7})});
  dq.opset = 13;
  EXPECT_EQ(run_naive(dq), (std::vector<double>{1000, 4}));
}

TEST(MsQuantize, MatMulNBitsUnpacksBlocksLowBitsFirst) {
  // 4 bits, K 16 in one block, N 2. Row 0: every value 9, packed zero point 8, scale 0.5: w 0.5.
  // Row 1: bytes 0xF0 (k even 0, k odd 15), zero point 3, scale 1: w -3 and 12. A all ones:
  // 8 and 72, + bias [1, -2].
  std::vector<double> b(16, 0x99);
  for (int i = 8; i < 16; ++i) b[static_cast<size_t>(i)] = 0xF0;
  const std::map<std::string, Attribute> attrs = {
      {"K", A::of_int(16)}, {"N", A::of_int(2)}, {"bits", A::of_int(4)}, {"block_size", A::of_int(16)}};
  const Tensor ones = Tensor::from_f32({1, 16}, std::vector<float>(16, 1.f));
  Shape s;
  EXPECT_EQ(run_naive(ms_case("MatMulNBits", {ones, u8({2, 1, 8}, b), Tensor::from_f32({2, 1}, {0.5f, 1.f}),
                                              u8({2, 1}, {8, 3}), Tensor(), Tensor::from_f32({2}, {1, -2})},
                              attrs),
                      &s),
            (std::vector<double>{9, 70}));
  EXPECT_EQ(s, (Shape{1, 2}));
  // 2 bits, K 20: two blocks of 16, the second holding 4. Every value 3, no zero point (the
  // default 2), scales 1 and 10: 16 * 1 + 4 * 10.
  EXPECT_EQ(run_naive(ms_case("MatMulNBits", {Tensor::from_f32({20}, std::vector<float>(20, 1.f)),
                                              u8({1, 2, 4}, std::vector<double>(8, 0xFF)), Tensor::from_f32({1, 2}, {1, 10})},
                              {{"K", A::of_int(20)}, {"N", A::of_int(1)}, {"bits", A::of_int(2)}, {"block_size", A::of_int(16)}})),
            (std::vector<double>{56}));
  // 8 bits, values 0..15, a float zero point 5.5, scale 2: the sum of 2k - 11.
  std::vector<double> q8(16);
  for (int k = 0; k < 16; ++k) q8[static_cast<size_t>(k)] = k;
  EXPECT_EQ(run_naive(ms_case("MatMulNBits", {ones, u8({1, 1, 16}, q8), Tensor::from_f32({1, 1}, {2}),
                                              Tensor::from_f32({1, 1}, {5.5f})},
                              {{"K", A::of_int(16)}, {"N", A::of_int(1)}, {"bits", A::of_int(8)}, {"block_size", A::of_int(16)}})),
            (std::vector<double>{64}));
  // Refusals: a bit width Mosaic does not read, B of the wrong size, the deprecated g_idx.
  std::map<std::string, Attribute> three = attrs;
  three["bits"] = A::of_int(3);
  EXPECT_NE(failure(ms_case("MatMulNBits", {ones, u8({2, 1, 8}, b), Tensor::from_f32({2, 1}, {0.5f, 1.f})}, three))
                .find("bits 3"),
            std::string::npos);
  EXPECT_NE(failure(ms_case("MatMulNBits", {ones, u8({2, 1, 7}, std::vector<double>(14, 0)),
                                            Tensor::from_f32({2, 1}, {0.5f, 1.f})},
                            attrs))
                .find("B [2,1,7] must hold 16 values"),
            std::string::npos);
  EXPECT_NE(failure(ms_case("MatMulNBits", {ones, u8({2, 1, 8}, b), Tensor::from_f32({2, 1}, {0.5f, 1.f}), Tensor(),
                                            typed(DType::kI32, {16}, std::vector<double>(16, 0))},
                            attrs))
                .find("g_idx"),
            std::string::npos);
}

TEST(MsQuantize, MaxPoolTakesEightBitIntegersFromOpset12) {
  const std::map<std::string, Attribute> k2 = {{"kernel_shape", A::of_ints({2, 2})}};
  DType t = DType::kCount;
  EXPECT_EQ(run_naive(op_case("MaxPool", {u8({1, 1, 2, 2}, {5, 200, 7, 3})}, k2, 12), nullptr, &t),
            (std::vector<double>{200}));
  EXPECT_EQ(t, DType::kU8);
  EXPECT_EQ(run_naive(op_case("MaxPool", {i8({1, 1, 2, 3}, {-5, -100, -7, -3, -128, 1})}, k2, 12)),
            (std::vector<double>{-3, 1}));
  EXPECT_NE(failure(op_case("MaxPool", {u8({1, 1, 2, 2}, {5, 200, 7, 3})}, k2, 11)).find("floating-point"),
            std::string::npos);
  EXPECT_NE(failure(op_case("AveragePool", {u8({1, 1, 2, 2}, {5, 200, 7, 3})}, k2, 12)).find("floating-point"),
            std::string::npos);
}

}  // namespace
}  // namespace mosaic::test
