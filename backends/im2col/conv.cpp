// The im2col backend's convolution: im2col (a precomputed gather table, or shifted copies for
// stride-1 3x3) and OpenBLAS sgemm forward; col2im and sgemm backward.
#include <algorithm>
#include <cblas.h>
#include <cmath>
#include <cstdint>
#include <omp.h>

#include "backends/common/grad.hpp"
#include "ir/checked.hpp"
#include "backends/im2col/im2col_internal.hpp"

namespace mosaic::im2col_impl {
namespace {

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
    // Workspace sizes are products of a weight's and an output's sizes: checked, since each
    // factor alone passed check_shape but their product need not fit.
    int64_t cols = 0, tmp = 0;
    const bool sizes_fit = checked_mul(k_, chunk_ * band_ * w_.ow, &cols) && checked_mul(cols, workers, &cols) &&
                           checked_mul(p_.oc_per_group(), chunk_ * ohw_, &tmp) && checked_mul(tmp, workers, &tmp);
    if (!sizes_fit) return Status::unsupported(ctx.node->label() + ": im2col workspace size overflows");
    if (auto ws = checked_bytes(cols + tmp, sizeof(float), ctx.node->label() + ": im2col workspace"); !ws.ok())
      return Status::unsupported(ws.status().message());
    cols_per_worker_ = (!pointwise_ || chunk_ > 1) ? cols / workers : 0;
    tmp_per_worker_ = chunk_ > 1 ? tmp / workers : 0;
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

}  // namespace

void add_conv_kernels(BackendRegistration& r) {
  // Small maps as one dense matrix product where that applies (conv_dense.cpp), else im2col.
  r.kernel("Conv", [](const KernelContext& ctx) -> Expected<std::unique_ptr<Kernel>> {
    MOSAIC_ASSIGN_OR_RETURN(std::unique_ptr<Kernel> dense, small_map_conv(ctx));
    if (dense) return dense;
    return make_factory<ConvKernel>()(ctx);
  });
}

}  // namespace mosaic::im2col_impl
