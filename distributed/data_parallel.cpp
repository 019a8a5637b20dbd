#include "distributed/data_parallel.hpp"

#include <algorithm>
#include <cstring>

namespace mosaic::dist {
namespace {

// FNV-1a, 64 bit: a cheap fingerprint of settings and parameters for cross-rank checks.
uint64_t fnv(const void* data, std::size_t bytes, uint64_t h = 1469598103934665603ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

std::string differing_ranks(const std::vector<uint64_t>& all) {
  std::string out;
  for (size_t r = 1; r < all.size(); ++r)
    if (all[r] != all[0]) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

}  // namespace

const std::vector<std::pair<std::string, std::string>>& distributed_modes() {
  static const std::vector<std::pair<std::string, std::string>> modes = {
      {"allreduce", "synchronous; gradients averaged by ring all-reduce in buckets, overlapped with backward"},
      {"allreduce-blocking", "synchronous; the same all-reduce, started after backward ends (no overlap)"},
      {"avg", "model averaging (local SGD): each rank steps on its own gradients; parameters averaged every "
              "--sync-every k steps and at epoch ends"},
  };
  return modes;
}

Expected<std::unique_ptr<DataParallel>> DataParallel::start(const std::string& mode, double bucket_mb,
                                                            int64_t sync_every, const std::string& settings) {
  const auto& modes = distributed_modes();
  if (std::none_of(modes.begin(), modes.end(), [&](const auto& m) { return m.first == mode; })) {
    std::string known;
    for (const auto& m : modes) known += (known.empty() ? "" : ", ") + m.first;
    return Status::invalid("unknown --distributed mode '" + mode + "' (known: " + known + ")");
  }
  if (!(bucket_mb > 0)) return Status::invalid("--bucket-mb must be positive");
  if (sync_every < 1) return Status::invalid("--sync-every must be at least 1");
  auto comm = Comm::world();
  if (!comm.ok()) return comm.status();
  auto dp = std::unique_ptr<DataParallel>(new DataParallel());
  dp->comm_ = comm.value();
  dp->mode_ = mode;
  dp->bucket_bytes_ = static_cast<int64_t>(bucket_mb * 1024 * 1024);
  dp->sync_every_ = sync_every;
  const std::string mine = settings + "|mode=" + mode + "|bucket=" + std::to_string(dp->bucket_bytes_) +
                           "|sync-every=" + std::to_string(sync_every);
  const auto all = dp->comm_->all_gather(fnv(mine.data(), mine.size()));
  const std::string bad = differing_ranks(all);
  if (!bad.empty())
    return Status::invalid("rank(s) " + bad + " of " + std::to_string(all.size()) +
                           " were started with other settings than rank 0; every rank must run the same command "
                           "(this rank's: " + mine + ")");
  return dp;
}

Status DataParallel::attach(const Plan& plan) {
  std::vector<ParamRef> params = plan.parameters();
  uint64_t h = fnv("params", 6);
  for (const auto& p : params) {
    h = fnv(p.name.data(), p.name.size(), h);
    const std::string shape = shape_str(p.value.shape());
    h = fnv(shape.data(), shape.size(), h);
  }
  const std::string bad = differing_ranks(comm_->all_gather(h));
  if (!bad.empty())
    return Status::invalid("rank(s) " + bad + " built other parameters (names or shapes) than rank 0: "
                           "every rank must load the same model");
  for (auto& p : params) comm_->broadcast(p.value.data(), p.value.bytes(), 0);
  if (mode_ == "avg")
    averager_ = std::make_unique<ParamAverager>(*comm_, params, sync_every_);
  else
    sync_ = std::make_unique<AllreduceSync>(*comm_, params, plan.grad_final_step(), mode_ == "allreduce", bucket_bytes_);
  return Status::ok();
}

bool DataParallel::parameters_identical(const std::vector<ParamRef>& params) {
  uint64_t h = fnv("values", 6);
  for (const auto& p : params) h = fnv(p.value.data(), p.value.bytes(), h);
  return differing_ranks(comm_->all_gather(h)).empty();
}

nlohmann::json DataParallel::report(double seconds, int64_t images) {
  const SyncTimes& t = sync_ ? sync_->times() : averager_->times();
  const Traffic& traffic = comm_->traffic();
  const int64_t sent_expected = sync_ ? sync_->expected_sent_per_step() * t.steps : averager_->expected_sent();
  const int64_t received_expected = sync_ ? sync_->expected_received_per_step() * t.steps : averager_->expected_received();
  const std::vector<double> mine = {seconds,
                                    static_cast<double>(images),
                                    t.in_backward_s,
                                    t.exposed_s,
                                    t.span_s,
                                    static_cast<double>(traffic.sent),
                                    static_cast<double>(traffic.received),
                                    static_cast<double>(sent_expected),
                                    static_cast<double>(received_expected)};
  const std::vector<double> all = comm_->all_gather(mine);
  const size_t k = mine.size();
  nlohmann::json ranks = nlohmann::json::array();
  double global_images = 0, slowest = 0, exposed = 0, span = 0;
  for (int r = 0; r < size(); ++r) {
    const double* v = all.data() + static_cast<size_t>(r) * k;
    global_images += v[1];
    slowest = std::max(slowest, v[0]);
    exposed += v[3];
    span += v[4];
    ranks.push_back({{"rank", r},
                     {"seconds", v[0]},
                     {"images", v[1]},
                     {"images_per_s", v[0] > 0 ? v[1] / v[0] : 0.0},
                     {"comm_in_backward_s", v[2]},
                     {"comm_exposed_s", v[3]},
                     {"comm_span_s", v[4]},
                     {"compute_s", v[0] - v[2] - v[3]},
                     {"bytes_sent", v[5]},
                     {"bytes_received", v[6]},
                     {"bytes_sent_expected", v[7]},
                     {"bytes_received_expected", v[8]}});
  }
  nlohmann::json out = {{"mode", mode_},
                        {"ranks", size()},
                        {"steps", t.steps},
                        {"algorithm", "ring all-reduce over MPI point-to-point (reduce-scatter + all-gather)"},
                        {"images_per_s", slowest > 0 ? global_images / slowest : 0.0},
                        {"per_rank", ranks}};
  if (sync_) {
    out["gradient_bytes"] = sync_->gradient_bytes();
    out["bucket_limit_bytes"] = bucket_bytes_;
    out["buckets"] = sync_->bucket_bytes();
    out["comm_hidden_share"] = span > 0 ? nlohmann::json(1.0 - exposed / span) : nlohmann::json();
  } else {
    out["parameter_bytes"] = averager_->parameter_bytes();
    out["sync_every"] = averager_->every();
    out["syncs"] = averager_->syncs();
    out["comm_hidden_share"] = size() > 1 ? nlohmann::json(0.0) : nlohmann::json();  // averaging blocks
  }
  return out;
}

}  // namespace mosaic::dist
