#include "validate/gradcheck.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <random>

#include "core/inputs.hpp"
#include "core/loss.hpp"
#include "validate/reference_forward.hpp"

namespace mosaic {

const char* verdict_name(Verdict v) {
  switch (v) {
    case Verdict::kPass: return "PASS";
    case Verdict::kFail: return "FAIL";
    case Verdict::kInconclusive: return "INCONCLUSIVE";
  }
  return "?";
}

void GradcheckMemo::begin(const std::string& fingerprint) {
  if (fingerprint == fingerprint_) return;
  fingerprint_ = fingerprint;
  pairs_.clear();
}

const GradcheckMemo::Pair* GradcheckMemo::find(const std::string& key) {
  const auto it = pairs_.find(key);
  if (it == pairs_.end()) {
    ++misses_;
    return nullptr;
  }
  ++hits_;
  return &it->second;
}

void GradcheckMemo::put(const std::string& key, Pair pair) { pairs_[key] = std::move(pair); }

int GradcheckReport::count(Verdict v) const {
  return static_cast<int>(std::count_if(tensors.begin(), tensors.end(), [&](const TensorVerdict& t) { return t.verdict == v; }));
}

bool GradcheckReport::passed() const { return forward_ok && count(Verdict::kPass) == static_cast<int>(tensors.size()); }

namespace {

/// A probe direction: (element, weight) pairs of unit norm.
using Direction = std::vector<std::pair<int64_t, double>>;

struct Probe {
  std::string what;
  Direction d;
};

const char* const kGradientProbe = "gradient direction";

std::vector<Probe> make_probes(const Tensor& grad, double gnorm, const GradcheckOptions& o, std::mt19937_64& rng) {
  std::vector<Probe> probes;
  const int64_t n = grad.numel();
  std::normal_distribution<double> gauss;
  if (gnorm > 0) {  // along the analytic gradient: the strongest signal, catches wrong signs and scales
    Direction d(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) d[i] = {i, grad.f32()[i] / gnorm};
    probes.push_back({kGradientProbe, std::move(d)});
  }
  for (int k = 0; k < o.directions && n > 1; ++k) {
    Direction d(static_cast<size_t>(n));
    double norm = 0;
    for (int64_t i = 0; i < n; ++i) {
      d[i] = {i, gauss(rng)};
      norm += d[i].second * d[i].second;
    }
    for (auto& e : d) e.second /= std::sqrt(norm);
    probes.push_back({"direction " + std::to_string(k + 1), std::move(d)});
  }
  const int64_t count = std::min<int64_t>(n, o.elements);
  for (int64_t k = 0; k < count; ++k) {
    const int64_t i = n <= o.elements ? k : static_cast<int64_t>(rng() % static_cast<uint64_t>(n));
    probes.push_back({"element [" + std::to_string(i) + "]", Direction{{i, 1.0}}});
  }
  return probes;
}

/// The base point's ambiguous decisions as options the numeric side can take. Each option
/// is a smooth function near the base point (one window cell's value, one side of a kink),
/// so the loss with decision d pinned to option o is, to first order, the exact loss plus
/// s_d * (option's value - computed value), with s_d = dL/dy_d at the decision's output
/// element, measured once by differences in double: central where the loss is smooth in
/// y_d, one-sided where y_d sits on a kink of what follows (a Relu output of 0 in a max-pool
/// window of zeros moves the loss only upwards), each side for the offsets of its sign.
struct Resolution {
  std::vector<Ambiguity> decisions;
  std::vector<double> up, down;  ///< dL/dy per decision, for positive and negative offsets
  int64_t combinations = 1;
  /// Decision d's option in combination c (mixed radix, decision 0 fastest).
  int option(int64_t c, size_t d) const {
    for (size_t e = 0; e < d; ++e) c /= decisions[e].options();
    return static_cast<int>(c % decisions[d].options());
  }
  /// Combination c with decision d's option replaced by o.
  int64_t with_option(int64_t c, size_t d, int o) const {
    int64_t place = 1;
    for (size_t e = 0; e < d; ++e) place *= decisions[e].options();
    return c + (o - option(c, d)) * place;
  }
  /// The loss of combination c from the exact loss and the reference's alternatives.
  double loss(double exact, const std::vector<std::vector<double>>& alternatives, int64_t c) const {
    for (size_t d = 0; d < decisions.size(); ++d) {
      const double offset = alternatives[d][option(c, d)];
      exact += (offset > 0 ? up[d] : down[d]) * offset;
    }
    return exact;
  }
};

/// Tracks the ambiguous decisions of the reference's current run and measures their
/// sensitivities; too many of them (or one on a kink of what follows it) leave
/// report->unresolved set and nothing tracked.
template <class OutputLoss>
Expected<Resolution> prepare_resolution(ReferenceForward& ref, OutputLoss&& output_loss, GradcheckReport* report) {
  Resolution r;
  if (report->ambiguous == 0) return r;
  const std::vector<Ambiguity> found = ref.ambiguities();
  int64_t combinations = 1;
  for (const auto& a : found) combinations = std::min(combinations * a.options(), kMaxOptionCombinations + 1);
  report->unresolved = true;
  if (combinations > kMaxOptionCombinations) {
    report->unresolved_reason = "more than " + std::to_string(kMaxOptionCombinations) + " combinations of options";
    return r;
  }
  ref.track(found);
  MOSAIC_RETURN_IF_ERROR(ref.run());
  const double at_base = output_loss(nullptr);
  for (size_t d = 0; d < found.size(); ++d) {
    // One-sided quotients on each side, so a decision on a kink of what follows it (a Relu
    // output of 0 in a max-pool window of zeros moves the loss only upwards) gets the
    // slope of each side. A side is accepted where the quotients at h and h/2 agree (the
    // loss is linear there) to 1e-3, or to the loss's rounding; h starts at a sixteenth of
    // the decision's band (the options' offsets lie within the band) and halves. Not the
    // element's value: an activation at its kink has a value of ~0, and steps scaled by it
    // moved the loss less than its rounding, which measured every slope as 0 (squeezenet1_1
    // seed 17: a Relu crossing its kink inside a probe, masked as tracked, went uncorrected).
    double slope[2] = {0, 0};
    for (int side = 0; side < 2; ++side) {
      const double sign = side == 0 ? 1.0 : -1.0;
      double h = std::ldexp(std::max({found[d].band, std::ldexp(std::fabs(found[d].value), -16), 1e-12}), -4);
      bool accepted = false;
      auto quotient = [&](double step) -> Expected<double> {
        MOSAIC_RETURN_IF_ERROR(ref.nudge(d, sign * step));
        return sign * (output_loss(nullptr) - at_base) / step;
      };
      for (int k = 0; k < 20 && !accepted; ++k, h /= 2) {
        MOSAIC_ASSIGN_OR_RETURN(const double q1, quotient(h));
        MOSAIC_ASSIGN_OR_RETURN(const double q2, quotient(h / 2));
        const double noise = 4 * kLossUlps * DBL_EPSILON * std::fabs(at_base) / (h / 2);
        accepted = std::fabs(q1 - q2) <= 1e-3 * std::max(std::fabs(q1), std::fabs(q2)) + noise;
        slope[side] = q2;
      }
      if (!accepted) {
        MOSAIC_RETURN_IF_ERROR(ref.nudge(d, 0));
        report->unresolved_reason = "the loss is not linear on either side of " + found[d].where;
        ref.track({});
        MOSAIC_RETURN_IF_ERROR(ref.run());
        return Resolution{};
      }
    }
    MOSAIC_RETURN_IF_ERROR(ref.nudge(d, 0));
    r.up.push_back(slope[0]);
    r.down.push_back(slope[1]);
  }
  r.decisions = found;
  r.combinations = combinations;
  report->unresolved = false;
  return r;
}

/// f(+h) and f(-h) of one probe at one step, per combination of options, and the branch
/// switches the two evaluations caused.
struct Pair {
  std::vector<double> plus, minus;
  int64_t switches = 0;
  bool done = false;
};

/// The step sweep of one probe for combination c: halve the step until two consecutive
/// clean steps agree, then compare their Richardson extrapolation with `analytic`.
template <class PairAt>
Expected<ProbeResult> judge_probe(PairAt&& pair, int64_t c, double analytic, double gnorm, double floor,
                                  const GradcheckOptions& o) {
  ProbeResult r;
  r.analytic = analytic;
  r.outcome = ProbeOutcome::kKink;
  for (int k = 0; k < o.halvings; ++k) {
    MOSAIC_ASSIGN_OR_RETURN(const Pair* a, pair(k));
    if (k == 0) r.switches = a->switches;
    if (a->switches) continue;
    MOSAIC_ASSIGN_OR_RETURN(const Pair* b, pair(k + 1));
    if (b->switches) continue;
    const double h = std::ldexp(o.eps, -k);
    const double ap = a->plus[c], am = a->minus[c], bp = b->plus[c], bm = b->minus[c];
    const double d1 = (ap - am) / (2 * h), d2 = (bp - bm) / h;
    // A tenth of the tolerance on the tensor's own scale, and on its floor.
    const double own = 0.1 * o.tolerance * std::max(std::fabs(d2), gnorm);
    const double judge_scale = std::max(own, 0.1 * o.tolerance * floor);
    // The double loss is rounded (kLossUlps ulps of |f| bound it): a difference quotient
    // at step s carries up to 2 * noise / (2s) of it, the Richardson estimate below
    // 3 * noise / h. Where that reaches a tenth of the tolerance the step resolves
    // nothing (and agreement of the two quotients is agreement of their rounding, seen
    // on mobilenet_v2's tiny gradients): smaller steps resolve less, so stop unjudged.
    const double f = std::max({std::fabs(ap), std::fabs(am), std::fabs(bp), std::fabs(bm)});
    const double noise = 3 * kLossUlps * DBL_EPSILON * f / h;
    if (noise > judge_scale) {
      r.outcome = ProbeOutcome::kUnstable;
      break;
    }
    // Two clean steps that agree to a tenth of the tolerance: their Richardson
    // extrapolation (which cancels the h^2 term) is accurate far below it.
    if (std::fabs(d1 - d2) > judge_scale) {
      r.outcome = ProbeOutcome::kUnstable;
      continue;
    }
    r.outcome = ProbeOutcome::kJudged;
    r.numeric = (4 * d2 - d1) / 3;
    r.step = h;
    const double diff = std::fabs(r.analytic - r.numeric);
    const double own_scale = std::max({std::fabs(r.analytic), std::fabs(r.numeric), gnorm});
    r.error = diff / std::max(own_scale, floor);
    // The same judgement without the floor: where only the floor made the step resolve the
    // estimate, or kept the error within tolerance, the probe verified no more than that
    // both sides are below the floor (on mobilenet_v2 at initialisation, gradients of 1e-12
    // against noise of the same size, and a planted sign error, "passed" that way).
    r.at_floor = noise > own || std::fabs(d1 - d2) > own || diff > o.tolerance * own_scale;
    break;
  }
  return r;
}

void tally(TensorVerdict& v, const ProbeResult& r) {
  if (r.outcome == ProbeOutcome::kKink) {
    ++v.kinks;
  } else if (r.outcome == ProbeOutcome::kUnstable) {
    ++v.unstable;
  } else {
    ++v.checked;
    if (r.at_floor) ++v.at_floor;
    if (v.checked == 1 || r.error > v.worst.error) v.worst = r;
  }
}

/// The verdict of a tensor from its probes' tallies.
void conclude(TensorVerdict& v, size_t probes, const GradcheckOptions& o) {
  const int needed = std::min<int>(o.min_probes, static_cast<int>(probes));
  if (v.checked > 0 && v.worst.error > o.tolerance) {
    v.verdict = Verdict::kFail;
  } else if (v.checked < std::max(needed, 1)) {
    v.verdict = Verdict::kInconclusive;
    char buf[200];
    std::snprintf(buf, sizeof buf,
                  "%d of %zu probes judged (%d switched a branch at every step from %g down to %g, %d had no two "
                  "agreeing steps); %d needed",
                  v.checked, probes, v.kinks, o.eps, std::ldexp(o.eps, -o.halvings), v.unstable, std::max(needed, 1));
    v.reason = buf;
  } else if (v.checked - v.at_floor < std::max(needed, 1)) {
    v.verdict = Verdict::kInconclusive;
    char buf[400];
    std::snprintf(buf, sizeof buf,
                  "%d of %zu probes agreed only on the floor %.2g (gradient norm %.2g): below it a wrong sign or "
                  "scale does not show (a gradient zero in exact arithmetic, as a bias before a training-mode "
                  "BatchNormalization, lands here too); %d needed on the tensor's own scale",
                  v.at_floor, probes, v.floor, v.gradient_norm, std::max(needed, 1));
    v.reason = buf;
  }
}

/// How well combination c fits: its failing tensors, then its worst error in tolerances.
std::pair<int, double> fit(const std::vector<std::vector<TensorVerdict>>& verdicts, int64_t c, double tolerance) {
  std::pair<int, double> score{0, 0};
  for (const auto& per : verdicts) {
    const TensorVerdict& v = per[static_cast<size_t>(c)];
    score.first += v.verdict == Verdict::kFail;
    if (v.checked > 0) score.second = std::max(score.second, v.worst.error / tolerance);
  }
  return score;
}

/// The combination with the fewest failing tensors, then the smallest worst error.
int64_t best_combination(const std::vector<std::vector<TensorVerdict>>& verdicts, int64_t combinations,
                         double tolerance) {
  int64_t best = 0;
  for (int64_t c = 1; c < combinations; ++c)
    if (fit(verdicts, c, tolerance) < fit(verdicts, best, tolerance)) best = c;
  return best;
}

/// "where: option", and whether the choice mattered: a decision whose every other option
/// gives as many FAILs and a worst error within a tenth of the tolerance is immaterial.
std::string describe(const Resolution& res, const std::vector<std::vector<TensorVerdict>>& verdicts, int64_t chosen,
                     size_t d, double tolerance) {
  const auto best = fit(verdicts, chosen, tolerance);
  bool material = false;
  for (int o = 0; o < res.decisions[d].options(); ++o) {
    const auto other = fit(verdicts, res.with_option(chosen, d, o), tolerance);
    material = material || other.first != best.first || std::fabs(other.second - best.second) >= 0.1;
  }
  return res.decisions[d].where + ": " + res.decisions[d].option_name(res.option(chosen, d)) +
         (material ? "" : "; immaterial, every option gives the same verdicts");
}

/// FNV-1a over the bytes of `data`, continuing from `h`.
uint64_t fnv1a(const void* data, size_t bytes, uint64_t h = 1469598103934665603ull) {
  const auto* b = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

/// What makes two runs' reference evaluations the same (GradcheckMemo): the model, the
/// options that shape the probes and steps, and the base point (inputs, loss weights,
/// ambiguous decisions).
std::string memo_fingerprint(const Graph& graph, const GradcheckOptions& o, const std::vector<Tensor>& xs,
                             const Tensor& labels, const std::vector<Tensor>& proj, int64_t combinations,
                             int64_t ambiguous) {
  uint64_t h = fnv1a(graph.source.data(), graph.source.size());
  for (const Tensor& t : xs) h = fnv1a(t.data(), t.desc().bytes(), h);
  if (labels.defined()) h = fnv1a(labels.data(), labels.desc().bytes(), h);
  for (const Tensor& t : proj) h = fnv1a(t.data(), t.desc().bytes(), h);
  char buf[400];
  std::snprintf(buf, sizeof buf, "%s|%zu nodes|loss %d|eps %.17g|halvings %d|dirs %d|elems %d|seed %llu|input %d|%lld "
                "combinations|%lld ambiguous|%016llx", graph.source.c_str(), graph.nodes.size(), static_cast<int>(o.loss),
                o.eps, o.halvings, o.directions, o.elements, static_cast<unsigned long long>(o.seed),
                o.check_input ? 1 : 0, static_cast<long long>(combinations), static_cast<long long>(ambiguous),
                static_cast<unsigned long long>(h));
  return buf;
}

}  // namespace

namespace {

/// A gradient to check: a parameter's (or, with check_input, an input's) as the backend
/// computed it, and the reference's double value it perturbs.
struct Target {
  std::string name, value_name;
  std::vector<double>* value;
  Tensor grad;
};

/// One gradcheck run, as passes in the order run() calls them.
class GradcheckRun {
 public:
  GradcheckRun(const Graph& graph, const GradcheckOptions& o) : graph_(graph), o_(o), rng_(o.seed) {}

