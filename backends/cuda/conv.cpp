// cuda: Conv forward and backward on cuDNN (1-3 spatial axes, groups, dilations; pads that
// differ between an axis's ends by a zero-padded copy first), then the bias and a fused
// activation. The algorithm is cuDNN's own search (it times each candidate),
// run once per geometry in the process and cached; float32 FMA math unless the plan asks for
// TF32, or for fp16 or bf16: then cuDNN convolves float16 or bfloat16 copies of x and w (the
// weights rounded once per plan) with float32 sums on the tensor cores and writes a 16-bit y
// (its "pseudo-half" configuration), widened to the float32 output before the bias. A
// pointwise convolution (1x1, stride 1, no padding, one group) is also timed as one
// strided-batched cuBLAS product (in float32 and TF32), and runs as that where it is faster (MOSAIC_CUDA_POINTWISE=
// gemm or cudnn decides instead, uncached: the tests run both). A deterministic plan times
// nothing: it takes the first algorithm of cuDNN's heuristic ranking that fits (the same in
// every process, so two runs compute the same bits; a timed choice can differ between
// processes, and a different algorithm rounds differently) and no cuBLAS product.
#include <algorithm>
#include <climits>
#include <cstdlib>
#include <map>
#include <mutex>
#include <tuple>

#include "backends/cuda/cuda_internal.hpp"
#include "backends/cuda/cudnn_desc.hpp"
#include "backends/cuda/device_geometry.hpp"
#include "operators/params.hpp"

