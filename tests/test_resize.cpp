// Resize (operators/resize.hpp) against hand-computed values; hostile parameters refused or
// computed without undefined behaviour. ONNX's own 39 Resize node tests (every mode and
// coordinate transformation, antialias, tf_crop_and_resize) are in the committed corpus
// (ctest onnx_node_tests_1_23); every backend against the oracle in tests/test_backends.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "test_util.hpp"

namespace mosaic::test {
namespace {

using A = Attribute;

Status run_resize(std::map<std::string, Attribute> attrs, Tensor x, Tensor roi, Tensor scales, Tensor sizes,
                  std::vector<double>* out, int64_t opset = 18) {
  OpCase c;
  c.label = "resize";
  c.node = make_node("Resize", std::move(attrs));
  c.inputs = {std::move(x), std::move(roi), std::move(scales), std::move(sizes)};
  c.is_const = {false, true, true, true};
  c.opset = opset;
  std::vector<Tensor> y;
  MOSAIC_RETURN_IF_ERROR(run_on(c, "naive", &y));
  out->clear();
  for (int64_t i = 0; i < y[0].numel(); ++i) out->push_back(y[0].get(i));
  return Status::ok();
}

TEST(Resize, ByHand) {
  const Tensor x = Tensor::from_f32({1, 1, 2, 2}, {1, 2, 3, 4});
  std::vector<double> y;
  // Nearest, twice as large, asymmetric: each pixel repeated (ONNX's upsample example).
  ASSERT_TRUE(run_resize({{"coordinate_transformation_mode", A::of_string("asymmetric")}}, x, Tensor(),
                         Tensor::from_f32({4}, {1, 1, 2, 2}), Tensor(), &y).is_ok());
  EXPECT_EQ(y, (std::vector<double>{1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4}));
  // Linear, align_corners, 2 -> 3 along the last axis: the midpoint is the mean.
  ASSERT_TRUE(run_resize({{"mode", A::of_string("linear")}, {"coordinate_transformation_mode", A::of_string("align_corners")}},
                         x, Tensor(), Tensor(), Tensor::from_i64({4}, {1, 1, 2, 3}), &y).is_ok());
  EXPECT_EQ(y, (std::vector<double>{1, 1.5, 2, 3, 3.5, 4}));
  // Linear, half_pixel, 2 -> 4: positions -0.25, 0.25, 0.75, 1.25 read 1, 1.25, 1.75, 2 (edges clamp).
  ASSERT_TRUE(run_resize({{"mode", A::of_string("linear")}}, Tensor::from_f32({1, 2}, {1, 2}), Tensor(),
                         Tensor::from_f32({2}, {1, 2}), Tensor(), &y).is_ok());
  EXPECT_EQ(y, (std::vector<double>{1, 1.25, 1.75, 2}));
  // axes (opset 18): only the last axis, 2 -> 1 with keep_aspect_ratio_policy irrelevant.
  ASSERT_TRUE(run_resize({{"axes", A::of_ints({-1})}}, x, Tensor(), Tensor(), Tensor::from_i64({1}, {1}), &y).is_ok());
  EXPECT_EQ(y.size(), 2u);
}

TEST(Resize, HostileParametersAreRefusedOrComputedSafely) {
  const Tensor x = Tensor::from_f32({1, 1, 2, 2}, {1, 2, 3, 4});
  std::vector<double> y;
  Status st = run_resize({}, x, Tensor(), Tensor::from_f32({4}, {1, 1, 1e12f, 1}), Tensor(), &y);
  EXPECT_NE(st.message().find("larger than 2^31 - 1"), std::string::npos) << st.to_string();
  st = run_resize({}, x, Tensor(), Tensor::from_f32({4}, {1, 1, -2, 1}), Tensor(), &y);
  EXPECT_NE(st.message().find("must be > 0"), std::string::npos) << st.to_string();
  st = run_resize({}, x, Tensor(), Tensor::from_f32({4}, {1, 1, std::numeric_limits<float>::quiet_NaN(), 1}), Tensor(), &y);
  EXPECT_NE(st.message().find("must be > 0"), std::string::npos) << st.to_string();
  st = run_resize({}, x, Tensor(), Tensor::from_f32({4}, {1, 1, 2, 2}), Tensor::from_i64({4}, {1, 1, 4, 4}), &y);
  EXPECT_NE(st.message().find("exactly one of scales and sizes"), std::string::npos) << st.to_string();
  st = run_resize({}, x, Tensor(), Tensor(), Tensor::from_i64({4}, {1, 1, -4, 4}), &y);
  EXPECT_NE(st.message().find("outside [0, 2^31 - 1]"), std::string::npos) << st.to_string();
  st = run_resize({{"coordinate_transformation_mode", A::of_string("half_pixel_symmetric")}}, x, Tensor(), Tensor(),
                  Tensor::from_i64({4}, {1, 1, 4, 4}), &y, 18);
  EXPECT_NE(st.message().find("arrived in opset 19"), std::string::npos) << st.to_string();
  // tf_crop_and_resize with a region far outside (and NaN): every position extrapolated.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  ASSERT_TRUE(run_resize({{"mode", A::of_string("linear")},
                          {"coordinate_transformation_mode", A::of_string("tf_crop_and_resize")},
                          {"extrapolation_value", A::of_float(-7.f)}},
                         x, Tensor::from_f32({8}, {0, 0, 1e30f, nan, 1, 1, 2e30f, nan}), Tensor(),
                         Tensor::from_i64({4}, {1, 1, 3, 3}), &y).is_ok());
  EXPECT_EQ(y, std::vector<double>(9, -7.0));
}

}  // namespace
}  // namespace mosaic::test
