// The oracle against hand-computed values.
#include <gtest/gtest.h>

#include "test_util.hpp"

namespace mosaic::test {
namespace {

using A = Attribute;

std::vector<float> run1(OpCase c) {
  std::vector<Tensor> out;
  Status st = run_on(c, "naive", &out);
  EXPECT_TRUE(st.is_ok()) << st.to_string();
  if (!st.is_ok()) return {};
  return std::vector<float>(out[0].f32(), out[0].f32() + out[0].numel());
}

void expect_near(const std::vector<float>& got, const std::vector<float>& want, float tol = 1e-5f) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
}

TEST(Naive, Conv2x2Valid) {
  OpCase c;
  c.node = make_node("Conv");
  c.inputs = {Tensor::from_f32({1, 1, 3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9}), Tensor::from_f32({1, 1, 2, 2}, {1, 1, 1, 1}),
              Tensor::from_f32({1}, {1})};
  c.is_const = {false, true, true};
  expect_near(run1(c), {13, 17, 25, 29});
}

TEST(Naive, ConvPadStride) {
  OpCase c;
  c.node = make_node("Conv", {{"pads", A::of_ints({1, 1, 1, 1})}, {"strides", A::of_ints({2, 2})}});
  c.inputs = {Tensor::from_f32({1, 1, 3, 3}, std::vector<float>(9, 1.f)), Tensor::from_f32({1, 1, 3, 3}, std::vector<float>(9, 1.f))};
  c.is_const = {false, true};
  expect_near(run1(c), {4, 4, 4, 4});
}

TEST(Naive, ConvGroups) {
  // Two groups, each output channel sees only its own input channel.
  OpCase c;
  c.node = make_node("Conv", {{"group", A::of_int(2)}});
  c.inputs = {Tensor::from_f32({1, 2, 1, 2}, {1, 2, 10, 20}), Tensor::from_f32({2, 1, 1, 1}, {3, -1})};
  c.is_const = {false, true};
  expect_near(run1(c), {3, 6, -10, -20});
}

TEST(Naive, MaxPoolCeilMode) {
  std::vector<float> x(16);
  for (int i = 0; i < 16; ++i) x[i] = static_cast<float>(i);
  OpCase c;
  c.node = make_node("MaxPool", {{"kernel_shape", A::of_ints({3, 3})}, {"strides", A::of_ints({2, 2})}, {"ceil_mode", A::of_int(1)}});
  c.inputs = {Tensor::from_f32({1, 1, 4, 4}, x)};
  expect_near(run1(c), {10, 11, 14, 15});
}

TEST(Naive, AveragePoolPadding) {
  OpCase c;
  c.node = make_node("AveragePool", {{"kernel_shape", A::of_ints({2, 2})}, {"pads", A::of_ints({1, 1, 1, 1})}});
  c.inputs = {Tensor::from_f32({1, 1, 2, 2}, {1, 2, 3, 4})};
  expect_near(run1(c), {1, 1.5f, 2, 2, 2.5f, 3, 3, 3.5f, 4});
  c.node.attrs["count_include_pad"] = A::of_int(1);
  expect_near(run1(c), {0.25f, 0.75f, 0.5f, 1, 2.5f, 1.5f, 0.75f, 1.75f, 1});
}

TEST(Naive, GemmBroadcastC) {
  OpCase c;
  c.node = make_node("Gemm", {{"alpha", A::of_float(2.f)}, {"beta", A::of_float(0.5f)}});
  c.inputs = {Tensor::from_f32({2, 2}, {1, 2, 3, 4}), Tensor::from_f32({2, 2}, {5, 6, 7, 8}), Tensor::from_f32({2}, {2, 4})};
  // 2 * [[19,22],[43,50]] + 0.5 * [2,4]
  expect_near(run1(c), {39, 46, 87, 102});
}

TEST(Naive, SoftmaxAndLogSoftmax) {
  OpCase c;
  c.node = make_node("Softmax");
  c.inputs = {Tensor::from_f32({1, 3}, {1, 2, 3})};
  expect_near(run1(c), {0.0900306f, 0.2447285f, 0.6652410f});
  c.node = make_node("LogSoftmax");
  expect_near(run1(c), {-2.4076059f, -1.4076059f, -0.4076059f});
}

TEST(Naive, LrnAcrossChannels) {
  OpCase c;
  c.node = make_node("LRN", {{"size", A::of_int(3)}, {"alpha", A::of_float(3.f)}, {"beta", A::of_float(1.f)}, {"bias", A::of_float(1.f)}});
  c.inputs = {Tensor::from_f32({1, 3, 1, 1}, {1, 2, 3})};
  expect_near(run1(c), {1.f / 6, 2.f / 15, 3.f / 14});
}

TEST(Naive, BatchNormInference) {
  OpCase c;
  c.node = make_node("BatchNormalization", {{"epsilon", A::of_float(0.f)}});
  c.inputs = {Tensor::from_f32({1, 2, 1, 2}, {1, 3, 5, 9}), Tensor::from_f32({2}, {2, 1}), Tensor::from_f32({2}, {0, 1}),
              Tensor::from_f32({2}, {2, 7}), Tensor::from_f32({2}, {1, 4})};
  expect_near(run1(c), {-2, 2, 0, 2});
}

TEST(Naive, PadModes) {
  OpCase c;
  c.node = make_node("Pad", {{"mode", A::of_string("reflect")}});
  c.inputs = {Tensor::from_f32({3}, {1, 2, 3}), Tensor::from_i64({2}, {2, 2})};
  c.is_const = {false, true};
  expect_near(run1(c), {3, 2, 1, 2, 3, 2, 1});
  c.node.attrs["mode"] = A::of_string("edge");
  expect_near(run1(c), {1, 1, 1, 2, 3, 3, 3});
  c.node.attrs["mode"] = A::of_string("constant");
  expect_near(run1(c), {0, 0, 1, 2, 3, 0, 0});
}

TEST(Naive, BroadcastSub) {
  OpCase c;
  c.node = make_node("Sub");
  c.inputs = {Tensor::from_f32({2, 1}, {10, 20}), Tensor::from_f32({3}, {1, 2, 3})};
  expect_near(run1(c), {9, 8, 7, 19, 18, 17});
}

TEST(Naive, MatMulVector) {
  OpCase c;
  c.node = make_node("MatMul");
  c.inputs = {Tensor::from_f32({3}, {1, 2, 3}), Tensor::from_f32({3, 2}, {1, 0, 0, 1, 1, 1})};
  expect_near(run1(c), {4, 5});
}

}  // namespace
}  // namespace mosaic::test
