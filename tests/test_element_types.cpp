// Every ONNX numeric element type: float16/bfloat16 rounding against hand-computed bit
// patterns, Cast's conversions, the naive oracle's widening (core/promote.hpp) against
// arithmetic done by hand in the narrow type, and the refusals: a backend whose kernel does
// not take a type declines the node naming it; float64 is never computed in float32.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "ir/elements.hpp"
#include "metrics/compare.hpp"
#include "test_util.hpp"

namespace mosaic::test {
namespace {

using A = Attribute;

TEST(ElementTypes, Float16AndBfloat16RoundToNearestEven) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);                   // the largest float16
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7bff);                   // below the midpoint to 65536
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);                   // the midpoint rounds to even: infinity
  EXPECT_EQ(f32_to_f16(0.1f), 0x2e66);                       // 0.0999755859375
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);      // the smallest subnormal
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);      // half of it: a tie, to even (zero)
  EXPECT_EQ(f32_to_f16(std::ldexp(3.0f, -26)), 0x0001);      // 0.75 of it: up
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // 1 + half an ulp: a tie, to even
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(3.0f, -11)), 0x3c02);  // 1 + 1.5 ulp: a tie, to even (up)
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(std::nanf("")))));
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_to_f32(0x3555), 0.333251953125f);
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(1.00390625f), 0x3f80);  // 1 + half a bfloat16 ulp: a tie, to even
  EXPECT_EQ(f32_to_bf16(1.01171875f), 0x3f82);  // 1 + 1.5 ulp: to even (up)
  EXPECT_EQ(bf16_to_f32(0x4049), 3.140625f);
  // From a double, one rounding: 1 + 2^-11 + 2^-40 is just above the float16 midpoint, which a
  // rounding to float first would erase (and then round to even, down).
  const double above_tie = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40);
  Tensor h = typed(DType::kF16, {1}, {above_tie});
  EXPECT_EQ(static_cast<const uint16_t*>(h.data())[0], 0x3c01);
}

TEST(ElementTypes, Float8RoundsToNearestEvenAndSaturatesAsCastSays) {
  // E4M3FN: bias 7, 3 mantissa bits, no infinity, NaN 0x7f, largest 448 (0x7e).
  const Float8Format fn = float8_format(DType::kF8E4M3FN);
  EXPECT_EQ(f64_to_float8(fn, 1.0, true), 0x38);
  EXPECT_EQ(f64_to_float8(fn, 1.0625, true), 0x38);  // a tie between 1 and 1.125: to even
  EXPECT_EQ(f64_to_float8(fn, 1.1875, true), 0x3a);  // a tie between 1.125 and 1.25: to even
  EXPECT_EQ(f64_to_float8(fn, -448.0, true), 0xfe);
  EXPECT_EQ(f64_to_float8(fn, 500.0, true), 0x7e);   // saturates
  EXPECT_EQ(f64_to_float8(fn, 500.0, false), 0x7f);  // NaN without saturation
  EXPECT_EQ(f64_to_float8(fn, std::ldexp(1.0, -9), true), 0x01);  // the smallest subnormal
  EXPECT_EQ(float8_to_f64(fn, 0x01), std::ldexp(1.0, -9));
  EXPECT_TRUE(std::isnan(float8_to_f64(fn, 0xff)));
  // E5M2 has infinities; the FNUZ kinds no negative zero and NaN 0x80.
  const Float8Format e5 = float8_format(DType::kF8E5M2);
  EXPECT_EQ(f64_to_float8(e5, 57344.0, true), 0x7b);
  EXPECT_EQ(f64_to_float8(e5, 1e6, false), 0x7c);
  EXPECT_EQ(float8_to_f64(e5, 0xfc), -INFINITY);
  const Float8Format uz = float8_format(DType::kF8E4M3FNUZ);
  EXPECT_EQ(f64_to_float8(uz, -0.0, true), 0x00);
  EXPECT_EQ(f64_to_float8(uz, 240.0, true), 0x7f);
  EXPECT_TRUE(std::isnan(float8_to_f64(uz, 0x80)));
  // Through Cast, with its saturate attribute.
  std::vector<Tensor> out;
  const Tensor x = Tensor::from_f32({3}, {1.0625f, 500.f, -3.f});
  ASSERT_TRUE(run_on(op_case("Cast", {x}, {{"to", A::of_int(17)}, {"saturate", A::of_int(0)}}), "naive", &out).is_ok());
  ASSERT_EQ(out[0].dtype(), DType::kF8E4M3FN);
  EXPECT_EQ(out[0].u8()[0], 0x38);
  EXPECT_EQ(out[0].u8()[1], 0x7f);
  EXPECT_EQ(out[0].get(2), -3.0);
}

