#include "backends/common/ms_quantize.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/common/broadcast.hpp"
#include "ir/elements.hpp"
#include "operators/ms_quantize.hpp"
#include "operators/params.hpp"
#include "operators/quantize.hpp"

namespace mosaic {
namespace {

/// A per-tensor scale and zero point (0 where the zero point is omitted).
struct QParam {
  float scale = 1.f;
  int64_t zero_point = 0;
};

QParam qparam(const std::vector<const Tensor*>& src, size_t scale, size_t zero_point) {
  QParam q;
  q.scale = static_cast<float>(load_f64(src[scale]->dtype(), src[scale]->data(), 0));
  if (zero_point < src.size() && src[zero_point])
    q.zero_point = load_i64(src[zero_point]->dtype(), src[zero_point]->data(), 0);
  return q;
}

/// A binary op's quantisation (QLinearAdd, QLinearMul: A at inputs 1-2, B at 4-5, C at 6-7),
/// each scale checked.
Status binary_qparams(const Node& node, const std::vector<const Tensor*>& src, QParam& qa, QParam& qb, QParam& qc) {
  qa = qparam(src, 1, 2);
  qb = qparam(src, 4, 5);
  qc = qparam(src, 6, 7);
  MOSAIC_RETURN_IF_ERROR(check_quant_scale(node, qa.scale, "A_scale"));
  MOSAIC_RETURN_IF_ERROR(check_quant_scale(node, qb.scale, "B_scale"));
  return check_quant_scale(node, qc.scale, "C_scale");
}

/// What the unary ops share (QLinearSigmoid, QLinearLeakyRelu, QLinearSoftmax, the pools):
/// the node, X's element type, and X's (scale 1, zero point 2) and Y's (3, 4) quantisation,
/// read and checked each run.
class UnaryQuantKernel : public Kernel {
 protected:
  void bind(const KernelContext& ctx) {
    node_ = ctx.node;
    type_ = ctx.inputs[0].dtype;
  }
  Status params(const std::vector<const Tensor*>& src, QParam* x, QParam* y) const {
    *x = qparam(src, 1, 2);
    *y = qparam(src, 3, 4);
    MOSAIC_RETURN_IF_ERROR(check_quant_scale(*node_, x->scale, "X_scale"));
    return check_quant_scale(*node_, y->scale, "Y_scale");
  }
  const Node* node_ = nullptr;
  DType type_ = DType::kU8;
};

/// The output element type's range.
struct Range8 {
  int64_t lo = 0, hi = 255;
  explicit Range8(DType t) { quant_int_range(t, &lo, &hi); }
  int64_t quantise(float v, int64_t zero_point) const { return quantise_result(v, zero_point, lo, hi); }
};

/// QLinearAdd and QLinearMul, broadcast: A and B's differences from their zero points scaled
/// in float32 (Add: each by its scale over C's; Mul: their product by A's times B's over C's).
class BinaryKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    node_ = ctx.node;
    mul_ = ctx.node->op_type == "QLinearMul";
    relu_ = ctx.node->attr_string("mosaic.activation", "") == "Relu";
    a_ = ctx.inputs[0].shape;
    b_ = ctx.inputs[3].shape;
    out_ = ctx.outputs[0].shape;
    type_ = ctx.outputs[0].dtype;
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    QParam qa, qb, qc;
    MOSAIC_RETURN_IF_ERROR(binary_qparams(*node_, src, qa, qb, qc));
    const float ra = qa.scale / qc.scale, rb = qb.scale / qc.scale, rab = qa.scale * qb.scale / qc.scale;
    const void *a = src[0]->data(), *b = src[3]->data();
    void* y = dst[0]->data();
    const Range8 range(type_);
    each_broadcast<2>(out_, {a_, b_}, [&](int64_t i, const std::array<int64_t, 2>& off) {
      const int64_t da = load_i64(type_, a, off[0]) - qa.zero_point, db = load_i64(type_, b, off[1]) - qb.zero_point;
      const float v = mul_ ? rab * static_cast<float>(da * db) : qlinear_add_value(ra, da, rb, db);
      // A Relu fused before the quantisation (core/fuse_qdq_codes.cpp): Q(relu(v)) = max(Q(v), Q(0)).
      const int64_t q = range.quantise(v, qc.zero_point);
      store_i64(type_, y, i, relu_ ? std::max(q, std::clamp(qc.zero_point, range.lo, range.hi)) : q);
    });
    return Status::ok();
  }

