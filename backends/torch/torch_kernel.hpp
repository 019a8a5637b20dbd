// The "torch" backend: PyTorch's ATen kernels (libtorch, Debian's libtorch-dev) behind
// Mosaic's kernel interface, built as a plugin (mosaic_add_plugin) and loaded
// automatically from the build tree or the install prefix (backends/plugins.hpp).
//
// Every kernel wraps Mosaic's buffers as ATen tensors without copying (at::from_blob over
// the plan's plain row-major float32 memory), calls the ATen function PyTorch's own eager
// mode calls for the op (at::convolution, at::max_pool2d_with_indices,
// at::native_batch_norm, ...), and in training the backward function PyTorch's autograd
// calls for it (at::convolution_backward, at::max_pool2d_with_indices_backward, ...).
// Results computed into ATen's own buffers are copied into Mosaic's output, and that
// copy is part of the kernel's measured time. What ATen cannot express the way the node
// asks (asymmetric pooling pads, a dilated average pool, a dtype other than float32) is
// declined with the reason, and the placement falls back.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "backends/plugin.hpp"
#include "operators/params.hpp"

namespace mosaic::torch_backend {

/// A Mosaic tensor seen as an ATen tensor over the same memory (plain layout; float32,
/// int64 or bool).
inline at::Tensor view(const Tensor* t) {
  const at::ScalarType type = t->dtype() == DType::kI64 ? at::kLong : t->dtype() == DType::kBool ? at::kBool : at::kFloat;
  return at::from_blob(const_cast<void*>(t->data()), at::IntArrayRef(t->shape()), at::TensorOptions().dtype(type));
}

/// Base of every torch kernel: checks the dtypes, keeps the thread count Mosaic set when
/// the plan was built (ATen's lazy OpenMP initialisation would otherwise reset it to the
/// core count), and turns an ATen error (c10::Error, std::exception) into an error Status
/// that names the node: a failure of the library is an error, not a fallback.
class TorchKernel : public Kernel {
 public:
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) final;
  Status backward(const BackwardArgs& a) final;

 protected:
  /// Records the node and thread count; refuses non-float32 data: the first
  /// `float_inputs` inputs (the rest are int64 shapes or pads) and, if `float_outputs`,
  /// every output (kernels over int64 and bool tensors pass 0 and false).
  Status init_base(const KernelContext& ctx, size_t float_inputs = SIZE_MAX, bool float_outputs = true);
  virtual void run_forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) = 0;
  virtual void run_backward(const BackwardArgs& a);
  std::string label_;
  bool training_ = false;

 private:
  template <class F>
  Status guarded(const char* stage, F&& f);
  int threads_ = 1;
};

/// An element-wise op (operators/eltwise.hpp) as ATen calls: forward y = op(x), and backward
/// dx from dy and the tensors the op's row says it reads (x, y; the other is undefined).
/// nullopt where the torch backend has no mapping (the kernel declines the node).
struct TorchUnary {
  void (*forward)(const at::Tensor& x, at::Tensor& y, const UnaryArgs& a);
  void (*backward)(const at::Tensor& x, const at::Tensor& y, const at::Tensor& dy, at::Tensor& dx, const UnaryArgs& a);
};
std::optional<TorchUnary> torch_unary(UnaryOp op);

/// dx = sum of g over the axes that `shape` was broadcast along (numpy rules).
at::Tensor reduce_to(const at::Tensor& g, const Shape& shape);
/// Copies `value` into a Mosaic tensor (element count must match; converted to its dtype).
void write(const at::Tensor& value, Tensor* into);

// Each family's kernels (their .cpp files), as every backend's: register.cpp calls them all.
void add_conv_gemm_kernels(BackendRegistration& r);
void add_pool_kernels(BackendRegistration& r);
void add_eltwise_kernels(BackendRegistration& r);
void add_norm_movement_kernels(BackendRegistration& r);
void add_reduce_kernels(BackendRegistration& r);
void add_layer_norm_kernels(BackendRegistration& r);
void add_index_kernels(BackendRegistration& r);
void add_rnn_kernels(BackendRegistration& r);

inline constexpr const char* kName = "torch";

}  // namespace mosaic::torch_backend
