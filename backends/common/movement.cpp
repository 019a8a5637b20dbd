#include "backends/common/movement.hpp"
#include "backends/common/movement_internal.hpp"

#include "ir/elements.hpp"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <random>

#include "operators/params.hpp"

namespace mosaic {

Expected<AxisMaps> slice_axis_maps(const KernelContext& ctx) {
  MOSAIC_ASSIGN_OR_RETURN(auto ranges, slice_ranges(ctx));
  AxisMaps maps;
  for (auto& rg : ranges) {
    std::vector<int64_t> m(rg[2]);
    for (int64_t i = 0; i < rg[2]; ++i) m[i] = rg[0] + i * rg[1];
    maps.push_back(std::move(m));
  }
  return maps;
}

AxisMaps pad_axis_maps(const PadParams& p, const Shape& in, const Shape& out) {
  AxisMaps maps;
  for (size_t a = 0; a < in.size(); ++a) {
    const int64_t d = in[a];
    std::vector<int64_t> m(out[a]);
    for (int64_t o = 0; o < out[a]; ++o) {
      int64_t i = o - p.pads[a];
      if (i < 0 || i >= d) {
        if (p.mode == "constant" || d == 0) i = -1;
        else if (p.mode == "edge") i = i < 0 ? 0 : d - 1;
        else if (p.mode == "wrap") i = ((i % d) + d) % d;
        else {
          while (i < 0 || i >= d) i = i < 0 ? -i : 2 * (d - 1) - i;
        }
      }
      m[o] = i;
    }
    maps.push_back(std::move(m));
  }
  return maps;
}

std::vector<int64_t> row_major_strides(const Shape& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (int64_t i = static_cast<int64_t>(shape.size()) - 2; i >= 0; --i) s[i] = s[i + 1] * shape[i + 1];
  return s;
}

Status gather_index_error(const std::string& label, int64_t value, int64_t position, int64_t axis_dim) {
  return Status::invalid(label + ": index " + std::to_string(value) + " (element " + std::to_string(position) +
                         ") is outside the gathered axis of size " + std::to_string(axis_dim) +
                         (axis_dim > 1 ? " (token ids must lie in [0, " + std::to_string(axis_dim) + "))" : ""));
}

namespace {

/// Output 0 shares input 0's bytes; the executor never calls forward.
class ViewKernel final : public Kernel {
 public:
  Status init(const KernelContext&) { return Status::ok(); }
  Status forward(const std::vector<const Tensor*>&, const std::vector<Tensor*>&) override {
    return Status::internal("view kernel executed");
  }
  bool aliases_input() const override { return true; }
  /// The executor passes gradients through views itself (same elements, new shape).
  bool has_backward() const override { return true; }
  bool backward_reads_input(size_t) const override { return false; }
  bool backward_reads_output(size_t) const override { return false; }
};

/// Dropout at inference: copy, and a mask of all true when asked for.
class DropoutKernel final : public Kernel {
 public:
  Status init(const KernelContext&) { return Status::ok(); }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    if (dst[0]->data() != src[0]->data()) std::memcpy(dst[0]->data(), src[0]->data(), src[0]->bytes());
    if (dst.size() > 1 && dst[1]) std::memset(dst[1]->data(), 1, dst[1]->bytes());
    return Status::ok();
  }
};

/// Dropout in training mode: y = x * mask / (1 - ratio), mask ~ Bernoulli(1 - ratio), drawn
/// from a generator seeded per node and advanced every call (PyTorch's semantics; the
/// masks themselves differ from PyTorch's generator).
class DropoutTrainKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    ratio_ = ctx.node->attr_float("ratio", 0.5f);
    if (ctx.has_input(1)) {
      const Tensor* r = ctx.constant(1);
      if (!r) return Status::unsupported(ctx.node->label() + ": ratio must be a constant");
      ratio_ = static_cast<float>(r->get(0));
    }
    if (ratio_ < 0.f || ratio_ >= 1.f) return Status::invalid(ctx.node->label() + ": ratio must be in [0, 1)");
    rng_.seed(ctx.seed);
    mask_.resize(static_cast<size_t>(ctx.inputs[0].numel()));
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const float scale = 1.f / (1.f - ratio_);
    std::bernoulli_distribution keep(1.0 - ratio_);
    const float* x = src[0]->f32();
    float* y = dst[0]->f32();
    for (size_t i = 0; i < mask_.size(); ++i) {
      mask_[i] = keep(rng_);
      y[i] = mask_[i] ? x[i] * scale : 0.f;
    }
    if (dst.size() > 1 && dst[1]) std::memcpy(dst[1]->data(), mask_.data(), mask_.size());
    return Status::ok();
  }
  bool has_backward() const override { return true; }
  bool backward_reads_input(size_t) const override { return false; }
  bool backward_reads_output(size_t) const override { return false; }
  Status backward(const BackwardArgs& a) override {
    if (!a.diff_src[0]) return Status::ok();
    const float scale = 1.f / (1.f - ratio_);
    const float* dy = a.diff_dst[0]->f32();
    float* dx = a.diff_src[0]->f32();
    for (size_t i = 0; i < mask_.size(); ++i) dx[i] = mask_[i] ? dy[i] * scale : 0.f;
    return Status::ok();
  }
  size_t workspace_bytes() const override { return mask_.size(); }

 private:
  float ratio_ = 0.5f;
  std::mt19937_64 rng_;
  std::vector<uint8_t> mask_;
};

