#include "backends/naive/naive.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "backends/common/broadcast.hpp"
#include "backends/common/grad.hpp"
#include "backends/common/movement.hpp"
#include "backends/common/pooling.hpp"
#include "operators/params.hpp"

namespace mosaic {
namespace {

/// Zeroes a gradient output if it is requested.
float* grad_out(const BackwardArgs& a, size_t i) {
  if (i >= a.diff_src.size() || !a.diff_src[i]) return nullptr;
  float* p = a.diff_src[i]->f32();
  std::fill(p, p + a.diff_src[i]->numel(), 0.f);
  return p;
}

Status no_fused_backward(const Activation& act, const Node& node) {
  if (act.active())
    return Status::unsupported(node.label() + ": backward of a fused activation (training plans are not fused)");
  return Status::ok();
}

class ConvKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_ASSIGN_OR_RETURN(p_, conv_params(ctx));
    MOSAIC_ASSIGN_OR_RETURN(w_, lift_window3(p_.win, *ctx.node));
    act_ = fused_activation(*ctx.node);
    node_ = ctx.node;
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const float* x = src[0]->f32();
    const float* wt = src[1]->f32();
    const float* bias = p_.has_bias ? src[2]->f32() : nullptr;
    float* y = dst[0]->f32();
    const int64_t cg = p_.c_per_group(), ocg = p_.oc_per_group();
    const int64_t in_sp = w_.in[0] * w_.in[1] * w_.in[2], out_sp = w_.out[0] * w_.out[1] * w_.out[2];
    const int64_t ksz = w_.k[0] * w_.k[1] * w_.k[2];
    for (int64_t n = 0; n < p_.n; ++n)
      for (int64_t oc = 0; oc < p_.oc; ++oc) {
        const int64_t g = oc / ocg;
        for (int64_t od = 0; od < w_.out[0]; ++od)
          for (int64_t oh = 0; oh < w_.out[1]; ++oh)
            for (int64_t ow = 0; ow < w_.out[2]; ++ow) {
              double acc = bias ? bias[oc] : 0.0;  // the oracle sums in double
              for (int64_t ic = 0; ic < cg; ++ic) {
                const float* xc = x + (n * p_.c + g * cg + ic) * in_sp;
                const float* wc = wt + (oc * cg + ic) * ksz;
                for (int64_t kd = 0; kd < w_.k[0]; ++kd) {
                  int64_t id = od * w_.s[0] - w_.pb[0] + kd * w_.d[0];
                  if (id < 0 || id >= w_.in[0]) continue;
                  for (int64_t kh = 0; kh < w_.k[1]; ++kh) {
                    int64_t ih = oh * w_.s[1] - w_.pb[1] + kh * w_.d[1];
                    if (ih < 0 || ih >= w_.in[1]) continue;
                    for (int64_t kw = 0; kw < w_.k[2]; ++kw) {
                      int64_t iw = ow * w_.s[2] - w_.pb[2] + kw * w_.d[2];
                      if (iw < 0 || iw >= w_.in[2]) continue;
                      acc += static_cast<double>(xc[(id * w_.in[1] + ih) * w_.in[2] + iw]) * wc[(kd * w_.k[1] + kh) * w_.k[2] + kw];
                    }
                  }
                }
              }
              y[(n * p_.oc + oc) * out_sp + (od * w_.out[1] + oh) * w_.out[2] + ow] = act_.apply(static_cast<float>(acc));
            }
      }
    return Status::ok();
  }

