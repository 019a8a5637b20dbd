#include "backends/common/selection.hpp"

#include <algorithm>

#include "backends/common/detection.hpp"
#include "operators/selection.hpp"

namespace mosaic {
namespace {

/// Compress and Unique: the slices selected (kept by the condition, or the first of each
/// distinct run) gathered into the output, their count checked against the plan's.
class SelectionKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    node_ = ctx.node;
    unique_ = ctx.node->op_type == "Unique";
    if (unique_) {
      MOSAIC_ASSIGN_OR_RETURN(unique_p_, unique_params(ctx));
    } else {
      MOSAIC_ASSIGN_OR_RETURN(compress_p_, compress_params(ctx));
    }
    const SliceView& v = view();
    planned_ = ctx.outputs[0].shape[static_cast<size_t>(v.axis < 0 ? 0 : v.axis)];
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    UniqueSlices u;
    if (unique_) u = unique_slices(unique_p_, *src[0]);
    else u.first = compress_kept(compress_p_, *src[1]);
    const auto count = static_cast<int64_t>(u.first.size());
    if (count != planned_)
      return output_length_changed(*node_, planned_, count,
                                   unique_ ? "X holds distinct slices:" : "its condition keeps slices:");
    gather_slices(view(), *src[0], u.first, dst[0]);
    const std::vector<int64_t>* lists[3] = {&u.first, &u.inverse, &u.counts};  // Unique's other outputs
    for (size_t i = 1; unique_ && i < 4; ++i)
      if (i < dst.size() && dst[i]) std::copy(lists[i - 1]->begin(), lists[i - 1]->end(), dst[i]->i64());
    return Status::ok();
  }

 private:
  const SliceView& view() const { return unique_ ? unique_p_.view : compress_p_.view; }

  const Node* node_ = nullptr;
  bool unique_ = false;
  CompressParams compress_p_;
  UniqueParams unique_p_;
  int64_t planned_ = 0;
};

}  // namespace

void add_selection_kernels(BackendRegistration& r) {
  const KernelTraits any{LayoutUse::kNone, nullptr, kAllDTypes};
  r.kernel("Compress", make_factory<SelectionKernel>(), any);
  r.kernel("Unique", make_factory<SelectionKernel>(), any);
}

}  // namespace mosaic
