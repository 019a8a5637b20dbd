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

bool ps_mode(const std::string& mode) { return mode == "ps" || mode == "ps-async"; }

}  // namespace

const std::vector<std::pair<std::string, std::string>>& distributed_modes() {
  static const std::vector<std::pair<std::string, std::string>> modes = {
      {"allreduce", "synchronous; gradients averaged by ring all-reduce in buckets, overlapped with backward"},
      {"allreduce-blocking", "synchronous; the same all-reduce, started after backward ends (no overlap)"},
      {"avg", "model averaging (local SGD): each rank steps on its own gradients; parameters averaged every "
              "--sync-every k steps and at epoch ends"},
      {"ps", "synchronous parameter server(s) on the last --servers ranks: workers push gradients, the servers "
             "average them, step the optimizer, workers pull parameters"},
      {"ps-async", "asynchronous parameter server(s): each worker's gradient is applied as it arrives; its "
                   "staleness is recorded"},
  };
  return modes;
}

Expected<std::unique_ptr<DataParallel>> DataParallel::start(const DataParallelOptions& o, const std::string& settings) {
  const auto& modes = distributed_modes();
  if (std::none_of(modes.begin(), modes.end(), [&](const auto& m) { return m.first == o.mode; })) {
    std::string known;
    for (const auto& m : modes) known += (known.empty() ? "" : ", ") + m.first;
    return Status::invalid("unknown --distributed mode '" + o.mode + "' (known: " + known + ")");
  }
  if (!(o.bucket_mb > 0)) return Status::invalid("--bucket-mb must be positive");
  if (o.sync_every < 1) return Status::invalid("--sync-every must be at least 1");
  if (o.servers < 1) return Status::invalid("--servers must be at least 1");
  MOSAIC_RETURN_IF_ERROR(check_collective(o.collective));
  if (o.collective != "auto" && o.mode != "allreduce" && o.mode != "allreduce-blocking")
    return Status::invalid("--collective chooses how the all-reduce modes sum gradients: it needs --distributed allreduce "
                           "or allreduce-blocking");
  if (o.max_staleness >= 0 && o.mode != "ps-async")
    return Status::invalid("--max-staleness bounds the asynchronous parameter server: it needs --distributed ps-async");
  auto comm = Comm::world();
  if (!comm.ok()) return comm.status();
  auto dp = std::unique_ptr<DataParallel>(new DataParallel());
  dp->world_ = comm.value();
  dp->options_ = o;
  dp->bucket_bytes_ = static_cast<int64_t>(o.bucket_mb * 1024 * 1024);
  const std::string mine = settings + "|mode=" + o.mode + "|bucket=" + std::to_string(dp->bucket_bytes_) +
                           "|sync-every=" + std::to_string(o.sync_every) + "|servers=" + std::to_string(o.servers) +
                           "|max-staleness=" + std::to_string(o.max_staleness) + "|collective=" + o.collective;
  const auto all = dp->world_->all_gather(fnv(mine.data(), mine.size()));
  const std::string bad = differing_ranks(all);
  if (!bad.empty())
    return Status::invalid("rank(s) " + bad + " of " + std::to_string(all.size()) +
                           " were started with other settings than rank 0; every rank must run the same command "
                           "(this rank's: " + mine + ")");
  if (ps_mode(o.mode)) {
    const int n = dp->world_->size();
    if (n < o.servers + 1)
      return Status::invalid("--distributed " + o.mode + " with --servers " + std::to_string(o.servers) + " needs at least " +
                             std::to_string(o.servers + 1) + " ranks (mpirun -np), got " + std::to_string(n));
    dp->servers_ = o.servers;
    dp->split_ = dp->world_->split(dp->is_server() ? 1 : 0);
    dp->workers_ = dp->split_.get();
  } else {
    dp->workers_ = dp->world_;
  }
  return dp;
}

