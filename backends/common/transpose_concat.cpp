// Transpose, Concat and Split, shared by every backend (backends/common/movement.hpp): the
// kernels that rearrange whole rows or slabs of a tensor along its axes. Their factories are
// registered with the other movement kernels in movement.cpp.
#include <omp.h>

#include <algorithm>
#include <cstring>

#include "backends/common/movement.hpp"
#include "backends/common/movement_internal.hpp"
#include "ir/elements.hpp"
#include "operators/params.hpp"

namespace mosaic {
namespace {

class TransposeKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_ASSIGN_OR_RETURN(perm_, transpose_perm(ctx));
    in_shape_ = ctx.inputs[0].shape;
    esize_ = dtype_size(ctx.inputs[0].dtype);
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const auto* in = static_cast<const char*>(src[0]->data());
    auto* out = static_cast<char*>(dst[0]->data());
    switch (esize_) {
      case 1: copy_permuted<uint8_t>(in, out); break;
      case 2: copy_permuted<uint16_t>(in, out); break;
      case 4: copy_permuted<uint32_t>(in, out); break;
      case 8: copy_permuted<uint64_t>(in, out); break;
      default: copy_permuted_bytes(in, out); break;
    }
    return Status::ok();
  }
  bool has_backward() const override { return esize_ == 4; }
  bool backward_reads_input(size_t) const override { return false; }
  bool backward_reads_output(size_t) const override { return false; }
  /// dx[source index] = dy[o]: the same walk as forward with the copy reversed.
  Status backward(const BackwardArgs& a) override {
    if (!a.diff_src[0]) return Status::ok();
    const size_t r = perm_.size();
    auto in_strides = row_major_strides(in_shape_);
    Shape out_shape(r);
    std::vector<int64_t> st(r);
    for (size_t i = 0; i < r; ++i) {
      out_shape[i] = in_shape_[perm_[i]];
      st[i] = in_strides[perm_[i]];
    }
    const float* dy = a.diff_dst[0]->f32();
    float* dx = a.diff_src[0]->f32();
    std::vector<int64_t> idx(r, 0);
    int64_t off = 0;
    for (int64_t o = 0; o < shape_numel(out_shape); ++o) {
      dx[off] = dy[o];
      for (int64_t ax = static_cast<int64_t>(r) - 1; ax >= 0; --ax) {
        off += st[ax];
        if (++idx[ax] < out_shape[ax]) break;
        off -= st[ax] * out_shape[ax];
        idx[ax] = 0;
      }
    }
    return Status::ok();
  }

 private:
  /// The output's axes with the input stride each walks, size-1 axes dropped and neighbours
  /// that stay neighbours in the input merged: [1, T, 12, 64] -> [1, 12, T, 64] is three axes
  /// [12, T, 64] whose last is contiguous in the input, [1, 12, T, 64] -> [1, 12, 64, T] three
  /// axes [12, 64, T].
  void merged(Shape& dims, std::vector<int64_t>& strides) const {
    const auto in_strides = row_major_strides(in_shape_);
    dims.clear();
    strides.clear();
    for (size_t i = 0; i < perm_.size(); ++i) {
      const int64_t d = in_shape_[static_cast<size_t>(perm_[i])], st = in_strides[static_cast<size_t>(perm_[i])];
      if (d == 1) continue;
      if (!dims.empty() && strides.back() == st * d) {
        dims.back() *= d;
        strides.back() = st;
      } else {
        dims.push_back(d);
        strides.push_back(st);
      }
    }
    if (dims.empty()) dims = {1}, strides = {1};
  }

  /// out[o] = in[the input offset of o's coordinates], the rows of the last (merged) axis
  /// split over the threads; a row the input holds contiguously is one memcpy.
  template <typename T>
  void copy_permuted(const char* in_bytes, char* out_bytes) const {
    Shape dims;
    std::vector<int64_t> st;
    merged(dims, st);
    const auto* in = reinterpret_cast<const T*>(in_bytes);
    auto* out = reinterpret_cast<T*>(out_bytes);
    const size_t r = dims.size();
    const int64_t inner = dims.back(), inner_stride = st.back();
    const int64_t rows = shape_numel(dims) / std::max<int64_t>(inner, 1);
#pragma omp parallel if (rows * inner >= (1 << 15))
    {
      const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
      const int64_t first = rows * t / nt, last = rows * (t + 1) / nt;
      // The first row's coordinates (all but the last axis) and input offset.
      std::vector<int64_t> idx(r, 0);
      int64_t off = 0;
      for (int64_t a = static_cast<int64_t>(r) - 2, rest = first; a >= 0; --a) {
        idx[static_cast<size_t>(a)] = rest % dims[static_cast<size_t>(a)];
        rest /= dims[static_cast<size_t>(a)];
        off += idx[static_cast<size_t>(a)] * st[static_cast<size_t>(a)];
      }
      for (int64_t row = first; row < last; ++row) {
        T* o = out + row * inner;
        const T* i = in + off;
        if (inner_stride == 1) std::memcpy(o, i, static_cast<size_t>(inner) * sizeof(T));
        else
          for (int64_t j = 0; j < inner; ++j) o[j] = i[j * inner_stride];
        next_position(idx, off, dims, st, static_cast<int64_t>(r) - 2);
      }
    }
  }

