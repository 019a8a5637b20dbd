// cuda: element-wise ops (the rows of operators/eltwise.hpp the device computes), broadcasting
// Add/Sub/Mul/Div, and the shape-only ops as views of their input (no copy, no launch). Also
// the backend's registration adapters: float32 kernels, and float16/bfloat16 nodes run on them
// widened in device memory.
#include "backends/cuda/cuda_internal.hpp"

#include "core/promote.hpp"
#include "operators/params.hpp"

namespace mosaic::cuda_backend {

Expected<DevUnaryArgs> device_activation(const Node& node, const std::string& label) {
  const Activation act = fused_activation(node);
  if (!act.active()) return DevUnaryArgs{};
  const auto d = device_unary(*act.op, act.args);
  if (!d) return Status::unsupported(label + ": the cuda backend has no device form of the fused " +
                                     unary_info(*act.op).name);
  return *d;
}

void float32_kernels(const std::string&, KernelFactory&, KernelTraits& traits) {
  if (traits.supports) return;  // a kernel with its own check (Gather: float32 data, int64 indices)
  traits = KernelTraits{LayoutUse::kNone, [](const KernelContext& ctx) {
                          for (size_t i = 0; i < ctx.inputs.size(); ++i)
                            if (ctx.has_input(i) && ctx.inputs[i].dtype != DType::kF32 &&
                                !(i < ctx.constants.size() && ctx.constants[i]))
                              return Status::unsupported(ctx.node->label() + ": the cuda backend computes float32 only");
                          return Status::ok();
                        }};
}

namespace {

Float16Kind kind_of(DType t) { return t == DType::kBF16 ? Float16Kind::kBfloat16 : Float16Kind::kHalf; }

/// A float32 kernel run on a float16 or bfloat16 node (core/promote.hpp's ConvertingKernel
/// on the node's widened context): each 16-bit input widened into a float32 buffer in device
/// memory before it runs (exactly), each 16-bit output computed into one and rounded back to
/// nearest even after, as naive computes such nodes (one rounding per node). A view (Reshape
/// of a float16 tensor) stays a view: the bytes are the same in either type.
class WidenedKernel final : public ConvertingKernel {
 public:
  WidenedKernel(const KernelContext& ctx, std::shared_ptr<Promoted> p, std::unique_ptr<Kernel> inner)
      : ConvertingKernel(std::move(p), std::move(inner)), label_(ctx.node->label()) {}
  Status init() {
    if (inner().aliases_input()) return Status::ok();  // a view: no buffers
    const std::shared_ptr<Device> device = CudaDevice::instance();
    return allocate([&device](const TensorDesc& d) -> Expected<Tensor> {
      MOSAIC_ASSIGN_OR_RETURN(auto buffer, device_buffer(device, d.bytes(), nullptr));
      return Tensor::on_buffer(d, buffer);
    });
  }
  bool aliases_input() const override { return inner().aliases_input(); }

 protected:
  Status convert(const Tensor& from, Tensor& to) override {
    const cudaStream_t stream = CudaDevice::instance()->stream();
    const bool widen = to.dtype() == DType::kF32;
    const cudaError_t e =
        widen ? launch_widen(stream, kind_of(from.dtype()), static_cast<const uint16_t*>(from.data()), to.f32(), from.numel())
              : launch_narrow(stream, kind_of(to.dtype()), from.f32(), static_cast<uint16_t*>(to.data()), from.numel());
    if (e == cudaSuccess) return Status::ok();
    return Status::internal(label_ + ": " + (widen ? "widening an input: " : "rounding an output: ") + cuda_error(e));
  }
  Status view(const Tensor&, Tensor&) override { return Status::ok(); }  // aliased by the plan: never called

 private:
  std::string label_;
};

}  // namespace

void widen_float16(const std::string&, KernelFactory& factory, KernelTraits& traits) {
  if (!(traits.dtypes & dtype_bit(DType::kF32)) || (traits.dtypes & kFloat16Types)) return;  // none to widen to, or its own
  adapt_widened(factory, traits, traits.dtypes | kFloat16Types,
                [](const KernelContext& ctx, std::shared_ptr<Promoted> p,
                   std::unique_ptr<Kernel> inner) -> Expected<std::unique_ptr<Kernel>> {
                  MOSAIC_RETURN_IF_ERROR(CudaDevice::instance()->ensure_ready());
                  auto widened = std::make_unique<WidenedKernel>(ctx, std::move(p), std::move(inner));
                  MOSAIC_RETURN_IF_ERROR(widened->init());
                  return std::unique_ptr<Kernel>(std::move(widened));
                });
}

void device_kernels(const std::string& op_type, KernelFactory& factory, KernelTraits& traits) {
  float32_kernels(op_type, factory, traits);
  widen_float16(op_type, factory, traits);
}

namespace {

class UnaryKernel final : public CudaKernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_RETURN_IF_ERROR(init_base(ctx));
    const auto op = unary_op_of(ctx.node->op_type);
    if (!op) return Status::unsupported(label_ + ": not an element-wise op");
    for (size_t i = 1; i < ctx.inputs.size(); ++i)
      if (ctx.has_input(i) && !ctx.constant(i))
        return Status::unsupported(label_ + ": the cuda backend needs Clip's bounds to be constants");
    const auto d = device_unary(*op, unary_args(*op, ctx));
    if (!d) return Status::unsupported(label_ + ": the cuda backend has no kernel for " + ctx.node->op_type);
    f_ = *d;
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    return check(launch_unary(device().stream(), f_, src[0]->f32(), dst[0]->f32(), dst[0]->numel()), "launch");
  }
  bool has_backward() const override { return true; }
  bool backward_reads_input(size_t i) const override { return i == 0 && dev_derivative_reads_input(f_.op); }
  bool backward_reads_output(size_t) const override { return dev_derivative_reads_output(f_.op); }
  /// dx = dy f'(x, y); Clip's bounds (constants) get none.
  Status backward(const BackwardArgs& a) override {
    float* dx = grad_of(a, 0);
    if (!dx) return Status::ok();
    const float* x = dev_derivative_reads_input(f_.op) ? a.src[0]->f32() : nullptr;
    const float* y = dev_derivative_reads_output(f_.op) ? a.dst[0]->f32() : nullptr;
    return check(launch_unary_backward(device().stream(), f_, x, y, a.diff_dst[0]->f32(), dx, a.diff_src[0]->numel()),
                 "backward");
  }

