// Ops that models of today's and yesterday's opsets use and Mosaic lacked: GroupNormalization
// (opsets 18 and 21), TensorScatter (24, the KV cache update), Det, Compress and Unique
// (lengths that depend on values), Col2Im, AffineGrid, MaxUnpool and DeformConv,
// LinearAttention and CausalConvWithState (27: Gated DeltaNet, Mamba), MelWeightMatrix, and
// the deprecated
// Upsample, Scatter and Resize 10 that old exports still carry. Against hand-computed values (onnx's node tests check them
// against its reference outputs, tests/conformance/onnx-1.23); each refusal names the node.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "test_util.hpp"

namespace mosaic::test {
namespace {

using A = Attribute;

const char* const kCpuBackends[] = {"naive", "im2col", "onednn"};

std::vector<Tensor> run_ok(const OpCase& c, const std::string& backend) {
  std::vector<Tensor> out;
  const Status st = run_on(c, backend, &out);
  EXPECT_TRUE(st.is_ok()) << backend << ": " << st.to_string();
  return out;
}

std::string refusal(const OpCase& c, const std::string& backend = "naive") {
  std::vector<Tensor> out;
  const Status st = run_on(c, backend, &out);
  EXPECT_FALSE(st.is_ok()) << c.label << " ran on " << backend;
  return st.message();
}

void expect_values(const Tensor& t, const std::vector<double>& want, double tol = 0) {
  const std::vector<double> got = values_of(t);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "element " << i;
}

// x [1, 4, 2]: groups of two channels {1, 3, 5, 7} and {0, 0, 2, 2} (means 4 and 1,
// variances 5 and 1), epsilon 0.
OpCase group_norm_case(int64_t opset, const Shape& affine, std::vector<float> scale, std::vector<float> bias) {
  OpCase c;
  c.label = "GroupNormalization";
  c.node = make_node("GroupNormalization", {{"num_groups", A::of_int(2)}, {"epsilon", A::of_float(0)}});
  c.inputs = {Tensor::from_f32({1, 4, 2}, {1, 3, 5, 7, 0, 0, 2, 2}), Tensor::from_f32(affine, std::move(scale)),
              Tensor::from_f32(affine, std::move(bias))};
  c.is_const = {false, true, true};
  c.opset = opset;
  return c;
}

TEST(GroupNorm, PerChannelAtOpset21AndPerGroupAtOpset18ByHand) {
  const double r5 = 1 / std::sqrt(5.0);
  // Opset 21: scale and bias per channel.
  OpCase c = group_norm_case(21, {4}, {1, 2, 1, -1}, {0, 1, 0, 10});
  for (const char* b : kCpuBackends) {
    auto out = run_ok(c, b);
    if (out.empty()) continue;
    expect_values(out[0], {-3 * r5, -r5, 2 * r5 + 1, 6 * r5 + 1, -1, -1, 9, 9}, 1e-6);
  }
  // Opset 18: one scale and bias per group.
  c = group_norm_case(18, {2}, {2, 3}, {1, -1});
  auto out = run_ok(c, "naive");
  if (!out.empty()) expect_values(out[0], {-6 * r5 + 1, -2 * r5 + 1, 2 * r5 + 1, 6 * r5 + 1, -4, -4, 2, 2}, 1e-6);
  // InstanceNormalization is the case of a channel a group.
  OpCase in;
  in.node = make_node("InstanceNormalization", {{"epsilon", A::of_float(0)}});
  in.inputs = {Tensor::from_f32({1, 2, 2}, {1, 3, 0, 4}), Tensor::from_f32({2}, {1, 2}), Tensor::from_f32({2}, {0, 1})};
  in.is_const = {false, true, true};
  for (const char* b : kCpuBackends) {
    out = run_ok(in, b);
    if (!out.empty()) expect_values(out[0], {-1, 1, -1, 3}, 1e-6);
  }
}

TEST(GroupNorm, RefusesWhatItCannotNormaliseNamingTheNode) {
  OpCase c = group_norm_case(21, {4}, {1, 1, 1, 1}, {0, 0, 0, 0});
  c.node.attrs["num_groups"] = A::of_int(3);
  EXPECT_NE(refusal(c).find("num_groups 3 must divide the 4 channels"), std::string::npos) << refusal(c);
  c.node.attrs.erase("num_groups");
  EXPECT_NE(refusal(c).find("needs num_groups"), std::string::npos) << refusal(c);
  c = group_norm_case(18, {4}, {1, 1, 1, 1}, {0, 0, 0, 0});  // per channel at opset 18
  EXPECT_NE(refusal(c).find("scale must have shape [2] (one value per group at opset 18)"), std::string::npos)
      << refusal(c);
  c = group_norm_case(21, {4}, {1, 1, 1, 1}, {0, 0, 0, 0});
  c.node.attrs["stash_type"] = A::of_int(10);
  EXPECT_NE(refusal(c).find("stash_type 10"), std::string::npos) << refusal(c);
}

OpCase upsample_case(int64_t opset, const std::string& mode, const Shape& shape, std::vector<float> x,
                     std::vector<float> scales) {
  OpCase c;
  c.label = "Upsample";
  c.node = make_node("Upsample", {{"mode", A::of_string(mode)}});
  c.inputs = {Tensor::from_f32(shape, std::move(x))};
  c.opset = opset;
  if (opset >= 9) {
    c.inputs.push_back(Tensor::from_f32({static_cast<int64_t>(scales.size())}, scales));
    c.is_const = {false, true};
  } else {
    c.node.attrs["scales"] = A::of_floats(scales);
  }
  return c;
}

TEST(Upsample, FollowsResize10sRulesAsymmetricAndRoundingDown) {
  // Nearest x2 then x1.5: columns 0 0 1 1 -> floor(o / 1.5) = 0 0 1.
  OpCase c = upsample_case(9, "nearest", {1, 1, 1, 2}, {1, 2}, {1, 1, 2, 1.5f});
  for (const char* b : kCpuBackends) {
    auto out = run_ok(c, b);
    if (!out.empty()) {
      EXPECT_EQ(out[0].shape(), (Shape{1, 1, 2, 3}));
      expect_values(out[0], {1, 1, 2, 1, 1, 2});
    }
  }
  // Linear x2 from o / 2: 0, 0.5, 1, 1.5 (the last clamped to the edge).
  c = upsample_case(7, "linear", {1, 1, 1, 2}, {0, 4}, {1, 1, 1, 2});
  auto out = run_ok(c, "naive");
  if (!out.empty()) expect_values(out[0], {0, 2, 4, 4});
  // Downsampling by 0.5, nearest: positions 0 and 2 (PyTorch's floor; ONNX's version converter).
  c = upsample_case(9, "nearest", {4}, {10, 11, 12, 13}, {0.5f});
  out = run_ok(c, "naive");
  if (!out.empty()) expect_values(out[0], {10, 12});
  // Resize at opset 10 is the same op under its new name.
  OpCase r = upsample_case(10, "linear", {1, 1, 1, 2}, {0, 4}, {1, 1, 1, 2});
  r.node.op_type = "Resize";
  out = run_ok(r, "naive");
  if (!out.empty()) expect_values(out[0], {0, 2, 4, 4});
  // Upsample is deprecated from opset 10; cubic never was one of its modes.
  c = upsample_case(10, "nearest", {4}, {10, 11, 12, 13}, {2});
  EXPECT_NE(refusal(c).find("Mosaic implements Upsample versions 7 to 9"), std::string::npos) << refusal(c);
  c = upsample_case(9, "cubic", {4}, {10, 11, 12, 13}, {2});
  EXPECT_NE(refusal(c).find("unknown mode 'cubic'"), std::string::npos) << refusal(c);
  c = upsample_case(7, "nearest", {4}, {10, 11, 12, 13}, {});
  EXPECT_NE(refusal(c).find("needs scales"), std::string::npos) << refusal(c);
}

// ONNX Runtime's outputs for Upsample 7 and 9 and Resize 10 (tests/conformance/legacy_resize/
// make_cases.py): nearest and linear, integer and fractional scales, linear downsampling.
TEST(Upsample, MatchesOnnxRuntimeOnEveryCpuBackend) {
  const std::string dir = std::string(MOSAIC_SOURCE_DIR) + "/tests/conformance/legacy_resize/node";
  const CmdResult r = mosaic("verify " + dir + " --backend all --quiet");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("naive 8 passed, 0 failed, 0 skipped;  im2col 8 passed, 0 failed, 0 skipped;  onednn 8 passed, "
                       "0 failed, 0 skipped;"),
            std::string::npos)
      << r.out;
}

TEST(Scatter, IsScatterElementsWithoutReduction) {
  OpCase c;
  c.label = "Scatter";
  c.node = make_node("Scatter", {{"axis", A::of_int(1)}});
  c.inputs = {Tensor::from_f32({2, 3}, {0, 0, 0, 0, 0, 0}), Tensor::from_i64({2, 1}, {2, 0}),
              Tensor::from_f32({2, 1}, {5, 7})};
  c.opset = 9;
  for (const char* b : kCpuBackends) {
    auto out = run_ok(c, b);
    if (!out.empty()) expect_values(out[0], {0, 0, 5, 7, 0, 0});
  }
  c.node.attrs["reduction"] = A::of_string("add");
  EXPECT_NE(refusal(c).find("Scatter has no reduction"), std::string::npos) << refusal(c);
  c.node.attrs.erase("reduction");
  c.opset = 11;
  EXPECT_NE(refusal(c).find("Mosaic implements Scatter versions 9 to 10"), std::string::npos) << refusal(c);
}

// A cache [2 entries, 1 head, 4 positions, 1] of int8 (bytes moved whatever the type), two
// steps of update per entry.
OpCase tensor_scatter_case(const std::string& mode, std::vector<int64_t> write) {
  OpCase c;
  c.label = "TensorScatter";
  c.node = make_node("TensorScatter", {{"mode", A::of_string(mode)}});
  Tensor cache = Tensor::empty({DType::kI8, {2, 1, 4, 1}}), update = Tensor::empty({DType::kI8, {2, 1, 2, 1}});
  for (int i = 0; i < 8; ++i) static_cast<int8_t*>(cache.data())[i] = static_cast<int8_t>(i);
  for (int i = 0; i < 4; ++i) static_cast<int8_t*>(update.data())[i] = static_cast<int8_t>(-10 - i);
  c.inputs = {cache, update, Tensor::from_i64({2}, write)};
  c.opset = 24;
  return c;
}

TEST(TensorScatter, WritesEachEntrysUpdateFromItsIndexLinearOrCircular) {
  for (const char* b : kCpuBackends) {
    auto out = run_ok(tensor_scatter_case("linear", {1, 2}), b);
    if (!out.empty()) expect_values(out[0], {0, -10, -11, 3, 4, 5, -12, -13});
    out = run_ok(tensor_scatter_case("circular", {3, 6}), b);  // 3, 0 and 6 % 4 = 2, 3
    if (!out.empty()) expect_values(out[0], {-11, 1, 2, -10, 4, 5, -12, -13});
    out = run_ok(tensor_scatter_case("circular", {-1, 2}), b);  // -1 mod 4 = 3 (numpy's modulo)
    if (!out.empty()) expect_values(out[0], {-11, 1, 2, -10, 4, 5, -12, -13});
  }
  // Without write_indices every entry writes from 0.
  OpCase c = tensor_scatter_case("linear", {0, 0});
  c.inputs.pop_back();
  auto out = run_ok(c, "naive");
  if (!out.empty()) expect_values(out[0], {-10, -11, 2, 3, -12, -13, 6, 7});
  // Past the end in linear mode: refused at run time, naming the entry.
  std::string why = refusal(tensor_scatter_case("linear", {0, 3}));
  EXPECT_NE(why.find("write_indices[1] = 3 with 2 steps to write runs outside the cache's 4 positions"),
            std::string::npos)
      << why;
  why = refusal(tensor_scatter_case("linear", {-1, 0}));
  EXPECT_NE(why.find("write_indices[0] = -1"), std::string::npos) << why;
  c = tensor_scatter_case("linear", {0, 0});
  c.node.attrs["axis"] = A::of_int(0);
  EXPECT_NE(refusal(c).find("axis 0 is the batch axis"), std::string::npos) << refusal(c);
  c = tensor_scatter_case("ring", {0, 0});
  EXPECT_NE(refusal(c).find("mode 'ring'"), std::string::npos) << refusal(c);
  c = tensor_scatter_case("linear", {0, 0});
  std::swap(c.inputs[0], c.inputs[1]);  // an update longer than the cache
  EXPECT_NE(refusal(c).find("no longer than the cache's"), std::string::npos) << refusal(c);
}

TEST(Det, MatchesHandComputedDeterminants) {
  OpCase c;
  c.label = "Det";
  c.node = make_node("Det");
  // [[1, 2], [3, 4]] = -2; a pivot needed ([[0, 1], [1, 0]] = -1); proportional rows: 0.
  c.inputs = {Tensor::from_f32({3, 2, 2}, {1, 2, 3, 4, 0, 1, 1, 0, 2, 4, 1, 2})};
  c.opset = 22;
  auto out = run_ok(c, "naive");
  if (!out.empty()) {
    EXPECT_EQ(out[0].shape(), (Shape{3}));
    expect_values(out[0], {-2, -1, 0});
  }
  // 3 x 3 with a zero first pivot: 0 (50 - 48) - 2 (40 - 42) + 3 (32 - 35) = 4 - 9.
  c.inputs = {Tensor::from_f32({3, 3}, {0, 2, 3, 4, 5, 6, 7, 8, 10})};
  out = run_ok(c, "naive");
  if (!out.empty()) expect_values(out[0], {-5}, 1e-5);
  c.inputs = {Tensor::from_f32({2, 3}, {1, 2, 3, 4, 5, 6})};
  EXPECT_NE(refusal(c).find("square matrices"), std::string::npos) << refusal(c);
}

TEST(Compress, AConstantConditionIsPlannedAtLoadTimeOnEveryBackend) {
  OpCase c;
  c.label = "Compress";
  c.node = make_node("Compress", {{"axis", A::of_int(1)}});
  Tensor cond = Tensor::empty({DType::kBool, {2}});  // shorter than the axis: slice 2 dropped
  cond.u8()[0] = 0;
  cond.u8()[1] = 1;
  c.inputs = {Tensor::from_f32({2, 3}, {1, 2, 3, 4, 5, 6}), cond};
  c.is_const = {false, true};
  for (const char* b : kCpuBackends) {
    auto out = run_ok(c, b);
    if (!out.empty()) {
      EXPECT_EQ(out[0].shape(), (Shape{2, 1}));
      expect_values(out[0], {2, 5});
    }
  }
  c.node.attrs.erase("axis");  // flattened
  auto out = run_ok(c, "naive");
  if (!out.empty()) expect_values(out[0], {2});
  Tensor long_cond = Tensor::empty({DType::kBool, {7}});
  for (int i = 0; i < 7; ++i) long_cond.u8()[i] = 1;
  c.inputs[1] = long_cond;
  EXPECT_NE(refusal(c).find("condition has 7 values for 6 elements"), std::string::npos) << refusal(c);
}

TEST(Compress, ARunTimeConditionIsPlannedFromGivenInputsAndCheckedEachRun) {
  Graph g;
  g.source = "compress.onnx";
  g.opset = 13;
  g.inputs.push_back(ValueInfo{"x", DType::kF32, {4}, {}, true});
  g.inputs.push_back(ValueInfo{"keep", DType::kBool, {4}, {}, true});
  add_node(g, make_node("Compress", {{"axis", A::of_int(0)}}), {"x", "keep"}, {"y"}, "select");
  g.outputs.push_back(ValueInfo{"y", DType::kF32, {}, {}, false});
  auto bools = [](std::vector<int> v) {
    Tensor t = Tensor::empty({DType::kBool, {static_cast<int64_t>(v.size())}});
    for (size_t i = 0; i < v.size(); ++i) t.u8()[i] = static_cast<uint8_t>(v[i]);
    return t;
  };
  const Tensor x = Tensor::from_f32({4}, {1, 2, 3, 4});
  Graph unplanned = g;
  auto refused = prepare_graph(unplanned, builtin_registry(), PrepareOptions{});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("depends on condition's values"), std::string::npos);
  PrepareOptions po;
  po.specialise = [&](const Graph&) -> Expected<std::vector<Tensor>> { return std::vector<Tensor>{x, bools({1, 0, 0, 1})}; };
  ASSERT_TRUE(prepare_graph(g, builtin_registry(), po).ok());
  auto plan = Plan::build(g, Placement::all_on("onednn"), builtin_registry());
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  std::vector<Tensor> out;
  ASSERT_TRUE(plan.value()->run({x, bools({0, 1, 1, 0})}, &out).is_ok());
  expect_values(out[0], {2, 3});
  const Status st = plan.value()->run({x, bools({1, 1, 1, 0})}, &out);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("'select' (Compress)"), std::string::npos) << st.message();
}