/// Copies an output whose every element maps to one input element (or a fill value),
/// given a per-axis index map; used by Slice and Pad. Planes (all axes but the last two)
/// are processed in parallel, rows within a plane in order, and the last axis is copied as
/// runs of contiguous elements.
class IndexMapKernel : public Kernel {
 public:
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const size_t r = out_shape_.size();
    const auto* in = static_cast<const char*>(src[0]->data());
    auto* out = static_cast<char*>(dst[0]->data());
    const char* fill = fill_;
    if (fill_input_ >= 0 && src.size() > static_cast<size_t>(fill_input_) && src[fill_input_])
      fill = static_cast<const char*>(src[fill_input_]->data());
    if (r == 0) {
      std::memcpy(out, in, esize_);
      return Status::ok();
    }
    const int64_t es = static_cast<int64_t>(esize_);
    if (esize_ == 4) {
      // Float rows (Pad in CNNs: rows of a few elements) with inline loops, not library calls;
      // other element sizes below.
      float v;
      std::memcpy(&v, fill, 4);
      const auto* x = reinterpret_cast<const float*>(in);
      auto* y = reinterpret_cast<float*>(out);
      for_each_row([&](int64_t row, int64_t off, bool inside) {
        float* o = y + row * out_shape_[r - 1];
        for (const Run& run : runs_) {
          float* d = o + run.out_start;
          if (!inside || run.in_start < 0) {
            for (int64_t j = 0; j < run.length; ++j) d[j] = v;
          } else {
            const float* sx = x + off + run.in_start;
            for (int64_t j = 0; j < run.length; ++j) d[j] = sx[j * run.step];
          }
        }
      });
      return Status::ok();
    }
    if (esize_ == 1) {
      // Bytes (a QDQ model's codes: core/fuse_qdq_codes.cpp): fills as memset, runs as memcpy.
      // Inline loops: a CNN's rows are a few dozen bytes, where a library call per run costs
      // more than the copy.
      const char v = *fill;
      for_each_row([&](int64_t row, int64_t off, bool inside) {
        char* o = out + row * out_shape_[r - 1];
        for (const Run& run : runs_) {
          char* d = o + run.out_start;
          if (!inside || run.in_start < 0) {
            for (int64_t j = 0; j < run.length; ++j) d[j] = v;
          } else if (run.step == 1) {
            const char* sx = in + off + run.in_start;
            for (int64_t j = 0; j < run.length; ++j) d[j] = sx[j];
          } else {
            for (int64_t j = 0; j < run.length; ++j) d[j] = in[off + run.in_start + j * run.step];
          }
        }
      });
      return Status::ok();
    }
    for_each_row([&](int64_t row, int64_t off, bool inside) {
      char* o = out + row * out_shape_[r - 1] * es;
      for (const Run& run : runs_) {
        char* d = o + run.out_start * es;
        if (!inside || run.in_start < 0) {
          for (int64_t j = 0; j < run.length; ++j) std::memcpy(d + j * es, fill, esize_);
        } else if (run.step == 1) {
          std::memcpy(d, in + (off + run.in_start) * es, run.length * esize_);
        } else {
          for (int64_t j = 0; j < run.length; ++j) std::memcpy(d + j * es, in + (off + run.in_start + j * run.step) * es, esize_);
        }
      }
    });
    return Status::ok();
  }

  bool has_backward() const override { return esize_ == 4; }
  bool backward_reads_input(size_t) const override { return false; }
  bool backward_reads_output(size_t) const override { return false; }
  /// dx[i] = sum of dy over the output elements copied from input element i (padding and
  /// sliced-away elements get nothing; reflect/edge padding accumulates).
  Status backward(const BackwardArgs& a) override {
    if (a.diff_src.size() > 2 && a.diff_src[2]) a.diff_src[2]->f32()[0] = 0.f;
    if (!a.diff_src[0]) return Status::ok();
    float* dx = a.diff_src[0]->f32();
    const int64_t nx = a.diff_src[0]->numel();
    const float* dy = a.diff_dst[0]->f32();
    const size_t r = out_shape_.size();
    const auto in_strides = row_major_strides(in_shape_);
    if (injective_ && r > 0) {
      // Every input element is copied at most once (constant padding, slicing): the
      // forward's row runs in reverse. Only elements no output reads need zeroing.
      if (!covers_input_) {
#pragma omp parallel for schedule(static) if (nx > 65536)
        for (int64_t b = 0; b < (nx + 4095) / 4096; ++b)
          std::fill(dx + b * 4096, dx + std::min(nx, (b + 1) * 4096), 0.f);
      }
      for_each_row([&](int64_t row, int64_t off, bool inside) {
        if (!inside) return;
        const float* g = dy + row * out_shape_[r - 1];
        for (const Run& run : runs_) {
          if (run.in_start < 0) continue;
          float* d = dx + off + run.in_start;
          for (int64_t j = 0; j < run.length; ++j) d[j * run.step] = g[run.out_start + j];
        }
      });
      return Status::ok();
    }
    std::fill(dx, dx + nx, 0.f);
    std::vector<int64_t> idx(r, 0);
    for (int64_t o = 0; o < shape_numel(out_shape_); ++o) {
      int64_t off = 0;
      bool inside = true;
      for (size_t ax = 0; ax < r && inside; ++ax) {
        const int64_t i = map_[ax][idx[ax]];
        if (i < 0) inside = false;
        else off += i * in_strides[ax];
      }
      if (inside) dx[off] += dy[o];
      for (int64_t ax = static_cast<int64_t>(r) - 1; ax >= 0; --ax) {
        if (++idx[ax] < out_shape_[ax]) break;
        idx[ax] = 0;
      }
    }
    return Status::ok();
  }

 protected:
  /// Splits the last axis's map into runs: fill, contiguous copy, or strided copy; and notes
  /// whether every input element is read at most once (backward can then run in parallel).
  void build_runs() {
    injective_ = covers_input_ = true;
    for (size_t a = 0; a < map_.size(); ++a) {
      std::vector<int64_t> seen(map_[a].begin(), map_[a].end());
      std::sort(seen.begin(), seen.end());
      for (size_t i = 1; i < seen.size(); ++i)
        if (seen[i] >= 0 && seen[i] == seen[i - 1]) injective_ = false;
      seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
      const int64_t read = static_cast<int64_t>(std::count_if(seen.begin(), seen.end(), [](int64_t i) { return i >= 0; }));
      if (read != in_shape_[a]) covers_input_ = false;
    }
    const std::vector<int64_t>& m = map_.back();
    for (int64_t j = 0; j < static_cast<int64_t>(m.size());) {
      Run run{j, m[j], 1, 1};
      if (m[j] >= 0 && j + 1 < static_cast<int64_t>(m.size()) && m[j + 1] >= 0) run.step = m[j + 1] - m[j];
      while (j + run.length < static_cast<int64_t>(m.size())) {
        const int64_t next = m[j + run.length];
        if (m[j] < 0 ? next >= 0 : next != m[j] + run.length * run.step) break;
        ++run.length;
      }
      if (run.step != 1 && run.length == 1) run.step = 1;
      runs_.push_back(run);
      j += run.length;
    }
  }
  struct Run {
    int64_t out_start, in_start, length, step;  ///< in_start < 0: fill
  };
  /// Calls fn(row, input offset of the row, whether the row maps inside the input) for every
  /// output row (all axes but the last), planes in parallel.
  template <class F>
  void for_each_row(F&& fn) const {
    const size_t r = out_shape_.size();
    const int64_t row_len = out_shape_[r - 1];
    const int64_t rows = row_len ? shape_numel(out_shape_) / row_len : 0;
    const int64_t h = r >= 2 ? out_shape_[r - 2] : 1, planes = h ? rows / h : 0;
    const auto in_strides = row_major_strides(in_shape_);
#pragma omp parallel for schedule(static) if (rows * row_len > 65536)
    for (int64_t plane = 0; plane < planes; ++plane) {
      int64_t base = 0, rem = plane;
      bool inside = true;
      for (int64_t a = static_cast<int64_t>(r) - 3; a >= 0; --a) {
        const int64_t i = map_[a][rem % out_shape_[a]];
        rem /= out_shape_[a];
        if (i < 0) inside = false;
        else base += i * in_strides[a];
      }
      for (int64_t y = 0; y < h; ++y) {
        const int64_t i = r >= 2 ? map_[r - 2][y] : 0;
        fn(plane * h + y, base + (i >= 0 ? i * (r >= 2 ? in_strides[r - 2] : 0) : 0), inside && i >= 0);
      }
    }
  }
  Shape in_shape_, out_shape_;
  std::vector<std::vector<int64_t>> map_;  ///< per axis: output index -> input index, -1 = fill
  std::vector<Run> runs_;
  bool injective_ = false;
  bool covers_input_ = false;  ///< every input element is read by some output element
  size_t esize_ = 4;
  alignas(8) char fill_[8] = {};
  int fill_input_ = -1;  ///< input holding the fill value at run time, if any
};