 private:
  const Node* node_ = nullptr;
  bool mul_ = false, relu_ = false;
  Shape a_, b_, out_;
  DType type_ = DType::kU8;
};

/// QLinearAdd of same-shaped 8-bit A, B and C (a QDQ residual Add: core/fuse_qdq_codes.cpp) on
/// the optimised backends: the oracle's arithmetic (qlinear_add_value, rounded half to even, C's
/// zero point added, saturated; a fused Relu as max with it), a vector loop on every thread.
class FastAddKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    node_ = ctx.node;
    signed_ = ctx.outputs[0].dtype == DType::kI8;
    relu_ = ctx.node->attr_string("mosaic.activation", "") == "Relu";
    threads_ = omp_get_max_threads();
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    QParam qa, qb, qc;
    MOSAIC_RETURN_IF_ERROR(binary_qparams(*node_, src, qa, qb, qc));
    if (signed_) run<int8_t>(src, dst, qa, qb, qc);
    else run<uint8_t>(src, dst, qa, qb, qc);
    return Status::ok();
  }

 private:
  template <class T>
  void run(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst, QParam qa, QParam qb, QParam qc) const {
    const Range8 range(signed_ ? DType::kI8 : DType::kU8);
    const float ra = qa.scale / qc.scale, rb = qb.scale / qc.scale;
    // The zero points are codes of A's and B's 8-bit type (shape inference).
    const auto za = static_cast<int32_t>(qa.zero_point), zb = static_cast<int32_t>(qb.zero_point);
    const float zc = static_cast<float>(std::clamp(qc.zero_point, range.lo, range.hi));
    const float lo = relu_ ? zc : static_cast<float>(range.lo), hi = static_cast<float>(range.hi);
    const T* a = static_cast<const T*>(src[0]->data());
    const T* b = static_cast<const T*>(src[3]->data());
    T* y = static_cast<T*>(dst[0]->data());
    const int64_t n = dst[0]->numel();
#pragma omp parallel for simd schedule(static) num_threads(threads_) if (threads_ > 1 && n > 65536)
    for (int64_t i = 0; i < n; ++i) {
      // qlinear_add_value's value in float32's lanes (twice its double products'): this file
      // is compiled without contraction (CMakeLists.txt), so each product rounds before the sum
      // here too (QdqCodes.TheFastQLinearAddIsTheOraclesOnEveryPairOfCodes holds them equal on ties).
      const float v = ra * static_cast<float>(int32_t{a[i]} - za) + rb * static_cast<float>(int32_t{b[i]} - zb);
      // Not a number only from an infinite scale ratio, which check_quant_scale refuses.
      const float r = std::nearbyint(v) + zc;
      y[i] = static_cast<T>(r < lo ? lo : r > hi ? hi : r);
    }
  }

  const Node* node_ = nullptr;
  bool signed_ = false, relu_ = false;
  int threads_ = 1;
};

/// What FastAddKernel takes: QLinearAdd (not Mul) of one 8-bit type throughout, A, B and C of
/// one shape (no broadcast), every scale and zero point a scalar.
Status fast_add_supported(const KernelContext& ctx) {
  const Node& n = *ctx.node;
  if (n.op_type != "QLinearAdd") return Status::unsupported(n.label() + ": only QLinearAdd here");
  const DType t = ctx.outputs[0].dtype;
  if ((t != DType::kU8 && t != DType::kI8) || ctx.inputs[0].dtype != t || ctx.inputs[3].dtype != t)
    return Status::unsupported(n.label() + ": A, B and C of one 8-bit type");
  if (ctx.inputs[0].shape != ctx.outputs[0].shape || ctx.inputs[3].shape != ctx.outputs[0].shape)
    return Status::unsupported(n.label() + ": a broadcast QLinearAdd (naive's)");
  for (size_t i : {1, 2, 4, 5, 6, 7})
    if (i < ctx.inputs.size() && ctx.has_input(i) && ctx.inputs[i].numel() != 1)
      return Status::unsupported(n.label() + ": a scale or zero point per axis");
  return Status::ok();
}

