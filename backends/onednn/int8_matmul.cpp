// The oneDNN backend's integer matrix products on oneDNN's int8 matmul (VNNI or AMX where the
// CPU has them): ONNX's MatMulInteger (int32 out) and QLinearMatMul (requantised to uint8 or
// int8 by a_scale * b_scale[n] / y_scale, rounding half to even), and com.microsoft's MatMulIntegerToFloat
// (float32 out: the int32 product times a_scale * b_scale, + bias), which is what a dynamically
// quantised model's MatMulInteger -> Cast -> Mul [-> Add] becomes (core/fuse_dynamic.cpp), and
// QGemm (A or B transposed, the int32 C added to the accumulator, times alpha * a_scale *
// b_scale[n], requantised by y_scale or float32 without it), which is what a QDQ model's
// DequantizeLinear -> Gemm -> QuantizeLinear becomes (core/fuse_qdq.cpp).
//
// A (uint8 or int8, [..., K]) and its zero point arrive at run time, as a DynamicQuantizeLinear
// writes them; B is a constant int8 [K, N] matrix with zero point 0, reordered once into the
// primitive's layout when the kernel is built. The zero point of A is a runtime attribute of
// one primitive, the scales and the bias two binary post-ops after it (oneDNN 2.x adds its
// bias argument before its output scales, and runtime output scales cost its brgemm kernel). The int32 accumulation is exact: the query declines a
// K so long that 255 x 128 x K could wrap, and weights this CPU's int8 path would saturate.
#include <algorithm>
#include <limits>
#include <unordered_map>

#include "backends/common/quantize.hpp"
#include "backends/onednn/onednn_internal.hpp"
#include "operators/ms_quantize.hpp"