class SliceKernel final : public IndexMapKernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_ASSIGN_OR_RETURN(map_, slice_axis_maps(ctx));
    in_shape_ = ctx.inputs[0].shape;
    out_shape_ = ctx.outputs[0].shape;
    esize_ = dtype_size(ctx.inputs[0].dtype);
    if (!map_.empty()) build_runs();
    return Status::ok();
  }
};

class PadKernel final : public IndexMapKernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_ASSIGN_OR_RETURN(PadParams p, pad_params(ctx));
    if (p.value_at_run_time) fill_input_ = 2;
    in_shape_ = ctx.inputs[0].shape;
    out_shape_ = ctx.outputs[0].shape;
    const DType dt = ctx.inputs[0].dtype;
    esize_ = dtype_size(dt);
    store_f64(dt, fill_, 0, p.value);
    map_ = pad_axis_maps(p, in_shape_, out_shape_);
    if (!map_.empty()) build_runs();
    // A CNN's pad (constant, of the last two axes only, none cropped) of 1- or 4-byte
    // elements: plane by plane, the rows filled and copied in place, on every thread. The
    // general walk costs about 7 ns a row, most of a 4-byte row's pad.
    const size_t r = in_shape_.size();
    plane_ = p.mode == "constant" && !p.value_at_run_time && r >= 2 && (esize_ == 1 || esize_ == 4);
    for (size_t a = 0; a < r && plane_; ++a)
      plane_ = p.pads[a] >= 0 && p.pads[a + r] >= 0 && (a + 2 >= r || (p.pads[a] == 0 && p.pads[a + r] == 0));
    if (plane_) {
      top_ = p.pads[r - 2];
      left_ = p.pads[r - 1];
      planes_ = shape_numel(in_shape_) / (in_shape_[r - 2] * in_shape_[r - 1] > 0 ? in_shape_[r - 2] * in_shape_[r - 1] : 1);
    }
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    if (!plane_ || shape_numel(in_shape_) == 0) return IndexMapKernel::forward(src, dst);
    if (esize_ == 1) pad_planes<uint8_t>(src[0]->data(), dst[0]->data());
    else pad_planes<uint32_t>(src[0]->data(), dst[0]->data());
    return Status::ok();
  }

 private:
  template <class T>
  void pad_planes(const void* x, void* y) const {
    const size_t r = in_shape_.size();
    const int64_t H = in_shape_[r - 2], W = in_shape_[r - 1], Ho = out_shape_[r - 2], Wo = out_shape_[r - 1];
    T v;
    std::memcpy(&v, fill_, sizeof v);
    const T* in = static_cast<const T*>(x);
    T* out = static_cast<T*>(y);
#pragma omp parallel for schedule(static) if (planes_ * Ho * Wo > (1 << 16))
    for (int64_t p = 0; p < planes_; ++p) {
      const T* xp = in + p * H * W;
      T* yp = out + p * Ho * Wo;
      for (int64_t oh = 0; oh < Ho; ++oh) {
        T* row = yp + oh * Wo;
        const int64_t h = oh - top_;
        if (h < 0 || h >= H) {
          for (int64_t c = 0; c < Wo; ++c) row[c] = v;
          continue;
        }
        const T* xr = xp + h * W;
        for (int64_t c = 0; c < left_; ++c) row[c] = v;
        for (int64_t c = 0; c < W; ++c) row[left_ + c] = xr[c];
        for (int64_t c = left_ + W; c < Wo; ++c) row[c] = v;
      }
    }
  }

  bool plane_ = false;
  int64_t top_ = 0, left_ = 0, planes_ = 0;
};