TEST(ElementTypes, CastConvertsAsOnnxSays) {
  // Integers to integers by their bits; floats to integers truncated; back by value.
  const Tensor ints = typed(DType::kI64, {5}, {300, -1, 127, -129, 65535});
  std::vector<Tensor> out;
  ASSERT_TRUE(run_on(op_case("Cast", {ints}, {{"to", A::of_int(3)}}), "naive", &out).is_ok());  // INT8
  EXPECT_EQ(out[0].dtype(), DType::kI8);
  EXPECT_EQ(values_of(out[0]), (std::vector<double>{44, -1, 127, 127, -1}));
  ASSERT_TRUE(run_on(op_case("Cast", {ints}, {{"to", A::of_int(2)}}), "naive", &out).is_ok());  // UINT8
  EXPECT_EQ(values_of(out[0]), (std::vector<double>{44, 255, 127, 127, 255}));
  const Tensor floats = Tensor::from_f32({4}, {-2.7f, 2.7f, 1e10f, -0.5f});
  ASSERT_TRUE(run_on(op_case("Cast", {floats}, {{"to", A::of_int(6)}}), "naive", &out).is_ok());  // INT32
  EXPECT_EQ(out[0].dtype(), DType::kI32);
  EXPECT_EQ(values_of(out[0]), (std::vector<double>{-2, 2, 1410065408, 0}));  // 1e10 wraps mod 2^32
  ASSERT_TRUE(run_on(op_case("Cast", {floats}, {{"to", A::of_int(10)}}), "naive", &out).is_ok());  // FLOAT16
  EXPECT_EQ(values_of(out[0]), (std::vector<double>{-2.69921875, 2.69921875, INFINITY, -0.5}));
  // uint64 beyond int64 keeps its value to float.
  Tensor big = Tensor::empty({DType::kU64, {1}});
  static_cast<uint64_t*>(big.data())[0] = UINT64_MAX;
  ASSERT_TRUE(run_on(op_case("Cast", {big}, {{"to", A::of_int(11)}}), "naive", &out).is_ok());  // DOUBLE
  EXPECT_EQ(values_of(out[0]), (std::vector<double>{18446744073709551616.0}));
  // Every backend takes Cast (it moves and converts bytes): the same answer.
  for (const char* b : {"im2col", "onednn"}) {
    ASSERT_TRUE(run_on(op_case("Cast", {ints}, {{"to", A::of_int(3)}}), b, &out).is_ok()) << b;
    EXPECT_EQ(values_of(out[0]), (std::vector<double>{44, -1, 127, 127, -1})) << b;
  }
}

TEST(ElementTypes, NarrowIntegersWrapAsTheirOwnArithmetic) {
  std::vector<Tensor> out;
  const Tensor a = typed(DType::kI8, {4}, {100, -100, 7, -128});
  const Tensor b = typed(DType::kI8, {4}, {100, -100, 2, -1});
  ASSERT_TRUE(run_on(op_case("Add", {a, b}), "naive", &out).is_ok());
  EXPECT_EQ(out[0].dtype(), DType::kI8);
  EXPECT_EQ(values_of(out[0]), (std::vector<double>{-56, 56, 9, 127}));  // 200 and -200 wrap; -129 wraps
  ASSERT_TRUE(run_on(op_case("Mul", {a, b}), "naive", &out).is_ok());
  EXPECT_EQ(values_of(out[0]), (std::vector<double>{16, 16, 14, -128}));  // 10000 mod 256 = 16; 128 wraps
  ASSERT_TRUE(run_on(op_case("Div", {a, b}), "naive", &out).is_ok());
  EXPECT_EQ(values_of(out[0]), (std::vector<double>{1, 1, 3, -128}));  // truncates; -128 / -1 wraps
  const Tensor u = typed(DType::kU8, {3}, {250, 3, 0});
  const Tensor v = typed(DType::kU8, {3}, {10, 5, 1});
  ASSERT_TRUE(run_on(op_case("Sub", {u, v}), "naive", &out).is_ok());
  EXPECT_EQ(values_of(out[0]), (std::vector<double>{240, 254, 255}));
  ASSERT_TRUE(run_on(op_case("ReduceSum", {u}, {{"keepdims", A::of_int(0)}}), "naive", &out).is_ok());
  EXPECT_EQ(values_of(out[0]), (std::vector<double>{253}));  // 253 fits
  ASSERT_TRUE(run_on(op_case("Greater", {u, v}), "naive", &out).is_ok());
  EXPECT_EQ(values_of(out[0]), (std::vector<double>{1, 0, 0}));
  // uint64 compares as unsigned: 2^63 is greater than 1.
  Tensor p = Tensor::empty({DType::kU64, {1}}), q = Tensor::empty({DType::kU64, {1}});
  static_cast<uint64_t*>(p.data())[0] = uint64_t{1} << 63;
  static_cast<uint64_t*>(q.data())[0] = 1;
  ASSERT_TRUE(run_on(op_case("Greater", {p, q}), "naive", &out).is_ok());
  EXPECT_EQ(values_of(out[0]), (std::vector<double>{1}));
  // Bit shifts: uint8 left wraps, int8 right is arithmetic, shifts past the width saturate.
  ASSERT_TRUE(run_on(op_case("BitShift", {typed(DType::kU8, {2}, {200, 1}), typed(DType::kU8, {2}, {1, 9})},
                             {{"direction", A::of_string("LEFT")}}), "naive", &out).is_ok());
  EXPECT_EQ(values_of(out[0]), (std::vector<double>{144, 0}));
  ASSERT_TRUE(run_on(op_case("BitShift", {typed(DType::kI8, {2}, {-8, -8}), typed(DType::kI8, {2}, {1, 100})},
                             {{"direction", A::of_string("RIGHT")}}, 28), "naive", &out).is_ok());
  EXPECT_EQ(values_of(out[0]), (std::vector<double>{-4, -1}));
}

