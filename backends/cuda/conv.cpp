// cuda: Conv forward on cuDNN (1-3 spatial axes, groups, dilations, symmetric pads), then the
// bias and a fused activation. The algorithm is cuDNN's own search (it times each candidate),
// run once per geometry in the process and cached; float32 FMA math unless the plan asks for
// TF32.
#include <map>
#include <mutex>

#include "backends/cuda/cuda_internal.hpp"
#include "backends/cuda/cudnn_desc.hpp"
#include "operators/params.hpp"

namespace mosaic::cuda_backend {
namespace {

/// The largest workspace a convolution's algorithm may ask for; faster algorithms that need
/// more are passed over (cuDNN's search lists them with their memory).
constexpr size_t kMaxWorkspace = size_t{1} << 30;

/// cuDNN's search result per geometry ("x dims | w dims | pads | strides | dilations | group |
/// math"), shared by every plan of the process: a model's repeated layers search once.
struct AlgoCache {
  std::mutex mu;
  std::map<std::string, cudnnConvolutionFwdAlgoPerf_t> found;
};
AlgoCache& algo_cache() {
  static AlgoCache cache;
  return cache;
}

std::string join(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += std::to_string(x) + ",";
  return s;
}

class ConvKernel final : public CudaKernel {
 public:
  Status init(const KernelContext& ctx) {
    MOSAIC_RETURN_IF_ERROR(init_base(ctx));
    MOSAIC_ASSIGN_OR_RETURN(p_, conv_params(ctx));
    MOSAIC_ASSIGN_OR_RETURN(const CudnnWindow win, cudnn_window(p_.win, label_, "convolves"));
    const size_t rank = win.rank;
    const std::vector<int>&pads = win.pads, &strides = win.strides, &dilations = win.dilations;
    MOSAIC_ASSIGN_OR_RETURN(auto x_dims, cudnn_dims(ctx.inputs[0].shape, rank, label_));
    MOSAIC_ASSIGN_OR_RETURN(auto w_dims, cudnn_dims(ctx.inputs[1].shape, rank, label_));
    MOSAIC_ASSIGN_OR_RETURN(auto y_dims, cudnn_dims(ctx.outputs[0].shape, rank, label_));
    MOSAIC_RETURN_IF_ERROR(check(set_packed(x_, x_dims), "x descriptor"));
    MOSAIC_RETURN_IF_ERROR(check(set_packed(y_, y_dims), "y descriptor"));
    MOSAIC_RETURN_IF_ERROR(check(filter_.create(), "filter descriptor"));
    MOSAIC_RETURN_IF_ERROR(check(cudnnSetFilterNdDescriptor(filter_.get(), CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW,
                                                            static_cast<int>(rank), w_dims.data()),
                                 "filter descriptor"));
    MOSAIC_RETURN_IF_ERROR(check(conv_.create(), "convolution descriptor"));
    MOSAIC_RETURN_IF_ERROR(check(cudnnSetConvolutionNdDescriptor(conv_.get(), static_cast<int>(rank - 2), pads.data(),
                                                                 strides.data(), dilations.data(),
                                                                 CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
                                 "convolution descriptor"));
    MOSAIC_RETURN_IF_ERROR(check(cudnnSetConvolutionGroupCount(conv_.get(), static_cast<int>(p_.group)), "groups"));
    tf32_ = ctx.precision == Precision::kTF32;
    MOSAIC_RETURN_IF_ERROR(
        check(cudnnSetConvolutionMathType(conv_.get(), tf32_ ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH), "math type"));
    // cuDNN's output geometry must be the node's (the shape inference's rules are ONNX's).
    std::vector<int> out(rank);
    MOSAIC_RETURN_IF_ERROR(check(cudnnGetConvolutionNdForwardOutputDim(conv_.get(), x_.get(), filter_.get(),
                                                                       static_cast<int>(rank), out.data()),
                                 "output dimensions"));
    if (out != y_dims) return Status::internal(label_ + ": cuDNN's output " + join(out) + " is not the node's " + join(y_dims));
    if (p_.has_bias) {
      std::vector<int> b_dims(rank, 1);
      b_dims[1] = y_dims[1];
      MOSAIC_RETURN_IF_ERROR(check(set_packed(bias_, b_dims), "bias descriptor"));
    }
    MOSAIC_ASSIGN_OR_RETURN(act_, device_activation(*ctx.node, label_));
    MOSAIC_RETURN_IF_ERROR(choose_algorithm(x_dims, w_dims, pads, strides, dilations));
    return workspace_.resize(algo_.memory);
  }

  /// The algorithm's workspace, in device memory (the plan reports it under the device).
  size_t workspace_bytes() const override { return workspace_.bytes(); }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const float one = 1.f, zero = 0.f;
    float* y = dst[0]->f32();
    MOSAIC_RETURN_IF_ERROR(check(cudnnConvolutionForward(device().cudnn(), &one, x_.get(), src[0]->f32(), filter_.get(),
                                                         src[1]->f32(), conv_.get(), algo_.algo, workspace_.data(),
                                                         workspace_.bytes(), &zero, y_.get(), y),
                                 "cudnnConvolutionForward"));
    if (p_.has_bias && src.size() > 2 && src[2])
      MOSAIC_RETURN_IF_ERROR(check(cudnnAddTensor(device().cudnn(), &one, bias_.get(), src[2]->f32(), &one, y_.get(), y),
                                   "bias"));
    if (act_.op != DevUnary::kNone)
      MOSAIC_RETURN_IF_ERROR(check(launch_unary(device().stream(), act_, y, y, dst[0]->numel()), "activation"));
    return Status::ok();
  }