  Expected<GradcheckReport> run(const KernelRegistry& registry, const Placement& placement) {
    MOSAIC_RETURN_IF_ERROR(check());
    PlanOptions po;
    po.training = true;
    po.input_grads = o_.check_input;
    po.seed = o_.seed;
    MOSAIC_ASSIGN_OR_RETURN(plan_, Plan::build(graph_, placement, registry, po));
    MOSAIC_ASSIGN_OR_RETURN(ref_, ReferenceForward::create(graph_, registry, /*training=*/true));
    report_.backend = placement.default_backend;
    report_.float_reference_nodes = ref_->float_nodes();
    // Nodes that run elsewhere than the placement asked (fallbacks) are not checked as asked.
    for (const auto& s : plan_->steps())
      if (!s.conversion && s.backend != s.requested)
        report_.fallback_nodes.push_back("'" + plan_->node(s).name + "' (" + plan_->node(s).op_type + ") on " +
                                         s.backend + (s.fallback_reason.empty() ? "" : ": " + s.fallback_reason));
    MOSAIC_RETURN_IF_ERROR(draw_inputs());
    MOSAIC_RETURN_IF_ERROR(plan_->run(xs_, nullptr));
    MOSAIC_RETURN_IF_ERROR(backend_gradients());
    MOSAIC_RETURN_IF_ERROR(judge_forward());
    MOSAIC_ASSIGN_OR_RETURN(res_, prepare_resolution(*ref_, [this](double* m) { return output_loss(m); }, &report_));
    base_ = ref_->branches();
    if (o_.memo) o_.memo->begin(memo_fingerprint(graph_, o_, xs_, labels_, proj_, res_.combinations, report_.ambiguous));
    MOSAIC_RETURN_IF_ERROR(collect_targets());
    std::vector<std::vector<TensorVerdict>> verdicts(targets_.size());
    for (size_t i = 0; i < targets_.size(); ++i) MOSAIC_RETURN_IF_ERROR(judge_tensor(i, verdicts[i]));
    conclude_report(verdicts);
    return std::move(report_);
  }