OpCase unique_case(const Shape& shape, std::vector<float> x, int sorted, int64_t axis = -100) {
  OpCase c;
  c.label = "Unique";
  c.node = make_node("Unique", {{"sorted", A::of_int(sorted)}});
  if (axis != -100) c.node.attrs["axis"] = A::of_int(axis);
  c.node.outputs = {"y", "indices", "inverse", "counts"};
  c.inputs = {Tensor::from_f32(shape, std::move(x))};
  c.is_const = {true};  // planned at load time (the value decides the length)
  c.opset = 11;
  return c;
}

TEST(Unique, SortedInOrderOfOccurrenceAndAlongAnAxisByHand) {
  auto out = run_ok(unique_case({6}, {2, 1, 1, 3, 4, 3}, 1), "naive");
  ASSERT_EQ(out.size(), 4u);
  expect_values(out[0], {1, 2, 3, 4});
  expect_values(out[1], {1, 0, 3, 4});
  expect_values(out[2], {1, 0, 0, 2, 3, 2});
  expect_values(out[3], {2, 1, 2, 1});
  out = run_ok(unique_case({6}, {2, 1, 1, 3, 4, 3}, 0), "naive");
  ASSERT_EQ(out.size(), 4u);
  expect_values(out[0], {2, 1, 3, 4});
  expect_values(out[1], {0, 1, 3, 4});
  expect_values(out[2], {0, 1, 1, 2, 3, 2});
  expect_values(out[3], {1, 2, 2, 1});
  // Rows along axis 0, compared element by element: [2, 0] < [2, 1]; the repeated row once.
  out = run_ok(unique_case({3, 2}, {2, 1, 2, 0, 2, 1}, 1, 0), "naive");
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0].shape(), (Shape{2, 2}));
  expect_values(out[0], {2, 0, 2, 1});
  expect_values(out[2], {1, 0, 1});
  expect_values(out[3], {1, 2});
  // NaNs are one value, after every number (numpy's unique).
  const float nan = std::numeric_limits<float>::quiet_NaN();
  out = run_ok(unique_case({3}, {nan, 1, nan}, 1), "naive");
  ASSERT_EQ(out.size(), 4u);
  ASSERT_EQ(out[0].numel(), 2);
  EXPECT_EQ(out[0].f32()[0], 1.f);
  EXPECT_TRUE(std::isnan(out[0].f32()[1]));
  expect_values(out[3], {1, 2});
}

