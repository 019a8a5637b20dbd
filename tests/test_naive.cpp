// The oracle against hand-computed values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <set>

#include "operators/eltwise.hpp"
#include "core/prepare.hpp"
#include "operators/reduce.hpp"
#include "operators/schema.hpp"
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

/// The element-wise rows against values computed by hand (or from tables of erf and Phi):
/// one point per op, away from kinks, plus each kink's convention.
TEST(Naive, ElementwiseOpsByHand) {
  auto at = [](const std::string& op, float x, std::map<std::string, A> attrs = {}) {
    OpCase c;
    c.node = make_node(op, std::move(attrs));
    c.inputs = {Tensor::from_f32({1}, {x})};
    const std::vector<float> y = run1(c);
    return y.empty() ? NAN : y[0];
  };
  const float e = 2.718281828f;
  EXPECT_NEAR(at("Exp", 1), e, 1e-6);
  EXPECT_NEAR(at("Log", e), 1, 1e-6);
  EXPECT_NEAR(at("Sqrt", 2), 1.41421356f, 1e-6);
  EXPECT_NEAR(at("Erf", 0.5f), 0.52049988f, 1e-6);
  EXPECT_NEAR(at("Neg", 3), -3, 0);
  EXPECT_NEAR(at("Abs", -2), 2, 0);
  EXPECT_NEAR(at("Reciprocal", 4), 0.25f, 0);
  EXPECT_NEAR(at("Softplus", 0), 0.69314718f, 1e-6);  // ln 2
  EXPECT_NEAR(at("Softsign", 1), 0.5f, 1e-7);
  EXPECT_NEAR(at("Elu", -1), 1 / e - 1, 1e-6);
  EXPECT_NEAR(at("Elu", -1, {{"alpha", A::of_float(2)}}), 2 * (1 / e - 1), 1e-6);
  EXPECT_NEAR(at("Selu", -1), 1.05070102f * 1.67326319f * (1 / e - 1), 1e-6);
  EXPECT_NEAR(at("Selu", 2), 1.05070102f * 2, 1e-6);
  EXPECT_NEAR(at("HardSigmoid", 1), 0.7f, 1e-6);  // 0.2 * 1 + 0.5
  EXPECT_NEAR(at("HardSigmoid", 3), 1, 0);
  EXPECT_NEAR(at("HardSwish", 1), 2.f / 3, 1e-6);  // 1 * (1/6 + 1/2)
  EXPECT_NEAR(at("HardSwish", -4), 0, 0);
  EXPECT_NEAR(at("HardSwish", 4), 4, 0);
  EXPECT_NEAR(at("Gelu", 1), 0.84134475f, 1e-6);  // Phi(1)
  EXPECT_NEAR(at("Gelu", -1), -0.15865525f, 1e-6);
  EXPECT_NEAR(at("Gelu", 1, {{"approximate", A::of_string("tanh")}}), 0.84119199f, 1e-6);
  EXPECT_NEAR(at("Sin", 0.5f), 0.47942554f, 1e-6);
  EXPECT_NEAR(at("Cos", 0.5f), 0.87758256f, 1e-6);
  EXPECT_NEAR(at("Tan", 0.5f), 0.54630249f, 1e-6);
  EXPECT_NEAR(at("Sinh", 1), 1.17520119f, 1e-6);
  EXPECT_NEAR(at("Cosh", 1), 1.54308063f, 1e-6);
  EXPECT_NEAR(at("Asin", 0.5f), 0.52359878f, 1e-6);  // pi / 6
  EXPECT_NEAR(at("Acos", 0.5f), 1.04719755f, 1e-6);  // pi / 3
  EXPECT_NEAR(at("Atan", 1), 0.78539816f, 1e-6);     // pi / 4
  EXPECT_NEAR(at("Asinh", 1), 0.88137359f, 1e-6);
  EXPECT_NEAR(at("Acosh", 2), 1.31695790f, 1e-6);
  EXPECT_NEAR(at("Atanh", 0.5f), 0.54930614f, 1e-6);
  EXPECT_NEAR(at("Mish", 1), 0.86509839f, 1e-6);  // tanh(ln(1 + e))
  EXPECT_NEAR(at("Celu", -1, {{"alpha", A::of_float(2)}}), 2 * (std::exp(-0.5f) - 1), 1e-6);
  EXPECT_NEAR(at("ThresholdedRelu", 1), 0, 0);  // alpha 1: strictly above it
  EXPECT_NEAR(at("ThresholdedRelu", 1.5f), 1.5f, 0);
  EXPECT_NEAR(at("ThresholdedRelu", 0.5f, {{"alpha", A::of_float(0.25f)}}), 0.5f, 0);
  EXPECT_NEAR(at("ThresholdedRelu", -0.5f, {{"alpha", A::of_float(-1)}}), -0.5f, 0);
  OpCase pow;
  pow.node = make_node("Pow");
  pow.inputs = {Tensor::from_f32({3}, {2, 4, 9}), Tensor::from_f32({3}, {3, 0.5f, -0.5f})};
  expect_near(run1(pow), {8, 2, 1.f / 3});
}

