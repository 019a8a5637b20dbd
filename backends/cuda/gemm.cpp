// cuda: Gemm and MatMul on cuBLAS (float32; TF32 tensor-core math in a --precision tf32 plan;
// float16 or bfloat16 operands with float32 sums and outputs in fp16 or bf16, cublasGemmEx),
// with a fused activation applied after. Also the 16-bit operands conv.cpp shares.
// Row-major operands are read as cuBLAS's column-major transposes: Y^T = op(B)^T op(A)^T.
#include "backends/cuda/cuda_internal.hpp"

#include <climits>

#include "ir/elements.hpp"
#include "operators/params.hpp"

namespace mosaic::cuda_backend {

std::optional<Float16Kind> float16_kind(Precision p) {
  if (p == Precision::kF16) return Float16Kind::kHalf;
  if (p == Precision::kBF16) return Float16Kind::kBfloat16;
  return std::nullopt;
}
cudaDataType_t cublas_type(Float16Kind kind) { return kind == Float16Kind::kHalf ? CUDA_R_16F : CUDA_R_16BF; }
cudnnDataType_t cudnn_type(Float16Kind kind) {
  return kind == Float16Kind::kHalf ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16;
}
const char* float16_name(Float16Kind kind) { return kind == Float16Kind::kHalf ? "fp16" : "bf16"; }

Status float16_training_refused(const std::string& label, Float16Kind kind) {
  return Status::unsupported(label + ": the cuda backend computes " + float16_name(kind) +
                             " products for inference only; its training plans take f32 or tf32");
}

Status Float16Operand::prepare(Float16Kind kind, int64_t n, const Tensor* constant) {
  kind_ = kind;
  n_ = n;
  constant_ = constant != nullptr;
  MOSAIC_RETURN_IF_ERROR(mem_.resize(static_cast<size_t>(n) * sizeof(uint16_t)));
  if (!constant_ || n == 0) return Status::ok();
  if (constant->numel() != n || constant->dtype() != DType::kF32)
    return Status::internal("a 16-bit copy of a constant of " + std::to_string(constant->numel()) + " elements, not " +
                            std::to_string(n) + " float32 ones");
  std::vector<uint16_t> bits(static_cast<size_t>(n));
  convert_elements(DType::kF32, constant->data(), kind == Float16Kind::kHalf ? DType::kF16 : DType::kBF16, bits.data(), n);
  return CudaDevice::instance()->copy_to_device(mem_.data(), bits.data(), bits.size() * sizeof(uint16_t));
}

cudaError_t Float16Operand::round(cudaStream_t stream, const float* x) const {
  if (constant_) return cudaSuccess;
  return launch_narrow(stream, kind_, x, static_cast<uint16_t*>(mem_.data()), n_);
}

namespace {

/// cuBLAS's math for a plan's precision: full float32 (CUBLAS_DEFAULT_MATH, no tensor-core
/// rounding, so that the check against naive holds), or TF32 tensor-op math for tf32. Set
/// before each call: the handle is the device's, shared by every kernel.
cublasMath_t cublas_math(const KernelContext& ctx) {
  return ctx.precision == Precision::kTF32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH;
}

/// C's strides over Y's [m, n] (0 along broadcast dimensions), or an error for a C that does
/// not broadcast to [m, n] (unidirectionally, as ONNX's Gemm allows).
Expected<std::pair<int64_t, int64_t>> bias_strides(const Shape& c, int64_t m, int64_t n, const std::string& label) {
  Shape s = c;
  while (s.size() < 2) s.insert(s.begin(), 1);
  if (s.size() != 2 || (s[0] != 1 && s[0] != m) || (s[1] != 1 && s[1] != n))
    return Status::invalid(label + ": C of shape " + shape_str(c) + " does not broadcast to [" + std::to_string(m) + "," +
                           std::to_string(n) + "]");
  return std::make_pair(s[0] == 1 ? int64_t{0} : s[1], s[1] == 1 ? int64_t{0} : int64_t{1});
}

/// Z[r, c] = alpha op(P) op(Q) + beta Z for row-major matrices, `batch` of them `sp`, `sq`
/// and `sz` floats apart (a stride of 0 shares one matrix): P is stored [r, inner] ([inner, r]
/// where tp), Q [inner, c] ([c, inner] where tq). cuBLAS computes the column-major transpose
/// Z^T = op(Q)^T op(P)^T.
cublasStatus_t row_major_gemm(cublasHandle_t h, bool tp, bool tq, int r, int c, int inner, float alpha, const float* P,
                              long long sp, const float* Q, long long sq, float beta, float* Z, long long sz,
                              int batch) {
  const cublasOperation_t op_q = tq ? CUBLAS_OP_T : CUBLAS_OP_N, op_p = tp ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int ldq = tq ? inner : c, ldp = tp ? r : inner;
  if (batch == 1) return cublasSgemm(h, op_q, op_p, c, r, inner, &alpha, Q, ldq, P, ldp, &beta, Z, c);
  return cublasSgemmStridedBatched(h, op_q, op_p, c, r, inner, &alpha, Q, ldq, sq, P, ldp, sp, &beta, Z, c, sz, batch);
}

class GemmKernel final : public CudaKernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_RETURN_IF_ERROR(init_base(ctx));
    MOSAIC_ASSIGN_OR_RETURN(p_, gemm_params(ctx));
    if (p_.m > INT32_MAX || p_.n > INT32_MAX || p_.k > INT32_MAX)
      return Status::unsupported(label_ + ": dimensions beyond cuBLAS's 32-bit sizes");
    MOSAIC_ASSIGN_OR_RETURN(act_, device_activation(*ctx.node, label_));
    math_ = cublas_math(ctx);
    if (p_.has_c) {
      MOSAIC_ASSIGN_OR_RETURN(c_strides_, bias_strides(ctx.inputs[2].shape, p_.m, p_.n, label_));
    }
    if ((half_ = float16_kind(ctx.precision))) {
      if (ctx.training) return float16_training_refused(label_, *half_);
      MOSAIC_RETURN_IF_ERROR(a16_.prepare(*half_, p_.m * p_.k, ctx.constant(0)));
      MOSAIC_RETURN_IF_ERROR(b16_.prepare(*half_, p_.k * p_.n, ctx.constant(1)));
    }
    return Status::ok();
  }
  /// The operands' 16-bit copies (fp16, bf16).
  size_t workspace_bytes() const override { return a16_.bytes() + b16_.bytes(); }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const cudaStream_t stream = device().stream();
    float* y = dst[0]->f32();
    float beta = 0.f;
    if (p_.has_c && src[2] && p_.beta != 0.f) {
      MOSAIC_RETURN_IF_ERROR(check(
          launch_broadcast_rows(stream, src[2]->f32(), c_strides_.first, c_strides_.second, y, p_.m, p_.n), "bias"));
      beta = p_.beta;
    }
    const int m = static_cast<int>(p_.m), n = static_cast<int>(p_.n), k = static_cast<int>(p_.k);
    MOSAIC_RETURN_IF_ERROR(check(cublasSetMathMode(device().cublas(), math_), "math mode"));
    if (half_) {  // the same product on the 16-bit copies, float32 sums into the float32 Y
      MOSAIC_RETURN_IF_ERROR(check(a16_.round(stream, src[0]->f32()), "rounding A"));
      MOSAIC_RETURN_IF_ERROR(check(b16_.round(stream, src[1]->f32()), "rounding B"));
      const cudaDataType_t t = cublas_type(*half_);
      MOSAIC_RETURN_IF_ERROR(check(
          cublasGemmEx(device().cublas(), p_.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, p_.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n,
                       m, k, &p_.alpha, b16_.data(), t, p_.trans_b ? k : n, a16_.data(), t, p_.trans_a ? m : k, &beta, y,
                       CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
          "cublasGemmEx (16-bit)"));
    } else {
      MOSAIC_RETURN_IF_ERROR(check(
        cublasSgemm(device().cublas(), p_.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, p_.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m,
                    k, &p_.alpha, src[1]->f32(), p_.trans_b ? k : n, src[0]->f32(), p_.trans_a ? m : k, &beta, y, n),
        "cublasSgemm"));
    }
    if (act_.op != DevUnary::kNone)
      MOSAIC_RETURN_IF_ERROR(check(launch_unary(stream, act_, y, y, p_.m * p_.n), "activation"));
    return Status::ok();
  }
  /// Training plans do not fuse activations; a fused one has no backward here.
  bool has_backward() const override { return act_.op == DevUnary::kNone; }
  bool backward_reads_input(size_t i) const override { return i < 2; }
  bool backward_reads_output(size_t) const override { return false; }
  /// Y = alpha op(A) op(B) + beta C: dA = alpha dY op(B)^T (transposed back where trans_a),
  /// dB = alpha op(A)^T dY (likewise), dC = beta dY summed over C's broadcast dimensions.
  Status backward(const BackwardArgs& a) override {
    const int m = static_cast<int>(p_.m), n = static_cast<int>(p_.n), k = static_cast<int>(p_.k);
    const float* A = a.src[0]->f32();
    const float* B = a.src[1]->f32();
    const float* dy = a.diff_dst[0]->f32();
    const cublasHandle_t h = device().cublas();
    MOSAIC_RETURN_IF_ERROR(check(cublasSetMathMode(h, math_), "math mode"));
    if (float* dA = grad_of(a, 0))
      MOSAIC_RETURN_IF_ERROR(check(p_.trans_a ? row_major_gemm(h, p_.trans_b, true, k, m, n, p_.alpha, B, 0, dy, 0, 0.f, dA, 0, 1)
                                              : row_major_gemm(h, false, !p_.trans_b, m, k, n, p_.alpha, dy, 0, B, 0, 0.f, dA, 0, 1),
                                   "cublasSgemm (dA)"));
    if (float* dB = grad_of(a, 1))
      MOSAIC_RETURN_IF_ERROR(check(p_.trans_b ? row_major_gemm(h, true, p_.trans_a, n, k, m, p_.alpha, dy, 0, A, 0, 0.f, dB, 0, 1)
                                              : row_major_gemm(h, !p_.trans_a, false, k, n, m, p_.alpha, A, 0, dy, 0, 0.f, dB, 0, 1),
                                   "cublasSgemm (dB)"));
    if (float* dC = grad_of(a, 2)) {
      Broadcast c;
      c.rank = 2;
      c.dims[0] = p_.m;
      c.dims[1] = p_.n;
      c.a_strides[0] = c_strides_.first;
      c.a_strides[1] = c_strides_.second;
      MOSAIC_RETURN_IF_ERROR(check(launch_grad_reduce(device().stream(), DevBinary::kAdd, 0, make_grad_reduce(c, 0), dy,
                                                      nullptr, nullptr, dC, p_.beta),
                                   "dC"));
    }
    return Status::ok();
  }