namespace mosaic::cuda_backend {
namespace {

/// The largest workspace a convolution's algorithm may ask for; faster algorithms that need
/// more are passed over (cuDNN's search lists them with their memory).
constexpr size_t kMaxWorkspace = size_t{1} << 30;

/// What one geometry runs as: cuDNN's algorithm, or (pointwise) a cuBLAS product.
struct Choice {
  cudnnConvolutionFwdAlgoPerf_t perf{};
  bool gemm = false;
};
/// The choice per geometry ("x dims | w dims | pads | strides | dilations | group | math"),
/// shared by every plan of the process: a model's repeated layers search once; the backward
/// passes' algorithms likewise (the key adds whether the plan asked for determinism).
struct AlgoCache {
  std::mutex mu;
  std::map<std::string, Choice> found;
  std::map<std::string, cudnnConvolutionBwdDataAlgoPerf_t> data;
  std::map<std::string, cudnnConvolutionBwdFilterAlgoPerf_t> filter;
  /// A pointwise convolution's backward passes: whether data and filter run as cuBLAS products.
  std::map<std::string, std::pair<bool, bool>> backward_gemm;
};
AlgoCache& algo_cache() {
  static AlgoCache cache;
  return cache;
}

/// The fastest of cuDNN's timed candidates (fastest first) that succeeded, fits kMaxWorkspace,
/// computes in the math asked for (no tensor-op math in float32: `tensor_ops` is TF32's,
/// fp16's or bf16's) and, where asked, gives the same bits every run; -1 where none does.
template <class Perf>
int pick(const Perf* perf, int returned, bool tensor_ops, bool deterministic) {
  for (int i = 0; i < returned; ++i)
    if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= kMaxWorkspace &&
        (tensor_ops || perf[i].mathType != CUDNN_TENSOR_OP_MATH) && (!deterministic || perf[i].determinism == CUDNN_DETERMINISTIC))
      return i;
  return -1;
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
    half_ = float16_kind(ctx.precision);
    if (half_ && ctx.training) return float16_training_refused(label_, *half_);
    tf32_ = ctx.precision == Precision::kTF32;
    tensor_ops_ = tf32_ || half_;
    const cudnnDataType_t data = half_ ? cudnn_type(*half_) : CUDNN_DATA_FLOAT;
    Window window = p_.win;
    Shape x_shape = ctx.inputs[0].shape;
    MOSAIC_RETURN_IF_ERROR(pad_explicitly(ctx, window, x_shape));
    MOSAIC_ASSIGN_OR_RETURN(const CudnnWindow win, cudnn_window(window, label_, "convolves"));
    const size_t rank = win.rank;
    const std::vector<int>&pads = win.pads, &strides = win.strides, &dilations = win.dilations;
    MOSAIC_ASSIGN_OR_RETURN(auto x_dims, cudnn_dims(x_shape, rank, label_));
    MOSAIC_ASSIGN_OR_RETURN(auto w_dims, cudnn_dims(ctx.inputs[1].shape, rank, label_));
    MOSAIC_ASSIGN_OR_RETURN(auto y_dims, cudnn_dims(ctx.outputs[0].shape, rank, label_));
    MOSAIC_RETURN_IF_ERROR(check(set_packed(x_, x_dims, data), "x descriptor"));
    MOSAIC_RETURN_IF_ERROR(check(set_packed(y_, y_dims, data), "y descriptor"));
    if (half_) MOSAIC_RETURN_IF_ERROR(check(set_packed(y32_, y_dims), "y descriptor"));
    MOSAIC_RETURN_IF_ERROR(check(filter_.create(), "filter descriptor"));
    MOSAIC_RETURN_IF_ERROR(check(cudnnSetFilterNdDescriptor(filter_.get(), data, CUDNN_TENSOR_NCHW,
                                                            static_cast<int>(rank), w_dims.data()),
                                 "filter descriptor"));
    MOSAIC_RETURN_IF_ERROR(check(conv_.create(), "convolution descriptor"));
    MOSAIC_RETURN_IF_ERROR(check(cudnnSetConvolutionNdDescriptor(conv_.get(), static_cast<int>(rank - 2), pads.data(),
                                                                 strides.data(), dilations.data(),
                                                                 CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
                                 "convolution descriptor"));
    MOSAIC_RETURN_IF_ERROR(check(cudnnSetConvolutionGroupCount(conv_.get(), static_cast<int>(p_.group)), "groups"));
    MOSAIC_RETURN_IF_ERROR(
        check(cudnnSetConvolutionMathType(conv_.get(), tensor_ops_ ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH), "math type"));
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
    // (In fp16 and bf16 cuDNN convolves: the product's alternative is float32's.)
    bool pointwise = p_.group == 1 && !half_;  // the dimensions are cuDNN's ints already
    int64_t pixels = 1;
    for (size_t d = 2; d < rank; ++d) {
      pointwise = pointwise && w_dims[d] == 1 && strides[d - 2] == 1 && pads[d - 2] == 0 && dilations[d - 2] == 1;
      pixels *= y_dims[d];
    }
    if (pointwise && pixels <= INT_MAX) {
      gemm_.batch = x_dims[0];
      gemm_.pixels = static_cast<int>(pixels);
      gemm_.in = x_dims[1];
      gemm_.out = y_dims[1];
    }
    key_ = join(x_dims) + "|" + join(w_dims) + "|" + join(pads) + "|" + join(strides) + "|" + join(dilations) + "|" +
           std::to_string(p_.group) + "|" + math_name();
    if (half_) {
      MOSAIC_RETURN_IF_ERROR(x16_.prepare(*half_, shape_numel(x_shape), nullptr));
      MOSAIC_RETURN_IF_ERROR(w16_.prepare(*half_, shape_numel(ctx.inputs[1].shape), ctx.constant(1)));
      MOSAIC_RETURN_IF_ERROR(y16_.prepare(*half_, shape_numel(ctx.outputs[0].shape), nullptr));
    }
    MOSAIC_RETURN_IF_ERROR(choose_algorithm(ctx.deterministic));
    size_t workspace = use_gemm_ ? 0 : algo_.memory;
    if (ctx.training) {
      MOSAIC_RETURN_IF_ERROR(choose_backward_algorithms(ctx.deterministic));
      workspace = std::max({workspace, data_algo_.memory, filter_algo_.memory});
      training_ = true;
    }
    return workspace_.resize(workspace);
  }

