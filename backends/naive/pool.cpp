// The naive oracle's pooling: max, average and global, forward and backward; MaxUnpool,
// max pooling's inverse, forward.
#include <cmath>
#include <limits>

#include "backends/common/grad.hpp"
#include "backends/common/pooling.hpp"
#include "backends/naive/naive_internal.hpp"
#include "operators/conv_transpose.hpp"

namespace mosaic::naive_impl {
namespace {

class PoolKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_ASSIGN_OR_RETURN(p_, pool_params(ctx));
    MOSAIC_ASSIGN_OR_RETURN(w_, lift_window3(p_.win, *ctx.node));
    is_max_ = ctx.node->op_type.find("Max") != std::string::npos;
    is_lp_ = ctx.node->op_type.find("LpPool") != std::string::npos;
    if (is_lp_) {
      p_norm_ = ctx.node->attr_int("p", 2);
      if (p_norm_ < 1) return Status::invalid(ctx.node->label() + ": p must be at least 1, got " + std::to_string(p_norm_));
    }
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    if (src[0]->dtype() == DType::kI64) return forward_integer(src, dst);
    const float* x = src[0]->f32();
    float* y = dst[0]->f32();
    int64_t* indices = dst.size() > 1 && dst[1] ? dst[1]->i64() : nullptr;
    const int64_t in_sp = w_.in[0] * w_.in[1] * w_.in[2], out_sp = w_.out[0] * w_.out[1] * w_.out[2];
    for (int64_t nc = 0; nc < p_.n * p_.c; ++nc) {
      const float* xc = x + nc * in_sp;
      for (int64_t od = 0; od < w_.out[0]; ++od)
        for (int64_t oh = 0; oh < w_.out[1]; ++oh)
          for (int64_t ow = 0; ow < w_.out[2]; ++ow) {
            float best = -std::numeric_limits<float>::infinity();
            int64_t best_i = -1, count = 0;
            double sum = 0;
            visit_window(od, oh, ow, [&](int64_t off, int64_t id, int64_t ih, int64_t iw) {
              const float v = xc[off];
              if (v > best || best_i < 0) {
                best = v;
                best_i = p_.storage_order ? (iw * w_.in[1] + ih) * w_.in[0] + id : off;
              }
              sum += is_lp_ ? std::pow(std::fabs(static_cast<double>(v)), static_cast<double>(p_norm_)) : v;
              ++count;
            });
            const int64_t o = nc * out_sp + (od * w_.out[1] + oh) * w_.out[2] + ow;
            if (is_max_) {
              y[o] = best;
              if (indices) indices[o] = nc * in_sp + best_i;
            } else if (is_lp_) {  // the p-norm of the window (padding adds nothing)
              y[o] = static_cast<float>(std::pow(sum, 1.0 / static_cast<double>(p_norm_)));
            } else {
              y[o] = static_cast<float>(sum / static_cast<double>(p_.count_include_pad ? w_.padded_cells(od, oh, ow) : count));
            }
          }
    }
    return Status::ok();
  }

  /// MaxPool of int8 and uint8, which the oracle's type promotion hands over widened to
  /// int64 (core/promote.hpp): the first maximum of each window, exactly.
  Status forward_integer(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) const {
    if (!is_max_) return Status::unsupported("integer pooling other than MaxPool");
    const int64_t* x = src[0]->i64();
    int64_t* y = dst[0]->i64();
    int64_t* indices = dst.size() > 1 && dst[1] ? dst[1]->i64() : nullptr;
    const int64_t in_sp = w_.in[0] * w_.in[1] * w_.in[2], out_sp = w_.out[0] * w_.out[1] * w_.out[2];
    for (int64_t nc = 0; nc < p_.n * p_.c; ++nc)
      for (int64_t od = 0; od < w_.out[0]; ++od)
        for (int64_t oh = 0; oh < w_.out[1]; ++oh)
          for (int64_t ow = 0; ow < w_.out[2]; ++ow) {
            int64_t best = 0, best_i = -1;
            visit_window(od, oh, ow, [&](int64_t off, int64_t id, int64_t ih, int64_t iw) {
              const int64_t v = x[nc * in_sp + off];
              if (best_i < 0 || v > best) {
                best = v;
                best_i = p_.storage_order ? (iw * w_.in[1] + ih) * w_.in[0] + id : off;
              }
            });
            const int64_t o = nc * out_sp + (od * w_.out[1] + oh) * w_.out[2] + ow;
            y[o] = best;  // a window wholly in the padding has no cell: ONNX leaves it undefined, 0 here
            if (indices) indices[o] = nc * in_sp + best_i;
          }
    return Status::ok();
  }

