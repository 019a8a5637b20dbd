// cuda: the com.microsoft QOperator element-wise ops that ONNX Runtime's quantiser writes
// between its integer products (issue 52): QLinearAdd and QLinearMul (broadcast; a QDQ
// model's residual Adds become QLinearAdd with a fused Relu, core/fuse_qdq_codes.cpp),
// QLinearSigmoid and QLinearLeakyRelu (the oracle's table of 256 codes, looked up on the
// device), QLinearGlobalAveragePool, QLinearAveragePool, QLinearSoftmax and QLinearConcat. A
// QOperator model's codes then stay on the GPU from one QLinearConv to the next instead of
// crossing to the host around each of these. Each output is the naive oracle's code:
// qlinear_plan.hpp plans the node on the host (and says what is declined), device_qlinear.hpp
// has the per-element functions; tests/test_cuda_qlinear_math.cpp runs both on the host
// against the oracle.
#include "backends/cuda/cuda_internal.hpp"

#include "backends/cuda/qlinear_plan.hpp"

namespace mosaic::cuda_backend {
namespace {

const uint8_t* codes(const Tensor* t) { return static_cast<const uint8_t*>(t->data()); }
uint8_t* codes(Tensor* t) { return static_cast<uint8_t*>(t->data()); }

class QBinaryKernel final : public CudaKernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_RETURN_IF_ERROR(init_base(ctx));
    MOSAIC_ASSIGN_OR_RETURN(q_, qlinear_binary_plan(ctx));
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    return check(launch_qbinary(device().stream(), q_, codes(src[0]), codes(src[3]), codes(dst[0]), dst[0]->numel()),
                 q_.mul ? "QLinearMul" : "QLinearAdd");
  }

 private:
  DevQBinary q_;
};

/// QLinearSigmoid, QLinearLeakyRelu: the table built at plan time, in device memory.
class QLookupKernel final : public CudaKernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_RETURN_IF_ERROR(init_base(ctx));
    MOSAIC_ASSIGN_OR_RETURN(std::vector<uint8_t> table, qlinear_lookup_plan(ctx));
    offset_ = ctx.inputs[0].dtype == DType::kI8 ? 128 : 0;  // int8 code c sits at table[c + 128]
    MOSAIC_RETURN_IF_ERROR(table_.resize(table.size()));
    return device().copy_to_device(table_.data(), table.data(), table.size());
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    return check(launch_code_lookup(device().stream(), codes(src[0]), static_cast<const uint8_t*>(table_.data()),
                                    codes(dst[0]), dst[0]->numel(), offset_),
                 "table lookup");
  }
  size_t workspace_bytes() const override { return table_.bytes(); }

 private:
  DeviceMemory table_;
  uint8_t offset_ = 0;
};

/// QLinearGlobalAveragePool, QLinearAveragePool, QLinearSoftmax: one plan, one launch over
/// the output's codes.
template <class Plan, Expected<Plan> (*make)(const KernelContext&),
          cudaError_t (*launch)(cudaStream_t, const Plan&, const uint8_t*, uint8_t*, int64_t)>
class UnaryCodesKernel final : public CudaKernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_RETURN_IF_ERROR(init_base(ctx));
    MOSAIC_ASSIGN_OR_RETURN(p_, make(ctx));
    op_ = ctx.node->op_type;
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    return check(launch(device().stream(), p_, codes(src[0]), codes(dst[0]), dst[0]->numel()), op_.c_str());
  }

 private:
  Plan p_;
  std::string op_;
};
using QGlobalPoolKernel = UnaryCodesKernel<DevQGlobalPool, qlinear_global_pool_plan, launch_qglobal_pool>;
using QAvgPoolKernel = UnaryCodesKernel<DevQAvgPool, qlinear_avg_pool_plan, launch_qavg_pool>;
using QSoftmaxKernel = UnaryCodesKernel<DevQSoftmax, qlinear_softmax_plan, launch_qsoftmax>;

/// QLinearConcat: one launch per operand, each writing its columns of the output.
class QConcatKernel final : public CudaKernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_RETURN_IF_ERROR(init_base(ctx));
    MOSAIC_ASSIGN_OR_RETURN(parts_, qlinear_concat_plan(ctx));
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    for (size_t k = 0; k < parts_.size(); ++k) {
      const Tensor* x = src[2 + 3 * k];
      MOSAIC_RETURN_IF_ERROR(
          check(launch_qconcat(device().stream(), parts_[k], codes(x), codes(dst[0]), x->numel()), "QLinearConcat"));
    }
    return Status::ok();
  }

 private:
  std::vector<DevQRequant> parts_;
};

template <class Plan>
KernelTraits planned(Plan plan) {
  // The capability query is the plan (no device touched: init_base is not called).
  return {LayoutUse::kNone, [plan](const KernelContext& ctx) { return plan(ctx).status(); }, kAllDTypes};
}

}  // namespace

void add_qlinear_kernels(BackendRegistration& r) {
  auto key = [](const char* op) { return op_key(kMicrosoftDomain, op); };
  for (const char* op : {"QLinearAdd", "QLinearMul"})
    r.kernel(key(op), make_factory<QBinaryKernel>(), planned(qlinear_binary_plan));
  for (const char* op : {"QLinearSigmoid", "QLinearLeakyRelu"})
    r.kernel(key(op), make_factory<QLookupKernel>(), planned(qlinear_lookup_plan));
  r.kernel(key("QLinearGlobalAveragePool"), make_factory<QGlobalPoolKernel>(), planned(qlinear_global_pool_plan));
  r.kernel(key("QLinearAveragePool"), make_factory<QAvgPoolKernel>(), planned(qlinear_avg_pool_plan));
  r.kernel(key("QLinearSoftmax"), make_factory<QSoftmaxKernel>(), planned(qlinear_softmax_plan));
  r.kernel(key("QLinearConcat"), make_factory<QConcatKernel>(), planned(qlinear_concat_plan));
}

}  // namespace mosaic::cuda_backend
