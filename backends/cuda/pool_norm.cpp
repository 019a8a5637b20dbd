// cuda: pooling (max, average, global), Softmax and LogSoftmax, local response normalisation
// and BatchNormalization at inference, each a cuDNN call on packed NCHW tensors; and
// LayerNormalization, the backend's own kernel (layer_norm.cu). Geometry
// cuDNN does not express (asymmetric pads, dilated or ceil-mode windows it would size
// differently) is declined with the reason, and the planner places the node
// elsewhere.
#include "backends/cuda/cuda_internal.hpp"
#include "backends/cuda/cudnn_desc.hpp"
#include "operators/params.hpp"

namespace mosaic::cuda_backend {
namespace {

class PoolKernel final : public CudaKernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_RETURN_IF_ERROR(init_base(ctx));
    MOSAIC_ASSIGN_OR_RETURN(const PoolParams p, pool_params(ctx));
    const bool is_max = ctx.node->op_type.find("Max") != std::string::npos;
    if (ctx.has_output(1)) return Status::unsupported(label_ + ": the cuda backend's MaxPool has no Indices output");
    MOSAIC_ASSIGN_OR_RETURN(const CudnnWindow win, cudnn_window(p.win, label_, "pools"));
    for (int d : win.dilations)
      if (d != 1) return Status::unsupported(label_ + ": cuDNN pools without dilation");
    const size_t rank = win.rank;
    MOSAIC_ASSIGN_OR_RETURN(auto x_dims, cudnn_dims(ctx.inputs[0].shape, rank, label_));
    MOSAIC_ASSIGN_OR_RETURN(auto y_dims, cudnn_dims(ctx.outputs[0].shape, rank, label_));
    MOSAIC_RETURN_IF_ERROR(check(set_packed(x_, x_dims), "x descriptor"));
    MOSAIC_RETURN_IF_ERROR(check(set_packed(y_, y_dims), "y descriptor"));
    // ONNX's max pooling ignores padded cells; its average counts them with count_include_pad.
    const cudnnPoolingMode_t mode = is_max               ? CUDNN_POOLING_MAX
                                    : p.count_include_pad ? CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING
                                                          : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
    MOSAIC_RETURN_IF_ERROR(check(pool_.create(), "pooling descriptor"));
    MOSAIC_RETURN_IF_ERROR(check(cudnnSetPoolingNdDescriptor(pool_.get(), mode, CUDNN_PROPAGATE_NAN,
                                                             static_cast<int>(rank - 2), win.kernel.data(),
                                                             win.pads.data(), win.strides.data()),
                                 "pooling descriptor"));
    // cuDNN sizes the output by rounding down; a ceil-mode window that adds a last, partial
    // output is declined.
    std::vector<int> out(rank);
    MOSAIC_RETURN_IF_ERROR(check(
        cudnnGetPoolingNdForwardOutputDim(pool_.get(), x_.get(), static_cast<int>(rank), out.data()), "output dimensions"));
    if (out != y_dims) return Status::unsupported(label_ + ": cuDNN sizes this window's output differently (ceil_mode)");
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const float one = 1.f, zero = 0.f;
    return check(cudnnPoolingForward(device().cudnn(), pool_.get(), &one, x_.get(), src[0]->f32(), &zero, y_.get(),
                                     dst[0]->f32()),
                 "cudnnPoolingForward");
  }
  bool has_backward() const override { return true; }
  /// cudnnPoolingBackward: max pooling routes dy to the window's maximum (it reads x and y),
  /// average pooling spreads it over the window.
  Status backward(const BackwardArgs& a) override {
    float* dx = grad_of(a, 0);
    if (!dx) return Status::ok();
    const float one = 1.f, zero = 0.f;
    return check(cudnnPoolingBackward(device().cudnn(), pool_.get(), &one, y_.get(), a.dst[0]->f32(), y_.get(),
                                      a.diff_dst[0]->f32(), x_.get(), a.src[0]->f32(), &zero, x_.get(), dx),
                 "cudnnPoolingBackward");
  }

 private:
  TensorDesc x_, y_;
  PoolDesc pool_;
};