 private:
  Status check() const {
    if (graph_.inputs.empty() || graph_.outputs.empty())
      return Status::invalid(graph_.source + ": gradcheck needs a model with inputs and outputs");
    for (const auto& n : graph_.nodes)
      if (n.op_type == "Dropout")
        return Status::unsupported(graph_.source + ": " + n.label() + ": gradcheck needs a deterministic forward");
    if (!(o_.eps > 0) || o_.halvings < 1 || !(o_.tolerance > 0))
      return Status::invalid("gradcheck: --eps and --tolerance must be positive, halvings at least 1");
    return Status::ok();
  }

  /// The input is ours to choose: draw it until the base point has no decision that float
  /// arithmetic could take either way (a near-tie in a max-pool window, an activation input
  /// at rounding distance from its kink), where the backend's gradient may legitimately
  /// follow the other branch.
  Status draw_inputs() {
    std::uniform_real_distribution<float> u(o_.input_lo, o_.input_hi);
    std::vector<Tensor> best;
    int64_t fewest = -1;
    for (int draw = 0; draw < std::max(o_.input_draws, 1) && fewest != 0; ++draw) {
      xs_.clear();
      for (size_t k = 0; k < graph_.inputs.size(); ++k) {
        Tensor x = Tensor::empty(graph_.value_descs.at(graph_.inputs[k].name));
        std::vector<double>& rx = ref_->input(k);
        if (x.dtype() == DType::kI64) {  // token ids: valid for the embedding that reads them
          const int64_t bound = index_bound(graph_, graph_.inputs[k].name);
          fill_ids(x, bound > 0 ? bound : 2, rng_);
          for (int64_t i = 0; i < x.numel(); ++i) rx[i] = static_cast<double>(x.i64()[i]);
          xs_.push_back(x);
          continue;
        }
        if (x.dtype() != DType::kF32)
          return Status::unsupported(graph_.source + ": input '" + graph_.inputs[k].name + "' is " +
                                     dtype_name(x.dtype()) +
                                     "; gradcheck makes up float and int64 (token id) inputs only");
        for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = u(rng_);
        for (int64_t i = 0; i < x.numel(); ++i) rx[i] = x.f32()[i];
        xs_.push_back(x);
      }
      MOSAIC_RETURN_IF_ERROR(ref_->run());
      report_.input_draws = draw + 1;
      if (fewest < 0 || ref_->branches().ambiguous < fewest) {
        fewest = ref_->branches().ambiguous;
        best = xs_;
      }
    }
    xs_ = best;
    report_.ambiguous = fewest;
    for (size_t k = 0; k < xs_.size(); ++k)
      for (int64_t i = 0; i < xs_[k].numel(); ++i) ref_->input(k)[i] = xs_[k].get(i);
    return Status::ok();
  }

