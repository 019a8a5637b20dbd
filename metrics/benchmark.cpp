#include "metrics/benchmark.hpp"

#include <algorithm>

#include "core/loss.hpp"
#include "core/optimizer.hpp"

namespace mosaic {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<long>(mid), v.end());
  double m = v[mid];
  if (v.size() % 2 == 0) m = (m + *std::max_element(v.begin(), v.begin() + static_cast<long>(mid))) / 2;
  return m;
}

namespace {

/// Collects per-step kernel durations (forward and backward apart) and per-iteration overhead.
class TimingObserver final : public ExecObserver {
 public:
  explicit TimingObserver(size_t steps) : per_step_(steps), backward_(steps) {}
  void on_node(const NodeEvent& e) override {
    const double d = static_cast<double>(e.end_ns - e.begin_ns);
    (e.stage == Stage::kBackward ? backward_ : per_step_)[e.step].push_back(d);
    kernel_ns_ += d;
    ++nodes_;
  }
  void on_run(const RunEvent& e) override {
    const double wall = static_cast<double>(e.end_ns - e.begin_ns);
    if (nodes_) overhead_.push_back((wall - kernel_ns_) / nodes_);
    kernel_ns_ = 0;
    nodes_ = 0;
  }
  std::vector<std::vector<double>> per_step_, backward_;
  std::vector<double> overhead_;

 private:
  double kernel_ns_ = 0;
  int nodes_ = 0;
};

/// Per-node statistics from an observer into a result.
void summarise(const TimingObserver& obs, BenchResult& r) {
  for (size_t s = 0; s < obs.per_step_.size(); ++s) {
    if (obs.per_step_[s].empty() && obs.backward_[s].empty()) continue;
    NodeStats n;
    n.step = static_cast<int>(s);
    if (!obs.per_step_[s].empty()) {
      n.median_ns = median(obs.per_step_[s]);
      n.min_ns = *std::min_element(obs.per_step_[s].begin(), obs.per_step_[s].end());
    }
    n.backward_median_ns = median(obs.backward_[s]);
    r.kernel_sum_median_ns += n.median_ns + n.backward_median_ns;
    r.nodes.push_back(n);
  }
  r.executed_nodes = static_cast<int>(r.nodes.size());
  r.overhead_per_node_ns = median(obs.overhead_);
}

}  // namespace

Expected<BenchResult> run_training_benchmark(Plan& plan, const std::vector<Tensor>& inputs, const Tensor& labels,
                                             Optimizer& optimizer, const BenchConfig& cfg) {
  BenchResult r;
  std::vector<ParamRef> params = plan.parameters();
  Tensor dlogits;
  std::vector<double> fwd, bwd, loss_t, opt_t;
  auto step = [&](ExecObserver* obs, int64_t it, bool record) -> Status {
    const int64_t t0 = now_ns();
    MOSAIC_RETURN_IF_ERROR(plan.run(inputs, nullptr, obs, it));
    const int64_t t1 = now_ns();
    if (!dlogits.defined()) dlogits = Tensor::empty({DType::kF32, plan.output(0).shape()});
    MOSAIC_RETURN_IF_ERROR(softmax_cross_entropy(plan.output(0), labels, &dlogits).status());
    std::vector<Tensor> seeds{dlogits};
    for (size_t i = 1; i < plan.graph().outputs.size(); ++i) seeds.push_back(Tensor::empty({DType::kF32, plan.output(i).shape()}));
    const int64_t t2 = now_ns();
    MOSAIC_RETURN_IF_ERROR(plan.backward(seeds, obs, it));
    const int64_t t3 = now_ns();
    MOSAIC_RETURN_IF_ERROR(optimizer.step(params));
    const int64_t t4 = now_ns();
    if (record) {
      fwd.push_back(static_cast<double>(t1 - t0));
      loss_t.push_back(static_cast<double>(t2 - t1));
      bwd.push_back(static_cast<double>(t3 - t2));
      opt_t.push_back(static_cast<double>(t4 - t3));
      r.iteration_ns.push_back(static_cast<double>(t4 - t0));
    }
    return Status::ok();
  };
  const int64_t budget_ns = static_cast<int64_t>(cfg.max_seconds * 1e9);
  const int64_t start = now_ns();
  for (int i = 0; i < std::max(cfg.warmup, 1); ++i) {
    MOSAIC_RETURN_IF_ERROR(step(nullptr, 0, false));
    ++r.warmup_done;
    if (now_ns() - start > budget_ns / 4) break;
  }
  TimingObserver obs(plan.steps().size());
  const int64_t measure_start = now_ns();
  const int total = std::max(cfg.iterations, 1) * std::max(cfg.repeats, 1);
  for (int i = 0; i < total; ++i) {
    MOSAIC_RETURN_IF_ERROR(step(&obs, i, true));
    if (now_ns() - measure_start > budget_ns * 3 / 4) {
      r.budget_hit = i + 1 < total;
      break;
    }
  }
  r.measured = static_cast<int>(r.iteration_ns.size());
  r.repeat_median_ns.push_back(median(r.iteration_ns));
  r.median_ns = median(r.iteration_ns);
  r.min_ns = *std::min_element(r.iteration_ns.begin(), r.iteration_ns.end());
  r.forward_ms = median(fwd) / 1e6;
  r.backward_ms = median(bwd) / 1e6;
  r.loss_ms = median(loss_t) / 1e6;
  r.optimizer_ms = median(opt_t) / 1e6;
  summarise(obs, r);
  return r;
}

Expected<BenchResult> run_benchmark(Plan& plan, const std::vector<Tensor>& inputs, const BenchConfig& cfg) {
  BenchResult r;
  const int64_t budget_ns = static_cast<int64_t>(cfg.max_seconds * 1e9);
  const int64_t start = now_ns();
  // Warm-up: at least one iteration; at most a quarter of the budget.
  for (int i = 0; i < std::max(cfg.warmup, 1); ++i) {
    MOSAIC_RETURN_IF_ERROR(plan.run(inputs, nullptr));
    ++r.warmup_done;
    if (now_ns() - start > budget_ns / 4) break;
  }
  TimingObserver obs(plan.steps().size());
  const int64_t measure_start = now_ns();
  int64_t it = 0;
  for (int rep = 0; rep < std::max(cfg.repeats, 1) && !r.budget_hit; ++rep) {
    std::vector<double> rep_ns;
    for (int i = 0; i < std::max(cfg.iterations, 1); ++i) {
      const int64_t t0 = now_ns();
      MOSAIC_RETURN_IF_ERROR(plan.run(inputs, nullptr, &obs, it++));
      const double d = static_cast<double>(now_ns() - t0);
      r.iteration_ns.push_back(d);
      rep_ns.push_back(d);
      if (now_ns() - measure_start > budget_ns * 3 / 4) {
        r.budget_hit = !(rep + 1 == std::max(cfg.repeats, 1) && i + 1 == std::max(cfg.iterations, 1));
        break;
      }
    }
    r.repeat_median_ns.push_back(median(rep_ns));
  }
  r.measured = static_cast<int>(r.iteration_ns.size());
  r.median_ns = median(r.iteration_ns);
  r.min_ns = *std::min_element(r.iteration_ns.begin(), r.iteration_ns.end());
  summarise(obs, r);
  return r;
}

}  // namespace mosaic