/// The reductions against hand-computed values: x = [[1, -2, 3], [4, 5, -6]] over axis 1.
TEST(Naive, ReductionsByHand) {
  auto reduce = [](const std::string& op, int64_t keepdims = 0) {
    OpCase c;
    c.node = make_node(op, {{"axes", A::of_ints({1})}, {"keepdims", A::of_int(keepdims)}});
    c.inputs = {Tensor::from_f32({2, 3}, {1, -2, 3, 4, 5, -6})};
    c.opset = 11;  // axes as an attribute for every reduction
    return run1(c);
  };
  expect_near(reduce("ReduceSum"), {2, 3});
  expect_near(reduce("ReduceMean", 1), {2.f / 3, 1});
  expect_near(reduce("ReduceMax"), {3, 5});
  expect_near(reduce("ReduceMin"), {-2, -6});
  expect_near(reduce("ReduceProd"), {-6, -120});
  expect_near(reduce("ReduceL1"), {6, 15});
  expect_near(reduce("ReduceL2"), {std::sqrt(14.f), std::sqrt(77.f)});
  expect_near(reduce("ReduceSumSquare"), {14, 77});
  expect_near(reduce("ReduceLogSumExp"), {std::log(std::exp(1.f) + std::exp(-2.f) + std::exp(3.f)),
                                          std::log(std::exp(4.f) + std::exp(5.f) + std::exp(-6.f))});
}

/// LayerNormalization over the last axis of [1, 2, 3, 4] (mean 2.5, variance 1.25), epsilon 0:
/// (x - 2.5) / sqrt(1.25), then times 2 plus 1.
TEST(Naive, LayerNormByHand) {
  OpCase c;
  c.node = make_node("LayerNormalization", {{"epsilon", A::of_float(0)}});
  c.inputs = {Tensor::from_f32({1, 4}, {1, 2, 3, 4}), Tensor::from_f32({4}, {2, 2, 2, 2}),
              Tensor::from_f32({4}, {1, 1, 1, 1})};
  c.is_const = {false, true, true};
  c.opset = 17;
  expect_near(run1(c), {-1.6832816f, 0.1055728f, 1.8944272f, 3.6832816f});
}

Tensor bools(const Shape& shape, const std::vector<int>& v) {
  Tensor t = Tensor::empty({DType::kBool, shape});
  for (size_t i = 0; i < v.size(); ++i) t.u8()[i] = v[i] != 0;
  return t;
}

std::vector<int> run_bool(OpCase c) {
  std::vector<Tensor> out;
  Status st = run_on(c, "naive", &out);
  EXPECT_TRUE(st.is_ok()) << st.to_string();
  if (!st.is_ok()) return {};
  return std::vector<int>(out[0].u8(), out[0].u8() + out[0].numel());
}

