#include "metrics/benchmark.hpp"

#include <algorithm>

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

/// Collects per-step kernel durations and per-iteration overhead.
class TimingObserver final : public ExecObserver {
 public:
  explicit TimingObserver(size_t steps) : per_step_(steps) {}
  void on_node(const NodeEvent& e) override {
    const double d = static_cast<double>(e.end_ns - e.begin_ns);
    per_step_[e.step].push_back(d);
    kernel_ns_ += d;
    ++nodes_;
  }
  void on_run(const RunEvent& e) override {
    const double wall = static_cast<double>(e.end_ns - e.begin_ns);
    if (nodes_) overhead_.push_back((wall - kernel_ns_) / nodes_);
    kernel_ns_ = 0;
    nodes_ = 0;
  }
  std::vector<std::vector<double>> per_step_;
  std::vector<double> overhead_;

 private:
  double kernel_ns_ = 0;
  int nodes_ = 0;
};

}  // namespace

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
  for (size_t s = 0; s < obs.per_step_.size(); ++s) {
    if (obs.per_step_[s].empty()) continue;
    NodeStats n;
    n.step = static_cast<int>(s);
    n.median_ns = median(obs.per_step_[s]);
    n.min_ns = *std::min_element(obs.per_step_[s].begin(), obs.per_step_[s].end());
    r.kernel_sum_median_ns += n.median_ns;
    r.nodes.push_back(n);
  }
  r.executed_nodes = static_cast<int>(r.nodes.size());
  r.overhead_per_node_ns = median(obs.overhead_);
  return r;
}

}  // namespace mosaic