/// Softmax and LogSoftmax over one axis: cuDNN's channel softmax on [outer, axis, inner, 1].
class SoftmaxKernel final : public CudaKernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_RETURN_IF_ERROR(init_base(ctx));
    MOSAIC_ASSIGN_OR_RETURN(const SoftmaxParams p, softmax_params(ctx));
    log_ = ctx.node->op_type == "LogSoftmax";
    MOSAIC_ASSIGN_OR_RETURN(auto dims, cudnn_dims({p.outer, p.axis_dim, p.inner, 1}, 4, label_));
    return check(set_packed(x_, dims), "descriptor");
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const float one = 1.f, zero = 0.f;
    return check(cudnnSoftmaxForward(device().cudnn(), log_ ? CUDNN_SOFTMAX_LOG : CUDNN_SOFTMAX_ACCURATE,
                                     CUDNN_SOFTMAX_MODE_CHANNEL, &one, x_.get(), src[0]->f32(), &zero, x_.get(),
                                     dst[0]->f32()),
                 "cudnnSoftmaxForward");
  }
  bool has_backward() const override { return true; }
  bool backward_reads_input(size_t) const override { return false; }
  /// cudnnSoftmaxBackward from the output: y (dy - sum(dy y)), or for the log form
  /// dy - exp(y) sum(dy).
  Status backward(const BackwardArgs& a) override {
    float* dx = grad_of(a, 0);
    if (!dx) return Status::ok();
    const float one = 1.f, zero = 0.f;
    return check(cudnnSoftmaxBackward(device().cudnn(), log_ ? CUDNN_SOFTMAX_LOG : CUDNN_SOFTMAX_ACCURATE,
                                      CUDNN_SOFTMAX_MODE_CHANNEL, &one, x_.get(), a.dst[0]->f32(), x_.get(),
                                      a.diff_dst[0]->f32(), &zero, x_.get(), dx),
                 "cudnnSoftmaxBackward");
  }

 private:
  TensorDesc x_;
  bool log_ = false;
};

/// LRN across channels: y = x / (bias + alpha / size * sum of x^2 over the window)^beta, the
/// window [c - floor((size - 1) / 2), c + ceil((size - 1) / 2)] in ONNX and in cuDNN (its
/// lookBehind and lookAhead, cudnn_ops.h), even sizes included.
class LrnKernel final : public CudaKernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_RETURN_IF_ERROR(init_base(ctx));
    MOSAIC_ASSIGN_OR_RETURN(const LrnParams p, lrn_params(ctx));
    if (p.size < CUDNN_LRN_MIN_N || p.size > CUDNN_LRN_MAX_N || p.bias < CUDNN_LRN_MIN_K || p.beta < CUDNN_LRN_MIN_BETA)
      return Status::unsupported(label_ + ": LRN parameters outside cuDNN's range (size 1-16, bias >= 1e-5, beta >= 0.01)");
    const Shape& x = ctx.inputs[0].shape;
    if (x.size() < 3 || x.size() > 5) return Status::unsupported(label_ + ": the cuda backend's LRN takes 3-5 dimensions");
    MOSAIC_ASSIGN_OR_RETURN(auto dims, cudnn_dims(x, 4, label_));
    MOSAIC_RETURN_IF_ERROR(check(set_packed(x_, dims), "descriptor"));
    MOSAIC_RETURN_IF_ERROR(check(lrn_.create(), "LRN descriptor"));
    return check(cudnnSetLRNDescriptor(lrn_.get(), static_cast<unsigned>(p.size), p.alpha, p.beta, p.bias),
                 "LRN descriptor");
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const float one = 1.f, zero = 0.f;
    return check(cudnnLRNCrossChannelForward(device().cudnn(), lrn_.get(), CUDNN_LRN_CROSS_CHANNEL_DIM1, &one, x_.get(),
                                             src[0]->f32(), &zero, x_.get(), dst[0]->f32()),
                 "cudnnLRNCrossChannelForward");
  }
  bool has_backward() const override { return true; }
  Status backward(const BackwardArgs& a) override {
    float* dx = grad_of(a, 0);
    if (!dx) return Status::ok();
    const float one = 1.f, zero = 0.f;
    return check(cudnnLRNCrossChannelBackward(device().cudnn(), lrn_.get(), CUDNN_LRN_CROSS_CHANNEL_DIM1, &one, x_.get(),
                                              a.dst[0]->f32(), x_.get(), a.diff_dst[0]->f32(), x_.get(), a.src[0]->f32(),
                                              &zero, x_.get(), dx),
                 "cudnnLRNCrossChannelBackward");
  }

 private:
  TensorDesc x_;
  LrnDesc lrn_;
};