  bool has_backward() const override { return !is_lp_; }
  bool backward_reads_output(size_t) const override { return false; }
  /// Max: the gradient goes to the window's first (near-)maximum; average:
  /// spread over the window with the forward divisor.
  Status backward(const BackwardArgs& a) override {
    const float* x = a.src[0]->f32();
    const float* dy = a.diff_dst[0]->f32();
    float* dx = zeroed_grad(a, 0);
    if (!dx) return Status::ok();
    const int64_t in_sp = w_.in[0] * w_.in[1] * w_.in[2], out_sp = w_.out[0] * w_.out[1] * w_.out[2];
    for (int64_t nc = 0; nc < p_.n * p_.c; ++nc) {
      const float* xc = x + nc * in_sp;
      float* dxc = dx + nc * in_sp;
      for (int64_t od = 0; od < w_.out[0]; ++od)
        for (int64_t oh = 0; oh < w_.out[1]; ++oh)
          for (int64_t ow = 0; ow < w_.out[2]; ++ow) {
            const float g = dy[nc * out_sp + (od * w_.out[1] + oh) * w_.out[2] + ow];
            std::vector<int64_t> cells;
            float best = -std::numeric_limits<float>::infinity();
            int64_t best_i = -1;
            visit_window(od, oh, ow, [&](int64_t off, int64_t, int64_t, int64_t) {
              if (xc[off] > best || best_i < 0) {
                best = xc[off];
                best_i = off;
              }
              cells.push_back(off);
            });
            if (is_max_) {
              // The first cell within the tie tolerance of the maximum: exact ties as in
              // PyTorch, and near-ties the way every backend routes them (pooling.hpp).
              const float floor = best - std::fabs(best) * kMaxPoolTieRtol;
              for (int64_t off : cells)
                if (xc[off] >= floor) {
                  best_i = off;
                  break;
                }
              if (best_i >= 0) dxc[best_i] += g;
            } else {
              const float share = g / static_cast<float>(p_.count_include_pad ? w_.padded_cells(od, oh, ow) : cells.size());
              for (int64_t off : cells) dxc[off] += share;
            }
          }
    }
    return Status::ok();
  }

 private:
  /// Calls f(offset, id, ih, iw) for every window cell of output (od, oh, ow) inside the input.
  template <class F>
  void visit_window(int64_t od, int64_t oh, int64_t ow, F&& f) const {
    for (int64_t kd = 0; kd < w_.k[0]; ++kd) {
      const int64_t id = od * w_.s[0] - w_.pb[0] + kd * w_.d[0];
      if (id < 0 || id >= w_.in[0]) continue;
      for (int64_t kh = 0; kh < w_.k[1]; ++kh) {
        const int64_t ih = oh * w_.s[1] - w_.pb[1] + kh * w_.d[1];
        if (ih < 0 || ih >= w_.in[1]) continue;
        for (int64_t kw = 0; kw < w_.k[2]; ++kw) {
          const int64_t iw = ow * w_.s[2] - w_.pb[2] + kw * w_.d[2];
          if (iw < 0 || iw >= w_.in[2]) continue;
          f((id * w_.in[1] + ih) * w_.in[2] + iw, id, ih, iw);
        }
      }
    }
  }
  PoolParams p_;
  Window3 w_;
  bool is_max_ = true, is_lp_ = false;
  int64_t p_norm_ = 2;
};

/// MaxUnpool: zeros, then each value of X at its index into the unpooled shape (mapped into
/// output_shape's, which holds it at its start); an index outside it fails the run, naming
/// the node. Later elements overwrite earlier ones at a repeated index.
class MaxUnpoolKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_ASSIGN_OR_RETURN(p_, max_unpool_params(ctx));
    label_ = ctx.node->label();
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const float* x = src[0]->f32();
    const int64_t* index = src[1]->i64();
    float* y = dst[0]->f32();
    std::fill(y, y + dst[0]->numel(), 0.f);
    const int64_t total = shape_numel(p_.inferred);
    for (int64_t e = 0; e < src[0]->numel(); ++e) {
      if (index[e] < 0 || index[e] >= total)
        return Status::invalid(label_ + ": I[" + std::to_string(e) + "] = " + std::to_string(index[e]) +
                               " is outside the unpooled " + shape_str(p_.inferred) + "'s " + std::to_string(total) +
                               " elements");
      int64_t at = 0;
      for (int64_t d = static_cast<int64_t>(p_.out.size()) - 1, r = index[e], scale = 1; d >= 0; --d) {
        at += (r % p_.inferred[static_cast<size_t>(d)]) * scale;
        r /= p_.inferred[static_cast<size_t>(d)];
        scale *= p_.out[static_cast<size_t>(d)];
      }
      y[at] = x[e];
    }
    return Status::ok();
  }

 private:
  MaxUnpoolParams p_;
  std::string label_;
};

}  // namespace

void add_pool_kernels(BackendRegistration& r) {
  r.kernel("MaxUnpool", make_factory<MaxUnpoolKernel>());
  for (const char* op : {"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "LpPool", "GlobalLpPool"})
    r.kernel(op, make_factory<PoolKernel>());
}

}  // namespace mosaic::naive_impl