/// QLinearSigmoid and QLinearLeakyRelu: a table of the 256 results (qlinear_lookup_table).
class LookupKernel final : public UnaryQuantKernel {
 public:
  Status init(const KernelContext& ctx) {
    bind(ctx);
    sigmoid_ = ctx.node->op_type == "QLinearSigmoid";
    alpha_ = ctx.node->attr_float("alpha", 0.01f);
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    QParam qx, qy;
    MOSAIC_RETURN_IF_ERROR(params(src, &qx, &qy));
    const Range8 range(type_);
    int64_t table[256];
    qlinear_lookup_table(sigmoid_, alpha_, qx.scale, qx.zero_point, qy.scale, qy.zero_point, range.lo, range.hi, table);
    const int64_t n = src[0]->numel();
    for (int64_t i = 0; i < n; ++i)
      store_i64(type_, dst[0]->data(), i, table[load_i64(type_, src[0]->data(), i) - range.lo]);
    return Status::ok();
  }

 private:
  bool sigmoid_ = true;
  float alpha_ = 0.01f;
};

/// QLinearSoftmax: softmax of the dequantised values (exp in float, the sum in double) over
/// `axis` (opset 13 and later) or over every axis from `axis` on (the Softmax of opset < 13),
/// quantised.
class SoftmaxKernel final : public UnaryQuantKernel {
 public:
  Status init(const KernelContext& ctx) {
    bind(ctx);
    MOSAIC_ASSIGN_OR_RETURN(const SoftmaxRows r, qlinear_softmax_rows(ctx));
    outer_ = r.outer;
    len_ = r.len;
    inner_ = r.inner;
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    QParam qx, qy;
    MOSAIC_RETURN_IF_ERROR(params(src, &qx, &qy));
    const Range8 range(type_);
    const void* x = src[0]->data();
    void* y = dst[0]->data();
    std::vector<double> e(static_cast<size_t>(len_));
    for (int64_t o = 0; o < outer_; ++o)
      for (int64_t i = 0; i < inner_; ++i) {
        auto at = [&](int64_t k) { return (o * len_ + k) * inner_ + i; };
        int64_t top = range.lo;
        for (int64_t k = 0; k < len_; ++k) top = std::max(top, load_i64(type_, x, at(k)));
        double sum = 0;
        for (int64_t k = 0; k < len_; ++k) {
          // exp of (x - max) dequantised: the zero point cancels.
          const float d = static_cast<float>(load_i64(type_, x, at(k)) - top) * qx.scale;
          e[static_cast<size_t>(k)] = std::exp(static_cast<double>(d));
          sum += e[static_cast<size_t>(k)];
        }
        for (int64_t k = 0; k < len_; ++k)
          store_i64(type_, y, at(k),
                    range.quantise(static_cast<float>(e[static_cast<size_t>(k)] / sum) / qy.scale, qy.zero_point));
      }
    return Status::ok();
  }

 private:
  int64_t outer_ = 1, len_ = 1, inner_ = 1;
};