Status DataParallel::attach(Plan& plan) {
  params_ = plan.parameters();
  uint64_t h = fnv("params", 6);
  for (const auto& p : params_) {
    h = fnv(p.name.data(), p.name.size(), h);
    const std::string shape = shape_str(p.value.shape());
    h = fnv(shape.data(), shape.size(), h);
  }
  const std::string bad = differing_ranks(world_->all_gather(h));
  if (!bad.empty())
    return Status::invalid("rank(s) " + bad + " built other parameters (names or shapes) than rank 0: "
                           "every rank must load the same model");
  for (auto& p : params_) world_->broadcast(p.value.data(), p.value.bytes(), 0);
  base_ = world_->traffic();
  const std::string& mode = options_.mode;
  if (mode == "avg") {
    averager_ = std::make_unique<ParamAverager>(*world_, params_, options_.sync_every);
  } else if (ps_mode(mode)) {
    layout_ = PsLayout::make(params_, world_->size() - servers_, servers_);
    if (!is_server()) ps_worker_ = std::make_unique<PsWorker>(*world_, params_, plan.grad_final_step(), layout_);
  } else {
    MOSAIC_ASSIGN_OR_RETURN(sync_, AllreduceSync::create(*world_, plan, mode == "allreduce", bucket_bytes_,
                                                          options_.collective));
    params_ = plan.parameters();  // the gradients may live in a shared window now
  }
  return Status::ok();
}

void DataParallel::detach() {
  sync_.reset();
  averager_.reset();
  ps_worker_.reset();
  ps_server_.reset();
  params_.clear();
}

Status DataParallel::serve(Optimizer& optimizer) {
  const int index = world_->rank() - layout_.workers;
  ps_server_ = std::make_unique<PsServer>(*world_, params_, layout_, index, options_.mode == "ps-async", optimizer,
                                          options_.max_staleness);
  return ps_server_->serve();
}

BackwardListener* DataParallel::listener() {
  if (sync_) return sync_.get();
  return ps_worker_.get();
}

void DataParallel::begin_step(double lr) {
  if (sync_) sync_->begin_step();
  if (ps_worker_) ps_worker_->begin_step(lr);
}

void DataParallel::finish_step() {
  if (sync_) sync_->finish_step();
  if (ps_worker_) ps_worker_->finish_step();
}

bool DataParallel::parameters_identical(const std::vector<ParamRef>& params) {
  uint64_t h = fnv("values", 6);
  for (const auto& p : params) h = fnv(p.value.data(), p.value.bytes(), h);
  return differing_ranks(workers_->all_gather(h)).empty();
}