/// The comparisons (a [2, 1] against b [3], broadcast to [2, 3]) and logical ops by hand.
TEST(Naive, ComparisonsAndLogicByHand) {
  auto compare = [](const std::string& op) {
    OpCase c;
    c.node = make_node(op);
    c.inputs = {Tensor::from_f32({2, 1}, {1, 2}), Tensor::from_f32({3}, {0, 1, 2})};
    return run_bool(c);
  };
  EXPECT_EQ(compare("Equal"), (std::vector<int>{0, 1, 0, 0, 0, 1}));
  EXPECT_EQ(compare("Less"), (std::vector<int>{0, 0, 1, 0, 0, 0}));
  EXPECT_EQ(compare("LessOrEqual"), (std::vector<int>{0, 1, 1, 0, 0, 1}));
  EXPECT_EQ(compare("Greater"), (std::vector<int>{1, 0, 0, 1, 1, 0}));
  EXPECT_EQ(compare("GreaterOrEqual"), (std::vector<int>{1, 1, 0, 1, 1, 1}));
  auto logic = [](const std::string& op) {
    OpCase c;
    c.node = make_node(op);
    c.inputs = {bools({4}, {0, 0, 1, 1}), bools({4}, {0, 1, 0, 1})};
    return run_bool(c);
  };
  EXPECT_EQ(logic("And"), (std::vector<int>{0, 0, 0, 1}));
  EXPECT_EQ(logic("Or"), (std::vector<int>{0, 1, 1, 1}));
  EXPECT_EQ(logic("Xor"), (std::vector<int>{0, 1, 1, 0}));
  OpCase n;
  n.node = make_node("Not");
  n.inputs = {bools({3}, {1, 0, 1})};
  EXPECT_EQ(run_bool(n), (std::vector<int>{0, 1, 0}));
  // Where(cond [2, 1], a [2, 3], b scalar): a causal-mask style selection.
  OpCase w;
  w.node = make_node("Where");
  w.inputs = {bools({2, 1}, {1, 0}), Tensor::from_f32({2, 3}, {1, 2, 3, 4, 5, 6}), Tensor::from_f32({}, {-9})};
  expect_near(run1(w), {1, 2, 3, -9, -9, -9});
  // Operands of the wrong kind are refused, naming the node.
  OpCase bad;
  bad.node = make_node("And");
  bad.inputs = {Tensor::from_f32({2}, {1, 0}), Tensor::from_f32({2}, {1, 1})};
  std::vector<Tensor> out;
  const Status st = run_on(bad, "naive", &out);
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("And takes bool operands"), std::string::npos) << st.message();
}

/// Expand, Range and Trilu by hand.
TEST(Naive, ExpandRangeTriluByHand) {
  OpCase e;
  e.node = make_node("Expand");
  e.inputs = {Tensor::from_f32({2, 1}, {1, 2}), Tensor::from_i64({3}, {2, 2, 3})};
  e.is_const = {false, true};
  expect_near(run1(e), {1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2});
  OpCase r;
  r.node = make_node("Range");
  r.inputs = {Tensor::from_f32({}, {1}), Tensor::from_f32({}, {2.1f}), Tensor::from_f32({}, {0.5f})};
  r.is_const = {true, true, true};
  r.node.outputs = {"y"};
  // Folded at load: the graph's output is the constant [1, 1.5, 2].
  {
    Graph g = make_graph(r);
    ASSERT_TRUE(prepare_graph(g, builtin_registry(), PrepareOptions{}).ok());
    ASSERT_TRUE(g.initializers.count("y"));
    const Tensor& y = g.initializers.at("y");
    ASSERT_EQ(y.numel(), 3);
    EXPECT_FLOAT_EQ(y.f32()[0], 1.f);
    EXPECT_FLOAT_EQ(y.f32()[1], 1.5f);
    EXPECT_FLOAT_EQ(y.f32()[2], 2.f);
  }
  OpCase t;
  t.node = make_node("Trilu", {{"upper", A::of_int(0)}});
  t.inputs = {Tensor::from_f32({3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9})};
  expect_near(run1(t), {1, 0, 0, 4, 5, 0, 7, 8, 9});  // torch.tril
  t.node = make_node("Trilu");
  t.inputs.push_back(Tensor::from_i64({}, {1}));
  t.is_const = {false, true};
  expect_near(run1(t), {0, 2, 3, 0, 0, 6, 0, 0, 0});  // torch.triu(x, 1)
  // A Range with delta 0 is refused, naming the node.
  r.inputs[2] = Tensor::from_f32({}, {0});
  Graph g = make_graph(r);
  const auto st = prepare_graph(g, builtin_registry(), PrepareOptions{});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().message().find("delta must be non-zero"), std::string::npos) << st.status().message();
}