/// QLinearGlobalAveragePool (NCHW or NHWC) and QLinearAveragePool (NCHW): the window's mean
/// of the dequantised values, quantised. Global: the integer sum less the zero points, times
/// x_scale / (y_scale * count) in float32, as ONNX Runtime's kernel forms it; windows: the
/// float32 mean of the dequantised cells.
class PoolKernel final : public UnaryQuantKernel {
 public:
  Status init(const KernelContext& ctx) {
    bind(ctx);
    global_ = ctx.node->op_type == "QLinearGlobalAveragePool";
    const Shape& x = ctx.inputs[0].shape;
    if (global_) {
      channels_last_ = ctx.node->attr_int("channels_last", 0) != 0;
      n_ = x[0];
      c_ = channels_last_ ? x.back() : x[1];
      spatial_ = shape_numel(x) / std::max<int64_t>(1, n_ * c_);
      return Status::ok();
    }
    MOSAIC_ASSIGN_OR_RETURN(p_, qlinear_pool_params(ctx));
    MOSAIC_ASSIGN_OR_RETURN(w_, lift_window3(p_.win, *ctx.node));
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    QParam qx, qy;
    MOSAIC_RETURN_IF_ERROR(params(src, &qx, &qy));
    const Range8 range(type_);
    const void* x = src[0]->data();
    void* y = dst[0]->data();
    if (global_) {
      const float scale = qx.scale / (qy.scale * static_cast<float>(spatial_));
      for (int64_t n = 0; n < n_; ++n)
        for (int64_t c = 0; c < c_; ++c) {
          int64_t sum = 0;
          for (int64_t s = 0; s < spatial_; ++s)
            sum += load_i64(type_, x, channels_last_ ? (n * spatial_ + s) * c_ + c : (n * c_ + c) * spatial_ + s);
          sum -= spatial_ * qx.zero_point;
          store_i64(type_, y, n * c_ + c, range.quantise(static_cast<float>(sum) * scale, qy.zero_point));
        }
      return Status::ok();
    }
    const int64_t in_sp = w_.in_size(), out_sp = w_.out_size();
    for (int64_t nc = 0; nc < p_.n * p_.c; ++nc)
      for (int64_t o0 = 0; o0 < w_.out[0]; ++o0)
        for (int64_t o1 = 0; o1 < w_.out[1]; ++o1)
          for (int64_t o2 = 0; o2 < w_.out[2]; ++o2) {
            float sum = 0.f;
            int64_t count = 0;
            w_.each_cell(o0, o1, o2, [&](int64_t off) {
              sum += scaled_difference(load_i64(type_, x, nc * in_sp + off) - qx.zero_point, qx.scale);
              ++count;
            });
            const int64_t cells = p_.count_include_pad ? w_.padded_cells(o0, o1, o2) : count;
            const float mean = cells > 0 ? sum / static_cast<float>(cells) : 0.f;
            store_i64(type_, y, nc * out_sp + (o0 * w_.out[1] + o1) * w_.out[2] + o2,
                      range.quantise(mean / qy.scale, qy.zero_point));
          }
    return Status::ok();
  }

 private:
  bool global_ = true, channels_last_ = false;
  int64_t n_ = 0, c_ = 0, spatial_ = 1;
  PoolParams p_;
  Window3 w_;
};

/// QLinearConcat: each operand requantised to Y's scale and zero point (copied where they are
/// its own), then concatenated along axis.
class ConcatKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    node_ = ctx.node;
    type_ = ctx.outputs[0].dtype;
    const Shape& out = ctx.outputs[0].shape;
    const int64_t rank = static_cast<int64_t>(out.size());
    MOSAIC_ASSIGN_OR_RETURN(int64_t axis, normalize_axis(ctx.node->attr_int("axis", 0), rank, *ctx.node));
    for (int64_t d = 0; d < axis; ++d) outer_ *= out[static_cast<size_t>(d)];
    for (int64_t d = axis + 1; d < rank; ++d) inner_ *= out[static_cast<size_t>(d)];
    out_axis_ = out[static_cast<size_t>(axis)];
    for (size_t k = 0; k < qlinear_concat_tensors(ctx); ++k)
      axis_.push_back(ctx.inputs[2 + 3 * k].shape[static_cast<size_t>(axis)]);
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const QParam qy = qparam(src, 0, 1);
    MOSAIC_RETURN_IF_ERROR(check_quant_scale(*node_, qy.scale, "Y_scale"));
    const Range8 range(type_);
    void* y = dst[0]->data();
    int64_t start = 0;
    for (size_t k = 0; k < axis_.size(); ++k) {
      const size_t i = 2 + 3 * k;
      const QParam qx = qparam(src, i + 1, i + 2);
      MOSAIC_RETURN_IF_ERROR(check_quant_scale(*node_, qx.scale, "an operand's scale"));
      const bool same = qx.scale == qy.scale && qx.zero_point == qy.zero_point;
      const int64_t run = axis_[k] * inner_;
      for (int64_t o = 0; o < outer_; ++o)
        for (int64_t e = 0; e < run; ++e) {
          const int64_t q = load_i64(type_, src[i]->data(), o * run + e);
          const int64_t v = same ? q
                                 : range.quantise(static_cast<float>(q - qx.zero_point) * qx.scale / qy.scale,
                                                  qy.zero_point);
          store_i64(type_, y, (o * out_axis_ + start) * inner_ + e, v);
        }
      start += axis_[k];
    }
    return Status::ok();
  }

 private:
  const Node* node_ = nullptr;
  DType type_ = DType::kU8;
  int64_t outer_ = 1, inner_ = 1, out_axis_ = 0;
  std::vector<int64_t> axis_;
};

