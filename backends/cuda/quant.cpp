// cuda: 8-bit codes and integer products (issue 52). QuantizeLinear and DequantizeLinear per
// tensor or per axis, the code lookups a QDQ model's float stretches become
// (core/fuse_qdq_codes.cpp), and the integer products on cuBLAS's int8 x int8 -> int32
// product: QLinearConv and ConvInteger (the input's columns gathered on the device, groups as
// one strided batch), QLinearMatMul, MatMulInteger, QGemm and MatMulIntegerToFloat. Each is
// its node's exact ONNX value, as the naive oracle computes it: int8_plan.hpp plans each
// product on the host (and says what is declined), device_quant.hpp has the per-element
// formulas and why the packed operands give the exact sums; tests/test_cuda_int8_math.cpp runs
// both on the host against the oracle. A QDQ model's convolutions and products become these
// ops where this backend takes them (core/fuse_qdq.cpp asks its capability query), so
// `bench --precision int8 --backends cuda` and a quantised file run in int8 on the GPU.
#include "backends/cuda/cuda_internal.hpp"

#include "backends/cuda/int8_plan.hpp"

namespace mosaic::cuda_backend {
namespace {

const uint8_t* bytes(const Tensor* t) { return t ? static_cast<const uint8_t*>(t->data()) : nullptr; }

// ---- QuantizeLinear, DequantizeLinear ----

/// What the two kernels take: float32 values and scales, uint8/int8 codes, one scale per
/// tensor or per axis (not blocked), a zero point of the codes' type; QuantizeLinear
/// dividing in float32.
Expected<QuantLinearParams> qdq_params(const KernelContext& ctx, bool quantize) {
  MOSAIC_ASSIGN_OR_RETURN(QuantLinearParams p, quant_linear_params(ctx));
  const std::string& label = ctx.node->label();
  const DType codes = quantize ? p.out : ctx.inputs[0].dtype, floats = quantize ? ctx.inputs[0].dtype : p.out;
  if (!is_code_type(codes) || floats != DType::kF32 || ctx.inputs[1].dtype != DType::kF32)
    return Status::unsupported(label + ": the cuda backend maps float32 to uint8/int8 codes with float32 scales");
  if (p.layout.kind == QuantScaleLayout::kBlock) return Status::unsupported(label + ": blocked scales stay on the host");
  if (quantize && p.divide_in != DType::kF32) return Status::unsupported(label + ": a quotient rounded to another type");
  if (p.has_zero_point && ctx.inputs[2].dtype != codes)
    return Status::unsupported(label + ": a zero point of another type than the codes");
  return p;
}

class QuantizeKernel final : public CudaKernel {
 public:
  explicit QuantizeKernel(bool quantize) : quantize_(quantize) {}
  Status init(const KernelContext& ctx) {
    MOSAIC_RETURN_IF_ERROR(init_base(ctx));
    MOSAIC_ASSIGN_OR_RETURN(p_, qdq_params(ctx, quantize_));
    signed_ = (quantize_ ? p_.out : ctx.inputs[0].dtype) == DType::kI8;
    axis_dim_ = p_.layout.kind == QuantScaleLayout::kAxis ? p_.layout.axis_dim : 1;
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const uint8_t* zp = p_.has_zero_point ? bytes(src[2]) : nullptr;
    const int64_t n = dst[0]->numel();
    if (quantize_)
      return check(launch_quantize(device().stream(), src[0]->f32(), static_cast<uint8_t*>(dst[0]->data()), n,
                                   src[1]->f32(), zp, axis_dim_, p_.layout.inner, signed_),
                   "QuantizeLinear");
    return check(launch_dequantize(device().stream(), bytes(src[0]), dst[0]->f32(), n, src[1]->f32(), zp, axis_dim_,
                                   p_.layout.inner, signed_),
                 "DequantizeLinear");
  }