OpCase col2im_case(const Shape& image, const Shape& block, const Shape& input, std::map<std::string, Attribute> attrs) {
  OpCase c;
  c.label = "Col2Im";
  c.node = make_node("Col2Im", std::move(attrs));
  c.inputs = {Tensor::from_f32(input, std::vector<float>(static_cast<size_t>(shape_numel(input)), 1.f)),
              Tensor::from_i64({static_cast<int64_t>(image.size())}, image),
              Tensor::from_i64({static_cast<int64_t>(block.size())}, block)};
  c.is_const = {false, true, true};
  c.opset = 18;
  return c;
}

TEST(Col2Im, SumsEachBlockBackIntoTheImage) {
  // 2 x 2 blocks over a 3 x 3 image at stride 1: each pixel gets as many ones as blocks cover it.
  auto out = run_ok(col2im_case({3, 3}, {2, 2}, {1, 4, 4}, {}), "naive");
  if (!out.empty()) {
    EXPECT_EQ(out[0].shape(), (Shape{1, 1, 3, 3}));
    expect_values(out[0], {1, 2, 1, 2, 4, 2, 1, 2, 1});
  }
  // Padded by 1: 3 x 3 block positions, every pixel of the 2 x 2 image under 4 of them; two
  // channels of columns.
  out = run_ok(col2im_case({2, 2}, {2, 2}, {1, 8, 9}, {{"pads", A::of_ints({1, 1, 1, 1})}}), "naive");
  if (!out.empty()) expect_values(out[0], {4, 4, 4, 4, 4, 4, 4, 4});
  // Stride 2 and dilation 2 along one axis: blocks at 0 and 2 reach 0, 2 and 2, 4.
  out = run_ok(col2im_case({5}, {2}, {1, 2, 2}, {{"strides", A::of_ints({2})}, {"dilations", A::of_ints({2})}}), "naive");
  if (!out.empty()) expect_values(out[0], {1, 0, 2, 0, 1});
  const std::string why = refusal(col2im_case({3, 3}, {2, 2}, {1, 4, 5}, {}));
  EXPECT_NE(why.find("must be [N, C * 4, 4] for blocks [2,2] over image [3,3]"), std::string::npos) << why;
}