/// QGemm: the exact integer product of (A - a_zp) and (B - b_zp) (B's per column), plus C,
/// wrapped to int32; then times alpha * a_scale * b_scale (float32 Y) or that over y_scale,
/// quantised.
class QGemmKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    node_ = ctx.node;
    ta_ = ctx.node->attr_int("transA", 0) != 0;
    tb_ = ctx.node->attr_int("transB", 0) != 0;
    alpha_ = ctx.node->attr_float("alpha", 1.f);
    const Shape &a = ctx.inputs[0].shape, &b = ctx.inputs[3].shape;
    m_ = ta_ ? a[1] : a[0];
    k_ = ta_ ? a[0] : a[1];
    n_ = tb_ ? b[0] : b[1];
    a_type_ = ctx.inputs[0].dtype;
    b_type_ = ctx.inputs[3].dtype;
    out_ = ctx.outputs[0].dtype;
    if (ctx.has_input(6)) c_ = ctx.inputs[6].shape;
    has_c_ = ctx.has_input(6);
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const QParam qa = qparam(src, 1, 2);
    MOSAIC_RETURN_IF_ERROR(check_quant_scale(*node_, qa.scale, "a_scale"));
    const Tensor* bs = src[4];
    const Tensor* bz = src.size() > 5 ? src[5] : nullptr;
    const bool quantised = out_ != DType::kF32;
    QParam qy;
    if (quantised) {
      qy = qparam(src, 7, 8);
      MOSAIC_RETURN_IF_ERROR(check_quant_scale(*node_, qy.scale, "y_scale"));
    }
    std::vector<float> mult(static_cast<size_t>(n_));
    std::vector<int64_t> bzp(static_cast<size_t>(n_), 0);
    for (int64_t j = 0; j < n_; ++j) {
      const float s = static_cast<float>(load_f64(bs->dtype(), bs->data(), bs->numel() == 1 ? 0 : j));
      MOSAIC_RETURN_IF_ERROR(check_quant_scale(*node_, s, "b_scale"));
      const float product = alpha_ * qa.scale * s;
      mult[static_cast<size_t>(j)] = quantised ? product / qy.scale : product;
      if (bz) bzp[static_cast<size_t>(j)] = load_i64(bz->dtype(), bz->data(), bz->numel() == 1 ? 0 : j);
    }
    const void *a = src[0]->data(), *b = src[3]->data();
    const Tensor* c = has_c_ ? src[6] : nullptr;
    const auto cs = has_c_ ? broadcast_strides(c_, Shape{m_, n_}) : std::vector<int64_t>{0, 0};
    const Range8 range(quantised ? out_ : DType::kU8);
    void* y = dst[0]->data();
    for (int64_t i = 0; i < m_; ++i)
      for (int64_t j = 0; j < n_; ++j) {
        int64_t acc = 0;  // exact: 255 * 255 * K stays far below 2^63
        for (int64_t k = 0; k < k_; ++k) {
          const int64_t av = load_i64(a_type_, a, ta_ ? k * m_ + i : i * k_ + k) - qa.zero_point;
          const int64_t bv = load_i64(b_type_, b, tb_ ? j * k_ + k : k * n_ + j) - bzp[static_cast<size_t>(j)];
          acc += av * bv;
        }
        if (c) acc += load_i64(DType::kI32, c->data(), i * cs[0] + j * cs[1]);
        const int64_t acc32 = static_cast<int32_t>(static_cast<uint32_t>(acc));  // int32 accumulation
        const float v = static_cast<float>(acc32) * mult[static_cast<size_t>(j)];
        if (quantised) store_i64(out_, y, i * n_ + j, range.quantise(v, qy.zero_point));
        else dst[0]->f32()[i * n_ + j] = v;
      }
    return Status::ok();
  }

 private:
  const Node* node_ = nullptr;
  bool ta_ = false, tb_ = false, has_c_ = false;
  float alpha_ = 1.f;
  int64_t m_ = 0, k_ = 0, n_ = 0;
  Shape c_;
  DType a_type_ = DType::kU8, b_type_ = DType::kI8, out_ = DType::kF32;
};