  bool has_backward() const override { return true; }
  bool backward_reads_output(size_t) const override { return false; }
  Status backward(const BackwardArgs& a) override {
    MOSAIC_RETURN_IF_ERROR(no_fused_backward(act_, *node_));
    const float* x = a.src[0]->f32();
    const float* wt = a.src[1]->f32();
    const float* dy = a.diff_dst[0]->f32();
    float* dx_out = grad_out(a, 0);
    float* dw_out = grad_out(a, 1);
    float* db_out = grad_out(a, 2);
    // The oracle accumulates in double and rounds once.
    std::vector<double> dxd(dx_out ? a.diff_src[0]->numel() : 0), dwd(dw_out ? a.diff_src[1]->numel() : 0),
        dbd(db_out ? a.diff_src[2]->numel() : 0);
    double* dx = dx_out ? dxd.data() : nullptr;
    double* dw = dw_out ? dwd.data() : nullptr;
    double* db = db_out ? dbd.data() : nullptr;
    const int64_t cg = p_.c_per_group(), ocg = p_.oc_per_group();
    const int64_t in_sp = w_.in[0] * w_.in[1] * w_.in[2], out_sp = w_.out[0] * w_.out[1] * w_.out[2];
    const int64_t ksz = w_.k[0] * w_.k[1] * w_.k[2];
    for (int64_t n = 0; n < p_.n; ++n)
      for (int64_t oc = 0; oc < p_.oc; ++oc) {
        const int64_t g = oc / ocg;
        for (int64_t od = 0; od < w_.out[0]; ++od)
          for (int64_t oh = 0; oh < w_.out[1]; ++oh)
            for (int64_t ow = 0; ow < w_.out[2]; ++ow) {
              const double grad = dy[(n * p_.oc + oc) * out_sp + (od * w_.out[1] + oh) * w_.out[2] + ow];
              if (db) db[oc] += grad;
              for (int64_t ic = 0; ic < cg; ++ic) {
                const int64_t xbase = (n * p_.c + g * cg + ic) * in_sp, wbase = (oc * cg + ic) * ksz;
                for (int64_t kd = 0; kd < w_.k[0]; ++kd) {
                  int64_t id = od * w_.s[0] - w_.pb[0] + kd * w_.d[0];
                  if (id < 0 || id >= w_.in[0]) continue;
                  for (int64_t kh = 0; kh < w_.k[1]; ++kh) {
                    int64_t ih = oh * w_.s[1] - w_.pb[1] + kh * w_.d[1];
                    if (ih < 0 || ih >= w_.in[1]) continue;
                    for (int64_t kw = 0; kw < w_.k[2]; ++kw) {
                      int64_t iw = ow * w_.s[2] - w_.pb[2] + kw * w_.d[2];
                      if (iw < 0 || iw >= w_.in[2]) continue;
                      const int64_t xi = xbase + (id * w_.in[1] + ih) * w_.in[2] + iw;
                      const int64_t wi = wbase + (kd * w_.k[1] + kh) * w_.k[2] + kw;
                      if (dx) dx[xi] += wt[wi] * grad;
                      if (dw) dw[wi] += x[xi] * grad;
                    }
                  }
                }
              }
            }
      }
    for (size_t i = 0; i < dxd.size(); ++i) dx_out[i] = static_cast<float>(dxd[i]);
    for (size_t i = 0; i < dwd.size(); ++i) dw_out[i] = static_cast<float>(dwd[i]);
    for (size_t i = 0; i < dbd.size(); ++i) db_out[i] = static_cast<float>(dbd[i]);
    return Status::ok();
  }

 private:
  ConvParams p_;
  Window3 w_;
  Activation act_;
  const Node* node_ = nullptr;
};

class PoolKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_ASSIGN_OR_RETURN(p_, pool_params(ctx));
    MOSAIC_ASSIGN_OR_RETURN(w_, lift_window3(p_.win, *ctx.node));
    is_max_ = ctx.node->op_type.find("Max") != std::string::npos;
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
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
              sum += v;
              ++count;
            });
            const int64_t o = nc * out_sp + (od * w_.out[1] + oh) * w_.out[2] + ow;
            if (is_max_) {
              y[o] = best;
              if (indices) indices[o] = nc * in_sp + best_i;
            } else {
              y[o] = static_cast<float>(sum / static_cast<double>(p_.count_include_pad ? w_.padded_cells(od, oh, ow) : count));
            }
          }
    }
    return Status::ok();
  }

  bool has_backward() const override { return true; }
  bool backward_reads_output(size_t) const override { return false; }
  /// Max: the gradient goes to the window's first (near-)maximum; average:
  /// spread over the window with the forward divisor.
  Status backward(const BackwardArgs& a) override {
    const float* x = a.src[0]->f32();
    const float* dy = a.diff_dst[0]->f32();
    float* dx = grad_out(a, 0);
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
  bool is_max_ = true;
};

class GemmKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_ASSIGN_OR_RETURN(p_, gemm_params(ctx));
    if (p_.has_c) c_shape_ = ctx.inputs[2].shape;
    act_ = fused_activation(*ctx.node);
    node_ = ctx.node;
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const float* a = src[0]->f32();
    const float* b = src[1]->f32();
    const float* c = p_.has_c ? src[2]->f32() : nullptr;
    float* y = dst[0]->f32();
    // C broadcasts as [1|M, 1|N].
    const int64_t cm = c_shape_.size() == 2 ? c_shape_[0] : 1;
    const int64_t cn = c_shape_.empty() ? 1 : c_shape_.back();
    for (int64_t i = 0; i < p_.m; ++i)
      for (int64_t j = 0; j < p_.n; ++j) {
        double acc = 0;
        for (int64_t k = 0; k < p_.k; ++k) {
          const double av = p_.trans_a ? a[k * p_.m + i] : a[i * p_.k + k];
          const double bv = p_.trans_b ? b[j * p_.k + k] : b[k * p_.n + j];
          acc += av * bv;
        }
        const double cv = c ? c[(cm == 1 ? 0 : i) * cn + (cn == 1 ? 0 : j)] : 0.0;
        y[i * p_.n + j] = act_.apply(static_cast<float>(p_.alpha * acc + p_.beta * cv));
      }
    return Status::ok();
  }

  bool has_backward() const override { return true; }
  bool backward_reads_output(size_t) const override { return false; }
  Status backward(const BackwardArgs& a) override {
    MOSAIC_RETURN_IF_ERROR(no_fused_backward(act_, *node_));
    const float* A = a.src[0]->f32();
    const float* B = a.src[1]->f32();
    const float* dy = a.diff_dst[0]->f32();
    auto opA = [&](int64_t i, int64_t k) { return p_.trans_a ? A[k * p_.m + i] : A[i * p_.k + k]; };
    auto opB = [&](int64_t k, int64_t j) { return p_.trans_b ? B[j * p_.k + k] : B[k * p_.n + j]; };
    if (float* dA = grad_out(a, 0))
      for (int64_t i = 0; i < p_.m; ++i)
        for (int64_t k = 0; k < p_.k; ++k) {
          double acc = 0;
          for (int64_t j = 0; j < p_.n; ++j) acc += static_cast<double>(dy[i * p_.n + j]) * opB(k, j);
          (p_.trans_a ? dA[k * p_.m + i] : dA[i * p_.k + k]) = static_cast<float>(p_.alpha * acc);
        }
    if (float* dB = grad_out(a, 1))
      for (int64_t k = 0; k < p_.k; ++k)
        for (int64_t j = 0; j < p_.n; ++j) {
          double acc = 0;
          for (int64_t i = 0; i < p_.m; ++i) acc += static_cast<double>(opA(i, k)) * dy[i * p_.n + j];
          (p_.trans_b ? dB[j * p_.k + k] : dB[k * p_.n + j]) = static_cast<float>(p_.alpha * acc);
        }
    if (float* dC = grad_out(a, 2)) {
      const int64_t cm = c_shape_.size() == 2 ? c_shape_[0] : 1, cn = c_shape_.empty() ? 1 : c_shape_.back();
      std::vector<double> acc(static_cast<size_t>(a.diff_src[2]->numel()), 0.0);
      for (int64_t i = 0; i < p_.m; ++i)
        for (int64_t j = 0; j < p_.n; ++j) acc[(cm == 1 ? 0 : i) * cn + (cn == 1 ? 0 : j)] += p_.beta * dy[i * p_.n + j];
      for (size_t i = 0; i < acc.size(); ++i) dC[i] = static_cast<float>(acc[i]);
    }
    return Status::ok();
  }

 private:
  GemmParams p_;
  Shape c_shape_;
  Activation act_;
  const Node* node_ = nullptr;
};

class MatMulKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    auto p = matmul_params(ctx.inputs[0].shape, ctx.inputs[1].shape);
    if (!p.ok()) return p.status().with_context(ctx.node->label());
    p_ = p.value();
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const float* a = src[0]->f32();
    const float* b = src[1]->f32();
    float* y = dst[0]->f32();
    for_each_matmul_batch(p_, [&](int64_t bi, int64_t oa, int64_t ob) {
      const float* ab = a + oa * p_.m * p_.k;
      const float* bb = b + ob * p_.k * p_.n;
      float* yb = y + bi * p_.m * p_.n;
      for (int64_t i = 0; i < p_.m; ++i)
        for (int64_t j = 0; j < p_.n; ++j) {
          double acc = 0;
          for (int64_t k = 0; k < p_.k; ++k) acc += static_cast<double>(ab[i * p_.k + k]) * bb[k * p_.n + j];
          yb[i * p_.n + j] = static_cast<float>(acc);
        }
    });
    return Status::ok();
  }

  bool has_backward() const override { return true; }
  bool backward_reads_output(size_t) const override { return false; }
  Status backward(const BackwardArgs& a) override {
    const float* A = a.src[0]->f32();
    const float* B = a.src[1]->f32();
    const float* dy = a.diff_dst[0]->f32();
    float* dA = grad_out(a, 0);
    float* dB = grad_out(a, 1);
    for_each_matmul_batch(p_, [&](int64_t bi, int64_t oa, int64_t ob) {
      const float* g = dy + bi * p_.m * p_.n;
      for (int64_t i = 0; i < p_.m; ++i)
        for (int64_t j = 0; j < p_.n; ++j)
          for (int64_t k = 0; k < p_.k; ++k) {
            if (dA) dA[oa * p_.m * p_.k + i * p_.k + k] += g[i * p_.n + j] * B[ob * p_.k * p_.n + k * p_.n + j];
            if (dB) dB[ob * p_.k * p_.n + k * p_.n + j] += A[oa * p_.m * p_.k + i * p_.k + k] * g[i * p_.n + j];
          }
    });
    return Status::ok();
  }

 private:
  MatMulParams p_;
};

enum class BinOp { kAdd, kSub, kMul, kDiv };

template <class T>
T apply(BinOp op, T a, T b) {
  switch (op) {
    case BinOp::kAdd: return a + b;
    case BinOp::kSub: return a - b;
    case BinOp::kMul: return a * b;
    case BinOp::kDiv: return b == T(0) && std::is_integral_v<T> ? T(0) : a / b;
  }
  return a;
}

class BinaryKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    const std::string& op = ctx.node->op_type;
    op_ = op == "Add" ? BinOp::kAdd : op == "Sub" ? BinOp::kSub : op == "Mul" ? BinOp::kMul : BinOp::kDiv;
    out_ = ctx.outputs[0].shape;
    sa_ = broadcast_strides(ctx.inputs[0].shape, out_);
    sb_ = broadcast_strides(ctx.inputs[1].shape, out_);
    dtype_ = ctx.outputs[0].dtype;
    return Status::ok();
  }
  template <class T>
  void run(const T* a, const T* b, T* y) const {
    const int64_t n = shape_numel(out_);
    std::vector<int64_t> idx(out_.size(), 0);
    int64_t oa = 0, ob = 0;
    for (int64_t i = 0; i < n; ++i) {
      y[i] = apply(op_, a[oa], b[ob]);
      for (int64_t d = static_cast<int64_t>(out_.size()) - 1; d >= 0; --d) {
        oa += sa_[d];
        ob += sb_[d];
        if (++idx[d] < out_[d]) break;
        oa -= sa_[d] * out_[d];
        ob -= sb_[d] * out_[d];
        idx[d] = 0;
      }
    }
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    if (dtype_ == DType::kF32) run(src[0]->f32(), src[1]->f32(), dst[0]->f32());
    else run(src[0]->i64(), src[1]->i64(), dst[0]->i64());
    return Status::ok();
  }
  bool has_backward() const override { return dtype_ == DType::kF32; }
  bool backward_reads_input(size_t) const override { return op_ == BinOp::kMul || op_ == BinOp::kDiv; }
  bool backward_reads_output(size_t) const override { return false; }
  /// Each operand's gradient is summed over the axes it was broadcast along.
  Status backward(const BackwardArgs& g) override {
    const float* a = g.src[0]->f32();
    const float* b = g.src[1]->f32();
    const float* dy = g.diff_dst[0]->f32();
    float* da = grad_out(g, 0);
    float* db = grad_out(g, 1);
    const int64_t n = shape_numel(out_);
    std::vector<int64_t> idx(out_.size(), 0);
    int64_t oa = 0, ob = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float gy = dy[i];
      switch (op_) {
        case BinOp::kAdd:
          if (da) da[oa] += gy;
          if (db) db[ob] += gy;
          break;
        case BinOp::kSub:
          if (da) da[oa] += gy;
          if (db) db[ob] -= gy;
          break;
        case BinOp::kMul:
          if (da) da[oa] += gy * b[ob];
          if (db) db[ob] += gy * a[oa];
          break;
        case BinOp::kDiv:
          if (da) da[oa] += gy / b[ob];
          if (db) db[ob] -= gy * a[oa] / (b[ob] * b[ob]);
          break;
      }
      for (int64_t d = static_cast<int64_t>(out_.size()) - 1; d >= 0; --d) {
        oa += sa_[d];
        ob += sb_[d];
        if (++idx[d] < out_[d]) break;
        oa -= sa_[d] * out_[d];
        ob -= sb_[d] * out_[d];
        idx[d] = 0;
      }
    }
    return Status::ok();
  }

 private:
  BinOp op_ = BinOp::kAdd;
  Shape out_;
  std::vector<int64_t> sa_, sb_;
  DType dtype_ = DType::kF32;
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
    const float* x = src[0]->f32();
    float* y = dst[0]->f32();
    const int64_t n = src[0]->numel();
    if (op_ == "Relu") {
      for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0.f ? x[i] : 0.f;
    } else if (op_ == "LeakyRelu") {
      for (int64_t i = 0; i < n; ++i) y[i] = x[i] >= 0.f ? x[i] : alpha_ * x[i];
    } else if (op_ == "Sigmoid") {
      for (int64_t i = 0; i < n; ++i) y[i] = 1.f / (1.f + std::exp(-x[i]));
    } else if (op_ == "Tanh") {
      for (int64_t i = 0; i < n; ++i) y[i] = std::tanh(x[i]);
    } else {  // Clip; runtime bounds override the load-time ones
      float lo = clip_.lo, hi = clip_.hi;
      if (src.size() > 1 && src[1]) lo = src[1]->f32()[0];
      if (src.size() > 2 && src[2]) hi = src[2]->f32()[0];
      for (int64_t i = 0; i < n; ++i) y[i] = std::min(std::max(x[i], lo), hi);
    }
    return Status::ok();
  }

  bool has_backward() const override { return true; }
  bool backward_reads_input(size_t i) const override { return i > 0 || unary_backward_reads_input(op_); }
  bool backward_reads_output(size_t) const override { return unary_backward_reads_output(op_); }
  /// PyTorch's conventions at kinks: Relu and LeakyRelu use x > 0 (for Relu read as y > 0,
  /// the same set, so x need not be kept), Clip passes x in [lo, hi].
  Status backward(const BackwardArgs& a) override {
    const float* x = a.src[0]->f32();
    const float* y = a.dst[0]->f32();
    const float* dy = a.diff_dst[0]->f32();
    float* dx = grad_out(a, 0);
    grad_out(a, 1);
    grad_out(a, 2);
    if (!dx) return Status::ok();
    const int64_t n = a.src[0]->numel();
    float lo = clip_.lo, hi = clip_.hi;
    if (a.src.size() > 1 && a.src[1]) lo = a.src[1]->f32()[0];
    if (a.src.size() > 2 && a.src[2]) hi = a.src[2]->f32()[0];
    for (int64_t i = 0; i < n; ++i) {
      float d;
      if (op_ == "Relu") d = y[i] > 0.f ? 1.f : 0.f;
      else if (op_ == "LeakyRelu") d = x[i] > 0.f ? 1.f : alpha_;
      else if (op_ == "Sigmoid") d = y[i] * (1.f - y[i]);
      else if (op_ == "Tanh") d = 1.f - y[i] * y[i];
      else d = (x[i] >= lo && x[i] <= hi) ? 1.f : 0.f;
      dx[i] = dy[i] * d;
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
    for (int64_t o = 0; o < p_.outer; ++o)
      for (int64_t in = 0; in < p_.inner; ++in) {
        const int64_t base = o * p_.axis_dim * p_.inner + in;
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t a = 0; a < p_.axis_dim; ++a) mx = std::max(mx, x[base + a * p_.inner]);
        double sum = 0;
        for (int64_t a = 0; a < p_.axis_dim; ++a) sum += std::exp(static_cast<double>(x[base + a * p_.inner] - mx));
        for (int64_t a = 0; a < p_.axis_dim; ++a) {
          const float v = x[base + a * p_.inner] - mx;
          y[base + a * p_.inner] = log_ ? static_cast<float>(v - std::log(sum)) : static_cast<float>(std::exp(v) / sum);
        }
      }
    return Status::ok();
  }

  bool has_backward() const override { return true; }
  bool backward_reads_input(size_t) const override { return false; }
  /// Softmax: dx = y (dy - sum(dy y)); LogSoftmax: dx = dy - exp(y) sum(dy).
  Status backward(const BackwardArgs& a) override {
    const float* y = a.dst[0]->f32();
    const float* dy = a.diff_dst[0]->f32();
    float* dx = grad_out(a, 0);
    if (!dx) return Status::ok();
    for (int64_t o = 0; o < p_.outer; ++o)
      for (int64_t in = 0; in < p_.inner; ++in) {
        const int64_t base = o * p_.axis_dim * p_.inner + in;
        double sum = 0;
        for (int64_t k = 0; k < p_.axis_dim; ++k) {
          const int64_t i = base + k * p_.inner;
          sum += log_ ? dy[i] : static_cast<double>(dy[i]) * y[i];
        }
        for (int64_t k = 0; k < p_.axis_dim; ++k) {
          const int64_t i = base + k * p_.inner;
          dx[i] = log_ ? static_cast<float>(dy[i] - std::exp(y[i]) * sum) : static_cast<float>(y[i] * (dy[i] - sum));
        }
      }
    return Status::ok();
  }

 private:
  SoftmaxParams p_;
  bool log_ = false;
};