TEST(AffineGrid, TransformsTheNormalisedCoordinatesXFirst) {
  OpCase c;
  c.label = "AffineGrid";
  c.node = make_node("AffineGrid");
  c.inputs = {Tensor::from_f32({1, 2, 3}, {2, 0, 0.5f, 0, -1, 0}), Tensor::from_i64({4}, {1, 1, 2, 3})};
  c.is_const = {false, true};
  c.opset = 20;
  // Point centres: x -2/3, 0, 2/3 along W; y -1/2, 1/2 along H. (2x + 0.5, -y) each.
  auto out = run_ok(c, "naive");
  if (!out.empty()) {
    EXPECT_EQ(out[0].shape(), (Shape{1, 2, 3, 2}));
    expect_values(out[0], {-4.0 / 3 + 0.5, 0.5, 0.5, 0.5, 4.0 / 3 + 0.5, 0.5, -4.0 / 3 + 0.5, -0.5, 0.5, -0.5, 4.0 / 3 + 0.5,
                           -0.5},
                  1e-6);
  }
  c.node.attrs["align_corners"] = A::of_int(1);  // the corners: x -1, 0, 1; y -1, 1
  out = run_ok(c, "naive");
  if (!out.empty()) expect_values(out[0], {-1.5, 1, 0.5, 1, 2.5, 1, -1.5, -1, 0.5, -1, 2.5, -1}, 1e-6);
  c.inputs[1] = Tensor::from_i64({5}, {1, 1, 2, 2, 3});  // 3-D needs a 3 x 4 theta
  EXPECT_NE(refusal(c).find("theta [1,2,3] must be [1, 3, 4]"), std::string::npos) << refusal(c);
}

