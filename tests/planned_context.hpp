// What the cuda backend's host-run tests share (tests/test_cuda_int8_math.cpp,
// tests/test_cuda_qlinear_math.cpp): a node's KernelContext as the backend's planner sees it,
// built from an OpCase whose outputs the naive oracle computes, and random codes.
#pragma once

#include <memory>
#include <random>

#include "test_util.hpp"

namespace mosaic::test {

/// Random codes of type d (uint8, int8 or int32 within [lo, hi]).
inline Tensor random_codes(DType d, const Shape& shape, int lo, int hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(lo, hi);
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (double& x : v) x = dist(rng);
  return typed(d, shape, v);
}

/// A case planned as the cuda backend plans it: the node, its inputs' and output's types and
/// shapes (the output's from the oracle's run, whose values are `want`) and its constants.
struct Planned {
  Graph graph;
  KernelContext ctx;
  std::vector<Tensor> want;
};

inline std::unique_ptr<Planned> context_of(const OpCase& c) {
  auto p = std::make_unique<Planned>();
  p->graph = test::make_graph(c);
  const Status st = test::run_on(c, "naive", &p->want);
  EXPECT_TRUE(st.is_ok()) << c.label << ": " << st.to_string();
  KernelContext& ctx = p->ctx;
  ctx.node = &p->graph.nodes[0];
  ctx.opset = c.opset;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const bool present = c.inputs[i].defined();
    ctx.inputs.push_back(present ? TensorDesc(c.inputs[i].dtype(), c.inputs[i].shape()) : TensorDesc());
    ctx.input_present.push_back(present);
    ctx.constants.push_back(present && i < c.is_const.size() && c.is_const[i] ? &c.inputs[i] : nullptr);
  }
  for (const Tensor& t : p->want) {
    ctx.outputs.emplace_back(t.dtype(), t.shape());
    ctx.output_present.push_back(true);
  }
  return p;
}

}  // namespace mosaic::test