  /// The algorithms' workspace and the explicit padding's buffers, in device memory (the plan
  /// reports them under the device).
  size_t workspace_bytes() const override {
    return workspace_.bytes() + pad_.bytes() + padded_.bytes() + crop_.bytes() + dx_padded_.bytes() + x16_.bytes() +
           w16_.bytes() + y16_.bytes();
  }
  Status forward(const std::vector<const Tensor*>& src, const std::vector<Tensor*>& dst) override {
    const float one = 1.f, zero = 0.f;
    float* y = dst[0]->f32();
    MOSAIC_ASSIGN_OR_RETURN(const float* x, padded_input(src[0]));
    if (use_gemm_) {
      MOSAIC_RETURN_IF_ERROR(pointwise_product(x, src[1]->f32(), y));
    } else if (half_) {  // the 16-bit copies convolved into a 16-bit y, widened into the output
      const cudaStream_t stream = device().stream();
      MOSAIC_RETURN_IF_ERROR(check(x16_.round(stream, x), "rounding x"));
      MOSAIC_RETURN_IF_ERROR(check(w16_.round(stream, src[1]->f32()), "rounding w"));
      auto* y16 = static_cast<uint16_t*>(y16_.data());
      MOSAIC_RETURN_IF_ERROR(check(cudnnConvolutionForward(device().cudnn(), &one, x_.get(), x16_.data(), filter_.get(),
                                                           w16_.data(), conv_.get(), algo_.algo, workspace_.data(),
                                                           workspace_.bytes(), &zero, y_.get(), y16),
                                   "cudnnConvolutionForward (16-bit)"));
      MOSAIC_RETURN_IF_ERROR(check(launch_widen(stream, *half_, y16, y, dst[0]->numel()), "widening y"));
    } else {
      MOSAIC_RETURN_IF_ERROR(check(cudnnConvolutionForward(device().cudnn(), &one, x_.get(), x, filter_.get(),
                                                           src[1]->f32(), conv_.get(), algo_.algo, workspace_.data(),
                                                           workspace_.bytes(), &zero, y_.get(), y),
                                   "cudnnConvolutionForward"));
    }
    if (p_.has_bias && src.size() > 2 && src[2])
      MOSAIC_RETURN_IF_ERROR(check(cudnnAddTensor(device().cudnn(), &one, bias_.get(), src[2]->f32(), &one,
                                                  half_ ? y32_.get() : y_.get(), y),
                                   "bias"));
    if (act_.op != DevUnary::kNone)
      MOSAIC_RETURN_IF_ERROR(check(launch_unary(device().stream(), act_, y, y, dst[0]->numel()), "activation"));
    return Status::ok();
  }

  /// Built for training (the backward algorithms chosen), without a fused activation.
  bool has_backward() const override { return training_ && act_.op == DevUnary::kNone; }
  bool backward_reads_input(size_t i) const override { return i < 2; }
  bool backward_reads_output(size_t) const override { return false; }
  /// dx by cudnnConvolutionBackwardData, dw by cudnnConvolutionBackwardFilter (a pointwise
  /// convolution's either by cuBLAS where chosen), the bias's by cudnnConvolutionBackwardBias
  /// (dy summed per output channel).
  Status backward(const BackwardArgs& a) override {
    const float one = 1.f, zero = 0.f;
    const float* dy = a.diff_dst[0]->f32();
    const cudnnHandle_t h = device().cudnn();
    if (float* dx = grad_of(a, 0); dx && gemm_data_) {
      MOSAIC_RETURN_IF_ERROR(pointwise_backward_data(dy, a.src[1]->f32(), dx));
    } else if (dx) {
      // Explicitly padded: the padded input's gradient, then cropped to the input's.
      float* d = explicit_pad_ ? static_cast<float*>(dx_padded_.data()) : dx;
      MOSAIC_RETURN_IF_ERROR(set_math(data_algo_.mathType));
      MOSAIC_RETURN_IF_ERROR(check(cudnnConvolutionBackwardData(h, &one, filter_.get(), a.src[1]->f32(), y_.get(), dy,
                                                                conv_.get(), data_algo_.algo, workspace_.data(),
                                                                workspace_.bytes(), &zero, x_.get(), d),
                                   "cudnnConvolutionBackwardData"));
      if (explicit_pad_) MOSAIC_RETURN_IF_ERROR(check(crop_.run(device().stream(), d, dx), "cropping dx"));
    }
    if (float* dw = grad_of(a, 1); dw && gemm_filter_) {
      MOSAIC_RETURN_IF_ERROR(pointwise_backward_filter(a.src[0]->f32(), dy, dw));
    } else if (dw) {
      MOSAIC_ASSIGN_OR_RETURN(const float* x, padded_input(a.src[0]));
      MOSAIC_RETURN_IF_ERROR(set_math(filter_algo_.mathType));
      MOSAIC_RETURN_IF_ERROR(check(cudnnConvolutionBackwardFilter(h, &one, x_.get(), x, y_.get(), dy,
                                                                  conv_.get(), filter_algo_.algo, workspace_.data(),
                                                                  workspace_.bytes(), &zero, filter_.get(), dw),
                                   "cudnnConvolutionBackwardFilter"));
    }
    MOSAIC_RETURN_IF_ERROR(set_math(algo_.mathType));
    if (float* db = grad_of(a, 2))
      MOSAIC_RETURN_IF_ERROR(
          check(cudnnConvolutionBackwardBias(h, &one, y_.get(), dy, &zero, bias_.get(), db), "cudnnConvolutionBackwardBias"));
    return Status::ok();
  }

