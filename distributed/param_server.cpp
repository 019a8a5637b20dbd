#include "distributed/param_server.hpp"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <numeric>

namespace mosaic::dist {
namespace {
int64_t floats_of(const Tensor& t) { return static_cast<int64_t>(t.bytes() / sizeof(float)); }
}  // namespace

PsLayout PsLayout::make(const std::vector<ParamRef>& params, int workers, int servers) {
  PsLayout l;
  l.workers = workers;
  l.servers = servers;
  l.owner.assign(params.size(), 0);
  l.shard_bytes.assign(static_cast<size_t>(servers), 0);
  std::vector<size_t> order(params.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return params[a].value.bytes() > params[b].value.bytes(); });
  for (size_t i : order) {
    const int s = static_cast<int>(std::min_element(l.shard_bytes.begin(), l.shard_bytes.end()) - l.shard_bytes.begin());
    l.owner[i] = s;
    l.shard_bytes[static_cast<size_t>(s)] += static_cast<int64_t>(params[i].value.bytes());
  }
  return l;
}

// ---- worker ----------------------------------------------------------------------------------

PsWorker::PsWorker(Comm& world, std::vector<ParamRef> params, const std::vector<int>& final_step, PsLayout layout)
    : comm_(world), params_(std::move(params)), layout_(std::move(layout)), pushed_(params_.size(), false) {
  int max_step = -1;
  for (int s : final_step) max_step = std::max(max_step, s);
  ready_after_.resize(static_cast<size_t>(max_step + 1));
  for (size_t i = 0; i < params_.size(); ++i) {
    param_bytes_ += static_cast<int64_t>(params_[i].value.bytes());
    if (final_step[i] < 0) ready_at_start_.push_back(i);
    else ready_after_[static_cast<size_t>(final_step[i])].push_back(i);
  }
}

void PsWorker::push(size_t i) {
  const Tensor& g = params_[i].grad;
  sends_.push_back(comm_.isend(g.data(), g.bytes(), layout_.server_rank(layout_.owner[i]), grad_tag(i)));
  pushed_[i] = true;
}

void PsWorker::begin_step(double lr) {
  const int64_t t0 = now_ns();
  const double go[2] = {kControlStep, lr};
  for (int s = 0; s < layout_.servers; ++s) comm_.send_control(go, 2, layout_.server_rank(s), kControlTag);
  std::fill(pushed_.begin(), pushed_.end(), false);
  sends_.clear();
  for (size_t i : ready_at_start_) push(i);
  times_.in_backward_s += static_cast<double>(now_ns() - t0) / 1e9;
}

void PsWorker::after_backward_step(int step) {
  const int64_t t0 = now_ns();
  if (step >= 0 && static_cast<size_t>(step) < ready_after_.size())
    for (size_t i : ready_after_[static_cast<size_t>(step)]) push(i);
  for (int& r : sends_)
    if (r >= 0 && comm_.test(r)) r = -1;
  times_.in_backward_s += static_cast<double>(now_ns() - t0) / 1e9;
}

void PsWorker::finish_step() {
  ++times_.steps;
  const int64_t t0 = now_ns();
  for (size_t i = 0; i < params_.size(); ++i)
    if (!pushed_[i]) push(i);
  // Backward has read the parameters for the last time this step: receive into them.
  std::vector<int> recvs;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& v = params_[i].value;
    recvs.push_back(comm_.irecv(v.data(), v.bytes(), layout_.server_rank(layout_.owner[i]), value_tag(i)));
  }
  for (int r : sends_)
    if (r >= 0) comm_.wait(r);
  for (int r : recvs) comm_.wait(r);
  sends_.clear();
  const double secs = static_cast<double>(now_ns() - t0) / 1e9;
  times_.exposed_s += secs;
  times_.span_s += secs;
}

void PsWorker::stop() {
  const double done[2] = {kControlStop, 0.0};
  for (int s = 0; s < layout_.servers; ++s) comm_.send_control(done, 2, layout_.server_rank(s), kControlTag);
}