nlohmann::json DataParallel::report(double seconds, int64_t images) {
  static const SyncTimes none;
  const SyncTimes& t = sync_ ? sync_->times() : averager_ ? averager_->times() : ps_worker_ ? ps_worker_->times()
                                                                            : ps_server_ ? ps_server_->times() : none;
  Traffic traffic = world_->traffic();
  traffic.sent -= base_.sent;
  traffic.received -= base_.received;
  int64_t sent_expected = 0, received_expected = 0;
  if (sync_) {
    sent_expected = sync_->expected_sent_per_step() * t.steps;
    received_expected = sync_->expected_received_per_step() * t.steps;
  } else if (averager_) {
    sent_expected = averager_->expected_sent();
    received_expected = averager_->expected_received();
  } else if (ps_worker_) {
    sent_expected = ps_worker_->expected_sent();
    received_expected = ps_worker_->expected_received();
  } else if (ps_server_) {
    sent_expected = received_expected = ps_server_->expected_bytes();
  }
  std::vector<double> mine = {is_server() ? 1.0 : 0.0,
                              seconds,
                              static_cast<double>(images),
                              t.in_backward_s,
                              t.exposed_s,
                              t.span_s,
                              static_cast<double>(traffic.sent),
                              static_cast<double>(traffic.received),
                              static_cast<double>(sent_expected),
                              static_cast<double>(received_expected),
                              static_cast<double>(t.steps)};
  for (int b = 0; b < kStalenessBins; ++b)
    mine.push_back(ps_server_ ? static_cast<double>(ps_server_->staleness()[static_cast<size_t>(b)]) : 0.0);
  mine.push_back(t.wait_s);
  const std::vector<double> all = world_->all_gather(mine);
  const size_t k = mine.size();
  nlohmann::json ranks = nlohmann::json::array();
  double global_images = 0, slowest = 0, exposed = 0, span = 0;
  std::vector<int64_t> staleness(kStalenessBins, 0);
  for (int r = 0; r < world_->size(); ++r) {
    const double* v = all.data() + static_cast<size_t>(r) * k;
    const bool server = v[0] != 0;
    nlohmann::json e = {{"rank", r},
                        {"role", server ? "server" : "worker"},
                        {"bytes_sent", v[6]},
                        {"bytes_received", v[7]},
                        {"bytes_sent_expected", v[8]},
                        {"bytes_received_expected", v[9]}};
    if (server) {
      e["updates"] = v[10];
      e["update_s"] = v[3];  // averaging + optimizer
      e["comm_s"] = v[4];    // receiving gradients, sending parameters
      for (int b = 0; b < kStalenessBins; ++b) staleness[static_cast<size_t>(b)] += static_cast<int64_t>(v[11 + b]);
    } else {
      global_images += v[2];
      slowest = std::max(slowest, v[1]);
      exposed += v[4];
      span += v[5];
      e.update({{"seconds", v[1]},
                {"images", v[2]},
                {"images_per_s", v[1] > 0 ? v[2] / v[1] : 0.0},
                {"comm_in_backward_s", v[3]},
                {"comm_exposed_s", v[4]},
                {"comm_wait_s", v[11 + kStalenessBins]},
                {"comm_span_s", v[5]},
                {"compute_s", v[1] - v[3] - v[4]}});
    }
    ranks.push_back(e);
  }
  nlohmann::json out = {{"mode", options_.mode},
                        {"ranks", world_->size()},
                        {"workers", world_->size() - servers_},
                        {"servers", servers_},
                        {"steps", t.steps},
                        {"images_per_s", slowest > 0 ? global_images / slowest : 0.0},
                        {"per_rank", ranks}};
  if (sync_ || averager_) out["algorithm"] = "ring all-reduce over MPI point-to-point (reduce-scatter + all-gather)";
  if (sync_ && sync_->collective() == "shm")
    out["algorithm"] = "shared-memory all-reduce: each rank sums its share of every bucket in an MPI-3 window";
  if (sync_) {
    out["collective"] = sync_->collective();
    out["gradient_bytes"] = sync_->gradient_bytes();
    out["bucket_limit_bytes"] = bucket_bytes_;
    out["buckets"] = sync_->bucket_bytes();
    out["comm_hidden_share"] = span > 0 ? nlohmann::json(1.0 - exposed / span) : nlohmann::json();
  } else if (averager_) {
    out["parameter_bytes"] = averager_->parameter_bytes();
    out["sync_every"] = averager_->every();
    out["syncs"] = averager_->syncs();
    out["comm_hidden_share"] = world_->size() > 1 ? nlohmann::json(0.0) : nlohmann::json();  // averaging blocks
  } else {
    int64_t bytes = 0;
    for (const auto& p : params_) bytes += static_cast<int64_t>(p.value.bytes());
    out["algorithm"] = "parameter server: MPI point-to-point push (gradients) and pull (parameters)";
    out["parameter_bytes"] = bytes;
    out["shard_bytes"] = layout_.shard_bytes;
    out["staleness"] = staleness;  // applied gradients by staleness 0..14, 15+ in the last bin
    out["max_staleness"] = options_.max_staleness >= 0 ? nlohmann::json(options_.max_staleness) : nlohmann::json();
    out["comm_hidden_share"] = nlohmann::json();  // pushes overlap backward, but the pull cannot
  }
  return out;
}

}  // namespace mosaic::dist