  /// The loss's weights (labels for cross-entropy, projections r for the projection loss),
  /// the backend's loss (float) and its gradients, backward from the outputs.
  Status backend_gradients() {
    const size_t nout = graph_.outputs.size();
    if (o_.loss == GradcheckLoss::kCrossEntropy) {
      // Logits [N, C], or per position [N, T, V] (a label per row of the last axis).
      const Tensor& logits0 = plan_->output(0);
      if (logits0.rank() < 2)
        return Status::invalid(graph_.source + ": gradcheck needs a first output of shape [N, C] or [N, T, V]");
      const Shape rows(logits0.shape().begin(), logits0.shape().end() - 1);
      labels_ = Tensor::empty({DType::kI64, rows});
      for (int64_t i = 0; i < labels_.numel(); ++i)
        labels_.i64()[i] = static_cast<int64_t>(rng_() % static_cast<uint64_t>(logits0.shape().back()));
    } else {
      std::uniform_real_distribution<float> r(-1.f, 1.f);
      for (size_t k = 0; k < nout; ++k) {
        Tensor t = Tensor::empty({DType::kF32, plan_->output(k).shape()});
        for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = r(rng_);
        proj_.push_back(t);
      }
    }
    std::vector<Tensor> seeds;
    if (o_.loss == GradcheckLoss::kCrossEntropy) {
      Tensor d = Tensor::empty(plan_->output(0).desc());
      MOSAIC_ASSIGN_OR_RETURN(LossValue l, softmax_cross_entropy(plan_->output(0), labels_, &d));
      report_.loss = l.loss;
      seeds.push_back(d);
      for (size_t k = 1; k < nout; ++k) seeds.push_back(Tensor::empty({DType::kF32, plan_->output(k).shape()}));
    } else {
      for (size_t k = 0; k < nout; ++k) {
        const Tensor& y = plan_->output(k);
        for (int64_t i = 0; i < y.numel(); ++i) report_.loss += static_cast<double>(y.f32()[i]) * proj_[k].f32()[i];
        seeds.push_back(proj_[k]);
      }
    }
    return plan_->backward(seeds);
  }