/// MatMulIntegerToFloat: the exact integer product of (A - a_zp) and (B - b_zp) (B's per
/// column) wrapped to int32, converted to float32, times the float32 product a_scale *
/// b_scale[n], + bias[n]: the float32 values of the MatMulInteger -> Cast -> Mul(a_scale *
/// b_scale) -> Add chain it fuses, each rounding in the same place.
class IntegerToFloatKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    auto p = matmul_params(ctx.inputs[0].shape, ctx.inputs[1].shape);
    if (!p.ok()) return Status::invalid(ctx.node->label() + ": " + p.status().message());
    p_ = *p;
    a_type_ = ctx.inputs[0].dtype;
    b_type_ = ctx.inputs[1].dtype;
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const int64_t M = p_.m, N = p_.n, K = p_.k;
    auto at = [&](size_t i) { return i < src.size() ? src[i] : nullptr; };
    const Tensor *as = src[2], *bs = src[3], *az = at(4), *bz = at(5), *bias = at(6);
    const float a_scale = as->f32()[0];
    const int64_t a_zp = az ? load_i64(az->dtype(), az->data(), 0) : 0;
    std::vector<float> mult(static_cast<size_t>(N));
    std::vector<int64_t> b_zp(static_cast<size_t>(N), 0);
    for (int64_t n = 0; n < N; ++n) {
      mult[static_cast<size_t>(n)] = a_scale * bs->f32()[bs->numel() == 1 ? 0 : n];
      if (bz) b_zp[static_cast<size_t>(n)] = load_i64(bz->dtype(), bz->data(), bz->numel() == 1 ? 0 : n);
    }
    const void *a = src[0]->data(), *b = src[1]->data();
    float* y = dst[0]->f32();
    for_each_matmul_batch(p_, [&](int64_t bi, int64_t ma, int64_t mb) {
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
          int64_t acc = 0;  // exact: 255 * 255 * K stays far below 2^63
          for (int64_t k = 0; k < K; ++k)
            acc += (load_i64(a_type_, a, (ma * M + m) * K + k) - a_zp) *
                   (load_i64(b_type_, b, (mb * K + k) * N + n) - b_zp[static_cast<size_t>(n)]);
          const auto acc32 = static_cast<int32_t>(static_cast<uint32_t>(acc));  // int32 accumulation
          y[(bi * M + m) * N + n] = static_cast<float>(acc32) * mult[static_cast<size_t>(n)];
        }
    });
    // The bias in a pass of its own: the product rounds before the sum, as in the chain (in
    // one expression, -march=native's contraction would make one fused multiply-add of them).
    if (bias)
      for (int64_t i = 0, rows = dst[0]->numel() / std::max<int64_t>(N, 1); i < rows; ++i)
        for (int64_t n = 0; n < N; ++n) y[i * N + n] += bias->f32()[n];
    return Status::ok();
  }

 private:
  MatMulParams p_;
  DType a_type_ = DType::kU8, b_type_ = DType::kI8;
};

