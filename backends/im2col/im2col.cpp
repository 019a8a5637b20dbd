#include "backends/im2col/im2col.hpp"

#include <cblas.h>
#include <omp.h>

#include <Eigen/Core>
#include <algorithm>
#include <cstdint>
#include <cmath>
#include <cstring>
#include <limits>

#include "backends/common/broadcast.hpp"
#include "backends/common/movement.hpp"
#include "backends/common/grad.hpp"
#include "backends/common/pooling.hpp"
#include "operators/params.hpp"

namespace mosaic {
namespace {

/// Sum in an order that depends only on n, never on the address (Eigen's vectorised sum
/// peels to alignment first, so the same values in another buffer round differently):
/// 16 strided partial sums, added in a fixed order. Vectorises as well.
float ordered_sum(const float* p, int64_t n) {
  float lane[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int l = 0; l < 16; ++l) lane[l] += p[i + l];
  for (int l = 0; i < n; ++i, ++l) lane[l] += p[i];
  float s = 0.f;
  for (float v : lane) s += v;
  return s;
}

using ArrayMap = Eigen::Map<Eigen::ArrayXf>;
using ConstArrayMap = Eigen::Map<const Eigen::ArrayXf>;

/// Applies a fused activation to n contiguous floats with Eigen.
void apply_activation(const Activation& act, float* y, int64_t n) {
  ArrayMap v(y, n);
  switch (act.kind) {
    case Activation::Kind::kRelu: v = v.max(0.f); break;
    case Activation::Kind::kLeakyRelu: v = (v >= 0.f).select(v, act.alpha * v); break;
    case Activation::Kind::kClip: v = v.max(act.lo).min(act.hi); break;
    case Activation::Kind::kNone: break;
  }
}

/// 1-d and 2-d windows as 2-d (H = 1 for 1-d).
struct Win2 {
  int64_t ih, iw, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr;
};

Expected<Win2> lift2(const Window& w, const Node& node) {
  if (w.rank() == 2)
    return Win2{w.in[0], w.in[1], w.out[0], w.out[1], w.kernel[0], w.kernel[1], w.stride[0], w.stride[1],
                w.dilation[0], w.dilation[1], w.pad_begin[0], w.pad_begin[1], w.pad_end[0], w.pad_end[1]};
  if (w.rank() == 1)
    return Win2{1, w.in[0], 1, w.out[0], 1, w.kernel[0], 1, w.stride[0], 1, w.dilation[0], 0, w.pad_begin[0], 0,
                w.pad_end[0]};
  return Status::unsupported(node.label() + ": im2col implements 1-d and 2-d windows only, got " +
                             std::to_string(w.rank()) + "-d");
}

/// im2col through a precomputed table (built once per kernel): column q of kernel offset
/// kidx = ki * kw + kj reads x at table[kidx * table_ld + q] within a channel plane (images of
/// a chunk apart by their stride, baked in), or is padding (-1). Each element costs one
/// gather, whatever the image width; per-row bounds logic cost more than the copies on
/// VGG16's small feature maps (2-14 pixels wide).
/// cols[(c * kh*kw + kidx)][q] for q < nq (row stride ld).
void im2col_table(const float* x, int64_t channels, int64_t plane, const int32_t* table, int64_t kk, int64_t table_ld,
                  int64_t nq, float* cols, int64_t ld, bool parallel) {
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t r = 0; r < channels * kk; ++r) {
    const int32_t* tb = table + (r % kk) * table_ld;
    const float* xc = x + (r / kk) * plane;
    float* d = cols + r * ld;
#pragma omp simd
    for (int64_t q = 0; q < nq; ++q) {
      const int32_t o = tb[q];
      const float v = xc[o < 0 ? 0 : o];
      d[q] = o < 0 ? 0.f : v;
    }
  }
}

/// Adjoint of im2col_table: dx[...] += dcols over the same table.
void col2im_table(const float* dcols, int64_t ld, int64_t channels, int64_t plane, const int32_t* table, int64_t kk,
                  int64_t table_ld, int64_t nq, float* dx) {
  for (int64_t r = 0; r < channels * kk; ++r) {
    const int32_t* tb = table + (r % kk) * table_ld;
    float* xc = dx + (r / kk) * plane;
    const float* d = dcols + r * ld;
    for (int64_t q = 0; q < nq; ++q)
      if (tb[q] >= 0) xc[tb[q]] += d[q];
  }
}

/// im2col for stride-1 convolutions whose output rows are as wide as the input's (the
/// "same" 3x3/pad-1 layers of VGG-style nets), or that have one output row: for kernel offset
/// kidx, output pixel p reads input pixel p + delta[kidx] or is padding, so a column row is
/// one contiguous copy of the input plane, with zeros before and after it and at the
/// `holes` (padding columns of rows that are otherwise inside). No gathers, no table reads.
struct ShiftUnfold {
  struct Offset {
    int64_t delta = 0, a = 0, b = 0;  ///< pixels [a, b) of the output read p + delta, but the holes
    std::vector<int64_t> holes;       ///< padding pixels inside [a, b), ascending
  };
  static constexpr int64_t kMinPixels = 64;
  bool usable = false;
  int64_t ohw = 0;
  std::vector<Offset> offsets;  ///< per kernel offset ki * kw + kj