  /// The reference loss of the current outputs in double; `magnitude` gets the scale its
  /// rounding is relative to.
  double output_loss(double* magnitude) const {
    double loss = 0, mag = 0;
    if (o_.loss == GradcheckLoss::kCrossEntropy) {
      const DTensor& y = ref_->output(0);
      const int64_t c = y.shape.back(), n = static_cast<int64_t>(y.v.size()) / c;
      for (int64_t i = 0; i < n; ++i) {
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j < c; ++j) mx = std::max(mx, y.v[i * c + j]);
        for (int64_t j = 0; j < c; ++j) sum += std::exp(y.v[i * c + j] - mx);
        loss += mx + std::log(sum) - y.v[i * c + labels_.i64()[i]];
      }
      loss /= static_cast<double>(n);
      mag = std::fabs(loss) + 1.0;
    } else {
      for (size_t k = 0; k < graph_.outputs.size(); ++k)
        for (int64_t i = 0; i < ref_->output(k).numel(); ++i) {
          loss += ref_->output(k).v[i] * proj_[k].f32()[i];
          mag += std::fabs(ref_->output(k).v[i] * proj_[k].f32()[i]);
        }
    }
    if (magnitude) *magnitude = mag;
    return loss;
  }

  Expected<double> reference_loss(const std::vector<std::string>& changed, double* magnitude) {
    MOSAIC_RETURN_IF_ERROR(ref_->run_from(changed));
    return output_loss(magnitude);
  }