/// MatMulNBits: B's blocks dequantised in float32, (q - zero point) * scale, the product
/// accumulated in double and rounded once to A's type, + bias.
class MatMulNBitsKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_ASSIGN_OR_RETURN(p_, matmul_nbits_params(ctx));
    type_ = ctx.inputs[0].dtype;
    rows_ = ctx.inputs[0].numel() / p_.k;
    zp_ = ctx.has_input(3) ? ctx.inputs[3].dtype : DType::kCount;
    bias_ = ctx.has_input(5);
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const int64_t K = p_.k, N = p_.n, bits = p_.bits, blob = p_.block_size * bits / 8;
    const uint8_t* b = static_cast<const uint8_t*>(src[1]->data());
    const void* scales = src[2]->data();
    const void* zp = zp_ != DType::kCount ? src[3]->data() : nullptr;
    const int64_t mask = (int64_t{1} << bits) - 1, per_byte = 8 / bits;
    // The packed k-th value of a row of bytes: low bits first.
    auto unpack = [&](const uint8_t* row, int64_t k) { return (row[k / per_byte] >> (k % per_byte * bits)) & mask; };
    std::vector<float> w(static_cast<size_t>(K));
    const void* a = src[0]->data();
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t blk = 0; blk < p_.blocks; ++blk) {
        const int64_t at = n * p_.blocks + blk;
        const float scale = static_cast<float>(load_f64(type_, scales, at));
        float zero = static_cast<float>(int64_t{1} << (bits - 1));  // the default: the middle of the range
        if (zp && zp_ == DType::kU8)
          zero = static_cast<float>(unpack(static_cast<const uint8_t*>(zp) + n * p_.zero_point_row_bytes(), blk));
        else if (zp)
          zero = static_cast<float>(load_f64(zp_, zp, at));
        const uint8_t* block = b + at * blob;
        for (int64_t j = 0; j < p_.block_size && blk * p_.block_size + j < K; ++j)
          w[static_cast<size_t>(blk * p_.block_size + j)] = (static_cast<float>(unpack(block, j)) - zero) * scale;
      }
      for (int64_t m = 0; m < rows_; ++m) {
        double sum = bias_ ? load_f64(type_, src[5]->data(), n) : 0.0;
        for (int64_t k = 0; k < K; ++k)
          sum += load_f64(type_, a, m * K + k) * static_cast<double>(w[static_cast<size_t>(k)]);
        store_f64(type_, dst[0]->data(), m * N + n, sum);
      }
    }
    return Status::ok();
  }

 private:
  MatMulNBitsParams p_;
  DType type_ = DType::kF32, zp_ = DType::kCount;
  int64_t rows_ = 0;
  bool bias_ = false;
};

}  // namespace

void add_fast_qlinear_add(BackendRegistration& r) {
  r.kernel(op_key(kMicrosoftDomain, "QLinearAdd"), make_factory<FastAddKernel>(),
           {LayoutUse::kNone, fast_add_supported, kAllDTypes});
}

void add_ms_quantize_kernels(BackendRegistration& r) {
  const KernelTraits any{LayoutUse::kNone, nullptr, kAllDTypes};
  auto key = [](const char* op) { return op_key(kMicrosoftDomain, op); };
  r.kernel(key("QLinearAdd"), make_factory<BinaryKernel>(), any);
  r.kernel(key("QLinearMul"), make_factory<BinaryKernel>(), any);
  r.kernel(key("QLinearSigmoid"), make_factory<LookupKernel>(), any);
  r.kernel(key("QLinearLeakyRelu"), make_factory<LookupKernel>(), any);
  r.kernel(key("QLinearSoftmax"), make_factory<SoftmaxKernel>(), any);
  r.kernel(key("QLinearGlobalAveragePool"), make_factory<PoolKernel>(), any);
  r.kernel(key("QLinearAveragePool"), make_factory<PoolKernel>(), any);
  r.kernel(key("QLinearConcat"), make_factory<ConcatKernel>(), any);
  r.kernel(key("QGemm"), make_factory<QGemmKernel>(), any);
  r.kernel(key("MatMulIntegerToFloat"), make_factory<IntegerToFloatKernel>(), any);
  r.kernel(key("MatMulNBits"), make_factory<MatMulNBitsKernel>(), any);
}

}  // namespace mosaic
