// Device: memory that is not the host's (a GPU's), and the copies in and out of it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ir/status.hpp"

namespace mosaic {

class Buffer;
class MemoryTracker;

/// A built-in optimizer's rule with its hyperparameters, for a device that computes it on
/// resident parameters (Device::optimizer_step): PyTorch's SGD (momentum, dampening, Nesterov,
/// weight decay; the momentum buffer is s0) and Adam / AdamW (the averages are s0 and s1).
struct OptimizerRule {
  enum Kind { kSgd, kAdam } kind = kSgd;
  double lr = 0.01, weight_decay = 0, momentum = 0, dampening = 0;
  bool nesterov = false;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  bool decoupled = false;  ///< AdamW: weight decay shrinks the parameter
  int64_t step = 1;        ///< t, counted from 1
  /// How many state buffers the rule keeps per parameter.
  int buffers() const { return kind == kAdam ? 2 : momentum != 0 ? 1 : 0; }
};

/// A training loss over `rows` rows of `classes` logits, for a device that computes it
/// (Device::class_loss): softmax cross-entropy, or the squared error against one-hot targets
/// (core/loss.hpp's softmax_cross_entropy and mse_one_hot), each row's gradient scaled by
/// `scale` (1 / the rows counted; for the squared error 1 / (rows counted x classes)); rows
/// labelled `ignore_index` count nothing and get a zero gradient.
struct LossRule {
  enum Kind { kCrossEntropy, kMseOneHot } kind = kCrossEntropy;
  int64_t rows = 0, classes = 0;
  int64_t ignore_index = -100;
  double scale = 0;
};

/// Where a backend's kernels compute when it is not in host memory (BackendInfo::device).
/// The planner allocates the values such a backend produces, and the resident copies of the
/// constants it reads, through allocate(); it inserts a timed copy step (mosaic.ToDevice,
/// mosaic.ToHost) wherever a value crosses between the host and the device, and calls
/// synchronize() where it needs the device's work finished (per-node times, the outputs).
/// Pointers into device memory are never read on the host: Tensor::clone copies out.
class Device {
 public:
  virtual ~Device() = default;
  /// What plans and reports show ("cuda:0").
  virtual std::string name() const = 0;
  /// `bytes` of zero-filled device memory, or an error that names the bytes asked for and
  /// what the device has left.
  virtual Expected<void*> allocate(size_t bytes) = 0;
  /// Frees what allocate() returned.
  virtual void release(void* data) noexcept = 0;
  /// Copies `bytes` from host memory to device memory, and back. Both return when the copy
  /// is complete (the host side may be reused at once).
  virtual Status copy_to_device(void* device_dst, const void* host_src, size_t bytes) = 0;
  virtual Status copy_to_host(void* host_dst, const void* device_src, size_t bytes) = 0;
  /// Waits for every kernel queued on the device so far.
  virtual Status synchronize() = 0;
  /// The device's free and total memory now, in bytes (bench --find-max-batch bounds a
  /// configuration on the device by it); optional.
  struct MemoryInfo {
    int64_t free = 0, total = 0;
  };
  virtual Expected<MemoryInfo> memory() { return Status::unsupported(name() + " does not report its memory"); }
  /// The device's measured peaks, which bench divides its steps' figures by (% of peak, the
  /// roofline): float32 GFLOP/s of its best matrix product, its memory's GB/s (a copy within
  /// it: bytes read + written per second), and the GB/s of copies in and out as the planner
  /// makes them (from and to ordinary host memory); optional, measured once per process.
  struct Peaks {
    double gflops = 0, bandwidth_gbs = 0, to_device_gbs = 0, to_host_gbs = 0;
    std::string how;  ///< what was measured ("cublasSgemm 8192^3, ...")
  };
  virtual Expected<Peaks> measure_peaks() { return Status::unsupported(name() + " does not measure its peaks"); }
  /// What the device says of itself now, as (name, value) pairs ("gpu_utilization_pct",
  /// "sm_clock_mhz", "power_w", ...): bench samples it after each configuration's timed run
  /// and reports it beside the run; empty: nothing to say (optional).
  virtual std::vector<std::pair<std::string, double>> sample() { return {}; }
  /// Page-locks `bytes` of host memory at `host` until unpin(host), so that copies between it
  /// and the device run at the bus's rate (the cuda backend: cudaHostRegister); optional:
  /// false where the device has no such thing or refused (copies work either way). Whoever
  /// pins unpins before the memory is freed. bench pins the inputs only copies to the device
  /// read (Plan::pin_inputs), as a PyTorch program pins its batches.
  virtual bool pin(void* host, size_t bytes) {
    (void)host;
    (void)bytes;
    return false;
  }
  virtual void unpin(void* host) noexcept { (void)host; }