TEST(MaxUnpool, WritesEachValueAtItsIndexAndRefusesOnesOutside) {
  OpCase c;
  c.label = "MaxUnpool";
  c.node = make_node("MaxUnpool", {{"kernel_shape", A::of_ints({2, 2})}, {"strides", A::of_ints({2, 2})}});
  c.inputs = {Tensor::from_f32({1, 1, 2, 2}, {1, 2, 3, 4}), Tensor::from_i64({1, 1, 2, 2}, {0, 3, 9, 15})};
  c.opset = 11;
  std::vector<double> want(16, 0);
  want[0] = 1, want[3] = 2, want[9] = 3, want[15] = 4;
  auto out = run_ok(c, "naive");
  if (!out.empty()) expect_values(out[0], want);
  // output_shape 5 x 5: the 4 x 4 the indices address kept at its start (ONNX's reference).
  c.inputs.push_back(Tensor::from_i64({4}, {1, 1, 5, 5}));
  c.is_const = {false, false, true};
  want.assign(25, 0);
  want[0] = 1, want[3] = 2, want[11] = 3, want[18] = 4;
  out = run_ok(c, "naive");
  if (!out.empty()) expect_values(out[0], want);
  c.inputs[2] = Tensor::from_i64({4}, {1, 1, 3, 5});
  EXPECT_NE(refusal(c).find("must keep N and C and hold the unpooled [1,1,4,4]"), std::string::npos) << refusal(c);
  c.inputs.pop_back();
  c.is_const.clear();
  c.inputs[1] = Tensor::from_i64({1, 1, 2, 2}, {0, 3, 9, 16});
  EXPECT_NE(refusal(c).find("I[3] = 16 is outside the unpooled [1,1,4,4]'s 16 elements"), std::string::npos)
      << refusal(c);
}

