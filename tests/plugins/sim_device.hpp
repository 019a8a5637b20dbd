// A simulated device for testing device placement without a GPU: its memory is host memory
// that holds every 32-bit word with its top bit flipped, so that a host kernel reading device
// memory, or a device kernel reading host memory, computes with negated floats (and garbled
// integers) and fails the comparison with naive. Its kernels ("devsim": Relu, and Add of
// equal shapes, forward and backward) also refuse any pointer the device did not allocate;
// it zeroes and adds gradients in its memory for training plans (unless made with
// `trains` false). Header-only: the test binary registers it in a registry of its own,
// tests/plugins/sim_device.cpp as a plugin.
//
// With `timed` set it has device-side timing (Device::timing) on a clock of its own that only
// its work advances, by fixed amounts (kReluNs, kAddNs, kCopyNs): a step timed by its
// markers takes exactly its amount, one timed on the host around a wait anything else.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "backends/cuda/device_math.hpp"  // the optimizer and loss rules cuda computes
#include "core/kernel.hpp"

namespace mosaic::sim {

inline void flip_words(void* dst, const void* src, size_t bytes) {
  std::memcpy(dst, src, bytes);
  auto* w = static_cast<uint32_t*>(dst);
  for (size_t i = 0; i < bytes / 4; ++i) w[i] ^= 0x80000000u;
}
/// Float i of device memory at p, and storing one there.
inline float load(const float* p, int64_t i) {
  uint32_t w;
  std::memcpy(&w, p + i, 4);
  w ^= 0x80000000u;
  float f;
  std::memcpy(&f, &w, 4);
  return f;
}
inline void store(float* p, int64_t i, float f) {
  uint32_t w;
  std::memcpy(&w, &f, 4);
  w ^= 0x80000000u;
  std::memcpy(p + i, &w, 4);
}

/// The simulated device's durations of its work, in ns.
inline constexpr int64_t kReluNs = 1000000, kAddNs = 2000000, kCopyNs = 500000;
/// The scratch each devsim Relu holds in the device's memory (its workspace).
inline constexpr size_t kReluWorkspaceBytes = 64;
/// The simulated device's peaks (Device::measure_peaks).
inline constexpr double kSimGflops = 0.5, kSimBandwidthGbs = 2.0;

class SimDevice : public Device {
 public:
  explicit SimDevice(size_t limit = SIZE_MAX, bool timed = false, bool trains = true)
      : timed_(timed), trains_(trains), limit_(limit) {}
  std::string name() const override { return "sim:0"; }
  Expected<void*> allocate(size_t bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (used_ + bytes > limit_)
      return Status::unsupported("out of device memory: " + std::to_string(bytes) + " bytes asked for, " +
                                 std::to_string(limit_ - used_) + " free on sim:0");
    const size_t rounded = (bytes + 63) / 64 * 64 + 64;
    void* p = std::aligned_alloc(64, rounded);
    if (!p) return Status::unsupported("out of host memory behind sim:0");
    flip_words(p, std::vector<uint8_t>(rounded, 0).data(), rounded);  // zero-filled, as the device stores it
    live_[p] = bytes;
    used_ += bytes;
    return p;
  }
  void release(void* p) noexcept override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(p);
    if (it == live_.end()) return;
    used_ -= it->second;
    live_.erase(it);
    std::free(p);
  }
  Status copy_to_device(void* dst, const void* src, size_t bytes) override {
    if (!owns(dst, bytes) || owns(src, 1)) return Status::internal("sim:0: copy_to_device from/to the wrong memory");
    flip_words(dst, src, bytes);
    ++copies_in;
    advance(copy_ns);
    std::lock_guard<std::mutex> lock(mu_);
    copied_from_.insert(src);
    return Status::ok();
  }
  /// Whether a copy to the device has read host memory at `host`.
  bool copied_from(const void* host) const {
    std::lock_guard<std::mutex> lock(mu_);
    return copied_from_.count(host) != 0;
  }
  Status copy_to_host(void* dst, const void* src, size_t bytes) override {
    if (!owns(src, bytes) || owns(dst, 1)) return Status::internal("sim:0: copy_to_host from/to the wrong memory");
    flip_words(dst, src, bytes);
    ++copies_out;
    advance(copy_ns);
    return Status::ok();
  }
  Status synchronize() override {
    ++syncs;
    return Status::ok();
  }
  bool timing(size_t markers) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (timed_ && marks_.size() < markers) marks_.resize(markers, -1);
    return timed_;
  }
  Status mark(size_t marker) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (marker >= marks_.size()) return Status::internal("sim:0: marker " + std::to_string(marker) + " was not made");
    marks_[marker] = clock_ns;
    ++marks;
    return Status::ok();
  }
  Expected<int64_t> elapsed_ns(size_t from, size_t to) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (from >= marks_.size() || to >= marks_.size() || marks_[from] < 0 || marks_[to] < 0)
      return Status::internal("sim:0: reading a marker that was not recorded");
    return marks_[to] - marks_[from];
  }
  /// Free and total: the limit it was made with (SIZE_MAX: no report).
  Expected<MemoryInfo> memory() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (limit_ == SIZE_MAX) return Status::unsupported("sim:0 has no memory limit to report");
    return MemoryInfo{static_cast<int64_t>(limit_ - used_), static_cast<int64_t>(limit_)};
  }
  /// Fixed peaks (kSimGflops, kSimBandwidthGbs), which bench divides the device's steps by.
  Expected<Peaks> measure_peaks() override {
    return Peaks{kSimGflops, kSimBandwidthGbs, 1.0, 1.0, "fixed (the simulated device)"};
  }
  /// Its clock, as a device reports its state (Device::sample).
  std::vector<std::pair<std::string, double>> sample() override { return {{"clock_ms", clock_ns / 1e6}}; }
  /// Pins as a GPU page-locks host memory: each range once (a second pin of the same
  /// address is refused, as cudaHostRegister refuses), until unpin.
  bool pin(void* host, size_t bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    return host && bytes && pinned_.emplace(host, bytes).second;
  }
  void unpin(void* host) noexcept override {
    std::lock_guard<std::mutex> lock(mu_);
    pinned_.erase(host);
  }
  /// The bytes pinned now.
  size_t pinned_bytes() const {
    std::lock_guard<std::mutex> lock(mu_);
    size_t n = 0;
    for (const auto& [p, bytes] : pinned_) n += bytes;
    return n;
  }
  bool trains() const override { return trains_; }
  Status zero(void* dst, size_t bytes) override {
    if (!trains_) return Device::zero(dst, bytes);
    if (!owns(dst, bytes)) return Status::internal("sim:0: zeroing memory outside sim:0");
    flip_words(dst, std::vector<uint8_t>(bytes, 0).data(), bytes);
    ++zeroed;
    return Status::ok();
  }
  Status accumulate(float* dst, const float* src, int64_t n) override {
    if (!trains_) return Device::accumulate(dst, src, n);
    const size_t bytes = static_cast<size_t>(n) * sizeof(float);
    if (!owns(dst, bytes) || !owns(src, bytes)) return Status::internal("sim:0: adding memory outside sim:0");
    for (int64_t i = 0; i < n; ++i) store(dst, i, load(dst, i) + load(src, i));
    ++accumulated;
    return Status::ok();
  }
  /// An optimizer step on a resident parameter, in its (sign-flipped) memory, by the cuda
  /// backend's per-element rule (backends/cuda/device_math.hpp).
  Status optimizer_step(const OptimizerRule& r, float* p, const float* g, float* s0, float* s1, int64_t n) override {
    if (!trains_) return Device::optimizer_step(r, p, g, s0, s1, n);
    const size_t bytes = static_cast<size_t>(n) * sizeof(float);
    if (n > 0 && (!owns(p, bytes) || !owns(g, bytes) || (s0 && !owns(s0, bytes)) || (s1 && !owns(s1, bytes))))
      return Status::internal("sim:0: an optimizer step outside sim:0");
    for (int64_t i = 0; i < n; ++i) {
      float v = load(p, i), a = s0 ? load(s0, i) : 0.f, b = s1 ? load(s1, i) : 0.f;
      cuda_backend::dev_optimizer_update(r, &v, load(g, i), &a, &b);
      store(p, i, v);
      if (s0) store(s0, i, a);
      if (s1) store(s1, i, b);
    }
    if (n > 0) ++optimizer_steps;
    return Status::ok();
  }
  /// A loss on logits in its memory, by the cuda backend's per-row rule (device_math.hpp's
  /// dev_loss_row_serial), reading and writing its (sign-flipped) memory.
  Status class_loss(const LossRule& r, const float* logits, const int64_t* labels, float* dlogits, double* row_loss,
                    int32_t* row_hit) override {
    if (!trains_) return Device::class_loss(r, logits, labels, dlogits, row_loss, row_hit);
    if (r.rows == 0) return Status::ok();
    const size_t n = static_cast<size_t>(r.rows * r.classes);
    if (!owns(logits, n * 4) || !owns(labels, r.rows * 8) || (dlogits && !owns(dlogits, n * 4)) ||
        !owns(row_loss, r.rows * 8) || !owns(row_hit, r.rows * 4))
      return Status::internal("sim:0: a loss outside sim:0");
    std::vector<float> x(n), d(n);
    std::vector<int64_t> label(static_cast<size_t>(r.rows));
    std::vector<double> loss(label.size());
    std::vector<int32_t> hit(label.size());
    flip_words(x.data(), logits, n * 4);  // the device's words as they are
    flip_words(label.data(), labels, label.size() * 8);
    for (int64_t i = 0; i < r.rows; ++i)
      cuda_backend::dev_loss_row_serial(r, x.data() + i * r.classes, label[i], d.data() + i * r.classes, &loss[i], &hit[i]);
    if (dlogits) flip_words(dlogits, d.data(), n * 4);
    flip_words(row_loss, loss.data(), loss.size() * 8);
    flip_words(row_hit, hit.data(), hit.size() * 4);
    ++losses;
    return Status::ok();
  }
  /// The device's work: its clock moves on by `ns`.
  void advance(int64_t ns) { clock_ns += ns; }
  /// Whether [p, p + bytes) lies inside one live allocation.
  bool owns(const void* p, size_t bytes) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.upper_bound(const_cast<void*>(p));
    if (it == live_.begin()) return false;
    --it;
    const auto* base = static_cast<const uint8_t*>(it->first);
    const auto* q = static_cast<const uint8_t*>(p);
    const size_t size = it->second, offset = static_cast<size_t>(q - base);
    return q >= base && offset < std::max<size_t>(size, 1) && offset + bytes <= std::max<size_t>(size, 1);
  }
  size_t live_allocations() const {
    std::lock_guard<std::mutex> lock(mu_);
    return live_.size();
  }
  std::atomic<int> copies_in{0}, copies_out{0}, syncs{0}, marks{0}, zeroed{0}, accumulated{0}, optimizer_steps{0}, losses{0};
  std::atomic<int64_t> clock_ns{0};
  /// What its work takes on its clock (the defaults, or the plugin's MOSAIC_SIM_*_NS).
  int64_t relu_ns = kReluNs, add_ns = kAddNs, copy_ns = kCopyNs;

 private:
  bool timed_, trains_;
  std::vector<int64_t> marks_;
  size_t limit_, used_ = 0;
  mutable std::mutex mu_;
  std::map<void*, size_t> live_, pinned_;
  std::set<const void*> copied_from_;
};