 private:
  GemmParams p_;
  DevUnaryArgs act_;
  cublasMath_t math_ = CUBLAS_DEFAULT_MATH;
  std::pair<int64_t, int64_t> c_strides_{0, 0};
  std::optional<Float16Kind> half_;  // fp16/bf16: A and B read as these copies
  Float16Operand a16_, b16_;
};

/// MatMul of [..., m, k] and [..., k, n]: one strided-batched call where each operand's batch
/// dimensions either equal the output's or are all 1 (a shared matrix); vectors and other
/// broadcasts are declined.
class MatMulKernel final : public CudaKernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_RETURN_IF_ERROR(init_base(ctx));
    MOSAIC_ASSIGN_OR_RETURN(p_, matmul_params(ctx.inputs[0].shape, ctx.inputs[1].shape));
    if (p_.a_is_vector || p_.b_is_vector) return Status::unsupported(label_ + ": the cuda backend's MatMul takes no 1-D operands");
    batch_ = shape_numel(p_.batch);
    MOSAIC_ASSIGN_OR_RETURN(a_stride_, batch_stride(p_.a_batch, p_.m * p_.k));
    MOSAIC_ASSIGN_OR_RETURN(b_stride_, batch_stride(p_.b_batch, p_.k * p_.n));
    if (p_.m > INT32_MAX || p_.n > INT32_MAX || p_.k > INT32_MAX || batch_ > INT32_MAX)
      return Status::unsupported(label_ + ": dimensions beyond cuBLAS's 32-bit sizes");
    math_ = cublas_math(ctx);
    if ((half_ = float16_kind(ctx.precision))) {
      if (ctx.training) return float16_training_refused(label_, *half_);
      MOSAIC_RETURN_IF_ERROR(a16_.prepare(*half_, shape_numel(ctx.inputs[0].shape), ctx.constant(0)));
      MOSAIC_RETURN_IF_ERROR(b16_.prepare(*half_, shape_numel(ctx.inputs[1].shape), ctx.constant(1)));
    }
    return Status::ok();
  }
  /// The operands' 16-bit copies (fp16, bf16).
  size_t workspace_bytes() const override { return a16_.bytes() + b16_.bytes(); }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const float one = 1.f, zero = 0.f;
    const int m = static_cast<int>(p_.m), n = static_cast<int>(p_.n), k = static_cast<int>(p_.k);
    MOSAIC_RETURN_IF_ERROR(check(cublasSetMathMode(device().cublas(), math_), "math mode"));
    if (half_) {  // the same product on the 16-bit copies, float32 sums into the float32 Y
      const cudaStream_t stream = device().stream();
      MOSAIC_RETURN_IF_ERROR(check(a16_.round(stream, src[0]->f32()), "rounding A"));
      MOSAIC_RETURN_IF_ERROR(check(b16_.round(stream, src[1]->f32()), "rounding B"));
      const cudaDataType_t t = cublas_type(*half_);
      return check(cublasGemmStridedBatchedEx(device().cublas(), CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one, b16_.data(), t,
                                              n, b_stride_, a16_.data(), t, k, a_stride_, &zero, dst[0]->f32(),
                                              CUDA_R_32F, n, p_.m * p_.n, static_cast<int>(batch_), CUBLAS_COMPUTE_32F,
                                              CUBLAS_GEMM_DEFAULT),
                   "cublasGemmStridedBatchedEx (16-bit)");
    }
    return check(cublasSgemmStridedBatched(device().cublas(), CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one, src[1]->f32(), n,
                                           b_stride_, src[0]->f32(), k, a_stride_, &zero, dst[0]->f32(), n, p_.m * p_.n,
                                           static_cast<int>(batch_)),
                 "cublasSgemmStridedBatched");
  }
  bool has_backward() const override { return true; }
  bool backward_reads_output(size_t) const override { return false; }
  /// dA[b] = dY[b] B[b]^T, dB[b] = A[b]^T dY[b]; an operand shared by the batch (stride 0)
  /// gets the sum over it: one product over the stacked rows where the other operand is
  /// batched and packed (a shared weight: dB = A_rows^T dY_rows), else one product per
  /// batch added up.
  Status backward(const BackwardArgs& a) override {
    const int m = static_cast<int>(p_.m), n = static_cast<int>(p_.n), k = static_cast<int>(p_.k);
    const int batch = static_cast<int>(batch_);
    const float* A = a.src[0]->f32();
    const float* B = a.src[1]->f32();
    const float* dy = a.diff_dst[0]->f32();
    const long long y_stride = p_.m * p_.n;
    const cublasHandle_t h = device().cublas();
    MOSAIC_RETURN_IF_ERROR(check(cublasSetMathMode(h, math_), "math mode"));
    // Z = sum over the batch of op(P[i]) op(Q[i]): one product per batch element, added up.
    auto summed = [&](bool tp, bool tq, int r, int c, int inner, const float* P, long long sp, const float* Q,
                      long long sq, float* Z, const char* what) -> Status {
      for (int i = 0; i < batch; ++i)
        MOSAIC_RETURN_IF_ERROR(check(row_major_gemm(h, tp, tq, r, c, inner, 1.f, P + i * sp, 0, Q + i * sq, 0,
                                                    i == 0 ? 0.f : 1.f, Z, 0, 1),
                                     what));
      return Status::ok();
    };
    if (float* dA = grad_of(a, 0)) {
      if (a_stride_ != 0 || batch == 1) {
        MOSAIC_RETURN_IF_ERROR(check(row_major_gemm(h, false, true, m, k, n, 1.f, dy, y_stride, B, b_stride_, 0.f, dA,
                                                    a_stride_, batch),
                                     "cuBLAS (dA)"));
      } else {
        MOSAIC_RETURN_IF_ERROR(summed(false, true, m, k, n, dy, y_stride, B, b_stride_, dA, "cuBLAS (dA)"));
      }
    }
    if (float* dB = grad_of(a, 1)) {
      if (b_stride_ != 0 || batch == 1) {
        MOSAIC_RETURN_IF_ERROR(check(row_major_gemm(h, true, false, k, n, m, 1.f, A, a_stride_, dy, y_stride, 0.f, dB,
                                                    b_stride_, batch),
                                     "cuBLAS (dB)"));
      } else if (a_stride_ == p_.m * p_.k && p_.m * batch_ <= INT32_MAX) {
        MOSAIC_RETURN_IF_ERROR(check(row_major_gemm(h, true, false, k, n, m * batch, 1.f, A, 0, dy, 0, 0.f, dB, 0, 1),
                                     "cuBLAS (dB)"));
      } else {
        MOSAIC_RETURN_IF_ERROR(summed(true, false, k, n, m, A, a_stride_, dy, y_stride, dB, "cuBLAS (dB)"));
      }
    }
    return Status::ok();
  }

 private:
  Expected<int64_t> batch_stride(const Shape& operand_batch, int64_t matrix) const {
    if (operand_batch == p_.batch) return matrix;
    if (shape_numel(operand_batch) == 1) return int64_t{0};
    return Status::unsupported(label_ + ": the cuda backend's MatMul broadcasts whole batches only");
  }
  MatMulParams p_;
  int64_t batch_ = 1, a_stride_ = 0, b_stride_ = 0;
  cublasMath_t math_ = CUBLAS_DEFAULT_MATH;
  std::optional<Float16Kind> half_;  // fp16/bf16: A and B read as these copies
  Float16Operand a16_, b16_;
};

}  // namespace

void add_gemm_kernels(BackendRegistration& r) {
  r.kernel("Gemm", make_factory<GemmKernel>()).kernel("MatMul", make_factory<MatMulKernel>());
}

}  // namespace mosaic::cuda_backend
