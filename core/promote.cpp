#include "core/promote.hpp"

#include <cstring>
#include <memory>

#include "ir/elements.hpp"

namespace mosaic {
namespace {

bool narrow_integer(DType d) {
  return d == DType::kI8 || d == DType::kI16 || d == DType::kI32 || d == DType::kU8 || d == DType::kU16 ||
         d == DType::kU32;
}

/// The type a tensor of type d is computed in by a kernel taking `native`: d itself,
/// float32 for float16 and bfloat16, int64 for the narrow integers; kCount where there is
/// none without loss.
DType compute_type(DType d, DTypeSet native) {
  if (native & dtype_bit(d)) return d;
  if ((d == DType::kF16 || d == DType::kBF16 || dtype_is_small_float(d)) && (native & dtype_bit(DType::kF32)))
    return DType::kF32;
  if (narrow_integer(d) && (native & dtype_bit(DType::kI64))) return DType::kI64;
  return DType::kCount;
}

Tensor converted(const Tensor& t, DType to) {
  Tensor out = Tensor::empty({to, t.shape()});
  convert_elements(t.dtype(), t.data(), to, out.data(), t.numel());
  return out;
}

}  // namespace

Expected<std::shared_ptr<Promoted>> promote(const KernelContext& ctx, DTypeSet native) {
  auto p = std::make_shared<Promoted>();
  p->ctx = ctx;
  p->constants.resize(ctx.inputs.size());
  p->input_widened.assign(ctx.inputs.size(), false);
  p->output_widened.assign(ctx.outputs.size(), false);
  p->ctx.constants.resize(ctx.inputs.size(), nullptr);
  // Whether desc is widened (and widens it), or why it cannot be.
  auto widen = [&](TensorDesc& desc, size_t i, const char* what) -> Expected<bool> {
    const DType to = compute_type(desc.dtype, native);
    if (to == DType::kCount)
      return Status::unsupported(ctx.node->label() + ": " + what + " " + std::to_string(i) + " is " +
                                 dtype_name(desc.dtype) + "; its kernel computes in " + dtype_set_str(native) +
                                 ", none of which holds every " + dtype_name(desc.dtype) + " value");
    if (to == desc.dtype) return false;
    if (p->widened.empty()) p->widened = dtype_name(desc.dtype);
    desc.dtype = to;
    return true;
  };
  for (size_t i = 0; i < ctx.inputs.size(); ++i) {
    if (!ctx.has_input(i)) continue;
    MOSAIC_ASSIGN_OR_RETURN(bool w, widen(p->ctx.inputs[i], i, "input"));
    p->input_widened[i] = w;
    if (const Tensor* c = ctx.constant(i); w && c) {
      p->constants[i] = converted(*c, p->ctx.inputs[i].dtype);
      p->ctx.constants[i] = &p->constants[i];
    }
  }
  for (size_t i = 0; i < ctx.outputs.size(); ++i) {
    if (!ctx.has_output(i)) continue;
    MOSAIC_ASSIGN_OR_RETURN(bool w, widen(p->ctx.outputs[i], i, "output"));
    p->output_widened[i] = w;
  }
  // The wrapping kernel converts plain tensors and reports plain outputs: the inner kernel
  // writes none in a backend's own layout.
  if (!p->widened.empty()) p->ctx.output_layout_free.assign(ctx.outputs.size(), false);
  return p;
}

Status ConvertingKernel::allocate(const std::function<Expected<Tensor>(const TensorDesc&)>& make) {
  in_.resize(p_->input_widened.size());
  out_.resize(p_->output_widened.size());
  for (size_t i = 0; i < in_.size(); ++i) {
    if (p_->input_widened[i]) {
      MOSAIC_ASSIGN_OR_RETURN(in_[i], make(p_->ctx.inputs[i]));
    }
  }
  for (size_t i = 0; i < out_.size(); ++i) {
    if (p_->output_widened[i]) {
      MOSAIC_ASSIGN_OR_RETURN(out_[i], make(p_->ctx.outputs[i]));
    }
  }
  return Status::ok();
}

Status ConvertingKernel::forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) {
  if (inner_->aliases_input()) return view(*src[0], *dst[0]);
  std::vector<const Tensor*> s(src);
  std::vector<Tensor*> d(dst);
  for (size_t i = 0; i < src.size() && i < in_.size(); ++i)
    if (src[i] && in_[i].defined()) {
      MOSAIC_RETURN_IF_ERROR(convert(*src[i], in_[i]));
      s[i] = &in_[i];
    }
  for (size_t i = 0; i < dst.size() && i < out_.size(); ++i)
    if (dst[i] && out_[i].defined()) d[i] = &out_[i];
  MOSAIC_RETURN_IF_ERROR(inner_->forward(s, d));
  for (size_t i = 0; i < dst.size(); ++i)
    if (d[i] != dst[i]) MOSAIC_RETURN_IF_ERROR(convert(*d[i], *dst[i]));
  return Status::ok();
}

