#include "backends/common/rearrange.hpp"

#include <cstring>

#include "ir/elements.hpp"
#include "operators/rearrange.hpp"

namespace mosaic {
namespace {

/// DepthToSpace and SpaceToDepth: for every element of the [N, C, H, W] side with channels
/// in blocks, where it sits on the spatial side.
class BlockKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_ASSIGN_OR_RETURN(p_, block_params(ctx));
    esize_ = dtype_size(ctx.inputs[0].dtype);
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    // The deep side: [N, C_deep, H_small, W_small]; the spatial side: [N, C_small, H_small*b, W_small*b].
    const int64_t b = p_.block;
    const int64_t c_small = p_.to_space ? p_.c / (b * b) : p_.c;
    const int64_t h = p_.to_space ? p_.h : p_.h / b, w = p_.to_space ? p_.w : p_.w / b;
    const auto* in = static_cast<const char*>(src[0]->data());
    auto* out = static_cast<char*>(dst[0]->data());
    for (int64_t n = 0; n < p_.n; ++n)
      for (int64_t c = 0; c < c_small; ++c)
        for (int64_t by = 0; by < b; ++by)
          for (int64_t bx = 0; bx < b; ++bx) {
            const int64_t deep_c = p_.crd ? (c * b + by) * b + bx : (by * b + bx) * c_small + c;
            for (int64_t y = 0; y < h; ++y)
              for (int64_t x = 0; x < w; ++x) {
                const int64_t deep = ((n * c_small * b * b + deep_c) * h + y) * w + x;
                const int64_t flat = ((n * c_small + c) * h * b + y * b + by) * w * b + x * b + bx;
                const int64_t from = p_.to_space ? deep : flat, to = p_.to_space ? flat : deep;
                std::memcpy(out + to * static_cast<int64_t>(esize_), in + from * static_cast<int64_t>(esize_), esize_);
              }
          }
    return Status::ok();
  }

 private:
  BlockParams p_;
  size_t esize_ = 4;
};

class BitCastKernel final : public Kernel {
 public:
  Status init(const KernelContext&) { return Status::ok(); }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    if (dst[0]->bytes()) std::memcpy(dst[0]->data(), src[0]->data(), dst[0]->bytes());
    return Status::ok();
  }
};

class EyeLikeKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    k_ = ctx.node->attr_int("k", 0);
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>&, const std::vector<Tensor*>& dst) override {
    const int64_t rows = dst[0]->dim(0), cols = dst[0]->dim(1);
    std::memset(dst[0]->data(), 0, dst[0]->bytes());
    for (int64_t r = 0; r < rows; ++r)
      if (r + k_ >= 0 && r + k_ < cols) store_i64(dst[0]->dtype(), dst[0]->data(), r * cols + r + k_, 1);
    return Status::ok();
  }

 private:
  int64_t k_ = 0;
};

class OneHotKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_ASSIGN_OR_RETURN(p_, one_hot_params(ctx));
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const Tensor& idx = *src[0];
    const size_t es = dtype_size(dst[0]->dtype());
    const auto* values = static_cast<const char*>(src[2]->data());  // [off, on]
    auto* out = static_cast<char*>(dst[0]->data());
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < static_cast<int64_t>(idx.rank()); ++d) (d < p_.axis ? outer : inner) *= idx.dim(static_cast<size_t>(d));
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        // The index, cast to an integer as ONNX says; negative ones count from the end.
        int64_t hot = saturate_to_i64(idx.get(o * inner + i));
        if (hot < 0) hot += p_.depth;
        for (int64_t d = 0; d < p_.depth; ++d)
          std::memcpy(out + ((o * p_.depth + d) * inner + i) * static_cast<int64_t>(es), values + (d == hot ? es : 0), es);
      }
    return Status::ok();
  }

 private:
  OneHotParams p_;
};

class ReverseSequenceKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    batch_axis_ = ctx.node->attr_int("batch_axis", 1);
    label_ = ctx.node->label();
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const Tensor& x = *src[0];
    const int64_t batch = x.dim(static_cast<size_t>(batch_axis_)), steps = x.dim(static_cast<size_t>(1 - batch_axis_));
    const int64_t inner = x.numel() / std::max<int64_t>(1, batch * steps);
    const int64_t es = static_cast<int64_t>(dtype_size(x.dtype()));
    const auto* in = static_cast<const char*>(x.data());
    auto* out = static_cast<char*>(dst[0]->data());
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t len = src[1]->get_i64(b);
      if (len < 0 || len > steps)
        return Status::invalid(label_ + ": sequence_lens[" + std::to_string(b) + "] = " + std::to_string(len) +
                               " is outside [0, " + std::to_string(steps) + "]");
      for (int64_t t = 0; t < steps; ++t) {
        const int64_t from_t = t < len ? len - 1 - t : t;
        auto at = [&](int64_t step) { return (batch_axis_ == 0 ? b * steps + step : step * batch + b) * inner * es; };
        std::memcpy(out + at(t), in + at(from_t), static_cast<size_t>(inner * es));
      }
    }
    return Status::ok();
  }

 private:
  int64_t batch_axis_ = 1;
  std::string label_;
};