TEST(ElementTypes, HalfFloatsComputeInFloat32AndRoundOnce) {
  // A float16 MatMul: float32 sums, one rounding per output, the same as rounding the float32
  // result of the widened inputs.
  const Tensor x32 = random_tensor({3, 8}, 1), w32 = random_tensor({8, 4}, 2);
  Tensor x16 = Tensor::empty({DType::kF16, {3, 8}}), w16 = Tensor::empty({DType::kF16, {8, 4}});
  convert_elements(DType::kF32, x32.data(), DType::kF16, x16.data(), x32.numel());
  convert_elements(DType::kF32, w32.data(), DType::kF16, w16.data(), w32.numel());
  Tensor xw = Tensor::empty({DType::kF32, {3, 8}}), ww = Tensor::empty({DType::kF32, {8, 4}});
  convert_elements(DType::kF16, x16.data(), DType::kF32, xw.data(), x16.numel());
  convert_elements(DType::kF16, w16.data(), DType::kF32, ww.data(), w16.numel());
  std::vector<Tensor> half, full;
  ASSERT_TRUE(run_on(op_case("MatMul", {x16, w16}), "naive", &half).is_ok());
  ASSERT_TRUE(run_on(op_case("MatMul", {xw, ww}), "naive", &full).is_ok());
  ASSERT_EQ(half[0].dtype(), DType::kF16);
  for (int64_t i = 0; i < 12; ++i)
    EXPECT_EQ(static_cast<const uint16_t*>(half[0].data())[i], f32_to_f16(full[0].f32()[i])) << i;
  // bfloat16 the same way, through a whole op family (Softmax).
  Tensor s16 = Tensor::empty({DType::kBF16, {3, 8}});
  convert_elements(DType::kF32, x32.data(), DType::kBF16, s16.data(), x32.numel());
  ASSERT_TRUE(run_on(op_case("Softmax", {s16}), "naive", &half).is_ok());
  EXPECT_EQ(half[0].dtype(), DType::kBF16);
  double row = 0;
  for (int64_t j = 0; j < 8; ++j) row += half[0].get(j);
  EXPECT_NEAR(row, 1.0, 8 * std::ldexp(1.0, -8));
}