void PsWorker::gather_state(Optimizer& optimizer) {
  auto& state = optimizer.state();
  for (int s = 0; s < layout_.servers; ++s) {
    const double ask[2] = {kControlState, 0.0};
    comm_.send_control(ask, 2, layout_.server_rank(s), kControlTag);
    double head[2];
    comm_.recv_control(head, 2, layout_.server_rank(s), kStateTag);
    if (s == 0) optimizer.set_steps(static_cast<int64_t>(head[0]));
    const auto buffers = static_cast<size_t>(head[1]);
    if (buffers > 0 && state.size() != params_.size()) state.assign(params_.size(), {});
    std::vector<int> recvs;
    for (size_t i = 0; i < params_.size(); ++i) {
      if (layout_.owner[i] != s) continue;
      Tensor& v = params_[i].value;
      recvs.push_back(comm_.irecv(v.data(), v.bytes(), layout_.server_rank(s), kStateTag, /*counted=*/false));
      if (buffers == 0) continue;
      state[i].assign(buffers, std::vector<float>(static_cast<size_t>(floats_of(v))));
      for (auto& b : state[i])
        recvs.push_back(comm_.irecv(b.data(), b.size() * sizeof(float), layout_.server_rank(s), kStateTag, false));
    }
    for (int r : recvs) comm_.wait(r);
  }
}

int64_t PsWorker::expected_sent() const { return times_.steps * param_bytes_; }
int64_t PsWorker::expected_received() const { return times_.steps * param_bytes_; }

// ---- server ----------------------------------------------------------------------------------

PsServer::PsServer(Comm& world, const std::vector<ParamRef>& params, PsLayout layout, int index, bool async,
                   Optimizer& optimizer, int64_t max_staleness)
    : comm_(world), layout_(std::move(layout)), index_(index), async_(async), optimizer_(optimizer),
      max_staleness_(max_staleness) {
  for (size_t i = 0; i < params.size(); ++i)
    if (layout_.owner[i] == index_) owned_.push_back(params[i]), owned_index_.push_back(i);
  // Resumed from a checkpoint: the optimizer holds every parameter's state in plan order;
  // this server steps only its own, in owned order.
  auto& state = optimizer_.state();
  if (!state.empty() && state.size() == params.size()) {
    std::vector<std::vector<std::vector<float>>> mine;
    for (size_t i : owned_index_) mine.push_back(std::move(state[i]));
    state = std::move(mine);
  }
}

void PsServer::send_state() {
  const auto& state = optimizer_.state();
  const size_t buffers = state.size() == owned_.size() && !state.empty() ? state[0].size() : 0;
  const double head[2] = {static_cast<double>(optimizer_.steps()), static_cast<double>(buffers)};
  comm_.send_control(head, 2, 0, kStateTag);
  std::vector<int> sends;
  for (size_t k = 0; k < owned_.size(); ++k) {
    sends.push_back(comm_.isend(owned_[k].value.data(), owned_[k].value.bytes(), 0, kStateTag, /*counted=*/false));
    if (buffers == 0) continue;
    for (const auto& b : state[k]) sends.push_back(comm_.isend(b.data(), b.size() * sizeof(float), 0, kStateTag, false));
  }
  for (int r : sends) comm_.wait(r);
}

Status PsServer::serve() { return async_ ? serve_async() : serve_sync(); }

Status PsServer::apply(double lr, const std::vector<const float*>& grads) {
  std::vector<float*> values;
  std::vector<int64_t> sizes;
  for (auto& p : owned_) values.push_back(p.value.f32()), sizes.push_back(floats_of(p.value));
  optimizer_.set_lr(lr);
  ++updates_;
  return optimizer_.step(values, grads, sizes);
}

Status PsServer::serve_sync() {
  const int W = layout_.workers;
  std::vector<std::vector<float>> incoming(owned_.size() * static_cast<size_t>(W));
  for (size_t k = 0; k < owned_.size(); ++k)
    for (int w = 0; w < W; ++w) incoming[k * W + w].resize(static_cast<size_t>(floats_of(owned_[k].value)));
  for (;;) {
    double lr = 0;
    int stopped = 0;
    for (int w = 0; w < W; ++w) {
      double c[2];
      comm_.recv_control(c, 2, w, kControlTag);
      while (w == 0 && c[0] == kControlState) {  // worker 0 checkpoints between steps
        send_state();
        comm_.recv_control(c, 2, w, kControlTag);
      }
      if (c[0] == kControlStop) ++stopped;
      if (w == 0) lr = c[1];
    }
    if (stopped == W) return Status::ok();
    if (stopped) return Status::internal(std::to_string(stopped) + " of " + std::to_string(W) +
                                         " workers stopped while the others went on (synchronous parameter server)");
    const int64_t t0 = now_ns();
    std::vector<int> recvs;
    for (size_t k = 0; k < owned_.size(); ++k)
      for (int w = 0; w < W; ++w) {
        auto& buf = incoming[k * W + w];
        recvs.push_back(comm_.irecv(buf.data(), buf.size() * sizeof(float), w, grad_tag(owned_index_[k])));
      }
    for (int r : recvs) comm_.wait(r);
    const int64_t t1 = now_ns();
    // The mean over workers, summed in worker order; held in the first worker's buffer.
    const float scale = 1.f / static_cast<float>(W);
    std::vector<const float*> grads;
    for (size_t k = 0; k < owned_.size(); ++k) {
      float* sum = incoming[k * W].data();
      const size_t n = incoming[k * W].size();
      for (int w = 1; w < W; ++w) {
        const float* g = incoming[k * W + w].data();
        for (size_t i = 0; i < n; ++i) sum[i] += g[i];
      }
      for (size_t i = 0; i < n; ++i) sum[i] *= scale;
      grads.push_back(sum);
    }
    MOSAIC_RETURN_IF_ERROR(apply(lr, grads));
    staleness_[0] += W;  // every applied gradient is current
    const int64_t t2 = now_ns();
    std::vector<int> sends;
    for (size_t k = 0; k < owned_.size(); ++k)
      for (int w = 0; w < W; ++w)
        sends.push_back(comm_.isend(owned_[k].value.data(), owned_[k].value.bytes(), w, value_tag(owned_index_[k])));
    for (int r : sends) comm_.wait(r);
    expected_ += W * layout_.shard_bytes[static_cast<size_t>(index_)];
    times_.exposed_s += static_cast<double>((t1 - t0) + (now_ns() - t2)) / 1e9;
    times_.in_backward_s += static_cast<double>(t2 - t1) / 1e9;  // a server's compute: averaging + optimizer
    ++times_.steps;
  }
}