/// BatchNormalization. At inference: y = scale * (x - mean) / sqrt(var + epsilon) + B per
/// channel, with the running statistics (inputs 3 and 4). In a training plan (as PyTorch's
/// model.train()): the batch's statistics by cudnnBatchNormalizationForwardTraining, which
/// also updates the running statistics in place with factor 1 - momentum (ONNX's momentum;
/// cuDNN takes the unbiased batch variance for the running one, as PyTorch does), and keeps
/// the batch mean and inverse deviation for cudnnBatchNormalizationBackward. The statistics
/// outputs are declined.
class BatchNormKernel final : public CudaKernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_RETURN_IF_ERROR(init_base(ctx));
    bool statistics_out = false;
    for (size_t i = 1; i < ctx.outputs.size(); ++i) statistics_out |= ctx.has_output(i);
    if (statistics_out) return Status::unsupported(label_ + ": the cuda backend's BatchNormalization has no statistics outputs");
    if (!ctx.training && ctx.node->attr_int("training_mode", 0) != 0)
      return Status::unsupported(label_ + ": the cuda backend normalises with batch statistics in training plans only");
    training_ = ctx.training;
    const BatchNormParams p = batch_norm_params(*ctx.node, ctx.inputs[0].shape);
    epsilon_ = static_cast<double>(p.epsilon);
    factor_ = 1.0 - static_cast<double>(p.momentum);
    if (epsilon_ < CUDNN_BN_MIN_EPSILON)
      return Status::unsupported(label_ + ": epsilon " + std::to_string(epsilon_) + " is below cuDNN's least (" +
                                 std::to_string(CUDNN_BN_MIN_EPSILON) + ")");
    const Shape& x = ctx.inputs[0].shape;
    if (x.size() < 2 || x.size() > 5) return Status::unsupported(label_ + ": the cuda backend normalises 2-5 dimensions");
    MOSAIC_ASSIGN_OR_RETURN(auto dims, cudnn_dims(x, x.size() == 5 ? 5 : 4, label_));
    MOSAIC_RETURN_IF_ERROR(check(set_packed(x_, dims), "descriptor"));
    std::vector<int> c_dims(dims.size(), 1);
    c_dims[1] = dims[1];
    channels_ = dims[1];
    if (training_) {
      MOSAIC_RETURN_IF_ERROR(saved_.resize(2 * static_cast<size_t>(channels_) * sizeof(float)));
      MOSAIC_RETURN_IF_ERROR(param_grads_.resize(2 * static_cast<size_t>(channels_) * sizeof(float)));
    }
    return check(set_packed(per_channel_, c_dims), "per-channel descriptor");
  }
  size_t workspace_bytes() const override { return saved_.bytes() + param_grads_.bytes() + dx_scratch_.bytes(); }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const float one = 1.f, zero = 0.f;
    if (training_) {
      float* saved = static_cast<float*>(saved_.data());
      return check(cudnnBatchNormalizationForwardTraining(
                       device().cudnn(), CUDNN_BATCHNORM_SPATIAL, &one, &zero, x_.get(), src[0]->f32(), x_.get(),
                       dst[0]->f32(), per_channel_.get(), src[1]->f32(), src[2]->f32(), factor_,
                       const_cast<float*>(src[3]->f32()), const_cast<float*>(src[4]->f32()), epsilon_, saved,
                       saved + channels_),
                   "cudnnBatchNormalizationForwardTraining");
    }
    return check(cudnnBatchNormalizationForwardInference(device().cudnn(), CUDNN_BATCHNORM_SPATIAL, &one, &zero, x_.get(),
                                                         src[0]->f32(), x_.get(), dst[0]->f32(), per_channel_.get(),
                                                         src[1]->f32(), src[2]->f32(), src[3]->f32(), src[4]->f32(),
                                                         epsilon_),
                 "cudnnBatchNormalizationForwardInference");
  }
  bool has_backward() const override { return training_; }
  /// The running statistics, in the device's copy (Plan::copy_device_state_to_host).
  bool updates_input(size_t i) const override { return training_ && (i == 3 || i == 4); }
  bool backward_reads_input(size_t i) const override { return i < 2; }
  bool backward_reads_output(size_t) const override { return false; }
  /// dx, dscale and dB in one cudnnBatchNormalizationBackward from the saved batch statistics
  /// (scratch where a gradient is not asked for: cuDNN writes all three); the running
  /// statistics get none.
  Status backward(const BackwardArgs& a) override {
    const float one = 1.f, zero = 0.f;
    float* dx = grad_of(a, 0);
    if (!dx) {
      if (dx_scratch_.bytes() < a.src[0]->bytes()) MOSAIC_RETURN_IF_ERROR(dx_scratch_.resize(a.src[0]->bytes()));
      dx = static_cast<float*>(dx_scratch_.data());
    }
    float* scratch = static_cast<float*>(param_grads_.data());
    float* dscale = grad_of(a, 1) ? grad_of(a, 1) : scratch;
    float* dbias = grad_of(a, 2) ? grad_of(a, 2) : scratch + channels_;
    const float* saved = static_cast<const float*>(saved_.data());
    MOSAIC_RETURN_IF_ERROR(check(cudnnBatchNormalizationBackward(
                                     device().cudnn(), CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one, &zero, x_.get(),
                                     a.src[0]->f32(), x_.get(), a.diff_dst[0]->f32(), x_.get(), dx, per_channel_.get(),
                                     a.src[1]->f32(), dscale, dbias, epsilon_, saved, saved + channels_),
                                 "cudnnBatchNormalizationBackward"));
    return zero_grads_from(a, 3);
  }

 private:
  TensorDesc x_, per_channel_;
  double epsilon_ = 1e-5, factor_ = 0.1;
  bool training_ = false;
  int channels_ = 0;
  DeviceMemory saved_;        // training: the batch mean, then the inverse standard deviation
  DeviceMemory param_grads_;  // where dscale and dB go when not asked for
  DeviceMemory dx_scratch_;   // where dx goes when not asked for (normalising a graph input)
};