 private:
  /// cuDNN pads both ends of an axis alike; a node whose pads differ (TensorFlow's SAME at an
  /// even stride) is padded explicitly instead: its input gathered into a zero-padded buffer
  /// of the kernel's (`x_shape` becomes that buffer's, `w` unpadded), which cuDNN convolves
  /// without padding; in training dx is computed padded and cropped back.
  Status pad_explicitly(const KernelContext& ctx, Window& w, Shape& x_shape) {
    for (size_t a = 0; a < w.rank(); ++a) explicit_pad_ = explicit_pad_ || w.pad_begin[a] != w.pad_end[a];
    if (!explicit_pad_) return Status::ok();
    const Shape in = x_shape;
    MOSAIC_ASSIGN_OR_RETURN(const ExplicitPad e, explicit_pad(in, w, label_));
    x_shape = e.padded;
    MOSAIC_RETURN_IF_ERROR(pad_.set(x_shape, row_major_strides(in), e.pad, label_));
    const size_t padded_bytes = static_cast<size_t>(shape_numel(x_shape)) * sizeof(float);
    MOSAIC_RETURN_IF_ERROR(padded_.resize(padded_bytes));
    if (ctx.training) {
      MOSAIC_RETURN_IF_ERROR(crop_.set(in, row_major_strides(x_shape), e.crop, label_));
      MOSAIC_RETURN_IF_ERROR(dx_padded_.resize(padded_bytes));
    }
    return Status::ok();
  }
  /// The input cuDNN reads: x itself, or x gathered into the zero-padded buffer.
  Expected<const float*> padded_input(const Tensor* x) const {
    if (!explicit_pad_) return x->f32();
    auto* padded = static_cast<float*>(padded_.data());
    MOSAIC_RETURN_IF_ERROR(check(pad_.run(device().stream(), x->f32(), padded), "explicit padding"));
    return static_cast<const float*>(padded);
  }

  /// cuDNN's fastest algorithm for this geometry that succeeds in the math asked for and needs
  /// at most kMaxWorkspace bytes, searched once per geometry in the process; in a
  /// deterministic plan the first of its heuristic ranking that does, untimed.
  Status choose_algorithm(bool deterministic) {
    const std::string key = key_ + (deterministic ? "|det" : "");
    AlgoCache& cache = algo_cache();
    std::lock_guard<std::mutex> lock(cache.mu);
    const std::string force = pointwise_forced();
    if (auto it = cache.found.find(key); it != cache.found.end()) {
      algo_ = it->second.perf;
      use_gemm_ = it->second.gemm;
    } else {
      cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
      int returned = 0;
      if (deterministic)
        MOSAIC_RETURN_IF_ERROR(check(cudnnGetConvolutionForwardAlgorithm_v7(device().cudnn(), x_.get(), filter_.get(),
                                                                            conv_.get(), y_.get(),
                                                                            CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned,
                                                                            perf),
                                     "cudnnGetConvolutionForwardAlgorithm_v7"));
      else
        MOSAIC_RETURN_IF_ERROR(check(cudnnFindConvolutionForwardAlgorithm(device().cudnn(), x_.get(), filter_.get(),
                                                                          conv_.get(), y_.get(),
                                                                          CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned,
                                                                          perf),
                                     "cudnnFindConvolutionForwardAlgorithm"));
      const int chosen = pick(perf, returned, tensor_ops_, deterministic);
      if (chosen < 0)
        return Status::unsupported(label_ + ": cuDNN has no forward algorithm for this convolution in " + math_name() +
                                   (deterministic ? " math, deterministic" : " math"));
      algo_ = perf[chosen];
      use_gemm_ = gemm_.batch > 0 && force.empty() && !deterministic && faster_as_product(algo_.time);
      if (force.empty()) cache.found[key] = Choice{algo_, use_gemm_};
    }
    if (gemm_.batch > 0 && !force.empty()) use_gemm_ = force == "gemm";
    return set_math(algo_.mathType);
  }
  /// In float32 the descriptor stays in FMA math whatever a search reports: cuDNN's default
  /// math would let TF32 tensor cores in on Ampere and later. In TF32, fp16 and bf16 it takes
  /// each algorithm's own (set before each call: forward and backward algorithms may differ).
  Status set_math(cudnnMathType_t algorithm_math) const {
    return check(cudnnSetConvolutionMathType(conv_.get(), tensor_ops_ ? algorithm_math : CUDNN_FMA_MATH), "math type");
  }
  /// The arithmetic asked for, as the algorithm cache's key and the refusals name it.
  std::string math_name() const { return half_ ? float16_name(*half_) : tf32_ ? "TF32" : "float32"; }