  /// The float forward agrees with the double one to rounding; beyond 1e-3 it computes
  /// another function, and its gradients cannot be judged against this one's.
  Status judge_forward() {
    double magnitude = 0;
    MOSAIC_ASSIGN_OR_RETURN(report_.reference_loss, reference_loss({}, &magnitude));
    report_.forward_ok = std::fabs(report_.loss - report_.reference_loss) <= 1e-3 * std::max(magnitude, 1e-12);
    // And every output element, on the scale of its output's largest: a forward that is 1% off
    // moves a cross-entropy of small logits by less than 1e-3, but not its logits.
    for (size_t k = 0; k < graph_.outputs.size(); ++k) {
      const Tensor& y = plan_->output(k);
      const DTensor& r = ref_->output(k);
      if (y.dtype() != DType::kF32 || y.numel() != r.numel()) continue;
      double scale = 0, worst = 0;
      for (int64_t i = 0; i < r.numel(); ++i) scale = std::max(scale, std::fabs(r.v[i]));
      for (int64_t i = 0; i < r.numel(); ++i) worst = std::max(worst, std::fabs(y.f32()[i] - r.v[i]));
      report_.forward_error = std::max(report_.forward_error, worst / std::max(scale, 1e-30));
    }
    report_.forward_ok = report_.forward_ok && report_.forward_error <= 1e-3;
    return Status::ok();
  }