  void init(const Win2& w) {
    ohw = w.oh * w.ow;
    // Below some 64 pixels per image the per-segment work costs more than the table's gathers
    // (VGG16-CIFAR's 6x6 and 2x2 layers run faster through the table).
    usable = w.sh == 1 && w.sw == 1 && (w.iw == w.ow || w.oh == 1) && ohw >= kMinPixels;
    if (!usable) return;
    offsets.assign(static_cast<size_t>(w.kh * w.kw), {});
    for (int64_t ki = 0; ki < w.kh; ++ki)
      for (int64_t kj = 0; kj < w.kw; ++kj) {
        Offset& o = offsets[static_cast<size_t>(ki * w.kw + kj)];
        o.delta = (ki * w.dh - w.pt) * w.iw + (kj * w.dw - w.pl);
        std::vector<bool> valid(static_cast<size_t>(ohw));
        o.a = ohw;
        o.b = 0;
        for (int64_t oy = 0; oy < w.oh; ++oy)
          for (int64_t ox = 0; ox < w.ow; ++ox) {
            const int64_t iy = oy - w.pt + ki * w.dh, ix = ox - w.pl + kj * w.dw, q = oy * w.ow + ox;
            valid[static_cast<size_t>(q)] = iy >= 0 && iy < w.ih && ix >= 0 && ix < w.iw;
            if (valid[static_cast<size_t>(q)]) o.a = std::min(o.a, q), o.b = std::max(o.b, q + 1);
          }
        if (o.a >= o.b) o.a = o.b = 0;
        for (int64_t q = o.a; q < o.b; ++q)
          if (!valid[static_cast<size_t>(q)]) o.holes.push_back(q);
      }
  }
  /// cols[(c * kk + kidx) * ld + i * ohw + (p - p0)] for `channels` channels of `images`
  /// images (x's images `image` apart, channel planes `plane` apart) and pixels [p0, p1).
  void unfold(const float* x, int64_t channels, int64_t plane, int64_t image, int64_t images, int64_t p0, int64_t p1,
              float* cols, int64_t ld, bool parallel) const {
    const int64_t kk = static_cast<int64_t>(offsets.size()), n = p1 - p0;
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t r = 0; r < channels * kk; ++r) {
      const Offset& o = offsets[static_cast<size_t>(r % kk)];
      const int64_t lo = std::clamp(o.a, p0, p1), hi = std::clamp(o.b, p0, p1);
      for (int64_t i = 0; i < images; ++i) {
        const float* src = x + i * image + (r / kk) * plane + o.delta;
        float* d = cols + r * ld + i * n - p0;
        std::fill(d + p0, d + lo, 0.f);
        std::copy(src + lo, src + hi, d + lo);
        std::fill(d + hi, d + p1, 0.f);
        for (int64_t q : o.holes)
          if (q >= p0 && q < p1) d[q] = 0.f;
      }
    }
  }
  /// Adjoint over whole images: dx[...] += dcols. Zeroes dcols at the holes first.
  void fold(float* dcols, int64_t ld, int64_t channels, int64_t plane, int64_t image, int64_t images, float* dx) const {
    const int64_t kk = static_cast<int64_t>(offsets.size());
    for (int64_t r = 0; r < channels * kk; ++r) {
      const Offset& o = offsets[static_cast<size_t>(r % kk)];
      for (int64_t i = 0; i < images; ++i) {
        float* d = dcols + r * ld + i * ohw;
        for (int64_t q : o.holes) d[q] = 0.f;
        float* xs = dx + i * image + (r / kk) * plane + o.delta;
#pragma omp simd
        for (int64_t q = o.a; q < o.b; ++q) xs[q] += d[q];
      }
    }
  }
};

/// Convolution as im2col (through the gather table) + sgemm. With a batch, each thread takes
/// whole images (or, for small outputs, chunks of images batched into one GEMM) and runs im2col and a
/// single-threaded sgemm on its own column buffer, which stays in its cache; with one
/// image, im2col and the GEMM are parallelised inside instead.
class ConvKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_ASSIGN_OR_RETURN(p_, conv_params(ctx));
    MOSAIC_ASSIGN_OR_RETURN(w_, lift2(p_.win, *ctx.node));
    act_ = fused_activation(*ctx.node);
    k_ = p_.c_per_group() * w_.kh * w_.kw;
    ohw_ = w_.oh * w_.ow;
    pointwise_ = w_.kh == 1 && w_.kw == 1 && w_.sh == 1 && w_.sw == 1 && w_.pt == 0 && w_.pl == 0 && w_.pb == 0 &&
                 w_.pr == 0;
    threads_ = std::max(1, omp_get_max_threads());
    deterministic_ = ctx.deterministic;
    // Small outputs batch several images into one GEMM (N = images * oh * ow), with the
    // chunks balanced across threads; large outputs are unfolded in bands of output rows
    // so that a band's columns stay in cache.
    const int64_t max_chunk = ohw_ >= 256 ? 1 : std::max<int64_t>(1, 1024 / std::max<int64_t>(ohw_, 1));
    int64_t chunks = (p_.n + max_chunk - 1) / max_chunk;
    if (p_.n >= threads_) chunks = ((chunks + threads_ - 1) / threads_) * threads_;
    chunk_ = (p_.n + chunks - 1) / chunks;
    band_ = chunk_ > 1 ? w_.oh : std::clamp<int64_t>(kBandPixels / std::max<int64_t>(w_.ow, 1), 1, w_.oh);
    const int64_t workers = p_.n >= threads_ ? threads_ : 1;
    cols_per_worker_ = (!pointwise_ || chunk_ > 1) ? k_ * chunk_ * band_ * w_.ow : 0;
    tmp_per_worker_ = chunk_ > 1 ? p_.oc_per_group() * chunk_ * ohw_ : 0;
    cols_.resize(static_cast<size_t>(cols_per_worker_ * workers));
    shift_.init(w_);
    if (!shift_.usable) {
      // Unfolding table for a chunk: column q = image * oh*ow + oy*ow + ox, per (ki, kj).
      const int64_t kk = w_.kh * w_.kw, nq = chunk_ * ohw_, image = p_.c * w_.ih * w_.iw;
      if (chunk_ * image > INT32_MAX) return Status::unsupported(ctx.node->label() + ": image chunk too large");
      table_.assign(static_cast<size_t>(kk * nq), -1);
      for (int64_t ki = 0; ki < w_.kh; ++ki)
        for (int64_t kj = 0; kj < w_.kw; ++kj)
          for (int64_t i = 0; i < chunk_; ++i)
            for (int64_t oy = 0; oy < w_.oh; ++oy)
              for (int64_t ox = 0; ox < w_.ow; ++ox) {
                const int64_t iy = oy * w_.sh - w_.pt + ki * w_.dh, ix = ox * w_.sw - w_.pl + kj * w_.dw;
                if (iy < 0 || iy >= w_.ih || ix < 0 || ix >= w_.iw) continue;
                table_[static_cast<size_t>((ki * w_.kw + kj) * nq + i * ohw_ + oy * w_.ow + ox)] =
                    static_cast<int32_t>(i * image + iy * w_.iw + ix);
              }
    }
    tmp_.resize(static_cast<size_t>(tmp_per_worker_ * workers));
    tracker_ = ctx.tracker;
    if (tracker_) tracker_->on_alloc(workspace_bytes());
    return Status::ok();
  }
  ~ConvKernel() override {
    if (tracker_) tracker_->on_free(workspace_bytes() + bwd_scratch_.size() * sizeof(float));
  }
  size_t workspace_bytes() const override {
    return (cols_.size() + tmp_.size()) * sizeof(float) + table_.size() * sizeof(int32_t);
  }

  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const float* x = src[0]->f32();
    const float* wt = src[1]->f32();
    const float* bias = p_.has_bias ? src[2]->f32() : nullptr;
    float* y = dst[0]->f32();
    const int64_t chunks = (p_.n + chunk_ - 1) / chunk_;
    if (p_.n >= threads_) {
#pragma omp parallel
      {
        const int t = omp_get_thread_num();
#pragma omp for schedule(dynamic, 1)
        for (int64_t c = 0; c < chunks; ++c) run_chunk(x, wt, bias, y, c * chunk_, t, false);
      }
    } else {
      for (int64_t c = 0; c < chunks; ++c) run_chunk(x, wt, bias, y, c * chunk_, 0, true);
    }
    return Status::ok();
  }

  bool has_backward() const override { return !act_.active(); }
  bool backward_reads_output(size_t) const override { return false; }
  /// Per chunk of images (the forward's chunks: small outputs batch several images into one
  /// GEMM) and group: dW += dY cols^T, dcols = W^T dY folded back by col2im, db = sum dY.
  /// Threads take whole chunks (dynamically: the two vCPUs of these machines often run at
  /// different speeds) with private dW/db accumulators, summed at the end.
  Status backward(const BackwardArgs& a) override {
    const float* x = a.src[0]->f32();
    const float* wt = a.src[1]->f32();
    const float* dy = a.diff_dst[0]->f32();
    float* dx = a.diff_src[0] ? a.diff_src[0]->f32() : nullptr;
    float* dw = a.diff_src.size() > 1 && a.diff_src[1] ? a.diff_src[1]->f32() : nullptr;
    float* db = a.diff_src.size() > 2 && a.diff_src[2] ? a.diff_src[2]->f32() : nullptr;
    const int64_t cg = p_.c_per_group(), ocg = p_.oc_per_group(), in_sp = w_.ih * w_.iw;
    const int64_t wsize = p_.oc * k_, chunks = (p_.n + chunk_ - 1) / chunk_;
    const int64_t cols_size = k_ * chunk_ * ohw_, dy_size = chunk_ > 1 ? ocg * chunk_ * ohw_ : 0;
    const int threads = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads_, chunks)));
    // Scratch kept between calls (training runs backward every step): per thread, the
    // unfolded input, its gradient, the chunk's dY gathered to [ocg, images * oh * ow], and
    // the dW/db accumulators.
    const size_t per_thread = static_cast<size_t>(2 * cols_size + dy_size + (dw ? wsize : 0) + (db ? p_.oc : 0));
    if (bwd_scratch_.size() < per_thread * threads) {
      if (tracker_) tracker_->on_alloc((per_thread * threads - bwd_scratch_.size()) * sizeof(float));
      bwd_scratch_.resize(per_thread * threads);
    }
    // Dynamic chunks balance unequal vCPUs, but which thread sums which images into its
    // accumulator then varies run to run; deterministic plans take chunks statically.
    omp_set_schedule(deterministic_ ? omp_sched_static : omp_sched_dynamic, 1);