/// Gather along an axis (embedding lookups: token ids into a weight table). Every index is
/// checked against the axis before it is read; backward scatter-adds the gradient rows into
/// the data's gradient (the indices have none).
class GatherKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    const Shape& x = ctx.inputs[0].shape;
    MOSAIC_ASSIGN_OR_RETURN(int64_t axis, normalize_axis(ctx.node->attr_int("axis", 0),
                                                         static_cast<int64_t>(x.size()), *ctx.node));
    esize_ = dtype_size(ctx.inputs[0].dtype);
    float_ = ctx.inputs[0].dtype == DType::kF32;
    outer_ = 1;
    for (int64_t i = 0; i < axis; ++i) outer_ *= x[i];
    axis_dim_ = x[axis];
    inner_bytes_ = esize_;
    for (size_t i = axis + 1; i < x.size(); ++i) inner_bytes_ *= x[i];
    label_ = ctx.node->label() + ": input '" + ctx.node->inputs[1] + "'";
    return Status::ok();
  }
  /// Index j of the indices, wrapped as ONNX says (negative counts from the end), or an
  /// error naming the input when it lies outside the axis.
  Expected<int64_t> index(const int64_t* idx, int64_t j) const {
    const int64_t i = idx[j] < 0 ? idx[j] + axis_dim_ : idx[j];
    if (i < 0 || i >= axis_dim_) return gather_index_error(label_, idx[j], j, axis_dim_);
    return i;
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const auto* in = static_cast<const char*>(src[0]->data());
    auto* out = static_cast<char*>(dst[0]->data());
    const int64_t ni = src[1]->numel();
    std::vector<int64_t> widened;
    const int64_t* idx = indices_i64(*src[1], widened);
    for (int64_t j = 0; j < ni; ++j) MOSAIC_RETURN_IF_ERROR(index(idx, j).status());  // all, before any copy
    for (int64_t o = 0; o < outer_; ++o)
      for (int64_t j = 0; j < ni; ++j) {
        std::memcpy(out, in + (o * axis_dim_ + index(idx, j).value()) * inner_bytes_, inner_bytes_);
        out += inner_bytes_;
      }
    return Status::ok();
  }
  bool has_backward() const override { return float_; }
  bool backward_reads_input(size_t i) const override { return i == 1; }
  bool backward_reads_output(size_t) const override { return false; }
  Status backward(const BackwardArgs& a) override {
    if (!a.diff_src[0]) return Status::ok();
    float* dx = a.diff_src[0]->f32();
    std::fill(dx, dx + a.diff_src[0]->numel(), 0.f);
    const float* dy = a.diff_dst[0]->f32();
    const int64_t ni = a.src[1]->numel(), inner = inner_bytes_ / static_cast<int64_t>(sizeof(float));
    std::vector<int64_t> widened;
    const int64_t* idx = indices_i64(*a.src[1], widened);
    for (int64_t o = 0; o < outer_; ++o)
      for (int64_t j = 0; j < ni; ++j, dy += inner) {
        float* row = dx + (o * axis_dim_ + index(idx, j).value()) * inner;  // checked in forward
        for (int64_t k = 0; k < inner; ++k) row[k] += dy[k];
      }
    return Status::ok();
  }

 private:
  size_t esize_ = 4;
  int64_t outer_ = 1, axis_dim_ = 1, inner_bytes_ = 4;
  bool float_ = false;
  std::string label_;
};