  /// The backward passes' algorithms (data: dx from dy and w; filter: dw from x and dy), by
  /// cuDNN's timed search as forward's; where the plan asks for determinism, the first
  /// deterministic one of its heuristic ranking (untimed, the same in every process).
  Status choose_backward_algorithms(bool deterministic) {
    const std::string key = key_ + (deterministic ? "|det" : "");
    AlgoCache& cache = algo_cache();
    std::lock_guard<std::mutex> lock(cache.mu);
    MOSAIC_RETURN_IF_ERROR(search<CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT>(
        cache.data, key, deterministic, "backward-data", &data_algo_,
        [&](int n, int* returned, cudnnConvolutionBwdDataAlgoPerf_t* perf) {
          return deterministic ? cudnnGetConvolutionBackwardDataAlgorithm_v7(device().cudnn(), filter_.get(), y_.get(),
                                                                              conv_.get(), x_.get(), n, returned, perf)
                               : cudnnFindConvolutionBackwardDataAlgorithm(device().cudnn(), filter_.get(), y_.get(),
                                                                           conv_.get(), x_.get(), n, returned, perf);
        }));
    MOSAIC_RETURN_IF_ERROR(search<CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT>(
        cache.filter, key, deterministic, "backward-filter", &filter_algo_,
        [&](int n, int* returned, cudnnConvolutionBwdFilterAlgoPerf_t* perf) {
          return deterministic
                     ? cudnnGetConvolutionBackwardFilterAlgorithm_v7(device().cudnn(), x_.get(), y_.get(), conv_.get(),
                                                                      filter_.get(), n, returned, perf)
                     : cudnnFindConvolutionBackwardFilterAlgorithm(device().cudnn(), x_.get(), y_.get(), conv_.get(),
                                                                   filter_.get(), n, returned, perf);
        }));
    // A pointwise convolution's passes as cuBLAS products where they time 5% faster than
    // cuDNN's (its legacy algorithms ran ResNet-50's 1x1 backward at 4-7x the forward's time
    // on an H200); forced by MOSAIC_CUDA_POINTWISE as forward; never in a deterministic plan.
    const std::string force = pointwise_forced();
    if (gemm_.batch > 0 && !force.empty()) {
      gemm_data_ = gemm_filter_ = force == "gemm";
    } else if (gemm_.batch > 0 && !deterministic) {
      if (auto it = cache.backward_gemm.find(key); it != cache.backward_gemm.end()) {
        std::tie(gemm_data_, gemm_filter_) = it->second;
      } else {
        DeviceMemory x, w, y;
        if (pointwise_scratch(x, w, y)) {
          const float* xs = static_cast<const float*>(x.data());
          float* ws = static_cast<float*>(w.data());
          float* ys = static_cast<float*>(y.data());
          gemm_data_ = faster_than(data_algo_.time, [&] { return pointwise_backward_data(ys, ws, static_cast<float*>(x.data())); });
          gemm_filter_ = faster_than(filter_algo_.time, [&] { return pointwise_backward_filter(xs, ys, ws); });
        }
        cache.backward_gemm[key] = {gemm_data_, gemm_filter_};
      }
    }
    return set_math(algo_.mathType);
  }
  /// One backward pass's algorithm: the cached one for `key`, else the first fitting one of
  /// `find`'s list (cuDNN's timed search over its `Count` algorithms, fastest first, or its
  /// heuristic ranking), cached. The caller holds the cache's lock.
  template <int Count, class Perf, class Find>
  Status search(std::map<std::string, Perf>& found, const std::string& key, bool deterministic, const char* pass,
                Perf* out, Find find) const {
    if (auto it = found.find(key); it != found.end()) {
      *out = it->second;
      return Status::ok();
    }
    Perf perf[Count];
    int returned = 0;
    MOSAIC_RETURN_IF_ERROR(set_math(CUDNN_DEFAULT_MATH));
    MOSAIC_RETURN_IF_ERROR(check(find(Count, &returned, perf), "cuDNN's algorithm search"));
    const int chosen = pick(perf, returned, tensor_ops_, deterministic);
    if (chosen < 0)
      return Status::unsupported(label_ + ": cuDNN has no " + pass + " algorithm for this convolution in " + math_name() +
                                 (deterministic ? " math, deterministic" : " math"));
    *out = found[key] = perf[chosen];
    return Status::ok();
  }

