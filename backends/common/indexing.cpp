#include "backends/common/indexing.hpp"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "backends/common/grad.hpp"
#include "backends/common/movement.hpp"
#include "operators/indexing.hpp"

namespace mosaic {
namespace {

/// What CumSum, Tile, GatherElements and GatherND share in training: a gradient for float32
/// data only, read through the index input (1), never the output.
class IndexedKernel : public Kernel {
 public:
  bool has_backward() const override { return dtype_ == DType::kF32; }
  bool backward_reads_input(size_t i) const override { return i == 1; }
  bool backward_reads_output(size_t) const override { return false; }

 protected:
  DType dtype_ = DType::kF32;
};

/// The element walk GatherElements and ScatterElements share: f(i, at) for every element i of
/// the indices, `at` its data offset (the index along `axis`, the element's own position
/// along the others); an index outside the axis is an error naming the node.
template <class F>
Status each_element_index(const Shape& data, const Shape& idx, int64_t axis, const int64_t* index,
                          const std::string& label, F&& f) {
  const size_t r = data.size();
  const std::vector<int64_t> strides = row_major_strides(data);
  std::vector<int64_t> pos(r, 0);
  const int64_t n = shape_numel(idx), dim = data[static_cast<size_t>(axis)];
  for (int64_t o = 0; o < n; ++o) {
    int64_t k = index[o];
    if (k < -dim || k >= dim) return gather_index_error(label, k, o, dim);
    if (k < 0) k += dim;
    int64_t at = 0;
    for (size_t d = 0; d < r; ++d) at += (static_cast<int64_t>(d) == axis ? k : pos[d]) * strides[d];
    f(o, at);
    for (int64_t d = static_cast<int64_t>(r) - 1; d >= 0; --d) {
      if (++pos[d] < idx[d]) break;
      pos[d] = 0;
    }
  }
  return Status::ok();
}

/// The tuple walk GatherND and ScatterND share: f(t, at) for every index tuple t (batches
/// first), `at` the data offset of the slice it picks; an index outside its axis is an error
/// naming the node.
template <class F>
Status each_index_tuple(const GatherNDParams& p, const int64_t* index, const std::string& label, F&& f) {
  const std::vector<int64_t> strides = row_major_strides(p.data);
  const int64_t batch_stride = p.batch_dims > 0 ? strides[p.batch_dims - 1] : 0;
  for (int64_t b = 0; b < p.batches; ++b)
    for (int64_t t = 0; t < p.tuples; ++t) {
      const int64_t tuple = b * p.tuples + t;
      int64_t at = b * batch_stride;
      for (int64_t k = 0; k < p.depth; ++k) {
        const int64_t d = p.batch_dims + k, dim = p.data[d];
        const int64_t i = index[tuple * p.depth + k];
        if (i < -dim || i >= dim) return gather_index_error(label, i, tuple * p.depth + k, dim);
        at += (i < 0 ? i + dim : i) * strides[d];
      }
      f(tuple, at);
    }
  return Status::ok();
}

// int64 sums and products wrap (two's complement, as numpy's), never overflow in C++.
inline int64_t add(int64_t a, int64_t b) { return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b)); }
inline float add(float a, float b) { return a + b; }
inline int64_t mul(int64_t a, int64_t b) { return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b)); }
inline float mul(float a, float b) { return a * b; }
inline double add(double a, double b) { return a + b; }
inline double mul(double a, double b) { return a * b; }

/// y[o, k, i] = sum (or product) of x[o, j, i] over j <= k (exclusive: j < k; reverse: j >= k
/// or j > k).
template <class T>
void running_sum(const T* x, T* y, const CumSumParams& p, bool reverse, bool exclusive, bool product = false) {
  for (int64_t o = 0; o < p.outer; ++o)
    for (int64_t i = 0; i < p.inner; ++i) {
      T acc = product ? 1 : 0;
      for (int64_t s = 0; s < p.axis_dim; ++s) {
        const int64_t k = reverse ? p.axis_dim - 1 - s : s;
        const int64_t at = (o * p.axis_dim + k) * p.inner + i;
        if (exclusive) y[at] = acc;
        acc = product ? mul(acc, x[at]) : add(acc, x[at]);
        if (!exclusive) y[at] = acc;
      }
    }
}

class CumSumKernel final : public IndexedKernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_ASSIGN_OR_RETURN(p_, cumsum_params(ctx));
    dtype_ = ctx.inputs[0].dtype;
    product_ = ctx.node->op_type == "CumProd";
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    if (dtype_ == DType::kI64) running_sum(src[0]->i64(), dst[0]->i64(), p_, p_.reverse, p_.exclusive, product_);
    else if (dtype_ == DType::kF64)
      running_sum(static_cast<const double*>(src[0]->data()), static_cast<double*>(dst[0]->data()), p_, p_.reverse,
                  p_.exclusive, product_);
    else running_sum(src[0]->f32(), dst[0]->f32(), p_, p_.reverse, p_.exclusive, product_);
    return Status::ok();
  }
  bool has_backward() const override { return !product_ && IndexedKernel::has_backward(); }
  /// The transpose of a running sum is the running sum the other way.
  Status backward(const BackwardArgs& a) override {
    float* dx = zeroed_grad(a, 0);
    if (dx) running_sum(a.diff_dst[0]->f32(), dx, p_, !p_.reverse, p_.exclusive);
    return Status::ok();
  }

 private:
  CumSumParams p_;
  bool product_ = false;  ///< CumProd
};