/// What devsim's kernels share: the device, and the check that every tensor is on it.
class SimKernel : public Kernel {
 public:
  explicit SimKernel(std::shared_ptr<SimDevice> device) : device_(std::move(device)) {}

 protected:
  Status on_device(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) const {
    for (const Tensor* t : src)
      if (t && (t->device() != device_.get() || !device_->owns(t->data(), t->bytes())))
        return Status::internal("devsim kernel got an input outside sim:0");
    for (const Tensor* t : dst)
      if (t && (t->device() != device_.get() || !device_->owns(t->data(), t->bytes())))
        return Status::internal("devsim kernel got an output outside sim:0");
    return Status::ok();
  }
  /// The backward arguments, all on the device.
  Status on_device(const BackwardArgs& a) const {
    std::vector<const Tensor*> in(a.src);
    for (const Tensor* t : a.diff_dst) in.push_back(t);
    return on_device(in, a.diff_src);
  }
  std::shared_ptr<SimDevice> device_;
};

class SimRelu : public SimKernel {
 public:
  /// Holds kReluWorkspaceBytes of the device's memory as its workspace (none if the device
  /// is full), as a convolution holds its algorithm's.
  explicit SimRelu(std::shared_ptr<SimDevice> device) : SimKernel(std::move(device)) {
    auto p = device_->allocate(kReluWorkspaceBytes);
    if (p.ok()) scratch_ = p.value();
  }
  ~SimRelu() override { device_->release(scratch_); }
  size_t workspace_bytes() const override { return scratch_ ? kReluWorkspaceBytes : 0; }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    if (Status st = on_device(src, dst); !st.is_ok()) return st;
    for (int64_t i = 0; i < src[0]->numel(); ++i) store(dst[0]->f32(), i, std::max(0.f, load(src[0]->f32(), i)));
    device_->advance(device_->relu_ns);
    return Status::ok();
  }
  bool has_backward() const override { return true; }
  bool backward_reads_output(size_t) const override { return false; }
  /// dx = dy where x > 0, else 0.
  Status backward(const BackwardArgs& a) override {
    if (Status st = on_device(a); !st.is_ok()) return st;
    if (!a.diff_src[0]) return Status::ok();
    for (int64_t i = 0; i < a.src[0]->numel(); ++i)
      store(a.diff_src[0]->f32(), i, load(a.src[0]->f32(), i) > 0.f ? load(a.diff_dst[0]->f32(), i) : 0.f);
    return Status::ok();
  }

 private:
  void* scratch_ = nullptr;
};