TEST(DeformConv, ShiftedTapsSampleBilinearlyAndZeroOffsetsAreAConvolution) {
  // A 1 x 1 kernel shifted half a column right: the mean of two neighbours, the right one
  // outside the image counting 0; a mask of 0.5 and a bias of 1.
  OpCase c;
  c.label = "DeformConv";
  c.node = make_node("DeformConv");
  std::vector<float> x(9), shift(18, 0.f);
  for (int i = 0; i < 9; ++i) x[static_cast<size_t>(i)] = static_cast<float>(i);
  for (int i = 9; i < 18; ++i) shift[static_cast<size_t>(i)] = 0.5f;  // channel 1: the column shift
  c.inputs = {Tensor::from_f32({1, 1, 3, 3}, x), Tensor::from_f32({1, 1, 1, 1}, {1}), Tensor::from_f32({1, 2, 3, 3}, shift),
              Tensor::from_f32({1}, {1}), Tensor::from_f32({1, 1, 3, 3}, std::vector<float>(9, 0.5f))};
  c.opset = 19;
  auto out = run_ok(c, "naive");
  if (!out.empty()) expect_values(out[0], {1.25, 1.75, 1.5, 2.75, 3.25, 2.25, 4.25, 4.75, 3}, 1e-6);
  // Two offset groups, a channel each: the second's taps shifted one column right (its
  // second output reads past the edge: 0), the first's not.
  OpCase groups;
  groups.node = make_node("DeformConv", {{"offset_group", A::of_int(2)}});
  groups.inputs = {Tensor::from_f32({1, 2, 1, 2}, {1, 2, 10, 20}), Tensor::from_f32({1, 2, 1, 1}, {1, 1}),
                   Tensor::from_f32({1, 4, 1, 2}, {0, 0, 0, 0, 0, 0, 1, 1})};
  groups.opset = 19;
  out = run_ok(groups, "naive");
  if (!out.empty()) expect_values(out[0], {21, 2});
  // Zero offsets, no mask: the naive Conv's answer (grouped, strided, dilated, padded).
  const std::map<std::string, Attribute> geometry = {{"group", A::of_int(2)},
                                                     {"strides", A::of_ints({2, 1})},
                                                     {"dilations", A::of_ints({1, 2})},
                                                     {"pads", A::of_ints({1, 0, 1, 2})}};
  OpCase conv;
  conv.node = make_node("Conv", geometry);
  conv.inputs = {random_tensor({2, 4, 5, 6}, 1), random_tensor({6, 2, 3, 2}, 2), random_tensor({6}, 3)};
  conv.is_const = {false, true, true};
  auto want = run_ok(conv, "naive");
  OpCase deform;
  deform.node = make_node("DeformConv", geometry);
  deform.node.attrs["offset_group"] = A::of_int(2);
  ASSERT_FALSE(want.empty());
  const Shape& o = want[0].shape();  // [2, 6, 3, 6]
  const Shape offsets{2, 2 * 3 * 2 * 2, o[2], o[3]};
  deform.inputs = {conv.inputs[0], conv.inputs[1], Tensor::from_f32(offsets, std::vector<float>(shape_numel(offsets), 0.f)),
                   conv.inputs[2]};
  deform.opset = 19;
  out = run_ok(deform, "naive");
  if (!out.empty()) expect_values(out[0], values_of(want[0]), 1e-5);
  deform.inputs[2] = Tensor::from_f32({2, 12, o[2], o[3]}, std::vector<float>(static_cast<size_t>(24 * o[2] * o[3]), 0.f));
  const std::string why = refusal(deform);
  EXPECT_NE(why.find("offset [2,12,3,6] must be [2,24,3,6]"), std::string::npos) << why;
}