/// Inference: normalise with the given statistics. Training (as PyTorch's model.train()):
/// normalise with the batch's mean and biased variance, and update the running statistics
/// in place: running = momentum * running + (1 - momentum) * batch (ONNX's momentum, i.e.
/// 1 - PyTorch's), the running variance with the unbiased batch variance (PyTorch's rule).
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
    const float *x = src[0]->f32(), *scale = src[1]->f32(), *b = src[2]->f32(), *mean = src[3]->f32(),
                *var = src[4]->f32();
    float* y = dst[0]->f32();
    if (training_) return forward_training(x, scale, b, const_cast<float*>(mean), const_cast<float*>(var), y);
    for (int64_t n = 0; n < n_; ++n)
      for (int64_t c = 0; c < c_; ++c) {
        const float inv = 1.f / std::sqrt(var[c] + eps_);
        for (int64_t i = 0; i < sp_; ++i) {
          const int64_t o = (n * c_ + c) * sp_ + i;
          y[o] = scale[c] * (x[o] - mean[c]) * inv + b[c];
        }
      }
    return Status::ok();
  }

  Status forward_training(const float* x, const float* scale, const float* b, float* running_mean,
                          float* running_var, float* y) {
    batch_mean_.assign(static_cast<size_t>(c_), 0.0);
    batch_invstd_.assign(static_cast<size_t>(c_), 0.0);
    batch_norm_statistics(x, n_, c_, sp_, eps_, momentum_, batch_mean_.data(), batch_invstd_.data(), running_mean,
                          running_var);
    for (int64_t c = 0; c < c_; ++c) {
      const double mean = batch_mean_[c];
      for (int64_t n = 0; n < n_; ++n)
        for (int64_t i = 0; i < sp_; ++i) {
          const int64_t o = (n * c_ + c) * sp_ + i;
          y[o] = static_cast<float>(scale[c] * (x[o] - mean) * batch_invstd_[c] + b[c]);
        }
    }
    return Status::ok();
  }

  bool has_backward() const override { return true; }
  /// With the given (running) statistics: dx = dy scale / sqrt(var + eps),
  /// dscale = sum dy (x - mean) / sqrt(var + eps), dB = sum dy.
  Status backward(const BackwardArgs& a) override {
    if (training_) return backward_training(a);
    const float *x = a.src[0]->f32(), *scale = a.src[1]->f32(), *mean = a.src[3]->f32(), *var = a.src[4]->f32();
    const float* dy = a.diff_dst[0]->f32();
    float* dx = grad_out(a, 0);
    float* dscale = grad_out(a, 1);
    float* dshift = grad_out(a, 2);
    grad_out(a, 3);
    grad_out(a, 4);
    for (int64_t n = 0; n < n_; ++n)
      for (int64_t c = 0; c < c_; ++c) {
        const float inv = 1.f / std::sqrt(var[c] + eps_);
        for (int64_t i = 0; i < sp_; ++i) {
          const int64_t o = (n * c_ + c) * sp_ + i;
          if (dx) dx[o] = dy[o] * scale[c] * inv;
          if (dscale) dscale[c] += dy[o] * (x[o] - mean[c]) * inv;
          if (dshift) dshift[c] += dy[o];
        }
      }
    return Status::ok();
  }

  /// Through the batch statistics: with xhat = (x - mean) invstd over M = N x spatial,
  /// dx = invstd / M (M g - sum g - xhat sum(g xhat)) where g = dy scale;
  /// dscale = sum dy xhat, dB = sum dy.
  Status backward_training(const BackwardArgs& a) {
    const float *x = a.src[0]->f32(), *scale = a.src[1]->f32();
    const float* dy = a.diff_dst[0]->f32();
    float* dx = grad_out(a, 0);
    float* dscale = grad_out(a, 1);
    float* dshift = grad_out(a, 2);
    grad_out(a, 3);
    grad_out(a, 4);
    const double m = static_cast<double>(n_ * sp_);
    for (int64_t c = 0; c < c_; ++c) {
      double sum_dy = 0, sum_dy_xhat = 0;
      for (int64_t n = 0; n < n_; ++n)
        for (int64_t i = 0; i < sp_; ++i) {
          const int64_t o = (n * c_ + c) * sp_ + i;
          const double xhat = (x[o] - batch_mean_[c]) * batch_invstd_[c];
          sum_dy += dy[o];
          sum_dy_xhat += dy[o] * xhat;
        }
      if (dscale) dscale[c] = static_cast<float>(sum_dy_xhat);
      if (dshift) dshift[c] = static_cast<float>(sum_dy);
      if (!dx) continue;
      for (int64_t n = 0; n < n_; ++n)
        for (int64_t i = 0; i < sp_; ++i) {
          const int64_t o = (n * c_ + c) * sp_ + i;
          const double xhat = (x[o] - batch_mean_[c]) * batch_invstd_[c];
          dx[o] = static_cast<float>(scale[c] * batch_invstd_[c] / m * (m * dy[o] - sum_dy - xhat * sum_dy_xhat));
        }
    }
    return Status::ok();
  }

 private:
  bool training_ = false;
  float momentum_ = 0.9f, eps_ = 1e-5f;
  int64_t n_ = 0, c_ = 0, sp_ = 0;
  std::vector<double> batch_mean_, batch_invstd_;
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
    const float* x = src[0]->f32();
    float* y = dst[0]->f32();
    const int64_t lo = (p_.size - 1) / 2, hi = p_.size - 1 - lo;  // [c - floor, c + ceil]
    for (int64_t n = 0; n < n_; ++n)
      for (int64_t c = 0; c < c_; ++c)
        for (int64_t i = 0; i < sp_; ++i) {
          double sq = 0;
          for (int64_t j = std::max<int64_t>(0, c - lo); j <= std::min(c_ - 1, c + hi); ++j) {
            const float v = x[(n * c_ + j) * sp_ + i];
            sq += static_cast<double>(v) * v;
          }
          const int64_t o = (n * c_ + c) * sp_ + i;
          y[o] = static_cast<float>(x[o] / std::pow(p_.bias + p_.alpha / p_.size * sq, p_.beta));
        }
    return Status::ok();
  }

  bool has_backward() const override { return true; }
  /// y_c = x_c s_c^-b with s_c = bias + a/size sum_{j in W(c)} x_j^2, so
  /// dx_j = dy_j s_j^-b - (2 a b / size) x_j sum_{c: j in W(c)} dy_c x_c s_c^(-b-1).
  Status backward(const BackwardArgs& a) override {
    const float* x = a.src[0]->f32();
    const float* dy = a.diff_dst[0]->f32();
    float* dx = grad_out(a, 0);
    if (!dx) return Status::ok();
    const int64_t lo = (p_.size - 1) / 2, hi = p_.size - 1 - lo;
    std::vector<double> s(static_cast<size_t>(c_));
    for (int64_t n = 0; n < n_; ++n)
      for (int64_t i = 0; i < sp_; ++i) {
        auto at = [&](int64_t c) { return (n * c_ + c) * sp_ + i; };
        for (int64_t c = 0; c < c_; ++c) {
          double sq = 0;
          for (int64_t j = std::max<int64_t>(0, c - lo); j <= std::min(c_ - 1, c + hi); ++j)
            sq += static_cast<double>(x[at(j)]) * x[at(j)];
          s[c] = p_.bias + p_.alpha / p_.size * sq;
        }
        for (int64_t j = 0; j < c_; ++j) {
          double acc = 0;
          // Channels c whose window [c - lo, c + hi] contains j.
          for (int64_t c = std::max<int64_t>(0, j - hi); c <= std::min(c_ - 1, j + lo); ++c)
            acc += dy[at(c)] * x[at(c)] * std::pow(s[c], -p_.beta - 1);
          dx[at(j)] = static_cast<float>(dy[at(j)] * std::pow(s[j], -p_.beta) -
                                         2.0 * p_.alpha * p_.beta / p_.size * x[at(j)] * acc);
        }
      }
    return Status::ok();
  }

 private:
  LrnParams p_;
  int64_t n_ = 0, c_ = 0, sp_ = 0;
};

}  // namespace

Status register_naive_kernels(KernelRegistry& registry) {
  BackendRegistration r(registry, {"naive", "plain loops in float: the reference oracle every backend is checked against", nullptr});
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
  for (const char* op : {"Transpose", "Concat", "Slice", "Pad", "Gather", "Cast", "Shape", "Constant", "ConstantOfShape"})
    register_movement_kernel(r, op);
  return r.status();
}

}  // namespace mosaic
