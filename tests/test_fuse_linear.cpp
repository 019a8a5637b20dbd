// The Linear-layer rewrite (core/fuse_linear.cpp): MatMul by constant weights plus a constant
// bias becomes one Gemm (rows of a higher-rank input by Reshape views), an activation after
// it folds into the Gemm, and every backend's result is the unfused graph's on naive; near
// misses are left alone.
#include <gtest/gtest.h>

#include "api/models.hpp"
#include "core/fuse.hpp"
#include "core/plan.hpp"
#include "core/prepare.hpp"
#include "metrics/compare.hpp"
#include "test_util.hpp"

namespace mosaic::test {
namespace {

/// x [shape..., 8] -> MatMul(x, w [8, 6]) -> Add(., b [6]) [-> act] -> y
Graph linear(const Shape& x_shape, const std::string& act, bool bias_first = false) {
  Graph g;
  g.source = "linear";
  g.opset = 20;
  g.inputs.push_back(ValueInfo{"x", DType::kF32, x_shape, {}, true});
  g.initializers["w"] = random_tensor({8, 6}, 21);
  g.initializers["b"] = random_tensor({6}, 22);
  add_node(g, make_node("MatMul"), {"x", "w"}, {"m"}, "fc.matmul");
  add_node(g, make_node("Add"), bias_first ? std::vector<std::string>{"b", "m"} : std::vector<std::string>{"m", "b"},
           {act.empty() ? "y" : "z"}, "fc.bias");
  if (!act.empty()) add_node(g, make_node(act), {"z"}, {"y"}, "fc.act");
  g.outputs.push_back(ValueInfo{"y", DType::kF32, {}, {}, false});
  return g;
}

std::vector<Tensor> outputs(Graph g, const std::string& backend, const Tensor& x, bool fuse, FuseReport* report,
                            std::vector<std::string>* ops = nullptr) {
  EXPECT_TRUE(prepare_graph(g, builtin_registry(), PrepareOptions{}).ok());
  if (fuse) *report = fuse_graph(g, fuse_options_for(Placement::all_on(backend, {}), builtin_registry(), false));
  if (ops)
    for (const auto& n : g.nodes) ops->push_back(n.op_type + (n.has_attr("mosaic.activation") ? "+" + n.attr_string("mosaic.activation", "") : ""));
  auto plan = Plan::build(g, Placement::all_on(backend, {}), builtin_registry());
  EXPECT_TRUE(plan.ok()) << backend << ": " << plan.status().to_string();
  std::vector<Tensor> out;
  if (plan.ok()) {
    EXPECT_TRUE(plan.value()->run({x}, &out).is_ok()) << backend;
  }
  return out;
}

TEST(FuseLinear, MatMulAndBiasBecomeOneGemmOnEveryBackendWithTheSameOutput) {
  struct Case {
    Shape x;
    std::string act;
    bool bias_first;
    std::vector<std::string> ops;  ///< the fused graph's nodes
  };
  const std::vector<Case> cases = {
      {{5, 8}, "", false, {"Gemm"}},
      {{5, 8}, "Relu", true, {"Gemm+Relu"}},
      {{2, 3, 8}, "", false, {"Reshape", "Gemm", "Reshape"}},
      {{2, 3, 8}, "Gelu", true, {"Reshape", "Gemm+Gelu", "Reshape"}},
      {{2, 2, 3, 8}, "Relu", false, {"Reshape", "Gemm+Relu", "Reshape"}},
  };
  for (const Case& c : cases) {
    const Graph g = linear(c.x, c.act, c.bias_first);
    const Tensor x = random_tensor(c.x, 7, -2.f, 2.f);
    FuseReport unused;
    const std::vector<Tensor> want = outputs(g, "naive", x, false, &unused);
    ASSERT_EQ(want.size(), 1u);
    for (const std::string& backend : builtin_registry().available_backends()) {
      FuseReport r;
      std::vector<std::string> ops;
      const std::vector<Tensor> got = outputs(g, backend, x, true, &r, &ops);
      const std::string what = backend + " " + shape_str(c.x) + " " + c.act;
      EXPECT_EQ(ops, c.ops) << what;
      // Reported once, by the fused node's final name.
      EXPECT_EQ(r.fused, std::vector<std::string>{c.act.empty() ? "fc.matmul+fc.bias" : "fc.matmul+fc.bias+fc.act"})
          << what;
      ASSERT_EQ(got.size(), 1u) << what;
      EXPECT_EQ(got[0].shape(), want[0].shape()) << what;
      const Agreement a = compare_tensors(got[0], want[0], 1e-4, 1e-5);
      EXPECT_TRUE(a.ok) << what << ": " << a.message;
    }
  }
}

TEST(FuseLinear, NearMissesAreLeftAlone) {
  auto fused_ops = [](Graph g) {
    EXPECT_TRUE(prepare_graph(g, builtin_registry(), PrepareOptions{}).ok());
    fuse_graph(g, fuse_options_for(Placement::all_on("naive", {}), builtin_registry(), false));
    std::vector<std::string> ops;
    for (const auto& n : g.nodes) ops.push_back(n.op_type);
    return ops;
  };
  const std::vector<std::string> unfused{"MatMul", "Add"};
  {  // the bias is a graph input, not a constant
    Graph g = linear({2, 3, 8}, "");
    g.initializers.erase("b");
    g.inputs.push_back(ValueInfo{"b", DType::kF32, {6}, {}, true});
    EXPECT_EQ(fused_ops(g), unfused);
  }
  {  // the "bias" broadcasts the product to a larger shape
    Graph g = linear({3, 8}, "");
    g.initializers["b"] = random_tensor({2, 1, 6}, 22);
    EXPECT_EQ(fused_ops(g), unfused);
  }
  {  // a bias per row, not per column
    Graph g = linear({6, 8}, "");
    g.initializers["b"] = random_tensor({6, 1}, 22);
    EXPECT_EQ(fused_ops(g), unfused);
  }
  {  // the product is read twice
    Graph g = linear({2, 3, 8}, "");
    g.outputs.push_back(ValueInfo{"m", DType::kF32, {}, {}, false});
    EXPECT_EQ(fused_ops(g), unfused);
  }
  {  // weights of rank 3 (a batched product)
    Graph g = linear({2, 3, 8}, "");
    g.initializers["w"] = random_tensor({2, 8, 6}, 21);
    EXPECT_EQ(fused_ops(g), unfused);
  }
  {  // no columns at all (an empty product): nothing to gain, and no rows to count
    Graph g = linear({2, 3, 8}, "");
    g.initializers["w"] = Tensor::from_f32({8, 0}, {});
    g.initializers["b"] = Tensor::from_f32({0}, {});
    EXPECT_EQ(fused_ops(g), unfused);
  }
  {  // training plans keep both nodes (the fused activation would have no backward)
    Graph g = linear({2, 3, 8}, "");
    ASSERT_TRUE(prepare_graph(g, builtin_registry(), PrepareOptions{}).ok());
    fuse_graph(g, fuse_options_for(Placement::all_on("naive", {}), builtin_registry(), true));
    ASSERT_EQ(g.nodes.size(), 2u);
    EXPECT_EQ(g.nodes[0].op_type, "MatMul");
  }
}

}  // namespace
}  // namespace mosaic::test
