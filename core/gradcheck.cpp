#include "core/gradcheck.hpp"

#include <algorithm>
#include <cmath>
#include <random>

#include "core/loss.hpp"

namespace mosaic {

bool GradcheckReport::passed() const {
  return std::all_of(tensors.begin(), tensors.end(), [](const TensorVerdict& t) { return t.passed; });
}

Expected<GradcheckReport> gradcheck(const Graph& graph, const KernelRegistry& registry, const Placement& placement,
                                    const GradcheckOptions& o) {
  if (graph.inputs.empty() || graph.outputs.empty())
    return Status::invalid(graph.source + ": gradcheck needs a model with inputs and outputs");
  for (const auto& n : graph.nodes)
    if (n.op_type == "Dropout")
      return Status::unsupported(graph.source + ": " + n.label() + ": gradcheck needs a deterministic forward");
  PlanOptions po;
  po.training = true;
  po.input_grads = o.check_input;
  po.seed = o.seed;
  MOSAIC_ASSIGN_OR_RETURN(auto plan, Plan::build(graph, placement, registry, po));

  std::mt19937_64 rng(o.seed);
  std::uniform_real_distribution<float> u(o.input_lo, o.input_hi);
  std::vector<Tensor> xs;
  for (const auto& in : graph.inputs) {
    Tensor x = Tensor::empty(graph.value_descs.at(in.name));
    if (x.dtype() != DType::kF32) return Status::unsupported(graph.source + ": gradcheck needs float inputs");
    for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = u(rng);
    xs.push_back(x);
  }
  MOSAIC_RETURN_IF_ERROR(plan->run(xs, nullptr));
  const size_t nout = graph.outputs.size();
  // Loss weights: labels for cross-entropy, projections r for the projection loss.
  Tensor labels;
  std::vector<Tensor> proj;
  if (o.loss == GradcheckLoss::kCrossEntropy) {
    const Tensor& logits0 = plan->output(0);
    if (logits0.rank() != 2) return Status::invalid(graph.source + ": gradcheck needs a first output of shape [N, C]");
    labels = Tensor::empty({DType::kI64, {logits0.dim(0)}});
    for (int64_t i = 0; i < labels.numel(); ++i) labels.i64()[i] = static_cast<int64_t>(rng() % logits0.dim(1));
  } else {
    std::uniform_real_distribution<float> r(-1.f, 1.f);
    for (size_t k = 0; k < nout; ++k) {
      Tensor t = Tensor::empty({DType::kF32, plan->output(k).shape()});
      for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = r(rng);
      proj.push_back(t);
    }
  }
  // Loss of the last run, and (optionally) its gradients w.r.t. the outputs.
  auto current_loss = [&](std::vector<Tensor>* seeds) -> Expected<double> {
    if (o.loss == GradcheckLoss::kCrossEntropy) {
      Tensor d;
      if (seeds) d = Tensor::empty(plan->output(0).desc());
      MOSAIC_ASSIGN_OR_RETURN(LossValue l, softmax_cross_entropy(plan->output(0), labels, seeds ? &d : nullptr));
      if (seeds) {
        seeds->push_back(d);
        for (size_t k = 1; k < nout; ++k) seeds->push_back(Tensor::empty({DType::kF32, plan->output(k).shape()}));
      }
      return l.loss;
    }
    double loss = 0;
    for (size_t k = 0; k < nout; ++k) {
      const Tensor& y = plan->output(k);
      for (int64_t i = 0; i < y.numel(); ++i) loss += static_cast<double>(y.f32()[i]) * proj[k].f32()[i];
      if (seeds) seeds->push_back(proj[k]);
    }
    return loss;
  };
  auto loss_of = [&]() -> Expected<double> {
    MOSAIC_RETURN_IF_ERROR(plan->run(xs, nullptr));
    return current_loss(nullptr);
  };
  // Analytic gradients.
  std::vector<Tensor> seeds;
  MOSAIC_RETURN_IF_ERROR(current_loss(&seeds).status());
  MOSAIC_RETURN_IF_ERROR(plan->backward(seeds));

  struct Target {
    std::string name;
    Tensor value, grad;
  };
  std::vector<Target> targets;
  for (const auto& p : plan->parameters()) targets.push_back({p.name, p.value, p.grad.clone()});
  for (size_t i = 0; i < xs.size() && o.check_input; ++i)
    if (const Tensor* g = plan->input_grad(i)) targets.push_back({"input:" + graph.inputs[i].name, xs[i], g->clone()});

  GradcheckReport report;
  for (auto& t : targets) {
    TensorVerdict v;
    v.name = t.name;
    const int64_t n = t.value.numel();
    // Probes: unit directions and single elements, each a sparse or dense vector d.
    std::vector<std::pair<std::string, std::vector<std::pair<int64_t, double>>>> probes;
    std::normal_distribution<double> gauss;
    double gnorm = 0;
    for (int64_t i = 0; i < n; ++i) gnorm += static_cast<double>(t.grad.f32()[i]) * t.grad.f32()[i];
    gnorm = std::sqrt(gnorm);
    if (gnorm > 0) {
      // Along the analytic gradient: the strongest signal; catches wrong signs and scales.
      std::vector<std::pair<int64_t, double>> d(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) d[i] = {i, t.grad.f32()[i] / gnorm};
      probes.emplace_back("gradient direction", std::move(d));
    }
    for (int k = 0; k < o.directions && n > 1; ++k) {
      std::vector<std::pair<int64_t, double>> d(static_cast<size_t>(n));
      double norm = 0;
      for (int64_t i = 0; i < n; ++i) {
        d[i] = {i, gauss(rng)};
        norm += d[i].second * d[i].second;
      }
      for (auto& e : d) e.second /= std::sqrt(norm);
      probes.emplace_back("direction " + std::to_string(k + 1), std::move(d));
    }
    const int64_t count = n <= o.elements ? n : o.elements;
    for (int64_t k = 0; k < count; ++k) {
      const int64_t i = n <= o.elements ? k : static_cast<int64_t>(rng() % static_cast<uint64_t>(n));
      probes.emplace_back("element [" + std::to_string(i) + "]", std::vector<std::pair<int64_t, double>>{{i, 1.0}});
    }
    float* p = t.value.f32();
    for (auto& [what, d] : probes) {
      // f(h) = loss(p + h d); central differences at h = eps and eps/2 detect kinks.
      auto shifted = [&](double h) -> Expected<double> {
        std::vector<float> saved;
        for (auto& [i, w] : d) {
          saved.push_back(p[i]);
          p[i] = static_cast<float>(p[i] + h * w);
        }
        auto l = loss_of();
        size_t k = 0;
        for (auto& [i, w] : d) p[i] = saved[k++];
        return l;
      };
      MOSAIC_ASSIGN_OR_RETURN(double fp, shifted(o.eps));
      MOSAIC_ASSIGN_OR_RETURN(double fm, shifted(-o.eps));
      MOSAIC_ASSIGN_OR_RETURN(double hp, shifted(o.eps / 2));
      MOSAIC_ASSIGN_OR_RETURN(double hm, shifted(-o.eps / 2));
      ProbeResult r;
      r.what = what;
      const double full = (fp - fm) / (2 * o.eps), half = (hp - hm) / o.eps;
      for (auto& [i, w] : d) r.analytic += static_cast<double>(t.grad.f32()[i]) * w;
      // Errors are relative to the probe's own magnitude, but never to less than the
      // tensor's gradient norm: a probe that sees a tiny component of the gradient is
      // judged on the scale of the whole gradient, where float noise is negligible.
      auto rel = [&](double a, double b) {
        return std::fabs(a - b) / std::max({std::fabs(a), std::fabs(b), gnorm, o.scale});
      };
      // Candidates: both central differences and their Richardson extrapolation, which
      // cancels the O(eps^2) curvature term. Passes if the analytic value matches one; if it
      // matches none and the two steps disagree, the probe crossed a kink and is not
      // judged; otherwise it fails.
      const double richardson = (4 * half - full) / 3;
      r.error = rel(r.analytic, full);
      r.numeric = full;
      for (double cand : {half, richardson})
        if (rel(r.analytic, cand) < r.error) {
          r.error = rel(r.analytic, cand);
          r.numeric = cand;
        }
      r.kink = r.error > o.tolerance && rel(full, half) > o.tolerance;
      if (r.kink) {
        ++v.skipped_kinks;
        continue;
      }
      ++v.checked;
      if (r.error > v.worst.error || v.checked == 1) v.worst = r;
      if (r.error > o.tolerance) v.passed = false;
    }
    report.tensors.push_back(v);
  }
  return report;
}

}  // namespace mosaic
