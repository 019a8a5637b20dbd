#include "distributed/param_average.hpp"

namespace mosaic::dist {

ParamAverager::ParamAverager(Comm& comm, std::vector<ParamRef> params, int64_t every)
    : comm_(comm), params_(std::move(params)), every_(every), ring_(comm, 99) {
  for (const auto& p : params_) floats_ += static_cast<int64_t>(p.value.bytes() / sizeof(float));
}

bool ParamAverager::after_update(int64_t step, bool epoch_end) {
  times_.steps = step;
  if ((step % every_ != 0 && !epoch_end) || step == last_) return false;
  last_ = step;
  ++syncs_;
  if (comm_.size() < 2) return true;
  const int64_t t0 = now_ns();
  std::vector<Segment> segments;
  for (auto& p : params_) segments.push_back({p.value.f32(), static_cast<int64_t>(p.value.bytes() / sizeof(float))});
  ring_.start(std::move(segments), 1.f / static_cast<float>(comm_.size()));
  ring_.finish();
  const double secs = static_cast<double>(now_ns() - t0) / 1e9;
  times_.exposed_s += secs;
  times_.span_s += secs;
  return true;
}

int64_t ParamAverager::expected_sent() const {
  return syncs_ * RingAllreduce::expected_bytes(floats_, comm_.size(), comm_.rank());
}

int64_t ParamAverager::expected_received() const {
  return syncs_ * RingAllreduce::expected_bytes(floats_, comm_.size(), (comm_.rank() + comm_.size() - 1) % comm_.size());
}

}  // namespace mosaic::dist