/// Expand copies the trailing axes it keeps as whole blocks: rows of every width (a word of 1,
/// 2, 4 or 8 bytes, or longer runs), leading axes added, a broadcast axis between kept ones,
/// and an empty result, each against the values written out by hand.
TEST(Naive, ExpandCopiesKeptAxesAsBlocksOfEveryWidth) {
  auto run = [](Tensor x, std::vector<int64_t> shape) {
    OpCase e;
    e.node = make_node("Expand");
    e.inputs = {std::move(x), Tensor::from_i64({static_cast<int64_t>(shape.size())}, shape)};
    e.is_const = {false, true};
    std::vector<Tensor> out;
    const Status st = run_on(e, "naive", &out);
    EXPECT_TRUE(st.is_ok()) << st.message();
    return out.empty() ? Tensor() : out[0];
  };
  // int64 [2, 1, 3] -> [2, 2, 3]: blocks of three 8-byte values.
  Tensor y = run(Tensor::from_i64({2, 1, 3}, {1, 2, 3, 4, 5, 6}), {2, 2, 3});
  ASSERT_EQ(y.numel(), 12);
  EXPECT_EQ(std::vector<int64_t>(y.i64(), y.i64() + 12), (std::vector<int64_t>{1, 2, 3, 1, 2, 3, 4, 5, 6, 4, 5, 6}));
  // uint8 [3, 1] -> [2, 3, 4]: a leading axis added, one byte per block.
  Tensor u = Tensor::empty({DType::kU8, {3, 1}});
  for (int i = 0; i < 3; ++i) u.u8()[i] = static_cast<uint8_t>(7 + i);
  y = run(u, {2, 3, 4});
  ASSERT_EQ(y.numel(), 24);
  for (int64_t i = 0; i < 24; ++i) EXPECT_EQ(y.u8()[i], 7 + (i / 4) % 3) << i;
  // float16 [1, 2] -> [3, 2]: a block of two 2-byte values (one 4-byte word), bits kept.
  Tensor h = Tensor::empty({DType::kF16, {1, 2}});
  const uint16_t bits[2] = {0x3c00, 0xfc00};  // 1.0 and -inf
  std::memcpy(h.data(), bits, sizeof bits);
  y = run(h, {3, 2});
  ASSERT_EQ(y.numel(), 6);
  for (int64_t i = 0; i < 6; ++i) {
    uint16_t v;
    std::memcpy(&v, static_cast<const uint8_t*>(y.data()) + 2 * i, 2);
    EXPECT_EQ(v, bits[i % 2]) << i;
  }
  // float32 [2, 1, 2] -> [2, 3, 2]: the broadcast axis between kept ones.
  y = run(Tensor::from_f32({2, 1, 2}, {1, 2, 3, 4}), {2, 3, 2});
  EXPECT_EQ(std::vector<float>(y.f32(), y.f32() + 12), (std::vector<float>{1, 2, 1, 2, 1, 2, 3, 4, 3, 4, 3, 4}));
  // int32 [4] -> [2, 4]: one block of 16 bytes per row of the result.
  Tensor i32 = Tensor::empty({DType::kI32, {4}});
  for (int i = 0; i < 4; ++i) reinterpret_cast<int32_t*>(i32.data())[i] = -i;
  y = run(i32, {2, 4});
  for (int64_t i = 0; i < 8; ++i) EXPECT_EQ(reinterpret_cast<const int32_t*>(y.data())[i], -(i % 4)) << i;
  // [1, 1] -> [2, 0]: nothing to copy.
  y = run(Tensor::from_f32({1, 1}, {5}), {2, 0});
  EXPECT_EQ(y.numel(), 0);
}