 private:
  DevUnaryArgs f_;
};

class BinaryKernel final : public CudaKernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_RETURN_IF_ERROR(init_base(ctx));
    const auto row = binary_op_of(ctx.node->op_type);
    const auto op = row ? device_binary(*row) : std::nullopt;
    if (!op) return Status::unsupported(label_ + ": the cuda backend has no kernel for " + ctx.node->op_type);
    op_ = *op;
    const Shape& out = ctx.outputs[0].shape;
    if (out.size() > 6) return Status::unsupported(label_ + ": the cuda backend broadcasts up to 6 dimensions");
    shape_ = make_broadcast(ctx.inputs[0].shape, ctx.inputs[1].shape, out);
    for (int which = 0; which < 2; ++which) grads_[which] = make_grad_reduce(shape_, which);
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    return check(launch_binary(device().stream(), op_, shape_, src[0]->f32(), src[1]->f32(), dst[0]->f32(),
                               dst[0]->numel(), DevUnaryArgs{}),
                 "launch");
  }
  bool has_backward() const override { return true; }
  bool backward_reads_input(size_t) const override { return dev_binary_grad_reads_operands(op_); }
  bool backward_reads_output(size_t) const override { return false; }
  /// Each operand's gradient, summed over the dimensions it was broadcast along; both in one
  /// pass where nothing is broadcast.
  Status backward(const BackwardArgs& a) override {
    const bool reads = dev_binary_grad_reads_operands(op_);
    const float* x0 = reads ? a.src[0]->f32() : nullptr;
    const float* x1 = reads ? a.src[1]->f32() : nullptr;
    if (grads_[0].count == 1 && grads_[1].count == 1 && grads_[0].elements == a.diff_dst[0]->numel() &&
        grads_[1].elements == a.diff_dst[0]->numel())
      return check(launch_binary_backward_same(device().stream(), op_, a.diff_dst[0]->f32(), x0, x1, grad_of(a, 0),
                                               grad_of(a, 1), a.diff_dst[0]->numel()),
                   "backward");
    for (int which = 0; which < 2; ++which)
      if (float* d = grad_of(a, static_cast<size_t>(which)))
        MOSAIC_RETURN_IF_ERROR(check(launch_grad_reduce(device().stream(), op_, which, grads_[which],
                                                        a.diff_dst[0]->f32(), x0, x1, d, 1.f),
                                     which == 0 ? "backward (a)" : "backward (b)"));
    return Status::ok();
  }

 private:
  DevBinary op_ = DevBinary::kAdd;
  Broadcast shape_;
  GradReduce grads_[2];  // each operand's gradient sum
};

/// Reshape, Flatten, Squeeze, Unsqueeze, Identity: the output is the input's bytes (a view
/// the planner binds; forward is never called).
class ViewKernel final : public Kernel {
 public:
  Status init(const KernelContext&) { return Status::ok(); }
  bool aliases_input() const override { return true; }
  Status forward(const std::vector<const Tensor*>&, const std::vector<Tensor*>&) override { return Status::ok(); }
  /// The executor adds the output's gradient into the input's itself (Device::accumulate).
  bool has_backward() const override { return true; }
  bool backward_reads_input(size_t) const override { return false; }
  bool backward_reads_output(size_t) const override { return false; }
};

}  // namespace

void add_eltwise_kernels(BackendRegistration& r) {
  // The rows of operators/eltwise.hpp with a device form, and only those.
  for (const UnaryOpInfo& u : kUnaryOps)
    if (device_unary(u.op, UnaryArgs{})) r.kernel(u.name, make_factory<UnaryKernel>());
  for (const BinaryOpInfo& b : kBinaryOps)
    if (device_binary(b.op)) r.kernel(b.name, make_factory<BinaryKernel>());
  for (const char* op : {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"}) r.kernel(op, make_factory<ViewKernel>());
}

}  // namespace mosaic::cuda_backend
