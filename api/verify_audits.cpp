#include "api/verify_audits.hpp"

#include <omp.h>

#include "api/models.hpp"
#include "api/option_rules.hpp"
#include "backends/registry.hpp"
#include "core/plan.hpp"

namespace mosaic::api {
namespace {

/// The one model an audit takes, loaded and prepared, and its made-up inputs.
Status load_model(const VerifyOptions& o, const char* mode, Graph* g, std::vector<Tensor>* inputs) {
  if (o.paths.size() != 1)
    return Status::invalid(std::string("`") + mode + "` takes one model (an ONNX file or zoo:NAME), got " +
                           std::to_string(o.paths.size()) + " paths");
  MOSAIC_ASSIGN_OR_RETURN(*g, load_prepared(o.paths[0], o.common, nullptr));
  MOSAIC_ASSIGN_OR_RETURN(*inputs, model_inputs(*g, o.common));
  return Status::ok();
}

}  // namespace

Status check_verify_modes(const VerifyOptions& o) {
  if (o.per_node && o.determinism)
    return Status::invalid("`per_node` and `determinism` are separate audits: give one");
  if (o.deterministic && !o.determinism) return Status::invalid("`deterministic` only applies to `determinism`");
  if (!o.junit.empty() && (o.per_node || o.determinism))
    return Status::invalid("`junit` applies to conformance cases, not to `per_node` or `determinism`");
  return Status::ok();
}

Expected<PerNodeVerifyReport> verify_per_node(const VerifyOptions& o) {
  MOSAIC_RETURN_IF_ERROR(check_verify_modes(o));
  MOSAIC_RETURN_IF_ERROR(check_numbers("verify", {{"rtol", o.rtol}, {"atol", o.atol}, {"threads", o.common.threads}}));
  MOSAIC_ASSIGN_OR_RETURN(std::vector<std::string> backends, verify_backends(o.backend));
  MOSAIC_RETURN_IF_ERROR(set_num_threads(o.common.threads));
  Graph g;
  std::vector<Tensor> inputs;
  MOSAIC_RETURN_IF_ERROR(load_model(o, "per_node", &g, &inputs));
  PerNodeVerifyReport r;
  r.model = o.paths[0];
  const TensorDesc& out = g.value_descs.at(g.outputs[0].name);
  for (const auto& b : backends) {
    PerNodeAudit a;
    a.backend = b;
    MOSAIC_ASSIGN_OR_RETURN(a.forward, compare_per_node(g, builtin_registry(), Placement::all_on(b, {}), inputs, o.rtol, o.atol));
    // The backward of a training step too, where the model ends in [N, classes] logits.
    if (out.shape.size() == 2 && out.dtype == DType::kF32) {
      Tensor labels = Tensor::empty({DType::kI64, {out.shape[0]}});
      for (int64_t i = 0; i < out.shape[0]; ++i) labels.i64()[i] = i % out.shape[1];
      auto backward = compare_per_node_backward(g, builtin_registry(), Placement::all_on(b, {}), inputs, labels, o.rtol,
                                                o.atol);
      if (backward.ok()) {
        a.backward = std::move(backward.value());
        a.has_backward = true;
        r.agree = r.agree && a.backward.first_divergent < 0;
      } else if (backward.status().code() == StatusCode::kUnsupported) {
        a.backward_skipped = backward.status().message();  // the oracle cannot train it: forward only
      } else {
        return backward.status();
      }
    }
    r.agree = r.agree && a.forward.first_divergent < 0;
    for (const auto& n : a.forward.nodes) r.ran += n.ran;
    r.audits.push_back(std::move(a));
  }
  return r;
}

Expected<DeterminismVerifyReport> verify_determinism(const VerifyOptions& o) {
  MOSAIC_RETURN_IF_ERROR(check_verify_modes(o));
  MOSAIC_RETURN_IF_ERROR(check_numbers("verify", {{"rtol", o.rtol}, {"atol", o.atol}, {"threads", o.common.threads}}));
  MOSAIC_ASSIGN_OR_RETURN(std::vector<std::string> backends, verify_backends(o.backend));
  Graph g;
  std::vector<Tensor> inputs;
  MOSAIC_RETURN_IF_ERROR(load_model(o, "determinism", &g, &inputs));
  DeterminismVerifyReport r;
  r.model = o.paths[0];
  r.threads = o.common.threads > 0 ? o.common.threads : omp_get_max_threads();
  for (const auto& b : backends) {
    MOSAIC_ASSIGN_OR_RETURN(DeterminismReport d, audit_determinism(g, builtin_registry(), b, inputs, r.threads, o.deterministic));
    for (const auto* rows : {&d.nodes, &d.gradients})
      for (const auto& row : *rows) r.repeats = r.repeats && row.repeat_max_ulp == 0;
    r.audits.push_back(std::move(d));
  }
  return r;
}

}  // namespace mosaic::api
