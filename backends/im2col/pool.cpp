// The im2col backend's pooling: max, average and global, forward and backward (Eigen per plane).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "backends/common/grad.hpp"
#include "backends/common/pooling.hpp"
#include "backends/common/support.hpp"
#include "backends/im2col/im2col_internal.hpp"

namespace mosaic::im2col_impl {
namespace {

class PoolKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_ASSIGN_OR_RETURN(p_, pool_params(ctx));
    MOSAIC_ASSIGN_OR_RETURN(w_, lift2(p_.win, *ctx.node));
    is_max_ = ctx.node->op_type.find("Max") != std::string::npos;
    global_ = ctx.node->op_type.rfind("Global", 0) == 0;
    interior_ = max_pool_is_interior(p_.win);
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const float* x = src[0]->f32();
    float* y = dst[0]->f32();
    const int64_t in_sp = w_.ih * w_.iw, out_sp = w_.oh * w_.ow, nc = p_.n * p_.c;
    if (global_) {
      // Over no position at all: the maximum of nothing is -inf (the oracle's, and ReduceMax's
      // identity; Eigen's maxCoeff of an empty array is undefined), the mean 0 / 0.
      if (in_sp == 0) {
        std::fill(y, y + nc, is_max_ ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::quiet_NaN());
        return Status::ok();
      }
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < nc; ++i) {
        ConstArrayMap v(x + i * in_sp, in_sp);
        y[i] = is_max_ ? v.maxCoeff() : v.sum() / static_cast<float>(in_sp);
      }
      return Status::ok();
    }
    if (is_max_ && interior_) {  // every window inside the input: no bounds checks
      max_pool_forward_interior(x, y, nc, 1, p_.win);
      return Status::ok();
    }
    if (is_max_ && max_pool_is_2x2_stride_2(p_.win)) {  // a zero Pad folded in: the borders apart
      max_pool_forward_2x2(x, y, nc, p_.win);
      return Status::ok();
    }
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < nc; ++i) {
      const float* xc = x + i * in_sp;
      float* yc = y + i * out_sp;
      for (int64_t oy = 0; oy < w_.oh; ++oy)
        for (int64_t ox = 0; ox < w_.ow; ++ox) {
          const int64_t y0 = oy * w_.sh - w_.pt, x0 = ox * w_.sw - w_.pl;
          float best = -std::numeric_limits<float>::infinity(), sum = 0.f;
          int64_t count = 0;
          for (int64_t ki = 0; ki < w_.kh; ++ki) {
            const int64_t iy = y0 + ki * w_.dh;
            if (iy < 0 || iy >= w_.ih) continue;
            for (int64_t kj = 0; kj < w_.kw; ++kj) {
              const int64_t ix = x0 + kj * w_.dw;
              if (ix < 0 || ix >= w_.iw) continue;
              const float v = xc[iy * w_.iw + ix];
              best = std::max(best, v);
              sum += v;
              ++count;
            }
          }
          if (is_max_) {
            yc[oy * w_.ow + ox] = best;
          } else {
            int64_t div = count;
            if (p_.count_include_pad) {
              const int64_t ey = std::min(y0 + (w_.kh - 1) * w_.dh + 1, w_.ih + w_.pb);
              const int64_t ex = std::min(x0 + (w_.kw - 1) * w_.dw + 1, w_.iw + w_.pr);
              div = ((ey - y0 + w_.dh - 1) / w_.dh) * ((ex - x0 + w_.dw - 1) / w_.dw);
            }
            yc[oy * w_.ow + ox] = sum / static_cast<float>(div);
          }
        }
    }
    return Status::ok();
  }

  bool has_backward() const override { return true; }
  bool backward_reads_output(size_t) const override { return false; }
  /// Max: to the window's first (near-)maximum (common/pooling.hpp); average: spread with
  /// the forward divisor.
  Status backward(const BackwardArgs& a) override {
    if (!a.diff_src[0]) return Status::ok();
    const float* x = a.src[0]->f32();
    const float* dy = a.diff_dst[0]->f32();
    float* dx = a.diff_src[0]->f32();
    const int64_t in_sp = w_.ih * w_.iw, out_sp = w_.oh * w_.ow, nc = p_.n * p_.c;
    if (is_max_) {
      max_pool_backward(x, dy, dx, nc, p_.win);
      return Status::ok();
    }
    std::fill(dx, dx + nc * in_sp, 0.f);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < nc; ++i) {
      float* dxc = dx + i * in_sp;
      for (int64_t oy = 0; oy < w_.oh; ++oy)
        for (int64_t ox = 0; ox < w_.ow; ++ox) {
          const float g = dy[i * out_sp + oy * w_.ow + ox];
          const int64_t y0 = oy * w_.sh - w_.pt, x0 = ox * w_.sw - w_.pl;
          int64_t count = 0;
          for (int64_t ki = 0; ki < w_.kh; ++ki) {
            const int64_t iy = y0 + ki * w_.dh;
            if (iy < 0 || iy >= w_.ih) continue;
            for (int64_t kj = 0; kj < w_.kw; ++kj) {
              const int64_t ix = x0 + kj * w_.dw;
              if (ix >= 0 && ix < w_.iw) ++count;
            }
          }
          int64_t div = count;
          if (p_.count_include_pad) {
            const int64_t ey = std::min(y0 + (w_.kh - 1) * w_.dh + 1, w_.ih + w_.pb);
            const int64_t ex = std::min(x0 + (w_.kw - 1) * w_.dw + 1, w_.iw + w_.pr);
            div = ((ey - y0 + w_.dh - 1) / w_.dh) * ((ex - x0 + w_.dw - 1) / w_.dw);
          }
          const float share = g / static_cast<float>(div);
          for (int64_t ki = 0; ki < w_.kh; ++ki) {
            const int64_t iy = y0 + ki * w_.dh;
            if (iy < 0 || iy >= w_.ih) continue;
            for (int64_t kj = 0; kj < w_.kw; ++kj) {
              const int64_t ix = x0 + kj * w_.dw;
              if (ix >= 0 && ix < w_.iw) dxc[iy * w_.iw + ix] += share;
            }
          }
        }
    }
    return Status::ok();
  }

 private:
  PoolParams p_;
  Win2 w_{};
  bool is_max_ = true, global_ = false, interior_ = false;
};

}  // namespace

void add_pool_kernels(BackendRegistration& r) {
  r.kernel("MaxPool", with_codes_max_pool(make_factory<PoolKernel>()),
           {LayoutUse::kNone, float32_pool_or_codes, kPoolOrCodesDTypes});
  for (const char* op : {"AveragePool", "GlobalAveragePool", "GlobalMaxPool"})
    r.kernel(op, make_factory<PoolKernel>(), {LayoutUse::kNone, float32_pool});
}

}  // namespace mosaic::im2col_impl