/// Cast and CastLike between every pair of element types (convert_elements, ir/elements.hpp).
class CastKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    from_ = ctx.inputs[0].dtype;
    to_ = ctx.outputs[0].dtype;
    saturate_ = ctx.node->attr_int("saturate", 1) != 0;  // the 8-bit floats' (opset 19)
    const std::string mode = ctx.node->attr_string("round_mode", "up");  // float8e8m0's (opset 24)
    if (mode == "up") e8m0_ = E8M0Rounding::kUp;
    else if (mode == "down") e8m0_ = E8M0Rounding::kDown;
    else if (mode == "nearest") e8m0_ = E8M0Rounding::kNearest;
    else return Status::invalid(ctx.node->label() + ": round_mode '" + mode + "' (up, down or nearest)");
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    convert_elements(from_, src[0]->data(), to_, dst[0]->data(), src[0]->numel(), saturate_, e8m0_);
    return Status::ok();
  }

 private:
  DType from_ = DType::kF32, to_ = DType::kF32;
  bool saturate_ = true;
  E8M0Rounding e8m0_ = E8M0Rounding::kUp;
};

class ShapeKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    const Shape& x = ctx.inputs[0].shape;
    const int64_t r = static_cast<int64_t>(x.size());
    int64_t start = ctx.node->attr_int("start", 0), end = ctx.node->attr_int("end", r);
    if (start < 0) start += r;
    if (end < 0) end += r;
    start = std::clamp<int64_t>(start, 0, r);
    end = std::clamp<int64_t>(end, 0, r);
    for (int64_t i = start; i < end; ++i) dims_.push_back(x[i]);
    if (ctx.node->op_type == "Size") dims_ = {shape_numel(x)};  // Size: the element count, a scalar
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>&, const std::vector<Tensor*>& dst) override {
    std::memcpy(dst[0]->data(), dims_.data(), dims_.size() * 8);
    return Status::ok();
  }

 private:
  std::vector<int64_t> dims_;
};

class ConstantKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    const Node& n = *ctx.node;
    if (n.has_attr("value")) value_ = *n.attrs.at("value").t;
    else if (n.has_attr("value_float")) value_ = Tensor::from_f32({}, {n.attr_float("value_float", 0)});
    else if (n.has_attr("value_floats")) {
      auto v = n.attr_floats("value_floats");
      value_ = Tensor::from_f32({static_cast<int64_t>(v.size())}, v);
    } else if (n.has_attr("value_int")) value_ = Tensor::scalar_i64(n.attr_int("value_int", 0));
    else if (n.has_attr("value_ints")) {
      auto v = n.attr_ints("value_ints");
      value_ = Tensor::from_i64({static_cast<int64_t>(v.size())}, v);
    } else {
      return Status::unsupported(n.label() + ": no supported value attribute");
    }
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>&, const std::vector<Tensor*>& dst) override {
    std::memcpy(dst[0]->data(), value_.data(), value_.bytes());
    return Status::ok();
  }

 private:
  Tensor value_;
};

class ConstantOfShapeKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    if (ctx.node->has_attr("value")) {
      const Tensor& v = *ctx.node->attrs.at("value").t;
      std::memcpy(fill_, v.data(), dtype_size(v.dtype()));
    }
    esize_ = dtype_size(ctx.outputs[0].dtype);
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>&, const std::vector<Tensor*>& dst) override {
    auto* out = static_cast<char*>(dst[0]->data());
    for (int64_t i = 0; i < dst[0]->numel(); ++i) std::memcpy(out + i * esize_, fill_, esize_);
    return Status::ok();
  }

 private:
  alignas(8) char fill_[8] = {};
  size_t esize_ = 4;
};

}  // namespace