  /// cuBLAS's math for the pointwise products: TF32 tensor cores only where the plan asks.
  Status set_cublas_math() const {
    return check(cublasSetMathMode(device().cublas(), tf32_ ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH),
                 "math mode");
  }
  /// MOSAIC_CUDA_POINTWISE: "gemm" or "cudnn" forces how pointwise convolutions run (forward
  /// and backward, uncached); "" lets the timing decide.
  static std::string pointwise_forced() {
    const char* forced = std::getenv("MOSAIC_CUDA_POINTWISE");
    return forced ? forced : "";
  }

  /// Per image y[out, pixels] = w[out, in] x[in, pixels], all images in one strided-batched
  /// call (cuBLAS reads the row-major matrices as their column-major transposes).
  Status pointwise_product(const float* x, const float* w, float* y) const {
    const float one = 1.f, zero = 0.f;
    const int px = gemm_.pixels, in = static_cast<int>(gemm_.in), out = static_cast<int>(gemm_.out);
    MOSAIC_RETURN_IF_ERROR(set_cublas_math());
    return check(cublasSgemmStridedBatched(device().cublas(), CUBLAS_OP_N, CUBLAS_OP_N, px, out, in, &one, x, px,
                                           static_cast<long long>(in) * px, w, in, 0, &zero, y, px,
                                           static_cast<long long>(out) * px, static_cast<int>(gemm_.batch)),
                 "cublasSgemmStridedBatched");
  }
  /// dx = w^T dy per image (dx[in, pixels] = w[out, in]^T dy[out, pixels]), all images in one
  /// strided-batched call.
  Status pointwise_backward_data(const float* dy, const float* w, float* dx) const {
    const float one = 1.f, zero = 0.f;
    const int px = gemm_.pixels, in = static_cast<int>(gemm_.in), out = static_cast<int>(gemm_.out);
    MOSAIC_RETURN_IF_ERROR(set_cublas_math());
    return check(cublasSgemmStridedBatched(device().cublas(), CUBLAS_OP_N, CUBLAS_OP_T, px, in, out, &one, dy, px,
                                           static_cast<long long>(out) * px, w, in, 0, &zero, dx, px,
                                           static_cast<long long>(in) * px, static_cast<int>(gemm_.batch)),
                 "cublasSgemmStridedBatched (backward data)");
  }
  /// dw = sum over images of dy x^T (dw[out, in] += dy[out, pixels] x[in, pixels]^T), one
  /// product per image added in image order (the same bits every run).
  Status pointwise_backward_filter(const float* x, const float* dy, float* dw) const {
    const float one = 1.f, zero = 0.f;
    const int px = gemm_.pixels, in = static_cast<int>(gemm_.in), out = static_cast<int>(gemm_.out);
    MOSAIC_RETURN_IF_ERROR(set_cublas_math());
    for (int64_t n = 0; n < gemm_.batch; ++n)
      MOSAIC_RETURN_IF_ERROR(check(cublasSgemm(device().cublas(), CUBLAS_OP_T, CUBLAS_OP_N, in, out, px, &one,
                                               x + n * gemm_.in * px, px, dy + n * gemm_.out * px, px,
                                               n == 0 ? &zero : &one, dw, in),
                                   "cublasSgemm (backward filter)"));
    return Status::ok();
  }
  /// Zeroed scratch of the pointwise layer's x, w and y sizes; false where the device has none
  /// to spare (cuDNN then).
  bool pointwise_scratch(DeviceMemory& x, DeviceMemory& w, DeviceMemory& y) const {
    return x.resize(static_cast<size_t>(gemm_.batch * gemm_.in) * gemm_.pixels * sizeof(float)).is_ok() &&
           w.resize(static_cast<size_t>(gemm_.out * gemm_.in) * sizeof(float)).is_ok() &&
           y.resize(static_cast<size_t>(gemm_.batch * gemm_.out) * gemm_.pixels * sizeof(float)).is_ok();
  }
  /// Whether `product` beats cuDNN's `cudnn_ms` (its search's own time) by 5% or more, timed by
  /// CUDA events over 3 runs after a warm-up.
  template <class Product>
  bool faster_than(float cudnn_ms, Product product) const {
    cudaEvent_t start = nullptr, stop = nullptr;
    bool faster = false;
    if (cudaEventCreate(&start) == cudaSuccess && cudaEventCreate(&stop) == cudaSuccess) {
      bool ok = product().is_ok() && cudaEventRecord(start, device().stream()) == cudaSuccess;
      for (int i = 0; i < 3 && ok; ++i) ok = product().is_ok();
      float ms = 0;
      ok = ok && cudaEventRecord(stop, device().stream()) == cudaSuccess && cudaEventSynchronize(stop) == cudaSuccess &&
           cudaEventElapsedTime(&ms, start, stop) == cudaSuccess;
      faster = ok && ms / 3 < 0.95f * cudnn_ms;
    }
    if (start) cudaEventDestroy(start);
    if (stop) cudaEventDestroy(stop);
    return faster;
  }
  /// Whether the pointwise product beats cuDNN's forward, on zeroed scratch of the layer's sizes.
  bool faster_as_product(float cudnn_ms) const {
    DeviceMemory x, w, y;
    if (!pointwise_scratch(x, w, y)) return false;
    const float* xs = static_cast<const float*>(x.data());
    const float* ws = static_cast<const float*>(w.data());
    float* ys = static_cast<float*>(y.data());
    return faster_than(cudnn_ms, [&] { return pointwise_product(xs, ws, ys); });
  }