size_t ConvertingKernel::workspace_bytes() const {
  size_t bytes = inner_->workspace_bytes();
  for (const auto* v : {&in_, &out_})
    for (const Tensor& t : *v) bytes += t.defined() ? t.bytes() : 0;
  return bytes;
}

namespace {

/// The host's: buffers in host memory (reported to the plan's tracker), converted by
/// convert_elements; a view's bytes copied (Dropout at inference).
class PromotedKernel final : public ConvertingKernel {
 public:
  using ConvertingKernel::ConvertingKernel;
  Status init(MemoryTracker* tracker) {
    return allocate([tracker](const TensorDesc& d) -> Expected<Tensor> { return Tensor::empty(d, tracker); });
  }

 protected:
  Status convert(const Tensor& from, Tensor& to) override {
    convert_elements(from.dtype(), from.data(), to.dtype(), to.data(), from.numel());
    return Status::ok();
  }
  Status view(const Tensor& src, Tensor& dst) override {
    if (dst.bytes()) std::memcpy(dst.data(), src.data(), dst.bytes());
    return Status::ok();
  }
};

}  // namespace

void adapt_widened(KernelFactory& factory, KernelTraits& traits, DTypeSet accepted, WrapPromoted wrap) {
  const DTypeSet native = traits.dtypes;
  SupportCheck check = traits.supports;
  KernelFactory inner = factory;
  traits.dtypes = accepted;
  traits.supports = [native, check](const KernelContext& ctx) -> Status {
    MOSAIC_ASSIGN_OR_RETURN(std::shared_ptr<Promoted> p, promote(ctx, native));
    if (!p->widened.empty() && ctx.training)
      return Status::unsupported(ctx.node->label() + ": training on " + p->widened +
                                 " tensors (they are widened for inference only)");
    return check ? check(p->ctx) : Status::ok();
  };
  factory = [native, inner, wrap](const KernelContext& ctx) -> Expected<std::unique_ptr<Kernel>> {
    MOSAIC_ASSIGN_OR_RETURN(std::shared_ptr<Promoted> p, promote(ctx, native));
    if (p->widened.empty()) return inner(ctx);
    MOSAIC_ASSIGN_OR_RETURN(std::unique_ptr<Kernel> k, inner(p->ctx));
    return wrap(ctx, std::move(p), std::move(k));
  };
}

namespace {

Expected<std::unique_ptr<Kernel>> on_the_host(const KernelContext& ctx, std::shared_ptr<Promoted> p,
                                              std::unique_ptr<Kernel> k) {
  auto kernel = std::make_unique<PromotedKernel>(std::move(p), std::move(k));
  MOSAIC_RETURN_IF_ERROR(kernel->init(ctx.tracker));
  return std::unique_ptr<Kernel>(std::move(kernel));
}

}  // namespace

void promote_element_types(const std::string&, KernelFactory& factory, KernelTraits& traits) {
  if (traits.dtypes == kAllDTypes) return;
  adapt_widened(factory, traits, kAllDTypes, on_the_host);
}

void promote_float16(const std::string&, KernelFactory& factory, KernelTraits& traits) {
  if (!(traits.dtypes & dtype_bit(DType::kF32)) || (traits.dtypes & kFloat16Types)) return;
  adapt_widened(factory, traits, traits.dtypes | kFloat16Types, on_the_host);
}

}  // namespace mosaic
