// api::find_max_batch, largest_batch (api/max_batch.hpp).
#include "api/max_batch.hpp"

#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "backends/registry.hpp"
#include "core/fuse.hpp"
#include "core/loss.hpp"
#include "core/optimizer.hpp"
#include "api/models.hpp"
#include "metrics/report.hpp"

namespace mosaic::api {
namespace {

using nlohmann::json;

/// Resident set size of the process now, from /proc/self/statm.
int64_t current_rss_bytes() {
  std::ifstream f("/proc/self/statm");
  int64_t pages = 0, resident = 0;
  f >> pages >> resident;
  return resident * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

/// MemAvailable from /proc/meminfo, in bytes (0 if unknown).
int64_t available_memory_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  std::string unit;
  while (f >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return 0;
}

struct Footprint {
  bool ok = false;          ///< built (and, for a real run, ran) without error
  std::string error;        ///< why not
  int64_t accounted = 0;    ///< weights + activations + workspace [+ gradients + optimizer state]
  int64_t rss_growth = 0;   ///< real runs: resident memory the run added to the process
  /// A plan with steps on a device (ir/device.hpp): the first such device, and what the plan
  /// holds in its memory (activations and resident constants).
  std::shared_ptr<Device> device;
  int64_t device_accounted = 0;
};

/// Memory of `label`'s plan at batch `batch`: planned only (real = false), or allocated and
/// run once (one inference, or one training step with the chosen optimizer).
Footprint footprint(const BenchOptions& o, const Placement& placement, int64_t batch, bool real) {
  Footprint f;
  // The previous run's freed memory back to the system first, so that this run's growth
  // of the resident set is its own (glibc keeps freed chunks below its mmap threshold).
  if (real) malloc_trim(0);
  const int64_t rss0 = real ? current_rss_bytes() : 0;
  CommonOptions c = o.common;
  c.batch = batch;
  auto g = load_prepared(o.model, c, nullptr);
  if (!g.ok()) {
    f.error = g.status().message();
    return f;
  }
  const bool training = o.mode == "training";
  if (o.fuse || training) fuse_graph(g.value(), fuse_options_for(placement, builtin_registry(), training));
  PlanOptions po;
  po.training = training;
  po.allocate = real;
  po.seed = o.common.seed;
  auto plan = Plan::build(g.value(), placement, builtin_registry(), po);
  if (!plan.ok()) {
    f.error = plan.status().message();
    return f;
  }
  Plan& p = *plan.value();
  int64_t extra = 0;  // training: gradients and optimizer state; the loss's gradient
  if (training) {     // of the logits, outside the plan and as large as the output ([N, T, V] for a token model)
    const auto out = g->value_descs.find(g->outputs[0].name);
    if (out != g->value_descs.end()) extra += static_cast<int64_t>(out->second.bytes());
  }
  if (real) {
    auto inputs = model_inputs(g.value(), c);
    Status st = inputs.ok() ? p.run(inputs.value(), nullptr) : inputs.status();
    if (st.is_ok() && training) {
      // A label per row of the last axis: [N] for [N, C] logits, [N, T] for a token model's.
      const Shape out = p.output(0).shape();
      Tensor labels = Tensor::empty({DType::kI64, Shape(out.begin(), out.end() - 1)});
      for (int64_t i = 0; i < labels.numel(); ++i) labels.i64()[i] = i % out.back();
      Tensor d = Tensor::empty({DType::kF32, out});
      auto loss = softmax_cross_entropy(p.output(0), labels, &d);
      st = loss.ok() ? p.backward({d}) : loss.status();
      OptimizerConfig oc;
      oc.lr = o.lr;
      auto opt = make_optimizer(o.optimizer, oc);
      std::vector<ParamRef> params = p.parameters();
      if (st.is_ok()) st = opt.ok() ? p.optimizer_step(*opt.value()) : opt.status();
      for (const auto& q : params) extra += static_cast<int64_t>(q.grad.bytes());
      if (opt.ok())
        for (const auto& per_param : opt.value()->state())
          for (const auto& buffer : per_param) extra += static_cast<int64_t>(buffer.size() * sizeof(float));
    }
    if (!st.is_ok()) {
      f.error = st.message();
      return f;
    }
    f.rss_growth = current_rss_bytes() - rss0;
  }
  f.ok = true;
  f.accounted = p.weight_bytes() + p.activation_bytes() + p.workspace_bytes() + extra;
  if (!p.devices().empty()) {
    f.device = p.devices().front();
    if (auto it = p.device_bytes().find(f.device->name()); it != p.device_bytes().end())
      f.device_accounted = it->second.activations + it->second.constants + it->second.workspace + it->second.gradients;
  }
  return f;
}

/// Real runs one search may make (each allocates and runs the model once).
constexpr int kMaxConfirmingRuns = 16;

struct MaxBatch {
  std::string label, error, note;
  std::string device;       ///< the device whose memory bounds it ("" : the host's)
  int64_t limit = 0;        ///< the bytes it was searched within
  /// What refused max_batch + 1: "accounting", "resident memory" (a real run), or
  /// "available memory" (the prediction exceeds 90% of what is available now: not run).
  std::string limited_by;
  int64_t next_rss_growth = 0;  ///< resident growth of the refused real run (limited_by resident memory)
  int64_t max_batch = 0, predicted = 0;
  Footprint at_max;
  int64_t next_accounted = 0;  ///< planned memory at max_batch + 1 (what did not fit)
  int real_runs = 0;
};

/// The search's fixed inputs and what it learns: which memory bounds a footprint, and the
/// prediction from the plan's accounting (plus what batch 1's real run and a calibration run
/// measured beyond it).
class BatchSearch {
 public:
  BatchSearch(const BenchOptions& o, const Placement& placement, int64_t limit, bool on_device, int64_t offset)
      : o_(o), placement_(placement), limit_(limit), on_device_(on_device), offset_(offset) {}

  /// What bounds a footprint: the device's bytes, or the host's (accounted, and for a real run
  /// its resident growth).
  int64_t bound(const Footprint& f) const { return on_device_ ? f.device_accounted : std::max(f.accounted, f.rss_growth); }
  bool predicted_fits(int64_t b, int64_t* bytes) const {
    const Footprint f = footprint(o_, placement_, b, false);
    const int64_t need = on_device_ ? f.device_accounted
                                    : f.accounted + offset_ + static_cast<int64_t>(untracked_per_entry_ * static_cast<double>(b - 1));
    if (bytes) *bytes = need;
    return f.ok && need <= limit_;
  }
  /// The largest batch the prediction fits: doubling, then bisection (lo fits, lo + 1 does not).
  int64_t bisect() const {
    int64_t lo = 1, hi = 2;
    while (hi <= (int64_t{1} << 30) && predicted_fits(hi, nullptr)) lo = hi, hi *= 2;
    while (hi - lo > 1) {
      const int64_t mid = lo + (hi - lo) / 2;
      (predicted_fits(mid, nullptr) ? lo : hi) = mid;
    }
    return lo;
  }
  /// Calibration: a real run at a quarter of the prediction `lo` measures how much faster the
  /// process grows with the batch than the accounting (BERT-Base training: 1.4x, the loss
  /// gradient and backward temporaries), so the confirming run is not one that outgrows the
  /// machine. Returns the prediction again with that growth.
  int64_t calibrate(int64_t lo, const Footprint& real1, MaxBatch& m) {
    if (lo < 8 || on_device_) return lo;
    const int64_t b2 = lo / 4;
    const Footprint f2 = footprint(o_, placement_, b2, true);
    ++m.real_runs;
    if (!f2.ok) return lo;
    const double grow = static_cast<double>(f2.rss_growth - real1.rss_growth) - static_cast<double>(f2.accounted - real1.accounted);
    untracked_per_entry_ = std::max(0.0, grow / static_cast<double>(b2 - 1));
    return untracked_per_entry_ > 0 ? bisect() : lo;
  }
  /// Confirms the prediction `lo` with real runs. The accounting says lo + 1 does not fit; if
  /// the run at lo does not fit either (memory the accounting does not see), searches down
  /// between the largest batch a real run confirmed and the smallest one a real run refused.
  void confirm(int64_t lo, const Footprint& real1, MaxBatch& m) const {
    int64_t fit = 1, fail = lo + 1, b = lo;
    Footprint fit_footprint = real1;
    m.limited_by = "accounting";
    while (fail - fit > 1) {
      // A real run must fit in what is available now, with a margin for what the accounting
      // does not see (the process's own heap, the allocator): one that does not would be
      // killed by the kernel, not refused. Such a batch is refused by the prediction alone.
      const int64_t room = available_memory_bytes() * 85 / 100;
      auto within_room = [&](int64_t batch) {
        int64_t need = 0;
        predicted_fits(batch, &need);
        return need <= room;
      };
      if (!on_device_ && !within_room(b)) {  // the largest batch the prediction puts within the room, by bisection
        int64_t ok = fit, bad = b;
        while (bad - ok > 1) {
          const int64_t mid = ok + (bad - ok) / 2;
          (within_room(mid) ? ok : bad) = mid;
        }
        fail = bad;
        m.limited_by = "available memory";
        if (fail - fit <= 1) break;
        b = ok;
        continue;
      }
      const Footprint f = footprint(o_, placement_, b, true);
      ++m.real_runs;
      if (f.ok && bound(f) <= limit_) {
        fit = b;
        fit_footprint = f;
      } else {
        fail = b;
        m.limited_by = on_device_ ? "device memory" : "resident memory";
        m.next_rss_growth = f.ok && !on_device_ ? f.rss_growth : 0;
        if (m.real_runs >= kMaxConfirmingRuns) break;
      }
      if (fail - fit <= 1) break;
      // First guess from how far over the limit the run was; then bisection.
      const double used = static_cast<double>(bound(f));
      const int64_t scaled =
          f.ok && used > 0 ? static_cast<int64_t>(static_cast<double>(b) * static_cast<double>(limit_) / used) : b / 2;
      b = fit == 1 && m.real_runs == 2 ? std::clamp<int64_t>(scaled, fit + 1, fail - 1) : fit + (fail - fit) / 2;
    }
    if (fail - fit > 1)
      m.note = "stopped after " + std::to_string(m.real_runs) + " real runs between " + std::to_string(fit) + " and " +
               std::to_string(fail);
    m.max_batch = fit;
    m.at_max = fit_footprint;
    predicted_fits(m.max_batch + 1, &m.next_accounted);
  }

 private:
  const BenchOptions& o_;
  const Placement& placement_;
  const int64_t limit_;
  const bool on_device_;
  const int64_t offset_;  ///< what batch 1's real run holds beyond its accounting (host only)
  /// Bytes per batch entry the process grows by beyond the accounting (backward kernels'
  /// temporaries, library scratch): measured by the calibration run.
  double untracked_per_entry_ = 0;
};

/// `limit`: the host's bytes, or with `explicit_limit` (memory_limit) the bytes of whichever
/// memory bounds the configuration. A configuration computing on a device is bounded by the
/// device's memory (what the plan holds there): 90% of what it has free unless memory_limit
/// says otherwise; its real runs fail cleanly when the device runs out (no host RSS measure,
/// no room check: an allocation the device refuses is an error, not the kernel's OOM kill).
MaxBatch find_max_batch(const BenchOptions& o, const std::string& label, const Placement& placement, int64_t limit,
                        bool explicit_limit) {
  MaxBatch m;
  m.label = label;
  // Batch 1 for real: the batch-independent memory the plan accounting does not see
  // (gradients, optimizer state).
  const Footprint real1 = footprint(o, placement, 1, true);
  ++m.real_runs;
  const Footprint plan1 = footprint(o, placement, 1, false);
  if (!real1.ok || !plan1.ok) {
    m.error = "batch 1: " + (real1.ok ? plan1.error : real1.error);
    return m;
  }
  const bool on_device = real1.device != nullptr;
  if (on_device) {
    m.device = real1.device->name();
    if (!explicit_limit) {
      const auto memory = real1.device->memory();
      if (!memory.ok()) {
        m.error = memory.status().message() + "; give a memory limit for it";
        return m;
      }
      limit = memory->free * 9 / 10;
    }
  }
  m.limit = limit;
  BatchSearch search(o, placement, limit, on_device, on_device ? 0 : real1.accounted - plan1.accounted);
  if (search.bound(real1) > limit) {
    m.error = "batch 1 needs " + format_bytes(static_cast<double>(search.bound(real1))) + ", more than the limit" +
              (on_device ? " on " + m.device : "");
    return m;
  }
  m.predicted = search.calibrate(search.bisect(), real1, m);
  search.confirm(m.predicted, real1, m);
  return m;
}

}  // namespace

int64_t default_memory_limit() { return available_memory_bytes() * 9 / 10; }

Expected<int64_t> largest_batch(const BenchOptions& o, const Placement& placement, int64_t limit) {
  const bool explicit_limit = limit > 0;
  if (limit <= 0) limit = default_memory_limit();
  if (limit <= 0) return Status::invalid("cannot read MemAvailable from /proc/meminfo; give a memory limit");
  const MaxBatch m = find_max_batch(o, placement.default_backend, placement, limit, explicit_limit);
  if (!m.error.empty()) return Status::invalid(o.model + " on " + placement.default_backend + ": " + m.error);
  return m.max_batch;
}

Expected<int64_t> parse_bytes(const std::string& text) {
  std::istringstream in(text);
  double v = 0;
  std::string unit;
  in >> v;
  if (in.fail() || !(v > 0)) return Status::invalid("`memory_limit` '" + text + "': expected a size such as 512M, 4G or 1.5GiB");
  std::getline(in, unit);
  double scale = 0;
  for (const auto& [u, k] : std::vector<std::pair<std::string, double>>{
           {"", 1}, {"B", 1}, {"K", 1024.0}, {"KB", 1024.0}, {"KiB", 1024.0}, {"M", 1048576.0}, {"MB", 1048576.0},
           {"MiB", 1048576.0}, {"G", 1073741824.0}, {"GB", 1073741824.0}, {"GiB", 1073741824.0}})
    if (unit == u) scale = k;
  if (scale == 0) return Status::invalid("`memory_limit` '" + text + "': unknown unit '" + unit + "' (B, K, M, G; KiB, MiB, GiB)");
  return static_cast<int64_t>(v * scale);
}

Expected<json> find_max_batch(const BenchOptions& o, const std::function<void(const json&, const json&)>& on_config) {
  MOSAIC_RETURN_IF_ERROR(check_bench_options(o));
  if (!o.common.inputs.empty())
    return Status::invalid("`inputs`: the largest-batch search runs each batch it tries on inputs of that batch, "
                           "which files of one shape cannot give");
  MOSAIC_ASSIGN_OR_RETURN(const BenchConfigs configs, bench_configs(o));
  MOSAIC_RETURN_IF_ERROR(set_num_threads(o.common.threads));
  MOSAIC_ASSIGN_OR_RETURN(const Graph g, load_prepared(o.model, o.common, nullptr));
  for (const auto& [label, placement] : configs) MOSAIC_RETURN_IF_ERROR(placement.check_names(g));
  int64_t limit = 0;
  std::string source = "memory limit " + o.memory_limit;
  if (o.memory_limit.empty()) {
    limit = default_memory_limit();
    source = "90% of the available memory (MemAvailable)";
    if (limit <= 0) return Status::invalid("cannot read MemAvailable from /proc/meminfo; give a `memory_limit`");
  } else {
    MOSAIC_ASSIGN_OR_RETURN(limit, parse_bytes(o.memory_limit));
  }
  json out{{"schema", "mosaic.max-batch/1"}, {"model", o.model}, {"mode", o.mode}, {"limit_bytes", limit},
           {"limit_source", source}, {"configs", json::array()}};
  for (const auto& [label, placement] : configs) {
    const MaxBatch m = find_max_batch(o, label, placement, limit, !o.memory_limit.empty());
    out["configs"].push_back({{"label", label},
                              {"max_batch", m.error.empty() ? json(m.max_batch) : json()},
                              {"predicted", m.predicted > 0 ? json(m.predicted) : json()},
                              {"device", m.device.empty() ? json() : json(m.device)},
                              {"device_limit_bytes", m.device.empty() ? json() : json(m.limit)},
                              {"accounted_bytes", m.error.empty() ? json(m.device.empty() ? m.at_max.accounted
                                                                                          : m.at_max.device_accounted)
                                                                  : json()},
                              {"rss_growth_bytes", m.error.empty() ? json(m.at_max.rss_growth) : json()},
                              {"next_accounted_bytes", m.error.empty() ? json(m.next_accounted) : json()},
                              {"confirming_runs", m.real_runs},
                              {"limited_by", m.error.empty() ? json(m.limited_by) : json()},
                              {"next_rss_growth_bytes", m.limited_by == "resident memory" ? json(m.next_rss_growth) : json()},
                              {"note", m.note.empty() ? json() : json(m.note)},
                              {"error", m.error.empty() ? json() : json(m.error)}});
    if (on_config) on_config(out, out["configs"].back());
  }
  return out;
}

}  // namespace mosaic::api