KernelFactory view_kernel_factory() { return make_factory<ViewKernel>(); }

void add_view_kernels(BackendRegistration& r) {
  // Views and copies move bytes: every element type.
  for (const char* op : {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"})
    r.kernel(op, make_factory<ViewKernel>(), {LayoutUse::kNone, nullptr, kAllDTypes});
  r.kernel("Dropout", [](const KernelContext& ctx) -> Expected<std::unique_ptr<Kernel>> {
    if (ctx.training) return make_factory<DropoutTrainKernel>()(ctx);
    if (ctx.has_output(1)) return make_factory<DropoutKernel>()(ctx);
    return make_factory<ViewKernel>()(ctx);
  });
}

KernelFactory movement_kernel_factory(const std::string& op) {
  static const std::map<std::string, KernelFactory> kFactories = {
      {"Transpose", transpose_kernel_factory()},      {"Concat", concat_kernel_factory()},
      {"Slice", make_factory<SliceKernel>()},         {"Pad", make_factory<PadKernel>()},
      {"Gather", make_factory<GatherKernel>()},       {"Cast", make_factory<CastKernel>()},
      {"CastLike", make_factory<CastKernel>()},
      {"Shape", make_factory<ShapeKernel>()},         {"Constant", make_factory<ConstantKernel>()},
      {"Size", make_factory<ShapeKernel>()},          {"Split", split_kernel_factory()},
      {"ConstantOfShape", make_factory<ConstantOfShapeKernel>()}};
  auto it = kFactories.find(op);
  if (it != kFactories.end()) return it->second;
  // An unknown name is a bug in the caller: every kernel it makes fails, naming it.
  return [op](const KernelContext&) -> Expected<std::unique_ptr<Kernel>> {
    return Status::internal("no shared movement kernel for " + op);
  };
}

void add_movement_kernel(BackendRegistration& r, const std::string& op) {
  r.kernel(op, movement_kernel_factory(op), {LayoutUse::kNone, nullptr, kAllDTypes});  // each moves bytes (or converts: Cast)
}

}  // namespace mosaic