#pragma omp parallel num_threads(threads)
    {
      const int t = omp_get_thread_num();
      float* c = bwd_scratch_.data() + t * per_thread;
      float* dc = c + cols_size;
      float* dyc = dc + cols_size;
      float* dw_acc = dw ? dyc + dy_size : nullptr;
      float* db_acc = (dw ? dw_acc + wsize : dyc + dy_size);
      if (dw) std::fill(dw_acc, dw_acc + wsize, 0.f);
      if (db) std::fill(db_acc, db_acc + p_.oc, 0.f);
#pragma omp for schedule(runtime)
      for (int64_t ch = 0; ch < chunks; ++ch) {
        const int64_t n0 = ch * chunk_, nb = std::min(chunk_, p_.n - n0), ld = nb * ohw_;
        if (dx) std::fill(dx + n0 * p_.c * in_sp, dx + (n0 + nb) * p_.c * in_sp, 0.f);  // the chunk's images
        for (int64_t g = 0; g < p_.group; ++g) {
          const float* xg = x + (n0 * p_.c + g * cg) * in_sp;
          // dY of the chunk as one [ocg, nb * ohw] matrix.
          const float* dyg = dy + (n0 * p_.oc + g * ocg) * ohw_;
          if (nb > 1) {
            for (int64_t oc = 0; oc < ocg; ++oc)
              for (int64_t i = 0; i < nb; ++i)
                std::copy_n(dy + ((n0 + i) * p_.oc + g * ocg + oc) * ohw_, ohw_, dyc + oc * ld + i * ohw_);
            dyg = dyc;
          }
          if (dw) {
            unfold(xg, cg, nb, 0, ohw_, c, ld, false);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, ocg, k_, ld, 1.f, dyg, ld, c, ld, 1.f,
                        dw_acc + g * ocg * k_, k_);
          }
          if (dx) {
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, k_, ld, ocg, 1.f, wt + g * ocg * k_, k_, dyg, ld, 0.f,
                        dc, ld);
            if (shift_.usable) shift_.fold(dc, ld, cg, in_sp, p_.c * in_sp, nb, dx + (n0 * p_.c + g * cg) * in_sp);
            else
              col2im_table(dc, ld, cg, in_sp, table_.data(), w_.kh * w_.kw, chunk_ * ohw_, ld,
                           dx + (n0 * p_.c + g * cg) * in_sp);
          }
          if (db)
            for (int64_t oc = 0; oc < ocg; ++oc) db_acc[g * ocg + oc] += ordered_sum(dyg + oc * ld, ld);
        }
      }
    }
    for (int t = 0; t < threads; ++t) {
      const float* base = bwd_scratch_.data() + t * per_thread + 2 * cols_size + dy_size;
      if (dw) {
        if (t == 0) std::copy(base, base + wsize, dw);
        else ArrayMap(dw, wsize) += ConstArrayMap(base, wsize);
      }
      if (db) {
        const float* b = base + (dw ? wsize : 0);
        if (t == 0) std::copy(b, b + p_.oc, db);
        else ArrayMap(db, p_.oc) += ConstArrayMap(b, p_.oc);
      }
    }
    return Status::ok();
  }

 private:
  /// Images [n0, n0 + chunk) on worker `t`'s buffers; `inner_parallel` lets im2col use threads.
  void run_chunk(const float* x, const float* wt, const float* bias, float* y, int64_t n0, int t,
                 bool inner_parallel) {
    const int64_t cg = p_.c_per_group(), ocg = p_.oc_per_group(), in_sp = w_.ih * w_.iw;
    const int64_t nb = std::min(chunk_, p_.n - n0), ld = nb * ohw_;
    float* cols = cols_.data() + t * cols_per_worker_;
    float* tmp = tmp_.data() + t * tmp_per_worker_;
    for (int64_t g = 0; g < p_.group; ++g) {
      if (nb == 1 && !pointwise_) {
        // One image, unfolded and multiplied band by band straight into y.
        const float* xg = x + (n0 * p_.c + g * cg) * in_sp;
        float* yg = y + (n0 * p_.oc + g * ocg) * ohw_;
        for (int64_t oy0 = 0; oy0 < w_.oh; oy0 += band_) {
          const int64_t oy1 = std::min(w_.oh, oy0 + band_), cols_n = (oy1 - oy0) * w_.ow;
          unfold(xg, cg, 1, oy0 * w_.ow, oy1 * w_.ow, cols, cols_n, inner_parallel);
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, ocg, cols_n, k_, 1.f, wt + g * ocg * k_, k_, cols,
                      cols_n, 0.f, yg + oy0 * w_.ow, ohw_);
        }
      } else {
        const float* b = x + (n0 * p_.c + g * cg) * in_sp;
        if (nb > 1) {  // (one pointwise image is its own column matrix)
          unfold(b, cg, nb, 0, ohw_, cols, ld, inner_parallel);
          b = cols;
        }
        float* out = nb > 1 ? tmp : y + (n0 * p_.oc + g * ocg) * ohw_;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, ocg, ld, k_, 1.f, wt + g * ocg * k_, k_, b, ld, 0.f,
                    out, ld);
      }
      for (int64_t i = 0; i < nb; ++i)
        for (int64_t oc = 0; oc < ocg; ++oc) {
          float* yo = y + ((n0 + i) * p_.oc + g * ocg + oc) * ohw_;
          const float bv = bias ? bias[g * ocg + oc] : 0.f;
          if (nb > 1) {
            const float* tv = tmp + oc * ld + i * ohw_;
            for (int64_t j = 0; j < ohw_; ++j) yo[j] = tv[j] + bv;
          } else if (bias) {
            ArrayMap(yo, ohw_) += bv;
          }
          if (act_.active()) apply_activation(act_, yo, ohw_);
        }
    }
  }
  /// Columns of `images` images (pixels [p0, p1) of each) of one group, by shifted copies
  /// where the geometry allows, else through the gather table.
  void unfold(const float* xg, int64_t channels, int64_t images, int64_t p0, int64_t p1, float* cols, int64_t ld,
              bool parallel) const {
    const int64_t in_sp = w_.ih * w_.iw;
    if (shift_.usable)
      shift_.unfold(xg, channels, in_sp, p_.c * in_sp, images, p0, p1, cols, ld, parallel);
    else
      im2col_table(xg, channels, in_sp, table_.data() + p0, w_.kh * w_.kw, chunk_ * ohw_,
                   images > 1 ? images * ohw_ : p1 - p0, cols, ld, parallel);
  }
  ConvParams p_;
  Activation act_;
  Win2 w_{};
  ShiftUnfold shift_;
  static constexpr int64_t kBandPixels = 256;  ///< output pixels unfolded at a time
  int64_t k_ = 0, ohw_ = 0, chunk_ = 1, band_ = 1, cols_per_worker_ = 0, tmp_per_worker_ = 0;
  int threads_ = 1;
  bool deterministic_ = false;
  bool pointwise_ = false;
  std::vector<float> cols_, tmp_, bwd_scratch_;
  std::vector<int32_t> table_;  ///< im2col_table's offsets for one chunk (chunk_ images)
  MemoryTracker* tracker_ = nullptr;
};

class PoolKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    if (ctx.has_output(1)) return Status::unsupported(ctx.node->label() + ": MaxPool Indices output (naive only)");
    MOSAIC_ASSIGN_OR_RETURN(p_, pool_params(ctx));
    MOSAIC_ASSIGN_OR_RETURN(w_, lift2(p_.win, *ctx.node));
    is_max_ = ctx.node->op_type.find("Max") != std::string::npos;
    global_ = ctx.node->op_type.rfind("Global", 0) == 0;
    interior_ = w_.pt == 0 && w_.pl == 0 && (w_.oh - 1) * w_.sh + (w_.kh - 1) * w_.dh < w_.ih &&
                (w_.ow - 1) * w_.sw + (w_.kw - 1) * w_.dw < w_.iw;
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const float* x = src[0]->f32();
    float* y = dst[0]->f32();
    const int64_t in_sp = w_.ih * w_.iw, out_sp = w_.oh * w_.ow, nc = p_.n * p_.c;
    if (global_) {
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < nc; ++i) {
        ConstArrayMap v(x + i * in_sp, in_sp);
        y[i] = is_max_ ? v.maxCoeff() : v.sum() / static_cast<float>(in_sp);
      }
      return Status::ok();
    }
    if (is_max_ && interior_) {
      // Every window lies inside the input: no bounds checks.
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < nc; ++i) {
        const float* xc = x + i * in_sp;
        float* yc = y + i * out_sp;
        for (int64_t oy = 0; oy < w_.oh; ++oy) {
          float* yr = yc + oy * w_.ow;
          const float* x0 = xc + oy * w_.sh * w_.iw;
          for (int64_t ox = 0; ox < w_.ow; ++ox) yr[ox] = x0[ox * w_.sw];
          for (int64_t ki = 0; ki < w_.kh; ++ki)
            for (int64_t kj = 0; kj < w_.kw; ++kj) {
              if (ki == 0 && kj == 0) continue;
              const float* xr = x0 + ki * w_.dh * w_.iw + kj * w_.dw;
              for (int64_t ox = 0; ox < w_.ow; ++ox) yr[ox] = std::max(yr[ox], xr[ox * w_.sw]);
            }
        }
      }
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

class GemmKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_ASSIGN_OR_RETURN(p_, gemm_params(ctx));
    if (p_.has_c) c_shape_ = ctx.inputs[2].shape;
    act_ = fused_activation(*ctx.node);
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    float* y = dst[0]->f32();
    float beta = 0.f;
    if (p_.has_c && p_.beta != 0.f) {
      const float* c = src[2]->f32();
      const int64_t cm = c_shape_.size() == 2 ? c_shape_[0] : 1, cn = c_shape_.empty() ? 1 : c_shape_.back();
#pragma omp parallel for schedule(static)
      for (int64_t i = 0; i < p_.m; ++i) {
        const float* crow = c + (cm == 1 ? 0 : i) * cn;
        float* yr = y + i * p_.n;
        if (cn == 1) std::fill(yr, yr + p_.n, crow[0]);
        else std::memcpy(yr, crow, p_.n * sizeof(float));
      }
      beta = p_.beta;
    }
    if (p_.m == 1) {
      // A single row (batch 1): y = op(B)^T x as a matrix-vector product, which OpenBLAS
      // runs at memory bandwidth; x is contiguous whether or not A is transposed.
      cblas_sgemv(CblasRowMajor, p_.trans_b ? CblasNoTrans : CblasTrans, p_.trans_b ? p_.n : p_.k,
                  p_.trans_b ? p_.k : p_.n, p_.alpha, src[1]->f32(), p_.trans_b ? p_.k : p_.n, src[0]->f32(), 1,
                  beta, y, 1);
    } else {
      cblas_sgemm(CblasRowMajor, p_.trans_a ? CblasTrans : CblasNoTrans, p_.trans_b ? CblasTrans : CblasNoTrans,
                  p_.m, p_.n, p_.k, p_.alpha, src[0]->f32(), p_.trans_a ? p_.m : p_.k, src[1]->f32(),
                  p_.trans_b ? p_.k : p_.n, beta, y, p_.n);
    }
    if (act_.active()) {
#pragma omp parallel for schedule(static) if (p_.m * p_.n > 65536)
      for (int64_t i = 0; i < p_.m; ++i) apply_activation(act_, y + i * p_.n, p_.n);
    }
    return Status::ok();
  }

  bool has_backward() const override { return !act_.active(); }
  bool backward_reads_output(size_t) const override { return false; }
  /// dA = alpha dY op(B)^T, dB = alpha op(A)^T dY (each laid out as its operand), dC = beta
  /// dY summed over C's broadcast axes — all as sgemm calls with the matching transposes.
  Status backward(const BackwardArgs& a) override {
    const float* A = a.src[0]->f32();
    const float* B = a.src[1]->f32();
    const float* dy = a.diff_dst[0]->f32();
    const int64_t M = p_.m, N = p_.n, K = p_.k;
    const float alpha = p_.alpha;
    if (a.diff_src[0]) {
      float* dA = a.diff_src[0]->f32();
      if (!p_.trans_a)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, p_.trans_b ? CblasNoTrans : CblasTrans, M, K, N, alpha, dy, N, B,
                    p_.trans_b ? K : N, 0.f, dA, K);
      else
        cblas_sgemm(CblasRowMajor, p_.trans_b ? CblasTrans : CblasNoTrans, CblasTrans, K, M, N, alpha, B,
                    p_.trans_b ? K : N, dy, N, 0.f, dA, M);
    }
    if (a.diff_src[1]) {
      float* dB = a.diff_src[1]->f32();
      if (!p_.trans_b)
        cblas_sgemm(CblasRowMajor, p_.trans_a ? CblasNoTrans : CblasTrans, CblasNoTrans, K, N, M, alpha, A,
                    p_.trans_a ? M : K, dy, N, 0.f, dB, N);
      else
        cblas_sgemm(CblasRowMajor, CblasTrans, p_.trans_a ? CblasTrans : CblasNoTrans, N, K, M, alpha, dy, N, A,
                    p_.trans_a ? M : K, 0.f, dB, K);
    }
    if (a.diff_src.size() > 2 && a.diff_src[2]) {
      float* dC = a.diff_src[2]->f32();
      const int64_t cm = c_shape_.size() == 2 ? c_shape_[0] : 1, cn = c_shape_.empty() ? 1 : c_shape_.back();
      std::fill(dC, dC + a.diff_src[2]->numel(), 0.f);
      for (int64_t i = 0; i < M; ++i) {
        float* row = dC + (cm == 1 ? 0 : i) * cn;
        if (cn == 1) row[0] += p_.beta * ordered_sum(dy + i * N, N);
        else ArrayMap(row, N) += p_.beta * ConstArrayMap(dy + i * N, N);
      }
    }
    return Status::ok();
  }

 private:
  GemmParams p_;
  Shape c_shape_;
  Activation act_;
};

void cblas_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                int64_t ldb, float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, 1.f, a, lda, b,
              ldb, beta, c, ldc);
}

class MatMulKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    auto p = matmul_params(ctx.inputs[0].shape, ctx.inputs[1].shape);
    if (!p.ok()) return p.status().with_context(ctx.node->label());
    p_ = p.value();
    // B shared by every batch entry and A contiguous: one GEMM with M = batch * m.
    fold_batch_ = shape_numel(p_.b_batch) == 1 && p_.a_batch == p_.batch;
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const float* a = src[0]->f32();
    const float* b = src[1]->f32();
    float* y = dst[0]->f32();
    const int64_t nb = shape_numel(p_.batch);
    if (fold_batch_) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nb * p_.m, p_.n, p_.k, 1.f, a, p_.k, b, p_.n, 0.f, y,
                  p_.n);
      return Status::ok();
    }
    for_each_matmul_batch(p_, [&](int64_t bi, int64_t oa, int64_t ob) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, p_.m, p_.n, p_.k, 1.f, a + oa * p_.m * p_.k, p_.k,
                  b + ob * p_.k * p_.n, p_.n, 0.f, y + bi * p_.m * p_.n, p_.n);
    });
    return Status::ok();
  }

  bool has_backward() const override { return true; }
  bool backward_reads_output(size_t) const override { return false; }
  Status backward(const BackwardArgs& a) override {
    matmul_backward(p_, a.src[0]->f32(), a.src[1]->f32(), a.diff_dst[0]->f32(),
                    a.diff_src[0] ? a.diff_src[0]->f32() : nullptr, a.diff_src[1] ? a.diff_src[1]->f32() : nullptr,
                    cblas_gemm);
    return Status::ok();
  }

 private:
  MatMulParams p_;
  bool fold_batch_ = false;
};