 private:
  bool quantize_ = true, signed_ = false;
  QuantLinearParams p_;
  int64_t axis_dim_ = 1;
};

/// DynamicQuantizeLinear of float32 values: the range on the device, the codes and the
/// scale and zero point there too (a dynamically quantised model's activations stay on the
/// GPU between its integer products).
class DynamicQuantizeKernel final : public CudaKernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_RETURN_IF_ERROR(init_base(ctx));
    n_ = ctx.inputs[0].numel();
    MOSAIC_RETURN_IF_ERROR(partials_.resize(2 * sizeof(float) * static_cast<size_t>(dynamic_range_blocks(n_))));
    return params_.resize(2 * sizeof(float));
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    float* scale = dst.size() > 1 && dst[1] ? dst[1]->f32() : nullptr;
    uint8_t* zp = dst.size() > 2 && dst[2] ? static_cast<uint8_t*>(dst[2]->data()) : nullptr;
    return check(launch_dynamic_quantize(device().stream(), src[0]->f32(), static_cast<uint8_t*>(dst[0]->data()), n_,
                                         static_cast<float*>(partials_.data()), params_.data(), scale, zp),
                 "DynamicQuantizeLinear");
  }
  size_t workspace_bytes() const override { return partials_.bytes() + params_.bytes(); }

 private:
  int64_t n_ = 0;
  DeviceMemory partials_, params_;
};

/// CodeLookup: 8-bit codes through a table of 256 bytes.
Status code_lookup_supported(const KernelContext& ctx) {
  if (!is_code_type(ctx.inputs[0].dtype) || !is_code_type(ctx.inputs[1].dtype) || ctx.inputs[1].shape != Shape{256})
    return Status::unsupported(ctx.node->label() + ": 8-bit codes through a table of 256");
  return Status::ok();
}

class CodeLookupKernel final : public CudaKernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_RETURN_IF_ERROR(init_base(ctx));
    MOSAIC_RETURN_IF_ERROR(code_lookup_supported(ctx));
    offset_ = ctx.inputs[0].dtype == DType::kI8 ? 128 : 0;  // int8 code c sits at table[c + 128]
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    return check(launch_code_lookup(device().stream(), bytes(src[0]), bytes(src[1]), static_cast<uint8_t*>(dst[0]->data()),
                                    dst[0]->numel(), offset_),
                 "CodeLookup");
  }

 private:
  uint8_t offset_ = 0;
};

// ---- the integer products (planned by int8_plan.hpp) ----

/// One integer product on cuBLAS: A packed, the weights packed at plan time, the int32 sums,
/// then the epilogue; a matrix product's or a convolution's.
class Int8ProductKernel final : public CudaKernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_RETURN_IF_ERROR(init_base(ctx));
    const std::string& op = ctx.node->op_type;
    const bool convolution = op == "QLinearConv" || op == "ConvInteger";
    MOSAIC_ASSIGN_OR_RETURN(p_, convolution ? int8_conv_plan(ctx, true) : int8_matmul_plan(ctx, true));
    MOSAIC_RETURN_IF_ERROR(upload(weights_, p_.weights.codes.data(), p_.weights.codes.size()));
    MOSAIC_RETURN_IF_ERROR(upload(sums_, p_.weights.sums.data(), p_.weights.sums.size() * sizeof(int32_t)));
    MOSAIC_RETURN_IF_ERROR(upload(multipliers_, p_.multipliers.data(), p_.multipliers.size() * sizeof(float)));
    p_.weights = PackedWeights{};  // on the device now
    MOSAIC_RETURN_IF_ERROR(packed_.resize(static_cast<size_t>(p_.packed_bytes())));
    return c_.resize(static_cast<size_t>(p_.e.groups * p_.e.rows * p_.e.np) * sizeof(int32_t));
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    if (p_.e.rows == 0 || p_.e.n == 0) return Status::ok();
    const cudaStream_t stream = device().stream();
    auto* packed = static_cast<int8_t*>(packed_.data());
    const uint8_t* zp = p_.a_zp_slot ? bytes(src[p_.a_zp_slot]) : nullptr;
    MOSAIC_RETURN_IF_ERROR(check(p_.convolution ? launch_conv_pack(stream, p_.conv, bytes(src[0]), zp, packed)
                                                : launch_row_pack(stream, p_.row, bytes(src[0]), packed),
                                 "packing A"));
    MOSAIC_RETURN_IF_ERROR(product());
    IntEpilogueArgs a;
    a.c = static_cast<const int32_t*>(c_.data());
    a.weight_sums = static_cast<const int32_t*>(sums_.data());
    a.multipliers = multipliers_.bytes() ? static_cast<const float*>(multipliers_.data()) : nullptr;
    if (p_.bias_i32_slot) a.bias_i32 = static_cast<const int32_t*>(src[p_.bias_i32_slot]->data());
    if (p_.bias_f32_slot) a.bias_f32 = src[p_.bias_f32_slot]->f32();
    if (p_.a_scale_slot) a.a_scale = src[p_.a_scale_slot]->f32();
    a.a_zero_point = zp;
    a.y = dst[0]->data();
    return check(launch_int_epilogue(stream, p_.e, a, dst[0]->numel()), "epilogue");
  }
  /// The packed weights, their sums and multipliers, A packed and the int32 sums.
  size_t workspace_bytes() const override {
    return weights_.bytes() + sums_.bytes() + multipliers_.bytes() + packed_.bytes() + c_.bytes();
  }

 private:
  Status upload(DeviceMemory& m, const void* host, size_t n) {
    MOSAIC_RETURN_IF_ERROR(m.resize(n));
    return n ? device().copy_to_device(m.data(), host, n) : Status::ok();
  }
  /// C = the packed weights x the packed A, group by group (int8_gemm_call).
  Status product() {
    const cublasHandle_t h = device().cublas();
    MOSAIC_RETURN_IF_ERROR(check(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH), "math mode"));
    const int32_t one = 1, zero = 0;
    const Int8GemmCall g = int8_gemm_call(p_);
    if (g.batch == 1)
      return check(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, g.m, g.n, g.k, &one, weights_.data(), CUDA_R_8I, g.lda,
                                packed_.data(), CUDA_R_8I, g.ldb, &zero, c_.data(), CUDA_R_32I, g.ldc, CUBLAS_COMPUTE_32I,
                                CUBLAS_GEMM_DEFAULT),
                   "cublasGemmEx (int8)");
    return check(cublasGemmStridedBatchedEx(h, CUBLAS_OP_T, CUBLAS_OP_N, g.m, g.n, g.k, &one, weights_.data(), CUDA_R_8I,
                                            g.lda, g.stride_a, packed_.data(), CUDA_R_8I, g.ldb, g.stride_b, &zero,
                                            c_.data(), CUDA_R_32I, g.ldc, g.stride_c, g.batch, CUBLAS_COMPUTE_32I,
                                            CUBLAS_GEMM_DEFAULT),
                 "cublasGemmStridedBatchedEx (int8)");
  }

  Int8Plan p_;
  DeviceMemory weights_, sums_, multipliers_, packed_, c_;
};