  /// The parameters' gradients (and with check_input the inputs'), and their norms.
  Status collect_targets() {
    for (const auto& p : plan_->parameters()) {
      std::vector<double>* v = ref_->parameter(p.name);
      if (!v) return Status::internal("gradcheck: parameter '" + p.name + "' is not in the reference forward");
      targets_.push_back({p.name, p.name, v, p.grad.clone()});
    }
    for (size_t i = 0; i < xs_.size() && o_.check_input; ++i)
      if (const Tensor* g = plan_->input_grad(i))
        targets_.push_back({"input:" + graph_.inputs[i].name, graph_.inputs[i].name, &ref_->input(i), g->clone()});
    for (const auto& t : targets_) {
      double s2 = 0;
      for (int64_t i = 0; i < t.grad.numel(); ++i) s2 += static_cast<double>(t.grad.f32()[i]) * t.grad.f32()[i];
      largest_ = std::max(largest_, norms_[t.value_name] = std::sqrt(s2));
    }
    return Status::ok();
  }

  /// Error floors. A gradient that is zero in exact arithmetic (a bias feeding a
  /// training-mode BatchNormalization, whose batch mean cancels it) is float noise in any
  /// backend, at the scale of the gradients computed alongside it: the floor of a tensor is
  /// 1e-3 of the largest gradient norm among the tensors its consumers also take (a Conv's
  /// weight for its bias; for an Add, also the producer's of its other operand), and never
  /// below 1e-6 of the largest gradient norm of the model. A bias added by its own node
  /// (PyTorch exports nn.Linear on 3-D inputs as MatMul, then Add) counts the tensors of the
  /// node that made the other operand: Add(MatMul(x, W), b) takes W's norm. (An attention
  /// key's bias has a gradient zero in exact arithmetic: the softmax does not see a shift
  /// common to every key.)
  double floor_of(const std::string& value) const {
    double f = std::max(o_.scale, 1e-6 * largest_);
    auto take = [&](const std::string& other) {
      if (auto it = norms_.find(other); it != norms_.end()) f = std::max(f, 1e-3 * it->second);
    };
    for (const auto& n : graph_.nodes)
      if (std::find(n.inputs.begin(), n.inputs.end(), value) != n.inputs.end())
        for (const auto& other : n.inputs) {
          take(other);
          if (n.op_type != "Add" || other == value) continue;
          if (const Node* p = graph_.producer(other))
            for (const auto& in : p->inputs) take(in);
        }
    return f;
  }

  /// Every tensor is judged under every combination of the ambiguous decisions' options;
  /// the backend took one combination, so the run is judged by the one that fits it best.
  Status judge_tensor(size_t index, std::vector<TensorVerdict>& per) {
    Target& t = targets_[index];
    if (o_.on_tensor) o_.on_tensor(index, targets_.size(), t.name);
    per.assign(static_cast<size_t>(res_.combinations), TensorVerdict{});
    const double gnorm = norms_.at(t.value_name), floor = floor_of(t.value_name);
    for (auto& v : per) {
      v.name = t.name;
      v.gradient_norm = gnorm;
      v.floor = floor;
    }
    const std::vector<Probe> probes = make_probes(t.grad, gnorm, o_, rng_);
    const std::vector<double> unperturbed = *t.value;  // restored exactly after every evaluation
    for (const auto& probe : probes) MOSAIC_RETURN_IF_ERROR(judge_along(t, probe, unperturbed, gnorm, floor, per));
    // Leave the downstream values as the unperturbed tensor gives them.
    MOSAIC_RETURN_IF_ERROR(ref_->run_from({t.value_name}));
    for (auto& v : per) conclude(v, probes.size(), o_);
    return Status::ok();
  }