/// LayerNormalization without its optional Mean and InvStdDev outputs.
class LayerNormKernel final : public CudaKernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_RETURN_IF_ERROR(init_base(ctx));
    MOSAIC_ASSIGN_OR_RETURN(p_, layer_norm_params(ctx));
    if (ctx.has_output(1) || ctx.has_output(2))
      return Status::unsupported(label_ + ": the cuda backend's LayerNormalization has no Mean or InvStdDev output");
    return Status::ok();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const float* bias = p_.has_bias && src.size() > 2 && src[2] ? src[2]->f32() : nullptr;
    return check(launch_layer_norm(device().stream(), src[0]->f32(), src[1]->f32(), bias, dst[0]->f32(), p_.outer,
                                   p_.inner, p_.epsilon),
                 "launch");
  }
  bool has_backward() const override { return true; }
  bool backward_reads_input(size_t i) const override { return i < 2; }
  bool backward_reads_output(size_t) const override { return false; }
  size_t workspace_bytes() const override { return stats_.bytes(); }
  Status backward(const BackwardArgs& a) override {
    const size_t need = static_cast<size_t>(layer_norm_backward_scratch_floats(p_.outer, p_.inner)) * sizeof(float);
    if (stats_.bytes() < need) MOSAIC_RETURN_IF_ERROR(stats_.resize(need));
    return check(launch_layer_norm_backward(device().stream(), a.src[0]->f32(), a.src[1]->f32(), a.diff_dst[0]->f32(),
                                            grad_of(a, 0), grad_of(a, 1), grad_of(a, 2),
                                            static_cast<float*>(stats_.data()), p_.outer, p_.inner, p_.epsilon),
                 "backward");
  }

 private:
  LayerNormParams p_;
  DeviceMemory stats_;  // backward: each row's mean and inverse deviation, the chunks' partial sums
};

}  // namespace

void add_pool_norm_kernels(BackendRegistration& r) {
  for (const char* op : {"MaxPool", "AveragePool", "GlobalMaxPool", "GlobalAveragePool"}) r.kernel(op, make_factory<PoolKernel>());
  for (const char* op : {"Softmax", "LogSoftmax"}) r.kernel(op, make_factory<SoftmaxKernel>());
  r.kernel("LRN", make_factory<LrnKernel>())
      .kernel("BatchNormalization", make_factory<BatchNormKernel>())
      .kernel("LayerNormalization", make_factory<LayerNormKernel>());
}

}  // namespace mosaic::cuda_backend