  ConvParams p_;
  TensorDesc x_, y_, bias_;
  FilterDesc filter_;
  ConvDesc conv_;
  cudnnConvolutionFwdAlgoPerf_t algo_{};
  cudnnConvolutionBwdDataAlgoPerf_t data_algo_{};
  cudnnConvolutionBwdFilterAlgoPerf_t filter_algo_{};
  bool training_ = false;
  std::string key_;  // the geometry, the algorithm caches' key
  bool explicit_pad_ = false;        // pads cuDNN cannot express: padded by a gather first
  DeviceGather pad_, crop_;          // x -> the padded buffer; the padded dx -> dx (training)
  DeviceMemory padded_, dx_padded_;
  DeviceMemory workspace_;
  DevUnaryArgs act_;
  bool tf32_ = false;
  std::optional<Float16Kind> half_;  // fp16/bf16: x and w convolved as 16-bit copies into y16_
  bool tensor_ops_ = false;          // TF32, fp16 or bf16: cuDNN's tensor-op algorithms allowed
  TensorDesc y32_;                   // fp16/bf16: the float32 output (the bias adds to it)
  Float16Operand x16_, w16_, y16_;
  /// A pointwise convolution's product sizes (batch 0: not pointwise), and whether it runs so.
  struct {
    int64_t batch = 0, in = 0, out = 0;
    int pixels = 0;
  } gemm_;
  bool use_gemm_ = false;
  bool gemm_data_ = false, gemm_filter_ = false;  // backward passes as cuBLAS products (pointwise)
};

}  // namespace

void add_conv_kernels(BackendRegistration& r) { r.kernel("Conv", make_factory<ConvKernel>()); }

}  // namespace mosaic::cuda_backend