/// The capability query asks what init checks (no device is touched: init_base is not called).
Status qdq_supported(const KernelContext& ctx) {
  return qdq_params(ctx, ctx.node->op_type == "QuantizeLinear").status();
}

}  // namespace

void add_quant_kernels(BackendRegistration& r) {
  const KernelTraits qdq{LayoutUse::kNone, qdq_supported, kAllDTypes};
  r.kernel("QuantizeLinear", make_factory<QuantizeKernel>(true), qdq);
  r.kernel("DequantizeLinear", make_factory<QuantizeKernel>(false), qdq);
  r.kernel("DynamicQuantizeLinear", make_factory<DynamicQuantizeKernel>(), {LayoutUse::kNone, [](const KernelContext& ctx) {
             return ctx.inputs[0].dtype == DType::kF32 ? Status::ok()
                                                       : Status::unsupported(ctx.node->label() + ": float32 values only");
           }, kAllDTypes});
  r.kernel(kCodeLookupOp, make_factory<CodeLookupKernel>(), {LayoutUse::kNone, code_lookup_supported, kAllDTypes});
  // The products' query is their plan without the packing (the QDQ fusion asks it before
  // making a QLinearConv of a convolution for this backend); no device is touched.
  const KernelTraits products{LayoutUse::kNone, [](const KernelContext& ctx) { return int8_matmul_plan(ctx, false).status(); },
                              kAllDTypes};
  const KernelTraits convolutions{LayoutUse::kNone, [](const KernelContext& ctx) { return int8_conv_plan(ctx, false).status(); },
                                  kAllDTypes};
  for (const char* op : {"QLinearMatMul", "MatMulInteger"}) r.kernel(op, make_factory<Int8ProductKernel>(), products);
  for (const char* op : {"QGemm", "MatMulIntegerToFloat"})
    r.kernel(op_key(kMicrosoftDomain, op), make_factory<Int8ProductKernel>(), products);
  for (const char* op : {"QLinearConv", "ConvInteger"}) r.kernel(op, make_factory<Int8ProductKernel>(), convolutions);
}

}  // namespace mosaic::cuda_backend