  // ---- what a training plan needs of the device's memory (optional) ----
  // A training plan keeps the gradients of the values a device computes in the device's
  // memory: it zeroes those that several steps add to before backward, and adds each
  // contribution in. A device without both is left out of training plans, with the reason.

  /// Queues setting `bytes` at `device_dst` to zero.
  virtual Status zero(void* device_dst, size_t bytes) {
    (void)device_dst;
    (void)bytes;
    return Status::unsupported(name() + " cannot zero gradients in its memory");
  }
  /// Queues dst[i] += src[i] for `n` floats, both in the device's memory.
  virtual Status accumulate(float* device_dst, const float* device_src, int64_t n) {
    (void)device_dst;
    (void)device_src;
    (void)n;
    return Status::unsupported(name() + " cannot add gradients in its memory");
  }
  /// Whether it has zero() and accumulate(), so that training plans may compute on it.
  virtual bool trains() const { return false; }
  /// Queues one optimizer step on a parameter resident in its memory (`n` floats of p, its
  /// gradient g and the rule's state buffers s0, s1 there: SGD's momentum buffer; Adam's two
  /// averages), by the rule core/optimizer.cpp computes on the host (optional: without it a
  /// resident parameter is updated on the host, through copies). n = 0 asks whether it can.
  virtual Status optimizer_step(const OptimizerRule& rule, float* p, const float* g, float* s0, float* s1, int64_t n) {
    (void)rule;
    (void)p;
    (void)g;
    (void)s0;
    (void)s1;
    (void)n;
    return Status::unsupported(name() + " has no optimizer step in its memory");
  }
  /// Queues a loss on logits in its memory (rule.rows x rule.classes floats) against labels
  /// there (rule.rows int64, each a class in [0, classes) or the ignore index: the caller
  /// checks them): each row's gradient into dlogits, its loss term into row_loss[r] (cross-
  /// entropy: logsumexp - the label's logit; squared error: the row's sum, unscaled) and
  /// whether its arg-max (the first of equal maxima) is its label into row_hit[r], all in its
  /// memory (optional: without it the logits go to the host). rule.rows = 0 asks whether it can.
  virtual Status class_loss(const LossRule& rule, const float* logits, const int64_t* labels, float* dlogits,
                            double* row_loss, int32_t* row_hit) {
    (void)rule;
    (void)logits;
    (void)labels;
    (void)dlogits;
    (void)row_loss;
    (void)row_hit;
    return Status::unsupported(name() + " has no loss in its memory");
  }

  // ---- device-side timing (optional; the cuda backend's CUDA events) ----
  // A timed run (an observer asks for per-node times) of a device that has it puts a marker
  // before and after each of its steps, waits once at the end of the run, and reports each
  // step's time between its markers: the device's own time, without a wait per step. A device
  // without it is timed on the host around a wait after each step.

  /// Whether the device can hold `markers` markers (numbered 0 .. markers - 1) from now on;
  /// false: no device-side timing.
  virtual bool timing(size_t markers) {
    (void)markers;
    return false;
  }
  /// Queues marker `marker` after the work queued so far.
  virtual Status mark(size_t marker) {
    (void)marker;
    return Status::unsupported(name() + " has no device-side timing");
  }
  /// After synchronize(): the device's time from marker `from` to marker `to`, in ns.
  virtual Expected<int64_t> elapsed_ns(size_t from, size_t to) {
    (void)from;
    (void)to;
    return Status::unsupported(name() + " has no device-side timing");
  }
};

/// A Buffer of `bytes` on `device`, reported to `tracker`; the device's error otherwise.
Expected<std::shared_ptr<Buffer>> device_buffer(const std::shared_ptr<Device>& device, size_t bytes,
                                                MemoryTracker* tracker);

}  // namespace mosaic
