#include "validate/determinism.hpp"

#include <omp.h>

#include <cstring>
#include <map>

#include "backends/registry.hpp"
#include "core/loss.hpp"
#include "core/plan.hpp"
#include "validate/per_node.hpp"

namespace mosaic {

int64_t ulp_distance(float a, float b) {
  int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  // Map the sign-magnitude bit patterns onto a monotonic integer line.
  const int64_t la = ia < 0 ? int64_t(INT32_MIN) - ia : ia, lb = ib < 0 ? int64_t(INT32_MIN) - ib : ib;
  return la > lb ? la - lb : lb - la;
}

namespace {

struct StepResult {
  std::vector<Tensor> values, grads;
  std::vector<std::string> grad_names;
};

int64_t max_ulp(const Tensor& a, const Tensor& b) {
  int64_t m = 0;
  if (a.dtype() != DType::kF32) return std::memcmp(a.data(), b.data(), a.bytes()) == 0 ? 0 : 1;
  for (int64_t i = 0; i < a.numel(); ++i) m = std::max(m, ulp_distance(a.f32()[i], b.f32()[i]));
  return m;
}

}  // namespace

Expected<DeterminismReport> audit_determinism(const Graph& graph, const KernelRegistry& registry,
                                              const std::string& backend, const std::vector<Tensor>& inputs,
                                              int threads, bool deterministic) {
  const Graph all = with_every_value_as_output(graph);
  const Shape logits = graph.value_descs.at(graph.outputs[0].name).shape;
  if (logits.size() != 2) return Status::invalid(graph.source + ": the determinism audit needs a first output [N, C]");
  Tensor labels = Tensor::empty({DType::kI64, {logits[0]}});
  for (int64_t i = 0; i < logits[0]; ++i) labels.i64()[i] = i % logits[1];
  const int before = omp_get_max_threads();
  auto step = [&](int nthreads) -> Expected<StepResult> {
    MOSAIC_RETURN_IF_ERROR(set_num_threads(nthreads));
    PlanOptions po;
    po.training = true;
    po.deterministic = deterministic;
    MOSAIC_ASSIGN_OR_RETURN(auto plan, Plan::build(all, Placement::all_on(backend, {}), registry, po));
    StepResult r;
    MOSAIC_RETURN_IF_ERROR(plan->run(inputs, &r.values));
    Tensor d = Tensor::empty({DType::kF32, logits});
    MOSAIC_RETURN_IF_ERROR(softmax_cross_entropy(plan->output(0), labels, &d).status());
    std::vector<Tensor> seeds{d};
    for (size_t k = 1; k < all.outputs.size(); ++k) seeds.push_back(Tensor::empty(plan->output(k).desc()));
    MOSAIC_RETURN_IF_ERROR(plan->backward(seeds));
    for (const auto& p : plan->parameters()) {
      r.grads.push_back(p.grad.clone());
      r.grad_names.push_back(p.name);
    }
    return r;
  };
  auto a = step(threads);
  auto b = a.ok() ? step(threads) : a;
  auto c = b.ok() ? step(1) : b;
  // Back to a count it had: OpenBLAS's buffers for it are mapped, nothing to reserve.
  (void)set_num_threads(before);
  if (!c.ok()) return c.status();
  DeterminismReport report;
  report.backend = backend;
  report.threads = threads;
  std::map<std::string, size_t> index;
  for (size_t k = 0; k < all.outputs.size(); ++k) index[all.outputs[k].name] = k;
  for (const auto& n : graph.nodes) {
    if (n.outputs.empty() || n.outputs[0].empty()) continue;
    const size_t k = index.at(n.outputs[0]);
    report.nodes.push_back({"'" + n.name + "' (" + n.op_type + ")", max_ulp(a->values[k], b->values[k]),
                            max_ulp(a->values[k], c->values[k])});
  }
  for (size_t k = 0; k < a->grads.size(); ++k)
    report.gradients.push_back({"grad " + a->grad_names[k], max_ulp(a->grads[k], b->grads[k]), max_ulp(a->grads[k], c->grads[k])});
  return report;
}

}  // namespace mosaic