// One batch entry, two tokens, one head, d_k 2, d_v 1, scale 1: q = e0 then e1, k = (1, 2)
// then (3, 4), v = 5 then 6.
OpCase linear_attention_case(const std::string& rule) {
  OpCase c;
  c.label = "LinearAttention";
  c.node = make_node("LinearAttention", {{"q_num_heads", A::of_int(1)},
                                         {"kv_num_heads", A::of_int(1)},
                                         {"scale", A::of_float(1)},
                                         {"update_rule", A::of_string(rule)}});
  c.node.outputs = {"y", "state"};
  c.inputs = {Tensor::from_f32({1, 2, 2}, {1, 0, 0, 1}), Tensor::from_f32({1, 2, 2}, {1, 2, 3, 4}),
              Tensor::from_f32({1, 2, 1}, {5, 6}), Tensor(), Tensor(), Tensor()};
  const float half = std::log(0.5f);
  if (rule == "gated" || rule == "gated_delta") c.inputs[4] = Tensor::from_f32({1, 2, 1}, {half, half});
  if (rule == "delta" || rule == "gated_delta") c.inputs[5] = Tensor::from_f32({1, 2, 1}, {1, 0.5f});
  c.opset = 27;
  return c;
}

TEST(LinearAttention, EachUpdateRuleByHand) {
  // linear: S = (5, 10), read 5; S = (5 + 18, 10 + 24), read 34.
  auto out = run_ok(linear_attention_case("linear"), "naive");
  ASSERT_EQ(out.size(), 2u);
  expect_values(out[0], {5, 34}, 1e-5);
  expect_values(out[1], {23, 34}, 1e-5);
  // gated, exp(g) = 1/2: S = (5, 10); S = (2.5 + 18, 5 + 24), read 29.
  out = run_ok(linear_attention_case("gated"), "naive");
  if (out.size() == 2) expect_values(out[0], {5, 29}, 1e-5);
  // delta, beta 1 then 1/2: S = (5, 10); S^T k = 55, v' = (6 - 55) / 2, S += (3, 4) v', read -88.
  out = run_ok(linear_attention_case("delta"), "naive");
  if (out.size() == 2) expect_values(out[1], {-68.5, -88}, 1e-5);
  // gated_delta: the correction reads the decayed state (2.5, 5): S^T k = 27.5, v' = -10.75.
  out = run_ok(linear_attention_case("gated_delta"), "naive");
  if (out.size() == 2) expect_values(out[1], {2.5 - 32.25, 5 - 43}, 1e-5);
  // Carried on from a past state: the linear rule adds onto it.
  OpCase c = linear_attention_case("linear");
  c.inputs[3] = Tensor::from_f32({1, 1, 2, 1}, {100, 200});
  out = run_ok(c, "naive");
  if (out.size() == 2) expect_values(out[1], {123, 234}, 1e-5);
  // Two query heads share one key/value head; the default scale 1 / sqrt(d_k).
  OpCase gqa;
  gqa.node = make_node("LinearAttention", {{"q_num_heads", A::of_int(2)},
                                           {"kv_num_heads", A::of_int(1)},
                                           {"update_rule", A::of_string("linear")}});
  gqa.inputs = {Tensor::from_f32({1, 1, 4}, {1, 0, 0, 1}), Tensor::from_f32({1, 1, 2}, {1, 2}), Tensor::from_f32({1, 1, 1}, {5})};
  gqa.opset = 27;
  out = run_ok(gqa, "naive");
  if (!out.empty()) expect_values(out[0], {5 / std::sqrt(2.0), 10 / std::sqrt(2.0)}, 1e-5);
}

TEST(LinearAttention, RefusesInconsistentInputsNamingTheNode) {
  OpCase c = linear_attention_case("linear");
  c.inputs[4] = Tensor::from_f32({1, 2, 1}, {0, 0});
  EXPECT_NE(refusal(c).find("update_rule 'linear' takes no decay"), std::string::npos) << refusal(c);
  c = linear_attention_case("gated_delta");
  c.inputs[5] = Tensor();
  EXPECT_NE(refusal(c).find("update_rule 'gated_delta' needs beta"), std::string::npos) << refusal(c);
  c = linear_attention_case("linear");
  c.node.attrs["q_num_heads"] = A::of_int(3);
  c.node.attrs["kv_num_heads"] = A::of_int(2);
  EXPECT_NE(refusal(c).find("q_num_heads 3 must be a positive multiple of kv_num_heads 2"), std::string::npos)
      << refusal(c);
  c = linear_attention_case("linear");
  c.inputs[3] = Tensor::from_f32({1, 1, 1, 2}, {0, 0});
  EXPECT_NE(refusal(c).find("past_state [1,1,1,2] must be [1,1,2,1]"), std::string::npos) << refusal(c);
  // 8 MB of query, key and value asking for a 2^20 x 2^20 state: refused before any work.
  c = linear_attention_case("linear");
  c.inputs = {Tensor::from_f32({1, 1, 1 << 20}, std::vector<float>(1 << 20, 0.f)),
              Tensor::from_f32({1, 1, 1 << 20}, std::vector<float>(1 << 20, 0.f)),
              Tensor::from_f32({1, 1, 1 << 20}, std::vector<float>(1 << 20, 0.f)), Tensor(), Tensor(), Tensor()};
  EXPECT_NE(refusal(c).find("more than 2^40 bytes of state or steps"), std::string::npos) << refusal(c);
}