  /// Elements of another size (a string's, a complex double's): one at a time.
  void copy_permuted_bytes(const char* in, char* out) const {
    Shape dims;
    std::vector<int64_t> st;
    merged(dims, st);
    const size_t r = dims.size();
    const int64_t n = shape_numel(dims);
    std::vector<int64_t> idx(r, 0);
    int64_t off = 0;
    for (int64_t o = 0; o < n; ++o) {
      std::memcpy(out + o * static_cast<int64_t>(esize_), in + off * static_cast<int64_t>(esize_), esize_);
      next_position(idx, off, dims, st, static_cast<int64_t>(r) - 1);
    }
  }

  /// The next coordinates over axes 0..last (an odometer) and their input offset.
  static void next_position(std::vector<int64_t>& idx, int64_t& off, const Shape& dims, const std::vector<int64_t>& st,
                            int64_t last) {
    for (int64_t a = last; a >= 0; --a) {
      const auto au = static_cast<size_t>(a);
      off += st[au];
      if (++idx[au] < dims[au]) return;
      off -= st[au] * dims[au];
      idx[au] = 0;
    }
  }

  std::vector<int64_t> perm_;
  Shape in_shape_;
  size_t esize_ = 4;
};

class ConcatKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    const Shape& out = ctx.outputs[0].shape;
    MOSAIC_ASSIGN_OR_RETURN(int64_t axis, normalize_axis(ctx.node->attr_int("axis", 0),
                                                         static_cast<int64_t>(out.size()), *ctx.node));
    esize_ = dtype_size(ctx.outputs[0].dtype);
    outer_ = 1;
    for (int64_t i = 0; i < axis; ++i) outer_ *= out[i];
    for (const auto& in : ctx.inputs) chunk_.push_back(in.numel() / std::max<int64_t>(outer_, 1) * esize_);
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    auto* out = static_cast<char*>(dst[0]->data());
    for (int64_t o = 0; o < outer_; ++o)
      for (size_t i = 0; i < src.size(); ++i) {
        std::memcpy(out, static_cast<const char*>(src[i]->data()) + o * chunk_[i], chunk_[i]);
        out += chunk_[i];
      }
    return Status::ok();
  }
  bool has_backward() const override { return esize_ == 4; }
  bool backward_reads_input(size_t) const override { return false; }
  bool backward_reads_output(size_t) const override { return false; }
  /// Each input's gradient is its slice of dy.
  Status backward(const BackwardArgs& a) override {
    const auto* dy = static_cast<const char*>(a.diff_dst[0]->data());
    for (int64_t o = 0; o < outer_; ++o)
      for (size_t i = 0; i < chunk_.size(); ++i) {
        if (a.diff_src[i]) std::memcpy(static_cast<char*>(a.diff_src[i]->data()) + o * chunk_[i], dy, chunk_[i]);
        dy += chunk_[i];
      }
    return Status::ok();
  }

 private:
  size_t esize_ = 4;
  int64_t outer_ = 1;
  std::vector<int64_t> chunk_;
};

/// Split: each output is a slab of every outer index (Concat's inverse); backward writes
/// each output's gradient into its slab of dX (zeros where an output has none).
class SplitKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_ASSIGN_OR_RETURN(const SplitParams p, split_params(ctx));
    const Shape& x = ctx.inputs[0].shape;
    esize_ = dtype_size(ctx.inputs[0].dtype);
    outer_ = 1;
    for (int64_t i = 0; i < p.axis; ++i) outer_ *= x[i];
    int64_t inner = 1;
    for (size_t i = static_cast<size_t>(p.axis) + 1; i < x.size(); ++i) inner *= x[i];
    for (int64_t len : p.sizes) chunk_.push_back(len * inner * static_cast<int64_t>(esize_));
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const auto* in = static_cast<const char*>(src[0]->data());
    for (int64_t o = 0; o < outer_; ++o)
      for (size_t i = 0; i < chunk_.size(); ++i) {
        if (dst[i]) std::memcpy(static_cast<char*>(dst[i]->data()) + o * chunk_[i], in, chunk_[i]);
        in += chunk_[i];
      }
    return Status::ok();
  }
  bool has_backward() const override { return esize_ == 4; }
  bool backward_reads_input(size_t) const override { return false; }
  bool backward_reads_output(size_t) const override { return false; }
  Status backward(const BackwardArgs& a) override {
    if (!a.diff_src[0]) return Status::ok();
    auto* dx = static_cast<char*>(a.diff_src[0]->data());
    for (int64_t o = 0; o < outer_; ++o)
      for (size_t i = 0; i < chunk_.size(); ++i) {
        const Tensor* dy = i < a.diff_dst.size() ? a.diff_dst[i] : nullptr;
        if (dy) std::memcpy(dx, static_cast<const char*>(dy->data()) + o * chunk_[i], chunk_[i]);
        else std::memset(dx, 0, chunk_[i]);
        dx += chunk_[i];
      }
    return Status::ok();
  }

 private:
  size_t esize_ = 4;
  int64_t outer_ = 1;
  std::vector<int64_t> chunk_;
};

}  // namespace

KernelFactory transpose_kernel_factory() { return make_factory<TransposeKernel>(); }
KernelFactory concat_kernel_factory() { return make_factory<ConcatKernel>(); }
KernelFactory split_kernel_factory() { return make_factory<SplitKernel>(); }

}  // namespace mosaic