/// Calls f(out_index, in_index) for every element of a tiled output.
template <class F>
void each_tile(const Shape& in, const Shape& out, F&& f) {
  const size_t r = in.size();
  std::vector<int64_t> idx(r, 0);
  const std::vector<int64_t> in_strides = row_major_strides(in);
  const int64_t n = shape_numel(out);
  for (int64_t o = 0; o < n; ++o) {
    int64_t from = 0;
    for (size_t d = 0; d < r; ++d) from += (idx[d] % in[d]) * in_strides[d];
    f(o, from);
    for (int64_t d = static_cast<int64_t>(r) - 1; d >= 0; --d) {
      if (++idx[d] < out[d]) break;
      idx[d] = 0;
    }
  }
}

class TileKernel final : public IndexedKernel {
 public:
  Status init(const KernelContext& ctx) {
    in_ = ctx.inputs[0].shape;
    out_ = ctx.outputs[0].shape;
    dtype_ = ctx.inputs[0].dtype;
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const size_t b = dtype_size(dtype_);
    const auto* x = static_cast<const char*>(src[0]->data());
    auto* y = static_cast<char*>(dst[0]->data());
    each_tile(in_, out_, [&](int64_t o, int64_t i) { std::memcpy(y + o * b, x + i * b, b); });
    return Status::ok();
  }
  Status backward(const BackwardArgs& a) override {
    float* dx = zeroed_grad(a, 0);
    if (!dx) return Status::ok();
    const float* dy = a.diff_dst[0]->f32();
    each_tile(in_, out_, [&](int64_t o, int64_t i) { dx[i] += dy[o]; });
    return Status::ok();
  }

 private:
  Shape in_, out_;
};

class GatherElementsKernel final : public IndexedKernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_ASSIGN_OR_RETURN(axis_, gather_elements_axis(ctx));
    data_ = ctx.inputs[0].shape;
    idx_ = ctx.inputs[1].shape;
    dtype_ = ctx.inputs[0].dtype;
    label_ = ctx.node->label();
    return Status::ok();
  }
  template <class F>
  Status each(const int64_t* index, F&& f) const {
    return each_element_index(data_, idx_, axis_, index, label_, f);
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const size_t b = dtype_size(dtype_);
    const auto* x = static_cast<const char*>(src[0]->data());
    auto* y = static_cast<char*>(dst[0]->data());
    return each(src[1]->i64(), [&](int64_t o, int64_t i) { std::memcpy(y + o * b, x + i * b, b); });
  }
  Status backward(const BackwardArgs& a) override {
    float* dx = zeroed_grad(a, 0);
    if (!dx) return Status::ok();
    const float* dy = a.diff_dst[0]->f32();
    return each(a.src[1]->i64(), [&](int64_t o, int64_t i) { dx[i] += dy[o]; });
  }

 private:
  int64_t axis_ = 0;
  Shape data_, idx_;
  std::string label_;
};

class GatherNDKernel final : public IndexedKernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_ASSIGN_OR_RETURN(p_, gather_nd_params(ctx));
    dtype_ = ctx.inputs[0].dtype;
    label_ = ctx.node->label();
    return Status::ok();
  }
  template <class F>
  Status each(const int64_t* index, F&& f) const {
    return each_index_tuple(p_, index, label_, [&](int64_t t, int64_t at) { f(t * p_.slice, at); });
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const size_t b = dtype_size(dtype_);
    const auto* x = static_cast<const char*>(src[0]->data());
    auto* y = static_cast<char*>(dst[0]->data());
    return each(src[1]->i64(), [&](int64_t o, int64_t i) {
      std::memcpy(y + o * b, x + i * b, static_cast<size_t>(p_.slice) * b);
    });
  }
  Status backward(const BackwardArgs& a) override {
    float* dx = zeroed_grad(a, 0);
    if (!dx) return Status::ok();
    const float* dy = a.diff_dst[0]->f32();
    return each(a.src[1]->i64(), [&](int64_t o, int64_t i) {
      for (int64_t k = 0; k < p_.slice; ++k) dx[i + k] += dy[o + k];
    });
  }

 private:
  GatherNDParams p_;
  std::string label_;
};

/// Combines an update into its destination by the node's reduction.
template <class T>
void reduce_into(T* to, T v, ScatterReduction r) {
  switch (r) {
    case ScatterReduction::kNone: *to = v; break;
    case ScatterReduction::kAdd: *to = add(*to, v); break;
    case ScatterReduction::kMul:
      if constexpr (std::is_same_v<T, int64_t>)
        *to = static_cast<int64_t>(static_cast<uint64_t>(*to) * static_cast<uint64_t>(v));
      else *to = *to * v;
      break;
    case ScatterReduction::kMax: *to = std::max(*to, v); break;
    case ScatterReduction::kMin: *to = std::min(*to, v); break;
  }
}

