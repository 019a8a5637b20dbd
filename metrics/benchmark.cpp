#include "metrics/benchmark.hpp"
#include "ir/interrupt.hpp"

#include <time.h>

#include <algorithm>
#include <functional>

#include "core/loss.hpp"
#include "core/optimizer.hpp"
#include "metrics/peaks.hpp"
#include "metrics/progress.hpp"

namespace mosaic {

double median(std::vector<double> v) { return describe(std::move(v)).median; }

int64_t process_cpu_ns() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec;
}

namespace {

/// Collects every kernel duration per step (forward and backward apart), the time inside
/// kernels per iteration, and per-run overhead.
class TimingObserver final : public ExecObserver {
 public:
  TimingObserver(size_t steps, TraceRecorder* trace) : forward_(steps), backward_(steps), trace_(trace) {}
  void on_node(const NodeEvent& e) override {
    if (trace_) trace_->on_node(e);
    const double d = static_cast<double>(e.end_ns - e.begin_ns);
    (e.stage == Stage::kBackward ? backward_ : forward_)[e.step].push_back(d);
    if (e.iteration >= 0) {  // negative: a metrics-overhead iteration (measure())
      const size_t it = static_cast<size_t>(e.iteration);
      if (kernel_by_iteration_.size() <= it) kernel_by_iteration_.resize(it + 1, 0);
      kernel_by_iteration_[it] += d;
    }
    run_kernel_ns_ += d;
    ++run_nodes_;
  }
  void on_run(const RunEvent& e) override {
    const double wall = static_cast<double>(e.end_ns - e.begin_ns);
    if (run_nodes_) overhead_.push_back((wall - run_kernel_ns_) / run_nodes_);
    run_kernel_ns_ = 0;
    run_nodes_ = 0;
  }
  std::vector<std::vector<double>> forward_, backward_;
  std::vector<double> overhead_, kernel_by_iteration_;