 private:
  /// cuDNN's fastest algorithm for this geometry that succeeds in the math asked for and needs
  /// at most kMaxWorkspace bytes, searched once per geometry in the process.
  Status choose_algorithm(const std::vector<int>& x, const std::vector<int>& w, const std::vector<int>& pads,
                          const std::vector<int>& strides, const std::vector<int>& dilations) {
    const std::string key = join(x) + "|" + join(w) + "|" + join(pads) + "|" + join(strides) + "|" + join(dilations) +
                            "|" + std::to_string(p_.group) + "|" + (tf32_ ? "tf32" : "fma");
    AlgoCache& cache = algo_cache();
    std::lock_guard<std::mutex> lock(cache.mu);
    if (auto it = cache.found.find(key); it != cache.found.end()) {
      algo_ = it->second;
    } else {
      cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
      int returned = 0;
      MOSAIC_RETURN_IF_ERROR(check(cudnnFindConvolutionForwardAlgorithm(device().cudnn(), x_.get(), filter_.get(),
                                                                        conv_.get(), y_.get(),
                                                                        CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, perf),
                                   "cudnnFindConvolutionForwardAlgorithm"));
      int chosen = -1;
      for (int i = 0; i < returned && chosen < 0; ++i)  // fastest first
        if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= kMaxWorkspace &&
            (tf32_ || perf[i].mathType != CUDNN_TENSOR_OP_MATH))
          chosen = i;
      if (chosen < 0)
        return Status::unsupported(label_ + ": cuDNN has no forward algorithm for this convolution in " +
                                   (tf32_ ? "TF32" : "float32") + " math");
      algo_ = perf[chosen];
      cache.found[key] = algo_;
    }
    // In float32 the descriptor stays in FMA math whatever the search reports: cuDNN's default
    // math would let TF32 tensor cores in on Ampere and later.
    return check(cudnnSetConvolutionMathType(conv_.get(), tf32_ ? algo_.mathType : CUDNN_FMA_MATH), "math type");
  }

  ConvParams p_;
  TensorDesc x_, y_, bias_;
  FilterDesc filter_;
  ConvDesc conv_;
  cudnnConvolutionFwdAlgoPerf_t algo_{};
  DeviceMemory workspace_;
  DevUnaryArgs act_;
  bool tf32_ = false;
};

}  // namespace

void add_conv_kernels(PluginRegistrar& r, Status& st) { add(r, st, "Conv", make_factory<ConvKernel>()); }

}  // namespace mosaic::cuda_backend