  /// One probe of a tensor: the analytic directional derivative against central differences
  /// of the reference loss, per combination.
  Status judge_along(Target& t, const Probe& probe, const std::vector<double>& unperturbed, double gnorm, double floor,
                     std::vector<TensorVerdict>& per) {
    std::vector<double>& p = *t.value;
    double analytic = 0;
    for (const auto& [i, w] : probe.d) analytic += static_cast<double>(t.grad.f32()[i]) * w;
    // f(+h), f(-h) per combination and the branch switches they cause, per halving level
    // (lazily).
    std::vector<Pair> pairs(static_cast<size_t>(o_.halvings) + 1);
    // Every probe but the one along this backend's gradient is the same for every backend.
    const bool shared = o_.memo && probe.what != kGradientProbe;
    auto pair = [&](int k) -> Expected<const Pair*> {
      Pair& q = pairs[k];
      if (q.done) return &q;
      const std::string key = shared ? t.name + "\n" + probe.what + "\n" + std::to_string(k) : "";
      if (shared)
        if (const GradcheckMemo::Pair* m = o_.memo->find(key)) {
          q.plus = m->plus;
          q.minus = m->minus;
          q.switches = m->switches;
          q.done = true;
          return &q;
        }
      const double h = std::ldexp(o_.eps, -k);
      for (int sign : {1, -1}) {
        for (const auto& [i, w] : probe.d) p[i] = unperturbed[i] + sign * h * w;
        auto f = reference_loss({t.value_name}, nullptr);
        for (const auto& [i, w] : probe.d) p[i] = unperturbed[i];
        if (!f.ok()) return f.status();
        std::vector<double>& into = sign > 0 ? q.plus : q.minus;
        for (int64_t c = 0; c < res_.combinations; ++c) into.push_back(res_.loss(f.value(), ref_->alternatives(), c));
        q.switches += branch_changes(base_, ref_->branches());
      }
      q.done = true;
      if (shared) o_.memo->put(key, {q.plus, q.minus, q.switches});
      return &q;
    };
    for (int64_t c = 0; c < res_.combinations; ++c) {
      MOSAIC_ASSIGN_OR_RETURN(ProbeResult r, judge_probe(pair, c, analytic, gnorm, floor, o_));
      r.what = probe.what;
      tally(per[static_cast<size_t>(c)], r);
    }
    return Status::ok();
  }

  /// The verdicts of the best-fitting combination, with the decisions it resolved.
  void conclude_report(std::vector<std::vector<TensorVerdict>>& verdicts) {
    const int64_t chosen = best_combination(verdicts, res_.combinations, o_.tolerance);
    for (size_t d = 0; d < res_.decisions.size() && res_.combinations > 1; ++d)
      report_.resolved.push_back(describe(res_, verdicts, chosen, d, o_.tolerance));
    for (auto& per : verdicts) {
      TensorVerdict v = per[static_cast<size_t>(chosen)];
      if (report_.unresolved && v.verdict == Verdict::kFail) {
        // One of more ambiguous decisions than gradcheck resolves may explain the error.
        v.verdict = Verdict::kInconclusive;
        char buf[400];
        std::snprintf(buf, sizeof buf,
                      "rel err %.3g, but %lld branch decisions at the base point are ambiguous and unresolved (%s); "
                      "try another --seed",
                      v.worst.error, static_cast<long long>(report_.ambiguous), report_.unresolved_reason.c_str());
        v.reason = buf;
      }
      report_.tensors.push_back(std::move(v));
    }
  }

  const Graph& graph_;
  const GradcheckOptions& o_;
  std::mt19937_64 rng_;
  std::unique_ptr<Plan> plan_;
  std::unique_ptr<ReferenceForward> ref_;
  GradcheckReport report_;
  std::vector<Tensor> xs_;
  Tensor labels_;
  std::vector<Tensor> proj_;
  Resolution res_;
  BranchRecord base_;
  std::vector<Target> targets_;
  std::map<std::string, double> norms_;
  double largest_ = 0;
};

}  // namespace

Expected<GradcheckReport> gradcheck(const Graph& graph, const KernelRegistry& registry, const Placement& placement,
                                    const GradcheckOptions& o) {
  GradcheckRun run(graph, o);
  return run.run(registry, placement);
}

}  // namespace mosaic
