// DFT (operators/signal.hpp) and the window functions (operators/rearrange.hpp) against
// values by hand; the ONNX node tests (test_dft*, test_*window*) check them against onnx's
// reference outputs.
#include <gtest/gtest.h>

#include <cmath>

#include "test_util.hpp"

namespace mosaic::test {
namespace {

using A = Attribute;

std::vector<double> run_naive(const OpCase& c) {
  std::vector<Tensor> out;
  const Status st = run_on(c, "naive", &out);
  EXPECT_TRUE(st.is_ok()) << st.to_string();
  return st.is_ok() ? values_of(out[0]) : std::vector<double>{};
}

void expect_near(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6) << "element " << i;
}

TEST(Signal, DftOfImpulsesByHand) {
  // [0, 1, 0, 0] (real, along axis 1 of [1, 4, 1]): X[f] = e^(-2 pi i f / 4) = 1, -i, -1, i.
  const Tensor x = Tensor::from_f32({1, 4, 1}, {0, 1, 0, 0});
  expect_near(run_naive(op_case("DFT", {x}, {{"axis", A::of_int(1)}}, 19)), {1, 0, 0, -1, -1, 0, 0, 1});
  // One-sided: the first 4 / 2 + 1 = 3 frequencies.
  expect_near(run_naive(op_case("DFT", {x}, {{"axis", A::of_int(1)}, {"onesided", A::of_int(1)}}, 19)),
              {1, 0, 0, -1, -1, 0});
  // Inverse one-sided of [4, 0, 0] (length 4): the constant 1.
  const Tensor spec = Tensor::from_f32({1, 3, 2}, {4, 0, 0, 0, 0, 0});
  expect_near(run_naive(op_case("DFT", {spec}, {{"axis", A::of_int(1)}, {"inverse", A::of_int(1)}, {"onesided", A::of_int(1)}}, 19)),
              {1, 1, 1, 1});
  // Opset 20: the axis and a length of 2 (the signal truncated) as inputs.
  const Tensor len = Tensor::from_i64({}, {2}), axis = Tensor::from_i64({}, {1});
  OpCase c = op_case("DFT", {x, len, axis}, {}, 20);
  c.is_const = {false, true, true};
  expect_near(run_naive(c), {1, 0, -1, 0});  // [0, 1]: X = 1, -1
}

TEST(Signal, WindowsByHand) {
  OpCase hann = op_case("HannWindow", {Tensor::from_i64({}, {4})}, {}, 17);
  hann.is_const = {true};
  expect_near(run_naive(hann), {0, 0.5, 1, 0.5});  // periodic: sin^2(pi n / 4)
  OpCase sym = op_case("HannWindow", {Tensor::from_i64({}, {3})}, {{"periodic", A::of_int(0)}}, 17);
  sym.is_const = {true};
  expect_near(run_naive(sym), {0, 1, 0});  // symmetric: sin^2(pi n / 2)
}

}  // namespace
}  // namespace mosaic::test
