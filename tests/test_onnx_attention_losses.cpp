// ONNX's Attention (operators/onnx_attention.hpp) and loss operators (operators/loss_ops.hpp)
// against values computed by hand; their refusals. The ONNX node tests (ctest
// onnx_node_tests, onnx_node_tests_1_23) check them against onnx's reference outputs.
#include <gtest/gtest.h>

#include <cmath>

#include "test_util.hpp"

namespace mosaic::test {
namespace {

using A = Attribute;

TEST(LossOps, NegativeLogLikelihoodByHand) {
  const Tensor x = Tensor::from_f32({2, 3}, {-1.f, -2.f, -3.f, -0.5f, -1.5f, -2.5f});
  const Tensor t = Tensor::from_i64({2}, {0, 2});
  const Tensor w = Tensor::from_f32({3}, {1.f, 2.f, 3.f});
  std::vector<Tensor> out;
  ASSERT_TRUE(run_on(op_case("NegativeLogLikelihoodLoss", {x, t, w}, {{"reduction", A::of_string("none")}}, 13), "naive",
                     &out).is_ok());
  EXPECT_FLOAT_EQ(out[0].f32()[0], 1.f);    // -1 * x[0, 0]
  EXPECT_FLOAT_EQ(out[0].f32()[1], 7.5f);   // -3 * x[1, 2]
  ASSERT_TRUE(run_on(op_case("NegativeLogLikelihoodLoss", {x, t, w}, {}, 13), "naive", &out).is_ok());
  EXPECT_FLOAT_EQ(out[0].f32()[0], 8.5f / 4.f);  // mean: divided by the weights taken, 1 + 3
  // ignore_index drops a target from the sum and from the divisor.
  ASSERT_TRUE(run_on(op_case("NegativeLogLikelihoodLoss", {x, t, w}, {{"ignore_index", A::of_int(2)}}, 13), "naive", &out)
                  .is_ok());
  EXPECT_FLOAT_EQ(out[0].f32()[0], 1.f);
  // A target outside the classes (and not ignored) is an error naming the node.
  Status st = run_on(op_case("NegativeLogLikelihoodLoss", {x, Tensor::from_i64({2}, {0, 3})}, {}, 13), "naive", &out);
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("target 3 (element 1) is outside the 3 classes"), std::string::npos) << st.message();
}

TEST(LossOps, SoftmaxCrossEntropyByHandWithItsLogProbabilities) {
  const Tensor x = Tensor::from_f32({1, 2}, {0.f, std::log(3.f)});  // softmax (1/4, 3/4)
  std::vector<Tensor> out;
  ASSERT_TRUE(run_on(op_case("SoftmaxCrossEntropyLoss", {x, Tensor::from_i64({1}, {1})}, {}, 13, {"loss", "log_prob"}),
                     "naive", &out)
                  .is_ok());
  ASSERT_EQ(out.size(), 2u);
  EXPECT_NEAR(out[0].f32()[0], -std::log(0.75), 1e-6);
  EXPECT_NEAR(out[1].f32()[0], std::log(0.25), 1e-6);
  EXPECT_NEAR(out[1].f32()[1], std::log(0.75), 1e-6);
}

TEST(OnnxAttention, OneQueryByHandWithGroupedHeadsAndACache) {
  // Q [1, 2 heads, 1, 1], one KV head [1, 1, 1, 1] after a cache of one: keys (past 0, new 1),
  // values (past 10, new 20). Head h scores q_h * k * scale, scale 1 / sqrt(1).
  const Tensor q = Tensor::from_f32({1, 2, 1, 1}, {1.f, 2.f});
  const Tensor k = Tensor::from_f32({1, 1, 1, 1}, {1.f});
  const Tensor v = Tensor::from_f32({1, 1, 1, 1}, {20.f});
  const Tensor pk = Tensor::from_f32({1, 1, 1, 1}, {0.f});
  const Tensor pv = Tensor::from_f32({1, 1, 1, 1}, {10.f});
  std::vector<Tensor> out;
  OpCase c = op_case("Attention", {q, k, v, Tensor(), pk, pv}, {}, 23, {"y", "present_key", "present_value"});
  ASSERT_TRUE(run_on(c, "naive", &out).is_ok());
  for (int h = 0; h < 2; ++h) {
    const double s = h + 1.0;  // score of the new key; the cached one scores 0
    const double p_new = std::exp(s) / (1 + std::exp(s));
    EXPECT_NEAR(out[0].f32()[h], 10 * (1 - p_new) + 20 * p_new, 1e-5) << h;
  }
  EXPECT_EQ(out[1].shape(), (Shape{1, 1, 2, 1}));
  EXPECT_EQ(out[2].f32()[0], 10.f);
  EXPECT_EQ(out[2].f32()[1], 20.f);
  // Causal after the cache: the query (position 1) sees both keys; without the cache, a
  // boolean mask that hides every key gives zeros (no key to attend to).
  c = op_case("Attention", {q, k, v, Tensor::empty({DType::kBool, {1, 1}})}, {}, 23);
  ASSERT_TRUE(run_on(c, "naive", &out).is_ok());
  EXPECT_EQ(out[0].f32()[0], 0.f);
  EXPECT_EQ(out[0].f32()[1], 0.f);
  // A mask that does not broadcast is refused, naming the node.
  c = op_case("Attention", {q, k, v, Tensor::from_f32({3, 1}, {0.f, 0.f, 0.f})}, {}, 23);
  Status st = run_on(c, "naive", &out);
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("attn_mask [3,1] does not broadcast onto [1,2,1,1]"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace mosaic::test