TEST(CausalConvWithState, ContinuesThePastStateAndKeepsTheLastPositions) {
  OpCase c;
  c.label = "CausalConvWithState";
  c.node = make_node("CausalConvWithState");
  c.node.outputs = {"y", "state"};
  c.inputs = {Tensor::from_f32({1, 1, 3}, {1, 2, 3}), Tensor::from_f32({1, 1, 2}, {1, 2}), Tensor(),
              Tensor::from_f32({1, 1, 1}, {10})};
  c.opset = 27;
  // [10 | 1 2 3] with weights (1, 2): 10 + 2, 1 + 4, 2 + 6; the state keeps 3.
  auto out = run_ok(c, "naive");
  ASSERT_EQ(out.size(), 2u);
  expect_values(out[0], {12, 5, 8});
  expect_values(out[1], {3});
  // A bias and the fused SiLU; no past: zeros before the input.
  c.node.attrs["activation"] = A::of_string("silu");
  c.inputs[2] = Tensor::from_f32({1}, {1});
  c.inputs[3] = Tensor();
  auto silu = [](double v) { return v / (1 + std::exp(-v)); };
  out = run_ok(c, "naive");
  if (out.size() == 2) expect_values(out[0], {silu(3), silu(6), silu(9)}, 1e-5);
  c.inputs[3] = Tensor::from_f32({1, 1, 2}, {0, 0});
  EXPECT_NE(refusal(c).find("past_state [1,1,2] must be [1,1,1]"), std::string::npos) << refusal(c);
  c.inputs[3] = Tensor();
  c.node.attrs["activation"] = A::of_string("gelu");
  EXPECT_NE(refusal(c).find("activation 'gelu'"), std::string::npos) << refusal(c);
  c.node.attrs.erase("activation");  // 4 MB of input and of weight: 2^40 multiply-adds
  c.inputs = {Tensor::from_f32({1, 1, 1 << 20}, std::vector<float>(1 << 20, 0.f)),
              Tensor::from_f32({1, 1, (1 << 20) + 1}, std::vector<float>((1 << 20) + 1, 0.f)), Tensor(), Tensor()};
  EXPECT_NE(refusal(c).find("more than 2^40 multiply-adds"), std::string::npos) << refusal(c);
}

TEST(MelWeightMatrix, TrianglesPeakAtOneAndTheEdgesMustFitTheSpectrum) {
  OpCase c;
  c.label = "MelWeightMatrix";
  c.node = make_node("MelWeightMatrix");
  c.inputs = {Tensor::from_i64({}, {8}), Tensor::from_i64({}, {64}), Tensor::from_i64({}, {16000}),
              Tensor::from_f32({}, {100}), Tensor::from_f32({}, {7000})};
  c.is_const = {true, true, true, true, true};
  c.opset = 17;
  auto out = run_ok(c, "naive");
  ASSERT_FALSE(out.empty());
  ASSERT_EQ(out[0].shape(), (Shape{33, 8}));
  for (int64_t mel = 0; mel < 8; ++mel) {  // every filter a triangle with a peak of 1
    double peak = 0;
    for (int64_t bin = 0; bin < 33; ++bin) {
      const double v = out[0].get(bin * 8 + mel);
      EXPECT_TRUE(v >= 0 && v <= 1) << bin << ", " << mel;
      peak = std::max(peak, v);
    }
    EXPECT_EQ(peak, 1.0) << "filter " << mel;
  }
  c.inputs[4] = Tensor::from_f32({}, {12000});  // above the Nyquist frequency: past the last bin
  EXPECT_NE(refusal(c).find("falls outside the 33 spectrum bins"), std::string::npos) << refusal(c);
  c.inputs[4] = Tensor::from_f32({}, {50});
  EXPECT_NE(refusal(c).find("0 <= lower_edge_hertz < upper_edge_hertz"), std::string::npos) << refusal(c);
}

}  // namespace
}  // namespace mosaic::test