/// Broadcast binary op: the output is walked row by row over its last (collapsed) axis,
/// where each operand is either contiguous or a broadcast scalar, and Eigen does the row.
class BinaryKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    if (ctx.outputs[0].dtype != DType::kF32)
      return Status::unsupported(ctx.node->label() + ": im2col computes float32 only");
    const std::string& op = ctx.node->op_type;
    op_ = op == "Add" ? 0 : op == "Sub" ? 1 : op == "Mul" ? 2 : 3;
    a_shape_ = ctx.inputs[0].shape;
    b_shape_ = ctx.inputs[1].shape;
    out_ = ctx.outputs[0].shape;
    if (out_.empty()) out_ = {1};
    sa_ = broadcast_strides(ctx.inputs[0].shape, out_);
    sb_ = broadcast_strides(ctx.inputs[1].shape, out_);
    // Collapse trailing axes whose operand strides stay contiguous (or stay broadcast).
    row_ = out_.back();
    int64_t axis = static_cast<int64_t>(out_.size()) - 1;
    const bool a_contig = sa_[axis] == 1, b_contig = sb_[axis] == 1;
    while (axis > 0) {
      const int64_t prev = axis - 1;
      const bool ok_a = a_contig ? sa_[prev] == row_ : sa_[prev] == 0;
      const bool ok_b = b_contig ? sb_[prev] == row_ : sb_[prev] == 0;
      if (!ok_a || !ok_b) break;
      row_ *= out_[prev];
      axis = prev;
    }
    outer_axes_ = axis;
    a_row_ = a_contig;
    b_row_ = b_contig;
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const float* a = src[0]->f32();
    const float* b = src[1]->f32();
    float* y = dst[0]->f32();
    const int64_t rows = shape_numel(out_) / row_;
#pragma omp parallel for schedule(static) if (rows > 1 && rows * row_ > 32768)
    for (int64_t r = 0; r < rows; ++r) {
      int64_t oa = 0, ob = 0, rem = r;
      for (int64_t d = outer_axes_ - 1; d >= 0; --d) {
        const int64_t i = rem % out_[d];
        rem /= out_[d];
        oa += i * sa_[d];
        ob += i * sb_[d];
      }
      ArrayMap yr(y + r * row_, row_);
      if (a_row_ && b_row_) apply(yr, ConstArrayMap(a + oa, row_), ConstArrayMap(b + ob, row_));
      else if (a_row_) apply(yr, ConstArrayMap(a + oa, row_), b[ob]);
      else if (b_row_) apply(yr, a[oa], ConstArrayMap(b + ob, row_));
      else yr.setConstant(scalar(a[oa], b[ob]));
    }
    return Status::ok();
  }

  bool has_backward() const override { return true; }
  bool backward_reads_input(size_t) const override { return binary_backward_reads_inputs(static_cast<BinaryOp>(op_)); }
  bool backward_reads_output(size_t) const override { return false; }
  Status backward(const BackwardArgs& a) override {
    binary_backward(static_cast<BinaryOp>(op_), a_shape_, b_shape_, out_, a.src[0]->f32(), a.src[1]->f32(),
                    a.diff_dst[0]->f32(), a.diff_src[0] ? a.diff_src[0]->f32() : nullptr,
                    a.diff_src[1] ? a.diff_src[1]->f32() : nullptr);
    return Status::ok();
  }

 private:
  float scalar(float a, float b) const { return op_ == 0 ? a + b : op_ == 1 ? a - b : op_ == 2 ? a * b : a / b; }
  template <class A, class B>
  void apply(ArrayMap& y, const A& a, const B& b) const {
    switch (op_) {
      case 0: y = a + b; break;
      case 1: y = a - b; break;
      case 2: y = a * b; break;
      default: y = a / b; break;
    }
  }
  int op_ = 0;
  Shape out_, a_shape_, b_shape_;
  std::vector<int64_t> sa_, sb_;
  int64_t row_ = 1, outer_axes_ = 0;
  bool a_row_ = true, b_row_ = true;
};

class UnaryKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    op_ = ctx.node->op_type;
    alpha_ = ctx.node->attr_float("alpha", 0.01f);
    clip_ = clip_attr_params(ctx);
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const int64_t n = src[0]->numel();
    float lo = clip_.lo, hi = clip_.hi;
    if (src.size() > 1 && src[1]) lo = src[1]->f32()[0];
    if (src.size() > 2 && src[2]) hi = src[2]->f32()[0];
    const int64_t block = 1 << 14;
#pragma omp parallel for schedule(static) if (n > 4 * block)
    for (int64_t b0 = 0; b0 < n; b0 += block) {
      const int64_t len = std::min(block, n - b0);
      ConstArrayMap x(src[0]->f32() + b0, len);
      ArrayMap y(dst[0]->f32() + b0, len);
      if (op_ == "Relu") y = x.max(0.f);
      else if (op_ == "LeakyRelu") y = (x >= 0.f).select(x, alpha_ * x);
      else if (op_ == "Sigmoid") y = 1.f / (1.f + (-x).exp());
      else if (op_ == "Tanh") y = x.tanh();
      else y = x.max(lo).min(hi);
    }
    return Status::ok();
  }

  bool has_backward() const override { return true; }
  bool backward_reads_input(size_t i) const override { return i > 0 || unary_backward_reads_input(op_); }
  bool backward_reads_output(size_t) const override { return unary_backward_reads_output(op_); }
  /// The same derivatives (and kink conventions) as naive, vectorised with Eigen, in
  /// blocks over the threads as forward.
  Status backward(const BackwardArgs& a) override {
    for (size_t i = 1; i < a.diff_src.size(); ++i)
      if (a.diff_src[i]) std::fill(a.diff_src[i]->f32(), a.diff_src[i]->f32() + a.diff_src[i]->numel(), 0.f);
    if (!a.diff_src[0]) return Status::ok();
    const int64_t n = a.src[0]->numel();
    float lo = clip_.lo, hi = clip_.hi;
    if (a.src.size() > 1 && a.src[1]) lo = a.src[1]->f32()[0];
    if (a.src.size() > 2 && a.src[2]) hi = a.src[2]->f32()[0];
    const int64_t block = 1 << 14;
#pragma omp parallel for schedule(static) if (n > 4 * block)
    for (int64_t b0 = 0; b0 < n; b0 += block) {
      const int64_t len = std::min(block, n - b0);
      ConstArrayMap x(a.src[0]->f32() + b0, len), y(a.dst[0]->f32() + b0, len), dy(a.diff_dst[0]->f32() + b0, len);
      ArrayMap dx(a.diff_src[0]->f32() + b0, len);
      if (op_ == "Relu") dx = (y > 0.f).select(dy, 0.f);  // y > 0 exactly where x > 0
      else if (op_ == "LeakyRelu") dx = (x > 0.f).select(dy, alpha_ * dy);
      else if (op_ == "Sigmoid") dx = dy * y * (1.f - y);
      else if (op_ == "Tanh") dx = dy * (1.f - y.square());
      else dx = (x >= lo && x <= hi).select(dy, 0.f);
    }
    return Status::ok();
  }

 private:
  std::string op_;
  float alpha_ = 0.01f;
  ClipParams clip_{};
};

class SoftmaxKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_ASSIGN_OR_RETURN(p_, softmax_params(ctx));
    log_ = ctx.node->op_type == "LogSoftmax";
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const float* x = src[0]->f32();
    float* y = dst[0]->f32();
    using Strided = Eigen::Map<const Eigen::ArrayXf, 0, Eigen::InnerStride<>>;
    using StridedOut = Eigen::Map<Eigen::ArrayXf, 0, Eigen::InnerStride<>>;
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t o = 0; o < p_.outer; ++o)
      for (int64_t in = 0; in < p_.inner; ++in) {
        const int64_t base = o * p_.axis_dim * p_.inner + in;
        Strided v(x + base, p_.axis_dim, Eigen::InnerStride<>(p_.inner));
        StridedOut out(y + base, p_.axis_dim, Eigen::InnerStride<>(p_.inner));
        const float mx = v.maxCoeff();
        Eigen::ArrayXf e = (v - mx).exp();
        const float sum = e.sum();
        if (log_) out = v - mx - std::log(sum);
        else out = e / sum;
      }
    return Status::ok();
  }

  bool has_backward() const override { return true; }
  bool backward_reads_input(size_t) const override { return false; }
  /// Softmax: dx = y (dy - sum dy y); LogSoftmax: dx = dy - exp(y) sum dy.
  Status backward(const BackwardArgs& a) override {
    if (!a.diff_src[0]) return Status::ok();
    const float* y = a.dst[0]->f32();
    const float* dy = a.diff_dst[0]->f32();
    float* dx = a.diff_src[0]->f32();
    using Strided = Eigen::Map<const Eigen::ArrayXf, 0, Eigen::InnerStride<>>;
    using StridedOut = Eigen::Map<Eigen::ArrayXf, 0, Eigen::InnerStride<>>;
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t o = 0; o < p_.outer; ++o)
      for (int64_t in = 0; in < p_.inner; ++in) {
        const int64_t base = o * p_.axis_dim * p_.inner + in;
        const Eigen::InnerStride<> st(p_.inner);
        Strided yv(y + base, p_.axis_dim, st), g(dy + base, p_.axis_dim, st);
        StridedOut out(dx + base, p_.axis_dim, st);
        if (log_) out = g - yv.exp() * g.sum();
        else out = yv * (g - (g * yv).sum());
      }
    return Status::ok();
  }

 private:
  SoftmaxParams p_;
  bool log_ = false;
};

class BatchNormKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    training_ = ctx.training;
    momentum_ = ctx.node->attr_float("momentum", 0.9f);
    eps_ = ctx.node->attr_float("epsilon", 1e-5f);
    const Shape& x = ctx.inputs[0].shape;
    n_ = x[0];
    c_ = x[1];
    sp_ = shape_numel(x) / std::max<int64_t>(n_ * c_, 1);
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    ConstArrayMap scale(src[1]->f32(), c_), b(src[2]->f32(), c_), mean(src[3]->f32(), c_), var(src[4]->f32(), c_);
    Eigen::ArrayXf mul, add;
    if (training_) {
      batch_statistics(src[0]->f32(), const_cast<float*>(src[3]->f32()), const_cast<float*>(src[4]->f32()));
      mul = scale * invstd_.cast<float>();
      add = b - mean_.cast<float>() * mul;
    } else {
      mul = scale / (var + eps_).sqrt();
      add = b - mean * mul;
    }
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t n = 0; n < n_; ++n)
      for (int64_t c = 0; c < c_; ++c) {
        const int64_t o = (n * c_ + c) * sp_;
        ArrayMap(dst[0]->f32() + o, sp_) = ConstArrayMap(src[0]->f32() + o, sp_) * mul[c] + add[c];
      }
    return Status::ok();
  }

  bool has_backward() const override { return true; }
  /// Training: through the batch statistics, dx = invstd / M (M g - sum g - xhat sum(g xhat))
  /// with g = dy scale; inference: dx = dy scale / sqrt(var + eps). dscale = sum dy xhat,
  /// dB = sum dy. Running statistics get no gradient.
  Status backward(const BackwardArgs& a) override {
    const float *x = a.src[0]->f32(), *scale = a.src[1]->f32(), *dy = a.diff_dst[0]->f32();
    float* dx = a.diff_src[0] ? a.diff_src[0]->f32() : nullptr;
    float* dscale = a.diff_src.size() > 1 && a.diff_src[1] ? a.diff_src[1]->f32() : nullptr;
    float* dshift = a.diff_src.size() > 2 && a.diff_src[2] ? a.diff_src[2]->f32() : nullptr;
    for (size_t i = 3; i < a.diff_src.size(); ++i)
      if (a.diff_src[i]) std::fill(a.diff_src[i]->f32(), a.diff_src[i]->f32() + a.diff_src[i]->numel(), 0.f);
    const float* rmean = a.src[3]->f32();
    const float* rvar = a.src[4]->f32();
    const double m = static_cast<double>(n_ * sp_);
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < c_; ++c) {
      const double mean = training_ ? mean_[c] : rmean[c];
      const double inv = training_ ? invstd_[c] : 1.0 / std::sqrt(static_cast<double>(rvar[c]) + eps_);
      double sum_dy = 0, sum_dy_xhat = 0;
      for (int64_t n = 0; n < n_; ++n) {
        const int64_t o = (n * c_ + c) * sp_;
        for (int64_t i = 0; i < sp_; ++i) {
          sum_dy += dy[o + i];
          sum_dy_xhat += dy[o + i] * ((x[o + i] - mean) * inv);
        }
      }
      if (dscale) dscale[c] = static_cast<float>(sum_dy_xhat);
      if (dshift) dshift[c] = static_cast<float>(sum_dy);
      if (!dx) continue;
      const double k = scale[c] * inv;
      for (int64_t n = 0; n < n_; ++n) {
        const int64_t o = (n * c_ + c) * sp_;
        for (int64_t i = 0; i < sp_; ++i) {
          if (!training_) {
            dx[o + i] = static_cast<float>(dy[o + i] * k);
            continue;
          }
          const double xhat = (x[o + i] - mean) * inv;
          dx[o + i] = static_cast<float>(k / m * (m * dy[o + i] - sum_dy - xhat * sum_dy_xhat));
        }
      }
    }
    return Status::ok();
  }

 private:
  void batch_statistics(const float* x, float* running_mean, float* running_var) {
    mean_.resize(c_);
    invstd_.resize(c_);
    batch_norm_statistics(x, n_, c_, sp_, eps_, momentum_, mean_.data(), invstd_.data(), running_mean, running_var);
  }

  bool training_ = false;
  float momentum_ = 0.9f, eps_ = 1e-5f;
  int64_t n_ = 0, c_ = 0, sp_ = 0;
  Eigen::ArrayXd mean_, invstd_;
};

class LrnKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_ASSIGN_OR_RETURN(p_, lrn_params(ctx));
    const Shape& x = ctx.inputs[0].shape;
    n_ = x[0];
    c_ = x[1];
    sp_ = shape_numel(x) / std::max<int64_t>(n_ * c_, 1);
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const int64_t lo = (p_.size - 1) / 2, hi = p_.size - 1 - lo;
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t n = 0; n < n_; ++n)
      for (int64_t c = 0; c < c_; ++c) {
        Eigen::ArrayXf sq = Eigen::ArrayXf::Zero(sp_);
        for (int64_t j = std::max<int64_t>(0, c - lo); j <= std::min(c_ - 1, c + hi); ++j)
          sq += ConstArrayMap(src[0]->f32() + (n * c_ + j) * sp_, sp_).square();
        const int64_t o = (n * c_ + c) * sp_;
        ArrayMap(dst[0]->f32() + o, sp_) =
            ConstArrayMap(src[0]->f32() + o, sp_) / (p_.bias + (p_.alpha / p_.size) * sq).pow(p_.beta);
      }
    return Status::ok();
  }

  bool has_backward() const override { return true; }
  /// y_c = x_c s_c^-beta with s_c = bias + alpha/size sum_{j in win(c)} x_j^2:
  /// dx_i = dy_i s_i^-beta - 2 alpha beta / size x_i sum_{c: i in win(c)} dy_c y_c / s_c.
  Status backward(const BackwardArgs& a) override {
    if (!a.diff_src[0]) return Status::ok();
    const float *x = a.src[0]->f32(), *y = a.dst[0]->f32(), *dy = a.diff_dst[0]->f32();
    float* dx = a.diff_src[0]->f32();
    const int64_t lo = (p_.size - 1) / 2, hi = p_.size - 1 - lo;
    const float k = p_.alpha / static_cast<float>(p_.size);
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < n_; ++n) {
      // s for every channel of this image, then t_c = dy_c y_c / s_c.
      Eigen::ArrayXXf s(sp_, c_), t(sp_, c_);
      for (int64_t c = 0; c < c_; ++c) {
        Eigen::ArrayXf sq = Eigen::ArrayXf::Zero(sp_);
        for (int64_t j = std::max<int64_t>(0, c - lo); j <= std::min(c_ - 1, c + hi); ++j)
          sq += ConstArrayMap(x + (n * c_ + j) * sp_, sp_).square();
        s.col(c) = p_.bias + k * sq;
        const int64_t o = (n * c_ + c) * sp_;
        t.col(c) = ConstArrayMap(dy + o, sp_) * ConstArrayMap(y + o, sp_) / s.col(c);
      }
      for (int64_t i = 0; i < c_; ++i) {
        // Channels c whose window holds i: c - lo <= i <= c + hi, i.e. c in [i - hi, i + lo].
        Eigen::ArrayXf acc = Eigen::ArrayXf::Zero(sp_);
        for (int64_t c = std::max<int64_t>(0, i - hi); c <= std::min(c_ - 1, i + lo); ++c) acc += t.col(c);
        const int64_t o = (n * c_ + i) * sp_;
        ArrayMap(dx + o, sp_) = ConstArrayMap(dy + o, sp_) * s.col(i).pow(-p_.beta) -
                                2.f * k * p_.beta * ConstArrayMap(x + o, sp_) * acc;
      }
    }
    return Status::ok();
  }

 private:
  LrnParams p_;
  int64_t n_ = 0, c_ = 0, sp_ = 0;
};

}  // namespace

/// OpenBLAS's build (its kernel family here is in blas_core_name()) and Eigen's version.
std::vector<std::pair<std::string, std::string>> im2col_details() {
  std::string blas = openblas_get_config();  // "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Haswell MAX_THREADS=64"
  if (blas.rfind("OpenBLAS ", 0) == 0) blas = blas.substr(9);
  return {{"OpenBLAS", blas}, {"Eigen", eigen_version()}};
}

Status register_im2col_kernels(KernelRegistry& registry) {
  BackendRegistration r(registry, {"im2col", "im2col/col2im + OpenBLAS sgemm for convolutions and Gemm, Eigen for the rest", im2col_details});
  r.kernel("Conv", make_factory<ConvKernel>());
  for (const char* op : {"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"})
    r.kernel(op, make_factory<PoolKernel>());
  r.kernel("Gemm", make_factory<GemmKernel>());
  r.kernel("MatMul", make_factory<MatMulKernel>());
  for (const char* op : {"Add", "Sub", "Mul", "Div"}) r.kernel(op, make_factory<BinaryKernel>());
  for (const char* op : {"Relu", "LeakyRelu", "Sigmoid", "Tanh", "Clip"}) r.kernel(op, make_factory<UnaryKernel>());
  r.kernel("Softmax", make_factory<SoftmaxKernel>());
  r.kernel("LogSoftmax", make_factory<SoftmaxKernel>());
  r.kernel("BatchNormalization", make_factory<BatchNormKernel>());
  r.kernel("LRN", make_factory<LrnKernel>());
  register_view_kernels(r);
  for (const char* op : {"Transpose", "Concat", "Pad"}) register_movement_kernel(r, op);
  return r.status();
}

std::string eigen_version() {
  return std::to_string(EIGEN_WORLD_VERSION) + "." + std::to_string(EIGEN_MAJOR_VERSION) + "." +
         std::to_string(EIGEN_MINOR_VERSION);
}

}  // namespace mosaic