 private:
  TraceRecorder* trace_;
  double run_kernel_ns_ = 0;
  int run_nodes_ = 0;
};

/// One measured (or warm-up, with a null observer) iteration; returns its extra accounted
/// time outside the nodes (loss and optimizer in training), in nanoseconds. A negative
/// iteration number is a metrics-overhead iteration: timed by the caller, recorded nowhere.
using IterationFn = std::function<Expected<double>(ExecObserver* observer, int64_t iteration)>;

/// Each executed step's forward and backward statistics, and the share of each iteration the
/// kernels and the extra work (loss, optimizer) account for.
void summarise_nodes(TimingObserver& obs, size_t steps, const std::vector<double>& accounted, BenchResult& r) {
  for (size_t s = 0; s < steps; ++s) {
    if (obs.forward_[s].empty() && obs.backward_[s].empty()) continue;
    NodeStats n;
    n.step = static_cast<int>(s);
    n.forward_ns = std::move(obs.forward_[s]);
    n.backward_ns = std::move(obs.backward_[s]);
    n.forward = describe(n.forward_ns);
    n.backward = describe(n.backward_ns);
    r.kernel_sum_median_ns += n.forward.median + n.backward.median;
    r.nodes.push_back(std::move(n));
  }
  r.executed_nodes = static_cast<int>(r.nodes.size());
  r.overhead_per_node_ns = median(obs.overhead_);
  std::vector<double> coverage;
  for (size_t i = 0; i < r.iteration_ns.size(); ++i) {
    const double kernels = i < obs.kernel_by_iteration_.size() ? obs.kernel_by_iteration_[i] : 0;
    if (r.iteration_ns[i] > 0) coverage.push_back((kernels + accounted[i]) / r.iteration_ns[i]);
  }
  r.node_coverage = median(coverage);
}

/// What the per-node observer costs: `pairs` iterations with it and without, alternating (which
/// goes first swaps every pair, so drift hits both alike). The observer here is a scratch one
/// and negative iteration numbers tell the iteration function not to record them: these
/// iterations are not part of the results.
Status measure_overhead(int pairs, size_t steps, const IterationFn& iteration, BenchResult& r) {
  TimingObserver scratch(steps, nullptr);
  std::vector<double> on, off;
  for (int i = 0; i < pairs; ++i) {
    for (int k = 0; k < 2; ++k) {
      const bool metrics = (i + k) % 2 == 0;
      const int64_t t0 = now_ns();
      MOSAIC_RETURN_IF_ERROR(iteration(metrics ? &scratch : nullptr, -1 - i).status());
      (metrics ? on : off).push_back(static_cast<double>(now_ns() - t0));
    }
  }
  r.metrics_on_ns = median(on);
  r.metrics_off_ns = median(off);
  r.metrics_overhead = r.metrics_off_ns > 0 ? r.metrics_on_ns / r.metrics_off_ns - 1 : 0;
  return Status::ok();
}

/// Warm-up, then measured iterations as `cfg` says, into `r` (raw samples and statistics).
Status measure(const BenchConfig& cfg, size_t steps, const IterationFn& iteration, BenchResult& r,
               TraceRecorder* trace) {
  const int64_t budget_ns = static_cast<int64_t>(cfg.max_seconds * 1e9);
  const int64_t min_ns = static_cast<int64_t>(cfg.min_seconds * 1e9);
  const int64_t start = now_ns();
  const auto stop = [&cfg] { return cfg.should_stop ? cfg.should_stop() : interrupted(); };
  // Warm-up: at least one iteration; at most a quarter of the budget.
  {
    Progress warm(cfg.progress.empty() ? "" : cfg.progress + " (warm-up)");
    for (int i = 0; i < std::max(cfg.warmup, 1); ++i) {
      MOSAIC_RETURN_IF_ERROR(iteration(nullptr, 0).status());
      ++r.warmup_done;
      warm.update(i + 1, std::max(cfg.warmup, 1));
      if (stop() || now_ns() - start > budget_ns / 4) break;  // stop() first: with ranks it is a collective
    }
  }
  Progress progress(cfg.progress);
  TimingObserver obs(steps, trace);
  std::vector<double> accounted;  // per iteration: time the nodes, loss and optimizer account for
  r.adaptive = cfg.target_ci > 0;
  const int repeats = r.adaptive ? 1 : std::max(cfg.repeats, 1);
  const int64_t measure_start = now_ns();
  double cpu_ns = 0, wall_ns = 0;  // over the measuring loops of the repeats
  OthersCpuMeter others;           // other processes' CPU over the same loops
  int64_t it = 0;
  for (int rep = 0; rep < repeats && !r.budget_hit && !r.interrupted; ++rep) {
    std::vector<double> rep_ns;
    const int64_t rep_start = now_ns();
    int next_check = kAdaptiveMinIterations;  // adaptive: re-test every ~10% more samples
    // Whether this repeat has measured enough, given `done` iterations so far.
    auto enough = [&](int done) {
      if (now_ns() - rep_start < min_ns) return false;
      if (!r.adaptive) return done >= std::max(cfg.iterations, 1);
      const bool capped = cfg.max_iterations > 0 && done >= cfg.max_iterations;
      if (!capped && done < next_check) return false;
      next_check = done + std::max(1, done / 10);
      const auto half = describe(rep_ns).rel_ci_half_width();
      r.converged = half && *half <= cfg.target_ci;
      return r.converged || capped;
    };
    // CPU time over the whole repeat: two clock reads per repeat, none per iteration.
    others.start();
    const int64_t rep_cpu0 = process_cpu_ns(), rep_wall0 = now_ns();
    for (int i = 0; !enough(i); ++i) {
      const int64_t t0 = now_ns();
      auto extra = iteration(&obs, it++);
      MOSAIC_RETURN_IF_ERROR(extra.status());
      const int64_t t1 = now_ns();
      if (trace) trace->span("iteration", "iteration", t0, t1, it - 1);
      const double d = static_cast<double>(t1 - t0);
      r.iteration_ns.push_back(d);
      r.repeat_of.push_back(rep);
      rep_ns.push_back(d);
      accounted.push_back(extra.value());
      if (progress.enabled()) {
        // Fixed mode knows its total; adaptive mode does not (its target decides). Either way the
        // budget caps it: the total shown is what the budget leaves room for at the rate so far.
        double total = r.adaptive ? 0 : static_cast<double>(repeats) * std::max(cfg.iterations, 1);
        const double spent = static_cast<double>(now_ns() - measure_start);
        const double left = static_cast<double>(budget_ns) * 3 / 4 - spent;
        const double within_budget = static_cast<double>(it) + std::max(0.0, left) / (spent / static_cast<double>(it));
        const bool budget_bound = within_budget < (r.adaptive ? 1e300 : total);
        if (budget_bound) total = within_budget;
        progress.update(static_cast<double>(it), std::max(total, static_cast<double>(it)),
                        std::string(r.adaptive ? "adaptive" : "repeat " + std::to_string(rep + 1) + "/" + std::to_string(repeats)) +
                            (budget_bound ? ", until the time budget" : ""));
      }
      if (stop()) {
        r.interrupted = true;
        break;
      }
      if (now_ns() - measure_start > budget_ns * 3 / 4) {
        r.budget_hit = !(rep + 1 == repeats && enough(i + 1));
        break;
      }
    }
    cpu_ns += static_cast<double>(process_cpu_ns() - rep_cpu0);
    wall_ns += static_cast<double>(now_ns() - rep_wall0);
    others.stop();
    r.repeat_median_ns.push_back(median(rep_ns));
  }
  r.measured = static_cast<int>(r.iteration_ns.size());
  r.iteration = describe(r.iteration_ns);
  r.cpu_cores = wall_ns > 0 ? cpu_ns / wall_ns : 0;
  r.others_cpu = others.share();

  summarise_nodes(obs, steps, accounted, r);
  if (cfg.overhead_pairs > 0) return measure_overhead(cfg.overhead_pairs, steps, iteration, r);
  return Status::ok();
}

}  // namespace