TEST(ElementTypes, WhatCannotBeComputedExactlyIsDeclinedByName) {
  std::vector<Tensor> out;
  // float64 MatMul: naive has no float64 kernel and will not compute it in float32.
  const Tensor d = typed(DType::kF64, {2, 2}, {1, 2, 3, 4});
  Status st = run_on(op_case("MatMul", {d, d}), "naive", &out);
  EXPECT_EQ(st.code(), StatusCode::kUnsupported);
  EXPECT_NE(st.message().find("input 0 is float64; its kernel computes in float32, int64, bool"), std::string::npos)
      << st.message();
  // float64 element-wise ops are computed in float64: 1 + 1e-12 survives.
  const Tensor e = typed(DType::kF64, {1}, {1e-12});
  ASSERT_TRUE(run_on(op_case("Add", {typed(DType::kF64, {1}, {1}), e}), "naive", &out).is_ok());
  EXPECT_EQ(out[0].get(0), 1.0 + 1e-12);
  ASSERT_TRUE(run_on(op_case("Exp", {e}), "naive", &out).is_ok());
  EXPECT_EQ(out[0].get(0), std::exp(1e-12));
  // A backend whose kernel takes float32, int64 and bool declines a float64 Add, naming it; a
  // float16 one it widens as naive does (core/promote.hpp promote_float16): the same bits.
  st = run_on(op_case("Add", {e, e}), "im2col", &out);
  EXPECT_EQ(st.code(), StatusCode::kUnsupported);
  EXPECT_NE(st.message().find("input 0 is float64; its kernel takes float32, int64, bool"), std::string::npos)
      << st.message();
  const Tensor h = typed(DType::kF16, {2}, {1, 30});
  const Tensor third = typed(DType::kF16, {2}, {1.0 / 3, 65504});
  for (const char* backend : {"naive", "im2col", "onednn"}) {
    ASSERT_TRUE(run_on(op_case("Add", {h, third}), backend, &out).is_ok()) << backend;
    ASSERT_EQ(out[0].dtype(), DType::kF16) << backend;
    EXPECT_EQ(out[0].get(0), f16_to_f32(f32_to_f16(f16_to_f32(f32_to_f16(1.f / 3)) + 1.f))) << backend;
    EXPECT_TRUE(std::isinf(out[0].get(1))) << backend << ": 65504 + 30 rounds past float16's largest";
    // The plan says which nodes compute in a wider type than their own (bench's nodes too).
    Graph g16 = make_graph(op_case("Add", {h, third}));
    ASSERT_TRUE(prepare_graph(g16, builtin_registry(), PrepareOptions{}).ok());
    auto p16 = Plan::build(g16, Placement::all_on(backend, {}), builtin_registry());
    ASSERT_TRUE(p16.ok()) << p16.status().to_string();
    EXPECT_EQ(p16.value()->steps()[0].widened_from, "float16") << backend;
  }
  Graph g32 = make_graph(op_case("Add", {Tensor::from_f32({1}, {1}), Tensor::from_f32({1}, {2})}));
  ASSERT_TRUE(prepare_graph(g32, builtin_registry(), PrepareOptions{}).ok());
  auto p32 = Plan::build(g32, Placement::all_on("im2col", {}), builtin_registry());
  ASSERT_TRUE(p32.ok()) << p32.status().to_string();
  EXPECT_EQ(p32.value()->steps()[0].widened_from, "");
  // Training through a widened node is refused (widening is for inference).
  Graph g = make_graph(op_case("Relu", {h}));
  ASSERT_TRUE(prepare_graph(g, builtin_registry(), PrepareOptions{}).ok());
  PlanOptions po;
  po.training = true;
  po.input_grads = true;
  auto plan = Plan::build(g, Placement::all_on("naive", {}), builtin_registry(), po);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("training on float16 tensors"), std::string::npos) << plan.status().message();
  plan = Plan::build(g, Placement::all_on("im2col", {}), builtin_registry(), po);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("training on float16 tensors"), std::string::npos) << plan.status().message();
}

TEST(ElementTypes, ComparisonsOfIntegersAreExactAndOfTypesStrict) {
  // An index one off fails whatever the tolerance; a type that differs fails.
  const Tensor want = Tensor::from_i64({2}, {1500, 7});
  EXPECT_FALSE(compare_tensors(Tensor::from_i64({2}, {1501, 7}), want, 1e-2, 1e-2).ok);
  EXPECT_TRUE(compare_tensors(Tensor::from_i64({2}, {1500, 7}), want, 0, 0).ok);
  const Tensor narrow = typed(DType::kI32, {2}, {1500, 7});
  const Agreement a = compare_tensors(narrow, want, 1, 1);
  EXPECT_FALSE(a.ok);
  EXPECT_NE(a.message.find("element type int32 != expected int64"), std::string::npos) << a.message;
  // float16 outputs are compared to a few units in their last place.
  EXPECT_TRUE(compare_tensors(typed(DType::kF16, {1}, {0.3984375}), typed(DType::kF16, {1}, {0.397949}), 1e-3, 0).ok);
  EXPECT_FALSE(compare_tensors(typed(DType::kF16, {1}, {0.40625}), typed(DType::kF16, {1}, {0.397949}), 1e-3, 0).ok);
}

}  // namespace
}  // namespace mosaic::test
