// Floor, Ceil, Round, Sign, IsNaN, IsInf, Mod (operators/pointwise.hpp), CumSum, Tile and
// GatherElements (operators/indexing.hpp) against hand-computed values and ONNX's own
// examples; their gradients against hand-computed sums. Every backend's agreement with the
// oracle is in tests/test_backends.cpp's cases; the ONNX node tests are ctest's.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "test_util.hpp"

namespace mosaic::test {
namespace {

using A = Attribute;

std::vector<double> run_values(const OpCase& c, const std::string& backend = "naive") {
  std::vector<Tensor> out;
  Status st = run_on(c, backend, &out);
  EXPECT_TRUE(st.is_ok()) << c.label << ": " << st.to_string();
  if (!st.is_ok()) return {};
  std::vector<double> v;
  for (int64_t i = 0; i < out[0].numel(); ++i) v.push_back(out[0].get(i));
  return v;
}

OpCase unary(const std::string& op, Tensor x, std::map<std::string, Attribute> attrs = {}) {
  OpCase c;
  c.label = op;
  c.node = make_node(op, std::move(attrs));
  c.inputs = {std::move(x)};
  return c;
}

TEST(Pointwise, RoundingSignAndClassificationByHand) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const Tensor x = Tensor::from_f32({8}, {-2.5f, -1.5f, -0.5f, 0.5f, 1.5f, 2.5f, 1.7f, -1.2f});
  EXPECT_EQ(run_values(unary("Round", x)), (std::vector<double>{-2, -2, -0., 0, 2, 2, 2, -1}));  // halves to even
  EXPECT_EQ(run_values(unary("Floor", x)), (std::vector<double>{-3, -2, -1, 0, 1, 2, 1, -2}));
  EXPECT_EQ(run_values(unary("Ceil", x)), (std::vector<double>{-2, -1, -0., 1, 2, 3, 2, -1}));
  EXPECT_EQ(run_values(unary("Sign", x)), (std::vector<double>{-1, -1, -1, 1, 1, 1, 1, -1}));
  EXPECT_EQ(run_values(unary("Sign", Tensor::from_i64({3}, {-7, 0, INT64_MAX}))), (std::vector<double>{-1, 0, 1}));
  const Tensor special = Tensor::from_f32({4}, {nan, inf, -inf, 1.f});
  EXPECT_EQ(run_values(unary("IsNaN", special)), (std::vector<double>{1, 0, 0, 0}));
  EXPECT_EQ(run_values(unary("IsInf", special)), (std::vector<double>{0, 1, 1, 0}));
  EXPECT_EQ(run_values(unary("IsInf", special, {{"detect_negative", A::of_int(0)}})), (std::vector<double>{0, 1, 0, 0}));
  EXPECT_EQ(run_values(unary("IsInf", special, {{"detect_positive", A::of_int(0)}})), (std::vector<double>{0, 0, 1, 0}));
  // Floor of a float32 is refused on int64 with the reason, not computed through a float.
  std::vector<Tensor> out;
  Status st = run_on(unary("Floor", Tensor::from_i64({1}, {3})), "naive", &out);
  EXPECT_EQ(st.code(), StatusCode::kUnsupported);
  EXPECT_NE(st.message().find("Floor of int64"), std::string::npos) << st.message();
}

TEST(Pointwise, ModTakesTheDivisorsOrTheDividendsSign) {
  OpCase c;
  c.label = "mod";
  c.node = make_node("Mod");
  c.inputs = {Tensor::from_i64({6}, {-4, 7, 5, -3, INT64_MIN, 9}), Tensor::from_i64({6}, {3, -3, -2, 2, -1, 0})};
  // Python's %: -4 % 3 = 2, 7 % -3 = -2, 5 % -2 = -1, -3 % 2 = 1; INT64_MIN % -1 = 0; by 0: 0.
  EXPECT_EQ(run_values(c), (std::vector<double>{2, -2, -1, 1, 0, 0}));
  c.node = make_node("Mod", {{"fmod", A::of_int(1)}});  // C's %: the dividend's sign
  EXPECT_EQ(run_values(c), (std::vector<double>{-1, 1, 1, -1, 0, 0}));
  c.inputs = {Tensor::from_f32({4}, {-4.5f, 7.f, 5.5f, -3.f}), Tensor::from_f32({1}, {2.f})};  // broadcast
  EXPECT_EQ(run_values(c), (std::vector<double>{-0.5, 1, 1.5, -1}));
  c.node = make_node("Mod");  // numpy's mod on floats
  EXPECT_EQ(run_values(c), (std::vector<double>{1.5, 1, 1.5, 1}));
}

TEST(Indexing, CumSumByHand) {
  OpCase c;
  c.label = "cumsum";
  c.node = make_node("CumSum");
  c.inputs = {Tensor::from_f32({2, 3}, {1, 2, 3, 4, 5, 6}), Tensor::from_i64({}, {1})};
  c.is_const = {false, true};
  EXPECT_EQ(run_values(c), (std::vector<double>{1, 3, 6, 4, 9, 15}));
  c.node = make_node("CumSum", {{"exclusive", A::of_int(1)}, {"reverse", A::of_int(1)}});
  EXPECT_EQ(run_values(c), (std::vector<double>{5, 3, 0, 11, 6, 0}));
  c.node = make_node("CumSum");
  c.inputs[1] = Tensor::from_i64({1}, {-2});  // axis 0
  EXPECT_EQ(run_values(c), (std::vector<double>{1, 2, 3, 5, 7, 9}));
  c.inputs[0] = Tensor::from_i64({2, 2}, {INT64_MAX, 1, 1, 1});  // int64 wraps as numpy's
  EXPECT_EQ(run_values(c)[2], static_cast<double>(INT64_MIN));
}

TEST(Indexing, TileAndGatherElementsAsOnnxsExamples) {
  OpCase t;
  t.label = "tile";
  t.node = make_node("Tile");
  t.inputs = {Tensor::from_f32({2, 2}, {0, 1, 2, 3}), Tensor::from_i64({2}, {2, 2})};
  t.is_const = {false, true};
  EXPECT_EQ(run_values(t), (std::vector<double>{0, 1, 0, 1, 2, 3, 2, 3, 0, 1, 0, 1, 2, 3, 2, 3}));
  t.inputs[1] = Tensor::from_i64({2}, {1, 0});
  EXPECT_TRUE(run_values(t).empty());
  OpCase g;
  g.label = "gather_elements";
  g.node = make_node("GatherElements", {{"axis", A::of_int(1)}});
  g.inputs = {Tensor::from_f32({2, 2}, {1, 2, 3, 4}), Tensor::from_i64({2, 2}, {0, 0, 1, 0})};
  EXPECT_EQ(run_values(g), (std::vector<double>{1, 1, 4, 3}));
  g.node = make_node("GatherElements");  // axis 0, negative indices, fewer rows than the data
  g.inputs = {Tensor::from_f32({3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9}), Tensor::from_i64({2, 3}, {-1, -2, 0, 2, 0, 0})};
  EXPECT_EQ(run_values(g), (std::vector<double>{7, 5, 3, 7, 2, 3}));
  g.inputs[1] = Tensor::from_i64({2, 3}, {0, 3, 0, 0, 0, 0});
  std::vector<Tensor> out;
  Status st = run_on(g, "naive", &out);
  EXPECT_NE(st.message().find("'GatherElements_test' (GatherElements): index 3 (element 1) is outside the gathered axis of size 3"),
            std::string::npos)
      << st.to_string();
}

TEST(Indexing, TopKBreaksTiesByTheLowerIndex) {
  OpCase c;
  c.label = "topk";
  c.node = make_node("TopK");
  c.node.outputs = {"values", "indices"};
  c.inputs = {Tensor::from_f32({6}, {3, 1, 3, 2, 3, 1}), Tensor::from_i64({1}, {4})};
  c.is_const = {false, true};
  std::vector<Tensor> out;
  ASSERT_TRUE(run_on(c, "naive", &out).is_ok());
  EXPECT_EQ(out[1].to_i64_vector(), (std::vector<int64_t>{0, 2, 4, 3}));
  c.node = make_node("TopK", {{"largest", A::of_int(0)}});
  c.node.outputs = {"values", "indices"};
  ASSERT_TRUE(run_on(c, "naive", &out).is_ok());
  EXPECT_EQ(out[1].to_i64_vector(), (std::vector<int64_t>{1, 5, 3, 0}));
  c.inputs[1] = Tensor::from_i64({1}, {7});
  Status st = run_on(c, "naive", &out);
  EXPECT_NE(st.message().find("K = 7 is outside [0, 6]"), std::string::npos) << st.to_string();
}

TEST(Indexing, ScattersByHand) {
  OpCase c;
  c.label = "scatter";
  c.node = make_node("ScatterElements", {{"reduction", A::of_string("add")}});
  c.inputs = {Tensor::from_f32({3}, {1, 2, 3}), Tensor::from_i64({3}, {0, 0, -1}), Tensor::from_f32({3}, {10, 20, 30})};
  c.opset = 18;
  EXPECT_EQ(run_values(c), (std::vector<double>{31, 2, 33}));  // repeated index: both added
  c.node = make_node("ScatterND", {{"reduction", A::of_string("max")}});
  c.inputs = {Tensor::from_i64({2, 2}, {5, 5, 5, 5}), Tensor::from_i64({2, 1}, {1, 1}), Tensor::from_i64({2, 2}, {9, 1, 3, 7})};
  EXPECT_EQ(run_values(c), (std::vector<double>{5, 5, 9, 7}));
  c.inputs[1] = Tensor::from_i64({2, 1}, {1, 2});
  std::vector<Tensor> out;
  Status st = run_on(c, "naive", &out);
  EXPECT_NE(st.message().find("index 2 (element 1) is outside the gathered axis of size 2"), std::string::npos)
      << st.to_string();
  c.opset = 17;  // max and min arrived in opset 18
  st = run_on(c, "naive", &out);
  EXPECT_NE(st.message().find("unknown reduction 'max' at opset 17"), std::string::npos) << st.to_string();
}

/// The gradient of sum(op(x)) with respect to x on `backend`.
std::vector<double> input_gradient(const OpCase& c, const std::string& backend) {
  std::vector<Tensor> ref;
  EXPECT_TRUE(run_on(c, backend, &ref).is_ok());
  Tensor dy = Tensor::empty(ref[0].desc());
  for (int64_t i = 0; i < dy.numel(); ++i) dy.f32()[i] = 1.f;
  const std::vector<Tensor> got = training_step(c, backend, dy);
  std::vector<double> v;
  for (int64_t i = 0; got.size() > 1 && i < got[1].numel(); ++i) v.push_back(got[1].get(i));
  return v;
}

TEST(Indexing, GradientsAreTheTransposedSums) {
  for (const char* backend : {"naive", "im2col", "onednn"}) {
    SCOPED_TRACE(backend);
    OpCase c;
    c.node = make_node("CumSum");
    c.inputs = {Tensor::from_f32({3}, {1, 2, 3}), Tensor::from_i64({}, {0})};
    c.is_const = {false, true};
    EXPECT_EQ(input_gradient(c, backend), (std::vector<double>{3, 2, 1}));  // x0 is in 3 sums, x2 in 1
    c.node = make_node("CumSum", {{"exclusive", A::of_int(1)}});
    EXPECT_EQ(input_gradient(c, backend), (std::vector<double>{2, 1, 0}));
    c.node = make_node("CumSum", {{"reverse", A::of_int(1)}});
    EXPECT_EQ(input_gradient(c, backend), (std::vector<double>{1, 2, 3}));
    c.node = make_node("Tile");
    c.inputs = {Tensor::from_f32({2}, {1, 2}), Tensor::from_i64({1}, {3})};
    EXPECT_EQ(input_gradient(c, backend), (std::vector<double>{3, 3}));
    c.node = make_node("GatherElements");
    c.inputs = {Tensor::from_f32({3}, {1, 2, 3}), Tensor::from_i64({3}, {0, 0, 2})};
    EXPECT_EQ(input_gradient(c, backend), (std::vector<double>{2, 0, 1}));
  }
}

}  // namespace
}  // namespace mosaic::test
