// Element-type promotion: how the naive oracle runs a kernel written for float32, int64 and
// bool on the other ONNX types without writing it again for each.
//
// A tensor of a type the kernel does not take is computed in the wider type that holds every
// value of it exactly: float16, bfloat16 and the 8-bit floats in float32, int8/16/32 and
// uint8/16/32 in int64. Inputs are converted before the kernel runs and outputs converted back
// after it: floats rounded once to nearest even, integers wrapped to their width (ONNX's
// integer arithmetic is modular, and modular arithmetic commutes with the wrap, so Add, Sub,
// Mul, Neg, ReduceSum and ReduceProd of int8 come out exactly as int8 arithmetic; Div, Mod,
// comparisons, Max and Min of values that fit are exact as they are). A float16 Conv or MatMul
// accumulates in float32 and rounds once at the end, as ONNX Runtime's and PyTorch's CPU
// kernels do: closer to the exact result than float16 arithmetic throughout. float64 and
// uint64 have no wider type here: a kernel that does not take them is declined with the reason
// (never computed in float32: that would lose digits silently).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/kernel.hpp"

namespace mosaic {

/// A node's context with its tensors' types widened, and what was widened.
struct Promoted {
  KernelContext ctx;
  std::vector<Tensor> constants;  ///< widened copies of constant inputs, which ctx points at
  std::vector<bool> input_widened, output_widened;
  std::string widened;  ///< the first type widened ("" where none was)
};

/// `ctx` with each input and output of a type outside `native` widened to the type that holds
/// its every value (float16, bfloat16 and the 8-bit floats to float32, the narrow integers to
/// int64, where `native` has that type), constant inputs converted on the host; an error
/// naming the node, the tensor and its type where `native` has no such type. What
/// promote_element_types builds its kernels on; the cuda backend's float16 adapter too.
Expected<std::shared_ptr<Promoted>> promote(const KernelContext& ctx, DTypeSet native);

/// A kernel built on a widened context (`inner`), run between conversions: each widened
/// input converted into a buffer of the wider type before it, each widened output computed
/// into one and converted back after. What the backends share; how a tensor converts and
/// where the buffers live is each backend's (the host: PromotedKernel in promote.cpp; the
/// cuda backend: in device memory).
class ConvertingKernel : public Kernel {
 public:
  ConvertingKernel(std::shared_ptr<Promoted> p, std::unique_ptr<Kernel> inner)
      : p_(std::move(p)), inner_(std::move(inner)) {}
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) final;
  std::string widened_from() const final { return p_->widened; }
  size_t workspace_bytes() const final;

 protected:
  /// Makes the buffers of the widened inputs and outputs with `make` (a descriptor of the
  /// wider type to a tensor of it).
  Status allocate(const std::function<Expected<Tensor>(const TensorDesc&)>& make);
  /// `to` = `from` converted to `to`'s type (widened exactly, or rounded once to nearest even).
  virtual Status convert(const Tensor& from, Tensor& to) = 0;
  /// Where the inner kernel is a view of input 0: output 0 made from input 0 (the same bytes).
  virtual Status view(const Tensor& src, Tensor& dst) = 0;
  const Kernel& inner() const { return *inner_; }

 private:
  std::shared_ptr<Promoted> p_;
  std::unique_ptr<Kernel> inner_;
  std::vector<Tensor> in_, out_;  ///< the widened inputs and outputs (undefined where not widened)
};

/// How a backend runs a kernel built on a widened context: converting its widened inputs and
/// outputs around it (on the host: PromotedKernel; the cuda backend in device memory).
using WrapPromoted =
    std::function<Expected<std::unique_ptr<Kernel>>(const KernelContext& ctx, std::shared_ptr<Promoted> p,
                                                    std::unique_ptr<Kernel> inner)>;
/// What the adapters below share: the kernel now takes the types `accepted`; a node with a
/// tensor outside its own (traits.dtypes) is checked and built on promote's context and
/// wrapped by `wrap`; a training plan over such a node is declined (widening is for
/// inference).
void adapt_widened(KernelFactory& factory, KernelTraits& traits, DTypeSet accepted, WrapPromoted wrap);

/// float16 and bfloat16.
inline constexpr DTypeSet kFloat16Types = dtype_bit(DType::kF16) | dtype_bit(DType::kBF16);

/// A BackendRegistration::Adapter (naive's): a kernel whose traits take every element type is
/// left as it is; any other takes every type it can widen without loss (its SupportCheck and
/// factory see the widened context, constants converted) and declines the rest, naming
/// the type. Inference only: a training plan over a widened node is declined.
void promote_element_types(const std::string& op_type, KernelFactory& factory, KernelTraits& traits);
/// The CPU backends' adapter (im2col, onednn, torch): a kernel that computes in float32 also takes
/// float16 and bfloat16 nodes, widened on the host as naive widens them, and no other type (a
/// float16 model's nodes run on the backend, each rounding its outputs once, instead of on
/// naive). Inference only.
void promote_float16(const std::string& op_type, KernelFactory& factory, KernelTraits& traits);

}  // namespace mosaic