/// Every row of the op tables is complete: its functions present, its kinks with their
/// pieces, its name unique and given a schema.
TEST(Tables, EveryRowIsComplete) {
  std::set<std::string> names;
  for (const auto& u : kUnaryOps) {
    EXPECT_TRUE(u.f && u.df) << u.name;
    EXPECT_EQ(u.kinks > 0, u.kink != nullptr && u.piece != nullptr) << u.name;
    EXPECT_TRUE(names.insert(u.name).second) << u.name;
  }
  for (const auto& b : kBinaryOps) {
    EXPECT_TRUE(b.f && b.da && b.db) << b.name;
    EXPECT_TRUE(names.insert(b.name).second) << b.name;
  }
  for (const auto& c : kCompareOps) {
    EXPECT_TRUE(c.f) << c.name;
    EXPECT_TRUE(names.insert(c.name).second) << c.name;
  }
  for (const auto& r : kReduceOps) {
    EXPECT_TRUE(r.step && r.finish && r.dx) << r.name;
    EXPECT_TRUE(names.insert(r.name).second) << r.name;
  }
  for (const auto& n : names) EXPECT_NE(find_schema(n), nullptr) << n;
}

/// Sum, Mean, Max and Min of three broadcast operands by hand.
TEST(Naive, VariadicOpsByHand) {
  auto run3 = [](const std::string& op) {
    OpCase c;
    c.node = make_node(op);
    c.inputs = {Tensor::from_f32({2}, {1, 5}), Tensor::from_f32({2, 1}, {2, 4}), Tensor::from_f32({}, {3})};
    return run1(c);
  };
  expect_near(run3("Sum"), {6, 10, 8, 12});
  expect_near(run3("Mean"), {2, 10.f / 3, 8.f / 3, 4});
  expect_near(run3("Max"), {3, 5, 4, 5});
  expect_near(run3("Min"), {1, 2, 1, 3});
}

/// Token ids outside the embedding table are an error naming the indices input, never a read
/// outside the table.
TEST(Naive, GatherRefusesIdsOutsideTheTable) {
  OpCase c;
  c.node = make_node("Gather");
  c.inputs = {random_tensor({5, 3}, 1), Tensor::from_i64({2}, {1, 5})};
  std::vector<Tensor> out;
  const Status st = run_on(c, "naive", &out);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("input 'x1': index 5 (element 1) is outside the gathered axis of size 5"),
            std::string::npos)
      << st.message();
  c.inputs[1] = Tensor::from_i64({2}, {1, -5});  // -5 wraps to 0: valid
  EXPECT_TRUE(run_on(c, "naive", &out).is_ok());
  c.inputs[1] = Tensor::from_i64({1}, {-6});
  EXPECT_FALSE(run_on(c, "naive", &out).is_ok());
}

TEST(Naive, SplitByHand) {
  OpCase c;
  c.node = make_node("Split", {{"axis", A::of_int(1)}});
  c.node.outputs = {"a", "b"};
  c.inputs = {Tensor::from_f32({2, 3}, {1, 2, 3, 4, 5, 6}), Tensor::from_i64({2}, {1, 2})};
  c.is_const = {false, true};
  std::vector<Tensor> out;
  ASSERT_TRUE(run_on(c, "naive", &out).is_ok());
  ASSERT_EQ(out.size(), 2u);
  expect_near(std::vector<float>(out[0].f32(), out[0].f32() + 2), {1, 4});
  expect_near(std::vector<float>(out[1].f32(), out[1].f32() + 4), {2, 3, 5, 6});
  c.inputs[1] = Tensor::from_i64({2}, {1, 1});  // lengths that do not cover the axis
  const Status st = run_on(c, "naive", &out);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("split lengths sum to 2, the axis has 3"), std::string::npos) << st.message();
}