class SimAdd : public SimKernel {
 public:
  using SimKernel::SimKernel;
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    if (Status st = on_device(src, dst); !st.is_ok()) return st;
    for (int64_t i = 0; i < dst[0]->numel(); ++i)
      store(dst[0]->f32(), i, load(src[0]->f32(), i) + load(src[1]->f32(), i));
    device_->advance(device_->add_ns);
    return Status::ok();
  }
  bool has_backward() const override { return true; }
  bool backward_reads_input(size_t) const override { return false; }
  bool backward_reads_output(size_t) const override { return false; }
  /// Both operands' gradients are the output's.
  Status backward(const BackwardArgs& a) override {
    if (Status st = on_device(a); !st.is_ok()) return st;
    for (Tensor* d : a.diff_src)
      if (d)
        for (int64_t i = 0; i < d->numel(); ++i) store(d->f32(), i, load(a.diff_dst[0]->f32(), i));
    return Status::ok();
  }
};

template <class K>
KernelFactory sim_factory(std::shared_ptr<SimDevice> device) {
  return [device](const KernelContext& ctx) -> Expected<std::unique_ptr<Kernel>> {
    // Constants are shown as the host's tensors, for prepacking decisions.
    for (const Tensor* c : ctx.constants)
      if (c && c->device()) return Status::internal("devsim: a constant in KernelContext is not on the host");
    return std::unique_ptr<Kernel>(std::make_unique<K>(device));
  };
}

/// Float32 only, and Add without broadcasting.
inline KernelTraits sim_traits() {
  return {LayoutUse::kNone, [](const KernelContext& ctx) {
            for (const auto& d : ctx.inputs)
              if (d.dtype != DType::kF32) return Status::unsupported("devsim computes in float32 only");
            if (ctx.inputs.size() == 2 && ctx.inputs[0].shape != ctx.inputs[1].shape)
              return Status::unsupported("devsim adds equal shapes only");
            return Status::ok();
          }};
}

inline BackendInfo sim_backend_info(std::shared_ptr<SimDevice> device, std::string unavailable_reason = "") {
  BackendInfo info{"devsim", "test backend on a simulated device (sim:0)", nullptr, nullptr};
  info.device = std::move(device);
  if (!unavailable_reason.empty()) info.unavailable = [unavailable_reason] { return unavailable_reason; };
  return info;
}

}  // namespace mosaic::sim