Status PsServer::serve_async() {
  const int W = layout_.workers;
  std::vector<int64_t> pulled(static_cast<size_t>(W), 0);  // the version each worker last received
  std::vector<int64_t> clock(static_cast<size_t>(W), 0);   // pushes applied per worker
  std::vector<bool> running(static_cast<size_t>(W), true), waiting(static_cast<size_t>(W), false);
  std::vector<std::vector<float>> incoming(owned_.size());
  for (size_t k = 0; k < owned_.size(); ++k) incoming[k].resize(static_cast<size_t>(floats_of(owned_[k].value)));
  // Replies to the waiting workers the bound lets go on (all of them when unbounded).
  auto release = [&]() {
    int64_t slowest = INT64_MAX;
    for (int v = 0; v < W; ++v)
      if (running[static_cast<size_t>(v)]) slowest = std::min(slowest, clock[static_cast<size_t>(v)]);
    for (int v = 0; v < W; ++v) {
      const auto u = static_cast<size_t>(v);
      if (!waiting[u] || (max_staleness_ >= 0 && clock[u] - slowest > max_staleness_)) continue;
      const int64_t t0 = now_ns();
      std::vector<int> sends;
      for (size_t k = 0; k < owned_.size(); ++k)
        sends.push_back(comm_.isend(owned_[k].value.data(), owned_[k].value.bytes(), v, value_tag(owned_index_[k])));
      for (int r : sends) comm_.wait(r);
      times_.exposed_s += static_cast<double>(now_ns() - t0) / 1e9;
      pulled[u] = updates_;
      waiting[u] = false;
    }
  };
  int stopped = 0;
  while (stopped < W) {
    double c[2];
    const int w = comm_.recv_control(c, 2, -1, kControlTag);
    if (c[0] == kControlState) {  // worker 0 checkpoints: the shard as it is now
      send_state();
      continue;
    }
    if (c[0] == kControlStop) {
      ++stopped;
      running[static_cast<size_t>(w)] = false;
      release();  // a finished worker no longer holds the others back
      continue;
    }
    const int64_t t0 = now_ns();
    std::vector<int> recvs;
    for (size_t k = 0; k < owned_.size(); ++k)
      recvs.push_back(comm_.irecv(incoming[k].data(), incoming[k].size() * sizeof(float), w, grad_tag(owned_index_[k])));
    for (int r : recvs) comm_.wait(r);
    const int64_t t1 = now_ns();
    std::vector<const float*> grads;
    for (auto& g : incoming) grads.push_back(g.data());
    const int64_t stale = updates_ - pulled[static_cast<size_t>(w)];
    ++staleness_[static_cast<size_t>(std::min<int64_t>(stale, kStalenessBins - 1))];
    MOSAIC_RETURN_IF_ERROR(apply(c[1], grads));
    times_.exposed_s += static_cast<double>(t1 - t0) / 1e9;
    times_.in_backward_s += static_cast<double>(now_ns() - t1) / 1e9;
    ++times_.steps;
    ++clock[static_cast<size_t>(w)];
    waiting[static_cast<size_t>(w)] = true;
    expected_ += layout_.shard_bytes[static_cast<size_t>(index_)];
    release();
  }
  return Status::ok();
}

}  // namespace mosaic::dist