Expected<BenchResult> run_training_benchmark(Plan& plan, const std::vector<Tensor>& inputs, const Tensor& labels,
                                             Optimizer& optimizer, const BenchConfig& cfg, TraceRecorder* trace,
                                             GradientExchange* exchange) {
  BenchResult r;
  std::vector<ParamRef> params = plan.parameters();
  // The host buffers copied to and from a device each step are page-locked while timed: the
  // inputs only a device reads, the parameters and their gradients (the planner keeps them
  // the host's).
  const PinnedHost pinned_inputs = plan.pin_inputs(inputs);
  const PinnedHost pinned_parameters = plan.pin_parameters();
  r.pinned_input_bytes = static_cast<int64_t>(pinned_inputs.bytes());
  r.pinned_parameter_bytes = static_cast<int64_t>(pinned_parameters.bytes());
  std::vector<double> fwd, bwd, loss_t, opt_t;
  double stage_cpu[4] = {0, 0, 0, 0}, stage_wall[4] = {0, 0, 0, 0};  // forward, loss, backward, optimizer
  bool stage_pass = false;
  auto step = [&](ExecObserver* obs, int64_t it) -> Expected<double> {
    // Per-stage CPU clocks only in the untimed stage pass (kStageCpuSteps).
    auto cpu = [&] { return stage_pass ? process_cpu_ns() : 0; };
    int64_t c[5];
    c[0] = cpu();
    const int64_t t0 = now_ns();
    MOSAIC_RETURN_IF_ERROR(plan.run(inputs, nullptr, obs, it));
    const int64_t t1 = now_ns();
    c[1] = cpu();
    MOSAIC_RETURN_IF_ERROR(plan.loss("cross-entropy", labels).status());  // where the logits are
    c[2] = cpu();
    const int64_t t2 = now_ns();
    if (exchange) exchange->begin_step();
    MOSAIC_RETURN_IF_ERROR(plan.backward_from_loss(obs, it, exchange));
    if (exchange) exchange->finish_step();  // data-parallel: gradients averaged over ranks (in the backward stage)
    const int64_t t3 = now_ns();
    c[3] = cpu();
    MOSAIC_RETURN_IF_ERROR(plan.optimizer_step(optimizer));  // resident parameters on their device
    const int64_t t4 = now_ns();
    c[4] = cpu();
    if (stage_pass) {
      const int64_t t[5] = {t0, t1, t2, t3, t4};
      for (int k = 0; k < 4; ++k) {
        stage_cpu[k] += static_cast<double>(c[k + 1] - c[k]);
        stage_wall[k] += static_cast<double>(t[k + 1] - t[k]);
      }
    }
    if (obs && trace) {
      trace->span("forward", "stage", t0, t1, it);
      trace->span("loss", "stage", t1, t2, it);
      trace->span("backward", "stage", t2, t3, it);
      trace->span("optimizer step", "stage", t3, t4, it);
    }
    if (obs && it >= 0) {  // it < 0: metrics-overhead iterations, not results
      fwd.push_back(static_cast<double>(t1 - t0));
      loss_t.push_back(static_cast<double>(t2 - t1));
      bwd.push_back(static_cast<double>(t3 - t2));
      opt_t.push_back(static_cast<double>(t4 - t3));
    }
    return static_cast<double>((t2 - t1) + (t4 - t3));
  };
  MOSAIC_RETURN_IF_ERROR(measure(cfg, plan.steps().size(), step, r, trace));
  stage_pass = true;
  for (int i = 0; i < kStageCpuSteps; ++i) MOSAIC_RETURN_IF_ERROR(step(nullptr, -1).status());
  r.forward_ms = median(fwd) / 1e6;
  r.backward_ms = median(bwd) / 1e6;
  r.loss_ms = median(loss_t) / 1e6;
  r.optimizer_ms = median(opt_t) / 1e6;
  const char* stage_names[4] = {"forward", "loss", "backward", "optimizer"};
  for (int k = 0; k < 4; ++k) r.stage_cpu_cores.emplace_back(stage_names[k], stage_wall[k] > 0 ? stage_cpu[k] / stage_wall[k] : 0);
  for (const auto& p : params) r.gradient_bytes += static_cast<int64_t>(p.grad.bytes());
  for (const auto& per_param : optimizer.state())
    for (const auto& buffer : per_param) r.optimizer_state_bytes += static_cast<int64_t>(buffer.size() * sizeof(float));
  return r;
}

Expected<BenchResult> run_benchmark(Plan& plan, const std::vector<Tensor>& inputs, const BenchConfig& cfg,
                                   TraceRecorder* trace) {
  BenchResult r;
  // Inputs that go straight to a device are page-locked while timed, as a PyTorch program
  // pins its batches (pin_memory): their copies run at the bus's rate.
  const PinnedHost pinned = plan.pin_inputs(inputs);
  r.pinned_input_bytes = static_cast<int64_t>(pinned.bytes());
  auto run = [&](ExecObserver* obs, int64_t it) -> Expected<double> {
    MOSAIC_RETURN_IF_ERROR(plan.run(inputs, nullptr, obs, it));
    return 0.0;
  };
  MOSAIC_RETURN_IF_ERROR(measure(cfg, plan.steps().size(), run, r, trace));
  return r;
}

}  // namespace mosaic