/// LSTM and GRU over two steps with one hidden unit, against ONNX's equations written out
/// (gate orders i o f c and z r h; GRU both ways of applying the reset gate).
TEST(Naive, RecurrentCellsByHand) {
  auto sig = [](double v) { return 1 / (1 + std::exp(-v)); };
  const double x[2] = {0.5, -1.0};
  {
    OpCase c;
    c.node = make_node("LSTM", {{"hidden_size", A::of_int(1)}});
    c.inputs = {Tensor::from_f32({2, 1, 1}, {0.5f, -1.f}), Tensor::from_f32({1, 4, 1}, {0.1f, 0.2f, 0.3f, 0.4f}),
                Tensor::from_f32({1, 4, 1}, {0.5f, 0.6f, 0.7f, 0.8f}),
                Tensor::from_f32({1, 8}, {0.01f, 0.02f, 0.03f, 0.04f, 0.05f, 0.06f, 0.07f, 0.08f})};
    double h = 0, cell = 0;
    std::vector<float> want;
    for (double xt : x) {
      auto pre = [&](int g) { return 0.1 * (g + 1) * xt + 0.1 * (g + 5) * h + 0.01 * (g + 1) + 0.01 * (g + 5); };
      const double i = sig(pre(0)), o = sig(pre(1)), f = sig(pre(2)), cc = std::tanh(pre(3));
      cell = f * cell + i * cc;
      h = o * std::tanh(cell);
      want.push_back(static_cast<float>(h));
    }
    expect_near(run1(c), want);  // Y [2, 1, 1, 1]
  }
  for (int lbr : {0, 1}) {
    OpCase c;
    c.node = make_node("GRU", {{"hidden_size", A::of_int(1)}, {"linear_before_reset", A::of_int(lbr)}});
    c.inputs = {Tensor::from_f32({2, 1, 1}, {0.5f, -1.f}), Tensor::from_f32({1, 3, 1}, {0.3f, -0.4f, 0.9f}),
                Tensor::from_f32({1, 3, 1}, {0.6f, 0.5f, -0.7f}),
                Tensor::from_f32({1, 6}, {0.1f, 0.f, 0.2f, 0.f, 0.f, 0.3f}), Tensor(),
                Tensor::from_f32({1, 1, 1}, {0.25f})};
    double h = 0.25;
    std::vector<float> want;
    for (double xt : x) {
      const double z = sig(0.3 * xt + 0.6 * h + 0.1), r = sig(-0.4 * xt + 0.5 * h);
      const double hh = lbr ? std::tanh(0.9 * xt + 0.2 + r * (-0.7 * h + 0.3))
                            : std::tanh(0.9 * xt + 0.2 + (r * h) * -0.7 + 0.3);
      h = (1 - z) * hh + z * h;
      want.push_back(static_cast<float>(h));
    }
    expect_near(run1(c), want);
  }
}

/// Derivatives at and around kinks follow PyTorch: Abs'(0) = 0, HardSwish'(-3) = -0.5,
/// HardSigmoid' on the open interval, Relu'(0) = 0.
TEST(Naive, ElementwiseDerivativesAtKinks) {
  const UnaryArgs none;
  EXPECT_EQ(unary_derivative(UnaryOp::kAbs, 0.f, 0.f, none), 0.f);
  EXPECT_EQ(unary_derivative(UnaryOp::kAbs, -2.f, 2.f, none), -1.f);
  EXPECT_EQ(unary_derivative(UnaryOp::kHardSwish, -3.f, 0.f, none), -0.5f);
  EXPECT_EQ(unary_derivative(UnaryOp::kHardSwish, 3.f, 3.f, none), 1.5f);
  UnaryArgs hs;
  hs.alpha = 0.2;
  hs.beta = 0.5;
  EXPECT_EQ(unary_derivative(UnaryOp::kHardSigmoid, 2.5f, 1.f, hs), 0.f);
  EXPECT_NEAR(unary_derivative(UnaryOp::kHardSigmoid, 2.f, 0.9f, hs), 0.2f, 1e-7);
  EXPECT_EQ(unary_derivative(UnaryOp::kRelu, 0.f, 0.f, none), 0.f);
  EXPECT_NEAR(unary_derivative(UnaryOp::kGelu, 0.f, 0.f, none), 0.5f, 1e-7);  // Phi(0)
  EXPECT_EQ(binary_grad_b(BinaryOp::kPow, 1.f, 0.f, 2.f), 0.f);  // torch: 0 where a == 0, b >= 0
}

}  // namespace
}  // namespace mosaic::test