/// CenterCropPad: each output element reads the input element its axes map to, or zero
/// where an axis is padded.
class CropPadKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_ASSIGN_OR_RETURN(p_, crop_pad_params(ctx));
    in_ = ctx.inputs[0].shape;
    esize_ = dtype_size(ctx.inputs[0].dtype);
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const auto* x = static_cast<const char*>(src[0]->data());
    auto* y = static_cast<char*>(dst[0]->data());
    const size_t rank = p_.out.size();
    std::vector<int64_t> idx(rank, 0), in_strides(rank, 1);
    for (size_t a = rank; a-- > 1;) in_strides[a - 1] = in_strides[a] * in_[a];
    const int64_t n = shape_numel(p_.out);
    for (int64_t o = 0; o < n; ++o) {
      int64_t from = 0;
      bool inside = true;
      for (size_t a = 0; a < rank && inside; ++a) {
        const int64_t i = idx[a] - p_.dst_begin[a] + p_.src_begin[a];
        inside = i >= 0 && i < in_[a];
        from += i * in_strides[a];
      }
      if (inside) std::memcpy(y + o * static_cast<int64_t>(esize_), x + from * static_cast<int64_t>(esize_), esize_);
      else std::memset(y + o * static_cast<int64_t>(esize_), 0, esize_);
      for (size_t a = rank; a-- > 0;) {
        if (++idx[a] < p_.out[a]) break;
        idx[a] = 0;
      }
    }
    return Status::ok();
  }

 private:
  CropPadParams p_;
  Shape in_;
  size_t esize_ = 4;
};

/// HannWindow, HammingWindow, BlackmanWindow: computed in double, stored once in the
/// requested type.
class WindowKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_ASSIGN_OR_RETURN(p_, window_params(ctx));
    op_ = ctx.node->op_type;
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>&, const std::vector<Tensor*>& dst) override {
    for (int64_t i = 0; i < p_.size; ++i) store_f64(p_.dtype, dst[0]->data(), i, window_value(op_, i, p_));
    return Status::ok();
  }

 private:
  WindowParams p_;
  std::string op_;
};

/// TensorScatter: the cache copied, then each batch entry's update rows written from its
/// write index (0 without write_indices); an index that runs past the cache in linear mode
/// fails the run, naming the node, the entry and the index.
class TensorScatterKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_ASSIGN_OR_RETURN(p_, tensor_scatter_params(ctx));
    esize_ = static_cast<int64_t>(dtype_size(ctx.inputs[0].dtype));
    label_ = ctx.node->label();
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const auto* cache = static_cast<const char*>(src[0]->data());
    const auto* update = static_cast<const char*>(src[1]->data());
    auto* out = static_cast<char*>(dst[0]->data());
    const Tensor* indices = src.size() > 2 ? src[2] : nullptr;
    const int64_t row = p_.inner * esize_;
    // Every index checked before anything is written: a refused run leaves no partial cache.
    for (int64_t b = 0; p_.seq_len > 0 && b * p_.per_batch < p_.outer; ++b) {
      const int64_t index = indices ? indices->i64()[b] : 0;
      if (tensor_scatter_position(p_, index, 0) < 0)
        return Status::invalid(label_ + ": write_indices[" + std::to_string(b) + "] = " + std::to_string(index) +
                               " with " + std::to_string(p_.seq_len) + " steps to write runs outside the cache's " +
                               std::to_string(p_.max_len) + " positions (linear mode)");
    }
    if (out != cache) std::memcpy(out, cache, static_cast<size_t>(src[0]->numel() * esize_));
    for (int64_t o = 0; o < p_.outer; ++o) {
      const int64_t index = indices ? indices->i64()[o / p_.per_batch] : 0;
      for (int64_t t = 0; t < p_.seq_len; ++t)
        std::memcpy(out + (o * p_.max_len + tensor_scatter_position(p_, index, t)) * row,
                    update + (o * p_.seq_len + t) * row, static_cast<size_t>(row));
    }
    return Status::ok();
  }

 private:
  TensorScatterParams p_;
  int64_t esize_ = 1;
  std::string label_;
};

}  // namespace

void add_rearrange_kernels(BackendRegistration& r) {
  const KernelTraits any{LayoutUse::kNone, nullptr, kAllDTypes};
  r.kernel("DepthToSpace", make_factory<BlockKernel>(), any);
  r.kernel("SpaceToDepth", make_factory<BlockKernel>(), any);
  r.kernel("BitCast", make_factory<BitCastKernel>(), any);
  r.kernel("EyeLike", make_factory<EyeLikeKernel>(), any);
  r.kernel("OneHot", make_factory<OneHotKernel>(), any);
  r.kernel("ReverseSequence", make_factory<ReverseSequenceKernel>(), any);
  r.kernel("CenterCropPad", make_factory<CropPadKernel>(), any);
  for (const char* op : {"HannWindow", "HammingWindow", "BlackmanWindow"}) r.kernel(op, make_factory<WindowKernel>(), any);
  r.kernel("TensorScatter", make_factory<TensorScatterKernel>(), any);
}

}  // namespace mosaic