namespace mosaic::onednn_impl {
namespace {

bool present(const KernelContext& ctx, size_t i) { return i > 0 && ctx.has_input(i); }

/// The first value of a uint8 or int8 tensor (a zero point).
int32_t byte_value(const Tensor& t) {
  return t.dtype() == DType::kU8 ? static_cast<const uint8_t*>(t.data())[0] : static_cast<const int8_t*>(t.data())[0];
}

/// What IntegerMatMulKernel takes, asked before it is built (the planner's capability query
/// and core/fuse_dynamic.cpp's filter): A uint8/int8 at run time or not, one zero point for it;
/// B a constant int8 matrix with zero point 0 whose products this CPU sums exactly; for
/// MatMulIntegerToFloat, float32 scales (one for A, one or one per column for B) and bias;
/// for QGemm, a 2-D A and an int32 C of one value per column.
Status integer_matmul_supported(const KernelContext& ctx) {
  const Node& n = *ctx.node;
  const IntegerProductSlots s = integer_product_slots(n);
  const DType at = ctx.inputs[0].dtype, bt = ctx.inputs[s.b].dtype;
  if ((at != DType::kU8 && at != DType::kI8) || bt != DType::kI8)
    return Status::unsupported(n.label() + ": oneDNN's int8 matmul takes uint8/int8 A and int8 B");
  const Tensor* b = ctx.constant(s.b);
  if (!b || ctx.inputs[s.b].shape.size() != 2)
    return Status::unsupported(n.label() + ": B must be a constant matrix (oneDNN reorders int8 weights when built)");
  const Shape& as = ctx.inputs[0].shape;
  const int64_t k = ctx.inputs[s.b].shape[s.tb ? 1 : 0], n_cols = ctx.inputs[s.b].shape[s.tb ? 0 : 1];
  if (as.empty() || (s.gemm && as.size() != 2) || as[s.ta ? 0 : as.size() - 1] != k || k < 1)
    return Status::unsupported(n.label() + ": A " + shape_str(as) + " against B " + shape_str(ctx.inputs[s.b].shape));
  if (present(ctx, s.c) && (ctx.inputs[s.c].dtype != DType::kI32 || ctx.inputs[s.c].numel() != n_cols ||
                            ctx.inputs[s.c].shape.back() != n_cols))
    return Status::unsupported(n.label() + ": C " + shape_str(ctx.inputs[s.c].shape) +
                               ": oneDNN adds an int32 C of one value per column only");
  // |A - zp| <= 255 and |B| <= 128: the int32 sum cannot wrap while 255 * 128 * K fits.
  if (k > std::numeric_limits<int32_t>::max() / (255 * 128))
    return Status::unsupported(n.label() + ": K = " + std::to_string(k) + " could wrap the int32 accumulator");
  if (present(ctx, s.a_zp) && ctx.inputs[s.a_zp].numel() != 1)
    return Status::unsupported(n.label() + ": a zero point per row of A");
  if (present(ctx, s.b_zp)) {
    const Tensor* z = ctx.constant(s.b_zp);
    if (!z) return Status::unsupported(n.label() + ": B's zero point is computed at run time");
    for (int64_t i = 0; i < z->numel(); ++i)
      if (z->get(i) != 0) return Status::unsupported(n.label() + ": oneDNN takes weights with zero point 0 only");
  }
  int64_t wmin = 0, wmax = 0;
  const auto* w = static_cast<const int8_t*>(b->data());
  for (int64_t i = 0; i < b->numel(); ++i) {
    wmin = std::min<int64_t>(wmin, w[i]);
    wmax = std::max<int64_t>(wmax, w[i]);
  }
  if (!int8_products_exact(wmin, wmax))
    return Status::unsupported(n.label() + ": weights in [" + std::to_string(wmin) + ", " + std::to_string(wmax) +
                               "] need 8 bits, and this CPU's oneDNN int8 path (" + onednn_effective_isa() +
                               ", no VNNI) sums u8 x s8 pairs in int16, which saturates");
  if (s.to_float && ctx.outputs[0].dtype != DType::kF32)
    return Status::unsupported(n.label() + ": a float32 output only");
  if (s.requantise) {
    // QLinearMatMul: per-tensor scales of A and Y (a scale per row of A is ONNX's too).
    for (size_t i : {s.a_scale, s.y_scale, s.y_zp})
      if (present(ctx, i) && ctx.inputs[i].numel() != 1) return Status::unsupported(n.label() + ": a scale or zero point per row");
    if (ctx.inputs[s.a_scale].dtype != DType::kF32 || ctx.inputs[s.b_scale].dtype != DType::kF32 ||
        ctx.inputs[s.y_scale].dtype != DType::kF32)
      return Status::unsupported(n.label() + ": float32 scales only");
  }
  return Status::ok();
}

/// The four integer products on one oneDNN int8 matmul: A as [rows, K] (its leading axes as
/// rows; QGemm's A [K, rows] with transA), B [K, N] (QGemm's [N, K] with transB) reordered
/// once, the output [rows, N] plain.
class IntegerMatMulKernel final : public Kernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_RETURN_IF_ERROR(integer_matmul_supported(ctx));
    s_ = integer_product_slots(*ctx.node);
    node_ = ctx.node;
    const Shape& bs = ctx.inputs[s_.b].shape;
    k_ = bs[s_.tb ? 1 : 0];
    n_ = bs[s_.tb ? 0 : 1];
    rows_ = ctx.inputs[0].numel() / k_;
    has_a_zp_ = present(ctx, s_.a_zp);
    has_bias_ = present(ctx, s_.bias);
    has_c_ = present(ctx, s_.c);
    has_y_zp_ = present(ctx, s_.y_zp);
    per_column_ = (s_.to_float || s_.requantise) && ctx.inputs[s_.b_scale].numel() != 1;
    out_ = ctx.outputs[0].dtype;
    scales_.assign(static_cast<size_t>(per_column_ ? n_ : 1), 0.f);
    if (rows_ == 0) return Status::ok();  // nothing to compute: no primitive
    return guarded(*ctx.node, [&]() -> Status {
      const dt a_dt = ctx.inputs[0].dtype == DType::kU8 ? dt::u8 : dt::s8;
      // A transposed is [K, rows], B transposed [N, K]: the same matrices in the other order.
      const memory::desc a_md({rows_, k_}, a_dt, s_.ta ? tag::ba : tag::ab), w_plain({k_, n_}, dt::s8, s_.tb ? tag::ba : tag::ab),
          w_any({k_, n_}, dt::s8, tag::any),
          y_md({rows_, n_}, s_.to_float ? dt::f32 : s_.requantise ? (out_ == DType::kU8 ? dt::u8 : dt::s8) : dt::s32, tag::ab);
      dnnl::primitive_attr attr;
      if (has_a_zp_) attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
      // The scales as a binary multiply post-op, not runtime output scales: with those,
      // oneDNN 2.6 leaves its AMX/VNNI brgemm kernel for a plain jit gemm (3x slower on
      // BERT-Base's products here).
      const memory::desc scale_md({1, per_column_ ? n_ : 1}, dt::f32, tag::ab), bias_md({1, n_}, dt::f32, tag::ab);
      // QLinearMatMul: the product times a_scale * b_scale[n] / y_scale, plus y's zero point
      // (an integer, added before oneDNN rounds half to even and saturates to y's type).
      const memory::desc zp_md({1, 1}, dt::f32, tag::ab);
      if (s_.to_float || s_.requantise) {
        dnnl::post_ops po;
        po.append_binary(algorithm::binary_mul, scale_md);
        if (has_bias_) po.append_binary(algorithm::binary_add, bias_md);
        // ONNX rounds before it adds y's zero point: rounded after the sum, an odd zero point
        // would move a tie (9.5 + 11 -> 20, ONNX's 10 + 11).
        if (s_.requantise) po.append_eltwise(1.f, algorithm::eltwise_round, 0.f, 0.f);
        if (s_.requantise) po.append_binary(algorithm::binary_add, zp_md);
        attr.set_post_ops(po);
      }
      // QGemm's C is the primitive's bias: oneDNN adds it to the int32 accumulator before the
      // post-ops, as QGemm does before its scales.
      const memory::desc c_md({1, n_}, dt::s32, tag::ab);
      dnnl::matmul::primitive_desc pd(has_c_ ? dnnl::matmul::desc(a_md, w_any, c_md, y_md) : dnnl::matmul::desc(a_md, w_any, y_md),
                                      attr, engine());
      weights_.init(w_plain, pd.weights_desc(), ctx.constant(s_.b), ctx.tracker);
      y_zp_mem_ = memory(zp_md, engine(), &y_zp_value_);
      a_ = memory(a_md, engine(), DNNL_MEMORY_NONE);
      y_ = memory(y_md, engine(), DNNL_MEMORY_NONE);
      bias_ = memory(bias_md, engine(), DNNL_MEMORY_NONE);
      c_ = memory(c_md, engine(), DNNL_MEMORY_NONE);
      zp_ = memory(memory::desc({1}, dt::s32, tag::x), engine(), &zp_value_);
      scale_mem_ = memory(scale_md, engine(), scales_.data());
      prim_ = dnnl::matmul(pd);
      return Status::ok();
    });
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    if (rows_ == 0) return Status::ok();
    a_.set_data_handle(src[0]->data());
    y_.set_data_handle(dst[0]->data());
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, a_}, {DNNL_ARG_WEIGHTS, weights_.get(nullptr)}, {DNNL_ARG_DST, y_}};
    if (has_a_zp_) {
      zp_value_ = byte_value(*src[s_.a_zp]);
      args[DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC] = zp_;
    }
    if (s_.to_float || s_.requantise) {
      // One float32 multiplier per column: the chain's Mul(a_scale, b_scale), or
      // QLinearMatMul's a_scale * b_scale / y_scale (checked: a run's scales may be bad).
      const float a_scale = s_.alpha * src[s_.a_scale]->f32()[0];  // alpha: QGemm's, else 1
      const float* b_scale = src[s_.b_scale]->f32();
      if (s_.requantise) {
        const float y_scale = src[s_.y_scale]->f32()[0];
        MOSAIC_RETURN_IF_ERROR(check_quant_scale(*node_, src[s_.a_scale]->f32()[0], "a_scale"));
        MOSAIC_RETURN_IF_ERROR(check_quant_scale(*node_, y_scale, "y_scale"));
        for (size_t j = 0; j < scales_.size(); ++j) {
          MOSAIC_RETURN_IF_ERROR(check_quant_scale(*node_, b_scale[j], "b_scale"));
          scales_[j] = static_cast<float>(qlinear_multiplier(a_scale, b_scale[j], y_scale));
        }
        y_zp_value_ = has_y_zp_ ? static_cast<float>(byte_value(*src[s_.y_zp])) : 0.f;  // QGemm's is optional
        args[DNNL_ARG_ATTR_MULTIPLE_POST_OP(2) | DNNL_ARG_SRC_1] = y_zp_mem_;
      } else {
        for (size_t j = 0; j < scales_.size(); ++j) scales_[j] = a_scale * b_scale[j];
      }
      args[DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1] = scale_mem_;
    }
    if (has_bias_) {
      bias_.set_data_handle(const_cast<void*>(src[s_.bias]->data()));
      args[DNNL_ARG_ATTR_MULTIPLE_POST_OP(1) | DNNL_ARG_SRC_1] = bias_;
    }
    if (has_c_) {
      c_.set_data_handle(const_cast<void*>(src[s_.c]->data()));
      args[DNNL_ARG_BIAS] = c_;
    }
    prim_.execute(stream(), args);
    stream().wait();
    return Status::ok();
  }
  size_t workspace_bytes() const override { return weights_.bytes(); }

 private:
  IntegerProductSlots s_;
  const Node* node_ = nullptr;
  DType out_ = DType::kI32;
  float y_zp_value_ = 0;
  memory y_zp_mem_;
  int64_t k_ = 0, n_ = 0, rows_ = 0;
  bool has_a_zp_ = false, has_bias_ = false, has_c_ = false, has_y_zp_ = false, per_column_ = false;
  int32_t zp_value_ = 0;
  std::vector<float> scales_;
  Weights weights_;
  memory a_, y_, bias_, c_, zp_, scale_mem_;
  dnnl::matmul prim_;
};

}  // namespace

void add_int8_matmul_kernels(BackendRegistration& r) {
  const KernelTraits traits{LayoutUse::kNone, integer_matmul_supported, kAllDTypes};
  r.kernel("MatMulInteger", make_factory<IntegerMatMulKernel>(), traits);
  r.kernel("QLinearMatMul", make_factory<IntegerMatMulKernel>(), traits);
  r.kernel(op_key(kMicrosoftDomain, "MatMulIntegerToFloat"), make_factory<IntegerMatMulKernel>(), traits);
  r.kernel(op_key(kMicrosoftDomain, "QGemm"), make_factory<IntegerMatMulKernel>(), traits);
}

}  // namespace mosaic::onednn_impl