/// ScatterElements and ScatterND: the data copied, then each update written (or combined)
/// where its index says, in order; an index outside its axis is an error naming the node.
class ScatterKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_ASSIGN_OR_RETURN(red_, scatter_reduction(ctx));
    nd_ = ctx.node->op_type == "ScatterND";
    data_ = ctx.inputs[0].shape;
    idx_ = ctx.inputs[1].shape;
    dtype_ = ctx.inputs[0].dtype;
    label_ = ctx.node->label();
    if (nd_) {
      MOSAIC_ASSIGN_OR_RETURN(nd_params_, gather_nd_params(ctx));  // no batch_dims: one batch
    } else {
      MOSAIC_ASSIGN_OR_RETURN(axis_, gather_elements_axis(ctx));
    }
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    std::memcpy(dst[0]->data(), src[0]->data(), src[0]->bytes());
    const int64_t* index = src[1]->i64();
    const size_t b = dtype_size(dtype_);
    auto put = [&](int64_t to, int64_t from, int64_t count) {
      auto* y = static_cast<char*>(dst[0]->data());
      const auto* u = static_cast<const char*>(src[2]->data());
      if (red_ == ScatterReduction::kNone) std::memcpy(y + to * b, u + from * b, static_cast<size_t>(count) * b);
      else if (dtype_ == DType::kI64)
        for (int64_t k = 0; k < count; ++k) reduce_into(dst[0]->i64() + to + k, src[2]->i64()[from + k], red_);
      else
        for (int64_t k = 0; k < count; ++k) reduce_into(dst[0]->f32() + to + k, src[2]->f32()[from + k], red_);
    };
    if (nd_) return each_index_tuple(nd_params_, index, label_, [&](int64_t t, int64_t at) {
      put(at, t * nd_params_.slice, nd_params_.slice);
    });
    return each_element_index(data_, idx_, axis_, index, label_, [&](int64_t o, int64_t at) { put(at, o, 1); });
  }

 private:
  ScatterReduction red_ = ScatterReduction::kNone;
  bool nd_ = false;
  int64_t axis_ = 0;
  GatherNDParams nd_params_;
  Shape data_, idx_;
  DType dtype_ = DType::kF32;
  std::string label_;
};

/// TopK: per [outer, inner] position, the axis' indices ordered by value (largest or
/// smallest first; equal values by lower index, as ONNX specifies), the first k kept.
class TopKKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_ASSIGN_OR_RETURN(p_, topk_params(ctx));
    int64_ = ctx.inputs[0].dtype == DType::kI64;
    return Status::ok();
  }
  template <class T>
  void run(const T* x, T* values, int64_t* indices) const {
    std::vector<int64_t> order(static_cast<size_t>(p_.axis_dim));
    for (int64_t o = 0; o < p_.outer; ++o)
      for (int64_t i = 0; i < p_.inner; ++i) {
        const T* row = x + o * p_.axis_dim * p_.inner + i;
        for (int64_t a = 0; a < p_.axis_dim; ++a) order[a] = a;
        auto before = [&](int64_t a, int64_t b) {
          const T va = row[a * p_.inner], vb = row[b * p_.inner];
          if (va != vb) return p_.largest ? va > vb : va < vb;
          return a < b;
        };
        std::partial_sort(order.begin(), order.begin() + p_.k, order.end(), before);
        for (int64_t j = 0; j < p_.k; ++j) {
          const int64_t at = (o * p_.k + j) * p_.inner + i;
          values[at] = row[order[j] * p_.inner];
          indices[at] = order[j];
        }
      }
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    if (int64_) run(src[0]->i64(), dst[0]->i64(), dst[1]->i64());
    else run(src[0]->f32(), dst[0]->f32(), dst[1]->i64());
    return Status::ok();
  }

 private:
  TopKParams p_;
  bool int64_ = false;
};

}  // namespace

void add_indexing_kernels(BackendRegistration& r) {
  r.kernel("ScatterElements", make_factory<ScatterKernel>());
  r.kernel("Scatter", make_factory<ScatterKernel>());  // ScatterElements' old name
  r.kernel("ScatterND", make_factory<ScatterKernel>());
  r.kernel("TopK", make_factory<TopKKernel>());
  r.kernel("GatherND", make_factory<GatherNDKernel>());
  // float64 in its own width; the rest as KernelTraits' default (naive widens the others).
  const KernelTraits f64{LayoutUse::kNone, nullptr, kBaseDTypes | dtype_bit(DType::kF64)};
  r.kernel("CumSum", make_factory<CumSumKernel>(), f64);
  r.kernel("CumProd", make_factory<CumSumKernel>(), f64);
  r.kernel("Tile", make_factory<TileKernel>());
  r.kernel("GatherElements", make_factory<GatherElementsKernel>());
}

}  // namespace mosaic
