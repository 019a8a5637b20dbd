// cuda: element-wise ops (the rows of operators/eltwise.hpp the device computes), broadcasting
// Add/Sub/Mul/Div, and the shape-only ops as views of their input (no copy, no launch).
#include "backends/cuda/cuda_internal.hpp"

#include "operators/params.hpp"

namespace mosaic::cuda_backend {

std::optional<DevUnaryArgs> device_unary(UnaryOp op, const UnaryArgs& a) {
  DevUnaryArgs d;
  d.alpha = static_cast<float>(a.alpha);
  d.beta = static_cast<float>(a.beta);
  d.gamma = static_cast<float>(a.gamma);
  d.lo = static_cast<float>(a.lo);
  d.hi = static_cast<float>(a.hi);
  switch (op) {
    case UnaryOp::kRelu: d.op = DevUnary::kRelu; break;
    case UnaryOp::kLeakyRelu: d.op = DevUnary::kLeakyRelu; break;
    case UnaryOp::kSigmoid: d.op = DevUnary::kSigmoid; break;
    case UnaryOp::kTanh: d.op = DevUnary::kTanh; break;
    case UnaryOp::kClip: d.op = DevUnary::kClip; break;
    case UnaryOp::kExp: d.op = DevUnary::kExp; break;
    case UnaryOp::kLog: d.op = DevUnary::kLog; break;
    case UnaryOp::kSqrt: d.op = DevUnary::kSqrt; break;
    case UnaryOp::kErf: d.op = DevUnary::kErf; break;
    case UnaryOp::kNeg: d.op = DevUnary::kNeg; break;
    case UnaryOp::kAbs: d.op = DevUnary::kAbs; break;
    case UnaryOp::kReciprocal: d.op = DevUnary::kReciprocal; break;
    case UnaryOp::kSoftplus: d.op = DevUnary::kSoftplus; break;
    case UnaryOp::kSoftsign: d.op = DevUnary::kSoftsign; break;
    case UnaryOp::kElu: d.op = DevUnary::kElu; break;
    case UnaryOp::kSelu: d.op = DevUnary::kSelu; break;
    case UnaryOp::kHardSigmoid: d.op = DevUnary::kHardSigmoid; break;
    case UnaryOp::kHardSwish: d.op = DevUnary::kHardSwish; break;
    case UnaryOp::kGelu: d.op = a.tanh ? DevUnary::kGeluTanh : DevUnary::kGelu; break;
    case UnaryOp::kSin: d.op = DevUnary::kSin; break;
    case UnaryOp::kCos: d.op = DevUnary::kCos; break;
    default: return std::nullopt;
  }
  return d;
}

Expected<DevUnaryArgs> device_activation(const Node& node, const std::string& label) {
  const Activation act = fused_activation(node);
  if (!act.active()) return DevUnaryArgs{};
  const auto d = device_unary(*act.op, act.args);
  if (!d) return Status::unsupported(label + ": the cuda backend has no device form of the fused " +
                                     unary_info(*act.op).name);
  return *d;
}

void add(PluginRegistrar& r, Status& st, const std::string& op, KernelFactory factory) {
  if (!st.is_ok()) return;
  st = r.add_kernel("cuda", op, std::move(factory), KernelTraits{LayoutUse::kNone, [](const KernelContext& ctx) {
                      for (size_t i = 0; i < ctx.inputs.size(); ++i)
                        if (ctx.has_input(i) && ctx.inputs[i].dtype != DType::kF32 && !(i < ctx.constants.size() && ctx.constants[i]))
                          return Status::unsupported(ctx.node->label() + ": the cuda backend computes float32 only");
                      return Status::ok();
                    }});
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

 private:
  DevUnaryArgs f_;
};

class BinaryKernel final : public CudaKernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_RETURN_IF_ERROR(init_base(ctx));
    const std::string& t = ctx.node->op_type;
    op_ = t == "Add" ? DevBinary::kAdd : t == "Sub" ? DevBinary::kSub : t == "Mul" ? DevBinary::kMul : DevBinary::kDiv;
    const Shape& out = ctx.outputs[0].shape;
    if (out.size() > 6) return Status::unsupported(label_ + ": the cuda backend broadcasts up to 6 dimensions");
    shape_.rank = static_cast<int>(out.size());
    for (size_t d = 0; d < out.size(); ++d) shape_.dims[d] = out[d];
    strides(ctx.inputs[0].shape, shape_.a_strides);
    strides(ctx.inputs[1].shape, shape_.b_strides);
    collapse();
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    return check(launch_binary(device().stream(), op_, shape_, src[0]->f32(), src[1]->f32(), dst[0]->f32(),
                               dst[0]->numel(), DevUnaryArgs{}),
                 "launch");
  }

 private:
  /// Right-aligned strides of `in` over the output's dimensions, 0 where it is broadcast.
  void strides(const Shape& in, int64_t* out) const {
    int64_t step = 1;
    for (int d = shape_.rank - 1, i = static_cast<int>(in.size()) - 1; d >= 0; --d, --i) {
      const int64_t dim = i >= 0 ? in[i] : 1;
      out[d] = dim == 1 ? 0 : step;
      step *= dim;
    }
  }
  /// Drops dimensions of size 1 and merges each dimension into the one outside it where both
  /// operands step over the pair as over one dimension: operands of the output's shape become
  /// one contiguous run (the kernel's vectorised path), a broadcast keeps only the dimensions
  /// its indexing needs.
  void collapse() {
    Broadcast c;
    for (int d = 0; d < shape_.rank; ++d) {
      const int64_t n = shape_.dims[d], a = shape_.a_strides[d], b = shape_.b_strides[d];
      if (n == 1) continue;
      if (c.rank > 0 && c.a_strides[c.rank - 1] == a * n && c.b_strides[c.rank - 1] == b * n) {
        c.dims[c.rank - 1] *= n;
        c.a_strides[c.rank - 1] = a;
        c.b_strides[c.rank - 1] = b;
      } else {
        c.dims[c.rank] = n;
        c.a_strides[c.rank] = a;
        c.b_strides[c.rank] = b;
        ++c.rank;
      }
    }
    shape_ = c;
  }
  DevBinary op_ = DevBinary::kAdd;
  Broadcast shape_;
};

/// Reshape, Flatten, Squeeze, Unsqueeze, Identity: the output is the input's bytes (a view
/// the planner binds; forward is never called).
class ViewKernel final : public Kernel {
 public:
  Status init(const KernelContext&) { return Status::ok(); }
  bool aliases_input() const override { return true; }
  Status forward(const std::vector<const Tensor*>&, const std::vector<Tensor*>&) override { return Status::ok(); }
};

}  // namespace

void add_eltwise_kernels(PluginRegistrar& r, Status& st) {
  for (const UnaryOpInfo& u : kUnaryOps)
    if (device_unary(u.op, UnaryArgs{})) add(r, st, u.name, make_factory<UnaryKernel>());
  for (const char* op : {"Add", "Sub", "Mul", "Div"}) add(r, st, op, make_factory<BinaryKernel>());
  for (const char* op : {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"}) add(r, st, op, make_factory<ViewKernel>());
}

}  // namespace mosaic::cuda_backend
